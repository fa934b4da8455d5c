//! Every mapped type through RowBinary into the ClickHouse engine and back:
//! the table is created from a relation descriptor with `create_table_sql`,
//! rows are encoded with `RowBinaryEncoder` and inserted with the client,
//! and ClickHouse's own rendering of each stored value must be the expected
//! one. A wrong byte order, width or epoch shows up as a different value or
//! a parse error.

mod common;

use bytes::Bytes;
use common::*;
use walshadow_emitter::{
    DestTable, InsertSettings, MetaColumns, RowBinaryEncoder, RowMeta, TableSettings,
    create_database_sql,
};
use walshadow_rows::{ArrayValue, InetValue, Numeric, Value};
use walshadow_testkit::ClickHouseEngine;
use walshadow_types::Lsn;
use walshadow_types::catalog::RelationDesc;

// Built-in type OIDs (pg_type.dat).
const BOOL: u32 = 16;
const BYTEA: u32 = 17;
const CHAR: u32 = 18;
const NAME: u32 = 19;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const OID: u32 = 26;
const JSON: u32 = 114;
const XML: u32 = 142;
const CIDR: u32 = 650;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const MACADDR8: u32 = 774;
const MONEY: u32 = 790;
const MACADDR: u32 = 829;
const INET: u32 = 869;
const BPCHAR: u32 = 1042;
const VARCHAR: u32 = 1043;
const DATE: u32 = 1082;
const TIME: u32 = 1083;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const INTERVAL: u32 = 1186;
const TIMETZ: u32 = 1266;
const BIT: u32 = 1560;
const VARBIT: u32 = 1562;
const NUMERIC: u32 = 1700;
const UUID: u32 = 2950;
const JSONB: u32 = 3802;
const INT4_ARRAY: u32 = 1007;
const TEXT_ARRAY: u32 = 1009;
const MOOD: u32 = 70_000;
const MOOD_ARRAY: u32 = 70_001;
const POSNUM: u32 = 70_002;

/// One column: name, type OID, typmod, NOT NULL, ndims, then per row the
/// value and what `toString(col)` must show (`None`: NULL).
struct Col {
    name: &'static str,
    type_oid: u32,
    typmod: i32,
    not_null: bool,
    ndims: i16,
    rows: [(Value, Option<&'static str>); 3],
}

fn col(
    name: &'static str,
    type_oid: u32,
    typmod: i32,
    rows: [(Value, Option<&'static str>); 3],
) -> Col {
    Col {
        name,
        type_oid,
        typmod,
        not_null: false,
        ndims: 0,
        rows,
    }
}

fn text(s: &str) -> Value {
    Value::Text(s.into())
}

fn int_array(dims: &[i32], elements: Vec<Value>) -> Value {
    Value::Array(ArrayValue {
        element_type: INT4,
        dims: dims.iter().map(|&l| (l, 1)).collect(),
        elements,
        delimiter: ',',
    })
}

fn text_array(dims: &[i32], elements: Vec<Value>) -> Value {
    Value::Array(ArrayValue {
        element_type: TEXT,
        dims: dims.iter().map(|&l| (l, 1)).collect(),
        elements,
        delimiter: ',',
    })
}

fn columns() -> Vec<Col> {
    use Value as V;
    const N: Option<&str> = None;
    let mut cols = vec![
        col(
            "b",
            BOOL,
            -1,
            [
                (V::Bool(true), Some("true")),
                (V::Null, N),
                (V::Bool(false), Some("false")),
            ],
        ),
        col(
            "i2",
            INT2,
            -1,
            [
                (V::Int16(-2), Some("-2")),
                (V::Null, N),
                (V::Int16(i16::MIN), Some("-32768")),
            ],
        ),
        col(
            "i4",
            INT4,
            -1,
            [
                (V::Int32(123_456), Some("123456")),
                (V::Null, N),
                (V::Int32(i32::MAX), Some("2147483647")),
            ],
        ),
        col(
            "i8",
            INT8,
            -1,
            [
                (V::Int64(-9_000_000_000), Some("-9000000000")),
                (V::Null, N),
                (V::Int64(i64::MIN), Some("-9223372036854775808")),
            ],
        ),
        col(
            "o",
            OID,
            -1,
            [
                (V::Oid(16384), Some("16384")),
                (V::Null, N),
                (V::Oid(u32::MAX), Some("4294967295")),
            ],
        ),
        col(
            "f4",
            FLOAT4,
            -1,
            [
                (V::Float32(1.5), Some("1.5")),
                (V::Null, N),
                (V::Float32(f32::NEG_INFINITY), Some("-inf")),
            ],
        ),
        col(
            "f8",
            FLOAT8,
            -1,
            [
                (V::Float64(-0.125), Some("-0.125")),
                (V::Null, N),
                (V::Float64(f64::NAN), Some("nan")),
            ],
        ),
        col(
            "n5",
            NUMERIC,
            numeric_typmod(5, 0),
            [
                (numeric("-99999"), Some("-99999")),
                (V::Null, N),
                (numeric("0"), Some("0")),
            ],
        ),
        col(
            "n10",
            NUMERIC,
            numeric_typmod(10, 2),
            [
                (numeric("12345.67"), Some("12345.67")),
                (V::Null, N),
                (numeric("-0.01"), Some("-0.01")),
            ],
        ),
        col(
            "n30",
            NUMERIC,
            numeric_typmod(30, 10),
            [
                (
                    numeric("12345678901234567890.0123456789"),
                    Some("12345678901234567890.0123456789"),
                ),
                (V::Null, N),
                (numeric("-0.0000000001"), Some("-0.0000000001")),
            ],
        ),
        col(
            "n76",
            NUMERIC,
            numeric_typmod(76, 20),
            [
                (
                    numeric(
                        "-12345678901234567890123456789012345678901234567890123456.12345678901234567891",
                    ),
                    Some(
                        "-12345678901234567890123456789012345678901234567890123456.12345678901234567891",
                    ),
                ),
                (V::Null, N),
                (numeric("1"), Some("1")),
            ],
        ),
        col(
            "nfree",
            NUMERIC,
            -1,
            [
                (
                    numeric("3.14159265358979323846264338327950288419716939937510"),
                    Some("3.14159265358979323846264338327950288419716939937510"),
                ),
                (V::Null, N),
                (V::Numeric(Numeric::NaN), Some("NaN")),
            ],
        ),
        col(
            "m",
            MONEY,
            -1,
            [
                (V::Money(123_456), Some("1234.56")),
                (V::Null, N),
                (V::Money(-5), Some("-0.05")),
            ],
        ),
        col(
            "c",
            CHAR,
            -1,
            [(text("x"), Some("x")), (V::Null, N), (text(""), Some(""))],
        ),
        col(
            "bp",
            BPCHAR,
            9,
            [
                (text("ab   "), Some("ab   ")),
                (V::Null, N),
                (text("zzzzz"), Some("zzzzz")),
            ],
        ),
        col(
            "vc",
            VARCHAR,
            14,
            [
                (text("héllo"), Some("héllo")),
                (V::Null, N),
                (text("a\tb"), Some("a\\tb")),
            ],
        ),
        col(
            "t",
            TEXT,
            -1,
            [
                (text("line1\nline2"), Some("line1\\nline2")),
                (V::Null, N),
                (text("日本語"), Some("日本語")),
            ],
        ),
        col(
            "nm",
            NAME,
            -1,
            [
                (text("pg_class"), Some("pg_class")),
                (V::Null, N),
                (text("x"), Some("x")),
            ],
        ),
        col(
            "d",
            DATE,
            -1,
            [
                (V::Date(pg_date(2024, 2, 29)), Some("2024-02-29")),
                (V::Null, N),
                (V::Date(pg_date(1900, 1, 1)), Some("1900-01-01")),
            ],
        ),
        col(
            "tm",
            TIME,
            -1,
            [
                (V::Time(45_296_789_012), Some("12:34:56.789012")),
                (V::Null, N),
                (V::Time(86_400_000_000), Some("24:00:00.000000")),
            ],
        ),
        col(
            "ttz",
            TIMETZ,
            -1,
            [
                (
                    V::TimeTz {
                        micros: 45_296_500_000,
                        zone_secs_west: -19_800,
                    },
                    Some("12:34:56.5+05:30"),
                ),
                (V::Null, N),
                (
                    V::TimeTz {
                        micros: 0,
                        zone_secs_west: 3600,
                    },
                    Some("00:00:00-01"),
                ),
            ],
        ),
        col(
            "ts",
            TIMESTAMP,
            -1,
            [
                (
                    V::Timestamp(pg_ts(2024, 2, 29, 12, 34, 56, 123_456)),
                    Some("2024-02-29 12:34:56.123456"),
                ),
                (V::Null, N),
                (
                    V::Timestamp(pg_ts(2299, 12, 31, 23, 59, 59, 999_999)),
                    Some("2299-12-31 23:59:59.999999"),
                ),
            ],
        ),
        col(
            "tstz",
            TIMESTAMPTZ,
            -1,
            [
                (
                    V::TimestampTz(pg_ts(1999, 12, 31, 23, 0, 0, 1)),
                    Some("1999-12-31 23:00:00.000001"),
                ),
                (V::Null, N),
                (
                    V::TimestampTz(pg_ts(1900, 1, 1, 0, 0, 0, 0)),
                    Some("1900-01-01 00:00:00.000000"),
                ),
            ],
        ),
        col(
            "iv",
            INTERVAL,
            -1,
            [
                (
                    V::Interval {
                        months: 14,
                        days: 3,
                        micros: 14_706_789_000,
                    },
                    Some("1 year 2 mons 3 days 04:05:06.789"),
                ),
                (V::Null, N),
                (
                    V::Interval {
                        months: 0,
                        days: 0,
                        micros: 0,
                    },
                    Some("00:00:00"),
                ),
            ],
        ),
        col(
            "u",
            UUID,
            -1,
            [
                (
                    uuid("00112233-4455-6677-8899-aabbccddeeff"),
                    Some("00112233-4455-6677-8899-aabbccddeeff"),
                ),
                (V::Null, N),
                (
                    uuid("ffffffff-0000-0000-0000-000000000001"),
                    Some("ffffffff-0000-0000-0000-000000000001"),
                ),
            ],
        ),
        col(
            "j",
            JSON,
            -1,
            [
                (V::Json("{\"a\": [1, 2]}".into()), Some("{\"a\": [1, 2]}")),
                (V::Null, N),
                (V::Json("null".into()), Some("null")),
            ],
        ),
        col(
            "jb",
            JSONB,
            -1,
            [
                (V::Jsonb("{\"a\": 1}".into()), Some("{\"a\": 1}")),
                (V::Null, N),
                (V::Jsonb("[]".into()), Some("[]")),
            ],
        ),
        col(
            "ip",
            INET,
            -1,
            [
                (
                    V::Inet(InetValue {
                        addr: vec![192, 168, 0, 1],
                        bits: 24,
                        is_cidr: false,
                    }),
                    Some("192.168.0.1/24"),
                ),
                (V::Null, N),
                (
                    V::Inet(InetValue {
                        addr: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                        bits: 128,
                        is_cidr: false,
                    }),
                    Some("::1"),
                ),
            ],
        ),
        col(
            "cidr",
            CIDR,
            -1,
            [
                (
                    V::Inet(InetValue {
                        addr: vec![10, 0, 0, 0],
                        bits: 8,
                        is_cidr: true,
                    }),
                    Some("10.0.0.0/8"),
                ),
                (V::Null, N),
                (
                    V::Inet(InetValue {
                        addr: vec![10, 1, 2, 3],
                        bits: 32,
                        is_cidr: true,
                    }),
                    Some("10.1.2.3/32"),
                ),
            ],
        ),
        col(
            "mac",
            MACADDR,
            -1,
            [
                (V::MacAddr([8, 0, 0x2b, 1, 2, 3]), Some("08:00:2b:01:02:03")),
                (V::Null, N),
                (V::MacAddr([0; 6]), Some("00:00:00:00:00:00")),
            ],
        ),
        col(
            "mac8",
            MACADDR8,
            -1,
            [
                (
                    V::MacAddr8([8, 0, 0x2b, 1, 2, 3, 4, 5]),
                    Some("08:00:2b:01:02:03:04:05"),
                ),
                (V::Null, N),
                (V::MacAddr8([0xff; 8]), Some("ff:ff:ff:ff:ff:ff:ff:ff")),
            ],
        ),
        col(
            "bt",
            BIT,
            -1,
            [
                (
                    V::Bits {
                        len: 3,
                        bytes: vec![0b1010_0000],
                    },
                    Some("101"),
                ),
                (V::Null, N),
                (
                    V::Bits {
                        len: 1,
                        bytes: vec![0],
                    },
                    Some("0"),
                ),
            ],
        ),
        col(
            "vb",
            VARBIT,
            -1,
            [
                (
                    V::Bits {
                        len: 10,
                        bytes: vec![0xff, 0b0100_0000],
                    },
                    Some("1111111101"),
                ),
                (V::Null, N),
                (
                    V::Bits {
                        len: 0,
                        bytes: vec![],
                    },
                    Some(""),
                ),
            ],
        ),
        col(
            "x",
            XML,
            -1,
            [
                (V::Xml("<a>1</a>".into()), Some("<a>1</a>")),
                (V::Null, N),
                (V::Xml("".into()), Some("")),
            ],
        ),
        col(
            "e",
            MOOD,
            -1,
            [
                (V::Enum("happy".into()), Some("happy")),
                (V::Null, N),
                (V::Enum("sad".into()), Some("sad")),
            ],
        ),
        col(
            "dom",
            POSNUM,
            -1,
            [
                (numeric("123456789.123"), Some("123456789.123")),
                (V::Null, N),
                (numeric("0.5"), Some("0.5")),
            ],
        ),
        col(
            "ai",
            INT4_ARRAY,
            -1,
            [
                (
                    int_array(&[3], vec![V::Int32(1), V::Null, V::Int32(-3)]),
                    Some("[1,NULL,-3]"),
                ),
                // NULL array: ClickHouse has no nullable arrays.
                (V::Null, Some("[]")),
                (int_array(&[], vec![]), Some("[]")),
            ],
        ),
        Col {
            name: "at2",
            type_oid: TEXT_ARRAY,
            typmod: -1,
            not_null: false,
            ndims: 2,
            rows: [
                (
                    text_array(&[2, 2], vec![text("a"), text("b"), V::Null, text("d'q")]),
                    Some("[['a','b'],[NULL,'d\\'q']]"),
                ),
                (V::Null, Some("[]")),
                (text_array(&[1, 1], vec![text("")]), Some("[['']]")),
            ],
        },
        col(
            "ae",
            MOOD_ARRAY,
            -1,
            [
                (
                    Value::Array(ArrayValue {
                        element_type: MOOD,
                        dims: vec![(2, 1)],
                        elements: vec![V::Enum("sad".into()), V::Null],
                        delimiter: ',',
                    }),
                    Some("['sad',NULL]"),
                ),
                (V::Null, Some("[]")),
                (
                    Value::Array(ArrayValue {
                        element_type: MOOD,
                        dims: vec![(1, 0)],
                        elements: vec![V::Enum("happy".into())],
                        delimiter: ',',
                    }),
                    Some("['happy']"),
                ),
            ],
        ),
        Col {
            name: "nn",
            type_oid: TEXT,
            typmod: -1,
            not_null: true,
            ndims: 0,
            rows: [
                (text("x"), Some("x")),
                (text(""), Some("")),
                (text("z"), Some("z")),
            ],
        },
        Col {
            name: "nne",
            type_oid: MOOD,
            typmod: -1,
            not_null: true,
            ndims: 0,
            rows: [
                (V::Enum("sad".into()), Some("sad")),
                (V::Enum("happy".into()), Some("happy")),
                (V::Enum("sad".into()), Some("sad")),
            ],
        },
    ];
    // bytea is compared as hex (raw bytes, not PostgreSQL's \x text).
    cols.push(col(
        "by",
        BYTEA,
        -1,
        [
            (V::Bytea(vec![0, 1, 0xfe, 0xff]), Some("0001FEFF")),
            (V::Null, N),
            (V::Bytea(vec![]), Some("")),
        ],
    ));
    cols
}

fn types() -> Vec<walshadow_types::catalog::TypeDesc> {
    let mut mood = type_desc(MOOD, "mood", "e", "E");
    mood.enum_labels = vec!["sad".into(), "happy".into()];
    let mut mood_array = type_desc(MOOD_ARRAY, "_mood", "b", "A");
    mood_array.element = Some(MOOD);
    let mut int_array = type_desc(INT4_ARRAY, "_int4", "b", "A");
    int_array.schema = "pg_catalog".into();
    int_array.element = Some(INT4);
    let mut text_array = type_desc(TEXT_ARRAY, "_text", "b", "A");
    text_array.schema = "pg_catalog".into();
    text_array.element = Some(TEXT);
    let mut posnum = type_desc(POSNUM, "posnum", "d", "N");
    posnum.base_type = Some(NUMERIC);
    posnum.base_typmod = Some(numeric_typmod(12, 3));
    vec![mood, mood_array, int_array, text_array, posnum]
}

fn relation_of(cols: &[Col]) -> RelationDesc {
    let mut attrs = vec![attr(1, "id", INT4, -1, true)];
    for (i, c) in cols.iter().enumerate() {
        let mut a = attr(i as i16 + 2, c.name, c.type_oid, c.typmod, c.not_null);
        a.ndims = c.ndims;
        attrs.push(a);
    }
    relation("every_type", attrs, &["id"], types())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mapped_type_round_trips() {
    let engine = ClickHouseEngine::start().expect("engine");
    let client = client(&engine, "rt");
    client
        .execute(&create_database_sql(
            "rt",
            walshadow_emitter::OnCluster(None),
        ))
        .await
        .unwrap();

    let cols = columns();
    let desc = relation_of(&cols);
    let dest = DestTable::new(&desc, &MetaColumns::default()).unwrap();
    assert_eq!(
        dest.query_settings(),
        [("enable_time_time64_type".to_string(), "1".to_string())]
    );
    client
        .execute_with_settings(
            &dest.create_table_sql("rt", "every_type", &TableSettings::default()),
            &dest.query_settings(),
        )
        .await
        .unwrap();

    let encoder = RowBinaryEncoder::new(&dest);
    let mut body = Vec::new();
    for row in 0..3 {
        let mut values = vec![Value::Int32(row as i32 + 1)];
        values.extend(cols.iter().map(|c| c.rows[row].0.clone()));
        let meta = RowMeta {
            lsn: Lsn(0x1_0000_0000 + row as u64),
            seq: Lsn(0x0_ffff_0000 + row as u64),
            xid: 740 + row as u32,
            commit_time: pg_ts(2024, 1, 2, 3, 4, 5, 6),
            deleted: false,
        };
        encoder.encode_row(&mut body, &values, &meta).unwrap();
    }
    client
        .insert(
            "every_type",
            &encoder.columns(),
            Bytes::from(body),
            3,
            &InsertSettings::default(),
        )
        .await
        .unwrap();

    // The types ClickHouse created are the mapped ones.
    let described = client
        .query("SELECT name, type FROM system.columns WHERE database = 'rt' AND table = 'every_type' ORDER BY position FORMAT TSVRaw")
        .await
        .unwrap();
    let mut want_types = vec!["id\tInt32".to_string()];
    want_types.extend(
        dest.columns
            .iter()
            .skip(1)
            .map(|c| format!("{}\t{}", c.name, c.ch_type)),
    );
    want_types.extend([
        "_lsn\tUInt64".into(),
        "_seq\tUInt64".into(),
        "_xid\tUInt32".into(),
        "_commit_time\tDateTime64(6, 'UTC')".into(),
        "_is_deleted\tUInt8".into(),
        "_version\tUInt128".into(),
    ]);
    assert_eq!(described.lines().collect::<Vec<_>>(), want_types);

    let mut mismatches = Vec::new();
    for c in &cols {
        let expr = if c.name == "by" {
            "hex(`by`)".to_string()
        } else {
            format!("toString(`{}`)", c.name)
        };
        // Arrays render with quotes, which TabSeparated would escape again.
        let is_array = matches!(c.type_oid, INT4_ARRAY | TEXT_ARRAY | MOOD_ARRAY);
        let format = if is_array { "TSVRaw" } else { "TSV" };
        let got = client
            .query(&format!(
                "SELECT {expr} FROM rt.every_type ORDER BY id FORMAT {format}"
            ))
            .await
            .unwrap();
        let want: Vec<String> = c
            .rows
            .iter()
            .map(|(_, w)| w.map_or_else(|| "\\N".to_string(), str::to_string))
            .collect();
        let got: Vec<&str> = got.lines().collect();
        if got != want {
            mismatches.push(format!("{}: got {got:?}, want {want:?}", c.name));
        }
    }
    assert!(
        mismatches.is_empty(),
        "mismatches:\n{}",
        mismatches.join("\n")
    );

    let meta = client
        .query("SELECT _lsn, _seq, _xid, toString(_commit_time), _is_deleted, _version FROM rt.every_type ORDER BY id LIMIT 1")
        .await
        .unwrap();
    assert_eq!(
        meta.trim_end(),
        format!(
            "4294967296\t4294901760\t740\t2024-01-02 03:04:05.000006\t0\t{}",
            (4_294_967_296u128 << 64) | 4_294_901_760
        )
    );
}
