//! Harness code shared by the fuzz targets (and usable from a plain test to
//! replay an artifact): the input layout of `wal_stream`, the fix-ups of
//! `decode_record`, and the properties each target checks.
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

use walshadow_types::{Lsn, PgMajor};
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
