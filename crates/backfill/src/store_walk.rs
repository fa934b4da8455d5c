//! A stored backup's files into the page walk: the same [`PageWalkSink`]
//! a `BASE_BACKUP` feeds, fed file by file from the store, and only the
//! files the walk keeps are read.
//!
//! ```text
//!  pgBackRest manifest ─▶ pg_data/<path>            ─▶ the data directory's archive
//!                         pg_tblspc/<oid>/<path>    ─▶ tablespace <oid>'s archive
//!      each file: PageWalkSink::begin_file ─ Keep ─▶ read ahead into scratch
//!                                                    (through diff/incr references,
//!                                                    decompressed as it arrives, size
//!                                                    and SHA-1 checked) ─▶ file_data
//!                                                    in 1 MiB chunks ─▶ end_file
//!                                          └ Skip ─▶ never read
//!  landed (init --bootstrap): <state>/bootstrap/data/<path>, tablespaces/<oid>/<path>
//!      ─▶ each file offered to the walk, the kept ones read where they lie
//!  barman-cloud base/<id>/data.tar[.gz|.bz2], <oid>.tar,
//!  wal-g basebackups_005/<name>/tar_partitions/*.tar[.lz4|.zst] ─▶ downloaded
//!      into the pass's scratch, read front to back: each file offered to the
//!      walk (a leading `/` of wal-g's member names dropped), the kept ones'
//!      bytes handed on
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use futures::StreamExt;
use walshadow_backup_store::barman_cloud::BackupTar;
use walshadow_backup_store::landed::{Landed, LandedFile};
use walshadow_backup_store::{Backup, BackupStore, Compression, Repository, StoreError};
use walshadow_types::Oid;
use walshadow_wal_reader::replication::{
    ArchiveInfo, BackupSink, EntryKind, FileAction, SinkError, TarEntry,
};

use crate::attempts::AttemptError;
use crate::walk_sink::{PageConsumer, PageWalkSink};

/// Why a stored backup could not be walked.
#[derive(Debug, thiserror::Error)]
pub enum StoreWalkError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The walk's own error (a page, the consumer, ClickHouse).
    #[error("{0}")]
    Sink(SinkError),
    #[error("{what}: {remedy}")]
    Unsupported { what: String, remedy: String },
    /// The pass's scratch files (the spill directory's disk).
    #[error(
        "the pass's scratch file {path}: {source}; check the spill directory's disk (space, permissions)"
    )]
    Scratch {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl StoreWalkError {
    /// As an attempt's failure: a store that does not answer (or a
    /// ClickHouse that does not, under the walk) is waited out.
    pub(crate) fn into_attempt(self) -> AttemptError {
        let waits = match &self {
            StoreWalkError::Store(e) => e.is_transient(),
            StoreWalkError::Sink(e) => crate::backup::sink_waits(e.as_ref()),
            StoreWalkError::Unsupported { .. } => false,
            // The environment's: waited out until the operator frees space.
            StoreWalkError::Scratch { .. } => true,
        };
        AttemptError::of(waits, self)
    }
}

/// Walks `backup`'s files through `sink`, reading up to `parallelism`
/// files of a pgBackRest backup at once; returns the bytes read from the
/// store.
pub async fn walk<C: PageConsumer + Send>(
    store: &BackupStore,
    backup: &Backup,
    sink: &mut PageWalkSink<C>,
    scratch: &Path,
    parallelism: usize,
) -> Result<u64, StoreWalkError> {
    let s = match store {
        BackupStore::PgBackRest(s) => s,
        BackupStore::BarmanCloud(b) => {
            let tars = b.backup_tars(&backup.label).await?;
            return walk_tars(b.repository(), tars, sink, scratch).await;
        }
        BackupStore::WalG(w) => {
            let tars = w.backup_tars(&backup.label).await?;
            return walk_tars(w.repository(), tars, sink, scratch).await;
        }
        BackupStore::Landed(l) => return walk_landed(l, sink).await,
    };
    let manifest = s.manifest(&backup.label).await?;
    // Archive (None: the data directory) → (path in it, manifest path, size).
    let mut archives: BTreeMap<Option<Oid>, Vec<(String, &str, u64)>> = BTreeMap::new();
    for (path, file) in &manifest.files {
        if let Some(rel) = path.strip_prefix("pg_data/") {
            archives
                .entry(None)
                .or_default()
                .push((rel.to_owned(), path, file.size));
        } else if let Some((spc, rel)) = path
            .strip_prefix("pg_tblspc/")
            .and_then(|p| p.split_once('/'))
            && let Ok(spc) = spc.parse::<Oid>()
        {
            archives
                .entry(Some(spc))
                .or_default()
                .push((rel.to_owned(), path, file.size));
        }
    }
    // pg_xact and pg_multixact first: the gate then decides the tuples of
    // the pages after them at once, where deferring them would hold a
    // segment's rows back until the walk's end (and keep an interrupted
    // pass from recording the segment as done).
    if let Some(base) = archives.get_mut(&None) {
        base.sort_by_key(|(p, _, _)| crate::walk_sink::SlruKind::of(p).is_none());
    }
    // The kept files land here as they are read ahead, decompressed.
    let dir = scratch.join("files");
    std::fs::create_dir_all(&dir).map_err(|e| local_error(&dir, e))?;
    let mut read = 0u64;
    for info in in_sending_order(&archives) {
        let spcoid = info.spcoid;
        sink.begin_archive(&info)
            .await
            .map_err(StoreWalkError::Sink)?;
        // The walk keeps files by name alone: the kept ones are read
        // `parallelism` at a time ahead of the walk, and handed on in order.
        let files = archives.get(&spcoid).map_or(&[][..], Vec::as_slice);
        let wanted: Vec<bool> = files.iter().map(|(p, _, _)| sink.wants(&info, p)).collect();
        let manifest = &manifest;
        // Collected before any await: iterator closures held across one
        // make the future not `Send`.
        let mut ahead = Vec::new();
        for (i, ((_, manifest_path, _), w)) in files.iter().zip(&wanted).enumerate() {
            if *w {
                let dest = dir.join(format!("{}-{i}", spcoid.unwrap_or(0)));
                ahead.push(async move {
                    s.fetch_file(manifest, manifest_path, &dest)
                        .await
                        .map(|size| (dest, size))
                });
            }
        }
        let mut reads = futures::stream::iter(ahead).buffered(parallelism.max(1));
        for ((path, manifest_path, size), want) in files.iter().zip(&wanted) {
            let action = offer(sink, &info, path, *size).await?;
            let content = match (want, action) {
                (false, FileAction::Skip) => continue,
                (true, FileAction::Keep) => reads.next().await,
                // The read ahead for a file the walk then skipped.
                (true, FileAction::Skip) => {
                    reads.next().await;
                    continue;
                }
                (false, FileAction::Keep) => {
                    return Err(StoreWalkError::Unsupported {
                        what: format!("{manifest_path}: kept by the walk but not read ahead"),
                        remedy: "report it (a walshadow bug)".into(),
                    });
                }
            };
            let (local, size) = content.ok_or_else(|| StoreWalkError::Unsupported {
                what: format!("{manifest_path}: the read ahead ended early"),
                remedy: "report it (a walshadow bug)".into(),
            })??;
            read += size;
            hand_on(&local, sink).await?;
            let _ = std::fs::remove_file(&local);
            sink.end_file().await.map_err(StoreWalkError::Sink)?;
        }
        sink.end_archive(&info)
            .await
            .map_err(StoreWalkError::Sink)?;
    }
    Ok(read)
}

/// Offers a stored file to the walk as the tar member it was in the backup.
async fn offer<C: PageConsumer + Send>(
    sink: &mut PageWalkSink<C>,
    info: &ArchiveInfo,
    path: &str,
    size: u64,
) -> Result<FileAction, StoreWalkError> {
    let entry = TarEntry {
        path: path.to_owned(),
        size,
        kind: EntryKind::File,
        mode: 0o600,
        mtime: 0,
    };
    sink.begin_file(info, &entry)
        .await
        .map_err(StoreWalkError::Sink)
}

/// The archives of files grouped by tablespace (`None`: the data
/// directory), tablespaces first and the data directory last: as
/// `BASE_BACKUP` sends them, the walk ends with the data directory's.
fn in_sending_order<T>(archives: &BTreeMap<Option<Oid>, T>) -> Vec<ArchiveInfo> {
    let mut order: Vec<_> = archives.keys().copied().filter(Option::is_some).collect();
    order.push(None);
    order
        .into_iter()
        .map(|spcoid| ArchiveInfo {
            name: spcoid.map_or("base.tar".to_owned(), |o| format!("{o}.tar")),
            spcoid,
            location: None,
        })
        .collect()
}

/// A landed backup's members, read where `init --bootstrap` left them:
/// the tablespaces' archives, then the data directory's, with `pg_xact` and
/// `pg_multixact` first in it (see [`walk`]).
async fn walk_landed<C: PageConsumer + Send>(
    landed: &Landed,
    sink: &mut PageWalkSink<C>,
) -> Result<u64, StoreWalkError> {
    let mut archives: BTreeMap<Option<Oid>, Vec<LandedFile>> = BTreeMap::new();
    for f in landed.files()? {
        archives.entry(f.tablespace).or_default().push(f);
    }
    if let Some(base) = archives.get_mut(&None) {
        base.sort_by_key(|f| crate::walk_sink::SlruKind::of(&f.path).is_none());
    }
    let mut read = 0u64;
    for info in in_sending_order(&archives) {
        let spcoid = info.spcoid;
        sink.begin_archive(&info)
            .await
            .map_err(StoreWalkError::Sink)?;
        for f in archives.get(&spcoid).map_or(&[][..], Vec::as_slice) {
            if offer(sink, &info, &f.path, f.size).await? == FileAction::Skip {
                continue;
            }
            hand_on(&f.local, sink).await?;
            read += f.size;
            sink.end_file().await.map_err(StoreWalkError::Sink)?;
        }
        sink.end_archive(&info)
            .await
            .map_err(StoreWalkError::Sink)?;
    }
    Ok(read)
}

/// A kept file's bytes, from its local copy, to the walk in
/// [`TAR_CHUNK`]s.
async fn hand_on<C: PageConsumer + Send>(
    local: &Path,
    sink: &mut PageWalkSink<C>,
) -> Result<(), StoreWalkError> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::File::open(local)
        .await
        .map_err(|e| local_error(local, e))?;
    loop {
        let mut chunk = vec![0u8; TAR_CHUNK];
        let mut filled = 0;
        while filled < chunk.len() {
            let Some(rest) = chunk.get_mut(filled..) else {
                break;
            };
            let n = file.read(rest).await.map_err(|e| local_error(local, e))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        if filled == 0 {
            return Ok(());
        }
        chunk.truncate(filled);
        sink.file_data(Bytes::from(chunk))
            .await
            .map_err(StoreWalkError::Sink)?;
        if filled < TAR_CHUNK {
            return Ok(());
        }
    }
}

fn local_error(path: &Path, source: std::io::Error) -> StoreWalkError {
    StoreWalkError::Scratch {
        path: path.to_owned(),
        source,
    }
}

/// What the tar reader (a blocking thread) tells the walk.
enum TarMsg {
    /// A regular file starts; the walk answers whether it keeps it.
    File {
        path: String,
        size: u64,
        keep: tokio::sync::oneshot::Sender<bool>,
    },
    Data(Bytes),
    End,
}

/// Bytes handed to the walk at a time.
const TAR_CHUNK: usize = 1 << 20;

/// barman-cloud and wal-g: each tar of the backup downloaded into `scratch` (a
/// tar is only readable front to back, and the store is not a stream to
/// hold open through the walk's inserts), read by a blocking thread,
/// its kept files handed to the walk in 1 MiB chunks.
async fn walk_tars<C: PageConsumer + Send>(
    repo: &Repository,
    tars: Vec<BackupTar>,
    sink: &mut PageWalkSink<C>,
    scratch: &Path,
) -> Result<u64, StoreWalkError> {
    let mut read = 0u64;
    // The data directory's archive ends once, after its last tar (wal-g
    // spreads it over several partitions).
    let base_tars = tars.iter().filter(|t| t.tablespace.is_none()).count();
    let mut base_seen = 0;
    for tar in tars {
        let local = scratch.join("backup.tar");
        read += repo.download(&tar.key, &local).await?;
        let info = ArchiveInfo {
            name: tar
                .tablespace
                .map_or("base.tar".to_owned(), |o| format!("{o}.tar")),
            spcoid: tar.tablespace,
            location: None,
        };
        sink.begin_archive(&info)
            .await
            .map_err(StoreWalkError::Sink)?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<TarMsg>(4);
        let compression = tar.compression;
        let key = tar.key.clone();
        let reader = tokio::task::spawn_blocking(move || read_tar(&local, compression, &tx));
        let mut failure = None;
        while let Some(msg) = rx.recv().await {
            let step = match msg {
                TarMsg::File { path, size, keep } => {
                    let entry = TarEntry {
                        path,
                        size,
                        kind: EntryKind::File,
                        mode: 0o600,
                        mtime: 0,
                    };
                    sink.begin_file(&info, &entry).await.map(|action| {
                        // The reader is gone only if it failed: it says why.
                        let _ = keep.send(matches!(action, FileAction::Keep));
                    })
                }
                TarMsg::Data(chunk) => sink.file_data(chunk).await,
                TarMsg::End => sink.end_file().await,
            };
            if let Err(e) = step {
                failure = Some(e);
                break;
            }
        }
        drop(rx);
        let r = reader.await.map_err(|e| StoreWalkError::Unsupported {
            what: format!("reading {key}"),
            remedy: e.to_string(),
        })?;
        if let Some(e) = failure {
            return Err(StoreWalkError::Sink(e));
        }
        r.map_err(|reason| {
            StoreWalkError::Store(walshadow_backup_store::StoreError::Malformed {
                store: repo.name().to_owned(),
                path: key.clone(),
                reason,
            })
        })?;
        if tar.tablespace.is_none() {
            base_seen += 1;
        }
        if tar.tablespace.is_some() || base_seen == base_tars {
            sink.end_archive(&info)
                .await
                .map_err(StoreWalkError::Sink)?;
        }
    }
    Ok(read)
}

/// Reads the tar at `path` (blocking), offering each regular file to the
/// walk and sending the kept ones' bytes. Stops quietly when the walk
/// hangs up (it failed and says why).
fn read_tar(
    path: &Path,
    compression: Compression,
    tx: &tokio::sync::mpsc::Sender<TarMsg>,
) -> Result<(), String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let reader = compression
        .reader(std::io::BufReader::new(file))
        .map_err(|e| e.to_string())?;
    let mut archive = tar::Archive::new(reader);
    let entries = archive.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path().map_err(|e| e.to_string())?;
        let name = name.to_string_lossy();
        let name = name
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_owned();
        let size = entry.size();
        let (keep, answer) = tokio::sync::oneshot::channel();
        let offered = TarMsg::File {
            path: name,
            size,
            keep,
        };
        if tx.blocking_send(offered).is_err() {
            return Ok(());
        }
        match answer.blocking_recv() {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return Ok(()),
        }
        let mut left = size;
        while left > 0 {
            let mut chunk = vec![0u8; TAR_CHUNK.min(usize::try_from(left).unwrap_or(TAR_CHUNK))];
            entry
                .read_exact(&mut chunk)
                .map_err(|e| format!("a member ends early: {e}"))?;
            left -= chunk.len() as u64;
            if tx.blocking_send(TarMsg::Data(Bytes::from(chunk))).is_err() {
                return Ok(());
            }
        }
        if tx.blocking_send(TarMsg::End).is_err() {
            return Ok(());
        }
    }
    Ok(())
}
