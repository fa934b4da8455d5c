//! `walshadow init` against real sources (PostgreSQL 15 and 18).
//!
//! The source: user tables holding a marker string (one value TOASTed), a
//! table rewritten by VACUUM FULL, a sequence, ANALYZE (so pg_statistic
//! holds marker samples), a second database, a user tablespace holding a
//! table and a whole database. Oracles, on a quiet source:
//! - no file under the shadow's data directory contains the marker;
//! - every catalog file of every database (shared ones, the tablespace's,
//!   all forks and segments) is in the shadow with the source's size;
//!   statistics catalogs are there empty (heap: 0 bytes, index: metapage);
//! - no user relation file exists in the shadow;
//! - the seed loads into a filter that classifies them the same way;
//! - init.json round-trips; a second init changes nothing; `force`
//!   rebuilds; a non-empty foreign data directory is refused; a source
//!   with `wal_level = replica` fails naming `wal_level`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use walshadow_state_file::StateFile;

use anyhow::{Context, Result, bail, ensure};
use walshadow_config::Config;
use walshadow_pg_format::page::checksum_page as pg_checksum_page;
use walshadow_shadow::bootstrap::page::empty_btree_metapage;
use walshadow_shadow::bootstrap::{InitError, InitState, init, load_seed};
use walshadow_shadow::filter::classes::FileClass;
use walshadow_testkit::{
    Cluster, ClusterOptions, PgMajor, ServerUser, WorkDir, write_walshadow_config,
};
use walshadow_types::Oid;

const MARKER: &str = "quokka-marker-51c2e8";
/// pg_statistic, its index, pg_statistic_ext_data, its index, and their
/// TOAST tables and TOAST indexes.
const STATS_OIDS: [Oid; 8] = [2619, 2696, 3429, 3433, 2840, 2841, 3430, 3431];

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn config(c: &Cluster, work: &Path, data_dir: &Path) -> Result<Config> {
    Ok(Config::load(&write_walshadow_config(
        c,
        work,
        data_dir,
        "walshadow_init",
    )?)?)
}

fn workload(c: &Cluster, work: &Path) -> Result<()> {
    let spc = work.join("spc");
    ServerUser::get()?.create_private_dir(&spc)?;
    c.psql(&format!(
        "create table t1 (id int primary key, v text);
         alter table t1 alter column v set storage external;
         insert into t1 select g, '{MARKER}' || g from generate_series(1, 2000) g;
         insert into t1 select -1, string_agg(md5(g::text) || '{MARKER}', '') from generate_series(1, 2000) g;
         create index t1_v on t1 (v) where id > 0;
         create sequence s1;
         select nextval('s1') from generate_series(1, 10);
         create table t2 (id int, v text);
         insert into t2 select g, '{MARKER}' from generate_series(1, 500) g;
         vacuum full t2;
         create tablespace ts location '{}';
         create table t4 (v text) tablespace ts;
         insert into t4 values ('{MARKER} in a tablespace');
         analyze;
         create database d2;
         create database d3 tablespace ts;",
        spc.display()
    ))?;
    c.psql_db(
        "d2",
        &format!(
            "create table t3 (id int, v text); insert into t3 values (1, '{MARKER}'); analyze t3;"
        ),
    )?;
    c.psql_db(
        "d3",
        &format!("create table t5 (id int, v text); insert into t5 values (1, '{MARKER}');"),
    )?;
    c.checkpoint()
}

/// A relation of the source: database, oid, kind, path relative to PGDATA.
#[derive(Debug)]
struct SourceRel {
    db: Oid,
    oid: Oid,
    relkind: char,
    path: String,
    file: Oid,
}

fn source_rels(c: &Cluster) -> Result<Vec<SourceRel>> {
    let dbs = c.psql("select oid, datname from pg_database where datallowconn order by oid")?;
    let mut out = Vec::new();
    for line in dbs.lines() {
        let (db, name) = line.split_once('|').context("pg_database row")?;
        let rows = c.psql_db(
            name,
            "select c.oid, c.relkind, c.relisshared, pg_relation_filepath(c.oid), pg_relation_filenode(c.oid) \
             from pg_class c where pg_relation_filepath(c.oid) is not null",
        )?;
        for r in rows.lines() {
            let f: Vec<&str> = r.split('|').collect();
            ensure!(f.len() == 5, "pg_class row {r:?}");
            out.push(SourceRel {
                db: if f[2] == "t" { 0 } else { db.parse()? },
                oid: f[0].parse()?,
                relkind: f[1].chars().next().unwrap_or('?'),
                path: f[3].to_owned(),
                file: f[4].parse()?,
            });
        }
    }
    Ok(out)
}

/// The files of a relation in `dir`: main fork segments and the other forks.
fn rel_files(dir: &Path, rel_path: &str) -> Vec<String> {
    let p = Path::new(rel_path);
    let (Some(parent), Some(base)) = (p.parent(), p.file_name()) else {
        return Vec::new();
    };
    let base = base.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir(dir.join(parent)) else {
        return Vec::new();
    };
    let mut out: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n == &base
                || n.strip_prefix(&format!("{base}_")).is_some_and(|f| {
                    ["fsm", "vm", "init"].contains(&f.split('.').next().unwrap_or(""))
                })
                || n.strip_prefix(&format!("{base}."))
                    .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .map(|n| parent.join(n).to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            walk(&e.path(), out)?;
        } else if ft.is_file() {
            out.push(e.path());
        }
    }
    Ok(())
}

/// path → (size, mtime) of every file under `dirs`.
fn snapshot(dirs: &[&Path]) -> Result<BTreeMap<PathBuf, (u64, SystemTime)>> {
    let mut files = Vec::new();
    for d in dirs {
        walk(d, &mut files)?;
    }
    files
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(&p)?;
            Ok((p, (m.len(), m.modified()?)))
        })
        .collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn run_init(major: PgMajor) -> Result<()> {
    let work = WorkDir::new(&format!("init-pg{}", major.number()))?;
    let c = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    workload(&c, &work.path)?;
    let shadow = work.path.join("shadow");
    let cfg = config(&c, &work.path, &shadow)?;
    let state_dir = cfg.state.dir.clone();
    let rt = runtime();

    let report = rt.block_on(init(&cfg, false, false))?;
    println!("PostgreSQL {major}:\n{report}");
    ensure!(!report.already_initialised);
    let figures = report.backup.clone().context("backup figures")?;
    ensure!(figures.files_skipped > 0 && figures.files_kept > 0);
    ensure!(report.slot_created);
    ensure!(
        c.query_one("select count(*) from pg_replication_slots where slot_name = 'walshadow_init' and restart_lsn is not null")? == "1"
    );

    // No marker anywhere in the shadow.
    let mut files = Vec::new();
    walk(&shadow, &mut files)?;
    for f in &files {
        let bytes = std::fs::read(f)?;
        ensure!(
            !contains(&bytes, MARKER.as_bytes()),
            "marker found in {}",
            f.display()
        );
    }
    // The marker is in the source's user and statistics files (the oracle is
    // not vacuous).
    ensure!(
        c.query_one(&format!(
            "select count(*) > 0 from pg_stats where tablename = 't2' and most_common_vals::text like '%{MARKER}%'"
        ))? == "t"
    );

    // Catalog files as in the source, user files absent.
    let rels = source_rels(&c)?;
    let src = c.data_dir();
    let mut catalogs = 0;
    for r in &rels {
        let src_files = rel_files(&src, &r.path);
        if STATS_OIDS.contains(&r.oid) {
            let want = if r.relkind == 'i' { 8192 } else { 0 };
            let got = std::fs::metadata(shadow.join(&r.path))
                .with_context(|| format!("statistics catalog {} ({})", r.oid, r.path))?
                .len();
            ensure!(
                got == want,
                "statistics catalog {} is {got} bytes, want {want}",
                r.path
            );
            continue;
        }
        if r.oid < 16384 || r.relkind == 'S' {
            catalogs += 1;
            ensure!(!src_files.is_empty(), "no source file for {}", r.path);
            for f in &src_files {
                let want = std::fs::metadata(src.join(f))?.len();
                let got = std::fs::metadata(shadow.join(f))
                    .with_context(|| format!("catalog file {f} (relation {}) missing", r.oid))?
                    .len();
                ensure!(
                    got == want,
                    "{f}: {got} bytes in the shadow, {want} in the source"
                );
            }
        } else {
            let landed = rel_files(&shadow, &r.path);
            ensure!(
                landed.is_empty(),
                "user relation {} (kind {}) has files {landed:?} in the shadow",
                r.oid,
                r.relkind
            );
        }
    }
    ensure!(catalogs > 300, "only {catalogs} catalog relations seen");
    // template0 (no connections, not listed) gets empty statistics too.
    let t0 = c.query_one("select oid from pg_database where datname = 'template0'")?;
    for (file, want) in [(2619, 0), (2696, 8192), (3429, 0), (3433, 8192)] {
        let got = std::fs::metadata(shadow.join(format!("base/{t0}/{file}")))?.len();
        ensure!(
            got == want,
            "template0 statistics file {file}: {got} bytes, want {want}"
        );
    }
    // The tablespace's database landed as an in-place tablespace.
    ensure!(rels.iter().any(|r| r.path.starts_with("pg_tblspc/")
        && r.oid < 16384
        && shadow.join(&r.path).is_file()));

    // Shadow configuration.
    let conf = std::fs::read_to_string(shadow.join("postgresql.conf"))?;
    for want in [
        "listen_addresses = ''",
        "hot_standby = on",
        "archive_mode = off",
        "max_connections = '40'",
        &format!("port = {}", report.state.shadow_port),
    ] {
        ensure!(
            conf.contains(want),
            "postgresql.conf lacks {want:?}:\n{conf}"
        );
    }
    let auto = std::fs::read_to_string(shadow.join("postgresql.auto.conf"))?;
    ensure!(
        auto.contains(&format!("port={}", report.state.feeder_port))
            && auto.contains("unix_socket_permissions = 0700"),
        "postgresql.auto.conf:\n{auto}"
    );
    ensure!(shadow.join("standby.signal").exists());
    ensure!(shadow.join("postgresql.conf.source").exists());
    // No local connection is trusted: peer authentication, mapped.
    let hba = std::fs::read_to_string(shadow.join("pg_hba.conf"))?;
    ensure!(
        hba.contains("local all all peer map=walshadow") && !hba.contains("trust"),
        "{hba}"
    );
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(&shadow)?;
        ensure!(m.permissions().mode() & 0o777 == 0o700);
        ensure!(
            m.uid() == ServerUser::get()?.uid,
            "data dir not owned by the server user"
        );
    }

    // The seed classifies like the source's catalog.
    let filter = load_seed(&state_dir, major)?;
    for r in &rels {
        let class = filter.class_of(r.db, r.file);
        let want = if r.relkind == 'S' {
            FileClass::Sequence
        } else if STATS_OIDS.contains(&r.oid) && r.relkind == 'i' {
            FileClass::StatisticsIndex
        } else if r.oid < 16384 && !STATS_OIDS.contains(&r.oid) {
            FileClass::Catalog
        } else {
            FileClass::UserData
        };
        ensure!(
            class == Some(want),
            "seed: {} (oid {}, db {}, file {}) is {class:?}, want {want:?}",
            r.path,
            r.oid,
            r.db,
            r.file
        );
    }

    // init.json round-trips.
    ensure!(InitState::read_present(&state_dir)? == report.state);
    ensure!(report.state.major == major.number());

    // A second init changes nothing.
    let before = snapshot(&[&shadow, &state_dir])?;
    let again = rt.block_on(init(&cfg, false, false))?;
    ensure!(
        again.already_initialised,
        "second init did not say already initialised"
    );
    ensure!(again.to_string().contains("already initialised"));
    ensure!(again.state == report.state);
    ensure!(
        snapshot(&[&shadow, &state_dir])? == before,
        "second init changed files"
    );

    // force rebuilds (the slot is reused).
    let forced = rt.block_on(init(&cfg, true, false))?;
    ensure!(!forced.already_initialised && !forced.slot_created);
    ensure!(forced.state.backup_start > report.state.backup_start);
    ensure!(InitState::read_present(&state_dir)? == forced.state);
    replay_smoke(&c, &cfg, &forced.state, &work.path)?;
    // After replay (its pg_wal included) the shadow still holds no marker.
    let mut files = Vec::new();
    walk(&shadow, &mut files)?;
    for f in &files {
        ensure!(
            !contains(&std::fs::read(f)?, MARKER.as_bytes()),
            "marker found in {} after replay",
            f.display()
        );
    }

    // A foreign, non-empty data directory is refused.
    let foreign = work.path.join("foreign");
    std::fs::create_dir_all(&foreign)?;
    std::fs::write(foreign.join("precious"), "x")?;
    let mut cfg2 = config(&c, &work.path, &foreign)?;
    cfg2.state.dir = work.path.join("state2");
    match rt.block_on(init(&cfg2, false, false)) {
        Err(e @ InitError::NotOurs { .. }) => ensure!(e.to_string().contains("data_dir")),
        other => bail!("foreign data dir: {other:?}"),
    }
    ensure!(foreign.join("precious").exists());

    // Page checksums and the empty btree metapage against the server's own.
    if c.query_one("show data_checksums")? == "on" {
        c.psql("create table e (a int); create index e_a on e (a); checkpoint;")?;
        let path = c.query_one("select pg_relation_filepath('e_a')")?;
        let real = std::fs::read(src.join(&path))?;
        ensure!(real.len() == 8192);
        let sum = u16::from_le_bytes([real[8], real[9]]);
        ensure!(
            pg_checksum_page(&real, 0) == sum,
            "checksum differs from the server's"
        );
        let ours = empty_btree_metapage(Some(&real), true);
        ensure!(
            ours[10..] == real[10..],
            "empty btree metapage differs from the server's: ours {:?} real {:?}",
            &ours[..72],
            &real[..72]
        );
        let pg_class =
            std::fs::read(src.join(c.query_one("select pg_relation_filepath('pg_class')")?))?;
        for (blk, page) in pg_class.chunks(8192).enumerate() {
            ensure!(pg_checksum_page(page, blk as u32) == u16::from_le_bytes([page[8], page[9]]));
        }
    } else {
        c.psql("create table e (a int); create index e_a on e (a); checkpoint;")?;
        let path = c.query_one("select pg_relation_filepath('e_a')")?;
        let real = std::fs::read(src.join(&path))?;
        let ours = empty_btree_metapage(Some(&real), false);
        ensure!(
            ours[8..] == real[8..],
            "empty btree metapage differs from the server's: ours {:?} real {:?}",
            &ours[..72],
            &real[..72]
        );
    }
    Ok(())
}

/// The landed directory works as a standby: the source's WAL from the
/// backup's segment, through the seeded filter, into a segment store served
/// by the feeder; the shadow started on it replays past the backup end and
/// answers catalog queries (statistics empty, the tablespace's database
/// readable, the sequence's state current).
fn replay_smoke(c: &Cluster, cfg: &Config, state: &InitState, work: &Path) -> Result<()> {
    use walshadow_shadow::feeder::{Feeder, FeederConfig};
    use walshadow_shadow::filter::pipeline::FilterPipeline;
    use walshadow_shadow::segment_store::{CreateOptions, SegmentStore, segment_file_name};
    use walshadow_types::Lsn;

    let user = ServerUser::get()?;
    let seg = state.segment_size;
    let seg_start = Lsn(state.backup_start.0 - state.backup_start.0 % u64::from(seg));
    c.psql("select nextval('s1')")?; // some WAL after the backup
    let upto = c.flush_lsn()?;
    let store = std::sync::Arc::new(SegmentStore::create(
        cfg.state.dir.join("wal"),
        CreateOptions {
            segment_size: seg,
            tli: state.timeline,
            start: seg_start,
            history: None,
        },
    )?);
    let major = PgMajor::from_number(state.major)?;
    let mut pipeline = FilterPipeline::new(load_seed(&cfg.state.dir, major)?, seg_start, seg)?
        .with_replay_start(state.backup_start);
    let mut pos = seg_start;
    while pos < upto {
        let name = segment_file_name(state.timeline, pos.0 / u64::from(seg), seg);
        let bytes = std::fs::read(c.wal_dir().join(&name))?;
        let n = (upto.0 - pos.0).min(u64::from(seg)) as usize;
        let (from, out) = pipeline.push(pos, &bytes[..n])?;
        if !out.is_empty() {
            store.append(from, &out)?;
        }
        pos = Lsn(pos.0 + n as u64);
    }
    store.flush()?;
    let end = store.written_end();
    ensure!(
        end >= state.backup_end,
        "filtered WAL ends at {end}, before the backup end"
    );

    let rt = runtime();
    let feeder_dir = cfg.state.dir.join("feeder");
    std::fs::create_dir_all(&feeder_dir)?;
    if user.switches_user {
        std::os::unix::fs::chown(&feeder_dir, Some(user.uid), Some(user.gid))?;
    }
    let feeder = rt.block_on(Feeder::start(
        FeederConfig::new(
            &feeder_dir,
            state.feeder_port,
            state.system_id,
            state.server_version.clone(),
        ),
        store.clone(),
    ))?;
    let log = work.join("shadow.log");
    let pg_ctl = |args: &[&str]| -> Result<()> {
        let out = user
            .command(&cfg.shadow.pg_bin.join("pg_ctl"), work)
            .arg("-D")
            .arg(&cfg.shadow.data_dir)
            .args(args)
            .output()?;
        ensure!(
            out.status.success(),
            "pg_ctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Ok(())
    };
    pg_ctl(&["start", "-W", "-l", &log.display().to_string()])?;
    let result = (|| -> Result<()> {
        rt.block_on(feeder.wait_for_replay(end, std::time::Duration::from_secs(60)))
            .map_err(|e| {
                anyhow::anyhow!("{e}: {}", std::fs::read_to_string(&log).unwrap_or_default())
            })?;
        let sock = cfg.state.dir.join("shadow-socket");
        let psql = |db: &str, sql: &str| -> Result<String> {
            // The standby accepts connections once consistent; retry briefly.
            let mut last = String::new();
            for _ in 0..100 {
                // As walshadow's own OS user: the one the shadow's peer
                // map lets in as the source's role.
                let out = std::process::Command::new(c.install().bin("psql"))
                    .current_dir(work)
                    .arg("-h")
                    .arg(&sock)
                    .args([
                        "-p",
                        &state.shadow_port.to_string(),
                        "-U",
                        c.superuser(),
                        "-d",
                        db,
                        "-XAtc",
                        sql,
                    ])
                    .output()?;
                if out.status.success() {
                    return Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned());
                }
                last = String::from_utf8_lossy(&out.stderr).into_owned();
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            bail!("psql on the shadow: {last}")
        };
        ensure!(psql("postgres", "select pg_is_in_recovery()")? == "t");
        ensure!(
            psql(
                "postgres",
                "select count(*) from pg_class where relname in ('t1', 't2', 't4', 's1')"
            )? == "4"
        );
        ensure!(psql("postgres", "select count(*) from pg_statistic")? == "0");
        ensure!(psql("postgres", "select count(*) from pg_statistic_ext_data")? == "0");
        // A standby sees the value logged ahead (SEQ_LOG_VALS = 32).
        let last: i64 = psql("postgres", "select last_value from s1")?.parse()?;
        ensure!((11..=43).contains(&last), "s1 last_value {last}");
        ensure!(psql("d3", "select count(*) from pg_class where relname = 't5'")? == "1");
        ensure!(
            psql(
                "d2",
                "select count(*) from pg_attribute where attrelid = 't3'::regclass"
            )? != "0"
        );
        Ok(())
    })();
    let stopped = pg_ctl(&["stop", "-m", "fast"]);
    rt.block_on(feeder.shutdown());
    result?;
    stopped
}

fn wal_level_replica(major: PgMajor) -> Result<()> {
    let work = WorkDir::new(&format!("init-replica-pg{}", major.number()))?;
    let c = Cluster::start(
        major,
        ClusterOptions::default().conf("wal_level", "replica"),
    )?;
    let cfg = config(&c, &work.path, &work.path.join("shadow"))?;
    match runtime().block_on(init(&cfg, false, false)) {
        Err(e @ InitError::Requirement { .. }) => {
            let msg = e.to_string();
            ensure!(
                msg.contains("wal_level") && msg.contains("logical"),
                "{msg}"
            );
            println!("{msg}");
        }
        other => bail!("wal_level=replica: {other:?}"),
    }
    ensure!(!cfg.state.dir.join(InitState::FILE).exists());
    Ok(())
}

#[test]
fn init_pg15() -> Result<()> {
    run_init(PgMajor::V15)
}

#[test]
fn init_pg18() -> Result<()> {
    run_init(PgMajor::V18)
}

#[test]
fn init_refuses_wal_level_replica_pg15() -> Result<()> {
    wal_level_replica(PgMajor::V15)
}

#[test]
fn init_refuses_wal_level_replica_pg18() -> Result<()> {
    wal_level_replica(PgMajor::V18)
}
