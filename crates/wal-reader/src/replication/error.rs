//! Errors of the replication client, split into transient (reconnect and
//! retry) and definite (fix the configuration or the server first).

use std::fmt;
use std::io;
use std::time::Duration;

/// An `ErrorResponse` from the server, with the fields walshadow reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DbError {
    pub severity: String,
    /// SQLSTATE, e.g. `42704`.
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl fmt::Display for DbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.severity, self.code, self.message)?;
        if let Some(d) = &self.detail {
            write!(f, " (detail: {d})")?;
        }
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl DbError {
    /// SQLSTATE classes and codes after which reconnecting can succeed.
    fn is_transient(&self) -> bool {
        self.code.starts_with("08") // connection_exception
            || self.code.starts_with("53") // insufficient_resources (too_many_connections, ...)
            || matches!(
                self.code.as_str(),
                "57P01" | "57P02" | "57P03" // admin_shutdown, crash_shutdown, cannot_connect_now
                    | "57014" // query_canceled
                    | "55006" // object_in_use: slot still held by a dying walsender
                    | "40001" | "40P01"
            )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    // ---- transient ----
    #[error("could not connect to {target}: {source}")]
    Connect { target: String, source: io::Error },
    #[error("connecting to {target} did not finish within {timeout:?} (connect_timeout)")]
    ConnectTimeout { target: String, timeout: Duration },
    #[error("connection lost: {0}")]
    Io(#[from] io::Error),
    #[error("the server closed the connection{context}")]
    ConnectionClosed { context: String },
    #[error("{command} did not finish within {timeout:?}; {remedy}")]
    CommandTimeout {
        command: String,
        timeout: Duration,
        remedy: String,
    },
    #[error(
        "{command} sent nothing for {idle:?} while {phase}; the connection or the server stalled: retry, or raise the timeout if the server is just slow"
    )]
    Stalled {
        command: String,
        idle: Duration,
        phase: String,
    },
    #[error(
        "replication slot {slot:?} is in use by another connection: {error}; stop the other consumer (see pg_replication_slots.active_pid) or wait for it to time out"
    )]
    SlotActive { slot: String, error: Box<DbError> },

    // ---- definite ----
    #[error("bad connection configuration: {0}")]
    Config(String),
    #[error("authentication as {user:?} failed: {reason}")]
    Auth { user: String, reason: String },
    #[error("TLS: {0}")]
    Tls(String),
    #[error(
        "replication slot {slot:?} does not exist: {error}; create it first (CREATE_REPLICATION_SLOT {slot} PHYSICAL RESERVE_WAL)"
    )]
    SlotMissing { slot: String, error: Box<DbError> },
    #[error(
        "replication slot {slot:?} already exists: {error}; reuse it, or drop it first if it belongs to nothing"
    )]
    SlotExists { slot: String, error: Box<DbError> },
    #[error("{command} failed: {error}")]
    Server {
        command: String,
        error: Box<DbError>,
    },
    #[error("the base backup's sink failed on archive {archive}{}: {source}", path.as_deref().map(|p| format!(", file {p}")).unwrap_or_default())]
    Sink {
        archive: String,
        path: Option<String>,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("the connection is unusable after an earlier failure ({0}); reconnect")]
    Poisoned(String),
}

impl ReplicationError {
    /// True when reconnecting (and retrying) may succeed without anyone
    /// changing the configuration or the server.
    pub fn is_transient(&self) -> bool {
        match self {
            ReplicationError::Connect { .. }
            | ReplicationError::ConnectTimeout { .. }
            | ReplicationError::Io(_)
            | ReplicationError::ConnectionClosed { .. }
            | ReplicationError::CommandTimeout { .. }
            | ReplicationError::Stalled { .. }
            | ReplicationError::SlotActive { .. }
            | ReplicationError::Poisoned(_) => true,
            ReplicationError::Server { error, .. } => error.is_transient(),
            ReplicationError::Config(_)
            | ReplicationError::Auth { .. }
            | ReplicationError::Tls(_)
            | ReplicationError::SlotMissing { .. }
            | ReplicationError::SlotExists { .. }
            | ReplicationError::Sink { .. }
            | ReplicationError::Protocol(_) => false,
        }
    }

    /// The server's error, when there is one.
    pub fn db_error(&self) -> Option<&DbError> {
        match self {
            ReplicationError::Server { error, .. }
            | ReplicationError::SlotMissing { error, .. }
            | ReplicationError::SlotExists { error, .. }
            | ReplicationError::SlotActive { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }

    /// The source no longer has the WAL asked for: its walsender's
    /// "requested WAL segment … has already been removed", `58P01` from
    /// `WalSndSegmentOpen` when the segment file is gone, or under the
    /// `errno` `CheckXLogRemoved` happened to save (often none: `XX000`)
    /// when it was removed while being read.
    pub fn is_wal_removed(&self) -> bool {
        self.db_error()
            .is_some_and(|e| e.code == "58P01" || e.message.contains("has already been removed"))
    }

    /// The slot lost its WAL reservation (`max_slot_wal_keep_size`): the
    /// server refuses it (`55000`, "can no longer …" with the invalidation
    /// in the detail) and it must be created again.
    pub fn is_slot_invalidated(&self) -> bool {
        self.db_error().is_some_and(|e| {
            e.code == "55000"
                && (e.message.contains("invalidated")
                    || e.detail
                        .as_deref()
                        .is_some_and(|d| d.contains("invalidated")))
        })
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Self {
        ReplicationError::Protocol(what.into())
    }
}

pub type Result<T, E = ReplicationError> = std::result::Result<T, E>;
