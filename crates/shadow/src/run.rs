//! `walshadow run`: keep the shadow fed.
//!
//! ```text
//!  source ══ START_REPLICATION (slot) ══▶ WalFollower ──▶ FilterPipeline ──▶ SegmentStore ──▶ Feeder ══▶ shadow PG
//!     ▲                                                                         │ flush         (standby)
//!     └──────── standby status: flush = what the store holds durably ◀──────────┘
//! ```
//!
//! The shadow is started here (`pg_ctl start` as the unprivileged user) and
//! stopped on shutdown. The filter resumes from its last checkpoint
//! (`<state>/filter.ckpt`), or from its seed at the base backup's segment
//! when there is none; the slot's flush position is the last checkpoint, so
//! the source keeps only the WAL since then. Bytes the store already holds
//! are checked, not appended twice.

use std::path::{Path, PathBuf};
use std::time::Duration;
use walshadow_state_file::StateFile;

use walshadow_config::Config;
use walshadow_types::{Lsn, PgMajor};
use walshadow_wal_reader::replication::{ConnConfig, FollowEvent, ReplicationClient, WalFollower};

use crate::bootstrap::InitState;
use crate::feeder::{Feeder, FeederConfig};
use crate::filter::ParameterChange;
use crate::filter::checkpoint;
use crate::filter::pipeline::FilterPipeline;
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
    }
}

/// A second consumer of the source's raw WAL: the streaming pipeline. It
/// sees every byte the filter sees (and possibly earlier ones, from its own
/// restart position), in order, after the filtered bytes went to the store.
#[derive(Debug, Clone)]
pub struct WalTap {
    pub tx: tokio::sync::mpsc::Sender<TapEvent>,
    /// Where the tap must restart after a crash or reconnect: the stream
    /// starts no later than this page, and the slot's flush position never
    /// passes it.
    pub hold: tokio::sync::watch::Receiver<Lsn>,
    /// The source's WAL end as its walsender last reported it (keepalives
    /// and WAL messages), whatever the tap's consumer is doing: lag is
    /// measured against it.
    pub source_end: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How long the tap may stay full before the feed lets go of the source.
/// A consumer that takes nothing for this long waits on something else
/// (ClickHouse down, a long commit): the feed ends its replication
/// connection instead of leaving the walsender unanswered, so the source
/// can shut down (its walsender waits for the standby's answers), and
/// connects again from the tap's hold once the tap has room.
pub const TAP_STALL: Duration = Duration::from_secs(5);

/// What a [`WalTap`] receives.
#[derive(Debug)]
pub enum TapEvent {
    /// A new stream (first connection, or again after a transient error):
    /// the raw WAL that follows starts at `from`, a page boundary.
    Start { from: Lsn },
    /// Raw WAL from `start`, contiguous with the previous chunk.
    Wal { start: Lsn, data: bytes::Bytes },
}

/// Feeds the shadow until `stop` turns true, starting again from the last
/// checkpoint after transient source errors (backing off from 1 s to 30 s;
/// the shadow keeps running meanwhile). Definite errors end it.
pub async fn feed_until_stopped(
    config: &Config,
    shadow: &Shadow,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RunError> {
    feed_tapped_until_stopped(config, shadow, None, stop).await
}

/// [`feed_until_stopped`], with the raw WAL also handed to `tap`.
pub async fn feed_tapped_until_stopped(
    config: &Config,
    shadow: &Shadow,
    tap: Option<WalTap>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RunError> {
    let mut backoff =
        walshadow_types::Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    // After a stall the tap's consumer still has its decoding state: it
    // gets the WAL after what it took, not a new stream (which would make
    // it decode again from the start of its oldest open transaction).
    let mut continue_at = None;
    loop {
        let mut attempt_stop = stop.clone();
        let started = tokio::time::Instant::now();
        let result = feed_tapped_from(
            config,
            shadow,
            tap.clone(),
            std::mem::take(&mut continue_at),
            async move {
                let _ = attempt_stop.wait_for(|s| *s).await;
            },
        )
        .await;
        match result {
            Ok(()) => return Ok(()),
            // The pipeline gives up its wait when asked to stop, and drops
            // the tap: a clean stop, not an error.
            Err(RunError::PipelineStopped) if *stop.borrow() => return Ok(()),
            Err(RunError::TapStalled { after, tap_end }) => {
                continue_at = Some(tap_end);
                tracing::warn!(
                    "the streaming pipeline took no WAL for {after:?} (it is waiting, see walshadow status): \
                     released the source's walsender; streaming again once it takes WAL"
                );
                let Some(t) = &tap else { continue };
                // Room for half the queue, the shadow kept running meanwhile.
                let mut shadow_check = tokio::time::interval(SHADOW_CHECK_EVERY);
                let room = loop {
                    tokio::select! {
                        r = t.tx.reserve_many(t.tx.max_capacity() / 2) => break r.is_ok(),
                        _ = stop.wait_for(|s| *s) => return Ok(()),
                        _ = shadow_check.tick() => shadow.keep_running().await?,
                    }
                };
                if !room {
                    return if *stop.borrow() {
                        Ok(())
                    } else {
                        Err(RunError::PipelineStopped)
                    };
                }
                tracing::info!("the streaming pipeline takes WAL again; streaming from the source");
                backoff.reset();
            }
            Err(e) if e.is_transient() => {
                if started.elapsed() > Duration::from_secs(60) {
                    backoff.reset();
                }
                let delay = backoff.next_delay();
                tracing::warn!("source connection lost ({e}); feeding again in {delay:?}");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
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
    pub async fn start(config: &Config) -> Result<Shadow, RunError> {
        Self::start_held(config, Lsn::MAX).await
    }

    /// Starts the feeder with a replay ceiling (see
    /// [`Feeder::set_ceiling`]) already in place, then the shadow: it never
    /// replays past `ceiling` until the ceiling is raised.
    pub async fn start_held(config: &Config, ceiling: Lsn) -> Result<Shadow, RunError> {
        let paths = StatePaths {
            dir: config.state.dir.clone(),
        };
        let state = load_init_state(&paths)?;
        let user = ServerUser::resolve(config.shadow.run_as.as_deref())?;
        let seg_start = segment_start(state.backup_start, state.segment_size);
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
            data_dir: config.shadow.data_dir.clone(),
            pg_bin: config.shadow.pg_bin.clone(),
            user,
            restarts: Default::default(),
            absent_at_last_check: Default::default(),
        };
        crate::process::private_dir(&shadow.socket_dir, 0o700)
            .map_err(|e| RunError::Shadow(format!("{}: {e}", shadow.socket_dir.display())))?;
        shadow.user.own_recursive(&shadow.socket_dir)?;
        let role = walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
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

/// The first byte of the segment holding `lsn`.
pub fn segment_start(lsn: Lsn, seg_size: u32) -> Lsn {
    Lsn(lsn.0 - lsn.0 % u64::from(seg_size))
}

/// Where streaming resumes and what the slot may be told.
#[derive(Debug, Clone, Copy)]
struct ResumePoint {
    /// `START_REPLICATION` position and timeline.
    stream_from: Lsn,
    timeline: u32,
    /// The last checkpoint (or the base backup's segment without one): the
    /// slot's flush position.
    durable: Lsn,
}

/// Streams from the source through the filter into the shadow's store until
/// `stop` resolves.
///
/// The filter resumes from its last checkpoint (`<state>/filter.ckpt`, see
/// [`checkpoint`]) or, without one, from the seed at the base backup's
/// segment. Bytes the store already holds are not appended again; they are
/// compared with what the filter produces now, and a difference stops the
/// stream (the store and the filter's state no longer agree). A checkpoint is
/// taken every `checkpoint_every_mb` of WAL or `checkpoint_every_secs`,
/// whichever comes first, and at a clean stop; the slot's flush position
/// (which a physical slot's `restart_lsn` follows) is the last checkpoint,
/// never more (invariant 4).
pub async fn feed(
    config: &Config,
    shadow: &Shadow,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    feed_tapped(config, shadow, None, stop).await
}

/// [`feed`], with the raw WAL also handed to `tap` (see [`WalTap`]).
pub async fn feed_tapped(
    config: &Config,
    shadow: &Shadow,
    tap: Option<WalTap>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    feed_tapped_from(config, shadow, tap, None, stop).await
}

/// [`feed_tapped`]; with `continue_at`, the tap's stream goes on from that
/// position (the end of what it took before) instead of starting anew.
async fn feed_tapped_from(
    config: &Config,
    shadow: &Shadow,
    tap: Option<WalTap>,
    continue_at: Option<Lsn>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let state = &shadow.state;
    let store = &shadow.store;
    let major = PgMajor::from_number(state.major).map_err(|e| RunError::State {
        path: config.state.dir.join(InitState::FILE),
        message: e.to_string(),
    })?;
    let identity = checkpoint::Identity {
        system_id: state.system_id,
        major,
        backup_start: state.backup_start,
    };
    let (pipeline, resume) = match checkpoint::read(&config.state.dir, identity)? {
        Some(c) => {
            if c.lsn > store.flushed_end() || c.lsn < store.start() {
                return Err(RunError::StoreBehindCheckpoint {
                    checkpoint: c.lsn,
                    start: store.start(),
                    end: store.flushed_end(),
                });
            }
            let pipeline = FilterPipeline::resume(c.filter, c.lsn, state.segment_size)?;
            let resume = ResumePoint {
                stream_from: FilterPipeline::resume_page(c.lsn),
                timeline: c.timeline,
                durable: c.lsn,
            };
            (pipeline, resume)
        }
        None => {
            let filter = crate::bootstrap::load_seed(&config.state.dir, major)?;
            let seg_start = segment_start(state.backup_start, state.segment_size);
            let pipeline = FilterPipeline::new(filter, seg_start, state.segment_size)?;
            let resume = ResumePoint {
                stream_from: seg_start,
                timeline: state.timeline,
                durable: seg_start,
            };
            (pipeline, resume)
        }
    };
    let mut pipeline = pipeline.with_replay_start(state.backup_start);
    // The filter's input starts at its resume page; a tap restarting
    // earlier makes the stream start earlier, and the filter skips ahead.
    let filter_from = resume.stream_from;
    let tap_hold = tap.as_ref().map(|t| *t.hold.borrow());
    let mut resume = resume;
    if let Some(hold) = tap_hold.filter(|h| h.is_valid()) {
        resume.stream_from = resume.stream_from.min(FilterPipeline::resume_page(hold));
        resume.durable = resume.durable.min(hold);
    }
    let continue_at = continue_at.filter(|_| tap.is_some());
    if let Some(at) = continue_at {
        resume.stream_from = resume.stream_from.min(FilterPipeline::resume_page(at));
    }
    // The next byte the tap expects.
    let mut tap_next = continue_at.unwrap_or(resume.stream_from);
    tokio::pin!(stop);
    if let Some(t) = tap.as_ref().filter(|_| continue_at.is_none()) {
        let start = TapEvent::Start {
            from: resume.stream_from,
        };
        tokio::select! {
            sent = t.tx.send(start) => if sent.is_err() {
                return Err(RunError::PipelineStopped);
            },
            _ = &mut stop => return Ok(()),
        }
    }
    tracing::info!(
        from = %resume.stream_from,
        timeline = resume.timeline,
        checkpoint = %resume.durable,
        store_end = %store.flushed_end(),
        "streaming from the source"
    );
    let mut conn = ConnConfig::from_url(&config.source.url)?;
    conn.application_name
        .get_or_insert_with(|| "walshadow".into());
    let mut client = ReplicationClient::connect(&conn).await?;
    // The slot's name may exist on another cluster too (a URL pointed at
    // a replica's primary after a rebuild, a restored copy): its WAL is not
    // this shadow's.
    let ident = client.identify_system().await?;
    if ident.systemid != state.system_id {
        return Err(RunError::OtherCluster {
            url_host: format!("{}:{}", conn.host, conn.port),
            found: ident.systemid,
            expected: state.system_id,
        });
    }
    let mut follower = WalFollower::start(
        client,
        Some(&config.source.slot),
        resume.stream_from,
        resume.timeline,
    )
    .await?;
    follower.set_positions(resume.stream_from, resume.durable, resume.durable);
    let mut ckpt = Checkpointer {
        dir: config.state.dir.clone(),
        identity,
        every_bytes: config.shadow.checkpoint_every_mb.saturating_mul(1 << 20),
        every: Duration::from_secs(config.shadow.checkpoint_every_secs),
        last: resume.durable,
        last_try: tokio::time::Instant::now(),
        hold: tap.as_ref().map(|t| t.hold.clone()),
        reported: resume.durable,
    };
    // What the store held before this run: the filter must produce the
    // same bytes again.
    let already = store.written_end();
    let mut last_flush = tokio::time::Instant::now();
    let mut shadow_check = tokio::time::interval(SHADOW_CHECK_EVERY);
    shadow_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Unflushed bytes are flushed once the stream pauses for a moment,
        // and at least every 10 ms while it flows (group fsync).
        let dirty = store.written_end() > store.flushed_end();
        let event = tokio::select! {
            _ = &mut stop => break,
            e = follower.next() => e?,
            _ = tokio::time::sleep(Duration::from_millis(2)), if dirty => {
                store.flush()?;
                last_flush = tokio::time::Instant::now();
                continue;
            }
            _ = shadow_check.tick() => {
                shadow.keep_running().await?;
                continue;
            }
            _ = tokio::time::sleep_until(ckpt.last_try + ckpt.every) => {
                if ckpt.take(&pipeline, store, &mut follower).await? {
                    recycle(config, shadow, store, ckpt.last).await;
                }
                continue;
            }
        };
        match event {
            FollowEvent::Wal {
                start,
                data,
                wal_end,
                ..
            } => {
                if let Some(t) = &tap {
                    t.source_end
                        .fetch_max(wal_end.0, std::sync::atomic::Ordering::Relaxed);
                }
                let chunk_end = Lsn(start.0 + data.len() as u64);
                let skip = filter_from.distance_from(start).min(data.len() as u64) as usize;
                let (from, bytes) = if chunk_end > filter_from {
                    pipeline.push(
                        Lsn(start.0 + skip as u64),
                        data.get(skip..).unwrap_or_default(),
                    )?
                } else {
                    (start, Vec::new())
                };
                if let Some(change) = pipeline.take_parameter_change() {
                    shadow.raise_settings(&change)?;
                }
                let end = Lsn(from.0 + bytes.len() as u64);
                let overlap = already.distance_from(from).min(bytes.len() as u64) as usize;
                if overlap > 0 {
                    verify_stored(store, from, bytes.get(..overlap).unwrap_or_default())?;
                }
                if end > already && !bytes.is_empty() {
                    let fresh = bytes.get(overlap..).unwrap_or_default();
                    store.append(Lsn(from.0 + overlap as u64), fresh)?;
                }
                if last_flush.elapsed() >= Duration::from_millis(10) {
                    store.flush()?;
                    last_flush = tokio::time::Instant::now();
                }
                // A continued tap has the bytes before `tap_next` already.
                let tap_part = match chunk_end.distance_from(tap_next) {
                    0 => None,
                    _ if start >= tap_next => Some((start, data)),
                    n => {
                        let from = data.len().saturating_sub(n as usize);
                        Some((tap_next, data.slice(from..)))
                    }
                };
                if let (Some(t), Some((start, data))) = (&tap, tap_part) {
                    let sent_end = Lsn(start.0 + data.len() as u64);
                    let event = TapEvent::Wal { start, data };
                    let event = match t.tx.try_send(event) {
                        Ok(()) => None,
                        Err(tokio::sync::mpsc::error::TrySendError::Full(e)) => Some(e),
                        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                            return Err(RunError::PipelineStopped);
                        }
                    };
                    if let Some(event) = event {
                        // The tap may be waiting for the shadow to replay
                        // what the store holds unflushed: flush before
                        // waiting on it.
                        store.flush()?;
                        last_flush = tokio::time::Instant::now();
                        // The pipeline may be waiting for the shadow: keep
                        // it running meanwhile (reserve is cancel-safe).
                        let stalled = tokio::time::sleep(TAP_STALL);
                        tokio::pin!(stalled);
                        let permit = loop {
                            tokio::select! {
                                permit = t.tx.reserve() => break Some(permit),
                                _ = &mut stop => break None,
                                _ = shadow_check.tick() => shadow.keep_running().await?,
                                _ = &mut stalled => {
                                    // What the filter took is in the store;
                                    // the tap's part is streamed again.
                                    store.flush()?;
                                    ckpt.take(&pipeline, store, &mut follower).await?;
                                    return Err(RunError::TapStalled {
                                        after: TAP_STALL,
                                        tap_end: tap_next,
                                    });
                                }
                            }
                        };
                        let Some(permit) = permit else { break };
                        let Ok(permit) = permit else {
                            return Err(RunError::PipelineStopped);
                        };
                        permit.send(event);
                    }
                    tap_next = sent_end;
                }
                if ckpt.due(&pipeline) && ckpt.take(&pipeline, store, &mut follower).await? {
                    recycle(config, shadow, store, ckpt.last).await;
                }
            }
            FollowEvent::ServerWalEnd(wal_end) => {
                if let Some(t) = &tap {
                    t.source_end
                        .fetch_max(wal_end.0, std::sync::atomic::Ordering::Relaxed);
                }
            }
            FollowEvent::TimelineSwitch {
                from,
                to,
                switch_lsn,
                history,
            } => {
                tracing::info!(
                    "source timeline {from} ended at {switch_lsn}; following timeline {to}"
                );
                if continue_at.is_some() && switch_lsn < tap_next {
                    store.flush()?;
                    return Err(RunError::TapDiverged {
                        switch: switch_lsn,
                        tap_end: tap_next,
                    });
                }
                store.flush()?;
                // Re-streaming what the store holds: it switched already.
                let known = store
                    .lineage()
                    .iter()
                    .any(|s| s.tli == to && s.begin == switch_lsn);
                if !known {
                    store.switch_timeline(to, switch_lsn, &history.content)?;
                }
            }
        }
    }
    store.flush()?;
    // A clean stop checkpoints and tells the source at once, so the slot
    // does not hold WAL until the next run.
    ckpt.take(&pipeline, store, &mut follower).await?;
    Ok(())
}

/// Drops filtered segments that neither the shadow nor a restarted `run`
/// will read again: those before both the shadow's last restartpoint (its
/// replay restarts there) and the filter checkpoint (a restart re-filters
/// from there), with one segment of margin. Best effort: a shadow that does
/// not answer yet (still reaching consistency) keeps everything.
async fn recycle(config: &Config, shadow: &Shadow, store: &SegmentStore, checkpoint: Lsn) {
    let Ok(source) = ConnConfig::from_url(&config.source.url) else {
        return;
    };
    let db = source.dbname.as_deref().unwrap_or("postgres");
    let redo = async {
        let mut cat = crate::catalog::ShadowCatalog::connect(
            &shadow.socket_dir,
            shadow.port,
            &source.user,
            db,
        )
        .await?;
        cat.restartpoint_redo().await
    };
    let redo = match redo.await {
        Ok(r) if r.is_valid() => r,
        Ok(_) => return,
        Err(e) => {
            tracing::debug!("not recycling filtered WAL yet: {e}");
            return;
        }
    };
    let seg = u64::from(store.segment_size());
    let keep = redo.min(FilterPipeline::resume_page(checkpoint));
    let keep_from = Lsn((keep.0 / seg).saturating_sub(1) * seg);
    match store.remove_before(keep_from) {
        Ok(0) => {}
        Ok(n) => tracing::info!(segments = n, before = %keep_from, "recycled filtered WAL"),
        Err(e) => tracing::warn!("recycling filtered WAL before {keep_from}: {e}"),
    }
}

/// Takes filter checkpoints and advances the slot behind them.
#[derive(Debug)]
struct Checkpointer {
    dir: PathBuf,
    identity: checkpoint::Identity,
    every_bytes: u64,
    every: Duration,
    /// The last checkpoint's LSN.
    last: Lsn,
    last_try: tokio::time::Instant,
    /// The tap's restart position, when there is a tap.
    hold: Option<tokio::sync::watch::Receiver<Lsn>>,
    /// What the slot's flush position last reported: the last checkpoint,
    /// or the tap's hold if that is behind it.
    reported: Lsn,
}

impl Checkpointer {
    fn due(&self, pipeline: &FilterPipeline) -> bool {
        self.last_try.elapsed() >= self.every
            || pipeline
                .checkpoint_lsn()
                .is_some_and(|l| l.distance_from(self.last) >= self.every_bytes)
    }

    /// Checkpoints at the pipeline's checkpoint point if it moved: the
    /// store is flushed past it first, the slot's flush position follows the
    /// file and is sent at once. Returns whether a checkpoint was written.
    async fn take(
        &mut self,
        pipeline: &FilterPipeline,
        store: &SegmentStore,
        follower: &mut WalFollower,
    ) -> Result<bool, RunError> {
        self.last_try = tokio::time::Instant::now();
        let Some(l) = pipeline.checkpoint_lsn().filter(|&l| l > self.last) else {
            self.report(self.last, follower).await;
            return Ok(false);
        };
        if store.flushed_end() < l {
            store.flush()?;
        }
        if store.flushed_end() < l {
            // Released bytes always reach the store; nothing to cover yet.
            return Ok(false);
        }
        let timeline = timeline_at(store, FilterPipeline::resume_page(l));
        checkpoint::write(&self.dir, self.identity, timeline, l, pipeline.filter())?;
        self.last = l;
        tracing::debug!(lsn = %l, timeline, "filter checkpoint");
        self.report(l, follower).await;
        Ok(true)
    }

    /// Reports `checkpoint`, held back to the tap's restart position, as
    /// the slot's flush position when that moved.
    async fn report(&mut self, checkpoint: Lsn, follower: &mut WalFollower) {
        let flush = match &self.hold {
            Some(h) => checkpoint.min(*h.borrow()),
            None => checkpoint,
        };
        if flush <= self.reported {
            return;
        }
        self.reported = flush;
        let received = follower.received_upto().unwrap_or(flush);
        follower.set_positions(received, flush, flush);
        // At once, not at the next periodic status update: the source may
        // recycle its WAL before `flush` from now on.
        if let Err(e) = follower.send_status(false).await {
            tracing::warn!("could not report {flush} to the source: {e}");
        }
    }
}

/// The timeline the store's history has at `lsn`.
fn timeline_at(store: &SegmentStore, lsn: Lsn) -> u32 {
    store
        .lineage()
        .iter()
        .find(|s| s.begin <= lsn && s.end.is_none_or(|e| lsn < e))
        .map_or_else(|| store.timeline(), |s| s.tli)
}

/// Checks that `bytes`, filtered again at `lsn`, equal what the store holds.
fn verify_stored(store: &SegmentStore, lsn: Lsn, bytes: &[u8]) -> Result<(), RunError> {
    let mut held = vec![0u8; bytes.len()];
    let n = store.read_at(store.timeline(), lsn, &mut held)?;
    let differs = held
        .get(..n)
        .unwrap_or_default()
        .iter()
        .zip(bytes)
        .position(|(a, b)| a != b);
    match differs {
        None if n == bytes.len() => Ok(()),
        None => Err(RunError::Diverged {
            lsn: Lsn(lsn.0 + n as u64),
            problem: "the store ends there".into(),
        }),
        Some(i) => Err(RunError::Diverged {
            lsn: Lsn(lsn.0 + i as u64),
            problem: "the bytes differ".into(),
        }),
    }
}
