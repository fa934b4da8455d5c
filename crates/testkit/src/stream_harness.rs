//! The streaming drills' ground: a source cluster, the ClickHouse engine, a
//! config pinning tables into ClickHouse database `app`, and walshadow
//! ([`Walshadow`]: `run` as a child process, SIGTERM, SIGKILL, restart),
//! with the waits a drill needs and the [`oracle`](crate::oracle) on its
//! tables.
//!
//! The harness derefs to its [`Walshadow`], so a drill reads as
//! `h.start_run()`, `h.stop_run()`, `h.cli_ok(…)` beside `h.source.psql(…)`.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::daemon::{Walshadow, tail};
use crate::oracle::{self, OracleColumn};
use crate::{
    ClickHouseEngine, ClickHouseOptions, Cluster, ClusterOptions, PgMajor, WorkDir, wait_until,
};

/// The ClickHouse database the harness pins tables into.
pub const DATABASE: &str = "app";

#[derive(Debug)]
pub struct StreamHarness {
    /// First: `run` and its shadow stop before the source and the engine.
    pub walshadow: Walshadow,
    /// Shared with workload threads.
    pub source: Arc<Cluster>,
    pub ch: ClickHouseEngine,
    pub config: PathBuf,
    pub data_dir: PathBuf,
    pub state_dir: PathBuf,
    // Last: dropped after walshadow and its shadow are stopped.
    pub work: WorkDir,
}

/// The source the drills stream from.
pub fn source_options() -> ClusterOptions {
    ClusterOptions::default()
        // Only walshadow's slot holds WAL, as on a production source: a
        // restart that needed WAL the slot let go would fail here.
        .conf("wal_keep_size", "0")
        .conf("max_prepared_transactions", "10")
}

impl StreamHarness {
    /// A source, an engine and a config for walshadow `bin` pinning
    /// `tables` (`schema.name`) into ClickHouse database `app`; `extra` is
    /// appended to the config.
    pub fn new(
        bin: impl AsRef<Path>,
        major: PgMajor,
        tag: &str,
        tables: &[&str],
        extra: &str,
    ) -> Result<StreamHarness> {
        Self::with_options(bin, major, tag, tables, extra, source_options())
    }

    /// [`StreamHarness::new`] with a source started with `opts`.
    pub fn with_options(
        bin: impl AsRef<Path>,
        major: PgMajor,
        tag: &str,
        tables: &[&str],
        extra: &str,
        opts: ClusterOptions,
    ) -> Result<StreamHarness> {
        Self::with_engine(
            bin,
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
        bin: impl AsRef<Path>,
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
        let walshadow =
            Walshadow::configure(bin.as_ref(), &source, work.path(), "walshadow_stream")?;
        let mut text = format!(
            "\n[clickhouse]\nurl = \"{}\"\ndatabase = \"{DATABASE}\"\nbatch_ms = 200\n{extra}\n",
            ch.https_url().unwrap_or_else(|| ch.url())
        );
        for t in tables {
            text.push_str(&format!("\n[table.\"{t}\"]\n"));
        }
        walshadow.append_config(&text)?;
        Ok(StreamHarness {
            source: Arc::new(source),
            ch,
            config: walshadow.config_path().to_owned(),
            data_dir: walshadow.shadow_dir().to_owned(),
            state_dir: walshadow.state_dir().to_owned(),
            walshadow,
            work,
        })
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

    /// Waits until walshadow has applied everything the source flushed so
    /// far (a marker transaction is committed first, so there is a commit
    /// to wait for). Fails when `run` exits, when `applied` stops moving for
    /// `stall`, or after 5 × `stall` in all: a slow machine catching up on a
    /// long drill's WAL is not a failure, a stuck pipeline is.
    pub fn wait_caught_up(&mut self, stall: Duration) -> Result<()> {
        self.source
            .psql("create table if not exists walshadow_marker(n int); insert into walshadow_marker values (1)")?;
        let target = self.source.flush_lsn()?;
        let started = Instant::now();
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
                moved = Instant::now();
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
        oracle::source_rows(&self.source, table, cols)
    }

    /// Rows of the ClickHouse table `FINAL`, canonical text, sorted.
    pub fn clickhouse_rows(&self, table: &str, cols: &[OracleColumn]) -> Result<Vec<String>> {
        oracle::clickhouse_rows(&self.ch, DATABASE, table, cols)
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
        oracle::assert_same_rows(pg_table, &src, &dst)
            .map_err(|e| anyhow::anyhow!("{e}\nrun log tail:\n{}", tail(&self.run_log(), 40)))
    }
}

impl Deref for StreamHarness {
    type Target = Walshadow;

    fn deref(&self) -> &Walshadow {
        &self.walshadow
    }
}

impl DerefMut for StreamHarness {
    fn deref_mut(&mut self) -> &mut Walshadow {
        &mut self.walshadow
    }
}
