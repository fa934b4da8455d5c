//! Long values: compressed inline (pglz; lz4 on 15, whose build has it),
//! moved out of line compressed and uncompressed. The TOAST table's heap
//! file feeds `ToastChunks`, the main table is decoded against it, and
//! every value equals the server's text; without the chunks, the pointers
//! are reported unresolved, naming the value.

use anyhow::{Result, ensure};
use walshadow_rows::{NoToast, RowDecoder, RowError, ToastChunk, ToastChunks, TupleRef};
use walshadow_testkit::per_major;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};

mod common;

async fn run(major: PgMajor) -> Result<()> {
    let cluster = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off"))?;
    let lz4 = major == PgMajor::V15;
    cluster.psql(
        "create table t_toast (id int primary key, tx text, by bytea, jb jsonb, arr int[],
                               ext text, lz text, lz_ext text, small text);
         alter table t_toast alter column ext set storage external;",
    )?;
    if lz4 {
        cluster.psql(
            "alter table t_toast alter column lz set compression lz4,
                                 alter column lz_ext set compression lz4",
        )?;
    }
    // Half-compressible text: long enough to stay out of line once compressed.
    let mixed =
        "(select string_agg(md5(g::text) || repeat('-', 32), '') from generate_series(1, 3000) g)";
    cluster.psql(&format!(
        "insert into t_toast values
           (1, repeat('abcdefgh', 1000), decode(repeat('00ff', 5000), 'hex'),
            (select jsonb_object_agg('k' || g, repeat('v', g % 50)) from generate_series(1, 3000) g),
            array(select generate_series(1, 30000)),
            repeat('x', 10000), repeat('lz4 data ', 1000), {mixed}, 'inline'),
           (2, {mixed}, (select string_agg(decode(md5(g::text), 'hex'), ''::bytea) from generate_series(1, 3000) g),
            '[1, 2]', '{{{{1,2}},{{3,NULL}}}}', 'short', 'short', 'short', 'x'),
           (3, null, null, null, null, null, null, null, null),
           (4, repeat('é', 5000), null, (select jsonb_agg(g) from generate_series(1, 5000) g),
            null, {mixed}, null, repeat('é', 30000), '')"
    ))?;
    cluster.checkpoint()?;

    // What the server says it stored: the forms this test must cover.
    let forms = cluster.query_one(
        "select count(*) filter (where pg_column_compression(tx) = 'pglz' and pg_column_size(tx) < 2000),
                count(*) filter (where pg_column_compression(tx) = 'pglz' and pg_column_size(tx) > 2100),
                count(*) filter (where pg_column_compression(by) is null and pg_column_size(by) > 2100),
                count(*) filter (where pg_column_compression(ext) is null and pg_column_size(ext) > 2100),
                count(*) filter (where pg_column_compression(lz) = 'lz4'),
                count(*) filter (where pg_column_compression(lz_ext) = 'lz4' and pg_column_size(lz_ext) > 2100)
           from t_toast",
    )?;
    let forms: Vec<i64> = forms
        .split('|')
        .map(|s| s.trim().parse().unwrap_or(-1))
        .collect();
    ensure!(
        forms[..4].iter().all(|n| *n >= 1),
        "pglz inline, pglz external, uncompressed external (x2) expected: {forms:?}"
    );
    if lz4 {
        ensure!(
            forms[4] >= 1 && forms[5] >= 1,
            "lz4 inline and external expected: {forms:?}"
        );
    }

    // The TOAST table's tuples → chunks.
    let desc = common::describe(&cluster, "t_toast").await?;
    let toast_relid = desc
        .toast_relid
        .ok_or_else(|| anyhow::anyhow!("no TOAST table"))?;
    let toast_file = walshadow_testkit::relation_file(&cluster, &toast_relid.to_string())?;
    let mut chunks = ToastChunks::new();
    let mut first_value = None;
    for t in walshadow_testkit::heap_tuples(&toast_file)? {
        let tuple = TupleRef::from_heap_tuple(&t)?;
        first_value.get_or_insert(ToastChunk::from_tuple(tuple)?.chunk_id);
        chunks.add_chunk_tuple(toast_relid, tuple)?;
    }
    let toasted_rows = cluster.query_one(&format!(
        "select count(distinct chunk_id), count(*), sum(octet_length(chunk_data)) from pg_toast.pg_toast_{}",
        desc.oid
    ))?;
    ensure!(
        toasted_rows
            == format!(
                "{}|{}|{}",
                chunks.value_count(),
                chunks.chunk_count(),
                chunks.bytes()
            ),
        "server has {toasted_rows} TOAST values|chunks|bytes, we read {}|{}|{}",
        chunks.value_count(),
        chunks.chunk_count(),
        chunks.bytes()
    );
    ensure!(
        chunks.value_count() >= 5,
        "{} TOAST values",
        chunks.value_count()
    );

    let (rows, loaded) = common::check_table(&cluster, "t_toast").await?;
    ensure!(rows == 4 && loaded.bytes() == chunks.bytes());

    // Without the chunks: unresolved, naming the TOAST relation.
    let decoder = RowDecoder::new(&desc)?;
    let file = walshadow_testkit::relation_file(&cluster, "'t_toast'::regclass")?;
    let tuples = walshadow_testkit::heap_tuples(&file)?;
    let mut unresolved = 0;
    for t in &tuples {
        match decoder.decode(TupleRef::from_heap_tuple(t)?, &NoToast) {
            Err(RowError::UnresolvedToast { toast_relid: r, .. }) if r == toast_relid => {
                unresolved += 1
            }
            Err(e) => anyhow::bail!("unexpected error {e}"),
            Ok(_) => {}
        }
    }
    ensure!(unresolved >= 3, "{unresolved} rows with unresolved TOAST");

    // One value gone: the row holding it names it; the others still decode.
    let gone = first_value.ok_or_else(|| anyhow::anyhow!("no TOAST tuples"))?;
    let mut partial = chunks.clone();
    let freed = partial.remove_value(toast_relid, gone);
    ensure!(freed > 0 && partial.bytes() == chunks.bytes() - freed);
    let mut naming = 0;
    for t in &tuples {
        match decoder.decode(TupleRef::from_heap_tuple(t)?, &partial) {
            Err(RowError::UnresolvedToast {
                value_id, column, ..
            }) => {
                ensure!(
                    value_id == gone,
                    "column {column}: value {value_id}, removed {gone}"
                );
                naming += 1;
            }
            Err(e) => anyhow::bail!("unexpected error {e}"),
            Ok(_) => {}
        }
    }
    ensure!(naming == 1, "{naming} rows miss the removed value");
    Ok(())
}

per_major!(async run => toast_and_compression_match_server_text: pg15, pg16, pg17, pg18);
