//! Several source databases in one `walshadow run` (`[source] databases`),
//! on PostgreSQL 15 and 18, ending with the row-by-row oracle per
//! database:
//!
//! - `shop` and `crm` are made from one template holding `docs`, so their
//!   `docs` share the OID and the relfilenumber, with overlapping keys and
//!   different external TOAST values: rows of one must never reach the
//!   other's ClickHouse database (`pg_{db}`);
//! - `shop.docs` is pinned by `[database."shop".table]`, `crm.docs` opted
//!   in by a row of crm's own config table (`init` made it there); both
//!   load with `copy`;
//! - a live workload in both (updates leaving TOAST values unchanged,
//!   deletes, inserts), a column added in `crm` only, `kill -9`, and more;
//! - `status` per database, `table list`, `verify` and `table add` with
//!   `--database`, `teardown` dropping each database's config table; the url's database (`postgres`, no tables) streams
//!   beside them;
//! - a database listed before it exists streams once the shadow has
//!   replayed its `CREATE DATABASE`, without a restart of `run`; dropped,
//!   its stream ends and the others go on; created again under the name,
//!   it streams afresh;
//! - `databases = ["*"]`: a database created while `run` streams gets its
//!   own config table from walshadow, and a row there streams its table;
//!   templates are not followed.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, StreamHarness};
use walshadow_testkit::{PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

/// Rows of `db`'s `docs` as `id, v, md5(body)[, tag]`, sorted.
fn source_docs(h: &StreamHarness, db: &str, tag: bool) -> Result<String> {
    let tag = if tag {
        " || E'\\t' || coalesce(tag, '<NULL>')"
    } else {
        ""
    };
    h.source.psql_db(
        db,
        &format!(
            "select id || E'\\t' || v || E'\\t' || md5(coalesce(body, '')){tag} from docs order by id"
        ),
    )
}

fn clickhouse_docs(h: &StreamHarness, db: &str, tag: bool) -> Result<String> {
    let tag = if tag {
        ", '\\t', ifNull(tag, '<NULL>')"
    } else {
        ""
    };
    let out = h.ch.query(&format!(
        "SELECT concat(toString(id), '\\t', toString(v), '\\t', lower(hex(MD5(ifNull(body, '')))){tag}) \
         FROM pg_{db}.docs FINAL WHERE _is_deleted = 0 ORDER BY id FORMAT TSVRaw"
    ))?;
    Ok(out.trim_end().to_owned())
}

fn assert_docs_equal(h: &StreamHarness, db: &str, tag: bool) -> Result<usize> {
    let src = source_docs(h, db, tag)?;
    let dst = clickhouse_docs(h, db, tag)?;
    ensure!(
        src == dst,
        "{db}.docs differs from pg_{db}.docs FINAL\nsource:\n{}\nclickhouse:\n{}\nrun log:\n{}",
        common::tail(&src, 10),
        common::tail(&dst, 10),
        common::tail(&h.run_log(), 60)
    );
    Ok(src.lines().count())
}

/// Writes of `db` (`round` keeps values apart): updates that leave TOAST
/// values as they are, deletes, inserts of new TOAST values.
fn workload(h: &StreamHarness, db: &str, round: i32) -> Result<()> {
    let base = 1000 * round;
    h.source.psql_db(
        db,
        &format!(
            "update docs set v = v + {round} where id % 3 = 0;
             delete from docs where id % 7 = {round} % 7;
             insert into docs select {base} + g, g, repeat(md5(g::text || '{db}{round}'), 100)
               from generate_series(1, 20) g on conflict do nothing;
             update docs set body = repeat(md5(id::text || '{db}{round}x'), 90) where id % 5 = 1;"
        ),
    )?;
    Ok(())
}

fn several_databases(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "dbs", &[], "")?;
    h.source.psql("create database tpl")?;
    h.source.psql_db(
        "tpl",
        "create table docs (id int primary key, v int not null, body text);
         alter table docs alter column body set storage external",
    )?;
    h.source.psql("create database shop template tpl")?;
    h.source.psql("create database crm template tpl")?;
    let ident = "select 'docs'::regclass::oid || '/' || pg_relation_filenode('docs')";
    let (shop_ident, crm_ident) = (
        h.source.psql_db("shop", ident)?,
        h.source.psql_db("crm", ident)?,
    );
    ensure!(
        shop_ident == crm_ident,
        "the template should give both docs one OID and file: {shop_ident} vs {crm_ident}"
    );
    // The same keys in both, different values and TOAST values.
    for (db, v) in [("shop", 1), ("crm", 2)] {
        h.source.psql_db(
            db,
            &format!(
                "insert into docs select g, g * {v}, repeat(md5(g::text || '{db}'), 100)
                 from generate_series(1, 60) g"
            ),
        )?;
    }
    // Three databases: the url's (postgres, nothing streamed) and the two.
    let config = std::fs::read_to_string(&h.config)?;
    let config = config
        .replacen(
            "[source]\n",
            "[source]\ndatabases = [\"postgres\", \"shop\", \"crm\"]\n",
            1,
        )
        .replace("database = \"app\"", "database = \"pg_{db}\"")
        + "\n[database.\"shop\".table.\"public.docs\"]\ninitial_load = \"copy\"\n";
    std::fs::write(&h.config, config)?;
    h.init()?;
    // `init` made crm's own config table; its row opts crm.docs in.
    h.source.psql_db(
        "crm",
        "insert into walshadow.tables (schema_name, table_name, initial_load) values ('public', 'docs', 'copy')",
    )?;
    h.start_run()?;
    for db in ["shop", "crm"] {
        wait_until(CATCH_UP, &format!("{db}.docs loaded"), || {
            let s = h.cli_ok(&[
                "table",
                "list",
                "--json",
                "--database",
                db,
                "--config",
                h.config(),
            ])?;
            let rows: Vec<serde_json::Value> = serde_json::from_str(&s)?;
            Ok(rows.iter().any(|r| {
                r["table"] == "public.docs"
                    && r["state"] == "streaming"
                    && r["rows_loaded"].as_u64() >= Some(60)
            }))
        })
        .with_context(|| h.run_log())?;
    }
    workload(&h, "shop", 1)?;
    workload(&h, "crm", 1)?;
    h.wait_caught_up(CATCH_UP)?;
    let shop_rows = assert_docs_equal(&h, "shop", false)?;
    assert_docs_equal(&h, "crm", false)?;
    ensure!(
        shop_rows > 60,
        "the workload's inserts should be in: {shop_rows} rows"
    );

    // A column added in crm only reaches pg_crm.docs only.
    h.source.psql_db(
        "crm",
        "alter table docs add column tag text; update docs set tag = 'k' || id where id % 4 = 0",
    )?;
    workload(&h, "shop", 2)?;
    // kill -9 with both databases' writes in flight.
    h.kill_run()?;
    workload(&h, "crm", 2)?;
    workload(&h, "shop", 3)?;
    h.start_run()?;
    workload(&h, "crm", 3)?;
    h.wait_caught_up(CATCH_UP)?;
    assert_docs_equal(&h, "shop", false)?;
    let crm_rows = assert_docs_equal(&h, "crm", true)?;
    ensure!(crm_rows > 60, "crm's rows: {crm_rows}");
    let columns = |db: &str| {
        h.ch.query(&format!(
            "SELECT name FROM system.columns WHERE database = 'pg_{db}' AND table = 'docs' AND name = 'tag'"
        ))
    };
    ensure!(
        columns("crm")?.trim() == "tag",
        "pg_crm.docs should have tag"
    );
    ensure!(
        columns("shop")?.trim().is_empty(),
        "pg_shop.docs should not have crm's column"
    );

    // Every database's status, under its name.
    let status: serde_json::Value =
        serde_json::from_str(&h.cli_ok(&["status", "--json", "--config", h.config()])?)?;
    for db in ["postgres", "shop", "crm"] {
        ensure!(
            status["databases"][db]["running"] == true,
            "status should show database {db} running: {status:#}"
        );
    }
    ensure!(
        status["databases"]["crm"]["tables"]["public.docs"]["rows"].as_u64() > Some(0),
        "crm's docs should have rows in status: {status:#}"
    );
    ensure!(
        status["databases"]["postgres"]["tables"]
            .as_object()
            .is_none_or(|t| t.is_empty()),
        "the url's database streams no table: {status:#}"
    );
    // `verify` compares crm's table with crm's ClickHouse database.
    let verified = h.cli_ok(&[
        "verify",
        "--database",
        "crm",
        "--config",
        h.config(),
        "public.docs",
    ])?;
    ensure!(
        verified.contains("public.docs → docs: equal"),
        "verify --database crm: {verified}"
    );
    let refused = h.cli(&[
        "table",
        "list",
        "--database",
        "nope",
        "--config",
        h.config(),
    ])?;
    ensure!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("is not followed"),
        "a database not followed should be refused: {refused:?}"
    );

    // `table add --database` opts a table in through that database's
    // config table, loaded and streamed without a restart.
    h.source.psql_db(
        "shop",
        "create table extra (id int primary key, note text);
         insert into extra select g, 'n' || g from generate_series(1, 30) g",
    )?;
    h.cli_ok(&[
        "table",
        "add",
        "--database",
        "shop",
        "--config",
        h.config(),
        "public.extra",
    ])?;
    h.source
        .psql_db("shop", "update extra set note = 'u' where id < 10")?;
    wait_until(CATCH_UP, "shop.extra in pg_shop", || {
        let n = h
            .ch
            .query("SELECT count() FROM pg_shop.extra FINAL WHERE _is_deleted = 0 AND note = 'u'");
        Ok(n.is_ok_and(|n| n.trim() == "9"))
    })
    .with_context(|| h.run_log())?;
    ensure!(
        h.ch.query("EXISTS TABLE pg_crm.extra")?.trim() == "0",
        "shop's table must not appear in crm's database"
    );
    h.stop_run()?;
    // teardown drops every database's config table.
    let out = h.cli_ok(&[
        "teardown",
        "--config",
        h.config(),
        "--drop-config-table",
        "--yes",
    ])?;
    for db in ["postgres", "shop", "crm"] {
        let left = h.source.psql_db(
            db,
            "select count(*) from pg_tables where schemaname = 'walshadow'",
        )?;
        ensure!(
            left == "0",
            "{db} still has a config table after teardown: {out}"
        );
    }
    ensure!(
        out.contains("of database \"crm\": dropped") && out.contains("pg_crm"),
        "teardown should name each database: {out}"
    );
    Ok(())
}

per_major!(several_databases => several_databases_stream_apart: pg15, pg18);

fn t_equal(h: &StreamHarness, db: &str) -> Result<bool> {
    let src = h
        .source
        .psql_db(db, "select id || E'\\t' || v from t order by id")?;
    let dst = h.ch.query(&format!(
        "SELECT concat(toString(id), '\\t', v) FROM pg_{db}.t FINAL WHERE _is_deleted = 0 ORDER BY id FORMAT TSVRaw"
    ));
    Ok(dst.is_ok_and(|d| d.trim_end() == src))
}

fn created_after_start(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "dblate", &[], "")?;
    h.source
        .psql("create table t (id int primary key, v text); insert into t values (1, 'url')")?;
    let config = std::fs::read_to_string(&h.config)?;
    let config = config
        .replacen(
            "[source]\n",
            "[source]\ndatabases = [\"postgres\", \"late\"]\n",
            1,
        )
        .replace("database = \"app\"", "database = \"pg_{db}\"")
        + "\n[table.\"public.t\"]\ninitial_load = \"copy\"\n\
           [database.\"late\".table.\"public.t\"]\ninitial_load = \"copy\"\n";
    std::fs::write(&h.config, config)?;
    h.init()?;
    h.start_run()?;
    wait_until(CATCH_UP, "late awaited", || {
        Ok(h.run_log().contains("does not have (yet)"))
    })?;
    wait_until(CATCH_UP, "postgres.t in pg_postgres", || {
        t_equal(&h, "postgres")
    })
    .with_context(|| h.run_log())?;

    // A table pinned by a reload is kept when the streams start again.
    h.source.psql(
        "create table w (id int primary key, v text); insert into w select g, 'w' from generate_series(1, 5) g",
    )?;
    h.append_config("\n[table.\"public.w\"]\ninitial_load = \"copy\"\n")?;
    h.cli_ok(&["ctl", "--config", h.config(), "reload"])?;
    let w_count = |h: &StreamHarness| {
        h.ch.query("SELECT count() FROM pg_postgres.w FINAL WHERE _is_deleted = 0")
            .map(|n| n.trim().to_owned())
    };
    wait_until(CATCH_UP, "w loaded after the reload", || {
        Ok(w_count(&h).is_ok_and(|n| n == "5"))
    })
    .with_context(|| h.run_log())?;

    // Created while `run` streams: its table and rows arrive.
    h.source.psql("create database late")?;
    h.source.psql_db(
        "late",
        "create table t (id int primary key, v text);
         insert into t select g, 'late' || g from generate_series(1, 40) g",
    )?;
    h.source.psql_db(
        "late",
        "update t set v = 'u' where id % 2 = 0; delete from t where id = 3",
    )?;
    h.source.psql("insert into t values (2, 'url2')")?;
    wait_until(CATCH_UP, "late.t in pg_late", || t_equal(&h, "late"))
        .with_context(|| h.run_log())?;
    ensure!(
        h.run_log().contains("database [\"late\"] created"),
        "the log should say why the streams started again: {}",
        common::tail(&h.run_log(), 30)
    );
    h.source
        .psql("insert into w select g, 'w' from generate_series(6, 9) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        w_count(&h)? == "9",
        "the reloaded pin should stream on after the streams started again: {}",
        common::tail(&h.run_log(), 30)
    );
    ensure!(
        t_equal(&h, "postgres")? && t_equal(&h, "late")?,
        "both equal"
    );

    // Dropped: its stream ends, the url's goes on.
    h.source.psql("drop database late")?;
    wait_until(CATCH_UP, "late's state set aside", || {
        Ok(h.run_log().contains("the database was dropped"))
    })
    .with_context(|| h.run_log())?;
    h.source.psql("insert into t values (4, 'url4')")?;
    wait_until(CATCH_UP, "postgres.t after the drop", || {
        t_equal(&h, "postgres")
    })
    .with_context(|| h.run_log())?;
    h.check_running()?;

    // Created again under the name: streams afresh, from its new rows.
    h.source.psql("create database late")?;
    h.source.psql_db(
        "late",
        "create table t (id int primary key, v text);
         insert into t select g, 'again' || g from generate_series(100, 120) g",
    )?;
    wait_until(CATCH_UP, "the new late.t in pg_late", || {
        let n = h
            .ch
            .query("SELECT count() FROM pg_late.t FINAL WHERE _is_deleted = 0 AND v LIKE 'again%'");
        Ok(n.is_ok_and(|n| n.trim() == "21"))
    })
    .with_context(|| h.run_log())?;
    h.stop_run()?;
    Ok(())
}

per_major!(created_after_start => a_database_created_after_start_streams: pg15, pg18);

fn every_database(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "dbany", &[], "")?;
    let config = std::fs::read_to_string(&h.config)?;
    let config = config
        .replacen("[source]\n", "[source]\ndatabases = [\"*\"]\n", 1)
        .replace("database = \"app\"", "database = \"pg_{db}\"");
    std::fs::write(&h.config, config)?;
    h.init()?;
    h.start_run()?;
    h.source.psql("create database auto")?;
    // walshadow makes auto's config table when its stream starts.
    wait_until(CATCH_UP, "auto's config table", || {
        Ok(h
            .source
            .psql_db("auto", "select count(*) from pg_tables where schemaname = 'walshadow' and tablename = 'tables'")?
            == "1")
    })
    .with_context(|| h.run_log())?;
    h.source.psql_db(
        "auto",
        "create table t (id int primary key, v text);
         insert into t select g, 'a' || g from generate_series(1, 25) g;
         insert into walshadow.tables (schema_name, table_name, initial_load) values ('public', 't', 'copy');
         update t set v = 'b' where id <= 5;",
    )?;
    wait_until(CATCH_UP, "auto.t in pg_auto", || t_equal(&h, "auto"))
        .with_context(|| h.run_log())?;
    let status: serde_json::Value =
        serde_json::from_str(&h.cli_ok(&["status", "--json", "--config", h.config()])?)?;
    let dbs = status["databases"]
        .as_object()
        .context("status per database")?;
    ensure!(
        dbs.contains_key("auto") && dbs.contains_key("postgres") && !dbs.contains_key("template1"),
        "every database but the templates: {status:#}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(every_database => every_database_follows_new_ones: pg15, pg18);
