//! ClickHouse errors, split into transient (retry the same request) and
//! definite (the same request fails the same way again: stop the table and
//! report).
//!
//! The split is made on ClickHouse's exception code, which the HTTP
//! interface sends in the `X-ClickHouse-Exception-Code` header, never on
//! message text. The exception is a response that began with `200 OK`
//! and failed while streaming; the code is then only in the body, so the
//! body's tail is parsed (requests use `wait_end_of_query=1`, which makes
//! this rare: the server buffers the result and reports failures in the
//! status line).

use std::time::Duration;

/// Exception codes that a retry of the same request can get past: overload,
/// timeouts, network trouble between servers, Keeper/replication hiccups
/// (names from ClickHouse's `src/Common/ErrorCodes.cpp`).
const TRANSIENT_CODES: &[(u32, &str)] = &[
    (159, "TIMEOUT_EXCEEDED"),
    (160, "TOO_SLOW"),
    (202, "TOO_MANY_SIMULTANEOUS_QUERIES"),
    (203, "NO_FREE_CONNECTION"),
    (209, "SOCKET_TIMEOUT"),
    (210, "NETWORK_ERROR"),
    (225, "NO_ZOOKEEPER"),
    (236, "ABORTED"),
    (241, "MEMORY_LIMIT_EXCEEDED"),
    (242, "TABLE_IS_READ_ONLY"),
    (252, "TOO_MANY_PARTS"),
    (279, "ALL_CONNECTION_TRIES_FAILED"),
    (285, "TOO_FEW_LIVE_REPLICAS"),
    (286, "UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE"),
    (319, "UNKNOWN_STATUS_OF_INSERT"),
    (373, "SESSION_IS_LOCKED"),
    (394, "QUERY_WAS_CANCELLED"),
    (425, "SYSTEM_ERROR"),
    (439, "CANNOT_SCHEDULE_TASK"),
    (473, "DEADLOCK_AVOIDED"),
    (517, "CANNOT_ASSIGN_ALTER"),
    (999, "KEEPER_EXCEPTION"),
    (1000, "POCO_EXCEPTION"),
];

/// Whether an exception code is worth retrying.
pub fn is_transient_code(code: u32) -> bool {
    TRANSIENT_CODES.iter().any(|(c, _)| *c == code)
}

/// An error from the ClickHouse HTTP interface.
#[derive(Debug, thiserror::Error)]
pub enum ClickHouseError {
    /// No connection, or it broke mid-request (refused, reset, closed early).
    /// Transient.
    #[error("ClickHouse at {endpoint}: {context}: connection failed: {message}")]
    Connection {
        endpoint: String,
        context: String,
        message: String,
    },
    /// The request did not finish in time. Transient; for an insert the
    /// outcome is unknown, which the deduplication token makes safe to
    /// retry.
    #[error("ClickHouse at {endpoint}: {context}: no answer within {after:?}")]
    Timeout {
        endpoint: String,
        context: String,
        after: Duration,
    },
    /// ClickHouse answered with an exception (or an HTTP error without one).
    #[error("ClickHouse {context}: {}HTTP {status}: {message}", code.map(|c| format!("exception code {c}, ")).unwrap_or_default())]
    Server {
        context: String,
        status: u16,
        /// From `X-ClickHouse-Exception-Code`, or from the body of a
        /// response that failed after `200 OK`.
        code: Option<u32>,
        message: String,
    },
    /// A response that is not what the interface sends (too large, not
    /// UTF-8). Definite.
    #[error("ClickHouse {context}: {message}")]
    Response { context: String, message: String },
    /// Bad client settings (URL, credentials that cannot be sent). Definite.
    #[error("ClickHouse client configuration: {0}")]
    Config(String),
}

impl ClickHouseError {
    /// Retrying the same request may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ClickHouseError::Connection { .. } | ClickHouseError::Timeout { .. } => true,
            ClickHouseError::Server { status, code, .. } => match code {
                Some(code) => is_transient_code(*code),
                // No ClickHouse exception: a proxy or load balancer in the
                // way, or the server shutting down.
                None => matches!(status, 408 | 429 | 500..=599),
            },
            ClickHouseError::Response { .. } | ClickHouseError::Config(_) => false,
        }
    }

    /// The ClickHouse exception code, when there was one.
    pub fn exception_code(&self) -> Option<u32> {
        match self {
            ClickHouseError::Server { code, .. } => *code,
            _ => None,
        }
    }
}

/// The exception at the end of a body that started as `200 OK`, if any:
/// `Code: N. DB::Exception: …` as the last line, or after the
/// `__exception__` marker newer servers write.
pub(crate) fn trailing_exception(body: &[u8]) -> Option<(u32, String)> {
    let tail = body
        .get(body.len().saturating_sub(16 * 1024)..)
        .unwrap_or(body);
    let text = String::from_utf8_lossy(tail);
    let region = match text.find("__exception__") {
        Some(i) => text.get(i..)?,
        None => text.trim_end().rsplit('\n').next()?,
    };
    let at = region.find("Code: ")?;
    let line = region.get(at..)?.lines().next()?.trim();
    let rest = line.get(6..)?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let code: u32 = rest.get(..digits)?.parse().ok()?;
    if !rest.get(digits..)?.starts_with(". DB::Exception") {
        return None;
    }
    Some((code, line.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(status: u16, code: Option<u32>) -> ClickHouseError {
        ClickHouseError::Server {
            context: "INSERT".into(),
            status,
            code,
            message: String::new(),
        }
    }

    #[test]
    fn classification_by_code() {
        assert!(server(500, Some(159)).is_transient());
        assert!(server(500, Some(252)).is_transient());
        assert!(server(500, Some(999)).is_transient());
        assert!(!server(404, Some(60)).is_transient(), "UNKNOWN_TABLE");
        assert!(
            !server(400, Some(16)).is_transient(),
            "NO_SUCH_COLUMN_IN_TABLE"
        );
        assert!(!server(500, Some(53)).is_transient(), "TYPE_MISMATCH");
        assert!(
            !server(403, Some(516)).is_transient(),
            "AUTHENTICATION_FAILED"
        );
        assert!(server(502, None).is_transient());
        assert!(server(429, None).is_transient());
        assert!(!server(401, None).is_transient());
        assert_eq!(server(500, Some(159)).exception_code(), Some(159));
    }

    #[test]
    fn mid_stream_exceptions() {
        let body = b"1\n2\nCode: 241. DB::Exception: Memory limit exceeded. (MEMORY_LIMIT_EXCEEDED) (version 24.3)\n";
        assert_eq!(trailing_exception(body).map(|(c, _)| c), Some(241));
        let body = b"1\n2\n__exception__\r\nabcd\r\nCode: 395. DB::Exception: thrown. (FUNCTION_THROW_IF_VALUE_IS_NON_ZERO)\r\n71 abcd\r\n__exception__\r\n";
        let (code, message) = trailing_exception(body).unwrap();
        assert_eq!(code, 395);
        assert!(
            message.starts_with("Code: 395. DB::Exception: thrown."),
            "{message}"
        );
        assert_eq!(trailing_exception(b"1\n2\n"), None);
        assert_eq!(trailing_exception(b""), None);
        assert_eq!(trailing_exception(b"Code: x. DB::Exception"), None);
    }
}
