//! The committed seeds are real WAL: the stream seeds decode to records and
//! the record seeds decode as they are. Fuzzing starts from valid input, so
//! a seed that silently stopped decoding would blunt every target.

use std::fs;
use std::path::Path;

use walshadow_fuzz::{
    Outcome, StreamInput, decode_whole, run_decode_record, run_heap_xact, run_pglz, run_wal_stream,
};
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
