//! Column rules on PostgreSQL 15 and 18: a table with columns walshadow
//! cannot decode (`jsonpath`, a composite holding one, `jsonpath[]`) streams once the
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

[table."public.narrow"]
initial_load = "copy"
include_columns = ["v"]

[table."public.tagged_walk"]
initial_load = "base_backup"
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
        "create extension citext; create extension ltree; create extension hstore;
         create table tagged (id int primary key, ci citext, lt ltree, hs hstore, ha hstore[]);
         insert into tagged select g, 'Name ' || g, ('top.n' || g)::ltree,
           hstore(array['k' || g, 'n', 'q\"'], array['v' || g, null, '']),
           array[hstore('a', g::text), null, hstore('b', null)]
           from generate_series(1, 50) g;
         create type pair as (a int, b jsonpath);
         create table shapes (id int primary key, p jsonpath, note text, r jsonpath[], secret text, n int);
         insert into shapes select g, ('$.w' || g)::jsonpath, 'note ' || g, array[('$.r' || g)::jsonpath], 'pw' || g, g % 13
           from generate_series(1, 600) g;
         create table walked (id int primary key, c pair, v text);
         insert into walked select g, row(g, '$.x')::pair, 'v' || g from generate_series(1, 400) g;
         delete from walked where id % 10 = 0;
         create table keyed (id int primary key, v text);
         insert into keyed values (1, 'a');
         create table plain (id int primary key, p jsonpath);
         insert into plain values (1, '$.a');
         create table tagged_walk as select * from tagged;
         alter table tagged_walk add primary key (id);
         create table narrow (id int primary key, v text, secret text, p jsonpath);
         insert into narrow select g, 'v' || g, 's' || g, '$.x' from generate_series(1, 100) g;",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.shapes")?;
    wait_loaded(&mut h, "public.walked")?;
    wait_loaded(&mut h, "public.tagged")?;
    wait_loaded(&mut h, "public.narrow")?;
    wait_loaded(&mut h, "public.tagged_walk")?;
    // Then the WAL: updates of left-out columns only, of kept ones, deletes
    // and inserts.
    h.source.psql(
        "update shapes set p = '$.z', secret = 'changed' where id % 3 = 0;
         update shapes set note = 'updated', r = '{$.a}'::jsonpath[] where id % 5 = 0;
         delete from shapes where id % 7 = 0;
         insert into shapes select g, '$.late', 'late', null, 'x', g from generate_series(601, 700) g;
         update walked set c = row(0, '$.y')::pair, v = 'w' where id % 4 = 0;
         insert into walked values (1000, null, 'new');
         delete from walked where id % 9 = 0;
         update tagged set ci = upper(ci::text), lt = lt || 'leaf' where id % 2 = 0;
         update tagged set hs = hs || hstore('added', 'x') - 'n'::text where id % 3 = 0;
         update tagged set hs = null where id = 5;
         update tagged set ha = array[hstore('c', 'd')] where id % 5 = 0;
         update tagged set ha = null where id = 6;
         alter table tagged add column hd hstore default hstore(array['z', 'n'], array['1', null]);
         update tagged set hd = hd || hstore('w', 'x') where id % 4 = 0;
         update tagged_walk set ci = lower(ci::text), hs = hs || hstore('walked', null) where id % 3 = 0;
         update narrow set v = 'w' || id, secret = 'changed' where id % 3 = 0;
         update narrow set secret = 'only this' where id % 5 = 0;
         delete from narrow where id % 7 = 0;
         insert into narrow values (500, 'late', 'x', '$.y');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal(
        "public.shapes",
        "shapes",
        &[same("id"), same("note"), same("n")],
    )?;
    ensure!(n > 600, "{n} rows of shapes");
    h.assert_equal("public.walked", "walked", &[same("id"), same("v")])?;
    // include_columns: the named columns and the key, nothing else (an
    // undecodable column not named does not hold the table up).
    h.assert_equal("public.narrow", "narrow", &[same("id"), same("v")])?;
    ensure!(
        ch_columns(&h, "narrow")?
            .iter()
            .filter(|c| !c.starts_with('_'))
            .eq(["id", "v"].iter()),
        "narrow: {:?}",
        ch_columns(&h, "narrow")?
    );
    // Extension types (known to the shadow by their extension) stream as
    // their text, through the load and the WAL.
    // hstore as Map(String, Nullable(String)): the pairs, sorted. `hd`
    // was added with a default, which rows written before take from
    // ClickHouse's DEFAULT.
    let pairs = |c: &str| {
        col(
            &format!(
                "array_to_string(array(select p from (select key || '=' || coalesce(value, '<null>') as p from each({c})) e order by p collate \"C\"), ',')"
            ),
            &format!(
                "arrayStringConcat(arraySort(arrayMap((k, v) -> concat(k, '=', ifNull(v, '<null>')), mapKeys({c}), mapValues({c}))), ',')"
            ),
        )
    };
    // hstore[]: Array(Map(String, Nullable(String))), a NULL element {}.
    let hstores = col(
        "coalesce(array_to_string(array(select coalesce((select string_agg(key || '=' || coalesce(value, '<null>'), ',' order by key) from each(e)), '') \
           from unnest(ha) with ordinality u(e, i) order by i), ';'), '')",
        "arrayStringConcat(arrayMap(m -> arrayStringConcat(arraySort(arrayMap((k, v) -> concat(k, '=', ifNull(v, '<null>')), mapKeys(m), mapValues(m))), ','), ha), ';')",
    );
    h.assert_equal(
        "public.tagged",
        "tagged",
        &[
            same("id"),
            same("ci"),
            same("lt"),
            pairs("hs"),
            pairs("hd"),
            hstores.clone(),
        ],
    )?;
    // The same types through a base_backup walk.
    h.assert_equal(
        "public.tagged_walk",
        "tagged_walk",
        &[same("id"), same("ci"), same("lt"), pairs("hs"), hstores],
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
            && shown["p"].as_str().is_some_and(|w| w.contains("jsonpath")),
        "status left_out reasons: {shown}"
    );
    let row = h.table_state("public.walked")?;
    ensure!(
        row["state"] == "streaming" && row["left_out"]["c"].as_str().is_some(),
        "table list: {row}"
    );
    let log = h.run_log();
    ensure!(
        log.contains("names a column the table does not have") && log.contains("nope"),
        "no warning of the unknown exclusion:\n{log}"
    );

    // The config table's equivalent: an opt-in with rules, then the rules
    // changed by an UPDATE of its row, applied at that commit.
    h.source.psql(
        "create table opted (id int primary key, r jsonpath[], secret text, v text);
         insert into opted select g, array[('$.o' || g)::jsonpath], 's' || g, 'v' || g from generate_series(1, 200) g;
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
    h.source
        .psql("insert into opted values (900, '{$.x}'::jsonpath[], 'after restart', 'r');")?;
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
    // include_columns in a row: the named column and the key only.
    h.source.psql(
        "create table opted_narrow (id int primary key, v text, secret text, p jsonpath);
         insert into opted_narrow select g, 'v' || g, 's' || g, '$.z' from generate_series(1, 80) g;
         insert into walshadow.tables (schema_name, table_name, initial_load, include_columns)
           values ('public', 'opted_narrow', 'copy', '{v}');",
    )?;
    wait_loaded(&mut h, "public.opted_narrow")?;
    h.source
        .psql("update opted_narrow set v = 'u', secret = 'no' where id % 2 = 0;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal(
        "public.opted_narrow",
        "opted_narrow",
        &[same("id"), same("v")],
    )?;
    let narrow = ch_columns(&h, "opted_narrow")?;
    ensure!(
        narrow
            .iter()
            .filter(|c| !c.starts_with('_'))
            .eq(["id", "v"].iter()),
        "opted_narrow: {narrow:?}"
    );

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
        "[backfill]\nbackup_checkpoint = \"fast\"\n[table.\"public.emb\"]\ninitial_load = \"copy\"\n\
         [table.\"public.emb_walk\"]\ninitial_load = \"base_backup\"\n",
    )?;
    h.source.psql(
        "create extension vector;
         create table emb (id int primary key, v vector(3), w vector, vs vector[]);
         insert into emb select g, format('[%s,%s,-1]', g, g * 0.5)::vector, null,
           case g % 3 when 0 then null when 1 then array['[1,2]'::vector, null, '[3]'] else '{}' end
           from generate_series(1, 100) g;
         create table emb_walk as select * from emb;
         alter table emb_walk add primary key (id);",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.emb")?;
    wait_loaded(&mut h, "public.emb_walk")?;
    h.source.psql(
        "update emb set v = '[0,0,0]', w = '[1.5,2.5]' where id % 3 = 0;
         insert into emb values (500, '[7,8,9]', (select array_agg(g * 0.25)::vector from generate_series(1, 1000) g));
         update emb set vs = array[null, '[0.5]'::vector] where id % 4 = 0;
         delete from emb where id % 10 = 0;
         alter table emb add column vd vector[] default array['[1,-1]'::vector];
         update emb set vd = null where id % 7 = 0;
         update emb_walk set v = '[1,1,1]' where id % 9 = 0;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let text = |c: &str| {
        col(
            &format!("coalesce(array_to_string({c}::real[], ','), '')"),
            &format!("arrayStringConcat(arrayMap(x -> toString(x), {c}), ',')"),
        )
    };
    // Arrays of vectors: Array(Array(Float32)), a NULL element [].
    let vectors = |c: &str| {
        col(
            &format!(
                "coalesce(array_to_string(array(select '[' || coalesce(array_to_string(e::real[], ','), '') || ']' \
                   from unnest({c}) with ordinality u(e, i) order by i), ';'), '')"
            ),
            &format!(
                "arrayStringConcat(arrayMap(e -> concat('[', arrayStringConcat(arrayMap(x -> toString(x), e), ','), ']'), {c}), ';')"
            ),
        )
    };
    let mut cols = vec![
        same("id"),
        text("v"),
        text("w"),
        vectors("vs"),
        vectors("vd"),
    ];
    // halfvec came with pgvector 0.7 (pgserver's 16 has an older one).
    if h.source.has_type("halfvec")? {
        h.source.psql(
            "alter table emb add column hv halfvec;
             update emb set hv = '[0.5,-2,1024]' where id % 4 = 0;",
        )?;
        h.wait_caught_up(CATCH_UP)?;
        cols.push(text("hv"));
        // sparsevec, dense in ClickHouse (zeros between its dimensions).
        h.source.psql(
            "alter table emb add column sv sparsevec;
             update emb set sv = '{2:1.5,4:-3}/6' where id % 5 = 0;
             update emb set sv = '{}/2' where id = 7;",
        )?;
        h.wait_caught_up(CATCH_UP)?;
        cols.push(col(
            "coalesce(array_to_string(sv::vector::real[], ','), '')",
            "arrayStringConcat(arrayMap(x -> toString(x), sv), ',')",
        ));
    }
    h.assert_equal("public.emb", "emb", &cols)?;
    // The same types through a base_backup walk.
    h.assert_equal(
        "public.emb_walk",
        "emb_walk",
        &[same("id"), text("v"), text("w"), vectors("vs")],
    )?;
    let ty = h.ch.query(
        "SELECT type FROM system.columns WHERE database = 'app' AND table = 'emb' AND name = 'v'",
    )?;
    ensure!(ty.trim() == "Array(Float32)", "v is {ty}");
    let ty = h.ch.query(
        "SELECT type FROM system.columns WHERE database = 'app' AND table = 'emb' AND name = 'vs'",
    )?;
    ensure!(ty.trim() == "Array(Array(Float32))", "vs is {ty}");
    h.stop_run()?;
    Ok(())
}

per_major!(vectors => pgvector_streams_as_float32_arrays: pg16, pg18);

const VALUES_CONFIG: &str = r#"
[backfill]
backup_checkpoint = "fast"

[table."public.odd"]
initial_load = "copy"
out_of_range = "null"
out_of_range_columns = { born = "clamp", amount = "string" }

[table."public.walked_odd"]
initial_load = "base_backup"
out_of_range = "clamp"
out_of_range_columns = { seen = "null" }

[table."public.strict"]

[table."public.null_key"]
out_of_range = "null"
"#;

/// `date` clamped into `Date32`'s 1900–2299, as PostgreSQL text.
const BORN_CLAMPED: &str = "least(greatest(born, '1900-01-01'::date), '2299-12-31'::date)";
/// `seen` where `DateTime64` holds it, else NULL, as ClickHouse prints it.
const SEEN_OR_NULL: &str = "case when seen between '1900-01-01 00:00:00+00' and '2299-12-31 23:59:59.999999+00' \
     then to_char(seen at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') end";

/// Values ClickHouse cannot hold (date and timestamp infinities, years
/// outside 1900–2299, numeric NaN) written as each column's
/// `out_of_range` says — clamped, NULL (array elements too), or
/// PostgreSQL's text — the same through a `copy` load, a `base_backup`
/// walk and the WAL; `status` and `table list` count them; the default
/// still stops a table naming the column and the options; `null` on a key
/// column is refused; a config-table row's policies apply to an opted-in
/// table and its check refuses a bad one.
fn out_of_range_values(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "outofrange", &[], VALUES_CONFIG)?;
    let odd_rows = |from: i32, to: i32| {
        format!(
            "insert into odd select g,
               case g % 5 when 0 then 'infinity' when 1 then '-infinity' when 2 then '1899-12-31'
                 when 3 then '2300-01-01' else '2020-02-29' end::date,
               case g % 4 when 0 then 'infinity' when 1 then '1800-01-01 00:00:00+00' when 2 then null
                 else '2021-06-01 12:34:56.789+00' end::timestamptz,
               case when g % 3 = 0 then 'NaN' else g * 1.25 end,
               array['2000-01-01', case when g % 2 = 0 then 'infinity' else '2010-05-05' end, null]::date[],
               case when g % 6 = 0 then 'NaN'::numeric else g / 10.0 end
             from generate_series({from}, {to}) g;"
        )
    };
    h.source.psql(&format!(
        "create table odd (id int primary key, born date not null, seen timestamptz,
           amount numeric(10,2), days date[], n numeric(6,1));
         {}
         create table walked_odd (id int primary key, born date not null, seen timestamp);
         insert into walked_odd select g,
           case g % 3 when 0 then 'infinity' when 1 then '0044-03-15 BC' else '1999-12-31' end::date,
           case g % 2 when 0 then '-infinity' else '2024-01-01 00:00:00' end::timestamp
         from generate_series(1, 300) g;
         create table strict (id int primary key, d date);
         insert into strict values (1, '2020-01-01');
         create table null_key (d date primary key, v text);
         insert into null_key values ('2020-01-01', 'a');",
        odd_rows(1, 300)
    ))?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.odd")?;
    wait_loaded(&mut h, "public.walked_odd")?;
    h.source.psql(&format!(
        "update odd set born = '3000-01-01', seen = '-infinity', days = '{{infinity}}' where id % 7 = 0;
         {}
         delete from odd where id % 11 = 0;
         alter table odd add column later date not null default 'infinity';
         update odd set later = '2024-05-05' where id % 13 = 0;
         update walked_odd set born = '-infinity', seen = 'infinity' where id % 5 = 0;
         alter table walked_odd add column since timestamp default '-infinity';
         update walked_odd set since = '2001-02-03 04:05:06' where id % 6 = 0;
         insert into strict values (2, 'infinity');",
        odd_rows(301, 400)
    ))?;
    h.wait_caught_up(CATCH_UP)?;
    let seen = col(SEEN_OR_NULL, "seen");
    let days = col(
        "array_to_string(array(select coalesce(case when d between '1900-01-01' and '2299-12-31' \
           then d::text end, 'NULL') from unnest(days) with ordinality u(d, i) order by i), ',')",
        "arrayStringConcat(arrayMap(x -> ifNull(toString(x), 'NULL'), days), ',')",
    );
    let n = h.assert_equal(
        "public.odd",
        "odd",
        &[
            same("id"),
            col(BORN_CLAMPED, "born"),
            seen.clone(),
            // string: PostgreSQL's own text, NaN included.
            col("amount::text", "amount"),
            days,
            col("nullif(n, 'NaN')", "toDecimalString(n, 1)"),
            // Added with a default ClickHouse cannot hold: rows written
            // before take it as the column's policy writes it (NULL).
            col("nullif(later, 'infinity')", "later"),
        ],
    )?;
    ensure!(n > 300, "{n} rows of odd");
    h.assert_equal(
        "public.walked_odd",
        "walked_odd",
        &[
            same("id"),
            col(BORN_CLAMPED, "born"),
            col(
                &SEEN_OR_NULL
                    .replace("+00'", "'")
                    .replace("seen at time zone 'UTC'", "seen"),
                "seen",
            ),
            // Added with a default of -infinity, clamped as the policy says.
            col(
                "to_char(least(greatest(since, '1900-01-01'), '2299-12-31 23:59:59.999999'), 'YYYY-MM-DD HH24:MI:SS.US')",
                "since",
            ),
        ],
    )?;
    let types = h.ch.query(
        "SELECT name, type FROM system.columns WHERE database = 'app' AND table = 'odd' \
         AND name IN ('born', 'amount', 'n') ORDER BY name FORMAT TSVRaw",
    )?;
    ensure!(
        types == "amount\tNullable(String)\nborn\tDate32\nn\tNullable(Decimal(6, 1))\n",
        "odd's types: {types}"
    );

    // Counted where an operator looks.
    let status = h.status_json()?;
    let replaced = status["tables"]["public.odd"]["values_replaced"]
        .as_u64()
        .unwrap_or(0);
    ensure!(
        replaced > 0,
        "status counts no replaced values: {}",
        status["tables"]["public.odd"]
    );
    let row = h.table_state("public.walked_odd")?;
    ensure!(
        row["values_replaced"].as_u64().unwrap_or(0) > 0,
        "table list counts none for the walked table: {row}"
    );
    ensure!(
        h.run_log().contains("out_of_range policies"),
        "no log line says values were replaced"
    );

    // The default stops the table at the value, naming the column and the
    // options; null on a key column is refused.
    let strict = h.table_state("public.strict")?;
    let detail = strict["detail"].as_str().unwrap_or_default();
    ensure!(
        strict["state"] == "stopped"
            && detail.contains("\"d\"")
            && detail.contains("out_of_range_columns"),
        "strict: {strict}"
    );
    let null_key = h.table_state("public.null_key")?;
    ensure!(
        null_key["state"] == "stopped"
            && null_key["detail"]
                .as_str()
                .is_some_and(|d| d.contains("replica identity") && d.contains("\"string\"")),
        "null_key: {null_key}"
    );

    // The config table's equivalent; its check refuses a policy it does
    // not know; an UPDATE of the row's policies applies at its commit.
    for bad in [
        r#"{"d": "zero"}"#,
        r#"{"d": ["clamp"]}"#,
        r#"{"d": []}"#,
        "[]",
    ] {
        ensure!(
            h.source
                .psql(&format!("insert into walshadow.tables (schema_name, table_name, out_of_range_columns) values ('public', 'bad', '{bad}');"))
                .is_err(),
            "the config table took out_of_range_columns {bad}"
        );
    }
    h.source.psql(
        "create table opted_odd (id int primary key, d date);
         insert into opted_odd values (1, 'infinity'), (2, '2020-01-01');
         insert into walshadow.tables (schema_name, table_name, initial_load, out_of_range_columns)
           values ('public', 'opted_odd', 'copy', '{\"d\": \"clamp\"}');",
    )?;
    wait_loaded(&mut h, "public.opted_odd")?;
    h.source.psql(
        "insert into opted_odd values (3, '-infinity');
         update walshadow.tables set out_of_range = 'null', out_of_range_columns = null where table_name = 'opted_odd';
         insert into opted_odd values (4, 'infinity'), (5, '1999-01-01');",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let got = h.ch.query(
        "SELECT id, ifNull(toString(d), 'NULL') FROM app.opted_odd FINAL WHERE _is_deleted = 0 ORDER BY id FORMAT TSVRaw",
    )?;
    ensure!(
        got == "1\t2299-12-31\n2\t2020-01-01\n3\t1900-01-01\n4\tNULL\n5\t1999-01-01\n",
        "opted_odd: {got}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(out_of_range_values => values_clickhouse_cannot_hold_follow_each_columns_policy: pg15, pg18);

const OPTIONS_CONFIG: &str = r#"
[table."public.parted"]
initial_load = "copy"
partition_by = "intDiv(b, 500)"
order_by = ["b", "a"]
settings = { index_granularity = 1024, min_bytes_for_wide_part = 0 }

[table."public.badorder"]
order_by = ["a", "v"]

[table."public.badpart"]
partition_by = "toYYYYMM(created)"
"#;

/// `system.tables`' partition key, sorting key and settings of `name`.
fn table_options(h: &StreamHarness, name: &str) -> Result<String> {
    h.ch.query(&format!(
        "SELECT partition_key, sorting_key, engine_full LIKE '%index_granularity = 1024%' \
         FROM system.tables WHERE database = 'app' AND name = '{name}' FORMAT TSVRaw"
    ))
}

/// A pinned table's `partition_by`, `order_by` and `settings` shape the
/// ClickHouse table walshadow creates — for its load, and again for the
/// table a resync makes — and rows that move between partitions (an
/// UPDATE of the key the partition is computed from), deletes and key
/// reordering keep the oracle; an `order_by` or a `partition_by` with a
/// column outside the replica identity stops its table (a delete would
/// not collapse the row, or land in another partition), naming why.
fn table_options_shape(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "tableopts", &[], OPTIONS_CONFIG)?;
    h.source.psql(
        "create table parted (a int, b int, created timestamptz not null, v text, primary key (a, b));
         insert into parted select g % 50, g, timestamptz '2024-01-01 00:00:00+00' + g * interval '7 hours', 'v' || g
           from generate_series(1, 2000) g;
         create table badorder (a int primary key, v text);
         insert into badorder values (1, 'x');
         create table badpart (a int primary key, created date);
         insert into badpart values (1, '2024-01-01');",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.parted")?;
    h.source.psql(
        "update parted set b = b + 100000, v = 'moved' where b % 3 = 0;
         delete from parted where b % 7 = 0;
         insert into parted values (7, 100000, '2030-06-01 00:00:00+00', 'late');
         update parted set v = 'same partition' where b % 5 = 0;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = [
        same("a"),
        same("b"),
        col(
            "to_char(created at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS')",
            "formatDateTime(created, '%Y-%m-%d %H:%i:%S')",
        ),
        same("v"),
    ];
    let n = h.assert_equal("public.parted", "parted", &cols)?;
    ensure!(n > 1500, "{n} rows of parted");
    let shape = table_options(&h, "parted")?;
    ensure!(
        shape == "intDiv(b, 500)\tb, a\t1\n",
        "parted's partition key, sorting key, settings: {shape:?}"
    );
    let parts = h.ch.query(
        "SELECT uniqExact(partition) FROM system.parts WHERE database = 'app' AND table = 'parted' AND active",
    )?;
    ensure!(
        parts.trim().parse::<u32>().unwrap_or(0) > 3,
        "parted has {parts} partitions"
    );

    // A resync makes the table again: with the same options.
    let uuid = |h: &StreamHarness| {
        h.ch.query("SELECT uuid FROM system.tables WHERE database = 'app' AND name = 'parted'")
    };
    let before = uuid(&h)?;
    h.cli_ok(&["table", "resync", "public.parted", "--config", h.config()])?;
    h.source
        .psql("update parted set v = 'after resync' where b % 11 = 0")?;
    walshadow_testkit::wait_until(CATCH_UP, "public.parted swapped in again", || {
        h.check_running()?;
        Ok(uuid(&h)? != before && h.table_state("public.parted")?["state"] == "streaming")
    })?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.parted", "parted", &cols)?;
    let shape = table_options(&h, "parted")?;
    ensure!(
        shape == "intDiv(b, 500)\tb, a\t1\n",
        "parted after its resync: {shape:?}"
    );

    let bad = h.table_state("public.badorder")?;
    let detail = bad["detail"].as_str().unwrap_or_default();
    ensure!(
        bad["state"] == "stopped"
            && detail.contains("order_by")
            && detail.contains("replica identity")
            && detail.contains("delete"),
        "badorder: {bad}"
    );
    // A partition key outside the replica identity would put a delete's
    // tombstone in another partition than its row.
    let bad = h.table_state("public.badpart")?;
    let detail = bad["detail"].as_str().unwrap_or_default();
    ensure!(
        bad["state"] == "stopped"
            && detail.contains("partition_by")
            && detail.contains("\"created\"")
            && detail.contains("REPLICA IDENTITY FULL"),
        "badpart: {bad}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(table_options_shape => a_pinned_tables_create_options_shape_its_clickhouse_table: pg15, pg18);

/// A composite type altered while a table of it streams: a field added
/// or dropped changes the text of every value of it (PostgreSQL writes the
/// type's fields as they are now), so the table is loaded again and every
/// row's `record_out` text stays equal, old rows and new.
fn composite_altered(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(
        BIN,
        major,
        "composite",
        &[],
        "[table.\"public.holder\"]\ninitial_load = \"copy\"\n",
    )?;
    h.source.psql(
        "create type tag as (k text);
         create type item as (sku text, qty int, t tag);
         create table holder (id int primary key, it item, its item[]);
         insert into holder select g, row('s' || g, g, row('t' || g)::tag)::item,
           array[row('a', 1, null)::item, null]
           from generate_series(1, 50) g;",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.holder")?;
    let cols = [
        same("id"),
        col("it::text", "it"),
        col(
            "coalesce(array_to_string(its::text[], '|', '<null>'), '')",
            "arrayStringConcat(arrayMap(x -> ifNull(x, '<null>'), its), '|')",
        ),
    ];
    let uuid = |h: &StreamHarness| {
        h.ch.query("SELECT uuid FROM system.tables WHERE database = 'app' AND name = 'holder'")
    };
    let mut before = uuid(&h)?;
    for alter in [
        "insert into holder values (100, row('before', 1, null)::item, null);
         alter type item add attribute note text;
         insert into holder values (101, row('added', 2, row('z')::tag, 'a note')::item,
           array[row('x', 3, null, 'n')::item]);
         update holder set it = row('upd', 9, null, 'n2')::item where id = 5;",
        // A type nested in the column's type.
        "alter type tag add attribute v int;
         insert into holder values (103, row('nested', 4, row('k', 7)::tag, null)::item, null);",
        "alter type item drop attribute qty;
         insert into holder values (102, row('dropped', row('q', 1)::tag, 'after')::item, null);
         update holder set it = row('upd2', null, 'n3')::item where id = 6;",
    ] {
        h.source.psql(alter)?;
        walshadow_testkit::wait_until(CATCH_UP, "holder loaded again", || {
            h.check_running()?;
            Ok(uuid(&h)? != before && h.table_state("public.holder")?["state"] == "streaming")
        })?;
        h.wait_caught_up(CATCH_UP)?;
        h.assert_equal("public.holder", "holder", &cols)?;
        before = uuid(&h)?;
    }
    ensure!(
        h.run_log().contains("gained or lost fields"),
        "the reload's reason is not in the log"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(composite_altered => a_composite_type_altered_while_streaming_stays_equal: pg15, pg18);

const SHAPE_CONFIG: &str = r#"
[backfill]
backup_checkpoint = "fast"

[table."public.shaped"]
initial_load = "copy"
rename_columns = { id = "ident", ts = "created_at" }
column_types = { doc = "JSON", ts = "DateTime64(3)", amount = "String", tags = "String" }

[table."public.walked_shape"]
initial_load = "base_backup"
rename_columns = { v = "value" }
column_types = { doc = "json", at = "DateTime64(0)" }

[table."public.not_object"]
column_types = { doc = "JSON" }

[table."public.bad_override"]
column_types = { n = "JSON" }
"#;

/// The ClickHouse `name type` lines of table `name`, in order.
fn ch_column_types(h: &StreamHarness, name: &str) -> Result<String> {
    h.ch.query(&format!(
        "SELECT name, type FROM system.columns WHERE database = 'app' AND table = '{name}' \
         AND name NOT LIKE '\\_%' ORDER BY position FORMAT TSVRaw"
    ))
}

/// Columns renamed (`rename_columns`) and given another ClickHouse type
/// (`column_types`: `JSON` for jsonb and json, `DateTime64(3)` and `(0)`
/// for timestamps, `String` for a numeric and an array) through a `copy`
/// load, a `base_backup` walk and the WAL, row by row; a source rename of
/// a column is followed; a document that is not an object stops its
/// table naming the column and the option; an override that does not fit
/// its column stops the table with `column_rules`; the config table's
/// columns do the same for an opted-in table, an UPDATE renames the
/// ClickHouse column at its commit, and its checks refuse a type or a
/// name walshadow does not take.
fn renamed_and_retyped(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "shaped", &[], SHAPE_CONFIG)?;
    let shaped_rows = |from: i32, to: i32| {
        format!(
            "insert into shaped select g,
               '2024-01-02 03:04:05.678901+00'::timestamptz + g * interval '1.001001 s',
               jsonb_build_object('k', g, 'nested', jsonb_build_object('x', g % 3), 'tag', 't' || g),
               g * 1.5, array['a', g::text, null], 'n' || g
             from generate_series({from}, {to}) g;"
        )
    };
    h.source.psql(&format!(
        "create table shaped (id int primary key, ts timestamptz, doc jsonb, amount numeric(12,3),
           tags text[], note text);
         {}
         create table walked_shape (id int primary key, v text, doc json, at timestamp);
         insert into walked_shape select g, 'v' || g, json_build_object('k', g, 'w', 'x' || g),
           '2001-02-03 04:05:06.789'::timestamp + g * interval '1 minute 0.5 s'
         from generate_series(1, 300) g;
         create table not_object (id int primary key, doc jsonb);
         insert into not_object values (1, '{{\"a\": 1}}');
         create table bad_override (id int primary key, n numeric);
         insert into bad_override values (1, 1);",
        shaped_rows(1, 300)
    ))?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.shaped")?;
    wait_loaded(&mut h, "public.walked_shape")?;
    h.source.psql(&format!(
        "{}
         update shaped set ts = ts + interval '0.0005 s', doc = doc || '{{\"k\": -1}}'
           where id % 7 = 0;
         delete from shaped where id % 11 = 0;
         alter table shaped rename column note to remark;
         update shaped set remark = 'r' || id where id % 5 = 0;
         update walked_shape set v = 'u' || id, at = at + interval '0.7 s' where id % 3 = 0;
         insert into not_object values (2, '[1, 2]');",
        shaped_rows(301, 400)
    ))?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal(
        "public.shaped",
        "shaped",
        &[
            col("id", "ident"),
            // DateTime64(3): floored to the millisecond.
            col(
                "to_char(date_trunc('milliseconds', ts) at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS')",
                "created_at",
            ),
            col("coalesce(doc->>'k', '')", "doc.k"),
            col("coalesce(doc->'nested'->>'x', '')", "doc.nested.x"),
            col("coalesce(doc->>'tag', '')", "doc.tag"),
            // String: PostgreSQL's text.
            col("amount::text", "amount"),
            col("tags::text", "tags"),
            same("remark"),
        ],
    )?;
    ensure!(n > 350, "{n} rows of shaped");
    let types = ch_column_types(&h, "shaped")?;
    ensure!(
        types
            == "ident\tInt32\ncreated_at\tNullable(DateTime64(3, 'UTC'))\ndoc\tNullable(JSON)\n\
                amount\tNullable(String)\ntags\tNullable(String)\nremark\tNullable(String)\n",
        "shaped's columns: {types}"
    );
    h.assert_equal(
        "public.walked_shape",
        "walked_shape",
        &[
            same("id"),
            col("v", "value"),
            col("coalesce(doc->>'k', '')", "doc.k"),
            col("coalesce(doc->>'w', '')", "doc.w"),
            col(
                "to_char(date_trunc('second', at), 'YYYY-MM-DD HH24:MI:SS')",
                "at",
            ),
        ],
    )?;
    let types = ch_column_types(&h, "walked_shape")?;
    ensure!(
        types
            == "id\tInt32\nvalue\tNullable(String)\ndoc\tNullable(JSON)\nat\tNullable(DateTime64(0, 'UTC'))\n",
        "walked_shape's columns: {types}"
    );

    // A document JSON cannot hold stops its table, naming the column and
    // what to do; an override that does not fit stops with column_rules.
    let stopped = h.table_state("public.not_object")?;
    let detail = stopped["detail"].as_str().unwrap_or_default();
    ensure!(
        stopped["state"] == "stopped"
            && detail.contains("\"doc\"")
            && detail.contains("JSON object")
            && detail.contains("out_of_range"),
        "not_object: {stopped}"
    );
    let bad = h.table_state("public.bad_override")?;
    ensure!(
        bad["state"] == "stopped"
            && bad["detail"]
                .as_str()
                .is_some_and(|d| d.contains("json or jsonb") && d.contains("column_types")),
        "bad_override: {bad}"
    );
    let status = h.status_json()?;
    for (table, code) in [
        ("public.not_object", "value_out_of_range"),
        ("public.bad_override", "column_rules"),
    ] {
        ensure!(
            status["tables"][table]["stopped"]["code"] == code,
            "{table}: {}",
            status["tables"][table]
        );
    }

    // The config table's equivalent, and its checks.
    for (column, bad) in [
        ("column_types", r#"{"ts": "Int64"}"#),
        ("column_types", r#"{"ts": "DateTime64(7)"}"#),
        ("rename_columns", r#"{"v": ""}"#),
        ("rename_columns", r#"{"v": ["w"]}"#),
    ] {
        ensure!(
            h.source
                .psql(&format!("insert into walshadow.tables (schema_name, table_name, {column}) values ('public', 'bad', '{bad}');"))
                .is_err(),
            "the config table took {column} {bad}"
        );
    }
    h.source.psql(
        "create table opted_shape (id int primary key, v text, ts timestamptz);
         insert into opted_shape values (1, 'a', '2020-01-01 00:00:01.9+00'), (2, 'b', null);
         insert into walshadow.tables (schema_name, table_name, initial_load, rename_columns, column_types)
           values ('public', 'opted_shape', 'copy', '{\"v\": \"val\"}', '{\"ts\": \"DateTime64(0)\"}');",
    )?;
    wait_loaded(&mut h, "public.opted_shape")?;
    h.source.psql(
        "insert into opted_shape values (3, 'c', '2021-01-01 00:00:02.5+00');
         update walshadow.tables set rename_columns = '{\"v\": \"value2\"}' where table_name = 'opted_shape';
         insert into opted_shape values (4, 'd', '2022-01-01 00:00:03+00');
         update opted_shape set v = 'bb' where id = 2;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal(
        "public.opted_shape",
        "opted_shape",
        &[
            same("id"),
            col("v", "value2"),
            col(
                "to_char(date_trunc('second', ts) at time zone 'UTC', 'YYYY-MM-DD HH24:MI:SS')",
                "ts",
            ),
        ],
    )?;
    let types = ch_column_types(&h, "opted_shape")?;
    ensure!(
        types == "id\tInt32\nvalue2\tNullable(String)\nts\tNullable(DateTime64(0, 'UTC'))\n",
        "opted_shape's columns: {types}"
    );

    // A rename changed in the file applies at the next start, in place:
    // the rules the table was made with are recorded.
    h.stop_run()?;
    let config = std::fs::read_to_string(h.config_path())?;
    std::fs::write(
        h.config_path(),
        config.replace(
            "rename_columns = { v = \"value\" }",
            "rename_columns = { v = \"val\" }",
        ),
    )?;
    h.start_run()?;
    h.source
        .psql("update walked_shape set v = 'after ' || id where id % 4 = 0;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal(
        "public.walked_shape",
        "walked_shape",
        &[same("id"), col("v", "val")],
    )?;
    let types = ch_column_types(&h, "walked_shape")?;
    ensure!(
        types.contains("val\tNullable(String)") && !types.contains("value"),
        "walked_shape's columns after the rename: {types}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(renamed_and_retyped => columns_renamed_and_retyped_stream_on_every_path: pg15, pg18);

const GEO_CONFIG: &str = r#"
[backfill]
backup_checkpoint = "fast"

[table."public.t_geo"]
initial_load = "copy"

[table."public.walked_geo"]
initial_load = "base_backup"
column_types = { gg = "String" }

[table."public.shapes_geo"]
initial_load = "copy"
column_types = { pt = "Point", ls = "LineString", pg = "Polygon", mp = "MultiPolygon", mls = "MultiLineString", later = "Point" }

[table."public.wrong_shape"]
column_types = { pt = "Point" }

[table."public.null_shape"]
column_types = { pt = "Point" }
out_of_range = "null"
"#;

/// PostGIS `geometry`, `geography` and `geometry[]` (15: Debian's
/// PostGIS) through a `copy` load, a `base_backup` walk and the WAL: every
/// shape PostGIS stores (curves, surfaces, TINs, empties, Z/M, SRIDs) lands
/// as the ISO WKB `ST_AsBinary` gives, which ClickHouse's `readWKB*` reads;
/// an added column's default too; `column_types = "String"` writes the
/// server's text (hex EWKB) instead; ClickHouse's geo types (`Point`,
/// `LineString`, `Polygon`, `MultiPolygon` taking polygons too,
/// `MultiLineString`) hold their shapes, NULL and POINT EMPTY a point of
/// NaNs; a value of another shape stops its table naming it; `null` on a
/// geo column is refused.
fn postgis(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "postgis", &[], GEO_CONFIG)?;
    ensure!(
        walshadow_testkit::all_types::has_postgis(&h.source)?,
        "PostGIS is not installed for {major}: scripts/setup installs postgresql-15-postgis-3"
    );
    h.source.psql(walshadow_testkit::all_types::POSTGIS_SQL)?;
    h.source.psql(
        "alter table t_geo add primary key (id);
         create table walked_geo as select * from t_geo;
         alter table walked_geo add primary key (id);
         delete from walked_geo where id % 5 = 0;
         create table shapes_geo (id int primary key, pt geometry(Point, 4326), ls geometry,
           pg geometry, mp geometry, mls geometry);
         insert into shapes_geo select g,
           case when g % 7 = 0 then null when g % 11 = 0 then 'SRID=4326;POINT EMPTY'
             else ST_SetSRID(ST_MakePoint(g * 0.5, -g), 4326) end,
           ST_MakeLine(ST_MakePoint(0, g), ST_MakePoint(g, 0)),
           ST_MakeEnvelope(0, 0, g, g),
           case when g % 2 = 0 then ST_MakeEnvelope(0, 0, 1, g)
             else ST_Collect(ST_MakeEnvelope(0, 0, 1, 1), ST_MakeEnvelope(2, 2, 3, g + 3)) end,
           case when g % 3 = 0 then 'LINESTRING(0 0, 1 1)'::geometry
             else 'MULTILINESTRING((0 0, 1 1), (2 2, 3 3))' end
         from generate_series(1, 60) g;
         create table wrong_shape (id int primary key, pt geometry);
         insert into wrong_shape values (1, 'POINT(1 1)');
         create table null_shape (id int primary key, pt geometry);",
    )?;
    h.init()?;
    h.start_run()?;
    wait_loaded(&mut h, "public.t_geo")?;
    wait_loaded(&mut h, "public.walked_geo")?;
    h.source.psql(
        "update t_geo set g = ST_Translate(g, 1, 1) where id in (6, 7, 8, 11, 23);
         update t_geo set gg = 'SRID=4326;LINESTRING(-71 42, -70 43)' where id = 2;
         update t_geo set ga = array['SRID=4326;POINT(9 9)'::geometry, null] where id = 3;
         insert into t_geo values
           (100, 'SRID=4326;MULTIPOLYGON(((0 0,1 0,1 1,0 0)))', 'POINT(10 20)', null),
           (101, 'POINT EMPTY', null, array[null::geometry]);
         delete from t_geo where id in (13, 20);
         alter table t_geo add column home geometry default 'SRID=4326;POINT(5 5)';
         update t_geo set home = 'POINT(6 6)' where id % 4 = 0;
         update walked_geo set g = 'POINT(7 7)', gg = 'POINT(1 1)' where id % 3 = 0;
         update shapes_geo set pt = 'SRID=4326;POINT(100 200)', pg = 'POLYGON EMPTY' where id % 5 = 0;
         insert into shapes_geo values (1000, null, 'LINESTRING EMPTY', null, 'MULTIPOLYGON EMPTY', null);
         delete from shapes_geo where id % 13 = 0;
         alter table shapes_geo add column later geometry default 'POINT(3 4)';
         update shapes_geo set later = 'POINT(5 6)' where id % 4 = 0;
         insert into wrong_shape values (2, 'LINESTRING(0 0, 1 1)');
         insert into walked_geo values (200, 'LINESTRING(1 1, 2 2)', 'POLYGON((0 0,1 0,1 1,0 0))', null);",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let wkb = |c: &str| {
        col(
            &format!("encode(ST_AsBinary({c}), 'hex')"),
            &format!("lower(hex({c}))"),
        )
    };
    let wkb_array = |c: &str| {
        col(
            &format!(
                "array_to_string(array(select coalesce(encode(ST_AsBinary(e), 'hex'), 'NULL') \
                   from unnest({c}) with ordinality u(e, i) order by i), ',')"
            ),
            &format!("arrayStringConcat(arrayMap(x -> ifNull(lower(hex(x)), 'NULL'), {c}), ',')"),
        )
    };
    let n = h.assert_equal(
        "public.t_geo",
        "t_geo",
        &[
            same("id"),
            wkb("g"),
            wkb("gg"),
            wkb_array("ga"),
            wkb("home"),
        ],
    )?;
    ensure!(n == 24, "{n} rows of t_geo");
    h.assert_equal(
        "public.walked_geo",
        "walked_geo",
        &[same("id"), wkb("g"), col("gg::text", "gg"), wkb_array("ga")],
    )?;
    // The geo types, compared as ClickHouse's WKT and PostGIS's; a point
    // of NaNs for NULL and POINT EMPTY.
    let point = |c: &str| {
        col(
            &format!(
                "case when {c} is null or ST_IsEmpty({c}) then 'nan nan' else ST_X({c})::text || ' ' || ST_Y({c})::text end"
            ),
            &format!("concat(toString(tupleElement({c}, 1)), ' ', toString(tupleElement({c}, 2)))"),
        )
    };
    let wkt = |c: &str, multi: bool| {
        let pg = if multi {
            format!("coalesce(ST_AsText(ST_Multi({c})), '')")
        } else {
            format!("coalesce(ST_AsText({c}), '')")
        };
        // ClickHouse's WKT of an empty value, and PostGIS's, differ: both
        // show as ''.
        col(
            &format!(
                "case when {c} is null or ST_IsEmpty({c}) then '' else replace({pg}, ',', ',') end"
            ),
            &format!("if(empty({c}), '', wkt({c}))"),
        )
    };
    let n = h.assert_equal(
        "public.shapes_geo",
        "shapes_geo",
        &[
            same("id"),
            point("pt"),
            wkt("ls", false),
            wkt("pg", false),
            wkt("mp", true),
            wkt("mls", true),
            point("later"),
        ],
    )?;
    ensure!(n > 50, "{n} rows of shapes_geo");
    let types = ch_column_types(&h, "shapes_geo")?;
    ensure!(
        types
            == "id\tInt32\npt\tPoint\nls\tLineString\npg\tPolygon\nmp\tMultiPolygon\n\
                mls\tMultiLineString\nlater\tPoint\n",
        "shapes_geo's columns: {types}"
    );
    let status = h.status_json()?;
    let wrong = &status["tables"]["public.wrong_shape"]["stopped"];
    ensure!(
        wrong["code"] == "value_out_of_range"
            && wrong["reason"]
                .as_str()
                .is_some_and(|r| r.contains("a LINESTRING") && r.contains("\"pt\"")),
        "wrong_shape: {wrong}"
    );
    let null_shape = &status["tables"]["public.null_shape"]["stopped"];
    ensure!(
        null_shape["code"] == "column_rules"
            && null_shape["reason"]
                .as_str()
                .is_some_and(|r| r.contains("no NULL")),
        "null_shape: {null_shape}"
    );
    // ClickHouse reads the WKB.
    let point = h.ch.query(
        "SELECT readWKBPoint(g) FROM app.t_geo FINAL WHERE id = 1 AND _is_deleted = 0 FORMAT TSVRaw",
    )?;
    ensure!(point.trim() == "(1,2)", "readWKBPoint: {point}");
    let types = ch_column_types(&h, "t_geo")?;
    ensure!(
        types
            == "id\tInt32\ng\tNullable(String)\ngg\tNullable(String)\n\
                ga\tArray(Nullable(String))\nhome\tNullable(String)\n",
        "t_geo's columns: {types}"
    );
    // The column asking for String in the file after a start: ISO WKB
    // and hex EWKB are both a ClickHouse String, but not the same values;
    // the table stops rather than mix them.
    h.stop_run()?;
    let config = std::fs::read_to_string(h.config_path())?;
    std::fs::write(
        h.config_path(),
        config.replace(
            "[table.\"public.t_geo\"]\ninitial_load = \"copy\"\n",
            "[table.\"public.t_geo\"]\ninitial_load = \"copy\"\ncolumn_types = { g = \"String\" }\n",
        ),
    )?;
    h.start_run()?;
    h.source
        .psql("update t_geo set g = 'POINT(8 8)' where id = 1;")?;
    h.wait_caught_up(CATCH_UP)?;
    let stopped = &h.status_json()?["tables"]["public.t_geo"]["stopped"];
    ensure!(
        stopped["code"] == "schema_change"
            && stopped["reason"]
                .as_str()
                .is_some_and(|r| r.contains("String of ISO WKB") && r.contains("\"g\"")),
        "t_geo after g asked for String: {stopped}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(postgis => postgis_shapes_stream_as_wkb_on_every_path: pg15);
