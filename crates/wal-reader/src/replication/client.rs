//! `ReplicationClient`: a walsender connection in command mode, running the
//! replication commands of protocol-replication.html over the simple query
//! protocol, each bounded by a timeout.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use postgres_protocol::message::{backend, frontend};
use walshadow_types::{Lsn, TimeLineId};

use super::config::ConnConfig;
use super::conn::{BackendMessage, Connection, data_row, db_error, send_cancel, server_error};
use super::error::{DbError, ReplicationError, Result};
use super::stream::WalStream;
use super::timeline::{TimelineHistory, parse_timeline_history};

/// Rows of a simple query, values as the server sent them (text format).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Option<Bytes>>>,
    /// CommandComplete tag, e.g. `SELECT` or `DROP_REPLICATION_SLOT`.
    pub command_tag: Option<String>,
}

impl QueryResult {
    /// Column `col` of row `row` as UTF-8 text; `None` for NULL or absent.
    pub fn text(&self, row: usize, col: usize) -> Option<&str> {
        self.rows
            .get(row)?
            .get(col)?
            .as_ref()
            .and_then(|b| std::str::from_utf8(b).ok())
    }

    fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// First-row value of the named column.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.text(0, self.column(name)?)
    }

    /// The count a command tag ends with: the rows an `INSERT`, `UPDATE`
    /// or `DELETE` touched (`UPDATE 3`, `INSERT 0 1`); 0 without one.
    pub fn affected_rows(&self) -> u64 {
        self.command_tag
            .as_deref()
            .and_then(|t| t.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

/// `IDENTIFY_SYSTEM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemIdentity {
    pub systemid: u64,
    pub timeline: TimeLineId,
    /// The current WAL flush position.
    pub xlogpos: Lsn,
    /// NULL on a physical replication connection.
    pub dbname: Option<String>,
}

/// `READ_REPLICATION_SLOT` (PG15+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotInfo {
    /// `physical` or `logical`.
    pub slot_type: String,
    pub restart_lsn: Option<Lsn>,
    pub restart_tli: Option<TimeLineId>,
}

/// A replication connection in command mode.
#[derive(Debug)]
pub struct ReplicationClient {
    pub(crate) conn: Connection,
    pub(crate) config: ConnConfig,
    /// Set when a command was abandoned mid-flight and the connection could
    /// not be brought back to ReadyForQuery; also for the duration of a
    /// `base_backup`, so that dropping its future leaves the client poisoned.
    pub(crate) poisoned: Option<String>,
    identified: bool,
}

impl ReplicationClient {
    /// Connects with `replication=true` (a physical walsender) and
    /// authenticates, within `config.connect_timeout`.
    pub async fn connect(config: &ConnConfig) -> Result<Self> {
        let conn = Connection::connect(config).await?;
        Ok(ReplicationClient {
            conn,
            config: config.clone(),
            poisoned: None,
            identified: false,
        })
    }

    /// ParameterStatus values the server reported (`server_version`,
    /// `integer_datetimes`, ...).
    pub fn server_params(&self) -> &HashMap<String, String> {
        &self.conn.params
    }

    pub fn server_param(&self, name: &str) -> Option<&str> {
        self.conn.params.get(name).map(String::as_str)
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.conn.tls
    }

    pub fn config(&self) -> &ConnConfig {
        &self.config
    }

    /// Runs one command with the simple query protocol, bounded by the
    /// configured `command_timeout`.
    pub async fn simple_query(&mut self, command: &str) -> Result<QueryResult> {
        let timeout = self.config.command_timeout;
        self.run(command, timeout, "check that the server is responsive")
            .await
    }

    /// Runs `command`, giving up after `timeout`. On timeout the command is
    /// cancelled (CancelRequest) and the connection drained back to
    /// ReadyForQuery; if that fails too the client is poisoned and every
    /// later call fails until the caller reconnects.
    pub(crate) async fn run(
        &mut self,
        command: &str,
        timeout: Duration,
        remedy: &str,
    ) -> Result<QueryResult> {
        if let Some(why) = &self.poisoned {
            return Err(ReplicationError::Poisoned(why.clone()));
        }
        frontend::query(command, self.conn.buf())?;
        match tokio::time::timeout(timeout, self.finish_query(command)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                if !matches!(
                    e,
                    ReplicationError::Server { .. }
                        | ReplicationError::SlotMissing { .. }
                        | ReplicationError::SlotExists { .. }
                        | ReplicationError::SlotActive { .. }
                ) {
                    self.poisoned = Some(format!("{command}: {e}"));
                }
                Err(e)
            }
            Err(_) => {
                self.recover_by_cancel(command, "timed out").await;
                Err(ReplicationError::CommandTimeout {
                    command: command.to_owned(),
                    timeout,
                    remedy: remedy.to_owned(),
                })
            }
        }
    }

    /// Cancels the running command and drains to ReadyForQuery; poisons the
    /// client if that fails. `why` says how the command was interrupted.
    pub(crate) async fn recover_by_cancel(&mut self, command: &str, why: &str) {
        const GRACE: Duration = Duration::from_secs(5);
        let Some(key) = self.conn.cancel_key else {
            self.poisoned = Some(format!("{command} {why} (no cancel key)"));
            return;
        };
        let cfg = self.config.clone();
        let cancelled = tokio::time::timeout(GRACE, send_cancel(&cfg, key)).await;
        let drained = match cancelled {
            Ok(Ok(())) => tokio::time::timeout(GRACE, self.drain_to_ready()).await,
            _ => {
                self.poisoned = Some(format!("{command} {why} and could not be cancelled"));
                return;
            }
        };
        if !matches!(drained, Ok(Ok(()))) {
            self.poisoned = Some(format!("{command} {why} and did not stop after cancel"));
        }
    }

    async fn drain_to_ready(&mut self) -> Result<()> {
        self.conn.flush().await?;
        loop {
            if let BackendMessage::Other(backend::Message::ReadyForQuery(_)) =
                self.conn.read_message().await?
            {
                return Ok(());
            }
        }
    }

    async fn finish_query(&mut self, command: &str) -> Result<QueryResult> {
        self.conn.flush().await?;
        let mut result = QueryResult::default();
        let mut error: Option<DbError> = None;
        loop {
            match self.conn.read_message().await? {
                BackendMessage::CopyBothResponse => {
                    return Err(ReplicationError::protocol(format!(
                        "{command} started COPY BOTH; use start_replication"
                    )));
                }
                BackendMessage::Other(m) => match m {
                    backend::Message::RowDescription(rd) => {
                        let mut fields = rd.fields();
                        result.columns.clear();
                        while let Some(f) = fallible_iterator::FallibleIterator::next(&mut fields)?
                        {
                            result.columns.push(f.name().to_owned());
                        }
                    }
                    backend::Message::DataRow(row) => result.rows.push(data_row(&row)?),
                    backend::Message::CommandComplete(c) => {
                        result.command_tag = Some(c.tag()?.to_owned())
                    }
                    backend::Message::EmptyQueryResponse | backend::Message::NoticeResponse(_) => {}
                    backend::Message::ParameterStatus(p) => {
                        self.conn
                            .params
                            .insert(p.name()?.to_owned(), p.value()?.to_owned());
                    }
                    backend::Message::ErrorResponse(e) => error = Some(db_error(&e)),
                    backend::Message::ReadyForQuery(_) => {
                        return match error {
                            Some(e) => Err(server_error(command, e)),
                            None => Ok(result),
                        };
                    }
                    backend::Message::CopyOutResponse(_) | backend::Message::CopyInResponse(_) => {
                        return Err(ReplicationError::protocol(format!(
                            "{command} started COPY, which simple_query does not handle"
                        )));
                    }
                    _ => {
                        return Err(ReplicationError::protocol(format!(
                            "unexpected message answering {command}"
                        )));
                    }
                },
            }
        }
    }

    /// `IDENTIFY_SYSTEM`.
    pub async fn identify_system(&mut self) -> Result<SystemIdentity> {
        let r = self.simple_query("IDENTIFY_SYSTEM").await?;
        let field = |name: &str| {
            r.get(name).ok_or_else(|| {
                ReplicationError::protocol(format!("IDENTIFY_SYSTEM: no {name} column"))
            })
        };
        let systemid = field("systemid")?
            .parse()
            .map_err(|_| ReplicationError::protocol("IDENTIFY_SYSTEM: systemid is not a number"))?;
        let timeline = field("timeline")?
            .parse()
            .map_err(|_| ReplicationError::protocol("IDENTIFY_SYSTEM: timeline is not a number"))?;
        let xlogpos = field("xlogpos")?
            .parse()
            .map_err(|e| ReplicationError::protocol(format!("IDENTIFY_SYSTEM: {e}")))?;
        self.identified = true;
        Ok(SystemIdentity {
            systemid,
            timeline,
            xlogpos,
            dbname: r.get("dbname").map(str::to_owned),
        })
    }

    /// `SHOW name` (allowed on replication connections), e.g.
    /// `wal_segment_size`, `server_version_num`.
    pub async fn show(&mut self, name: &str) -> Result<String> {
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            || name.is_empty()
        {
            return Err(ReplicationError::Config(format!(
                "{name:?} is not a setting name"
            )));
        }
        let cmd = format!("SHOW {name}");
        let r = self.simple_query(&cmd).await?;
        r.text(0, 0)
            .map(str::to_owned)
            .ok_or_else(|| ReplicationError::protocol(format!("{cmd} returned no value")))
    }

    /// `CREATE_REPLICATION_SLOT name PHYSICAL [RESERVE_WAL]`, bounded by
    /// `command_timeout`.
    pub async fn create_physical_slot(&mut self, name: &str, reserve_wal: bool) -> Result<()> {
        check_slot_name(name)?;
        let cmd = format!(
            "CREATE_REPLICATION_SLOT {name} PHYSICAL{}",
            if reserve_wal { " RESERVE_WAL" } else { "" }
        );
        let remedy = format!(
            "slot {name:?} may or may not have been created; check pg_replication_slots and drop it if it is unwanted"
        );
        self.slot_command(name, &cmd, &remedy).await
    }

    /// `DROP_REPLICATION_SLOT name [WAIT]`. With `wait` the server blocks
    /// while another connection holds the slot; the wait is bounded by
    /// `command_timeout`.
    pub async fn drop_slot(&mut self, name: &str, wait: bool) -> Result<()> {
        check_slot_name(name)?;
        let cmd = format!(
            "DROP_REPLICATION_SLOT {name}{}",
            if wait { " WAIT" } else { "" }
        );
        let remedy = format!(
            "slot {name:?} is still held by another connection; stop that consumer (pg_replication_slots.active_pid) or drop without WAIT"
        );
        self.slot_command(name, &cmd, &remedy).await
    }

    /// A slot command bounded by `command_timeout`; `remedy` is what a
    /// timeout tells the operator.
    async fn slot_command(&mut self, name: &str, cmd: &str, remedy: &str) -> Result<()> {
        self.run(cmd, self.config.command_timeout, remedy)
            .await
            .map_err(|e| slot_error(name, e))?;
        Ok(())
    }

    /// `READ_REPLICATION_SLOT name` (PG15+): `None` when there is no such slot.
    pub async fn read_replication_slot(&mut self, name: &str) -> Result<Option<SlotInfo>> {
        check_slot_name(name)?;
        let r = self
            .simple_query(&format!("READ_REPLICATION_SLOT {name}"))
            .await?;
        let Some(slot_type) = r.get("slot_type") else {
            return Ok(None);
        };
        let restart_lsn = r
            .get("restart_lsn")
            .map(str::parse::<Lsn>)
            .transpose()
            .map_err(|e| ReplicationError::protocol(format!("READ_REPLICATION_SLOT: {e}")))?;
        let restart_tli = r
            .get("restart_tli")
            .map(str::parse::<TimeLineId>)
            .transpose()
            .map_err(|_| ReplicationError::protocol("READ_REPLICATION_SLOT: bad restart_tli"))?;
        Ok(Some(SlotInfo {
            slot_type: slot_type.to_owned(),
            restart_lsn,
            restart_tli,
        }))
    }

    /// `TIMELINE_HISTORY tli`: the history file of timeline `tli` (> 1).
    pub async fn timeline_history(&mut self, tli: TimeLineId) -> Result<TimelineHistory> {
        let r = self
            .simple_query(&format!("TIMELINE_HISTORY {tli}"))
            .await?;
        let filename = r
            .get("filename")
            .ok_or_else(|| ReplicationError::protocol("TIMELINE_HISTORY: no filename"))?
            .to_owned();
        let content = r
            .column("content")
            .and_then(|c| r.rows.first()?.get(c)?.clone())
            .ok_or_else(|| ReplicationError::protocol("TIMELINE_HISTORY: no content"))?;
        let entries = parse_timeline_history(tli, &content)?;
        Ok(TimelineHistory {
            timeline: tli,
            filename,
            content,
            entries,
        })
    }

    /// `START_REPLICATION [SLOT s] PHYSICAL start TIMELINE t`. Consumes the
    /// client; [`WalStream::stop`] gives it back. `timeline` 0 means the server's current timeline.
    pub async fn start_replication(
        mut self,
        slot: Option<&str>,
        start: Lsn,
        timeline: TimeLineId,
    ) -> Result<WalStream> {
        if let Some(why) = &self.poisoned {
            return Err(ReplicationError::Poisoned(why.clone()));
        }
        if !self.identified {
            // Servers before 13 refused START_REPLICATION before
            // IDENTIFY_SYSTEM; it is cheap, so always run it once.
            self.identify_system().await?;
        }
        let mut cmd = String::from("START_REPLICATION ");
        if let Some(s) = slot {
            check_slot_name(s)?;
            cmd.push_str(&format!("SLOT {s} "));
        }
        cmd.push_str(&format!("PHYSICAL {start}"));
        if timeline != 0 {
            cmd.push_str(&format!(" TIMELINE {timeline}"));
        }
        frontend::query(&cmd, self.conn.buf())?;
        let timeout = self.config.command_timeout;
        let slot_name = slot.map(str::to_owned);
        match tokio::time::timeout(timeout, self.await_copy_both(&cmd)).await {
            Ok(Ok(None)) => Ok(WalStream::new(self, timeline, start)),
            Ok(Ok(Some(end))) => Ok(WalStream::ended(self, timeline, start, end)),
            Ok(Err(e)) => Err(match slot_name {
                Some(s) => slot_error(&s, e),
                None => e,
            }),
            Err(_) => Err(ReplicationError::CommandTimeout {
                command: cmd,
                timeout,
                remedy: "the server did not start streaming; check its log".into(),
            }),
        }
    }

    /// Waits for CopyBothResponse. When the requested start is already at
    /// or past the end of a historic timeline the walsender skips COPY mode
    /// and answers with the (next_tli, next_tli_startpos) row directly
    /// (StartReplication in walsender.c); that row is returned.
    async fn await_copy_both(&mut self, cmd: &str) -> Result<Option<(TimeLineId, Lsn)>> {
        self.conn.flush().await?;
        let mut row = None;
        let mut error = None;
        loop {
            match self.conn.read_message().await? {
                BackendMessage::CopyBothResponse => return Ok(None),
                BackendMessage::Other(m) => match m {
                    backend::Message::RowDescription(_)
                    | backend::Message::CommandComplete(_)
                    | backend::Message::NoticeResponse(_) => {}
                    backend::Message::DataRow(r) => row = Some(data_row(&r)?),
                    backend::Message::ParameterStatus(p) => {
                        self.conn
                            .params
                            .insert(p.name()?.to_owned(), p.value()?.to_owned());
                    }
                    backend::Message::ErrorResponse(e) => error = Some(db_error(&e)),
                    backend::Message::ReadyForQuery(_) => {
                        if let Some(e) = error {
                            return Err(server_error(cmd, e));
                        }
                        let row = row.ok_or_else(|| {
                            ReplicationError::protocol(format!(
                                "{cmd}: neither COPY nor a next-timeline row"
                            ))
                        })?;
                        return parse_next_timeline_row(&row).map(Some);
                    }
                    _ => {
                        return Err(ReplicationError::protocol(format!(
                            "unexpected message answering {cmd}"
                        )));
                    }
                },
            }
        }
    }

    /// Sends Terminate and closes the socket.
    pub async fn close(mut self) {
        self.conn.shutdown().await;
    }
}

/// The `(next_tli int8, next_tli_startpos text)` row sent after a historic
/// timeline has been streamed to its end.
pub(crate) fn parse_next_timeline_row(row: &[Option<Bytes>]) -> Result<(TimeLineId, Lsn)> {
    let text = |i: usize| {
        row.get(i)
            .and_then(|v| v.as_ref())
            .and_then(|b| std::str::from_utf8(b).ok())
            .ok_or_else(|| ReplicationError::protocol("end-of-timeline row is missing a column"))
    };
    let tli = text(0)?
        .parse()
        .map_err(|_| ReplicationError::protocol("end-of-timeline row: next_tli is not a number"))?;
    let lsn = text(1)?
        .parse()
        .map_err(|e| ReplicationError::protocol(format!("end-of-timeline row: {e}")))?;
    Ok((tli, lsn))
}

/// Slot names are `[a-z0-9_]{1,63}` (ReplicationSlotValidateName in slot.c);
/// checking here also keeps them safe to splice into commands.
fn check_slot_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ReplicationError::Config(format!(
            "replication slot name {name:?} is invalid: use 1 to 63 lower-case letters, digits and underscores"
        )))
    }
}

/// Maps the server's slot errors to typed ones (SQLSTATEs from slot.c:
/// 42704 undefined_object, 42710 duplicate_object, 55006 object_in_use).
fn slot_error(slot: &str, e: ReplicationError) -> ReplicationError {
    match e {
        ReplicationError::Server { error, command } => match error.code.as_str() {
            "42704" => ReplicationError::SlotMissing {
                slot: slot.to_owned(),
                error,
            },
            "42710" => ReplicationError::SlotExists {
                slot: slot.to_owned(),
                error,
            },
            "55006" => ReplicationError::SlotActive {
                slot: slot.to_owned(),
                error,
            },
            _ => ReplicationError::Server { command, error },
        },
        other => other,
    }
}
