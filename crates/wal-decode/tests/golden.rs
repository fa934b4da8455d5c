//! The decoder on WAL captured from real PostgreSQL 15 and 18 servers (see
//! `tests/data/README.md`): equal to pg_waldump's reading, whatever the
//! chunking of the input, with every full-page image restorable, and with
//! damaged bytes reported as errors naming the LSN, never a panic.

use std::io::Read;

use walshadow_testkit::{DumpRecord, assert_parity, parse_dump_output, parse_waldump_output};
use walshadow_types::Lsn;
use walshadow_wal_decode::{RecordSummary, WalDecodeError, WalErrorKind, WalStreamDecoder};

const SEG: u32 = 1 << 20;

struct Golden {
    /// Segments concatenated, starting at `first`.
    wal: Vec<u8>,
    first: Lsn,
    start: Lsn,
    end: Lsn,
    waldump: String,
}

fn unzstd(path: &str) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(f)
        .unwrap()
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn golden(major: &str) -> Golden {
    let dir = format!("{}/tests/data/{major}", env!("CARGO_MANIFEST_DIR"));
    let range = std::fs::read_to_string(format!("{dir}/range")).unwrap();
    let (start, end) = range.trim().split_once(' ').unwrap();
    let tar_bytes = unzstd(&format!("{dir}/wal.tar.zst"));
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut wal = Vec::new();
    let mut first = None;
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let segno = u64::from_str_radix(&name[16..24], 16).unwrap()
            + (u64::from_str_radix(&name[8..16], 16).unwrap() << 12);
        let expected = first.map_or(segno, |f: Lsn| {
            f.0 / u64::from(SEG) + (wal.len() as u64 / u64::from(SEG))
        });
        assert_eq!(segno, expected, "segments must be consecutive");
        first.get_or_insert(Lsn(segno * u64::from(SEG)));
        entry.read_to_end(&mut wal).unwrap();
    }
    Golden {
        wal,
        first: first.unwrap(),
        start: start.parse().unwrap(),
        end: end.parse().unwrap(),
        waldump: String::from_utf8(unzstd(&format!("{dir}/waldump.txt.zst"))).unwrap(),
    }
}

/// Decodes `g`'s WAL fed in chunks of the given sizes (cycled), returning
/// the records in `[start, end)` as JSON lines and the error that stopped
/// decoding, if any.
fn decode(g: &Golden, wal: &[u8], chunks: &[usize]) -> (Vec<String>, Option<WalDecodeError>) {
    let mut d = WalStreamDecoder::new(g.first, g.start, SEG).unwrap();
    let mut lines = Vec::new();
    let mut pos = 0;
    let mut sizes = chunks.iter().cycle();
    loop {
        loop {
            match d.poll_ref() {
                Ok(Some(rec)) => {
                    if rec.lsn >= g.end {
                        return (lines, None);
                    }
                    // The major the pages' magic says, as `wal dump` names kinds.
                    let summary = RecordSummary::from(&rec).with_kind(d.major());
                    lines.push(serde_json::to_string(&summary).unwrap());
                }
                Ok(None) => break,
                Err(e) => return (lines, Some(e)),
            }
        }
        if pos >= wal.len() {
            return (lines, None);
        }
        let n = (*sizes.next().unwrap()).min(wal.len() - pos);
        d.feed(&wal[pos..pos + n]);
        pos += n;
    }
}

fn parity(major: &str) {
    let g = golden(major);
    let (lines, err) = decode(&g, &g.wal, &[1 << 20]);
    assert!(err.is_none(), "{err:?}");
    let ours: Vec<DumpRecord> = parse_dump_output(&lines.join("\n")).unwrap();
    let theirs = parse_waldump_output(&g.waldump).unwrap();
    assert!(theirs.len() > 1000, "{} records", theirs.len());
    assert_parity(&ours, &theirs).unwrap();
    // Records spanning segments and an XLOG_SWITCH are in the range.
    assert!(ours.iter().any(|r| r.tot_len > 2 * SEG));
    assert!(
        ours.iter()
            .any(|r| r.rmgr == "XLOG" && r.info & 0xF0 == 0x40)
    );
}

#[test]
fn pg15_matches_pg_waldump() {
    parity("pg15");
}

#[test]
fn pg16_matches_pg_waldump() {
    parity("pg16");
}

#[test]
fn pg17_matches_pg_waldump() {
    parity("pg17");
}

#[test]
fn pg18_matches_pg_waldump() {
    parity("pg18");
}

fn chunking(major: &str) {
    let g = golden(major);
    let (whole, err) = decode(&g, &g.wal, &[g.wal.len()]);
    assert!(err.is_none());
    for chunks in [
        &[1usize][..],
        &[7, 8191, 8193],
        &[24, 40, 4096],
        &[65_537, 3],
    ] {
        // Byte-at-a-time over the whole capture is slow; 1-byte chunks run
        // over the first 256 KiB only.
        let wal = if chunks == [1] {
            &g.wal[..256 << 10]
        } else {
            &g.wal[..]
        };
        let (got, err) = decode(&g, wal, chunks);
        assert!(err.is_none(), "chunks {chunks:?}: {err:?}");
        assert_eq!(got[..], whole[..got.len()], "chunks {chunks:?}");
        if wal.len() == g.wal.len() {
            assert_eq!(got.len(), whole.len(), "chunks {chunks:?}");
        }
    }
}

#[test]
fn pg15_any_chunking_gives_the_same_records() {
    chunking("pg15");
}

#[test]
fn pg16_any_chunking_gives_the_same_records() {
    chunking("pg16");
}

#[test]
fn pg17_any_chunking_gives_the_same_records() {
    chunking("pg17");
}

#[test]
fn pg18_any_chunking_gives_the_same_records() {
    chunking("pg18");
}

fn images(major: &str) {
    let g = golden(major);
    let mut d = WalStreamDecoder::new(g.first, g.start, SEG).unwrap();
    d.feed(&g.wal);
    let mut restored = 0;
    while let Some(rec) = d.poll_ref().unwrap() {
        if rec.lsn >= g.end {
            break;
        }
        for b in rec.blocks {
            if b.has_image() {
                let page = rec.restore_page(b).unwrap();
                assert_eq!(page.len(), 8192);
                let lower = u16::from_le_bytes([page[12], page[13]]);
                let upper = u16::from_le_bytes([page[14], page[15]]);
                let special = u16::from_le_bytes([page[16], page[17]]);
                let version = u16::from_le_bytes([page[18], page[19]]);
                if page.iter().any(|&b| b != 0) {
                    assert_eq!(version, 8192 | 4, "image of {}", rec.lsn);
                    assert!(
                        lower <= upper && upper <= special && special <= 8192,
                        "image of {}",
                        rec.lsn
                    );
                }
                restored += 1;
            }
        }
    }
    assert!(restored > 50, "{restored} images");
}

#[test]
fn pg15_every_image_restores() {
    images("pg15");
}

#[test]
fn pg16_every_image_restores() {
    images("pg16");
}

#[test]
fn pg17_every_image_restores() {
    images("pg17");
}

#[test]
fn pg18_every_image_restores() {
    images("pg18");
}

/// Offset in the capture of the record at `lsn`.
fn offset(g: &Golden, lsn: Lsn) -> usize {
    (lsn.0 - g.first.0) as usize
}

fn first_records(g: &Golden, n: usize) -> Vec<(Lsn, u32)> {
    let mut d = WalStreamDecoder::new(g.first, g.start, SEG).unwrap();
    d.feed(&g.wal);
    let mut out = Vec::new();
    while let Some(rec) = d.poll_ref().unwrap() {
        // One that sits on one page, for simple damage.
        if rec.lsn.0 / 8192 == (rec.end.0 - 1) / 8192 && rec.lsn.0 % 8192 != 0 {
            out.push((rec.lsn, rec.header.xl_tot_len));
        }
        if out.len() == n {
            break;
        }
    }
    out
}

#[test]
fn damage_is_an_error_naming_the_lsn() {
    for major in ["pg15", "pg18"] {
        let g = golden(major);
        let recs = first_records(&g, 40);
        let (lsn, len) = recs[30];
        let at = offset(&g, lsn);

        // A flipped payload byte: CRC mismatch.
        let mut wal = g.wal.clone();
        wal[at + len as usize - 1] ^= 0x40;
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        let err = err.expect("damage must be reported");
        assert_eq!(err.lsn, lsn);
        assert!(matches!(err.kind, WalErrorKind::BadCrc { .. }), "{err}");
        assert!(err.to_string().contains(&lsn.to_string()));

        // A wrong xl_prev.
        let mut wal = g.wal.clone();
        wal[at + 8] ^= 0x08;
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        let err = err.unwrap();
        assert_eq!(err.lsn, lsn);
        assert!(
            matches!(err.kind, WalErrorKind::BadPrevLink { .. }),
            "{err}"
        );

        // An invalid rmgr id.
        let mut wal = g.wal.clone();
        wal[at + 17] = 77;
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        assert!(matches!(err.unwrap().kind, WalErrorKind::BadRmgr(77)));

        // A record length below the header size.
        let mut wal = g.wal.clone();
        wal[at..at + 4].copy_from_slice(&5u32.to_le_bytes());
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        let err = err.unwrap();
        assert!(matches!(err.kind, WalErrorKind::RecordTooShort(5)));
        assert!(!err.is_end_of_wal());

        // A page from elsewhere (a recycled segment): end of WAL, not damage.
        let page = (at / 8192 + 1) * 8192;
        let mut wal = g.wal.clone();
        wal[page + 8] ^= 0x01; // xlp_pageaddr
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        let err = err.unwrap();
        assert!(
            matches!(err.kind, WalErrorKind::UnexpectedPageAddr { .. }),
            "{err}"
        );
        assert!(err.is_end_of_wal());

        // Zeroed WAL from a page on: end of WAL.
        let mut wal = g.wal.clone();
        wal[page..].fill(0);
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        assert!(err.unwrap().is_end_of_wal());

        // A bad page magic.
        let mut wal = g.wal.clone();
        wal[page] ^= 0xFF;
        let (_, err) = decode(&g, &wal, &[1 << 20]);
        assert!(matches!(err.unwrap().kind, WalErrorKind::BadMagic(_)));

        // Truncated input just waits for more.
        let (lines, err) = decode(&g, &g.wal[..at + 10], &[1 << 20]);
        assert!(err.is_none());
        assert!(!lines.is_empty());
    }
}

#[test]
fn resumes_at_a_record_start_inside_a_page() {
    let g = golden("pg15");
    let recs = first_records(&g, 20);
    let (lsn, _) = recs[10];
    let mut d = WalStreamDecoder::new(lsn, lsn, SEG).unwrap();
    d.feed(&g.wal[offset(&g, lsn)..]);
    let rec = d.poll().unwrap().unwrap();
    assert_eq!(rec.lsn, lsn);
    assert_eq!(d.poll().unwrap().unwrap().lsn, recs[11].0);
    // Not 8-byte aligned: refused.
    assert!(WalStreamDecoder::new(Lsn(lsn.0 + 4), lsn, SEG).is_err());
}

#[test]
fn feed_at_refuses_a_gap() {
    let g = golden("pg15");
    let mut d = WalStreamDecoder::new(g.first, g.first, SEG).unwrap();
    d.feed_at(g.first, &g.wal[..8192]).unwrap();
    let err = d
        .feed_at(Lsn(g.first.0 + 16384), &g.wal[16384..24576])
        .unwrap_err();
    assert!(matches!(err.kind, WalErrorKind::NonContiguous { .. }));
}
