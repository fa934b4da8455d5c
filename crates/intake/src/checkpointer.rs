//! When the filter's state is written down (`filter.ckpt`) and what the
//! source's slot is told once it is durable.

use std::path::PathBuf;
use std::time::Duration;

use walshadow_types::Lsn;

use walshadow_shadow::filter::checkpoint;
use walshadow_shadow::filter::pipeline::FilterPipeline;
use walshadow_shadow::run::RunError;
use walshadow_shadow::segment_store::SegmentStore;

use crate::source::WalSource;
use crate::timeline_at;

/// Takes filter checkpoints and advances the slot behind them.
#[derive(Debug)]
pub(super) struct Checkpointer {
    pub(super) dir: PathBuf,
    pub(super) identity: checkpoint::Identity,
    pub(super) every_bytes: u64,
    pub(super) every: Duration,
    /// The last checkpoint's LSN.
    pub(super) last: Lsn,
    pub(super) last_try: tokio::time::Instant,
    /// The tap's restart position, when there is a tap.
    pub(super) hold: Option<tokio::sync::watch::Receiver<Lsn>>,
    /// What the slot's flush position last reported: the last checkpoint,
    /// or the tap's hold if that is behind it.
    pub(super) reported: Lsn,
}

impl Checkpointer {
    pub(super) fn due(&self, pipeline: &FilterPipeline) -> bool {
        self.last_try.elapsed() >= self.every
            || pipeline
                .checkpoint_lsn()
                .is_some_and(|l| l.distance_from(self.last) >= self.every_bytes)
    }

    /// Checkpoints at the pipeline's checkpoint point if it moved: the
    /// store is flushed past it first, the slot's flush position follows the
    /// file and is sent at once. Returns whether a checkpoint was written.
    pub(super) async fn take(
        &mut self,
        pipeline: &FilterPipeline,
        store: &SegmentStore,
        follower: &mut WalSource,
    ) -> Result<bool, RunError> {
        self.last_try = tokio::time::Instant::now();
        let Some(l) = pipeline.checkpoint_lsn().filter(|&l| l > self.last) else {
            self.report(self.last, follower).await;
            return Ok(false);
        };
        if store.flushed_end() < l {
            store.flush()?;
        }
        if store.flushed_end() < l {
            // Released bytes always reach the store; nothing to cover yet.
            return Ok(false);
        }
        let timeline = timeline_at(store, FilterPipeline::resume_page(l));
        checkpoint::write(&self.dir, self.identity, timeline, l, pipeline.filter())?;
        self.last = l;
        tracing::debug!(lsn = %l, timeline, "filter checkpoint");
        self.report(l, follower).await;
        Ok(true)
    }

    /// Reports `checkpoint`, held back to the tap's restart position, as
    /// the slot's flush position when that moved.
    pub(super) async fn report(&mut self, checkpoint: Lsn, follower: &mut WalSource) {
        let flush = match &self.hold {
            Some(h) => checkpoint.min(*h.borrow()),
            None => checkpoint,
        };
        if flush <= self.reported {
            return;
        }
        self.reported = flush;
        let received = follower.received_upto().unwrap_or(flush);
        follower.set_positions(received, flush, flush);
        // At once, not at the next periodic status update: the source may
        // recycle its WAL before `flush` from now on.
        if let Err(e) = follower.send_status().await {
            tracing::warn!("could not report {flush} to the source: {e}");
        }
    }
}
