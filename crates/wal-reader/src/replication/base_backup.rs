//! `BASE_BACKUP` (PostgreSQL 15+) into a [`BackupSink`], the archives parsed
//! into files on the fly.
//!
//! ```text
//!  BASE_BACKUP ( LABEL 'x', CHECKPOINT 'fast', WAL false, WAIT false, ... )
//!  server                                         client
//!  [checkpoint: up to start_timeout]
//!  RowDescription(recptr, tli) DataRow  C ──▶ start LSN/TLI
//!  RowDescription(spcoid, spclocation, size)
//!    DataRow*  C "SELECT"                 ──▶ tablespaces (base last, oid NULL)
//!  CopyOutResponse                            [each read: idle_timeout]
//!    CopyData 'n' name\0 location\0       ──▶ sink.begin_archive
//!    CopyData 'd' tar bytes …             ──▶ UstarReader ──▶ begin_file → Keep | Skip
//!                                                              file_data(chunk)… (Keep only)
//!                                                              end_file
//!    CopyData 'p' int64 bytes done        ──▶ sink.progress
//!    CopyData 'm', then 'd' …             ──▶ sink.manifest_data
//!                                             [after base.tar ends: stop_timeout]
//!  CopyDone
//!  RowDescription(recptr, tli) DataRow  C ──▶ end LSN/TLI
//!  [ErrorResponse, e.g. checksum failures]
//!  C "BASE_BACKUP"  ReadyForQuery
//! ```
//!
//! (bbsink_copystream_* in src/backend/backup/basebackup_copy.c;
//! perform_base_backup and parse_basebackup_options in basebackup.c.)
//!
//! Memory is bounded by one CopyData message (the server sends at most
//! `SINK_BUFFER_LENGTH`, 32 KiB, of data per message) plus one tar header:
//! kept file data reaches the sink as zero-copy slices, skipped data is
//! dropped as it arrives, and the sink's `await`s give backpressure.
//!
//! The connection afterwards: after an `ErrorResponse` it is back at
//! ReadyForQuery and usable. After a sink error, a malformed archive or a
//! timeout the backup is cancelled (CancelRequest) and the connection drained;
//! if that fails, or the backup future is dropped midway, or the server breaks
//! the protocol, the client is poisoned and every later call says to
//! reconnect.

use std::future::Future;
use std::time::Duration;

use bytes::{Buf, Bytes};
use fallible_iterator::FallibleIterator;
use postgres_protocol::message::{backend, frontend};
use tokio::time::Instant;
use walshadow_types::{Lsn, Oid, TimeLineId};

use super::client::ReplicationClient;
use super::conn::{BackendMessage, data_row, db_error, server_error};
use super::error::{ReplicationError, Result};
use super::ustar::{TarEntry, TarError, TarEvent, UstarReader};

const COMMAND: &str = "BASE_BACKUP";

/// `MAX_RATE` bounds in kB/s (MAX_RATE_LOWER/UPPER in basebackup_sink.h).
pub const MAX_RATE_RANGE: std::ops::RangeInclusive<u32> = 32..=1_048_576;

/// `CHECKPOINT 'fast' | 'spread'`: how the backup's starting checkpoint runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Checkpoint {
    /// Write everything out at once: the backup starts sooner, with an I/O
    /// burst on the source.
    Fast,
    /// Paced by `checkpoint_completion_target`; can take most of
    /// `checkpoint_timeout` before the first byte arrives.
    #[default]
    Spread,
}

/// Options of one `BASE_BACKUP`. Every server option is sent explicitly (the
/// walsender keeps `VERIFY_CHECKSUMS` from an earlier backup on the same
/// connection when it is omitted: `noverify_checksums` is a file-level static
/// in basebackup.c that parse_basebackup_options only sets when given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseBackupOptions {
    /// `LABEL`, recorded in `backup_label` (at most 1024 bytes).
    pub label: String,
    pub checkpoint: Checkpoint,
    /// `WAL`: append the WAL between start and end to `base.tar`. walshadow
    /// takes WAL from its slot, so off by default.
    pub wal: bool,
    /// `WAIT`: after the files, wait until the archiver has archived every
    /// WAL segment the backup needs (do_pg_backup_stop's `waitforarchive`;
    /// only when archiving is on). Off by default: the WAL comes from the
    /// replication stream, and a stuck `archive_command` would hang here.
    pub wait: bool,
    /// `MAX_RATE` in kB/s, 32 to 1048576; `None` for unthrottled.
    pub max_rate: Option<u32>,
    /// `MANIFEST 'yes'` (checksums CRC32C); the manifest goes to
    /// [`BackupSink::manifest_data`].
    pub manifest: bool,
    /// `TABLESPACE_MAP`: a `tablespace_map` file in `base.tar` instead of the
    /// `pg_tblspc/<oid>` symlinks.
    pub tablespace_map: bool,
    /// `PROGRESS`: the server sizes every tablespace first (an extra scan),
    /// reported in [`TablespaceInfo::size_kb`].
    pub progress: bool,
    /// `VERIFY_CHECKSUMS`: check data page checksums while sending (with
    /// data checksums on); failures end the backup with SQLSTATE XX001
    /// after all data was sent.
    pub verify_checksums: bool,
    /// Bound on the start: `BASE_BACKUP` sent until the COPY begins, which
    /// includes the checkpoint.
    pub start_timeout: Duration,
    /// Longest silence tolerated while archive data flows (no bound while
    /// bytes keep coming).
    pub idle_timeout: Duration,
    /// Longest silence tolerated after the last archive, while the server
    /// stops the backup (with `wait`, archiving can take this long) and
    /// sends the manifest and end position.
    pub stop_timeout: Duration,
}

impl Default for BaseBackupOptions {
    fn default() -> Self {
        BaseBackupOptions {
            label: "walshadow".into(),
            checkpoint: Checkpoint::Spread,
            wal: false,
            wait: false,
            max_rate: None,
            manifest: false,
            tablespace_map: false,
            progress: false,
            verify_checksums: true,
            start_timeout: Duration::from_secs(15 * 60),
            idle_timeout: Duration::from_secs(2 * 60),
            stop_timeout: Duration::from_secs(10 * 60),
        }
    }
}

impl BaseBackupOptions {
    /// The command text, in the parenthesised syntax (the only one from 15).
    /// No `TARGET` (the client) and no `COMPRESSION`.
    pub fn command(&self) -> Result<String> {
        if self.label.contains('\0') {
            return Err(ReplicationError::Config(
                "backup label contains a NUL byte".into(),
            ));
        }
        if let Some(r) = self.max_rate
            && !MAX_RATE_RANGE.contains(&r)
        {
            return Err(ReplicationError::Config(format!(
                "MAX_RATE {r} kB/s is outside {}..={} kB/s",
                MAX_RATE_RANGE.start(),
                MAX_RATE_RANGE.end()
            )));
        }
        let yes_no = |b: bool| if b { "true" } else { "false" };
        // The replication scanner's quoted strings double `'` and know no
        // backslash escapes (repl_scanner.l).
        let mut cmd = format!(
            "BASE_BACKUP ( LABEL '{}', CHECKPOINT '{}', WAL {}, WAIT {}, MANIFEST '{}', TABLESPACE_MAP {}, PROGRESS {}, VERIFY_CHECKSUMS {}",
            self.label.replace('\'', "''"),
            match self.checkpoint {
                Checkpoint::Fast => "fast",
                Checkpoint::Spread => "spread",
            },
            yes_no(self.wal),
            yes_no(self.wait),
            if self.manifest { "yes" } else { "no" },
            yes_no(self.tablespace_map),
            yes_no(self.progress),
            yes_no(self.verify_checksums),
        );
        if let Some(r) = self.max_rate {
            cmd.push_str(&format!(", MAX_RATE {r}"));
        }
        cmd.push_str(" )");
        Ok(cmd)
    }
}

/// A row of the tablespace result set. The data directory's row comes last,
/// with `oid` and `location` NULL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablespaceInfo {
    pub oid: Option<Oid>,
    pub location: Option<String>,
    /// Estimated size in kB, only with `progress`.
    pub size_kb: Option<u64>,
}

/// One archive of the backup: `<spcoid>.tar` per tablespace, then `base.tar`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveInfo {
    /// As the server names it: `base.tar` or `<spcoid>.tar`.
    pub name: String,
    /// The tablespace's OID; `None` for the data directory.
    pub spcoid: Option<Oid>,
    /// The tablespace's directory on the server; `None` for the data
    /// directory. Member paths are relative to it (`PG_<ver>_<catver>/…`).
    pub location: Option<String>,
}

impl ArchiveInfo {
    pub fn is_base(&self) -> bool {
        self.spcoid.is_none()
    }
}

/// What to do with a member's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAction {
    /// `file_data` calls follow, then `end_file`.
    Keep,
    /// The data is read off the connection and dropped; no more calls for
    /// this member.
    Skip,
}

/// Why a sink gave up; reported as [`ReplicationError::Sink`].
pub type SinkError = Box<dyn std::error::Error + Send + Sync>;

/// Receives a base backup, file by file. Called in stream order; each
/// returned future is awaited before the next message is read, which is
/// the backpressure.
pub trait BackupSink {
    /// A new archive starts.
    fn begin_archive(
        &mut self,
        archive: &ArchiveInfo,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        let _ = archive;
        async { Ok(()) }
    }

    /// A member starts: keep its data or skip it. Directories and symlinks
    /// have no data; `Keep` still gets an `end_file`.
    fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> impl Future<Output = Result<FileAction, SinkError>> + Send;

    /// The next bytes of the kept member (a slice of one CopyData message).
    fn file_data(&mut self, chunk: Bytes) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The kept member is complete (`size` bytes were delivered).
    fn end_file(&mut self) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// The archive's end-of-archive marker was read.
    fn end_archive(
        &mut self,
        archive: &ArchiveInfo,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        let _ = archive;
        async { Ok(()) }
    }

    /// Bytes of the backup manifest (with `manifest`), in order.
    fn manifest_data(
        &mut self,
        chunk: Bytes,
    ) -> impl Future<Output = Result<(), SinkError>> + Send {
        drop(chunk);
        async { Ok(()) }
    }

    /// The server's count of archive bytes sent so far (at least every
    /// second while data flows, and at the end of each archive).
    fn progress(&mut self, bytes_done: u64) {
        let _ = bytes_done;
    }
}

/// What a finished backup reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupResult {
    /// Where replay must start (the checkpoint's redo pointer).
    pub start_lsn: Lsn,
    pub start_tli: TimeLineId,
    /// Replay must reach this for the files to be consistent.
    pub end_lsn: Lsn,
    pub end_tli: TimeLineId,
    pub tablespaces: Vec<TablespaceInfo>,
    pub archives: Vec<ArchiveInfo>,
    /// Archive bytes received (headers, data, padding).
    pub bytes_streamed: u64,
    /// File data bytes handed to the sink.
    pub bytes_kept: u64,
    /// Members (files, directories, symlinks) the sink kept or skipped.
    pub files_kept: u64,
    pub files_skipped: u64,
    pub manifest_bytes: u64,
    /// The server's last `p` progress count.
    pub server_bytes_done: Option<u64>,
}

/// How a failed backup left the connection.
enum Failure {
    /// At ReadyForQuery: usable.
    Ready(ReplicationError),
    /// Still mid-command: cancel and drain.
    Abandon(ReplicationError),
    /// Out of step with the server: poison.
    Broken(ReplicationError),
}

enum Phase {
    Start {
        deadline: Instant,
    },
    Copy,
    /// The last archive ended: the server is stopping the backup.
    Stopping,
}

struct Run<'o> {
    opts: &'o BaseBackupOptions,
    phase: Phase,
    archive: Option<(ArchiveInfo, UstarReader)>,
    /// The current member's action, between `begin_file` and its end.
    member: Option<(String, FileAction)>,
    in_manifest: bool,
    result: BackupResult,
}

impl ReplicationClient {
    /// Runs `BASE_BACKUP` with `opts` and streams its archives, parsed into
    /// files, into `sink`. PostgreSQL 15 or later.
    ///
    /// Errors: `Server` for the server's ErrorResponse (SQLSTATE inside;
    /// the connection stays usable), `Sink` when the sink failed,
    /// `CommandTimeout`/`Stalled` per the options' timeouts, `Protocol` for
    /// a malformed stream, `Config` for bad options.
    pub async fn base_backup<S: BackupSink + Send>(
        &mut self,
        opts: &BaseBackupOptions,
        sink: &mut S,
    ) -> Result<BackupResult> {
        if let Some(why) = &self.poisoned {
            return Err(ReplicationError::Poisoned(why.clone()));
        }
        let cmd = opts.command()?;
        frontend::query(&cmd, self.conn.buf())?;
        // Cleared on every path that ends at ReadyForQuery; still set if
        // this future is dropped midway.
        self.poisoned = Some("a BASE_BACKUP was abandoned mid-stream".into());
        let mut run = Run {
            opts,
            phase: Phase::Start {
                deadline: Instant::now() + opts.start_timeout,
            },
            archive: None,
            member: None,
            in_manifest: false,
            result: BackupResult {
                start_lsn: Lsn(0),
                start_tli: 0,
                end_lsn: Lsn(0),
                end_tli: 0,
                tablespaces: Vec::new(),
                archives: Vec::new(),
                bytes_streamed: 0,
                bytes_kept: 0,
                files_kept: 0,
                files_skipped: 0,
                manifest_bytes: 0,
                server_bytes_done: None,
            },
        };
        match self.drive_backup(&mut run, sink).await {
            Ok(()) => {
                self.poisoned = None;
                Ok(run.result)
            }
            Err(Failure::Ready(e)) => {
                self.poisoned = None;
                Err(e)
            }
            Err(Failure::Abandon(e)) => {
                self.poisoned = None;
                let why = format!("was abandoned ({e})");
                self.recover_by_cancel(COMMAND, &why).await;
                Err(e)
            }
            Err(Failure::Broken(e)) => {
                self.poisoned = Some(format!("{COMMAND}: {e}"));
                Err(e)
            }
        }
    }

    async fn drive_backup<S: BackupSink + Send>(
        &mut self,
        run: &mut Run<'_>,
        sink: &mut S,
    ) -> Result<(), Failure> {
        self.conn.flush().await.map_err(Failure::Broken)?;
        let mut columns: Vec<String> = Vec::new();
        let mut result_sets = 0usize;
        let mut end_seen = false;
        let mut error = None;
        loop {
            let msg = self.next_backup_message(run).await?;
            let m = match msg {
                BackendMessage::Other(m) => m,
                BackendMessage::CopyBothResponse => {
                    return Err(broken("CopyBothResponse answering BASE_BACKUP"));
                }
            };
            match m {
                backend::Message::CopyData(body) => {
                    if !matches!(run.phase, Phase::Copy | Phase::Stopping) {
                        return Err(broken("CopyData outside COPY"));
                    }
                    run.on_copy_data(body.into_bytes(), sink).await?;
                }
                backend::Message::CopyOutResponse(_) => {
                    if !matches!(run.phase, Phase::Start { .. }) || result_sets != 2 {
                        return Err(broken(
                            "CopyOutResponse before the start position and tablespace list",
                        ));
                    }
                    run.phase = Phase::Copy;
                }
                backend::Message::CopyDone => {
                    if !matches!(run.phase, Phase::Copy | Phase::Stopping) {
                        return Err(broken("CopyDone outside COPY"));
                    }
                    run.close_archive()?;
                    if run.result.archives.is_empty() {
                        return Err(abandon_protocol("the backup had no archive"));
                    }
                    run.phase = Phase::Stopping;
                    end_seen = true;
                }
                backend::Message::RowDescription(rd) => {
                    columns.clear();
                    let mut fields = rd.fields();
                    while let Some(f) = fields.next().map_err(broken_io)? {
                        columns.push(f.name().to_owned());
                    }
                    result_sets += 1;
                }
                backend::Message::DataRow(row) => {
                    let row = data_row(&row).map_err(Failure::Broken)?;
                    run.on_row(&columns, &row, end_seen)
                        .map_err(Failure::Broken)?;
                }
                backend::Message::CommandComplete(_) | backend::Message::EmptyQueryResponse => {}
                backend::Message::NoticeResponse(n) => {
                    let mut fields = n.fields();
                    let (mut severity, mut text) = (Vec::new(), String::new());
                    while let Ok(Some(f)) = fields.next() {
                        match f.type_() {
                            b'V' => severity = f.value_bytes().to_vec(),
                            b'M' => text = String::from_utf8_lossy(f.value_bytes()).into_owned(),
                            _ => {}
                        }
                    }
                    if severity == b"WARNING" {
                        tracing::warn!(notice = %text, "BASE_BACKUP");
                    } else {
                        tracing::info!(notice = %text, "BASE_BACKUP");
                    }
                }
                backend::Message::ParameterStatus(p) => {
                    let (name, value) = (
                        p.name().map_err(broken_io)?.to_owned(),
                        p.value().map_err(broken_io)?.to_owned(),
                    );
                    self.conn.params.insert(name, value);
                }
                backend::Message::ErrorResponse(e) => {
                    // The server left COPY (if it was in it); ReadyForQuery
                    // follows.
                    error = Some(db_error(&e));
                    run.phase = Phase::Stopping;
                }
                backend::Message::ReadyForQuery(_) => {
                    if let Some(e) = error {
                        return Err(Failure::Ready(server_error(COMMAND, e)));
                    }
                    if !end_seen || run.result.end_tli == 0 {
                        return Err(Failure::Ready(ReplicationError::protocol(
                            "BASE_BACKUP ended without its COPY or end position",
                        )));
                    }
                    return Ok(());
                }
                _ => return Err(broken("unexpected message answering BASE_BACKUP")),
            }
        }
    }

    /// The next message, bounded by the phase's timeout.
    async fn next_backup_message(&mut self, run: &Run<'_>) -> Result<BackendMessage, Failure> {
        let (deadline, on_timeout): (Instant, fn(&BaseBackupOptions) -> ReplicationError) =
            match run.phase {
                Phase::Start { deadline } => (deadline, |o| {
                    ReplicationError::CommandTimeout {
                    command: COMMAND.into(),
                    timeout: o.start_timeout,
                    remedy: "the starting checkpoint did not finish; use CHECKPOINT 'fast' or raise the start timeout".into(),
                }
                }),
                Phase::Copy => (Instant::now() + run.opts.idle_timeout, |o| {
                    ReplicationError::Stalled {
                        command: COMMAND.into(),
                        idle: o.idle_timeout,
                        phase: "streaming archives".into(),
                    }
                }),
                Phase::Stopping => (Instant::now() + run.opts.stop_timeout, |o| {
                    ReplicationError::Stalled {
                        command: COMMAND.into(),
                        idle: o.stop_timeout,
                        phase: if o.wait {
                            "stopping the backup (WAIT: the archiver may be behind; check archive_command)".into()
                        } else {
                            "stopping the backup".into()
                        },
                    }
                }),
            };
        match tokio::time::timeout_at(deadline, self.conn.read_message()).await {
            Ok(Ok(m)) => Ok(m),
            Ok(Err(e)) => Err(Failure::Broken(e)),
            Err(_) => Err(Failure::Abandon(on_timeout(run.opts))),
        }
    }
}

impl Run<'_> {
    fn on_row(&mut self, columns: &[String], row: &[Option<Bytes>], end: bool) -> Result<()> {
        let text = |i: usize| -> Option<&str> {
            row.get(i)?
                .as_ref()
                .and_then(|b| std::str::from_utf8(b).ok())
        };
        match columns.first().map(String::as_str) {
            Some("recptr") => {
                let lsn: Lsn = text(0)
                    .ok_or_else(|| ReplicationError::protocol("BASE_BACKUP: recptr is NULL"))?
                    .parse()
                    .map_err(|e| ReplicationError::protocol(format!("BASE_BACKUP recptr: {e}")))?;
                let tli: TimeLineId = text(1)
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| ReplicationError::protocol("BASE_BACKUP: bad tli"))?;
                if end {
                    self.result.end_lsn = lsn;
                    self.result.end_tli = tli;
                } else {
                    self.result.start_lsn = lsn;
                    self.result.start_tli = tli;
                }
            }
            Some("spcoid") => {
                let oid = text(0)
                    .map(|t| {
                        t.parse::<Oid>()
                            .map_err(|_| ReplicationError::protocol("BASE_BACKUP: bad spcoid"))
                    })
                    .transpose()?;
                let size_kb = text(2)
                    .map(|t| {
                        t.parse::<u64>()
                            .map_err(|_| ReplicationError::protocol("BASE_BACKUP: bad size"))
                    })
                    .transpose()?;
                self.result.tablespaces.push(TablespaceInfo {
                    oid,
                    location: text(1).map(str::to_owned),
                    size_kb,
                });
            }
            _ => {
                return Err(ReplicationError::protocol(format!(
                    "BASE_BACKUP: unexpected result columns {columns:?}"
                )));
            }
        }
        Ok(())
    }

    async fn on_copy_data<S: BackupSink + Send>(
        &mut self,
        mut payload: Bytes,
        sink: &mut S,
    ) -> Result<(), Failure> {
        if payload.is_empty() {
            return Err(abandon_protocol("empty CopyData"));
        }
        let tag = payload.get_u8();
        match tag {
            b'n' => {
                self.close_archive()?;
                let name = take_cstr(&mut payload)?;
                let location = take_cstr(&mut payload)?;
                if !payload.is_empty() {
                    return Err(abandon_protocol("trailing bytes in a new-archive message"));
                }
                let spcoid = match name.strip_suffix(".tar") {
                    Some("base") => None,
                    Some(oid) => Some(oid.parse::<Oid>().map_err(|_| {
                        abandon_protocol(format!(
                            "archive {name:?}: expected base.tar or <oid>.tar (server compression is not supported)"
                        ))
                    })?),
                    None => {
                        return Err(abandon_protocol(format!(
                            "archive {name:?}: expected base.tar or <oid>.tar (server compression is not supported)"
                        )));
                    }
                };
                let info = ArchiveInfo {
                    name,
                    spcoid,
                    location: (!location.is_empty()).then_some(location),
                };
                sink.begin_archive(&info)
                    .await
                    .map_err(|e| sink_failure(&info, None, e))?;
                self.result.archives.push(info.clone());
                self.archive = Some((info, UstarReader::new()));
            }
            b'd' if self.in_manifest => {
                self.result.manifest_bytes += payload.len() as u64;
                sink.manifest_data(payload).await.map_err(|e| {
                    Failure::Abandon(ReplicationError::Sink {
                        archive: "backup_manifest".into(),
                        path: None,
                        source: e,
                    })
                })?;
            }
            b'd' => {
                self.result.bytes_streamed += payload.len() as u64;
                self.feed_tar(payload, sink).await?;
            }
            b'p' => {
                if payload.len() != 8 {
                    return Err(abandon_protocol("progress message is not 8 bytes"));
                }
                let done = payload.get_i64();
                let done =
                    u64::try_from(done).map_err(|_| abandon_protocol("negative progress count"))?;
                self.result.server_bytes_done = Some(done);
                sink.progress(done);
            }
            b'm' => {
                self.close_archive()?;
                self.in_manifest = true;
            }
            other => {
                return Err(abandon_protocol(format!(
                    "unknown BASE_BACKUP CopyData type {:?}",
                    char::from(other)
                )));
            }
        }
        Ok(())
    }

    async fn feed_tar<S: BackupSink + Send>(
        &mut self,
        data: Bytes,
        sink: &mut S,
    ) -> Result<(), Failure> {
        let Some((info, reader)) = self.archive.as_mut() else {
            return Err(abandon_protocol("archive data before any archive began"));
        };
        reader.push(data).map_err(|e| tar_failure(info, e))?;
        loop {
            let ev = match reader.next_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(()),
                Err(e) => return Err(tar_failure(info, e)),
            };
            match ev {
                TarEvent::Entry(file) => {
                    let action = sink
                        .begin_file(info, &file)
                        .await
                        .map_err(|e| sink_failure(info, Some(&file.path), e))?;
                    match action {
                        FileAction::Keep => self.result.files_kept += 1,
                        FileAction::Skip => self.result.files_skipped += 1,
                    }
                    self.member = Some((file.path, action));
                }
                TarEvent::Data(chunk) => {
                    if let Some((path, FileAction::Keep)) = &self.member {
                        self.result.bytes_kept += chunk.len() as u64;
                        sink.file_data(chunk)
                            .await
                            .map_err(|e| sink_failure(info, Some(path), e))?;
                    }
                }
                TarEvent::EntryEnd => {
                    if let Some((path, FileAction::Keep)) = self.member.take() {
                        sink.end_file()
                            .await
                            .map_err(|e| sink_failure(info, Some(&path), e))?;
                    }
                }
                TarEvent::End => {
                    sink.end_archive(info)
                        .await
                        .map_err(|e| sink_failure(info, None, e))?;
                    if info.is_base() {
                        // base.tar is always last (perform_base_backup).
                        self.phase = Phase::Stopping;
                    }
                }
            }
        }
    }

    /// Checks the current archive ended with its end-of-archive marker.
    fn close_archive(&mut self) -> Result<(), Failure> {
        if let Some((info, reader)) = self.archive.take()
            && !reader.is_finished()
        {
            return Err(abandon_protocol(format!(
                "archive {} ended after {} bytes without its end-of-archive blocks",
                info.name,
                reader.offset()
            )));
        }
        Ok(())
    }
}

fn take_cstr(buf: &mut Bytes) -> Result<String, Failure> {
    let end = buf
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| abandon_protocol("unterminated string in a new-archive message"))?;
    let s = buf.split_to(end);
    buf.advance(1);
    String::from_utf8(s.to_vec()).map_err(|_| abandon_protocol("archive name is not UTF-8"))
}

fn broken(what: &str) -> Failure {
    Failure::Broken(ReplicationError::protocol(what))
}

fn broken_io(e: std::io::Error) -> Failure {
    Failure::Broken(ReplicationError::protocol(e.to_string()))
}

/// A malformed payload inside well-framed messages: the connection is in
/// step, so cancelling the backup can save it.
fn abandon_protocol(what: impl Into<String>) -> Failure {
    Failure::Abandon(ReplicationError::protocol(what))
}

fn tar_failure(info: &ArchiveInfo, e: TarError) -> Failure {
    Failure::Abandon(ReplicationError::protocol(format!(
        "BASE_BACKUP archive {}: {e}",
        info.name
    )))
}

fn sink_failure(info: &ArchiveInfo, path: Option<&str>, e: SinkError) -> Failure {
    Failure::Abandon(ReplicationError::Sink {
        archive: info.name.clone(),
        path: path.map(str::to_owned),
        source: e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_text() {
        let o = BaseBackupOptions::default();
        assert_eq!(
            o.command().unwrap(),
            "BASE_BACKUP ( LABEL 'walshadow', CHECKPOINT 'spread', WAL false, WAIT false, MANIFEST 'no', TABLESPACE_MAP false, PROGRESS false, VERIFY_CHECKSUMS true )"
        );
        let o = BaseBackupOptions {
            label: "it's".into(),
            checkpoint: Checkpoint::Fast,
            wal: true,
            wait: true,
            max_rate: Some(32),
            manifest: true,
            tablespace_map: true,
            progress: true,
            verify_checksums: false,
            ..Default::default()
        };
        assert_eq!(
            o.command().unwrap(),
            "BASE_BACKUP ( LABEL 'it''s', CHECKPOINT 'fast', WAL true, WAIT true, MANIFEST 'yes', TABLESPACE_MAP true, PROGRESS true, VERIFY_CHECKSUMS false, MAX_RATE 32 )"
        );
        for bad in [31, 1_048_577] {
            let o = BaseBackupOptions {
                max_rate: Some(bad),
                ..Default::default()
            };
            assert!(matches!(o.command(), Err(ReplicationError::Config(_))));
        }
    }
}
