//! Harness code shared by the fuzz targets (and usable from a plain test to
//! replay an artifact): the input layouts of `wal_stream`, `heap_page` and
//! `visibility_gate`, the fix-ups of `decode_record`, and the properties
//! each target checks.
//!
//! `wal_stream` input layout (16-byte header, then WAL bytes):
//!
//! ```text
//!  [0]     seg_size = 1 MiB << (b % 11)              (every valid size)
//!  [1]     flags: bit0 start is only 8-aligned (else page-aligned)
//!                 bit1 emit_from = start + 8 * u16[5..7]
//!                 bit2 feed the chunked copy through feed_from, not feed
//!  [2..4]  chunk-size PRNG seed (u16 LE)
//!  [4]     largest chunk = 1 << (b % 15) bytes       (1 B .. 16 KiB)
//!  [5..7]  emit_from offset in 8-byte units (u16 LE)
//!  [7]     unused
//!  [8..16] start LSN (u64 LE), aligned down per bit0
//!  [16..]  the WAL bytes, fed from the start LSN
//! ```
//!
//! Seeds cut from real segments put the real page address in `[8..16]`,
//! so the fuzzer starts from streams that decode.
//!
//! `heap_page` input layout (see [`PageInput`]):
//!
//! ```text
//!  [0]     flags: bit0 fix pd_checksum up for the block (so the verified
//!                      parse gets past the checksum to the line pointers)
//!                 bits1..8 which columns decode_only asks for
//!  [1..5]  block number in the relation (u32 LE; the checksum's input)
//!  [5..]   the page: a shorter one is padded with zeros to 8192 bytes,
//!          bytes past 8192 are ignored
//! ```
//!
//! Padding (rather than skipping short inputs) lets the fuzzer work on the
//! page header and line pointers with small inputs; tuples sit at the end
//! of a page, so the real seeds are whole pages.
//!
//! `visibility_gate` input layout (see [`GateInput`]; [`GateInputBuilder`]
//! writes it):
//!
//! ```text
//!  [0]       flags: bit0 XactLog::set_next_xid(next_xid)
//!                   bit1 MultiXacts::set_next(next_multi, next_offset)
//!  [1..5]    next_xid     (u32 LE)
//!  [5..9]    next_multi   (u32 LE)
//!  [9..13]   next_offset  (u32 LE)
//!  [13]      n: tuple headers that follow
//!  [14..]    n raw heap tuple headers of 23 bytes (HeapTupleHeaderData up
//!            to t_hoff; a short last one is a TupleHeader::parse error)
//!  then records until the input ends, at most 8 used:
//!  [tag]     tag & 3: 0 pg_xact, 1 pg_multixact/offsets, 2 members
//!                     segment (XactLog::add_segment, add_offsets_segment,
//!                     add_members_segment), 3 a backup member path
//!                     (Gate::add_backup_file)
//!            tag >> 2: the segment's whole pages, at most 33 (one more
//!                     than a segment holds)
//!  tag 0..2: [segno u32 LE][len u16 LE][len bytes]
//!  tag 3:    [path len u8][path, lossy UTF-8][len u16 LE][len bytes]
//! ```
//!
//! A segment's bytes are zero-padded to its page count (real SLRU pages
//! are mostly zeros, so seeds carry only the leading bytes); more bytes
//! than the pages hold are kept, a trailing partial page included.

use std::sync::OnceLock;

use walshadow_heap::heap_page::{
    BLCKSZ, HeapPage, LpFlags, MAX_HEAP_TUPLES_PER_PAGE, PageDamage, SIZE_OF_PAGE_HEADER_DATA,
};
use walshadow_heap::visibility::{
    DropReason, Gate, HEAP_XMAX_INVALID, HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN, HEAP_XMIN_INVALID,
    MultiXacts, Resolved, Slru, TupleHeader, Verdict, XactLog,
};
use walshadow_pg_format::page::checksum_page as pg_checksum_page;
use walshadow_rows::{
    RowDecoder, SIZEOF_HEAP_TUPLE_HEADER, ToastChunk, ToastChunks, ToastSource, Value,
};
use walshadow_types::catalog::RelationDesc;
use walshadow_types::{Lsn, Oid, PgMajor};
use walshadow_wal_decode::{
    HeapChange, OldTuple, RecordView, TupleBytes, WalDecodeError, WalErrorKind, WalRecord,
    WalStreamDecoder, XactRecord, decode_heap, decode_prune, decode_record, decode_running_xacts,
    decode_xact,
};

pub const STREAM_HEADER: usize = 16;

/// The decoder parameters and chunking a `wal_stream` input asks for.
#[derive(Debug, Clone)]
pub struct StreamInput<'a> {
    pub seg_size: u32,
    pub start: Lsn,
    pub emit_from: Lsn,
    pub use_feed_from: bool,
    pub chunk_seed: u16,
    pub max_chunk: usize,
    pub wal: &'a [u8],
}

impl<'a> StreamInput<'a> {
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (h, wal) = data.split_at_checked(STREAM_HEADER)?;
        let seg_size = (1u32 << 20) << (h[0] % 11);
        let flags = h[1];
        let chunk_seed = u16::from_le_bytes([h[2], h[3]]);
        let max_chunk = 1usize << (h[4] % 15);
        let emit_off = u64::from(u16::from_le_bytes([h[5], h[6]])) * 8;
        let raw = u64::from_le_bytes(h[8..16].try_into().ok()?);
        let start = if flags & 1 != 0 {
            raw & !7
        } else {
            raw & !8191
        };
        let emit_from = if flags & 2 != 0 {
            start.saturating_add(emit_off)
        } else {
            start
        };
        Some(StreamInput {
            seg_size,
            start: Lsn(start),
            emit_from: Lsn(emit_from),
            use_feed_from: flags & 4 != 0,
            chunk_seed,
            max_chunk,
            wal,
        })
    }

    /// Encodes a header for `start` (page-aligned unless `eight_aligned`).
    pub fn header(seg_size_shift: u8, start: u64, chunk_seed: u16, max_chunk_shift: u8) -> Vec<u8> {
        let mut h = vec![0u8; STREAM_HEADER];
        h[0] = seg_size_shift;
        h[1] = u8::from(!start.is_multiple_of(8192));
        h[2..4].copy_from_slice(&chunk_seed.to_le_bytes());
        h[4] = max_chunk_shift;
        h[8..16].copy_from_slice(&start.to_le_bytes());
        h
    }
}

/// What one poll produced: a record with the outcome of restoring each of
/// its images, or the error that stopped the decoder.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Record(WalRecord, Vec<Result<Vec<u8>, WalErrorKind>>),
    Error(WalDecodeError),
}

fn restore_all(v: &RecordView<'_>) -> Vec<Result<Vec<u8>, WalErrorKind>> {
    let mut out = Vec::new();
    for b in v.blocks {
        // Touch every accessor; none may panic.
        let _ = v.block_data(b);
        let _ = v.image_bytes(b);
        if b.has_image() {
            let r = v.restore_page(b);
            if let Ok(page) = &r {
                assert_eq!(page.len(), 8192, "restored page is not a page");
            }
            out.push(r);
        }
    }
    let _ = v.main_data();
    out
}

/// Properties every returned record has, however hostile the input.
fn check_record(v: &RecordView<'_>, emit_from: Lsn, prev: &mut Option<Lsn>) {
    assert_eq!(v.raw().len(), v.header.xl_tot_len as usize);
    assert!(v.lsn >= emit_from, "record before emit_from");
    assert!(v.end.0 >= v.lsn.0.saturating_add(u64::from(v.header.xl_tot_len)));
    if let Some(p) = *prev {
        assert!(v.lsn > p, "records out of order");
    }
    *prev = Some(v.lsn);
}

/// Polls `dec` with `poll` until it wants more bytes or fails.
fn drain_owned(
    dec: &mut WalStreamDecoder,
    emit_from: Lsn,
    prev: &mut Option<Lsn>,
    out: &mut Vec<Outcome>,
) -> bool {
    loop {
        match dec.poll() {
            Ok(Some(r)) => {
                let v = r.view();
                check_record(&v, emit_from, prev);
                let imgs = restore_all(&v);
                assert_eq!(r.view().to_owned(), r);
                out.push(Outcome::Record(r, imgs));
            }
            Ok(None) => return true,
            Err(e) => {
                // A failed decoder stays failed, with the same error.
                assert_eq!(dec.poll().err().as_ref(), Some(&e));
                out.push(Outcome::Error(e));
                return false;
            }
        }
    }
}

/// Polls `dec` with `poll_ref` (the zero-copy path) until it wants more
/// bytes or fails.
fn drain_ref(
    dec: &mut WalStreamDecoder,
    emit_from: Lsn,
    prev: &mut Option<Lsn>,
    out: &mut Vec<Outcome>,
) -> bool {
    loop {
        let owned = match dec.poll_ref() {
            Ok(Some(v)) => {
                check_record(&v, emit_from, prev);
                let imgs = restore_all(&v);
                (v.to_owned(), imgs)
            }
            Ok(None) => return true,
            Err(e) => {
                assert_eq!(dec.poll_ref().err().as_ref(), Some(&e));
                out.push(Outcome::Error(e));
                return false;
            }
        };
        let again = dec.last_record().map(|v| v.to_owned());
        assert_eq!(
            again.as_ref(),
            Some(&owned.0),
            "last_record differs from poll_ref"
        );
        out.push(Outcome::Record(owned.0, owned.1));
    }
}

/// Tiny xorshift for chunk sizes: the chunking is part of the input.
struct Chunker {
    state: u32,
    max: usize,
}

impl Chunker {
    fn next(&mut self) -> usize {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        1 + (x as usize) % self.max
    }
}

/// Decodes `input` twice, whole and in chunks, and checks both never panic
/// and agree record for record, image for image, error for error.
pub fn run_wal_stream(input: &StreamInput<'_>) {
    let Some((whole, a)) = decode_whole(input) else {
        return;
    };
    let Ok(mut chunked) = WalStreamDecoder::new(input.start, input.emit_from, input.seg_size)
    else {
        return;
    };

    let mut b = Vec::new();
    let mut prev = None;
    let mut chunker = Chunker {
        state: u32::from(input.chunk_seed) << 8 | 0x5a,
        max: input.max_chunk,
    };
    let mut rest = input.wal;
    let mut at = input.start;
    let mut ok = true;
    while ok && !rest.is_empty() {
        if input.use_feed_from {
            // A reader seeks to where the decoder wants its next byte
            // (past a switched segment's zeroed tail).
            let skip = dec_skip(&chunked, at).min(rest.len() as u64) as usize;
            rest = &rest[skip..];
            at = Lsn(at.0.saturating_add(skip as u64));
            if rest.is_empty() {
                break;
            }
            let n = chunker.next().min(rest.len());
            let mut r = &rest[..n];
            let got = chunked.feed_from(&mut r, n).unwrap_or(0);
            assert_eq!(got, n);
            rest = &rest[n..];
            at = Lsn(at.0.saturating_add(n as u64));
        } else {
            let n = chunker.next().min(rest.len());
            chunked.feed(&rest[..n]);
            rest = &rest[n..];
        }
        ok = drain_ref(&mut chunked, input.emit_from, &mut prev, &mut b);
    }

    assert_eq!(
        a.len(),
        b.len(),
        "whole and chunked feeds differ in count:\n{a:#?}\n{b:#?}"
    );
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x, y, "whole and chunked feeds differ");
    }
    if ok && a.last().is_none_or(|o| matches!(o, Outcome::Record(..))) {
        assert_eq!(whole.position(), chunked.position(), "positions differ");
    }
}

/// Decodes `input` fed in one piece (`None` if the decoder refuses the
/// parameters).
pub fn decode_whole(input: &StreamInput<'_>) -> Option<(WalStreamDecoder, Vec<Outcome>)> {
    let mut whole = WalStreamDecoder::new(input.start, input.emit_from, input.seg_size).ok()?;
    let mut out = Vec::new();
    let mut prev = None;
    whole.feed(input.wal);
    drain_owned(&mut whole, input.emit_from, &mut prev, &mut out);
    Some((whole, out))
}

fn dec_skip(dec: &WalStreamDecoder, at: Lsn) -> u64 {
    dec.wanted_position().distance_from(at)
}

/// Makes `data` a record `decode_record` accepts up to fragment parsing:
/// `xl_tot_len` = its length, `xl_crc` = the CRC-32C PostgreSQL computes
/// (over the body, then the header up to `xl_crc`).
pub fn fix_up_record(data: &mut [u8]) {
    if data.len() < 24 {
        return;
    }
    let len = data.len() as u32;
    data[0..4].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c_append(crc32c(&data[24..]), &data[0..20]);
    data[20..24].copy_from_slice(&crc.to_le_bytes());
}

/// Decodes one fixed-up record and exercises every accessor.
pub fn run_decode_record(raw: &[u8]) {
    let mut blocks = Vec::new();
    let lsn = Lsn(0x1_0000_0028);
    let end = Lsn(lsn.0 + raw.len() as u64);
    let Ok(v) = decode_record(lsn, end, raw, &mut blocks) else {
        return;
    };
    assert_eq!(v.raw().len(), raw.len());
    let mut payload = 0usize;
    for b in v.blocks {
        payload += v.block_data(b).len();
        assert_eq!(v.block_data(b).len(), b.data_len());
        if b.has_image() {
            let stored = v.image_bytes(b).expect("image inside the record");
            payload += stored.len();
            if let Ok(page) = v.restore_page(b) {
                assert_eq!(page.len(), 8192);
            }
        }
    }
    payload += v.main_data().len();
    assert!(payload <= raw.len() - 24, "payload larger than the record");
    let owned = v.to_owned();
    assert_eq!(owned.view(), v);
}

// crc32c is only a dependency of wal-decode; a bitwise CRC-32C (Castagnoli,
// reflected) keeps the fuzz crate's dependencies to the crates under test.
fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// Decompresses with an arbitrary `rawsize` and checks what comes out.
pub fn run_pglz(data: &[u8]) {
    let Some((h, src)) = data.split_at_checked(5) else {
        return;
    };
    let rawsize = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let check_complete = h[4] & 1 != 0;
    match walshadow_wal_decode::pglz_decompress(src, rawsize, check_complete) {
        Ok(out) if check_complete => assert_eq!(out.len(), rawsize),
        Ok(out) => {
            assert!(out.len() <= rawsize);
            // What a complete decode yields, a partial one must agree with.
            if let Ok(full) = walshadow_wal_decode::pglz_decompress(src, rawsize, true) {
                assert_eq!(full, out);
            }
        }
        Err(_) => {}
    }
}

/// The major a `heap_xact` input's first byte names: 15 to 18 as such
/// (how the seeds are cut), any other byte by its value modulo 4.
pub fn heap_xact_major(b: u8) -> PgMajor {
    PgMajor::from_number(u32::from(b)).unwrap_or(PgMajor::ALL[usize::from(b) % 4])
}

/// `[major][record bytes]`: the record is fixed up as for `decode_record`,
/// then read by every rmgr decoder (heap, xact, standby, prune), which must
/// not panic, must be deterministic, and may hand out only bytes of the
/// record. Returns how many of the heap, xact and standby decoders read it
/// without error (for the seed test; `decode_prune` answers `None`, not an
/// error, for other rmgrs' records, so it is not counted).
pub fn run_heap_xact(data: &[u8]) -> usize {
    let Some((&m, rest)) = data.split_first() else {
        return 0;
    };
    let major = heap_xact_major(m);
    let mut raw = rest.to_vec();
    fix_up_record(&mut raw);
    let mut blocks = Vec::new();
    let lsn = Lsn(0x1_0000_0028);
    let end = Lsn(lsn.0 + raw.len() as u64);
    let Ok(v) = decode_record(lsn, end, &raw, &mut blocks) else {
        return 0;
    };
    let inside = |s: &[u8]| {
        let (a, b) = (raw.as_ptr() as usize, s.as_ptr() as usize);
        assert!(
            s.is_empty() || (b >= a && b + s.len() <= a + raw.len()),
            "decoder handed out bytes outside the record"
        );
    };
    let tuple = |t: &TupleBytes<'_>| {
        inside(t.data);
        inside(t.user_data());
        if let Some(bits) = t.null_bitmap() {
            inside(bits);
        }
        assert!(t.hoff >= 23 && usize::from(t.hoff - 23) <= t.data.len());
    };
    let mut ok = 0;

    let heap = decode_heap(&v);
    assert_eq!(heap, decode_heap(&v), "decode_heap is not deterministic");
    ok += usize::from(heap.is_ok());
    if let Ok(Some(change)) = &heap {
        let old = |o: &Option<OldTuple<'_>>| {
            if let Some(o) = o {
                tuple(o.tuple());
            }
        };
        match change {
            HeapChange::Insert { tuple: t, .. } => t.iter().for_each(tuple),
            HeapChange::MultiInsert {
                tuples, offsets, ..
            } => {
                tuples.iter().for_each(tuple);
                assert!(tuples.is_empty() || tuples.len() == offsets.len());
            }
            HeapChange::Update { old: o, new, .. } => {
                old(o);
                new.iter().for_each(tuple);
            }
            HeapChange::Delete { old: o, .. } => old(o),
            HeapChange::Truncate { relids, .. } => {
                assert!(relids.len() * 4 <= v.main_data().len());
            }
            HeapChange::Confirm { .. } => {}
        }
    }

    let xact = decode_xact(&v, major);
    assert_eq!(
        xact,
        decode_xact(&v, major),
        "decode_xact is not deterministic"
    );
    ok += usize::from(xact.is_ok());
    if let Ok(Some(x)) = &xact {
        let main = v.main_data().len();
        match x {
            XactRecord::Commit(c) => {
                c.gid.iter().for_each(|g| inside(g));
                assert!(c.subxacts.len() * 4 + c.invals.len() * 16 <= main);
            }
            XactRecord::Abort(a) => a.gid.iter().for_each(|g| inside(g)),
            XactRecord::Prepare(p) => {
                inside(p.gid);
                assert!(p.invals.len() * 16 <= main);
            }
            XactRecord::Assignment { subxacts, .. } => assert!(subxacts.len() * 4 <= main),
            XactRecord::Invalidations(msgs) => assert!(msgs.len() * 16 <= main),
        }
    }

    let running = decode_running_xacts(&v);
    assert_eq!(running, decode_running_xacts(&v));
    ok += usize::from(running.is_ok());
    if let Ok(Some(r)) = &running {
        assert!((r.xids.len() + r.subxids.len()) * 4 <= v.main_data().len());
    }

    let prune = decode_prune(&v, major);
    assert_eq!(
        prune,
        decode_prune(&v, major),
        "decode_prune is not deterministic"
    );
    if let Ok(Some(p)) = &prune {
        let offsets = 2 * p.redirected.len() + p.dead.len() + p.unused.len();
        let data = v.block(0).map_or(0, |b| v.block_data(b).len());
        assert!(offsets * 2 <= data, "{offsets} offsets from {data} bytes");
        assert!(!p.image_only || offsets == 0);
    }
    ok
}

// ---------------------------------------------------------------------------
// heap_page: HeapPage::parse, TupleHeader::parse, ToastChunk::from_tuple and
// RowDecoder::decode on one page of a base backup.

/// Bytes before the page in a `heap_page` input.
pub const PAGE_INPUT_HEADER: usize = 5;

/// The relation the `heap_page` target decodes every tuple with: the test
/// kit's all-types table (`crates/testkit/src/all_types.rs`) as
/// PostgreSQL 15's catalog describes it after its `dropped_*` columns were
/// dropped, read by `ShadowCatalog`. `tests/capture.rs` writes it.
pub const ALL_TYPES_PG15_JSON: &str = include_str!("../data/all_types_pg15.json");

/// [`ALL_TYPES_PG15_JSON`] parsed.
pub fn all_types_desc() -> RelationDesc {
    serde_json::from_str(ALL_TYPES_PG15_JSON).expect("data/all_types_pg15.json is a RelationDesc")
}

/// The row decoder of [`all_types_desc`], built once per process.
pub fn all_types_decoder() -> &'static RowDecoder {
    static DECODER: OnceLock<RowDecoder> = OnceLock::new();
    DECODER.get_or_init(|| {
        RowDecoder::new(&all_types_desc()).expect("the all-types table has only supported types")
    })
}

/// A `heap_page` input (layout in the module docs).
#[derive(Debug, Clone)]
pub struct PageInput {
    /// The flags byte's bits 1..8: column `i` is wanted by `decode_only`
    /// when bit `i % 7` is set.
    pub wanted: u8,
    pub block: u32,
    /// Exactly [`BLCKSZ`] bytes, `pd_checksum` fixed up if asked.
    pub page: Vec<u8>,
}

impl PageInput {
    pub fn parse(data: &[u8]) -> Option<PageInput> {
        let (h, rest) = data.split_at_checked(PAGE_INPUT_HEADER)?;
        let block = u32::from_le_bytes(h.get(1..5)?.try_into().ok()?);
        let mut page = rest.get(..BLCKSZ).unwrap_or(rest).to_vec();
        page.resize(BLCKSZ, 0);
        // Only an initialised page (pd_upper != 0) has its checksum checked;
        // writing one into a new page would make it a damaged one.
        if h[0] & 1 != 0 && page[14..16] != [0, 0] {
            let sum = pg_checksum_page(&page, block);
            page[8..10].copy_from_slice(&sum.to_le_bytes());
        }
        Some(PageInput {
            wanted: h[0] >> 1,
            block,
            page,
        })
    }

    /// Encodes a `heap_page` input.
    pub fn encode(flags: u8, block: u32, page: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(PAGE_INPUT_HEADER + page.len());
        v.push(flags);
        v.extend_from_slice(&block.to_le_bytes());
        v.extend_from_slice(page);
        v
    }
}

/// TOAST chunks found on the page itself, whatever TOAST relation a
/// pointer names: a page the fuzzer shapes can hold a pointer and its
/// chunks, so reassembly and decompression of external values are reached.
#[derive(Debug, Default)]
struct PageToast(ToastChunks);

impl ToastSource for PageToast {
    fn fetch(&self, _toast_relid: Oid, value_id: Oid) -> Option<Vec<u8>> {
        self.0.fetch(0, value_id)
    }
}

/// What one `heap_page` run saw (for the seed test).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PageSummary {
    /// `HeapPage::parse` without checksum verification accepted the page.
    pub parsed: bool,
    /// ... and with it.
    pub verified: bool,
    pub new: bool,
    pub tuples: usize,
    /// Tuples `ToastChunk::from_tuple` read as a chunk.
    pub chunks: usize,
    /// Tuples the all-types decoder read without error.
    pub rows: usize,
}

/// Parses the page with and without checksum verification, checks every
/// tuple handed out against the page's bytes, then reads each tuple's
/// header, as a TOAST chunk, and as a row of the all-types table: nothing
/// panics, and every decode is deterministic.
pub fn run_heap_page(data: &[u8]) -> PageSummary {
    let Some(input) = PageInput::parse(data) else {
        return PageSummary::default();
    };
    let (page, block) = (input.page.as_slice(), input.block);
    let plain = HeapPage::parse(page, block, false);
    let checked = HeapPage::parse(page, block, true);
    assert_eq!(plain, HeapPage::parse(page, block, false));
    match &plain {
        // Verification adds the checksum test and nothing else.
        Ok(p) if p.is_new() || pg_checksum_page(page, block) == p.header().checksum => {
            assert_eq!(checked.as_ref(), Ok(p), "verification changed the parse");
        }
        Ok(_) => assert!(
            matches!(checked, Err(PageDamage::Checksum { .. })),
            "a wrong checksum passed: {checked:?}"
        ),
        Err(_) => assert!(checked.is_err(), "verified parse accepts a damaged page"),
    }
    let mut summary = PageSummary {
        parsed: plain.is_ok(),
        verified: checked.is_ok(),
        ..PageSummary::default()
    };
    let Ok(p) = plain else {
        return summary;
    };
    check_page(page, &p);
    summary.new = p.is_new();
    summary.tuples = p.tuples().len();

    let mut toast = PageToast::default();
    for t in p.tuples() {
        let chunk = ToastChunk::from_tuple(t.tuple_ref());
        assert_eq!(chunk, ToastChunk::from_tuple(t.tuple_ref()));
        if let Ok(c) = chunk {
            summary.chunks += 1;
            toast.0.add_chunk(0, c.chunk_id, c.chunk_seq, c.data);
        }
    }

    let decoder = all_types_decoder();
    let columns = decoder.column_names().count();
    let wanted: Vec<bool> = (0..columns)
        .map(|i| (input.wanted >> (i % 7)) & 1 != 0)
        .collect();
    for t in p.tuples() {
        let r = t.tuple_ref();
        let row = decoder.decode(r, &toast);
        // Value holds floats (NaN != NaN): compare the printed form.
        assert_eq!(
            format!("{row:?}"),
            format!("{:?}", decoder.decode(r, &toast)),
            "decode is not deterministic"
        );
        let some = decoder.decode_only(r, &toast, &wanted);
        let Ok(row) = row else {
            continue;
        };
        summary.rows += 1;
        assert_eq!(row.len(), columns);
        // What decodes whole decodes in part: wanted columns the same,
        // the others NULL.
        let some = some.expect("decode_only failed where decode succeeded");
        assert_eq!(some.len(), columns);
        for ((v, s), w) in row.iter().zip(&some).zip(&wanted) {
            let expect = if *w { v } else { &Value::Null };
            assert_eq!(format!("{expect:?}"), format!("{s:?}"));
            let _ = v.to_pg_text();
        }
    }
    summary
}

/// Every tuple `parse` hands out is the item its line pointer names,
/// inside the page's tuple space, with a header that fits it.
fn check_page(page: &[u8], p: &HeapPage<'_>) {
    if p.is_new() {
        assert!(page.iter().all(|b| *b == 0), "a new page with bytes");
        assert!(p.item_ids().is_empty() && p.tuples().is_empty());
        return;
    }
    let h = p.header();
    assert_eq!((h.page_size(), h.layout_version()), (BLCKSZ, 4));
    let count = p.item_ids().len();
    assert!(count <= MAX_HEAP_TUPLES_PER_PAGE);
    assert_eq!(usize::from(h.lower), SIZE_OF_PAGE_HEADER_DATA + 4 * count);
    assert!(h.lower <= h.upper && usize::from(h.special) == BLCKSZ);
    let mut normal = Vec::new();
    for (i, id) in p.item_ids().iter().enumerate() {
        match id.lp_flags {
            LpFlags::Normal => normal.push(i),
            LpFlags::Redirect => assert!((1..=count).contains(&usize::from(id.lp_off))),
            LpFlags::Unused | LpFlags::Dead => {}
        }
    }
    assert_eq!(
        normal.len(),
        p.tuples().len(),
        "a normal item without its tuple"
    );
    let base = page.as_ptr() as usize;
    for (t, i) in p.tuples().iter().zip(normal) {
        assert_eq!(
            usize::from(t.offset),
            i + 1,
            "offsets are 1-based, in order"
        );
        let id = p.item_ids()[i];
        let at = (t.data.as_ptr() as usize).wrapping_sub(base);
        assert!(
            at <= page.len() && t.data.len() <= page.len() - at,
            "a tuple outside the page"
        );
        assert_eq!(
            (at, t.data.len()),
            (usize::from(id.lp_off), usize::from(id.lp_len))
        );
        assert!(at >= usize::from(h.upper), "a tuple in the free space");
        assert!(t.data.len() >= SIZEOF_HEAP_TUPLE_HEADER);
        assert!((SIZEOF_HEAP_TUPLE_HEADER..=t.data.len()).contains(&usize::from(t.hoff)));
        let th = TupleHeader::parse(t.data).expect("a parsed tuple has a whole header");
        assert_eq!(
            (th.xmin, th.xmax, th.xvac, th.infomask, th.infomask2),
            (t.xmin, t.xmax, t.cid_or_xvac, t.infomask, t.infomask2)
        );
        let r = t.tuple_ref();
        assert_eq!(
            (r.infomask2, r.infomask, r.hoff, r.data),
            (
                t.infomask2,
                t.infomask,
                t.hoff,
                &t.data[SIZEOF_HEAP_TUPLE_HEADER..]
            )
        );
    }
}

// ---------------------------------------------------------------------------
// visibility_gate: XactLog, MultiXacts, Gate::decide, finish_walk,
// WalkedGate::resolve on SLRU bytes and tuple headers.

/// Bytes of one tuple header in a `visibility_gate` input.
pub const TUPLE_HEADER_BYTES: usize = 23;
/// SLRU records one input may add.
const MAX_GATE_RECORDS: usize = 8;
/// Pages a record may ask for: a segment's 32 and one too many.
const MAX_SEGMENT_PAGES: usize = 33;

/// Which store a `visibility_gate` record feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateRecord {
    /// `XactLog::add_segment`, `MultiXacts::add_offsets_segment` or
    /// `add_members_segment`.
    Segment {
        slru: Slru,
        segno: u32,
        bytes: Vec<u8>,
    },
    /// `Gate::add_backup_file`.
    BackupFile { path: String, bytes: Vec<u8> },
}

/// A `visibility_gate` input (layout in the module docs).
#[derive(Debug, Clone)]
pub struct GateInput<'a> {
    pub next_xid: Option<u32>,
    pub next_multi: Option<(u32, u32)>,
    /// Raw tuple headers, 23 bytes except maybe the last.
    pub headers: Vec<&'a [u8]>,
    pub records: Vec<GateRecord>,
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(n)?;
    *rest = tail;
    Some(head)
}

fn take_u16(rest: &mut &[u8]) -> Option<u16> {
    Some(u16::from_le_bytes(take(rest, 2)?.try_into().ok()?))
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(take(rest, 4)?.try_into().ok()?))
}

impl<'a> GateInput<'a> {
    pub fn parse(data: &'a [u8]) -> Option<GateInput<'a>> {
        let mut rest = data;
        let flags = take(&mut rest, 1)?[0];
        let (xid, multi, offset) = (
            take_u32(&mut rest)?,
            take_u32(&mut rest)?,
            take_u32(&mut rest)?,
        );
        let n = usize::from(take(&mut rest, 1)?[0]);
        let headers_len = (n * TUPLE_HEADER_BYTES).min(rest.len());
        let headers = take(&mut rest, headers_len)?
            .chunks(TUPLE_HEADER_BYTES)
            .collect();
        let mut records = Vec::new();
        while records.len() < MAX_GATE_RECORDS {
            let Some(record) = Self::record(&mut rest) else {
                break;
            };
            records.push(record);
        }
        Some(GateInput {
            next_xid: (flags & 1 != 0).then_some(xid),
            next_multi: (flags & 2 != 0).then_some((multi, offset)),
            headers,
            records,
        })
    }

    fn record(rest: &mut &[u8]) -> Option<GateRecord> {
        let tag = take(rest, 1)?[0];
        let pages = usize::from(tag >> 2).min(MAX_SEGMENT_PAGES);
        Some(match tag & 3 {
            kind @ 0..=2 => {
                let segno = take_u32(rest)?;
                let slru =
                    [Slru::Xact, Slru::MultiXactOffsets, Slru::MultiXactMembers][usize::from(kind)];
                let bytes = Self::segment_bytes(rest, pages)?;
                GateRecord::Segment { slru, segno, bytes }
            }
            _ => {
                let len = usize::from(take(rest, 1)?[0]);
                let path = String::from_utf8_lossy(take(rest, len)?).into_owned();
                let bytes = Self::segment_bytes(rest, pages)?;
                GateRecord::BackupFile { path, bytes }
            }
        })
    }

    /// `[len u16][len bytes]`, zero-padded to `pages` pages.
    fn segment_bytes(rest: &mut &[u8], pages: usize) -> Option<Vec<u8>> {
        let len = usize::from(take_u16(rest)?).min(rest.len());
        let mut bytes = take(rest, len)?.to_vec();
        if bytes.len() < pages * BLCKSZ {
            bytes.resize(pages * BLCKSZ, 0);
        }
        Some(bytes)
    }
}

/// Writes `visibility_gate` inputs (the seeds; layout in the module docs).
#[derive(Debug, Clone, Default)]
pub struct GateInputBuilder {
    flags: u8,
    bounds: [u32; 3],
    headers: Vec<[u8; TUPLE_HEADER_BYTES]>,
    records: Vec<u8>,
}

impl GateInputBuilder {
    pub fn new() -> GateInputBuilder {
        GateInputBuilder::default()
    }

    /// `XactLog::set_next_xid`.
    pub fn next_xid(mut self, xid: u32) -> Self {
        self.flags |= 1;
        self.bounds[0] = xid;
        self
    }

    /// `MultiXacts::set_next`.
    pub fn next_multi(mut self, multi: u32, offset: u32) -> Self {
        self.flags |= 2;
        self.bounds[1] = multi;
        self.bounds[2] = offset;
        self
    }

    /// A tuple header: `t_xmin`, `t_xmax`, `t_field3`, `t_infomask`, one
    /// attribute, `t_hoff` 24.
    pub fn header(self, xmin: u32, xmax: u32, xvac: u32, infomask: u16) -> Self {
        let mut raw = [0u8; TUPLE_HEADER_BYTES];
        raw[0..4].copy_from_slice(&xmin.to_le_bytes());
        raw[4..8].copy_from_slice(&xmax.to_le_bytes());
        raw[8..12].copy_from_slice(&xvac.to_le_bytes());
        raw[18..20].copy_from_slice(&1u16.to_le_bytes());
        raw[20..22].copy_from_slice(&infomask.to_le_bytes());
        raw[22] = 24;
        self.raw_header(&raw)
    }

    /// The first 23 bytes of an on-page tuple.
    pub fn raw_header(mut self, tuple: &[u8]) -> Self {
        assert!(self.headers.len() < 255, "at most 255 headers");
        let mut raw = [0u8; TUPLE_HEADER_BYTES];
        raw.copy_from_slice(&tuple[..TUPLE_HEADER_BYTES]);
        self.headers.push(raw);
        self
    }

    /// A segment of `slru`: `bytes` as the file holds them (whole pages);
    /// the input carries them without their trailing zeros.
    pub fn segment(mut self, slru: Slru, segno: u32, bytes: &[u8]) -> Self {
        let kind = match slru {
            Slru::Xact => 0,
            Slru::MultiXactOffsets => 1,
            Slru::MultiXactMembers => 2,
        };
        self.records.push(Self::tag(kind, bytes));
        self.records.extend_from_slice(&segno.to_le_bytes());
        self.push_bytes(bytes);
        self
    }

    /// A backup member: `Gate::add_backup_file(path, bytes)`.
    pub fn backup_file(mut self, path: &str, bytes: &[u8]) -> Self {
        self.records.push(Self::tag(3, bytes));
        self.records
            .push(u8::try_from(path.len()).expect("a short path"));
        self.records.extend_from_slice(path.as_bytes());
        self.push_bytes(bytes);
        self
    }

    fn tag(kind: u8, bytes: &[u8]) -> u8 {
        let pages = bytes.len().div_ceil(BLCKSZ);
        assert!(pages <= MAX_SEGMENT_PAGES);
        (pages as u8) << 2 | kind
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        let used = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        let len = u16::try_from(used).expect("at most 64 KiB of non-zero bytes");
        self.records.extend_from_slice(&len.to_le_bytes());
        self.records.extend_from_slice(&bytes[..used]);
    }

    pub fn build(&self) -> Vec<u8> {
        let mut v = vec![self.flags];
        for b in self.bounds {
            v.extend_from_slice(&b.to_le_bytes());
        }
        v.push(self.headers.len() as u8);
        for h in &self.headers {
            v.extend_from_slice(h);
        }
        v.extend_from_slice(&self.records);
        v
    }
}

/// What one `visibility_gate` run saw (for the seed test).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GateSummary {
    /// Segments the stores took.
    pub segments: usize,
    /// Headers `TupleHeader::parse` read.
    pub headers: usize,
    pub emit: usize,
    pub drop: usize,
    pub defer: usize,
    pub decide_errors: usize,
    pub resolved_emit: usize,
    pub resolved_drop: usize,
    pub resolve_errors: usize,
}

/// Builds the gate from the input's SLRU bytes and bounds, decides every
/// header during the walk and resolves every header after it. Checks the
/// rules of `crate::visibility` that hold whatever the SLRU bytes say:
///
/// - `HEAP_XMIN_INVALID` without `HEAP_XMIN_COMMITTED` (both are
///   `HEAP_XMIN_FROZEN`, committed) drops the tuple as aborted, in both
///   phases, and never errors: the hint decides before any lookup;
/// - `HEAP_XMIN_COMMITTED` with `HEAP_XMAX_INVALID` emits it, in both
///   phases;
/// - what the walk decided stands: an emitted tuple resolves to emit, a
///   dropped one never resolves to emit, an error during the walk is the
///   same error after it (the walk errs only on multixact bytes, which
///   the phase does not change);
/// - `decide` and `resolve` are deterministic, and the counters add up.
pub fn run_visibility_gate(data: &[u8]) -> GateSummary {
    let Some(input) = GateInput::parse(data) else {
        return GateSummary::default();
    };
    let mut s = GateSummary::default();
    let mut xact = XactLog::new();
    let mut multi = MultiXacts::new();
    let mut files = Vec::new();
    for r in input.records {
        let added = match r {
            GateRecord::Segment { slru, segno, bytes } => {
                let segno = u64::from(segno);
                match slru {
                    Slru::Xact => xact.add_segment(segno, bytes),
                    Slru::MultiXactOffsets => multi.add_offsets_segment(segno, bytes),
                    Slru::MultiXactMembers => multi.add_members_segment(segno, bytes),
                }
            }
            GateRecord::BackupFile { path, bytes } => {
                files.push((path, bytes));
                continue;
            }
        };
        s.segments += usize::from(added.is_ok());
    }
    if let Some(x) = input.next_xid {
        xact.set_next_xid(x);
    }
    if let Some((m, o)) = input.next_multi {
        multi.set_next(m, o);
    }
    let mut gate = Gate::new(xact, multi);
    for (path, bytes) in files {
        s.segments += usize::from(matches!(gate.add_backup_file(&path, bytes), Ok(true)));
    }

    let mut headers = Vec::new();
    for raw in &input.headers {
        match TupleHeader::parse(raw) {
            Ok(h) => headers.push(h),
            Err(e) => assert!(raw.len() < TUPLE_HEADER_BYTES, "{e}"),
        }
    }
    s.headers = headers.len();

    let mut verdicts = Vec::with_capacity(headers.len());
    for h in &headers {
        let v = gate.decide(h).map_err(|e| e.to_string());
        assert_eq!(v, gate.decide(h).map_err(|e| e.to_string()), "decide");
        if xmin_invalid(h) {
            assert_eq!(v, Ok(Verdict::Drop(DropReason::InserterAborted)), "{h:?}");
        }
        if hinted_live(h) {
            assert_eq!(v, Ok(Verdict::Emit), "{h:?}");
        }
        match &v {
            Ok(Verdict::Emit) => s.emit += 1,
            Ok(Verdict::Drop(_)) => s.drop += 1,
            Ok(Verdict::Defer) => s.defer += 1,
            Err(_) => s.decide_errors += 1,
        }
        verdicts.push(v);
    }
    let c = gate.counters();
    let decided = (s.emit + s.drop + s.defer) as u64;
    assert_eq!(c.walked, 2 * decided);
    assert_eq!(
        (c.emitted, c.gated, c.deferred),
        (2 * s.emit as u64, 2 * s.drop as u64, 2 * s.defer as u64)
    );

    let mut walked = gate.finish_walk();
    for (h, v) in headers.iter().zip(&verdicts) {
        let r = walked.resolve(h).map_err(|e| e.to_string());
        assert_eq!(r, walked.resolve(h).map_err(|e| e.to_string()), "resolve");
        if xmin_invalid(h) {
            assert_eq!(r, Ok(Resolved::Drop(DropReason::InserterAborted)), "{h:?}");
        }
        if hinted_live(h) {
            assert_eq!(r, Ok(Resolved::Emit), "{h:?}");
        }
        match v {
            Ok(Verdict::Emit) => assert_eq!(r, Ok(Resolved::Emit), "{h:?}"),
            Ok(Verdict::Drop(_)) => assert_ne!(r, Ok(Resolved::Emit), "{h:?}"),
            Ok(Verdict::Defer) => {}
            Err(e) => assert_eq!(r.as_ref().err(), Some(e), "{h:?}"),
        }
        match r {
            Ok(Resolved::Emit) => s.resolved_emit += 1,
            Ok(Resolved::Drop(_)) => s.resolved_drop += 1,
            Err(_) => s.resolve_errors += 1,
        }
    }
    let w = walked.counters();
    assert_eq!(
        (w.deferred_emitted, w.deferred_dropped),
        (2 * s.resolved_emit as u64, 2 * s.resolved_drop as u64)
    );
    assert_eq!(w.emitted, c.emitted + w.deferred_emitted);
    s
}

/// `HEAP_XMIN_INVALID` alone (with `HEAP_XMIN_COMMITTED` it is frozen).
fn xmin_invalid(h: &TupleHeader) -> bool {
    h.infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_INVALID
}

/// A committed inserter and no deleter, both hinted.
fn hinted_live(h: &TupleHeader) -> bool {
    h.infomask & HEAP_XMIN_COMMITTED != 0 && h.infomask & HEAP_XMAX_INVALID != 0
}
