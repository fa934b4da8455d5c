//! The daemon's WAL intake: the source's WAL into the shadow's store, and
//! to the streaming pipeline.
//!
//! ```text
//!  source ══ START_REPLICATION (slot) ══▶ WalFollower ──▶ FilterPipeline ──▶ SegmentStore ──▶ Feeder ══▶ shadow PG
//!     ▲                                        │ raw WAL                      │ flush         (standby)
//!     │                                        └──▶ WalTap ──▶ streaming pipeline
//!     └──────── standby status: flush = min(filter checkpoint, tap hold) ◀─────┘
//! ```
//!
//! The filter resumes from its last checkpoint (`<state>/filter.ckpt`), or
//! from its seed at the base backup's segment when there is none; the
//! slot's flush position is the last checkpoint (and never past what the
//! tap holds), so the source keeps only the WAL since then. Bytes the store
//! already holds are checked, not appended twice. The shadow itself (start,
//! keep running, stop) is [`walshadow_shadow::run::Shadow`].

mod checkpointer;
pub mod source;
mod tap;

use std::sync::Arc;
use std::time::Duration;
use walshadow_backup_store::BackupStore;
use walshadow_pg_format::wal_files::segment_start;
use walshadow_state_file::StateFile;

use walshadow_types::{Lsn, PgMajor};
use walshadow_wal_reader::replication::{ConnConfig, FollowEvent};

use checkpointer::Checkpointer;
pub use source::{SourceSettings, WalSource};
pub use tap::{ArchiveTurns, TAP_STALL, TapEvent, WalTap};
use walshadow_shadow::bootstrap::InitState;
use walshadow_shadow::filter::checkpoint;
use walshadow_shadow::filter::pipeline::FilterPipeline;
use walshadow_shadow::run::{RunError, SHADOW_CHECK_EVERY, Shadow, ShadowSettings};
use walshadow_shadow::segment_store::SegmentStore;

/// The WAL store's group fsync: once the stream pauses this long, and at
/// least this often while it flows. Nothing waits on it but the shadow's
/// replay, and a catalog wait flushes at once.
const STORE_FLUSH_IDLE: Duration = Duration::from_millis(20);
const STORE_FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Feeds the shadow until `stop` turns true, starting again from the last
/// checkpoint after transient source errors (backing off from 1 s to 30 s;
/// the shadow keeps running meanwhile). Definite errors end it.
pub async fn feed_until_stopped(
    settings: &ShadowSettings,
    shadow: &Shadow,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RunError> {
    feed_tapped_until_stopped(settings, shadow, None, None, stop).await
}

/// [`feed_until_stopped`], with the raw WAL also handed to `tap`, and
/// WAL the source no longer has read from `archive` (the `[backup]`
/// store's WAL archive).
pub async fn feed_tapped_until_stopped(
    settings: &ShadowSettings,
    shadow: &Shadow,
    tap: Option<WalTap>,
    archive: Option<Arc<BackupStore>>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), RunError> {
    let mut backoff =
        walshadow_types::Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    // After a stall the tap's consumer still has its decoding state: it
    // gets the WAL after what it took, not a new stream (which would make
    // it decode again from the start of its oldest open transaction).
    let mut continue_at = None;
    loop {
        let mut attempt_stop = stop.clone();
        let started = tokio::time::Instant::now();
        let result = feed_tapped_from(
            settings,
            shadow,
            tap.clone(),
            archive.clone(),
            std::mem::take(&mut continue_at),
            async move {
                let _ = attempt_stop.wait_for(|s| *s).await;
            },
        )
        .await;
        match result {
            Ok(()) => return Ok(()),
            // The pipeline gives up its wait when asked to stop, and drops
            // the tap: a clean stop, not an error.
            Err(RunError::PipelineStopped) if *stop.borrow() => return Ok(()),
            Err(RunError::TapStalled { after, tap_end }) => {
                continue_at = Some(tap_end);
                tracing::warn!(
                    "the streaming pipeline took no WAL for {after:?} (it is waiting, see walshadow status): \
                     released the source's walsender; streaming again once it takes WAL"
                );
                let Some(t) = &tap else { continue };
                // Room for half the queue, the shadow kept running meanwhile.
                let mut shadow_check = tokio::time::interval(SHADOW_CHECK_EVERY);
                let room = loop {
                    tokio::select! {
                        r = t.tx.reserve_many(t.tx.max_capacity() / 2) => break r.is_ok(),
                        _ = stop_asked(&mut stop) => return Ok(()),
                        _ = shadow_check.tick() => shadow.keep_running().await?,
                    }
                };
                if !room {
                    return if *stop.borrow() {
                        Ok(())
                    } else {
                        Err(RunError::PipelineStopped)
                    };
                }
                tracing::info!("the streaming pipeline takes WAL again; streaming from the source");
                backoff.reset();
            }
            Err(e) if e.is_transient() => {
                if started.elapsed() > Duration::from_secs(60) {
                    backoff.reset();
                }
                let delay = backoff.next_delay();
                // The source or the [backup] archive did not answer.
                let what = if matches!(e, RunError::Archive { .. }) {
                    "the WAL archive did not answer"
                } else {
                    "source connection lost"
                };
                tracing::warn!("{what} ({e}); feeding again in {delay:?}");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop_asked(&mut stop) => return Ok(()),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// Resolves once `stop` turns true (or its sender is gone). Holds no
/// borrow of the value past its end, so a future awaiting it can move
/// between threads.
async fn stop_asked(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// Where streaming resumes and what the slot may be told.
#[derive(Debug, Clone, Copy)]
struct ResumePoint {
    /// `START_REPLICATION` position and timeline.
    stream_from: Lsn,
    timeline: u32,
    /// The last checkpoint (or the base backup's segment without one): the
    /// slot's flush position.
    durable: Lsn,
}

/// Streams from the source through the filter into the shadow's store until
/// `stop` resolves.
///
/// The filter resumes from its last checkpoint (`<state>/filter.ckpt`, see
/// [`checkpoint`]) or, without one, from the seed at the base backup's
/// segment. Bytes the store already holds are not appended again; they are
/// compared with what the filter produces now, and a difference stops the
/// stream (the store and the filter's state no longer agree). A checkpoint is
/// taken every `checkpoint_every_mb` of WAL or `checkpoint_every_secs`,
/// whichever comes first, and at a clean stop; the slot's flush position
/// (which a physical slot's `restart_lsn` follows) is the last checkpoint,
/// never more (invariant 4).
pub async fn feed(
    settings: &ShadowSettings,
    shadow: &Shadow,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    feed_tapped(settings, shadow, None, stop).await
}

/// [`feed`], with the raw WAL also handed to `tap` (see [`WalTap`]).
pub async fn feed_tapped(
    settings: &ShadowSettings,
    shadow: &Shadow,
    tap: Option<WalTap>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    feed_tapped_from(settings, shadow, tap, None, None, stop).await
}

/// [`feed_tapped`]; with `continue_at`, the tap's stream goes on from that
/// position (the end of what it took before) instead of starting anew.
async fn feed_tapped_from(
    settings: &ShadowSettings,
    shadow: &Shadow,
    tap: Option<WalTap>,
    archive: Option<Arc<BackupStore>>,
    continue_at: Option<Lsn>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), RunError> {
    let state = &shadow.state;
    let store = &shadow.store;
    let major = PgMajor::from_number(state.major).map_err(|e| RunError::State {
        path: settings.state_dir.join(InitState::FILE),
        message: e.to_string(),
    })?;
    let identity = checkpoint::Identity {
        system_id: state.system_id,
        major,
        backup_start: state.backup_start,
    };
    let (pipeline, resume) = match checkpoint::read(&settings.state_dir, identity)? {
        Some(c) => {
            if c.lsn > store.flushed_end() || c.lsn < store.start() {
                return Err(RunError::StoreBehindCheckpoint {
                    checkpoint: c.lsn,
                    start: store.start(),
                    end: store.flushed_end(),
                });
            }
            let pipeline = FilterPipeline::resume(c.filter, c.lsn, state.segment_size)?;
            let resume = ResumePoint {
                stream_from: FilterPipeline::resume_page(c.lsn),
                timeline: c.timeline,
                durable: c.lsn,
            };
            (pipeline, resume)
        }
        None => {
            let filter = walshadow_shadow::bootstrap::load_seed(&settings.state_dir, major)?;
            let seg_start = segment_start(state.backup_start, state.segment_size);
            let pipeline = FilterPipeline::new(filter, seg_start, state.segment_size)?;
            let resume = ResumePoint {
                stream_from: seg_start,
                timeline: state.timeline,
                durable: seg_start,
            };
            (pipeline, resume)
        }
    };
    let mut pipeline = pipeline.with_replay_start(state.backup_start);
    // The filter's input starts at its resume page; a tap restarting
    // earlier makes the stream start earlier, and the filter skips ahead.
    let filter_from = resume.stream_from;
    let tap_hold = tap.as_ref().map(|t| *t.hold.borrow());
    let mut resume = resume;
    if let Some(hold) = tap_hold.filter(|h| h.is_valid()) {
        resume.stream_from = resume.stream_from.min(FilterPipeline::resume_page(hold));
        resume.durable = resume.durable.min(hold);
    }
    let continue_at = continue_at.filter(|_| tap.is_some());
    if let Some(at) = continue_at {
        resume.stream_from = resume.stream_from.min(FilterPipeline::resume_page(at));
    }
    // The next byte the tap expects.
    let mut tap_next = continue_at.unwrap_or(resume.stream_from);
    tokio::pin!(stop);
    if let Some(t) = tap.as_ref().filter(|_| continue_at.is_none()) {
        let start = TapEvent::Start {
            from: resume.stream_from,
        };
        tokio::select! {
            sent = t.tx.send(start) => if sent.is_err() {
                return Err(RunError::PipelineStopped);
            },
            _ = &mut stop => return Ok(()),
        }
    }
    tracing::info!(
        from = %resume.stream_from,
        timeline = resume.timeline,
        checkpoint = %resume.durable,
        store_end = %store.flushed_end(),
        "streaming from the source"
    );
    let mut conn = ConnConfig::from_url(&settings.source_url)?;
    conn.application_name
        .get_or_insert_with(|| "walshadow".into());
    let source = SourceSettings {
        conn,
        slot: Some(settings.slot.clone()),
        manage_slot: true,
        system_id: state.system_id,
        major,
        seg_size: state.segment_size,
        archive,
        turns: tap.as_ref().map(|t| Arc::clone(&t.archive)),
        remedy_without_archive: "configure the [backup] store the source archives its WAL to \
                                 (walshadow then reads what the source lost from its archive), \
                                 or rebuild with `walshadow init --force`",
    };
    let mut follower = WalSource::start(source, resume.stream_from, resume.timeline).await?;
    follower.set_positions(resume.stream_from, resume.durable, resume.durable);
    let mut ckpt = Checkpointer {
        dir: settings.state_dir.clone(),
        identity,
        every_bytes: settings.checkpoint_every_bytes,
        every: settings.checkpoint_every,
        last: resume.durable,
        last_try: tokio::time::Instant::now(),
        hold: tap.as_ref().map(|t| t.hold.clone()),
        reported: resume.durable,
    };
    // What the store held before this run: the filter must produce the
    // same bytes again. An earlier attempt's unflushed bytes become durable
    // first, since the check reads what is flushed.
    store.flush()?;
    let already = store.written_end();
    let mut last_flush = tokio::time::Instant::now();
    let mut shadow_check = tokio::time::interval(SHADOW_CHECK_EVERY);
    shadow_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Unflushed bytes are flushed once the stream pauses, and at least
        // every STORE_FLUSH_EVERY while it flows (group fsync). A catalog
        // wait flushes at once (`Feeder::wait_for_replay`), so the cadence
        // costs DDL nothing; at 2 ms / 10 ms it was ~160 fdatasyncs a
        // second under a steady load.
        let dirty = store.written_end() > store.flushed_end();
        let event = tokio::select! {
            _ = &mut stop => break,
            e = follower.next() => e?,
            _ = tokio::time::sleep(STORE_FLUSH_IDLE), if dirty => {
                store.flush()?;
                last_flush = tokio::time::Instant::now();
                continue;
            }
            _ = shadow_check.tick() => {
                shadow.keep_running().await?;
                continue;
            }
            _ = tokio::time::sleep_until(ckpt.last_try + ckpt.every) => {
                if ckpt.take(&pipeline, store, &mut follower).await? {
                    recycle(settings, shadow, store, ckpt.last).await;
                }
                continue;
            }
        };
        match event {
            FollowEvent::Wal {
                start,
                data,
                wal_end,
                ..
            } => {
                if let Some(t) = &tap {
                    t.source_end
                        .fetch_max(wal_end.0, std::sync::atomic::Ordering::Relaxed);
                }
                let chunk_end = Lsn(start.0 + data.len() as u64);
                let skip = filter_from.distance_from(start).min(data.len() as u64) as usize;
                let (from, bytes) = if chunk_end > filter_from {
                    pipeline.push(
                        Lsn(start.0 + skip as u64),
                        data.get(skip..).unwrap_or_default(),
                    )?
                } else {
                    (start, Vec::new())
                };
                if let Some(change) = pipeline.take_parameter_change() {
                    shadow.raise_settings(&change)?;
                }
                store_filtered(store, already, from, &bytes)?;
                if last_flush.elapsed() >= STORE_FLUSH_EVERY {
                    store.flush()?;
                    last_flush = tokio::time::Instant::now();
                }
                // A continued tap has the bytes before `tap_next` already.
                let tap_part = match chunk_end.distance_from(tap_next) {
                    0 => None,
                    _ if start >= tap_next => Some((start, data)),
                    n => {
                        let from = data.len().saturating_sub(n as usize);
                        Some((tap_next, data.slice(from..)))
                    }
                };
                if let (Some(t), Some((start, data))) = (&tap, tap_part) {
                    let sent_end = Lsn(start.0 + data.len() as u64);
                    let event = TapEvent::Wal { start, data };
                    let event = match t.tx.try_send(event) {
                        Ok(()) => None,
                        Err(tokio::sync::mpsc::error::TrySendError::Full(e)) => Some(e),
                        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                            return Err(RunError::PipelineStopped);
                        }
                    };
                    if let Some(event) = event {
                        // The tap may be waiting for the shadow to replay
                        // what the store holds unflushed: flush before
                        // waiting on it.
                        store.flush()?;
                        last_flush = tokio::time::Instant::now();
                        // The pipeline may be waiting for the shadow: keep
                        // it running meanwhile (reserve is cancel-safe).
                        let stalled = tokio::time::sleep(TAP_STALL);
                        tokio::pin!(stalled);
                        let permit = loop {
                            tokio::select! {
                                permit = t.tx.reserve() => break Some(permit),
                                _ = &mut stop => break None,
                                _ = shadow_check.tick() => shadow.keep_running().await?,
                                _ = &mut stalled => {
                                    // What the filter took is in the store;
                                    // the tap's part is streamed again.
                                    store.flush()?;
                                    ckpt.take(&pipeline, store, &mut follower).await?;
                                    return Err(RunError::TapStalled {
                                        after: TAP_STALL,
                                        tap_end: tap_next,
                                    });
                                }
                            }
                        };
                        let Some(permit) = permit else { break };
                        let Ok(permit) = permit else {
                            return Err(RunError::PipelineStopped);
                        };
                        permit.send(event);
                    }
                    tap_next = sent_end;
                }
                if ckpt.due(&pipeline) && ckpt.take(&pipeline, store, &mut follower).await? {
                    recycle(settings, shadow, store, ckpt.last).await;
                }
            }
            FollowEvent::ServerWalEnd(wal_end) => {
                if let Some(t) = &tap {
                    t.source_end
                        .fetch_max(wal_end.0, std::sync::atomic::Ordering::Relaxed);
                }
            }
            FollowEvent::TimelineSwitch {
                from,
                to,
                switch_lsn,
                history,
            } => {
                tracing::info!(
                    "source timeline {from} ended at {switch_lsn}; following timeline {to}"
                );
                if continue_at.is_some() && switch_lsn < tap_next {
                    store.flush()?;
                    return Err(RunError::TapDiverged {
                        switch: switch_lsn,
                        tap_end: tap_next,
                    });
                }
                // The old timeline's last record ends at the switch: its
                // alignment padding, which the filter holds until a next
                // record, is final.
                let (from, bytes) = pipeline.end_timeline_at(switch_lsn)?;
                store_filtered(store, already, from, &bytes)?;
                store.flush()?;
                // Re-streaming what the store holds: it switched already.
                let known = store
                    .lineage()
                    .iter()
                    .any(|s| s.tli == to && s.begin == switch_lsn);
                if !known {
                    store.switch_timeline(to, switch_lsn, &history.content)?;
                }
            }
        }
    }
    store.flush()?;
    // A clean stop checkpoints and tells the source at once, so the slot
    // does not hold WAL until the next run.
    ckpt.take(&pipeline, store, &mut follower).await?;
    Ok(())
}

/// Drops filtered segments that neither the shadow nor a restarted `run`
/// will read again: those before both the shadow's last restartpoint (its
/// replay restarts there) and the filter checkpoint (a restart re-filters
/// from there), with one segment of margin. Best effort: a shadow that does
/// not answer yet (still reaching consistency) keeps everything.
async fn recycle(
    settings: &ShadowSettings,
    shadow: &Shadow,
    store: &SegmentStore,
    checkpoint: Lsn,
) {
    let Ok(source) = ConnConfig::from_url(&settings.source_url) else {
        return;
    };
    let db = source.dbname.as_deref().unwrap_or("postgres");
    let redo = async {
        let mut cat = walshadow_shadow::catalog::ShadowCatalog::connect(
            &shadow.socket_dir,
            shadow.port,
            &source.user,
            db,
        )
        .await?;
        cat.restartpoint_redo().await
    };
    let redo = match redo.await {
        Ok(r) if r.is_valid() => r,
        Ok(_) => return,
        Err(e) => {
            tracing::debug!("not recycling filtered WAL yet: {e}");
            return;
        }
    };
    let seg = u64::from(store.segment_size());
    let keep = redo.min(FilterPipeline::resume_page(checkpoint));
    let keep_from = Lsn((keep.0 / seg).saturating_sub(1) * seg);
    match store.remove_before(keep_from) {
        Ok(0) => {}
        Ok(n) => tracing::info!(segments = n, before = %keep_from, "recycled filtered WAL"),
        Err(e) => tracing::warn!("recycling filtered WAL before {keep_from}: {e}"),
    }
}

/// The timeline the store's history has at `lsn`.
fn timeline_at(store: &SegmentStore, lsn: Lsn) -> u32 {
    store
        .lineage()
        .iter()
        .find(|s| s.begin <= lsn && s.end.is_none_or(|e| lsn < e))
        .map_or_else(|| store.timeline(), |s| s.tli)
}

/// Appends the filter's bytes at `from` to the store; those below
/// `already` (what the store held before this run) must equal what it
/// holds, as the filter produces the same bytes again.
fn store_filtered(
    store: &SegmentStore,
    already: Lsn,
    from: Lsn,
    bytes: &[u8],
) -> Result<(), RunError> {
    let end = Lsn(from.0 + bytes.len() as u64);
    let overlap = already.distance_from(from).min(bytes.len() as u64) as usize;
    if overlap > 0 {
        verify_stored(store, from, bytes.get(..overlap).unwrap_or_default())?;
    }
    if end > already && !bytes.is_empty() {
        let fresh = bytes.get(overlap..).unwrap_or_default();
        store.append(Lsn(from.0 + overlap as u64), fresh)?;
    }
    Ok(())
}

/// Checks that `bytes`, filtered again at `lsn`, equal what the store holds.
fn verify_stored(store: &SegmentStore, lsn: Lsn, bytes: &[u8]) -> Result<(), RunError> {
    let mut held = vec![0u8; bytes.len()];
    let n = store.read_at(store.timeline(), lsn, &mut held)?;
    let differs = held
        .get(..n)
        .unwrap_or_default()
        .iter()
        .zip(bytes)
        .position(|(a, b)| a != b);
    match differs {
        None if n == bytes.len() => Ok(()),
        None => Err(RunError::Diverged {
            lsn: Lsn(lsn.0 + n as u64),
            problem: "the store ends there".into(),
        }),
        Some(i) => Err(RunError::Diverged {
            lsn: Lsn(lsn.0 + i as u64),
            problem: "the bytes differ".into(),
        }),
    }
}
