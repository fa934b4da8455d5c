//! A streaming harness: a source cluster, the ClickHouse engine, a config
//! pinning tables, and `walshadow run` as a child process (SIGTERM, SIGKILL,
//! restart), plus the row-by-row oracle: a source table against its
//! ClickHouse table `FINAL`.

#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use walshadow_shadow::postmaster::Postmaster;
use walshadow_testkit::{
    ClickHouseEngine, ClickHouseOptions, Cluster, ClusterOptions, Lsn, PgMajor, WorkDir,
    wait_until, write_walshadow_config,
};

pub mod loads;

pub const BIN: &str = env!("CARGO_BIN_EXE_walshadow");

/// One column of the oracle: the same canonical text from both sides.
#[derive(Debug, Clone)]
pub struct OracleColumn {
    pub pg: String,
    pub ch: String,
}

/// `pg` and `ch` expressions for a column.
pub fn col(pg: &str, ch: &str) -> OracleColumn {
    OracleColumn {
        pg: pg.into(),
        ch: ch.into(),
    }
}

/// The same expression on both sides (ints, text).
pub fn same(name: &str) -> OracleColumn {
    col(name, name)
}

pub struct StreamHarness {
    /// Shared with workload threads.
    pub source: std::sync::Arc<Cluster>,
    pub ch: ClickHouseEngine,
    pub config: PathBuf,
    pub data_dir: PathBuf,
    pub state_dir: PathBuf,
    pub run_log: PathBuf,
    pub run: Option<Child>,
    /// Extra environment of `walshadow run` and the other commands (test
    /// hooks, `PGPASSFILE`).
    pub run_env: Vec<(String, String)>,
    // Last: dropped after the shadow is stopped.
    pub work: WorkDir,
}

pub fn source_options() -> ClusterOptions {
    ClusterOptions::default()
        // Only walshadow's slot holds WAL, as on a production source: a
        // restart that needed WAL the slot let go would fail here.
        .conf("wal_keep_size", "0")
        .conf("max_prepared_transactions", "10")
}

impl StreamHarness {
    /// A source, an engine and a config pinning `tables` (`schema.name`)
    /// into ClickHouse database `app`; `extra` is appended to the config.
    pub fn new(major: PgMajor, tag: &str, tables: &[&str], extra: &str) -> Result<StreamHarness> {
        Self::with_options(major, tag, tables, extra, source_options())
    }

    /// [`StreamHarness::new`] with a source started with `opts`.
    pub fn with_options(
        major: PgMajor,
        tag: &str,
        tables: &[&str],
        extra: &str,
        opts: ClusterOptions,
    ) -> Result<StreamHarness> {
        Self::with_engine(
            major,
            tag,
            tables,
            extra,
            opts,
            ClickHouseOptions::default(),
        )
    }

    /// [`StreamHarness::with_options`] with an engine started with
    /// `ch_opts`; walshadow uses its HTTPS port when it has one.
    pub fn with_engine(
        major: PgMajor,
        tag: &str,
        tables: &[&str],
        extra: &str,
        opts: ClusterOptions,
        ch_opts: ClickHouseOptions,
    ) -> Result<StreamHarness> {
        let source = Cluster::start(major, opts)?;
        let work = WorkDir::new(&format!("stream-{tag}-pg{}", major.number()))?;
        let ch = ClickHouseEngine::start_with(ch_opts)?;
        let data_dir = work.path().join("shadow");
        let config = write_walshadow_config(&source, work.path(), &data_dir, "walshadow_stream")?;
        let mut text = std::fs::read_to_string(&config)?;
        text.push_str(&format!(
            "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"app\"\nbatch_ms = 200\n{extra}\n",
            ch.https_url().unwrap_or_else(|| ch.url())
        ));
        for t in tables {
            text.push_str(&format!("\n[table.\"{t}\"]\n"));
        }
        std::fs::write(&config, text)?;
        Ok(StreamHarness {
            source: std::sync::Arc::new(source),
            ch,
            config,
            data_dir,
            state_dir: work.path().join("state"),
            run_log: work.path().join("run.log"),
            run: None,
            run_env: Vec::new(),
            work,
        })
    }

    pub fn config(&self) -> &str {
        self.config.to_str().unwrap_or_default()
    }

    pub fn cli(&self, args: &[&str]) -> Result<Output> {
        Command::new(BIN)
            .args(args)
            .envs(self.run_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running walshadow {}", args.join(" ")))
    }

    pub fn cli_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.cli(args)?;
        ensure!(
            out.status.success(),
            "walshadow {} failed ({}):\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }

    pub fn init(&self) -> Result<String> {
        self.cli_ok(&["init", "--config", self.config()])
    }

    pub fn run_log(&self) -> String {
        std::fs::read_to_string(&self.run_log).unwrap_or_default()
    }

    /// Starts `walshadow run` (returns at once).
    /// Arms failpoint `name` (see `walshadow_failpoints`) with `action`
    /// for the next `run`: `return` to crash there, `return(DIR)` to hold.
    pub fn arm(&mut self, name: &str, action: &str) {
        let entry = format!("{name}={action}");
        match self.run_env.iter_mut().find(|(k, _)| k == "FAILPOINTS") {
            Some((_, v)) => {
                v.push(';');
                v.push_str(&entry);
            }
            None => self.run_env.push(("FAILPOINTS".into(), entry)),
        }
    }

    /// Holds at each of `names` in the next `run`, the hold files in a
    /// fresh folder, which this returns.
    pub fn arm_holds(&mut self, names: &[&str]) -> Result<PathBuf> {
        let dir = self.work.path().join("holds");
        std::fs::create_dir_all(&dir)?;
        for name in names {
            self.arm(name, &format!("return({})", dir.display()));
        }
        Ok(dir)
    }

    /// No failpoint armed in the next `run`.
    pub fn disarm(&mut self) {
        self.run_env.retain(|(k, _)| k != "FAILPOINTS");
    }

    pub fn start_run(&mut self) -> Result<()> {
        ensure!(self.run.is_none(), "walshadow run is already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.run_log)?;
        let child = Command::new(BIN)
            .args(["run", "--config", self.config()])
            .env("WALSHADOW_LOG", "info")
            .envs(self.run_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting walshadow run")?;
        self.run = Some(child);
        Ok(())
    }

    /// Fails if `run` exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.run.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
            self.run = None;
            bail!("walshadow run exited ({status}):\n{}", self.run_log());
        }
        Ok(())
    }

    pub fn signal_run(&mut self, signal: &str) -> Result<std::process::ExitStatus> {
        let child = self.run.as_mut().context("walshadow run is not running")?;
        let pid = child.id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status()?;
        ensure!(status.success(), "kill {signal} {pid}: {status}");
        let mut exit = None;
        wait_until(Duration::from_secs(60), "walshadow run to exit", || {
            exit = child.try_wait()?;
            Ok(exit.is_some())
        })?;
        self.run = None;
        exit.context("no exit status")
    }

    pub fn stop_run(&mut self) -> Result<()> {
        let status = self.signal_run("-TERM")?;
        ensure!(
            status.success(),
            "walshadow run exited with {status} on SIGTERM:\n{}",
            self.run_log()
        );
        Ok(())
    }

    /// `kill -9` of `run` (its shadow PostgreSQL stays up; the next `run`
    /// takes it over).
    pub fn kill_run(&mut self) -> Result<()> {
        self.signal_run("-KILL")?;
        Ok(())
    }

    /// `kill -9` of the shadow's postmaster (as the OOM killer would);
    /// false when it has no lock file to name it (not started yet).
    pub fn kill_shadow(&self) -> Result<bool> {
        let Some(pid) = Postmaster::read(&self.data_dir).pid() else {
            return Ok(false);
        };
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        Ok(status.success())
    }

    /// Waits until another session on the source is running a statement
    /// containing `marker` (a transaction held open by a test's thread).
    pub fn wait_for_session(&self, marker: &str) -> Result<()> {
        let sql = format!(
            "select count(*) from pg_stat_activity where query like '%{}%' and state = 'active' and pid <> pg_backend_pid()",
            marker.replace('\'', "''")
        );
        wait_until(
            Duration::from_secs(30),
            &format!("a session running {marker}"),
            || Ok(self.source.query_one(&sql)? == "1"),
        )
    }

    /// `walshadow status --json`.
    pub fn status_json(&self) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["status", "--json", "--config", self.config()])?;
        serde_json::from_str(&out).context("status --json is not JSON")
    }

    /// Table `key`'s row of `walshadow table list --json`.
    pub fn table_state(&self, key: &str) -> Result<serde_json::Value> {
        let out = self.cli_ok(&["table", "list", "--json", "--config", self.config()])?;
        let rows: Vec<serde_json::Value> = serde_json::from_str(&out)?;
        rows.into_iter()
            .find(|r| r["table"] == key)
            .with_context(|| format!("{key} not in the table list: {out}"))
    }

    /// The applied position `walshadow status --json` reports.
    pub fn applied(&self) -> Result<Option<Lsn>> {
        let out = self.cli(&["status", "--json", "--config", self.config()])?;
        if !out.status.success() {
            return Ok(None);
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        Ok(v["applied"].as_str().and_then(|s| s.parse().ok()))
    }

    /// Waits until walshadow has applied everything the source flushed so
    /// far (a marker transaction is committed first, so there is a commit
    /// to wait for). Fails when `run` exits, when `applied` stops moving for
    /// `stall`, or after 5 × `stall` in all: a slow machine catching up on a
    /// long drill's WAL is not a failure, a stuck pipeline is.
    pub fn wait_caught_up(&mut self, stall: Duration) -> Result<()> {
        self.source
            .psql("create table if not exists walshadow_marker(n int); insert into walshadow_marker values (1)")?;
        let target = self.source.flush_lsn()?;
        let started = std::time::Instant::now();
        let mut moved = started;
        let mut last = None;
        let mut pause = Duration::from_millis(10);
        loop {
            self.check_running()?;
            let now = self.applied().ok().flatten();
            if now.is_some_and(|a| a >= target) {
                return Ok(());
            }
            if now > last {
                last = now;
                moved = std::time::Instant::now();
            }
            if moved.elapsed() >= stall || started.elapsed() >= stall * 5 {
                bail!(
                    "walshadow did not apply up to {target}: last applied {last:?}, moving {:?} ago, after {:?}\nrun log:\n{}",
                    moved.elapsed(),
                    started.elapsed(),
                    self.run_log()
                );
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Rows of the source table, canonical text, sorted.
    pub fn source_rows(&self, table: &str, cols: &[OracleColumn]) -> Result<Vec<String>> {
        let exprs: Vec<String> = cols
            .iter()
            .map(|c| format!("coalesce(({})::text, '<NULL>')", c.pg))
            .collect();
        let sql = format!("select {} from {table}", exprs.join(" || E'\\t' || "));
        let out = self.source.psql(&sql)?;
        let mut rows: Vec<String> = out.lines().map(str::to_owned).collect();
        rows.sort();
        Ok(rows)
    }

    /// Rows of the ClickHouse table `FINAL`, canonical text, sorted.
    pub fn clickhouse_rows(&self, table: &str, cols: &[OracleColumn]) -> Result<Vec<String>> {
        let exprs: Vec<String> = cols
            .iter()
            .map(|c| format!("ifNull(toString({}), '<NULL>')", c.ch))
            .collect();
        let sql = format!(
            "SELECT concat({}) FROM app.`{table}` FINAL WHERE _is_deleted = 0 FORMAT TSVRaw",
            exprs.join(", '\\t', ")
        );
        let out = self.ch.query(&sql)?;
        let mut rows: Vec<String> = out.lines().map(str::to_owned).collect();
        rows.sort();
        Ok(rows)
    }

    /// The oracle: the source table equals its ClickHouse table `FINAL`.
    pub fn assert_equal(
        &self,
        pg_table: &str,
        ch_table: &str,
        cols: &[OracleColumn],
    ) -> Result<usize> {
        let src = self.source_rows(pg_table, cols)?;
        let dst = self.clickhouse_rows(ch_table, cols)?;
        if src != dst {
            let only_src: Vec<_> = src.iter().filter(|r| !dst.contains(r)).take(10).collect();
            let only_dst: Vec<_> = dst.iter().filter(|r| !src.contains(r)).take(10).collect();
            bail!(
                "{pg_table}: source has {} rows, ClickHouse FINAL {}\nonly in source: {only_src:#?}\nonly in ClickHouse: {only_dst:#?}\nrun log tail:\n{}",
                src.len(),
                dst.len(),
                tail(&self.run_log(), 40)
            );
        }
        Ok(src.len())
    }
}

pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

impl Drop for StreamHarness {
    fn drop(&mut self) {
        if let Some(mut c) = self.run.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = wait_until(Duration::from_secs(30), "run to exit", || {
                Ok(c.try_wait()?.is_some())
            });
            let _ = c.kill();
        }
        // A shadow left by a killed run.
        if self.data_dir.join("postmaster.pid").exists()
            && let Ok(user) = walshadow_testkit::ServerUser::get()
        {
            let _ = user
                .command(&self.source.install().bin("pg_ctl"), self.work.path())
                .arg("-D")
                .arg(&self.data_dir)
                .args(["stop", "-m", "immediate"])
                .output();
        }
    }
}

pub fn is_pg(major: PgMajor) -> u32 {
    major.number()
}
