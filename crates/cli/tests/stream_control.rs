//! `walshadow ctl` and SIGHUP, on PostgreSQL 15 and 18, each ending with
//! the row-by-row oracle (source table = ClickHouse `FINAL`):
//!
//! - pause and resume with a workload in between: the rows in hand land
//!   before `pause` answers; while paused the intake hears the source's
//!   WAL and nothing of it is applied (`applied` and ClickHouse stay put),
//!   `status` says paused; a restart stays paused; after `resume` every
//!   row arrives;
//! - reload: a file that does not validate (SIGHUP) changes nothing and
//!   the log says why, the stream goes on; a valid one applies the batch
//!   and flush settings at once, takes a `[table]` section added (loaded
//!   with its `copy`) and lets go of one removed, and names what waits for
//!   a restart (a `[stream]` change), which the next start applies;
//! - the socket: mode 0600; another OS user is refused by its mode, and by
//!   its peer credentials when the mode is opened up (root only).

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{FaultProxy, Lsn, PgMajor, ProxyMode, ServerUser, wait_until};

const CATCH_UP: Duration = Duration::from_secs(180);
/// `nobody` on Debian.
const OTHER_UID: u32 = 65534;

fn cols() -> Vec<OracleColumn> {
    vec![same("id"), same("v")]
}

/// Streaming `public.t`, with 100 rows of it in ClickHouse.
fn streaming(major: PgMajor, tag: &str) -> Result<StreamHarness> {
    streaming_with(major, tag, |_| {})
}

fn streaming_with(
    major: PgMajor,
    tag: &str,
    before_start: impl FnOnce(&mut StreamHarness),
) -> Result<StreamHarness> {
    let mut h = StreamHarness::new(BIN, major, tag, &["public.t"], "")?;
    h.source
        .psql("create table t (id int primary key, v text)")?;
    before_start(&mut h);
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into t select g, 'a' from generate_series(1, 100) g")?;
    h.wait_caught_up(CATCH_UP)?;
    Ok(h)
}

fn ctl(h: &StreamHarness, command: &str) -> Result<String> {
    h.cli_ok(&["ctl", "--config", h.config(), command])
}

fn ch_count(h: &StreamHarness, table: &str) -> Result<u64> {
    Ok(h.ch
        .query(&format!("SELECT count() FROM app.{table} FINAL"))?
        .trim()
        .parse()?)
}

fn lsn_of(v: &serde_json::Value) -> Option<Lsn> {
    v.as_str().and_then(|s| s.parse().ok())
}

/// Waits until the running stream wrote its status after the source's
/// WAL end reached `target`: from then on, what it would have applied of
/// that WAL it would have applied by the next write.
fn wait_heard(h: &StreamHarness, target: Lsn) -> Result<()> {
    let path = h.state_dir.join("status.json");
    wait_until(
        Duration::from_secs(60),
        "the source's WAL end to be heard",
        || {
            // The stream's own file: `source_end` is what the intake heard.
            let Ok(text) = std::fs::read_to_string(&path) else {
                return Ok(false);
            };
            let Ok(s) = serde_json::from_str::<serde_json::Value>(&text) else {
                return Ok(false);
            };
            Ok(lsn_of(&s["source_end"]).is_some_and(|l| l >= target)
                && s["pid"].as_u64() == h.run_pid().map(u64::from)
                && s["paused"].is_object())
        },
    )?;
    let written = std::fs::metadata(&path)?.modified()?;
    wait_until(Duration::from_secs(30), "a status write after that", || {
        Ok(std::fs::metadata(&path)?.modified()? > written)
    })
}

fn pause_resume(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "pause")?;
    let socket = h.state_dir.join("control.sock");
    let mode = std::fs::metadata(&socket)?.mode() & 0o777;
    ensure!(mode == 0o600, "control.sock mode {mode:o}");

    // What the stream decoded is in ClickHouse when the pause answers.
    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 150) g")?;
    h.wait_caught_up(CATCH_UP)?;
    let before_pause = h.applied()?.context("applied")?;
    let out = ctl(&h, "pause")?;
    ensure!(out.contains("paused at"), "{out}");
    ensure!(
        ch_count(&h, "t")? == 150,
        "the rows in hand did not land first"
    );
    let applied = h.applied()?.context("applied")?;
    ensure!(
        applied >= before_pause,
        "paused at {applied}, before {before_pause}"
    );
    ensure!(ctl(&h, "pause")?.contains("already paused"));

    // A workload while paused: heard, not applied.
    h.source.psql(
        "insert into t select g, 'c' from generate_series(151, 300) g; \
         update t set v = 'u' where id <= 50; delete from t where id between 51 and 60",
    )?;
    let target = h.source.flush_lsn()?;
    wait_heard(&h, target)?;
    ensure!(h.applied()? == Some(applied), "applied moved while paused");
    ensure!(ch_count(&h, "t")? == 150, "rows applied while paused");
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(text.contains("PAUSED"), "{text}");
    let live = ctl(&h, "status")?;
    let live: serde_json::Value = serde_json::from_str(&live)?;
    ensure!(live["paused"]["at"] == applied.to_string(), "{live}");

    // A restart stays paused. The stop is clean: nothing was held back.
    h.stop_run()?;
    let log = h.run_log();
    ensure!(!log.contains("did not take the last rows"), "{log}");
    let stopped = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(stopped.contains("PAUSED"), "{stopped}");
    h.start_run()?;
    wait_until(
        Duration::from_secs(60),
        "the restarted run's status",
        || Ok(h.run_log().contains("paused (by `walshadow ctl pause`)")),
    )?;
    wait_heard(&h, target)?;
    ensure!(
        h.applied()? == Some(applied),
        "applied moved after the restart"
    );
    ensure!(ch_count(&h, "t")? == 150, "rows applied after the restart");

    let out = ctl(&h, "resume")?;
    ensure!(out.contains("resumed"), "{out}");
    ensure!(ctl(&h, "resume")?.contains("not paused"));
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 290, "{n} rows");
    ensure!(h.status_json()?["paused"].is_null());
    h.stop_run()?;
    Ok(())
}

per_major!(pause_resume => pause_and_resume_with_a_workload_between: pg15, pg18);

fn reload(major: PgMajor) -> Result<()> {
    // What is logged comes from the file (`[log] level`), not the
    // environment.
    let mut h = streaming_with(major, "reload", |h| h.log_filter.clear())?;
    h.source
        .psql("create table u (id int primary key, v text); insert into u values (1, 'x')")?;
    let path = h.config.clone();
    let good = std::fs::read_to_string(&path)?;
    ensure!(good.contains("batch_ms = 200"), "{good}");

    // A file that does not validate: nothing changes, the log says why.
    std::fs::write(&path, format!("{good}\nthis is not toml\n"))?;
    let pid = h.run_pid().context("run pid")?;
    let sent = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()?;
    ensure!(sent.success());
    wait_until(
        Duration::from_secs(30),
        "the refused reload in the log",
        || Ok(h.run_log().contains("reload refused:")),
    )?;
    let log = h.run_log();
    ensure!(log.contains("does not validate, nothing changed"), "{log}");
    h.check_running()?;
    // (`walshadow status` reads the file too.)
    std::fs::write(&path, &good)?;
    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 200) g")?;
    h.wait_caught_up(CATCH_UP)?;

    // A log filter that does not parse: nothing of the file applies.
    let changed = good.replace("batch_ms = 200", "batch_ms = 300\nbatch_rows = 5000")
        + "\n[stream]\nmemory_mb = 200\n\n[table.\"public.u\"]\ninitial_load = \"copy\"\n";
    std::fs::write(
        &path,
        format!("{changed}\n[log]\nlevel = \"info,walshadow=notalevel\"\n"),
    )?;
    let out = h.cli(&["ctl", "--config", h.config(), "reload"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("is not a filter"),
        "{err}"
    );
    ensure!(
        !h.run_log().contains("DEBUG"),
        "debug events before [log] level said so"
    );

    // A valid change: applied at once, or named as waiting for a restart.
    std::fs::write(&path, format!("{changed}\n[log]\nlevel = \"debug\"\n"))?;
    let out = ctl(&h, "reload")?;
    for needle in [
        "[log] level: None → Some(\"debug\")",
        "[clickhouse] batch_ms: 200 → 300",
        "[clickhouse] batch_rows: 100000 → 5000",
        "applied at the next start of `walshadow run`",
        "[stream]: changed",
        "[table.\"public.u\"]: added: streamed from the next commit boundary",
    ] {
        ensure!(out.contains(needle), "no {needle:?} in {out}");
    }
    // Again: nothing more to apply; the rest still waits.
    let again = ctl(&h, "reload")?;
    ensure!(
        !again.contains("applied:") && again.contains("[stream]: changed"),
        "{again}"
    );
    h.source.psql("update t set v = 'r' where id <= 100")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        h.run_log().contains("DEBUG"),
        "no debug events after the reload"
    );
    ensure!(h.assert_equal("t", "t", &cols())? == 200);
    // The table added by the reload: loaded with its copy, no restart.
    common::loads::wait_loaded(&mut h, "public.u")?;
    ensure!(ch_count(&h, "u")? == 1);

    // The next start applies the rest; u streams on.
    h.stop_run()?;
    h.start_run()?;
    h.source.psql("insert into u values (2, 'y')")?;
    wait_until(CATCH_UP, "u loaded", || {
        Ok(h.ch
            .query("SELECT count() FROM system.tables WHERE database = 'app' AND name = 'u'")?
            .trim()
            == "1"
            && ch_count(&h, "u")? == 2)
    })?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("u", "u", &cols())? == 2);
    // Its section removed by a reload: no longer streamed, table kept.
    std::fs::write(&path, format!("{good}\n[stream]\nmemory_mb = 200\n"))?;
    let out = ctl(&h, "reload")?;
    ensure!(
        out.contains("[table.\"public.u\"]: removed: no longer streamed"),
        "{out}"
    );
    wait_until(Duration::from_secs(30), "u let go", || {
        Ok(h.run_log().contains("[table] section removed by a reload"))
    })?;
    h.source.psql("insert into u values (3, 'z')")?;
    h.source.psql("insert into t values (1000, 'after')")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(ch_count(&h, "u")? == 2, "u streamed after its section went");
    ensure!(ch_count(&h, "t")? == 201);
    h.stop_run()?;
    Ok(())
}

per_major!(reload => reload_applies_what_it_can_and_refuses_a_bad_file: pg15, pg18);

fn other_users(major: PgMajor) -> Result<()> {
    let user = ServerUser::get()?;
    if !user.switches_user {
        eprintln!("control socket drill skipped: it needs root (to be a second OS user)");
        return Ok(());
    }
    let mut h = streaming(major, "ctl-users")?;
    // Traversable, as /var/lib is: only the socket's own guards stand.
    std::fs::set_permissions(h.work.path(), std::fs::Permissions::from_mode(0o755))?;
    // A config the other user can read, naming the same state directory.
    let copy =
        std::env::temp_dir().join(format!("walshadow-ctl-other-{}.toml", std::process::id()));
    std::fs::copy(&h.config, &copy)?;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644))?;
    let as_other = || {
        let mut c = Command::new(BIN);
        c.args(["ctl", "--config"])
            .arg(&copy)
            .arg("pause")
            .uid(OTHER_UID)
            .gid(OTHER_UID)
            .current_dir("/")
            .env_clear()
            .stdin(Stdio::null());
        c.output()
    };
    let out = as_other()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "another user paused the stream:\n{err}"
    );
    ensure!(
        err.contains("permission denied: only the user walshadow runs as"),
        "{err}"
    );
    // Past the mode, the peer's credentials refuse it.
    let socket = h.state_dir.join("control.sock");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))?;
    let out = as_other()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "another user paused the stream:\n{err}"
    );
    ensure!(
        err.contains("only the user walshadow runs as, or root"),
        "{err}"
    );
    ensure!(h.run_log().contains("a connection of another user refused"));
    let _ = std::fs::remove_file(&copy);
    ensure!(
        h.status_json()?["paused"].is_null(),
        "paused by another user"
    );
    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 200) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("t", "t", &cols())? == 200);
    h.stop_run()?;
    Ok(())
}

per_major!(other_users => another_user_cannot_control_the_run: pg15, pg18);

fn add_remove(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "table-add")?;
    h.source.psql(
        "create table u (id int primary key, v text); \
         insert into u select g, 'a' from generate_series(1, 50) g",
    )?;
    let cli_err = |h: &StreamHarness, args: &[&str]| -> Result<String> {
        let out = h.cli(args)?;
        ensure!(!out.status.success(), "{args:?} succeeded");
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let config = h.config().to_owned();
    // The file's tables are the file's.
    for cmd in ["add", "remove"] {
        let err = cli_err(&h, &["table", cmd, "public.t", "--config", &config])?;
        ensure!(err.contains("pinned in the config file"), "{err}");
    }
    let err = cli_err(
        &h,
        &[
            "table",
            "add",
            "public.u",
            "--initial-load",
            "snapshot",
            "--config",
            &config,
        ],
    )?;
    ensure!(
        err.contains("one of none, copy, base_backup, object_store"),
        "{err}"
    );
    let err = cli_err(&h, &["table", "remove", "public.u", "--config", &config])?;
    ensure!(err.contains("has no row in the config table"), "{err}");

    let out = h.cli_ok(&["table", "add", "public.u", "--config", &config])?;
    ensure!(out.contains("added to the config table"), "{out}");
    common::loads::wait_loaded(&mut h, "public.u")?;
    h.source
        .psql("insert into u select g, 'b' from generate_series(51, 60) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("u", "u", &cols())? == 60);

    let out = h.cli_ok(&["table", "remove", "public.u", "--config", &config])?;
    ensure!(out.contains("set not to replicate"), "{out}");
    h.source
        .psql("insert into u select g, 'c' from generate_series(61, 70) g")?;
    h.wait_caught_up(CATCH_UP)?;
    ensure!(
        ch_count(&h, "u")? == 60,
        "rows of an opted-out table arrived"
    );
    let list = h.cli_ok(&["table", "list", "--config", &config])?;
    ensure!(
        list.lines()
            .any(|l| l.contains("public.u") && l.contains("opted out")),
        "{list}"
    );
    // t streamed on throughout.
    ensure!(h.assert_equal("t", "t", &cols())? == 100);
    h.stop_run()?;
    Ok(())
}

per_major!(add_remove => tables_added_and_removed_through_the_config_table: pg15, pg18);

/// A reload is taken while the stream waits for ClickHouse: the endpoint
/// it waits on is replaced and the waiting insert goes through at once; a
/// pause asked meanwhile is refused with what the stream waits for.
fn reload_while_waiting(major: PgMajor) -> Result<()> {
    let mut h = streaming(major, "reload-wait")?;
    let direct = format!("url = \"{}\"", h.ch.url());
    let proxy = FaultProxy::start(&h.ch.url())?;
    proxy.set_mode(ProxyMode::Status(502));
    let good = std::fs::read_to_string(&h.config)?;
    ensure!(good.contains(&direct), "{good}");
    std::fs::write(
        &h.config,
        good.replace(&direct, &format!("url = \"{}\"", proxy.url())),
    )?;
    let out = ctl(&h, "reload")?;
    ensure!(out.contains("[clickhouse] url:"), "{out}");

    h.source
        .psql("insert into t select g, 'b' from generate_series(101, 200) g")?;
    wait_until(
        Duration::from_secs(60),
        "the stream waiting for ClickHouse",
        || {
            let s = h.status_json()?;
            Ok(s["destination"]["failing_since_unix_ms"].is_u64())
        },
    )?;
    let out = h.cli(&["ctl", "--config", h.config(), "pause"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("the stream waits for ClickHouse"),
        "{err}"
    );

    std::fs::write(&h.config, &good)?;
    let out = ctl(&h, "reload")?;
    ensure!(out.contains("[clickhouse] url:"), "{out}");
    h.wait_caught_up(CATCH_UP)?;
    ensure!(h.assert_equal("t", "t", &cols())? == 200);
    ensure!(h.status_json()?["destination"]["failing_since_unix_ms"].is_null());
    h.stop_run()?;
    Ok(())
}

per_major!(reload_while_waiting => a_reload_fixes_the_endpoint_the_stream_waits_on: pg15, pg18);
