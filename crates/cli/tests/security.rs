//! Security drills, on PostgreSQL 15 and 18, with walshadow as root and
//! `[shadow] run_as` the server user, as the README lays it out, and the
//! state under a directory others can traverse (as `/var/lib` is):
//!
//! - another local user (`nobody`) reads no file walshadow wrote (state,
//!   progress, filtered WAL, TOAST mirror, shadow data) and reaches
//!   neither socket;
//! - the feeder serves no process but the shadow it started: root (not the
//!   shadow's uid) is refused by `SO_PEERCRED`, the shadow's own OS user
//!   without this start's password is refused before it can take the one
//!   standby slot;
//! - the shadow trusts no local connection: the server user itself cannot
//!   log in as the source's role (peer authentication maps only
//!   walshadow's OS user);
//! - the shadow's socket directory removed before `run` comes back 0700;
//! - `PGPASSWORD` in walshadow's environment is not in the shadow
//!   postmaster's (`/proc/<pid>/environ`);
//! - a database owner's functions in `public` named like the catalog's
//!   (`pg_relation_filenode(oid)`, `format(text, text, text)`) are never
//!   called by walshadow — not on the source during `init`, a `copy` load
//!   or TOAST reads, not on the shadow, where they replicate — and its
//!   `ALTER DATABASE … SET standard_conforming_strings = off` changes no
//!   quoting: a table named `it\'s` loads;
//! - `init` refuses a config table (or its schema) another role made
//!   first, or made while `init` ran, makes its own with nothing granted to PUBLIC, and with
//!   `[source] config_table_allow` a row opting in a table outside it is
//!   refused, in `status`, and nothing of that table reaches ClickHouse;
//!   a config table handed to another role later has its rows ignored;
//! - ClickHouse over https, client certificates required: `init` refuses
//!   what `run` would (a CA file that is not there) before it makes
//!   anything; the stream goes through the TLS port; a server presenting
//!   another CA's certificate (an impostor) pauses the stream, shown in
//!   `status` as a TLS error, and nothing is lost once the real one is
//!   back;
//!
//! and after each attempt the stream goes on: the oracle holds.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use common::{BIN, OracleColumn, StreamHarness, same};
use walshadow_testkit::{ClickHouseOptions, EngineTls, PgMajor, ServerUser, TestCa, WorkDir};

const CATCH_UP: Duration = Duration::from_secs(180);
/// `nobody` on Debian.
const ATTACKER_UID: u32 = 65534;

fn cols() -> Vec<OracleColumn> {
    vec![same("id"), same("v")]
}

/// Every path under `dir` (itself included), not following links.
/// Every path under `dir`. The daemon is running: a temporary file or a
/// recycled WAL segment may go between the listing and the look, and a path
/// that is gone has no mode to check.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    out.push(dir.to_owned());
    if meta.is_dir() {
        let entries = match std::fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            r => r?,
        };
        for e in entries {
            walk(&e?.path(), out)?;
        }
    }
    Ok(())
}

/// A command run as the attacker.
fn as_attacker(program: &Path) -> Command {
    let mut c = Command::new(program);
    c.uid(ATTACKER_UID)
        .gid(ATTACKER_UID)
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null());
    c
}

fn init_state(h: &StreamHarness) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(h.state_dir.join("init.json"))?;
    Ok(serde_json::from_str(&text)?)
}

fn drill(major: PgMajor) -> Result<()> {
    let user = ServerUser::get()?;
    if !user.switches_user {
        eprintln!("security drill skipped: it needs root (to be walshadow and a second OS user)");
        return Ok(());
    }
    let mut h = StreamHarness::new(BIN, major, "security", &["public.t"], "")?;
    // Traversable, as /var/lib is: only walshadow's own modes guard it.
    std::fs::set_permissions(h.work.path(), std::fs::Permissions::from_mode(0o755))?;
    h.source
        .psql("create table t (id int primary key, v text)")?;
    h.init()?;
    // A socket directory gone before `run` is made again, private.
    std::fs::remove_dir_all(h.state_dir.join("shadow-socket"))?;
    // A secret in walshadow's environment stays out of its children's.
    h.env
        .push(("PGPASSWORD".into(), "walshadow-env-secret".into()));
    h.start_run()?;
    h.source.psql(
        "insert into t select g, repeat('secret ', 400) || g from generate_series(1, 200) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;

    let pid = std::fs::read_to_string(h.data_dir.join("postmaster.pid"))?;
    let pid = pid
        .lines()
        .next()
        .context("postmaster.pid is empty")?
        .trim();
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    ensure!(
        !String::from_utf8_lossy(&environ).contains("walshadow-env-secret"),
        "the shadow's postmaster inherited PGPASSWORD"
    );

    // Nothing walshadow wrote is readable, or enterable, by others.
    let mut paths = Vec::new();
    walk(&h.state_dir, &mut paths)?;
    walk(&h.data_dir, &mut paths)?;
    let mut open = Vec::new();
    for p in &paths {
        let meta = match std::fs::symlink_metadata(p) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            r => r?,
        };
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.mode() & 0o777;
        // The state directory itself is 0711: the server user must pass
        // through to its socket directories.
        let allowed = if *p == h.state_dir { 0o711 } else { 0o700 };
        if mode & !allowed != 0 {
            open.push(format!("{:o} {}", mode, p.display()));
        }
    }
    ensure!(open.is_empty(), "readable by others:\n{}", open.join("\n"));
    for file in [
        "progress.json",
        "init.json",
        "toast-mirror.redb",
        "status.json",
    ] {
        let path = h.state_dir.join(file);
        if !path.exists() {
            continue;
        }
        let out = as_attacker(Path::new("/bin/cat")).arg(&path).output()?;
        ensure!(
            !out.status.success() && out.stdout.is_empty(),
            "nobody read {}",
            path.display()
        );
    }

    let state = init_state(&h)?;
    let feeder_port = state["feeder_port"].as_u64().context("feeder_port")?;
    let shadow_port = state["shadow_port"].as_u64().context("shadow_port")?;
    let feeder_dir = h.state_dir.join("feeder");
    let shadow_dir = h.state_dir.join("shadow-socket");
    for dir in [&feeder_dir, &shadow_dir] {
        let meta = std::fs::metadata(dir)?;
        ensure!(
            meta.mode() & 0o777 == 0o700 && meta.uid() == user.uid,
            "{}: mode {:o}, uid {}",
            dir.display(),
            meta.mode() & 0o777,
            meta.uid()
        );
    }
    let psql = h.source.install().bin("psql");
    let role = h.source.superuser().to_owned();
    let attempt = |cmd: &mut Command, what: &str, needle: &str| -> Result<()> {
        let out = cmd.stdin(Stdio::null()).output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "{what} succeeded:\n{err}");
        ensure!(err.contains(needle), "{what}: no {needle:?} in:\n{err}");
        Ok(())
    };
    let feeder_conn = format!(
        "host={} port={feeder_port} user=walshadow replication=true connect_timeout=10",
        feeder_dir.display()
    );
    let shadow_conn = |db: &str| {
        format!(
            "host={} port={shadow_port} user={role} dbname={db} connect_timeout=10",
            shadow_dir.display()
        )
    };
    // Another user reaches neither socket.
    attempt(
        as_attacker(&psql).args(["-Atc", "IDENTIFY_SYSTEM", &feeder_conn]),
        "nobody on the feeder",
        "Permission denied",
    )?;
    attempt(
        as_attacker(&psql).args(["-Atc", "select 1", &shadow_conn("postgres")]),
        "nobody on the shadow",
        "Permission denied",
    )?;
    // Root passes the directory, not the feeder's peer check.
    attempt(
        Command::new(&psql).args(["-Atc", "IDENTIFY_SYSTEM", &feeder_conn]),
        "root on the feeder",
        "serves only the shadow it started",
    )?;
    // The shadow's own OS user without this start's password.
    attempt(
        user.command(&psql, h.work.path())
            .args(["-w", "-Atc", "IDENTIFY_SYSTEM", &feeder_conn]),
        "the server user on the feeder",
        "password",
    )?;
    // The server user cannot be the source's role on the shadow.
    attempt(
        user.command(&psql, h.work.path()).args([
            "-w",
            "-Atc",
            "select 1",
            &shadow_conn("postgres"),
        ]),
        "the server user on the shadow",
        "authentication failed",
    )?;
    // walshadow's own sessions on the shadow still work (peer map).
    h.cli_ok(&["catalog", "show", "public.t", "--config", h.config()])?;

    // The stream went on through every attempt.
    h.source
        .psql("insert into t values (1000, 'after the attempts'); alter table t add column w int; insert into t values (1001, 'after DDL', 1)")?;
    h.wait_caught_up(CATCH_UP)?;
    let n = h.assert_equal("t", "t", &cols())?;
    ensure!(n == 202, "t: {n} rows");
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    ensure!(
        h.run_log().contains("feeder: refused a connection"),
        "the refused connections are not in the log:\n{}",
        common::tail(&h.run_log(), 30)
    );
    Ok(())
}

fn hostile_owner(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "hostile", &[], "")?;
    // The database belongs to a role that is not walshadow's; it plants
    // look-alikes of catalog functions that record each call.
    h.source.psql(
        "create role owner_role login;
         alter database postgres owner to owner_role;
         create table public.pwned (who text, what text);
         grant insert on public.pwned to public;
         set role owner_role;
         create function public.pg_relation_filenode(oid) returns oid language sql
           as $$ insert into public.pwned values (current_user, 'pg_relation_filenode') returning 0::oid $$;
         create function public.format(text, text, text) returns text language sql
           as $$ insert into public.pwned values (current_user, 'format') returning pg_catalog.format($1, $2, $3) $$;
         reset role;
         create table t (id int primary key, v text);
         insert into t select g, (select string_agg(md5(i::text || g), '') from generate_series(1, 400) i)
           from generate_series(1, 30) g;
         create table \"it\\'s\" (id int primary key, v text);
         insert into \"it\\'s\" select g, 'quoted ' || g from generate_series(1, 20) g;",
    )?;
    // Every session opened from here on gets it, unless it says otherwise.
    h.source
        .psql("alter database postgres set standard_conforming_strings = off")?;
    h.init()?;
    h.source.psql(
        "insert into walshadow.tables (schema_name, table_name, replicate, initial_load, destination)
           values ('public', 't', true, 'copy', null),
                  ('public', $n$it\\'s$n$, true, 'copy', 'hostile');",
    )?;
    h.start_run()?;
    common::loads::wait_loaded(&mut h, "public.t")?;
    common::loads::wait_loaded(&mut h, "public.it\\'s")?;
    // TOAST values read back from the source: an update of the other
    // column of rows whose values predate walshadow's start.
    h.source.psql("update t set id = id + 1000 where id <= 5")?;
    h.wait_caught_up(CATCH_UP)?;
    // A name that would forge a line of `status` (and of the log).
    h.source.psql(
        "insert into walshadow.tables values
           ('public', E'x\\n  public.t -> t: 0 rows, all good\\u001b[32m', true, 'none')",
    )?;
    walshadow_testkit::wait_until(Duration::from_secs(60), "the forged name in status", || {
        let text = h.cli_ok(&["status", "--config", h.config()])?;
        Ok(text.contains("x\\n  public.t -> t: 0 rows, all good\\u{1b}[32m"))
    })?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        !text.contains('\u{1b}')
            && !text
                .lines()
                .any(|l| l.starts_with("  public.t -> t: 0 rows, all good")),
        "status printed the name raw:\n{text}"
    );
    ensure!(!h.run_log().contains('\u{1b}'), "the log has a raw escape");
    let calls = h.source.query_one("select count(*) from public.pwned")?;
    ensure!(
        calls.trim() == "0",
        "walshadow called the owner's functions {calls} times: {}",
        h.source
            .psql("select who, what, count(*) from public.pwned group by 1, 2")?
    );
    h.assert_equal("t", "t", &cols())?;
    h.assert_equal("\"it\\'s\"", "hostile", &cols())?;
    h.stop_run()?;
    if h.run_log().contains("table stopped") {
        bail!("a table stopped:\n{}", h.run_log());
    }
    Ok(())
}

fn config_table_trust(major: PgMajor) -> Result<()> {
    let mut h = StreamHarness::new(BIN, major, "cfgtrust", &[], "")?;
    {
        let text = std::fs::read_to_string(&h.config)?.replacen(
            "[shadow]",
            "config_table_allow = [\"public.*\"]\n\n[shadow]",
            1,
        );
        std::fs::write(&h.config, text)?;
    }
    // Another role got there first.
    h.source.psql(
        "create role intruder login;
         grant create on database postgres to intruder;
         set role intruder;
         create schema walshadow;
         create table walshadow.tables (schema_name text, table_name text, replicate boolean,
                                        initial_load text, primary key (schema_name, table_name));
         reset role;",
    )?;
    let out = h.cli(&["init", "--config", h.config()])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("\"intruder\"") && err.contains("OWNER TO"),
        "init adopted the intruder's config table:\n{err}"
    );
    h.source.psql("drop schema walshadow cascade")?;
    // The intruder racing init: its schema and table, created in a
    // transaction still open when init looks, committed while init
    // creates its own. init must not adopt them.
    let source = h.source.clone();
    let racer = std::thread::spawn(move || {
        source.psql(
            "set role intruder;
             begin;
             create schema walshadow;
             create table walshadow.tables (schema_name text, table_name text, replicate boolean,
                                            initial_load text, primary key (schema_name, table_name));
             select pg_sleep(4);
             commit;",
        )
    });
    h.wait_for_session("pg_sleep(4)")?;
    let out = h.cli(&["init", "--config", h.config()])?;
    racer
        .join()
        .map_err(|_| anyhow::anyhow!("the racer panicked"))??;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("\"intruder\""),
        "init adopted a config table made while it ran:\n{err}"
    );
    h.source.psql("drop schema walshadow cascade")?;
    h.init()?;
    let grants = h.source.query_one(
        "select coalesce(array_to_string(relacl, ','), '') from pg_class where oid = 'walshadow.tables'::regclass",
    )?;
    // An ACL entry for PUBLIC has no grantee: "=r/owner".
    ensure!(
        !grants.split(',').any(|e| e.starts_with('=')),
        "PUBLIC has rights: {grants}"
    );
    ensure!(
        h.source
            .query_one("select has_table_privilege('intruder', 'walshadow.tables', 'INSERT')")?
            == "f",
        "the intruder may insert into the config table"
    );

    // Outside the allowlist: refused, visibly; inside it: streamed.
    h.source.psql(
        "create schema secret;
         create table secret.payroll (id int primary key, v text);
         insert into secret.payroll values (1, 'salary');
         create table public.ok (id int primary key, v text);
         insert into public.ok values (1, 'fine');",
    )?;
    h.start_run()?;
    h.source.psql(
        "insert into walshadow.tables values ('secret', 'payroll', true, 'copy'), ('public', 'ok', true, 'copy')",
    )?;
    common::loads::wait_loaded(&mut h, "public.ok")?;
    walshadow_testkit::wait_until(
        Duration::from_secs(60),
        "secret.payroll refused in status",
        || {
            let text = h.cli_ok(&["status", "--config", h.config()])?;
            Ok(text.contains("secret.payroll") && text.contains("config_table_allow"))
        },
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.ok", "ok", &cols())?;
    let tables =
        h.ch.query("SELECT name FROM system.tables WHERE database = 'app' FORMAT TSVRaw")?;
    ensure!(!tables.contains("payroll"), "ClickHouse has {tables}");
    // The config table handed to another role: its rows stop counting.
    h.source.psql(
        "create table public.ok2 (id int primary key, v text);
         insert into public.ok2 values (1, 'via a foreign config table');
         alter table walshadow.tables owner to intruder;
         grant usage on schema walshadow to intruder;
         set role intruder;
         insert into walshadow.tables values ('public', 'ok2', true, 'copy');
         reset role;",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    walshadow_testkit::wait_until(
        Duration::from_secs(60),
        "the foreign config table refused in the log",
        || {
            Ok(h.run_log()
                .contains("the config table walshadow.tables belongs to role \"intruder\""))
        },
    )?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        !text.contains("public.ok2"),
        "a foreign config table's row took effect:\n{text}"
    );
    ensure!(
        text.lines()
            .any(|l| l.starts_with("config table:    IGNORED")
                && l.contains("\"intruder\"")
                && l.contains("OWNER TO")),
        "status does not say the config table is ignored:\n{text}"
    );
    h.source
        .psql("alter table walshadow.tables owner to current_user")?;
    h.stop_run()?;
    // The allowlist narrowed: a table opted in before stops, visibly.
    let text = std::fs::read_to_string(&h.config)?.replace("\"public.*\"", "\"other.*\"");
    std::fs::write(&h.config, text)?;
    h.start_run()?;
    walshadow_testkit::wait_until(
        Duration::from_secs(60),
        "public.ok stopped as not allowed",
        || {
            let text = h.cli_ok(&["status", "--config", h.config()])?;
            Ok(text.lines().any(|l| {
                l.contains("public.ok") && l.contains("STOPPED") && l.contains("config_table_allow")
            }))
        },
    )?;
    h.stop_run()?;
    Ok(())
}

fn clickhouse_over_tls(major: PgMajor) -> Result<()> {
    let certs = WorkDir::new(&format!("chtls-certs-pg{}", major.number()))?;
    let ca = TestCa::new(certs.path(), "ch")?;
    let rogue = TestCa::new(certs.path(), "rogue")?;
    let real = EngineTls {
        server: ca.issue("server", &["DNS:localhost"])?,
        client_ca: Some(ca.cert().to_owned()),
    };
    let client = ca.issue("walshadow", &["DNS:walshadow"])?;
    let extra = format!(
        "ca_file = \"{}\"\nclient_cert = \"{}\"\nclient_key = \"{}\"\n",
        ca.cert().display(),
        client.cert.display(),
        client.key.display()
    );
    let mut h = StreamHarness::with_engine(
        BIN,
        major,
        "chtls",
        &["public.t"],
        &extra,
        common::source_options(),
        ClickHouseOptions::default().tls(real.clone()),
    )?;
    ensure!(h.config.exists() && std::fs::read_to_string(&h.config)?.contains("https://"));
    h.source
        .psql("create table t (id int primary key, v text)")?;

    // `init` refuses what `run` would, before it makes anything.
    let good = std::fs::read_to_string(&h.config)?;
    let missing = certs.path().join("missing-ca.pem");
    std::fs::write(
        &h.config,
        good.replace(
            &ca.cert().display().to_string(),
            &missing.display().to_string(),
        ),
    )?;
    let out = h.cli(&["init", "--config", h.config()])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("ca_file") && err.contains("missing-ca.pem"),
        "init accepted a CA file that is not there:\n{err}"
    );
    ensure!(
        !h.state_dir.exists() && !h.data_dir.exists(),
        "init made state before refusing the config"
    );
    std::fs::write(&h.config, &good)?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "insert into t select g, repeat('over tls ', 300) || g from generate_series(1, 300) g",
    )?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.t", "t", &cols())?;

    // An impostor on ClickHouse's address, with a certificate from another
    // CA: the stream pauses and says why; no table stops.
    h.ch.stop()?;
    h.ch.set_tls(EngineTls {
        server: rogue.issue("server", &["DNS:localhost"])?,
        client_ca: None,
    })?;
    h.ch.start_again()?;
    h.source.psql(
        "insert into t select g, 'while the impostor answered' from generate_series(301, 400) g",
    )?;
    walshadow_testkit::wait_until(
        Duration::from_secs(60),
        "status to show the TLS failure",
        || {
            let json: serde_json::Value =
                serde_json::from_str(&h.cli_ok(&["status", "--config", h.config(), "--json"])?)?;
            let dest = &json["destination"];
            Ok(dest["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("TLS failed") && e.contains("UnknownIssuer"))
                && dest["last_class"] == "environment"
                && dest["failing_since_unix_ms"].is_u64())
        },
    )?;
    let text = h.cli_ok(&["status", "--config", h.config()])?;
    ensure!(
        !text.contains("STOPPED"),
        "a TLS failure stopped a table:\n{text}"
    );
    let count = h.ch.query("SELECT count() FROM app.t FINAL")?;
    ensure!(count.trim() == "300", "the impostor took rows: {count}");

    // The real server back: the paused rows arrive.
    h.ch.stop()?;
    h.ch.set_tls(real)?;
    h.ch.start_again()?;
    h.wait_caught_up(CATCH_UP)?;
    h.assert_equal("public.t", "t", &cols())?;
    h.stop_run()?;
    Ok(())
}

per_major!(clickhouse_over_tls => clickhouse_over_tls_verifies_both_ends: pg15, pg18);
per_major!(config_table_trust => the_config_table_is_walshadows_and_bounded: pg15, pg18);
per_major!(hostile_owner => a_database_owner_cannot_steer_walshadows_sessions: pg15, pg18);
per_major!(drill => other_users_and_processes_get_nothing: pg15, pg18);
