//! Where the intake's WAL comes from: the source's slot, or, when the
//! source no longer has it, the `[backup]` store's WAL archive — then the
//! source again.
//!
//! ```text
//!  START_REPLICATION at P ──▶ "requested WAL segment … has already been removed"
//!        │                                   │ ([backup] configured)
//!        ▼                                   ▼
//!   live chunks              archive: P's segment, the next, … (checked: cluster,
//!        ▲                            size, address; along the source's branch:
//!        │                            a switch handed on inside the segment
//!        │                            that holds it, read from the new
//!        │                            timeline's copy)
//!        └──── the archive has no next segment: START_REPLICATION there ◀┘
//! ```
//!
//! The consumer sees one contiguous run of [`FollowEvent`]s whichever side
//! serves them. PostgreSQL removes a segment only once it is archived, so
//! the archive covers what the source lost; a position neither holds ends
//! the intake with the remedy. With an archive configured, a slot that is
//! missing or was invalidated is created again (`RESERVE_WAL`), so the
//! source keeps what follows the archive's end.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use walshadow_backup_store::continuity::Branch;
use walshadow_backup_store::{BackupStore, StoreError};
use walshadow_pg_format::wal_files::{segment_file_name, segment_start};
use walshadow_shadow::run::RunError;
use walshadow_types::{Lsn, PgMajor, TimeLineId};
use walshadow_wal_reader::replication::{
    ConnConfig, FollowEvent, ReplicationClient, ReplicationError, TimelineHistory, WalFollower,
};

/// Archive chunks handed on at most this large, as the walsender's.
const CHUNK: usize = 128 * 1024;

/// What the intake streams from and how to reach the archive.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    pub conn: ConnConfig,
    pub slot: Option<String>,
    /// With an archive: create the slot when it is missing or invalidated
    /// (the daemon's; `wal dump` leaves slots alone).
    pub manage_slot: bool,
    pub system_id: u64,
    pub major: PgMajor,
    pub seg_size: u32,
    pub archive: Option<Arc<BackupStore>>,
    /// Where status and metrics see the archive's turns.
    pub turns: Option<Arc<crate::ArchiveTurns>>,
    /// What to do when the source lost WAL and no archive is configured.
    pub remedy_without_archive: &'static str,
}

/// The intake's WAL: live from the slot, or read from the archive.
///
/// [`WalSource::next`] is cancel-safe, as the intake's `select!` needs:
/// the archive is read by a task of its own into a channel, and a return
/// to the source is started as a task whose handle is kept.
#[derive(Debug)]
pub struct WalSource {
    settings: SourceSettings,
    feed: Feed,
    /// Positions reported to the slot (write, flush, apply), kept across
    /// the archive's turns.
    positions: (Lsn, Lsn, Lsn),
    /// Never reported below this: where a slot walshadow created reserves
    /// from, or where streaming resumed after the archive's turn. The
    /// source moves a physical slot's restart position to whatever flush
    /// it is told, backwards too; below this the WAL is gone from the
    /// source (the archive has it), and a slot pointed there is lost again.
    floor: Lsn,
}

#[derive(Debug)]
enum Feed {
    Live(Box<WalFollower>),
    Archive {
        rx: mpsc::Receiver<ArchiveMsg>,
        task: JoinHandle<()>,
        /// The next byte expected.
        next: Lsn,
    },
    /// The archive holds no more: streaming from the source at `at` again.
    Returning {
        task: JoinHandle<Result<(WalFollower, Option<Lsn>), RunError>>,
        at: Lsn,
    },
    /// A turn failed; the intake starts again from its checkpoint.
    Failed,
}

/// What the archive's reader task sends.
#[derive(Debug)]
enum ArchiveMsg {
    Event(FollowEvent),
    /// No later segment in the archive: `segments` were read, up to `at`.
    Done {
        at: Lsn,
        timeline: TimeLineId,
        segments: u64,
    },
    Failed(RunError),
}

/// Archive chunks queued ahead of the intake (128 KiB each).
const ARCHIVE_QUEUE: usize = 64;

impl WalSource {
    /// Streams from `start` on `timeline`; the archive takes over if the
    /// source no longer has it.
    pub async fn start(
        settings: SourceSettings,
        start: Lsn,
        timeline: TimeLineId,
    ) -> Result<WalSource, RunError> {
        let (follower, floor) = start_live(&settings, start, timeline).await?;
        let mut source = WalSource {
            settings,
            feed: Feed::Live(Box::new(follower)),
            positions: (start, start, start),
            floor: floor.unwrap_or(Lsn(0)),
        };
        source.set_positions(start, start, start);
        Ok(source)
    }

    /// Tells status and metrics whether the archive serves the WAL now.
    fn reading_archive(&self, reading: bool) {
        if let Some(t) = &self.settings.turns {
            t.reading.store(reading, Ordering::Relaxed);
        }
    }

    /// End of everything handed on.
    pub fn received_upto(&self) -> Option<Lsn> {
        match &self.feed {
            Feed::Live(f) => f.received_upto(),
            Feed::Archive { next, .. } => Some(*next),
            Feed::Returning { at, .. } => Some(*at),
            Feed::Failed => None,
        }
    }

    /// The slot's positions; sent while live, kept for the next live turn.
    pub fn set_positions(&mut self, write: Lsn, flush: Lsn, apply: Lsn) {
        self.positions = (write, flush, apply);
        let floor = self.floor;
        if let Feed::Live(f) = &mut self.feed {
            f.set_positions(write.max(floor), flush.max(floor), apply.max(floor));
        }
    }

    /// A status update now, while live (the archive has no one to tell).
    pub async fn send_status(&mut self) -> Result<(), ReplicationError> {
        match &mut self.feed {
            Feed::Live(f) => f.send_status(false).await,
            _ => Ok(()),
        }
    }

    /// The next event, from whichever side holds the WAL.
    pub async fn next(&mut self) -> Result<FollowEvent, RunError> {
        loop {
            match &mut self.feed {
                Feed::Failed => {
                    return Err(ReplicationError::Poisoned(
                        "the WAL intake's last turn failed".into(),
                    )
                    .into());
                }
                Feed::Live(f) => {
                    let at = f.received_upto();
                    let timeline = f.timeline();
                    match f.next().await {
                        Ok(e) => return Ok(e),
                        Err(e) if e.is_wal_removed() => {
                            let at = at.unwrap_or(self.positions.0);
                            self.feed = Feed::Failed;
                            self.enter_archive(at, timeline, &e)?;
                        }
                        Err(e) => {
                            self.feed = Feed::Failed;
                            return Err(e.into());
                        }
                    }
                }
                Feed::Archive { rx, next, .. } => match rx.recv().await {
                    Some(ArchiveMsg::Event(e)) => {
                        if let FollowEvent::Wal { start, data, .. } = &e {
                            *next = Lsn(start.0 + data.len() as u64);
                        }
                        return Ok(e);
                    }
                    Some(ArchiveMsg::Done {
                        at,
                        timeline,
                        segments,
                    }) => {
                        tracing::info!(
                            segments,
                            at = %at,
                            "the archive holds no later segment; streaming from the source again"
                        );
                        let settings = self.settings.clone();
                        let task =
                            tokio::spawn(async move { start_live(&settings, at, timeline).await });
                        self.feed = Feed::Returning { task, at };
                    }
                    Some(ArchiveMsg::Failed(e)) => {
                        self.feed = Feed::Failed;
                        return Err(e);
                    }
                    None => {
                        self.feed = Feed::Failed;
                        return Err(RunError::Archive {
                            store: self.store_name(),
                            message: "the archive's reader stopped".into(),
                            transient: true,
                        });
                    }
                },
                Feed::Returning { task, at } => {
                    let at = *at;
                    let started = task.await;
                    self.feed = Feed::Failed;
                    let (follower, created) = started.map_err(|e| {
                        RunError::Replication(ReplicationError::Poisoned(format!(
                            "starting to stream again: {e}"
                        )))
                    })??;
                    self.floor = self.floor.max(at).max(created.unwrap_or(Lsn(0)));
                    self.feed = Feed::Live(Box::new(follower));
                    let (w, f, a) = self.positions;
                    self.set_positions(w.max(at), f, a);
                    self.reading_archive(false);
                }
            }
        }
    }

    fn store_name(&self) -> String {
        self.settings
            .archive
            .as_ref()
            .map_or_else(String::new, |s| s.name().to_owned())
    }

    /// Hands the WAL from `at` to the archive's reader task.
    fn enter_archive(
        &mut self,
        at: Lsn,
        timeline: TimeLineId,
        removed: &ReplicationError,
    ) -> Result<(), RunError> {
        let Some(store) = self.settings.archive.clone() else {
            return Err(RunError::WalRemoved {
                at,
                error: removed.to_string(),
                remedy: self.settings.remedy_without_archive.into(),
            });
        };
        tracing::warn!(
            at = %at,
            timeline,
            store = store.name(),
            "the source no longer has the WAL walshadow needs ({removed}); reading it from the archive"
        );
        let (tx, rx) = mpsc::channel(ARCHIVE_QUEUE);
        let settings = self.settings.clone();
        let task = tokio::spawn(async move {
            let read = async {
                let mut reader = ArchiveReader::open(&settings, store, at, timeline).await?;
                while let Some(event) = reader.next().await? {
                    if tx.send(ArchiveMsg::Event(event)).await.is_err() {
                        return Ok(None);
                    }
                }
                if reader.segments == 0 {
                    return Err(gone(at, &reader).await);
                }
                Ok(Some(ArchiveMsg::Done {
                    at: reader.next,
                    timeline: reader.timeline,
                    segments: reader.segments,
                }))
            };
            let last = match read.await {
                Ok(None) => return,
                Ok(Some(done)) => done,
                Err(e) => ArchiveMsg::Failed(e),
            };
            let _ = tx.send(last).await;
        });
        self.feed = Feed::Archive { rx, task, next: at };
        self.reading_archive(true);
        Ok(())
    }
}

impl Drop for WalSource {
    fn drop(&mut self) {
        match &self.feed {
            Feed::Archive { task, .. } => task.abort(),
            Feed::Returning { task, .. } => task.abort(),
            Feed::Live(_) | Feed::Failed => {}
        }
        self.reading_archive(false);
    }
}

/// Neither the source nor the archive holds `at`. A segment newer than
/// the archive's newest may still come (a standby source removes WAL its
/// primary has not archived yet; a listing may lag): that is waited for.
async fn gone(at: Lsn, r: &ArchiveReader) -> RunError {
    // The copy the reader looked for: the branch's for that segment.
    let segno = at.segment_number(r.seg_size);
    let tli = r.branch.timeline_of_segment(segno, r.seg_size);
    let segment = segment_file_name(tli, segno, r.seg_size);
    // The whole listing, this once.
    let listing = match r.store.archive_segments(&r.archive).await {
        Ok(files) => files,
        Err(e) => return archive_error(&r.store, e),
    };
    let newest = listing
        .iter()
        .map(|f| &f.name)
        .filter(|n| {
            walshadow_pg_format::wal_files::parse_segment_name(n, r.seg_size)
                .is_some_and(|(t, _, _)| t == tli)
        })
        .max();
    if newest.is_none_or(|n| *n < segment) {
        return RunError::Archive {
            store: r.store.name().to_owned(),
            message: format!(
                "the source no longer has WAL segment {segment} and the archive does not hold \
                 it yet (its newest: {}); waiting for it to be archived",
                newest.map_or("none", String::as_str)
            ),
            transient: true,
        };
    }
    RunError::WalRemoved {
        at,
        error: format!(
            "nor does the archive in {}, which holds later segments but not {segment}",
            r.store.name(),
        ),
        remedy: "the WAL from there on is lost to walshadow: rebuild with `walshadow init \
                     --force` (and check the archive's retention and archive_command)"
            .into(),
    }
}

/// Connects, checks the cluster, and starts streaming; with an archive
/// configured, a missing or invalidated slot is created first. Returns
/// where a slot created here reserves WAL from.
async fn start_live(
    s: &SourceSettings,
    start: Lsn,
    timeline: TimeLineId,
) -> Result<(WalFollower, Option<Lsn>), RunError> {
    let mut client = connect(s).await?;
    let managed = s
        .slot
        .as_deref()
        .filter(|_| s.manage_slot && s.archive.is_some());
    let mut created = None;
    if let Some(slot) = managed {
        created = ensure_slot(&mut client, slot).await?;
    }
    let started = WalFollower::start(client, s.slot.as_deref(), start, timeline).await;
    match (started, managed) {
        (Err(e), Some(slot)) if e.is_slot_invalidated() => {
            // PostgreSQL 18 refuses an invalidated slot at START_REPLICATION.
            let mut client = connect(s).await?;
            let created = recreate_slot(&mut client, slot, "was invalidated").await?;
            let follower = WalFollower::start(client, s.slot.as_deref(), start, timeline).await?;
            Ok((follower, created))
        }
        (started, _) => Ok((started?, created)),
    }
}

async fn connect(s: &SourceSettings) -> Result<ReplicationClient, RunError> {
    let mut client = ReplicationClient::connect(&s.conn).await?;
    // The slot's name may exist on another cluster too (a URL pointed at
    // a replica's primary after a rebuild, a restored copy): its WAL is not
    // this shadow's.
    let ident = client.identify_system().await?;
    if ident.systemid != s.system_id {
        return Err(RunError::OtherCluster {
            url_host: format!("{}:{}", s.conn.host, s.conn.port),
            found: ident.systemid,
            expected: s.system_id,
        });
    }
    Ok(client)
}

/// The slot exists and reserves WAL; a missing one is created, an
/// invalidated one (no restart position) dropped and created again.
/// Returns where a slot created here reserves from.
async fn ensure_slot(client: &mut ReplicationClient, slot: &str) -> Result<Option<Lsn>, RunError> {
    match client.read_replication_slot(slot).await? {
        None => {
            client.create_physical_slot(slot, true).await?;
            tracing::warn!(
                slot,
                "the replication slot did not exist: created it (RESERVE_WAL); WAL the source \
                 no longer has comes from the archive"
            );
            reserved_from(client, slot).await
        }
        Some(info) if info.restart_lsn.is_none() => {
            recreate_slot(client, slot, "reserves no WAL (invalidated)").await
        }
        Some(_) => Ok(None),
    }
}

async fn recreate_slot(
    client: &mut ReplicationClient,
    slot: &str,
    why: &str,
) -> Result<Option<Lsn>, RunError> {
    client.drop_slot(slot, false).await?;
    client.create_physical_slot(slot, true).await?;
    tracing::warn!(
        slot,
        "the replication slot {why}: dropped and created it again (RESERVE_WAL); WAL the \
         source no longer has comes from the archive"
    );
    reserved_from(client, slot).await
}

/// The restart position of a slot just created.
async fn reserved_from(
    client: &mut ReplicationClient,
    slot: &str,
) -> Result<Option<Lsn>, RunError> {
    Ok(client
        .read_replication_slot(slot)
        .await?
        .and_then(|i| i.restart_lsn))
}

/// Archived segments in order from a position, on one timeline.
#[derive(Debug)]
struct ArchiveReader {
    store: Arc<BackupStore>,
    /// The store's archive of the source's cluster.
    archive: String,
    branch: Branch,
    system_id: u64,
    major: PgMajor,
    seg_size: u32,
    timeline: TimeLineId,
    /// The history file of each later timeline of the branch, handed on
    /// with the switch onto it (the shadow follows the switch by it).
    histories: HashMap<TimeLineId, TimelineHistory>,
    /// A switch inside the segment being handed on: the timeline it
    /// switches to and where.
    switch: Option<(TimeLineId, Lsn)>,
    /// The next byte handed on.
    next: Lsn,
    /// The segment being handed on: its start and bytes.
    current: Option<(Lsn, Bytes)>,
    /// Segments read this turn.
    segments: u64,
    /// The source's WAL end when the turn began (for the lag).
    source_end: Lsn,
    turns: Option<Arc<crate::ArchiveTurns>>,
}

impl ArchiveReader {
    async fn open(
        s: &SourceSettings,
        store: Arc<BackupStore>,
        at: Lsn,
        timeline: TimeLineId,
    ) -> Result<ArchiveReader, RunError> {
        // The source's branch: which timeline's copy of each segment to read.
        let mut client = connect(s).await?;
        let ident = client.identify_system().await?;
        let mut histories = HashMap::new();
        let mut history = Vec::new();
        if ident.timeline > 1 {
            let current = client.timeline_history(ident.timeline).await?;
            history.clone_from(&current.entries);
            // The timelines between ours and the source's: their own files.
            for e in &current.entries {
                if e.parent > timeline {
                    histories.insert(e.parent, client.timeline_history(e.parent).await?);
                }
            }
            histories.insert(ident.timeline, current);
        }
        client.close().await;
        let archive = store
            .archive_of(s.system_id, &s.major.number().to_string())
            .await
            .map_err(|e| archive_error(&store, e))?;
        let reader = ArchiveReader {
            store,
            archive,
            branch: Branch {
                timeline: ident.timeline,
                history,
            },
            system_id: s.system_id,
            major: s.major,
            seg_size: s.seg_size,
            timeline,
            histories,
            switch: None,
            next: at,
            current: None,
            segments: 0,
            source_end: ident.xlogpos,
            turns: s.turns.clone(),
        };
        Ok(reader)
    }

    /// The next chunk or timeline switch; `None` when the archive holds no
    /// more.
    async fn next(&mut self) -> Result<Option<FollowEvent>, RunError> {
        loop {
            if let Some((start, bytes)) = &self.current {
                // A switch inside the segment: its bytes up to the switch
                // are the old timeline's, then the switch, as a walsender
                // gives them.
                if let Some((to, at)) = self.switch.filter(|(_, at)| self.next >= *at) {
                    let segno = start.segment_number(self.seg_size);
                    let event = self.switch_to(to, at)?;
                    self.switch = self.switch_in(segno)?;
                    return Ok(Some(event));
                }
                let limit = self.switch.map_or(bytes.len(), |(_, at)| {
                    (at.distance_from(*start) as usize).min(bytes.len())
                });
                let offset = self.next.distance_from(*start) as usize;
                if offset < limit {
                    let end = (offset + CHUNK).min(limit);
                    // A copy: a slice would keep the whole segment alive
                    // while the chunk waits in the queue.
                    let data = Bytes::copy_from_slice(bytes.get(offset..end).unwrap_or_default());
                    let start = self.next;
                    self.next = Lsn(start.0 + data.len() as u64);
                    return Ok(Some(FollowEvent::Wal {
                        timeline: self.timeline,
                        start,
                        data,
                        wal_end: self.source_end.max(self.next),
                    }));
                }
                self.current = None;
            }
            let segno = self.next.segment_number(self.seg_size);
            // The segment holding a switch is the new timeline's copy: the
            // old timeline's bytes before the switch, the new one's after.
            let tli = self.branch.timeline_of_segment(segno, self.seg_size);
            self.switch = self.switch_in(segno)?;
            let name = segment_file_name(tli, segno, self.seg_size);
            let file = self
                .store
                .archive_segment(&self.archive, &name)
                .await
                .map_err(|e| archive_error(&self.store, e))?;
            let Some(file) = file else {
                return Ok(None);
            };
            let bytes = self
                .store
                .read_segment(&file, self.seg_size)
                .await
                .map_err(|e| archive_error(&self.store, e))?;
            let start = segment_start(self.next, self.seg_size);
            self.check(&name, start, &bytes)?;
            tracing::debug!(segment = name, "read from the archive");
            self.current = Some((start, bytes));
            self.segments += 1;
            if let Some(t) = &self.turns {
                t.segments.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The branch's next switch when it lies in segment `segno` (or at its
    /// start), off the timeline being handed on. Off the branch — the
    /// source left this timeline before where the reader is — is refused.
    fn switch_in(&self, segno: u64) -> Result<Option<(TimeLineId, Lsn)>, RunError> {
        if self.branch.timeline_of_segment(segno, self.seg_size) == self.timeline {
            return Ok(None);
        }
        match self.branch.next_switch(self.timeline) {
            Some((to, at)) if at >= self.next => Ok(Some((to, at))),
            found => Err(RunError::Archive {
                store: self.store.name().to_owned(),
                message: format!(
                    "walshadow is at {} on timeline {}, which is not on the source's branch \
                     there ({}): rebuild with `walshadow init --force`",
                    self.next,
                    self.timeline,
                    match found {
                        Some((to, at)) => format!("it switched to timeline {to} at {at}"),
                        None => "its history does not name the timeline".to_owned(),
                    }
                ),
                transient: false,
            }),
        }
    }

    /// Hands on the switch onto timeline `to` at `at`, with its history.
    fn switch_to(&mut self, to: TimeLineId, at: Lsn) -> Result<FollowEvent, RunError> {
        let history = self
            .histories
            .get(&to)
            .cloned()
            .ok_or_else(|| RunError::Archive {
                store: self.store.name().to_owned(),
                message: format!("the source gave no history file of timeline {to}"),
                transient: true,
            })?;
        tracing::info!(
            from = self.timeline,
            to,
            at = %at,
            "the archive's WAL switches timeline"
        );
        let from = self.timeline;
        self.timeline = to;
        Ok(FollowEvent::TimelineSwitch {
            from,
            to,
            switch_lsn: at,
            history,
        })
    }

    /// The segment is the source cluster's, of the right size, at the
    /// right address (its first page's long header).
    fn check(&self, name: &str, start: Lsn, bytes: &[u8]) -> Result<(), RunError> {
        use walshadow_pg_format::cursor::Cursor;
        // XLogLongPageHeaderData: magic, info, tli, pageaddr, rem_len,
        // (padding), sysid, seg_size, xlog_blcksz.
        let header = || -> Option<(u16, u64, u64, u32)> {
            let mut c = Cursor::new(bytes);
            let magic = c.u16().ok()?;
            c.take(6).ok()?;
            let pageaddr = c.u64().ok()?;
            c.take(8).ok()?;
            let sysid = c.u64().ok()?;
            let seg_size = c.u32().ok()?;
            Some((magic, pageaddr, sysid, seg_size))
        };
        let magic = self.major.xlog_page_magic();
        let problem = match header() {
            _ if bytes.len() != self.seg_size as usize => Some(format!(
                "it holds {} bytes, not {}",
                bytes.len(),
                self.seg_size
            )),
            None => Some("it has no page header".to_owned()),
            Some((m, ..)) if m != magic => Some(format!(
                "its page magic {m:#06x} is not PostgreSQL {}'s {magic:#06x}",
                self.major.number()
            )),
            Some((_, _, sysid, _)) if sysid != self.system_id => Some(format!(
                "it is WAL of the cluster with system identifier {sysid}, not the source's {}",
                self.system_id
            )),
            Some((_, addr, _, size)) if addr != start.0 || size != self.seg_size => Some(format!(
                "its first page says {} (segment size {size}), not {start}",
                Lsn(addr)
            )),
            Some(_) => None,
        };
        match problem {
            None => Ok(()),
            Some(p) => Err(RunError::Archive {
                store: self.store.name().to_owned(),
                message: format!(
                    "archived segment {name}: {p}; check the [backup] store is the source's"
                ),
                transient: false,
            }),
        }
    }
}

fn archive_error(store: &BackupStore, e: StoreError) -> RunError {
    RunError::Archive {
        store: store.name().to_owned(),
        transient: e.is_transient(),
        message: e.to_string(),
    }
}
