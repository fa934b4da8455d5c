//! Wire messages of the feeder: backend messages written here, frontend messages parsed
//! with checked reads.
//!
//! `postgres-protocol` only has *frontend* writers (it serves clients such as
//! tokio-postgres) and backend *parsers*; the feeder is a server, so it writes the
//! backend messages itself and parses the frontend ones. Layouts follow
//! protocol-message-formats in the PostgreSQL docs and `pq_send*` calls in walsender.c.
//! Nothing here panics on bytes from the socket: every read is checked, and leftover
//! bytes are an error.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use bytes::{BufMut, BytesMut};
use walshadow_types::Lsn;

/// Type OIDs used in row descriptions (`pg_type.dat`).
pub use walshadow_pg_format::type_oid::{BYTEA as BYTEAOID, INT8 as INT8OID, TEXT as TEXTOID};

/// Special startup-packet protocol codes (`pqcomm.h`).
pub const CANCEL_REQUEST_CODE: u32 = (1234 << 16) | 5678;
pub const NEGOTIATE_SSL_CODE: u32 = (1234 << 16) | 5679;
pub const NEGOTIATE_GSS_CODE: u32 = (1234 << 16) | 5680;

/// Largest frontend message the feeder accepts (queries and standby replies are small).
pub const MAX_FRONTEND_MESSAGE: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("{what}: message truncated at byte {at}")]
    Truncated { what: &'static str, at: usize },
    #[error("{what}: {extra} unexpected bytes after the last field")]
    Leftover { what: &'static str, extra: usize },
    #[error("{what}: invalid message length {len}")]
    BadLength { what: &'static str, len: i64 },
    #[error("{what}: string is not UTF-8")]
    NotUtf8 { what: &'static str },
    #[error("unexpected standby message type {0:#04x} inside CopyData")]
    UnknownStandbyMessage(u8),
}

/// A checked reader over one message body (big-endian, as the protocol
/// is), naming the message in its errors.
#[derive(Debug)]
pub struct Cursor<'a> {
    what: &'static str,
    inner: walshadow_pg_format::cursor::Cursor<'a>,
}

impl<'a> Cursor<'a> {
    pub fn new(what: &'static str, buf: &'a [u8]) -> Self {
        Cursor {
            what,
            inner: walshadow_pg_format::cursor::Cursor::new(buf),
        }
    }

    fn truncated(&self) -> ProtocolError {
        ProtocolError::Truncated {
            what: self.what,
            at: self.inner.position(),
        }
    }

    pub fn u8(&mut self) -> Result<u8, ProtocolError> {
        self.inner.u8().map_err(|_| self.truncated())
    }

    pub fn u32(&mut self) -> Result<u32, ProtocolError> {
        self.inner.u32_be().map_err(|_| self.truncated())
    }

    pub fn i64(&mut self) -> Result<i64, ProtocolError> {
        self.inner.i64_be().map_err(|_| self.truncated())
    }

    pub fn u64(&mut self) -> Result<u64, ProtocolError> {
        self.inner.u64_be().map_err(|_| self.truncated())
    }

    /// A NUL-terminated string.
    pub fn cstr(&mut self) -> Result<&'a str, ProtocolError> {
        let s = self.inner.cstr().map_err(|_| ProtocolError::Truncated {
            what: self.what,
            at: self.inner.position() + self.inner.remaining(),
        })?;
        std::str::from_utf8(s).map_err(|_| ProtocolError::NotUtf8 { what: self.what })
    }

    pub fn finish(self) -> Result<(), ProtocolError> {
        let extra = self.inner.remaining();
        if extra == 0 {
            Ok(())
        } else {
            Err(ProtocolError::Leftover {
                what: self.what,
                extra,
            })
        }
    }
}

/// The startup packet after its length: protocol version, then `name\0value\0` pairs and a
/// final `\0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartupPacket {
    Startup {
        major: u16,
        minor: u16,
        params: Vec<(String, String)>,
    },
    SslRequest,
    GssEncRequest,
    CancelRequest,
}

pub fn parse_startup(body: &[u8]) -> Result<StartupPacket, ProtocolError> {
    let mut c = Cursor::new("startup packet", body);
    let code = c.u32()?;
    match code {
        NEGOTIATE_SSL_CODE => {
            c.finish()?;
            return Ok(StartupPacket::SslRequest);
        }
        NEGOTIATE_GSS_CODE => {
            c.finish()?;
            return Ok(StartupPacket::GssEncRequest);
        }
        CANCEL_REQUEST_CODE => return Ok(StartupPacket::CancelRequest),
        _ => {}
    }
    let mut params = Vec::new();
    loop {
        let name = c.cstr()?;
        if name.is_empty() {
            break;
        }
        let value = c.cstr()?;
        params.push((name.to_owned(), value.to_owned()));
    }
    c.finish()?;
    Ok(StartupPacket::Startup {
        major: (code >> 16) as u16,
        minor: (code & 0xFFFF) as u16,
        params,
    })
}

/// A frontend message after startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendMessage {
    Query(String),
    CopyData(Vec<u8>),
    CopyDone,
    CopyFail(String),
    Terminate,
    /// Anything else (extended protocol, Sync, ...), by tag.
    Other(u8),
}

pub fn parse_frontend(tag: u8, body: &[u8]) -> Result<FrontendMessage, ProtocolError> {
    Ok(match tag {
        b'Q' => {
            let mut c = Cursor::new("Query", body);
            let q = c.cstr()?.to_owned();
            c.finish()?;
            FrontendMessage::Query(q)
        }
        b'd' => FrontendMessage::CopyData(body.to_vec()),
        b'c' => {
            Cursor::new("CopyDone", body).finish()?;
            FrontendMessage::CopyDone
        }
        b'f' => {
            let mut c = Cursor::new("CopyFail", body);
            let m = c.cstr()?.to_owned();
            c.finish()?;
            FrontendMessage::CopyFail(m)
        }
        b'X' => FrontendMessage::Terminate,
        other => FrontendMessage::Other(other),
    })
}

/// What a standby sends inside CopyData (walreceiver.c `XLogWalRcvSendReply`,
/// `XLogWalRcvSendHSFeedback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandbyMessage {
    /// `r`: write, flush, apply (= replay) positions, send time, reply requested.
    Status {
        write: Lsn,
        flush: Lsn,
        apply: Lsn,
        time: i64,
        reply_requested: bool,
    },
    /// `h`: hot standby feedback.
    HotStandbyFeedback {
        time: i64,
        xmin: u32,
        xmin_epoch: u32,
        catalog_xmin: u32,
        catalog_xmin_epoch: u32,
    },
}

pub fn parse_standby_message(body: &[u8]) -> Result<StandbyMessage, ProtocolError> {
    let mut c = Cursor::new("standby message", body);
    let msg = match c.u8()? {
        b'r' => StandbyMessage::Status {
            write: Lsn(c.u64()?),
            flush: Lsn(c.u64()?),
            apply: Lsn(c.u64()?),
            time: c.i64()?,
            reply_requested: c.u8()? != 0,
        },
        b'h' => StandbyMessage::HotStandbyFeedback {
            time: c.i64()?,
            xmin: c.u32()?,
            xmin_epoch: c.u32()?,
            catalog_xmin: c.u32()?,
            catalog_xmin_epoch: c.u32()?,
        },
        other => return Err(ProtocolError::UnknownStandbyMessage(other)),
    };
    c.finish()?;
    Ok(msg)
}

/// Appends one backend message: tag, length (including itself), body.
fn message(out: &mut BytesMut, tag: u8, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(tag);
    let len_at = out.len();
    out.put_u32(0);
    body(out);
    let len = u32::try_from(out.len() - len_at).unwrap_or(u32::MAX);
    if let Some(slot) = out.get_mut(len_at..len_at + 4) {
        slot.copy_from_slice(&len.to_be_bytes());
    }
}

fn put_cstr(out: &mut BytesMut, s: &str) {
    // A NUL inside would end the string early on the client; drop it.
    out.extend(s.bytes().filter(|&b| b != 0));
    out.put_u8(0);
}

/// `AuthenticationCleartextPassword`.
pub fn authentication_cleartext_password(out: &mut BytesMut) {
    message(out, b'R', |b| b.put_u32(3));
}

/// A `PasswordMessage` body: the password, NUL-terminated.
pub fn parse_password(body: &[u8]) -> Result<String, ProtocolError> {
    let mut c = Cursor::new("PasswordMessage", body);
    let p = c.cstr()?.to_owned();
    c.finish()?;
    Ok(p)
}

pub fn authentication_ok(out: &mut BytesMut) {
    message(out, b'R', |b| b.put_u32(0));
}

pub fn parameter_status(out: &mut BytesMut, name: &str, value: &str) {
    message(out, b'S', |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    });
}

pub fn backend_key_data(out: &mut BytesMut, pid: u32, key: u32) {
    message(out, b'K', |b| {
        b.put_u32(pid);
        b.put_u32(key);
    });
}

/// `NegotiateProtocolVersion`: the newest minor we speak and the options we ignored.
pub fn negotiate_protocol_version(out: &mut BytesMut, minor: u32, unsupported: &[String]) {
    message(out, b'v', |b| {
        b.put_u32((3 << 16) | minor);
        b.put_u32(u32::try_from(unsupported.len()).unwrap_or(0));
        for o in unsupported {
            put_cstr(b, o);
        }
    });
}

pub fn ready_for_query(out: &mut BytesMut) {
    message(out, b'Z', |b| b.put_u8(b'I'));
}

/// A RowDescription of text-format columns `(name, type oid)`.
pub fn row_description(out: &mut BytesMut, columns: &[(&str, u32)]) {
    message(out, b'T', |b| {
        b.put_u16(u16::try_from(columns.len()).unwrap_or(0));
        for (name, oid) in columns {
            put_cstr(b, name);
            b.put_u32(0); // table oid
            b.put_u16(0); // attnum
            b.put_u32(*oid);
            b.put_i16(if *oid == INT8OID { 8 } else { -1 }); // typlen
            b.put_i32(-1); // typmod
            b.put_u16(0); // text format
        }
    });
}

pub fn data_row(out: &mut BytesMut, values: &[Option<&[u8]>]) {
    message(out, b'D', |b| {
        b.put_u16(u16::try_from(values.len()).unwrap_or(0));
        for v in values {
            match v {
                Some(v) => {
                    b.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
                    b.extend_from_slice(v);
                }
                None => b.put_i32(-1),
            }
        }
    });
}

pub fn command_complete(out: &mut BytesMut, tag: &str) {
    message(out, b'C', |b| put_cstr(b, tag));
}

pub fn empty_query_response(out: &mut BytesMut) {
    message(out, b'I', |_| {});
}

/// Severity of an ErrorResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
}

/// An ErrorResponse with severity (`S` and the untranslated `V`), SQLSTATE, message and
/// an optional detail.
pub fn error_response(
    out: &mut BytesMut,
    severity: Severity,
    sqlstate: &str,
    msg: &str,
    detail: Option<&str>,
) {
    let sev = match severity {
        Severity::Error => "ERROR",
        Severity::Fatal => "FATAL",
    };
    message(out, b'E', |b| {
        for (code, value) in [(b'S', sev), (b'V', sev), (b'C', sqlstate), (b'M', msg)] {
            b.put_u8(code);
            put_cstr(b, value);
        }
        if let Some(d) = detail {
            b.put_u8(b'D');
            put_cstr(b, d);
        }
        b.put_u8(0);
    });
}

/// CopyBothResponse with no columns, as `StartReplication` sends it.
pub fn copy_both_response(out: &mut BytesMut) {
    message(out, b'W', |b| {
        b.put_u8(0);
        b.put_u16(0);
    });
}

pub fn copy_done(out: &mut BytesMut) {
    message(out, b'c', |_| {});
}

/// CopyData(`w`): WAL bytes starting at `start`; `wal_end` is the end of WAL the
/// sender has (walsender's `SendRqstPtr`).
pub fn xlog_data(out: &mut BytesMut, start: Lsn, wal_end: Lsn, now: i64, data: &[u8]) {
    message(out, b'd', |b| {
        b.put_u8(b'w');
        b.put_u64(start.0);
        b.put_u64(wal_end.0);
        b.put_i64(now);
        b.extend_from_slice(data);
    });
}

/// CopyData(`k`): primary keepalive (`WalSndKeepalive`).
pub fn keepalive(out: &mut BytesMut, wal_end: Lsn, now: i64, reply_requested: bool) {
    message(out, b'd', |b| {
        b.put_u8(b'k');
        b.put_u64(wal_end.0);
        b.put_i64(now);
        b.put_u8(u8::from(reply_requested));
    });
}

/// Now as PostgreSQL's `TimestampTz`: microseconds since 2000-01-01 00:00 UTC.
pub fn pg_now() -> i64 {
    use walshadow_pg_format::epoch::UNIX_SECS as PG_EPOCH_UNIX_SECS;
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => {
            let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
            micros.saturating_sub(PG_EPOCH_UNIX_SECS * 1_000_000)
        }
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_packet_parses_and_rejects_garbage() {
        let mut body = Vec::new();
        body.extend_from_slice(&0x0003_0000u32.to_be_bytes());
        for s in ["user", "x", "replication", "true", ""] {
            body.extend_from_slice(s.as_bytes());
            body.push(0);
        }
        assert_eq!(
            parse_startup(&body).unwrap(),
            StartupPacket::Startup {
                major: 3,
                minor: 0,
                params: vec![
                    ("user".into(), "x".into()),
                    ("replication".into(), "true".into())
                ],
            }
        );
        // Every truncation is an error, never a panic.
        for cut in 0..body.len() {
            assert!(parse_startup(&body[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(
            parse_startup(&NEGOTIATE_SSL_CODE.to_be_bytes()).unwrap(),
            StartupPacket::SslRequest
        );
    }

    #[test]
    fn standby_status_round_trip_and_truncation() {
        let mut m = vec![b'r'];
        for v in [0x1_0000_0028u64, 0x1_0000_0020, 0x1_0000_0010] {
            m.extend_from_slice(&v.to_be_bytes());
        }
        m.extend_from_slice(&77i64.to_be_bytes());
        m.push(1);
        assert_eq!(
            parse_standby_message(&m).unwrap(),
            StandbyMessage::Status {
                write: Lsn(0x1_0000_0028),
                flush: Lsn(0x1_0000_0020),
                apply: Lsn(0x1_0000_0010),
                time: 77,
                reply_requested: true,
            }
        );
        for cut in 0..m.len() {
            assert!(parse_standby_message(&m[..cut]).is_err());
        }
        m.push(0);
        assert!(matches!(
            parse_standby_message(&m),
            Err(ProtocolError::Leftover { extra: 1, .. })
        ));
        assert!(parse_standby_message(b"z").is_err());
    }

    #[test]
    fn backend_message_lengths() {
        let mut out = BytesMut::new();
        keepalive(&mut out, Lsn(5), 6, true);
        // 'd' + len(4) + 'k' + 8 + 8 + 1
        assert_eq!(out.len(), 1 + 4 + 18);
        assert_eq!(&out[1..5], &22u32.to_be_bytes());
        let mut out = BytesMut::new();
        xlog_data(&mut out, Lsn(1), Lsn(2), 3, b"abc");
        // 'd' + len(4) + 'w' + dataStart + walEnd + sendTime + data
        assert_eq!(out.len(), 1 + 4 + 1 + 8 + 8 + 8 + 3);
    }
}
