//! One standby connection: startup, replication commands, and the CopyBoth stream.
//!
//! While streaming, a reader task owns the socket's read half and turns the standby's
//! messages into [`Event`]s (and updates the positions watch directly); the session owns
//! the write half and sends WAL as the store's durable end moves, keepalives when it
//! needs the standby's position, and answers reply requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use walshadow_types::Lsn;

use super::command::{self, ReplCommand};
use super::messages::{
    self as msg, BYTEAOID, FrontendMessage, INT8OID, MAX_FRONTEND_MESSAGE, ProtocolError, Severity,
    StandbyMessage, StartupPacket, TEXTOID,
};
use super::{Shared, StandbyPositions};
use crate::segment_store::{StoreError, segment_file_name};

/// walsender.c `MAX_SEND_SIZE`: 16 WAL pages per `w` message.
const MAX_SEND_SIZE: u64 = 16 * 8192;
/// `XLOG_BLCKSZ`, as the offsets here count.
const XLOG_BLCKSZ: u64 = walshadow_pg_format::page::XLOG_BLCKSZ as u64;
/// Backoff of the replay pings while the standby's apply is behind what was sent.
const PING_BACKOFF: walshadow_types::Backoff =
    walshadow_types::Backoff::new(Duration::from_millis(1), Duration::from_millis(32));
/// When to ask the standby where it is next: soon (backing off) while its
/// apply is behind what was sent, at the status interval once it caught up.
#[derive(Debug)]
struct Pings {
    /// The standby's apply position, as it last said.
    last_apply: Lsn,
    /// When the next keepalive asking for a reply goes out.
    at: Instant,
    backoff: walshadow_types::Backoff,
    status_interval: Duration,
}

impl Pings {
    fn new(last_apply: Lsn, status_interval: Duration) -> Pings {
        Pings {
            last_apply,
            at: Instant::now(),
            backoff: PING_BACKOFF,
            status_interval,
        }
    }

    /// The standby said where it applied to.
    fn applied(&mut self, apply: Lsn, sent: Lsn) {
        self.last_apply = apply;
        self.schedule(sent);
    }

    /// The next ping after one sent now (or a reply heard now).
    fn schedule(&mut self, sent: Lsn) {
        self.at = if self.last_apply >= sent {
            self.backoff.reset();
            Instant::now() + self.status_interval
        } else {
            Instant::now() + self.backoff.next_delay()
        };
    }

    /// Ask right away (idle after data).
    fn now(&mut self) {
        self.backoff.reset();
        self.at = Instant::now();
    }
}

/// How many `START_REPLICATION`s the status keeps.
const STREAMS_KEPT: usize = 32;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("the standby closed the connection in the middle of a message")]
    UnexpectedEof,
    #[error("the standby sent nothing for {0:?}")]
    Timeout(Duration),
    #[error("reading the store: the blocking task failed")]
    ReadTask,
}

/// Buffers the read half and cuts it into messages, with checked lengths.
#[derive(Debug)]
struct FrameReader {
    r: OwnedReadHalf,
    buf: BytesMut,
}

impl FrameReader {
    /// Ensures `n` buffered bytes; `false` on EOF before any byte of them.
    async fn fill(&mut self, n: usize) -> Result<bool, SessionError> {
        while self.buf.len() < n {
            let before = self.buf.len();
            self.buf.reserve(n - before);
            if self.r.read_buf(&mut self.buf).await? == 0 {
                return if before == 0 {
                    Ok(false)
                } else {
                    Err(SessionError::UnexpectedEof)
                };
            }
        }
        Ok(true)
    }

    /// The startup packet body (after its length), `None` on EOF.
    async fn startup(&mut self) -> Result<Option<Bytes>, SessionError> {
        if !self.fill(4).await? {
            return Ok(None);
        }
        let len = self.buf.get_u32();
        let len = body_len("startup packet", i64::from(len), 4)?;
        if !self.fill(len).await? && len > 0 {
            return Err(SessionError::UnexpectedEof);
        }
        Ok(Some(self.buf.split_to(len).freeze()))
    }

    /// The next `(tag, body)`, `None` on EOF between messages.
    async fn message(&mut self) -> Result<Option<(u8, Bytes)>, SessionError> {
        if !self.fill(5).await? {
            return Ok(None);
        }
        let tag = self.buf.get_u8();
        let len = body_len("message", i64::from(self.buf.get_u32()), 4)?;
        if len > 0 && !self.fill(len).await? {
            return Err(SessionError::UnexpectedEof);
        }
        Ok(Some((tag, self.buf.split_to(len).freeze())))
    }
}

/// Body length from a length field that counts itself (`header` bytes).
fn body_len(what: &'static str, len: i64, header: i64) -> Result<usize, ProtocolError> {
    if len < header || len - header > MAX_FRONTEND_MESSAGE as i64 {
        return Err(ProtocolError::BadLength { what, len });
    }
    usize::try_from(len - header).map_err(|_| ProtocolError::BadLength { what, len })
}

/// Messages from the reader task to the session while streaming.
#[derive(Debug)]
enum Event {
    Status {
        apply: Lsn,
        reply_requested: bool,
    },
    Heard,
    /// CopyDone: the reader stops and hands the read half back.
    CopyDone(Box<FrameReader>),
    Terminate,
    Eof,
    Failed(SessionError),
}

struct Session {
    shared: Arc<Shared>,
    w: OwnedWriteHalf,
    out: BytesMut,
    identified: bool,
}

/// Startup, and the password when one is asked, must be done within this
/// long: a peer that stalls there holds a connection, never the slot.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Tells a peer that is not the shadow why it is refused, then closes.
/// Its startup packet is read (and dropped) first, as a server would, so
/// a client like libpq that writes before it reads sees the error rather
/// than a reset.
pub(super) async fn refuse(mut stream: UnixStream, why: String) {
    let mut first = [0u8; 1024];
    let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut first)).await;
    let mut out = BytesMut::new();
    msg::error_response(
        &mut out,
        Severity::Fatal,
        "28000",
        &format!("walshadow's feeder serves only the shadow it started: {why}"),
        None,
    );
    let _ = tokio::time::timeout(STARTUP_TIMEOUT, stream.write_all(&out)).await;
}

pub(super) async fn run(stream: UnixStream, shared: Arc<Shared>) {
    let (r, w) = stream.into_split();
    let mut reader = FrameReader {
        r,
        buf: BytesMut::with_capacity(8192),
    };
    let mut session = Session {
        shared: Arc::clone(&shared),
        w,
        out: BytesMut::with_capacity(64 * 1024),
        identified: false,
    };
    let mut holds_slot = false;
    let result = async {
        let started = tokio::time::timeout(
            STARTUP_TIMEOUT,
            session.startup(&mut reader, &mut holds_slot),
        )
        .await
        .map_err(|_| SessionError::Timeout(STARTUP_TIMEOUT))?;
        let Some(app) = started? else {
            return Ok(());
        };
        shared.status.send_modify(|s| {
            s.connected = true;
            s.application_name = Some(app.clone());
        });
        tracing::info!(application_name = %app, "feeder: standby connected");
        session.commands(reader).await
    }
    .await;
    if let Err(e) = &result {
        tracing::warn!(error = %e, "feeder: standby session ended");
    }
    if holds_slot {
        shared.status.send_modify(|s| {
            s.connected = false;
            s.application_name = None;
        });
        // A standby that comes back (restarted, maybe after a crash) replays
        // again from its last restartpoint: what this one reported no longer
        // holds, and `wait_for_replay` must wait for the next one's reports.
        shared.positions.send_replace(StandbyPositions::default());
        shared.busy.store(false, Ordering::Release);
    }
}

impl Session {
    async fn send(&mut self) -> Result<(), SessionError> {
        if !self.out.is_empty() {
            self.w.write_all(&self.out).await?;
            self.out.clear();
        }
        Ok(())
    }

    async fn fatal(&mut self, sqlstate: &str, text: &str) -> Result<(), SessionError> {
        msg::error_response(&mut self.out, Severity::Fatal, sqlstate, text, None);
        self.send().await
    }

    fn error(&mut self, sqlstate: &str, text: &str, detail: Option<&str>) {
        msg::error_response(&mut self.out, Severity::Error, sqlstate, text, detail);
    }

    /// Startup up to ReadyForQuery. `Some(application_name)` when the standby is
    /// admitted, `None` when the connection ended here.
    async fn startup(
        &mut self,
        reader: &mut FrameReader,
        holds_slot: &mut bool,
    ) -> Result<Option<String>, SessionError> {
        let (minor, params) = loop {
            let Some(body) = reader.startup().await? else {
                return Ok(None);
            };
            match msg::parse_startup(&body)? {
                // No TLS or GSS on a private unix socket: 'N' and the client goes on.
                StartupPacket::SslRequest | StartupPacket::GssEncRequest => {
                    self.w.write_all(b"N").await?;
                }
                StartupPacket::CancelRequest => return Ok(None),
                StartupPacket::Startup {
                    major: 3,
                    minor,
                    params,
                } => break (minor, params),
                StartupPacket::Startup { major, minor, .. } => {
                    let text = format!(
                        "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"
                    );
                    self.fatal("0A000", &text).await?;
                    return Ok(None);
                }
            }
        };
        let param = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let replication = param("replication").unwrap_or("false").to_ascii_lowercase();
        if !matches!(replication.as_str(), "true" | "on" | "yes" | "1") {
            self.fatal(
                "08004",
                "walshadow's feeder serves physical replication only (connect with replication=true)",
            )
            .await?;
            return Ok(None);
        }
        let unsupported: Vec<String> = params
            .iter()
            .filter(|(k, _)| k.starts_with("_pq_."))
            .map(|(k, _)| k.clone())
            .collect();
        if minor > 0 || !unsupported.is_empty() {
            msg::negotiate_protocol_version(&mut self.out, 0, &unsupported);
        }
        // The password comes before the slot: a peer without it cannot
        // keep the shadow out.
        if let Some(want) = self.shared.config.password.clone() {
            msg::authentication_cleartext_password(&mut self.out);
            self.send().await?;
            let given = match reader.message().await? {
                Some((b'p', body)) => msg::parse_password(&body)?,
                Some(_) | None => String::new(),
            };
            if !walshadow_types::same_secret(given.as_bytes(), want.as_bytes()) {
                tracing::warn!("feeder: refused a standby that did not give this start's password");
                self.fatal(
                    "28P01",
                    "password authentication failed: walshadow's feeder serves only the shadow it started",
                )
                .await?;
                return Ok(None);
            }
        }
        if self
            .shared
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.fatal(
                "53300",
                "walshadow's feeder serves one standby at a time, and one is connected",
            )
            .await?;
            return Ok(None);
        }
        *holds_slot = true;
        let user = param("user").unwrap_or("").to_owned();
        let app = param("application_name").unwrap_or("").to_owned();

        static KEYS: AtomicU32 = AtomicU32::new(1);
        let cfg = &self.shared.config;
        msg::authentication_ok(&mut self.out);
        for (name, value) in [
            ("application_name", app.as_str()),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("in_hot_standby", "off"),
            ("integer_datetimes", "on"),
            ("IntervalStyle", "postgres"),
            ("is_superuser", "on"),
            ("server_encoding", "UTF8"),
            ("server_version", cfg.server_version.as_str()),
            ("session_authorization", user.as_str()),
            ("standard_conforming_strings", "on"),
            ("TimeZone", "UTC"),
        ] {
            msg::parameter_status(&mut self.out, name, value);
        }
        msg::backend_key_data(
            &mut self.out,
            std::process::id(),
            KEYS.fetch_add(1, Ordering::Relaxed),
        );
        msg::ready_for_query(&mut self.out);
        self.send().await?;
        Ok(Some(app))
    }

    /// The simple-query command loop, until Terminate or EOF.
    async fn commands(&mut self, mut reader: FrameReader) -> Result<(), SessionError> {
        let mut in_error = false;
        loop {
            let Some((tag, body)) = reader.message().await? else {
                return Ok(());
            };
            match msg::parse_frontend(tag, &body)? {
                FrontendMessage::Terminate => return Ok(()),
                // Outside COPY these are accepted and ignored (postgres.c PostgresMain).
                FrontendMessage::CopyData(_)
                | FrontendMessage::CopyDone
                | FrontendMessage::CopyFail(_) => {}
                FrontendMessage::Other(b'S') => {
                    in_error = false;
                    msg::ready_for_query(&mut self.out);
                    self.send().await?;
                }
                FrontendMessage::Other(_) => {
                    if !in_error {
                        self.error(
                            "08P01",
                            "extended query protocol not supported in a replication connection",
                            None,
                        );
                        self.send().await?;
                        in_error = true;
                    }
                }
                FrontendMessage::Query(q) => {
                    match self.query(&q, reader).await? {
                        Some(r) => reader = r,
                        None => return Ok(()),
                    }
                    msg::ready_for_query(&mut self.out);
                    self.send().await?;
                }
            }
        }
    }

    /// Runs one query; hands the reader back unless the connection ended.
    async fn query(
        &mut self,
        q: &str,
        reader: FrameReader,
    ) -> Result<Option<FrameReader>, SessionError> {
        let cmd = match command::parse(q) {
            Ok(c) => c,
            Err(e) => {
                self.error("42601", &e.to_string(), None);
                return Ok(Some(reader));
            }
        };
        tracing::debug!(command = ?cmd, "feeder: command");
        match cmd {
            ReplCommand::Empty => msg::empty_query_response(&mut self.out),
            ReplCommand::IdentifySystem => self.identify_system(),
            ReplCommand::TimelineHistory(tli) => self.timeline_history(tli)?,
            ReplCommand::Show(name) => self.show(&name),
            ReplCommand::Unsupported(word) => {
                let text = if word.contains('_') {
                    format!("replication command {word} is not supported by walshadow's feeder")
                } else {
                    "cannot execute SQL commands in WAL sender for physical replication".into()
                };
                self.error("0A000", &text, None);
            }
            ReplCommand::StartReplication {
                slot,
                start,
                timeline,
            } => {
                if !self.identified {
                    self.error(
                        "55000",
                        "IDENTIFY_SYSTEM has not been run before START_REPLICATION",
                        None,
                    );
                    return Ok(Some(reader));
                }
                if let Some(slot) = slot {
                    // The feeder keeps WAL by its own rules; the slot name is accepted so a
                    // standby configured with primary_slot_name still streams.
                    tracing::debug!(%slot, "feeder: ignoring replication slot");
                }
                return self.start_replication(start, timeline, reader).await;
            }
        }
        Ok(Some(reader))
    }

    /// walsender.c `IdentifySystem`.
    fn identify_system(&mut self) {
        let end = self.shared.store.durable_end();
        self.identified = true;
        let sysid = self.shared.config.system_identifier.to_string();
        let tli = end.tli.to_string();
        let pos = end.lsn.to_string();
        msg::row_description(
            &mut self.out,
            &[
                ("systemid", TEXTOID),
                ("timeline", INT8OID),
                ("xlogpos", TEXTOID),
                ("dbname", TEXTOID),
            ],
        );
        msg::data_row(
            &mut self.out,
            &[
                Some(sysid.as_bytes()),
                Some(tli.as_bytes()),
                Some(pos.as_bytes()),
                None,
            ],
        );
        msg::command_complete(&mut self.out, "IDENTIFY_SYSTEM");
    }

    /// walsender.c `SendTimeLineHistory`.
    fn timeline_history(&mut self, tli: u32) -> Result<(), SessionError> {
        let name = crate::segment_store::history_file_name(tli);
        match self.shared.store.history(tli)? {
            Some(content) => {
                msg::row_description(
                    &mut self.out,
                    &[("filename", TEXTOID), ("content", BYTEAOID)],
                );
                msg::data_row(&mut self.out, &[Some(name.as_bytes()), Some(&content)]);
                msg::command_complete(&mut self.out, "TIMELINE_HISTORY");
            }
            None => self.error(
                "58P01",
                &format!("could not open file \"pg_wal/{name}\": No such file or directory"),
                None,
            ),
        }
        Ok(())
    }

    /// `SHOW` of the settings replication clients ask for (pg_basebackup and
    /// pg_receivewal read `wal_segment_size`; the walreceiver itself asks nothing).
    fn show(&mut self, name: &str) {
        let cfg = &self.shared.config;
        let value = match name {
            "wal_segment_size" => Some(format_bytes(self.shared.store.segment_size())),
            "server_version" => Some(cfg.server_version.clone()),
            "server_version_num" => Some(server_version_num(&cfg.server_version).to_string()),
            "integer_datetimes" => Some("on".into()),
            "wal_block_size" => Some(XLOG_BLCKSZ.to_string()),
            "data_directory_mode" => Some("0700".into()),
            "server_encoding" | "client_encoding" => Some("UTF8".into()),
            "timezone" => Some("UTC".into()),
            "datestyle" => Some("ISO, MDY".into()),
            "standard_conforming_strings" => Some("on".into()),
            _ => None,
        };
        match value {
            Some(v) => {
                msg::row_description(&mut self.out, &[(name, TEXTOID)]);
                msg::data_row(&mut self.out, &[Some(v.as_bytes())]);
                msg::command_complete(&mut self.out, "SHOW");
            }
            None => self.error(
                "42704",
                &format!("unrecognized configuration parameter \"{name}\""),
                None,
            ),
        }
    }

    /// walsender.c `StartReplication` for a physical standby.
    async fn start_replication(
        &mut self,
        start: Lsn,
        requested_tli: u32,
        reader: FrameReader,
    ) -> Result<Option<FrameReader>, SessionError> {
        let store = Arc::clone(&self.shared.store);
        let current = store.durable_end();
        let tli = if requested_tli == 0 {
            current.tli
        } else {
            requested_tli
        };
        // (switch point, next timeline) when streaming a timeline that has ended.
        let mut historic: Option<(Lsn, u32)> = None;
        if tli != current.tli {
            match timeline_end(&store, tli) {
                Some((switch, next)) => {
                    if start > switch {
                        self.error(
                            "XX000",
                            &format!(
                                "requested starting point {start} on timeline {tli} is not in this server's history"
                            ),
                            Some(&format!(
                                "This server's history forked from timeline {tli} at {switch}."
                            )),
                        );
                        return Ok(Some(reader));
                    }
                    historic = Some((switch, next));
                }
                None => {
                    self.error(
                        "XX000",
                        &format!("requested timeline {tli} is not in this server's history"),
                        None,
                    );
                    return Ok(Some(reader));
                }
            }
        }
        self.shared.status.send_modify(|s| {
            if s.streams.len() >= STREAMS_KEPT {
                s.streams.remove(0);
            }
            s.streams.push((tli, start));
            s.sent = start;
        });
        tracing::info!(%start, tli, "feeder: START_REPLICATION");

        let mut reader = reader;
        // If there is nothing to stream on an old timeline, don't even enter COPY mode.
        if historic.is_none_or(|(switch, _)| start < switch) {
            msg::copy_both_response(&mut self.out);
            if historic.is_none() && start > current.lsn {
                self.error(
                    "XX000",
                    &format!(
                        "requested starting point {start} is ahead of the WAL flush position of this server {}",
                        current.lsn
                    ),
                    None,
                );
                return Ok(Some(reader));
            }
            if start < store.start() {
                let seg = start.segment_number(store.segment_size());
                let name = segment_file_name(tli, seg, store.segment_size());
                self.error(
                    "58P01",
                    &format!("requested WAL segment {name} has already been removed"),
                    None,
                );
                return Ok(Some(reader));
            }
            self.send().await?;
            match self.stream(start, tli, historic, reader).await? {
                Some((r, ended)) => {
                    reader = r;
                    historic = ended;
                }
                None => return Ok(None),
            }
        }
        if let Some((switch, next)) = historic {
            // The copy ended at the end of an old timeline: tell the standby which one
            // comes next.
            let next_s = next.to_string();
            let switch_s = switch.to_string();
            msg::row_description(
                &mut self.out,
                &[("next_tli", INT8OID), ("next_tli_startpos", TEXTOID)],
            );
            msg::data_row(
                &mut self.out,
                &[Some(next_s.as_bytes()), Some(switch_s.as_bytes())],
            );
        }
        msg::command_complete(&mut self.out, "START_STREAMING");
        // The duplicate, which libpqrcv_endstreaming expects.
        msg::command_complete(&mut self.out, "START_REPLICATION");
        Ok(Some(reader))
    }

    /// The CopyBoth phase. Returns the reader after both sides sent CopyDone, with the
    /// `(switch point, next timeline)` when the timeline had ended; `None` when the
    /// standby went away.
    async fn stream(
        &mut self,
        start: Lsn,
        tli: u32,
        mut historic: Option<(Lsn, u32)>,
        reader: FrameReader,
    ) -> Result<Option<(FrameReader, Option<(Lsn, u32)>)>, SessionError> {
        let store = Arc::clone(&self.shared.store);
        let cfg = self.shared.config.clone();
        let mut durable = store.subscribe();
        let mut ceiling = self.shared.ceiling.subscribe();
        let mut shutdown = self.shared.shutdown.clone();
        let (tx, mut events) = mpsc::unbounded_channel();
        let reader_task = tokio::spawn(read_standby(reader, tx, Arc::clone(&self.shared)));
        let _abort_reader = AbortOnDrop(reader_task.abort_handle());

        let mut sent = start;
        let mut done_sending = false;
        let mut returned_reader = None;
        let mut pings = Pings::new(self.shared.positions.borrow().apply, cfg.status_interval);
        let mut last_heard = Instant::now();
        let mut buf = vec![0u8; MAX_SEND_SIZE as usize];

        loop {
            // Whatever the standby said since the last turn.
            loop {
                let ev = match events.try_recv() {
                    Ok(ev) => ev,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    // The reader ends after handing back CopyDone; otherwise it is gone.
                    Err(mpsc::error::TryRecvError::Disconnected) if returned_reader.is_some() => {
                        break;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => return Ok(None),
                };
                match self
                    .on_event(ev, sent, &mut done_sending, &mut last_heard)
                    .await?
                {
                    EventOutcome::Continue => {}
                    EventOutcome::Apply(apply) => pings.applied(apply, sent),
                    EventOutcome::CopyDone(r) => returned_reader = Some(r),
                    EventOutcome::Gone => return Ok(None),
                }
            }
            if let Some(r) = returned_reader.take() {
                if done_sending {
                    return Ok(Some((*r, historic)));
                }
                returned_reader = Some(r);
            }

            let end = *durable.borrow_and_update();
            if historic.is_none() && end.tli != tli {
                // The store moved to a new timeline: this one now ends at its switch
                // point (a cascading walsender does the same in XLogSendPhysical).
                match timeline_end(&store, tli) {
                    Some((switch, next)) if switch >= sent => historic = Some((switch, next)),
                    Some((switch, next)) => {
                        self.error(
                            "XX000",
                            &format!(
                                "timeline {tli} ended at {switch} (timeline {next} follows), \
                                 but WAL up to {sent} was already sent; the standby has diverged \
                                 and must be rebuilt"
                            ),
                            None,
                        );
                        self.send().await?;
                        return Ok(None);
                    }
                    None => return Ok(None),
                }
            }
            let limit = match historic {
                Some((switch, _)) => switch,
                None => end.lsn,
            };
            // The replay ceiling caps what is sent (and advertised), never
            // the end of an old timeline. One byte more than the ceiling: a
            // standby reads a record only once it holds a byte past its end
            // (xlogrecovery.c WaitForWALToBecomeAvailable, `RecPtr <
            // flushedUpto`), and one byte of the next record never completes
            // it.
            let cap = limit.min(Lsn(ceiling.borrow_and_update().0.saturating_add(1)));

            if !done_sending && sent < cap {
                let limit = cap;
                let mut upto = limit.0.min(sent.0 + MAX_SEND_SIZE);
                if upto < limit.0 {
                    // Catching up: end on a page boundary (XLogSendPhysical does).
                    let rounded = upto - upto % XLOG_BLCKSZ;
                    if rounded > sent.0 {
                        upto = rounded;
                    }
                }
                let len = usize::try_from(upto - sent.0).unwrap_or(0);
                let n = read_store(&store, tli, sent, &mut buf, len).await?;
                if n == 0 {
                    return Err(SessionError::Store(StoreError::Removed {
                        lsn: sent,
                        start: store.start(),
                    }));
                }
                let data = buf.get(..n).unwrap_or_default();
                msg::xlog_data(&mut self.out, sent, limit, msg::pg_now(), data);
                self.send().await?;
                sent = Lsn(sent.0 + n as u64);
                self.shared.status.send_modify(|s| s.sent = sent);
                if sent == limit {
                    // Idle after data: ask where the standby is right away.
                    pings.now();
                }
                continue;
            }
            if !done_sending && historic.is_some() && sent >= limit {
                msg::copy_done(&mut self.out);
                self.send().await?;
                done_sending = true;
                continue;
            }

            let now = Instant::now();
            if now >= pings.at && !done_sending {
                msg::keepalive(&mut self.out, sent, msg::pg_now(), true);
                self.send().await?;
                pings.schedule(sent);
            }
            if now.duration_since(last_heard) > cfg.standby_timeout {
                return Err(SessionError::Timeout(cfg.standby_timeout));
            }
            let wake = pings.at.min(last_heard + cfg.standby_timeout);
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => match self.on_event(ev, sent, &mut done_sending, &mut last_heard).await? {
                        EventOutcome::Continue => {}
                        EventOutcome::Apply(apply) => pings.applied(apply, sent),
                        EventOutcome::CopyDone(r) => returned_reader = Some(r),
                        EventOutcome::Gone => return Ok(None),
                    },
                    None if returned_reader.is_some() => {}
                    None => return Ok(None),
                },
                changed = durable.changed() => {
                    if changed.is_err() {
                        // The store is gone: nothing more to send.
                        return Ok(None);
                    }
                }
                _ = ceiling.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = super::stopped(&mut shutdown) => return Ok(None),
            }
        }
    }

    async fn on_event(
        &mut self,
        ev: Event,
        sent: Lsn,
        done_sending: &mut bool,
        last_heard: &mut Instant,
    ) -> Result<EventOutcome, SessionError> {
        *last_heard = Instant::now();
        Ok(match ev {
            Event::Heard => EventOutcome::Continue,
            Event::Status {
                apply,
                reply_requested,
            } => {
                if reply_requested {
                    msg::keepalive(&mut self.out, sent, msg::pg_now(), false);
                    self.send().await?;
                }
                EventOutcome::Apply(apply)
            }
            Event::CopyDone(r) => {
                // The standby ends the stream: answer with our CopyDone (walsender.c
                // ProcessRepliesIfAny).
                if !*done_sending {
                    msg::copy_done(&mut self.out);
                    self.send().await?;
                    *done_sending = true;
                }
                EventOutcome::CopyDone(r)
            }
            Event::Terminate | Event::Eof => EventOutcome::Gone,
            Event::Failed(e) => return Err(e),
        })
    }
}

enum EventOutcome {
    Continue,
    Apply(Lsn),
    CopyDone(Box<FrameReader>),
    Gone,
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The reader task of the CopyBoth phase.
async fn read_standby(
    mut reader: FrameReader,
    tx: mpsc::UnboundedSender<Event>,
    shared: Arc<Shared>,
) {
    loop {
        let ev = match reader.message().await {
            Ok(None) => Event::Eof,
            Ok(Some((tag, body))) => match msg::parse_frontend(tag, &body) {
                Ok(FrontendMessage::CopyData(data)) => match msg::parse_standby_message(&data) {
                    Ok(StandbyMessage::Status {
                        write,
                        flush,
                        apply,
                        reply_requested,
                        ..
                    }) => {
                        shared.positions.send_replace(StandbyPositions {
                            write,
                            flush,
                            apply,
                            reported_at: Some(Instant::now()),
                        });
                        tracing::trace!(%write, %flush, %apply, "feeder: standby status");
                        Event::Status {
                            apply,
                            reply_requested,
                        }
                    }
                    Ok(StandbyMessage::HotStandbyFeedback { .. }) => Event::Heard,
                    Err(e) => Event::Failed(e.into()),
                },
                Ok(FrontendMessage::CopyDone) => {
                    let _ = tx.send(Event::CopyDone(Box::new(reader)));
                    return;
                }
                Ok(FrontendMessage::Terminate) => Event::Terminate,
                Ok(FrontendMessage::CopyFail(m)) => Event::Failed(SessionError::Io(
                    std::io::Error::other(format!("the standby failed the COPY: {m}")),
                )),
                Ok(other) => Event::Failed(SessionError::Io(std::io::Error::other(format!(
                    "unexpected message {other:?} during streaming"
                )))),
                Err(e) => Event::Failed(e.into()),
            },
            Err(e) => Event::Failed(e),
        };
        let last = matches!(ev, Event::Eof | Event::Terminate | Event::Failed(_));
        if tx.send(ev).is_err() || last {
            return;
        }
    }
}

/// Reads `len` bytes of timeline `tli` at `at` off the async runtime.
async fn read_store(
    store: &Arc<crate::segment_store::SegmentStore>,
    tli: u32,
    at: Lsn,
    buf: &mut Vec<u8>,
    len: usize,
) -> Result<usize, SessionError> {
    let store = Arc::clone(store);
    let mut owned = std::mem::take(buf);
    owned.resize(len.max(owned.len()), 0);
    let (owned, res) = tokio::task::spawn_blocking(move || {
        let res = match owned.get_mut(..len) {
            Some(slice) => store.read_at(tli, at, slice),
            None => Ok(0),
        };
        (owned, res)
    })
    .await
    .map_err(|_| SessionError::ReadTask)?;
    *buf = owned;
    Ok(res?)
}

/// `(switch point, next timeline)` of `tli` in the store's lineage, if it has ended.
fn timeline_end(store: &crate::segment_store::SegmentStore, tli: u32) -> Option<(Lsn, u32)> {
    let lineage = store.lineage();
    let idx = lineage.iter().position(|s| s.tli == tli)?;
    let end = lineage.get(idx)?.end?;
    let next = lineage.get(idx + 1)?.tli;
    Some((end, next))
}

/// A GUC byte size as SHOW prints it (`16MB`, `1GB`).
fn format_bytes(n: u32) -> String {
    const KB: u32 = 1024;
    const MB: u32 = 1024 * KB;
    const GB: u32 = 1024 * MB;
    match n {
        n if n >= GB && n % GB == 0 => format!("{}GB", n / GB),
        n if n >= MB && n % MB == 0 => format!("{}MB", n / MB),
        n if n >= KB && n % KB == 0 => format!("{}kB", n / KB),
        n => format!("{n}B"),
    }
}

/// `15.8` → 150008, `18beta1` → 180000.
fn server_version_num(v: &str) -> u32 {
    let digits = |s: &str| -> u32 {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0)
    };
    let mut parts = v.splitn(2, '.');
    let major = parts.next().map(digits).unwrap_or(0);
    let minor = parts.next().map(digits).unwrap_or(0);
    major * 10_000 + minor
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_formats() {
        assert_eq!(format_bytes(16 << 20), "16MB");
        assert_eq!(format_bytes(1 << 30), "1GB");
        assert_eq!(server_version_num("15.8"), 150_008);
        assert_eq!(server_version_num("18.1 (Debian)"), 180_001);
        assert_eq!(server_version_num("18beta1"), 180_000);
    }

    #[test]
    fn body_len_is_checked() {
        assert!(body_len("m", 3, 4).is_err());
        assert!(body_len("m", -1, 4).is_err());
        assert!(body_len("m", 1 << 40, 4).is_err());
        assert_eq!(body_len("m", 4, 4).unwrap(), 0);
    }
}
