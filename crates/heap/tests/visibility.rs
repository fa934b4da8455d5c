//! The visibility gate against real PostgreSQL 15 and 18: workloads that
//! leave dead, aborted, locked, multixact-updated and in-progress tuple
//! versions on the pages, a `pg_basebackup -Ft` taken with transactions
//! still open, then every line-pointer-normal tuple of the backup's heap
//! file through the gate, fed from the backup's own `pg_xact` and
//! `pg_multixact`. The emitted ctids must equal `SELECT ctid` run while
//! those transactions are still open; everything else must be dropped,
//! directly or after deferral.
//!
//! Each table is gated twice: heap pages before the SLRU files (every
//! unhinted tuple defers) and after them.
//!
//! - `gate_matches_sql_*`: three tables with the same workload: one read
//!   afterwards (hint bits set), one `VACUUM FREEZE`d, one never read
//!   before the backup (hint bits unset).
//! - `multixact_wraparound_*`: `pg_resetwal` moves the next xid to
//!   `pg_xact` segment 3 and the next member offset to 256 slots before
//!   2^32, so real multixacts' members wrap around, in segments 14078 and
//!   0000; the backup's file names prove the short segment naming on both
//!   majors. Then the same files damaged (a segment lost, members garbage
//!   or cut short, last pages torn): errors, never a panic or a verdict.
//! - `multixact_newer_than_the_copy_*`: `pg_xact`/`pg_multixact` read from
//!   the data directory, then multixact updates commit, then the heap file
//!   is read (a walk that copies the SLRU files before a table): the gate
//!   emits the old versions (counted) and equals `SELECT` as of the copy.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use anyhow::{Context, Result, bail, ensure};
use walshadow_heap::visibility::{
    DeferredSpool, Gate, GateCounters, HEAP_MOVED, HEAP_XMAX_INVALID, HEAP_XMAX_IS_MULTI,
    HEAP_XMIN_FROZEN, HEAP_XMIN_INVALID, MultiXacts, SpoolConfig, TupleHeader, Verdict, XactLog,
    heap_xmax_is_locked_only,
};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, ServerUser, WorkDir};

const BLCKSZ: usize = 8192;

/// `(block, line pointer)`.
type Ctid = (u32, u16);

// ---------------------------------------------------------------------------
// A minimal heap page reader (page header and line pointers, bufpage.h /
// itemid.h); the walk's real parser lives in heap_page.rs.

/// Every `LP_NORMAL` tuple of a heap file with its ctid.
fn heap_tuples(file: &[u8]) -> Result<Vec<(Ctid, Vec<u8>)>> {
    ensure!(
        file.len().is_multiple_of(BLCKSZ),
        "heap file is not whole pages"
    );
    let mut out = Vec::new();
    for (block, page) in file.chunks(BLCKSZ).enumerate() {
        let pd_lower = usize::from(u16::from_le_bytes([page[12], page[13]]));
        let pd_upper = usize::from(u16::from_le_bytes([page[14], page[15]]));
        if pd_upper == 0 {
            continue;
        }
        ensure!((24..=BLCKSZ).contains(&pd_lower), "bad pd_lower {pd_lower}");
        for (i, lp) in page[24..pd_lower].chunks_exact(4).enumerate() {
            let v = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]);
            let (off, flags, len) = ((v & 0x7fff) as usize, (v >> 15) & 3, (v >> 17) as usize);
            if flags != 1 {
                continue;
            }
            let tuple = page
                .get(off..off + len)
                .context("line pointer past the page")?;
            out.push(((block as u32, i as u16 + 1), tuple.to_vec()));
        }
    }
    Ok(out)
}

fn parse_ctid(s: &str) -> Result<Ctid> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .with_context(|| format!("ctid {s:?}"))?;
    let (b, o) = inner.split_once(',').context("ctid")?;
    Ok((b.parse()?, o.parse()?))
}

// ---------------------------------------------------------------------------
// Interactive psql sessions: transactions that stay open across statements
// of other sessions.

struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    marks: u32,
}

impl Session {
    fn open(c: &Cluster) -> Result<Session> {
        let mut cmd = c.pg_command("psql");
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(c.socket_dir())
            .args([
                "-p",
                &c.port().to_string(),
                "-U",
                c.superuser(),
                "-d",
                "postgres",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().context("starting psql")?;
        let stdin = child.stdin.take().context("psql stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("psql stdout")?);
        Ok(Session {
            child,
            stdin: Some(stdin),
            stdout,
            marks: 0,
        })
    }

    /// Runs `sql` and waits until psql has answered all of it (an `\echo`
    /// after it comes back); returns its output lines.
    fn run(&mut self, sql: &str) -> Result<Vec<String>> {
        self.marks += 1;
        let mark = format!("__walshadow_mark_{}", self.marks);
        let stdin = self.stdin.as_mut().context("session closed")?;
        write!(stdin, "{sql}\n\\echo {mark}\n")?;
        stdin.flush()?;
        let mut out = Vec::new();
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("psql ended (an error?) while running:\n{sql}");
            }
            let line = line.trim_end().to_owned();
            if line == mark {
                return Ok(out);
            }
            out.push(line);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // End of input: psql exits and the server rolls back what is open.
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------
// The backup.

/// `pg_basebackup -Ft -X none` of the cluster; returns base.tar's members
/// under `pg_xact/`, `pg_multixact/` and the given relation paths.
fn base_backup(c: &Cluster, tag: &str, rel_paths: &[String]) -> Result<BTreeMap<String, Vec<u8>>> {
    let work = WorkDir::new(tag)?;
    let dir = work.path().join("bb");
    let out = c
        .pg_command("pg_basebackup")
        .arg("-D")
        .arg(&dir)
        .args(["-Ft", "-X", "none", "-c", "fast", "--no-sync", "-h"])
        .arg(c.socket_dir())
        .args(["-p", &c.port().to_string(), "-U", c.superuser()])
        .output()
        .context("running pg_basebackup")?;
    ensure!(
        out.status.success(),
        "pg_basebackup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tar = std::fs::File::open(dir.join("base.tar")).context("base.tar")?;
    let mut archive = tar::Archive::new(tar);
    let mut files = BTreeMap::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let keep = path.starts_with("pg_xact/")
            || path.starts_with("pg_multixact/offsets/")
            || path.starts_with("pg_multixact/members/")
            || rel_paths.contains(&path);
        if keep && entry.header().entry_type().is_file() {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes)?;
            files.insert(path, bytes);
        }
    }
    for p in rel_paths {
        ensure!(files.contains_key(p), "{p} not in the backup");
    }
    Ok(files)
}

fn slru_files(files: &BTreeMap<String, Vec<u8>>) -> Vec<(&str, &[u8])> {
    files
        .iter()
        .filter(|(p, _)| p.starts_with("pg_"))
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect()
}

// ---------------------------------------------------------------------------
// Running the gate as the walk will: tuples as pages come, SLRU files
// before or after them, deferred tuples through a small spool (so it
// spills), resolved after the walk.

struct GateRun {
    emitted: BTreeSet<Ctid>,
    counters: GateCounters,
    spilled: u64,
}

/// `nextXid`, `nextMulti`, `nextMultiOffset` read before the copy.
type Bounds = Option<(u32, u32, u32)>;

fn run_gate(
    slru: &[(&str, &[u8])],
    tuples: &[(Ctid, Vec<u8>)],
    slru_first: bool,
    spill_dir: &Path,
    bounds: Bounds,
) -> Result<GateRun> {
    let mut gate = Gate::new(XactLog::new(), MultiXacts::new());
    if let Some((xid, multi, offset)) = bounds {
        gate.xact_mut().set_next_xid(xid);
        gate.multi_mut().set_next(multi, offset);
    }
    let add = |gate: &mut Gate| -> Result<()> {
        for (path, bytes) in slru {
            ensure!(
                gate.add_backup_file(path, bytes.to_vec())?,
                "{path} is not an SLRU segment"
            );
        }
        Ok(())
    };
    if slru_first {
        add(&mut gate)?;
    }
    let mut spool = DeferredSpool::open(SpoolConfig {
        memory_budget_bytes: 512,
        spill_dir: spill_dir.to_path_buf(),
    })?;
    let by_ctid: BTreeMap<Ctid, &Vec<u8>> = tuples.iter().map(|(c, t)| (*c, t)).collect();
    let mut emitted = BTreeSet::new();
    for (ctid, tuple) in tuples {
        let h = TupleHeader::parse(tuple)?;
        match gate.decide(&h)? {
            Verdict::Emit => {
                emitted.insert(*ctid);
            }
            Verdict::Drop(_) => {}
            Verdict::Defer => {
                // The payload: the ctid, then the tuple bytes.
                let mut payload = ctid.0.to_le_bytes().to_vec();
                payload.extend_from_slice(&ctid.1.to_le_bytes());
                payload.extend_from_slice(tuple);
                spool.push(&h, &payload)?;
            }
        }
    }
    if !slru_first {
        add(&mut gate)?;
    }
    let spilled = spool.spilled_bytes();
    let mut walked = gate.finish_walk();
    spool.resolve(&mut walked, |t| -> Result<()> {
        let p = &t.payload;
        let ctid = (
            u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
            u16::from_le_bytes([p[4], p[5]]),
        );
        ensure!(
            by_ctid
                .get(&ctid)
                .is_some_and(|orig| orig.as_slice() == &p[6..]),
            "deferred tuple {ctid:?} came back changed"
        );
        ensure!(TupleHeader::parse(&p[6..])? == t.header);
        emitted.insert(ctid);
        Ok(())
    })?;
    let counters = walked.counters();
    ensure!(counters.walked == tuples.len() as u64);
    ensure!(counters.deferred == counters.deferred_emitted + counters.deferred_dropped);
    ensure!(counters.emitted == emitted.len() as u64);
    ensure!(counters.emitted + counters.gated == counters.walked);
    Ok(GateRun {
        emitted,
        counters,
        spilled,
    })
}

/// What a table's tuples carry, to prove the workload reached each path.
#[derive(Debug, Default)]
struct Shape {
    tuples: usize,
    xmin_unhinted: usize,
    xmin_invalid: usize,
    frozen: usize,
    xmax_unhinted_deleter: usize,
    xmax_committed_hint: usize,
    multi_updater: usize,
    multi_lock_only: usize,
}

fn shape(tuples: &[(Ctid, Vec<u8>)]) -> Result<Shape> {
    let mut s = Shape::default();
    for (_, t) in tuples {
        let h = TupleHeader::parse(t)?;
        let im = h.infomask;
        ensure!(im & HEAP_MOVED == 0);
        s.tuples += 1;
        match im & HEAP_XMIN_FROZEN {
            0 => s.xmin_unhinted += 1,
            HEAP_XMIN_FROZEN => s.frozen += 1,
            HEAP_XMIN_INVALID => s.xmin_invalid += 1,
            _ => {}
        }
        let xmax_hinted = im & (HEAP_XMAX_INVALID | 0x0400) != 0;
        if im & 0x0400 != 0 {
            s.xmax_committed_hint += 1;
        }
        if h.xmax != 0 && !xmax_hinted && !heap_xmax_is_locked_only(im) {
            if im & HEAP_XMAX_IS_MULTI != 0 {
                s.multi_updater += 1;
            } else {
                s.xmax_unhinted_deleter += 1;
            }
        }
        if h.xmax != 0 && im & HEAP_XMAX_IS_MULTI != 0 && heap_xmax_is_locked_only(im) {
            s.multi_lock_only += 1;
        }
    }
    Ok(s)
}

fn truth(c: &Cluster, table: &str) -> Result<BTreeSet<Ctid>> {
    c.psql(&format!("select ctid from {table}"))?
        .lines()
        .map(parse_ctid)
        .collect()
}

fn spill_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("walshadow-vis-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Gates `rel_path`'s tuples both ways and compares with `truth`.
fn check_table(
    files: &BTreeMap<String, Vec<u8>>,
    rel_path: &str,
    truth: &BTreeSet<Ctid>,
    tag: &str,
    bounds: Bounds,
) -> Result<(Shape, GateRun, GateRun)> {
    let tuples = heap_tuples(files.get(rel_path).context("relation file")?)?;
    let slru = slru_files(files);
    let dir = spill_dir(tag);
    let heap_first = run_gate(&slru, &tuples, false, &dir, bounds)?;
    let slru_first = run_gate(&slru, &tuples, true, &dir, bounds)?;
    let _ = std::fs::remove_dir_all(&dir);
    for (run, name) in [(&heap_first, "heap first"), (&slru_first, "pg_xact first")] {
        let extra: Vec<_> = run.emitted.difference(truth).collect();
        let missing: Vec<_> = truth.difference(&run.emitted).collect();
        ensure!(
            extra.is_empty() && missing.is_empty(),
            "{tag} ({name}): emitted but dead {extra:?}, live but not emitted {missing:?}"
        );
    }
    Ok((shape(&tuples)?, heap_first, slru_first))
}

/// `nextXid`, `nextMulti`, `nextMultiOffset` of the last checkpoint.
fn bounds(c: &Cluster) -> Result<Bounds> {
    let row = c.query_one(
        "select next_xid, next_multixact_id, next_multi_offset from pg_control_checkpoint()",
    )?;
    let mut f = row.split('|');
    let mut next = || f.next().context("pg_control_checkpoint() columns");
    // next_xid is epoch:xid.
    let xid = next()?.rsplit(':').next().context("next_xid")?.parse()?;
    let multi = next()?.parse()?;
    let offset = next()?.parse()?;
    Ok(Some((xid, multi, offset)))
}

fn rel_path(c: &Cluster, table: &str) -> Result<String> {
    c.query_one(&format!("select pg_relation_filepath('{table}')"))
}

// ---------------------------------------------------------------------------
// Workload.

fn create(c: &Cluster, t: &str) -> Result<()> {
    c.psql(&format!(
        "create table {t} (id int primary key, v text) with (autovacuum_enabled = off);
         insert into {t} select g, 'v' || g from generate_series(1, 40) g;"
    ))?;
    Ok(())
}

/// Closed transactions of every kind on `t`.
fn workload(c: &Cluster, s: &mut [Session; 6], t: &str) -> Result<()> {
    let [a, b, cc, d, e, f] = s;
    c.psql(&format!(
        "begin; insert into {t} values (100, 'aborted'), (101, 'aborted'); rollback;
         delete from {t} where id in (1, 2);
         begin; delete from {t} where id = 3; rollback;
         update {t} set v = 'updated' where id in (4, 5);
         begin; update {t} set v = 'not' where id = 6; rollback;
         begin; select id from {t} where id = 18 for update; commit;
         begin; insert into {t} values (400, 'gone'); delete from {t} where id = 400; commit;"
    ))?;
    // Locked FOR SHARE by two, then deleted / updated by one of them.
    a.run(&format!(
        "begin; select id from {t} where id in (7, 8, 9) for share;"
    ))?;
    b.run(&format!(
        "begin; select id from {t} where id in (7, 8, 9) for share; commit;"
    ))?;
    a.run(&format!(
        "delete from {t} where id = 7; update {t} set v = 'a' where id = 8; commit;"
    ))?;
    // The same, the updater rolling back.
    cc.run(&format!(
        "begin; select id from {t} where id in (10, 11) for share;"
    ))?;
    d.run(&format!(
        "begin; select id from {t} where id in (10, 11) for share; commit;"
    ))?;
    cc.run(&format!(
        "delete from {t} where id = 10; update {t} set v = 'c' where id = 11; rollback;"
    ))?;
    // Key-share lockers, updated by a third transaction (no key change).
    e.run(&format!(
        "begin; select id from {t} where id = 12 for key share;"
    ))?;
    f.run(&format!(
        "begin; select id from {t} where id = 12 for key share;"
    ))?;
    c.psql(&format!("update {t} set v = 'g' where id = 12"))?;
    e.run("commit;")?;
    f.run("commit;")?;
    // Subtransactions.
    c.psql(&format!(
        "begin;
         insert into {t} values (200, 's');
         savepoint s1; insert into {t} values (201, 's'); rollback to s1;
         savepoint s2; insert into {t} values (202, 's'); release s2;
         delete from {t} where id = 14;
         savepoint s3; delete from {t} where id = 15; rollback to s3;
         savepoint s4; update {t} set v = 's' where id = 19; release s4;
         commit;
         begin; savepoint a; insert into {t} values (210, 's'); release a; rollback;"
    ))?;
    // Last, unread: committed and aborted inserts, a delete.
    c.psql(&format!(
        "insert into {t} values (500, 'late'), (501, 'late');
         begin; insert into {t} values (502, 'late'); rollback;
         delete from {t} where id = 20;"
    ))?;
    Ok(())
}

/// Transactions left open across the backup, on every table.
fn open_at_copy(h: &mut Session, i: &mut Session, j: &mut Session, tables: &[&str]) -> Result<()> {
    h.run("begin;")?;
    i.run("begin;")?;
    j.run("begin;")?;
    for t in tables {
        h.run(&format!("select id from {t} where id = 13 for share;"))?;
        i.run(&format!("select id from {t} where id = 13 for share;"))?;
        j.run(&format!(
            "insert into {t} values (300, 'open');
             delete from {t} where id = 16;
             update {t} set v = 'open' where id = 17;
             savepoint x; insert into {t} values (301, 'open'); release x;
             savepoint y; delete from {t} where id = 21; rollback to y;"
        ))?;
    }
    Ok(())
}

fn sessions<const N: usize>(c: &Cluster) -> Result<[Session; N]> {
    let v: Vec<Session> = (0..N).map(|_| Session::open(c)).collect::<Result<_>>()?;
    v.try_into().map_err(|_| anyhow::anyhow!("sessions"))
}

fn gate_matches_sql(major: PgMajor) -> Result<()> {
    let c = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let tables = ["t_hinted", "t_frozen", "t_fresh"];
    for t in tables {
        create(&c, t)?;
    }
    let mut s = sessions::<6>(&c)?;
    workload(&c, &mut s, "t_hinted")?;
    workload(&c, &mut s, "t_frozen")?;
    // Hint bits: a read sets them for every finished transaction.
    c.psql("select count(*) from t_hinted; vacuum (freeze) t_frozen;")?;
    workload(&c, &mut s, "t_fresh")?;
    let [mut h, mut i, mut j] = sessions::<3>(&c)?;
    open_at_copy(&mut h, &mut i, &mut j, &tables)?;

    let paths: Vec<String> = tables
        .iter()
        .map(|t| rel_path(&c, t))
        .collect::<Result<_>>()?;
    let bounds = bounds(&c)?;
    let files = base_backup(&c, &format!("vis-{major:?}"), &paths)?;
    // The truth while the open transactions are still open.
    let truths: Vec<BTreeSet<Ctid>> = tables.iter().map(|t| truth(&c, t)).collect::<Result<_>>()?;
    for name in files.keys().filter(|p| p.starts_with("pg_")) {
        eprintln!("{major:?}: backup carried {name}");
    }

    for ((t, path), truth) in tables.iter().zip(&paths).zip(&truths) {
        let (sh, heap_first, slru_first) =
            check_table(&files, path, truth, &format!("{major:?}-{t}"), bounds)?;
        eprintln!(
            "{major:?} {t}: {} live of {sh:?}\n  heap first: {:?}, spilled {}\n  pg_xact first: {:?}",
            truth.len(),
            heap_first.counters,
            heap_first.spilled,
            slru_first.counters
        );
        ensure!(
            sh.tuples > truth.len(),
            "{t}: dead tuples must be on the pages"
        );
        let (hf, sf) = (heap_first.counters, slru_first.counters);
        ensure!(hf.gated > 0 && sf.gated > 0);
        ensure!(
            hf.multixact_emitted == 0 && sf.multixact_emitted == 0,
            "{t}: all copied"
        );
        // The open transaction's insert, and its subtransaction's, defer
        // and drop as not committed.
        ensure!(
            sf.deferred >= 2 && sf.not_committed_dropped >= 2,
            "{t}: {sf:?}"
        );
        ensure!(hf.deferred >= sf.deferred);
        // The open deleter's victim defers and emits.
        ensure!(sf.deferred_emitted >= 1, "{t}: {sf:?}");
        match *t {
            "t_fresh" => {
                ensure!(sh.xmin_unhinted >= 5, "{t}: {sh:?}");
                ensure!(sh.xmax_unhinted_deleter >= 3, "{t}: {sh:?}");
                ensure!(sh.multi_updater >= 3, "{t}: {sh:?}");
                ensure!(sh.multi_lock_only >= 1, "{t}: {sh:?}");
                ensure!(heap_first.spilled > 0, "{t}: the spool must spill");
                ensure!(
                    hf.deferred > sf.deferred,
                    "{t}: unhinted tuples defer when pg_xact comes last"
                );
            }
            "t_hinted" => {
                ensure!(sh.xmin_invalid >= 2, "{t}: {sh:?}");
                ensure!(sh.xmax_committed_hint >= 3, "{t}: {sh:?}");
                ensure!(sh.multi_updater >= 3, "{t}: {sh:?}");
            }
            _ => ensure!(sh.frozen >= 10, "{t}: {sh:?}"),
        }
    }
    drop((h, i, j));
    Ok(())
}

#[test]
fn gate_matches_sql_pg15() -> Result<()> {
    gate_matches_sql(PgMajor::V15)
}

#[test]
fn gate_matches_sql_pg18() -> Result<()> {
    gate_matches_sql(PgMajor::V18)
}

// ---------------------------------------------------------------------------
// Multixact members across the 2^32 wrap.

/// Creates a zero-filled SLRU segment file the server user owns.
fn zero_segment(c: &Cluster, rel: &str, bytes: usize) -> Result<()> {
    let path = c.data_dir().join(rel);
    std::fs::write(&path, vec![0u8; bytes]).with_context(|| path.display().to_string())?;
    let user = ServerUser::get()?;
    if user.switches_user {
        std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid))?;
    }
    Ok(())
}

fn multixact_wraparound(major: PgMajor) -> Result<()> {
    let mut c = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("autovacuum", "off")
            .conf("max_prepared_transactions", "4"),
    )?;
    c.stop()?;
    // Next xid 0x300005 (pg_xact segment 3), next multixact 0x120005
    // (offsets segment 0x12), next member offset 2^32 - 256 (members
    // page 2625285, the last, in segment 0x14078). The server reads the
    // current page of each at startup, so the files must exist.
    let out = c
        .pg_command("pg_resetwal")
        .args([
            "-x",
            "0x300005",
            "-m",
            "0x120005,0x120005",
            "-O",
            "0xFFFFFF00",
            "-D",
        ])
        .arg(c.data_dir())
        .output()?;
    ensure!(
        out.status.success(),
        "pg_resetwal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    zero_segment(&c, "pg_xact/0003", 32 * BLCKSZ)?;
    zero_segment(&c, "pg_multixact/offsets/0012", 32 * BLCKSZ)?;
    zero_segment(&c, "pg_multixact/members/14078", 6 * BLCKSZ)?;
    c.restart()?;

    c.psql(
        "create table m (id int primary key, v text) with (autovacuum_enabled = off);
         insert into m select g, 'm' || g from generate_series(1, 140) g;",
    )?;
    // Member slots from 2^32 - 256, the lockers prepared so they stay
    // running while others lock or update:
    // - rows 1..=126: two FOR SHARE lockers, a lock-only multixact of 2
    //   members each (252 slots);
    // - row 127: two key-share lockers ({k1,k2}: 2 slots), then an update
    //   ({k1,k2,U}: slots 2^32-2, 2^32-1 and 0, the updater past the wrap);
    // - rows 128..=140: a key-share locker and an update ({k,U}), committed
    //   except 134..=139; the newest (140) has no next offset on disk.
    let mut sql = String::new();
    for i in 1..=126 {
        sql.push_str(&format!(
            "begin; select id from m where id = {i} for share; prepare transaction 'a{i}';
             begin; select id from m where id = {i} for share; prepare transaction 'b{i}';
             commit prepared 'a{i}'; commit prepared 'b{i}';\n"
        ));
    }
    sql.push_str(
        "begin; select id from m where id = 127 for key share; prepare transaction 'k1';
         begin; select id from m where id = 127 for key share; prepare transaction 'k2';
         update m set v = 'x' where id = 127;
         commit prepared 'k1'; commit prepared 'k2';\n",
    );
    for i in 128..=140 {
        let update = if (134..=139).contains(&i) {
            format!("begin; update m set v = 'x' where id = {i}; rollback;")
        } else {
            format!("update m set v = 'x' where id = {i};")
        };
        sql.push_str(&format!(
            "begin; select id from m where id = {i} for key share; prepare transaction 'k{i}';
             {update}
             commit prepared 'k{i}';\n"
        ));
    }
    c.psql(&sql)?;
    c.checkpoint()?;
    let bounds = bounds(&c)?;
    let path = rel_path(&c, "m")?;
    let files = base_backup(
        &c,
        &format!("vis-wrap-{major:?}"),
        std::slice::from_ref(&path),
    )?;
    let live = truth(&c, "m")?;
    eprintln!(
        "{major:?}: next xid, multixact, member offset before the backup {bounds:?}; backup SLRU files: {:?}",
        files
            .keys()
            .filter(|p| p.starts_with("pg_"))
            .collect::<Vec<_>>()
    );
    for name in [
        "pg_xact/0003",
        "pg_multixact/offsets/0012",
        "pg_multixact/members/14078",
    ] {
        ensure!(
            files.contains_key(name),
            "{major:?}: {name} not in the backup"
        );
    }
    // Members written past the wrap, at the start of segment 0000.
    let wrapped = files
        .get("pg_multixact/members/0000")
        .context("members/0000")?;
    ensure!(
        wrapped[4..20].iter().any(|b| *b != 0),
        "{major:?}: no member xid written after the wrap"
    );

    let (sh, heap_first, slru_first) =
        check_table(&files, &path, &live, &format!("wrap-{major:?}"), bounds)?;
    eprintln!(
        "{major:?} m: {sh:?}\n  heap first: {:?}\n  pg_xact first: {:?}",
        heap_first.counters, slru_first.counters
    );
    ensure!(live.len() == 140);
    ensure!(sh.multi_updater == 14, "{sh:?}");
    ensure!(sh.multi_lock_only >= 126, "{sh:?}");
    // 8 updates committed (their old versions gate), 6 rolled back (their
    // new versions gate); nothing was pruned.
    ensure!(slru_first.counters.gated == 14, "{:?}", slru_first.counters);
    ensure!(heap_first.counters.gated == 14, "{:?}", heap_first.counters);
    ensure!(slru_first.counters.multixact_emitted == 0);

    hostile_slru(&files, &path, bounds, major)
}

/// The backup's real files damaged: every case an error, none a panic.
fn hostile_slru(
    files: &BTreeMap<String, Vec<u8>>,
    rel_path: &str,
    bounds: Bounds,
    major: PgMajor,
) -> Result<()> {
    let tuples = heap_tuples(&files[rel_path])?;
    let dir = spill_dir(&format!("hostile-{major:?}"));
    type Damage = fn(&mut BTreeMap<String, Vec<u8>>);
    let cases: [(&str, Damage, Bounds, &str); 5] = [
        (
            "pg_xact/0003 lost",
            |f| drop(f.remove("pg_xact/0003")),
            bounds,
            "was lost on the way",
        ),
        (
            "offsets/0012 lost",
            |f| drop(f.remove("pg_multixact/offsets/0012")),
            bounds,
            "was lost on the way",
        ),
        (
            "members garbage",
            |f| {
                for (p, b) in f.iter_mut() {
                    if p.starts_with("pg_multixact/members/") {
                        b.fill(0xFF);
                    }
                }
            },
            None,
            "not a status",
        ),
        (
            "members 14078 cut short",
            |f| {
                if let Some(b) = f.get_mut("pg_multixact/members/14078") {
                    b.truncate(100);
                }
            },
            None,
            "precedes the oldest pg_multixact/members page",
        ),
        (
            "pg_multixact cut mid-page",
            |f| {
                for (p, b) in f.iter_mut() {
                    if p.starts_with("pg_multixact/") {
                        let n = b.len();
                        b.truncate(n.saturating_sub(8192) + 77);
                    }
                }
            },
            bounds,
            "was lost on the way",
        ),
    ];
    for (what, damage, bounds, expect) in cases {
        let mut damaged = files.clone();
        damage(&mut damaged);
        let slru = slru_files(&damaged);
        for slru_first in [false, true] {
            match run_gate(&slru, &tuples, slru_first, &dir, bounds) {
                Ok(run) => bail!("{major:?} {what}: no error ({:?})", run.counters),
                Err(e) => ensure!(format!("{e:#}").contains(expect), "{major:?} {what}: {e:#}"),
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn multixact_wraparound_pg15() -> Result<()> {
    multixact_wraparound(PgMajor::V15)
}

#[test]
fn multixact_wraparound_pg18() -> Result<()> {
    multixact_wraparound(PgMajor::V18)
}

// ---------------------------------------------------------------------------
// Multixacts recorded after pg_multixact was copied: a walk may copy the
// SLRU files before a heap file that changes later. Here the SLRU files
// are read from the data directory first, then multixact updates commit,
// then the heap file is read.

/// The data directory's SLRU files, as `(path, bytes)` keyed by path.
fn read_slru(c: &Cluster) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for dir in ["pg_xact", "pg_multixact/offsets", "pg_multixact/members"] {
        for e in std::fs::read_dir(c.data_dir().join(dir))? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            out.insert(format!("{dir}/{name}"), std::fs::read(e.path())?);
        }
    }
    Ok(out)
}

fn multixact_newer_than_the_copy(major: PgMajor) -> Result<()> {
    let c = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    create(&c, "n")?;
    let [mut a, mut b, mut cc, mut d] = sessions::<4>(&c)?;
    // Before the copy: row 1 locked by two, updated by one.
    a.run("begin; select id from n where id = 1 for share;")?;
    b.run("begin; select id from n where id = 1 for share; commit;")?;
    a.run("update n set v = 'before' where id = 1; commit;")?;
    c.checkpoint()?;
    let bounds = bounds(&c)?;
    let mut files = read_slru(&c)?;
    let before = truth(&c, "n")?;

    // After the copy: the same on rows 2 (update) and 3 (delete), row 4's
    // updater rolls back, row 5 is deleted plainly, 600 inserted.
    a.run("begin; select id from n where id in (2, 3, 4) for share;")?;
    b.run("begin; select id from n where id in (2, 3, 4) for share; commit;")?;
    a.run("update n set v = 'after' where id = 2; delete from n where id = 3; commit;")?;
    cc.run("begin; select id from n where id = 4 for share;")?;
    d.run("begin; select id from n where id = 4 for share; commit;")?;
    cc.run("update n set v = 'after' where id = 4; rollback;")?;
    c.psql("delete from n where id = 5; insert into n values (600, 'after');")?;
    c.checkpoint()?;
    let path = rel_path(&c, "n")?;
    files.insert(path.clone(), std::fs::read(c.data_dir().join(&path))?);

    let (sh, heap_first, slru_first) =
        check_table(&files, &path, &before, &format!("newer-{major:?}"), bounds)?;
    eprintln!(
        "{major:?} n: {sh:?}\n  heap first: {:?}\n  pg_xact first: {:?}",
        heap_first.counters, slru_first.counters
    );
    ensure!(sh.multi_updater >= 4, "{sh:?}");
    for run in [&heap_first, &slru_first] {
        // Rows 2, 3, 4: their multixacts are zeros in the copied page.
        ensure!(run.counters.multixact_emitted == 3, "{:?}", run.counters);
    }
    ensure!(!before.contains(&(0, 1)), "row 1's old version is dead");
    Ok(())
}

#[test]
fn multixact_newer_than_the_copy_pg15() -> Result<()> {
    multixact_newer_than_the_copy(PgMajor::V15)
}

#[test]
fn multixact_newer_than_the_copy_pg18() -> Result<()> {
    multixact_newer_than_the_copy(PgMajor::V18)
}
