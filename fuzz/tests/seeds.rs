//! The committed seeds are real: the stream seeds decode to records, the
//! record seeds decode as they are, the heap pages parse and their tuples
//! decode, the gate decides a real cluster's tuples. Fuzzing starts from
//! valid input, so a seed that silently stopped decoding would blunt every
//! target.

use std::fs;
use std::path::Path;

use walshadow_fuzz::{
    GateInput, Outcome, PageInput, StreamInput, all_types_decoder, decode_whole, run_decode_record,
    run_heap_page, run_heap_xact, run_pglz, run_visibility_gate, run_wal_stream,
};
use walshadow_heap::heap_page::HeapPage;
use walshadow_heap::visibility::{HEAP_XMAX_IS_MULTI, TupleHeader};
use walshadow_rows::{ToastChunk, ToastChunks, ToastSource};
use walshadow_types::Lsn;
use walshadow_wal_decode::{decode_record, pglz_decompress};

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut v: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn stream_seeds_decode_records() {
    for (name, data) in seeds("wal_stream")
        .iter()
        .filter(|(n, _)| n.starts_with("pg"))
    {
        let input = StreamInput::parse(data).unwrap();
        let (_, out) = decode_whole(&input).unwrap();
        let records = out
            .iter()
            .filter(|o| matches!(o, Outcome::Record(..)))
            .count();
        let images = out
            .iter()
            .map(|o| match o {
                Outcome::Record(_, imgs) => imgs.iter().filter(|r| r.is_ok()).count(),
                Outcome::Error(_) => 0,
            })
            .sum::<usize>();
        // Seeds cut at the end of the capture stop at the end of written WAL.
        let err = out.iter().find_map(|o| match o {
            Outcome::Error(e) if !e.is_end_of_wal() => Some(e.to_string()),
            _ => None,
        });
        eprintln!("{name}: {records} records, {images} images restored, stop: {err:?}");
        assert!(
            records > 0 || name.contains("inside-big-record"),
            "{name}: no record"
        );
        if let Some(e) = err {
            panic!("{name}: {e}");
        }
        run_wal_stream(&input);
    }
}

#[test]
fn record_seeds_decode() {
    for (name, raw) in seeds("decode_record")
        .iter()
        .filter(|(n, _)| n.starts_with("pg"))
    {
        let mut blocks = Vec::new();
        if let Err(e) = decode_record(Lsn(0), Lsn(0), raw, &mut blocks) {
            panic!("{name}: {e}");
        }
        run_decode_record(raw);
    }
}

#[test]
fn pglz_seeds_decompress() {
    for (name, data) in seeds("pglz")
        .iter()
        .filter(|(n, _)| n.starts_with("pg") || n.starts_with("img"))
    {
        let rawsize = u32::from_le_bytes(data[..4].try_into().unwrap()) as usize;
        if let Err(e) = pglz_decompress(&data[5..], rawsize, true) {
            panic!("{name}: {e}");
        }
        run_pglz(data);
    }
}

#[test]
fn heap_xact_seeds_decode() {
    let seeds = seeds("heap_xact");
    assert!(seeds.len() > 100, "{} seeds", seeds.len());
    for (name, data) in seeds
        .iter()
        .filter(|(n, _)| n.starts_with("pg") || n.starts_with("golden"))
    {
        // Exactly one decoder (the record's rmgr's) reads a real record.
        let ok = run_heap_xact(data);
        assert_eq!(ok, 1, "{name}: {ok} decoders read it");
    }
}

/// TOAST chunks of one cluster's seeds, whatever relation a pointer names
/// (the seeds of the two clusters may share value ids).
struct SeedToast(ToastChunks);

impl ToastSource for SeedToast {
    fn fetch(&self, _toast_relid: u32, value_id: u32) -> Option<Vec<u8>> {
        self.0.fetch(0, value_id)
    }
}

#[test]
fn heap_page_seeds_parse_and_decode() {
    let seeds = seeds("heap_page");
    let decoder = all_types_decoder();
    for cluster in ["pg15-", "pg15-checksums-"] {
        let of = |kind: &str| {
            let prefix = format!("{cluster}{kind}-");
            seeds
                .iter()
                .filter(move |(n, _)| {
                    n.strip_prefix(&prefix)
                        .is_some_and(|b| b.parse::<u32>().is_ok())
                })
                .collect::<Vec<_>>()
        };
        let (heap, toast) = (of("all_types"), of("toast"));
        assert!(
            heap.len() >= 2 && toast.len() >= 2,
            "{cluster}: {} heap, {} TOAST",
            heap.len(),
            toast.len()
        );
        let mut chunks = ToastChunks::new();
        for (name, data) in &toast {
            let s = run_heap_page(data);
            eprintln!("{name}: {s:?}");
            // Real pages verify (checksums real, or fixed up) and hold
            // only chunks.
            assert!(s.verified && s.tuples > 0, "{name}");
            assert_eq!(s.chunks, s.tuples, "{name}");
            let input = PageInput::parse(data).unwrap();
            let page = HeapPage::parse(&input.page, input.block, true).unwrap();
            for t in page.tuples() {
                let c = ToastChunk::from_tuple(t.tuple_ref()).unwrap();
                chunks.add_chunk(0, c.chunk_id, c.chunk_seq, c.data);
            }
        }
        let chunks = SeedToast(chunks);
        let mut rows = 0;
        for (name, data) in &heap {
            let s = run_heap_page(data);
            eprintln!("{name}: {s:?}");
            assert!(s.verified && s.tuples > 0, "{name}");
            // Every version on the page, dead ones included, is a row of
            // the all-types table, its TOAST values in the TOAST seeds.
            let input = PageInput::parse(data).unwrap();
            let page = HeapPage::parse(&input.page, input.block, true).unwrap();
            for t in page.tuples() {
                let row = decoder.decode(t.tuple_ref(), &chunks);
                if let Err(e) = &row {
                    panic!("{name} offset {}: {e}", t.offset);
                }
                rows += 1;
            }
        }
        assert!(rows >= 8, "{cluster}: {rows} rows");
    }
    let new = run_heap_page(&seeds.iter().find(|(n, _)| n == "new-page").unwrap().1);
    assert!(new.parsed && new.verified && new.new);
}

#[test]
fn visibility_gate_seeds_decide() {
    let seeds = seeds("visibility_gate");
    assert!(seeds.len() >= 6, "{} seeds", seeds.len());
    for (name, data) in &seeds {
        let s = run_visibility_gate(data);
        eprintln!("{name}: {s:?}");
        assert!(
            s.headers > 0 && s.segments > 0 || name == "hand-hints",
            "{name}"
        );
        if name.starts_with("pg15") {
            // A real cluster's complete pg_xact and pg_multixact decide
            // every version of its table without error.
            assert_eq!(s.segments, 3, "{name}");
            assert_eq!((s.decide_errors, s.resolve_errors), (0, 0), "{name}");
            assert!(s.resolved_emit > 0 && s.resolved_drop > 0, "{name}");
            let input = GateInput::parse(data).unwrap();
            let multis = input
                .headers
                .iter()
                .filter(|h| TupleHeader::parse(h).unwrap().infomask & HEAP_XMAX_IS_MULTI != 0)
                .count();
            assert!(multis >= 2, "{name}: {multis} multixact xmaxes");
        }
    }
}
