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
//! The state file (`segment_store.state`) holds the durable end and is replaced by
//! write-temp + fsync + rename + directory fsync. After a crash the current segment may
//! hold bytes past it (written, not yet fsynced, or torn): [`SegmentStore::open`] truncates
//! the segment to the recorded end and deletes later segments and segments of timelines
//! the state never switched to, so appending resumes exactly at [`SegmentStore::flushed_end`].
//!
//! State file layout, little-endian, 40 bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `WSSG` |
//! | 4 | 4 | format version (1) |
//! | 8 | 4 | segment size |
//! | 12 | 4 | current timeline |
//! | 16 | 8 | oldest LSN held (`start`) |
//! | 24 | 8 | durable end |
//! | 32 | 4 | reserved, zero |
//! | 36 | 4 | CRC-32C of bytes 0..36 |

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::watch;
use walshadow_types::Lsn;

const STATE_FILE: &str = "segment_store.state";
const STATE_TEMP: &str = "segment_store.state.tmp";
const STATE_MAGIC: [u8; 4] = *b"WSSG";
const STATE_VERSION: u32 = 1;
const STATE_LEN: usize = 40;

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
        "segment store {dir}: state file has format version {found}, this build reads {STATE_VERSION}"
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
    /// Lineage of `tli`, oldest first; the last span is `tli`'s own.
    lineage: Vec<TimelineSpan>,
    /// The segment being appended to.
    current: Option<OpenSegment>,
    /// Segments written since the last fsync (the current one is tracked by `current`).
    dirty: Vec<OpenSegment>,
    dir_dirty: bool,
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
        let state = State {
            tli: opts.tli,
            start: opts.start,
            written_end: opts.start,
            flushed_end: opts.start,
            lineage,
            current: None,
            dirty: Vec::new(),
            dir_dirty: false,
        };
        write_state(&dir, opts.segment_size, &state)?;
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
        let raw = match std::fs::read(dir.join(STATE_FILE)) {
            Ok(raw) => raw,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound { dir });
            }
            Err(e) => return Err(io_err(&dir, "reading the state file", e)),
        };
        let saved = decode_state(&dir, &raw)?;
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
            flushed_end: saved.end,
            lineage,
            current: None,
            dirty: Vec::new(),
            dir_dirty: false,
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
            let seg = self.segment_for_write(&mut st, tli, segno)?;
            seg.file.write_all_at(chunk, offset).map_err(|e| {
                io_err(
                    &self.dir,
                    &format!("writing {}", self.seg_name(tli, segno)),
                    e,
                )
            })?;
            seg.dirty = true;
            pos += n as u64;
            st.written_end = Lsn(pos);
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
        st.flushed_end = st.written_end;
        write_state(&self.dir, self.seg_size, &st)?;
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
        write_state(&self.dir, self.seg_size, &st)?;
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
            st.start = new_start;
            // The state moves first: a crash before the deletions leaves files that the
            // next open removes.
            write_state(&self.dir, self.seg_size, &st)?;
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

/// `XLogFileName`: `%08X%08X%08X` of the timeline, `segno / segments-per-xlogid` and
/// `segno % segments-per-xlogid`.
pub fn segment_file_name(tli: u32, segno: u64, seg_size: u32) -> String {
    let per_id = 0x1_0000_0000u64 / u64::from(seg_size.max(1));
    format!("{tli:08X}{:08X}{:08X}", segno / per_id, segno % per_id)
}

/// `TLHistoryFileName`.
pub fn history_file_name(tli: u32) -> String {
    format!("{tli:08X}.history")
}

/// Parses `<tli>.history` (lines `parentTLI<TAB>X/X<TAB>reason`, blank and `#` lines
/// skipped, as `readTimeLineHistory` in timeline.c reads it) into the lineage of `tli`.
pub fn parse_history(tli: u32, content: &[u8]) -> Result<Vec<TimelineSpan>, StoreError> {
    let bad = |reason: String| StoreError::BadHistory { tli, reason };
    let text = std::str::from_utf8(content).map_err(|_| bad("not UTF-8".into()))?;
    let mut lineage: Vec<TimelineSpan> = Vec::new();
    let mut begin = Lsn(0);
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let parent: u32 = fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| bad(format!("bad timeline in line {line:?}")))?;
        let switch: Lsn = fields
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| bad(format!("bad switch point in line {line:?}")))?;
        if lineage.last().is_some_and(|l| l.tli >= parent) || parent >= tli {
            return Err(bad("timeline IDs must be in increasing sequence".into()));
        }
        if switch < begin {
            return Err(bad("switch points must not decrease".into()));
        }
        lineage.push(TimelineSpan {
            tli: parent,
            begin,
            end: Some(switch),
        });
        begin = switch;
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

/// Writes `name` in `dir` durably ([`crate::durable::write_file`]).
fn write_durably(dir: &Path, name: &str, content: &[u8]) -> Result<(), StoreError> {
    crate::durable::write_file(dir, name, content)
        .map_err(|e| io_err(dir, &format!("writing {name}"), e))
}

struct SavedState {
    seg_size: u32,
    tli: u32,
    start: Lsn,
    end: Lsn,
}

fn write_state(dir: &Path, seg_size: u32, st: &State) -> Result<(), StoreError> {
    let mut raw = Vec::with_capacity(STATE_LEN);
    raw.extend_from_slice(&STATE_MAGIC);
    raw.extend_from_slice(&STATE_VERSION.to_le_bytes());
    raw.extend_from_slice(&seg_size.to_le_bytes());
    raw.extend_from_slice(&st.tli.to_le_bytes());
    raw.extend_from_slice(&st.start.0.to_le_bytes());
    raw.extend_from_slice(&st.flushed_end.0.to_le_bytes());
    raw.extend_from_slice(&0u32.to_le_bytes());
    let crc = crc32c::crc32c(&raw);
    raw.extend_from_slice(&crc.to_le_bytes());
    write_durably(dir, STATE_FILE, &raw)
}

fn decode_state(dir: &Path, raw: &[u8]) -> Result<SavedState, StoreError> {
    let corrupt = |reason: &str| StoreError::CorruptState {
        dir: dir.to_path_buf(),
        reason: reason.to_owned(),
    };
    let u32_at = |off: usize| {
        raw.get(off..off + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |off: usize| {
        raw.get(off..off + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if raw.get(..4) != Some(&STATE_MAGIC[..]) {
        return Err(corrupt("bad magic"));
    }
    let version = u32_at(4).ok_or_else(|| corrupt("truncated"))?;
    if version != STATE_VERSION {
        return Err(StoreError::UnsupportedVersion {
            dir: dir.to_path_buf(),
            found: version,
        });
    }
    if raw.len() != STATE_LEN {
        return Err(corrupt(&format!(
            "{} bytes, expected {STATE_LEN}",
            raw.len()
        )));
    }
    let crc = u32_at(36).ok_or_else(|| corrupt("truncated"))?;
    if crc32c::crc32c(raw.get(..36).unwrap_or_default()) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    let field = |v: Option<u64>| v.ok_or_else(|| corrupt("truncated"));
    let saved = SavedState {
        seg_size: u32_at(8).ok_or_else(|| corrupt("truncated"))?,
        tli: u32_at(12).ok_or_else(|| corrupt("truncated"))?,
        start: Lsn(field(u64_at(16))?),
        end: Lsn(field(u64_at(24))?),
    };
    if saved.end < saved.start || saved.tli == 0 {
        return Err(corrupt("inconsistent positions"));
    }
    Ok(saved)
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
    fn names_match_postgres() {
        assert_eq!(
            segment_file_name(1, 1, 16 << 20),
            "000000010000000000000001"
        );
        assert_eq!(
            segment_file_name(2, 0x100, 16 << 20),
            "000000020000000100000000"
        );
        assert_eq!(
            segment_file_name(1, 4096, 1 << 20),
            "000000010000000100000000"
        );
        assert_eq!(history_file_name(10), "0000000A.history");
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
}
