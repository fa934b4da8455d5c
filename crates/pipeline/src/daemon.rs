//! `walshadow run`: the shadow kept fed and, with tables pinned, the
//! streaming pipeline beside it on the same WAL.

use std::sync::Arc;
use walshadow_state_file::StateFile;

use tokio::sync::{mpsc, watch};
use walshadow_config::Config;
use walshadow_intake::WalTap;
use walshadow_shadow::run::{RunError, Shadow, ShadowSettings, StatePaths, load_init_state};

use crate::control::{Command, ControlSocket, Reply, Responder};
use crate::progress::Progress;
use crate::stream::{StreamControl, StreamError, StreamRequest, StreamSettings, Streamer};

/// Raw WAL chunks (≤ 128 KiB each) queued between the feed and the
/// pipeline: bounds the memory between them.
const TAP_QUEUE: usize = 64;

/// How long a stop request waits for the pipeline to flush what it holds.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why `run` stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Locked(#[from] walshadow_shadow::state_lock::StateLockError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Stream(#[from] StreamError),
    #[error(transparent)]
    Progress(#[from] crate::progress::ProgressError),
    #[error(
        "source.url names database {configured:?}, but `walshadow init` was run for database \
         {recorded:?} (its tables' progress is in this state directory): point source.url \
         back at {recorded:?}, or run `walshadow init --force` to start over with {configured:?}"
    )]
    OtherDatabase {
        recorded: String,
        configured: String,
    },
    #[error(
        "{path}: progress of the source with system identifier {found}, but this state \
         directory follows {expected}; use a new state directory for another source"
    )]
    OtherSource {
        path: std::path::PathBuf,
        found: u64,
        expected: u64,
    },
}

/// Requests of `walshadow ctl` queued for the stream.
const REQUEST_QUEUE: usize = 16;

/// How long a request waits for the stream's answer: within the client's
/// own wait, so the client hears why.
const ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(100);

/// Sets what is logged (a `WALSHADOW_LOG`-style filter), or says why it
/// cannot.
pub type LogLevelHook = Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// What `run` needs besides the config.
pub struct RunOptions {
    /// The file `config` came from, which a reload (`walshadow ctl
    /// reload`, SIGHUP) reads again.
    pub config_path: std::path::PathBuf,
    /// Applies `[log] level`; `None` while `WALSHADOW_LOG` decides.
    pub log_level: Option<LogLevelHook>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("config_path", &self.config_path)
            .field("log_level", &self.log_level.is_some())
            .finish()
    }
}

/// Runs until `stop` turns true.
pub async fn run(
    config: &Config,
    options: RunOptions,
    stop: watch::Receiver<bool>,
) -> Result<(), DaemonError> {
    walshadow_shadow::run::warn_about_transport(config);
    // What the shadow and the WAL intake take from the config, once.
    let settings = ShadowSettings::from(config);
    // Before the shadow, its sockets, the metrics port or the mirror.
    let _lock = walshadow_shadow::state_lock::StateLock::acquire(&config.state.dir, "run")?;
    // SIGHUP's default ends the process: taken before anything slow.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .map_err(|e| StreamError::State(format!("listening for SIGHUP: {e}")))?;
    let socket = ControlSocket::bind(&config.state.dir)
        .map_err(|e| StreamError::State(format!("the control socket: {e}")))?;
    let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
    let control = tokio::spawn(serve_control(
        socket,
        hangups,
        Controlled {
            running: config.clone(),
            path: options.config_path,
            log_level: options.log_level,
            stream: config.clickhouse.is_some().then_some(req_tx),
        },
    ));
    let _control = AbortOnDrop(control);
    // Without a destination only the shadow runs; with one, tables come
    // from the config file and from the config table.
    let archive = wal_archive(config);
    if config.clickhouse.is_none() {
        let shadow = Shadow::start(&settings).await?;
        let fed =
            walshadow_intake::feed_tapped_until_stopped(&settings, &shadow, None, archive, stop)
                .await;
        let stopped = shadow.stop().await;
        fed?;
        stopped?;
        return Ok(());
    }
    let paths = StatePaths {
        dir: config.state.dir.clone(),
    };
    let init = load_init_state(&paths)?;
    let stream_settings = StreamSettings::new(config)?.with_xid_horizon(init.xid_horizon);
    // Another database of the same cluster streams nothing of these
    // tables: its changes would be skipped for good while lag says 0.
    if let (Some(recorded), Ok(conn)) = (
        &init.database,
        walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url),
    ) {
        let configured = conn.database();
        if *recorded != configured {
            return Err(DaemonError::OtherDatabase {
                recorded: recorded.clone(),
                configured,
            });
        }
    }
    let mut first_run = false;
    let progress = match Progress::read(&config.state.dir)? {
        Some(p) if p.system_id != init.system_id => {
            return Err(DaemonError::OtherSource {
                path: config.state.dir.join(Progress::FILE),
                found: p.system_id,
                expected: init.system_id,
            });
        }
        Some(p) => p,
        None => {
            // Tables stream from the point the shadow becomes consistent:
            // transactions committed before it are not emitted.
            let mut p = Progress::new(init.system_id, init.backup_end);
            p.restart = init.backup_start;
            first_run = true;
            p
        }
    };
    tracing::info!(
        applied = %progress.applied,
        restart = %progress.restart,
        tables = config.tables.len(),
        "streaming to ClickHouse"
    );
    // The shadow never replays past what the pipeline has settled.
    let shadow = Arc::new(Shadow::start_held(&settings, progress.applied).await?);
    let (hold_tx, hold_rx) = watch::channel(progress.restart);
    let (tx, rx) = mpsc::channel(TAP_QUEUE);
    let source_end = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let archive_turns = Arc::new(walshadow_intake::ArchiveTurns::default());
    let metrics = crate::metrics::Metrics::new();
    if let Some(m) = &config.metrics {
        metrics.set_ready_max_lag(m.ready_max_lag_secs);
        if let Some(token) = &m.token {
            metrics.set_token(token.clone());
        }
    }
    // Kept for the whole run: dropping it stops the endpoint.
    let _metrics_server = match &config.metrics {
        Some(m) => match metrics.serve(m.listen).await {
            Ok(server) => {
                tracing::info!(listen = %server.local_addr(), "serving Prometheus metrics at /metrics");
                Some(server)
            }
            Err(e) => {
                stop_shadow(shadow).await;
                return Err(StreamError::State(e.to_string()).into());
            }
        },
        None => None,
    };
    let streamer = match Streamer::new(
        stream_settings,
        Arc::clone(&shadow),
        progress,
        hold_tx,
        metrics,
        first_run,
        StreamControl {
            stop: stop.clone(),
            source_end: Arc::clone(&source_end),
            archive: Arc::clone(&archive_turns),
            requests: req_rx,
        },
    )
    .await
    {
        Ok(s) => s,
        Err(StreamError::Stopping) => {
            stop_shadow(shadow).await;
            return Ok(());
        }
        Err(e) => {
            stop_shadow(shadow).await;
            return Err(e.into());
        }
    };
    let mut stream_task = match crate::stream::StreamThread::start(streamer, rx) {
        Ok(t) => t,
        Err(e) => {
            stop_shadow(shadow).await;
            return Err(e.into());
        }
    };
    let tap = WalTap {
        tx,
        hold: hold_rx,
        source_end,
        archive: archive_turns,
    };
    let fed = walshadow_intake::feed_tapped_until_stopped(
        &settings,
        &shadow,
        Some(tap),
        archive,
        stop.clone(),
    )
    .await;
    // The tap is closed: the pipeline flushes and records its progress —
    // within STOP_GRACE of a stop request. Past it, the pipeline is
    // dropped where it waits (a ClickHouse request that does not answer):
    // what it held is not recorded and is replayed at the next start,
    // exactly as after `kill -9`.
    let stopping = *stop.borrow();
    // An intake that failed ends `run` the same way: a paused stream,
    // which does not read the tap, would not see it close.
    let joined = if stopping || fed.is_err() {
        match tokio::time::timeout(STOP_GRACE, stream_task.join()).await {
            Ok(r) => r,
            Err(_) => {
                tracing::warn!(
                    "ClickHouse did not take the last rows within {STOP_GRACE:?} of the stop \
                     (or the WAL intake's end); stopping without them (they are streamed again at \
                     the next start)"
                );
                stream_task.stop().await;
                Ok(())
            }
        }
    } else {
        stream_task.join().await
    };
    let streamed = match joined {
        Err(StreamError::Stopping) => Ok(()),
        r => r,
    };
    stop_shadow(shadow).await;
    // The pipeline's own error explains a feed that stopped because of it.
    streamed?;
    fed?;
    Ok(())
}

/// The `[backup]` store's WAL archive, which serves the intake what the
/// source no longer has. A store that does not open is said once and left
/// out: the source may still have everything.
fn wal_archive(config: &Config) -> Option<Arc<walshadow_backup_store::BackupStore>> {
    let settings = config.backup.as_ref()?;
    match crate::backup_admin::open(settings) {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => {
            tracing::warn!(
                "the [backup] store does not open ({e}): WAL the source no longer has cannot \
                 come from its archive"
            );
            None
        }
    }
}

async fn stop_shadow(shadow: Arc<Shadow>) {
    match Arc::try_unwrap(shadow) {
        Ok(s) => {
            if let Err(e) = s.stop().await {
                tracing::warn!("stopping the shadow: {e}");
            }
        }
        Err(_) => tracing::warn!("the shadow is still in use; leaving it running"),
    }
}

/// Ends the control task with `run`.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What the control socket and SIGHUP act on.
struct Controlled {
    /// The config in effect: the one `run` started with, and what reloads
    /// applied of later ones. A change that waits for a restart is named
    /// at every reload until then.
    running: Config,
    path: std::path::PathBuf,
    log_level: Option<LogLevelHook>,
    /// The stream's requests; `None` without `[clickhouse]`.
    stream: Option<mpsc::Sender<StreamRequest>>,
}

/// Answers `walshadow ctl` and SIGHUP until `run` ends (the socket goes
/// with it; a drain after a stop request is still answered).
async fn serve_control(
    socket: ControlSocket,
    mut hangups: tokio::signal::unix::Signal,
    mut c: Controlled,
) {
    tracing::info!(socket = %socket.path().display(), "taking `walshadow ctl` commands");
    loop {
        tokio::select! {
            next = socket.next() => match next {
                Ok((cmd, responder)) => c.answer(cmd, responder).await,
                Err(e) => {
                    // Out of descriptors, a connection aborted: the next
                    // one may do.
                    tracing::warn!("the control socket: {e}");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            },
            _ = hangups.recv() => {
                tracing::info!("SIGHUP: reloading {}", c.path.display());
                let reply = c.reload().await;
                if !reply.ok {
                    tracing::error!("reload refused: {}", reply.message);
                }
            }
        }
    }
}

impl Controlled {
    async fn answer(&mut self, cmd: Command, mut responder: Responder) {
        tracing::info!(command = cmd.name(), "walshadow ctl");
        let reply = match cmd {
            Command::Reload => self.reload().await,
            Command::Status => match self.ask(StreamRequest::Status).await {
                Ok(status) => Reply {
                    status: Some(status),
                    ..Reply::ok("streaming status")
                },
                Err(r) => r,
            },
            Command::Pause => self.ask(StreamRequest::Pause).await.unwrap_or_else(|r| r),
            Command::Resume => self.ask(StreamRequest::Resume).await.unwrap_or_else(|r| r),
        };
        responder.send(&reply).await;
    }

    /// A request to the stream and its answer; a refusal when there is no
    /// stream to ask.
    async fn ask<T>(
        &self,
        req: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> StreamRequest,
    ) -> Result<T, Reply> {
        let Some(stream) = &self.stream else {
            return Err(Reply::refused(
                "this run has no [clickhouse] section: it keeps the shadow fed and streams no tables",
            ));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let gone =
            || Reply::refused("the stream is not running (see the log and `walshadow status`)");
        let late = || {
            Reply::refused(format!(
                "the stream did not answer within {ASK_TIMEOUT:?}: it is busy (starting, or \
                 waiting for the shadow; see walshadow status); the request stays queued and \
                 takes effect when the stream gets to it"
            ))
        };
        tokio::time::timeout(ASK_TIMEOUT, async {
            stream.send(req(tx)).await.map_err(|_| gone())?;
            rx.await.map_err(|_| gone())
        })
        .await
        .map_err(|_| late())?
    }

    /// Reads the file again: nothing changes unless it validates; the
    /// answer says what was applied and what waits for a restart.
    async fn reload(&mut self) -> Reply {
        let path = self.path.display().to_string();
        let new = match Config::load(&self.path) {
            Ok(c) => c,
            Err(e) => {
                return Reply::refused(format!("{path} does not validate, nothing changed: {e}"));
            }
        };
        let mut needs_restart = Vec::new();
        let mut applied = Vec::new();
        // What is logged goes first: a filter that does not parse
        // changes nothing.
        let old_level = self.running.log.level.clone();
        if new.log.level != old_level {
            match &self.log_level {
                None => needs_restart.push(
                    "[log] level: WALSHADOW_LOG is set and wins (unset it, then restart)".into(),
                ),
                Some(set) => {
                    let level = new.log.level.as_deref().unwrap_or("info");
                    if let Err(e) = set(level) {
                        return Reply::refused(format!(
                            "{path}: [log] level {level:?} is not a filter ({e}); nothing changed"
                        ));
                    }
                    applied.push(format!("[log] level: {old_level:?} → {:?}", new.log.level));
                }
            }
        }
        let restore_level = |c: &Controlled| {
            if let (Some(set), true) = (&c.log_level, new.log.level != old_level) {
                let _ = set(old_level.as_deref().unwrap_or("info"));
            }
        };
        let r = &self.running;
        let mut sections = vec![
            ("[shadow]", r.shadow != new.shadow),
            ("[metrics]", r.metrics != new.metrics),
            (
                "[clickhouse] (added or removed)",
                r.clickhouse.is_some() != new.clickhouse.is_some(),
            ),
        ];
        if self.stream.is_none() {
            // No stream to ask: every section it would judge.
            sections.extend([
                ("[source]", r.source != new.source),
                ("[state]", r.state != new.state),
                ("[stream]", r.stream != new.stream),
                ("[backfill]", r.backfill != new.backfill),
                ("[backup]", r.backup != new.backup),
                ("[table]", r.tables != new.tables),
            ]);
        }
        for (section, changed) in sections {
            if changed {
                needs_restart.push(format!("{section}: changed"));
            }
        }
        if self.stream.is_some()
            && let Some(_) = &new.clickhouse
        {
            let settings = match StreamSettings::new(&new) {
                Ok(s) => s,
                Err(e) => {
                    restore_level(self);
                    return Reply::refused(format!("{path}: {e}; nothing changed"));
                }
            };
            match self
                .ask(|tx| StreamRequest::Reload(Box::new(settings), tx))
                .await
            {
                Ok(Ok(r)) => {
                    applied.extend(r.applied);
                    needs_restart.extend(r.needs_restart);
                }
                Ok(Err(e)) => {
                    restore_level(self);
                    return Reply::refused(format!(
                        "{path}: [clickhouse] cannot be used ({e}); nothing changed"
                    ));
                }
                Err(r) => {
                    restore_level(self);
                    return r;
                }
            }
        }
        if self.log_level.is_some() {
            self.running.log = new.log;
        }
        for change in &applied {
            tracing::info!("reload applied {change}");
        }
        for change in &needs_restart {
            tracing::warn!("reload: {change}; applied at the next start of `walshadow run`");
        }
        let mut message = format!("reloaded {path}");
        if applied.is_empty() && needs_restart.is_empty() {
            message.push_str(": nothing changed");
        }
        if !applied.is_empty() {
            message.push_str(&format!("; applied: {}", applied.join(", ")));
        }
        if !needs_restart.is_empty() {
            message.push_str(&format!(
                "; applied at the next start of `walshadow run`: {}",
                needs_restart.join(", ")
            ));
        }
        Reply::ok(message)
    }
}
