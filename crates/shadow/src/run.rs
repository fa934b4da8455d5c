//! `walshadow run`: keep the shadow fed.
//!
//! ```text
//!  source ══ START_REPLICATION (slot) ══▶ WalFollower ──▶ FilterPipeline ──▶ SegmentStore ──▶ Feeder ══▶ shadow PG
//!     ▲                                                                         │ flush         (standby)
//!     └──────── standby status: flush = what the store holds durably ◀──────────┘
//! ```
//!
//! The shadow is started here (`pg_ctl start` as the unprivileged user) and
//! stopped on shutdown. The filter restarts from its seed: until its state is
//! checkpointed (a later step), every start streams again from the base
//! backup's segment, and the slot is held there so the source keeps that WAL;
//! bytes the store already holds are not appended twice.

use std::path::{Path, PathBuf};
use std::time::Duration;

use walshadow_config::Config;
use walshadow_types::{Lsn, PgMajor};
use walshadow_wal_reader::replication::{ConnConfig, FollowEvent, ReplicationClient, WalFollower};

use crate::bootstrap::InitState;
use crate::feeder::{Feeder, FeederConfig};
use crate::filter::pipeline::FilterPipeline;
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
    #[error(transparent)]
    Pipeline(#[from] crate::filter::pipeline::PipelineError),
    #[error("shadow PostgreSQL: {0}")]
    Shadow(String),
    #[error(transparent)]
    Seed(#[from] crate::bootstrap::InitError),
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

/// Reads `init.json` (format version and checksum checked).
pub fn load_init_state(paths: &StatePaths) -> Result<InitState, RunError> {
    if !paths.init_file().exists() {
        return Err(RunError::NotInitialised(paths.dir.clone()));
    }
    InitState::read(&paths.dir).map_err(|e| RunError::State {
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
}

impl Shadow {
    /// Starts the feeder and the shadow PostgreSQL.
    pub async fn start(config: &Config) -> Result<Shadow, RunError> {
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
        let socket_dir = paths.feeder_socket_dir();
        std::fs::create_dir_all(&socket_dir)
            .map_err(|e| RunError::Shadow(format!("{}: {e}", socket_dir.display())))?;
        user.own_recursive(&socket_dir)?;
        let feeder = Feeder::start(
            FeederConfig::new(
                socket_dir,
                state.feeder_port,
                state.system_id,
                state.server_version.clone(),
            ),
            store.clone(),
        )
        .await?;
        let shadow = Shadow {
            feeder,
            store,
            socket_dir: paths.shadow_socket_dir(),
            port: state.shadow_port,
            state,
            data_dir: config.shadow.data_dir.clone(),
            pg_bin: config.shadow.pg_bin.clone(),
            user,
        };
        std::fs::create_dir_all(&shadow.socket_dir).map_err(|e| RunError::Shadow(e.to_string()))?;
        shadow.user.own_recursive(&shadow.socket_dir)?;
        // The log lives in the data directory: the server user owns it.
        let log = shadow.data_dir.join("shadow.log");
        shadow.pg_ctl(&["start", "-W", "-l", &log.display().to_string()])?;
        tracing::info!(
            data_dir = %shadow.data_dir.display(),
            port = shadow.port,
            "shadow started"
        );
        Ok(shadow)
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

/// Streams from the source through the filter into the shadow's store until
/// `stop` resolves.
pub async fn feed(
    config: &Config,
    shadow: &Shadow,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let state = &shadow.state;
    let major = PgMajor::from_number(state.major).map_err(|e| RunError::State {
        path: config.state.dir.join(InitState::FILE),
        message: e.to_string(),
    })?;
    let filter = crate::bootstrap::load_seed(&config.state.dir, major)?;
    let seg_start = segment_start(state.backup_start, state.segment_size);
    let mut pipeline = FilterPipeline::new(filter, seg_start, state.segment_size)?
        .with_replay_start(state.backup_start);
    let mut conn = ConnConfig::from_url(&config.source.url)?;
    conn.application_name
        .get_or_insert_with(|| "walshadow".into());
    let client = ReplicationClient::connect(&conn).await?;
    let mut follower =
        WalFollower::start(client, Some(&config.source.slot), seg_start, state.timeline).await?;
    // The slot stays at the backup's segment until the filter's state is
    // checkpointed: a restart re-reads from there.
    follower.set_positions(seg_start, seg_start, seg_start);
    let already = shadow.store.written_end();
    tokio::pin!(stop);
    let mut last_flush = tokio::time::Instant::now();
    loop {
        // Unflushed bytes are flushed once the stream pauses for a moment,
        // and at least every 10 ms while it flows (group fsync).
        let dirty = shadow.store.written_end() > shadow.store.flushed_end();
        let event = tokio::select! {
            _ = &mut stop => break,
            e = follower.next() => e?,
            _ = tokio::time::sleep(Duration::from_millis(2)), if dirty => {
                shadow.store.flush()?;
                last_flush = tokio::time::Instant::now();
                continue;
            }
        };
        match event {
            FollowEvent::Wal { start, data, .. } => {
                let (from, bytes) = pipeline.push(start, &data)?;
                let end = Lsn(from.0 + bytes.len() as u64);
                if end > already {
                    let skip = already.distance_from(from) as usize;
                    let fresh = bytes.get(skip.min(bytes.len())..).unwrap_or_default();
                    shadow.store.append(Lsn(from.0 + skip as u64), fresh)?;
                }
                if last_flush.elapsed() >= Duration::from_millis(10) {
                    shadow.store.flush()?;
                    last_flush = tokio::time::Instant::now();
                }
            }
            FollowEvent::ServerWalEnd(_) => {}
            FollowEvent::TimelineSwitch {
                from,
                to,
                switch_lsn,
                history,
            } => {
                tracing::info!(
                    "source timeline {from} ended at {switch_lsn}; following timeline {to}"
                );
                shadow.store.flush()?;
                shadow
                    .store
                    .switch_timeline(to, switch_lsn, &history.content)?;
            }
        }
    }
    shadow.store.flush()?;
    Ok(())
}
