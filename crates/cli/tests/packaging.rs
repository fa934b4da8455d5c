//! What an operator installs walshadow with: the systemd unit in
//! `packaging/systemd/` (verified by `systemd-analyze verify`, its man page
//! reference resolved against the pages `walshadow man --dir` writes), shell
//! completions and the manual page made from the command line's own
//! definition, and `--log-format json`: one JSON object per event, the
//! fatal error included, and a live `run`'s log (PostgreSQL 18) whose every
//! line parses, a multi-line `CREATE TABLE` statement among them. And
//! `walshadow teardown` (15 and 18): refused while `run` runs and without
//! `--yes`; then the slot goes, `run` no longer starts, and with
//! `--drop-config-table` the config table and its schema go too.

mod common;

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::{BIN, StreamHarness, same};
use walshadow_testkit::{PgMajor, WorkDir, per_major};

fn walshadow(args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(BIN).args(args).output()?)
}

#[test]
fn the_systemd_unit_verifies() -> Result<()> {
    let work = WorkDir::new("packaging-unit")?;
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../packaging/systemd/walshadow.service"
    ))?;
    ensure!(unit.contains("ExecStart=/usr/bin/walshadow run --config"));
    // Verified as installed: this binary where the unit expects it, the
    // manual pages where `man` finds them (Documentation=man:walshadow(1)).
    let here = work.path().join("walshadow.service");
    std::fs::write(&here, unit.replace("/usr/bin/walshadow", BIN))?;
    let man1 = work.path().join("man/man1");
    std::fs::create_dir_all(&man1)?;
    let out = walshadow(&["man", "--dir", man1.to_str().context("path")?])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&here)
        .env("MANPATH", work.path().join("man"))
        .output()
        .context("systemd-analyze (scripts/setup installs systemd)")?;
    let said = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {}\n{said}",
        out.status
    );
    Ok(())
}

#[test]
fn completions_and_the_manual_come_from_the_cli() -> Result<()> {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = walshadow(&["completions", shell])?;
        let script = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && script.contains("walshadow") && script.contains("resync"),
            "completions {shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = walshadow(&["man"])?;
    let page = String::from_utf8_lossy(&out.stdout);
    ensure!(
        page.contains(".TH walshadow 1") && page.contains("log\\-format"),
        "{page}"
    );
    let work = WorkDir::new("packaging-man")?;
    let out = walshadow(&["man", "--dir", work.path().to_str().context("path")?])?;
    ensure!(out.status.success());
    for page in ["walshadow.1", "walshadow-run.1", "walshadow-table-resync.1"] {
        let text = std::fs::read_to_string(work.path().join(page))
            .with_context(|| format!("{page} not written"))?;
        ensure!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
    }
    Ok(())
}

/// `wal dump`'s filters are named as pg_waldump names them; a wrong one
/// is refused with what it expects (their effect is checked against
/// pg_waldump in wal_dump_parity.rs).
#[test]
fn wal_dump_filters_are_checked() -> Result<()> {
    let out = walshadow(&["wal", "dump", "--rmgr", "list"])?;
    let names = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success()
            && ["Heap", "Heap2", "Transaction", "XLOG", "Btree"]
                .iter()
                .all(|n| names.lines().any(|l| l == *n)),
        "{names}"
    );
    for (args, needle) in [
        (&["--rmgr", "Hep"][..], "no such resource manager"),
        (
            &["--relation", "1663/5"][..],
            "TABLESPACE/DATABASE/RELFILENODE",
        ),
        (&["--block", "3"][..], "--relation"),
        (&["--fork", "toast"][..], "main"),
    ] {
        let mut all = vec!["wal", "dump", "--start", "0/1000000"];
        all.extend_from_slice(args);
        all.push("/nonexistent");
        let out = walshadow(&all)?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && said.contains(needle),
            "{args:?}: {said}"
        );
    }
    Ok(())
}

#[test]
fn a_fatal_error_is_one_json_line() -> Result<()> {
    let out = walshadow(&[
        "--log-format",
        "json",
        "status",
        "--config",
        "/nonexistent.toml",
    ])?;
    ensure!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().collect();
    ensure!(lines.len() == 1, "{text}");
    let event: serde_json::Value = serde_json::from_str(lines[0]).context("not JSON")?;
    ensure!(
        event["level"] == "ERROR"
            && event["error"]
                .as_str()
                .is_some_and(|e| e.contains("reading config file /nonexistent.toml")),
        "{event}"
    );
    let out = Command::new(BIN)
        .args(["status", "--config", "/x"])
        .env("WALSHADOW_LOG_FORMAT", "yaml")
        .output()?;
    ensure!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("possible values: text, json")
    );
    Ok(())
}

/// `run` with `WALSHADOW_LOG_FORMAT=json` (as the unit sets it): every
/// line of its log is a JSON object, the `CREATE TABLE` statement (many
/// lines of SQL) is one of them, and rows stream as with text logs.
fn json_run_log(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "json-log", &["public.t"], "")?;
    h.env.push(("WALSHADOW_LOG_FORMAT".into(), "json".into()));
    h.source
        .psql("create table t (id int primary key, v text);")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'v' || g from generate_series(1, 50) g;")?;
    h.wait_caught_up(Duration::from_secs(120))?;
    let n = h.assert_equal("public.t", "t", &[same("id"), same("v")])?;
    ensure!(n == 50, "{n} rows");
    h.stop_run()?;
    let log = std::fs::read_to_string(h.run_log_path())?;
    let mut statement = None;
    for line in log.lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("not a JSON event: {line}"))?;
        let message = event["message"].as_str().unwrap_or_default();
        if message.starts_with("ClickHouse: CREATE TABLE") {
            statement = Some(message.to_owned());
        }
    }
    let statement = statement.context("no CREATE TABLE event")?;
    ensure!(statement.contains('\n'), "{statement}");
    ensure!(log.lines().count() > 5, "{log}");
    Ok(())
}

per_major!(json_run_log => a_json_run_log_is_one_event_per_line: pg18);

/// `walshadow teardown` against a source `init` prepared and `run` used.
fn teardown(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "teardown", &["public.t"], "")?;
    h.source
        .psql("create table t (id int primary key, v text);")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'v' || g from generate_series(1, 20) g;")?;
    h.wait_caught_up(Duration::from_secs(120))?;
    let slots = |h: &StreamHarness| -> Result<String> {
        h.source.query_one(
            "select count(*) from pg_replication_slots where slot_name = 'walshadow_stream'",
        )
    };
    let config_table = |h: &StreamHarness| -> Result<String> {
        h.source
            .query_one("select count(*) from pg_class where oid = to_regclass('walshadow.tables')")
    };
    let config = h.config().to_owned();
    let refused = |h: &StreamHarness, args: &[&str], needle: &str| -> Result<()> {
        let out = h.cli(args)?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && said.contains(needle),
            "{args:?}: {said}"
        );
        Ok(())
    };
    // While run runs: refused, naming it.
    refused(
        &h,
        &["teardown", "--config", &config, "--yes"],
        "stop it first",
    )?;
    h.stop_run()?;
    // Without --yes: the plan, nothing changed.
    refused(
        &h,
        &["teardown", "--config", &config, "--drop-config-table"],
        "nothing was changed: pass --yes",
    )?;
    ensure!(slots(&h)? == "1" && config_table(&h)? == "1");
    let out = h.cli_ok(&["teardown", "--config", &config, "--yes"])?;
    ensure!(
        out.contains("dropped") && out.contains("left in place"),
        "{out}"
    );
    ensure!(slots(&h)? == "0", "the slot is still there");
    ensure!(config_table(&h)? == "1", "the config table went unasked");
    // Nothing starts on what is left.
    refused(&h, &["run", "--config", &config], "init")?;
    // Again, with the config table: the slot is already gone.
    let out = h.cli_ok(&[
        "teardown",
        "--config",
        &config,
        "--yes",
        "--drop-config-table",
    ])?;
    ensure!(out.contains("there was none"), "{out}");
    ensure!(config_table(&h)? == "0", "the config table is still there");
    let schema = h
        .source
        .query_one("select count(*) from pg_namespace where nspname = 'walshadow'")?;
    ensure!(
        schema == "0",
        "the config table's empty schema is still there"
    );
    // The destination keeps what was replicated.
    let n = h.ch.query("SELECT count() FROM app.t FINAL")?;
    ensure!(n.trim() == "20", "ClickHouse has {n} rows");
    Ok(())
}

per_major!(teardown => teardown_drops_what_init_made: pg15, pg18);
