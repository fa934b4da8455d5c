//! The shadow through the `walshadow` binary, on PostgreSQL 15 and 18: `init`,
//! `run` as a child process (stopped with SIGTERM, killed with SIGKILL,
//! restarted, its shadow PostgreSQL restarted under it), `catalog show` after
//! every step of a DDL drill compared with what the source's own catalog says
//! (the same `ShadowCatalog` queries run against the source), and
//! `export-schema` loaded into a fresh cluster while the source sees no new
//! connection.
//!
//! Each test has its own source cluster (autovacuum off so nothing but the
//! drill changes the catalog; `log_connections` so the export test can count
//! connections in the source's log).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_shadow::postmaster::Postmaster;
use walshadow_testkit::{
    Cluster, ClusterOptions, Lsn, PgMajor, ServerUser, Walshadow, WorkDir, wait_until,
};

const BIN: &str = env!("CARGO_BIN_EXE_walshadow");
const WAIT: Duration = Duration::from_secs(30);
const PAGE: u64 = 8192;

fn source_options() -> ClusterOptions {
    ClusterOptions::default()
        .conf("autovacuum", "off")
        .conf("wal_keep_size", "4GB")
        .conf("log_connections", "on")
}

/// A source cluster, a config for it, and `walshadow run` when started;
/// derefs to the [`Walshadow`] (its `start_run` and `stop_run` check more).
struct Harness {
    // First: `run` and its shadow stop before the source.
    walshadow: Walshadow,
    source: Cluster,
    data_dir: PathBuf,
    rt: tokio::runtime::Runtime,
    // Last: dropped after the shadow is stopped.
    work: WorkDir,
}

impl Harness {
    fn new(major: PgMajor, tag: &str) -> Result<Harness> {
        let source = Cluster::start(major, source_options())?;
        let work = WorkDir::new(&format!("cli-{tag}-pg{}", major.number()))?;
        let walshadow = Walshadow::configure(BIN.as_ref(), &source, work.path(), "walshadow_cli")?;
        Ok(Harness {
            data_dir: walshadow.shadow_dir().to_owned(),
            walshadow,
            source,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            work,
        })
    }

    /// Starts `walshadow run` and waits until the shadow answers.
    fn start_run(&mut self) -> Result<()> {
        self.walshadow.start_run()?;
        let mut exited = None;
        wait_until(WAIT, "the shadow to accept connections", || {
            exited = self.walshadow.run_exited();
            if exited.is_some() {
                return Ok(true);
            }
            let out = self.cli(&[
                "catalog",
                "show",
                "--config",
                self.config(),
                "pg_catalog.pg_class",
            ])?;
            Ok(out.status.success())
        })?;
        if let Some(status) = exited {
            bail!(
                "walshadow run exited ({status}) before the shadow answered:\n{}",
                self.run_log()
            );
        }
        Ok(())
    }

    /// SIGTERM: `run` must exit successfully, having stopped the shadow.
    fn stop_run(&mut self) -> Result<()> {
        self.walshadow.stop_run()?;
        ensure!(
            !self.data_dir.join("postmaster.pid").exists(),
            "the shadow still runs after walshadow run stopped:\n{}",
            self.run_log()
        );
        Ok(())
    }

    /// A command for a binary of the shadow's major, as the server user.
    fn pg_bin(&self, name: &str) -> Result<Command> {
        Ok(ServerUser::get()?.command(&self.source.install().bin(name), self.work.path()))
    }

    /// The source's flush LSN as a replay position: a flush LSN just past
    /// a page header is where the next record starts, while replay stops
    /// at the end of the last record, the page's start.
    fn target_lsn(&self) -> Result<Lsn> {
        let lsn = self.source.flush_lsn()?;
        let seg = u64::from(self.source.wal_segment_size());
        let header = if lsn.0 % seg < PAGE { 40 } else { 24 };
        Ok(if lsn.0 % PAGE == header {
            Lsn(lsn.0 - header)
        } else {
            lsn
        })
    }

    /// `walshadow catalog show --lsn LSN [--db DB] SCHEMA.TABLE`: the JSON,
    /// or `None` when the shadow has no such relation.
    fn show(&self, db: &str, relation: &str, lsn: Lsn) -> Result<Option<Value>> {
        let lsn = lsn.to_string();
        let out = self.cli(&[
            "catalog",
            "show",
            "--config",
            self.config(),
            "--lsn",
            &lsn,
            "--timeout",
            "30",
            "--db",
            db,
            relation,
        ])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            if stderr.contains("no such relation") {
                return Ok(None);
            }
            bail!(
                "catalog show {relation} at {lsn} failed ({}):\n{stderr}",
                out.status
            );
        }
        let text = String::from_utf8(out.stdout)?;
        Ok(Some(serde_json::from_str(text.trim()).with_context(
            || format!("catalog show printed {text:?}"),
        )?))
    }

    /// What the source's own catalog says, by the queries the shadow's
    /// `ShadowCatalog` runs.
    fn expected(&self, db: &str, relation: &str) -> Result<Option<Value>> {
        let (schema, table) = relation.split_once('.').context("SCHEMA.TABLE")?;
        let socket = self.source.socket_dir();
        let port = self.source.port();
        let desc = self.rt.block_on(async {
            let mut cat = ShadowCatalog::connect(&socket, port, "postgres", db).await?;
            anyhow::Ok(cat.relation_by_name(schema, table).await?)
        })?;
        Ok(desc.map(serde_json::to_value).transpose()?)
    }

    /// `catalog show` at the source's current LSN equals the source's
    /// catalog for each of `relations` (`None` both sides for dropped ones).
    fn check(&self, step: &str, db: &str, relations: &[&str], gone: &[&str]) -> Result<()> {
        let lsn = self.target_lsn()?;
        for rel in relations.iter().chain(gone) {
            let shadow = self
                .show(db, rel, lsn)
                .with_context(|| format!("step {step:?}"))?;
            let source = self.expected(db, rel)?;
            if gone.contains(rel) {
                ensure!(
                    source.is_none() && shadow.is_none(),
                    "step {step:?}: {rel} should be gone: source {source:?}, shadow {shadow:?}"
                );
                continue;
            }
            let shadow =
                shadow.with_context(|| format!("step {step:?}: {rel} not in the shadow"))?;
            has_required_fields(&shadow).with_context(|| format!("step {step:?}: {rel}"))?;
            ensure!(
                Some(&shadow) == source.as_ref(),
                "step {step:?} at {lsn}: {rel} differs\nshadow {shadow}\nsource {}",
                source.map(|s| s.to_string()).unwrap_or_default()
            );
        }
        Ok(())
    }
}

impl std::ops::Deref for Harness {
    type Target = Walshadow;

    fn deref(&self) -> &Walshadow {
        &self.walshadow
    }
}

impl std::ops::DerefMut for Harness {
    fn deref_mut(&mut self) -> &mut Walshadow {
        &mut self.walshadow
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // The walshadow driver kills a `run` that does not stop and stops
        // the shadow it leaves.
        if self.walshadow.run_pid().is_some()
            && let Err(e) = self.signal_run("-TERM")
        {
            eprintln!("stopping walshadow run: {e:#}");
        }
        // Shown by the test harness when the test fails.
        eprintln!("walshadow run log:\n{}", self.run_log());
    }
}

/// The fields issue 3 asks `catalog show` for, with their JSON types.
fn has_required_fields(v: &Value) -> Result<()> {
    for (k, number) in [
        ("oid", true),
        ("schema", false),
        ("name", false),
        ("relkind", false),
        ("relfilenode", true),
    ] {
        let f = v.get(k).with_context(|| format!("no {k:?} in {v}"))?;
        ensure!(
            if number { f.is_u64() } else { f.is_string() },
            "{k:?} is {f} in {v}"
        );
    }
    let ident = v
        .get("replica_identity")
        .and_then(Value::as_array)
        .with_context(|| format!("no replica_identity array in {v}"))?;
    ensure!(ident.iter().all(Value::is_string), "replica_identity {v}");
    let attrs = v
        .get("attributes")
        .and_then(Value::as_array)
        .with_context(|| format!("no attributes array in {v}"))?;
    let mut last = 0;
    for a in attrs {
        let attnum = a.get("attnum").and_then(Value::as_i64).context("attnum")?;
        ensure!(attnum > last, "attributes out of attnum order in {v}");
        last = attnum;
        ensure!(a.get("name").is_some_and(Value::is_string), "name in {a}");
        ensure!(
            a.get("type_oid").is_some_and(Value::is_u64),
            "type_oid in {a}"
        );
        ensure!(a.get("typmod").is_some_and(Value::is_i64), "typmod in {a}");
        ensure!(
            a.get("not_null").is_some_and(Value::is_boolean),
            "not_null in {a}"
        );
        ensure!(
            a.get("dropped").is_some_and(Value::is_boolean),
            "dropped in {a}"
        );
    }
    Ok(())
}

/// One drill step: SQL on the source (database `db`), then the relations
/// `catalog show` must match and those that must be gone.
struct Step {
    sql: &'static str,
    db: &'static str,
    show: &'static [&'static str],
    gone: &'static [&'static str],
}

const fn step(sql: &'static str, show: &'static [&'static str]) -> Step {
    Step {
        sql,
        db: "postgres",
        show,
        gone: &[],
    }
}

const DRILL: &[Step] = &[
    step(
        "create type mood as enum ('sad', 'ok', 'happy');
         create domain posint as int check (value > 0);
         create table t1 (id int primary key, v text, m mood, p posint)",
        &["public.t1"],
    ),
    step(
        "insert into t1 select g, 'row ' || g, 'ok', g from generate_series(1, 100000) g;
         update t1 set m = 'happy' where id % 3 = 0;
         delete from t1 where id % 7 = 0",
        &["public.t1"],
    ),
    step("alter table t1 add column d int default 7", &["public.t1"]),
    step(
        "alter table t1 add column created timestamptz not null default '2024-01-01'",
        &["public.t1"],
    ),
    step("alter table t1 drop column p", &["public.t1"]),
    step("alter table t1 rename column v to v2", &["public.t1"]),
    step(
        "alter type mood add value 'meh' before 'ok';
         alter table t1 add column m2 mood default 'meh';
         update t1 set m2 = 'sad' where id < 500",
        &["public.t1"],
    ),
    step(
        "create index t1_v2 on t1 (v2);
         insert into t1 (id, v2, m) select g, 'more ' || g, 'sad' from generate_series(100001, 120000) g",
        &["public.t1", "public.t1_v2"],
    ),
    step(
        "create table t2 (a int, b text);
         insert into t2 select g, md5(g::text) from generate_series(1, 3000) g",
        &["public.t2"],
    ),
    step("alter table t2 add primary key (a)", &["public.t2"]),
    step(
        "alter table t2 alter column a type bigint;
         update t2 set b = upper(b) where a % 2 = 0",
        &["public.t2"],
    ),
    step("vacuum full t1", &["public.t1", "public.t1_v2"]),
    step(
        "vacuum full pg_constraint;
         alter table t1 add constraint t1_d_pos check (d > 0)",
        &["public.t1", "pg_catalog.pg_constraint"],
    ),
    step(
        "create table parent (id int, k int, primary key (id, k)) partition by range (k);
         create table part1 partition of parent for values from (0) to (100);
         insert into parent select g, g % 100 from generate_series(1, 5000) g",
        &["public.parent", "public.part1"],
    ),
    step(
        "create table part2 (id int not null, k int not null);
         insert into part2 select g, 100 + g % 100 from generate_series(1, 2000) g;
         alter table parent attach partition part2 for values from (100) to (200)",
        &["public.parent", "public.part2"],
    ),
    step(
        "truncate part1;
         insert into parent select g, g % 100 from generate_series(1, 100) g",
        &["public.part1"],
    ),
    step("drop table t2", &["public.t1"]),
    step(
        "create sequence s2 increment 5;
         select nextval('s2') from generate_series(1, 40);
         alter table t1 alter column id set default nextval('s2')",
        &["public.s2", "public.t1"],
    ),
    step(
        "create table big (id int primary key, doc text);
         alter table big alter column doc set storage external;
         insert into big select g, repeat(md5(g::text), 400) from generate_series(1, 300) g;
         update big set doc = doc || 'x' where id % 2 = 0",
        &["public.big"],
    ),
    step(
        "alter table t1 replica identity full;
         create unique index big_doc_id on big (id, length(doc));
         alter table big alter column id set not null",
        &["public.t1", "public.big"],
    ),
    step("create database db2 strategy file_copy", &[]),
    Step {
        sql: "create table in_db2 (id bigint generated always as identity primary key, note text);
              insert into in_db2 (note) select 'n' || g from generate_series(1, 1000) g",
        db: "db2",
        show: &["public.in_db2"],
        gone: &[],
    },
    step(
        "alter table part1 rename to part_one;
         create table t3 (x int primary key);
         drop table t3",
        &["public.part_one", "public.parent"],
    ),
];

fn drill(major: PgMajor) -> Result<()> {
    let mut h = Harness::new(major, "drill")?;
    h.source.psql(
        "create table before_init (id int primary key, v text);
         insert into before_init select g, 'x' || g from generate_series(1, 2000) g",
    )?;
    h.init()?;
    h.start_run()?;
    h.check("before init", "postgres", &["public.before_init"], &[])?;
    for s in DRILL {
        h.source
            .psql_db(s.db, s.sql)
            .with_context(|| s.sql.to_owned())?;
        let mut gone = s.gone.to_vec();
        if s.sql.contains("drop table t2") {
            gone.push("public.t2");
        }
        if s.sql.contains("rename to part_one") {
            gone.extend(["public.part1", "public.t3"]);
        }
        h.check(s.sql, s.db, s.show, &gone)?;
    }
    h.stop_run()
}

fn restarts(major: PgMajor) -> Result<()> {
    let mut h = Harness::new(major, "restart")?;
    h.source
        .psql("create table r1 (id int primary key, v text)")?;
    h.init()?;
    h.start_run()?;
    h.source
        .psql("insert into r1 select g, 'v' || g from generate_series(1, 5000) g")?;
    h.check("r1", "postgres", &["public.r1"], &[])?;

    // walshadow stopped: DDL while it is away, seen after it starts again.
    h.stop_run()?;
    h.source.psql(
        "alter table r1 add column w int default 3;
         create table r2 (id bigint primary key, r1_id int references r1);
         insert into r2 select g, g from generate_series(1, 3000) g",
    )?;
    h.start_run()?;
    h.check(
        "after run restart",
        "postgres",
        &["public.r1", "public.r2"],
        &[],
    )?;

    // The shadow restarted under a running walshadow: it reconnects to
    // the feeder and replays on.
    let out = h
        .pg_bin("pg_ctl")?
        .arg("restart")
        .arg("-D")
        .arg(&h.data_dir)
        .arg("-l")
        .arg(h.data_dir.join("shadow.log"))
        .args(["-m", "fast", "-w", "-t", "60"])
        .stdin(Stdio::null())
        .output()?;
    ensure!(
        out.status.success(),
        "pg_ctl restart of the shadow: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    h.source.psql(
        "alter table r2 drop column r1_id;
         alter table r1 rename column v to v_renamed;
         update r1 set w = 4 where id % 2 = 0",
    )?;
    h.check(
        "after shadow restart",
        "postgres",
        &["public.r1", "public.r2"],
        &[],
    )?;

    // The shadow's postmaster killed under a running walshadow (the OOM
    // killer's way): `run` starts it again and it replays on.
    let pid = Postmaster::read(&h.data_dir)
        .pid()
        .context("no shadow postmaster to kill")?
        .to_string();
    let status = Command::new("kill").args(["-KILL", &pid]).status()?;
    ensure!(status.success(), "kill -9 {pid}: {status}");
    h.source.psql(
        "create table r4 (id int primary key);
         alter table r2 add column k int",
    )?;
    h.check(
        "after the shadow was killed",
        "postgres",
        &["public.r1", "public.r2", "public.r4"],
        &[],
    )?;
    ensure!(
        h.run_log()
            .contains("the shadow PostgreSQL stopped; starting it again"),
        "no restart logged:\n{}",
        h.run_log()
    );

    // walshadow killed: its shadow stays up unfed; a new run takes over.
    let status = h.signal_run("-KILL")?;
    ensure!(!status.success(), "kill -9 gave {status}");
    ensure!(
        h.data_dir.join("postmaster.pid").exists(),
        "the shadow went down with walshadow run"
    );
    h.source.psql(
        "create table r3 (id int primary key);
         alter table r1 add column z text;
         vacuum full r1",
    )?;
    h.start_run()?;
    h.check(
        "after kill -9",
        "postgres",
        &["public.r1", "public.r2", "public.r3", "public.r4"],
        &[],
    )?;
    h.stop_run()?;

    // A shadow that cannot start: `run` stops at once and says why.
    std::fs::write(
        h.data_dir.join("walshadow.params.conf"),
        "shared_buffers = 'plenty'\n",
    )?;
    let out = h.cli(&["run", "--config", h.config()])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "run started a broken shadow:\n{stderr}"
    );
    ensure!(
        stderr.contains("did not start") && stderr.contains("shared_buffers"),
        "run's error does not name the shadow's problem:\n{stderr}"
    );
    Ok(())
}

/// `CREATE DATABASE` with the default `WAL_LOG` strategy (15+), which logs
/// the template's files page by page, statistics catalogs included.
fn new_database_wal_log(major: PgMajor) -> Result<()> {
    let mut h = Harness::new(major, "createdb")?;
    h.init()?;
    h.start_run()?;
    h.source.psql("create database db3 strategy wal_log")?;
    h.source
        .psql_db("db3", "create table in_db3 (id int primary key, v text)")?;
    h.check("create database", "db3", &["public.in_db3"], &[])?;
    h.stop_run()
}

fn connection_lines(source: &Cluster) -> usize {
    source
        .log_contents()
        .lines()
        .filter(|l| l.contains("connection received") || l.contains("connection authorized"))
        .count()
}

/// Rows of `sql` on `c`, one string per row.
fn rows(c: &Cluster, sql: &str) -> Result<Vec<String>> {
    Ok(c.psql(sql)?.lines().map(str::to_owned).collect())
}

const SCHEMA_QUERIES: &[(&str, &str)] = &[
    (
        "schemas",
        "select nspname from pg_namespace
          where nspname not like 'pg\\_%' and nspname <> 'information_schema' order by 1",
    ),
    (
        "enums",
        "select t.typnamespace::regnamespace, t.typname,
                string_agg(e.enumlabel, ',' order by e.enumsortorder)
           from pg_enum e join pg_type t on t.oid = e.enumtypid group by 1, 2 order by 1, 2",
    ),
    (
        "relations",
        "select n.nspname, c.relname, c.relkind, c.relpersistence, c.relreplident
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname in ('public', 'app') and c.relkind <> 't' order by 1, 2",
    ),
    (
        "columns",
        // Column order, not attnum: a dump does not keep dropped columns.
        "select table_schema, table_name, column_name, data_type,
                is_nullable, column_default, is_identity
           from information_schema.columns where table_schema in ('public', 'app')
          order by 1, 2, ordinal_position",
    ),
    (
        "indexes",
        "select schemaname, tablename, indexname, indexdef from pg_indexes
          where schemaname in ('public', 'app') order by 1, 2, 3",
    ),
    (
        "constraints",
        "select conrelid::regclass, conname, contype, pg_get_constraintdef(oid)
           from pg_constraint where connamespace in ('public'::regnamespace, 'app'::regnamespace)
          order by 1, 2",
    ),
    (
        "sequences",
        "select schemaname, sequencename, data_type, start_value, increment_by, max_value, cycle
           from pg_sequences order by 1, 2",
    ),
];

/// Seed 003's A2 drill: `export-schema --format datadir` while `run`
/// streams; the tar, extracted into a fresh directory, starts as a server
/// with every table of every database present and empty, indexes valid
/// (used by an index scan after inserts), sequences at the shadow's values,
/// and none of the shadow's secrets or access rules.
fn export_datadir(major: PgMajor) -> Result<()> {
    let mut h = Harness::new(major, "datadir")?;
    h.init()?;
    h.start_run()?;
    h.source.psql("create database other")?;
    h.source.psql_db(
        "other",
        "create table notes (id serial primary key, body text);
         insert into notes (body) select repeat('n', 3000) from generate_series(1, 50)",
    )?;
    h.source.psql(
        "create schema app;
         create type app.color as enum ('red', 'green', 'blue');
         create sequence app.invoice_no start 1000;
         select setval('app.invoice_no', 4242);
         create table app.customers (
             id int generated by default as identity primary key,
             name text not null unique,
             tags text[],
             doc jsonb,
             favourite app.color default 'green');
         create table app.orders (
             id bigserial primary key,
             customer_id int not null references app.customers on delete cascade,
             amount numeric(10, 2) check (amount > 0),
             at box);
         create index orders_customer on app.orders using hash (customer_id);
         create index customers_tags on app.customers using gin (tags);
         create index orders_amount on app.orders using brin (amount);
         create index orders_at on app.orders using gist (at);
         create unlogged table app.scratch (k int primary key, v text);
         create table public.events (id int, at timestamptz, primary key (id, at)) partition by range (at);
         create table public.events_2024 partition of public.events
             for values from ('2024-01-01') to ('2025-01-01');
         insert into app.customers (name, tags, doc)
             select 'c' || g, array['t' || g % 7], jsonb_build_object('big', repeat('x', 4000))
               from generate_series(1, 300) g;
         insert into app.orders (customer_id, amount, at)
             select 1 + g % 300, g, box(point(g, g), point(g + 1, g + 1)) from generate_series(1, 3000) g;
         insert into app.scratch select g, 'v' from generate_series(1, 100) g;
         insert into public.events select g, '2024-03-01' from generate_series(1, 100) g;
         create materialized view app.totals as
             select customer_id, sum(amount) from app.orders group by 1;
         select lo_from_bytea(0, 'a large object');",
    )?;
    let lsn = h.target_lsn()?;
    let tar = h.work.path().join("schema.tar");
    let out = h.cli(&[
        "export-schema",
        "--config",
        h.config(),
        "--format",
        "datadir",
        "--lsn",
        &lsn.to_string(),
        "--out",
        tar.to_str().unwrap_or_default(),
    ])?;
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        out.status.success(),
        "export-schema --format datadir failed:\n{err}"
    );
    ensure!(
        err.contains("tables emptied") && err.contains("1 large objects removed"),
        "{err}"
    );
    let leftovers: Vec<String> = std::fs::read_dir(h.work.path().join("state"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("export-"))
        .collect();
    ensure!(
        leftovers.is_empty(),
        "left in the state directory: {leftovers:?}"
    );
    let mode = std::fs::metadata(&tar)?.permissions().mode() & 0o777;
    ensure!(mode == 0o600, "the tar is {mode:o}");
    // Nothing of the shadow's access: no feeder password, no peer map.
    let look = h.work.path().join("look");
    std::fs::create_dir_all(&look)?;
    let out = Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&look)
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let member =
        |name: &str| std::fs::read_to_string(look.join(name)).with_context(|| name.to_owned());
    let auto = member("postgresql.auto.conf")?;
    ensure!(
        !auto.contains("primary_conninfo") && !auto.contains("password"),
        "{auto}"
    );
    ensure!(!member("pg_hba.conf")?.contains("map=walshadow"));
    ensure!(member(".walshadow-schema-only")?.contains("every table"));
    for gone in [
        "standby.signal",
        "shadow.log",
        "backup_label",
        "postmaster.pid",
    ] {
        ensure!(!look.join(gone).exists(), "{gone} is in the tar");
    }
    let ticket = h
        .source
        .query_one("select last_value from app.orders_id_seq")?;
    h.stop_run()?;

    let target = Cluster::adopt_tar(h.source.install().clone(), &tar)?;
    for (what, q) in SCHEMA_QUERIES {
        let (a, b) = (rows(&h.source, q)?, rows(&target, q)?);
        ensure!(!a.is_empty(), "{what}: the source has none");
        ensure!(a == b, "{what} differ\nsource {a:#?}\ntarget {b:#?}");
    }
    for table in [
        "app.customers",
        "app.orders",
        "app.scratch",
        "public.events",
    ] {
        let n = target.query_one(&format!("select count(*) from {table}"))?;
        ensure!(n == "0", "{table} has {n} rows");
    }
    ensure!(target.psql_db("other", "select count(*) from notes")? == "0");
    ensure!(
        target.query_one(
            "select count(*) from pg_index i where i.indrelid >= 16384 and not (i.indisvalid and i.indisready)"
        )? == "0"
    );
    ensure!(
        target
            .query_one("select relispopulated from pg_class where oid = 'app.totals'::regclass")?
            == "f"
    );
    ensure!(target.query_one("select count(*) from pg_largeobject_metadata")? == "0");
    // The sequences: setval's value exactly; nextval's as the shadow logged it
    // (up to 32 ahead), so no value the source handed out comes again.
    ensure!(target.query_one("select last_value from app.invoice_no")? == "4242");
    let next: i64 = target
        .query_one("insert into app.customers (name) values ('new') returning id")?
        .parse()?;
    ensure!(
        next > 300 && next <= 333,
        "identity gave {next}: after 300 rows, the shadow's logged value (at most 32 ahead) plus one"
    );
    let order: i64 = target
        .query_one(&format!(
            "insert into app.orders (customer_id, amount, at) values ({next}, 5, box(point(1,1), point(2,2))) returning id"
        ))?
        .parse()?;
    let ticket: i64 = ticket.parse()?;
    ensure!(
        order > ticket && order <= ticket + 33,
        "orders_id_seq gave {order}; the source had handed out {ticket}"
    );
    // The indexes answer (empty files rebuilt, then written by the inserts).
    let found = target.psql(&format!(
        "set enable_seqscan = off; set enable_bitmapscan = off;
         select count(*) from app.orders where customer_id = {next};
         select count(*) from app.customers where name = 'new'"
    ))?;
    ensure!(found.lines().collect::<Vec<_>>() == ["1", "1"], "{found}");
    Ok(())
}

fn export(major: PgMajor) -> Result<()> {
    let mut h = Harness::new(major, "export")?;
    h.init()?;
    h.start_run()?;
    h.source.psql(
        "create schema app;
         create type app.color as enum ('red', 'green', 'blue');
         create domain app.email as text check (value like '%@%');
         create sequence app.invoice_no start 1000;
         select setval('app.invoice_no', 4242);
         create sequence app.ticket increment 3;
         select nextval('app.ticket') from generate_series(1, 10);
         create table app.customers (
             id int generated by default as identity primary key,
             name text not null unique,
             mail app.email,
             favourite app.color default 'green');
         create table app.orders (
             id bigserial primary key,
             customer_id int not null references app.customers on delete cascade,
             amount numeric(10, 2) check (amount > 0),
             placed date default current_date);
         create index orders_customer on app.orders (customer_id);
         create index orders_placed_partial on app.orders (placed) where amount > 100;
         insert into app.customers (name, mail) select 'c' || g, g || '@x' from generate_series(1, 500) g;
         insert into app.orders (customer_id, amount) select 1 + g % 500, g from generate_series(1, 5000) g;
         create table public.events (id int, at timestamptz, primary key (id, at)) partition by range (at);
         create table public.events_2024 partition of public.events
             for values from ('2024-01-01') to ('2025-01-01');
         alter table app.orders add column note text default 'none';
         alter table app.customers drop column mail",
    )?;
    let lsn = h.target_lsn()?;
    h.check(
        "export schema",
        "postgres",
        &["app.orders", "app.customers"],
        &[],
    )?;

    let dump = h.work.path().join("dump.sql");
    let before = connection_lines(&h.source);
    let out = h.cli(&[
        "export-schema",
        "--config",
        h.config(),
        "--lsn",
        &lsn.to_string(),
        "--out",
        dump.to_str().unwrap_or_default(),
    ])?;
    let after = connection_lines(&h.source);
    ensure!(
        out.status.success(),
        "export-schema failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(before > 0, "the source logs no connections to count");
    ensure!(
        after == before,
        "the source logged {} new connection lines during export-schema",
        after - before
    );
    h.stop_run()?;

    let sql = std::fs::read_to_string(&dump)?;
    let target = Cluster::start(major, ClusterOptions::default())?;
    target
        .psql(&sql)
        .context("loading the exported schema into a fresh cluster")?;
    for (what, q) in SCHEMA_QUERIES {
        let (a, b) = (rows(&h.source, q)?, rows(&target, q)?);
        ensure!(!a.is_empty(), "{what}: the source has none");
        ensure!(a == b, "{what} differ\nsource {a:#?}\ntarget {b:#?}");
    }
    // setval logs the exact value.
    let q = "select last_value, is_called from app.invoice_no";
    ensure!(
        h.source.query_one(q)? == target.query_one(q)?,
        "app.invoice_no: source {}, target {}",
        h.source.query_one(q)?,
        target.query_one(q)?
    );
    // nextval logs 32 values ahead (SEQ_LOG_VALS in sequence.c), so the
    // WAL, and so the shadow, holds a last value up to 32 increments
    // beyond the source's: never one already handed out.
    for seq in ["app.ticket", "app.orders_id_seq", "app.customers_id_seq"] {
        let q = format!("select last_value from {seq}");
        let src: i64 = h.source.query_one(&q)?.parse()?;
        let tgt: i64 = target.query_one(&q)?.parse()?;
        let inc: i64 = h
            .source
            .query_one(&format!(
                "select increment_by from pg_sequences where format('%I.%I', schemaname, sequencename) = '{seq}'"
            ))?
            .parse()?;
        ensure!(
            src <= tgt && tgt <= src + 32 * inc,
            "{seq}: source last_value {src}, target {tgt}"
        );
    }
    Ok(())
}

fn init_twice_and_help(major: PgMajor) -> Result<()> {
    let h = Harness::new(major, "init2")?;
    let first = h.init()?;
    ensure!(
        !first.contains("already initialised"),
        "first init: {first}"
    );
    let state = h.work.path().join("state").join("init.json");
    let before = std::fs::read(&state)?;
    let second = h.init()?;
    ensure!(
        second.contains("already initialised"),
        "second init said: {second}"
    );
    ensure!(
        std::fs::read(&state)? == before,
        "the second init changed init.json"
    );
    ensure!(
        !h.data_dir.join("postmaster.pid").exists(),
        "init left the shadow running"
    );

    let help = h.cli_ok(&["export-schema", "--help"])?;
    for needle in ["trigger", "ACL", "extension"] {
        ensure!(
            help.to_lowercase().contains(&needle.to_lowercase()),
            "export-schema --help does not name {needle}:\n{help}"
        );
    }
    Ok(())
}

per_major!(drill => catalog_show_follows_ddl_drill: pg15, pg16, pg17, pg18);
per_major!(restarts => run_and_shadow_restarts: pg15, pg18);
per_major!(export => export_schema_loads_into_fresh_cluster: pg15, pg18);
per_major!(export_datadir => export_schema_datadir_starts_hollow: pg15, pg18);
per_major!(init_twice_and_help => init_twice_and_export_help: pg15, pg18);

// WAL_LOG copies the template's statistics catalogs page by page: the filter
// drops their rows and replaces the image of each statistics index's
// metapage by an empty btree's, so the new database's catalog lookups work.
per_major!(new_database_wal_log => create_database_wal_log: pg15, pg18);
