//! `COPY … TO STDOUT` on an SQL session (`ConnConfig::physical` false):
//! the CopyData payloads handed out as they arrive, one message in memory
//! at a time.
//!
//! ```text
//!  Query "COPY (SELECT …) TO STDOUT (FORMAT binary)"
//!  [NoticeResponse, ParameterStatus: anywhere, skipped]
//!  CopyOutResponse               ──▶ copy_out returns CopyOut   [until here: command_timeout]
//!  CopyData*                     ──▶ CopyOut::next → Some(payload) [each: idle timeout]
//!  CopyDone
//!  CommandComplete "COPY n"      ──▶ CopyOut::rows
//!  ReadyForQuery                 ──▶ CopyOut::next → None
//!
//!  ErrorResponse (in place of the rest), ReadyForQuery ──▶ Err(Server), session usable
//! ```
//!
//! The start bound covers more than the lock wait: the server flushes its
//! output only when its 8 KiB send buffer fills (or the COPY ends), so
//! CopyOutResponse arrives with the first rows.
//!
//! (protocol-flow.html, "COPY Operations". The server sends one CopyData
//! per row — CopySendEndOfRow in copyto.c — so a message is as large as a
//! row: up to 1 GiB, `MaxAllocSize` of its buffer. The message bound of the
//! connection is raised to that for the COPY and restored after.)
//!
//! The session afterwards: at ReadyForQuery it is usable, also after the
//! server's ErrorResponse (inside a transaction block the transaction is
//! then aborted: the caller rolls back). A statement that is not a COPY TO
//! STDOUT is refused once the server is back at ReadyForQuery (a COPY FROM
//! STDIN is ended with CopyFail). A stall is cancelled (CancelRequest) and
//! drained, as is [`CopyOut::cancel`]. If that fails, if the server breaks
//! the protocol, or if a [`CopyOut`] is dropped before its end, the client
//! is poisoned: every later call says to reconnect.

use std::time::Duration;

use bytes::Bytes;
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::{backend, frontend};

use super::client::ReplicationClient;
use super::conn::{BackendMessage, MAX_MESSAGE_LEN, db_error, server_error};
use super::error::{DbError, ReplicationError, Result};

/// The largest CopyData accepted during a COPY: one row, which the server
/// builds in a buffer of at most `MaxAllocSize` (1 GiB - 1), plus framing.
const MAX_COPY_MESSAGE_LEN: usize = (1 << 30) + 5;

/// Longest command text repeated in errors.
const LABEL_LEN: usize = 200;

/// A running `COPY … TO STDOUT`; see the module docs.
#[derive(Debug)]
pub struct CopyOut<'c> {
    client: &'c mut ReplicationClient,
    /// The command, shortened, for errors.
    label: String,
    idle_timeout: Duration,
    binary: bool,
    columns: usize,
    phase: Phase,
    /// The server's ErrorResponse, reported at ReadyForQuery.
    error: Option<DbError>,
    /// Results after the COPY (a multi-statement query), reported at
    /// ReadyForQuery.
    extra: bool,
    rows: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// CopyData flows.
    Copying,
    /// CopyDone or ErrorResponse seen: the rest up to ReadyForQuery.
    Ending,
    /// ReadyForQuery seen without error.
    Finished,
    /// An error was returned (its text).
    Failed(String),
}

/// How the start of a COPY failed.
enum Failure {
    /// The server is back at ReadyForQuery: usable.
    Ready(ReplicationError),
    /// Out of step with the server: poison.
    Broken(ReplicationError),
}

impl ReplicationClient {
    /// Runs `sql`, a `COPY … TO STDOUT` (any format), and returns once the
    /// server has begun the COPY (bounded by `command_timeout`, which thus
    /// also bounds waiting for the table's lock and producing the first
    /// 8 KiB of rows); [`CopyOut::next`] then
    /// yields the CopyData payloads. Only on an SQL session
    /// (`ConnConfig::physical` false): a walsender refuses COPY.
    ///
    /// Errors: `Server` for the server's ErrorResponse (the session stays
    /// usable), `Config` when `sql` is not a COPY TO STDOUT,
    /// `CommandTimeout`, or connection and protocol errors.
    pub async fn copy_out(&mut self, sql: &str) -> Result<CopyOut<'_>> {
        if let Some(why) = &self.poisoned {
            return Err(ReplicationError::Poisoned(why.clone()));
        }
        let label = command_label(sql);
        frontend::query(sql, self.conn.buf())?;
        // Cleared on every path that ends at ReadyForQuery; still set if
        // the CopyOut (or this future) is dropped midway.
        self.poisoned = Some(format!("a COPY was abandoned mid-stream ({label})"));
        self.conn.max_message_len = MAX_COPY_MESSAGE_LEN;
        let timeout = self.config.command_timeout;
        match tokio::time::timeout(timeout, self.await_copy_out(&label)).await {
            Ok(Ok((binary, columns))) => Ok(CopyOut {
                label,
                idle_timeout: timeout,
                binary,
                columns,
                phase: Phase::Copying,
                error: None,
                extra: false,
                rows: None,
                client: self,
            }),
            Ok(Err(Failure::Ready(e))) => {
                self.copy_ended();
                Err(e)
            }
            Ok(Err(Failure::Broken(e))) => {
                self.conn.max_message_len = MAX_MESSAGE_LEN;
                self.poisoned = Some(format!("{label}: {e}"));
                Err(e)
            }
            Err(_) => {
                self.poisoned = None;
                self.recover_by_cancel(&label, "timed out before its COPY began")
                    .await;
                self.conn.max_message_len = MAX_MESSAGE_LEN;
                Err(ReplicationError::CommandTimeout {
                    command: label,
                    timeout,
                    remedy: "the COPY did not begin: check for locks held on the table (pg_locks) or raise command_timeout".into(),
                })
            }
        }
    }

    /// Back at ReadyForQuery: usable, with the usual message bound.
    fn copy_ended(&mut self) {
        self.poisoned = None;
        self.conn.max_message_len = MAX_MESSAGE_LEN;
    }

    /// Waits for CopyOutResponse: (binary, column count).
    async fn await_copy_out(&mut self, label: &str) -> Result<(bool, usize), Failure> {
        self.conn.flush().await.map_err(Failure::Broken)?;
        let mut error = None;
        let mut ran: Option<&str> = None;
        loop {
            let m = match self.conn.read_message().await.map_err(Failure::Broken)? {
                BackendMessage::Other(m) => m,
                BackendMessage::CopyBothResponse => {
                    return Err(broken("CopyBothResponse answering a COPY TO STDOUT"));
                }
            };
            match m {
                backend::Message::CopyOutResponse(body) => {
                    let mut formats = body.column_formats();
                    let mut columns = 0usize;
                    while formats.next().map_err(broken_io)?.is_some() {
                        columns += 1;
                    }
                    return Ok((body.format() == 1, columns));
                }
                backend::Message::CopyInResponse(_) => {
                    // The server waits for data: end that COPY; it answers
                    // with ErrorResponse and ReadyForQuery.
                    frontend::copy_fail("walshadow only reads COPY … TO STDOUT", self.conn.buf())
                        .map_err(broken_io)?;
                    self.conn.flush().await.map_err(Failure::Broken)?;
                    ran = Some("COPY FROM STDIN");
                }
                backend::Message::RowDescription(_)
                | backend::Message::DataRow(_)
                | backend::Message::CommandComplete(_)
                | backend::Message::EmptyQueryResponse => {
                    ran.get_or_insert("statements other than COPY TO STDOUT");
                }
                backend::Message::NoticeResponse(_) => {}
                backend::Message::ParameterStatus(p) => {
                    let (name, value) = (
                        p.name().map_err(broken_io)?.to_owned(),
                        p.value().map_err(broken_io)?.to_owned(),
                    );
                    self.conn.params.insert(name, value);
                }
                backend::Message::ErrorResponse(e) => error = Some(db_error(&e)),
                backend::Message::ReadyForQuery(_) => {
                    return Err(Failure::Ready(match (ran, error) {
                        (Some(what), _) => ReplicationError::Config(format!(
                            "{label} ran {what}; copy_out takes one COPY … TO STDOUT"
                        )),
                        (None, Some(e)) => server_error(label, e),
                        (None, None) => ReplicationError::Config(format!(
                            "{label} did not start a COPY … TO STDOUT"
                        )),
                    }));
                }
                _ => return Err(broken("unexpected message answering a COPY TO STDOUT")),
            }
        }
    }
}

impl CopyOut<'_> {
    /// The next CopyData payload; `None` once the server has sent CopyDone,
    /// CommandComplete and ReadyForQuery. Each wait is bounded by the idle
    /// timeout (a stall is cancelled and reported as `Stalled`). Cancel-safe:
    /// a dropped `next` future loses no message.
    pub async fn next(&mut self) -> Result<Option<Bytes>> {
        match &self.phase {
            Phase::Finished => return Ok(None),
            Phase::Failed(why) => {
                return Err(ReplicationError::protocol(format!(
                    "CopyOut::next after the COPY failed ({why})"
                )));
            }
            Phase::Copying | Phase::Ending => {}
        }
        loop {
            let read =
                tokio::time::timeout(self.idle_timeout, self.client.conn.read_message()).await;
            let msg = match read {
                Ok(Ok(BackendMessage::Other(m))) => m,
                Ok(Ok(BackendMessage::CopyBothResponse)) => {
                    return Err(self.broken(ReplicationError::protocol(
                        "CopyBothResponse inside a COPY TO STDOUT",
                    )));
                }
                Ok(Err(e)) => return Err(self.broken(e)),
                Err(_) => return Err(self.stalled().await),
            };
            match msg {
                backend::Message::CopyData(body) => match self.phase {
                    Phase::Copying => return Ok(Some(body.into_bytes())),
                    // A second COPY of a multi-statement query: reported
                    // at ReadyForQuery.
                    _ => self.extra = true,
                },
                backend::Message::CopyDone => {
                    if self.phase != Phase::Copying {
                        self.extra = true;
                    }
                    self.phase = Phase::Ending;
                }
                backend::Message::CommandComplete(c) => {
                    if self.phase != Phase::Ending {
                        return Err(self.broken(ReplicationError::protocol(
                            "CommandComplete before CopyDone",
                        )));
                    }
                    if self.rows.is_none() && !self.extra {
                        let tag = c.tag().map_err(|e| self.broken(e.into()))?;
                        self.rows = tag.strip_prefix("COPY ").and_then(|n| n.parse().ok());
                    } else {
                        self.extra = true;
                    }
                }
                backend::Message::CopyOutResponse(_)
                | backend::Message::RowDescription(_)
                | backend::Message::DataRow(_)
                | backend::Message::EmptyQueryResponse
                    if self.phase == Phase::Ending =>
                {
                    self.extra = true;
                }
                backend::Message::NoticeResponse(_) => {}
                backend::Message::ParameterStatus(p) => {
                    let name = p.name().map_err(|e| self.broken(e.into()))?.to_owned();
                    let value = p.value().map_err(|e| self.broken(e.into()))?.to_owned();
                    self.client.conn.params.insert(name, value);
                }
                backend::Message::ErrorResponse(e) => {
                    // The server left COPY mode; ReadyForQuery follows.
                    self.error = Some(db_error(&e));
                    self.phase = Phase::Ending;
                }
                backend::Message::ReadyForQuery(_) => {
                    self.client.copy_ended();
                    let err = if let Some(e) = self.error.take() {
                        server_error(&self.label, e)
                    } else if self.extra {
                        ReplicationError::Config(format!(
                            "{} ran more than one statement; copy_out takes one COPY … TO STDOUT",
                            self.label
                        ))
                    } else if self.phase != Phase::Ending {
                        ReplicationError::protocol("ReadyForQuery inside COPY")
                    } else {
                        self.phase = Phase::Finished;
                        return Ok(None);
                    };
                    self.phase = Phase::Failed(err.to_string());
                    return Err(err);
                }
                _ => {
                    return Err(self.broken(ReplicationError::protocol(
                        "unexpected message inside a COPY TO STDOUT",
                    )));
                }
            }
        }
    }

    /// Stops the COPY before its end: CancelRequest, then the rest drained
    /// to ReadyForQuery. `Ok` when the session is usable again; a finished
    /// or failed COPY needs nothing.
    pub async fn cancel(self) -> Result<()> {
        if !matches!(self.phase, Phase::Copying | Phase::Ending) {
            return Ok(());
        }
        self.client.poisoned = None;
        self.client
            .recover_by_cancel(&self.label, "was cancelled by walshadow")
            .await;
        self.client.conn.max_message_len = MAX_MESSAGE_LEN;
        match &self.client.poisoned {
            Some(why) => Err(ReplicationError::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Whether the server sends the binary format (CopyOutResponse).
    pub fn is_binary(&self) -> bool {
        self.binary
    }

    /// The column count the server announced.
    pub fn column_count(&self) -> usize {
        self.columns
    }

    /// The row count of CommandComplete (`COPY n`), once `next` returned
    /// `None`.
    pub fn rows(&self) -> Option<u64> {
        self.rows
    }

    /// Bound on each wait in `next` (default: the configured
    /// `command_timeout`). A server that filters many rows between two it
    /// sends may need more.
    pub fn set_idle_timeout(&mut self, timeout: Duration) {
        self.idle_timeout = timeout;
    }

    fn broken(&mut self, e: ReplicationError) -> ReplicationError {
        self.client.conn.max_message_len = MAX_MESSAGE_LEN;
        self.client.poisoned = Some(format!("{}: {e}", self.label));
        self.phase = Phase::Failed(e.to_string());
        e
    }

    async fn stalled(&mut self) -> ReplicationError {
        let e = ReplicationError::Stalled {
            command: self.label.clone(),
            idle: self.idle_timeout,
            phase: "reading COPY data".into(),
        };
        self.client.poisoned = None;
        self.client.recover_by_cancel(&self.label, "stalled").await;
        self.client.conn.max_message_len = MAX_MESSAGE_LEN;
        self.phase = Phase::Failed(e.to_string());
        e
    }
}

/// `sql` on one line, shortened, for error messages.
fn command_label(sql: &str) -> String {
    let one_line: String = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(LABEL_LEN) {
        Some((cut, _)) => format!("{}…", one_line.get(..cut).unwrap_or_default()),
        None => one_line,
    }
}

fn broken(what: &str) -> Failure {
    Failure::Broken(ReplicationError::protocol(what))
}

fn broken_io(e: std::io::Error) -> Failure {
    Failure::Broken(ReplicationError::protocol(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_short_and_on_one_line() {
        assert_eq!(
            command_label("COPY (SELECT\n  a,\tb FROM t) TO STDOUT"),
            "COPY (SELECT a, b FROM t) TO STDOUT"
        );
        let long = "é".repeat(500);
        let l = command_label(&long);
        assert_eq!(l.chars().count(), LABEL_LEN + 1);
        assert!(l.ends_with('…'));
    }
}
