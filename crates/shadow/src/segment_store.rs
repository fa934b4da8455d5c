//! A durable store of (already filtered) WAL in PostgreSQL-named segment files, the
//! source the [feeder](crate::feeder) serves the shadow standby from.
//!
//! ```text
//!  shadow filter ──append(lsn, bytes)──▶ SegmentStore ──read_at(tli, lsn)──▶ feeder ──▶ shadow PG
//!                 ──flush()─────────────▶   │ dir/
//!                                            │   000000010000000000000003   segment files, as pg_wal names them
//!                                            │   00000002.history           timeline history, verbatim
//!                                            │   segment_store.state        durable end (versioned, checksummed)
//!                                            └─▶ watch::Receiver<DurableEnd>
//! ```
//!
//! # Invariants
//!
//! - Bytes are appended contiguously; a byte at LSN `L` on timeline `T` lives at offset
//!   `L % seg_size` of the file `T` + segno(`L`), so a segment is byte-identical to the
//!   source's (the records inside may have been rewritten to `XLOG_NOOP`, same length).
//! - Appended bytes wait in memory until the next flush writes them (or until 1 MiB of
//!   them is written without a flush): one write per flush rather than per message.
//! - The durable end only moves once segment data, the directory and the state file are
//!   fsynced, in that order; the watch channel announces it after that. Readers never see
//!   bytes past the durable end, so what the standby got survives a crash of walshadow.
//! - A timeline switch at `S` starts the new timeline's segment `segno(S)` with the bytes
//!   `[segment start, S)` copied from the old timeline, as PostgreSQL does at promotion
//!   (`XLogInitNewTimeline` in xlog.c), so the new timeline can be served from that
//!   segment's start.
//!
//! # Crash recovery
//!
//! The state file (`segment_store.state`) holds the durable end. Every flush writes it, so
//! it is updated in place and creates no file: two fixed slots, A and B, each a whole
//! state record with a generation, written alternately by a positioned write and
//! `fdatasync` on a handle kept open. A torn write can only damage the slot being written;
//! the other holds the previous durable state, which is then the durable end (the flush
//! that tore never returned). [`SegmentStore::open`] takes the valid slot with the newer
//! generation and refuses the store when neither is valid. The slots sit in separate
//! 4 KiB pages, so writing one never rewrites the other's blocks. The file is created (and
//! replaced, after a failed write) whole by write-temp + fsync + rename + directory fsync,
//! with the record in one slot and zeros in the other.
//!
//! After a crash the current segment may hold bytes past the durable end (written, not
//! yet fsynced, or torn): [`SegmentStore::open`] truncates the segment to the recorded end
//! and deletes later segments and segments of timelines the state never switched to, so
//! appending resumes exactly at [`SegmentStore::flushed_end`].
//!
//! State file layout: 8192 bytes, slot A at offset 0, slot B at 4096, the rest zero. A
//! slot, little-endian, 40 bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `WSSG` |
//! | 4 | 4 | format version (2) |
//! | 8 | 4 | segment size |
//! | 12 | 4 | current timeline |
//! | 16 | 8 | oldest LSN held (`start`) |
//! | 24 | 8 | durable end |
//! | 32 | 4 | generation |
//! | 36 | 4 | CRC-32C of bytes 0..36 |
//!
//! Each write uses the previous generation plus one, wrapping: `a` is newer than `b` when
//! `a - b` (mod 2³²) lies in `1..2³¹`; the two valid slots differ by one. Format version 1
//! was this record alone (40 bytes, generation field zero), replaced by rename: it is
//! still read, and the first write converts it.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use walshadow_pg_format::wal_files;

use tokio::sync::watch;
use walshadow_types::Lsn;

const STATE_FILE: &str = "segment_store.state";
const STATE_TEMP: &str = "segment_store.state.tmp";
const STATE_MAGIC: [u8; 4] = *b"WSSG";
/// Version of the two-slot layout and of its records.
const STATE_VERSION: u32 = 2;
/// The single-record file of the first format, read for the upgrade.
const LEGACY_VERSION: u32 = 1;
/// One encoded state record: a slot, or the whole version-1 file.
const RECORD_LEN: usize = 40;
/// Distance between the slots: one page each, so a write of one leaves the other's
/// blocks alone.
const SLOT_STRIDE: usize = 4096;
const STATE_FILE_LEN: usize = 2 * SLOT_STRIDE;

/// The durable end of the store: everything before `lsn` on timeline `tli` is fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableEnd {
    pub tli: u32,
    pub lsn: Lsn,
}

/// One timeline of the store's history: it holds `[begin, end)`; `end` is `None` for the
/// current timeline. `begin` is the parent's switch point (0 for the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimelineSpan {
    pub tli: u32,
    pub begin: Lsn,
    pub end: Option<Lsn>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("segment store {dir}: {what}: {source}")]
    Io {
        dir: PathBuf,
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "segment store: append at {got} is not contiguous with the end {expected}; \
         WAL must be appended in order without gaps"
    )]
    NotContiguous { expected: Lsn, got: Lsn },
    #[error("segment store: invalid segment size {0}: must be a power of two from 1 MiB to 1 GiB")]
    BadSegmentSize(u32),
    #[error(
        "segment store {dir}: state file is damaged: {reason}; restore it or rebuild the store"
    )]
    CorruptState { dir: PathBuf, reason: String },
    #[error(
        "segment store {dir}: state file has format version {found}, this build reads \
         {LEGACY_VERSION} and {STATE_VERSION}"
    )]
    UnsupportedVersion { dir: PathBuf, found: u32 },
    #[error("segment store {dir} already exists; open it instead of creating it")]
    AlreadyExists { dir: PathBuf },
    #[error("segment store {dir} has no state file; create the store first")]
    NotFound { dir: PathBuf },
    #[error("requested WAL at {lsn} has already been removed (the store starts at {start})")]
    Removed { lsn: Lsn, start: Lsn },
    #[error("timeline {tli} is not in the store's history (current timeline {current})")]
    UnknownTimeline { tli: u32, current: u32 },
    #[error("timeline history for timeline {tli} is invalid: {reason}")]
    BadHistory { tli: u32, reason: String },
    #[error(
        "timeline switch to {new_tli} at {at} is invalid: {reason} (current timeline {tli}, end {end})"
    )]
    BadSwitch {
        new_tli: u32,
        at: Lsn,
        tli: u32,
        end: Lsn,
        reason: &'static str,
    },
    #[error(
        "segment {file} is shorter than the durable end needs ({len} < {needed} bytes); \
         the store lost data it had fsynced"
    )]
    ShortSegment { file: String, len: u64, needed: u64 },
}

/// How to create a new store.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// The source's WAL segment size in bytes.
    pub segment_size: u32,
    /// Timeline of the first byte.
    pub tli: u32,
    /// LSN of the first byte that will be appended. Use a segment start: a standby asks
    /// for WAL from segment starts.
    pub start: Lsn,
    /// `<tli>.history` contents, required when `tli > 1`, verbatim from the source.
    pub history: Option<Vec<u8>>,
}

/// See the module docs.
#[derive(Debug)]
pub struct SegmentStore {
    dir: PathBuf,
    seg_size: u32,
    state: Mutex<State>,
    durable_tx: watch::Sender<DurableEnd>,
}

#[derive(Debug)]
struct State {
    tli: u32,
    start: Lsn,
    written_end: Lsn,
    flushed_end: Lsn,
    /// Appended bytes not in the segment files yet: they end at
    /// `written_end`. Written at the next flush, or once they reach
    /// [`WRITE_BEHIND`]: one write per flush instead of one per
    /// replication message (a thousand a second under a steady load).
    /// Readers see only flushed bytes, so none of them is missed.
    pending: Vec<u8>,
    /// Lineage of `tli`, oldest first; the last span is `tli`'s own.
    lineage: Vec<TimelineSpan>,
    /// The segment being appended to.
    current: Option<OpenSegment>,
    /// Segments written since the last fsync (the current one is tracked by `current`).
    dirty: Vec<OpenSegment>,
    dir_dirty: bool,
    state_file: StateFile,
}

/// The state file and where its next record goes (see the module docs).
#[derive(Debug)]
struct StateFile {
    /// Open for in-place slot writes. `None` while the file is not known to be in the
    /// two-slot layout (being created, version 1, or after a failed write): the next
    /// write replaces it whole.
    file: Option<File>,
    /// Generation of the newest durable record.
    generation: u32,
    /// Slot holding that record; the next write goes to the other one.
    slot: usize,
}

#[derive(Debug)]
struct OpenSegment {
    tli: u32,
    segno: u64,
    file: File,
    dirty: bool,
}

impl SegmentStore {
    /// Creates an empty store in `dir` (created if missing; it must hold no store yet).
    pub fn create(
        dir: impl Into<PathBuf>,
        opts: CreateOptions,
    ) -> Result<SegmentStore, StoreError> {
        let dir = dir.into();
        check_segment_size(opts.segment_size)?;
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, "creating the directory", e))?;
        if dir.join(STATE_FILE).exists() {
            return Err(StoreError::AlreadyExists { dir });
        }
        let lineage = match (&opts.history, opts.tli) {
            (_, 0) => {
                return Err(StoreError::BadHistory {
                    tli: 0,
                    reason: "timeline 0 does not exist".into(),
                });
            }
            (None, 1) => vec![TimelineSpan {
                tli: 1,
                begin: Lsn(0),
                end: None,
            }],
            (None, tli) => {
                return Err(StoreError::BadHistory {
                    tli,
                    reason: "a store starting after timeline 1 needs its history file".into(),
                });
            }
            (Some(content), tli) => {
                let lineage = parse_history(tli, content)?;
                write_durably(&dir, &history_file_name(tli), content)?;
                lineage
            }
        };
        let mut state = State {
            tli: opts.tli,
            start: opts.start,
            written_end: opts.start,
            pending: Vec::new(),
            flushed_end: opts.start,
            lineage,
            current: None,
            dirty: Vec::new(),
            dir_dirty: false,
            state_file: StateFile {
                file: None,
                generation: 0,
                slot: 1,
            },
        };
        state.write_state(&dir, opts.segment_size, opts.start, opts.start)?;
        let (durable_tx, _) = watch::channel(DurableEnd {
            tli: opts.tli,
            lsn: opts.start,
        });
        Ok(SegmentStore {
            dir,
            seg_size: opts.segment_size,
            state: Mutex::new(state),
            durable_tx,
        })
    }

    /// Opens an existing store, repairing what a crash may have left past the durable end.
    pub fn open(dir: impl Into<PathBuf>) -> Result<SegmentStore, StoreError> {
        let dir = dir.into();
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(STATE_FILE))
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound { dir });
            }
            Err(e) => return Err(io_err(&dir, "opening the state file", e)),
        };
        let mut raw = Vec::with_capacity(STATE_FILE_LEN);
        (&file)
            .read_to_end(&mut raw)
            .map_err(|e| io_err(&dir, "reading the state file", e))?;
        let (saved, newest) = decode_state(&dir, &raw)?;
        let state_file = match newest {
            Some((generation, slot)) => StateFile {
                file: Some(file),
                generation,
                slot,
            },
            // Version 1: the first write converts the file.
            None => StateFile {
                file: None,
                generation: 0,
                slot: 1,
            },
        };
        check_segment_size(saved.seg_size)?;
        let lineage = if saved.tli == 1 {
            vec![TimelineSpan {
                tli: 1,
                begin: Lsn(0),
                end: None,
            }]
        } else {
            let name = history_file_name(saved.tli);
            let content = std::fs::read(dir.join(&name))
                .map_err(|e| io_err(&dir, &format!("reading {name}"), e))?;
            parse_history(saved.tli, &content)?
        };
        let _ = std::fs::remove_file(dir.join(STATE_TEMP));
        repair_segments(&dir, saved.seg_size, saved.tli, saved.start, saved.end)?;
        let state = State {
            tli: saved.tli,
            start: saved.start,
            written_end: saved.end,
            pending: Vec::new(),
            flushed_end: saved.end,
            lineage,
            current: None,
            dirty: Vec::new(),
            dir_dirty: false,
            state_file,
        };
        let (durable_tx, _) = watch::channel(DurableEnd {
            tli: saved.tli,
            lsn: saved.end,
        });
        Ok(SegmentStore {
            dir,
            seg_size: saved.seg_size,
            state: Mutex::new(state),
            durable_tx,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn segment_size(&self) -> u32 {
        self.seg_size
    }

    /// The timeline being appended to.
    pub fn timeline(&self) -> u32 {
        self.lock().tli
    }

    /// The oldest LSN the store holds.
    pub fn start(&self) -> Lsn {
        self.lock().start
    }

    /// End of the bytes appended so far, durable or not; the next `append` goes here.
    pub fn written_end(&self) -> Lsn {
        self.lock().written_end
    }

    /// End of the fsynced bytes on the current timeline.
    pub fn flushed_end(&self) -> Lsn {
        self.lock().flushed_end
    }

    pub fn durable_end(&self) -> DurableEnd {
        *self.durable_tx.borrow()
    }

    /// A receiver of the durable end, updated after each effective [`SegmentStore::flush`]
    /// and timeline switch.
    pub fn subscribe(&self) -> watch::Receiver<DurableEnd> {
        self.durable_tx.subscribe()
    }

    /// The current timeline's lineage, oldest first.
    pub fn lineage(&self) -> Vec<TimelineSpan> {
        self.lock().lineage.clone()
    }

    /// Appends `bytes` at `lsn`, which must be [`SegmentStore::written_end`]. Not durable
    /// until [`SegmentStore::flush`].
    pub fn append(&self, lsn: Lsn, bytes: &[u8]) -> Result<(), StoreError> {
        let mut st = self.lock();
        if lsn != st.written_end {
            return Err(StoreError::NotContiguous {
                expected: st.written_end,
                got: lsn,
            });
        }
        st.pending.extend_from_slice(bytes);
        st.written_end = Lsn(lsn.0 + bytes.len() as u64);
        if st.pending.len() >= WRITE_BEHIND {
            self.write_pending(&mut st)?;
        }
        Ok(())
    }

    /// Writes the pending bytes into their segment files. On an error the
    /// bytes not written stay pending (the next flush tries them again).
    fn write_pending(&self, st: &mut State) -> Result<(), StoreError> {
        let mut pending = std::mem::take(&mut st.pending);
        let from = Lsn(st.written_end.0 - pending.len() as u64);
        let written = self.write_segments(st, from, &pending);
        match written {
            Ok(()) => {
                pending.clear();
                st.pending = pending;
                Ok(())
            }
            Err((e, end)) => {
                let done = usize::try_from(end.distance_from(from)).unwrap_or(0);
                pending.drain(..done.min(pending.len()));
                st.pending = pending;
                Err(e)
            }
        }
    }

    /// Writes `bytes` at `lsn` into the segment files; on an error, also
    /// says where the written bytes end.
    fn write_segments(
        &self,
        st: &mut State,
        lsn: Lsn,
        bytes: &[u8],
    ) -> Result<(), (StoreError, Lsn)> {
        let seg_size = u64::from(self.seg_size);
        let mut pos = lsn.0;
        let mut rest = bytes;
        while !rest.is_empty() {
            let segno = pos / seg_size;
            let offset = pos % seg_size;
            let n = rest
                .len()
                .min(usize::try_from(seg_size - offset).unwrap_or(usize::MAX));
            let (chunk, tail) = rest.split_at(n);
            let tli = st.tli;
            let seg = self
                .segment_for_write(st, tli, segno)
                .map_err(|e| (e, Lsn(pos)))?;
            seg.file.write_all_at(chunk, offset).map_err(|e| {
                let e = io_err(
                    &self.dir,
                    &format!("writing {}", self.seg_name(tli, segno)),
                    e,
                );
                (e, Lsn(pos))
            })?;
            seg.dirty = true;
            pos += n as u64;
            rest = tail;
        }
        Ok(())
    }

    /// Makes everything appended durable: fsyncs the written segments, the directory when
    /// files were created, then the state file; announces the new durable end. Returns it.
    pub fn flush(&self) -> Result<Lsn, StoreError> {
        let mut st = self.lock();
        if st.flushed_end == st.written_end {
            return Ok(st.flushed_end);
        }
        self.write_pending(&mut st)?;
        let dirty = std::mem::take(&mut st.dirty);
        for seg in &dirty {
            seg.file.sync_data().map_err(|e| {
                io_err(
                    &self.dir,
                    &format!("fsync {}", self.seg_name(seg.tli, seg.segno)),
                    e,
                )
            })?;
        }
        drop(dirty);
        if let Some(seg) = st.current.as_mut().filter(|s| s.dirty) {
            seg.file.sync_data().map_err(|e| {
                io_err(
                    &self.dir,
                    &format!("fsync {}", self.seg_name(seg.tli, seg.segno)),
                    e,
                )
            })?;
            seg.dirty = false;
        }
        if st.dir_dirty {
            fsync_dir(&self.dir)?;
            st.dir_dirty = false;
        }
        // `flushed_end` bounds what readers see: it moves once the state is durable.
        let (start, end) = (st.start, st.written_end);
        st.write_state(&self.dir, self.seg_size, start, end)?;
        st.flushed_end = end;
        let end = DurableEnd {
            tli: st.tli,
            lsn: st.flushed_end,
        };
        drop(st);
        self.durable_tx.send_replace(end);
        Ok(end.lsn)
    }

    /// Switches to timeline `new_tli`, which the source began at `at` (≤ the written end;
    /// bytes past it on the old timeline are not part of the new history). `history` is
    /// the new timeline's history file, verbatim. Flushes first; durable on return.
    pub fn switch_timeline(&self, new_tli: u32, at: Lsn, history: &[u8]) -> Result<(), StoreError> {
        self.flush()?;
        let mut st = self.lock();
        let bad = |st: &State, reason| StoreError::BadSwitch {
            new_tli,
            at,
            tli: st.tli,
            end: st.flushed_end,
            reason,
        };
        if new_tli <= st.tli {
            return Err(bad(
                &st,
                "the new timeline must be greater than the current one",
            ));
        }
        if at > st.flushed_end || at < st.start {
            return Err(bad(
                &st,
                "the switch point must lie within the WAL the store holds",
            ));
        }
        let lineage = parse_history(new_tli, history)?;
        let parent = lineage.iter().rev().nth(1).copied();
        if parent.map(|p| (p.tli, p.end)) != Some((st.tli, Some(at))) {
            return Err(bad(
                &st,
                "the history file must end with the current timeline switching at `at`",
            ));
        }
        write_durably(&self.dir, &history_file_name(new_tli), history)?;

        // The new timeline's first segment starts with the old one's bytes before `at`.
        let seg_size = u64::from(self.seg_size);
        let segno = at.0 / seg_size;
        let prefix_len = at.0 % seg_size;
        let old_tli = st.tli;
        st.current = None;
        let new_name = self.seg_name(new_tli, segno);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(self.dir.join(&new_name))
            .map_err(|e| io_err(&self.dir, &format!("creating {new_name}"), e))?;
        if prefix_len > 0 {
            let old_name = self.seg_name(old_tli, segno);
            let old = File::open(self.dir.join(&old_name))
                .map_err(|e| io_err(&self.dir, &format!("opening {old_name}"), e))?;
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0u64;
            while off < prefix_len {
                let n = usize::try_from((prefix_len - off).min(buf.len() as u64)).unwrap_or(0);
                let chunk = buf.get_mut(..n).unwrap_or_default();
                old.read_exact_at(chunk, off)
                    .map_err(|e| io_err(&self.dir, &format!("reading {old_name}"), e))?;
                file.write_all_at(chunk, off)
                    .map_err(|e| io_err(&self.dir, &format!("writing {new_name}"), e))?;
                off += n as u64;
            }
        }
        file.sync_data()
            .map_err(|e| io_err(&self.dir, &format!("fsync {new_name}"), e))?;
        fsync_dir(&self.dir)?;
        st.tli = new_tli;
        st.lineage = lineage;
        st.written_end = at;
        st.flushed_end = at;
        st.current = Some(OpenSegment {
            tli: new_tli,
            segno,
            file,
            dirty: false,
        });
        let start = st.start;
        st.write_state(&self.dir, self.seg_size, start, at)?;
        drop(st);
        self.durable_tx.send_replace(DurableEnd {
            tli: new_tli,
            lsn: at,
        });
        Ok(())
    }

    /// Reads durable WAL of timeline `tli` (the current one or an ancestor) at `lsn` into
    /// `buf`, as a PostgreSQL server on that timeline would serve it. Returns how many
    /// bytes were read: fewer than `buf.len()` only at the durable end, or at the
    /// timeline's switch point for an ancestor; 0 there.
    pub fn read_at(&self, tli: u32, lsn: Lsn, buf: &mut [u8]) -> Result<usize, StoreError> {
        let (limit, lineage, start) = {
            let st = self.lock();
            let idx = st.lineage.iter().position(|s| s.tli == tli).ok_or(
                StoreError::UnknownTimeline {
                    tli,
                    current: st.tli,
                },
            )?;
            let limit = match st.lineage.get(idx).and_then(|s| s.end) {
                Some(end) => end.min(st.flushed_end),
                None => st.flushed_end,
            };
            let lineage: Vec<TimelineSpan> = st.lineage.iter().take(idx + 1).copied().collect();
            (limit, lineage, st.start)
        };
        if lsn < start {
            return Err(StoreError::Removed { lsn, start });
        }
        let seg_size = u64::from(self.seg_size);
        let want = (buf.len() as u64).min(limit.0.saturating_sub(lsn.0));
        let mut done = 0u64;
        while done < want {
            let pos = lsn.0 + done;
            let segno = pos / seg_size;
            let offset = pos % seg_size;
            // One span at a time: bytes past a switch point live in another file.
            let span_end = lineage
                .iter()
                .find(|s| s.begin.0 <= pos && s.end.is_none_or(|e| pos < e.0))
                .and_then(|s| s.end)
                .map_or(u64::MAX, |e| e.0 - pos);
            let n = (want - done).min(seg_size - offset).min(span_end);
            let from = usize::try_from(done).unwrap_or(usize::MAX);
            let to = usize::try_from(done + n).unwrap_or(usize::MAX);
            let Some(out) = buf.get_mut(from..to) else {
                break;
            };
            self.read_segment(&lineage, segno, pos, offset, out)?;
            done += n;
        }
        Ok(usize::try_from(done).unwrap_or(0))
    }

    /// Reads from the segment `segno` that holds `pos` on this lineage: the file of the
    /// timeline whose span holds `pos`, else that of a later timeline that began inside
    /// this segment (it holds a copy of the bytes before its switch point).
    fn read_segment(
        &self,
        lineage: &[TimelineSpan],
        segno: u64,
        pos: u64,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), StoreError> {
        let seg_size = u64::from(self.seg_size);
        let owner = lineage
            .iter()
            .position(|s| s.begin.0 <= pos && s.end.is_none_or(|e| pos < e.0))
            .unwrap_or(lineage.len().saturating_sub(1));
        let candidates = lineage
            .iter()
            .skip(owner)
            .enumerate()
            .filter(|(i, s)| *i == 0 || s.begin.0 / seg_size == segno);
        let mut last_err = None;
        for (_, span) in candidates {
            let name = self.seg_name(span.tli, segno);
            match File::open(self.dir.join(&name)) {
                Ok(file) => {
                    return file.read_exact_at(out, offset).map_err(|e| {
                        if e.kind() == io::ErrorKind::UnexpectedEof {
                            StoreError::ShortSegment {
                                file: name,
                                len: file.metadata().map(|m| m.len()).unwrap_or(0),
                                needed: offset + out.len() as u64,
                            }
                        } else {
                            io_err(&self.dir, &format!("reading {name}"), e)
                        }
                    });
                }
                Err(e) => last_err = Some(io_err(&self.dir, &format!("opening {name}"), e)),
            }
        }
        Err(last_err.unwrap_or_else(|| StoreError::Removed {
            lsn: Lsn(pos),
            start: self.start(),
        }))
    }

    /// Stores `<tli>.history` verbatim (durably). [`SegmentStore::switch_timeline`] does
    /// this for the timelines it switches to.
    pub fn put_history(&self, tli: u32, content: &[u8]) -> Result<(), StoreError> {
        parse_history(tli, content)?;
        write_durably(&self.dir, &history_file_name(tli), content)
    }

    /// The stored `<tli>.history` file, if any.
    pub fn history(&self, tli: u32) -> Result<Option<Vec<u8>>, StoreError> {
        let name = history_file_name(tli);
        match std::fs::read(self.dir.join(&name)) {
            Ok(c) => Ok(Some(c)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&self.dir, &format!("reading {name}"), e)),
        }
    }

    /// Recycles segments entirely before the segment holding `lsn` (clamped to the
    /// durable end), on every timeline. Returns how many files were removed.
    pub fn remove_before(&self, lsn: Lsn) -> Result<usize, StoreError> {
        let seg_size = u64::from(self.seg_size);
        let keep_from = {
            let mut st = self.lock();
            let new_start = Lsn(lsn.min(st.flushed_end).0 / seg_size * seg_size);
            if new_start <= st.start {
                return Ok(0);
            }
            // The state moves first: a crash before the deletions leaves files that the
            // next open removes.
            let end = st.flushed_end;
            st.write_state(&self.dir, self.seg_size, new_start, end)?;
            st.start = new_start;
            st.dirty.retain(|s| s.segno >= new_start.0 / seg_size);
            new_start.0 / seg_size
        };
        let mut removed = 0;
        for (name, _, segno) in list_segments(&self.dir, self.seg_size)? {
            if segno < keep_from {
                std::fs::remove_file(self.dir.join(&name))
                    .map_err(|e| io_err(&self.dir, &format!("removing {name}"), e))?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// PostgreSQL's file name of segment `segno` on timeline `tli` (`XLogFileName`).
    pub fn segment_file_name(&self, tli: u32, segno: u64) -> String {
        self.seg_name(tli, segno)
    }

    fn seg_name(&self, tli: u32, segno: u64) -> String {
        segment_file_name(tli, segno, self.seg_size)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn segment_for_write<'a>(
        &self,
        st: &'a mut State,
        tli: u32,
        segno: u64,
    ) -> Result<&'a mut OpenSegment, StoreError> {
        let reuse = st
            .current
            .as_ref()
            .is_some_and(|s| s.tli == tli && s.segno == segno);
        if !reuse {
            if let Some(old) = st.current.take().filter(|s| s.dirty) {
                st.dirty.push(old);
            }
            let name = self.seg_name(tli, segno);
            let path = self.dir.join(&name);
            let existed = path.exists();
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| io_err(&self.dir, &format!("opening {name}"), e))?;
            if !existed {
                st.dir_dirty = true;
            }
            st.current = Some(OpenSegment {
                tli,
                segno,
                file,
                dirty: false,
            });
        }
        st.current.as_mut().ok_or_else(|| {
            io_err(
                &self.dir,
                "opening a segment",
                io::Error::other("no current segment"),
            )
        })
    }
}

pub use walshadow_pg_format::wal_files::{history_file_name, segment_file_name};

/// How many appended bytes wait in memory before they are written without
/// a flush: bounds the store's buffer (a catch-up appends ~128 KiB per
/// replication message, and flushes every 100 ms).
const WRITE_BEHIND: usize = 1 << 20;

/// The lineage of `tli` from its `<tli>.history` file.
pub fn parse_history(tli: u32, content: &[u8]) -> Result<Vec<TimelineSpan>, StoreError> {
    let entries = wal_files::parse_history(tli, content).map_err(|e| StoreError::BadHistory {
        tli,
        reason: e.reason,
    })?;
    let mut lineage = Vec::with_capacity(entries.len() + 1);
    let mut begin = Lsn(0);
    for e in entries {
        lineage.push(TimelineSpan {
            tli: e.parent,
            begin,
            end: Some(e.switch_lsn),
        });
        begin = e.switch_lsn;
    }
    lineage.push(TimelineSpan {
        tli,
        begin,
        end: None,
    });
    Ok(lineage)
}

fn check_segment_size(size: u32) -> Result<(), StoreError> {
    if size.is_power_of_two() && (1 << 20..=1 << 30).contains(&size) {
        Ok(())
    } else {
        Err(StoreError::BadSegmentSize(size))
    }
}

fn io_err(dir: &Path, what: &str, source: io::Error) -> StoreError {
    StoreError::Io {
        dir: dir.to_path_buf(),
        what: what.to_owned(),
        source,
    }
}

fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, "fsync of the directory", e))
}

/// Writes `name` in `dir` durably ([`walshadow_state_file::write_durably`]).
fn write_durably(dir: &Path, name: &str, content: &[u8]) -> Result<(), StoreError> {
    walshadow_state_file::write_durably(dir, name, content)
        .map_err(|e| io_err(dir, &format!("writing {name}"), e))
}

struct SavedState {
    seg_size: u32,
    tli: u32,
    start: Lsn,
    end: Lsn,
}

impl State {
    /// Records the current timeline with `start` and the durable end `end` in the state
    /// file; durable on return.
    fn write_state(
        &mut self,
        dir: &Path,
        seg_size: u32,
        start: Lsn,
        end: Lsn,
    ) -> Result<(), StoreError> {
        let saved = SavedState {
            seg_size,
            tli: self.tli,
            start,
            end,
        };
        self.state_file.write(dir, &saved)
    }
}

impl StateFile {
    /// Writes `saved` with the next generation into the slot not holding the newest
    /// record, durably.
    fn write(&mut self, dir: &Path, saved: &SavedState) -> Result<(), StoreError> {
        let generation = self.generation.wrapping_add(1);
        let slot = self.slot ^ 1;
        let record = encode_record(STATE_VERSION, generation, saved);
        let offset = slot * SLOT_STRIDE;
        if let Some(file) = &self.file {
            let written = file
                .write_all_at(&record, offset as u64)
                .and_then(|()| file.sync_data());
            if let Err(e) = written {
                // After a failed fsync the kernel may have dropped the dirty page and a
                // retry could falsely succeed: the next write replaces the file whole.
                self.file = None;
                return Err(io_err(dir, "writing the state file", e));
            }
        } else {
            let mut image = vec![0u8; STATE_FILE_LEN];
            if let Some(dst) = image.get_mut(offset..offset + RECORD_LEN) {
                dst.copy_from_slice(&record);
            }
            write_durably(dir, STATE_FILE, &image)?;
        }
        self.generation = generation;
        self.slot = slot;
        if self.file.is_none() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(dir.join(STATE_FILE))
                .map_err(|e| io_err(dir, "opening the state file", e))?;
            self.file = Some(file);
        }
        Ok(())
    }
}

fn encode_record(version: u32, generation: u32, saved: &SavedState) -> [u8; RECORD_LEN] {
    let mut raw = [0u8; RECORD_LEN];
    let fields = [
        &STATE_MAGIC[..],
        &version.to_le_bytes(),
        &saved.seg_size.to_le_bytes(),
        &saved.tli.to_le_bytes(),
        &saved.start.0.to_le_bytes(),
        &saved.end.0.to_le_bytes(),
        &generation.to_le_bytes(),
    ];
    let mut at = 0;
    for field in fields {
        if let Some(dst) = raw.get_mut(at..at + field.len()) {
            dst.copy_from_slice(field);
        }
        at += field.len();
    }
    let crc = crc32c::crc32c(raw.get(..36).unwrap_or_default());
    if let Some(dst) = raw.get_mut(36..40) {
        dst.copy_from_slice(&crc.to_le_bytes());
    }
    raw
}

/// Why one record cannot be used.
#[derive(Debug)]
enum RecordError {
    /// Our magic with another format version: written by another build.
    Version(u32),
    Corrupt(String),
}

/// Decodes one record of format `version`: the state and its generation.
fn decode_record(raw: &[u8], version: u32) -> Result<(SavedState, u32), RecordError> {
    let corrupt = |reason: &str| RecordError::Corrupt(reason.to_owned());
    let u32_at = |off: usize| {
        raw.get(off..off + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| corrupt("truncated"))
    };
    let u64_at = |off: usize| {
        raw.get(off..off + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| corrupt("truncated"))
    };
    if raw.get(..4) != Some(&STATE_MAGIC[..]) {
        return Err(corrupt(if raw.iter().all(|&b| b == 0) {
            "empty"
        } else {
            "bad magic"
        }));
    }
    let found = u32_at(4)?;
    if found != version {
        return Err(RecordError::Version(found));
    }
    if raw.len() != RECORD_LEN {
        return Err(corrupt("truncated"));
    }
    if crc32c::crc32c(raw.get(..36).unwrap_or_default()) != u32_at(36)? {
        return Err(corrupt("checksum mismatch"));
    }
    let saved = SavedState {
        seg_size: u32_at(8)?,
        tli: u32_at(12)?,
        start: Lsn(u64_at(16)?),
        end: Lsn(u64_at(24)?),
    };
    if saved.end < saved.start || saved.tli == 0 {
        return Err(corrupt("inconsistent positions"));
    }
    Ok((saved, u32_at(32)?))
}

/// Whether generation `a` was written after `b`, across the wrap of the counter.
fn newer(a: u32, b: u32) -> bool {
    (1..1 << 31).contains(&a.wrapping_sub(b))
}

/// Decodes the state file: the newest valid state, with its generation and slot (`None`
/// for a version-1 file).
fn decode_state(dir: &Path, raw: &[u8]) -> Result<(SavedState, Option<(u32, usize)>), StoreError> {
    let corrupt = |reason: String| StoreError::CorruptState {
        dir: dir.to_path_buf(),
        reason,
    };
    let unsupported = |found| StoreError::UnsupportedVersion {
        dir: dir.to_path_buf(),
        found,
    };
    let header_version = raw
        .get(..8)
        .filter(|h| h.starts_with(&STATE_MAGIC))
        .and_then(|h| h.get(4..))
        .and_then(|v| v.try_into().ok())
        .map(u32::from_le_bytes);
    if raw.len() == RECORD_LEN && header_version.is_none_or(|v| v == LEGACY_VERSION) {
        return match decode_record(raw, LEGACY_VERSION) {
            Ok((saved, _)) => Ok((saved, None)),
            Err(RecordError::Version(v)) => Err(unsupported(v)),
            Err(RecordError::Corrupt(reason)) => Err(corrupt(reason)),
        };
    }
    if raw.len() != STATE_FILE_LEN {
        // Another build's layout is better named by its version than by its length.
        return Err(match header_version {
            Some(v) if v != LEGACY_VERSION && v != STATE_VERSION => unsupported(v),
            _ => corrupt(format!(
                "{} bytes, expected {STATE_FILE_LEN} (or {RECORD_LEN} for version \
                 {LEGACY_VERSION})",
                raw.len()
            )),
        });
    }
    let slot = |i: usize| {
        let at = i * SLOT_STRIDE;
        decode_record(
            raw.get(at..at + RECORD_LEN).unwrap_or_default(),
            STATE_VERSION,
        )
    };
    let (a, b) = (slot(0), slot(1));
    // A slot of another version was written by another build; falling back to the
    // other slot could move the durable end backwards.
    for r in [&a, &b] {
        if let Err(RecordError::Version(v)) = r {
            return Err(unsupported(*v));
        }
    }
    match (a, b) {
        (Ok((sa, ga)), Ok((sb, gb))) => Ok(if newer(gb, ga) {
            (sb, Some((gb, 1)))
        } else {
            (sa, Some((ga, 0)))
        }),
        (Ok((sa, ga)), Err(_)) => Ok((sa, Some((ga, 0)))),
        (Err(_), Ok((sb, gb))) => Ok((sb, Some((gb, 1)))),
        (Err(ea), Err(eb)) => {
            let why = |e: RecordError| match e {
                RecordError::Corrupt(r) => r,
                RecordError::Version(v) => format!("version {v}"),
            };
            Err(corrupt(format!("slot A: {}; slot B: {}", why(ea), why(eb))))
        }
    }
}

/// Segment files in `dir`: (name, tli, segno).
fn list_segments(dir: &Path, seg_size: u32) -> Result<Vec<(String, u32, u64)>, StoreError> {
    let per_id = 0x1_0000_0000u64 / u64::from(seg_size);
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| io_err(dir, "listing", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(dir, "listing", e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.len() != 24 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let hex = |r: std::ops::Range<usize>| {
            name.get(r)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .unwrap_or(0)
        };
        let tli = u32::try_from(hex(0..8)).unwrap_or(0);
        let segno = hex(8..16) * per_id + hex(16..24);
        out.push((name, tli, segno));
    }
    Ok(out)
}

/// Crash repair on open: cut the current segment at the durable end, drop segments past
/// it, segments of timelines never switched to, and segments below `start`.
fn repair_segments(
    dir: &Path,
    seg_size: u32,
    tli: u32,
    start: Lsn,
    end: Lsn,
) -> Result<(), StoreError> {
    let seg = u64::from(seg_size);
    let end_seg = end.0 / seg;
    let end_off = end.0 % seg;
    let start_seg = start.0 / seg;
    let mut removed_any = false;
    let mut seen: HashSet<u64> = HashSet::new();
    for (name, file_tli, segno) in list_segments(dir, seg_size)? {
        let path = dir.join(&name);
        let stale = file_tli > tli
            || segno < start_seg
            || (file_tli == tli && (segno > end_seg || (segno == end_seg && end_off == 0)));
        if stale {
            std::fs::remove_file(&path).map_err(|e| io_err(dir, &format!("removing {name}"), e))?;
            removed_any = true;
            continue;
        }
        if file_tli == tli && segno == end_seg {
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| io_err(dir, &format!("opening {name}"), e))?;
            let len = f
                .metadata()
                .map_err(|e| io_err(dir, &format!("stat {name}"), e))?
                .len();
            if len < end_off {
                return Err(StoreError::ShortSegment {
                    file: name,
                    len,
                    needed: end_off,
                });
            }
            if len > end_off {
                f.set_len(end_off)
                    .map_err(|e| io_err(dir, &format!("truncating {name}"), e))?;
                f.sync_all()
                    .map_err(|e| io_err(dir, &format!("fsync {name}"), e))?;
            }
            seen.insert(segno);
        }
    }
    if end_off > 0 && end > start && !seen.contains(&end_seg) {
        return Err(StoreError::ShortSegment {
            file: segment_file_name(tli, end_seg, seg_size),
            len: 0,
            needed: end_off,
        });
    }
    for f in std::fs::read_dir(dir).map_err(|e| io_err(dir, "listing", e))? {
        let f = f.map_err(|e| io_err(dir, "listing", e))?;
        if f.file_name().to_string_lossy().ends_with(".tmp") {
            let _ = std::fs::remove_file(f.path());
        }
    }
    if removed_any {
        fsync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: u32 = 1 << 20;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "walshadow-segstore-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn pattern(from: u64, len: usize) -> Vec<u8> {
        (0..len as u64)
            .map(|i| ((from + i) * 31 % 251) as u8)
            .collect()
    }

    fn new_store(dir: &Path, start: u64) -> SegmentStore {
        SegmentStore::create(
            dir,
            CreateOptions {
                segment_size: SEG,
                tli: 1,
                start: Lsn(start),
                history: None,
            },
        )
        .unwrap()
    }

    #[test]
    fn appends_wait_in_memory_until_a_flush_or_the_write_behind_bound() {
        let dir = tmpdir("write-behind");
        let start = u64::from(SEG);
        let store = new_store(&dir, start);
        let file = dir.join(store.segment_file_name(1, 1));
        let file_len = || std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        let small = pattern(start, 1000);
        for chunk in small.chunks(100) {
            store.append(store.written_end(), chunk).unwrap();
        }
        assert_eq!(file_len(), 0, "no write per append");
        store.flush().unwrap();
        assert_eq!(file_len(), 1000);
        // Past the bound the bytes are written without a flush, and still
        // not readable.
        let big = pattern(start + 1000, WRITE_BEHIND + 10);
        store.append(store.written_end(), &big).unwrap();
        assert!(file_len() > 1000);
        let mut buf = vec![0u8; 10];
        assert_eq!(store.read_at(1, Lsn(start + 1000), &mut buf).unwrap(), 0);
        // Dropped unflushed (a crash): reopened at the durable end, and
        // appending resumes there.
        store.append(store.written_end(), b"tail").unwrap();
        drop(store);
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(start + 1000));
        assert_eq!(store.written_end(), Lsn(start + 1000));
        store.append(store.written_end(), &big).unwrap();
        store.flush().unwrap();
        let mut all = vec![0u8; big.len()];
        let n = store.read_at(1, Lsn(start + 1000), &mut all).unwrap();
        assert_eq!(&all[..n], &big[..]);
    }

    #[test]
    fn append_across_segments_read_back_and_reopen() {
        let dir = tmpdir("append");
        let start = u64::from(SEG);
        let store = new_store(&dir, start);
        let mut rx = store.subscribe();
        let data = pattern(start, (SEG as usize) * 2 + 777);
        for chunk in data.chunks(100_003) {
            let at = store.written_end();
            store.append(at, chunk).unwrap();
        }
        let err = store.append(Lsn(start), b"x").unwrap_err();
        assert!(matches!(err, StoreError::NotContiguous { .. }), "{err}");
        // Nothing is readable before the flush.
        let mut buf = vec![0u8; 10];
        assert_eq!(store.read_at(1, Lsn(start), &mut buf).unwrap(), 0);
        let end = store.flush().unwrap();
        assert_eq!(end, Lsn(start + data.len() as u64));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.borrow_and_update().lsn, end);

        let mut all = vec![0u8; data.len() + 100];
        let n = store.read_at(1, Lsn(start), &mut all).unwrap();
        assert_eq!(n, data.len());
        assert_eq!(&all[..n], &data[..]);
        // From a segment start in the middle.
        let mut seg = vec![0u8; SEG as usize];
        let n = store.read_at(1, Lsn(2 * start), &mut seg).unwrap();
        assert_eq!(n, SEG as usize);
        assert_eq!(&seg[..], &data[SEG as usize..2 * SEG as usize]);
        let err = store.read_at(1, Lsn(start - 1), &mut buf).unwrap_err();
        assert!(matches!(err, StoreError::Removed { .. }), "{err}");
        drop(store);

        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), end);
        assert_eq!(store.written_end(), end);
        store.append(end, &pattern(end.0, 10)).unwrap();
        store.flush().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reopen_truncates_unflushed_tail() {
        let dir = tmpdir("crash");
        let store = new_store(&dir, 0);
        store.append(Lsn(0), &pattern(0, 5000)).unwrap();
        store.flush().unwrap();
        // Written but never flushed, crossing into the next segment: a crash now.
        store
            .append(Lsn(5000), &pattern(5000, SEG as usize))
            .unwrap();
        drop(store);
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(5000));
        let len = std::fs::metadata(dir.join(segment_file_name(1, 0, SEG)))
            .unwrap()
            .len();
        assert_eq!(len, 5000);
        assert!(!dir.join(segment_file_name(1, 1, SEG)).exists());
        store.append(Lsn(5000), &pattern(5000, 10)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn damaged_state_is_refused() {
        let dir = tmpdir("damaged");
        let store = new_store(&dir, 0);
        drop(store);
        let path = dir.join(STATE_FILE);
        let mut raw = std::fs::read(&path).unwrap();
        raw[20] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(matches!(err, StoreError::CorruptState { .. }), "{err}");
        raw[20] ^= 1;
        raw[4] = 9;
        std::fs::write(&path, &raw).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsupportedVersion { found: 9, .. }),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn timeline_switch_copies_the_segment_prefix() {
        let dir = tmpdir("tli");
        let store = new_store(&dir, 0);
        let old = pattern(0, SEG as usize + 3000);
        store.append(Lsn(0), &old).unwrap();
        let at = Lsn(u64::from(SEG) + 2000);
        let history = format!("1\t{at}\tno recovery target specified\n");
        store.switch_timeline(2, at, history.as_bytes()).unwrap();
        assert_eq!(store.timeline(), 2);
        assert_eq!(store.durable_end(), DurableEnd { tli: 2, lsn: at });
        let new = pattern(999_999, 4000);
        store.append(at, &new).unwrap();
        store.flush().unwrap();

        // Timeline 2 from the start of the switch segment: old prefix, then new bytes.
        let mut buf = vec![0u8; 2000 + 4000];
        let n = store.read_at(2, Lsn(u64::from(SEG)), &mut buf).unwrap();
        assert_eq!(n, 6000);
        assert_eq!(&buf[..2000], &old[SEG as usize..SEG as usize + 2000]);
        assert_eq!(&buf[2000..], &new[..]);
        // Timeline 1 ends at the switch point.
        let mut buf = vec![0u8; 10_000];
        let n = store.read_at(1, Lsn(u64::from(SEG)), &mut buf).unwrap();
        assert_eq!(n, 2000);
        // Timeline 2 reads the first segment from timeline 1's file.
        let n = store.read_at(2, Lsn(0), &mut buf).unwrap();
        assert_eq!(&buf[..n], &old[..n]);
        assert_eq!(store.history(2).unwrap().unwrap(), history.as_bytes());
        assert_eq!(
            store.lineage(),
            vec![
                TimelineSpan {
                    tli: 1,
                    begin: Lsn(0),
                    end: Some(at)
                },
                TimelineSpan {
                    tli: 2,
                    begin: at,
                    end: None
                },
            ]
        );
        drop(store);
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.timeline(), 2);
        assert_eq!(store.flushed_end(), Lsn(at.0 + 4000));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn remove_before_recycles_whole_segments() {
        let dir = tmpdir("remove");
        let store = new_store(&dir, 0);
        store
            .append(Lsn(0), &pattern(0, 3 * SEG as usize + 5))
            .unwrap();
        store.flush().unwrap();
        assert_eq!(
            store.remove_before(Lsn(2 * u64::from(SEG) + 17)).unwrap(),
            2
        );
        assert_eq!(store.start(), Lsn(2 * u64::from(SEG)));
        let mut buf = [0u8; 4];
        assert!(store.read_at(1, Lsn(0), &mut buf).is_err());
        assert_eq!(
            store.read_at(1, Lsn(2 * u64::from(SEG)), &mut buf).unwrap(),
            4
        );
        drop(store);
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.start(), Lsn(2 * u64::from(SEG)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Generation of the record in `slot` of a two-slot state file.
    fn generation_of(raw: &[u8], slot: usize) -> u32 {
        u32::from_le_bytes(raw[slot * SLOT_STRIDE + 32..][..4].try_into().unwrap())
    }

    fn record(generation: u32, end: u64) -> [u8; RECORD_LEN] {
        let saved = SavedState {
            seg_size: SEG,
            tli: 1,
            start: Lsn(0),
            end: Lsn(end),
        };
        encode_record(STATE_VERSION, generation, &saved)
    }

    /// A torn write into `slot` of the record with durable end `end`: the end reached the
    /// disk, the generation and checksum did not.
    fn tear(raw: &[u8], slot: usize, end: u64) -> Vec<u8> {
        let mut raw = raw.to_vec();
        raw[slot * SLOT_STRIDE + 24..][..8].copy_from_slice(&end.to_le_bytes());
        raw
    }

    #[test]
    fn a_torn_slot_falls_back_to_the_other() {
        let dir = tmpdir("torn");
        let store = new_store(&dir, 0); // generation 1 in A
        store.append(Lsn(0), &pattern(0, 1000)).unwrap();
        store.flush().unwrap(); // 2 in B
        store.append(Lsn(1000), &pattern(1000, 500)).unwrap();
        store.flush().unwrap(); // 3 in A
        drop(store);
        let path = dir.join(STATE_FILE);
        let good = std::fs::read(&path).unwrap();
        assert_eq!(good.len(), STATE_FILE_LEN);
        assert_eq!((generation_of(&good, 0), generation_of(&good, 1)), (3, 2));

        // Both slots damaged: refused, naming both.
        std::fs::write(&path, tear(&tear(&good, 0, 7), 1, 9)).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(
            matches!(&err, StoreError::CorruptState { reason, .. }
                if reason.contains("slot A: checksum") && reason.contains("slot B: checksum")),
            "{err}"
        );
        // A slot of another format version is refused, not skipped for the other.
        let mut other = good.clone();
        other[SLOT_STRIDE + 4] = 3;
        std::fs::write(&path, &other).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsupportedVersion { found: 3, .. }),
            "{err}"
        );

        // The write of generation 4 into B tore: A (generation 3) is the durable state.
        std::fs::write(&path, tear(&good, 1, 2000)).unwrap();
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(1500));
        drop(store);

        // The write of generation 3 into A tore: B (generation 2) is, and the bytes the
        // torn flush had fsynced are cut off. A held generation 1 before that write.
        let mut before = good.clone();
        before[..RECORD_LEN].copy_from_slice(&record(1, 0));
        std::fs::write(&path, tear(&before, 0, 1500)).unwrap();
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(1000));
        let seg0 = dir.join(segment_file_name(1, 0, SEG));
        assert_eq!(std::fs::metadata(&seg0).unwrap().len(), 1000);
        // Writing resumes over the torn slot.
        store.append(Lsn(1000), &pattern(1000, 30)).unwrap();
        store.flush().unwrap();
        drop(store);
        let raw = std::fs::read(&path).unwrap();
        assert_eq!((generation_of(&raw, 0), generation_of(&raw, 1)), (3, 2));
        assert_eq!(SegmentStore::open(&dir).unwrap().flushed_end(), Lsn(1030));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn generation_wraps_around() {
        assert!(newer(0, u32::MAX));
        assert!(!newer(u32::MAX, 0));
        assert!(newer(5, 4));
        assert!(!newer(4, 5));
        assert!(!newer(7, 7));

        let dir = tmpdir("wrap");
        let store = new_store(&dir, 0);
        store.append(Lsn(0), &pattern(0, 3000)).unwrap();
        store.flush().unwrap();
        drop(store);
        // The slots as 2³² - 1 writes leave them: the newest, u32::MAX, in A.
        let path = dir.join(STATE_FILE);
        let mut raw = vec![0u8; STATE_FILE_LEN];
        raw[..RECORD_LEN].copy_from_slice(&record(u32::MAX, 3000));
        raw[SLOT_STRIDE..][..RECORD_LEN].copy_from_slice(&record(u32::MAX - 1, 2000));
        std::fs::write(&path, &raw).unwrap();
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(3000));
        store.append(Lsn(3000), &pattern(3000, 100)).unwrap();
        store.flush().unwrap();
        drop(store);
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(
            (generation_of(&raw, 0), generation_of(&raw, 1)),
            (u32::MAX, 0)
        );
        // Generation 0 in B wins over u32::MAX in A.
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(3100));
        store.append(Lsn(3100), &pattern(3100, 50)).unwrap();
        store.flush().unwrap();
        drop(store);
        let raw = std::fs::read(&path).unwrap();
        assert_eq!((generation_of(&raw, 0), generation_of(&raw, 1)), (1, 0));
        assert_eq!(SegmentStore::open(&dir).unwrap().flushed_end(), Lsn(3150));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A version-1 state file, laid out by hand as the previous build wrote it.
    fn version_1_state(tli: u32, start: u64, end: u64) -> Vec<u8> {
        let mut raw = b"WSSG".to_vec();
        raw.extend_from_slice(&1u32.to_le_bytes());
        raw.extend_from_slice(&SEG.to_le_bytes());
        raw.extend_from_slice(&tli.to_le_bytes());
        raw.extend_from_slice(&start.to_le_bytes());
        raw.extend_from_slice(&end.to_le_bytes());
        raw.extend_from_slice(&0u32.to_le_bytes());
        let crc = crc32c::crc32c(&raw);
        raw.extend_from_slice(&crc.to_le_bytes());
        raw
    }

    #[test]
    fn version_1_state_opens_and_the_first_write_converts_it() {
        let dir = tmpdir("v1");
        let store = new_store(&dir, 0);
        let data = pattern(0, SEG as usize + 700);
        store.append(Lsn(0), &data).unwrap();
        store.flush().unwrap();
        drop(store);
        let path = dir.join(STATE_FILE);
        let end = u64::from(SEG) + 700;
        std::fs::write(&path, version_1_state(1, 0, end)).unwrap();

        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(end));
        assert_eq!(store.start(), Lsn(0));
        // Opening does not write the state.
        assert_eq!(std::fs::metadata(&path).unwrap().len(), RECORD_LEN as u64);
        let mut buf = vec![0u8; 1000];
        let n = store.read_at(1, Lsn(u64::from(SEG)), &mut buf).unwrap();
        assert_eq!(&buf[..n], &data[SEG as usize..]);
        store.append(Lsn(end), &pattern(end, 300)).unwrap();
        store.flush().unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            STATE_FILE_LEN as u64
        );
        store
            .append(Lsn(end + 300), &pattern(end + 300, 20))
            .unwrap();
        store.flush().unwrap();
        drop(store);
        let raw = std::fs::read(&path).unwrap();
        assert_eq!((generation_of(&raw, 0), generation_of(&raw, 1)), (1, 2));
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(end + 320));
        drop(store);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");

        // A damaged version-1 file is refused like a damaged current one.
        let mut raw = version_1_state(1, 0, end);
        raw[25] ^= 1;
        std::fs::write(&path, &raw).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(matches!(err, StoreError::CorruptState { .. }), "{err}");
        let mut raw = version_1_state(1, 0, end);
        raw[4] = 3;
        std::fs::write(&path, &raw).unwrap();
        let err = SegmentStore::open(&dir).unwrap_err();
        assert!(
            matches!(err, StoreError::UnsupportedVersion { found: 3, .. }),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reopen_after_many_flushes_gives_the_last_end() {
        use std::os::unix::fs::MetadataExt;
        let dir = tmpdir("many");
        let store = new_store(&dir, 0);
        let path = dir.join(STATE_FILE);
        let inode = std::fs::metadata(&path).unwrap().ino();
        let mut rx = store.subscribe();
        let mut end = 0u64;
        for i in 0..1001u64 {
            let len = (i * 7919 % 4000 + 1) as usize;
            store.append(Lsn(end), &pattern(end, len)).unwrap();
            end += len as u64;
            assert_eq!(store.flush().unwrap(), Lsn(end));
            assert_eq!(rx.borrow_and_update().lsn, Lsn(end));
        }
        assert!(end > u64::from(SEG), "the appends cross a segment");
        // Flushes write in place: the same file, at its fixed size, and no other file.
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.ino(), meta.len()), (inode, STATE_FILE_LEN as u64));
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                segment_file_name(1, 0, SEG),
                segment_file_name(1, 1, SEG),
                STATE_FILE.to_owned()
            ]
        );
        drop(store);
        let store = SegmentStore::open(&dir).unwrap();
        assert_eq!(store.flushed_end(), Lsn(end));
        let mut buf = vec![0u8; 100];
        assert_eq!(store.read_at(1, Lsn(end - 100), &mut buf).unwrap(), 100);
        assert_eq!(buf, pattern(end - 100, 100));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Process CPU time (user + system) in clock ticks (1/100 s), from `/proc/self/stat`.
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }

    /// Latencies and CPU ticks of one way of flushing.
    #[derive(Default)]
    struct Sample {
        lat: Vec<std::time::Duration>,
        ticks: u64,
    }

    impl Sample {
        fn time(&mut self, rounds: usize, mut flush: impl FnMut()) {
            let ticks = cpu_ticks();
            for _ in 0..rounds {
                let t = std::time::Instant::now();
                flush();
                self.lat.push(t.elapsed());
            }
            self.ticks += cpu_ticks() - ticks;
        }

        fn report(&mut self, what: &str) {
            let n = self.lat.len();
            let total: std::time::Duration = self.lat.iter().sum();
            self.lat.sort();
            let pct = |p: usize| self.lat[(n * p / 100).min(n - 1)];
            println!(
                "flush_bench {what}: {n} flushes, {:.1} µs/flush wall (p50 {:.1} µs, p99 {:.1} µs), \
                 {:.1} µs/flush process CPU",
                total.as_secs_f64() * 1e6 / n as f64,
                pct(50).as_secs_f64() * 1e6,
                pct(99).as_secs_f64() * 1e6,
                self.ticks as f64 * 1e4 / n as f64,
            );
        }
    }

    /// `cargo test -p walshadow-shadow --release --lib -- --ignored flush_bench --nocapture`
    /// (`WALSHADOW_BENCH_FLUSHES`, `WALSHADOW_BENCH_DIR` to change the count and the file
    /// system): time per flush of a 256-byte append, as the feed loop does it, against
    /// the previous version's flush (segment fdatasync, then the 40-byte state replaced
    /// by write-temp + fsync + rename + directory fsync), interleaved in rounds of 100 so
    /// both see the same load.
    #[test]
    #[ignore = "benchmark: prints figures"]
    fn flush_bench() {
        let n: usize = std::env::var("WALSHADOW_BENCH_FLUSHES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000);
        let dir = match std::env::var_os("WALSHADOW_BENCH_DIR") {
            Some(base) => {
                PathBuf::from(base).join(format!("segstore-bench-{}", std::process::id()))
            }
            None => tmpdir("bench"),
        };
        let store = new_store(&dir.join("slots"), 0);
        let old_dir = dir.join("rename");
        std::fs::create_dir_all(&old_dir).unwrap();
        let old_seg = File::create(old_dir.join(segment_file_name(1, 0, SEG))).unwrap();
        let chunk = pattern(0, 256);
        let (mut new, mut old) = (Sample::default(), Sample::default());
        let mut old_end = 0u64;
        println!("flush_bench in {}", dir.display());
        for _ in 0..n.div_ceil(100) {
            new.time(100, || {
                store.append(store.written_end(), &chunk).unwrap();
                store.flush().unwrap();
            });
            old.time(100, || {
                old_seg.write_all_at(&chunk, old_end).unwrap();
                old_end += chunk.len() as u64;
                old_seg.sync_data().unwrap();
                let saved = SavedState {
                    seg_size: SEG,
                    tli: 1,
                    start: Lsn(0),
                    end: Lsn(old_end),
                };
                let record = encode_record(LEGACY_VERSION, 0, &saved);
                walshadow_state_file::write_durably(&old_dir, STATE_FILE, &record).unwrap();
            });
        }
        new.report("two slots in place");
        old.report("write-temp + rename (previous)");
        let end = store.flushed_end();
        drop(store);
        assert_eq!(
            SegmentStore::open(dir.join("slots")).unwrap().flushed_end(),
            end
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
