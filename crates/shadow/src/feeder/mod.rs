//! The feeder: the walsender side of PostgreSQL's streaming replication protocol,
//! serving the shadow standby from a [`SegmentStore`] over a private unix socket.
//!
//! ```text
//!  SegmentStore ──durable end (watch)──▶ Feeder ══ <socket_dir>/.s.PGSQL.<port> ══▶ shadow PG walreceiver
//!     read_at(tli, lsn) ◀──────────────── │  startup, IDENTIFY_SYSTEM, TIMELINE_HISTORY,
//!                                         │  START_REPLICATION → CopyBoth: 'w' / 'k'  ──▶
//!                                         │                       ◀── 'r' write/flush/apply, 'h'
//!  walshadow ◀── watch<StandbyPositions> ─┘  wait_for_replay(lsn, timeout)
//! ```
//!
//! What the standby needs from us, and where PostgreSQL says so:
//!
//! - The startup reply (`AuthenticationOk`, `ParameterStatus`, `BackendKeyData`,
//!   `ReadyForQuery`); libpq's `PQserverVersion` reads `server_version`, which
//!   libpqwalreceiver.c's `libpqrcv_server_version` hands to walreceiver.c.
//! - `IDENTIFY_SYSTEM`: `systemid` must equal the standby's pg_control (walreceiver.c
//!   `WalReceiverMain`), `timeline` must be ≥ the standby's recovery timeline.
//! - `TIMELINE_HISTORY n` for each missing timeline history (`WalRcvFetchTimeLineHistoryFiles`).
//! - `START_REPLICATION ... X/X TIMELINE t`: the start is a segment start
//!   (walreceiverfuncs.c `RequestXLogStreaming`), so the store serves whole segments
//!   byte-identically. Answered with CopyBothResponse, then CopyData `w` messages of at
//!   most 128 KiB (walsender.c `MAX_SEND_SIZE`) and `k` keepalives.
//! - The standby replies `r` after each write/flush and *immediately* on a `k` with the
//!   reply flag (walreceiver.c `XLogWalRcvProcessMsg`); its `apply` is the replay
//!   position. Replay happens in the startup process after the flush, so the feeder keeps
//!   asking (`k` with reply requested, backing off from 1 ms to 32 ms) while `apply` is
//!   behind what it sent, and once a status interval when idle.
//! - End of an old timeline: CopyDone, wait for the standby's CopyDone, then a
//!   `(next_tli int8, next_tli_startpos text)` row, CommandComplete `START_STREAMING` and
//!   the duplicate CommandComplete `START_REPLICATION` that libpqwalreceiver.c
//!   `libpqrcv_endstreaming` expects (walsender.c `StartReplication`,
//!   `exec_replication_command`).
//!
//! The feeder never sends bytes past the store's durable end, and the `walEnd` it
//! advertises is never past what the store holds durably, so a crash of walshadow never
//! leaves the standby ahead of the store.
//!
//! A replay ceiling ([`Feeder::set_ceiling`]) holds the standby at a chosen LSN: the
//! streaming pipeline raises it commit by commit, so a catalog query on the shadow
//! answers exactly as of the commit being decoded, never as of a later one. One standby is served at a time; a second
//! connection gets a FATAL `too_many_connections`.
//!
//! Who is served: with [`FeederConfig::peer_uid`] only the shadow's server
//! user (by `SO_PEERCRED`, in a `0700` directory), and with
//! [`FeederConfig::password`] only after the password of this start, asked
//! before the one standby slot is taken, so no other local process can
//! take the shadow's place, read the catalog WAL, or report a forged
//! replay position.

mod command;
mod messages;
mod session;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::net::UnixListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use walshadow_types::Lsn;

use crate::segment_store::SegmentStore;

pub use command::{CommandSyntaxError, ReplCommand};
pub use messages::ProtocolError;

/// How the feeder presents itself and paces its keepalives.
#[derive(Clone)]
pub struct FeederConfig {
    /// Directory of the unix socket; the socket is `.s.PGSQL.<port>` inside. The
    /// directory's permissions guard access (the socket itself is mode 0777, as
    /// PostgreSQL's default `unix_socket_permissions`), so keep it private to the user
    /// the shadow runs as.
    pub socket_dir: PathBuf,
    pub port: u16,
    /// The source's system identifier (pg_control); the standby checks it.
    pub system_identifier: u64,
    /// The source's `server_version`, e.g. `15.8` or `18.1`.
    pub server_version: String,
    /// Keepalive with reply requested when idle (also keeps the standby's
    /// `wal_receiver_timeout` from firing).
    pub status_interval: Duration,
    /// Drop a standby that said nothing for this long (`wal_sender_timeout`).
    pub standby_timeout: Duration,
    /// The only uid that may connect (`SO_PEERCRED`): the shadow's server
    /// user. The socket is then `0600` and that user's. `None` admits
    /// anyone who can reach the socket (tests of the feeder alone).
    pub peer_uid: Option<u32>,
    /// The password a standby must give (cleartext, on this private
    /// socket) before it is served: a per-start secret in the shadow's
    /// `primary_conninfo`. `None`: none is asked.
    pub password: Option<String>,
}

impl std::fmt::Debug for FeederConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeederConfig")
            .field("socket_dir", &self.socket_dir)
            .field("port", &self.port)
            .field("system_identifier", &self.system_identifier)
            .field("server_version", &self.server_version)
            .field("peer_uid", &self.peer_uid)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl FeederConfig {
    pub fn new(
        socket_dir: impl Into<PathBuf>,
        port: u16,
        system_identifier: u64,
        server_version: impl Into<String>,
    ) -> Self {
        FeederConfig {
            socket_dir: socket_dir.into(),
            port,
            system_identifier,
            server_version: server_version.into(),
            status_interval: Duration::from_secs(1),
            standby_timeout: Duration::from_secs(60),
            peer_uid: None,
            password: None,
        }
    }

    /// `<socket_dir>/.s.PGSQL.<port>`.
    pub fn socket_path(&self) -> PathBuf {
        self.socket_dir.join(format!(".s.PGSQL.{}", self.port))
    }
}

/// The positions the standby last reported in an `r` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StandbyPositions {
    /// Received and written to its pg_wal.
    pub write: Lsn,
    /// Flushed to its pg_wal.
    pub flush: Lsn,
    /// Replayed (`GetXLogReplayRecPtr`).
    pub apply: Lsn,
    /// When the feeder received the report; `None` before the first.
    pub reported_at: Option<Instant>,
}

/// What the feeder is doing, for observability and tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeederStatus {
    /// A standby is connected (past startup).
    pub connected: bool,
    /// `application_name` of the connected standby.
    pub application_name: Option<String>,
    /// `(timeline, start)` of each `START_REPLICATION` served, oldest first (capped).
    pub streams: Vec<(u32, Lsn)>,
    /// End of the WAL sent on the current stream.
    pub sent: Lsn,
}

#[derive(Debug, thiserror::Error)]
pub enum FeederError {
    #[error("feeder: binding the unix socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("feeder: {path} exists and is not a socket; choose another socket directory or port")]
    NotASocket { path: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayWaitError {
    #[error(
        "the shadow standby did not replay up to {target} within {waited:?} (it reported apply {apply})"
    )]
    Timeout {
        target: Lsn,
        apply: Lsn,
        waited: Duration,
    },
    #[error("the feeder stopped before the shadow standby replayed up to {target}")]
    Stopped { target: Lsn },
}

/// State shared by the accept loop and the sessions.
#[derive(Debug)]
struct Shared {
    config: FeederConfig,
    store: Arc<SegmentStore>,
    positions: watch::Sender<StandbyPositions>,
    status: watch::Sender<FeederStatus>,
    busy: AtomicBool,
    shutdown: watch::Receiver<bool>,
    /// Nothing at or past this LSN is sent (`Lsn::MAX`: no ceiling).
    ceiling: watch::Sender<Lsn>,
    /// Each holder's ceiling, when several share it
    /// ([`Feeder::share_ceiling`]); the ceiling is their minimum.
    shares: std::sync::Mutex<Vec<Lsn>>,
}

/// A running feeder. Dropping it stops the accept loop and the session.
#[derive(Debug)]
pub struct Feeder {
    socket_path: PathBuf,
    positions: watch::Receiver<StandbyPositions>,
    status: watch::Receiver<FeederStatus>,
    shutdown: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The shared state, for the replay ceiling.
    ceiling: Arc<Shared>,
}

impl Feeder {
    /// Binds the socket and starts serving. Must run inside a tokio runtime.
    pub async fn start(
        config: FeederConfig,
        store: Arc<SegmentStore>,
    ) -> Result<Feeder, FeederError> {
        let path = config.socket_path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_socket() => {
                // A stale socket from an earlier run: ours, in our private directory.
                let _ = std::fs::remove_file(&path);
            }
            Ok(_) => return Err(FeederError::NotASocket { path }),
            Err(_) => {}
        }
        let bind_err = |source| FeederError::Bind {
            path: path.clone(),
            source,
        };
        let listener = UnixListener::bind(&path).map_err(bind_err)?;
        match config.peer_uid {
            // Bound under walshadow's umask (077): owner only already. No
            // chmod by path, which would follow a link the server user
            // (who owns the directory) swapped in; lchown does not.
            Some(uid) => std::os::unix::fs::lchown(&path, Some(uid), None).map_err(bind_err)?,
            None => std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
                .map_err(bind_err)?,
        }

        let (positions_tx, positions) = watch::channel(StandbyPositions::default());
        let (status_tx, status) = watch::channel(FeederStatus::default());
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            config,
            store,
            positions: positions_tx,
            status: status_tx,
            busy: AtomicBool::new(false),
            shutdown: shutdown_rx,
            ceiling: watch::channel(Lsn::MAX).0,
            shares: std::sync::Mutex::new(Vec::new()),
        });
        let ceiling = Arc::clone(&shared);
        let task = tokio::spawn(accept_loop(listener, shared, path.clone()));
        Ok(Feeder {
            socket_path: path,
            positions,
            status,
            shutdown,
            task: Some(task),
            ceiling,
        })
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The standby's reported positions; `changed()` wakes on each report.
    pub fn positions(&self) -> watch::Receiver<StandbyPositions> {
        self.positions.clone()
    }

    pub fn status(&self) -> watch::Receiver<FeederStatus> {
        self.status.clone()
    }

    /// Waits until the standby reports `apply >= lsn`; returns the reported apply.
    /// Event-driven: it wakes on the standby's reports, which the session solicits while
    /// the standby is behind what was sent.
    ///
    /// What the store holds up to `lsn` is made durable first, when it is written and
    /// not yet flushed: the intake flushes on its own slower cadence, and a catalog wait
    /// should not wait for it.
    pub async fn wait_for_replay(
        &self,
        lsn: Lsn,
        timeout: Duration,
    ) -> Result<Lsn, ReplayWaitError> {
        let store = &self.ceiling.store;
        if store.flushed_end() < lsn
            && store.written_end() > store.flushed_end()
            && let Err(e) = store.flush()
        {
            // The intake's own flush meets the same error and stops the run.
            tracing::warn!("flushing the WAL store for a replay wait: {e}");
        }
        let mut rx = self.positions.clone();
        let waited = tokio::time::timeout(timeout, async {
            rx.wait_for(|p| p.apply >= lsn).await.map(|p| p.apply)
        })
        .await;
        match waited {
            Ok(Ok(apply)) => Ok(apply),
            Ok(Err(_)) => Err(ReplayWaitError::Stopped { target: lsn }),
            Err(_) => Err(ReplayWaitError::Timeout {
                target: lsn,
                apply: rx.borrow().apply,
                waited: timeout,
            }),
        }
    }

    /// Holds the standby at `lsn`: it replays no record ending past `lsn`
    /// (only the byte at `lsn` is sent beyond it, so a record ending exactly
    /// there is replayed) until the ceiling rises. `Lsn::MAX` lifts it. Lowering it
    /// below what was already sent holds the standby where it is.
    pub fn set_ceiling(&self, lsn: Lsn) {
        self.ceiling.ceiling.send_if_modified(|c| {
            let changed = *c != lsn;
            *c = lsn;
            changed
        });
    }

    /// Raises the replay ceiling to `lsn`, never lowering it: the stream's
    /// one rule (the shadow may replay what the stream needs the catalog
    /// of, and everything ClickHouse holds; what it replayed stays).
    pub fn raise_ceiling(&self, lsn: Lsn) {
        self.ceiling.ceiling.send_if_modified(|c| {
            let raise = lsn > *c;
            if raise {
                *c = lsn;
            }
            raise
        });
    }

    /// Several holders share the ceiling from here: holder `i` starts at
    /// `initial[i]` and raises its own with [`Feeder::raise_ceiling_for`];
    /// the standby replays to their minimum (the catalog each reads must
    /// not run ahead of it). Set before any holder raises.
    pub fn share_ceiling(&self, initial: Vec<Lsn>) {
        let min = initial.iter().copied().min().unwrap_or(Lsn::MAX);
        *self.lock_shares() = initial;
        self.set_ceiling(min);
    }

    /// Raises holder `share`'s ceiling to `lsn` (never lowering it); the
    /// ceiling rises to the holders' minimum. Without shares, as
    /// [`Feeder::raise_ceiling`].
    pub fn raise_ceiling_for(&self, share: usize, lsn: Lsn) {
        let min = {
            let mut shares = self.lock_shares();
            if shares.is_empty() {
                Some(lsn)
            } else if let Some(own) = shares.get_mut(share) {
                *own = (*own).max(lsn);
                shares.iter().copied().min()
            } else {
                None
            }
        };
        if let Some(min) = min {
            self.raise_ceiling(min);
        }
    }

    fn lock_shares(&self) -> std::sync::MutexGuard<'_, Vec<Lsn>> {
        // A holder that panicked left a valid vector behind.
        self.ceiling
            .shares
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current replay ceiling (`Lsn::MAX`: none).
    pub fn ceiling(&self) -> Lsn {
        *self.ceiling.ceiling.borrow()
    }

    /// Stops accepting, ends the session, removes the socket file.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = std::fs::remove_file(&self.socket_path);
        }
    }
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>, path: PathBuf) {
    let mut sessions = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let shared = Arc::clone(&shared);
                    match admitted(&stream, shared.config.peer_uid) {
                        Ok(()) => {
                            sessions.spawn(session::run(stream, shared));
                        }
                        Err(refusal) => {
                            tracing::warn!("feeder: refused a connection: {refusal}");
                            sessions.spawn(session::refuse(stream, refusal));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "feeder: accept failed");
                    // Out of file descriptors and the like: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    sessions.shutdown().await;
    let _ = std::fs::remove_file(&path);
}

/// Whether the peer of `stream` may be served: its uid (`SO_PEERCRED`) is
/// `peer_uid`, when one is required.
fn admitted(stream: &tokio::net::UnixStream, peer_uid: Option<u32>) -> Result<(), String> {
    let Some(want) = peer_uid else {
        return Ok(());
    };
    match stream.peer_cred() {
        Ok(cred) if cred.uid() == want => Ok(()),
        Ok(cred) => Err(format!(
            "uid {} (pid {}) is not the shadow's server user (uid {want})",
            cred.uid(),
            cred.pid().map_or_else(|| "?".to_owned(), |p| p.to_string())
        )),
        Err(e) => Err(format!("its credentials cannot be read: {e}")),
    }
}

/// A fresh per-start password: 128 bits from the kernel, as hex.
pub fn new_password() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Resolves once shutdown is requested (or the feeder is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await.map(|_| ());
}
