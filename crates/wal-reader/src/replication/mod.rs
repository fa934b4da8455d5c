//! Physical replication client: a walsender connection (`replication=true`)
//! that runs replication commands and streams WAL.
//!
//! ```text
//!  ConnConfig::from_url ──▶ ReplicationClient::connect   (TCP/unix, TLS per sslmode,
//!                              │                          trust/password/md5/SCRAM)
//!                              │ identify_system, show, create/drop/read slot,
//!                              │ timeline_history         (each bounded by a timeout)
//!                              ▼
//!                           start_replication ──▶ WalStream::next ──▶ XLogData | Keepalive | EndOfTimeline
//!                              │                      ▲ set_positions(write, flush, apply) → 'r' updates
//!                              ▼
//!                           WalFollower::next ──▶ Wal{timeline, start, bytes} | TimelineSwitch | ServerWalEnd
//!
//!                           base_backup(opts, sink) ──▶ BackupSink: archives parsed into files
//!                                                       (UstarReader), Keep or Skip per file
//!
//!  (physical: false, an SQL session) simple_query, copy_out(sql) ──▶ CopyOut::next ──▶ CopyData payloads
//! ```
//!
//! Bytes come out exactly as the server sent them, contiguous and tagged with
//! their start LSN, for `walshadow_wal_decode`. Nothing from the network is
//! trusted: malformed or truncated messages are `Protocol` errors, never
//! panics. Errors say whether reconnecting can help
//! ([`ReplicationError::is_transient`]).

mod backup_tee;
mod base_backup;
mod client;
mod config;
mod conn;
mod copy_out;
mod error;
mod follower;
mod messages;
mod pgpass;
mod stream;
mod timeline;
mod tls;
mod ustar;

pub use backup_tee::BackupTee;
pub use base_backup::{
    ArchiveInfo, BackupResult, BackupSink, BaseBackupOptions, Checkpoint, FileAction,
    MAX_RATE_RANGE, SinkError, TablespaceInfo,
};
pub use client::{QueryResult, ReplicationClient, SlotInfo, SystemIdentity};
pub use config::{AuthMethod, ChannelBindingMode, ConnConfig, Host, RequireAuth, SslMode};
pub use copy_out::CopyOut;
pub use error::{DbError, ReplicationError, Result};
pub use follower::{FollowEvent, WalFollower};
pub use messages::PgTimestamp;
pub use stream::{StandbyPositions, WalEvent, WalStream};
pub use timeline::{TimelineHistory, TimelineHistoryEntry, parse_timeline_history};
pub use ustar::{EntryKind, TarEntry, TarError, TarEvent, UstarReader};

/// Parses one CopyData payload of the replication stream, discarding the
/// message: an entry point for the fuzz targets, not part of the API.
#[doc(hidden)]
pub fn fuzz_parse_server_copy(payload: bytes::Bytes) -> Result<()> {
    messages::parse_server_copy(payload).map(drop)
}
