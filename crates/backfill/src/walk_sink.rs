//! The page walk of a `BASE_BACKUP`: the tar stream in, the heap pages of
//! a few relations out, everything else dropped as it passes.
//!
//! ```text
//!  BASE_BACKUP archives ──▶ PageWalkSink::begin_file(path)
//!    base/<db>/<n>[.<seg>]                n in the walk set ─▶ Keep: framed into 8 KiB
//!    <spc>.tar: PG_<v>_<cat>/<db>/<n>[.<seg>]                pages ─▶ PageConsumer::page
//!                                                             (relation, block = seg ×
//!                                                              RELSEG_SIZE + page index)
//!    pg_xact/<seg>, pg_multixact/{offsets,members}/<seg>  ─▶ Keep: in memory (SlruCapture)
//!    <n>_fsm, <n>_vm, <n>_init, other relations,
//!    other databases, everything else                     ─▶ Skip: never buffered
//! ```
//!
//! The walk set is [`RelFileLocator`]s of one database: the tables and
//! their TOAST relations, by the tablespace their files really live in
//! (`1663` for `base/`, as in WAL block references; a relation in another
//! tablespace arrives in that tablespace's archive). Only the main fork is
//! walked: the free space map and visibility map carry no tuples, and an
//! init fork belongs to unlogged relations, whose data a backup does not
//! hold.
//!
//! Pages reach the consumer whole, in file order, as borrowed slices: one
//! page buffered at most, when a CopyData message ends mid-page. A file
//! whose size is not whole pages was being extended while the backup read
//! it; its zero tail is dropped (counted), anything else in the tail is an
//! error. A segment longer than `RELSEG_SIZE` blocks means the configured
//! segment size is wrong, and block numbers would be too: an error.
//!
//! `pg_xact` and `pg_multixact` are kept whole for the visibility gate,
//! bounded by [`WalkOptions::max_slru_bytes`]. They are read as the backup
//! reaches them, so they are complete only once the walk ended successfully
//! ([`PageWalkSink::finish`]); a failed walk must resolve nothing from them.
//!
//! [`PageWalkSink::finish`] also proves every relation of the set was seen:
//! a relation with no main-fork file in the backup was rewritten (`VACUUM
//! FULL`, `CLUSTER`, `TRUNCATE`) or dropped after its filenode was read,
//! and a walk that found nothing must not pass for an empty table.

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;

use bytes::Bytes;
use walshadow_shadow::bootstrap::landing::parse_rel_file_name;
use walshadow_types::{BlockNumber, Oid, RelFileLocator};
use walshadow_wal_reader::replication::{
    ArchiveInfo, BackupSink, EntryKind, FileAction, SinkError, TarEntry,
};

use walshadow_heap::heap_page::{BLCKSZ, HeapPage, PageError};

/// `DEFAULTTABLESPACE_OID` (pg_tablespace.dat): files under `base/`.
pub const DEFAULTTABLESPACE_OID: Oid = 1663;
/// `GLOBALTABLESPACE_OID`: shared catalogs under `global/`.
pub const GLOBALTABLESPACE_OID: Oid = 1664;
/// `RELSEG_SIZE` of a default build: 1 GiB segment files of 8 KiB blocks.
pub const RELSEG_SIZE: u32 = 131_072;
/// `MaxBlockNumber`.
const MAX_BLOCK_NUMBER: u64 = 0xFFFF_FFFE;

/// Why the walk stopped (the consumer's own errors pass through as they
/// are).
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error(
        "the walk set mixes databases {0} and {1}: one backup pass walks one database's \
         relations"
    )]
    MixedDatabases(Oid, Oid),
    #[error("relation {0} is in pg_global or database 0: shared catalogs are not walked")]
    SharedRelation(RelFileLocator),
    #[error(
        "server block_size {0:?}: walshadow reads only 8192-byte pages; use initial_load 'copy'"
    )]
    BlockSize(String),
    #[error("server segment_size {0:?}: {1}")]
    SegmentSize(String, String),
    #[error(
        "{path}: {size} bytes is more than one segment of {segment_blocks} blocks; the server's \
         segment size (SHOW segment_size) is larger than configured"
    )]
    SegmentTooLarge {
        path: String,
        size: u64,
        segment_blocks: u32,
    },
    #[error("{path}: segment {segno} reaches past the last block number")]
    BlockOverflow { path: String, segno: u32 },
    #[error(
        "{path}: the file ends with {bytes} bytes of a page that are not zeros (a torn or \
         truncated read of block {block})"
    )]
    PartialPage {
        path: String,
        block: BlockNumber,
        bytes: usize,
    },
    #[error(
        "{path}: keeping it would hold {would_hold} bytes of pg_xact/pg_multixact in memory, \
         past the limit of {limit}; raise the limit (pg_xact grows 1 byte per 4 transactions \
         since the oldest unfrozen one: VACUUM FREEZE the database to shrink it)"
    )]
    SlruTooLarge {
        path: String,
        would_hold: u64,
        limit: u64,
    },
    #[error(
        "relation file {0} was not in the backup: the relation was rewritten (VACUUM FULL, \
         CLUSTER, TRUNCATE) or dropped after its filenode was read; read the catalog again \
         and rerun the pass"
    )]
    RelationMissing(RelFileLocator),
    #[error("the backup ended before base.tar was complete: nothing it held may be used")]
    Incomplete,
    #[error("{0}")]
    Page(#[from] PageError),
    #[error("file data outside a kept member")]
    Unexpected,
}

/// Settings of one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkOptions {
    /// `RELSEG_SIZE`: blocks per segment file (`SHOW segment_size` over
    /// `block_size`).
    pub segment_blocks: u32,
    /// Verify each page's checksum in [`WalkedPage::heap`] (the cluster
    /// has data checksums: `SHOW data_checksums`).
    pub verify_checksums: bool,
    /// Bound on the `pg_xact` and `pg_multixact` bytes held.
    pub max_slru_bytes: u64,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            segment_blocks: RELSEG_SIZE,
            verify_checksums: false,
            max_slru_bytes: 512 * 1024 * 1024,
        }
    }
}

impl WalkOptions {
    /// From the server's `SHOW block_size`, `SHOW segment_size` and `SHOW
    /// data_checksums` answers. Block sizes other than 8192 are refused.
    pub fn for_server(
        block_size: &str,
        segment_size: &str,
        data_checksums: &str,
    ) -> Result<WalkOptions, WalkError> {
        if block_size.trim() != "8192" {
            return Err(WalkError::BlockSize(block_size.to_owned()));
        }
        let bad = |why: &str| WalkError::SegmentSize(segment_size.to_owned(), why.to_owned());
        let text = segment_size.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (n, unit) = text.split_at(digits);
        let n: u64 = n.parse().map_err(|_| bad("not a size"))?;
        // GUC memory units (guc.c memory_unit_conversion_table).
        let mult: u64 = match unit.trim() {
            "B" => 1,
            "kB" => 1 << 10,
            "MB" => 1 << 20,
            "GB" => 1 << 30,
            "TB" => 1 << 40,
            _ => return Err(bad("unknown unit")),
        };
        let bytes = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
        if bytes == 0 || bytes % BLCKSZ as u64 != 0 {
            return Err(bad("not a whole number of blocks"));
        }
        let segment_blocks = u32::try_from(bytes / BLCKSZ as u64).map_err(|_| bad("too large"))?;
        Ok(WalkOptions {
            segment_blocks,
            verify_checksums: data_checksums.trim() == "on",
            ..WalkOptions::default()
        })
    }
}

/// One page of a walked relation.
#[derive(Debug, Clone, Copy)]
pub struct WalkedPage<'a> {
    pub locator: RelFileLocator,
    /// The block number in the relation.
    pub block: BlockNumber,
    /// The file as the backup named it (tablespace archives prefixed
    /// `pg_tblspc/<spc>/`).
    pub file: &'a str,
    /// `BLCKSZ` bytes.
    pub bytes: &'a [u8],
    verify_checksum: bool,
}

impl<'a> WalkedPage<'a> {
    /// The same block with `bytes` in place of the copy (a full-page image
    /// of the backup's WAL window): its checksum is not checked, since an
    /// image holds the page as it was in memory, where the checksum is
    /// stale until the page is written.
    pub fn replaced<'b>(&self, bytes: &'b [u8]) -> WalkedPage<'b>
    where
        'a: 'b,
    {
        WalkedPage {
            bytes,
            verify_checksum: false,
            ..*self
        }
    }

    /// Parses the page as a heap page (checksum checked when the walk's
    /// options say so); a damaged page names its file and block.
    pub fn heap(&self) -> Result<HeapPage<'a>, PageError> {
        HeapPage::parse(self.bytes, self.block, self.verify_checksum).map_err(|damage| PageError {
            file: self.file.to_owned(),
            block: self.block,
            damage,
        })
    }
}

/// Receives the walked pages, in stream order; each future is awaited
/// before the backup reads on (backpressure).
pub trait PageConsumer {
    fn page(&mut self, page: WalkedPage<'_>) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// A `pg_xact`/`pg_multixact` segment was read whole (it is kept for
    /// [`WalkOutcome::slru`] too): lets a visibility gate decide tuples of
    /// pages that follow it without deferring them.
    fn slru_segment(&mut self, kind: SlruKind, segno: u64, data: &[u8]) -> Result<(), SinkError> {
        let _ = (kind, segno, data);
        Ok(())
    }

    /// A relation segment's pages begin.
    fn file_begin(&mut self, locator: RelFileLocator, segno: u32) {
        let _ = (locator, segno);
    }

    /// A relation segment's `pages` were all handed on (an interrupted
    /// pass records here what it need not walk again).
    fn file_end(
        &mut self,
        locator: RelFileLocator,
        segno: u32,
        pages: u64,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        let _ = (locator, segno, pages);
        std::future::ready(Ok(()))
    }
}

impl<F> PageConsumer for F
where
    F: FnMut(WalkedPage<'_>) -> Result<(), SinkError> + Send,
{
    fn page(&mut self, page: WalkedPage<'_>) -> impl Future<Output = Result<(), SinkError>> + Send {
        std::future::ready(self(page))
    }
}

/// The segment files of one SLRU, by segment number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlruSegments {
    segments: BTreeMap<u64, Vec<u8>>,
}

impl SlruSegments {
    /// Segment `segno`'s bytes as the backup read them.
    pub fn get(&self, segno: u64) -> Option<&[u8]> {
        self.segments.get(&segno).map(Vec::as_slice)
    }

    /// Every segment, in segment number order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.segments.iter().map(|(n, b)| (*n, b.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    pub fn bytes(&self) -> u64 {
        self.segments.values().map(|b| b.len() as u64).sum()
    }
}

/// Which SLRU a kept file belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlruKind {
    /// `pg_xact/`: two status bits per transaction (clog.c).
    Xact,
    /// `pg_multixact/offsets/`.
    MultiXactOffsets,
    /// `pg_multixact/members/`.
    MultiXactMembers,
}

impl SlruKind {
    /// The SLRU of a path in the data directory's archive, and the
    /// segment's name.
    pub fn of(path: &str) -> Option<(SlruKind, &str)> {
        let (kind, name) = if let Some(n) = path.strip_prefix("pg_xact/") {
            (SlruKind::Xact, n)
        } else if let Some(n) = path.strip_prefix("pg_multixact/offsets/") {
            (SlruKind::MultiXactOffsets, n)
        } else if let Some(n) = path.strip_prefix("pg_multixact/members/") {
            (SlruKind::MultiXactMembers, n)
        } else {
            return None;
        };
        Some((kind, name))
    }
}

/// `pg_xact` and `pg_multixact` as the backup carried them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlruCapture {
    pub pg_xact: SlruSegments,
    pub multixact_offsets: SlruSegments,
    pub multixact_members: SlruSegments,
}

impl SlruCapture {
    fn of_kind(&mut self, kind: SlruKind) -> &mut SlruSegments {
        match kind {
            SlruKind::Xact => &mut self.pg_xact,
            SlruKind::MultiXactOffsets => &mut self.multixact_offsets,
            SlruKind::MultiXactMembers => &mut self.multixact_members,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.pg_xact.bytes() + self.multixact_offsets.bytes() + self.multixact_members.bytes()
    }
}

/// An SLRU segment file name: 4 to 15 hex digits (slru.c names them
/// `%04X`, wider when the segment number needs it).
fn slru_segno(name: &str) -> Option<u64> {
    if !(4..=15).contains(&name.len()) || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(name, 16).ok()
}

/// A relation file the walk read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalkedFile {
    pub locator: RelFileLocator,
    pub segno: u32,
    pub file: String,
    pub bytes: u64,
}

/// Counts of one walk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Relation files walked and their bytes.
    pub files_walked: u64,
    pub bytes_walked: u64,
    /// Pages handed to the consumer.
    pub pages_walked: u64,
    /// Zero tails of files caught mid-extension, dropped.
    pub partial_pages: u64,
    /// `pg_xact`/`pg_multixact` files kept in memory and their bytes.
    pub slru_files: u64,
    pub slru_bytes: u64,
    /// Regular files dropped unread and their sizes.
    pub files_skipped: u64,
    pub bytes_skipped: u64,
    /// Relation segments an earlier attempt already put in staging, not
    /// read again, and their sizes.
    pub files_resumed: u64,
    pub bytes_resumed: u64,
    /// Directories and symlinks.
    pub other_members: u64,
}

/// What a successful walk leaves.
pub struct WalkOutcome<C> {
    pub consumer: C,
    pub slru: SlruCapture,
    pub stats: WalkStats,
    pub files: Vec<WalkedFile>,
}

impl<C> std::fmt::Debug for WalkOutcome<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalkOutcome")
            .field("stats", &self.stats)
            .field("files", &self.files)
            .field("slru_bytes", &self.slru.bytes())
            .finish_non_exhaustive()
    }
}

enum Current {
    Rel {
        locator: RelFileLocator,
        file: String,
        segno: u32,
        /// The block number of the segment's first page, and of the next.
        first: u64,
        next_block: u64,
        /// A page begun in one message and ended in another.
        partial: Vec<u8>,
    },
    Slru {
        kind: SlruKind,
        segno: u64,
        data: Vec<u8>,
    },
}

/// A [`BackupSink`] that walks the main-fork pages of a set of relations
/// into a [`PageConsumer`] and keeps `pg_xact`/`pg_multixact` in memory.
pub struct PageWalkSink<C> {
    db_oid: Oid,
    /// (tablespace, relfilenumber) → segments seen.
    rels: HashMap<(Oid, Oid), BTreeSet<u32>>,
    /// `(tablespace, relfilenumber, segment)` already walked into staging
    /// by an earlier attempt: seen, not read.
    done: HashSet<(Oid, Oid, u32)>,
    consumer: C,
    opts: WalkOptions,
    current: Option<Current>,
    slru: SlruCapture,
    stats: WalkStats,
    files: Vec<WalkedFile>,
    base_ended: bool,
}

impl<C> std::fmt::Debug for PageWalkSink<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageWalkSink")
            .field("db_oid", &self.db_oid)
            .field("rels", &self.rels.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl<C: PageConsumer + Send> PageWalkSink<C> {
    /// A walk of `rels`, all of one database.
    pub fn new(
        rels: impl IntoIterator<Item = RelFileLocator>,
        consumer: C,
        opts: WalkOptions,
    ) -> Result<Self, WalkError> {
        let mut db_oid = None;
        let mut set = HashMap::new();
        for r in rels {
            if r.spc_oid == GLOBALTABLESPACE_OID || r.db_oid == 0 {
                return Err(WalkError::SharedRelation(r));
            }
            match db_oid {
                Some(db) if db != r.db_oid => return Err(WalkError::MixedDatabases(db, r.db_oid)),
                _ => db_oid = Some(r.db_oid),
            }
            set.insert((r.spc_oid, r.rel_number), BTreeSet::new());
        }
        Ok(PageWalkSink {
            db_oid: db_oid.unwrap_or(0),
            rels: set,
            done: HashSet::new(),
            consumer,
            opts,
            current: None,
            slru: SlruCapture::default(),
            stats: WalkStats::default(),
            files: Vec::new(),
            base_ended: false,
        })
    }

    /// Segments an earlier attempt walked into staging: they count as
    /// seen and are not read.
    pub fn with_done(mut self, done: impl IntoIterator<Item = (Oid, Oid, u32)>) -> Self {
        self.done.extend(done);
        self
    }

    pub fn stats(&self) -> &WalkStats {
        &self.stats
    }

    /// Ends a walk whose backup finished: every relation of the set must
    /// have shown its first segment.
    pub fn finish(self) -> Result<WalkOutcome<C>, WalkError> {
        if !self.base_ended || self.current.is_some() {
            return Err(WalkError::Incomplete);
        }
        let mut missing: Vec<_> = self
            .rels
            .iter()
            .filter(|(_, segs)| !segs.contains(&0))
            .map(|((spc, rel), _)| RelFileLocator {
                spc_oid: *spc,
                db_oid: self.db_oid,
                rel_number: *rel,
            })
            .collect();
        missing.sort_unstable();
        if let Some(m) = missing.first() {
            return Err(WalkError::RelationMissing(*m));
        }
        Ok(WalkOutcome {
            consumer: self.consumer,
            slru: self.slru,
            stats: self.stats,
            files: self.files,
        })
    }

    /// The relation and segment a member is, if it is one to walk.
    fn relation_member(&self, archive: &ArchiveInfo, path: &str) -> Option<(Oid, Oid, u32)> {
        let parts: Vec<&str> = path.split('/').collect();
        let (spc, db, name) = match (archive.spcoid, parts.as_slice()) {
            (None, ["base", db, name]) => (DEFAULTTABLESPACE_OID, *db, *name),
            (Some(spc), [ver, db, name]) if ver.starts_with("PG_") => (spc, *db, *name),
            // wal-g keeps a tablespace's files in the data directory's
            // partitions, under the symlink's path.
            (None, ["pg_tblspc", spc, ver, db, name]) if ver.starts_with("PG_") => {
                (spc.parse().ok()?, *db, *name)
            }
            _ => return None,
        };
        if db.parse::<Oid>().ok()? != self.db_oid {
            return None;
        }
        let f = parse_rel_file_name(name)?;
        (f.fork.is_none() && self.rels.contains_key(&(spc, f.number)))
            .then_some((spc, f.number, f.segno))
    }

    /// Whether [`BackupSink::begin_file`] keeps the file at `path` of
    /// `archive`: decided by its name alone, so a reader of a stored backup
    /// fetches only these.
    pub fn wants(&self, archive: &ArchiveInfo, path: &str) -> bool {
        self.relation_member(archive, path)
            .is_some_and(|m| !self.done.contains(&m))
            || (archive.is_base()
                && SlruKind::of(path).is_some_and(|(_, name)| slru_segno(name).is_some()))
    }

    fn skip(&mut self, file: &TarEntry) -> FileAction {
        self.stats.files_skipped += 1;
        self.stats.bytes_skipped += file.size;
        FileAction::Skip
    }

    /// Hands the whole pages of `data` on; keeps a trailing part page.
    async fn feed_pages(&mut self, mut data: &[u8]) -> Result<(), SinkError> {
        let Some(Current::Rel {
            locator,
            file,
            segno,
            next_block,
            partial,
            ..
        }) = self.current.as_mut()
        else {
            return Err(WalkError::Unexpected.into());
        };
        while !data.is_empty() {
            let page: &[u8] = if partial.is_empty() && data.len() >= BLCKSZ {
                let (page, rest) = data.split_at(BLCKSZ);
                data = rest;
                page
            } else {
                let take = (BLCKSZ - partial.len()).min(data.len());
                let (head, rest) = data.split_at(take);
                partial.extend_from_slice(head);
                data = rest;
                if partial.len() < BLCKSZ {
                    break;
                }
                partial.as_slice()
            };
            let block = BlockNumber::try_from(*next_block)
                .ok()
                .filter(|b| u64::from(*b) <= MAX_BLOCK_NUMBER)
                .ok_or_else(|| WalkError::BlockOverflow {
                    path: file.clone(),
                    segno: *segno,
                })?;
            self.consumer
                .page(WalkedPage {
                    locator: *locator,
                    block,
                    file,
                    bytes: page,
                    verify_checksum: self.opts.verify_checksums,
                })
                .await?;
            self.stats.pages_walked += 1;
            *next_block += 1;
            partial.clear();
        }
        Ok(())
    }
}

impl<C: PageConsumer + Send> BackupSink for PageWalkSink<C> {
    async fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> Result<FileAction, SinkError> {
        if file.kind != EntryKind::File {
            self.stats.other_members += 1;
            return Ok(FileAction::Skip);
        }
        let shown = match archive.spcoid {
            None => file.path.clone(),
            Some(spc) => format!("pg_tblspc/{spc}/{}", file.path),
        };
        if let Some((spc, rel, segno)) = self.relation_member(archive, &file.path)
            && self.done.contains(&(spc, rel, segno))
        {
            if let Some(segs) = self.rels.get_mut(&(spc, rel)) {
                segs.insert(segno);
            }
            self.stats.files_resumed += 1;
            self.stats.bytes_resumed += file.size;
            return Ok(FileAction::Skip);
        }
        if let Some((spc, rel, segno)) = self.relation_member(archive, &file.path) {
            let seg_bytes = u64::from(self.opts.segment_blocks) * BLCKSZ as u64;
            if file.size > seg_bytes {
                return Err(WalkError::SegmentTooLarge {
                    path: shown,
                    size: file.size,
                    segment_blocks: self.opts.segment_blocks,
                }
                .into());
            }
            let first = u64::from(segno) * u64::from(self.opts.segment_blocks);
            if first > MAX_BLOCK_NUMBER {
                return Err(WalkError::BlockOverflow { path: shown, segno }.into());
            }
            let locator = RelFileLocator {
                spc_oid: spc,
                db_oid: self.db_oid,
                rel_number: rel,
            };
            if let Some(segs) = self.rels.get_mut(&(spc, rel)) {
                segs.insert(segno);
            }
            self.stats.files_walked += 1;
            self.stats.bytes_walked += file.size;
            self.files.push(WalkedFile {
                locator,
                segno,
                file: shown.clone(),
                bytes: file.size,
            });
            self.consumer.file_begin(locator, segno);
            self.current = Some(Current::Rel {
                locator,
                file: shown,
                segno,
                first,
                next_block: first,
                partial: Vec::new(),
            });
            return Ok(FileAction::Keep);
        }
        if archive.is_base()
            && let Some((kind, name)) = SlruKind::of(&file.path)
        {
            let Some(segno) = slru_segno(name) else {
                tracing::warn!(member = %file.path, "unexpected file in an SLRU directory skipped");
                return Ok(self.skip(file));
            };
            let would_hold = self.stats.slru_bytes.saturating_add(file.size);
            if would_hold > self.opts.max_slru_bytes {
                return Err(WalkError::SlruTooLarge {
                    path: shown,
                    would_hold,
                    limit: self.opts.max_slru_bytes,
                }
                .into());
            }
            self.stats.slru_files += 1;
            self.stats.slru_bytes = would_hold;
            self.current = Some(Current::Slru {
                kind,
                segno,
                // Bounded by max_slru_bytes just above.
                data: Vec::with_capacity(usize::try_from(file.size).unwrap_or(0)),
            });
            return Ok(FileAction::Keep);
        }
        Ok(self.skip(file))
    }

    async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        match self.current.as_mut() {
            Some(Current::Rel { .. }) => self.feed_pages(&chunk).await,
            Some(Current::Slru { data, .. }) => {
                data.extend_from_slice(&chunk);
                Ok(())
            }
            None => Err(WalkError::Unexpected.into()),
        }
    }

    async fn end_file(&mut self) -> Result<(), SinkError> {
        match self.current.take() {
            Some(Current::Rel {
                locator,
                file,
                segno,
                first,
                next_block,
                partial,
            }) => {
                if !partial.is_empty() {
                    if partial.iter().any(|b| *b != 0) {
                        return Err(WalkError::PartialPage {
                            path: file,
                            block: BlockNumber::try_from(next_block).unwrap_or(BlockNumber::MAX),
                            bytes: partial.len(),
                        }
                        .into());
                    }
                    self.stats.partial_pages += 1;
                }
                self.consumer
                    .file_end(locator, segno, next_block - first)
                    .await?;
            }
            Some(Current::Slru { kind, segno, data }) => {
                self.consumer.slru_segment(kind, segno, &data)?;
                self.slru.of_kind(kind).segments.insert(segno, data);
            }
            None => {}
        }
        Ok(())
    }

    async fn end_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
        if archive.is_base() {
            self.base_ended = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walshadow_heap::heap_page::test_page::build_page;

    fn base() -> ArchiveInfo {
        ArchiveInfo {
            name: "base.tar".into(),
            spcoid: None,
            location: None,
        }
    }

    fn entry(path: &str, size: u64) -> TarEntry {
        TarEntry {
            path: path.into(),
            size,
            kind: EntryKind::File,
            mode: 0o600,
            mtime: 0,
        }
    }

    fn loc(spc: Oid, rel: Oid) -> RelFileLocator {
        RelFileLocator {
            spc_oid: spc,
            db_oid: 5,
            rel_number: rel,
        }
    }

    type Seen = Vec<(RelFileLocator, BlockNumber, String, u32)>;

    fn collector(seen: &mut Seen) -> impl FnMut(WalkedPage<'_>) -> Result<(), SinkError> + Send {
        move |p: WalkedPage<'_>| {
            let heap = p.heap()?;
            let xmin = heap.tuples().first().map_or(0, |t| t.xmin);
            seen.push((p.locator, p.block, p.file.to_owned(), xmin));
            Ok(())
        }
    }

    fn checker() -> impl FnMut(WalkedPage<'_>) -> Result<(), SinkError> + Send + 'static {
        |p: WalkedPage<'_>| p.heap().map(drop).map_err(Into::into)
    }

    /// Feeds one member in pieces of `piece` bytes; returns the action.
    async fn feed<C: PageConsumer + Send>(
        sink: &mut PageWalkSink<C>,
        archive: &ArchiveInfo,
        path: &str,
        data: &[u8],
        piece: usize,
    ) -> Result<FileAction, SinkError> {
        let action = sink
            .begin_file(archive, &entry(path, data.len() as u64))
            .await?;
        if action == FileAction::Keep {
            for c in data.chunks(piece.max(1)) {
                sink.file_data(Bytes::copy_from_slice(c)).await?;
            }
            sink.end_file().await?;
        }
        Ok(action)
    }

    fn file_of(pages: usize, block0: BlockNumber, checksum: bool) -> Vec<u8> {
        (0..pages)
            .flat_map(|i| build_page(&[b"row"], block0 + i as u32, checksum))
            .collect()
    }

    /// Segments an earlier attempt put in staging: not wanted, not read,
    /// and seen (the walk does not call the relation missing).
    #[tokio::test]
    async fn done_segments_are_seen_unread() {
        let mut seen = Seen::new();
        let mut sink = PageWalkSink::new(
            [loc(1663, 16384), loc(1663, 16390)],
            collector(&mut seen),
            WalkOptions {
                segment_blocks: 4,
                ..WalkOptions::default()
            },
        )
        .unwrap()
        .with_done([(1663, 16384, 0)]);
        let b = base();
        assert!(!sink.wants(&b, "base/5/16384"));
        assert!(sink.wants(&b, "base/5/16384.1"));
        assert!(sink.wants(&b, "base/5/16390"));
        let file = file_of(4, 0, true);
        for (path, action) in [
            ("base/5/16384", FileAction::Skip),
            ("base/5/16390", FileAction::Keep),
        ] {
            assert_eq!(
                feed(&mut sink, &b, path, &file, BLCKSZ).await.unwrap(),
                action
            );
        }
        sink.end_archive(&b).await.unwrap();
        let out = sink.finish().unwrap();
        assert_eq!(out.stats.files_resumed, 1);
        assert_eq!(out.stats.bytes_resumed, file.len() as u64);
        assert_eq!(out.stats.files_walked, 1);
        drop(out);
        assert!(seen.iter().all(|(l, ..)| l.rel_number == 16390));
    }

    /// wal-g: a tablespace's files inside the data directory's archive,
    /// under `pg_tblspc/<oid>/`, are that tablespace's.
    #[tokio::test]
    async fn a_tablespace_under_pg_tblspc_in_the_base_archive() {
        let mut seen = Seen::new();
        let mut sink = PageWalkSink::new(
            [loc(20000, 16400)],
            collector(&mut seen),
            WalkOptions::default(),
        )
        .unwrap();
        let b = base();
        for (path, wanted) in [
            ("pg_tblspc/20000/PG_15_202209061/5/16400", true),
            ("pg_tblspc/20000/PG_15_202209061/6/16400", false),
            ("pg_tblspc/20001/PG_15_202209061/5/16400", false),
            ("pg_tblspc/x/PG_15_202209061/5/16400", false),
            ("pg_tblspc/20000/other/5/16400", false),
            ("base/5/16400", false),
        ] {
            assert_eq!(sink.wants(&b, path), wanted, "{path}");
        }
        let file = file_of(2, 0, true);
        let action = feed(
            &mut sink,
            &b,
            "pg_tblspc/20000/PG_15_202209061/5/16400",
            &file,
            BLCKSZ,
        )
        .await
        .unwrap();
        assert_eq!(action, FileAction::Keep);
        drop(sink);
        let walked: Vec<_> = seen.iter().map(|(l, b, _, _)| (*l, *b)).collect();
        assert_eq!(walked, [(loc(20000, 16400), 0), (loc(20000, 16400), 1)]);
    }

    #[tokio::test]
    async fn segments_forks_and_skips() {
        for piece in [1000, BLCKSZ, 3 * BLCKSZ + 7, 1 << 20] {
            let mut seen = Seen::new();
            let opts = WalkOptions {
                segment_blocks: 4,
                verify_checksums: true,
                ..WalkOptions::default()
            };
            let mut sink = PageWalkSink::new(
                [loc(1663, 16384), loc(1663, 16390), loc(20000, 16400)],
                collector(&mut seen),
                opts,
            )
            .unwrap();
            let b = base();
            let k = FileAction::Keep;
            let s = FileAction::Skip;
            // Segment 1 of 16384 (blocks 4..6), before segment 0.
            let seg1 = file_of(2, 4, true);
            assert_eq!(
                feed(&mut sink, &b, "base/5/16384.1", &seg1, piece)
                    .await
                    .unwrap(),
                k
            );
            let seg0 = file_of(4, 0, true);
            assert_eq!(
                feed(&mut sink, &b, "base/5/16384", &seg0, piece)
                    .await
                    .unwrap(),
                k
            );
            for skipped in [
                "base/5/16384_fsm",
                "base/5/16384_vm",
                "base/5/16384_init",
                "base/5/16385",
                "base/6/16384",
                "base/5/t3_16384",
                "base/5/pg_filenode.map",
                "global/16384",
                "pg_wal/000000010000000000000001",
            ] {
                assert_eq!(
                    feed(&mut sink, &b, skipped, &seg1, piece).await.unwrap(),
                    s,
                    "{skipped}"
                );
            }
            // An empty main fork (16390) still counts as seen.
            assert_eq!(
                feed(&mut sink, &b, "base/5/16390", &[], piece)
                    .await
                    .unwrap(),
                k
            );
            // A tablespace archive: its own relative paths.
            let ts = ArchiveInfo {
                name: "20000.tar".into(),
                spcoid: Some(20000),
                location: Some("/ts".into()),
            };
            let ts_file = file_of(1, 0, true);
            assert_eq!(
                feed(&mut sink, &ts, "PG_15_202209061/5/16400", &ts_file, piece)
                    .await
                    .unwrap(),
                k
            );
            // Same number in base/: another relation.
            assert_eq!(
                feed(&mut sink, &b, "base/5/16400", &ts_file, piece)
                    .await
                    .unwrap(),
                s
            );
            // SLRUs, kept; a stray name skipped.
            let clog = vec![0x55u8; 3 * BLCKSZ];
            assert_eq!(
                feed(&mut sink, &b, "pg_xact/0000", &clog, piece)
                    .await
                    .unwrap(),
                k
            );
            assert_eq!(
                feed(&mut sink, &b, "pg_multixact/offsets/0001", &[1, 2], piece)
                    .await
                    .unwrap(),
                k
            );
            assert_eq!(
                feed(&mut sink, &b, "pg_multixact/members/0000", &[3], piece)
                    .await
                    .unwrap(),
                k
            );
            assert_eq!(
                feed(&mut sink, &b, "pg_xact/README", &[3], piece)
                    .await
                    .unwrap(),
                s
            );
            assert_eq!(
                feed(&mut sink, &b, "pg_subtrans/0000", &[3], piece)
                    .await
                    .unwrap(),
                s
            );
            // Not finished before base.tar ends.
            sink.end_archive(&ts).await.unwrap();
            sink.end_archive(&b).await.unwrap();
            let out = sink.finish().unwrap();
            assert_eq!(out.stats.files_walked, 4);
            assert_eq!(out.stats.pages_walked, 7);
            assert_eq!(out.stats.bytes_walked, 7 * BLCKSZ as u64);
            assert_eq!(out.stats.files_skipped, 12);
            assert_eq!(out.stats.bytes_skipped, 19 * BLCKSZ as u64 + 2);
            assert_eq!(
                (out.stats.slru_files, out.stats.slru_bytes),
                (3, 3 * BLCKSZ as u64 + 3)
            );
            assert_eq!(out.slru.pg_xact.get(0), Some(&clog[..]));
            assert_eq!(out.slru.multixact_offsets.get(1), Some(&[1u8, 2][..]));
            assert_eq!(out.slru.multixact_members.iter().count(), 1);
            drop(out);
            let blocks: Vec<_> = seen
                .iter()
                .map(|(l, b, _, x)| (l.rel_number, *b, *x))
                .collect();
            assert_eq!(
                blocks,
                [
                    (16384, 4, 100),
                    (16384, 5, 100),
                    (16384, 0, 100),
                    (16384, 1, 100),
                    (16384, 2, 100),
                    (16384, 3, 100),
                    (16400, 0, 100)
                ],
                "piece {piece}"
            );
            assert_eq!(seen[6].0.spc_oid, 20000);
            assert_eq!(seen[6].2, "pg_tblspc/20000/PG_15_202209061/5/16400");
        }
    }

    #[tokio::test]
    async fn block_arithmetic_of_default_segments() {
        let mut seen = Seen::new();
        let opts = WalkOptions {
            verify_checksums: true,
            ..WalkOptions::default()
        };
        let mut sink = PageWalkSink::new([loc(1663, 7)], collector(&mut seen), opts).unwrap();
        let b = base();
        // Segment 3's first page is block 3 × 131072; its checksum proves
        // the block number used.
        let page = build_page(&[b"x"], 3 * RELSEG_SIZE, true);
        feed(&mut sink, &b, "base/5/7.3", &page, 5000)
            .await
            .unwrap();
        // The last segment that still has block numbers: 32767 × 131072 =
        // 2^32 - 131072.
        let last = build_page(&[b"y"], 32767 * RELSEG_SIZE, true);
        feed(&mut sink, &b, "base/5/7.32767", &last, BLCKSZ)
            .await
            .unwrap();
        let e = feed(&mut sink, &b, "base/5/7.32768", &last, BLCKSZ)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e.downcast_ref(),
                Some(WalkError::BlockOverflow { segno: 32768, .. })
            ),
            "{e}"
        );
        // Missing segment 0: the relation was not in the backup.
        sink.end_archive(&b).await.unwrap();
        let e = sink.finish().unwrap_err();
        assert!(
            matches!(e, WalkError::RelationMissing(l) if l.rel_number == 7),
            "{e}"
        );
        assert_eq!(
            seen.iter().map(|s| s.1).collect::<Vec<_>>(),
            [393_216, 4_294_836_224]
        );
    }

    #[tokio::test]
    async fn damaged_and_odd_files() {
        let b = base();
        let opts = WalkOptions {
            segment_blocks: 2,
            verify_checksums: true,
            max_slru_bytes: 100,
        };
        let mut sink = PageWalkSink::new([loc(1663, 9)], checker(), opts).unwrap();
        // Too long for a segment.
        let e = feed(&mut sink, &b, "base/5/9", &file_of(3, 0, true), BLCKSZ)
            .await
            .unwrap_err();
        assert!(
            matches!(e.downcast_ref(), Some(WalkError::SegmentTooLarge { .. })),
            "{e}"
        );
        // A bad checksum names the file and block.
        let mut sink = PageWalkSink::new([loc(1663, 9)], checker(), opts).unwrap();
        let mut bad = file_of(2, 2, true);
        bad[BLCKSZ + 100] ^= 1;
        let e = feed(&mut sink, &b, "base/5/9.1", &bad, 777)
            .await
            .unwrap_err();
        let pe = e.downcast_ref::<PageError>().unwrap();
        assert_eq!((pe.file.as_str(), pe.block), ("base/5/9.1", 3));
        assert!(
            e.to_string()
                .starts_with("relation file base/5/9.1, block 3: checksum"),
            "{e}"
        );
        // A zero tail is dropped; a non-zero tail is an error.
        let mut sink = PageWalkSink::new([loc(1663, 9)], checker(), opts).unwrap();
        let mut f = file_of(1, 0, true);
        f.extend_from_slice(&[0; 4096]);
        feed(&mut sink, &b, "base/5/9", &f, 3000).await.unwrap();
        assert_eq!(sink.stats().partial_pages, 1);
        *f.last_mut().unwrap() = 1;
        let e = feed(&mut sink, &b, "base/5/9", &f, 3000).await.unwrap_err();
        assert!(
            matches!(
                e.downcast_ref(),
                Some(WalkError::PartialPage {
                    block: 1,
                    bytes: 4096,
                    ..
                })
            ),
            "{e}"
        );
        // The SLRU bound, checked before anything is held.
        let mut sink = PageWalkSink::new([loc(1663, 9)], checker(), opts).unwrap();
        feed(&mut sink, &b, "pg_xact/0000", &[0; 60], 7)
            .await
            .unwrap();
        let e = feed(&mut sink, &b, "pg_xact/0001", &[0; 60], 7)
            .await
            .unwrap_err();
        assert!(
            matches!(
                e.downcast_ref(),
                Some(WalkError::SlruTooLarge {
                    would_hold: 120,
                    ..
                })
            ),
            "{e}"
        );
        // A walk whose base.tar never ended yields nothing.
        let sink = PageWalkSink::new([loc(1663, 9)], checker(), opts).unwrap();
        assert!(matches!(sink.finish(), Err(WalkError::Incomplete)));
    }

    #[test]
    fn walk_sets_and_server_settings() {
        let c = |_: WalkedPage<'_>| -> Result<(), SinkError> { Ok(()) };
        let other_db = RelFileLocator {
            db_oid: 6,
            ..loc(1663, 1)
        };
        assert!(matches!(
            PageWalkSink::new([loc(1663, 1), other_db], c, WalkOptions::default()),
            Err(WalkError::MixedDatabases(5, 6))
        ));
        assert!(matches!(
            PageWalkSink::new([loc(1664, 1)], c, WalkOptions::default()),
            Err(WalkError::SharedRelation(_))
        ));
        let o = WalkOptions::for_server("8192", "1GB", "on").unwrap();
        assert_eq!((o.segment_blocks, o.verify_checksums), (RELSEG_SIZE, true));
        let o = WalkOptions::for_server("8192", "48kB", "off").unwrap();
        assert_eq!((o.segment_blocks, o.verify_checksums), (6, false));
        assert!(matches!(
            WalkOptions::for_server("16384", "1GB", "on"),
            Err(WalkError::BlockSize(_))
        ));
        for bad in ["1 parsec", "", "12kB", "0B", "99999999999TB"] {
            assert!(
                matches!(
                    WalkOptions::for_server("8192", bad, "on"),
                    Err(WalkError::SegmentSize(..))
                ),
                "{bad}"
            );
        }
        assert_eq!(slru_segno("0000"), Some(0));
        assert_eq!(slru_segno("00A1F"), Some(0xA1F));
        for bad in ["000", "000G", "0000000000000000"] {
            assert_eq!(slru_segno(bad), None, "{bad}");
        }
    }
}
