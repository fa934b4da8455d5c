//! TOAST fidelity through the `walshadow` binary, on PostgreSQL 15 and 18:
//! out-of-line values left unchanged by an UPDATE are delivered whole.
//!
//! - `fidelity`: `docs` (pinned before its large values were written: they
//!   reach the chunk mirror through the WAL) and `docs_after` (its large
//!   values written before `walshadow init`: read from the source's TOAST
//!   relation when first pointed at) with large text (pglz, compressed out
//!   of line), jsonb, bytea (storage external: uncompressed out of line)
//!   and a text column with lz4 compression on 15 (the 18 build here has
//!   no lz4: pglz there). A workload updates only the small column, only
//!   large ones, both, deletes and re-inserts, rolls back large inserts,
//!   rewrites `docs` with VACUUM FULL and truncates a third table (dropped
//!   at the end); walshadow
//!   is killed with `kill -9` in the middle and, while it is down, a row of
//!   `docs_after` is updated twice so that the value its first new version
//!   points at is gone from the source when walshadow decodes it (the row
//!   waits for its newer version). Then the oracle, VACUUM, a stop, a
//!   compaction of the mirror, and the mirror's value ids against the
//!   source's live chunk ids (equal for `docs`, a subset for `docs_after`);
//!   the mirror's size is printed beside the source's TOAST size.
//! - `unresolvable_stops_the_table`: walshadow connects as a role that may
//!   not read the TOAST relation of a table whose value predates it; an
//!   UPDATE of a small column stops that table with table, column, value id
//!   and LSN in the reason, no row with a stand-in value reaches ClickHouse,
//!   and another table keeps streaming.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, col, same};
use walshadow_testkit::{Lsn, PgMajor};

const CATCH_UP: Duration = Duration::from_secs(180);

fn schema(major: PgMajor) -> String {
    // lz4 where the server has it.
    let x_compression = if major == PgMajor::V15 { "lz4" } else { "pglz" };
    let table = |name: &str| {
        format!(
            "create table public.{name} (id int primary key, small int, t text, j jsonb, b bytea, x text compression {x_compression});
             alter table public.{name} alter column b set storage external;"
        )
    };
    format!(
        "{}
         {}
         create table public.scratch (id int primary key, t text);
         -- Compressible, still out of line after compression (~20 kB of md5).
         create function big_text(seed int) returns text language sql immutable as
           $$ select string_agg(md5((seed * 1000 + g)::text) || ' lorem ipsum dolor sit amet ', '') from generate_series(1, 600) g $$;
         -- Not compressible: out of line as is.
         create function big_bytes(seed int) returns bytea language sql immutable as
           $$ select decode(string_agg(md5((seed * 7 + g)::text), ''), 'hex') from generate_series(1, 400) g $$;
         create function big_json(seed int) returns jsonb language sql immutable as
           $$ select jsonb_build_object('seed', seed, 'items', jsonb_agg(jsonb_build_array(g, md5((seed + g)::text)))) from generate_series(1, 300) g $$;
         create function row_sql(tab text, k int, seed int) returns text language sql immutable as
           $$ select format('insert into %I values (%s, %s, big_text(%s), big_json(%s), big_bytes(%s), big_text(%s))', tab, k, seed, seed, seed, seed, seed + 1) $$;",
        table("docs"),
        table("docs_after")
    )
}

fn oracle() -> Vec<OracleColumn> {
    let md5 = |c: &str| {
        col(
            &format!("md5({c})"),
            &format!("if({c} IS NULL, NULL, lower(hex(MD5({c}))))"),
        )
    };
    vec![
        same("id"),
        same("small"),
        md5("t"),
        // jsonb: ClickHouse holds PostgreSQL's text output.
        col("md5(j::text)", "if(j IS NULL, NULL, lower(hex(MD5(j))))"),
        md5("b"),
        md5("x"),
    ]
}

/// Step `i` of the workload on `tab` (keys 1..=ROWS), one transaction.
fn step(tab: &str, i: u32) -> String {
    const ROWS: u32 = 30;
    let k = (i * 7) % ROWS + 1;
    let seed = 1000 + i;
    match i % 8 {
        0 => format!("update {tab} set small = small + 1 where id = {k};"),
        1 => format!("update {tab} set t = big_text({seed}) where id = {k};"),
        2 => format!("update {tab} set b = big_bytes({seed}), small = small + 1 where id = {k};"),
        3 => format!(
            "update {tab} set j = big_json({seed}), x = big_text({seed} + 5) where id = {k};"
        ),
        4 => format!("delete from {tab} where id = {k};"),
        // Re-insert: a new row under an old key, new values.
        5 => format!(
            "begin; delete from {tab} where id = {k}; do $$ begin execute row_sql('{tab}', {k}, {seed}); end $$; commit;"
        ),
        // Many rows of one transaction keep pointing at old values.
        6 => format!(
            "update {tab} set small = small + 10 where id % 3 = {} and id <= {ROWS};",
            i % 3
        ),
        _ => format!(
            "begin; insert into {tab} values ({k} + 1000, 0, big_text({seed}), big_json({seed}), big_bytes({seed}), big_text({seed})); rollback;"
        ),
    }
}

/// Runs steps `range` on both tables.
fn workload(h: &StreamHarness, range: std::ops::Range<u32>) -> Result<()> {
    let mut sql = String::new();
    for i in range {
        for tab in ["docs", "docs_after"] {
            sql.push_str(&step(tab, i));
            sql.push('\n');
        }
    }
    h.source.psql(&sql)?;
    Ok(())
}

fn toast_relation(h: &StreamHarness, table: &str) -> Result<(u32, String)> {
    let oid: u32 = h
        .source
        .query_one(&format!(
            "select reltoastrelid from pg_class where oid = 'public.{table}'::regclass"
        ))?
        .trim()
        .parse()?;
    let name = h
        .source
        .query_one(&format!("select relname from pg_class where oid = {oid}"))?;
    Ok((oid, format!("pg_toast.{}", name.trim())))
}

fn source_value_ids(h: &StreamHarness, toast: &str) -> Result<BTreeSet<u32>> {
    let out = h
        .source
        .psql(&format!("select distinct chunk_id from {toast}"))?;
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim().parse::<u32>().context("chunk_id"))
        .collect()
}

fn fidelity(major: PgMajor) -> Result<()> {
    let tables = ["public.docs", "public.docs_after", "public.scratch"];
    let mut h = StreamHarness::new(BIN, major, "toast", &tables, "")?;
    h.source.psql(&schema(major))?;
    // docs_after's values predate walshadow.
    // Row 99 is left alone by the workload until walshadow is down.
    h.source.psql(
        "do $$ begin for k in 1..30 loop execute row_sql('docs_after', k, k); end loop; end $$;
         do $$ begin execute row_sql('docs_after', 99, 99); end $$;",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "do $$ begin for k in 1..30 loop execute row_sql('docs', k, k); end loop; end $$;
         insert into scratch select g, big_text(g) from generate_series(1, 5) g;",
    )?;
    workload(&h, 0..24)?;
    // A rewrite that keeps value ids but moves every chunk.
    h.source.psql("vacuum full docs;")?;
    workload(&h, 24..40)?;
    // kill -9 mid-stream; while walshadow is down, row 99 of docs_after
    // gets a new version pointing at its old t, then a new t (the old one
    // dies before walshadow reads it).
    h.wait_caught_up(CATCH_UP)?;
    workload(&h, 40..48)?;
    h.kill_run()?;
    h.source.psql(
        "update docs_after set small = small + 100 where id = 99;
         update docs_after set t = big_text(777) where id = 99;
         truncate scratch;
         insert into scratch select g, big_text(g + 50) from generate_series(1, 3) g;",
    )?;
    workload(&h, 48..56)?;
    h.start_run()?;
    workload(&h, 56..80)?;
    h.wait_caught_up(CATCH_UP)?;
    let cols = oracle();
    let n = h.assert_equal("public.docs", "docs", &cols)?;
    let m = h.assert_equal("public.docs_after", "docs_after", &cols)?;
    h.assert_equal(
        "public.scratch",
        "scratch",
        &[same("id"), col("md5(t)", "lower(hex(MD5(t)))")],
    )?;
    ensure!(
        n >= 10 && m >= 10,
        "too few rows to mean anything: {n}, {m}"
    );

    let status = h.status_json()?;
    let toast = &status["toast"];
    eprintln!("TOAST status: {toast:#}");
    ensure!(
        toast["source_fetches"].as_u64().unwrap_or(0) > 0,
        "docs_after's old values were not read from the source: {toast:#}"
    );
    ensure!(
        toast["source_misses"].as_u64().unwrap_or(0) > 0,
        "the value updated away while walshadow was down was not missed at the source: {toast:#}"
    );
    ensure!(
        toast["waiting_rows"].as_u64() == Some(0),
        "rows still wait for a newer version: {toast:#}"
    );
    ensure!(
        toast["hits"].as_u64().unwrap_or(0) > 0,
        "no mirror hits: {toast:#}"
    );
    for key in tables {
        ensure!(
            status["tables"][key]["stopped"].is_null(),
            "{key} stopped: {status:#}"
        );
    }

    // Chunk deletes pruned the mirror already: once the deletions are due,
    // it holds exactly the live values (all of them read by now).
    for _ in 0..3 {
        h.source
            .psql("update docs set small = small where id = 3;")?;
        h.wait_caught_up(CATCH_UP)?;
    }
    let mut live = 0;
    for table in ["docs", "docs_after", "scratch"] {
        live += source_value_ids(&h, &toast_relation(&h, table)?.1)?.len() as u64;
    }
    let status = h.status_json()?;
    ensure!(
        status["toast"]["values"].as_u64() == Some(live),
        "before VACUUM the mirror holds {} values, the source {live} live ones: {:#}",
        status["toast"]["values"],
        status["toast"]
    );

    // VACUUM removes the dead chunks on the source; the mirror's deletions
    // run once progress past them is durable (a few more commits), then a
    // stop and a compaction. A dropped table's chunks go too.
    let (scratch_relid, _) = toast_relation(&h, "scratch")?;
    h.source
        .psql("vacuum docs; vacuum docs_after; drop table scratch;")?;
    for _ in 0..3 {
        h.source
            .psql("update docs set small = small where id = 3;")?;
        h.wait_caught_up(CATCH_UP)?;
    }
    h.stop_run()?;
    let out = h.cli_ok(&["toast", "compact", "--json", "--config", h.config()])?;
    let stats: serde_json::Value = serde_json::from_str(&out)?;
    eprintln!("mirror after compaction: {stats:#}");
    ensure!(
        stats["pending"].as_u64() == Some(0),
        "deletions still pending: {stats:#}"
    );

    let mirror_path = h.state_dir.join("toast-mirror.redb");
    let mirror = walshadow_toast_mirror::ChunkMirror::open(&mirror_path, 16)?;
    let mut source_bytes = 0u64;
    ensure!(
        !mirror.relations()?.contains(&scratch_relid),
        "the dropped table's TOAST relation {scratch_relid} is still in the mirror"
    );
    for (table, exact) in [("docs", true), ("docs_after", false)] {
        let (relid, toast) = toast_relation(&h, table)?;
        let live = source_value_ids(&h, &toast)?;
        let held = mirror.value_ids(relid)?;
        let dead: Vec<_> = held.difference(&live).collect();
        ensure!(
            dead.is_empty(),
            "{table}: the mirror holds dead values {dead:?} (source has {} live, mirror {})",
            live.len(),
            held.len()
        );
        if exact {
            let missing: Vec<_> = live.difference(&held).collect();
            ensure!(
                missing.is_empty(),
                "{table}: live values missing from the mirror: {missing:?}"
            );
        }
        source_bytes += h
            .source
            .query_one(&format!(
                "select coalesce(sum(octet_length(chunk_data)), 0) from {toast}"
            ))?
            .trim()
            .parse::<u64>()?;
        eprintln!(
            "{table}: {} live values on the source, {} in the mirror",
            live.len(),
            held.len()
        );
    }
    let s = mirror.stats();
    eprintln!(
        "mirror: {} chunk bytes in a {} byte file; source: {} bytes of live chunk data",
        s.data_bytes, s.file_bytes, source_bytes
    );
    ensure!(
        s.data_bytes <= source_bytes,
        "the mirror holds more chunk data ({}) than the source's live TOAST data ({source_bytes})",
        s.data_bytes
    );
    drop(mirror);

    // It still streams after the compaction.
    h.start_run()?;
    h.source
        .psql("update docs set small = small + 1; update docs_after set small = small + 1;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.docs", "docs", &cols)?;
    h.assert_equal("public.docs_after", "docs_after", &cols)?;
    h.stop_run()?;
    Ok(())
}

per_major!(fidelity => toast_values_are_delivered_whole: pg15, pg16, pg17, pg18);

fn unresolvable(major: PgMajor) -> Result<()> {
    let tables = ["public.locked", "public.fine"];
    let mut h = StreamHarness::new(BIN, major, "toast-denied", &tables, "")?;
    h.source.psql(
        "create role ws login replication;
         create table public.locked (id int primary key, big text, small int);
         alter table public.locked alter column big set storage external;
         create table public.fine (id int primary key, v text);
         insert into locked values (1, (select string_agg(md5(g::text), '') from generate_series(1, 2000) g), 1);",
    )?;
    // walshadow connects as ws: it may replicate, not read the tables.
    let url = h.source.url("postgres");
    let ws_url = url.replacen(&format!("{}@", h.source.superuser()), "ws@", 1);
    ensure!(ws_url != url, "cannot set the user in {url}");
    let text = std::fs::read_to_string(&h.config)?.replace(&url, &ws_url);
    std::fs::write(&h.config, text)?;
    h.init()?;
    h.start_run()?;
    let before = h.source.current_lsn()?;
    h.source.psql(
        "update locked set small = 2 where id = 1;
         insert into fine values (1, 'a');",
    )?;
    let after = h.source.current_lsn()?;
    h.source
        .psql("insert into fine values (2, 'b'); update fine set v = 'c' where id = 1;")?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.fine", "fine", &[same("id"), same("v")])?;
    let status = h.status_json()?;
    let stopped = &status["tables"]["public.locked"]["stopped"];
    let reason = stopped["reason"].as_str().unwrap_or_default();
    let value_id = h.source.query_one(&format!(
        "select distinct chunk_id from {}",
        toast_relation(&h, "locked")?.1
    ))?;
    ensure!(
        reason.contains("public.locked")
            && reason.contains("column big")
            && reason.contains(&format!("TOAST value {}", value_id.trim())),
        "the reason names neither table, column nor value: {status:#}"
    );
    let at = reason
        .split("WAL at ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|l| l.parse::<Lsn>().ok())
        .with_context(|| format!("no LSN in the reason: {reason}"))?;
    ensure!(
        at > before && at < after,
        "the reason names {at}, not the UPDATE (between {before} and {after})"
    );
    ensure!(
        stopped["remedy"]
            .as_str()
            .unwrap_or_default()
            .contains("pg_read_all_data"),
        "the remedy does not say what to grant: {stopped:#}"
    );
    // Nothing of the row reached ClickHouse: no stand-in value.
    let rows = h.ch.query("SELECT count() FROM app.locked")?;
    ensure!(rows.trim() == "0", "locked has rows in ClickHouse: {rows}");
    ensure!(
        status["toast"]["source_errors"].as_u64().unwrap_or(0) > 0,
        "no failed source read counted: {status:#}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(unresolvable => unresolvable_toast_pointer_stops_the_table: pg15, pg18);
