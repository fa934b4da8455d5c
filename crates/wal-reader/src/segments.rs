//! Reading WAL from segment files: a folder of them (`pg_wal`, an archive
//! directory) or files named on the command line.
//!
//! Segment files are named `TTTTTTTTXXXXXXXXYYYYYYYY` (timeline, then the
//! segment number split by `0x100000000 / segment size`); `.partial` files
//! (the last, unfinished segment of a timeline) are read too. The segment
//! size comes from the first file's long page header (`xlp_seg_size`), so
//! any size initdb allows works.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use walshadow_types::{Lsn, TimeLineId};
use walshadow_wal_decode::{RecordView, WalDecodeError, WalRecord, WalStreamDecoder, XLOG_BLCKSZ};

/// Errors reading segment files.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no WAL segment files found in {0}")]
    NoSegments(String),
    #[error(
        "{path} does not start with a WAL long page header; is it a WAL segment of PostgreSQL 15-18?"
    )]
    NotASegment { path: PathBuf },
    #[error("no segment of timeline {tli} holds {lsn} (looked in {dirs})")]
    StartNotFound {
        lsn: Lsn,
        tli: TimeLineId,
        dirs: String,
    },
    #[error("WAL ended at {at} ({reason}) before the requested end {end}")]
    EndedEarly { at: Lsn, end: Lsn, reason: String },
    #[error(transparent)]
    Decode(#[from] WalDecodeError),
}

/// One segment file found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    pub path: PathBuf,
    pub tli: TimeLineId,
    /// Segment number in units of the segment size.
    pub segno: u64,
    pub partial: bool,
}

pub use walshadow_pg_format::wal_files::{parse_segment_name, segment_file_name};

/// Reads `xlp_seg_size` from a segment's first page.
pub fn read_segment_size(path: &Path) -> Result<u32, SegmentError> {
    let io = |source| SegmentError::Io {
        path: path.to_owned(),
        source,
    };
    let mut head = [0u8; 40];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map_err(io)?;
    let info = u16::from_le_bytes([head[2], head[3]]);
    let seg_size = u32::from_le_bytes([head[32], head[33], head[34], head[35]]);
    if info & walshadow_wal_decode::XLP_LONG_HEADER == 0
        || !seg_size.is_power_of_two()
        || !(1 << 20..=1 << 30).contains(&seg_size)
    {
        return Err(SegmentError::NotASegment {
            path: path.to_owned(),
        });
    }
    Ok(seg_size)
}

/// The segment files under a set of paths (files or folders).
#[derive(Debug, Clone)]
pub struct SegmentSet {
    seg_size: u32,
    /// (tli, segno) → file; a complete segment wins over a `.partial` one.
    files: BTreeMap<(TimeLineId, u64), SegmentFile>,
    described: String,
}

impl SegmentSet {
    /// Finds segment files in `paths`: each a segment file or a folder of
    /// them (not recursive).
    pub fn scan(paths: &[PathBuf]) -> Result<Self, SegmentError> {
        let described = paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let mut candidates = Vec::new();
        for p in paths {
            let io = |source| SegmentError::Io {
                path: p.clone(),
                source,
            };
            if p.is_dir() {
                for entry in std::fs::read_dir(p).map_err(io)? {
                    let entry = entry.map_err(io)?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if parse_segment_name(&name, 1 << 30).is_some()
                        || parse_segment_name(&name, 1 << 20).is_some()
                    {
                        candidates.push(entry.path());
                    }
                }
            } else {
                candidates.push(p.clone());
            }
        }
        candidates.sort();
        let first = candidates
            .iter()
            .find(|p| std::fs::metadata(p).map(|m| m.len() >= 40).unwrap_or(false))
            .ok_or_else(|| SegmentError::NoSegments(described.clone()))?;
        let seg_size = read_segment_size(first)?;
        let mut files = BTreeMap::new();
        for path in candidates {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let Some((tli, segno, partial)) = parse_segment_name(&name, seg_size) else {
                continue;
            };
            let f = SegmentFile {
                path,
                tli,
                segno,
                partial,
            };
            match files.get(&(tli, segno)) {
                Some(SegmentFile { partial: false, .. }) => {}
                _ => {
                    files.insert((tli, segno), f);
                }
            }
        }
        if files.is_empty() {
            return Err(SegmentError::NoSegments(described));
        }
        Ok(SegmentSet {
            seg_size,
            files,
            described,
        })
    }

    pub fn segment_size(&self) -> u32 {
        self.seg_size
    }

    pub fn files(&self) -> impl Iterator<Item = &SegmentFile> {
        self.files.values()
    }

    /// The LSN of the first page of the earliest segment present.
    pub fn first_lsn(&self, tli: TimeLineId) -> Option<Lsn> {
        self.files
            .keys()
            .find(|(t, _)| *t == tli)
            .map(|(_, segno)| Lsn(segno * u64::from(self.seg_size)))
    }

    /// The timeline to read from `start` when none is given: the highest one
    /// that has the segment holding `start`.
    pub fn default_timeline(&self, start: Option<Lsn>) -> Option<TimeLineId> {
        match start {
            Some(lsn) => {
                let segno = lsn.segment_number(self.seg_size);
                self.files
                    .keys()
                    .filter(|(_, s)| *s == segno)
                    .map(|(t, _)| *t)
                    .max()
            }
            None => self.files.keys().map(|(t, _)| *t).min(),
        }
    }

    /// Reads records of timeline `tli` from `start` (or the first segment)
    /// up to `end` (exclusive; or the end of written WAL).
    pub fn records(
        &self,
        tli: TimeLineId,
        start: Option<Lsn>,
        end: Option<Lsn>,
    ) -> Result<SegmentRecords<'_>, SegmentError> {
        let start = match start {
            Some(s) => s,
            None => self
                .first_lsn(tli)
                .ok_or_else(|| SegmentError::StartNotFound {
                    lsn: Lsn(0),
                    tli,
                    dirs: self.described.clone(),
                })?,
        };
        let segno = start.segment_number(self.seg_size);
        if !self.files.contains_key(&(tli, segno)) {
            return Err(SegmentError::StartNotFound {
                lsn: start,
                tli,
                dirs: self.described.clone(),
            });
        }
        let page_start = Lsn(start.0 - start.0 % u64::from(XLOG_BLCKSZ));
        let decoder = WalStreamDecoder::new(page_start, start, self.seg_size)?;
        Ok(SegmentRecords {
            set: self,
            tli,
            end,
            decoder,
            next_read: page_start,
            file: None,
            done: false,
            end_reason: None,
        })
    }
}

/// Iterator over the records in a [`SegmentSet`].
#[derive(Debug)]
pub struct SegmentRecords<'a> {
    set: &'a SegmentSet,
    tli: TimeLineId,
    end: Option<Lsn>,
    decoder: WalStreamDecoder,
    /// LSN of the next byte to read from disk.
    next_read: Lsn,
    file: Option<(u64, File, PathBuf)>,
    done: bool,
    end_reason: Option<(Lsn, String)>,
}

impl SegmentRecords<'_> {
    /// Why reading stopped without an error: where written WAL ended and
    /// how that was recognised. `None` while reading or if stopped at `end`.
    pub fn end_of_wal(&self) -> Option<&(Lsn, String)> {
        self.end_reason.as_ref()
    }

    pub fn decoder(&self) -> &WalStreamDecoder {
        &self.decoder
    }

    /// Feeds the decoder the next chunk from disk; `false` at the end of the
    /// files.
    fn fill(&mut self) -> Result<bool, SegmentError> {
        let seg_size = u64::from(self.set.seg_size);
        let segno = self.next_read.0 / seg_size;
        // The decoder may have jumped past bytes (XLOG_SWITCH): follow it.
        let want = self.decoder.wanted_position().max(self.next_read);
        if want.0 / seg_size != segno || self.file.as_ref().is_none_or(|(s, _, _)| *s != segno) {
            self.file = None;
        }
        self.next_read = want;
        let segno = self.next_read.0 / seg_size;
        if self.file.is_none() {
            let Some(f) = self.set.files.get(&(self.tli, segno)) else {
                return Ok(false);
            };
            let io = |source| SegmentError::Io {
                path: f.path.clone(),
                source,
            };
            let mut file = File::open(&f.path).map_err(io)?;
            let off = self.next_read.0 % seg_size;
            if off > 0 {
                use std::io::Seek;
                file.seek(std::io::SeekFrom::Start(off)).map_err(io)?;
            }
            self.file = Some((segno, file, f.path.clone()));
        }
        let Some((_, file, path)) = self.file.as_mut() else {
            return Ok(false);
        };
        let left_in_seg = (seg_size - self.next_read.0 % seg_size) as usize;
        let want_len = READ_CHUNK.min(left_in_seg);
        let n = self
            .decoder
            .feed_from(file, want_len)
            .map_err(|source| SegmentError::Io {
                path: path.clone(),
                source,
            })?;
        if n == 0 {
            // A short (.partial or still-being-written) file.
            self.file = None;
            return Ok(false);
        }
        self.next_read = Lsn(self.next_read.0 + n as u64);
        if n == left_in_seg {
            self.file = None;
        }
        Ok(true)
    }
}

/// Bytes read from disk at a time.
const READ_CHUNK: usize = 1 << 20;

impl SegmentRecords<'_> {
    /// The next record, lent out of the decoder's buffers until the next
    /// call (no copy); `Ok(None)` at the end (see [`Self::end_of_wal`]).
    pub fn next_ref(&mut self) -> Result<Option<RecordView<'_>>, SegmentError> {
        if self.done {
            return Ok(None);
        }
        // Poll once to learn whether a record is ready, then once more to
        // lend it: the borrow checker cannot see that the first borrow ends
        // on the `None` path.
        loop {
            match self.decoder.poll_ref() {
                Ok(Some(rec)) => {
                    if self.end.is_some_and(|e| rec.lsn >= e) {
                        self.done = true;
                        return Ok(None);
                    }
                    break;
                }
                Ok(None) => {
                    if !self.fill()? {
                        self.done = true;
                        let at = self.decoder.position();
                        return self.finish(at, "no more segment files".into());
                    }
                }
                Err(e) if e.is_end_of_wal() => {
                    self.done = true;
                    return self.finish(e.lsn, e.kind.to_string());
                }
                Err(e) => {
                    self.done = true;
                    return Err(e.into());
                }
            }
        }
        Ok(self.decoder.last_record())
    }
}

impl Iterator for SegmentRecords<'_> {
    type Item = Result<WalRecord, SegmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|r| r.map(|v| v.to_owned())).transpose()
    }
}

impl SegmentRecords<'_> {
    fn finish<T>(&mut self, at: Lsn, reason: String) -> Result<Option<T>, SegmentError> {
        match self.end {
            Some(end) if at < end => Err(SegmentError::EndedEarly { at, end, reason }),
            _ => {
                self.end_reason = Some((at, reason));
                Ok(None)
            }
        }
    }
}
