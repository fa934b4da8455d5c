//! Every supported type, read straight from the heap file of a real
//! cluster and rendered as text, equals the server's own output text:
//! scalars and their edge values, arrays (2-D, 3-D, bounds, NULL
//! elements), domains, enums, dropped columns whose bytes are still in old
//! tuples, and columns added with a default and no rewrite (the old tuples
//! lack them; the decoder takes `attmissingval`). Plus a table of random
//! floats and numerics, compared digit for digit. The table and its rows
//! are the test kit's `all_types` fixture, which the binary COPY decoder's
//! test shares.

use anyhow::{Result, ensure};
use walshadow_rows::{RowDecoder, RowError, TupleRef, Value};
use walshadow_testkit::all_types::{self, EDGES, HUGE, MORE_EDGES, TYPICAL, insert};
use walshadow_testkit::per_major;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};

mod common;

/// Large values only this test adds to the `HUGE` row: a 100-key jsonb
/// object and a text array with NULL elements.
const HUGE_EXTRA: all_types::Row = &[
    (
        "jb",
        "(select jsonb_build_object('obj', jsonb_object_agg('key' || g, g * 1.5), 'arr', jsonb_agg(g::text || 'é')) from generate_series(1, 100) g)",
    ),
    (
        "a_tx",
        "(select array_agg(case when g % 7 = 0 then null else md5(g::text) end) from generate_series(1, 60) g)",
    ),
];

async fn types(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    cluster.psql(all_types::TYPES_SQL)?;
    cluster.psql(&all_types::create_table_sql("t_types", &[]))?;
    cluster.psql("insert into t_types default values")?;
    let huge = [HUGE, HUGE_EXTRA].concat();
    for row in [TYPICAL, EDGES, MORE_EDGES, &huge] {
        insert(&cluster, "t_types", row)?;
    }
    if major >= PgMajor::V17 {
        insert(&cluster, "t_types", all_types::INFINITE_INTERVALS)?;
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
          add column add_mo mood default 'très "content"',
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
    insert(&cluster, "t_types", &all_types::without_dropped(TYPICAL))?;
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
    let file = walshadow_testkit::relation_file(&cluster, "'t_types'::regclass")?;
    let tuples = walshadow_testkit::heap_tuples(&file)?;
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
    cluster.psql(all_types::UNSUPPORTED_SQL)?;
    for &(table, column, type_name) in all_types::UNSUPPORTED {
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

per_major!(async types => every_type_matches_server_text: pg15, pg16, pg17, pg18);
per_major!(async numbers => random_numbers_match_server_text: pg15, pg16, pg17, pg18);

/// Extension types (contrib's `citext` and `ltree`, on the majors that
/// ship contrib), known by their extension: a look-alike type of the same
/// name in another schema is not read as one.
async fn extensions(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    cluster.psql(
        "create extension citext; create extension ltree; create extension hstore;
         create table t_ext (id int, ci citext, lt ltree, alt ltree[], aci citext[], hs hstore, ahs hstore[]);
         insert into t_ext values
           (1, 'MiXeD Case', 'Top.Science.Astronomy', '{a.b,NULL,c}', '{A,b,NULL}',
              hstore(array['a', 'b c', 'q\"uote', 'empty'], array['1', null, 'back\\slash', '']),
              array['x=>y'::hstore, null]),
           (2, '', '', '{}', '{}', '', '{}'),
           (3, repeat('é', 3000), (select string_agg('l' || g, '.')::ltree from generate_series(1, 300) g),
              array['x_y.z1'::ltree], array[repeat('Q', 50)::citext],
              (select hstore(array_agg('k' || g), array_agg(case when g % 7 = 0 then null else repeat('v', g) end))
                 from generate_series(1, 400) g), null),
           (4, null, null, null, null, null, null);
         create schema fake;
         create type fake.citext as (a int);
         create table t_fake (id int, c fake.citext);
         insert into t_fake values (1, row(5)), (2, row(-3));",
    )?;
    cluster.checkpoint()?;
    let (rows, _) = common::check_table(&cluster, "t_ext").await?;
    ensure!(rows == 4, "{rows} rows");
    // A composite named citext is read as the composite it is (its
    // record text), not as text: the server's text agrees.
    let (rows, _) = common::check_table(&cluster, "t_fake").await?;
    ensure!(rows == 2, "{rows} rows of t_fake");
    Ok(())
}

per_major!(async extensions => extension_types_match_server_text: pg15, pg17, pg18);

/// PostGIS `geometry`, `geography` and `geometry[]` (15: Debian's
/// PostGIS): every stored shape decodes to the EWKB whose hex is the
/// server's text, and to the ISO WKB `ST_AsBinary` gives, which is what
/// ClickHouse receives.
async fn postgis(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    ensure!(
        all_types::has_postgis(&cluster)?,
        "PostGIS is not installed for {major}: scripts/setup installs postgresql-15-postgis-3"
    );
    cluster.psql(all_types::POSTGIS_SQL)?;
    cluster.checkpoint()?;
    let (rows, toast) = common::check_table(&cluster, "t_geo").await?;
    ensure!(rows == 24, "{rows} rows");
    let desc = common::describe(&cluster, "t_geo").await?;
    let decoder = walshadow_rows::RowDecoder::new(&desc)?;
    let ours = common::decode_file(
        &decoder,
        &walshadow_testkit::relation_file(&cluster, "'t_geo'::regclass")?,
        &toast,
    )?;
    cluster.psql(
        "create view v_geo as select ctid, encode(ST_AsBinary(g), 'hex') as g, encode(ST_AsBinary(gg), 'hex') as gg from t_geo;",
    )?;
    let columns = ["g".to_string(), "gg".to_string()];
    let theirs = walshadow_testkit::server_text(&cluster, "v_geo", &columns)?;
    let iso: Vec<Vec<Option<String>>> = ours
        .iter()
        .map(|r| {
            [1, 2]
                .iter()
                .map(|&i| match r.get(i) {
                    Some(walshadow_rows::Value::Geometry(e)) => Some(
                        walshadow_rows::geometry::ewkb_to_iso_wkb(e)
                            .map(|w| w.iter().map(|b| format!("{b:02x}")).collect())
                            .unwrap_or_else(|e| format!("error: {e}")),
                    ),
                    _ => None,
                })
                .collect()
        })
        .collect();
    walshadow_testkit::assert_same_text(
        "t_geo (ST_AsBinary)",
        &columns,
        &iso,
        Clone::clone,
        &theirs,
    )?;
    Ok(())
}

per_major!(async postgis => postgis_matches_server_text_and_st_asbinary: pg15);

/// pgvector's `vector` and `halfvec` (on the majors whose test install
/// ships it): the
/// shortest float4 text `vector_out` writes, a vector long enough to be
/// compressed or TOASTed, NULL.
async fn vectors(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    cluster.psql(
        "create extension vector;
         create table t_vec (id int, v vector, v3 vector(3));
         insert into t_vec values
           (1, '[1,2.5,-3]', '[0.1,1e-30,3.4e38]'),
           (2, (select array_agg(g::real / 3)::vector from generate_series(1, 2000) g), null),
           (3, null, '[-0,0,1]');",
    )?;
    // halfvec came with pgvector 0.7 (pgserver's 16 has an older one).
    if cluster.has_type("halfvec")? {
        cluster.psql(
            "alter table t_vec add column h halfvec;
             update t_vec set h = case id
               when 1 then '[0.333,65504,-0.0001]'
               when 2 then (select array_agg(g::real / 3)::halfvec from generate_series(1, 1000) g)
               else '[0.00000006,-0]' end;
             vacuum full t_vec;",
        )?;
    }
    if cluster.has_type("sparsevec")? {
        cluster.psql(
            "alter table t_vec add column s sparsevec;
             update t_vec set s = case id
               when 1 then '{1:1.5,3:-0.25,30522:1e-30}/30522'
               when 2 then (select format('{%s}/100000', string_agg(format('%s:%s', g * 7, g / 3.0), ','))
                              from generate_series(1, 2000) g)::sparsevec
               else '{}/3' end;
             vacuum full t_vec;",
        )?;
    }
    cluster.checkpoint()?;
    let (rows, _) = common::check_table(&cluster, "t_vec").await?;
    ensure!(rows == 3, "{rows} rows");
    Ok(())
}

per_major!(async vectors => pgvector_matches_server_text: pg16, pg18);
