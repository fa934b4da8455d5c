//! The feeder against a raw protocol client and against real standbys (PostgreSQL 15
//! and 18).
//!
//! The standby drill: a source cluster; `pg_basebackup -X none` of it into a new data
//! directory; the source's WAL segments copied into a [`SegmentStore`]; the backup
//! configured as a standby whose `primary_conninfo` is the feeder's socket (no
//! `restore_command`, no WAL of its own), started. It must stream, replay and report, so
//! `wait_for_replay` returns; more WAL copied in is replayed within the idle-lag target;
//! a restarted standby reconnects at a segment start and gets byte-identical WAL.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use walshadow_shadow::feeder::{Feeder, FeederConfig};
use walshadow_shadow::segment_store::{CreateOptions, SegmentStore, segment_file_name};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, ServerUser, WorkDir, wait_until};
use walshadow_types::Lsn;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Copies the source's WAL from its pg_wal (timeline 1) into the store up to `upto`.
fn copy_wal(source_wal: &Path, store: &SegmentStore, upto: Lsn) -> Result<()> {
    let seg = u64::from(store.segment_size());
    let mut buf = Vec::new();
    while store.written_end() < upto {
        let pos = store.written_end();
        let segno = pos.0 / seg;
        let offset = pos.0 % seg;
        let n = (upto.0 - pos.0).min(seg - offset);
        let name = segment_file_name(1, segno, store.segment_size());
        let f = std::fs::File::open(source_wal.join(&name))
            .with_context(|| format!("opening source segment {name}"))?;
        buf.resize(usize::try_from(n)?, 0);
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, offset)
            .with_context(|| format!("reading source segment {name}"))?;
        store.append(pos, &buf)?;
    }
    store.flush()?;
    Ok(())
}

/// The oldest segment in a pg_wal directory on timeline 1.
fn oldest_segment(wal: &Path, seg_size: u32) -> Result<u64> {
    let per_id = 0x1_0000_0000u64 / u64::from(seg_size);
    let mut best = None;
    for e in std::fs::read_dir(wal)? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if name.len() == 24
            && name.starts_with("00000001")
            && name.bytes().all(|b| b.is_ascii_hexdigit())
        {
            let hi = u64::from_str_radix(&name[8..16], 16)?;
            let lo = u64::from_str_radix(&name[16..24], 16)?;
            let segno = hi * per_id + lo;
            best = Some(best.map_or(segno, |b: u64| b.min(segno)));
        }
    }
    best.context("no WAL segment in the source's pg_wal")
}

/// The end of the last record before the source's insert position, as a standby's replay
/// position reports it: the insert position points past a page header when it sits at a
/// page start, the end of the record before it does not.
fn replay_target(insert: Lsn, seg_size: u32) -> Lsn {
    if insert.0 % u64::from(seg_size) == 40 {
        Lsn(insert.0 - 40)
    } else if insert.0 % 8192 == 24 {
        Lsn(insert.0 - 24)
    } else {
        insert
    }
}

/// A standby made from a `-X none` base backup, fed only by the feeder.
struct Standby<'a> {
    source: &'a Cluster,
    dir: PathBuf,
    port: u16,
    running: bool,
}

impl<'a> Standby<'a> {
    fn create(
        source: &'a Cluster,
        work: &WorkDir,
        feeder_sock: &Path,
        feeder_port: u16,
    ) -> Result<Self> {
        let dir = work.path.join("standby");
        let sock = work.sub("standby-sock")?;
        let out = source
            .pg_command("pg_basebackup")
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-X", "none", "-c", "fast", "--no-sync", "-h"])
            .arg(source.socket_dir())
            .args(["-p", &source.port().to_string(), "-U", source.superuser()])
            .stdin(Stdio::null())
            .output()
            .context("running pg_basebackup")?;
        ensure!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Port only names the socket file: no TCP for the standby.
        let port = 20000 + (std::process::id() % 20000) as u16;
        let data = dir.join("data");
        write_owned(
            &data.join("walshadow.local.conf"),
            &format!(
                "port = {port}\nunix_socket_directories = '{}'\nlisten_addresses = ''\n",
                sock.display()
            ),
        )?;
        write_owned(&data.join("standby.signal"), "")?;
        let mut auto = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.auto.conf"))?;
        writeln!(
            auto,
            "primary_conninfo = 'host={} port={feeder_port} user=shadow application_name=shadow'\n\
             wal_retrieve_retry_interval = '200ms'\n\
             restore_command = ''",
            feeder_sock.display()
        )?;
        Ok(Standby {
            source,
            dir,
            port,
            running: false,
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("standby.log")).unwrap_or_default()
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<()> {
        let out = self
            .source
            .pg_command("pg_ctl")
            .args(args)
            .arg("-D")
            .arg(self.data())
            .stdin(Stdio::null())
            .output()
            .context("running pg_ctl")?;
        if !out.status.success() {
            bail!(
                "pg_ctl {args:?} failed: {}\nstandby log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                self.log()
            );
        }
        Ok(())
    }

    fn start(&mut self) -> Result<()> {
        let log = self.dir.join("standby.log");
        self.pg_ctl(&["start", "-w", "-t", "120", "-l", &log.to_string_lossy()])?;
        self.running = true;
        Ok(())
    }

    fn stop(&mut self) -> Result<()> {
        self.pg_ctl(&["stop", "-m", "fast", "-w", "-t", "60"])?;
        self.running = false;
        Ok(())
    }

    fn query(&self, sql: &str) -> Result<String> {
        let out = self
            .source
            .pg_command("psql")
            .args(["-X", "-q", "-A", "-t", "-h"])
            .arg(self.dir.join("..").join("standby-sock"))
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                self.source.superuser(),
                "-d",
                "postgres",
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()?;
        ensure!(
            out.status.success(),
            "psql on the standby: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?.trim().to_owned())
    }
}

impl Drop for Standby<'_> {
    fn drop(&mut self) {
        if self.running {
            let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        }
    }
}

fn write_owned(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents)?;
    let user = ServerUser::get()?;
    if user.switches_user {
        std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid))?;
    }
    Ok(())
}

fn drill(major: PgMajor) -> Result<()> {
    let source = Cluster::start(major, ClusterOptions::default())?;
    source.psql("create table t (id int primary key, v text); insert into t select g, 'v' || g from generate_series(1, 1000) g")?;
    let seg_size = source.wal_segment_size();
    let sysid: u64 = source
        .query_one("select system_identifier from pg_control_system()")?
        .parse()?;
    let server_version = source.query_one("show server_version")?;

    let work = WorkDir::new(&format!("feeder-pg{}", major.number()))?;
    let feeder_sock = work.sub("feeder")?;
    let feeder_port = 5432;
    let first = oldest_segment(&source.wal_dir(), seg_size)?;
    let store = Arc::new(SegmentStore::create(
        work.path.join("store"),
        CreateOptions {
            segment_size: seg_size,
            tli: 1,
            start: Lsn(first * u64::from(seg_size)),
            history: None,
        },
    )?);

    let mut standby = Standby::create(&source, &work, &feeder_sock, feeder_port)?;
    // WAL up to after the backup's end, then the standby can become consistent.
    let target = replay_target(source.insert_lsn()?, seg_size);
    wait_until(Duration::from_secs(30), "the source to flush", || {
        Ok(source.flush_lsn()? >= target)
    })?;
    copy_wal(&source.wal_dir(), &store, source.flush_lsn()?)?;

    let rt = runtime();
    let feeder = rt.block_on(Feeder::start(
        FeederConfig::new(&feeder_sock, feeder_port, sysid, server_version),
        Arc::clone(&store),
    ))?;
    standby.start()?;
    let applied = rt
        .block_on(feeder.wait_for_replay(target, Duration::from_secs(60)))
        .with_context(|| format!("standby log:\n{}", standby.log()))?;
    eprintln!(
        "pg{}: standby replayed to {applied} (target {target})",
        major.number()
    );
    assert_eq!(standby.query("select count(*) from t")?, "1000");
    let status = feeder.status().borrow().clone();
    assert!(status.connected);
    assert_eq!(status.application_name.as_deref(), Some("shadow"));
    let (tli, first_start) = *status
        .streams
        .first()
        .context("no START_REPLICATION seen")?;
    assert_eq!(tli, 1);
    assert_eq!(
        first_start.0 % u64::from(seg_size),
        0,
        "start {first_start} is not a segment start"
    );

    // Idle lag: bytes durable in the store → the standby reports them applied.
    let mut lags = Vec::new();
    for i in 0..20 {
        source.psql(&format!("insert into t values ({}, 'lag')", 2000 + i))?;
        let target = replay_target(source.insert_lsn()?, seg_size);
        wait_until(Duration::from_secs(30), "the source to flush", || {
            Ok(source.flush_lsn()? >= target)
        })?;
        copy_wal(&source.wal_dir(), &store, source.flush_lsn()?)?;
        let durable = Instant::now();
        rt.block_on(feeder.wait_for_replay(target, Duration::from_secs(30)))
            .with_context(|| format!("standby log:\n{}", standby.log()))?;
        lags.push(durable.elapsed());
    }
    lags.sort();
    let median = lags[lags.len() / 2];
    let max = *lags.last().context("no lag samples")?;
    eprintln!(
        "pg{}: idle replay lag over {} commits: min {:?} median {median:?} max {max:?}",
        major.number(),
        lags.len(),
        lags[0]
    );
    // The figure is printed, not asserted: speed targets belong in
    // benchmarks, and this machine is shared.
    assert_eq!(standby.query("select count(*) from t")?, "1020");

    // Several segments' worth of WAL, streamed while the standby runs.
    source.psql("insert into t select g, repeat('w', 200) from generate_series(10000, 59999) g")?;
    let target = replay_target(source.insert_lsn()?, seg_size);
    wait_until(Duration::from_secs(30), "the source to flush", || {
        Ok(source.flush_lsn()? >= target)
    })?;
    copy_wal(&source.wal_dir(), &store, source.flush_lsn()?)?;
    rt.block_on(feeder.wait_for_replay(target, Duration::from_secs(60)))
        .with_context(|| format!("standby log:\n{}", standby.log()))?;
    assert_eq!(standby.query("select count(*) from t")?, "51020");

    // Restart: the standby comes back, asks from a segment start, and catches up.
    standby.stop()?;
    let streams_before = feeder.status().borrow().streams.len();
    source.psql("insert into t select g, 'after restart' from generate_series(3000, 3999) g")?;
    let target = replay_target(source.insert_lsn()?, seg_size);
    wait_until(Duration::from_secs(30), "the source to flush", || {
        Ok(source.flush_lsn()? >= target)
    })?;
    copy_wal(&source.wal_dir(), &store, source.flush_lsn()?)?;
    standby.start()?;
    rt.block_on(feeder.wait_for_replay(target, Duration::from_secs(60)))
        .with_context(|| format!("standby log:\n{}", standby.log()))?;
    assert_eq!(standby.query("select count(*) from t")?, "52020");
    let status = feeder.status().borrow().clone();
    ensure!(
        status.streams.len() > streams_before,
        "no new START_REPLICATION after restart: {status:?}"
    );
    let (_, restart_start) = *status.streams.last().context("no stream")?;
    assert_eq!(
        restart_start.0 % u64::from(seg_size),
        0,
        "restart at {restart_start}"
    );
    eprintln!(
        "pg{}: restarted standby resumed at {restart_start}",
        major.number()
    );

    // What the standby received is byte-identical to the source's WAL, from the segment
    // start it asked for up to the store's end.
    let end = store.flushed_end();
    let segno = restart_start.0 / u64::from(seg_size);
    let name = segment_file_name(1, segno, seg_size);
    let upto = usize::try_from((end.0 - restart_start.0).min(u64::from(seg_size)))?;
    let mut ours = vec![0u8; upto];
    let mut theirs = vec![0u8; upto];
    std::fs::File::open(standby.data().join("pg_wal").join(&name))?.read_exact(&mut ours)?;
    std::fs::File::open(source.wal_dir().join(&name))?.read_exact(&mut theirs)?;
    assert!(
        ours == theirs,
        "standby's {name} differs from the source's in its first {upto} bytes"
    );

    standby.stop()?;
    let log = standby.log();
    let problems: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("ERROR") || l.contains("FATAL") || l.contains("PANIC"))
        .filter(|l| !l.contains("terminating walreceiver process due to administrator command"))
        // A client session still closing when the fast stop began.
        .filter(|l| !l.contains("terminating connection due to administrator command"))
        .collect();
    if std::env::var_os("WALSHADOW_SHOW_STANDBY_LOG").is_some() {
        eprintln!("standby log:\n{log}");
    }
    ensure!(
        problems.is_empty(),
        "the standby logged problems:\n{}",
        problems.join("\n")
    );
    rt.block_on(feeder.shutdown());
    Ok(())
}

#[test]
fn feeds_a_real_standby_pg15() -> Result<()> {
    drill(PgMajor::V15)
}

#[test]
fn feeds_a_real_standby_pg18() -> Result<()> {
    drill(PgMajor::V18)
}

// ---- a raw protocol client, no PostgreSQL needed ----

struct Raw {
    s: UnixStream,
}

impl Raw {
    fn connect(path: &Path) -> Result<Raw> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Raw { s })
    }

    fn send(&mut self, tag: u8, body: &[u8]) -> Result<()> {
        let mut m = vec![tag];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        self.s.write_all(&m)?;
        Ok(())
    }

    fn query(&mut self, q: &str) -> Result<()> {
        let mut b = q.as_bytes().to_vec();
        b.push(0);
        self.send(b'Q', &b)
    }

    fn recv(&mut self) -> Result<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.s.read_exact(&mut head)?;
        let len = u32::from_be_bytes(head[1..5].try_into()?) as usize;
        let mut body = vec![0u8; len - 4];
        self.s.read_exact(&mut body)?;
        Ok((head[0], body))
    }

    /// Messages up to and including the next one with `tag`.
    fn until(&mut self, tag: u8) -> Result<Vec<(u8, Vec<u8>)>> {
        let mut out = Vec::new();
        loop {
            let m = self.recv()?;
            let done = m.0 == tag;
            out.push(m);
            if done {
                return Ok(out);
            }
        }
    }

    fn startup(&mut self) -> Result<Vec<(u8, Vec<u8>)>> {
        // SSLRequest first, as libpq with sslmode=prefer over TCP would.
        self.s.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f])?;
        let mut n = [0u8; 1];
        self.s.read_exact(&mut n)?;
        ensure!(&n == b"N", "SSLRequest answered {n:?}");
        let mut body = 0x0003_0000u32.to_be_bytes().to_vec();
        for s in [
            "user",
            "x",
            "replication",
            "true",
            "application_name",
            "raw",
            "",
        ] {
            body.extend_from_slice(s.as_bytes());
            body.push(0);
        }
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(&body);
        self.s.write_all(&m)?;
        self.until(b'Z')
    }
}

/// The text of column `i` of the first DataRow in `msgs`.
fn cell(msgs: &[(u8, Vec<u8>)], i: usize) -> Option<Vec<u8>> {
    let (_, d) = msgs.iter().find(|(t, _)| *t == b'D')?;
    let mut pos = 2;
    for col in 0..=i {
        let len = i32::from_be_bytes(d.get(pos..pos + 4)?.try_into().ok()?);
        pos += 4;
        if col == i {
            return (len >= 0).then(|| d[pos..pos + len as usize].to_vec());
        }
        pos += len.max(0) as usize;
    }
    None
}

#[test]
fn raw_protocol_and_end_of_timeline() -> Result<()> {
    const SEG: u32 = 1 << 20;
    let dir = std::env::temp_dir().join(format!("walshadow-feeder-raw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let store = Arc::new(SegmentStore::create(
        dir.join("store"),
        CreateOptions {
            segment_size: SEG,
            tli: 1,
            start: Lsn(u64::from(SEG)),
            history: None,
        },
    )?);
    let wal: Vec<u8> = (0..(SEG as usize + 300_000))
        .map(|i| (i * 7 % 253) as u8)
        .collect();
    store.append(Lsn(u64::from(SEG)), &wal)?;
    let switch = Lsn(u64::from(SEG) * 2 + 100_000);
    store.switch_timeline(
        2,
        switch,
        format!("1\t{switch}\tno recovery target specified\n").as_bytes(),
    )?;

    let rt = runtime();
    let feeder = rt.block_on(Feeder::start(
        FeederConfig::new(&dir, 7777, 7_000_000_000_000_000_001, "18.1"),
        Arc::clone(&store),
    ))?;
    let mut c = Raw::connect(feeder.socket_path())?;
    let hello = c.startup()?;
    let tags: Vec<u8> = hello.iter().map(|m| m.0).collect();
    ensure!(
        tags.first() == Some(&b'R') && tags.contains(&b'S') && tags.contains(&b'K'),
        "startup {tags:?}"
    );
    ensure!(
        hello
            .iter()
            .any(|(t, b)| *t == b'S' && b.starts_with(b"server_version\x0018.1\x00")),
        "no server_version"
    );

    // A second standby is turned away while one is connected.
    let mut other = Raw::connect(feeder.socket_path())?;
    let refused = other.startup();
    ensure!(
        refused.is_err()
            || refused
                .as_ref()
                .is_ok_and(|m| m.iter().any(|x| x.0 == b'E'))
    );

    c.query("IDENTIFY_SYSTEM")?;
    let r = c.until(b'Z')?;
    assert_eq!(cell(&r, 0).as_deref(), Some(&b"7000000000000000001"[..]));
    assert_eq!(cell(&r, 1).as_deref(), Some(&b"2"[..]));
    assert_eq!(cell(&r, 2), Some(switch.to_string().into_bytes()));
    assert_eq!(cell(&r, 3), None);

    c.query("TIMELINE_HISTORY 2")?;
    let r = c.until(b'Z')?;
    assert_eq!(cell(&r, 0).as_deref(), Some(&b"00000002.history"[..]));
    assert_eq!(cell(&r, 1), store.history(2)?);

    c.query("SHOW wal_segment_size")?;
    let r = c.until(b'Z')?;
    assert_eq!(cell(&r, 0).as_deref(), Some(&b"1MB"[..]));

    for bad in [
        "SHOW nope",
        "SELECT 1",
        "BASE_BACKUP",
        "START_REPLICATION 0/1 TIMELINE 9",
    ] {
        c.query(bad)?;
        let r = c.until(b'Z')?;
        ensure!(r.iter().any(|m| m.0 == b'E'), "{bad} gave no error");
    }

    // Old timeline 1 from a segment start: bytes up to the switch point, then the end.
    c.query(&format!(
        "START_REPLICATION SLOT \"s\" PHYSICAL {} TIMELINE 1",
        Lsn(2 * u64::from(SEG))
    ))?;
    let (w, _) = c.recv()?;
    assert_eq!(w, b'W');
    let mut got = Vec::new();
    let mut next = 2 * u64::from(SEG);
    loop {
        let (t, body) = c.recv()?;
        match (t, body.first()) {
            (b'd', Some(b'w')) => {
                let start = u64::from_be_bytes(body[1..9].try_into()?);
                let wal_end = u64::from_be_bytes(body[9..17].try_into()?);
                assert_eq!(start, next, "gap in the stream");
                assert!(
                    wal_end <= switch.0,
                    "walEnd {wal_end:X} past what is stored"
                );
                got.extend_from_slice(&body[25..]);
                next += (body.len() - 25) as u64;
                assert!(body.len() - 25 <= 128 * 1024);
            }
            (b'd', Some(b'k')) => {}
            (b'c', _) => break,
            other => bail!("unexpected {other:?}"),
        }
    }
    assert_eq!(next, switch.0);
    assert!(
        got == wal[SEG as usize..SEG as usize + 100_000],
        "timeline 1 bytes differ"
    );
    c.send(b'c', &[])?;
    let r = c.until(b'Z')?;
    assert_eq!(cell(&r, 0).as_deref(), Some(&b"2"[..]));
    assert_eq!(cell(&r, 1), Some(switch.to_string().into_bytes()));
    let completes = r.iter().filter(|m| m.0 == b'C').count();
    assert_eq!(completes, 2, "START_STREAMING and START_REPLICATION");

    // Timeline 2 from the switch segment's start: the copied prefix, byte-identical.
    c.query(&format!(
        "START_REPLICATION {} TIMELINE 2",
        Lsn(2 * u64::from(SEG))
    ))?;
    let (w, _) = c.recv()?;
    assert_eq!(w, b'W');
    let mut got = Vec::new();
    while got.len() < 100_000 {
        let (t, body) = c.recv()?;
        if t == b'd' && body.first() == Some(&b'w') {
            got.extend_from_slice(&body[25..]);
        }
    }
    assert!(got == wal[SEG as usize..SEG as usize + 100_000]);
    // A status report reaches the positions watch.
    let mut r = vec![b'r'];
    for v in [switch.0, switch.0, switch.0 - 8, 0] {
        r.extend_from_slice(&v.to_be_bytes());
    }
    r.push(0);
    c.send(b'd', &r)?;
    let applied = rt.block_on(feeder.wait_for_replay(Lsn(switch.0 - 8), Duration::from_secs(5)))?;
    assert_eq!(applied, Lsn(switch.0 - 8));
    let timeout = rt.block_on(feeder.wait_for_replay(switch, Duration::from_millis(50)));
    ensure!(timeout.is_err());
    // Garbage inside the copy closes the connection, without a panic.
    c.send(b'd', b"r\x00\x01")?;
    let mut rest = Vec::new();
    let _ = c.s.read_to_end(&mut rest);
    drop(c);

    // The next standby is admitted once the first is gone.
    let mut c = Raw::connect(feeder.socket_path())?;
    wait_until(
        Duration::from_secs(5),
        "the feeder to free its slot",
        || Ok(!feeder.status().borrow().connected),
    )?;
    c.startup()?;
    c.send(b'X', &[])?;

    rt.block_on(feeder.shutdown());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
