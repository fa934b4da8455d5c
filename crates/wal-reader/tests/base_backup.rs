//! `ReplicationClient::base_backup` against real PostgreSQL 15 and 18 clusters
//! (walshadow-testkit). Every test runs once per major, each on its own cluster.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, ServerUser, wait_until};
use walshadow_wal_reader::replication::{
    ArchiveInfo, BackupResult, BackupSink, BaseBackupOptions, Checkpoint, ConnConfig, EntryKind,
    FileAction, ReplicationClient, ReplicationError, SinkError, TarEntry,
};

const MAJORS: [PgMajor; 4] = PgMajor::ALL;

fn cluster(major: PgMajor, opts: ClusterOptions) -> Cluster {
    // No autovacuum: the "quiet" tables must not change under the test.
    let opts = opts.conf("autovacuum", "off");
    Cluster::start(major, opts).unwrap_or_else(|e| panic!("starting PostgreSQL {major}: {e:#}"))
}

async fn connect(pg: &Cluster) -> ReplicationClient {
    let cfg = ConnConfig::from_url(&pg.url("postgres")).unwrap();
    ReplicationClient::connect(&cfg)
        .await
        .unwrap_or_else(|e| panic!("connecting: {e}"))
}

/// Blocking test-kit calls from inside the async tests.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn fast() -> BaseBackupOptions {
    BaseBackupOptions {
        label: "walshadow test".into(),
        checkpoint: Checkpoint::Fast,
        ..Default::default()
    }
}

/// What a sink saw of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: EntryKind,
    size: u64,
    action: FileAction,
    /// Bytes that reached `file_data`.
    data: u64,
}

type SkipFn = Box<dyn Fn(&ArchiveInfo, &TarEntry) -> bool + Send>;

/// Keeps (and writes under `root/<archive>/`) every member `skip` does not
/// claim; remembers everything it was shown.
struct DirSink {
    root: PathBuf,
    skip: SkipFn,
    /// archive name → path → what arrived.
    seen: BTreeMap<String, BTreeMap<String, Seen>>,
    current: Option<(String, String, std::fs::File)>,
    manifest: Vec<u8>,
    archives_ended: Vec<String>,
    progress: Vec<u64>,
    /// Fail the n-th `file_data` call (for the abort path).
    fail_at_data: Option<usize>,
    data_calls: usize,
}

impl DirSink {
    fn new(root: PathBuf) -> Self {
        DirSink {
            root,
            skip: Box::new(|_, _| false),
            seen: BTreeMap::new(),
            current: None,
            manifest: Vec::new(),
            archives_ended: Vec::new(),
            progress: Vec::new(),
            fail_at_data: None,
            data_calls: 0,
        }
    }

    fn archive(&self, name: &str) -> &BTreeMap<String, Seen> {
        self.seen
            .get(name)
            .unwrap_or_else(|| panic!("no archive {name}"))
    }

    fn restored(&self, archive: &str, path: &str) -> PathBuf {
        self.root.join(archive).join(path)
    }
}

impl BackupSink for DirSink {
    async fn begin_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
        assert!(
            self.seen
                .insert(archive.name.clone(), BTreeMap::new())
                .is_none()
        );
        Ok(())
    }

    async fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> Result<FileAction, SinkError> {
        assert!(self.current.is_none(), "begin_file inside a kept file");
        let action = if (self.skip)(archive, file) {
            FileAction::Skip
        } else {
            FileAction::Keep
        };
        let members = self
            .seen
            .get_mut(&archive.name)
            .expect("begin_archive first");
        let old = members.insert(
            file.path.clone(),
            Seen {
                kind: file.kind.clone(),
                size: file.size,
                action,
                data: 0,
            },
        );
        assert!(old.is_none(), "{} twice in {}", file.path, archive.name);
        if action == FileAction::Keep {
            let target = self.root.join(&archive.name).join(&file.path);
            match file.kind {
                EntryKind::Directory => std::fs::create_dir_all(&target)?,
                EntryKind::Symlink(_) => {}
                EntryKind::File => {
                    std::fs::create_dir_all(target.parent().unwrap())?;
                    let f = std::fs::File::create(&target)?;
                    self.current = Some((archive.name.clone(), file.path.clone(), f));
                }
            }
        }
        Ok(action)
    }

    async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        self.data_calls += 1;
        if self.fail_at_data == Some(self.data_calls) {
            return Err("disk full (simulated)".into());
        }
        let (archive, path, f) = self.current.as_mut().expect("file_data outside a file");
        f.write_all(&chunk)?;
        self.seen
            .get_mut(archive.as_str())
            .unwrap()
            .get_mut(path.as_str())
            .unwrap()
            .data += chunk.len() as u64;
        Ok(())
    }

    async fn end_file(&mut self) -> Result<(), SinkError> {
        if let Some((archive, path, f)) = self.current.take() {
            f.sync_all()?;
            let s = &self.seen[&archive][&path];
            assert_eq!(s.data, s.size, "{archive}/{path}: size from the header");
        }
        Ok(())
    }

    async fn end_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
        self.archives_ended.push(archive.name.clone());
        Ok(())
    }

    async fn manifest_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        self.manifest.extend_from_slice(&chunk);
        Ok(())
    }

    fn progress(&mut self, bytes_done: u64) {
        self.progress.push(bytes_done);
    }
}

/// Members of a directory tree as a base backup would send them
/// (sendDir in src/backend/backup/basebackup.c): paths relative to `root`.
fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, EntryKind>) {
    // Files the server never sends (excludeFiles), anywhere in the tree.
    const EXCLUDED_FILES: [&str; 7] = [
        "postgresql.auto.conf.tmp",
        "current_logfiles.tmp",
        "backup_label",
        "tablespace_map",
        "backup_manifest",
        "postmaster.pid",
        "postmaster.opts",
    ];
    // Directories sent empty (excludeDirContents).
    const EMPTY_DIRS: [&str; 7] = [
        "pg_stat_tmp",
        "pg_replslot",
        "pg_dynshmem",
        "pg_notify",
        "pg_serial",
        "pg_snapshots",
        "pg_subtrans",
    ];
    let dir = if rel.is_empty() {
        root.to_path_buf()
    } else {
        root.join(rel)
    };
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if EXCLUDED_FILES.contains(&name.as_str())
            || name.starts_with("pg_internal.init")
            || name.starts_with("pgsql_tmp")
        {
            continue;
        }
        let path = if rel.is_empty() {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(e.path()).unwrap();
            out.insert(path, EntryKind::Symlink(target.display().to_string()));
        } else if meta.is_dir() {
            out.insert(path.clone(), EntryKind::Directory);
            if path == "pg_wal" {
                // pg_wal is sent empty, plus archive_status (and, from 17,
                // summaries): the WAL itself comes from the stream.
                for sub in ["archive_status", "summaries"] {
                    if dir.join(&name).join(sub).is_dir() {
                        out.insert(format!("pg_wal/{sub}"), EntryKind::Directory);
                    }
                }
            } else if !EMPTY_DIRS.contains(&name.as_str()) {
                walk(root, &path, out);
            }
        } else {
            out.insert(path, EntryKind::File);
        }
    }
}

fn kinds(members: &BTreeMap<String, Seen>) -> BTreeMap<String, EntryKind> {
    members
        .iter()
        .map(|(p, s)| (p.clone(), s.kind.clone()))
        .collect()
}

/// Differences between two member lists, for assertion messages.
fn diff(a: &BTreeMap<String, EntryKind>, b: &BTreeMap<String, EntryKind>) -> String {
    let only_a: Vec<_> = a.iter().filter(|(k, v)| b.get(*k) != Some(v)).collect();
    let only_b: Vec<_> = b.iter().filter(|(k, v)| a.get(*k) != Some(v)).collect();
    format!("only in backup: {only_a:?}\nonly in data dir: {only_b:?}")
}

fn sql(pg: &Cluster, sql: &str) -> String {
    blocking(|| pg.psql(sql)).unwrap_or_else(|e| panic!("{sql}: {e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_streams_the_data_directory_file_by_file() {
    for major in MAJORS {
        let pg = blocking(|| cluster(major, ClusterOptions::default()));
        let ts_dir = pg.base_dir().join("ts1");
        ServerUser::get()
            .unwrap()
            .create_private_dir(&ts_dir)
            .unwrap();
        sql(
            &pg,
            &format!(
                "CREATE TABLESPACE ts1 LOCATION '{}';
                 CREATE TABLE quiet (id int PRIMARY KEY, v text);
                 INSERT INTO quiet SELECT g, repeat('q', 100) || g FROM generate_series(1, 20000) g;
                 CREATE TABLE in_ts (id int, v text) TABLESPACE ts1;
                 INSERT INTO in_ts SELECT g, 'ts' || g FROM generate_series(1, 1000) g;
                 VACUUM (FREEZE) quiet; VACUUM (FREEZE) in_ts; CHECKPOINT;",
                ts_dir.display()
            ),
        );
        let ts_oid: u32 = sql(&pg, "SELECT oid FROM pg_tablespace WHERE spcname = 'ts1'")
            .parse()
            .unwrap();
        let quiet_path = sql(&pg, "SELECT pg_relation_filepath('quiet')");
        let quiet_idx_path = sql(&pg, "SELECT pg_relation_filepath('quiet_pkey')");
        let in_ts_path = sql(&pg, "SELECT pg_relation_filepath('in_ts')");

        let mut c = connect(&pg).await;
        let out = pg.base_dir().join("backup1");
        let mut sink = DirSink::new(out.clone());
        let r: BackupResult = c.base_backup(&fast(), &mut sink).await.unwrap();

        // Positions and tablespaces.
        assert_eq!((r.start_tli, r.end_tli), (1, 1), "{major}");
        assert!(r.start_lsn.is_valid() && r.end_lsn >= r.start_lsn, "{r:?}");
        assert_eq!(r.tablespaces.len(), 2, "{major}: {:?}", r.tablespaces);
        assert_eq!(r.tablespaces[0].oid, Some(ts_oid));
        assert_eq!(
            r.tablespaces[0].location.as_deref(),
            Some(ts_dir.to_str().unwrap())
        );
        assert_eq!(r.tablespaces[1].oid, None, "the data directory comes last");
        assert_eq!(r.tablespaces[1].size_kb, None, "no sizes without PROGRESS");
        let names: Vec<_> = r.archives.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, [format!("{ts_oid}.tar").as_str(), "base.tar"]);
        assert_eq!(r.archives[0].spcoid, Some(ts_oid));
        assert_eq!(r.archives[0].location.as_deref(), ts_dir.to_str());
        assert!(r.archives[1].is_base() && r.archives[1].location.is_none());
        assert_eq!(sink.archives_ended, names);
        assert_eq!(r.files_skipped, 0);
        assert_eq!(
            r.files_kept,
            sink.seen.values().map(|m| m.len() as u64).sum::<u64>()
        );
        assert_eq!(r.server_bytes_done, Some(r.bytes_streamed), "{major}");
        assert_eq!(sink.progress.last(), Some(&r.bytes_streamed));
        assert!(sink.manifest.is_empty());

        // backup_label names this backup.
        let label = std::fs::read_to_string(sink.restored("base.tar", "backup_label")).unwrap();
        assert!(
            label.starts_with(&format!("START WAL LOCATION: {} (file ", r.start_lsn)),
            "{label}"
        );
        assert!(label.contains("LABEL: walshadow test\n"), "{label}");
        assert!(label.contains("BACKUP METHOD: streamed\n"), "{label}");

        // The member list is the data directory's, minus what basebackup.c excludes.
        let mut expected = BTreeMap::new();
        walk(&pg.data_dir(), "", &mut expected);
        expected.insert("backup_label".into(), EntryKind::File);
        let got = kinds(sink.archive("base.tar"));
        assert_eq!(got, expected, "{major}: {}", diff(&got, &expected));
        assert_eq!(
            got.get(&format!("pg_tblspc/{ts_oid}")),
            Some(&EntryKind::Symlink(ts_dir.display().to_string()))
        );
        let mut expected_ts = BTreeMap::new();
        walk(&ts_dir, "", &mut expected_ts);
        let got_ts = kinds(sink.archive(&format!("{ts_oid}.tar")));
        assert_eq!(
            got_ts,
            expected_ts,
            "{major}: {}",
            diff(&got_ts, &expected_ts)
        );

        // Relation files of quiet tables are byte-identical.
        let ts_rel = in_ts_path
            .strip_prefix(&format!("pg_tblspc/{ts_oid}/"))
            .unwrap()
            .to_owned();
        for (archive, path, on_disk) in [
            (
                "base.tar",
                quiet_path.clone(),
                pg.data_dir().join(&quiet_path),
            ),
            (
                "base.tar",
                format!("{quiet_path}_fsm"),
                pg.data_dir().join(format!("{quiet_path}_fsm")),
            ),
            (
                "base.tar",
                format!("{quiet_path}_vm"),
                pg.data_dir().join(format!("{quiet_path}_vm")),
            ),
            (
                "base.tar",
                quiet_idx_path.clone(),
                pg.data_dir().join(&quiet_idx_path),
            ),
            (
                "base.tar",
                "PG_VERSION".into(),
                pg.data_dir().join("PG_VERSION"),
            ),
            (
                &format!("{ts_oid}.tar"),
                ts_rel.clone(),
                ts_dir.join(&ts_rel),
            ),
        ] {
            let a = std::fs::read(sink.restored(archive, &path))
                .unwrap_or_else(|e| panic!("{major} {archive}/{path}: {e}"));
            let b = std::fs::read(&on_disk).unwrap();
            assert!(!b.is_empty(), "{path}");
            assert!(
                a == b,
                "{major} {archive}/{path} differs from {}",
                on_disk.display()
            );
        }

        // Again on the same connection: tablespace_map, manifest, progress.
        let out2 = pg.base_dir().join("backup2");
        let mut sink = DirSink::new(out2);
        let opts = BaseBackupOptions {
            tablespace_map: true,
            manifest: true,
            progress: true,
            ..fast()
        };
        let r2 = c.base_backup(&opts, &mut sink).await.unwrap();
        assert!(r2.start_lsn > r.start_lsn);
        assert!(
            r2.tablespaces.iter().all(|t| t.size_kb.is_some()),
            "{:?}",
            r2.tablespaces
        );
        let base = sink.archive("base.tar");
        assert!(!base.contains_key(&format!("pg_tblspc/{ts_oid}")));
        assert_eq!(
            base.get("pg_tblspc").map(|s| &s.kind),
            Some(&EntryKind::Directory)
        );
        let map = std::fs::read_to_string(sink.restored("base.tar", "tablespace_map")).unwrap();
        assert_eq!(map, format!("{ts_oid} {}\n", ts_dir.display()));
        let manifest = String::from_utf8(sink.manifest.clone()).unwrap();
        assert_eq!(r2.manifest_bytes, manifest.len() as u64);
        assert!(
            manifest.starts_with("{ \"PostgreSQL-Backup-Manifest-Version\""),
            "{manifest:.200}"
        );
        assert!(manifest.contains("\"Path\": \"backup_label\""));
        assert!(manifest.contains(&format!("\"Path\": \"{quiet_path}\"")));
        assert!(manifest.contains("\"Manifest-Checksum\""));

        // The connection is back in command mode.
        c.identify_system().await.unwrap();
        c.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_files_never_reach_the_sink() {
    const MARKER: &str = "SKIPPED-ROW-MARKER-7f3a";
    for major in MAJORS {
        let pg = blocking(|| cluster(major, ClusterOptions::default()));
        sql(
            &pg,
            &format!(
                "CREATE TABLE t (id int PRIMARY KEY, v text);
                 INSERT INTO t SELECT g, '{MARKER}' || g FROM generate_series(1, 50000) g;
                 CREATE TABLE kept (id int);
                 INSERT INTO kept SELECT generate_series(1, 100);
                 VACUUM t; CHECKPOINT;"
            ),
        );
        let db_oid = sql(
            &pg,
            "SELECT oid FROM pg_database WHERE datname = 'postgres'",
        );
        let node = sql(&pg, "SELECT pg_relation_filenode('t')");
        let kept_path = sql(&pg, "SELECT pg_relation_filepath('kept')");
        let prefix = format!("base/{db_oid}/{node}");
        let is_t = move |path: &str| {
            path.strip_prefix(&prefix).is_some_and(|rest| {
                rest.is_empty()
                    || rest.starts_with('.')
                    || ["_fsm", "_vm", "_init"].iter().any(|f| rest.starts_with(f))
            })
        };

        let mut c = connect(&pg).await;
        let mut sink = DirSink::new(pg.base_dir().join("backup"));
        let is_t2 = is_t.clone();
        sink.skip = Box::new(move |a, f| a.is_base() && is_t2(&f.path));
        let r = c.base_backup(&fast(), &mut sink).await.unwrap();

        let base = sink.archive("base.tar");
        let skipped: Vec<_> = base
            .iter()
            .filter(|(_, s)| s.action == FileAction::Skip)
            .collect();
        assert!(!skipped.is_empty(), "{major}: t's files were offered");
        assert!(skipped.iter().all(|(p, _)| is_t(p)));
        assert!(
            skipped.iter().any(|(_, s)| s.size > 1 << 20),
            "{major}: the main fork is big"
        );
        assert!(
            skipped.iter().all(|(_, s)| s.data == 0),
            "{major}: {skipped:?}"
        );
        assert_eq!(r.files_skipped, skipped.len() as u64);
        let skipped_bytes: u64 = skipped.iter().map(|(_, s)| s.size).sum();
        let kept_bytes: u64 = base.values().map(|s| s.data).sum();
        assert_eq!(r.bytes_kept, kept_bytes);
        assert!(r.bytes_streamed >= kept_bytes + skipped_bytes);
        assert!(base[&kept_path].data > 0 && base[&kept_path].action == FileAction::Keep);

        // No byte of t's rows reached the sink.
        for (path, s) in base {
            if s.kind == EntryKind::File && s.action == FileAction::Keep {
                let bytes = std::fs::read(sink.restored("base.tar", path)).unwrap();
                assert!(
                    !bytes.windows(MARKER.len()).any(|w| w == MARKER.as_bytes()),
                    "{major}: {path} holds t's rows"
                );
            }
        }
        c.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_timeouts_leave_the_connection_usable() {
    for major in MAJORS {
        let pg = blocking(|| cluster(major, ClusterOptions::default()));
        sql(
            &pg,
            "CREATE TABLE filler (id int, v text);
             INSERT INTO filler SELECT g, repeat('f', 200) FROM generate_series(1, 20000) g;",
        );
        let mut c = connect(&pg).await;
        let skip_all = |root: PathBuf| {
            let mut s = DirSink::new(root);
            s.skip = Box::new(|_, _| true);
            s
        };

        // Options checked before anything is sent.
        let e = c
            .base_backup(
                &BaseBackupOptions {
                    max_rate: Some(8),
                    ..fast()
                },
                &mut skip_all(pg.base_dir().join("x")),
            )
            .await
            .unwrap_err();
        assert!(matches!(e, ReplicationError::Config(_)), "{e}");

        // A server ErrorResponse: do_pg_backup_start refuses labels over
        // MAXPGPATH bytes (SQLSTATE 22023 invalid_parameter_value).
        let e = c
            .base_backup(
                &BaseBackupOptions {
                    label: "l".repeat(2000),
                    ..fast()
                },
                &mut skip_all(pg.base_dir().join("x")),
            )
            .await
            .unwrap_err();
        let db = e.db_error().unwrap_or_else(|| panic!("{major}: {e}"));
        assert_eq!(db.code, "22023", "{major}: {e}");
        assert!(db.message.contains("backup label too long"), "{e}");
        assert!(!e.is_transient());
        c.identify_system().await.unwrap();

        // The start (checkpoint) bound: cancelled, then usable again.
        sql(&pg, "UPDATE filler SET id = id + 1");
        let e = c
            .base_backup(
                &BaseBackupOptions {
                    checkpoint: Checkpoint::Spread,
                    start_timeout: Duration::from_millis(1),
                    ..fast()
                },
                &mut skip_all(pg.base_dir().join("x")),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, ReplicationError::CommandTimeout { .. }),
            "{major}: {e}"
        );
        assert!(e.is_transient());
        c.identify_system().await.unwrap();

        // MAX_RATE is obeyed, and a stall is noticed: at 32 kB/s the server
        // sleeps about a second after each 32 KiB message.
        let started = Instant::now();
        let mut sink = skip_all(pg.base_dir().join("x"));
        let e = c
            .base_backup(
                &BaseBackupOptions {
                    max_rate: Some(32),
                    idle_timeout: Duration::from_millis(400),
                    ..fast()
                },
                &mut sink,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(e, ReplicationError::Stalled { .. }),
            "{major}: {e}"
        );
        assert!(e.is_transient());
        assert!(started.elapsed() < Duration::from_secs(30));
        let received: u64 = sink.progress.last().copied().unwrap_or(0);
        assert!(
            received < 1 << 20,
            "{major}: throttled, yet {received} bytes"
        );
        c.identify_system().await.unwrap();

        // A failing sink cancels the backup; the server lets it go.
        let mut sink = DirSink::new(pg.base_dir().join("fail"));
        sink.fail_at_data = Some(3);
        let e = c.base_backup(&fast(), &mut sink).await.unwrap_err();
        match &e {
            ReplicationError::Sink { archive, path, .. } => {
                assert_eq!(archive, "base.tar");
                assert!(path.is_some());
            }
            other => panic!("{major}: {other}"),
        }
        assert!(e.to_string().contains("disk full (simulated)"), "{e}");

        // And a full backup (at the top MAX_RATE) still works on the same
        // connection: no backup was left running.
        let mut sink = skip_all(pg.base_dir().join("x"));
        let r = c
            .base_backup(
                &BaseBackupOptions {
                    max_rate: Some(1_048_576),
                    ..fast()
                },
                &mut sink,
            )
            .await
            .unwrap();
        assert_eq!(r.files_kept, 0);
        assert!(r.files_skipped > 500, "{r:?}");
        assert_eq!(r.bytes_kept, 0);
        let running = sql(&pg, "SELECT count(*) FROM pg_stat_progress_basebackup");
        assert_eq!(running, "0", "{major}: the cancelled backups ended");

        // A backup future dropped midway leaves the client poisoned, not
        // silently out of step with the server.
        let mut sink = skip_all(pg.base_dir().join("x"));
        let opts = BaseBackupOptions {
            max_rate: Some(32),
            ..fast()
        };
        let dropped =
            tokio::time::timeout(Duration::from_millis(300), c.base_backup(&opts, &mut sink)).await;
        assert!(dropped.is_err(), "{major}: finished at 32 kB/s?");
        let e = c.identify_system().await.unwrap_err();
        assert!(matches!(e, ReplicationError::Poisoned(_)), "{major}: {e}");
        c.close().await;
        // The walsender notices the closed socket at its next write.
        blocking(|| {
            wait_until(
                Duration::from_secs(60),
                "the abandoned backup to end",
                || Ok(pg.psql("SELECT count(*) FROM pg_stat_progress_basebackup")? == "0"),
            )
        })
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksum_failures_surface_after_the_data() {
    for major in MAJORS {
        let pg = blocking(|| cluster(major, ClusterOptions::default().data_checksums(true)));
        sql(
            &pg,
            "CREATE TABLE victim (id int, v text);
             INSERT INTO victim SELECT g, repeat('v', 50) FROM generate_series(1, 1000) g;
             CHECKPOINT;",
        );
        let path = pg
            .data_dir()
            .join(sql(&pg, "SELECT pg_relation_filepath('victim')"));
        // Damage page 0 on disk; its buffer is clean, so the server never
        // writes it back, and the backup reads the file.
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.write_all_at(b"\xde\xad\xbe\xef", 4000).unwrap();
            f.sync_all().unwrap();
        }
        let mut c = connect(&pg).await;

        let mut sink = DirSink::new(pg.base_dir().join("noverify"));
        sink.skip = Box::new(|_, _| true);
        c.base_backup(
            &BaseBackupOptions {
                verify_checksums: false,
                ..fast()
            },
            &mut sink,
        )
        .await
        .unwrap();

        let mut sink = DirSink::new(pg.base_dir().join("verify"));
        sink.skip = Box::new(|_, _| true);
        let e = c.base_backup(&fast(), &mut sink).await.unwrap_err();
        let db = e.db_error().unwrap_or_else(|| panic!("{major}: {e}"));
        assert_eq!(db.code, "XX001", "{major}: {e}"); // data_corrupted
        assert_eq!(
            sink.archives_ended,
            ["base.tar"],
            "{major}: the error comes after all archives"
        );
        c.identify_system().await.unwrap();
        c.close().await;
    }
}
