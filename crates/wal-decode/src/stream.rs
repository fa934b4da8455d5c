//! Sans-IO reassembly of records from raw WAL bytes (`XLogDecodeNextRecord`
//! and `XLogFindNextRecord` in xlogreader.c).
//!
//! Feed bytes in any chunk size with [`WalStreamDecoder::feed`], then call
//! [`WalStreamDecoder::poll`] until it returns `Ok(None)` (more bytes
//! needed). The decoder validates every page header (magic, address,
//! timeline, system id, segment size), follows records across pages and
//! segments (`XLP_FIRST_IS_CONTRECORD` with `xlp_rem_len`), restarts on an
//! `XLP_FIRST_IS_OVERWRITE_CONTRECORD` page, skips the zeroed tail of a
//! segment after `XLOG_SWITCH`, checks each record's `xl_prev` and CRC-32C.
//!
//! Memory is bounded by the largest record plus one fed chunk: a record is
//! copied out of the input as its pieces arrive, and a hostile `xl_tot_len`
//! only ever costs the bytes actually fed.

use std::io::Read;

use walshadow_types::{Lsn, PgMajor, TimeLineId};

use crate::block::BlockRef;
use crate::error::{WalDecodeError, WalErrorKind};
use crate::page::{PageHeader, XLOG_BLCKSZ, valid_segment_size};
use crate::record::{
    RecordHeader, RecordParts, RecordView, SIZE_OF_XLOG_RECORD, WalRecord, decode_with_header,
};

/// PostgreSQL never writes a record over 1 GiB (`XLogRecordMaxSize` is
/// 1020 MiB since 16; 15 is bounded by `MaxAllocSize`).
const MAX_RECORD_LEN: u32 = 1 << 30;

const BLCKSZ: u64 = XLOG_BLCKSZ as u64;

#[derive(Debug)]
enum State {
    /// Skipping the tail of a record that began before the first fed page.
    SkipContrecord { remaining: u64 },
    /// Between records: the next record starts at `pos` (after the page
    /// header, if `pos` is at a page boundary).
    Idle,
    /// Copying a record's bytes out of the pages.
    /// The record's bytes so far are in `assembly`.
    Assembling {
        start: Lsn,
        tot_len: u32,
        header_checked: bool,
    },
}

/// Where the record `poll` returns lies.
#[derive(Debug, Clone, Copy)]
enum Found {
    /// In `buf`, at this offset: it sat whole on one page.
    InBuffer {
        off: usize,
        lsn: Lsn,
        end: Lsn,
        len: usize,
        header: RecordHeader,
    },
    /// In `assembly`: it crossed pages.
    Assembled {
        lsn: Lsn,
        end: Lsn,
        header: RecordHeader,
    },
}

impl Found {
    fn lsn(&self) -> Lsn {
        match *self {
            Found::InBuffer { lsn, .. } | Found::Assembled { lsn, .. } => lsn,
        }
    }
}

/// Capacity the assembly buffer keeps between records; a larger record's
/// buffer is released after use so one huge record does not pin memory.
const ASSEMBLY_KEEP: usize = 1 << 20;

/// What one assembly step achieved.
enum Step {
    Record(Found),
    /// Progress made (a page's piece copied); go on.
    Continue,
    NeedMore,
}

/// Reassembles WAL records from a contiguous byte stream.
#[derive(Debug)]
pub struct WalStreamDecoder {
    seg_size: u32,
    /// Unread input; `buf[buf_pos]` is the byte at `pos`.
    buf: Vec<u8>,
    buf_pos: usize,
    /// Reading position.
    pos: Lsn,
    /// Position of the next byte `feed` expects.
    feed_end: Lsn,
    /// Records that start before this are decoded (to find boundaries and
    /// check links) but not returned.
    emit_from: Lsn,
    state: State,
    /// `true` until the first page header has been read.
    first_page: bool,
    prev_record: Option<Lsn>,
    magic: Option<u16>,
    system_id: Option<u64>,
    latest_page: Option<(Lsn, TimeLineId)>,
    failed: Option<WalDecodeError>,
    /// Bytes of the record being reassembled across pages.
    assembly: Vec<u8>,
    /// Block references of the last record, reused across records.
    blocks: Vec<BlockRef>,
    /// The record `poll_ref` returned last, while its bytes are still here.
    last: Option<(Found, RecordParts)>,
}

impl WalStreamDecoder {
    /// A decoder whose input starts at `feed_start` and that returns records
    /// starting at or after `emit_from`.
    ///
    /// If `feed_start` is at a page boundary the decoder finds the first
    /// record on that page itself (skipping the tail of a record continued
    /// from the previous page), as `XLogFindNextRecord` does. Otherwise
    /// `feed_start` must be the start of a record (for resuming a stream at a
    /// known record boundary).
    pub fn new(feed_start: Lsn, emit_from: Lsn, seg_size: u32) -> Result<Self, WalDecodeError> {
        if !valid_segment_size(u64::from(seg_size)) {
            return Err(WalDecodeError::new(
                feed_start,
                WalErrorKind::BadSegmentSize(u64::from(seg_size)),
            ));
        }
        let at_page = feed_start.0.is_multiple_of(BLCKSZ);
        if !at_page && !feed_start.0.is_multiple_of(8) {
            return Err(WalDecodeError::new(
                feed_start,
                WalErrorKind::BadBody("a record start must be 8-byte aligned".into()),
            ));
        }
        Ok(WalStreamDecoder {
            seg_size,
            buf: Vec::new(),
            buf_pos: 0,
            pos: feed_start,
            feed_end: feed_start,
            emit_from,
            state: State::Idle,
            first_page: at_page,
            prev_record: None,
            magic: None,
            system_id: None,
            latest_page: None,
            failed: None,
            assembly: Vec::new(),
            blocks: Vec::new(),
            last: None,
        })
    }

    /// Expect this system identifier in long page headers.
    pub fn expect_system_id(&mut self, system_id: u64) {
        self.system_id = Some(system_id);
    }

    /// Expect pages of this major (by page magic).
    pub fn expect_major(&mut self, major: PgMajor) {
        self.magic = Some(major.xlog_page_magic());
    }

    /// The major whose page magic the stream carries, once a page was read.
    pub fn major(&self) -> Option<PgMajor> {
        self.magic.and_then(PgMajor::from_xlog_page_magic)
    }

    pub fn system_id(&self) -> Option<u64> {
        self.system_id
    }

    pub fn segment_size(&self) -> u32 {
        self.seg_size
    }

    /// Where decoding stands: the start of the next record, or inside one.
    pub fn position(&self) -> Lsn {
        self.pos
    }

    /// The LSN the next fed byte must have.
    pub fn feed_position(&self) -> Lsn {
        self.feed_end
    }

    /// Feeds the next bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        // After an XLOG_SWITCH the reading position may have jumped ahead of
        // the input: drop the segment's zeroed tail as it arrives.
        if self.feed_end < self.pos {
            let skip = self
                .pos
                .distance_from(self.feed_end)
                .min(bytes.len() as u64) as usize;
            bytes = bytes.get(skip..).unwrap_or_default();
            self.feed_end = Lsn(self.feed_end.0.saturating_add(skip as u64));
        }
        self.compact();
        self.buf.extend_from_slice(bytes);
        self.feed_end = Lsn(self.feed_end.0.saturating_add(bytes.len() as u64));
    }

    /// Reads up to `max` bytes from `r` straight into the decoder's buffer
    /// (sparing the copy [`Self::feed`] makes); `r` must yield the bytes at
    /// [`Self::wanted_position`]... unless the caller knows better, they are
    /// taken to continue the stream. Returns the count read (0 at EOF).
    pub fn feed_from<R: Read>(&mut self, r: &mut R, max: usize) -> std::io::Result<usize> {
        self.compact();
        if self.feed_end < self.pos {
            // Bytes before `pos` would be dropped; the caller should have
            // started at `wanted_position`.
            self.feed_end = self.pos;
        }
        self.buf.reserve(max);
        let n = r.take(max as u64).read_to_end(&mut self.buf)?;
        self.feed_end = Lsn(self.feed_end.0.saturating_add(n as u64));
        Ok(n)
    }

    /// Drops consumed input, keeping the unread tail.
    fn compact(&mut self) {
        self.last = None;
        if self.buf_pos == self.buf.len() {
            self.buf.clear();
            self.buf_pos = 0;
        } else if self.buf_pos > (1 << 16) && self.buf_pos > self.buf.len() / 2 {
            self.buf.drain(..self.buf_pos);
            self.buf_pos = 0;
        }
    }

    /// Where the decoder wants its next byte from: past [`Self::feed_position`]
    /// when it skipped ahead (the zeroed tail of a segment after
    /// `XLOG_SWITCH`), so a reader need not fetch what would be dropped.
    pub fn wanted_position(&self) -> Lsn {
        self.feed_end.max(self.pos)
    }

    /// Feeds bytes that claim to start at `lsn`; they must continue the
    /// stream exactly, or start anywhere in a stretch the decoder skips.
    pub fn feed_at(&mut self, lsn: Lsn, bytes: &[u8]) -> Result<(), WalDecodeError> {
        if lsn > self.feed_end && lsn <= self.pos {
            self.feed_end = lsn;
        }
        if lsn != self.feed_end {
            return Err(WalDecodeError::new(
                lsn,
                WalErrorKind::NonContiguous {
                    got: lsn,
                    expected: self.feed_end,
                },
            ));
        }
        self.feed(bytes);
        Ok(())
    }

    fn available(&self) -> &[u8] {
        self.buf.get(self.buf_pos..).unwrap_or_default()
    }

    fn consume(&mut self, n: usize) {
        self.buf_pos = self.buf_pos.saturating_add(n).min(self.buf.len());
        self.pos = Lsn(self.pos.0.saturating_add(n as u64));
    }

    /// Moves the reading position forward to `to`, dropping what lies
    /// between (possibly bytes not fed yet).
    fn skip_to(&mut self, to: Lsn) {
        let n = to.distance_from(self.pos);
        let have = self.available().len() as u64;
        if n <= have {
            self.consume(n as usize);
        } else {
            // Leave the bytes in place (a returned view may borrow them);
            // the next feed compacts.
            self.buf_pos = self.buf.len();
            self.pos = to;
        }
    }

    fn fail(&mut self, lsn: Lsn, kind: WalErrorKind) -> WalDecodeError {
        let e = WalDecodeError::new(lsn, kind);
        self.failed = Some(e.clone());
        e
    }

    /// Returns the next complete record as an owned copy, `Ok(None)` when
    /// more bytes are needed. After an error the decoder stays failed.
    pub fn poll(&mut self) -> Result<Option<WalRecord>, WalDecodeError> {
        Ok(self.poll_ref()?.map(|v| v.to_owned()))
    }

    /// Like [`Self::poll`], but lends the record out of the decoder's
    /// buffers: no copy and no allocation for a record that sits on one
    /// page. The view lives until the next call.
    pub fn poll_ref(&mut self) -> Result<Option<RecordView<'_>>, WalDecodeError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.last = None;
        let Some(found) = self.find_next()? else {
            return Ok(None);
        };
        let (lsn, end, header, raw) = match found {
            Found::InBuffer {
                off,
                lsn,
                end,
                len,
                header,
            } => (
                lsn,
                end,
                header,
                self.buf
                    .get(off..off.saturating_add(len))
                    .unwrap_or_default(),
            ),
            Found::Assembled { lsn, end, header } => (lsn, end, header, self.assembly.as_slice()),
        };
        match decode_with_header(lsn, end, raw, header, &mut self.blocks) {
            Ok(view) => {
                let parts = view.parts();
                self.last = Some((found, parts));
                Ok(Some(RecordView::from_parts(&parts, raw, &self.blocks)))
            }
            Err(kind) => {
                self.last = None;
                let e = WalDecodeError::new(lsn, kind);
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The record the last successful [`Self::poll_ref`] returned, lent
    /// again; `None` once more bytes were fed.
    pub fn last_record(&self) -> Option<RecordView<'_>> {
        let (found, parts) = self.last.as_ref()?;
        let raw = match *found {
            Found::InBuffer { off, len, .. } => self.buf.get(off..off.saturating_add(len))?,
            Found::Assembled { .. } => self.assembly.as_slice(),
        };
        Some(RecordView::from_parts(parts, raw, &self.blocks))
    }

    /// Advances to the next record at or after `emit_from` and says where
    /// its bytes are. Records before `emit_from` are checked (CRC and
    /// fragments) and passed over.
    fn find_next(&mut self) -> Result<Option<Found>, WalDecodeError> {
        loop {
            let Some(found) = self.next_record()? else {
                return Ok(None);
            };
            let lsn = found.lsn();
            if lsn >= self.emit_from {
                return Ok(Some(found));
            }
            let (end, header, raw) = match found {
                Found::InBuffer {
                    off,
                    end,
                    len,
                    header,
                    ..
                } => (
                    end,
                    header,
                    self.buf
                        .get(off..off.saturating_add(len))
                        .unwrap_or_default(),
                ),
                Found::Assembled { end, header, .. } => (end, header, self.assembly.as_slice()),
            };
            if let Err(kind) = decode_with_header(lsn, end, raw, header, &mut self.blocks) {
                return Err(self.fail(lsn, kind));
            }
        }
    }

    /// Finds the next record's bytes; `Ok(None)` when more input is needed.
    fn next_record(&mut self) -> Result<Option<Found>, WalDecodeError> {
        loop {
            if self.pos.0.is_multiple_of(BLCKSZ) {
                match self.read_page_header()? {
                    true => continue,
                    false => return Ok(None),
                }
            }
            let page_left = BLCKSZ - self.pos.0 % BLCKSZ;
            let have = self.available().len() as u64;
            match &mut self.state {
                State::SkipContrecord { remaining } => {
                    let n = (*remaining).min(page_left).min(have);
                    *remaining -= n;
                    let done = *remaining == 0;
                    self.consume(n as usize);
                    if done {
                        self.state = State::Idle;
                        self.skip_to(self.pos.align8());
                    } else if n == 0 {
                        return Ok(None);
                    }
                }
                State::Idle => {
                    if !self.pos.0.is_multiple_of(8) {
                        return Err(self.fail(
                            self.pos,
                            WalErrorKind::BadBody("record start is not 8-byte aligned".into()),
                        ));
                    }
                    let Some(len_bytes) = self.available().get(..4) else {
                        return Ok(None);
                    };
                    let tot_len = u32::from_le_bytes(len_bytes.try_into().unwrap_or([0; 4]));
                    if tot_len < SIZE_OF_XLOG_RECORD as u32 {
                        return Err(self.fail(self.pos, WalErrorKind::RecordTooShort(tot_len)));
                    }
                    if tot_len > MAX_RECORD_LEN {
                        return Err(self.fail(self.pos, WalErrorKind::RecordTooLong(tot_len)));
                    }
                    let start = self.pos;
                    if u64::from(tot_len) <= page_left {
                        // The whole record is on this page: no copy.
                        if have < u64::from(tot_len) {
                            return Ok(None);
                        }
                        let off = self.buf_pos;
                        let len = tot_len as usize;
                        if let Some(h) = self
                            .available()
                            .get(..SIZE_OF_XLOG_RECORD)
                            .and_then(RecordHeader::parse)
                        {
                            self.check_header(start, &h)?;
                            self.consume(len);
                            let end = self.pos;
                            self.finish_record(start, end, &h);
                            return Ok(Some(Found::InBuffer {
                                off,
                                lsn: start,
                                end,
                                len,
                                header: h,
                            }));
                        }
                    }
                    self.assembly.clear();
                    if self.assembly.capacity() > ASSEMBLY_KEEP {
                        self.assembly.shrink_to(ASSEMBLY_KEEP);
                    }
                    self.state = State::Assembling {
                        start,
                        tot_len,
                        header_checked: false,
                    };
                }
                State::Assembling { .. } => match self.assemble()? {
                    Step::Record(found) => return Ok(Some(found)),
                    Step::Continue => {}
                    Step::NeedMore => return Ok(None),
                },
            }
        }
    }

    /// After a record: remember it for the next prev-link check and move to
    /// where the next one starts.
    fn finish_record(&mut self, start: Lsn, end: Lsn, h: &RecordHeader) {
        self.prev_record = Some(start);
        self.state = State::Idle;
        if h.is_xlog_switch() {
            // The rest of the segment is zero padding: jump to the next one.
            let seg = u64::from(self.seg_size);
            // Saturates in the last segment of the LSN space (no next one).
            let next = (end.0.saturating_sub(1) / seg * seg).saturating_add(seg);
            self.skip_to(Lsn(next));
        } else {
            self.skip_to(end.align8());
        }
    }

    /// Copies the current record's next piece into `assembly`.
    fn assemble(&mut self) -> Result<Step, WalDecodeError> {
        let page_left = (BLCKSZ - self.pos.0 % BLCKSZ) as usize;
        let avail_len = self.available().len();
        let State::Assembling {
            start,
            tot_len,
            header_checked,
        } = &mut self.state
        else {
            return Ok(Step::Continue);
        };
        let (start, tot_len) = (*start, *tot_len);
        let need = (tot_len as usize).saturating_sub(self.assembly.len());
        let n = need.min(page_left).min(avail_len);
        if n == 0 && need > 0 {
            return Ok(Step::NeedMore);
        }
        let check_now = !*header_checked && self.assembly.len() + n >= SIZE_OF_XLOG_RECORD;
        if check_now {
            *header_checked = true;
        }
        let from = self.buf_pos;
        if let Some(piece) = self.buf.get(from..from.saturating_add(n)) {
            self.assembly.extend_from_slice(piece);
        }
        self.consume(n);
        let header = RecordHeader::parse(&self.assembly);
        if check_now && let Some(h) = &header {
            self.check_header(start, h)?;
        }
        if self.assembly.len() < tot_len as usize {
            return Ok(Step::Continue);
        }
        let end = self.pos;
        let Some(header) = header else {
            return Err(self.fail(start, WalErrorKind::RecordTooShort(tot_len)));
        };
        self.finish_record(start, end, &header);
        Ok(Step::Record(Found::Assembled {
            lsn: start,
            end,
            header,
        }))
    }

    /// `ValidXLogRecordHeader`: rmgr id and prev-link.
    fn check_header(&mut self, start: Lsn, h: &RecordHeader) -> Result<(), WalDecodeError> {
        if !h.xl_rmid.is_valid() {
            return Err(self.fail(start, WalErrorKind::BadRmgr(h.xl_rmid.0)));
        }
        match self.prev_record {
            Some(prev) if h.xl_prev != prev => Err(self.fail(
                start,
                WalErrorKind::BadPrevLink {
                    found: h.xl_prev,
                    expected: prev,
                },
            )),
            // First record read: we only know its predecessor is earlier.
            None if h.xl_prev >= start => Err(self.fail(
                start,
                WalErrorKind::BadPrevLink {
                    found: h.xl_prev,
                    expected: start,
                },
            )),
            _ => Ok(()),
        }
    }

    /// Reads and checks the page header at `pos` (a page boundary). Returns
    /// `false` when more bytes are needed.
    fn read_page_header(&mut self) -> Result<bool, WalDecodeError> {
        let page = self.pos;
        let avail = self.available();
        let Some(needed) = PageHeader::needed(avail) else {
            return Ok(false);
        };
        let Some(bytes) = avail.get(..needed) else {
            return Ok(false);
        };
        let hdr = PageHeader::parse(bytes).map_err(|k| self.fail(page, k))?;
        self.validate_page_header(page, &hdr)?;
        self.consume(hdr.size());

        let first_page = std::mem::replace(&mut self.first_page, false);
        match &mut self.state {
            State::Idle if first_page && hdr.is_contrecord() => {
                self.state = State::SkipContrecord {
                    remaining: u64::from(hdr.rem_len),
                };
                if hdr.rem_len == 0 {
                    self.state = State::Idle;
                }
            }
            State::Idle if hdr.is_contrecord() && hdr.rem_len > 0 => {
                return Err(self.fail(page, WalErrorKind::UnexpectedContrecord));
            }
            State::Idle => {}
            State::SkipContrecord { remaining } => {
                if hdr.is_contrecord() {
                    *remaining = u64::from(hdr.rem_len);
                } else {
                    // The skipped record ended exactly at the page end.
                    self.state = State::Idle;
                }
            }
            State::Assembling { start, tot_len, .. } => {
                if hdr.is_overwrite_contrecord() {
                    // The record was abandoned (crash before its end was
                    // written); the page starts afresh with the
                    // OVERWRITE_CONTRECORD record.
                    self.state = State::Idle;
                } else if !hdr.is_contrecord() {
                    let record = *start;
                    return Err(self.fail(page, WalErrorKind::MissingContrecord { record }));
                } else {
                    let expected = u64::from(*tot_len).saturating_sub(self.assembly.len() as u64);
                    if u64::from(hdr.rem_len) != expected {
                        let record = *start;
                        return Err(self.fail(
                            page,
                            WalErrorKind::BadContrecordLength {
                                found: hdr.rem_len,
                                expected,
                                record,
                            },
                        ));
                    }
                }
            }
        }
        Ok(true)
    }

    /// `XLogReaderValidatePageHeader`.
    fn validate_page_header(&mut self, page: Lsn, hdr: &PageHeader) -> Result<(), WalDecodeError> {
        match self.magic {
            Some(m) if m != hdr.magic => {
                return Err(self.fail(
                    page,
                    WalErrorKind::MagicChanged {
                        found: hdr.magic,
                        expected: m,
                    },
                ));
            }
            Some(_) => {}
            None => self.magic = Some(hdr.magic),
        }
        if hdr.pageaddr != page {
            return Err(self.fail(
                page,
                WalErrorKind::UnexpectedPageAddr {
                    found: hdr.pageaddr,
                    expected: page,
                },
            ));
        }
        let seg_start = page.0.is_multiple_of(u64::from(self.seg_size));
        match hdr.long {
            Some((sysid, seg_size, blcksz)) => {
                match self.system_id {
                    Some(s) if s != sysid => {
                        return Err(self.fail(
                            page,
                            WalErrorKind::SystemIdMismatch {
                                found: sysid,
                                expected: s,
                            },
                        ));
                    }
                    Some(_) => {}
                    None => self.system_id = Some(sysid),
                }
                if seg_size != self.seg_size {
                    return Err(self.fail(
                        page,
                        WalErrorKind::SegmentSizeMismatch {
                            found: seg_size,
                            expected: self.seg_size,
                        },
                    ));
                }
                if blcksz != XLOG_BLCKSZ {
                    return Err(self.fail(page, WalErrorKind::BlockSizeMismatch(blcksz)));
                }
            }
            None if seg_start => {
                return Err(self.fail(page, WalErrorKind::BadPageInfo(hdr.info)));
            }
            None => {}
        }
        if let Some((latest_page, latest_tli)) = self.latest_page
            && page > latest_page
            && hdr.tli < latest_tli
        {
            return Err(self.fail(
                page,
                WalErrorKind::TimelineBackwards {
                    found: hdr.tli,
                    latest: latest_tli,
                },
            ));
        }
        self.latest_page = Some((page, hdr.tli));
        Ok(())
    }
}
