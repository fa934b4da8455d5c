//! Tables taken by pattern, on PostgreSQL 15 and 18, ending with the
//! row-by-row oracle: a glob (`public.ord_*`) with an exclusion and a
//! regular expression (`~^app\.ev_[0-9]+$`), each with `copy` loads.
//! Tables that match when `run` starts are loaded and stream; tables a
//! commit creates later (a partitioned one among them, whose root has no
//! file) are taken at that commit, the rows of their own transaction
//! included; a table renamed into a pattern is taken at the rename and its
//! rows loaded; an excluded table, tables that match no pattern, and
//! temporary and unlogged tables that would match are left alone; `table
//! add` refuses a table a pattern takes; tables a pattern took that are
//! dropped or renamed away are let go and shown `out` in status (one made
//! again under the name is taken again, with its rows), as is one the
//! pattern's exclude names after a restart; `kill -9` right after a table
//! was taken, and a restart, go on.

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

const PATTERNS: &str = r#"
[table."public.ord_*"]
initial_load = "copy"
exclude = ["public.ord_skip"]

[table."~^app\\.ev_[0-9]+$"]
initial_load = "copy"

[table."public.other"]
destination = "ord_clash"
"#;

fn ch_tables(h: &StreamHarness) -> Result<Vec<String>> {
    Ok(h.ch
        .query("SELECT name FROM system.tables WHERE database = 'app' ORDER BY name")?
        .lines()
        .map(str::to_owned)
        .collect())
}

fn patterns(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "patterns", &[], PATTERNS)?;
    h.source.psql(
        "create table ord_a (id int primary key, v text); \
         insert into ord_a select g, 'a' from generate_series(1, 50) g; \
         create table ord_skip (id int primary key, v text); \
         insert into ord_skip values (1, 'x'); \
         create table other (id int primary key, v text); \
         insert into other values (1, 'x'); \
         create table ord_clash (id int primary key, v text); \
         create schema app; \
         create table app.ev_1 (id int primary key, v text); \
         insert into app.ev_1 select g, 'e' from generate_series(1, 10) g; \
         create table app.ev_x (id int primary key, v text); \
         insert into app.ev_x values (1, 'x')",
    )?;
    h.init()?;
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.ord_a")?;
    common::loads::wait_loaded(&mut h, "app.ev_1")?;
    // A table the pattern matches whose ClickHouse name another table
    // streams into: refused, and status says why and what to do.
    let mut status = serde_json::Value::Null;
    wait_until(
        Duration::from_secs(30),
        "ord_clash refused in status",
        || {
            status = h.status_json()?;
            Ok(status["tables"]["public.ord_clash"]["stopped"]["code"] == "destination_taken")
        },
    )?;
    let clash = &status["tables"]["public.ord_clash"]["stopped"];
    ensure!(
        clash["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("exclude of [table.\"public.ord_*\"]")),
        "{clash}"
    );

    // Made while streaming: taken at their commits, their own rows too.
    h.source.psql(
        "create table plain_before (id int primary key, v text); \
         insert into plain_before select g, 'p' from generate_series(1, 7) g; \
         begin; create table ord_new (id int primary key, v text); \
         insert into ord_new select g, 'n' from generate_series(1, 20) g; commit; \
         begin; create table ord_part (id int primary key, v text) partition by range (id); \
         create table ord_part_1 partition of ord_part for values from (0) to (1000); \
         insert into ord_part select g, 'q' from generate_series(1, 12) g; commit; \
         alter table plain_before rename to ord_renamed; \
         create table app.ev_2 (id int primary key, v text); \
         insert into app.ev_2 select g, 'f' from generate_series(1, 5) g; \
         create unlogged table ord_unlogged (id int primary key, v text); \
         insert into ord_unlogged values (1, 'u'); \
         create temp table ord_tmp (id int primary key, v text); \
         insert into ord_tmp values (1, 't'); \
         update ord_new set v = 'm' where id <= 5; delete from ord_new where id = 20; \
         update ord_a set v = 'b' where id <= 10; \
         insert into app.ev_1 values (11, 'g')",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("ord_a", "ord_a", &cols())? == 50);
    ensure!(h.assert_equal("ord_new", "ord_new", &cols())? == 19);
    ensure!(h.assert_equal("ord_part", "ord_part", &cols())? == 12);
    common::loads::wait_loaded(&mut h, "public.ord_renamed")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("ord_renamed", "ord_renamed", &cols())? == 7);
    ensure!(h.assert_equal("app.ev_1", "app__ev_1", &cols())? == 11);
    ensure!(h.assert_equal("app.ev_2", "app__ev_2", &cols())? == 5);
    let tables = ch_tables(&h)?;
    for absent in [
        "ord_skip",
        "other",
        "app__ev_x",
        "ord_unlogged",
        "ord_tmp",
        "ord_part_1",
    ] {
        ensure!(
            !tables.iter().any(|t| t == absent),
            "{absent} in ClickHouse: {tables:?}"
        );
    }
    let log = h.run_log();
    ensure!(
        log.lines()
            .any(|l| l.contains("table taken by a pattern") && l.contains("public.ord_new")),
        "no log line for ord_new"
    );

    // A table a pattern took, dropped or renamed away: let go, and status
    // says so (it listed them as streaming until a restart); made again,
    // it is taken again with its rows.
    h.source
        .psql("drop table ord_part; alter table ord_renamed rename to plain_again")?;
    h.wait_caught_up(CATCH_UP)?;
    wait_until(Duration::from_secs(30), "the gone tables out", || {
        let status = h.status_json()?;
        Ok(["public.ord_part", "public.ord_renamed"].iter().all(|k| {
            status["tables"][k]["out"]
                .as_str()
                .is_some_and(|o| o.contains("dropped or renamed at the source"))
        }))
    })?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        text.lines()
            .any(|l| l.contains("public.ord_part") && l.contains("not streamed since")),
        "{text}"
    );
    h.source.psql(
        "begin; create table ord_part (id int primary key, v text); \
         insert into ord_part select g, 'again' from generate_series(1, 3) g; commit",
    )?;
    common::loads::wait_loaded(&mut h, "public.ord_part")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("ord_part", "ord_part", &cols())? == 3);
    ensure!(h.status_json()?["tables"]["public.ord_part"]["out"].is_null());

    // The file's pattern decides, not the config table.
    let out = h.cli(&["table", "add", "public.ord_a", "--config", h.config()])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("taken by the config file's pattern"),
        "{err}"
    );

    // Killed right after a table was taken: the restart takes it again
    // before its commit is decoded again.
    h.source.psql(
        "begin; create table ord_k (id int primary key, v text); \
         insert into ord_k select g, 'k' from generate_series(1, 9) g; commit",
    )?;
    let target = h.source.flush_lsn()?;
    wait_until(Duration::from_secs(60), "ord_k taken", || {
        Ok(h.run_log().contains("public.ord_k"))
    })?;
    h.kill_run()?;
    h.start_run()?;
    h.source
        .psql("insert into ord_new select g, 'r' from generate_series(21, 30) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.applied()?.is_some_and(|a| a >= target));
    ensure!(h.assert_equal("ord_new", "ord_new", &cols())? == 29);
    ensure!(h.assert_equal("ord_k", "ord_k", &cols())? == 9);
    let tables = ch_tables(&h)?;
    // And a clean restart takes the same tables.
    h.stop_run()?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(ch_tables(&h)? == tables);
    ensure!(h.assert_equal("ord_k", "ord_k", &cols())? == 9);
    ensure!(
        h.status_json()?["tables"]["public.ord_renamed"]["out"]
            .as_str()
            .is_some_and(|o| o.contains("dropped or renamed")),
        "a restart keeps saying why ord_renamed is out"
    );
    // While walshadow was stopped: a table dropped (its drop is decoded
    // after the start, and lets it go), and one the pattern's exclude now
    // names (nothing takes it at the start): status says neither streams.
    h.stop_run()?;
    h.source.psql("drop table ord_k")?;
    let config = std::fs::read_to_string(h.config())?;
    let excluded = config.replace(
        r#"exclude = ["public.ord_skip"]"#,
        r#"exclude = ["public.ord_skip", "public.ord_new"]"#,
    );
    ensure!(excluded != config);
    std::fs::write(h.config(), excluded)?;
    h.start_run()?;
    h.wait_caught_up(CATCH_UP)?;
    let status = h.status_json()?;
    let out = |key: &str, why: &str| {
        status["tables"][key]["out"]
            .as_str()
            .is_some_and(|o| o.contains(why))
    };
    ensure!(
        out("public.ord_k", "dropped or renamed") && out("public.ord_new", "at this start"),
        "{}",
        status["tables"]
    );
    // Changed while out, then pinned by its own section: it streams again,
    // and what changed meanwhile is loaded.
    h.source
        .psql("insert into ord_new select g, 'out' from generate_series(31, 35) g")?;
    h.wait_caught_up(CATCH_UP)?;
    h.stop_run()?;
    h.append_config("\n[table.\"public.ord_new\"]\ninitial_load = \"copy\"\n")?;
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.ord_new")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("ord_new", "ord_new", &cols())? == 34);
    ensure!(h.status_json()?["tables"]["public.ord_new"]["out"].is_null());
    h.stop_run()?;
    Ok(())
}

per_major!(patterns => tables_taken_by_pattern_at_start_and_when_created: pg15, pg18);

/// A pattern added by `walshadow ctl reload` takes its tables without a
/// restart: loaded with its `initial_load`, and tables created after it.
fn pattern_by_reload(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "pattern-reload", &["public.t"], "")?;
    h.source.psql(
        "create table t (id int primary key, v text); \
         create table lt_a (id int primary key, v text); \
         insert into lt_a select g, 'a' from generate_series(1, 30) g",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql("insert into t values (1, 'x')")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(!ch_tables(&h)?.iter().any(|t| t == "lt_a"));

    h.append_config("\n[table.\"public.lt_*\"]\ninitial_load = \"copy\"\n")?;
    let out = h.cli_ok(&["ctl", "--config", h.config(), "reload"])?;
    ensure!(out.contains("[table] patterns"), "{out}");
    common::loads::wait_loaded(&mut h, "public.lt_a")?;
    h.source.psql(
        "insert into lt_a select g, 'b' from generate_series(31, 40) g; \
         create table lt_b (id int primary key, v text); \
         insert into lt_b select g, 'c' from generate_series(1, 6) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("lt_a", "lt_a", &cols())? == 40);
    ensure!(h.assert_equal("lt_b", "lt_b", &cols())? == 6);
    ensure!(h.assert_equal("t", "t", &cols())? == 1);
    h.stop_run()?;
    Ok(())
}

per_major!(pattern_by_reload => a_pattern_added_by_reload_takes_its_tables: pg15, pg18);

/// Pattern rows of the config table: a glob row (`public.cfg_*`, `copy`)
/// takes the tables that match at its commit and those created later (the
/// creating transaction's rows included); a table's own row saying not to
/// replicate wins over the pattern, and so does an exclusion pattern row
/// (`public.cfg_x*`, replicate false), which also lets go of a table the
/// glob took; a regular-expression row (`schema_name = '~'`) takes tables
/// by `schema.name`; `kill -9` and a restart keep the rows (they are read
/// from the WAL once).
/// `cfg_b` made with `rows` rows in its creating transaction, taken by
/// the glob row and equal in ClickHouse.
fn create_cfg_b(h: &mut StreamHarness, rows: usize) -> Result<()> {
    h.source.psql(&format!(
        "begin; create table cfg_b (id int primary key, v text); \
         insert into cfg_b select g, 'b' from generate_series(1, {rows}) g; commit"
    ))?;
    h.wait_caught_up(CATCH_UP)?;
    common::loads::wait_loaded(h, "public.cfg_b")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("cfg_b", "cfg_b", &cols())? == rows);
    Ok(())
}

fn config_table_patterns(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "cfgpatterns", &[], "")?;
    h.source.psql(
        "create table cfg_a (id int primary key, v text); \
         insert into cfg_a select g, 'a' from generate_series(1, 40) g; \
         create table cfg_off (id int primary key, v text); \
         insert into cfg_off values (1, 'x'); \
         create table cfg_x1 (id int primary key, v text); \
         insert into cfg_x1 values (1, 'x'); \
         create table cfgnot (id int primary key, v text); \
         create schema app; \
         create table app.ev_1 (id int primary key, v text); \
         insert into app.ev_1 select g, 'e' from generate_series(1, 10) g",
    )?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into walshadow.tables (schema_name, table_name, replicate, initial_load) values \
           ('public', 'cfg_off', false, null), \
           ('public', 'cfg_*', true, 'copy'), \
           ('~', '^app\\.ev_[0-9]+$', true, 'copy')",
    )?;
    common::loads::wait_loaded(&mut h, "public.cfg_a")?;
    common::loads::wait_loaded(&mut h, "public.cfg_x1")?;
    common::loads::wait_loaded(&mut h, "app.ev_1")?;
    // A table created later, with rows in its creating transaction.
    create_cfg_b(&mut h, 25)?;
    // A table made in the same transaction as its own row saying not to
    // replicate: its row wins, nothing of it reaches ClickHouse.
    h.source.psql(
        "begin; create table cfg_y (id int primary key, v text); \
         insert into cfg_y values (1, 'secret'); \
         insert into walshadow.tables (schema_name, table_name, replicate) values ('public', 'cfg_y', false); \
         commit",
    )?;
    // An exclusion row: it lets go of cfg_x1, and a cfg_x2 made after it
    // is not taken.
    h.source.psql(
        "insert into walshadow.tables (schema_name, table_name, replicate) values ('public', 'cfg_x*', false); \
         create table cfg_x2 (id int primary key, v text); insert into cfg_x2 values (1, 'x')",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    let x1 = h.table_state("public.cfg_x1")?;
    ensure!(x1["state"] == "opted out", "{x1}");
    let list = h.cli_ok(&["table", "list", "--config", h.config(), "--json"])?;
    let list: serde_json::Value = serde_json::from_str(&list)?;
    let keys: Vec<&str> = list
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["table"].as_str()).collect())
        .unwrap_or_default();
    for not_taken in [
        "public.cfg_off",
        "public.cfg_x2",
        "public.cfgnot",
        "public.cfg_y",
    ] {
        ensure!(!keys.contains(&not_taken), "{not_taken} taken: {keys:?}");
    }
    // kill -9, then a table created while stopped and one after the start.
    h.kill_run()?;
    h.source.psql(
        "create table cfg_c (id int primary key, v text); \
         insert into cfg_c select g, 'c' from generate_series(1, 5) g",
    )?;
    h.start_run()?;
    h.source.psql(
        "create table app.ev_2 (id int primary key, v text); \
         insert into app.ev_2 select g, 'f' from generate_series(1, 7) g; \
         insert into cfg_a select g, 'late' from generate_series(41, 45) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    for (t, n) in [("cfg_a", 45), ("cfg_b", 25), ("cfg_c", 5)] {
        ensure!(h.assert_equal(t, t, &cols())? == n, "{t}");
    }
    ensure!(h.assert_equal("app.ev_1", "app__ev_1", &cols())? == 10);
    ensure!(h.assert_equal("app.ev_2", "app__ev_2", &cols())? == 7);
    // A table a row took, dropped: let go and shown out; made again, it is
    // taken again with the rows of its creating transaction.
    h.source.psql("drop table cfg_b")?;
    h.wait_caught_up(CATCH_UP)?;
    wait_until(Duration::from_secs(30), "cfg_b out", || {
        Ok(h.status_json()?["tables"]["public.cfg_b"]["out"]
            .as_str()
            .is_some_and(|o| o.contains("dropped or renamed")))
    })?;
    create_cfg_b(&mut h, 4)?;
    ensure!(h.status_json()?["tables"]["public.cfg_b"]["out"].is_null());
    // The glob row's column rules change: the tables it took follow.
    h.source
        .psql("update walshadow.tables set exclude_columns = '{v}' where table_name = 'cfg_*'")?;
    wait_until(CATCH_UP, "cfg_a's v column dropped", || {
        Ok(h.ch.query(
            "SELECT count() FROM system.columns WHERE database = 'app' AND table = 'cfg_a' AND name = 'v'",
        )?
        .trim()
            == "0")
    })?;
    let names = ch_tables(&h)?;
    for absent in ["cfg_off", "cfg_x2", "cfgnot", "cfg_y"] {
        ensure!(
            !names.iter().any(|n| n == absent),
            "{absent} in ClickHouse: {names:?}"
        );
    }
    Ok(())
}

per_major!(config_table_patterns => pattern_rows_of_the_config_table: pg15, pg18);
