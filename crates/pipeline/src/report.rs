//! `walshadow status`: the daemon's status file, the durable progress, and
//! the source's current WAL position, put together for an operator.

use std::fmt;
use std::time::Duration;
use walshadow_state_file::StateFile;
use walshadow_types::printable;

use serde::Serialize;
use walshadow_config::Config;
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{ConnConfig, ReplicationClient};

use crate::progress::Progress;
use crate::status::{StatusFile, TableStatus};

/// Seconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01.
use walshadow_pg_format::epoch::UNIX_SECS as PG_EPOCH_UNIX_SECS;

/// What `walshadow status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// The daemon wrote its status within the last 5 seconds.
    pub running: bool,
    pub status_age_secs: Option<f64>,
    /// `pg_current_wal_lsn()` on the source, when reachable.
    pub source_current: Option<Lsn>,
    pub received: Option<Lsn>,
    pub decoded: Option<Lsn>,
    pub applied: Option<Lsn>,
    /// The slot's flush position: never past the restart position.
    pub slot_flush: Option<Lsn>,
    pub shadow_replayed: Option<Lsn>,
    pub lag_bytes: Option<u64>,
    pub lag_secs: Option<f64>,
    pub open_transactions: Option<usize>,
    pub memory_used: Option<usize>,
    pub spilled_bytes: Option<u64>,
    pub toast: Option<crate::status::ToastStatus>,
    /// Initial loads (`backfills.toml`), by table.
    pub backfills: std::collections::BTreeMap<String, walshadow_backfill::ledger::Pass>,
    pub tables: std::collections::BTreeMap<String, TableStatus>,
    /// ClickHouse as the running stream sees it.
    pub destination: Option<crate::status::DestinationStatus>,
    /// Why the running stream ignores the config table's rows, while it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_table_ignored: Option<String>,
    /// The source no longer had the WAL: the `[backup]` store's archive
    /// serves it now (running only).
    pub wal_from_archive: bool,
    /// Segments the archive served since the daemon started.
    pub archive_segments_read: u64,
    /// Paused by `walshadow ctl pause` (running or not: a start stays
    /// paused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<crate::progress::Paused>,
}

/// Why the status could not be put together.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Progress(#[from] crate::progress::ProgressError),
    #[error(
        "{0}: walshadow has not streamed with this state directory yet (no status.json or progress.json)"
    )]
    NothingYet(std::path::PathBuf),
}

async fn source_lsn(config: &Config) -> Option<Lsn> {
    let mut conn = ConnConfig::from_url(&config.source.url).ok()?;
    conn.physical = false;
    conn.application_name = Some("walshadow-status".into());
    let q = async {
        let mut c = ReplicationClient::connect(&conn).await.ok()?;
        let r = c
            .simple_query("select case when pg_is_in_recovery() then pg_last_wal_receive_lsn() else pg_current_wal_lsn() end")
            .await
            .ok()?;
        r.text(0, 0)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(5), q)
        .await
        .ok()
        .flatten()
}

/// Reads the state directory and asks the source where it is.
pub async fn status(config: &Config) -> Result<StatusReport, ReportError> {
    let dir = &config.state.dir;
    let file = StatusFile::read(dir).ok();
    let progress = Progress::read(dir)?;
    if file.is_none() && progress.is_none() {
        return Err(ReportError::NothingYet(dir.clone()));
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let age = file
        .as_ref()
        .map(|f| now_ms.saturating_sub(f.updated_unix_ms) as f64 / 1000.0);
    let running = age.is_some_and(|a| a < 5.0);
    let source_current = source_lsn(config).await;
    let applied = file
        .as_ref()
        .map(|f| f.applied)
        .or(progress.as_ref().map(|p| p.applied));
    let restart = file
        .as_ref()
        .map(|f| f.restart)
        .or(progress.as_ref().map(|p| p.restart));
    // The source's position: asked now, else as its walsender last said,
    // else what was received (the stream pausing must not hide the lag).
    let reported_end = file.as_ref().map(|f| f.source_end).filter(|l| l.is_valid());
    let head = source_current
        .or(reported_end)
        .or(file.as_ref().map(|f| f.received));
    let lag_bytes = match (head, applied) {
        (Some(h), Some(a)) => Some(h.0.saturating_sub(a.0)),
        _ => None,
    };
    let lag_secs = file.as_ref().and_then(|f| {
        // Caught up: nothing between the last applied commit and the head
        // but records that carry no rows.
        if lag_bytes.is_some_and(|b| b == 0) || f.open_transactions == 0 && f.decoded <= f.applied {
            return Some(0.0);
        }
        (f.applied_commit_time != 0).then(|| {
            let commit_unix_ms = f.applied_commit_time / 1000 + PG_EPOCH_UNIX_SECS * 1000;
            (now_ms as i64 - commit_unix_ms).max(0) as f64 / 1000.0
        })
    });
    let tables = match (&file, &progress) {
        (Some(f), _) => f.tables.clone(),
        (None, Some(p)) => TableStatus::all(&p.tables),
        (None, None) => Default::default(),
    };
    Ok(StatusReport {
        running,
        status_age_secs: age,
        source_current,
        received: file.as_ref().map(|f| f.received),
        decoded: file.as_ref().map(|f| f.decoded),
        applied,
        slot_flush: restart,
        shadow_replayed: file.as_ref().map(|f| f.shadow_replayed),
        lag_bytes,
        lag_secs,
        open_transactions: file.as_ref().map(|f| f.open_transactions),
        memory_used: file.as_ref().map(|f| f.memory_used),
        spilled_bytes: file.as_ref().map(|f| f.spilled_bytes),
        toast: file.as_ref().and_then(|f| f.toast),
        backfills: walshadow_backfill::ledger::Ledger::read(&config.state.dir)
            .map(|l| l.tables)
            .unwrap_or_default(),
        tables,
        destination: file
            .as_ref()
            .filter(|_| running)
            .map(|f| f.destination.clone()),
        config_table_ignored: file
            .as_ref()
            .filter(|_| running)
            .and_then(|f| f.config_table_ignored.clone()),
        wal_from_archive: file.as_ref().is_some_and(|f| running && f.wal_from_archive),
        archive_segments_read: file.as_ref().map_or(0, |f| f.archive_segments_read),
        paused: match (&file, &progress) {
            (Some(f), _) if running => f.paused.clone(),
            (_, Some(p)) => p.paused.clone(),
            _ => None,
        },
    })
}

fn lsn(l: Option<Lsn>) -> String {
    l.map_or_else(|| "-".into(), |l| l.to_string())
}

impl fmt::Display for StatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.running, self.status_age_secs) {
            (true, _) => writeln!(f, "walshadow: running")?,
            (false, Some(a)) => writeln!(f, "walshadow: not running (last status {a:.0} s ago)")?,
            (false, None) => writeln!(f, "walshadow: not running")?,
        }
        if let Some(d) = &self.destination
            && let Some(since) = d.failing_since_unix_ms
        {
            let secs = crate::status::unix_ms_now().saturating_sub(since) / 1000;
            writeln!(
                f,
                "ClickHouse:      not taking requests for {secs} s ({} failures, {}); the stream waits, nothing is lost",
                d.failures,
                d.last_class.as_deref().unwrap_or("?")
            )?;
            if let Some(w) = &d.waiting_for {
                writeln!(f, "  waiting for:   {w}")?;
            }
            if let Some(e) = &d.last_error {
                writeln!(f, "  last error:    {e}")?;
            }
        }
        if let Some(p) = &self.paused {
            let secs = crate::status::unix_ms_now().saturating_sub(p.since_unix_ms) / 1000;
            writeln!(
                f,
                "stream:          PAUSED for {secs} s at {} (`walshadow ctl pause`): no WAL is \
                 taken, the source's slot keeps it; `walshadow ctl resume` streams again",
                p.at
            )?;
        }
        if let Some(why) = &self.config_table_ignored {
            writeln!(f, "config table:    IGNORED: {}", printable(why))?;
        }
        if self.wal_from_archive {
            writeln!(
                f,
                "WAL intake:      FROM THE ARCHIVE: the source no longer has the WAL walshadow \
                 needs; the [backup] store's archive serves it ({} segments so far), then the \
                 source again",
                self.archive_segments_read
            )?;
        } else if self.archive_segments_read > 0 {
            writeln!(
                f,
                "WAL intake:      from the source ({} segments came from the archive since the start)",
                self.archive_segments_read
            )?;
        }
        writeln!(f, "source WAL:      {}", lsn(self.source_current))?;
        writeln!(f, "received:        {}", lsn(self.received))?;
        writeln!(f, "decoded:         {}", lsn(self.decoded))?;
        writeln!(f, "applied:         {}", lsn(self.applied))?;
        writeln!(f, "slot flush:      {}", lsn(self.slot_flush))?;
        writeln!(f, "shadow replayed: {}", lsn(self.shadow_replayed))?;
        match self.lag_bytes {
            Some(b) => writeln!(f, "lag:             {b} bytes")?,
            None => writeln!(f, "lag:             -")?,
        }
        match self.lag_secs {
            Some(s) => writeln!(f, "lag time:        {s:.1} s")?,
            None => writeln!(f, "lag time:        -")?,
        }
        if let (Some(o), Some(m), Some(s)) =
            (self.open_transactions, self.memory_used, self.spilled_bytes)
        {
            writeln!(
                f,
                "open transactions: {o} ({m} bytes in memory, {s} spilled)"
            )?;
        }
        if let Some(t) = &self.toast {
            writeln!(
                f,
                "TOAST mirror:    {} values, {} chunks, {} bytes of chunk data in a {} byte file; {} hits, {} misses; {} read from the source ({} gone, {} failed); {} rows waiting for a newer version",
                t.values,
                t.chunks,
                t.data_bytes,
                t.file_bytes,
                t.hits,
                t.misses,
                t.source_fetches,
                t.source_misses,
                t.source_errors,
                t.waiting_rows
            )?;
        }
        if !self.backfills.is_empty() {
            writeln!(f, "initial loads:")?;
            for (key, p) in &self.backfills {
                let phase = match p.phase {
                    walshadow_backfill::ledger::Phase::Pending => "pending",
                    walshadow_backfill::ledger::Phase::Loading => "loading",
                    walshadow_backfill::ledger::Phase::Done => "done",
                    walshadow_backfill::ledger::Phase::Failed => "failed",
                };
                write!(
                    f,
                    "  {}: {} at {}, {phase}, {} rows, {} attempts",
                    printable(key),
                    p.mode,
                    p.s,
                    p.rows,
                    p.attempts
                )?;
                if p.resumes > 0 {
                    write!(f, ", {} resumes", p.resumes)?;
                }
                if let Some(swap) = &p.swap {
                    write!(
                        f,
                        ", staging swap under way (staging uuid {})",
                        swap.staging_uuid
                    )?;
                }
                if let Some(next) = &p.then {
                    write!(f, "; then {} at {} once that is done", next.mode, next.s)?;
                }
                writeln!(f)?;
                if let Some(e) = &p.error {
                    writeln!(f, "    last error: {}", printable(e))?;
                }
            }
        }
        writeln!(f, "tables:")?;
        for (key, t) in &self.tables {
            // Rows the stream wrote, and those its last load wrote.
            let loaded = self.backfills.get(key).map_or(0, |p| p.rows);
            let mut rows = if loaded > 0 {
                format!("{} rows streamed, {loaded} loaded", t.rows)
            } else {
                format!("{} rows", t.rows)
            };
            let replaced =
                t.values_replaced + self.backfills.get(key).map_or(0, |p| p.values_replaced);
            if replaced > 0 {
                rows.push_str(&format!(" ({replaced} values as out_of_range says)"));
            }
            // Names and reasons come from the source: a newline or an
            // escape in them must not forge a line.
            let (key, dest) = (printable(key), printable(&t.destination));
            match &t.stopped {
                None if t.out.is_some() => writeln!(
                    f,
                    "  {key} -> {dest}: {rows}, {}",
                    printable(t.out.as_deref().unwrap_or_default())
                )?,
                None if t.waiting.is_some() => writeln!(
                    f,
                    "  {key} -> {dest}: {rows}, waiting: {}",
                    printable(t.waiting.as_deref().unwrap_or_default())
                )?,
                None => writeln!(f, "  {key} -> {dest}: {rows}")?,
                Some(s) => writeln!(
                    f,
                    "  {key} -> {dest}: {rows}, STOPPED at {}: {}\n      remedy: {}",
                    s.lsn,
                    printable(&s.reason),
                    printable(&s.remedy)
                )?,
            }
            if let Some(l) = &t.load {
                let pct = l
                    .fraction
                    .map_or_else(|| "-".to_owned(), |x| format!("{:.0}%", x * 100.0));
                let eta = l
                    .eta_secs
                    .map_or_else(|| "-".to_owned(), |e| format!("{e:.0} s"));
                writeln!(
                    f,
                    "      loading ({}): {pct} of {} blocks, {} rows, ETA {eta}",
                    l.mode, l.blocks_total, l.rows
                )?;
            }
        }
        Ok(())
    }
}
