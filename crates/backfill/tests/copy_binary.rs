//! The binary COPY decoder against real PostgreSQL 15 and 18: a table with
//! a column of every supported type (edge values, NULLs, arrays with
//! bounds and NULL elements, domains, enums, dropped columns, columns
//! added without a rewrite, inline-compressed and out-of-line values) is
//! read with `ReplicationClient::copy_out` of
//! `COPY (SELECT <select_list> …) TO STDOUT (FORMAT binary)` and decoded;
//! then
//!
//! - every value's `to_pg_text()` equals the server's output function
//!   (`format('%s', col)`) on the same server, and
//! - every row equals what the heap decoder (`RowDecoder`, the WAL path)
//!   reads from the table's heap file, value for value;
//! - feeding the same bytes in 1-byte, odd and random pieces gives the same
//!   rows; every truncation errors, corrupted bytes never panic;
//! - unsupported types are refused naming table, column and type.
//!
//! `copy_throughput` (ignored; run it with `--release -- --ignored
//! --nocapture`) prints the decoder's MB/s over a 100k-row mixed table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use walshadow_backfill::copy_binary::{CopyDecodeError, CopyDecoder};
use walshadow_rows::{RowDecoder, ToastChunks, TupleRef, Value};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};
use walshadow_types::catalog::RelationDesc;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

const SCHEMA: &str = r#"
create type mood as enum ('sad', 'ok', 'happy', 'très "content"');
create domain posint as integer check (value > 0);
create domain posint2 as posint;
create domain email as text;
create domain intarr as int[];
create domain price as numeric(10,2);
create table t_types (
  id serial primary key,
  b bool, i2 int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8,
  n numeric, n2 numeric(10,2), m money, ch "char", bp char(5), vc varchar(10), tx text, nm name,
  dropped_early text,
  "by" bytea, d date, t time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, u uuid,
  js json, jb jsonb, ip inet, cd cidr, mac macaddr, mac8 macaddr8, bt bit(5), vb varbit(20), x xml,
  mo mood, pi posint2, em email, dia intarr, dp price, "Odd ""Name""" text,
  a_i4 int4[], a_2d int4[][], a_3d int[], a_tx text[], a_n numeric[], a_tstz timestamptz[],
  a_jb jsonb[], a_mo mood[], a_pi posint[], a_b bool[], a_f8 float8[], a_f4 float4[], a_by bytea[],
  a_ip inet[], a_cd cidr[], a_iv interval[], a_u uuid[], a_vb varbit[], a_ch "char"[], a_nm name[],
  a_d date[], a_t time[], a_ttz timetz[], a_ts timestamp[], a_mac macaddr[], a_mac8 macaddr8[],
  a_i2 int2[], a_i8 int8[], a_o oid[], a_m money[], a_bp char(3)[], a_js json[], a_x xml[],
  dropped_late int8
);
-- Long tx values go out of line uncompressed; others compress first.
alter table t_types alter column tx set storage external;
"#;

/// One row: (column, SQL expression) pairs; other columns NULL.
type Row<'a> = &'a [(&'a str, &'a str)];

const TYPICAL: Row = &[
    ("b", "true"),
    ("i2", "-32768"),
    ("i4", "2147483647"),
    ("i8", "-9223372036854775808"),
    ("o", "4294967295"),
    ("f4", "1.5"),
    ("f8", "0.1"),
    ("n", "12345.6789"),
    ("n2", "-42.5"),
    ("m", "1234.56"),
    ("ch", "'a'"),
    ("bp", "'ab'"),
    ("vc", "'hello'"),
    ("tx", "'some text'"),
    ("nm", "'a name'"),
    ("dropped_early", "'gone but walked'"),
    ("\"by\"", r"'\x00ff10'"),
    ("d", "'2024-02-29'"),
    ("t", "'13:14:15.123456'"),
    ("ttz", "'13:14:15+05:30'"),
    ("ts", "'2024-02-29 13:14:15.5'"),
    ("tstz", "'2024-02-29 13:14:15.5+02'"),
    ("iv", "'1 year 2 mons 3 days 04:05:06.789'"),
    ("u", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"),
    ("js", r#"'{"a" : [1, 2.50, "x"]}'"#),
    (
        "jb",
        r#"'{"b": [1, 2.50, "x", null, true, false, {"c": {}}], "a": "é\"\\\n\t\u0001", "": []}'"#,
    ),
    ("ip", "'192.168.0.1/24'"),
    ("cd", "'10.0.0.0/8'"),
    ("mac", "'08:00:2b:01:02:03'"),
    ("mac8", "'08:00:2b:01:02:03:04:05'"),
    ("bt", "'10101'"),
    ("vb", "'1100110011'"),
    ("x", r#"'<a b="c">text &amp; more</a>'"#),
    ("mo", "'happy'"),
    ("pi", "5"),
    ("em", "'a@b.c'"),
    ("dia", "'{1,2,3}'"),
    ("dp", "12345678.91"),
    ("\"Odd \"\"Name\"\"\"", "'quoted column'"),
    ("a_i4", "'{1,NULL,3}'"),
    ("a_2d", "'{{1,2},{3,4}}'"),
    ("a_3d", "'{{{1,2},{3,4}},{{5,6},{7,8}}}'"),
    (
        "a_tx",
        r#"'{"",NULL,"NULL","null","a b","x\"y\\z","{}",",",plain}'"#,
    ),
    (
        "a_n",
        "'{NaN,Infinity,-Infinity,0,-1.5,12345678901234567890.123}'",
    ),
    ("a_tstz", "'{2024-01-01 00:00:00+00,infinity,NULL}'"),
    (
        "a_jb",
        r#"array['{"a": 1}'::jsonb, '[1, "two"]', 'null', '"s"']"#,
    ),
    ("a_mo", r#"'{sad,"très \"content\"",NULL}'"#),
    ("a_pi", "'{1,2}'"),
    ("a_b", "'{t,f,NULL}'"),
    ("a_f8", "'{NaN,Infinity,-Infinity,-0,1e300,0.1}'"),
    ("a_f4", "'{NaN,-0,3.4e38,1e-45}'"),
    ("a_by", r#"'{"\\x00",NULL,"\\x"}'"#),
    ("a_ip", "'{::1,10.1.2.3/8,2001:db8::1/64}'"),
    ("a_cd", "'{10.0.0.0/8,::/0}'"),
    ("a_iv", "'{1 day,-00:00:01,NULL}'"),
    ("a_u", "'{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}'"),
    ("a_vb", "'{1,\"\",0101}'"),
    ("a_ch", r#"'{a,b,"\\",NULL}'"#),
    ("a_nm", r#"'{pg_class,"with space"}'"#),
    ("a_d", "'{2000-01-01,infinity,0001-01-01 BC}'"),
    ("a_t", "'{00:00:00,24:00:00}'"),
    ("a_ttz", "'{00:00:00+00,12:00:00-03:30}'"),
    ("a_ts", "'{2000-01-01 00:00:00.000001,-infinity}'"),
    ("a_mac", "'{08:00:2b:01:02:03}'"),
    ("a_mac8", "'{08:00:2b:01:02:03:04:05}'"),
    ("a_i2", "'[-2:-1]={1,2}'"),
    ("a_i8", "'{9223372036854775807,NULL}'"),
    ("a_o", "'{0,4294967295}'"),
    ("a_m", "'{1.00,-2.50,NULL}'"),
    ("a_bp", "'{a,ab,abc}'"),
    ("a_js", r#"array['{"a" : 1}'::json, '[]']"#),
    ("a_x", "array['<x/>'::xml, NULL]"),
    ("dropped_late", "77"),
];

const EDGES: Row = &[
    ("b", "false"),
    ("i2", "32767"),
    ("i4", "-2147483648"),
    ("i8", "9223372036854775807"),
    ("o", "0"),
    ("f4", "'NaN'"),
    ("f8", "'Infinity'"),
    ("n", "'NaN'"),
    ("n2", "0"),
    ("m", "-0.01"),
    ("ch", r"'\351'"),
    ("bp", "''"),
    ("vc", "''"),
    ("tx", "''"),
    ("nm", "repeat('x', 63)"),
    ("\"by\"", r"'\x'"),
    ("d", "'infinity'"),
    ("t", "'24:00:00'"),
    ("ttz", "'00:00:00.000001-15:59'"),
    ("ts", "'infinity'"),
    ("tstz", "'-infinity'"),
    ("iv", "'-1 years -2 mons +3 days -04:05:06.000001'"),
    ("js", "'[]'"),
    ("jb", r#"'"just a string"'"#),
    ("ip", "'::1'"),
    ("cd", "'2001:db8::/32'"),
    ("bt", "'00000'"),
    ("vb", "''"),
    ("x", "''"),
    ("mo", "'très \"content\"'"),
    ("em", "''"),
    ("dia", "'{}'"),
    ("dp", "-0.01"),
    ("a_i4", "'{}'"),
    ("a_2d", "'{{1,NULL},{NULL,4}}'"),
    (
        "a_3d",
        "'[0:1][1:2][-1:0]={{{1,2},{3,4}},{{5,6},{NULL,8}}}'",
    ),
    ("a_tx", "'{}'"),
    ("a_n", "'{}'"),
];

const MORE_EDGES: Row = &[
    ("f4", "'-Infinity'"),
    ("f8", "'-0'"),
    ("n", "1e100"),
    ("n2", "'-99999999.99'"),
    ("m", "'-92233720368547758.08'"),
    ("ch", "''"),
    (
        "tx",
        "'héllo wörld 日本語 🎉 \"quoted\" back\\slash tab\there'",
    ),
    ("d", "'4714-11-24 BC'"),
    ("t", "'00:00:00'"),
    ("ttz", "'23:59:59.999999+15:59'"),
    ("ts", "'4713-01-01 00:00:00 BC'"),
    ("tstz", "'0001-01-01 00:00:00+00 BC'"),
    ("iv", "'0'"),
    (
        "jb",
        "'[1, [2, [3, [4, [5, []]]]], -0.0001, 1e3, 123456789012345678901234567890]'",
    ),
    ("ip", "'::ffff:1.2.3.4'"),
    ("cd", "'::/0'"),
    ("bt", "'11111'"),
    ("vb", "'11111111111111111111'"),
    (
        "iv",
        "'-177999999 years -11 mons -2147483648 days -2562047788:00:54.775807'",
    ),
];

const HUGE: Row = &[
    ("f4", "1e-45"),
    ("f8", "5e-324"),
    ("n", "1e-100"),
    ("m", "'92233720368547758.07'"),
    ("d", "'5874897-12-31'"),
    ("ts", "'294276-12-31 23:59:59.999999'"),
    ("tstz", "'294276-12-31 23:59:59.999999+00'"),
    ("iv", "'178000000 years'"),
    ("ip", "'2001:db8:0:0:1:0:0:1/128'"),
    ("n2", "12345678.99"),
    (
        "a_i4",
        "(select array_agg(g) from generate_series(1, 1000) g)",
    ),
];

/// Out-of-line (TOAST) and inline-compressed values.
const LONG: Row = &[
    // 9600 incompressible-ish characters, stored external uncompressed.
    (
        "tx",
        "(select string_agg(md5(g::text), '') from generate_series(1, 300) g)",
    ),
    (
        "jb",
        "(select jsonb_object_agg('k' || g, md5(g::text)) from generate_series(1, 300) g)",
    ),
    (
        "\"by\"",
        "(select decode(string_agg(md5(g::text), ''), 'hex') from generate_series(1, 300) g)",
    ),
    (
        "a_tx",
        "(select array_agg(case when g % 7 = 0 then null else md5(g::text) end) from generate_series(1, 400) g)",
    ),
    // Compressible: pglz inline.
    ("js", "('[' || repeat('1, ', 3000) || '1]')::json"),
    ("n", "repeat('9', 300)::numeric / 7"),
    ("a_n", "array_fill(1.5::numeric, array[3000])"),
];

/// The settings whose output `Value::to_pg_text` reproduces.
const TEXT_SETTINGS: &str = "set timezone = 'UTC'; set datestyle = 'ISO, MDY'; \
    set intervalstyle = 'postgres'; set extra_float_digits = 1; set bytea_output = 'hex'; \
    set lc_monetary = 'C'";

fn has_xml(pg: &Cluster) -> bool {
    pg.psql("select '<x/>'::xml").is_ok()
}

fn insert(pg: &Cluster, table: &str, row: Row) -> Result<()> {
    let xml = has_xml(pg);
    let row: Vec<(&str, &str)> = row
        .iter()
        .copied()
        .filter(|(c, _)| xml || !matches!(*c, "x" | "a_x"))
        .collect();
    // A column listed twice keeps its last value.
    let mut cols: Vec<&str> = Vec::new();
    let mut vals: Vec<&str> = Vec::new();
    for (c, v) in row {
        match cols.iter().position(|k| *k == c) {
            Some(i) => vals[i] = v,
            None => {
                cols.push(c);
                vals.push(v);
            }
        }
    }
    pg.psql(&format!(
        "insert into {table} ({}) values ({})",
        cols.join(", "),
        vals.join(", ")
    ))?;
    Ok(())
}

async fn describe(pg: &Cluster, table: &str) -> Result<RelationDesc> {
    let mut cat =
        ShadowCatalog::connect(&pg.socket_dir(), pg.port(), pg.superuser(), "postgres").await?;
    cat.relation_by_name("public", table)
        .await?
        .with_context(|| format!("no table {table}"))
}

async fn sql_session(pg: &Cluster) -> Result<ReplicationClient> {
    let mut cfg = ConnConfig::from_url(&pg.socket_url("postgres"))?;
    cfg.physical = false;
    cfg.command_timeout = Duration::from_secs(120);
    Ok(ReplicationClient::connect(&cfg).await?)
}

/// The binary COPY of `table` in ctid order, as the CopyData payloads came.
async fn copy_table(
    c: &mut ReplicationClient,
    decoder: &CopyDecoder,
    table: &str,
) -> Result<Vec<bytes::Bytes>> {
    let sql = format!(
        "COPY (SELECT {} FROM public.{table} ORDER BY ctid) TO STDOUT (FORMAT binary)",
        decoder.select_list()
    );
    let mut copy = c.copy_out(&sql).await?;
    ensure!(copy.is_binary(), "not binary");
    let mut out = Vec::new();
    while let Some(b) = copy.next().await? {
        out.push(b);
    }
    Ok(out)
}

/// Decodes pieces with a fresh decoder.
fn decode<'a>(
    desc: &RelationDesc,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<Vec<Value>>, CopyDecodeError> {
    let mut d = CopyDecoder::new(desc).expect("supported");
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p, &mut out)?;
    }
    d.finish()?;
    Ok(out)
}

/// The server's output-function text per row (ctid order) and column.
async fn server_text(
    c: &mut ReplicationClient,
    table: &str,
    columns: &[String],
) -> Result<Vec<Vec<Option<String>>>> {
    c.simple_query(TEXT_SETTINGS).await?;
    // `format('%s', v)` calls the type's output function (a `::text`
    // cast is not always that: bool, bpchar, inet differ).
    let list: Vec<String> = columns
        .iter()
        .map(|c| format!("format('%s', \"{}\")", c.replace('"', "\"\"")))
        .collect();
    let r = c
        .simple_query(&format!(
            "select {} from public.{table} order by ctid",
            list.join(", ")
        ))
        .await?;
    // format('%s', NULL) is '': NULLs come from a second look.
    let nulls: Vec<String> = columns
        .iter()
        .map(|c| format!("(\"{}\" is null)::int", c.replace('"', "\"\"")))
        .collect();
    let n = c
        .simple_query(&format!(
            "select {} from public.{table} order by ctid",
            nulls.join(", ")
        ))
        .await?;
    let mut rows = Vec::new();
    for i in 0..r.rows.len() {
        let mut row = Vec::new();
        for j in 0..columns.len() {
            row.push(if n.text(i, j) == Some("1") {
                None
            } else {
                Some(r.text(i, j).context("non-UTF-8 server text")?.to_owned())
            });
        }
        rows.push(row);
    }
    Ok(rows)
}

fn compare_text(
    table: &str,
    columns: &[String],
    ours: &[Vec<Value>],
    theirs: &[Vec<Option<String>>],
) -> Result<()> {
    ensure!(
        ours.len() == theirs.len(),
        "{table}: decoded {} rows, the server has {}",
        ours.len(),
        theirs.len()
    );
    let mut diffs = String::new();
    for (r, (a, b)) in ours.iter().zip(theirs).enumerate() {
        ensure!(a.len() == columns.len(), "{table} row {r}: column count");
        for (c, (va, vb)) in a.iter().zip(b).enumerate() {
            let text = va.to_pg_text();
            if &text != vb {
                let _ = writeln!(
                    diffs,
                    "  row {r} column {}: decoded {text:?} ({va:?}), server {vb:?}",
                    columns[c]
                );
            }
        }
    }
    ensure!(diffs.is_empty(), "{table}: values differ:\n{diffs}");
    Ok(())
}

/// Rows equal value for value (through `Debug`, so NaNs and -0 compare).
fn same_rows(what: &str, a: &[Vec<Value>], b: &[Vec<Value>]) -> Result<()> {
    ensure!(
        a.len() == b.len(),
        "{what}: {} rows vs {}",
        a.len(),
        b.len()
    );
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let (x, y) = (format!("{x:?}"), format!("{y:?}"));
        ensure!(x == y, "{what}: row {i} differs:\n  {x}\n  {y}");
    }
    Ok(())
}

const BLCKSZ: usize = 8192;
const PAGE_HEADER: usize = 24;
const LP_NORMAL: u32 = 1;

fn relation_file(pg: &Cluster, regclass: &str) -> Result<PathBuf> {
    let rel = pg.query_one(&format!("select pg_relation_filepath({regclass})"))?;
    Ok(pg.data_dir().join(rel.trim()))
}

/// The normal tuples of a heap file in ctid order.
fn heap_tuples(path: &Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::read(path).with_context(|| path.display().to_string())?;
    ensure!(file.len() % BLCKSZ == 0, "not whole pages");
    let mut out = Vec::new();
    for page in file.chunks(BLCKSZ) {
        let pd_lower = usize::from(u16::from_le_bytes([page[12], page[13]]));
        if u16::from_le_bytes([page[14], page[15]]) == 0 {
            continue;
        }
        for lp in page[PAGE_HEADER..pd_lower].chunks_exact(4) {
            let v = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]);
            let (off, flags, len) = ((v & 0x7fff) as usize, (v >> 15) & 3, (v >> 17) as usize);
            if flags == LP_NORMAL {
                out.push(page[off..off + len].to_vec());
            }
        }
    }
    Ok(out)
}

/// What the WAL path's decoder reads for `table`: its heap file, TOAST
/// from its TOAST table's heap file.
fn heap_rows(pg: &Cluster, desc: &RelationDesc, table: &str) -> Result<Vec<Vec<Value>>> {
    let mut toast = ToastChunks::new();
    if let Some(t) = desc.toast_relid {
        for tuple in heap_tuples(&relation_file(pg, &t.to_string())?)? {
            toast.add_chunk_tuple(t, TupleRef::from_heap_tuple(&tuple)?)?;
        }
    }
    let decoder = RowDecoder::new(desc)?;
    heap_tuples(&relation_file(pg, &format!("'{table}'::regclass"))?)?
        .iter()
        .map(|t| Ok(decoder.decode(TupleRef::from_heap_tuple(t)?, &toast)?))
        .collect()
}

/// xorshift64, seeded and printed so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed() -> u64 {
    let s = std::env::var("COPY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("COPY_TEST_SEED={s}");
    s
}

async fn every_type(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    pg.psql(SCHEMA)?;
    pg.psql("insert into t_types default values")?;
    for row in [TYPICAL, EDGES, MORE_EDGES, HUGE, LONG] {
        insert(&pg, "t_types", row)?;
    }
    if major >= PgMajor::V17 {
        insert(
            &pg,
            "t_types",
            &[("iv", "'infinity'"), ("a_iv", "'{infinity,-infinity}'")],
        )?;
    }
    // Dropped columns and columns added with defaults (old rows lack them).
    pg.psql(
        r#"alter table t_types drop column dropped_early, drop column dropped_late;
        alter table t_types
          add column add_i int default 42,
          add column add_t text default 'hello, "world"',
          add column add_a int[] default '{1,NULL,3}',
          add column add_n numeric default 'NaN',
          add column add_mo mood default 'très "content"',
          add column add_bp char(4) default 'ab',
          add column add_nodef text;"#,
    )?;
    let live: Vec<(&str, &str)> = TYPICAL
        .iter()
        .copied()
        .filter(|(c, _)| !c.starts_with("dropped"))
        .collect();
    insert(&pg, "t_types", &live)?;
    insert(&pg, "t_types", &[("add_i", "-1"), ("add_nodef", "'set'")])?;
    pg.checkpoint()?;

    let desc = describe(&pg, "t_types").await?;
    let decoder = CopyDecoder::new(&desc)?;
    let columns: Vec<String> = decoder.column_names().map(str::to_owned).collect();
    ensure!(
        !columns
            .iter()
            .any(|c| c.starts_with("dropped") || c.contains("pg.dropped"))
    );
    ensure!(
        decoder.select_list().contains(r#""Odd ""Name""""#),
        "{}",
        decoder.select_list()
    );
    ensure!(decoder.select_list().contains(r#""x"::text, "#));
    let mut c = sql_session(&pg).await?;
    let chunks = copy_table(&mut c, &decoder, "t_types").await?;
    let all: Vec<u8> = chunks.concat();
    let toasted = pg.query_one(&format!(
        "select count(*) from pg_toast.pg_toast_{}",
        desc.oid
    ))?;
    ensure!(
        toasted.trim().parse::<u64>()? > 4,
        "expected out-of-line values, TOAST holds {toasted} chunks"
    );

    // As the messages came.
    let rows = decode(&desc, chunks.iter().map(|b| &b[..]))?;
    ensure!(rows.len() >= 8, "{} rows", rows.len());

    // Oracle 1: the server's output function.
    let theirs = server_text(&mut c, "t_types", &columns).await?;
    compare_text("t_types", &columns, &rows, &theirs)?;

    // Oracle 2: the heap decoder's values for the same rows.
    let heap = heap_rows(&pg, &desc, "t_types")?;
    same_rows("COPY vs heap", &rows, &heap)?;

    // Any split gives the same rows.
    same_rows("whole", &rows, &decode(&desc, [&all[..]])?)?;
    same_rows("1-byte", &rows, &decode(&desc, all.chunks(1))?)?;
    for size in [2, 3, 7, 19, 4093] {
        same_rows(
            &format!("{size}-byte"),
            &rows,
            &decode(&desc, all.chunks(size))?,
        )?;
    }
    let mut rng = Rng(seed());
    for _ in 0..20 {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < all.len() {
            let n = (1 + rng.below(200)).min(all.len() - at);
            pieces.push(&all[at..at + n]);
            at += n;
        }
        same_rows("random pieces", &rows, &decode(&desc, pieces)?)?;
    }

    // Mutations: every prefix is an error, corruption never panics.
    let mut cuts: Vec<usize> = (0..all.len().min(600)).collect();
    cuts.extend((0..300).map(|_| rng.below(all.len())));
    for n in cuts {
        ensure!(
            decode(&desc, all[..n].chunks(1 + n % 61)).is_err(),
            "a copy cut at {n} of {} bytes decoded",
            all.len()
        );
    }
    for _ in 0..3000 {
        let mut m = all.clone();
        for _ in 0..=rng.below(3) {
            let i = rng.below(m.len());
            m[i] = rng.next() as u8;
        }
        let _ = decode(&desc, m.chunks(1 + rng.below(500)));
    }
    c.close().await;
    if has_xml(&pg) {
        xml_declarations(&pg).await?;
    }
    refusals(&pg).await
}

/// `xml_send` drops a default XML declaration; the select list's cast to
/// text keeps the stored value, which is what the heap decoder reads.
async fn xml_declarations(pg: &Cluster) -> Result<()> {
    pg.psql(
        r#"create table t_xml (id int, x xml, ax xml[]);
        insert into t_xml values
          (1, '<?xml version="1.0"?><a/>', array['<?xml version="1.0"?><b/>'::xml, NULL]),
          (2, '<?xml version="1.0" standalone="yes"?><c/>', '{}');"#,
    )?;
    pg.checkpoint()?;
    let desc = describe(pg, "t_xml").await?;
    let decoder = CopyDecoder::new(&desc)?;
    ensure!(decoder.select_list() == r#""id", "x"::text, "ax"::text[]"#);
    let mut c = sql_session(pg).await?;
    let rows = decode(
        &desc,
        copy_table(&mut c, &decoder, "t_xml")
            .await?
            .iter()
            .map(|b| &b[..]),
    )?;
    same_rows("xml: COPY vs heap", &rows, &heap_rows(pg, &desc, "t_xml")?)?;
    ensure!(
        rows[0][1] == Value::Xml(r#"<?xml version="1.0"?><a/>"#.into()),
        "{:?}",
        rows[0][1]
    );
    c.close().await;
    Ok(())
}

/// Types outside the supported list are refused up front, naming table,
/// column and type; a dropped column of such a type is no obstacle.
async fn refusals(pg: &Cluster) -> Result<()> {
    pg.psql(
        "create type pair as (a int, b text);
         create domain pt as point;
         create table t_bad1 (id int, p point);
         create table t_bad2 (id int, r int4range);
         create table t_bad3 (id int, c pair);
         create table t_bad4 (id int, a point[]);
         create table t_bad5 (id int, d pt);
         create table t_ok (id int, gone point, v text);
         insert into t_ok values (1, '(1,2)', 'kept');
         alter table t_ok drop column gone;
         insert into t_ok values (2, 'also');",
    )?;
    for (table, column, type_name) in [
        ("t_bad1", "p", "point"),
        ("t_bad2", "r", "int4range"),
        ("t_bad3", "c", "pair"),
        ("t_bad4", "a", "point[]"),
        ("t_bad5", "d", "pt"),
    ] {
        let desc = describe(pg, table).await?;
        let Err(err) = CopyDecoder::new(&desc) else {
            bail!("{table} accepted");
        };
        let msg = err.to_string();
        ensure!(
            err.column == column && err.type_name == type_name,
            "{table}: refused {}/{}",
            err.column,
            err.type_name
        );
        ensure!(
            msg.contains(&format!("public.{table}")) && msg.contains(type_name),
            "{msg}"
        );
    }
    let desc = describe(pg, "t_ok").await?;
    let decoder = CopyDecoder::new(&desc)?;
    ensure!(decoder.select_list() == r#""id", "v""#);
    let mut c = sql_session(pg).await?;
    let chunks = copy_table(&mut c, &decoder, "t_ok").await?;
    let rows = decode(&desc, chunks.iter().map(|b| &b[..]))?;
    let text: Vec<Vec<Option<String>>> = rows
        .iter()
        .map(|r| r.iter().map(Value::to_pg_text).collect())
        .collect();
    ensure!(
        text == [
            [Some("1".to_owned()), Some("kept".to_owned())],
            [Some("2".to_owned()), Some("also".to_owned())]
        ],
        "{text:?}"
    );
    c.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg15_every_type_matches_server_and_heap() -> Result<()> {
    every_type(PgMajor::V15).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_every_type_matches_server_and_heap() -> Result<()> {
    every_type(PgMajor::V18).await
}

/// Decoding speed over a 100k-row mixed table (the COPY is read into
/// memory first: only the decoder is timed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a throughput figure; run with --release -- --ignored --nocapture"]
async fn copy_throughput() -> Result<()> {
    let pg = Cluster::start(PgMajor::V18, ClusterOptions::default())?;
    pg.psql(
        "create table perf as select g as id, (g * 1.25)::numeric(12,2) as n, md5(g::text) as t,
           timestamptz '2024-01-01' + g * interval '1 second' as ts, g % 3 = 0 as b,
           g * 0.5::float8 as f, array[g, g + 1, g + 2] as a,
           jsonb_build_object('k', g, 's', md5(g::text)) as j,
           case when g % 5 = 0 then null else 'v' || g end as v
         from generate_series(1, 100000) g",
    )?;
    let desc = describe(&pg, "perf").await?;
    let decoder = CopyDecoder::new(&desc)?;
    let mut c = sql_session(&pg).await?;
    let chunks = copy_table(&mut c, &decoder, "perf").await?;
    let bytes: usize = chunks.iter().map(|b| b.len()).sum();
    let start = Instant::now();
    let mut d = CopyDecoder::new(&desc)?;
    let mut out = Vec::new();
    let mut rows = 0usize;
    for b in &chunks {
        d.feed(b, &mut out)?;
        rows += out.len();
        out.clear();
    }
    d.finish()?;
    let secs = start.elapsed().as_secs_f64();
    ensure!(rows == 100_000);
    println!(
        "decoded {rows} rows, {:.1} MB in {secs:.3} s: {:.1} MB/s, {:.0} rows/s",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs,
        rows as f64 / secs
    );
    Ok(())
}
