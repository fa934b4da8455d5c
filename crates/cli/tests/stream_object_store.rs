//! `initial_load = 'object_store'` against a real pgBackRest repository
//! (PostgreSQL 15: Debian's pgBackRest 2.45 predates 16). The source
//! archives its WAL into the repository; pgBackRest takes a full backup
//! and an incremental one (the load reads the latter, through its
//! references into the former), then:
//!
//! - a transaction prepared before the backup commits after it (open
//!   across the backup's start: its rows are on the backup's pages with an
//!   in-progress inserter, and only the archive's WAL says it committed);
//! - rows change after the backup, before the opt-in (updates of TOASTed
//!   and plain values, deletes, inserts): the gap;
//! - two tables are opted in by one transaction (one pass), rows change
//!   after the opt-in (the stream's);
//! - both tables equal the source row by row, the rows walked carry the
//!   backup's start as `_lsn`, and the source saw no statement of
//!   walshadow's on them, no `BASE_BACKUP` and no `COPY` (its log says
//!   who ran what);
//! - catalog rows of the loaded tables written after the backup without
//!   changing their shape or file (GRANT, a storage option, CREATE INDEX)
//!   do not hold up the load;
//! - a table altered after the backup (`ADD COLUMN`) and one truncated
//!   after it (a new file) are refused as catalog skew with the remedy,
//!   their entries stay pending, and the stream goes on; a table opted in
//!   by the same transaction loads without them.
//!
//! On 15 and 18 from a barman-cloud store on a local S3 server (full
//! backups, gzip), and from a wal-g store (lz4) that a test-only writer
//! lays out as wal-g's source says (wal-g cannot be installed here), the
//! same. And on 15: the store going away mid-walk
//! leaves the destination untouched; the retry publishes exactly once; a
//! backup taken at `wal_level = replica` before a restart at `logical` is
//! refused (its WAL lacks what the replay needs).

mod common;

use anyhow::{Context, Result, ensure};
use common::loads::*;
use common::stores::{
    Repo, STANZA, WalGStore, barman_cloud_backup, switch_and_archive, with_aws_env,
};
use common::{BIN, StreamHarness, same, source_options};
use walshadow_testkit::{ClusterOptions, Lsn, PgMajor, S3Server, WorkDir, per_major, wait_until};

fn count(h: &StreamHarness, sql: &str) -> Result<u64> {
    let n = h.ch.query(sql)?;
    n.trim()
        .parse()
        .with_context(|| format!("{sql} answered {n:?}"))
}

/// The backup tool a drill's store is written by.
enum Tool {
    PgBackRest(Repo),
    /// A store written as wal-g lays one out (the test kit's writer).
    WalG(WalGStore),
    BarmanCloud {
        s3: S3Server,
        work: WorkDir,
        creds: std::path::PathBuf,
    },
    /// A pgBackRest repository (bundled, zstd, a full then a differential
    /// backup) served from S3: written on a local path, then copied into
    /// the bucket as pgBackRest's S3 driver lays it out (the same paths
    /// under `repo1-path`). pgBackRest 2.45 speaks S3 over TLS only, and
    /// the local S3 server has none.
    PgBackRestS3 {
        repo: Repo,
        s3: S3Server,
        creds: std::path::PathBuf,
    },
}

const BUCKET: &str = "backups";
const SERVER: &str = "source";
/// Where the S3 copy of a pgBackRest repository lives in the bucket.
const PGBACKREST_PREFIX: &str = "pgbackrest";

impl Tool {
    fn name(&self) -> &'static str {
        match self {
            Tool::PgBackRest(_) => "pgbackrest",
            Tool::PgBackRestS3 { .. } => "pgbackrest-s3",
            Tool::BarmanCloud { .. } => "barman-cloud",
            Tool::WalG(_) => "walg",
        }
    }

    fn barman_url() -> String {
        format!("s3://{BUCKET}/pg")
    }

    fn archive_command(&self) -> Result<String> {
        Ok(match self {
            Tool::PgBackRest(repo) | Tool::PgBackRestS3 { repo, .. } => repo.archive_command(),
            Tool::WalG(store) => store.archive_command(),
            Tool::BarmanCloud { s3, .. } => format!(
                "{} --gzip {} {SERVER} %p",
                with_aws_env(s3, "barman-cloud-wal-archive")?,
                Self::barman_url()
            ),
        })
    }

    /// What the store needs once the source runs.
    fn prepare(&self, h: &StreamHarness) -> Result<()> {
        match self {
            Tool::PgBackRest(repo) => {
                repo.configure(&h.source)?;
                repo.run(&["stanza-create"])?;
            }
            Tool::PgBackRestS3 { repo, s3, .. } => {
                repo.configure(&h.source)?;
                repo.set_global(&[("repo1-bundle", "y"), ("compress-type", "zst")])?;
                repo.run(&["stanza-create"])?;
                s3.create_bucket(BUCKET)?;
                self.archived()?;
            }
            Tool::BarmanCloud { s3, .. } => s3.create_bucket(BUCKET)?,
            Tool::WalG(_) => {}
        }
        Ok(())
    }

    /// What the archiver sent is in the store (wal-g's writer pushes it;
    /// the S3 copy of a pgBackRest repository is brought up to date).
    fn archived(&self) -> Result<()> {
        match self {
            Tool::WalG(store) => store.push_wal()?,
            Tool::PgBackRestS3 { repo, s3, .. } => {
                s3.upload_dir(BUCKET, PGBACKREST_PREFIX, &repo.repo_dir())?
            }
            Tool::PgBackRest(_) | Tool::BarmanCloud { .. } => {}
        }
        Ok(())
    }

    /// A backup; `first`: the first (pgBackRest: full, then incremental;
    /// barman-cloud takes full backups only).
    fn backup(&self, h: &StreamHarness, first: bool) -> Result<()> {
        match self {
            Tool::PgBackRest(repo) => {
                repo.run(&["backup", if first { "--type=full" } else { "--type=incr" }])?;
            }
            // A differential one here: the other reference kind.
            Tool::PgBackRestS3 { repo, .. } => {
                repo.run(&["backup", if first { "--type=full" } else { "--type=diff" }])?;
                self.archived()?;
            }
            Tool::BarmanCloud { s3, work, .. } => {
                barman_cloud_backup(s3, &h.source, work.path(), &Self::barman_url(), SERVER)?
            }
            Tool::WalG(store) => {
                store.backup(&h.source)?;
            }
        }
        Ok(())
    }

    fn backup_section(&self) -> String {
        match self {
            Tool::WalG(store) => format!(
                "[backup]\ntool = \"wal-g\"\nrepo = \"{}\"\n",
                store.root().display()
            ),
            Tool::PgBackRest(repo) => format!(
                "[backup]\ntool = \"pgbackrest\"\nrepo = \"{}\"\nstanza = \"{STANZA}\"\n",
                repo.repo_dir().display()
            ),
            Tool::BarmanCloud { s3, creds, .. } => format!(
                "[backup]\ntool = \"barman-cloud\"\nrepo = \"{}\"\nserver_name = \"{SERVER}\"\n{}",
                Self::barman_url(),
                s3_keys(s3, creds)
            ),
            Tool::PgBackRestS3 { s3, creds, .. } => format!(
                "[backup]\ntool = \"pgbackrest\"\nrepo = \"s3://{BUCKET}/{PGBACKREST_PREFIX}\"\n\
                 stanza = \"{STANZA}\"\n{}",
                s3_keys(s3, creds)
            ),
        }
    }

    /// Whether the load read the newest backup.
    fn read_the_newest(&self, label: &str) -> bool {
        match self {
            Tool::PgBackRest(_) => label.ends_with('I'),
            Tool::PgBackRestS3 { .. } => label.ends_with('D'),
            Tool::BarmanCloud { .. } | Tool::WalG(_) => !label.is_empty(),
        }
    }
}

fn pgbackrest() -> Result<Tool> {
    Ok(Tool::PgBackRest(Repo::new("os-pgbackrest")?))
}

/// Work directories are named per drill (`tag`) and major: the drills'
/// majors run at once in one process.
fn barman_cloud(major: PgMajor, tag: &str) -> Result<Tool> {
    let s3 = S3Server::start()?;
    let work = WorkDir::new(&format!("{tag}-barman-pg{}", major.number()))?;
    let creds = credentials_file(&work)?;
    Ok(Tool::BarmanCloud { s3, work, creds })
}

fn pgbackrest_s3() -> Result<Tool> {
    let repo = Repo::new("os-pgbackrest-s3")?;
    let creds = credentials_file(&repo.work)?;
    Ok(Tool::PgBackRestS3 {
        s3: S3Server::start()?,
        repo,
        creds,
    })
}

/// The local S3 server's keys in a file walshadow reads (0600).
fn credentials_file(work: &WorkDir) -> Result<std::path::PathBuf> {
    let creds = work.path().join("s3.env");
    std::fs::write(
        &creds,
        format!(
            "AWS_ACCESS_KEY_ID={}\nAWS_SECRET_ACCESS_KEY={}\n",
            S3Server::ACCESS_KEY,
            S3Server::SECRET_KEY
        ),
    )?;
    std::fs::set_permissions(&creds, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(creds)
}

/// The `[backup]` keys that reach the local S3 server.
fn s3_keys(s3: &S3Server, creds: &std::path::Path) -> String {
    format!(
        "endpoint = \"{}\"\nregion = \"{}\"\npath_style = true\ncredentials_file = \"{}\"\n",
        s3.endpoint(),
        S3Server::REGION,
        creds.display()
    )
}

fn walg_load(major: PgMajor) -> Result<()> {
    let store = WalGStore::new(&format!("os-walg-pg{}", major.number()))?;
    object_store_load(major, Tool::WalG(store))
}

fn pgbackrest_load(major: PgMajor) -> Result<()> {
    object_store_load(major, pgbackrest()?)
}

fn pgbackrest_s3_load(major: PgMajor) -> Result<()> {
    object_store_load(major, pgbackrest_s3()?)
}

fn barman_cloud_load(major: PgMajor) -> Result<()> {
    object_store_load(major, barman_cloud(major, "os")?)
}

/// A source archiving into `tool`'s store (its options `opts` more), an
/// engine, and walshadow configured with `backfill` and the store; the
/// store prepared. Work directories are named `tag`: the tools' drills of
/// one major run at once in one process.
fn harness(
    major: PgMajor,
    tool: &Tool,
    tag: &str,
    backfill: &str,
    opts: ClusterOptions,
) -> Result<StreamHarness> {
    let opts = opts
        .conf("archive_mode", "on")
        .conf("archive_command", tool.archive_command()?);
    let extra = format!("[backfill]\n{backfill}\n{}", tool.backup_section());
    let h = StreamHarness::with_options(BIN, major, tag, &[], &extra, opts)?;
    tool.prepare(&h)?;
    Ok(h)
}

fn object_store_load(major: PgMajor, tool: Tool) -> Result<()> {
    let opts = source_options()
        // Who ran what: the drill reads walshadow's statements off the log.
        .conf("log_statement", "all")
        .conf("log_replication_commands", "on")
        .conf("log_line_prefix", "%m [%p] app=%a ");
    let tag = format!("object-store-{}", tool.name());
    let mut h = harness(major, &tool, &tag, "max_attempts = 2", opts)?;
    h.source.psql(
        "create table orders (id bigint primary key, customer int, amount numeric(12,2), note text);
         alter table orders alter column note set storage external;
         insert into orders select g, g % 100, g * 1.25,
             case when g % 50 = 0 then repeat(md5(g::text), 300) else 'n' || g end
           from generate_series(1, 3000) g;
         delete from orders where id % 97 = 0;
         create table items (id int primary key, v text);
         insert into items select g, 'item ' || g from generate_series(1, 500) g;
         create table skewed (id int primary key, v text);
         insert into skewed select g, 's' from generate_series(1, 100) g;
         create table fine (id int primary key, v text);
         insert into fine select g, 'f' from generate_series(1, 50) g;
         create table emptied (id int primary key, v text);
         insert into emptied select g, 'e' from generate_series(1, 30) g;",
    )?;
    // A table in a tablespace of its own: its files are in the backup's
    // tablespace archive (wal-g: the partitions, under pg_tblspc/<oid>/).
    let location = h.work.sub("tablespace")?;
    h.source.psql(&format!(
        "create tablespace ts location '{}'",
        location.display()
    ))?;
    h.source.psql(
        "create table spaced (id int primary key, v text) tablespace ts;
         insert into spaced select g, 'spaced ' || g from generate_series(1, 400) g;",
    )?;
    // A full backup, then an incremental one: the load reads the newest,
    // most of whose files are the full backup's.
    tool.backup(&h, true)?;
    h.source.psql(
        "insert into orders select g, g % 100, g * 1.25, 'incr ' || g from generate_series(3001, 3500) g;
         update items set v = 'incr' where id > 490;
         begin;
         insert into orders select g, 7, 1, 'prepared ' || g from generate_series(5001, 5020) g;
         update items set v = 'prepared' where id <= 10;
         prepare transaction 'across';",
    )?;
    let across: u64 = h
        .source
        .query_one("select transaction from pg_prepared_xacts where gid = 'across'")?
        .parse()?;
    tool.backup(&h, false)?;
    // The gap: after the backup's start, before the opt-in.
    h.source.psql(
        "commit prepared 'across';
         update orders set amount = amount + 1000 where id % 10 = 0;
         update orders set note = repeat('gap', 4000) where id in (100, 200);
         update orders set customer = -1 where id % 50 = 0 and id not in (100, 200);
         delete from orders where id % 7 = 0;
         insert into orders select g, 8, 2, 'gap ' || g from generate_series(6001, 6100) g;
         update items set id = id + 10000 where id between 20 and 29;
         insert into items values (9999, 'gap');
         update spaced set v = 'gap' where id % 9 = 0;
         delete from spaced where id % 13 = 0;
         alter table skewed add column c int;
         truncate emptied;
         insert into emptied values (1, 'after the truncate');
         -- Catalog rows of the loaded tables written, neither shape nor
         -- file changed: not skew.
         grant select on orders to public;
         alter table items set (fillfactor = 90);
         create index on orders (customer);
         comment on table items is 'loaded';",
    )?;
    h.init()?;
    h.start_run()?;
    let scans = |h: &StreamHarness| -> Result<String> {
        h.source.query_one(
            "select string_agg(relname || ':' || (seq_scan + coalesce(idx_scan, 0)), ',' order by relname)
               from pg_stat_user_tables where relname in ('orders', 'items', 'spaced')",
        )
    };
    // `init` took its own BASE_BACKUP (the shadow's): the log from here on.
    let log_from = h.source.log_contents().len();
    h.source.psql(
        "insert into walshadow.tables values
           ('public', 'orders', true, 'object_store'),
           ('public', 'items', true, 'object_store'),
           ('public', 'spaced', true, 'object_store');",
    )?;
    // After the opt-in: the stream's rows.
    h.source.psql(
        "update orders set amount = -1 where id = 1;
         delete from orders where id = 2;
         insert into orders values (7001, 9, 3, repeat('after', 3000));
         update items set v = 'after' where id = 1;",
    )?;
    // The load waits for the archive to hold the opt-in's segment: from
    // here to its end only walshadow runs.
    let scans_before = scans(&h)?;
    switch_and_archive(&h.source)?;
    tool.archived()?;
    let s = wait_loaded(&mut h, "public.orders")?;
    wait_loaded(&mut h, "public.items")?;
    wait_loaded(&mut h, "public.spaced")?;
    let scans_after = scans(&h)?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.orders", "orders", &orders_cols())?;
    let m = h.assert_equal("public.items", "items", &[same("id"), same("v")])?;
    let sp = h.assert_equal("public.spaced", "spaced", &[same("id"), same("v")])?;
    eprintln!("orders: {n} rows equal, items: {m}, spaced: {sp}");
    ensure!(
        n > 3000 && m == 501 && sp > 300,
        "orders {n}, items {m}, spaced {sp}"
    );
    let log = h.run_log();
    // One pass for both, with the gap replayed.
    let passes = log.matches("initial load (object_store) done").count();
    ensure!(passes == 1, "{passes} passes: {}", tail_of(&log));
    let backup =
        logged_text(&log, "initial load (object_store) done", "backup").unwrap_or_default();
    ensure!(
        tool.read_the_newest(&backup),
        "the load read backup {backup:?}, not the newest"
    );
    // The rows walked carry the backup's start, before the opt-in.
    let walked = h.ch.query(
        "SELECT min(_lsn), max(_lsn) FROM app.orders FINAL WHERE customer = 7 AND id BETWEEN 5001 AND 5020",
    )?;
    eprintln!("prepared rows' _lsn: {walked}, S = {s}");
    let redo: Lsn = logged_text(&log, "initial load (object_store) done", "gap_from")
        .context("gap_from in the summary")?
        .parse()?;
    ensure!(redo < s, "backup start {redo} not before the opt-in {s}");
    // The gate's bound, from the backup's start checkpoint in the archive:
    // past the transaction begun before the backup, not past the source's.
    let gap_line = "the archive's WAL from the backup's start to the opt-ins is here";
    let next_xid: u64 = logged_text(&log, gap_line, "next_xid")
        .and_then(|t| {
            t.strip_prefix("Some(")?
                .strip_suffix(')')
                .map(str::to_owned)
        })
        .context("next_xid in the gap's line")?
        .parse()?;
    let now: u64 = h
        .source
        .query_one("select txid_current() % 4294967296")?
        .parse()?;
    ensure!(
        across < next_xid && next_xid <= now,
        "the start checkpoint's nextXid {next_xid}: not after {across} (begun before the backup) and up to {now}"
    );
    // The transaction open across the backup's start: its rows the gap
    // left alone are only on the backup's pages, tagged with its start.
    let prepared = count(
        &h,
        &format!(
            "SELECT count() FROM app.orders FINAL WHERE id BETWEEN 5001 AND 5020 AND customer = 7 \
             AND _lsn = {}",
            redo.0
        ),
    )?;
    let untouched = h
        .source
        .query_one("select count(*) from orders where id between 5001 and 5020 and id % 10 <> 0")?;
    ensure!(
        prepared.to_string() == untouched && prepared > 10,
        "{prepared} walked rows of the transaction open across the backup's start, the source has {untouched}"
    );

    // The source did nothing for the load: no statement of walshadow's
    // on the tables, no BASE_BACKUP, no COPY, no scan.
    ensure!(
        scans_after == scans_before,
        "the tables were scanned during the load: {scans_before} then {scans_after}"
    );
    let source_log = h.source.log_contents();
    let ours: Vec<&str> = source_log
        .get(log_from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("app=walshadow"))
        .filter(|l| {
            ["BASE_BACKUP", "COPY", "orders", "items", "spaced"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect();
    ensure!(ours.is_empty(), "walshadow asked the source: {ours:#?}");

    // Catalog skew: `skewed` gained a column after the backup, `emptied`
    // a new file (TRUNCATE); `fine`, opted in by the same transaction,
    // loads without them.
    h.source.psql(
        "insert into walshadow.tables values
           ('public', 'skewed', true, 'object_store'),
           ('public', 'emptied', true, 'object_store'),
           ('public', 'fine', true, 'object_store');",
    )?;
    switch_and_archive(&h.source)?;
    tool.archived()?;
    let mut error = String::new();
    let waited = wait_until(CATCH_UP, "the skewed load's error in the ledger", || {
        h.check_running()?;
        error = entry(&h, "public.skewed", "error")?
            .and_then(|e| e.as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(error.contains("catalog skew"))
    });
    if let Err(e) = waited {
        anyhow::bail!(
            "{e}; ledger entry: {error}\nrun log:\n{}",
            tail_of(&h.run_log())
        );
    }
    ensure!(
        error.contains("take a new backup") && error.contains("'copy'"),
        "the remedy: {error}"
    );
    ensure!(phase(&h, "public.skewed")?.as_deref() != Some("done"));
    let emptied = entry(&h, "public.emptied", "error")?
        .and_then(|e| e.as_str().map(str::to_owned))
        .unwrap_or_default();
    ensure!(
        emptied.contains("catalog skew") && emptied.contains("after the backup started"),
        "the truncated table's error: {emptied}"
    );
    wait_loaded(&mut h, "public.fine")?;
    h.wait_caught_up(CATCH_UP)?;
    let f = h.assert_equal("public.fine", "fine", &[same("id"), same("v")])?;
    ensure!(f == 50, "fine: {f} rows");
    ensure!(
        phase(&h, "public.skewed")?.as_deref() != Some("done"),
        "the skewed table was published"
    );
    // The stream goes on.
    h.source
        .psql("insert into orders values (7002, 1, 1, 'still streaming')")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.orders", "orders", &orders_cols())?;
    ensure!(
        count(&h, "SELECT count() FROM app.skewed FINAL")? == 0,
        "skewed rows reached ClickHouse"
    );
    Ok(())
}

/// The store goes away mid-walk (its repository renamed): the attempt
/// fails with the destination untouched, and once the store is back the
/// retry publishes exactly once.
fn store_lost_mid_walk(major: PgMajor) -> Result<()> {
    let tool = Tool::PgBackRest(Repo::new("os-lost")?);
    let backfill = "batch_rows = 200\nmax_attempts = 5";
    let mut h = harness(
        major,
        &tool,
        "object-store-lost",
        backfill,
        source_options(),
    )?;
    // One file read ahead at a time, and files after `big`'s (the other
    // tables', made after it): the store is gone while some are unread.
    // (pg_xact and pg_multixact are read first.)
    h.append_config("parallelism = 1\n")?;
    h.source.psql(
        "create table big (id int primary key, v text);
         insert into big select g, 'v' || g from generate_series(1, 3000) g;
         vacuum (freeze) big;
         create table after1 (id int primary key, v text);
         create table after2 (id int primary key, v text);
         create table after3 (id int primary key, v text);
         insert into after1 values (1, 'a'); insert into after2 values (2, 'b');
         insert into after3 values (3, 'c');",
    )?;
    // Frozen rows pass the gate at once: staging takes rows while the walk
    // is still reading the backup's files.
    tool.backup(&h, true)?;
    h.source
        .psql("update big set v = 'gap' where id <= 100; delete from big where id > 2900;")?;
    h.init()?;
    let holds = h.arm_holds(&[walshadow_failpoints::BACKUP_WALK_AFTER_STAGING])?;
    h.start_run()?;
    h.source.psql(
        "insert into walshadow.tables values ('public', 'big', true, 'object_store'),
           ('public', 'after1', true, 'object_store'), ('public', 'after2', true, 'object_store'),
           ('public', 'after3', true, 'object_store');",
    )?;
    switch_and_archive(&h.source)?;
    let paused = holds.join("public.big.walk.paused");
    wait_until(CATCH_UP, "the walk to pause", || {
        h.check_running()?;
        Ok(paused.exists())
    })
    .with_context(|| tail_of(&h.run_log()))?;
    ensure!(count(&h, "SELECT count() FROM app.big__wsstg")? >= 200);
    h.source
        .psql("insert into big values (9001, 'live during the walk');")?;
    h.wait_caught_up(CATCH_UP)?;
    let Tool::PgBackRest(repo) = &tool else {
        unreachable!()
    };
    let away = repo.work.path().join("repo-away");
    std::fs::rename(repo.repo_dir(), &away)?;
    std::fs::remove_file(&paused)?;
    wait_until(CATCH_UP, "the attempt to fail", || {
        h.check_running()?;
        Ok(entry(&h, "public.big", "error")?.is_some())
    })
    .with_context(|| tail_of(&h.run_log()))?;
    let error = entry(&h, "public.big", "error")?.unwrap_or(toml::Value::from(""));
    eprintln!("the failed attempt: {error}");
    ensure!(phase(&h, "public.big")?.as_deref() != Some("done"));
    // The destination holds the live row only.
    ensure!(
        count(&h, "SELECT count() FROM app.big FINAL")? == 1,
        "the destination changed by a failed pass"
    );
    std::fs::rename(&away, repo.repo_dir())?;
    // Each attempt holds once more at its first insert: let it go.
    wait_loaded_with(&mut h, "public.big", |_| {
        if paused.exists() {
            std::fs::remove_file(&paused)?;
        }
        Ok(())
    })?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.big", "big", &[same("id"), same("v")])?;
    ensure!(n == 2901, "{n} rows");
    let log = h.run_log();
    let published = log.matches("initial load (object_store) done").count();
    ensure!(published == 1, "{published} passes published");
    // The retry read the gap's segments the failed attempt fetched.
    let gap_line = "the archive's WAL from the backup's start to the opt-ins is here";
    let fetched: Vec<String> = log
        .lines()
        .filter(|l| l.contains(gap_line))
        .filter_map(|l| logged_text(l, gap_line, "fetched"))
        .collect();
    ensure!(
        fetched.len() >= 2
            && fetched.first().is_some_and(|f| f != "0")
            && fetched.last().is_some_and(|f| f == "0"),
        "segments fetched per attempt: {fetched:?}"
    );
    no_staging_left(&h)?;
    Ok(())
}

/// An interrupted pass resumes (seed 001): `run` crashes right after the
/// first relation segment of a three-table pass is recorded as in staging.
/// With the staging tables dropped meanwhile, the next `run` starts over
/// (and crashes the same way); the one after keeps the staging its
/// predecessor left, walks only the other segments, replays the gap whole,
/// and publishes once, equal row by row. Before, a restarted pass walked
/// every segment again into new staging tables.
fn interrupted_pass_resumes(major: PgMajor) -> Result<()> {
    let tool = Tool::PgBackRest(Repo::new("os-resume")?);
    let mut h = harness(
        major,
        &tool,
        "object-store-resume",
        "max_attempts = 2",
        source_options(),
    )?;
    let names = ["ra", "rb", "rc"];
    for t in names {
        // About 2 MB each: a segment long enough to be recorded.
        h.source.psql(&format!(
            "create table {t} (id int primary key, v text);
             insert into {t} select g, rpad('{t} ' || g, 40, '.') from generate_series(1, 30000) g;"
        ))?;
    }
    tool.backup(&h, true)?;
    for t in names {
        h.source.psql(&format!(
            "update {t} set v = 'gap' where id % 100 = 0; delete from {t} where id % 333 = 0;"
        ))?;
    }
    h.init()?;
    h.arm(
        walshadow_failpoints::BACKUP_WALK_AFTER_SEGMENT_DONE,
        "return",
    );
    h.start_run()?;
    h.source.psql(
        "insert into walshadow.tables values
           ('public', 'ra', true, 'object_store'),
           ('public', 'rb', true, 'object_store'),
           ('public', 'rc', true, 'object_store');",
    )?;
    switch_and_archive(&h.source)?;
    wait_until(CATCH_UP, "run to end after the first segment", || {
        Ok(h.run_exited().is_some())
    })
    .with_context(|| tail_of(&h.run_log()))?;
    let staged = count(
        &h,
        "SELECT sum(total_rows) FROM system.tables WHERE database = 'app' AND name LIKE '%__wsstg'",
    )?;
    let progress = h.state_dir.join("object-store-pass.json");
    ensure!(
        staged > 0 && progress.exists(),
        "after the crash: {staged} rows in staging, progress file there: {}",
        progress.exists()
    );
    // Staging dropped meanwhile (as by an operator, or another pass of the
    // tables): what the file records no longer holds, and the next run
    // starts over (it crashes again after its own first segment).
    for t in names {
        h.ch.query(&format!("DROP TABLE IF EXISTS app.{t}__wsstg SYNC"))?;
    }
    let log_from = h.run_log().len();
    h.start_run()?;
    wait_until(CATCH_UP, "run to end after its first segment again", || {
        Ok(h.run_exited().is_some())
    })
    .with_context(|| tail_of(&h.run_log()))?;
    let second = h.run_log().get(log_from..).unwrap_or_default().to_owned();
    ensure!(
        !second.contains("initial load (object_store): resuming")
            && second.contains("staging table prepared"),
        "a run resumed into staging tables dropped since:\n{}",
        tail_of(&second)
    );
    h.disarm();
    let log_from = h.run_log().len();
    h.start_run()?;
    for t in names {
        wait_loaded(&mut h, &format!("public.{t}"))?;
    }
    h.wait_caught_up(CATCH_UP)?;
    for t in names {
        let n = h.assert_equal(&format!("public.{t}"), t, &[same("id"), same("v")])?;
        ensure!(n > 29_000, "{t}: {n} rows");
    }
    let log = h.run_log().get(log_from..).unwrap_or_default().to_owned();
    let done = "initial load (object_store) done";
    ensure!(
        log.contains("initial load (object_store): resuming")
            && log.matches(done).count() == 1
            && logged_text(&log, done, "files_resumed").as_deref() == Some("1"),
        "the pass did not resume with one segment:\n{}",
        tail_of(&log)
    );
    ensure!(!progress.exists(), "the progress file outlived its pass");
    no_staging_left(&h)?;
    Ok(())
}

/// A backup taken at `wal_level = replica`, the source then restarted at
/// `logical` (as when walshadow is adopted): the gap's WAL before the
/// restart lacks the rows and old keys the replay needs, and the load is
/// refused with the remedy instead of losing or resurrecting rows.
fn backup_below_logical(major: PgMajor) -> Result<()> {
    let tool = Tool::PgBackRest(Repo::new("os-replica")?);
    let opts = source_options().conf("wal_level", "replica");
    let mut h = harness(
        major,
        &tool,
        "object-store-replica",
        "max_attempts = 1",
        opts,
    )?;
    h.source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, 'v' || g from generate_series(1, 100) g;",
    )?;
    tool.backup(&h, true)?;
    h.source
        .psql("update t set id = id + 1000 where id <= 10; delete from t where id > 90;")?;
    h.source.psql("alter system set wal_level = logical")?;
    std::sync::Arc::get_mut(&mut h.source)
        .context("the source is shared")?
        .restart()?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 't', true, 'object_store');")?;
    switch_and_archive(&h.source)?;
    let mut error = String::new();
    wait_until(CATCH_UP, "the load's error in the ledger", || {
        h.check_running()?;
        error = entry(&h, "public.t", "error")?
            .and_then(|e| e.as_str().map(str::to_owned))
            .unwrap_or_default();
        Ok(!error.is_empty())
    })
    .with_context(|| tail_of(&h.run_log()))?;
    ensure!(
        error.contains("restarted with other settings") && error.contains("'copy'"),
        "{error}"
    );
    ensure!(count(&h, "SELECT count() FROM app.t FINAL")? == 0);
    Ok(())
}

/// The stream catches up from the archive: walshadow stopped, its slot
/// dropped, the source writes on and recycles the WAL walshadow needs;
/// at the next start the archive serves it, then the source again (the
/// slot created anew), and the table equals the source before and after
/// the return. Fails without the archive: "replication slot … does not
/// exist", then "requested WAL segment … has already been removed".
/// With `invalidate`, the slot is kept but loses its WAL to
/// `max_slot_wal_keep_size` (invalidated) instead of being dropped.
fn archive_catch_up(major: PgMajor, tool: Tool, invalidate: bool) -> Result<()> {
    let tag = format!(
        "archive-catch-up-{}{}",
        tool.name(),
        if invalidate { "-lost" } else { "" }
    );
    let mut opts = source_options()
        .conf("archive_mode", "on")
        .conf("archive_command", tool.archive_command()?);
    if invalidate {
        opts = opts.conf("max_slot_wal_keep_size", "16MB");
    }
    let extra = tool.backup_section();
    let mut h = StreamHarness::with_options(BIN, major, &tag, &["public.t"], &extra, opts)?;
    tool.prepare(&h)?;
    h.source.psql(
        "create table t (id int primary key, v text, n bigint);
         alter table t alter column v set storage external;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'v' || g, g from generate_series(1, 1000) g;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.t", "t", &[same("id"), same("v"), same("n")])?;
    h.stop_run()?;
    let applied = h
        .progress_applied()?
        .context("no progress after the first run")?;
    let slot = h
        .source
        .query_one("select slot_name from pg_replication_slots")?;
    if !invalidate {
        h.source
            .psql(&format!("select pg_drop_replication_slot('{slot}')"))?;
    }
    // The source writes on (TOASTed values, updates, deletes, a key
    // change) and recycles its WAL until walshadow's position is gone.
    let seg_of = |lsn: Lsn| -> Result<String> {
        h.source
            .query_one(&format!("select pg_walfile_name('{lsn}')"))
    };
    let needed = seg_of(applied)?;
    let mut round = 0;
    loop {
        round += 1;
        h.source.psql(&format!(
            "insert into t select g, repeat(md5(g::text), 200), g from generate_series({}, {}) g;
             update t set n = n + 1 where id % 10 = {};
             delete from t where id % 97 = {};
             checkpoint;",
            round * 10_000,
            round * 10_000 + 2_000,
            round % 10,
            round % 97,
        ))?;
        switch_and_archive(&h.source)?;
        tool.archived()?;
        h.source.psql("checkpoint")?;
        let oldest = h
            .source
            .query_one("select min(name) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'")?;
        // Three rounds at least: several segments come from the archive.
        if oldest > needed && round >= 3 {
            break;
        }
        ensure!(
            round < 12,
            "the source still holds {oldest} (walshadow needs {needed})"
        );
    }
    if invalidate {
        let status = h.source.query_one(&format!(
            "select wal_status from pg_replication_slots where slot_name = '{slot}'"
        ))?;
        ensure!(status == "lost", "the slot is {status}, not lost");
    }
    h.source.psql(
        "update t set id = id + 100000 where id <= 5; update t set v = 'short' where id = 500;",
    )?;
    eprintln!("the source recycled WAL past {needed} after {round} rounds");
    // `wal dump` reads the lost WAL from the archive as the intake does,
    // and fails without it.
    let end = h.source.flush_lsn()?;
    let dump = |with_archive: bool| -> Result<std::process::Output> {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(["wal", "dump", "--source", &h.source.url("postgres")])
            .args(["--start", &applied.to_string(), "--end", &end.to_string()]);
        if with_archive {
            cmd.args(["--config", h.config()]);
        }
        Ok(cmd.output()?)
    };
    let without = dump(false)?;
    ensure!(
        !without.status.success()
            && String::from_utf8_lossy(&without.stderr).contains("has already been removed")
            && String::from_utf8_lossy(&without.stderr)
                .contains("pass --config with a [backup] section"),
        "wal dump without the archive: {}",
        String::from_utf8_lossy(&without.stderr)
    );
    let with = dump(true)?;
    ensure!(
        with.status.success(),
        "wal dump over the archive: {}",
        String::from_utf8_lossy(&with.stderr)
    );
    let records = String::from_utf8_lossy(&with.stdout).lines().count();
    let inserts = String::from_utf8_lossy(&with.stdout)
        .lines()
        // XLOG_HEAP_INSERT, with or without XLOG_HEAP_INIT_PAGE.
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| {
            r["rmgr"] == "Heap" && matches!(r["kind"].as_str(), Some("INSERT" | "INSERT+INIT"))
        })
        .count();
    ensure!(
        records > 1000 && inserts >= 6000,
        "wal dump over the archive printed {records} records, {inserts} inserts"
    );
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.t", "t", &[same("id"), same("v"), same("n")])?;
    let log = h.run_log();
    ensure!(
        log.contains("reading it from the archive")
            && log.contains("streaming from the source again"),
        "the archive's turn is not in the log:\n{}",
        tail_of(&log)
    );
    let recreated = if invalidate {
        "dropped and created it again"
    } else {
        "did not exist: created it"
    };
    ensure!(
        log.contains(recreated),
        "no {recreated:?} in the log:\n{}",
        tail_of(&log)
    );
    let wal_status = h.source.query_one(&format!(
        "select coalesce(wal_status, 'none') from pg_replication_slots where slot_name = '{slot}'"
    ))?;
    ensure!(
        wal_status == "reserved",
        "the slot was not created again: {wal_status:?}"
    );
    let status = h.status_json()?;
    let read = status["archive_segments_read"].as_u64().unwrap_or(0);
    ensure!(
        read >= 3,
        "status says {read} segments read from the archive"
    );
    ensure!(
        status["wal_from_archive"] == serde_json::json!(false),
        "status says the archive still serves the WAL"
    );
    // Back on the source: live changes stream.
    h.source
        .psql("insert into t values (999999, 'live', 1); delete from t where id = 600;")?;
    h.wait_caught_up(CATCH_UP)?;
    let m = h.assert_equal("public.t", "t", &[same("id"), same("v"), same("n")])?;
    // The slot keeps its reservation once walshadow reports to it: told a
    // flush below what the source still has, PostgreSQL would move it
    // back there, and the next checkpoint would call it lost.
    wait_until(CATCH_UP, "walshadow's first reply on the new slot", || {
        h.check_running()?;
        Ok(h.source.query_one(
            "select count(*) from pg_stat_replication where application_name = 'walshadow' and flush_lsn is not null",
        )? == "1")
    })?;
    h.source.psql("checkpoint")?;
    let slot_now = h.source.query_one(&format!(
        "select wal_status || ' ' || active from pg_replication_slots where slot_name = '{slot}'"
    ))?;
    ensure!(
        slot_now == "reserved true" || slot_now == "extended true",
        "after walshadow's reply and a checkpoint the slot is {slot_now:?}"
    );
    eprintln!("{n} rows equal after the archive's turn ({read} segments), {m} after live changes");
    Ok(())
}

/// The stream catches up from the archive across a failover: walshadow
/// stopped on timeline 1; the primary writes on and stops; its standby is
/// promoted (timeline 2), writes on and recycles the WAL walshadow needs;
/// walshadow, pointed at the promoted server (which has no slot of its),
/// reads timeline 1 from the archive up to the switch, follows the switch
/// inside the segment that holds it (timeline 2's copy), reads timeline 2,
/// then streams from the source. Before, the archive's reader refused the
/// switch ("is not supported yet"). Without `from_archive` the promoted
/// server keeps timeline 1's segments and serves the switch itself (the
/// live follower's turn). Both failed on the store's switch at first: the
/// old timeline's last padding was still held by the filter ("the switch
/// point must lie within the WAL the store holds").
fn across_promotion(major: PgMajor, from_archive: bool) -> Result<()> {
    let tag = if from_archive {
        "archive-promotion"
    } else {
        "live-promotion"
    };
    let tool = barman_cloud(major, tag)?;
    let opts = source_options()
        .conf("archive_mode", "on")
        .conf("archive_command", tool.archive_command()?);
    let extra = tool.backup_section();
    let cols = [same("id"), same("v"), same("n")];
    let mut h = StreamHarness::with_options(BIN, major, tag, &["public.t"], &extra, opts)?;
    tool.prepare(&h)?;
    h.source
        .psql("create table t (id int primary key, v text, n bigint);")?;
    // Live: the standby from before walshadow's position, keeping its WAL.
    let early = if from_archive {
        None
    } else {
        let standby = h.source.start_standby()?;
        standby.psql("alter system set wal_keep_size = '1GB'")?;
        standby.psql("select pg_reload_conf()")?;
        Some(standby)
    };
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'v' || g, g from generate_series(1, 1000) g;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.stop_run()?;
    let applied = h
        .progress_applied()?
        .context("no progress after the first run")?;
    let needed = h
        .source
        .query_one(&format!("select pg_walfile_name('{applied}')"))?;
    // Timeline 1 goes on without walshadow, a standby following it.
    let standby = match early {
        Some(s) => s,
        None => h.source.start_standby()?,
    };
    h.source.psql(
        "insert into t select g, repeat(md5(g::text), 50), g from generate_series(2001, 4000) g;
         update t set n = -n where id % 7 = 0;",
    )?;
    switch_and_archive(&h.source)?;
    h.source.psql(
        "insert into t select g, 'tl1 ' || g, g from generate_series(4001, 4500) g;
         delete from t where id % 11 = 0;",
    )?;
    let last = h.source.flush_lsn()?;
    wait_until(CATCH_UP, "the standby to replay timeline 1's end", || {
        Ok(standby.query_one(&format!(
            "select pg_last_wal_replay_lsn() >= '{last}'::pg_lsn"
        ))? == "t")
    })?;
    std::sync::Arc::get_mut(&mut h.source)
        .context("the source is shared")?
        .stop()?;
    standby.promote()?;
    ensure!(standby.timeline()? == 2, "the promotion made no timeline 2");
    // Timeline 2 writes on and (from the archive) recycles timeline 1's
    // segments.
    let mut round = 0;
    loop {
        round += 1;
        standby.psql(&format!(
            "insert into t select g, repeat(md5(g::text), 200), g from generate_series({}, {}) g;
             update t set n = n + 1 where id % 10 = {};
             checkpoint;",
            round * 10_000,
            round * 10_000 + 2_000,
            round % 10,
        ))?;
        switch_and_archive(&standby)?;
        standby.psql("checkpoint")?;
        let oldest = standby.query_one(
            "select min(right(name, 16)) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'",
        )?;
        let recycled = oldest.as_str() > needed.get(8..).unwrap_or_default();
        if !from_archive {
            ensure!(!recycled, "the promoted server recycled {needed}");
            break;
        }
        if recycled && round >= 2 {
            break;
        }
        ensure!(
            round < 12,
            "the promoted server still holds {oldest} (walshadow needs {needed})"
        );
    }
    standby.psql("update t set id = id + 100000 where id <= 5; delete from t where id = 600;")?;
    // walshadow follows the promoted server.
    let config = std::fs::read_to_string(&h.config)?;
    let old_url = h.source.url("postgres");
    ensure!(config.contains(&old_url), "the config names no source url");
    std::fs::write(
        &h.config,
        config.replace(&old_url, &standby.url("postgres")),
    )?;
    h.source = std::sync::Arc::new(standby);
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("public.t", "t", &cols)?;
    let log = h.run_log();
    let archive_turn = [
        "reading it from the archive",
        "the archive's WAL switches timeline",
        "streaming from the source again",
    ];
    if from_archive {
        for said in archive_turn {
            ensure!(
                log.contains(said),
                "{said:?} is not in the log:\n{}",
                tail_of(&log)
            );
        }
    } else {
        ensure!(
            log.contains("source timeline 1 ended at") && !log.contains(archive_turn[0]),
            "the source did not serve the switch itself:\n{}",
            tail_of(&log)
        );
    }
    // Live on timeline 2.
    h.source.psql(
        "insert into t values (999999, 'live', 1); update t set v = 'late' where id = 700;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let m = h.assert_equal("public.t", "t", &cols)?;
    eprintln!("{n} rows equal across the promotion, {m} after live changes");
    Ok(())
}

fn archive_across_promotion(major: PgMajor) -> Result<()> {
    across_promotion(major, true)
}

fn live_across_promotion(major: PgMajor) -> Result<()> {
    across_promotion(major, false)
}

fn pgbackrest_catch_up(major: PgMajor) -> Result<()> {
    archive_catch_up(
        major,
        Tool::PgBackRest(Repo::new("catch-up-pgbackrest")?),
        false,
    )
}

fn barman_cloud_catch_up(major: PgMajor) -> Result<()> {
    archive_catch_up(major, barman_cloud(major, "catch-up")?, false)
}

fn pgbackrest_catch_up_lost_slot(major: PgMajor) -> Result<()> {
    archive_catch_up(major, Tool::PgBackRest(Repo::new("catch-up-lost")?), true)
}

fn barman_cloud_catch_up_lost_slot(major: PgMajor) -> Result<()> {
    archive_catch_up(major, barman_cloud(major, "catch-up-lost")?, true)
}

/// An `object_store` pass waiting for the archive (the opt-in's segment
/// is not archived yet, and nothing ends it) holds up no `base_backup`
/// load: each mode has its own pass. Before, the `base_backup` table
/// waited behind it for as long as the source wrote no segment's worth.
fn waiting_pass_holds_up_nothing(major: PgMajor) -> Result<()> {
    let tool = Tool::PgBackRest(Repo::new(&format!("os-waits-pg{}", major.number()))?);
    let mut h = harness(
        major,
        &tool,
        "object-store-waits",
        "backup_checkpoint = \"fast\"",
        source_options(),
    )?;
    h.source.psql(
        "create table a (id int primary key, v text);
         create table b (id int primary key, v text);
         insert into a select g, 'a' || g from generate_series(1, 200) g;
         insert into b select g, 'b' || g from generate_series(1, 300) g;",
    )?;
    tool.backup(&h, true)?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'a', true, 'object_store');")?;
    let mut error = String::new();
    wait_until(
        CATCH_UP,
        "the object_store pass to wait for the archive",
        || {
            h.check_running()?;
            error = entry(&h, "public.a", "error")?
                .and_then(|e| e.as_str().map(str::to_owned))
                .unwrap_or_default();
            Ok(error.contains("does not hold WAL segment"))
        },
    )
    .with_context(|| tail_of(&h.run_log()))?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'b', true, 'base_backup');")?;
    wait_loaded(&mut h, "public.b").with_context(|| tail_of(&h.run_log()))?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("public.b", "b", &[same("id"), same("v")])? == 300);
    // The archive catches up: the waiting pass goes on.
    switch_and_archive(&h.source)?;
    wait_loaded(&mut h, "public.a")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("public.a", "a", &[same("id"), same("v")])? == 200);
    Ok(())
}

/// No staging table is left in the destination's database.
fn no_staging_left(h: &StreamHarness) -> Result<()> {
    let left = count(
        h,
        "SELECT count() FROM system.tables WHERE database = 'app' AND name LIKE '%__wsstg'",
    )?;
    ensure!(left == 0, "{left} staging tables left behind");
    Ok(())
}

fn tail_of(log: &str) -> String {
    common::tail(log, 40)
}

/// The text of `field=…` in the last log line containing `message`.
fn logged_text(log: &str, message: &str, field: &str) -> Option<String> {
    let line = log.lines().rev().find(|l| l.contains(message))?;
    let at = line.find(&format!("{field}="))? + field.len() + 1;
    Some(
        line.get(at..)?
            .split(|c: char| c.is_whitespace())
            .next()?
            .to_owned(),
    )
}

per_major!(pgbackrest_load => a_pgbackrest_load_replays_the_gap_and_costs_the_source_nothing: pg15);
per_major!(pgbackrest_s3_load => a_bundled_pgbackrest_repository_on_s3_serves_the_same_load: pg15);
per_major!(store_lost_mid_walk => a_pass_that_loses_its_store_resumes_and_publishes_once: pg15);
per_major!(interrupted_pass_resumes => an_interrupted_pass_resumes_from_what_staging_holds: pg15);
per_major!(backup_below_logical => a_gap_that_began_below_wal_level_logical_is_refused: pg15);
per_major!(walg_load => a_walg_load_replays_the_gap_and_costs_the_source_nothing: pg15, pg18);
per_major!(barman_cloud_load => a_barman_cloud_load_replays_the_gap_and_costs_the_source_nothing: pg15, pg18);
per_major!(pgbackrest_catch_up => the_stream_catches_up_from_a_pgbackrest_archive: pg15);
per_major!(barman_cloud_catch_up => the_stream_catches_up_from_a_barman_cloud_archive: pg15, pg18);
per_major!(pgbackrest_catch_up_lost_slot => an_invalidated_slot_is_created_again_and_the_archive_bridges: pg15);
per_major!(barman_cloud_catch_up_lost_slot => an_invalidated_slot_is_created_again_from_barman_cloud: pg18);
per_major!(archive_across_promotion => the_stream_catches_up_from_the_archive_across_a_promotion: pg15, pg18);
per_major!(live_across_promotion => the_stream_follows_a_promoted_standby_across_its_switch: pg18);
per_major!(waiting_pass_holds_up_nothing => a_waiting_object_store_pass_holds_up_no_base_backup: pg15);
