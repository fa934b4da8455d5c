//! The streaming-replication messages carried inside CopyData, as bytes in
//! and values out (no I/O). Layouts follow walsender.c (`XLogSendPhysical`,
//! `WalSndKeepalive`, `ProcessStandbyReplyMessage`) and the "Streaming
//! Replication Protocol" chapter of the PostgreSQL docs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use walshadow_types::Lsn;

use super::error::{ReplicationError, Result};

/// Seconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01 00:00 UTC
/// (`POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE` days).
const PG_EPOCH_UNIX_SECS: u64 = walshadow_pg_format::epoch::UNIX_SECS as u64;

/// `TimestampTz`: microseconds since 2000-01-01 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PgTimestamp(pub i64);

impl PgTimestamp {
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    pub fn from_system_time(t: SystemTime) -> Self {
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
        match t.duration_since(pg_epoch) {
            Ok(d) => PgTimestamp(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
            Err(e) => PgTimestamp(-i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX)),
        }
    }

    pub fn to_system_time(self) -> SystemTime {
        let pg_epoch = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS);
        let d = Duration::from_micros(self.0.unsigned_abs());
        if self.0 >= 0 {
            pg_epoch + d
        } else {
            pg_epoch - d
        }
    }
}

/// Messages the walsender sends inside CopyData.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerCopyMessage {
    /// `w`: XLogData.
    XLogData {
        start: Lsn,
        wal_end: Lsn,
        send_time: PgTimestamp,
        data: Bytes,
    },
    /// `k`: primary keepalive.
    Keepalive {
        wal_end: Lsn,
        send_time: PgTimestamp,
        reply_requested: bool,
    },
}

fn be_u64(b: &[u8], at: usize) -> Result<u64> {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| ReplicationError::protocol("truncated replication message"))
}

pub(crate) fn parse_server_copy(payload: Bytes) -> Result<ServerCopyMessage> {
    match payload.first() {
        Some(b'w') => {
            // 'w' start(8) walEnd(8) sendTime(8) data...
            let start = Lsn(be_u64(&payload, 1)?);
            let wal_end = Lsn(be_u64(&payload, 9)?);
            let send_time = PgTimestamp(be_u64(&payload, 17)? as i64);
            Ok(ServerCopyMessage::XLogData {
                start,
                wal_end,
                send_time,
                data: payload.slice(25..),
            })
        }
        Some(b'k') => {
            // 'k' walEnd(8) sendTime(8) replyRequested(1)
            if payload.len() != 18 {
                return Err(ReplicationError::protocol(format!(
                    "keepalive message of {} bytes, expected 18",
                    payload.len()
                )));
            }
            Ok(ServerCopyMessage::Keepalive {
                wal_end: Lsn(be_u64(&payload, 1)?),
                send_time: PgTimestamp(be_u64(&payload, 9)? as i64),
                reply_requested: payload.get(17).is_some_and(|&b| b != 0),
            })
        }
        Some(&other) => Err(ReplicationError::protocol(format!(
            "unknown replication message type {:?} in CopyData",
            char::from(other)
        ))),
        None => Err(ReplicationError::protocol(
            "empty CopyData in replication stream",
        )),
    }
}

/// `r`: standby status update (write, flush, apply, send time, reply flag).
pub(crate) fn standby_status_update(
    write: Lsn,
    flush: Lsn,
    apply: Lsn,
    now: PgTimestamp,
    reply_requested: bool,
) -> Bytes {
    let mut b = BytesMut::with_capacity(34);
    b.put_u8(b'r');
    b.put_u64(write.0);
    b.put_u64(flush.0);
    b.put_u64(apply.0);
    b.put_i64(now.0);
    b.put_u8(u8::from(reply_requested));
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xlogdata_and_keepalive() {
        let mut b = BytesMut::new();
        b.put_u8(b'w');
        b.put_u64(0x1_0000_0010);
        b.put_u64(0x1_0000_0020);
        b.put_i64(42);
        b.put_slice(b"abc");
        let m = parse_server_copy(b.freeze()).unwrap();
        assert_eq!(
            m,
            ServerCopyMessage::XLogData {
                start: Lsn(0x1_0000_0010),
                wal_end: Lsn(0x1_0000_0020),
                send_time: PgTimestamp(42),
                data: Bytes::from_static(b"abc"),
            }
        );
        let mut b = BytesMut::new();
        b.put_u8(b'k');
        b.put_u64(7);
        b.put_i64(-1);
        b.put_u8(1);
        assert_eq!(
            parse_server_copy(b.freeze()).unwrap(),
            ServerCopyMessage::Keepalive {
                wal_end: Lsn(7),
                send_time: PgTimestamp(-1),
                reply_requested: true
            }
        );
    }

    #[test]
    fn truncated_or_unknown_is_an_error_not_a_panic() {
        for raw in [
            &b""[..],
            b"w",
            b"w12345678",
            b"k1234567812345678",
            b"k12345678123456781x",
            b"?",
        ] {
            assert!(
                parse_server_copy(Bytes::copy_from_slice(raw)).is_err(),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn status_update_layout() {
        let b = standby_status_update(Lsn(1), Lsn(2), Lsn(3), PgTimestamp(4), true);
        assert_eq!(b.len(), 34);
        assert_eq!(b[0], b'r');
        assert_eq!(&b[1..9], &1u64.to_be_bytes());
        assert_eq!(&b[17..25], &3u64.to_be_bytes());
        assert_eq!(b[33], 1);
    }

    #[test]
    fn pg_epoch() {
        let t = UNIX_EPOCH + Duration::from_secs(PG_EPOCH_UNIX_SECS + 1);
        assert_eq!(PgTimestamp::from_system_time(t), PgTimestamp(1_000_000));
        assert_eq!(PgTimestamp(1_000_000).to_system_time(), t);
    }
}
