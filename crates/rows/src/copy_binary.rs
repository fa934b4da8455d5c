//! Binary COPY of one relation → rows of [`Value`]s: the values the heap
//! decoder ([`RowDecoder`](crate::RowDecoder)) gives for the same rows, so a
//! `copy` initial load and the WAL stream share one emitter.
//!
//! ```text
//!  RelationDesc ──▶ CopyDecoder::new ── refuses exactly what RowDecoder::new refuses
//!                        │ select_list(): "id", "doc"::text, …   live columns, attnum order
//!  COPY (SELECT <select_list> FROM t …) TO STDOUT (FORMAT binary)
//!        │ CopyData payloads, split anywhere
//!        ▼
//!  feed ──▶ Vec<Value> per row (RowDecoder::column_names order) ──▶ emitter
//!  finish ── the trailer was read, nothing is left half-read
//! ```
//!
//! The stream (copyto.c writes it; copyfromparse.c `ReceiveCopyBinaryHeader`
//! and `CopyReadBinaryTupleAttribute` read it; big-endian throughout):
//!
//! ```text
//!  "PGCOPY\n\377\r\n\0"  int32 flags  int32 extension length  extension
//!  per row:  int16 field count  { int32 length (-1: NULL)  bytes }*
//!  trailer:  int16 -1
//! ```
//!
//! Flag bit 16 means OIDs follow each row (gone since PostgreSQL 12);
//! bits 17–31 are critical and refused, bits 0–15 ignored, as
//! copyfromparse.c does. Each field is its type's `*send` output; the
//! `send` module maps each to its [`Value`].
//!
//! Feeding is incremental: a field (or header word) wholly inside one
//! `feed` is decoded in place; only one cut by a feed boundary is gathered
//! in a buffer, so tiny feeds cost one copy, never a re-parse. Memory is
//! the current row's values plus at most one field's bytes, and only bytes
//! that arrived are buffered: a length the server could not have sent
//! (field or row over 1 GiB, its `MaxAllocSize`) is an error at once.
//!
//! The select list casts `xml` (and arrays of it) to `text`: `xml_send`
//! rewrites the value's XML declaration for the client encoding
//! (`xml_out_internal` in xml.c), while the cast, binary-compatible, sends
//! the stored text the heap decoder reads. Text arrives in the client
//! encoding; the session must use UTF8 (the replication client does).
//!
//! Errors name the table, the row (1-based), the column and what was
//! wrong; after one the decoder refuses further input.

// Bytes from the network: the crate's deny lints (no panicking reads) hold here.

mod send;

use crate::{Kind, RowDecoder, UnsupportedType, Value};
use walshadow_types::catalog::RelationDesc;

/// `BinarySignature` in copyto.c.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags, extension length.
const HEADER_LEN: usize = 11 + 4 + 4;
/// Flag bit 16: each row starts with an OID.
const FLAG_OIDS: u32 = 1 << 16;
/// Bits 16–31 are critical: a reader must refuse ones it does not know.
const CRITICAL_FLAGS: u32 = 0xFFFF_0000;
/// `MaxAllocSize`: no field, and no row (built in one buffer by
/// CopySendEndOfRow), is longer.
const MAX_ROW_LEN: usize = 0x3FFF_FFFF;

/// Binary COPY that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyDecodeError {
    #[error("{table}: not a binary COPY stream: {detail}")]
    BadHeader { table: String, detail: String },
    #[error(
        "{table}: row {row} has {fields} fields where the relation has {columns} live columns; the COPY must select the decoder's select_list"
    )]
    FieldCount {
        table: String,
        row: u64,
        fields: i16,
        columns: usize,
    },
    #[error("{table}: row {row}, column {column}: {detail}")]
    BadLength {
        table: String,
        row: u64,
        column: String,
        detail: String,
    },
    #[error("{table}: row {row}, column {column}: bad {type_name} value: {detail}")]
    BadValue {
        table: String,
        row: u64,
        column: String,
        type_name: &'static str,
        detail: String,
    },
    #[error("{table}: the COPY data ends {detail}")]
    Truncated { table: String, detail: String },
    #[error("{table}: data after the end-of-data trailer (at byte {offset})")]
    TrailingData { table: String, offset: u64 },
}

/// What the parser reads next.
#[derive(Debug, Clone)]
enum State {
    Header,
    /// Skipping the header extension: bytes left.
    Extension(u64),
    /// A row's field count, or the trailer.
    RowStart,
    /// The length word of the next field of the current row.
    FieldLen,
    /// The current field's bytes.
    FieldData(usize),
    /// The trailer was read.
    Done,
    Failed(CopyDecodeError),
}

/// What to do with the bytes gathered for a state.
#[derive(Clone, Copy)]
enum Step {
    Header,
    RowStart,
    FieldLen,
    FieldData,
}

/// Where the bytes of one item are.
enum Taken<'d> {
    /// Wholly inside the fed slice.
    Input(&'d [u8]),
    /// Gathered in the decoder's buffer.
    Buffered,
}

/// Gathers `need` bytes from `data`: in place when nothing is partial and
/// they are all there, else appended to `partial` until it holds `need`.
fn take<'d>(partial: &mut Vec<u8>, data: &mut &'d [u8], need: usize) -> Option<Taken<'d>> {
    if partial.is_empty()
        && let Some((head, rest)) = data.split_at_checked(need)
    {
        *data = rest;
        return Some(Taken::Input(head));
    }
    let n = need.saturating_sub(partial.len()).min(data.len());
    let (head, rest) = data.split_at_checked(n)?;
    partial.extend_from_slice(head);
    *data = rest;
    (partial.len() == need).then_some(Taken::Buffered)
}

fn be_i16(b: &[u8]) -> Option<i16> {
    Some(i16::from_be_bytes(b.try_into().ok()?))
}

fn be_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(b.try_into().ok()?))
}

/// Decodes `COPY (SELECT <live columns in attnum order>) TO STDOUT (FORMAT
/// binary)` output of one relation; see the module docs.
pub struct CopyDecoder {
    table: String,
    /// Live columns: name and kind.
    columns: Vec<(String, Kind)>,
    select_list: String,
    state: State,
    /// The bytes of an item cut by a feed boundary.
    partial: Vec<u8>,
    /// The current row's values so far.
    row: Vec<Value>,
    /// Bytes of the current row so far (field lengths and their words).
    row_len: usize,
    /// Complete rows decoded.
    rows: u64,
    /// Stream bytes consumed.
    offset: u64,
}

impl std::fmt::Debug for CopyDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyDecoder")
            .field("table", &self.table)
            .field("columns", &self.columns.len())
            .field("state", &self.state)
            .field("rows", &self.rows)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

/// A quoted identifier (`quote_ident` always quoting).
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl CopyDecoder {
    /// Resolves the relation's live columns as [`RowDecoder::new`] does,
    /// with the same refusals (a column of an unsupported type, naming
    /// table, column and type).
    pub fn new(desc: &RelationDesc) -> Result<CopyDecoder, UnsupportedType> {
        let rows = RowDecoder::new(desc)?;
        let columns: Vec<(String, Kind)> = rows
            .column_names()
            .zip(rows.column_kinds())
            .map(|(n, k)| (n.to_owned(), k.clone()))
            .collect();
        let select_list = columns
            .iter()
            .map(|(name, kind)| {
                let q = quote_ident(name);
                match kind {
                    Kind::Xml => format!("{q}::text"),
                    Kind::Array(ak) if matches!(ak.element, Kind::Xml) => format!("{q}::text[]"),
                    _ => q,
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        Ok(CopyDecoder {
            table: rows.table().to_owned(),
            columns,
            select_list,
            state: State::Header,
            partial: Vec::new(),
            row: Vec::new(),
            row_len: 0,
            rows: 0,
            offset: 0,
        })
    }

    /// The SELECT list to copy: the live (non-dropped) columns in attnum
    /// order, quoted, `xml` ones cast to `text` (see the module docs).
    pub fn select_list(&self) -> String {
        self.select_list.clone()
    }

    /// `schema.name` of the relation.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The live columns' names, in the order of each row's values.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|(n, _)| n.as_str())
    }

    /// Complete rows decoded so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Feeds the next bytes (CopyData payloads split rows anywhere);
    /// appends each completed row to `out`, one [`Value`] per live column.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<Vec<Value>>) -> Result<(), CopyDecodeError> {
        let mut data = data;
        let r = self.run(&mut data, out);
        if let Err(e) = &r {
            self.fail(e.clone());
        }
        r
    }

    /// The end of the stream: an error unless the trailer was read (a
    /// partial row, or a stream cut before its end).
    pub fn finish(&mut self) -> Result<(), CopyDecodeError> {
        let detail = match &self.state {
            State::Done => return Ok(()),
            State::Failed(e) => return Err(e.clone()),
            State::Header | State::Extension(_) => "inside its header".to_owned(),
            State::RowStart if self.partial.is_empty() => {
                format!("after {} rows, without the end-of-data trailer", self.rows)
            }
            State::RowStart | State::FieldLen | State::FieldData(_) => {
                format!("inside row {}", self.rows + 1)
            }
        };
        let e = CopyDecodeError::Truncated {
            table: self.table.clone(),
            detail,
        };
        self.fail(e.clone());
        Err(e)
    }

    fn fail(&mut self, e: CopyDecodeError) {
        self.state = State::Failed(e);
        self.partial = Vec::new();
        self.row = Vec::new();
    }

    fn run(&mut self, data: &mut &[u8], out: &mut Vec<Vec<Value>>) -> Result<(), CopyDecodeError> {
        loop {
            let (step, need) = match &self.state {
                State::Header => (Step::Header, HEADER_LEN),
                State::Extension(left) => {
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                    *data = data.get(n..).unwrap_or_default();
                    self.offset += n as u64;
                    let left = left - n as u64;
                    if left > 0 {
                        self.state = State::Extension(left);
                        return Ok(());
                    }
                    self.state = State::RowStart;
                    continue;
                }
                State::RowStart => (Step::RowStart, 2),
                State::FieldLen => (Step::FieldLen, 4),
                State::FieldData(len) => (Step::FieldData, *len),
                State::Done if data.is_empty() => return Ok(()),
                State::Done => {
                    return Err(CopyDecodeError::TrailingData {
                        table: self.table.clone(),
                        offset: self.offset,
                    });
                }
                State::Failed(e) => return Err(e.clone()),
            };
            let Some(taken) = take(&mut self.partial, data, need) else {
                return Ok(());
            };
            let bytes: &[u8] = match taken {
                Taken::Input(b) => b,
                Taken::Buffered => &self.partial,
            };
            self.offset += need as u64;
            let column = self.row.len();
            let next = match step {
                Step::Header => self.header(bytes)?,
                Step::RowStart => {
                    let count = be_i16(bytes).unwrap_or_default();
                    if count == -1 {
                        State::Done
                    } else if usize::try_from(count).ok() != Some(self.columns.len()) {
                        return Err(CopyDecodeError::FieldCount {
                            table: self.table.clone(),
                            row: self.rows + 1,
                            fields: count,
                            columns: self.columns.len(),
                        });
                    } else if self.columns.is_empty() {
                        out.push(Vec::new());
                        self.rows += 1;
                        State::RowStart
                    } else {
                        self.row_len = 2;
                        State::FieldLen
                    }
                }
                Step::FieldLen => {
                    let len = be_i32(bytes).unwrap_or_default();
                    self.row_len += 4;
                    if len == -1 {
                        self.row.push(Value::Null);
                        self.field_done(out)
                    } else {
                        let fits = usize::try_from(len).ok().filter(|l| {
                            self.row_len
                                .checked_add(*l)
                                .is_some_and(|total| total <= MAX_ROW_LEN)
                        });
                        let Some(len) = fits else {
                            return Err(self.bad_length(column, len));
                        };
                        self.row_len += len;
                        State::FieldData(len)
                    }
                }
                Step::FieldData => {
                    let Some((name, kind)) = self.columns.get(column) else {
                        return Err(self.bad_length(column, need as i32));
                    };
                    let v = send::decode(kind, bytes).map_err(|e| CopyDecodeError::BadValue {
                        table: self.table.clone(),
                        row: self.rows + 1,
                        column: name.clone(),
                        type_name: e.type_name,
                        detail: e.detail,
                    })?;
                    self.row.push(v);
                    self.field_done(out)
                }
            };
            self.state = next;
            self.partial.clear();
        }
    }

    /// After a field: the next one, or the row is complete.
    fn field_done(&mut self, out: &mut Vec<Vec<Value>>) -> State {
        if self.row.len() < self.columns.len() {
            return State::FieldLen;
        }
        out.push(std::mem::replace(
            &mut self.row,
            Vec::with_capacity(self.columns.len()),
        ));
        self.rows += 1;
        State::RowStart
    }

    fn header(&self, b: &[u8]) -> Result<State, CopyDecodeError> {
        let bad = |detail: String| CopyDecodeError::BadHeader {
            table: self.table.clone(),
            detail,
        };
        let (sig, rest) = b
            .split_at_checked(SIGNATURE.len())
            .ok_or_else(|| bad("short header".into()))?;
        if sig != SIGNATURE {
            return Err(bad(format!("signature {sig:02x?}")));
        }
        let (flags, ext) = rest
            .split_at_checked(4)
            .ok_or_else(|| bad("short header".into()))?;
        let flags = be_i32(flags).unwrap_or_default() as u32;
        if flags & FLAG_OIDS != 0 {
            return Err(bad("rows carry OIDs (WITH OIDS)".into()));
        }
        if flags & CRITICAL_FLAGS != 0 {
            return Err(bad(format!("unknown critical flags {flags:#010x}")));
        }
        let ext = be_i32(ext).unwrap_or_default();
        match u64::try_from(ext) {
            Ok(0) => Ok(State::RowStart),
            Ok(n) => Ok(State::Extension(n)),
            Err(_) => Err(bad(format!("header extension length {ext}"))),
        }
    }

    fn bad_length(&self, column: usize, len: i32) -> CopyDecodeError {
        CopyDecodeError::BadLength {
            table: self.table.clone(),
            row: self.rows + 1,
            column: self
                .columns
                .get(column)
                .map_or_else(|| format!("#{}", column + 1), |(n, _)| n.clone()),
            detail: if len < -1 {
                format!("field length {len}")
            } else {
                format!(
                    "field length {len} makes the row longer than the server can send ({MAX_ROW_LEN} bytes)"
                )
            },
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use walshadow_types::catalog::fixtures::{attribute, relation, type_desc};
    use walshadow_types::catalog::{AttributeDesc, TypeDesc};

    /// Column `attnum`: `len` bytes (-1 varlena), by value up to 8.
    fn attr(attnum: i16, name: &str, type_oid: u32, len: i16, align: &str) -> AttributeDesc {
        AttributeDesc {
            len,
            by_value: len > 0 && len <= 8,
            align: align.into(),
            storage: if len == -1 { "x" } else { "p" }.into(),
            ..attribute(attnum, name, type_oid)
        }
    }

    fn array_type(oid: u32, element: u32) -> TypeDesc {
        TypeDesc {
            schema: "pg_catalog".into(),
            align: "d".into(),
            element: Some(element),
            ..type_desc(oid, &format!("_{element}"), "b", "A")
        }
    }

    /// The kind walshadow-rows resolves for an array of `element_oid`.
    pub(crate) fn array_kind(element_oid: u32) -> Kind {
        let desc = relation(
            "t",
            vec![attr(1, "a", 900_000, -1, "d")],
            &[],
            vec![array_type(900_000, element_oid)],
        );
        let d = RowDecoder::new(&desc).unwrap();
        d.column_kinds().next().unwrap().clone()
    }

    /// (id int4, "we""ird" text, dropped, a int4[], x xml)
    fn sample() -> CopyDecoder {
        let mut gone = attr(3, "........pg.dropped.3........", 0, 4, "i");
        gone.dropped = true;
        let desc = relation(
            "t",
            vec![
                attr(1, "id", 23, 4, "i"),
                attr(2, "we\"ird", 25, -1, "i"),
                gone,
                attr(4, "a", 1007, -1, "i"),
                attr(5, "x", 142, -1, "i"),
            ],
            &[],
            vec![array_type(1007, 23)],
        );
        CopyDecoder::new(&desc).unwrap()
    }

    fn header() -> Vec<u8> {
        let mut v = SIGNATURE.to_vec();
        v.extend_from_slice(&0i32.to_be_bytes());
        v.extend_from_slice(&0i32.to_be_bytes());
        v
    }

    fn field(v: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                v.extend_from_slice(&(b.len() as i32).to_be_bytes());
                v.extend_from_slice(b);
            }
            None => v.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    /// Two rows and the trailer.
    fn stream() -> Vec<u8> {
        let mut v = header();
        let mut arr = Vec::new();
        for w in [1i32, 0, 23, 2, 1, 4, 7, -1] {
            arr.extend_from_slice(&w.to_be_bytes());
        }
        v.extend_from_slice(&4i16.to_be_bytes());
        field(&mut v, Some(&1i32.to_be_bytes()));
        field(&mut v, Some("hé".as_bytes()));
        field(&mut v, Some(&arr));
        field(&mut v, Some(b"<a/>"));
        v.extend_from_slice(&4i16.to_be_bytes());
        field(&mut v, Some(&2i32.to_be_bytes()));
        field(&mut v, Some(b""));
        field(&mut v, None);
        field(&mut v, None);
        v.extend_from_slice(&(-1i16).to_be_bytes());
        v
    }

    fn texts(rows: &[Vec<Value>]) -> Vec<Vec<Option<String>>> {
        rows.iter()
            .map(|r| r.iter().map(Value::to_pg_text).collect())
            .collect()
    }

    #[test]
    fn select_list_quotes_and_casts() {
        let d = sample();
        assert_eq!(d.select_list(), r#""id", "we""ird", "a", "x"::text"#);
        assert_eq!(
            d.column_names().collect::<Vec<_>>(),
            ["id", "we\"ird", "a", "x"]
        );
    }

    #[test]
    fn every_split_decodes_the_same() {
        let s = stream();
        let want = vec![
            vec![
                Some("1".to_owned()),
                Some("hé".to_owned()),
                Some("{7,NULL}".to_owned()),
                Some("<a/>".to_owned()),
            ],
            vec![Some("2".to_owned()), Some(String::new()), None, None],
        ];
        for size in 1..=s.len() {
            let mut d = sample();
            let mut out = Vec::new();
            for chunk in s.chunks(size) {
                d.feed(chunk, &mut out).unwrap();
            }
            d.finish().unwrap();
            assert_eq!(texts(&out), want, "chunks of {size}");
            assert_eq!(d.rows(), 2);
        }
        // Two cuts anywhere.
        for i in 0..=s.len() {
            for j in i..=s.len() {
                let mut d = sample();
                let mut out = Vec::new();
                d.feed(&s[..i], &mut out).unwrap();
                d.feed(&s[i..j], &mut out).unwrap();
                d.feed(&s[j..], &mut out).unwrap();
                d.finish().unwrap();
                assert_eq!(texts(&out), want);
            }
        }
    }

    #[test]
    fn truncations_and_trailing_bytes_error() {
        let s = stream();
        for n in 0..s.len() {
            let mut d = sample();
            let mut out = Vec::new();
            let fed = d.feed(&s[..n], &mut out);
            assert!(
                fed.is_err() || d.finish().is_err(),
                "a stream cut at {n} must not finish"
            );
        }
        let mut d = sample();
        let mut out = Vec::new();
        d.feed(&s, &mut out).unwrap();
        let e = d.feed(&[0], &mut out).unwrap_err();
        assert!(
            matches!(e, CopyDecodeError::TrailingData { offset, .. } if offset == s.len() as u64)
        );
        // After an error everything errors.
        assert_eq!(d.feed(&[], &mut out), Err(e.clone()));
        assert_eq!(d.finish(), Err(e));
    }

    #[test]
    fn header_checks() {
        let mut out = Vec::new();
        let mut bad = stream();
        bad[0] = b'X';
        assert!(matches!(
            sample().feed(&bad, &mut out),
            Err(CopyDecodeError::BadHeader { .. })
        ));
        let mut oids = stream();
        oids[12] = 1; // flags bit 16
        let e = sample().feed(&oids, &mut out).unwrap_err();
        assert!(e.to_string().contains("OIDs"), "{e}");
        let mut critical = stream();
        critical[11] = 0x80;
        assert!(sample().feed(&critical, &mut out).is_err());
        // Non-critical flags are ignored; an extension is skipped.
        let mut ext = stream();
        ext[14] = 1;
        ext[18] = 3;
        ext.splice(19..19, [9, 9, 9]);
        let mut d = sample();
        d.feed(&ext, &mut out).unwrap();
        d.finish().unwrap();
        assert_eq!(out.len(), 2);
        let mut negative = stream();
        negative[15] = 0xff;
        assert!(sample().feed(&negative, &mut out).is_err());
    }

    #[test]
    fn framing_errors_name_row_and_column() {
        let mut out = Vec::new();
        // Three fields where four are expected.
        let mut s = header();
        s.extend_from_slice(&3i16.to_be_bytes());
        let e = sample().feed(&s, &mut out).unwrap_err();
        assert!(
            matches!(
                e,
                CopyDecodeError::FieldCount {
                    row: 1,
                    fields: 3,
                    columns: 4,
                    ..
                }
            ),
            "{e}"
        );
        // A hostile length is refused before anything is buffered.
        let mut s = header();
        s.extend_from_slice(&4i16.to_be_bytes());
        s.extend_from_slice(&i32::MAX.to_be_bytes());
        let e = sample().feed(&s, &mut out).unwrap_err();
        assert!(
            matches!(&e, CopyDecodeError::BadLength { row: 1, column, .. } if column == "id"),
            "{e}"
        );
        let mut s = header();
        s.extend_from_slice(&4i16.to_be_bytes());
        s.extend_from_slice(&(-2i32).to_be_bytes());
        assert!(sample().feed(&s, &mut out).is_err());
        // A value of the wrong size names its column and type.
        let mut s = header();
        s.extend_from_slice(&4i16.to_be_bytes());
        field(&mut s, Some(&[0, 1]));
        let e = sample().feed(&s, &mut out).unwrap_err();
        assert!(
            matches!(&e, CopyDecodeError::BadValue { row: 1, column, type_name: "integer", .. } if column == "id"),
            "{e}"
        );
        assert!(e.to_string().contains("public.t"), "{e}");
    }

    #[test]
    fn random_mutations_never_panic() {
        let s = stream();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut m = s.clone();
            for _ in 0..=(next() % 4) {
                let i = (next() as usize) % m.len();
                m[i] = next() as u8;
            }
            let mut d = sample();
            let mut out = Vec::new();
            let step = 1 + (next() as usize) % 9;
            for chunk in m.chunks(step) {
                if d.feed(chunk, &mut out).is_err() {
                    break;
                }
            }
            let _ = d.finish();
        }
    }

    #[test]
    fn a_relation_without_live_columns() {
        let mut gone = attr(1, "gone", 23, 4, "i");
        gone.dropped = true;
        let mut d = CopyDecoder::new(&relation("t", vec![gone], &[], vec![])).unwrap();
        assert_eq!(d.select_list(), "");
        let mut s = header();
        s.extend_from_slice(&0i16.to_be_bytes());
        s.extend_from_slice(&0i16.to_be_bytes());
        s.extend_from_slice(&(-1i16).to_be_bytes());
        let mut out = Vec::new();
        d.feed(&s, &mut out).unwrap();
        d.finish().unwrap();
        assert_eq!(out, vec![Vec::<Value>::new(), Vec::new()]);
    }
}
