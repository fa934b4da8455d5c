//! Column rules on PostgreSQL 15 and 18: a table with columns walshadow
//! cannot decode (`tsquery`, a composite, `int4multirange`) streams once the
//! operator says so, through every path — a `copy` load, a `base_backup`
//! walk and the WAL — with the same columns left out, and says which:
//!
//! - `exclude_columns` leaves named columns out whatever their type;
//!   `unsupported_columns = "skip"` leaves out the undecodable ones;
//! - the ClickHouse tables lack them, `status` and `table list` name them
//!   with why, the log warns of an exclusion naming no column;
//! - a config-table row's `exclude_columns` and `unsupported_columns` do
//!   the same for an opted-in table, and an UPDATE of them applies at its
//!   commit (a column no longer excluded is added, filled from then on);
//! - contrib's `citext` and `ltree` (known by their extension) stream as
//!   their text through a `copy` load and the WAL;
//! - the default still stops a table with such a column, naming the column
//!   and both options; excluding a replica identity column stops the table
//!   with `column_rules`.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Result, ensure};
use common::loads::wait_loaded;
use common::{BIN, StreamHarness, col, same};
use walshadow_testkit::PgMajor;

const CATCH_UP: Duration = Duration::from_secs(180);

const CONFIG: &str = r#"
[backfill]
backup_checkpoint = "fast"

[table."public.shapes"]
initial_load = "copy"
exclude_columns = ["secret", "nope"]
unsupported_columns = "skip"

[table."public.walked"]
initial_load = "base_backup"
unsupported_columns = "skip"

[table."public.keyed"]
exclude_columns = ["id"]

[table."public.plain"]

[table."public.tagged"]
initial_load = "copy"
"#;

/// The ClickHouse columns of table `name`, in order.
fn ch_columns(h: &StreamHarness, name: &str) -> Result<Vec<String>> {
    let out = h.ch.query(&format!(
        "SELECT name FROM system.columns WHERE database = 'app' AND table = '{name}' ORDER BY position"
    ))?;
    Ok(out.lines().map(str::to_owned).collect())
}

fn left_out(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "columns", &[], CONFIG)?;
    h.source.psql(
        "create extension citext; create extension ltree;
         create table tagged (id int primary key, ci citext, lt ltree);
         insert into tagged select g, 'Name ' || g, ('top.n' || g)::ltree from generate_series(1, 50) g;
         create type pair as (a int, b text);
         create table shapes (id int primary key, p tsquery, note text, r int4multirange, secret text, n int);
         insert into shapes select g, to_tsquery('simple', 'w' || g), 'note ' || g, int4multirange(int4range(g, g + 10)), 'pw' || g, g % 13
           from generate_series(1, 600) g;
         create table walked (id int primary key, c pair, v text);
         insert into walked select g, row(g, 'x')::pair, 'v' || g from generate_series(1, 400) g;
         delete from walked where id % 10 = 0;
         create table keyed (id int primary key, v text);
         insert into keyed values (1, 'a');
         create table plain (id int primary key, p tsquery);
         insert into plain values (1, 'a & b');",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.shapes")?;
    wait_loaded(&mut h, "public.walked")?;
    wait_loaded(&mut h, "public.tagged")?;
    // Then the WAL: updates of left-out columns only, of kept ones, deletes
    // and inserts.
    h.source.psql(
        "update shapes set p = 'z', secret = 'changed' where id % 3 = 0;
         update shapes set note = 'updated', r = int4multirange(int4range(1, 2)) where id % 5 = 0;
         delete from shapes where id % 7 = 0;
         insert into shapes select g, 'late', 'late', null, 'x', g from generate_series(601, 700) g;
         update walked set c = row(0, 'y')::pair, v = 'w' where id % 4 = 0;
         insert into walked values (1000, null, 'new');
         delete from walked where id % 9 = 0;
         update tagged set ci = upper(ci::text), lt = lt || 'leaf' where id % 2 = 0;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal(
        "public.shapes",
        "shapes",
        &[same("id"), same("note"), same("n")],
    )?;
    ensure!(n > 600, "{n} rows of shapes");
    h.assert_equal("public.walked", "walked", &[same("id"), same("v")])?;
    // Extension types (known to the shadow by their extension) stream as
    // their text, through the load and the WAL.
    h.assert_equal(
        "public.tagged",
        "tagged",
        &[same("id"), same("ci"), same("lt")],
    )?;

    let shapes = ch_columns(&h, "shapes")?;
    for gone in ["p", "r", "secret"] {
        ensure!(
            !shapes.iter().any(|c| c == gone),
            "ClickHouse table shapes has {gone}: {shapes:?}"
        );
    }
    ensure!(
        shapes.iter().any(|c| c == "note"),
        "shapes lost note: {shapes:?}"
    );
    ensure!(
        !ch_columns(&h, "walked")?.iter().any(|c| c == "c"),
        "walked has c"
    );

    let status = h.status_json()?;
    let shown = &status["tables"]["public.shapes"]["left_out"];
    let names: Vec<&str> = shown
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    ensure!(names == ["p", "r", "secret"], "status left_out: {shown}");
    ensure!(
        shown["secret"] == "exclude_columns"
            && shown["p"].as_str().is_some_and(|w| w.contains("tsquery")),
        "status left_out reasons: {shown}"
    );
    let row = h.table_state("public.walked")?;
    ensure!(
        row["state"] == "streaming" && row["left_out"]["c"].as_str().is_some(),
        "table list: {row}"
    );
    let log = h.run_log();
    ensure!(
        log.contains("exclude_columns names a column the table does not have")
            && log.contains("nope"),
        "no warning of the unknown exclusion:\n{log}"
    );

    // The config table's equivalent: an opt-in with rules, then the rules
    // changed by an UPDATE of its row, applied at that commit.
    h.source.psql(
        "create table opted (id int primary key, r int4multirange, secret text, v text);
         insert into opted select g, int4multirange(int4range(g, g + 1)), 's' || g, 'v' || g from generate_series(1, 200) g;
         insert into walshadow.tables (schema_name, table_name, initial_load, exclude_columns, unsupported_columns)
           values ('public', 'opted', 'copy', '{secret}', 'skip');",
    )?;
    wait_loaded(&mut h, "public.opted")?;
    h.source
        .psql("update opted set v = 'w', secret = 'hidden' where id % 2 = 0;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.opted", "opted", &[same("id"), same("v")])?;
    let opted = ch_columns(&h, "opted")?;
    ensure!(
        !opted.iter().any(|c| c == "secret" || c == "r"),
        "opted: {opted:?}"
    );
    // The row's rules outlive a restart (kept in progress.json).
    h.stop_run()?;
    h.start_run()?;
    h.source.psql(
        "insert into opted values (900, int4multirange(int4range(1, 3)), 'after restart', 'r');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.opted", "opted", &[same("id"), same("v")])?;
    ensure!(
        !ch_columns(&h, "opted")?.iter().any(|c| c == "secret"),
        "secret came back after a restart"
    );
    h.source.psql(
        "update walshadow.tables set exclude_columns = null where table_name = 'opted';
         update opted set secret = 'shown ' || id where id <= 50;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let opted = ch_columns(&h, "opted")?;
    ensure!(
        opted.iter().any(|c| c == "secret") && !opted.iter().any(|c| c == "r"),
        "secret is back, r still skipped: {opted:?}"
    );
    // Rows written since carry it; older ones wait for a resync.
    let shown = h.ch.query(
        "SELECT count() FROM app.opted FINAL WHERE _is_deleted = 0 AND secret LIKE 'shown %'",
    )?;
    ensure!(shown.trim() == "50", "{shown} rows with secret, wanted 50");
    let status = h.status_json()?;
    let left: Vec<&str> = status["tables"]["public.opted"]["left_out"]
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    ensure!(left == ["r"], "opted left_out: {left:?}");

    // The default stops the table, naming the column and the options.
    let plain = h.table_state("public.plain")?;
    let detail = plain["detail"].as_str().unwrap_or_default();
    ensure!(
        plain["state"] == "stopped"
            && detail.contains("column p")
            && detail.contains("exclude_columns")
            && detail.contains("unsupported_columns"),
        "plain: {plain}"
    );
    // A key column cannot be left out.
    let keyed = h.table_state("public.keyed")?;
    let detail = keyed["detail"].as_str().unwrap_or_default();
    ensure!(
        keyed["state"] == "stopped"
            && detail.contains("replica identity")
            && detail.contains("\"id\""),
        "keyed: {keyed}"
    );
    ensure!(
        status["tables"]["public.keyed"]["stopped"]["code"] == "column_rules",
        "keyed's code: {}",
        status["tables"]["public.keyed"]
    );
    h.stop_run()?;
    Ok(())
}

per_major!(left_out => columns_left_out_by_rules_stream_on_every_path: pg15, pg18);

/// pgvector's `vector` and `halfvec` (16 and 18 ship it here) into `Array(Float32)`,
/// through a `copy` load and the WAL; a NULL vector is `[]`.
fn vectors(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "vectors",
        &[],
        "[table.\"public.emb\"]\ninitial_load = \"copy\"\n",
    )?;
    h.source.psql(
        "create extension vector;
         create table emb (id int primary key, v vector(3), w vector);
         insert into emb select g, format('[%s,%s,-1]', g, g * 0.5)::vector, null from generate_series(1, 100) g;",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.emb")?;
    h.source.psql(
        "update emb set v = '[0,0,0]', w = '[1.5,2.5]' where id % 3 = 0;
         insert into emb values (500, '[7,8,9]', (select array_agg(g * 0.25)::vector from generate_series(1, 1000) g));
         delete from emb where id % 10 = 0;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let text = |c: &str| {
        col(
            &format!("coalesce(array_to_string({c}::real[], ','), '')"),
            &format!("arrayStringConcat(arrayMap(x -> toString(x), {c}), ',')"),
        )
    };
    let mut cols = vec![same("id"), text("v"), text("w")];
    // halfvec came with pgvector 0.7 (pgserver's 16 has an older one).
    if h.source
        .query_one("select to_regtype('halfvec') is not null")?
        .trim()
        == "t"
    {
        h.source.psql(
            "alter table emb add column hv halfvec;
             update emb set hv = '[0.5,-2,1024]' where id % 4 = 0;",
        )?;
        h.wait_caught_up(CATCH_UP)?;
        cols.push(text("hv"));
    }
    h.assert_equal("public.emb", "emb", &cols)?;
    let ty = h.ch.query(
        "SELECT type FROM system.columns WHERE database = 'app' AND table = 'emb' AND name = 'v'",
    )?;
    ensure!(ty.trim() == "Array(Float32)", "v is {ty}");
    h.stop_run()?;
    Ok(())
}

per_major!(vectors => pgvector_streams_as_float32_arrays: pg16, pg18);
