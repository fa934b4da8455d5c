//! [`ChunkMirror`]: the redb file, its tables and the rules of the crate doc.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{
    Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata,
    TableDefinition, TableError, WriteTransaction,
};
use walshadow_types::{Lsn, Oid};

use crate::error::MirrorError;
use crate::op::PendingOp;

/// `(toast_relid, value_id, chunk_seq)`.
pub(crate) type ChunkKey = (u32, u32, i32);
/// `(toast_relid, file, block, offset)`.
pub(crate) type TidKey = (u32, u32, u32, u16);
/// `(value_id, chunk_seq, insert_lsn)`.
pub(crate) type TidRow = (u32, i32, u64);

/// [`ChunkKey`] → `insert_lsn u64 LE ‖ chunk data`.
const CHUNKS: TableDefinition<ChunkKey, &[u8]> = TableDefinition::new("chunks");
/// [`TidKey`] → [`TidRow`].
const TIDS: TableDefinition<TidKey, TidRow> = TableDefinition::new("tids");
/// `(due, counter)` → encoded [`PendingOp`].
const PENDING: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("pending");
/// The pipeline's opaque blobs.
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");
/// Format version and the exact counters, committed with the data they count.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Bumped whenever a table's key or value layout changes.
const FORMAT_VERSION: u64 = 1;
const META_FORMAT: &str = "format_version";
const META_VALUES: &str = "values";
const META_CHUNKS: &str = "chunks";
const META_DATA_BYTES: &str = "data_bytes";
const META_SOURCE_VALUES: &str = "source_values";
const META_NEXT_PENDING: &str = "next_pending";

/// Bytes of the `insert_lsn` prefix of a `chunks` value.
const LSN_PREFIX: usize = 8;

/// A chunk's place inside the TOAST relation's file.
pub use walshadow_types::Tid;

/// A chunk with the tid it lives at ([`ChunkMirror::tid_chunks`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChunk {
    /// The TOAST relation's relfilenumber the tid is in.
    pub file: u32,
    pub tid: Tid,
    pub value_id: Oid,
    pub chunk_seq: i32,
    pub insert_lsn: Lsn,
    pub data: Vec<u8>,
}

/// Counters and sizes of a mirror.
///
/// `values`, `chunks`, `data_bytes`, `source_values` and `pending` are exact
/// for the state the mirror reads (its open transaction, or the last commit
/// for [`ChunkMirror::stats_of`]); `hits` and `misses` count [`ChunkMirror::fetch`]
/// calls since this process opened the mirror.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MirrorStats {
    /// Distinct `(toast_relid, value_id)` with at least one chunk.
    pub values: u64,
    /// Chunk rows.
    pub chunks: u64,
    /// Sum of chunk data lengths (without keys and redb overhead).
    pub data_bytes: u64,
    /// Size of the redb file.
    pub file_bytes: u64,
    /// Deletions waiting for durable progress.
    pub pending: u64,
    /// Fetches that returned a whole value.
    pub hits: u64,
    /// Fetches that found no value, or one with a gap.
    pub misses: u64,
    /// Values stored by [`ChunkMirror::put_source_value`] (cumulative, durable).
    pub source_values: u64,
}

/// The counters kept in `META` (all but `pending`, which is the length of the
/// `pending` table, which redb keeps in the tree header).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counters {
    values: u64,
    chunks: u64,
    data_bytes: u64,
    source_values: u64,
    next_pending: u64,
    pending: u64,
}

/// The durable TOAST chunk mirror. See the crate doc for the design.
pub struct ChunkMirror {
    // Declared before `db`: the transaction ends (aborts) before the database closes.
    txn: Option<WriteTransaction>,
    db: Database,
    path: PathBuf,
    counters: Counters,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Set when a mutation or commit failed part way: the open transaction
    /// must not be used or committed any more.
    poisoned_by: Option<&'static str>,
}

impl fmt::Debug for ChunkMirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkMirror")
            .field("path", &self.path)
            .field("counters", &self.counters)
            .field("poisoned_by", &self.poisoned_by)
            .finish_non_exhaustive()
    }
}

fn begin_txn(db: &Database, path: &Path) -> Result<WriteTransaction, MirrorError> {
    const OP: &str = "begin write transaction";
    let mut txn = db
        .begin_write()
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    // Saves the allocator state with each commit, so that reopening after a
    // crash does not walk the whole (possibly very large) file.
    txn.set_quick_repair(true);
    Ok(txn)
}

fn split_chunk(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let (lsn, data) = bytes.split_first_chunk::<LSN_PREFIX>()?;
    Some((u64::from_le_bytes(*lsn), data))
}

/// The insert LSN and data length of a stored chunk, if there is one.
fn stored_chunk<T: redb::ReadableTable<ChunkKey, &'static [u8]>>(
    chunks: &T,
    path: &Path,
    op: &'static str,
    key: (u32, u32, i32),
) -> Result<Option<(u64, usize)>, MirrorError> {
    let Some(guard) = chunks
        .get(&key)
        .map_err(|e| MirrorError::storage(path, op, e))?
    else {
        return Ok(None);
    };
    split_chunk(guard.value())
        .map(|(lsn, d)| Some((lsn, d.len())))
        .ok_or_else(|| {
            MirrorError::corrupt(
                path,
                op,
                format!("chunk {key:?} shorter than its LSN prefix"),
            )
        })
}

fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn read_counters(
    table: &impl ReadableTable<&'static str, u64>,
    path: &Path,
    op: &'static str,
) -> Result<(Option<u64>, Counters), MirrorError> {
    let get = |key: &str| -> Result<Option<u64>, MirrorError> {
        Ok(table
            .get(key)
            .map_err(|e| MirrorError::storage(path, op, e))?
            .map(|g| g.value()))
    };
    let format = get(META_FORMAT)?;
    let counters = Counters {
        values: get(META_VALUES)?.unwrap_or(0),
        chunks: get(META_CHUNKS)?.unwrap_or(0),
        data_bytes: get(META_DATA_BYTES)?.unwrap_or(0),
        source_values: get(META_SOURCE_VALUES)?.unwrap_or(0),
        next_pending: get(META_NEXT_PENDING)?.unwrap_or(0),
        pending: 0,
    };
    Ok((format, counters))
}

fn check_format(found: Option<u64>, path: &Path) -> Result<(), MirrorError> {
    match found {
        Some(v) if v != FORMAT_VERSION => Err(MirrorError::Format {
            path: path.to_path_buf(),
            found: v,
            expected: FORMAT_VERSION,
        }),
        _ => Ok(()),
    }
}

fn file_size(path: &Path) -> Result<u64, MirrorError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| MirrorError::Io {
            path: path.to_path_buf(),
            op: "read file size",
            source,
        })
}

impl ChunkMirror {
    /// Opens (creating if missing) the mirror at `path` (a file), with
    /// `cache_mb` MiB of redb cache (at least 1). The cache bounds what redb
    /// keeps in memory, including the dirty pages of a large open transaction,
    /// half of it at most, the rest spilled to the file before the commit.
    ///
    /// After a crash the file is repaired here; every change since the last
    /// [`commit`](Self::commit) is gone.
    pub fn open(path: &Path, cache_mb: usize) -> Result<ChunkMirror, MirrorError> {
        const OP: &str = "open";
        let mut builder = redb::Builder::new();
        builder.set_cache_size(cache_mb.max(1).saturating_mul(1 << 20));
        builder.set_repair_callback(|session| {
            tracing::info!(
                progress = session.progress(),
                "repairing the TOAST chunk mirror after an unclean shutdown"
            );
        });
        let db = builder.create(path).map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen => MirrorError::InUse {
                path: path.to_path_buf(),
            },
            e => MirrorError::storage(path, OP, e),
        })?;
        let txn = begin_txn(&db, path)?;
        let st = |e: TableError| MirrorError::storage(path, OP, e);
        let (format, mut counters) = {
            let meta = txn.open_table(META).map_err(st)?;
            read_counters(&meta, path, OP)?
        };
        check_format(format, path)?;
        txn.open_table(CHUNKS).map_err(st)?;
        txn.open_table(TIDS).map_err(st)?;
        txn.open_table(STATE).map_err(st)?;
        counters.pending = txn
            .open_table(PENDING)
            .map_err(st)?
            .len()
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let mut mirror = ChunkMirror {
            txn: Some(txn),
            db,
            path: path.to_path_buf(),
            counters,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            poisoned_by: None,
        };
        if format.is_none() {
            // A new file: commit the empty tables and the version now, so that
            // `stats_of` can read it before the first real commit.
            mirror.finish(OP, None)?;
            mirror.begin(OP)?;
        }
        tracing::info!(
            path = %path.display(),
            values = counters.values,
            chunks = counters.chunks,
            data_bytes = counters.data_bytes,
            pending = counters.pending,
            "opened the TOAST chunk mirror"
        );
        Ok(mirror)
    }

    /// Counters and sizes of the mirror at `path` as of its last commit, read
    /// without writing to it.
    ///
    /// The writer holds redb's exclusive lock, so while walshadow runs this
    /// fails with [`MirrorError::InUse`]; the running daemon reports
    /// [`stats`](Self::stats) itself. A file left by a crash must first be
    /// repaired by [`open`](Self::open) and fails here until then.
    pub fn stats_of(path: &Path) -> Result<MirrorStats, MirrorError> {
        const OP: &str = "read stats (read-only open)";
        let db = redb::Builder::new()
            .set_cache_size(16 << 20)
            .open_read_only(path)
            .map_err(|e| match e {
                DatabaseError::DatabaseAlreadyOpen => MirrorError::InUse {
                    path: path.to_path_buf(),
                },
                e => MirrorError::storage(path, OP, e),
            })?;
        let rtx = db
            .begin_read()
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let (format, mut counters) = match rtx.open_table(META) {
            Ok(meta) => read_counters(&meta, path, OP)?,
            Err(TableError::TableDoesNotExist(_)) => (None, Counters::default()),
            Err(e) => return Err(MirrorError::storage(path, OP, e)),
        };
        check_format(format, path)?;
        counters.pending = match rtx.open_table(PENDING) {
            Ok(t) => t.len().map_err(|e| MirrorError::storage(path, OP, e))?,
            Err(TableError::TableDoesNotExist(_)) => 0,
            Err(e) => return Err(MirrorError::storage(path, OP, e)),
        };
        Ok(Self::stats_from(&counters, file_size(path)?, 0, 0))
    }

    fn stats_from(c: &Counters, file_bytes: u64, hits: u64, misses: u64) -> MirrorStats {
        MirrorStats {
            values: c.values,
            chunks: c.chunks,
            data_bytes: c.data_bytes,
            file_bytes,
            pending: c.pending,
            hits,
            misses,
            source_values: c.source_values,
        }
    }

    /// The path of the mirror file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn reader(&self, op: &'static str) -> Result<&WriteTransaction, MirrorError> {
        match (&self.txn, self.poisoned_by) {
            (Some(txn), None) => Ok(txn),
            (_, by) => Err(MirrorError::Poisoned {
                path: self.path.clone(),
                op: by.unwrap_or(op),
            }),
        }
    }

    /// Runs one mutation in the open transaction; a failure poisons the mirror.
    fn mutate<T>(
        &mut self,
        op: &'static str,
        f: impl FnOnce(&WriteTransaction, &mut Counters, &Path) -> Result<T, MirrorError>,
    ) -> Result<T, MirrorError> {
        let txn = match (&self.txn, self.poisoned_by) {
            (Some(txn), None) => txn,
            (_, by) => {
                return Err(MirrorError::Poisoned {
                    path: self.path.clone(),
                    op: by.unwrap_or(op),
                });
            }
        };
        let result = f(txn, &mut self.counters, &self.path);
        if result.is_err() {
            self.poisoned_by = Some(op);
        }
        result
    }

    /// A chunk insert of a committed transaction, from the WAL record at
    /// `insert_lsn`: the chunk `(value_id, chunk_seq)` of TOAST relation
    /// `toast_relid` now lives at `tid` of relfilenumber `file`.
    ///
    /// The chunk row takes `data` and `insert_lsn` unless it already holds one
    /// inserted later (a replay over a mirror that is ahead keeps the newer
    /// row whole). The tid row is set likewise, unless the existing one has a
    /// larger `insert_lsn`.
    #[allow(clippy::too_many_arguments)]
    pub fn insert_chunk(
        &mut self,
        toast_relid: Oid,
        file: u32,
        tid: Tid,
        value_id: Oid,
        chunk_seq: i32,
        insert_lsn: Lsn,
        data: &[u8],
    ) -> Result<(), MirrorError> {
        self.mutate("insert chunk", |txn, c, path| {
            upsert_chunk(
                txn,
                c,
                path,
                toast_relid,
                value_id,
                chunk_seq,
                insert_lsn.0,
                data,
            )?;
            upsert_tid(
                txn,
                path,
                (toast_relid, file, tid.block, tid.offset),
                (value_id, chunk_seq, insert_lsn.0),
            )
        })
    }

    /// The tuple at `tid` of `file` is gone as of `at` (a committed DELETE's
    /// record LSN, or a VACUUM prune record's).
    ///
    /// If a tid row exists and was inserted before `at`, it is removed now and
    /// the removal of its chunk is scheduled for when durable progress reaches
    /// `due`; returns true. Otherwise (no row, or one inserted at or after
    /// `at`: a replay of something already handled) nothing changes and the
    /// result is false.
    pub fn delete_tid(
        &mut self,
        toast_relid: Oid,
        file: u32,
        tid: Tid,
        at: Lsn,
        due: Lsn,
    ) -> Result<bool, MirrorError> {
        const OP: &str = "delete tid";
        self.mutate(OP, |txn, c, path| {
            let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
            let key = (toast_relid, file, tid.block, tid.offset);
            let mut tids = txn
                .open_table(TIDS)
                .map_err(|e| MirrorError::storage(path, OP, e))?;
            let row = tids.get(&key).map_err(st)?.map(|g| g.value());
            let Some((value_id, chunk_seq, insert_lsn)) = row else {
                return Ok(false);
            };
            if insert_lsn >= at.0 {
                return Ok(false);
            }
            tids.remove(&key).map_err(st)?;
            drop(tids);
            schedule(
                txn,
                c,
                path,
                due,
                PendingOp::Prune {
                    toast_relid,
                    value_id,
                    chunk_seq,
                    before: at,
                },
            )?;
            Ok(true)
        })
    }

    /// Schedules, for when durable progress reaches `due`, the removal of every
    /// chunk of `toast_relid` inserted before `before` and of every tid row of
    /// it outside `keep_file` (all of them when `None`) or inserted before
    /// `before`. For a TRUNCATE or a rewrite (new relfilenumber `keep_file`)
    /// and for a relation that is dropped (`None`).
    pub fn sweep(
        &mut self,
        toast_relid: Oid,
        before: Lsn,
        keep_file: Option<u32>,
        due: Lsn,
    ) -> Result<(), MirrorError> {
        self.mutate("schedule sweep", |txn, c, path| {
            schedule(
                txn,
                c,
                path,
                due,
                PendingOp::Sweep {
                    toast_relid,
                    before,
                    keep_file,
                },
            )
        })
    }

    /// A whole value read from the source database: its chunks in any order,
    /// each `(chunk_seq, tid, data)`. Stored with `insert_lsn` 0, older than
    /// anything from the WAL, so that any later insert or delete wins; tid rows
    /// are written when both `file` and the chunk's tid (its `ctid` in the
    /// source) are known. Counts `source_values`.
    pub fn put_source_value(
        &mut self,
        toast_relid: Oid,
        value_id: Oid,
        file: Option<u32>,
        chunks: &[(i32, Option<Tid>, Vec<u8>)],
    ) -> Result<(), MirrorError> {
        self.mutate("store source value", |txn, c, path| {
            for (chunk_seq, tid, data) in chunks {
                upsert_chunk(txn, c, path, toast_relid, value_id, *chunk_seq, 0, data)?;
                if let (Some(file), Some(tid)) = (file, tid) {
                    upsert_tid(
                        txn,
                        path,
                        (toast_relid, file, tid.block, tid.offset),
                        (value_id, *chunk_seq, 0),
                    )?;
                }
            }
            c.source_values += 1;
            Ok(())
        })
    }

    /// The value's chunk data concatenated in `chunk_seq` order, if chunks
    /// `0..n` are all present with no gap; `None` otherwise (never a partial
    /// value). The mirror cannot know `n`: the caller compares the length
    /// with the TOAST pointer's external size, or uses
    /// [`fetch_exact`](Self::fetch_exact). Reads only this value's rows.
    pub fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Result<Option<Vec<u8>>, MirrorError> {
        self.fetch_inner(toast_relid, value_id, None)
    }

    /// [`fetch`](Self::fetch), and `None` unless the value is exactly
    /// `ext_size` bytes (`va_extinfo`'s external size of the TOAST pointer):
    /// a missing last chunk is a miss too.
    pub fn fetch_exact(
        &self,
        toast_relid: Oid,
        value_id: Oid,
        ext_size: usize,
    ) -> Result<Option<Vec<u8>>, MirrorError> {
        self.fetch_inner(toast_relid, value_id, Some(ext_size))
    }

    fn fetch_inner(
        &self,
        toast_relid: Oid,
        value_id: Oid,
        ext_size: Option<usize>,
    ) -> Result<Option<Vec<u8>>, MirrorError> {
        const OP: &str = "fetch value";
        let path = &self.path;
        let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
        let txn = self.reader(OP)?;
        let chunks = txn
            .open_table(CHUNKS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let mut out = Vec::with_capacity(ext_size.unwrap_or(0));
        let mut expect: i32 = 0;
        let mut whole = true;
        for entry in chunks
            .range((toast_relid, value_id, i32::MIN)..=(toast_relid, value_id, i32::MAX))
            .map_err(st)?
        {
            let (key, value) = entry.map_err(st)?;
            let seq = key.value().2;
            if seq != expect {
                whole = false;
                break;
            }
            let (_, data) = split_chunk(value.value()).ok_or_else(|| {
                MirrorError::corrupt(
                    path,
                    OP,
                    format!("chunk ({toast_relid}, {value_id}, {seq}) shorter than its LSN prefix"),
                )
            })?;
            out.extend_from_slice(data);
            if ext_size.is_some_and(|n| out.len() > n) {
                whole = false;
                break;
            }
            let Some(next) = expect.checked_add(1) else {
                break;
            };
            expect = next;
        }
        let whole = whole && expect > 0 && ext_size.is_none_or(|n| out.len() == n);
        if whole {
            self.hits.fetch_add(1, Ordering::Relaxed);
            Ok(Some(out))
        } else {
            self.misses.fetch_add(1, Ordering::Relaxed);
            Ok(None)
        }
    }

    /// Runs every pending deletion with `due <= durable_applied` in `(due,
    /// insertion)` order, removes them from `pending`, then commits the open
    /// transaction durably (with the counters) and opens the next one.
    ///
    /// `durable_applied` must be progress the pipeline has already made
    /// durable on its own (destination and progress record), never progress
    /// it is about to write.
    pub fn commit(&mut self, durable_applied: Lsn) -> Result<(), MirrorError> {
        self.finish("commit", Some(durable_applied))?;
        self.begin("commit")
    }

    /// Runs the due ops (when `durable_applied` is given), writes the counters
    /// and commits; the mirror has no open transaction afterwards.
    fn finish(
        &mut self,
        op: &'static str,
        durable_applied: Option<Lsn>,
    ) -> Result<(), MirrorError> {
        let ran = self.mutate(op, |txn, c, path| {
            let ran = match durable_applied {
                Some(applied) => run_due(txn, c, path, applied)?,
                None => 0,
            };
            write_counters(txn, c, path)?;
            Ok(ran)
        })?;
        let Some(txn) = self.txn.take() else {
            return Err(MirrorError::Poisoned {
                path: self.path.clone(),
                op,
            });
        };
        if let Err(e) = txn.commit() {
            self.poisoned_by = Some(op);
            return Err(MirrorError::storage(&self.path, op, e));
        }
        tracing::debug!(
            ran,
            durable_applied = ?durable_applied,
            values = self.counters.values,
            chunks = self.counters.chunks,
            pending = self.counters.pending,
            "committed the TOAST chunk mirror"
        );
        Ok(())
    }

    fn begin(&mut self, op: &'static str) -> Result<(), MirrorError> {
        match begin_txn(&self.db, &self.path) {
            Ok(txn) => {
                self.txn = Some(txn);
                Ok(())
            }
            Err(e) => {
                self.poisoned_by = Some(op);
                Err(e)
            }
        }
    }

    /// Stores an opaque blob under `name` in the open transaction; it becomes
    /// durable with the mirror's next commit, atomically with the chunks.
    pub fn set_state(&mut self, name: &str, bytes: &[u8]) -> Result<(), MirrorError> {
        const OP: &str = "set state";
        self.mutate(OP, |txn, _, path| {
            txn.open_table(STATE)
                .map_err(|e| MirrorError::storage(path, OP, e))?
                .insert(name, bytes)
                .map_err(|e| MirrorError::storage(path, OP, e))?;
            Ok(())
        })
    }

    /// The blob stored under `name` (as staged in the open transaction).
    pub fn state(&self, name: &str) -> Result<Option<Vec<u8>>, MirrorError> {
        const OP: &str = "read state";
        let txn = self.reader(OP)?;
        let table = txn
            .open_table(STATE)
            .map_err(|e| MirrorError::storage(&self.path, OP, e))?;
        let value = table
            .get(name)
            .map_err(|e| MirrorError::storage(&self.path, OP, e))?
            .map(|g| g.value().to_vec());
        Ok(value)
    }

    /// TOAST relations that have any chunk or tid row, ascending.
    pub fn relations(&self) -> Result<Vec<Oid>, MirrorError> {
        const OP: &str = "list relations";
        let path = &self.path;
        let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
        let txn = self.reader(OP)?;
        let mut out = BTreeSet::new();
        // Skip scans: one B-tree descent per relation, not per row.
        let chunks = txn
            .open_table(CHUNKS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let mut from = Some(0u32);
        while let Some(rel) = from {
            let Some(entry) = chunks.range((rel, 0u32, i32::MIN)..).map_err(st)?.next() else {
                break;
            };
            let found = entry.map_err(st)?.0.value().0;
            out.insert(found);
            from = found.checked_add(1);
        }
        let tids = txn
            .open_table(TIDS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let mut from = Some(0u32);
        while let Some(rel) = from {
            let Some(entry) = tids.range((rel, 0u32, 0u32, 0u16)..).map_err(st)?.next() else {
                break;
            };
            let found = entry.map_err(st)?.0.value().0;
            out.insert(found);
            from = found.checked_add(1);
        }
        Ok(out.into_iter().collect())
    }

    /// Up to `limit` chunks of `toast_relid` in tid order (file, block,
    /// offset), starting after `after`: a relation copied from one mirror
    /// into another (a `base_backup` pass's walked chunks into the daemon's).
    /// A tid row whose chunk is gone is skipped.
    pub fn tid_chunks(
        &self,
        toast_relid: Oid,
        after: Option<(u32, Tid)>,
        limit: usize,
    ) -> Result<Vec<StoredChunk>, MirrorError> {
        const OP: &str = "list chunks by tid";
        let path = &self.path;
        let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
        let txn = self.reader(OP)?;
        let tids = txn
            .open_table(TIDS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let chunks = txn
            .open_table(CHUNKS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let from: TidKey = match after {
            Some((file, tid)) => (toast_relid, file, tid.block, tid.offset),
            None => (toast_relid, 0, 0, 0),
        };
        let mut out = Vec::new();
        for entry in tids
            .range(from..=(toast_relid, u32::MAX, u32::MAX, u16::MAX))
            .map_err(st)?
        {
            if out.len() >= limit {
                break;
            }
            let (key, row) = entry.map_err(st)?;
            let (rel, file, block, offset) = key.value();
            if after.is_some() && (rel, file, block, offset) == from {
                continue;
            }
            let (value_id, chunk_seq, _) = row.value();
            let Some(stored) = chunks
                .get(&(toast_relid, value_id, chunk_seq))
                .map_err(st)?
            else {
                continue;
            };
            let (insert_lsn, data) = split_chunk(stored.value()).ok_or_else(|| {
                MirrorError::corrupt(
                    path,
                    OP,
                    format!(
                        "chunk ({toast_relid}, {value_id}, {chunk_seq}) shorter than its LSN prefix"
                    ),
                )
            })?;
            out.push(StoredChunk {
                file,
                tid: Tid { block, offset },
                value_id,
                chunk_seq,
                insert_lsn: Lsn(insert_lsn),
                data: data.to_vec(),
            });
        }
        Ok(out)
    }

    /// Value ids with at least one chunk in `toast_relid` (to compare with the
    /// source's live `chunk_id`s).
    pub fn value_ids(&self, toast_relid: Oid) -> Result<BTreeSet<Oid>, MirrorError> {
        const OP: &str = "list value ids";
        let path = &self.path;
        let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
        let txn = self.reader(OP)?;
        let chunks = txn
            .open_table(CHUNKS)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
        let mut out = BTreeSet::new();
        let mut from = Some(0u32);
        while let Some(value) = from {
            let Some(entry) = chunks
                .range((toast_relid, value, i32::MIN)..=(toast_relid, u32::MAX, i32::MAX))
                .map_err(st)?
                .next()
            else {
                break;
            };
            let found = entry.map_err(st)?.0.value().1;
            out.insert(found);
            from = found.checked_add(1);
        }
        Ok(out)
    }

    /// Commits as [`commit`](Self::commit) does, then compacts the file
    /// (redb `Database::compact`) so that the space of deleted chunks goes
    /// back to the file system. Returns the file size before and after.
    /// Takes time proportional to the live data; meant for startup or a
    /// quiet moment.
    pub fn compact(&mut self, durable_applied: Lsn) -> Result<(u64, u64), MirrorError> {
        const OP: &str = "compact";
        self.finish(OP, Some(durable_applied))?;
        let result = self.compact_closed();
        if result.is_err() {
            self.poisoned_by = Some(OP);
            return result;
        }
        self.begin(OP)?;
        result
    }

    fn compact_closed(&mut self) -> Result<(u64, u64), MirrorError> {
        const OP: &str = "compact";
        let before = file_size(&self.path)?;
        // Each pass moves pages toward the file's start; redb answers false
        // once nothing more can move.
        for _ in 0..8 {
            let more = self
                .db
                .compact()
                .map_err(|e| MirrorError::storage(&self.path, OP, e))?;
            if !more {
                break;
            }
        }
        let after = file_size(&self.path)?;
        tracing::info!(
            path = %self.path.display(),
            before,
            after,
            "compacted the TOAST chunk mirror"
        );
        Ok((before, after))
    }

    /// Counters and sizes; cheap (no scan). `file_bytes` is 0 if the file's
    /// size cannot be read.
    pub fn stats(&self) -> MirrorStats {
        let file_bytes = std::fs::metadata(&self.path).map_or(0, |m| m.len());
        Self::stats_from(
            &self.counters,
            file_bytes,
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Removes, in the open transaction, the pending ops of `toast_relid` and
    /// all its chunk and tid rows: for a relation that left the replicated set
    /// at startup, which no replay can need again.
    pub fn drop_relation_now(&mut self, toast_relid: Oid) -> Result<(), MirrorError> {
        const OP: &str = "drop relation";
        self.mutate(OP, |txn, c, path| {
            let mut pending = txn
                .open_table(PENDING)
                .map_err(|e| MirrorError::storage(path, OP, e))?;
            let mut corrupt = None;
            let mut removed = 0u64;
            pending
                .retain(|_, bytes| match PendingOp::decode(bytes) {
                    Ok(op) if op.toast_relid() == toast_relid => {
                        removed += 1;
                        false
                    }
                    Ok(_) => true,
                    Err(e) => {
                        corrupt.get_or_insert(e);
                        true
                    }
                })
                .map_err(|e| MirrorError::storage(path, OP, e))?;
            c.pending = c.pending.saturating_sub(removed);
            if let Some(e) = corrupt {
                return Err(MirrorError::corrupt(path, OP, e));
            }
            drop(pending);
            remove_chunks(txn, c, path, OP, toast_relid, |_| false)?;
            remove_tids(txn, path, OP, toast_relid, |_, _| false)
        })
    }
}

/// Upserts one chunk row under the insert_lsn rule, keeping the counters exact.
#[allow(clippy::too_many_arguments)]
fn upsert_chunk(
    txn: &WriteTransaction,
    c: &mut Counters,
    path: &Path,
    toast_relid: Oid,
    value_id: Oid,
    chunk_seq: i32,
    insert_lsn: u64,
    data: &[u8],
) -> Result<(), MirrorError> {
    const OP: &str = "insert chunk";
    let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
    let mut chunks = txn
        .open_table(CHUNKS)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    let key = (toast_relid, value_id, chunk_seq);
    match stored_chunk(&chunks, path, OP, key)? {
        Some((old_lsn, _)) if old_lsn > insert_lsn => return Ok(()),
        Some((_, old_len)) => {
            c.data_bytes = c.data_bytes.saturating_sub(len_u64(old_len)) + len_u64(data.len());
        }
        None => {
            if !value_has_chunks(&chunks, path, OP, toast_relid, value_id)? {
                c.values += 1;
            }
            c.chunks += 1;
            c.data_bytes += len_u64(data.len());
        }
    }
    // Written in place: no intermediate buffer per chunk.
    let mut slot = chunks
        .insert_reserve(&key, LSN_PREFIX + data.len())
        .map_err(st)?;
    let (lsn_bytes, data_bytes) = slot.as_mut().split_at_mut(LSN_PREFIX);
    lsn_bytes.copy_from_slice(&insert_lsn.to_le_bytes());
    data_bytes.copy_from_slice(data);
    Ok(())
}

/// Sets a tid row unless the existing one was inserted later.
fn upsert_tid(
    txn: &WriteTransaction,
    path: &Path,
    key: TidKey,
    row: TidRow,
) -> Result<(), MirrorError> {
    const OP: &str = "insert tid";
    let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
    let mut tids = txn
        .open_table(TIDS)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    let existing_lsn = tids.get(&key).map_err(st)?.map(|g| g.value().2);
    if existing_lsn.is_none_or(|lsn| lsn <= row.2) {
        tids.insert(&key, &row).map_err(st)?;
    }
    Ok(())
}

fn value_has_chunks(
    chunks: &impl ReadableTable<ChunkKey, &'static [u8]>,
    path: &Path,
    op: &'static str,
    toast_relid: Oid,
    value_id: Oid,
) -> Result<bool, MirrorError> {
    let st = |e: redb::StorageError| MirrorError::storage(path, op, e);
    match chunks
        .range((toast_relid, value_id, i32::MIN)..=(toast_relid, value_id, i32::MAX))
        .map_err(st)?
        .next()
    {
        Some(entry) => entry.map(|_| true).map_err(st),
        None => Ok(false),
    }
}

fn schedule(
    txn: &WriteTransaction,
    c: &mut Counters,
    path: &Path,
    due: Lsn,
    op: PendingOp,
) -> Result<(), MirrorError> {
    const OP: &str = "schedule deletion";
    let mut pending = txn
        .open_table(PENDING)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    pending
        .insert(&(due.0, c.next_pending), op.encode().as_slice())
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    c.next_pending += 1;
    c.pending += 1;
    Ok(())
}

/// Pops and runs the pending ops with `due <= applied`, in key order.
fn run_due(
    txn: &WriteTransaction,
    c: &mut Counters,
    path: &Path,
    applied: Lsn,
) -> Result<u64, MirrorError> {
    const OP: &str = "run due deletions";
    let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
    let mut ran = 0;
    loop {
        let op = {
            let mut pending = txn
                .open_table(PENDING)
                .map_err(|e| MirrorError::storage(path, OP, e))?;
            let due = pending.first().map_err(st)?.map(|(k, _)| k.value().0);
            if due.is_none_or(|due| due > applied.0) {
                break;
            }
            let popped = pending
                .pop_first()
                .map_err(st)?
                .map(|(_, v)| PendingOp::decode(v.value()));
            match popped {
                Some(Ok(op)) => op,
                Some(Err(e)) => return Err(MirrorError::corrupt(path, OP, e)),
                None => break,
            }
        };
        c.pending = c.pending.saturating_sub(1);
        ran += 1;
        match op {
            PendingOp::Prune {
                toast_relid,
                value_id,
                chunk_seq,
                before,
            } => prune(txn, c, path, toast_relid, value_id, chunk_seq, before)?,
            PendingOp::Sweep {
                toast_relid,
                before,
                keep_file,
            } => {
                remove_chunks(txn, c, path, OP, toast_relid, |lsn| lsn >= before.0)?;
                remove_tids(txn, path, OP, toast_relid, |file, lsn| {
                    keep_file == Some(file) && lsn >= before.0
                })?;
            }
        }
    }
    Ok(ran)
}

fn prune(
    txn: &WriteTransaction,
    c: &mut Counters,
    path: &Path,
    toast_relid: Oid,
    value_id: Oid,
    chunk_seq: i32,
    before: Lsn,
) -> Result<(), MirrorError> {
    const OP: &str = "prune chunk";
    let st = |e: redb::StorageError| MirrorError::storage(path, OP, e);
    let mut chunks = txn
        .open_table(CHUNKS)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    let key = (toast_relid, value_id, chunk_seq);
    match stored_chunk(&chunks, path, OP, key)? {
        None => Ok(()),
        // Re-inserted at or after the delete (a reused value id): keep.
        Some((lsn, _)) if lsn >= before.0 => Ok(()),
        Some((_, len)) => {
            chunks.remove(&key).map_err(st)?;
            c.chunks = c.chunks.saturating_sub(1);
            c.data_bytes = c.data_bytes.saturating_sub(len_u64(len));
            if !value_has_chunks(&chunks, path, OP, toast_relid, value_id)? {
                c.values = c.values.saturating_sub(1);
            }
            Ok(())
        }
    }
}

/// Removes the chunks of `toast_relid` whose insert_lsn fails `keep`,
/// counting values left with no chunk. One pass over the relation's rows.
fn remove_chunks(
    txn: &WriteTransaction,
    c: &mut Counters,
    path: &Path,
    op: &'static str,
    toast_relid: Oid,
    keep: impl Fn(u64) -> bool,
) -> Result<(), MirrorError> {
    let mut chunks = txn
        .open_table(CHUNKS)
        .map_err(|e| MirrorError::storage(path, op, e))?;
    let mut tally = Removal::default();
    chunks
        .retain_in(
            (toast_relid, 0u32, i32::MIN)..=(toast_relid, u32::MAX, i32::MAX),
            |(_, value_id, _), bytes| {
                let Some((lsn, data)) = split_chunk(bytes) else {
                    tally.corrupt = true;
                    return true;
                };
                let kept = keep(lsn);
                tally.visit(value_id, kept, data.len());
                kept
            },
        )
        .map_err(|e| MirrorError::storage(path, op, e))?;
    tally.close_value();
    c.values = c.values.saturating_sub(tally.values);
    c.chunks = c.chunks.saturating_sub(tally.chunks);
    c.data_bytes = c.data_bytes.saturating_sub(tally.bytes);
    if tally.corrupt {
        return Err(MirrorError::corrupt(
            path,
            op,
            format!("a chunk of relation {toast_relid} is shorter than its LSN prefix"),
        ));
    }
    Ok(())
}

/// Removes the tid rows of `toast_relid` for which `keep(file, insert_lsn)` is false.
fn remove_tids(
    txn: &WriteTransaction,
    path: &Path,
    op: &'static str,
    toast_relid: Oid,
    keep: impl Fn(u32, u64) -> bool,
) -> Result<(), MirrorError> {
    txn.open_table(TIDS)
        .map_err(|e| MirrorError::storage(path, op, e))?
        .retain_in(
            (toast_relid, 0u32, 0u32, 0u16)..=(toast_relid, u32::MAX, u32::MAX, u16::MAX),
            |(_, file, _, _), (_, _, lsn)| keep(file, lsn),
        )
        .map_err(|e| MirrorError::storage(path, op, e))
}

/// What a pass of [`remove_chunks`] took out. Rows arrive in key order, so a
/// value's chunks are consecutive: a value is gone when none of its chunks
/// was kept.
#[derive(Default)]
struct Removal {
    current: Option<u32>,
    current_kept: bool,
    current_removed: bool,
    values: u64,
    chunks: u64,
    bytes: u64,
    corrupt: bool,
}

impl Removal {
    fn visit(&mut self, value_id: u32, kept: bool, data_len: usize) {
        if self.current != Some(value_id) {
            self.close_value();
            self.current = Some(value_id);
        }
        if kept {
            self.current_kept = true;
        } else {
            self.current_removed = true;
            self.chunks += 1;
            self.bytes += len_u64(data_len);
        }
    }

    fn close_value(&mut self) {
        if self.current_removed && !self.current_kept {
            self.values += 1;
        }
        self.current_kept = false;
        self.current_removed = false;
    }
}

fn write_counters(txn: &WriteTransaction, c: &Counters, path: &Path) -> Result<(), MirrorError> {
    const OP: &str = "write counters";
    let mut meta = txn
        .open_table(META)
        .map_err(|e| MirrorError::storage(path, OP, e))?;
    for (key, value) in [
        (META_FORMAT, FORMAT_VERSION),
        (META_VALUES, c.values),
        (META_CHUNKS, c.chunks),
        (META_DATA_BYTES, c.data_bytes),
        (META_SOURCE_VALUES, c.source_values),
        (META_NEXT_PENDING, c.next_pending),
    ] {
        meta.insert(key, value)
            .map_err(|e| MirrorError::storage(path, OP, e))?;
    }
    Ok(())
}
