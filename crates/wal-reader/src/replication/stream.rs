//! `WalStream`: one `START_REPLICATION` in COPY BOTH mode.
//!
//! ```text
//!  server                                   client (WalStream::next)
//!  CopyData 'w' start walEnd time bytes ──▶ WalEvent::XLogData (checked contiguous)
//!  CopyData 'k' walEnd time reply      ──▶ answer 'r' at once if reply=1, WalEvent::Keepalive
//!                                      ◀── CopyData 'r' write flush apply time reply
//!                                          (also every status_interval, and on send_status)
//!  CopyDone (historic timeline ended)  ──▶ send CopyDone, read the
//!  DataRow (next_tli, next_tli_startpos)   result row up to ReadyForQuery
//!  CommandComplete, ReadyForQuery      ──▶ WalEvent::EndOfTimeline; stop() returns the client
//! ```
//!
//! The positions reported in `r` are the caller's (`set_positions`), never
//! this module's guess: a physical slot's `restart_lsn` follows `flush`
//! (PhysicalConfirmReceivedLocation in walsender.c), so it must only cover
//! WAL the caller has made durable downstream. They never move backwards.
//!
//! The one exception is the answer to a keepalive that asks for a reply
//! (the walsender's ping): it reports `write` = everything received and
//! `flush` = `apply` = 0 (InvalidXLogRecPtr), as pg_receivewal does without
//! a slot. A shutting-down walsender waits in `WalSndDone` until the
//! standby's flush — or its write, when flush is invalid — equals what it
//! sent, pinging each round; a flush held back behind the destination
//! would hold the source's shutdown for as long as the destination is
//! behind, and spin both sides meanwhile. An invalid flush moves no slot
//! (ProcessStandbyReplyMessage confirms only a valid one), so the slot still
//! holds the WAL not yet applied, and the next ordinary update reports the
//! caller's flush again.

use std::time::Duration;

use bytes::Bytes;
use postgres_protocol::message::{backend, frontend};
use tokio::time::Instant;
use walshadow_types::{Lsn, TimeLineId};

use super::client::{ReplicationClient, parse_next_timeline_row};
use super::conn::{BackendMessage, data_row, db_error, server_error};
use super::error::{ReplicationError, Result};
use super::messages::{PgTimestamp, ServerCopyMessage, parse_server_copy, standby_status_update};

/// What a [`WalStream`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalEvent {
    /// WAL bytes `[start, start + data.len())`. Consecutive events are
    /// contiguous (checked).
    XLogData {
        start: Lsn,
        /// The server's flush position when it sent this.
        wal_end: Lsn,
        send_time: PgTimestamp,
        data: Bytes,
    },
    /// A server keepalive (already answered if it asked for a reply).
    Keepalive {
        wal_end: Lsn,
        send_time: PgTimestamp,
    },
    /// The streamed timeline ended at `switch_lsn`; WAL continues on
    /// `next_tli` from there. The stream yields nothing more.
    EndOfTimeline {
        next_tli: TimeLineId,
        switch_lsn: Lsn,
    },
}

/// Positions reported to the server in standby status updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StandbyPositions {
    pub write: Lsn,
    pub flush: Lsn,
    pub apply: Lsn,
}

impl StandbyPositions {
    /// Component-wise maximum: positions never go backwards.
    pub fn advance(&mut self, other: StandbyPositions) {
        self.write = self.write.max(other.write);
        self.flush = self.flush.max(other.flush);
        self.apply = self.apply.max(other.apply);
    }
}

#[derive(Debug)]
enum State {
    Streaming,
    /// The walsender skipped COPY mode; the end is known already.
    EndPending(TimeLineId, Lsn),
    /// The server's error arrived; what follows it is read up to
    /// ReadyForQuery before the error is returned. Kept in the state, so a
    /// call cancelled while reading (the caller's `select!` taking another
    /// branch) loses no error: the next call returns it.
    Failed(crate::replication::DbError),
    /// Back in command mode.
    Ended,
}

/// A running `START_REPLICATION ... PHYSICAL`.
#[derive(Debug)]
pub struct WalStream {
    client: ReplicationClient,
    state: State,
    timeline: TimeLineId,
    /// Where the next XLogData must start.
    next_lsn: Lsn,
    positions: StandbyPositions,
    status_interval: Duration,
    next_status_at: Instant,
}

impl WalStream {
    pub(crate) fn new(client: ReplicationClient, timeline: TimeLineId, start: Lsn) -> Self {
        let status_interval = client.config.status_interval;
        WalStream {
            client,
            state: State::Streaming,
            timeline,
            next_lsn: start,
            positions: StandbyPositions::default(),
            status_interval,
            next_status_at: Instant::now() + status_interval,
        }
    }

    pub(crate) fn ended(
        client: ReplicationClient,
        timeline: TimeLineId,
        start: Lsn,
        end: (TimeLineId, Lsn),
    ) -> Self {
        let mut s = Self::new(client, timeline, start);
        s.state = State::EndPending(end.0, end.1);
        s
    }

    /// The timeline requested in `START_REPLICATION` (0: the server's current).
    pub fn timeline(&self) -> TimeLineId {
        self.timeline
    }

    /// The LSN the next XLogData starts at (end of everything received).
    pub fn received_upto(&self) -> Lsn {
        self.next_lsn
    }

    pub fn positions(&self) -> StandbyPositions {
        self.positions
    }

    /// Sets the positions for the next status update. Each only moves
    /// forward; a lower value than already reported is ignored.
    pub fn set_positions(&mut self, write: Lsn, flush: Lsn, apply: Lsn) {
        self.positions.advance(StandbyPositions {
            write,
            flush,
            apply,
        });
    }

    pub(crate) fn set_all_positions(&mut self, p: StandbyPositions) {
        self.positions.advance(p);
    }

    /// How often a status update goes out unprompted (default 10 s).
    pub fn set_status_interval(&mut self, interval: Duration) {
        self.status_interval = interval;
        self.next_status_at = Instant::now() + interval;
    }

    /// Sends a standby status update now.
    pub async fn send_status(&mut self, reply_requested: bool) -> Result<()> {
        if !matches!(self.state, State::Streaming) {
            return Ok(());
        }
        self.queue_status(reply_requested)?;
        self.client.conn.flush().await
    }

    fn queue_status(&mut self, reply_requested: bool) -> Result<()> {
        let p = self.positions;
        let msg = standby_status_update(
            p.write,
            p.flush,
            p.apply,
            PgTimestamp::now(),
            reply_requested,
        );
        frontend::CopyData::new(msg)?.write(self.client.conn.buf());
        self.next_status_at = Instant::now() + self.status_interval;
        Ok(())
    }

    /// The answer to a ping: received so far, and no flush (see the
    /// module doc). The next periodic update is not moved: it carries the
    /// caller's flush again.
    fn queue_ping_answer(&mut self) -> Result<()> {
        let msg = standby_status_update(
            self.next_lsn,
            Lsn::INVALID,
            Lsn::INVALID,
            PgTimestamp::now(),
            false,
        );
        frontend::CopyData::new(msg)?.write(self.client.conn.buf());
        Ok(())
    }

    /// The next event; `Ok(None)` once the stream has ended.
    /// Cancel-safe: dropping the future loses no received data.
    pub async fn next(&mut self) -> Result<Option<WalEvent>> {
        loop {
            match &self.state {
                State::Ended => return Ok(None),
                &State::EndPending(next_tli, switch_lsn) => {
                    self.state = State::Ended;
                    return Ok(Some(WalEvent::EndOfTimeline {
                        next_tli,
                        switch_lsn,
                    }));
                }
                State::Failed(error) => {
                    let error = error.clone();
                    // ReadyForQuery follows; the connection stays usable.
                    let _ = self.read_to_ready().await;
                    self.state = State::Ended;
                    return Err(server_error("START_REPLICATION", error));
                }
                State::Streaming => {}
            }
            if self.client.conn.has_pending_writes() {
                self.client.conn.flush().await?;
            }
            let msg = tokio::select! {
                m = self.client.conn.read_message() => m?,
                () = tokio::time::sleep_until(self.next_status_at) => {
                    self.queue_status(false)?;
                    continue;
                }
            };
            match msg {
                BackendMessage::CopyBothResponse => {
                    return Err(ReplicationError::protocol(
                        "second CopyBothResponse while streaming",
                    ));
                }
                BackendMessage::Other(backend::Message::CopyData(body)) => {
                    match parse_server_copy(body.into_bytes())? {
                        ServerCopyMessage::XLogData {
                            start,
                            wal_end,
                            send_time,
                            data,
                        } => {
                            if start != self.next_lsn {
                                return Err(ReplicationError::protocol(format!(
                                    "WAL stream is not contiguous: expected data at {}, got {start}",
                                    self.next_lsn
                                )));
                            }
                            self.next_lsn =
                                start.checked_add(data.len() as u64).ok_or_else(|| {
                                    ReplicationError::protocol(
                                        "XLogData past the end of the LSN space",
                                    )
                                })?;
                            return Ok(Some(WalEvent::XLogData {
                                start,
                                wal_end,
                                send_time,
                                data,
                            }));
                        }
                        ServerCopyMessage::Keepalive {
                            wal_end,
                            send_time,
                            reply_requested,
                        } => {
                            if reply_requested {
                                self.queue_ping_answer()?;
                                self.client.conn.flush().await?;
                            }
                            return Ok(Some(WalEvent::Keepalive { wal_end, send_time }));
                        }
                    }
                }
                BackendMessage::Other(backend::Message::CopyDone) => {
                    // The walsender reached the end of a historic timeline.
                    // It accepts nothing but CopyDone (or Terminate) now.
                    frontend::copy_done(self.client.conn.buf());
                    self.client.conn.flush().await?;
                    let end = self.finish_copy().await?;
                    self.state = State::Ended;
                    let (next_tli, switch_lsn) = end.ok_or_else(|| ReplicationError::ConnectionClosed {
                        context: " (streaming ended without a timeline switch; the server may be shutting down)".into(),
                    })?;
                    return Ok(Some(WalEvent::EndOfTimeline {
                        next_tli,
                        switch_lsn,
                    }));
                }
                BackendMessage::Other(backend::Message::ErrorResponse(e)) => {
                    // Returned by the state's arm above, cancel-safely.
                    self.state = State::Failed(db_error(&e));
                }
                BackendMessage::Other(backend::Message::NoticeResponse(_)) => {}
                BackendMessage::Other(backend::Message::ParameterStatus(p)) => {
                    self.client
                        .conn
                        .params
                        .insert(p.name()?.to_owned(), p.value()?.to_owned());
                }
                BackendMessage::Other(backend::Message::CommandComplete(_)) => {
                    // A walsender shutting down ends streaming with
                    // CommandComplete once the standby has everything it
                    // sent (WalSndDone), then closes the connection.
                    self.state = State::Ended;
                    return Err(ReplicationError::ConnectionClosed {
                        context: " (the server ended streaming: it is shutting down)".into(),
                    });
                }
                BackendMessage::Other(_) => {
                    return Err(ReplicationError::protocol(
                        "unexpected message while streaming",
                    ));
                }
            }
        }
    }

    /// After both CopyDones: optional next-timeline row, CommandComplete,
    /// ReadyForQuery. CopyData still in flight before the server's CopyDone
    /// cannot follow it, so any here is a protocol error.
    async fn finish_copy(&mut self) -> Result<Option<(TimeLineId, Lsn)>> {
        let mut row = None;
        loop {
            match self.client.conn.read_message().await? {
                BackendMessage::Other(m) => match m {
                    backend::Message::RowDescription(_)
                    | backend::Message::CommandComplete(_)
                    | backend::Message::NoticeResponse(_)
                    | backend::Message::ParameterStatus(_) => {}
                    backend::Message::DataRow(r) => {
                        row = Some(parse_next_timeline_row(&data_row(&r)?)?)
                    }
                    backend::Message::ErrorResponse(e) => {
                        let error = db_error(&e);
                        let _ = self.read_to_ready().await;
                        return Err(server_error("START_REPLICATION (ending)", error));
                    }
                    backend::Message::ReadyForQuery(_) => return Ok(row),
                    _ => {
                        return Err(ReplicationError::protocol(
                            "unexpected message after CopyDone",
                        ));
                    }
                },
                BackendMessage::CopyBothResponse => {
                    return Err(ReplicationError::protocol(
                        "CopyBothResponse after CopyDone",
                    ));
                }
            }
        }
    }

    async fn read_to_ready(&mut self) -> Result<()> {
        loop {
            if let BackendMessage::Other(backend::Message::ReadyForQuery(_)) =
                self.client.conn.read_message().await?
            {
                return Ok(());
            }
        }
    }

    /// Returns the client in command mode. While still streaming this ends
    /// the stream from our side (CopyDone), discarding WAL still in flight;
    /// after `EndOfTimeline` it just hands the client back.
    pub async fn stop(mut self) -> Result<ReplicationClient> {
        if let State::Streaming = self.state {
            frontend::copy_done(self.client.conn.buf());
            self.client.conn.flush().await?;
            loop {
                match self.client.conn.read_message().await? {
                    BackendMessage::Other(backend::Message::CopyDone) => break,
                    BackendMessage::Other(
                        backend::Message::CopyData(_) | backend::Message::NoticeResponse(_),
                    ) => {}
                    BackendMessage::Other(backend::Message::ErrorResponse(e)) => {
                        let error = db_error(&e);
                        let _ = self.read_to_ready().await;
                        return Err(server_error("START_REPLICATION (stopping)", error));
                    }
                    _ => {
                        return Err(ReplicationError::protocol(
                            "unexpected message while stopping",
                        ));
                    }
                }
            }
            self.finish_copy().await?;
            self.state = State::Ended;
        }
        Ok(self.client)
    }
}
