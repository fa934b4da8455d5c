//! Mistakes a new user makes, on PostgreSQL 15 and 18, each refused or
//! shown, never silent, and each ending with the row-by-row oracle:
//!
//! - source tables and ClickHouse tables map one to one: `a__b.c` and
//!   `a.b__c` cannot both land in `a__b__c`; a config row `('x.y', 'z')`
//!   is table `z` of schema `x.y`, not `x."y.z"`; a table whose
//!   destination would be a staging name (`items__wsstg`) is refused, so a
//!   `base_backup` load of `items` never drops a replicated table;
//!   `destination = "…"` names the destination explicitly;
//! - configuration typos: an unknown `initial_load` in the file, an
//!   out-of-range number, a config-table value its `CHECK` refuses, and
//!   `source.url` pointed at another database of the cluster.

mod common;

use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{PgMajor, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);

fn cols() -> Vec<OracleColumn> {
    vec![same("id"), same("v")]
}

fn with_config(h: &StreamHarness, extra: &str) -> Result<()> {
    let mut text = std::fs::read_to_string(&h.config)?;
    text.push_str(extra);
    std::fs::write(&h.config, text)?;
    Ok(())
}

/// `walshadow ARGS` fails and its stderr has every one of `needles`.
fn refused(h: &StreamHarness, args: &[&str], needles: &[&str]) -> Result<()> {
    let out = h.cli(args)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "walshadow {args:?} succeeded:\n{err}"
    );
    for n in needles {
        ensure!(err.contains(n), "walshadow {args:?}: no {n:?} in:\n{err}");
    }
    Ok(())
}

fn names(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "names", &[], "")?;
    h.source.psql(
        "create schema a__b; create schema a; create schema x; create schema \"x.y\";
         create table a__b.c (id int primary key, v text);
         create table a.b__c (id int primary key, v text);
         create table x.\"y.z\" (id int primary key, v text);
         create table \"x.y\".z (id int primary key, v text);
         create table public.items (id int primary key, v text);
         create table public.items__wsstg (id int primary key, v text);
         insert into a__b.c values (1, 'a__b.c');
         insert into a.b__c values (1, 'a.b__c');
         insert into x.\"y.z\" select g, 'x.\"y.z\"' from generate_series(1, 10) g;
         insert into \"x.y\".z select g, '\"x.y\".z' from generate_series(1, 20) g;
         insert into public.items select g, 'item' from generate_series(1, 50) g;
         insert into public.items__wsstg select g, 'not staging' from generate_series(1, 30) g;",
    )?;
    let config = h.config().to_owned();
    // Two pinned tables into one ClickHouse table: refused, both named.
    let base = std::fs::read_to_string(&h.config)?;
    with_config(
        &h,
        "\n[table.\"a__b.c\"]\ninitial_load = \"copy\"\n[table.\"a.b__c\"]\ninitial_load = \"copy\"\n",
    )?;
    refused(
        &h,
        &["init", "--config", &config],
        &["a__b.c", "a.b__c", "a__b__c", "destination"],
    )?;
    // A destination that is a staging name: refused.
    std::fs::write(&h.config, &base)?;
    with_config(&h, "\n[table.\"public.items__wsstg\"]\n")?;
    refused(
        &h,
        &["init", "--config", &config],
        &["items__wsstg", "reserves"],
    )?;
    // Named apart: both stream.
    std::fs::write(&h.config, &base)?;
    with_config(
        &h,
        "\n[table.\"a__b.c\"]\ninitial_load = \"copy\"\n[table.\"a.b__c\"]\ninitial_load = \"copy\"\ndestination = \"a_b__c\"\n",
    )?;
    h.init()?;
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "a__b.c")?;
    common::loads::wait_loaded(&mut h, "a.b__c")?;

    // Config rows: ('x.y', 'z') and ('x', 'y.z') are two tables; the
    // staging-named table needs a destination; a row colliding with a
    // pinned table's destination is refused.
    h.source.psql(
        "insert into walshadow.tables values ('x.y', 'z', true, 'copy'), ('x', 'y.z', true, 'copy'),
                                              ('public', 'items__wsstg', true, 'copy'), ('a', 'b__c', true, 'copy');",
    )?;
    common::loads::wait_loaded(&mut h, "\"x.y\".z")?;
    common::loads::wait_loaded(&mut h, "x.\"y.z\"")?;
    wait_until(Duration::from_secs(60), "the refusals in status", || {
        let s = h.cli_ok(&["status", "--json", "--config", h.config()])?;
        let s: serde_json::Value = serde_json::from_str(&s)?;
        let reason = |k: &str| {
            s["tables"][k]["stopped"]["reason"]
                .as_str()
                .map(str::to_owned)
        };
        Ok(
            reason("public.items__wsstg").is_some_and(|r| r.contains("reserve"))
                && reason("a.b__c").is_none(),
        )
    })?;
    // The collision is the same key as the pinned a.b__c (the file wins);
    // a fresh collision: public.a__b__c (default destination a__b__c) vs
    // the pinned a__b.c.
    h.source.psql(
        "create table public.a__b__c (id int primary key, v text);
         insert into walshadow.tables values ('public', 'a__b__c', true, 'copy');",
    )?;
    wait_until(Duration::from_secs(60), "the collision refused", || {
        let s = h.cli_ok(&["status", "--json", "--config", h.config()])?;
        let s: serde_json::Value = serde_json::from_str(&s)?;
        Ok(s["tables"]["public.a__b__c"]["stopped"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("a__b.c") && r.contains("a__b__c")))
    })?;
    // With a destination of its own, the staging-named table streams; a
    // base_backup load of `items` (staging items__wsstg) leaves it alone.
    h.source.psql(
        "update walshadow.tables set destination = 'items_stg_copy' where table_name = 'items__wsstg';
         insert into walshadow.tables values ('public', 'items', true, 'base_backup');",
    )?;
    common::loads::wait_loaded(&mut h, "public.items")?;
    h.source
        .psql("insert into public.items__wsstg values (31, 'after'); insert into public.items values (51, 'after'); insert into a__b.c values (2, 'b'); insert into a.b__c values (2, 'b');")?;
    h.wait_caught_up(CATCH_UP)?;
    for (pg, ch, n) in [
        ("a__b.c", "a__b__c", 2),
        ("a.b__c", "a_b__c", 2),
        ("x.\"y.z\"", "x__y.z", 10),
        ("\"x.y\".z", "x.y__z", 20),
        ("public.items", "items", 51),
        ("public.items__wsstg", "items_stg_copy", 31),
    ] {
        let got = h.assert_equal(pg, ch, &cols())?;
        ensure!(got == n, "{pg}: {got} rows");
    }
    // The load's staging table came and went; the replicated one stayed.
    let tables =
        h.ch.query("SELECT name FROM system.tables WHERE database = 'app' ORDER BY name")?;
    let tables: Vec<&str> = tables.lines().collect();
    ensure!(
        tables.contains(&"items_stg_copy") && !tables.contains(&"items__wsstg"),
        "{tables:?}"
    );
    h.stop_run()?;
    Ok(())
}

per_major!(names => source_tables_map_one_to_one: pg15, pg18);

fn typos(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "typos", &[], "")?;
    h.source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, 'a' from generate_series(1, 100) g;
         create database shop;",
    )?;
    let config = h.config().to_owned();
    let base = std::fs::read_to_string(&h.config)?;
    // An unknown initial_load in the file: refused before anything runs.
    with_config(&h, "\n[table.\"public.t\"]\ninitial_load = \"cpy\"\n")?;
    refused(
        &h,
        &["init", "--config", &config],
        &["\"cpy\"", "copy", "base_backup"],
    )?;
    // A number past what the code holds: refused, naming the key.
    std::fs::write(&h.config, &base)?;
    let huge = base.replace(
        "[shadow]\n",
        "[shadow]\ncheckpoint_every_secs = 9223372036854775807\n",
    );
    std::fs::write(&h.config, &huge)?;
    refused(
        &h,
        &["init", "--config", &config],
        &["shadow.checkpoint_every_secs", "outside"],
    )?;
    std::fs::write(&h.config, &base)?;
    with_config(&h, "\n[table.\"public.t\"]\ninitial_load = \"copy\"\n")?;
    h.init()?;
    // The config table refuses an unknown mode itself.
    let e = h
        .source
        .psql("insert into walshadow.tables values ('public', 'u', true, 'full')")
        .unwrap_err();
    ensure!(format!("{e:#}").contains("check constraint"), "{e:#}");
    let comment = h
        .source
        .query_one("select obj_description('walshadow.tables'::regclass)")?;
    ensure!(
        comment.contains("base_backup") && comment.contains("destination"),
        "{comment}"
    );

    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.t")?;
    h.source.psql("insert into t values (101, 'b')")?;
    h.wait_caught_up(CATCH_UP)?;

    // A table that does not exist (the wrong case): shown as waiting.
    h.source
        .psql("insert into walshadow.tables values ('public', 'T', true, 'copy')")?;
    wait_until(Duration::from_secs(60), "public.T shown as waiting", || {
        let text = h.cli_ok(&["status", "--config", h.config()])?;
        Ok(text.contains("public.T -> T: 0 rows, waiting: no table public.T in database postgres"))
    })?;
    // Its row deleted: nothing of it stays behind.
    h.source
        .psql("delete from walshadow.tables where table_name = 'T'")?;
    wait_until(Duration::from_secs(60), "public.T forgotten", || {
        let text = h.cli_ok(&["status", "--config", h.config()])?;
        Ok(!text.contains("public.T"))
    })?;
    // Opted in without a load, then given one: it loads.
    h.source.psql(
        "create table w (id int primary key, v text);
         insert into w select g, 'w' from generate_series(1, 40) g;
         insert into walshadow.tables values ('public', 'w', true, null);",
    )?;
    h.source.psql("insert into w values (41, 'streamed')")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        h.clickhouse_rows("w", &cols())?.len() == 1,
        "w streamed from its opt-in only"
    );
    h.source
        .psql("update walshadow.tables set initial_load = 'copy' where table_name = 'w'")?;
    common::loads::wait_loaded(&mut h, "public.w")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("w", "w", &cols())?;
    ensure!(n == 41, "w: {n} rows");
    // A config table without the CHECK (made by hand, or by an older
    // init): the unknown mode stops the table, visibly, until corrected.
    h.source.psql(
        "create table u (id int primary key, v text);
         insert into u select g, 'u' from generate_series(1, 25) g;
         alter table walshadow.tables drop constraint tables_initial_load_check;
         insert into walshadow.tables values ('public', 'u', true, 'full');",
    )?;
    wait_until(Duration::from_secs(60), "public.u refused", || {
        let text = h.cli_ok(&["status", "--config", h.config()])?;
        Ok(text.contains("initial_load \"full\"")
            && text.contains("set the config table's initial_load"))
    })?;
    h.source
        .psql("update walshadow.tables set initial_load = 'copy' where table_name = 'u'")?;
    common::loads::wait_loaded(&mut h, "public.u")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("u", "u", &cols())?;
    ensure!(n == 25, "u: {n} rows");
    h.stop_run()?;

    // Another database of the same cluster: refused, naming both.
    let other = std::fs::read_to_string(&h.config)?.replace("/postgres?", "/shop?");
    std::fs::write(&h.config, &other)?;
    h.start_run()?;
    let mut exited = None;
    wait_until(Duration::from_secs(60), "run to refuse", || {
        exited = h.run_exited();
        Ok(exited.is_some())
    })?;
    ensure!(exited.is_some_and(|s| !s.success()), "{exited:?}");
    let log = h.run_log();
    ensure!(
        log.contains("\"shop\"") && log.contains("\"postgres\"") && log.contains("init --force"),
        "{log}"
    );
    // Back: nothing was skipped meanwhile.
    h.source.psql("insert into t values (102, 'c')")?;
    std::fs::write(&h.config, other.replace("/shop?", "/postgres?"))?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 102, "{n} rows");
    h.stop_run()?;
    Ok(())
}

per_major!(typos => configuration_mistakes_are_refused: pg15, pg18);

/// The README's source setup, run as written on a fresh cluster with
/// password authentication: `init` as that role creates the slot and the
/// config table, and a table pinned with a copy load and one opted in
/// through the config table stream.
fn readme_setup(major: PgMajor) -> Result<()> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))?;
    let block = readme
        .split("<!-- source-setup -->")
        .nth(1)
        .and_then(|b| b.split("<!-- /source-setup -->").next())
        .and_then(|b| b.split("```sql").nth(1))
        .and_then(|b| b.split("```").next())
        .ok_or_else(|| anyhow::anyhow!("README.md has no source-setup block"))?;
    let opts = common::source_options().auth(walshadow_testkit::Auth::scram("superpass"));
    let mut h = StreamHarness::with_options(BIN, major, "readme", &[], "", opts)?;
    h.source.psql(block)?;
    h.source.psql(
        "create table t (id int primary key, v text);
         insert into t select g, 'a' from generate_series(1, 60) g;
         create table o (id int primary key, v text);
         insert into o select g, 'o' from generate_series(1, 30) g;",
    )?;
    // walshadow connects as the README's role, not as the superuser, its
    // password in a password file as the README says (not in the URL).
    let superuser = h.source.url("postgres");
    let role = format!(
        "postgres://walshadow@127.0.0.1:{}/postgres?sslmode=disable",
        h.source.port()
    );
    let pgpass = h.work.path().join("pgpass");
    std::fs::write(&pgpass, "# walshadow\n127.0.0.1:*:*:walshadow:change-me\n")?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600))?;
    }
    h.env
        .push(("PGPASSFILE".into(), pgpass.display().to_string()));
    let text = std::fs::read_to_string(&h.config)?.replace(&superuser, &role);
    ensure!(text.contains(&role), "{text}");
    std::fs::write(&h.config, text)?;
    with_config(&h, "\n[table.\"public.t\"]\ninitial_load = \"copy\"\n")?;
    let out = h.init()?;
    ensure!(!out.contains("create it as a role that may"), "{out}");
    let owner = h.source.query_one(
        "select tableowner from pg_tables where schemaname = 'walshadow' and tablename = 'tables'",
    )?;
    ensure!(owner == "walshadow", "config table owned by {owner:?}");
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.t")?;
    h.source
        .psql("insert into walshadow.tables values ('public', 'o', true, 'copy')")?;
    common::loads::wait_loaded(&mut h, "public.o")?;
    h.source
        .psql("update t set v = 'b' where id < 10; delete from o where id > 20")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("t", "t", &cols())? == 60);
    ensure!(h.assert_equal("o", "o", &cols())? == 20);
    h.stop_run()?;
    Ok(())
}

per_major!(readme_setup => readme_source_setup_works_as_written: pg15, pg18);
