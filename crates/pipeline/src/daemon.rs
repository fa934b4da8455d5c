//! `walshadow run`: the shadow kept fed and, with tables pinned, the
//! streaming pipeline beside it on the same WAL.

use std::sync::Arc;
use walshadow_state_file::StateFile;

use tokio::sync::{mpsc, watch};
use walshadow_config::Config;
use walshadow_shadow::run::{RunError, Shadow, ShadowSettings, StatePaths, load_init_state};

use crate::control::{Command, ControlSocket, Reply, Responder};
use crate::progress::Progress;
use crate::stream::{StreamError, StreamRequest, StreamSettings};

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
    #[error(transparent)]
    Databases(#[from] crate::databases::DatabasesError),
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
    let url_db = walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
        .map_err(|e| StreamError::State(e.to_string()))?
        .database();
    let followed = crate::databases::followed(config, &url_db)?;
    // The config as the streams run it: a reload's live changes are kept
    // here, so streams started again (a database created or dropped) go
    // on with them.
    let live = Arc::new(std::sync::Mutex::new(config.clone()));
    // Each running stream's requests; set by each start of the streams.
    let streams = Streams::default();
    let control = tokio::spawn(serve_control(
        socket,
        hangups,
        Controlled {
            running: config.clone(),
            live: Arc::clone(&live),
            path: options.config_path,
            log_level: options.log_level,
            url_db: url_db.clone(),
            streams: Arc::clone(&streams),
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
    // Another database of the same cluster streams nothing of these
    // tables: its changes would be skipped for good while lag says 0.
    if let Some(recorded) = &init.database
        && *recorded != url_db
    {
        return Err(DaemonError::OtherDatabase {
            recorded: recorded.clone(),
            configured: url_db,
        });
    }
    // The shadow never replays past what the streams have settled: held,
    // at its start, where the furthest-behind database's stream is.
    let mut floor = None;
    for f in &followed {
        if let Some(p) = read_progress(&f.view, &init)? {
            floor = Some(floor.map_or(p.applied, |l: walshadow_types::Lsn| l.min(p.applied)));
        }
    }
    let shadow = Arc::new(Shadow::start_held(&settings, floor.unwrap_or(init.backup_end)).await?);
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
    let ground = crate::database_streams::Ground {
        config,
        settings: &settings,
        shadow: &shadow,
        init: &init,
        metrics: &metrics,
        source_end: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        archive_turns: Arc::new(walshadow_intake::ArchiveTurns::default()),
        archive,
        streams: &streams,
        url_db: &url_db,
    };
    // The streams run until a stop; a database created or dropped on the
    // source starts them again with it or without it (each resumes from
    // its own progress), without a restart of `run`.
    let mut streaming = crate::database_streams::first_guess(&followed, &init)?;
    let mut absent = std::collections::BTreeSet::new();
    let ended = loop {
        let cfg = live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut followed = crate::databases::followed(&cfg, &url_db)?;
        if cfg.source.every_database() {
            // Every database: those the shadow showed too.
            let names = followed
                .iter()
                .map(|f| f.name.clone())
                .chain(streaming.iter().cloned());
            followed = crate::databases::followed_names(&cfg, &url_db, names.collect::<Vec<_>>())?;
        }
        match crate::database_streams::stream_until_changed(
            &ground,
            &followed,
            &streaming,
            &absent,
            stop.clone(),
        )
        .await
        {
            Ok(crate::database_streams::Ended::Changed { why, now }) => {
                tracing::info!("{why}: the streams start again");
                absent = followed
                    .iter()
                    .filter(|f| !now.contains(&f.name))
                    .map(|f| f.name.clone())
                    .collect();
                streaming = now;
                streaming.insert(url_db.clone());
            }
            Ok(crate::database_streams::Ended::Stopped) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    drop(ground);
    stop_shadow(shadow).await;
    ended
}

/// A database's progress, refused when it belongs to another source.
pub(crate) fn read_progress(
    view: &Config,
    init: &walshadow_shadow::bootstrap::InitState,
) -> Result<Option<Progress>, DaemonError> {
    match Progress::read(&view.state.dir)? {
        Some(p) if p.system_id != init.system_id => Err(DaemonError::OtherSource {
            path: view.state.dir.join(Progress::FILE),
            found: p.system_id,
            expected: init.system_id,
        }),
        p => Ok(p),
    }
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
    /// `[source] url`'s database.
    url_db: String,
    /// The config the streams run with (see `run`).
    live: Arc<std::sync::Mutex<Config>>,
    /// Each database's stream, the url's first; none without
    /// `[clickhouse]`.
    streams: Streams,
}

/// The running streams, as the control socket reaches them.
pub(crate) type Streams = Arc<std::sync::Mutex<Vec<DatabaseStream>>>;

/// One database's stream, as the control socket reaches it.
#[derive(Clone)]
pub(crate) struct DatabaseStream {
    pub(crate) name: String,
    pub(crate) requests: mpsc::Sender<StreamRequest>,
}

/// `live` with what a reload of `new` applied to the streams: ClickHouse's
/// endpoint, credentials, batch and flush settings, and the `[table]`
/// sections (pins and patterns, every database's). A section that changed
/// on a table already streamed, which waits for a restart, also applies
/// when the streams start again.
fn live_after_reload(live: &Config, new: &Config) -> Config {
    let mut next = live.clone();
    if let (Some(l), Some(n)) = (next.clickhouse.as_mut(), &new.clickhouse) {
        *l = l.with_live_from(n);
    }
    next.tables = new.tables.clone();
    next.patterns = new.patterns.clone();
    for db in &live.source.databases {
        let tables = new
            .databases
            .get(db)
            .map(|d| d.tables.clone())
            .unwrap_or_default();
        next.databases.entry(db.clone()).or_default().tables = tables;
    }
    next
}

/// The streams running now.
fn running(streams: &Streams) -> Vec<DatabaseStream> {
    streams
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
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
            Command::Status => match self.ask_all(StreamRequest::Status).await {
                Ok(mut all) if all.len() == 1 => Reply {
                    status: all.pop().map(|(_, s)| s),
                    ..Reply::ok("streaming status")
                },
                Ok(all) => Reply {
                    status: Some(serde_json::json!({
                        "databases": all.into_iter().collect::<serde_json::Map<_, _>>()
                    })),
                    ..Reply::ok("streaming status, per database")
                },
                Err(r) => r,
            },
            Command::Pause => self.ask_each(StreamRequest::Pause).await,
            Command::Resume => self.ask_each(StreamRequest::Resume).await,
        };
        responder.send(&reply).await;
    }

    /// A request to every database's stream, and their replies as one:
    /// refused if any refused.
    async fn ask_each(
        &self,
        req: impl Fn(tokio::sync::oneshot::Sender<Reply>) -> StreamRequest,
    ) -> Reply {
        match self.ask_all(req).await {
            Err(r) => r,
            Ok(mut all) if all.len() == 1 => all.pop().map_or_else(|| Reply::ok(""), |(_, r)| r),
            Ok(all) => {
                let ok = all.iter().all(|(_, r)| r.ok);
                let message = all
                    .iter()
                    .map(|(db, r)| format!("database {db:?}: {}", r.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                if ok {
                    Reply::ok(message)
                } else {
                    Reply::refused(message)
                }
            }
        }
    }

    /// A request to every database's stream, with each one's answer; a
    /// refusal when there is no stream to ask or one does not answer.
    async fn ask_all<T>(
        &self,
        req: impl Fn(tokio::sync::oneshot::Sender<T>) -> StreamRequest,
    ) -> Result<Vec<(String, T)>, Reply> {
        let streams = running(&self.streams);
        if streams.is_empty() {
            return Err(Reply::refused(if self.running.clickhouse.is_some() {
                "the streams are starting (at the start of `run`, or again after a database was \
                 created or dropped): ask again in a moment"
            } else {
                "this run has no [clickhouse] section: it keeps the shadow fed and streams no tables"
            }));
        }
        let mut answers = Vec::with_capacity(streams.len());
        for s in &streams {
            let answer = Self::ask(&s.requests, &req).await.map_err(|r| {
                if streams.len() > 1 {
                    Reply::refused(format!("database {:?}: {}", s.name, r.message))
                } else {
                    r
                }
            })?;
            answers.push((s.name.clone(), answer));
        }
        Ok(answers)
    }

    /// A request to one stream and its answer.
    async fn ask<T>(
        stream: &mpsc::Sender<StreamRequest>,
        req: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> StreamRequest,
    ) -> Result<T, Reply> {
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
        let streams = running(&self.streams);
        if streams.is_empty() {
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
        if !streams.is_empty() && new.clickhouse.is_some() {
            if new.source.databases != self.running.source.databases {
                needs_restart.push("[source] databases: changed".into());
            }
            let several = streams.len() > 1;
            let views = match crate::databases::followed(&new, &self.url_db) {
                Ok(v) => v,
                Err(e) => {
                    restore_level(self);
                    return Reply::refused(format!("{path}: {e}; nothing changed"));
                }
            };
            let mut settings = Vec::with_capacity(streams.len());
            for s in &streams {
                // A database the new file drops keeps its settings until
                // the restart the change needs.
                let Some(view) = views.iter().find(|v| v.name == s.name) else {
                    continue;
                };
                match StreamSettings::new(&view.view) {
                    Ok(st) => settings.push((s, st.sharing_memory(streams.len()))),
                    Err(e) => {
                        restore_level(self);
                        return Reply::refused(format!("{path}: {e}; nothing changed"));
                    }
                }
            }
            // Every database's settings were built before any is sent: a
            // file that does not validate for one changes none.
            for (s, st) in settings {
                let said = |text: String| {
                    if several {
                        format!("database {:?}: {text}", s.name)
                    } else {
                        text
                    }
                };
                match Self::ask(&s.requests, |tx| StreamRequest::Reload(Box::new(st), tx)).await {
                    Ok(Ok(r)) => {
                        applied.extend(r.applied.into_iter().map(said));
                        needs_restart.extend(r.needs_restart.into_iter().map(said));
                    }
                    Ok(Err(e)) => {
                        restore_level(self);
                        return Reply::refused(format!(
                            "{path}: [clickhouse] cannot be used ({e}); {}",
                            said("not applied".into())
                        ));
                    }
                    Err(r) => {
                        restore_level(self);
                        return Reply::refused(said(r.message));
                    }
                }
            }
        }
        if !streams.is_empty() {
            let mut live = self
                .live
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *live = live_after_reload(&live, &new);
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
