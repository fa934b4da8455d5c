//! The shadow's lifecycle: start it (`pg_ctl start` as the unprivileged
//! user, with its feeder and replay ceiling), keep it running (restarts
//! within a budget, settings raised to the source's), stop it. What feeds
//! it — the source's WAL through the filter into the store, checkpoints,
//! what the slot is told — is [`crate::intake`].

use std::path::{Path, PathBuf};
use std::time::Duration;
use walshadow_state_file::StateFile;

use walshadow_config::Config;
use walshadow_types::Lsn;

use crate::bootstrap::InitState;
use crate::feeder::{Feeder, FeederConfig};
use crate::filter::ParameterChange;
use crate::filter::checkpoint;
use crate::postmaster::{self, Postmaster, RestartBudget};
use crate::process::ServerUser;
use crate::segment_store::{CreateOptions, SegmentStore};

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0} is not initialised: run `walshadow init --config FILE` first")]
    NotInitialised(PathBuf),
    #[error("reading {path}: {message}")]
    State { path: PathBuf, message: String },
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    #[error(transparent)]
    Store(#[from] crate::segment_store::StoreError),
    #[error(transparent)]
    Feeder(#[from] crate::feeder::FeederError),
    #[error(transparent)]
    Replication(#[from] walshadow_wal_reader::replication::ReplicationError),
    #[error(
        "source.url ({url_host}) reaches a cluster with system identifier {found}, but \
         `walshadow init` was run against {expected}: point source.url back at that cluster, \
         or run `walshadow init --force` to start over against this one"
    )]
    OtherCluster {
        url_host: String,
        found: u64,
        expected: u64,
    },
    /// The tap took nothing for [`TAP_STALL`]; feeding resumes once it
    /// has room again, handing the tap what follows `tap_end`, the end of
    /// what it took.
    #[error("the streaming pipeline took no WAL for {after:?}")]
    TapStalled { after: Duration, tap_end: Lsn },
    /// The source switched timelines at `switch`, before the end of what a
    /// continued tap had taken (`tap_end`): the tap starts again.
    #[error(
        "the source switched timelines at {switch}, before {tap_end}, where the streaming pipeline's WAL continued"
    )]
    TapDiverged { switch: Lsn, tap_end: Lsn },
    /// The source no longer has WAL the intake needs, and no archive
    /// serves it.
    #[error("the source no longer has the WAL at {at} ({error}); {remedy}")]
    WalRemoved {
        at: Lsn,
        error: String,
        remedy: String,
    },
    /// The `[backup]` store's WAL archive could not serve the intake.
    #[error("the WAL archive in {store}: {message}")]
    Archive {
        store: String,
        message: String,
        /// The store did not answer: it may later.
        transient: bool,
    },
    #[error(transparent)]
    Pipeline(#[from] crate::filter::pipeline::PipelineError),
    #[error("shadow PostgreSQL: {0}")]
    Shadow(String),
    /// The tap's consumer went away (it stopped, or failed with its own
    /// error, which the caller reports).
    #[error("the streaming pipeline stopped")]
    PipelineStopped,
    #[error(
        "the shadow PostgreSQL in {data_dir} {what}; {log} ends with:\n{tail}\n\
         fix what it names, then start walshadow again"
    )]
    ShadowStopped {
        data_dir: PathBuf,
        what: &'static str,
        log: PathBuf,
        tail: String,
    },
    #[error(transparent)]
    Seed(#[from] crate::bootstrap::InitError),
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::CheckpointError),
    #[error(
        "the filter checkpoint is at {checkpoint} but the filtered-WAL store holds only \
         [{start}, {end}): the store lost data the checkpoint covers; rebuild with `walshadow init --force`"
    )]
    StoreBehindCheckpoint {
        checkpoint: Lsn,
        start: Lsn,
        end: Lsn,
    },
    #[error(
        "filtered WAL at {lsn} differs from what the store already holds ({problem}): the \
         filter's state and the store disagree; rebuild with `walshadow init --force`"
    )]
    Diverged { lsn: Lsn, problem: String },
}

impl RunError {
    /// A lost or refused connection to the source (restart, failover,
    /// network): feeding can start again from the last checkpoint.
    pub fn is_transient(&self) -> bool {
        matches!(self, RunError::Replication(e) if e.is_transient())
            || matches!(self, RunError::TapDiverged { .. })
            || matches!(
                self,
                RunError::Archive {
                    transient: true,
                    ..
                }
            )
    }
}

/// Paths of a state directory.
#[derive(Debug, Clone)]
pub struct StatePaths {
    pub dir: PathBuf,
}

impl StatePaths {
    pub fn init_file(&self) -> PathBuf {
        self.dir.join(InitState::FILE)
    }
    pub fn wal(&self) -> PathBuf {
        self.dir.join("wal")
    }
    pub fn feeder_socket_dir(&self) -> PathBuf {
        self.dir.join("feeder")
    }
    pub fn shadow_socket_dir(&self) -> PathBuf {
        self.dir.join("shadow-socket")
    }
}

/// Logs a warning when the source connection crosses a network below
/// `sslmode=verify-full` (see `ConnConfig::transport_warning`).
pub fn warn_about_transport(config: &Config) {
    if let Ok(c) = walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
        && let Some(w) = c.transport_warning()
    {
        tracing::warn!("{w}");
    }
}

/// Reads `init.json` (format version and checksum checked).
pub fn load_init_state(paths: &StatePaths) -> Result<InitState, RunError> {
    if !paths.init_file().exists() {
        return Err(RunError::NotInitialised(paths.dir.clone()));
    }
    InitState::read_present(&paths.dir).map_err(|e| RunError::State {
        path: paths.init_file(),
        message: e.to_string(),
    })
}

/// What the shadow and its intake take from the configuration, read once
/// when the shadow starts (`[clickhouse]`, `[stream]` and the rest are not
/// theirs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowSettings {
    pub state_dir: PathBuf,
    pub data_dir: PathBuf,
    pub pg_bin: PathBuf,
    pub run_as: Option<String>,
    /// `source.url`: where the intake streams from.
    pub source_url: String,
    pub slot: String,
    /// A filter checkpoint after this much WAL, or this long.
    pub checkpoint_every_bytes: u64,
    pub checkpoint_every: Duration,
}

impl From<&Config> for ShadowSettings {
    fn from(config: &Config) -> ShadowSettings {
        ShadowSettings {
            state_dir: config.state.dir.clone(),
            data_dir: config.shadow.data_dir.clone(),
            pg_bin: config.shadow.pg_bin.clone(),
            run_as: config.shadow.run_as.clone(),
            source_url: config.source.url.clone(),
            slot: config.source.slot.clone(),
            checkpoint_every_bytes: config.shadow.checkpoint_every_mb.saturating_mul(1 << 20),
            checkpoint_every: Duration::from_secs(config.shadow.checkpoint_every_secs),
        }
    }
}

/// A running shadow: its feeder (for `wait_for_replay`) and how to reach it.
#[derive(Debug)]
pub struct Shadow {
    pub feeder: Feeder,
    pub store: std::sync::Arc<SegmentStore>,
    pub state: InitState,
    pub socket_dir: PathBuf,
    pub port: u16,
    data_dir: PathBuf,
    pg_bin: PathBuf,
    user: ServerUser,
    restarts: std::sync::Mutex<RestartBudget>,
    absent_at_last_check: std::sync::atomic::AtomicBool,
}

/// How often `run` checks that the shadow's postmaster is still up.
pub const SHADOW_CHECK_EVERY: Duration = Duration::from_secs(5);

/// How long a just-started postmaster may take to write its lock file.
const START_PATIENCE: Duration = Duration::from_secs(10);

impl Shadow {
    /// Starts the feeder and the shadow PostgreSQL.
    pub async fn start(settings: &ShadowSettings) -> Result<Shadow, RunError> {
        Self::start_held(settings, Lsn::MAX).await
    }

    /// Starts the feeder with a replay ceiling (see
    /// [`Feeder::set_ceiling`]) already in place, then the shadow: it never
    /// replays past `ceiling` until the ceiling is raised.
    pub async fn start_held(settings: &ShadowSettings, ceiling: Lsn) -> Result<Shadow, RunError> {
        let paths = StatePaths {
            dir: settings.state_dir.clone(),
        };
        let state = load_init_state(&paths)?;
        let user = ServerUser::resolve(settings.run_as.as_deref())?;
        let seg_start =
            walshadow_pg_format::wal_files::segment_start(state.backup_start, state.segment_size);
        let store = if dir_has_entries(&paths.wal()) {
            SegmentStore::open(paths.wal())?
        } else {
            SegmentStore::create(
                paths.wal(),
                CreateOptions {
                    segment_size: state.segment_size,
                    tli: state.timeline,
                    start: seg_start,
                    history: None,
                },
            )?
        };
        let store = std::sync::Arc::new(store);
        match crate::process::close_to_others(&paths.dir) {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                dir = %paths.dir.display(),
                entries = n,
                "closed state files an earlier version left readable to other users"
            ),
            Err(e) => {
                return Err(RunError::Shadow(format!(
                    "closing {} to other users: {e}",
                    paths.dir.display()
                )));
            }
        }
        let socket_dir = paths.feeder_socket_dir();
        crate::process::private_dir(&socket_dir, 0o700)
            .map_err(|e| RunError::Shadow(format!("{}: {e}", socket_dir.display())))?;
        user.own_recursive(&socket_dir)?;
        // Only the shadow's server user may connect to the feeder, and
        // only with this start's password, which the shadow reads from its
        // own (private) configuration.
        let password = crate::feeder::new_password()
            .map_err(|e| RunError::Shadow(format!("a feeder password from /dev/urandom: {e}")))?;
        let mut feeder_config = FeederConfig::new(
            &socket_dir,
            state.feeder_port,
            state.system_id,
            state.server_version.clone(),
        );
        feeder_config.peer_uid = Some(user.uid);
        feeder_config.password = Some(password.clone());
        let feeder = Feeder::start(feeder_config, store.clone()).await?;
        feeder.set_ceiling(ceiling);
        let shadow = Shadow {
            feeder,
            store,
            socket_dir: paths.shadow_socket_dir(),
            port: state.shadow_port,
            state,
            data_dir: settings.data_dir.clone(),
            pg_bin: settings.pg_bin.clone(),
            user,
            restarts: Default::default(),
            absent_at_last_check: Default::default(),
        };
        crate::process::private_dir(&shadow.socket_dir, 0o700)
            .map_err(|e| RunError::Shadow(format!("{}: {e}", shadow.socket_dir.display())))?;
        shadow.user.own_recursive(&shadow.socket_dir)?;
        let role = walshadow_wal_reader::replication::ConnConfig::from_url(&settings.source_url)
            .map(|c| c.user)
            .unwrap_or_default();
        let written = crate::bootstrap::shadow_conf::ShadowAccess {
            os_user: &crate::process::os_user_name(),
            role: &role,
            feeder_dir: &socket_dir,
            feeder_port: shadow.state.feeder_port,
            feeder_password: Some(&password),
        }
        .write(&shadow.data_dir)
        .map_err(|e| {
            RunError::Shadow(format!(
                "writing the shadow's access files in {}: {e}",
                shadow.data_dir.display()
            ))
        })?;
        for path in written {
            shadow.user.own_recursive(&path)?;
        }
        // The log lives in the data directory: the server user owns it.
        let log = shadow.data_dir.join("shadow.log");
        // A shadow left up by a `run` that died (SIGKILL) would make the
        // start below a no-op (pg_ctl -W reports success, the new postmaster
        // exits on the lock file) and reconnect to the new feeder only after
        // wal_retrieve_retry_interval: restart it, so this run owns it.
        if shadow.is_running() {
            tracing::warn!(
                data_dir = %shadow.data_dir.display(),
                "the shadow is still up from an earlier run; stopping it first"
            );
            shadow.pg_ctl(&["stop", "-m", "fast", "-w"])?;
        }
        shadow.pg_ctl(&["start", "-W", "-l", &log.display().to_string()])?;
        if let Err(state) = postmaster::await_started(&shadow.data_dir, START_PATIENCE).await {
            tracing::debug!(?state, "the shadow's postmaster did not start");
            let err = shadow.stopped("did not start");
            shadow.feeder.shutdown().await;
            return Err(err);
        }
        tracing::info!(
            data_dir = %shadow.data_dir.display(),
            port = shadow.port,
            "shadow started"
        );
        Ok(shadow)
    }

    fn log_path(&self) -> PathBuf {
        self.data_dir.join("shadow.log")
    }

    fn stopped(&self, what: &'static str) -> RunError {
        RunError::ShadowStopped {
            data_dir: self.data_dir.clone(),
            what,
            log: self.log_path(),
            tail: postmaster::log_tail(&self.log_path(), 15),
        }
    }

    /// Starts the shadow again if its postmaster stopped on its own (killed,
    /// out of memory, a crash it did not survive): a catalog lookup would
    /// otherwise wait forever. More than [`RestartBudget::MAX`] restarts
    /// within [`RestartBudget::WINDOW`] end `run` with the log's last lines.
    pub async fn keep_running(&self) -> Result<(), RunError> {
        let state = Postmaster::read(&self.data_dir);
        let absent_before = self.absent_at_last_check.swap(
            state == Postmaster::Absent,
            std::sync::atomic::Ordering::Relaxed,
        );
        // No lock file is also what an operator's `pg_ctl restart` looks
        // like for a moment: only a second check in a row restarts it. A
        // lock file naming a dead process (killed) restarts at once.
        if state.is_alive() || (state == Postmaster::Absent && !absent_before) {
            return Ok(());
        }
        let allowed = self
            .restarts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(std::time::Instant::now());
        if !allowed {
            return Err(self.stopped("keeps stopping (3 restarts within 10 minutes)"));
        }
        tracing::error!(
            data_dir = %self.data_dir.display(),
            ?state,
            log_tail = %postmaster::log_tail(&self.log_path(), 5),
            "the shadow PostgreSQL stopped; starting it again"
        );
        let log = self.log_path().display().to_string();
        let started = match self.pg_ctl(&["start", "-W", "-l", &log]) {
            Ok(()) => postmaster::await_started(&self.data_dir, START_PATIENCE)
                .await
                .is_ok(),
            Err(e) => {
                tracing::warn!("{e}");
                false
            }
        };
        if started {
            tracing::info!(data_dir = %self.data_dir.display(), "shadow started again");
        } else {
            // The next check tries again while the budget lasts.
            tracing::warn!(
                log_tail = %postmaster::log_tail(&self.log_path(), 5),
                "the shadow did not start again; retrying in {SHADOW_CHECK_EVERY:?}"
            );
        }
        Ok(())
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), RunError> {
        let out = self
            .user
            .command(&self.pg_bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data_dir)
            .args(args)
            .current_dir("/")
            .output()
            .map_err(|e| RunError::Shadow(format!("running pg_ctl {}: {e}", args.join(" "))))?;
        if !out.status.success() {
            return Err(RunError::Shadow(format!(
                "pg_ctl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// `pg_ctl status`: a postmaster holds the data directory.
    fn is_running(&self) -> bool {
        self.user
            .command(&self.pg_bin.join("pg_ctl"))
            .arg("status")
            .arg("-D")
            .arg(&self.data_dir)
            .current_dir("/")
            .output()
            .is_ok_and(|out| out.status.success())
    }

    /// Makes the shadow run with at least the settings of a parameter change
    /// on the source (a hot standby stops replaying at one above its own
    /// settings): writes them to `walshadow.params.conf`, which the shadow's
    /// postgresql.conf includes last, and restarts the shadow. Returns
    /// whether it did.
    pub fn raise_settings(&self, change: &ParameterChange) -> Result<bool, RunError> {
        let read =
            |name: &str| std::fs::read_to_string(self.data_dir.join(name)).unwrap_or_default();
        let current = |setting: &str| -> i32 {
            // The last assignment wins, as in PostgreSQL's own parsing.
            [read("postgresql.conf"), read("walshadow.params.conf")]
                .iter()
                .flat_map(|text| text.lines())
                .filter_map(|l| {
                    let (k, v) = l.split_once('=')?;
                    (k.trim() == setting)
                        .then(|| v.trim().trim_matches('\'').parse::<i32>().ok())?
                })
                .next_back()
                .unwrap_or(0)
        };
        let mut raise = false;
        let mut text =
            String::from("# Written by `walshadow run`: at least the source's settings.\n");
        for (name, wanted) in change.settings() {
            let have = current(name);
            raise |= wanted > have;
            text.push_str(&format!("{name} = {}\n", wanted.max(have)));
        }
        if !raise {
            return Ok(false);
        }
        let path = self.data_dir.join("walshadow.params.conf");
        std::fs::write(&path, text)
            .map_err(|e| RunError::Shadow(format!("{}: {e}", path.display())))?;
        self.user.own_recursive(&path)?;
        tracing::info!(
            lsn = %change.lsn,
            "the source raised settings a hot standby must match; restarting the shadow with them"
        );
        let log = self.data_dir.join("shadow.log");
        self.pg_ctl(&[
            "restart",
            "-m",
            "fast",
            "-W",
            "-l",
            &log.display().to_string(),
        ])?;
        Ok(true)
    }

    /// Stops the shadow (fast) and the feeder.
    pub async fn stop(self) -> Result<(), RunError> {
        let r = self.pg_ctl(&["stop", "-m", "fast", "-w"]);
        self.feeder.shutdown().await;
        r
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

fn dir_has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}
