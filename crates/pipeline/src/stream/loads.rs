//! What the stream shows of the loads under way: each one's progress and
//! ETA in `status` and the metrics, its rows and bytes counted into the
//! metrics once, and the terminal's progress bars. The loads themselves
//! run in `crate::backfills`; this only watches their ledger entries.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use walshadow_backfill::ledger::Pass;

use crate::metrics::Metrics;
use crate::status::{LoadStatus, TableStatus};

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct LoadView {
    /// Rows and bytes of each load already counted in the metrics.
    counted: HashMap<String, (u64, u64)>,
    bars: crate::load_bars::LoadBars,
    /// Per load under way: when the stream first saw it, and its blocks
    /// read then (the ETA's rate).
    seen: HashMap<String, (Instant, u64)>,
}

impl LoadView {
    /// Each open load's progress into its table's status and the metrics;
    /// a load done or withdrawn leaves both.
    pub fn show(
        &mut self,
        passes: &[(String, Pass)],
        metrics: &Metrics,
        all: &mut BTreeMap<String, TableStatus>,
    ) {
        let now = Instant::now();
        let mut open = BTreeSet::new();
        for (key, pass) in passes.iter().filter(|(_, p)| p.is_open()) {
            open.insert(key.clone());
            let (done, total) = pass.blocks();
            let (t0, d0) = *self.seen.entry(key.clone()).or_insert((now, done));
            let elapsed = now.duration_since(t0).as_secs_f64();
            let rate = (elapsed > 1.0 && done > d0).then(|| (done - d0) as f64 / elapsed);
            let fraction = (total > 0).then(|| done as f64 / total as f64);
            let eta_secs = rate.map(|r| total.saturating_sub(done) as f64 / r);
            metrics.set_load_progress(key, fraction, eta_secs);
            if let Some(t) = all.get_mut(key) {
                t.load = Some(LoadStatus {
                    mode: pass.mode.clone(),
                    blocks_done: done,
                    blocks_total: total,
                    fraction,
                    eta_secs,
                    rows: pass.rows,
                });
            }
        }
        self.seen.retain(|k, _| {
            let keep = open.contains(k);
            if !keep {
                // Done (or withdrawn): no progress or ETA left to show.
                metrics.forget_load_progress(k);
            }
            keep
        });
    }

    /// The bars moved, and the rows and bytes loaded since the last call
    /// counted.
    pub fn count(&mut self, passes: &[(String, Pass)], metrics: &Metrics) {
        self.bars.update(passes);
        for (key, pass) in passes {
            let seen = self.counted.entry(key.clone()).or_insert((0, 0));
            if pass.rows > seen.0 || pass.bytes > seen.1 {
                metrics.add_backfill_rows(
                    key,
                    &pass.mode,
                    pass.rows.saturating_sub(seen.0),
                    pass.bytes.saturating_sub(seen.1),
                );
                *seen = (pass.rows, pass.bytes);
            }
        }
    }
}
