//! TOAST values for the stream: the chunk mirror fed from the WAL, the
//! source read for values older than walshadow, and the rows that wait for
//! a newer version when a value is gone from both.
//!
//! ```text
//!  commit of T:  chunk insert (toast file, tid) ──▶ mirror.insert_chunk
//!                chunk delete (toast file, tid) ──▶ mirror.delete_tid   (prune due at T's end)
//!                TOAST file rewritten / gone     ──▶ mirror.sweep        (due at T's end)
//!  VACUUM prune record at P (toast file, offsets) ─▶ mirror.delete_tid   (due at P)
//!  row decode ── pointer ──▶ mirror ──miss──▶ source: SELECT … FROM pg_toast.… WHERE chunk_id = v
//!                                                  └─ gone ──▶ the row waits for a newer version
//!  progress write ──▶ mirror.commit(durable applied) ──▶ progress.json
//! ```
//!
//! The mirror commits before `progress.json` is written, so it never lags
//! the progress a restart resumes from; deletions it schedules run only
//! once the progress that covers them is durable (see the
//! `walshadow-toast-mirror` crate docs for why).
//!
//! A value the mirror lacks was written before walshadow read the table's
//! WAL (a table pinned after its large values were written). A value id
//! names one value while it lives, so reading its chunks from the source's
//! TOAST relation by value id gives the value the pointer names — in the
//! bytes the pointer describes, or stored anew by a rewrite (`VACUUM
//! FULL`), which the row decoder accepts by the pointer's raw size. A
//! source that cannot answer now is waited for. When the source no longer
//! has the value, the row version that points at it was superseded by a
//! commit before the source's current WAL position `F`: the row is not
//! emitted, and it waits for a change of its row committed up to `F` (one
//! of the same key, or a later version that waits in turn), which replaces
//! it in ClickHouse. If the stream passes `F` without one, nothing can
//! supply the value and the table stops, naming table, column, value and
//! LSN. No path writes a stand-in value.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use walshadow_rows::ToastSource;
use walshadow_toast_mirror::{ChunkMirror, MirrorError, MirrorStats, Tid};
use walshadow_types::{Lsn, Oid};
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient, ReplicationError};

/// The mirror's file in the state directory.
pub const MIRROR_FILE: &str = "toast-mirror.redb";

/// State blobs: the rows waiting for a newer version; the counters.
const WAITS_STATE: &str = "waits";
const COUNTERS_STATE: &str = "counters";

/// A row version that was not emitted because a TOAST value it points at
/// is gone; it is superseded by a change of the same key at most at
/// `source_lsn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wait {
    /// The key columns' values as PostgreSQL text (`None`: NULL).
    pub key: Vec<Option<String>>,
    /// Key columns (indexes into `key`) that could not be read (a
    /// `REPLICA IDENTITY FULL` key holding the gone value): any value
    /// matches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub any: Vec<usize>,
    /// The commit that wrote the row version.
    pub commit: Lsn,
    /// The change's WAL position.
    pub lsn: Lsn,
    pub column: String,
    pub toast_relid: Oid,
    pub value_id: Oid,
    /// The source's WAL insert position when the value was found gone.
    pub source_lsn: Lsn,
}

impl Wait {
    /// Whether a row with key `key` (where the columns in `any` are
    /// unknown) is a version of the row that waits.
    pub fn matches(&self, key: &[Option<String>], any: &[usize]) -> bool {
        self.key.len() == key.len()
            && self
                .key
                .iter()
                .zip(key)
                .enumerate()
                .all(|(i, (a, b))| a == b || self.any.contains(&i) || any.contains(&i))
    }
}

/// What reading a value from the source found.
#[derive(Debug)]
pub enum SourceValue {
    /// Its chunks are in the mirror now.
    Stored,
    /// The source does not have it (any more); `source_lsn`: the source's
    /// WAL position after the read.
    Gone { source_lsn: Lsn },
}

/// Why the source could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceReadError {
    #[error(
        "reading TOAST value {value_id} of TOAST relation {toast_relid} from the source: {source}"
    )]
    Query {
        toast_relid: Oid,
        value_id: Oid,
        source: ReplicationError,
    },
    #[error(
        "reading TOAST value {value_id} of TOAST relation {toast_relid} from the source: {detail}"
    )]
    Unexpected {
        toast_relid: Oid,
        value_id: Oid,
        detail: String,
    },
    #[error(transparent)]
    Mirror(#[from] MirrorError),
}

impl SourceReadError {
    /// Whether the read may succeed by itself later: the source restarting,
    /// full or unreachable (the replication client's transient errors), or
    /// refusing the password while it is being rotated (the stream's own
    /// session logged in with it). Anything else — no privilege (`42501`),
    /// a damaged relation, an answer that makes no sense — is definite for
    /// the table.
    pub fn may_pass(&self) -> bool {
        match self {
            SourceReadError::Query { source, .. } => {
                source.is_transient() || matches!(source, ReplicationError::Auth { .. })
            }
            SourceReadError::Unexpected { .. } | SourceReadError::Mirror(_) => false,
        }
    }
}

/// Counters the status file shows beside the mirror's own (kept with the
/// mirror: they count since the mirror was created).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToastCounters {
    /// Values read from the source into the mirror.
    pub source_fetches: u64,
    /// Values the source did not have (their rows wait for a newer version).
    pub source_misses: u64,
    /// Source reads that failed.
    pub source_errors: u64,
    /// Rows waiting for a newer version now.
    pub waiting_rows: u64,
}

/// The stream's TOAST state.
#[derive(Debug)]
pub struct Toast {
    mirror: ChunkMirror,
    source: ConnConfig,
    conn: Option<ReplicationClient>,
    /// TOAST relation OID → `(schema, name)` on the source.
    names: HashMap<Oid, (String, String)>,
    /// TOAST relations of pinned tables at the last catalog version seen:
    /// OID → relfilenumber. `None` until the first catalog is read.
    files: Option<HashMap<Oid, Oid>>,
    /// First chunk insert of the commit being applied, per (TOAST
    /// relation, file): where a rewrite's copies start.
    first_insert: HashMap<(Oid, Oid), Lsn>,
    /// Pinned table key → rows waiting for a newer version.
    waits: BTreeMap<String, Vec<Wait>>,
    waits_dirty: bool,
    counters: ToastCounters,
    /// `counters` as last given to the mirror.
    counters_saved: ToastCounters,
    /// Walked chunks of `base_backup` loads still to copy in.
    imports: std::collections::VecDeque<Import>,
}

/// A `base_backup` pass's chunk store being copied into the mirror.
#[derive(Debug)]
struct Import {
    store: Option<ChunkMirror>,
    path: std::path::PathBuf,
    /// `(TOAST relation, relfilenumber walked)` still to copy.
    relations: std::collections::VecDeque<(Oid, Oid)>,
    /// The last tid copied of the first relation.
    after: Option<(u32, Tid)>,
    copied: u64,
}

/// The mirror as a [`ToastSource`] for the row decoder; a storage error is
/// kept for the caller (the decoder only sees "not available").
#[derive(Debug)]
pub struct MirrorSource<'a> {
    mirror: &'a ChunkMirror,
    error: RefCell<Option<MirrorError>>,
}

impl MirrorSource<'_> {
    pub fn take_error(&self) -> Option<MirrorError> {
        self.error.borrow_mut().take()
    }
}

impl ToastSource for MirrorSource<'_> {
    fn fetch(&self, toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>> {
        match self.mirror.fetch(toast_relid, value_id) {
            Ok(v) => v,
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                None
            }
        }
    }
}

impl Toast {
    /// Opens the mirror in `state_dir`; `source` is the `[source] url`
    /// connection (a SQL session is derived from it when a value must be
    /// read from the source).
    pub fn open(
        state_dir: &Path,
        cache_mb: usize,
        source: &ConnConfig,
    ) -> Result<Toast, MirrorError> {
        let mirror = ChunkMirror::open(&state_dir.join(MIRROR_FILE), cache_mb)?;
        let waits = match mirror.state(WAITS_STATE)? {
            Some(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "TOAST mirror: unreadable list of waiting rows ({e}); starting with none"
                );
                BTreeMap::new()
            }),
            None => BTreeMap::new(),
        };
        let counters = match mirror.state(COUNTERS_STATE)? {
            Some(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            None => ToastCounters::default(),
        };
        let mut source = source.clone();
        source.physical = false;
        source.application_name = Some("walshadow toast".into());
        let mut t = Toast {
            mirror,
            source,
            conn: None,
            names: HashMap::new(),
            files: None,
            first_insert: HashMap::new(),
            waits,
            waits_dirty: false,
            counters,
            counters_saved: counters,
            imports: std::collections::VecDeque::new(),
        };
        t.counters.waiting_rows = t.waiting_rows();
        let s = t.mirror.stats();
        tracing::info!(
            values = s.values,
            chunks = s.chunks,
            data_bytes = s.data_bytes,
            file_bytes = s.file_bytes,
            waiting_rows = t.counters.waiting_rows,
            "TOAST mirror opened"
        );
        Ok(t)
    }

    pub fn source(&self) -> MirrorSource<'_> {
        MirrorSource {
            mirror: &self.mirror,
            error: RefCell::new(None),
        }
    }

    /// Queues a `base_backup` pass's walked chunks for the mirror
    /// ([`Toast::import_step`] copies them in bounded steps).
    pub fn queue_import(&mut self, path: std::path::PathBuf, relations: Vec<(Oid, Oid)>) {
        self.imports.push_back(Import {
            store: None,
            path,
            relations: relations.into(),
            after: None,
            copied: 0,
        });
    }

    /// Copies up to `budget` walked chunks into the mirror, at LSN 0 like
    /// values read from the source (every WAL insert or delete wins over
    /// them). A relation no longer pinned, or moved to another file since
    /// the walk, is skipped: its tids mean nothing now. A store that cannot
    /// be read is dropped with a warning (values are then read from the
    /// source when needed).
    pub fn import_step(&mut self, budget: usize) -> Result<(), MirrorError> {
        let Some(import) = self.imports.front_mut() else {
            return Ok(());
        };
        if import.store.is_none() {
            match ChunkMirror::open(&import.path, 16) {
                Ok(m) => import.store = Some(m),
                Err(e) => {
                    tracing::warn!(path = %import.path.display(), "walked TOAST chunks cannot be read ({e}); their values are read from the source when needed");
                    self.finish_import();
                    return Ok(());
                }
            }
        }
        let mut left = budget;
        while left > 0 {
            let Some(import) = self.imports.front_mut() else {
                return Ok(());
            };
            let Some(&(relid, file)) = import.relations.front() else {
                self.finish_import();
                return Ok(());
            };
            let current = self.files.as_ref().and_then(|f| f.get(&relid)).copied();
            if current != Some(file) {
                tracing::info!(
                    toast_relid = relid,
                    "walked TOAST chunks not copied: the relation is no longer streamed or moved to a new file since the walk"
                );
                import.relations.pop_front();
                import.after = None;
                continue;
            }
            let Some(store) = import.store.as_ref() else {
                return Ok(());
            };
            let batch = match store.tid_chunks(relid, import.after, left) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(
                        "walked TOAST chunks cannot be read ({e}); their values are read from the source when needed"
                    );
                    self.finish_import();
                    return Ok(());
                }
            };
            if batch.is_empty() {
                import.relations.pop_front();
                import.after = None;
                continue;
            }
            left = left.saturating_sub(batch.len());
            import.after = batch.last().map(|c| (c.file, c.tid));
            import.copied += batch.len() as u64;
            for c in batch {
                self.mirror.insert_chunk(
                    relid,
                    c.file,
                    c.tid,
                    c.value_id,
                    c.chunk_seq,
                    Lsn(0),
                    &c.data,
                )?;
            }
        }
        Ok(())
    }

    /// Whether walked chunks are still being copied in.
    pub fn importing(&self) -> bool {
        !self.imports.is_empty()
    }

    fn finish_import(&mut self) {
        if let Some(import) = self.imports.pop_front() {
            drop(import.store);
            tracing::info!(
                chunks = import.copied,
                "walked TOAST chunks of a backup load copied into the chunk mirror"
            );
            if let Err(e) = std::fs::remove_file(&import.path) {
                tracing::warn!(path = %import.path.display(), "removing a base_backup pass's chunk store: {e}");
            }
        }
    }

    pub fn stats(&self) -> MirrorStats {
        self.mirror.stats()
    }

    pub fn counters(&self) -> ToastCounters {
        self.counters
    }

    /// A committed chunk insert at `lsn`.
    pub fn insert_chunk(
        &mut self,
        toast_relid: Oid,
        file: Oid,
        tid: Tid,
        chunk: walshadow_rows::ToastChunk,
        lsn: Lsn,
    ) -> Result<(), MirrorError> {
        self.first_insert.entry((toast_relid, file)).or_insert(lsn);
        self.mirror.insert_chunk(
            toast_relid,
            file,
            tid,
            chunk.chunk_id,
            chunk.chunk_seq,
            lsn,
            &chunk.data,
        )
    }

    /// A committed delete at `lsn` of the tuple at `tid`, by the commit
    /// ending at `commit_end`.
    pub fn delete_chunk(
        &mut self,
        toast_relid: Oid,
        file: Oid,
        tid: Tid,
        lsn: Lsn,
        commit_end: Lsn,
    ) -> Result<(), MirrorError> {
        self.mirror
            .delete_tid(toast_relid, file, tid, lsn, commit_end)
            .map(drop)
    }

    /// Line pointers of a TOAST file that a prune record at `lsn` (ending
    /// at `end`) reports dead or unused: their tuples are gone.
    pub fn pruned(
        &mut self,
        toast_relid: Oid,
        file: Oid,
        block: u32,
        offsets: impl Iterator<Item = u16>,
        lsn: Lsn,
        end: Lsn,
    ) -> Result<usize, MirrorError> {
        let mut n = 0;
        for offset in offsets {
            if self
                .mirror
                .delete_tid(toast_relid, file, Tid { block, offset }, lsn, end)?
            {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The commit being applied starts.
    pub fn begin_commit(&mut self) {
        self.first_insert.clear();
    }

    /// The TOAST relations whose files the mirror follows, once known.
    pub fn known_relations(&self) -> Option<std::collections::HashSet<Oid>> {
        self.files.as_ref().map(|f| f.keys().copied().collect())
    }

    /// TOAST relations of the pinned tables learned outside a commit that
    /// moved any (see [`Toast::catalog_now`]): relations new to the mirror
    /// are followed from here; a known one keeps its file, which only the
    /// commit that moves it changes.
    pub fn learn_files(&mut self, files: HashMap<Oid, Oid>) {
        if let Some(known) = &mut self.files {
            for (relid, file) in files {
                known.entry(relid).or_insert(file);
            }
        }
    }

    /// The TOAST relations of the pinned tables as of the catalog after the
    /// commit at `commit_lsn` (ending at `commit_end`): relations that are
    /// gone lose every chunk; a relation on a new file (TRUNCATE, VACUUM
    /// FULL, CLUSTER, a rewriting ALTER TABLE) keeps only the chunks the
    /// commit wrote into the new file (a rewrite copies live values with
    /// their ids). Both once the commit is durably applied.
    pub fn catalog_now(
        &mut self,
        files: HashMap<Oid, Oid>,
        commit_lsn: Lsn,
        commit_end: Lsn,
    ) -> Result<(), MirrorError> {
        if let Some(old) = &self.files {
            for (&relid, &old_file) in old {
                match files.get(&relid) {
                    None => {
                        tracing::info!(toast_relid = relid, lsn = %commit_lsn, "TOAST mirror: the TOAST relation left scope; its chunks go once this commit is applied");
                        self.mirror.sweep(relid, Lsn::MAX, None, commit_end)?;
                    }
                    Some(&new_file) if new_file != old_file => {
                        let before = self
                            .first_insert
                            .get(&(relid, new_file))
                            .copied()
                            .unwrap_or(commit_lsn);
                        tracing::info!(toast_relid = relid, old_file, new_file, lsn = %commit_lsn, "TOAST mirror: the TOAST relation moved to a new file; chunks it did not copy go once this commit is applied");
                        self.mirror
                            .sweep(relid, before, Some(new_file), commit_end)?;
                    }
                    Some(_) => {}
                }
            }
        } else {
            // First look at the catalog: what the mirror holds for
            // relations no longer in scope (unpinned since the last run,
            // or dropped) is dead now; no replay can need it.
            for relid in self.mirror.relations()? {
                if !files.contains_key(&relid) {
                    tracing::info!(
                        toast_relid = relid,
                        "TOAST mirror: dropping the chunks of a TOAST relation no pinned table has"
                    );
                    self.mirror.drop_relation_now(relid)?;
                }
            }
        }
        self.files = Some(files);
        Ok(())
    }

    pub fn knows_catalog(&self) -> bool {
        self.files.is_some()
    }

    /// Makes the mirror durable up to what has been applied so far;
    /// deletions due at or before `durable_applied` (the progress already
    /// on disk) run first. Compacts the file when most of it is free.
    pub fn commit(&mut self, durable_applied: Lsn) -> Result<(), MirrorError> {
        if self.waits_dirty {
            let bytes = serde_json::to_vec(&self.waits).unwrap_or_default();
            self.mirror.set_state(WAITS_STATE, &bytes)?;
            self.waits_dirty = false;
        }
        if self.counters != self.counters_saved {
            let counters = serde_json::to_vec(&self.counters).unwrap_or_default();
            self.mirror.set_state(COUNTERS_STATE, &counters)?;
            self.counters_saved = self.counters;
        }
        self.mirror.commit(durable_applied)
    }

    /// Compacts the mirror's file if it is mostly free space.
    pub fn compact_if_sparse(&mut self, durable_applied: Lsn) -> Result<(), MirrorError> {
        let s = self.mirror.stats();
        if s.file_bytes > 2 * s.data_bytes + (64 << 20) {
            let (before, after) = self.mirror.compact(durable_applied)?;
            tracing::info!(before, after, "TOAST mirror compacted");
        }
        Ok(())
    }

    /// Compacts the mirror's file now.
    pub fn compact(&mut self, durable_applied: Lsn) -> Result<(u64, u64), MirrorError> {
        self.mirror.compact(durable_applied)
    }

    /// Reads value `value_id` of TOAST relation `toast_relid` from the
    /// source into the mirror.
    pub async fn read_from_source(
        &mut self,
        toast_relid: Oid,
        value_id: Oid,
    ) -> Result<SourceValue, SourceReadError> {
        let r = self.query_value(toast_relid, value_id).await;
        if r.is_err() {
            // A broken session is not reused.
            self.counters.source_errors += 1;
            if let Some(c) = self.conn.take() {
                c.close().await;
            }
        }
        r
    }

    async fn query_value(
        &mut self,
        toast_relid: Oid,
        value_id: Oid,
    ) -> Result<SourceValue, SourceReadError> {
        let qerr = |source| SourceReadError::Query {
            toast_relid,
            value_id,
            source,
        };
        let unexpected = |detail: String| SourceReadError::Unexpected {
            toast_relid,
            value_id,
            detail,
        };
        if self.conn.is_none() {
            let mut c = ReplicationClient::connect(&self.source)
                .await
                .map_err(qerr)?;
            c.simple_query("set bytea_output = hex; set statement_timeout = '60s'")
                .await
                .map_err(qerr)?;
            self.conn = Some(c);
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(unexpected("no session".into()));
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = self.names.entry(toast_relid) {
            let r = conn
                .simple_query(&format!(
                    "select n.nspname, c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace where c.oid = {toast_relid}"
                ))
                .await
                .map_err(qerr)?;
            match (r.text(0, 0), r.text(0, 1)) {
                (Some(s), Some(n)) => {
                    slot.insert((s.to_owned(), n.to_owned()));
                }
                // The relation itself is gone: so is the value.
                _ => {
                    let lsn = current_lsn(conn).await.map_err(qerr)?;
                    self.counters.source_misses += 1;
                    return Ok(SourceValue::Gone { source_lsn: lsn });
                }
            }
        }
        let Some((schema, name)) = self.names.get(&toast_relid) else {
            return Err(unexpected("no relation name".into()));
        };
        let r = match conn
            .simple_query(&format!(
                "select chunk_seq, chunk_data, ctid, pg_relation_filenode({toast_relid}) from {}.{} where chunk_id = {value_id} order by chunk_seq",
                quote_ident(schema),
                quote_ident(name)
            ))
            .await
        {
            Ok(r) => r,
            // Dropped since its name was learned (the table with it): so is
            // the value.
            Err(e) if e.db_error().is_some_and(|d| d.code == "42P01") => {
                self.names.remove(&toast_relid);
                let lsn = current_lsn(conn).await.map_err(qerr)?;
                self.counters.source_misses += 1;
                return Ok(SourceValue::Gone { source_lsn: lsn });
            }
            Err(e) => return Err(qerr(e)),
        };
        if r.rows.is_empty() {
            let lsn = current_lsn(conn).await.map_err(qerr)?;
            self.counters.source_misses += 1;
            return Ok(SourceValue::Gone { source_lsn: lsn });
        }
        let mut chunks = Vec::with_capacity(r.rows.len());
        let mut file = None;
        for i in 0..r.rows.len() {
            let seq: i32 = r
                .text(i, 0)
                .and_then(|t| t.parse().ok())
                .ok_or_else(|| unexpected("chunk_seq".into()))?;
            let data = r
                .text(i, 1)
                .and_then(parse_hex_bytea)
                .ok_or_else(|| unexpected("chunk_data is not hex bytea".into()))?;
            let tid = r.text(i, 2).and_then(parse_ctid);
            file = file.or_else(|| r.text(i, 3).and_then(|t| t.parse::<Oid>().ok()));
            chunks.push((seq, tid, data));
        }
        self.mirror
            .put_source_value(toast_relid, value_id, file, &chunks)?;
        self.counters.source_fetches += 1;
        tracing::debug!(
            toast_relid,
            value_id,
            chunks = chunks.len(),
            "TOAST value read from the source"
        );
        Ok(SourceValue::Stored)
    }

    /// A row version of table `key` is not emitted: it waits for a change
    /// of the same key.
    pub fn wait(&mut self, key: &str, wait: Wait) {
        let list = self.waits.entry(key.to_owned()).or_default();
        // A later version of the row that waits itself takes over the
        // earlier versions' waits: whatever supersedes it supersedes them.
        let n = list.len();
        list.retain(|w| !(w.commit < wait.commit && w.matches(&wait.key, &wait.any)));
        if list.len() != n {
            self.waits_dirty = true;
        }
        if !list.contains(&wait) {
            tracing::warn!(
                table = %key,
                column = %wait.column,
                value_id = wait.value_id,
                toast_relid = wait.toast_relid,
                lsn = %wait.lsn,
                source_lsn = %wait.source_lsn,
                "TOAST value gone from the source: the row version is skipped and must be superseded by a later change of its key"
            );
            list.push(wait);
            self.waits_dirty = true;
        }
        self.counters.waiting_rows = self.waiting_rows();
    }

    pub fn has_waits(&self, key: &str) -> bool {
        self.waits.get(key).is_some_and(|l| !l.is_empty())
    }

    /// A row of table `key` with key `row_key` committed at `commit` was
    /// emitted: it supersedes waits of that key from earlier commits.
    ///
    /// A wait with columns that match anything (a FULL key holding the
    /// gone value) is superseded only by a delete marker: the change that
    /// ends that row version deletes it by its whole old row, while a row
    /// written anew that happens to match its readable columns is another
    /// row.
    pub fn superseded(
        &mut self,
        key: &str,
        row_key: &[Option<String>],
        commit: Lsn,
        deleted: bool,
    ) {
        if let Some(list) = self.waits.get_mut(key) {
            let n = list.len();
            list.retain(|w| {
                !(w.commit < commit && w.matches(row_key, &[]) && (deleted || w.any.is_empty()))
            });
            if list.len() != n {
                self.waits_dirty = true;
            }
        }
        self.counters.waiting_rows = self.waiting_rows();
    }

    /// Table `key` was truncated (or stopped): none of its waits matter.
    pub fn clear_waits(&mut self, key: &str) {
        if self.waits.remove(key).is_some() {
            self.waits_dirty = true;
        }
        self.counters.waiting_rows = self.waiting_rows();
    }

    /// Waits no change can satisfy any more: the stream has applied
    /// everything up to their `source_lsn`.
    pub fn overdue(&self, applied: Lsn) -> Vec<(String, Wait)> {
        self.waits
            .iter()
            .flat_map(|(k, l)| {
                l.iter()
                    .filter(|w| w.source_lsn <= applied)
                    .map(move |w| (k.clone(), w.clone()))
            })
            .collect()
    }

    fn waiting_rows(&self) -> u64 {
        self.waits.values().map(|l| l.len() as u64).sum()
    }

    pub async fn close(&mut self) {
        if let Some(c) = self.conn.take() {
            c.close().await;
        }
    }
}

async fn current_lsn(conn: &mut ReplicationClient) -> Result<Lsn, ReplicationError> {
    // On a standby the insert position does not exist; its replay
    // position bounds what it has seen the same way.
    let r = conn
        .simple_query(
            "select case when pg_is_in_recovery() then pg_last_wal_replay_lsn() else pg_current_wal_lsn() end",
        )
        .await?;
    Ok(r.text(0, 0)
        .and_then(|t| t.parse::<Lsn>().ok())
        .unwrap_or(Lsn::MAX))
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// `\x…` (bytea_output = hex).
fn parse_hex_bytea(t: &str) -> Option<Vec<u8>> {
    let hex = t.strip_prefix("\\x")?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let nibble = |c: u8| -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    };
    hex.chunks_exact(2)
        .map(|p| Some(nibble(*p.first()?)? << 4 | nibble(*p.get(1)?)?))
        .collect()
}

/// `(block,offset)`.
fn parse_ctid(t: &str) -> Option<Tid> {
    let (b, o) = t.strip_prefix('(')?.strip_suffix(')')?.split_once(',')?;
    Some(Tid {
        block: b.parse().ok()?,
        offset: o.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_and_ctid() {
        assert_eq!(parse_hex_bytea("\\x00ff10"), Some(vec![0, 255, 16]));
        assert_eq!(parse_hex_bytea("\\x0"), None);
        assert_eq!(parse_hex_bytea("00"), None);
        assert_eq!(parse_hex_bytea("\\xzz"), None);
        assert_eq!(
            parse_ctid("(12,3)"),
            Some(Tid {
                block: 12,
                offset: 3
            })
        );
        assert_eq!(parse_ctid("(12,70000)"), None);
    }
}
