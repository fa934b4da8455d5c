//! ClickHouse errors in three classes, by what helps:
//!
//! - **transient**: a retry of the same request gets past it by itself
//!   (overload, timeouts, a connection lost, a replica catching up);
//! - **environment**: the destination is not in a state to take the rows
//!   (authentication after a password rotation, access, disk, quota, a
//!   read-only server, a database or table renamed away, a proxy answering
//!   instead of ClickHouse, an answer that is not ClickHouse's). Someone
//!   fixes the destination; the rows wait;
//! - **definite**: ClickHouse refuses these rows or this schema change
//!   (a value or type it cannot take); the same request fails the same way
//!   again, and only the table it is about stops.
//!
//! Transient and environment errors both pause the stream with backoff and
//! never let progress pass the rows they hold back; they differ in how they
//! are reported. Only codes known to be about the request's own data are
//! definite: an unknown code pauses rather than drops a table's rows.
//!
//! The split is made on ClickHouse's exception code, which the HTTP
//! interface sends in the `X-ClickHouse-Exception-Code` header, never on
//! message text. The exception is a response that began with `200 OK`
//! and failed while streaming; the code is then only in the body, so the
//! body's tail is parsed (requests use `wait_end_of_query=1`, which makes
//! this rare: the server buffers the result and reports failures in the
//! status line). Code numbers and names are ClickHouse's
//! (`src/Common/ErrorCodes.cpp`); a test checks each against the engine's
//! `errorCodeToName`.

use std::time::Duration;

/// Exception codes that a retry of the same request can get past: overload,
/// timeouts, network trouble between servers, Keeper/replication hiccups.
pub const TRANSIENT_CODES: &[(u32, &str)] = &[
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

/// Exception codes about the request's own rows or DDL: a value or type
/// ClickHouse refuses. The only codes that stop a table.
pub const DEFINITE_CODES: &[(u32, &str)] = &[
    (6, "CANNOT_PARSE_TEXT"),
    (15, "DUPLICATE_COLUMN"),
    (26, "CANNOT_PARSE_QUOTED_STRING"),
    (27, "CANNOT_PARSE_INPUT_ASSERTION_FAILED"),
    (32, "ATTEMPT_TO_READ_AFTER_EOF"),
    (33, "CANNOT_READ_ALL_DATA"),
    (36, "BAD_ARGUMENTS"),
    (38, "CANNOT_PARSE_DATE"),
    (41, "CANNOT_PARSE_DATETIME"),
    (43, "ILLEGAL_TYPE_OF_ARGUMENT"),
    (44, "ILLEGAL_COLUMN"),
    (53, "TYPE_MISMATCH"),
    (62, "SYNTAX_ERROR"),
    (69, "ARGUMENT_OUT_OF_BOUND"),
    (70, "CANNOT_CONVERT_TYPE"),
    (72, "CANNOT_PARSE_NUMBER"),
    (117, "INCORRECT_DATA"),
    (128, "TOO_LARGE_ARRAY_SIZE"),
    (130, "CANNOT_READ_ARRAY_FROM_TEXT"),
    (131, "TOO_LARGE_STRING_SIZE"),
    (190, "SIZES_OF_ARRAYS_DONT_MATCH"),
    (321, "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE"),
    (407, "DECIMAL_OVERFLOW"),
    (524, "ALTER_OF_COLUMN_IS_FORBIDDEN"),
];

/// Whether an exception code is worth retrying as it is.
pub fn is_transient_code(code: u32) -> bool {
    TRANSIENT_CODES.iter().any(|(c, _)| *c == code)
}

/// ClickHouse's name of a code this module knows, for logs and metrics.
pub fn code_name(code: u32) -> Option<&'static str> {
    TRANSIENT_CODES
        .iter()
        .chain(DEFINITE_CODES)
        .chain(ENVIRONMENT_NAMES)
        .find(|(c, _)| *c == code)
        .map(|(_, n)| *n)
}

/// Codes seen when the destination is not ready (names for reports only:
/// every code that is neither transient nor definite is environmental).
const ENVIRONMENT_NAMES: &[(u32, &str)] = &[
    (16, "NO_SUCH_COLUMN_IN_TABLE"),
    (60, "UNKNOWN_TABLE"),
    (81, "UNKNOWN_DATABASE"),
    (164, "READONLY"),
    (194, "REQUIRED_PASSWORD"),
    (201, "QUOTA_EXCEEDED"),
    (243, "NOT_ENOUGH_SPACE"),
    (497, "ACCESS_DENIED"),
    (516, "AUTHENTICATION_FAILED"),
];

/// What a failed request calls for (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry as it is; it passes by itself.
    Transient,
    /// Retry with backoff until the destination is fixed; tell the operator.
    Environment,
    /// These rows or this change are refused: stop the table they are about.
    Definite,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Transient => "transient",
            ErrorClass::Environment => "environment",
            ErrorClass::Definite => "definite",
        }
    }
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
    /// The TLS handshake failed: a certificate this client does not trust
    /// (or that names another host), a client certificate the server
    /// wants, a plain-HTTP port. Environment: someone fixes the
    /// certificates.
    #[error("ClickHouse at {endpoint}: {context}: TLS failed: {message}")]
    Tls {
        endpoint: String,
        context: String,
        /// Boxed so the error stays as small as the others.
        message: Box<str>,
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
    /// A response that is not what ClickHouse's interface sends (too
    /// large, not UTF-8, an insert answered without ClickHouse's summary or
    /// with fewer rows written than sent): something else answered.
    /// Environment.
    #[error("ClickHouse {context}: {message}")]
    Response { context: String, message: String },
    /// Bad client settings (URL, credentials that cannot be sent): found
    /// when the client is made, before any table is involved.
    #[error("ClickHouse client configuration: {0}")]
    Config(String),
}

impl ClickHouseError {
    /// What this error calls for (see the module doc).
    pub fn class(&self) -> ErrorClass {
        match self {
            ClickHouseError::Connection { .. } | ClickHouseError::Timeout { .. } => {
                ErrorClass::Transient
            }
            ClickHouseError::Server { status, code, .. } => match code {
                Some(code) if DEFINITE_CODES.iter().any(|(c, _)| c == code) => ErrorClass::Definite,
                Some(code) if is_transient_code(*code) => ErrorClass::Transient,
                Some(_) => ErrorClass::Environment,
                // No ClickHouse exception: a proxy or load balancer in the
                // way, or the server shutting down.
                None if matches!(status, 408 | 429 | 500..=599) => ErrorClass::Transient,
                None => ErrorClass::Environment,
            },
            ClickHouseError::Response { .. }
            | ClickHouseError::Config(_)
            | ClickHouseError::Tls { .. } => ErrorClass::Environment,
        }
    }

    /// Retrying the same request may succeed by itself.
    pub fn is_transient(&self) -> bool {
        self.class() == ErrorClass::Transient
    }

    /// Nothing answered: no connection, or it broke before an answer.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClickHouseError::Connection { .. })
    }

    /// Only these rows or this change are refused.
    pub fn is_definite(&self) -> bool {
        self.class() == ErrorClass::Definite
    }

    /// A label for metrics: the exception code, `http_NNN` without one, or
    /// the kind of failure.
    pub fn label(&self) -> String {
        match self {
            ClickHouseError::Server { code: Some(c), .. } => c.to_string(),
            ClickHouseError::Server { status, .. } => format!("http_{status}"),
            ClickHouseError::Connection { .. } => "connection".into(),
            ClickHouseError::Tls { .. } => "tls".into(),
            ClickHouseError::Timeout { .. } => "timeout".into(),
            ClickHouseError::Response { .. } => "bad_response".into(),
            ClickHouseError::Config(_) => "config".into(),
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
    fn classes() {
        use ErrorClass::*;
        for (code, class) in [
            (60, Environment),    // UNKNOWN_TABLE: renamed away, back soon
            (81, Environment),    // UNKNOWN_DATABASE
            (516, Environment),   // AUTHENTICATION_FAILED
            (497, Environment),   // ACCESS_DENIED
            (243, Environment),   // NOT_ENOUGH_SPACE
            (164, Environment),   // READONLY
            (201, Environment),   // QUOTA_EXCEEDED
            (16, Environment),    // NO_SUCH_COLUMN_IN_TABLE: fixed by hand
            (12345, Environment), // unknown: pause, never drop
            (53, Definite),
            (321, Definite),
            (407, Definite),
            (159, Transient),
        ] {
            assert_eq!(server(500, Some(code)).class(), class, "code {code}");
        }
        for (status, class) in [
            (401, Environment),
            (403, Environment),
            (404, Environment),
            (502, Transient),
            (503, Transient),
            (504, Transient),
            (429, Transient),
        ] {
            assert_eq!(server(status, None).class(), class, "HTTP {status}");
        }
        let bad = ClickHouseError::Response {
            context: "INSERT".into(),
            message: "no X-ClickHouse-Summary".into(),
        };
        assert_eq!(bad.class(), Environment);
        assert_eq!(server(401, None).label(), "http_401");
        assert_eq!(server(500, Some(60)).label(), "60");
        assert_eq!(code_name(60), Some("UNKNOWN_TABLE"));
        assert_eq!(code_name(53), Some("TYPE_MISMATCH"));
    }

    #[test]
    fn classification_by_code() {
        assert!(server(500, Some(159)).is_transient());
        assert!(server(500, Some(252)).is_transient());
        assert!(server(500, Some(999)).is_transient());
        assert!(!server(404, Some(60)).is_definite(), "UNKNOWN_TABLE");
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
