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
//! The table, its rows and the unsupported types are the test kit's
//! `all_types` fixture, which the heap decoder's test shares; this test
//! adds two columns, external storage for `tx` and out-of-line values.
//!
//! `copy_throughput` (ignored; run it with `--release -- --ignored
//! --nocapture`) prints the decoder's MB/s over a 100k-row mixed table.

use std::time::{Duration, Instant};
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use walshadow_rows::copy_binary::{CopyDecodeError, CopyDecoder};
use walshadow_rows::{RowDecoder, ToastChunks, TupleRef, Value};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_testkit::all_types::{self, EDGES, HUGE, MORE_EDGES, Row, TYPICAL, has_xml, insert};
use walshadow_testkit::{
    Cluster, ClusterOptions, PgMajor, Rng, assert_same_text, heap_tuples, relation_file,
    server_text,
};
use walshadow_types::catalog::RelationDesc;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

/// The type of `dp`.
const EXTRA_TYPES_SQL: &str = "create domain price as numeric(10,2);";
/// What this test adds to the all-types table: a domain over a numeric
/// with a typmod, and a column name the select list must quote.
const EXTRA_COLUMNS: &[(&str, &str)] = &[("dp", "price"), ("\"Odd \"\"Name\"\"\"", "text")];

/// Values of the extra columns, appended to the fixture's rows.
const TYPICAL_EXTRA: Row = &[
    ("dp", "12345678.91"),
    ("\"Odd \"\"Name\"\"\"", "'quoted column'"),
];
const EDGES_EXTRA: Row = &[("dp", "-0.01")];
/// The most negative interval, in place of MORE_EDGES' zero.
const MORE_EDGES_EXTRA: Row = &[(
    "iv",
    "'-177999999 years -11 mons -2147483648 days -2562047788:00:54.775807'",
)];

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

async fn every_type(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    pg.psql(all_types::TYPES_SQL)?;
    pg.psql(EXTRA_TYPES_SQL)?;
    pg.psql(&all_types::create_table_sql("t_types", EXTRA_COLUMNS))?;
    // Long tx values go out of line uncompressed; others compress first.
    pg.psql("alter table t_types alter column tx set storage external")?;
    pg.psql("insert into t_types default values")?;
    let typical = [TYPICAL, TYPICAL_EXTRA].concat();
    let edges = [EDGES, EDGES_EXTRA].concat();
    let more_edges = [MORE_EDGES, MORE_EDGES_EXTRA].concat();
    for row in [&typical[..], &edges, &more_edges, HUGE, LONG] {
        insert(&pg, "t_types", row)?;
    }
    if major >= PgMajor::V17 {
        insert(&pg, "t_types", all_types::INFINITE_INTERVALS)?;
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
    insert(&pg, "t_types", &all_types::without_dropped(&typical))?;
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
    let theirs = server_text(&pg, "t_types", &columns)?;
    assert_same_text("t_types", &columns, &rows, Value::to_pg_text, &theirs)?;

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
    let mut rng = Rng::from_env("COPY_TEST_SEED");
    for _ in 0..20 {
        let mut pieces = Vec::new();
        let mut at = 0;
        while at < all.len() {
            let n = (1 + rng.index(200)).min(all.len() - at);
            pieces.push(&all[at..at + n]);
            at += n;
        }
        same_rows("random pieces", &rows, &decode(&desc, pieces)?)?;
    }

    // Mutations: every prefix is an error, corruption never panics.
    let mut cuts: Vec<usize> = (0..all.len().min(600)).collect();
    cuts.extend((0..300).map(|_| rng.index(all.len())));
    for n in cuts {
        ensure!(
            decode(&desc, all[..n].chunks(1 + n % 61)).is_err(),
            "a copy cut at {n} of {} bytes decoded",
            all.len()
        );
    }
    for _ in 0..3000 {
        let mut m = all.clone();
        for _ in 0..=rng.index(3) {
            let i = rng.index(m.len());
            m[i] = rng.next_u64() as u8;
        }
        let _ = decode(&desc, m.chunks(1 + rng.index(500)));
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
    pg.psql(all_types::UNSUPPORTED_SQL)?;
    for &(table, column, type_name) in all_types::UNSUPPORTED {
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

per_major!(async every_type => every_type_matches_server_and_heap: pg15, pg16, pg17, pg18);

/// contrib's `citext` and `ltree` (on the majors that ship contrib): COPY,
/// the server's text and the heap decoder agree.
async fn extensions(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    pg.psql(
        "create extension citext; create extension ltree; create extension hstore;
         create table t_ext (id int, ci citext, lt ltree, alt ltree[], hs hstore);
         insert into t_ext values (1, 'MiXeD Case', 'Top.Science', '{a.b,NULL}',
              hstore(array['a', 'b c', 'q\"u'], array['1', null, '\\'])),
           (2, '', '', '{}', ''),
           (3, null, (select string_agg('l' || g, '.')::ltree from generate_series(1, 300) g), null,
              (select hstore(array_agg('k' || g), array_agg(repeat('v', g))) from generate_series(1, 400) g));",
    )?;
    pg.checkpoint()?;
    let desc = describe(&pg, "t_ext").await?;
    let decoder = CopyDecoder::new(&desc)?;
    let columns: Vec<String> = decoder.column_names().map(str::to_owned).collect();
    let mut c = sql_session(&pg).await?;
    let chunks = copy_table(&mut c, &decoder, "t_ext").await?;
    let rows = decode(&desc, chunks.iter().map(|b| &b[..]))?;
    ensure!(rows.len() == 3, "{} rows", rows.len());
    let theirs = server_text(&pg, "t_ext", &columns)?;
    assert_same_text("t_ext", &columns, &rows, Value::to_pg_text, &theirs)?;
    same_rows("COPY vs heap", &rows, &heap_rows(&pg, &desc, "t_ext")?)
}

per_major!(async extensions => extension_types_match_server_and_heap: pg15, pg17, pg18);

/// PostGIS (15: Debian's): COPY (`geometry_send`'s EWKB), the server's
/// text and the heap decoder agree on every shape.
async fn postgis(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    ensure!(
        walshadow_testkit::all_types::has_postgis(&pg)?,
        "PostGIS is not installed for {major}: scripts/setup installs postgresql-15-postgis-3"
    );
    pg.psql(walshadow_testkit::all_types::POSTGIS_SQL)?;
    pg.checkpoint()?;
    let desc = describe(&pg, "t_geo").await?;
    let decoder = CopyDecoder::new(&desc)?;
    let columns: Vec<String> = decoder.column_names().map(str::to_owned).collect();
    let mut c = sql_session(&pg).await?;
    let chunks = copy_table(&mut c, &decoder, "t_geo").await?;
    let rows = decode(&desc, chunks.iter().map(|b| &b[..]))?;
    ensure!(rows.len() == 24, "{} rows", rows.len());
    let theirs = server_text(&pg, "t_geo", &columns)?;
    assert_same_text("t_geo", &columns, &rows, Value::to_pg_text, &theirs)?;
    same_rows("COPY vs heap", &rows, &heap_rows(&pg, &desc, "t_geo")?)
}

per_major!(async postgis => postgis_matches_server_and_heap: pg15);

/// pgvector's `vector` (16 and 18 ship it here): COPY, the server's text
/// and the heap decoder agree.
async fn vectors(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    pg.psql(
        "create extension vector;
         create table t_vec (id int, v vector);
         insert into t_vec values (1, '[1,2.5,-3]'), (2, null),
           (3, (select array_agg(g::real / 3)::vector from generate_series(1, 2000) g));",
    )?;
    // halfvec came with pgvector 0.7 (pgserver's 16 has an older one).
    if pg.has_type("halfvec")? {
        pg.psql(
            "alter table t_vec add column h halfvec;
             update t_vec set h = case id when 1 then '[0.333,-65504]'
               when 3 then (select array_agg(g::real / 3)::halfvec from generate_series(1, 1000) g) end;
             vacuum full t_vec;",
        )?;
    }
    if pg.has_type("sparsevec")? {
        pg.psql(
            "alter table t_vec add column s sparsevec;
             update t_vec set s = case id when 1 then '{2:1.5,5:-3}/5'
               when 3 then (select format('{%s}/100000', string_agg(format('%s:%s', g * 7, g / 3.0), ','))
                              from generate_series(1, 2000) g)::sparsevec end;
             vacuum full t_vec;",
        )?;
    }
    pg.checkpoint()?;
    let desc = describe(&pg, "t_vec").await?;
    let decoder = CopyDecoder::new(&desc)?;
    let columns: Vec<String> = decoder.column_names().map(str::to_owned).collect();
    let mut c = sql_session(&pg).await?;
    let chunks = copy_table(&mut c, &decoder, "t_vec").await?;
    let rows = decode(&desc, chunks.iter().map(|b| &b[..]))?;
    ensure!(rows.len() == 3, "{} rows", rows.len());
    let theirs = server_text(&pg, "t_vec", &columns)?;
    assert_same_text("t_vec", &columns, &rows, Value::to_pg_text, &theirs)?;
    same_rows("COPY vs heap", &rows, &heap_rows(&pg, &desc, "t_vec")?)
}

per_major!(async vectors => pgvector_matches_server_and_heap: pg16, pg18);

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
