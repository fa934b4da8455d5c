//! The streams of `run`, one per source database that exists, beside one
//! intake and one shadow (see [`crate::databases`] for the layout).
//!
//! ```text
//!  intake ─▶ fan-out ─┬─▶ stream "shop" ─┐  slot hold: the lowest restart
//!                     └─▶ stream "crm"  ─┤  shadow ceiling: the lowest share
//!  watcher: the shadow's pg_database ────┘  a database created or dropped → Changed
//! ```
//!
//! A database `[source] databases` names that the shadow does not show yet
//! is awaited: once the shadow has replayed its `CREATE DATABASE`, the
//! watcher ends this round ([`Ended::Changed`]) and the next one starts
//! with it, from where the others are. One dropped ends its stream the
//! same way; its state is set aside, so a database created again under the
//! name starts afresh.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use walshadow_config::Config;
use walshadow_intake::{TapEvent, WalTap};
use walshadow_shadow::bootstrap::InitState;
use walshadow_shadow::run::{Shadow, ShadowSettings};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::daemon::{DaemonError, DatabaseStream, Streams, read_progress};
use crate::databases::Followed;
use crate::progress::Progress;
use crate::stream::{StreamControl, StreamError, StreamSettings, StreamThread, Streamer};

/// Raw WAL chunks (≤ 128 KiB each) queued between the feed and each
/// stream: bounds the memory between them.
const TAP_QUEUE: usize = 64;

/// How long a stop request waits for the streams to flush what they hold.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Requests of `walshadow ctl` queued for each stream.
const REQUEST_QUEUE: usize = 16;

/// How often the watcher asks the shadow which databases exist.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Failed asks (one per [`WATCH_EVERY`]) before the watcher warns, and
/// again at each such count.
const WATCH_WARN_AFTER: u64 = 60;

/// What every round shares, for the whole `run`.
pub(crate) struct Ground<'a> {
    pub config: &'a Config,
    pub settings: &'a ShadowSettings,
    pub shadow: &'a Arc<Shadow>,
    pub init: &'a InitState,
    pub metrics: &'a crate::metrics::Metrics,
    pub source_end: Arc<std::sync::atomic::AtomicU64>,
    pub archive_turns: Arc<walshadow_intake::ArchiveTurns>,
    pub archive: Option<Arc<walshadow_backup_store::BackupStore>>,
    pub streams: &'a Streams,
    pub url_db: &'a str,
}

/// How a round ended.
pub(crate) enum Ended {
    /// `run` was asked to stop.
    Stopped,
    /// A followed database was created or dropped on the source: why,
    /// and the followed databases the shadow shows now.
    Changed { why: String, now: BTreeSet<String> },
}

/// The databases the first round streams: the url's and those that
/// streamed before (the shadow, not yet fed, cannot say which exist; the
/// watcher corrects the guess once it can).
pub(crate) fn first_guess(
    followed: &[Followed],
    init: &InitState,
) -> Result<BTreeSet<String>, DaemonError> {
    let mut guess = BTreeSet::new();
    for f in followed {
        if f.is_url_db || read_progress(&f.view, init)?.is_some() {
            guess.insert(f.name.clone());
        }
    }
    Ok(guess)
}

/// One round: the streams of the followed databases in `streaming`,
/// until a stop or until the shadow shows another set. `absent`: those
/// the shadow showed missing (a dropped one's state is set aside).
pub(crate) async fn stream_until_changed(
    g: &Ground<'_>,
    followed: &[Followed],
    streaming: &BTreeSet<String>,
    absent: &BTreeSet<String>,
    stop: watch::Receiver<bool>,
) -> Result<Ended, DaemonError> {
    let several_listed = !g.config.source.databases.is_empty();
    let mut running = Vec::new();
    for f in followed {
        if streaming.contains(&f.name) {
            running.push(f.clone());
        } else if absent.contains(&f.name) {
            set_aside_if_dropped(g, f)?;
        }
    }
    let n = running.len();
    let mut loops = Vec::with_capacity(n);
    for f in running {
        let settings = StreamSettings::new(&f.view)?.sharing_memory(n);
        let progress = read_progress(&f.view, g.init)?;
        loops.push((f, settings, progress));
    }
    // A database streamed for the first time starts where the others
    // are (the slot holds WAL from there, and its catalog session reads
    // the catalog of that point); without any, at `init`'s backup.
    let resumed = loops
        .iter()
        .filter_map(|(_, _, p)| p.as_ref())
        .map(|p| (p.applied, p.restart))
        .reduce(|a, b| (a.0.min(b.0), a.1.min(b.1)));
    let mut started = Vec::with_capacity(n);
    // The shadow may have replayed past the others' applied (a catalog
    // change they follow raised it first): a new database's rows before
    // the shadow's position would meet a later catalog, so it starts
    // there (its loads read what came before).
    let replayed = g.shadow.feeder.positions().borrow().apply;
    for (f, s, progress) in loops {
        let (progress, first_run) = match (progress, resumed) {
            (Some(p), _) => (p, false),
            (None, Some((applied, restart))) => {
                let applied = applied.max(replayed);
                tracing::info!(
                    database = %f.name,
                    %applied,
                    "a database new to this state directory: it streams from where the others are"
                );
                let mut p = Progress::new(g.init.system_id, applied);
                p.restart = restart;
                (p, true)
            }
            // Tables stream from the point the shadow becomes consistent:
            // transactions committed before it are not emitted.
            (None, None) => {
                let mut p = Progress::new(g.init.system_id, g.init.backup_end);
                p.restart = g.init.backup_start;
                (p, true)
            }
        };
        let horizon = if f.is_url_db {
            g.init.xid_horizon
        } else {
            database_horizon(g, &f, first_run).await?
        };
        let s = s.with_xid_horizon(horizon);
        tracing::info!(
            database = %f.name,
            clickhouse_database = %f.view.clickhouse.as_ref().map_or("", |c| c.database.as_str()),
            applied = %progress.applied,
            restart = %progress.restart,
            tables = f.view.tables.len(),
            "streaming to ClickHouse"
        );
        started.push((f, s, progress, first_run));
    }
    if several_listed {
        g.shadow
            .feeder
            .share_ceiling(started.iter().map(|(_, _, p, _)| p.applied).collect());
    }
    // This round's own stop: `run`'s, or the watcher's.
    let (round_stop, round_stopped) = watch::channel(false);
    let round_stop = Arc::new(round_stop);
    let forward = {
        let (round_stop, mut stop) = (Arc::clone(&round_stop), stop.clone());
        tokio::spawn(async move {
            if stop.wait_for(|s| *s).await.is_ok() {
                let _ = round_stop.send(true);
            }
        })
    };
    let _forward = AbortOnDrop(forward);
    // However the round ends, its streams are no longer reachable.
    let _registered = Unregister(g.streams);
    let mut holds = Vec::with_capacity(n);
    let mut taps = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    let names: BTreeSet<String> = started.iter().map(|(f, ..)| f.name.clone()).collect();
    for (share, (f, s, progress, first_run)) in started.into_iter().enumerate() {
        let (hold_tx, hold_rx) = watch::channel(progress.restart);
        holds.push(hold_rx);
        // Reachable before it is ready: a request (a reload with a new
        // password while it retries ClickHouse) waits in its queue.
        let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
        lock(g.streams).push(DatabaseStream {
            name: f.name.clone(),
            requests: req_tx,
        });
        let streamer = Streamer::new(
            s,
            Arc::clone(g.shadow),
            progress,
            hold_tx,
            if several_listed {
                g.metrics.database(&f.name)
            } else {
                g.metrics.clone()
            },
            first_run,
            StreamControl {
                stop: round_stopped.clone(),
                source_end: Arc::clone(&g.source_end),
                archive: Arc::clone(&g.archive_turns),
                requests: req_rx,
                ceiling_share: share,
            },
        )
        .await;
        let streamer = match streamer {
            Ok(s) => s,
            Err(e) => {
                for (_, mut t) in tasks {
                    StreamThread::stop(&mut t).await;
                }
                return match e {
                    StreamError::Stopping => Ok(Ended::Stopped),
                    e => Err(e.into()),
                };
            }
        };
        let (tx, rx) = mpsc::channel(TAP_QUEUE);
        taps.push(tx);
        match StreamThread::start(streamer, rx) {
            Ok(t) => tasks.push((f.name, t)),
            Err(e) => {
                for (_, mut t) in tasks {
                    t.stop().await;
                }
                return Err(e.into());
            }
        }
    }
    let several = taps.len() > 1;
    let (tap_tx, hold) = if several {
        let (tx, rx) = mpsc::channel(TAP_QUEUE);
        tokio::spawn(fan_out(rx, taps));
        (tx, lowest(holds))
    } else {
        match (taps.pop(), holds.pop()) {
            (Some(tx), Some(hold)) => (tx, hold),
            _ => return Ok(Ended::Stopped),
        }
    };
    // The databases this round follows against those the shadow shows.
    let changed: Change = Default::default();
    let watcher = several_listed.then(|| {
        AbortOnDrop(tokio::spawn(watch_databases(
            Arc::clone(g.shadow),
            g.config.clone(),
            g.url_db.to_owned(),
            (!g.config.source.every_database())
                .then(|| followed.iter().map(|f| f.name.clone()).collect()),
            names.clone(),
            Arc::clone(&changed),
            Arc::clone(&round_stop),
        )))
    });
    let tap = WalTap {
        tx: tap_tx,
        hold,
        source_end: Arc::clone(&g.source_end),
        archive: Arc::clone(&g.archive_turns),
    };
    let fed = walshadow_intake::feed_tapped_until_stopped(
        g.settings,
        g.shadow,
        Some(tap),
        g.archive.clone(),
        round_stopped.clone(),
    )
    .await;
    // The tap is closed: the streams flush and record their progress —
    // within STOP_GRACE of a stop request. Past it, a stream is dropped
    // where it waits (a ClickHouse request that does not answer): what it
    // held is not recorded and is replayed at the next start, exactly as
    // after `kill -9`.
    let stopping = *round_stopped.borrow();
    // An intake that failed ends the round the same way: a paused stream,
    // which does not read the tap, would not see it close. So does one
    // database's stream ending: the others may be paused.
    let graced = stopping || fed.is_err() || several;
    let _ = round_stop.send(true);
    let deadline = tokio::time::Instant::now() + STOP_GRACE;
    // Its shadow handle goes with it: `run` stops the shadow it owns.
    if let Some(mut w) = watcher {
        w.0.abort();
        let _ = (&mut w.0).await;
    }
    let mut streamed = Ok(());
    for (name, mut task) in tasks {
        let joined = if graced {
            match tokio::time::timeout_at(deadline, task.join()).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(
                        database = %name,
                        "ClickHouse did not take the last rows within {STOP_GRACE:?} of the stop \
                         (or the WAL intake's end); stopping without them (they are streamed again \
                         at the next start)"
                    );
                    task.stop().await;
                    Ok(())
                }
            }
        } else {
            task.join().await
        };
        match joined {
            Ok(()) | Err(StreamError::Stopping) => {}
            Err(e) => {
                // A dropped database cuts its stream's catalog session
                // before the watcher sees it gone: the next round leaves
                // it out, the others go on.
                if several_listed && let Some(now) = without(g, followed, &name).await {
                    tracing::warn!(
                        database = %name,
                        "the database's stream ended as the database was dropped: {e}"
                    );
                    let mut c = lock(&changed);
                    c.get_or_insert_with(|| (format!("database {name:?} dropped"), now));
                    continue;
                }
                if several {
                    tracing::error!(database = %name, "the stream of this database stopped: {e}");
                }
                if streamed.is_ok() {
                    streamed = Err(e);
                }
            }
        }
    }
    let changed = lock(&changed).take();
    // The streams' own error explains a feed that stopped because of it.
    streamed?;
    fed?;
    match changed {
        Some((why, now)) if !*stop.borrow() => Ok(Ended::Changed { why, now }),
        _ => Ok(Ended::Stopped),
    }
}

/// Why a round ends early (the first reason found), with the followed
/// databases the shadow shows then.
type Change = Arc<std::sync::Mutex<Option<(String, BTreeSet<String>)>>>;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The xid horizon of a database's loads (not the url's): taken at its
/// first start, with its directory and its config table (`init` made it
/// when the database was listed then; one listed or created later gets
/// it here), and kept in its `start.json`.
async fn database_horizon(
    g: &Ground<'_>,
    f: &Followed,
    first_run: bool,
) -> Result<Option<u64>, DaemonError> {
    use walshadow_state_file::StateFile;
    let dir = &f.view.state.dir;
    let state_error = |e: String| StreamError::State(format!("{}: {e}", dir.display()));
    if !first_run {
        let start =
            crate::databases::DatabaseStart::read(dir).map_err(|e| state_error(e.to_string()))?;
        return Ok(start.and_then(|s| s.xid_horizon));
    }
    std::fs::create_dir_all(dir).map_err(|e| state_error(e.to_string()))?;
    let xid_horizon = walshadow_shadow::bootstrap::source::next_xid8(&g.config.source.url)
        .await
        .map_err(|e| StreamError::State(format!("database {:?}: its xid horizon: {e}", f.name)))?;
    crate::databases::DatabaseStart {
        format_version: 1,
        database: f.name.clone(),
        xid_horizon,
    }
    .write(dir)
    .map_err(|e| state_error(e.to_string()))?;
    let table = &f.view.source.config_table;
    if let Err(e) = walshadow_shadow::bootstrap::source::ensure_config_table(
        &g.config.source.url,
        Some(&f.name),
        table,
    )
    .await
    {
        tracing::warn!(database = %f.name, %table, "the config table is not ready, so its rows opt nothing in: {e:?}");
    }
    Ok(xid_horizon)
}

/// A followed database the shadow does not show: awaited if it never
/// streamed; set aside if it did (it was dropped), so one created again
/// under the name starts afresh instead of resuming from WAL the slot no
/// longer holds.
fn set_aside_if_dropped(g: &Ground<'_>, f: &Followed) -> Result<(), DaemonError> {
    if f.is_url_db || read_progress(&f.view, g.init)?.is_none() {
        return Ok(());
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = crate::databases::dropped_dir(&g.config.state.dir, &f.name, now);
    let moved = aside
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| std::fs::rename(&f.view.state.dir, &aside));
    if let Err(e) = moved {
        return Err(StreamError::State(format!(
            "database {:?} was dropped; setting its state {} aside as {}: {e}",
            f.name,
            f.view.state.dir.display(),
            aside.display()
        ))
        .into());
    }
    g.metrics.forget_database(&f.name);
    tracing::warn!(
        database = %f.name,
        state = %aside.display(),
        "the database was dropped: its stream ends (its ClickHouse tables stay); its state is set \
         aside, and a database created again under the name streams afresh"
    );
    Ok(())
}

/// The databases of the cluster as the shadow shows them now.
async fn present_databases(
    shadow: &Shadow,
    config: &Config,
    url_db: &str,
) -> Result<BTreeSet<String>, DaemonError> {
    let user = ConnConfig::from_url(&config.source.url)
        .map_err(|e| StreamError::State(e.to_string()))?
        .user;
    let mut cfg = ConnConfig::unix_socket(&shadow.socket_dir, shadow.port, &user, url_db);
    cfg.application_name = Some("walshadow databases".into());
    let listed = async {
        let mut c = ReplicationClient::connect(&cfg).await?;
        let r = c
            // -2: a database being dropped (its files are gone, its row
            // not yet).
            .simple_query(
                "select datname from pg_catalog.pg_database \
                 where datallowconn and not datistemplate and datconnlimit <> -2",
            )
            .await;
        c.close().await;
        r
    };
    let rows = tokio::time::timeout(Duration::from_secs(60), listed)
        .await
        .map_err(|_| {
            StreamError::State("the shadow did not list its databases within 60 s".into())
        })?
        .map_err(|e| StreamError::State(format!("listing the shadow's databases: {e}")))?;
    Ok((0..rows.rows.len())
        .filter_map(|i| rows.text(i, 0).map(str::to_owned))
        .collect())
}

/// The followed databases the shadow shows, when it no longer shows
/// `name` (`None` when it does, or cannot say: an error then ends `run`
/// as it would have).
async fn without(g: &Ground<'_>, followed: &[Followed], name: &str) -> Option<BTreeSet<String>> {
    let present = present_databases(g.shadow, g.config, g.url_db).await.ok()?;
    let listed: Option<Vec<String>> = (!g.config.source.every_database())
        .then(|| followed.iter().map(|f| f.name.clone()).collect());
    (!present.contains(name)).then(|| followed_present(listed.as_deref(), &present))
}

/// The followed databases among `present`: those `listed`, or all
/// (`None`: `databases = ["*"]`).
fn followed_present(listed: Option<&[String]>, present: &BTreeSet<String>) -> BTreeSet<String> {
    match listed {
        None => present.clone(),
        Some(l) => l.iter().filter(|d| present.contains(*d)).cloned().collect(),
    }
}

/// Asks the shadow which databases exist until the followed ones that do
/// differ from `running`; then says why and stops the round.
async fn watch_databases(
    shadow: Arc<Shadow>,
    config: Config,
    url_db: String,
    listed: Option<Vec<String>>,
    running: BTreeSet<String>,
    changed: Change,
    stop: Arc<watch::Sender<bool>>,
) {
    let mut first = true;
    let mut failing = 0u64;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        // Until the shadow is consistent (fed by this round's intake), it
        // takes no session: asked again. Past a minute that is no longer
        // the start, and the operator hears it (once a minute): no
        // database is taken or let go meanwhile.
        let present = match present_databases(&shadow, &config, &url_db).await {
            Ok(p) => {
                if failing >= WATCH_WARN_AFTER {
                    tracing::info!("the shadow lists its databases again");
                }
                failing = 0;
                p
            }
            Err(e) => {
                failing += 1;
                if failing.is_multiple_of(WATCH_WARN_AFTER) {
                    tracing::warn!(
                        "the shadow has not listed its databases in {failing} tries, a second apart ({e}): a \
                         database created or dropped on the source is not followed until it \
                         does; see `walshadow status` (shadow replay) and the shadow's log"
                    );
                } else {
                    tracing::debug!("watching the shadow's databases: {e}");
                }
                continue;
            }
        };
        let now = followed_present(listed.as_deref(), &present);
        if std::mem::take(&mut first) {
            let listed = listed.iter().flatten();
            for awaited in listed.filter(|d| !present.contains(*d)) {
                tracing::info!(
                    database = %awaited,
                    "[source] databases names a database the source does not have (yet): it \
                     streams once the shadow has replayed its CREATE DATABASE"
                );
            }
        }
        if now != running {
            let created: Vec<_> = now.difference(&running).collect();
            let dropped: Vec<_> = running.difference(&now).collect();
            let why = match (created.is_empty(), dropped.is_empty()) {
                (false, true) => format!("database {created:?} created"),
                (true, false) => format!("database {dropped:?} dropped"),
                _ => format!("databases {created:?} created and {dropped:?} dropped"),
            };
            lock(&changed).get_or_insert((why, now));
            let _ = stop.send(true);
            return;
        }
    }
}

/// Each chunk of the intake to every database's stream (a clone of the
/// bytes, no copy). One stream that takes nothing holds them all, as one
/// stream does alone: the intake lets go of the source after `TAP_STALL`.
/// Ends when the intake or any stream does.
async fn fan_out(mut rx: mpsc::Receiver<TapEvent>, txs: Vec<mpsc::Sender<TapEvent>>) {
    while let Some(event) = rx.recv().await {
        for tx in &txs {
            if tx.send(event.clone()).await.is_err() {
                return;
            }
        }
    }
}

/// The lowest of `holds`, kept current: the slot keeps what the
/// furthest-behind database's stream restarts from.
fn lowest(holds: Vec<watch::Receiver<Lsn>>) -> watch::Receiver<Lsn> {
    let min = |hs: &[watch::Receiver<Lsn>]| hs.iter().map(|h| *h.borrow()).min();
    let (tx, rx) = watch::channel(min(&holds).unwrap_or_default());
    let tx = Arc::new(tx);
    for mut h in holds.clone() {
        let (tx, all) = (Arc::clone(&tx), holds.clone());
        tokio::spawn(async move {
            while h.changed().await.is_ok() {
                if let Some(m) = min(&all) {
                    tx.send_if_modified(|v| {
                        let moved = *v != m;
                        *v = m;
                        moved
                    });
                }
            }
        });
    }
    rx
}

/// Empties the streams the control socket reaches when the round ends.
struct Unregister<'a>(&'a Streams);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        lock(self.0).clear();
    }
}

/// Ends a task with the round.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
