//! When the stream flushes: the one rule.
//!
//! A flush inserts every table's batch and moves progress to the last
//! transaction boundary, so the slot and the shadow move with it. The
//! stream flushes
//!
//! - when a batch is full (the size rule of [`TableBatch::is_full`], which
//!   the loads follow too), after the WAL that filled it;
//! - when the stream is idle (all WAL received is decoded) and a batch
//!   holds rows, once the last flush is `idle_gap` old: a commit is visible
//!   without waiting for the deadline, while under steady traffic the gap
//!   keeps the inserts per second bounded (each costs ClickHouse a part);
//! - when a batch's oldest row is `max_age` old (a stream that never idles:
//!   catch-up, a backlog);
//! - when the last flush is `max_age` old, rows or not: progress moves on
//!   while no table in scope changes, and the source keeps no WAL for it.

use std::time::{Duration, Instant};

use walshadow_emitter::TableBatch;

/// How often, at least, the stream looks at the clock (status, metrics,
/// loads, the age rule).
pub(super) const TICK: Duration = Duration::from_secs(1);

/// See the module doc.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlushRule {
    /// `[clickhouse] batch_ms`.
    pub max_age: Duration,
    /// `[clickhouse] idle_flush_ms`; `None` when 0 (off).
    pub idle_gap: Option<Duration>,
}

impl FlushRule {
    /// The stream is idle: flush rows held, unless the last flush was
    /// less than `idle_gap` ago.
    pub fn idle<'a>(
        &self,
        mut batches: impl Iterator<Item = &'a TableBatch>,
        last_flush: Instant,
        now: Instant,
    ) -> bool {
        self.idle_gap
            .is_some_and(|gap| now >= last_flush + gap && batches.any(|b| b.opened_at().is_some()))
    }

    /// On the clock: a batch is full or old, or the last flush is.
    pub fn due<'a>(
        &self,
        mut batches: impl Iterator<Item = &'a TableBatch>,
        last_flush: Instant,
        now: Instant,
    ) -> bool {
        now.duration_since(last_flush) >= self.max_age
            || batches
                .any(|b| b.is_full() || b.opened_at().is_some_and(|t| now >= t + self.max_age))
    }

    /// When to look at the clock next: the next tick after `last_tick`, or
    /// sooner when a batch comes of age.
    pub fn next_wake<'a>(
        &self,
        batches: impl Iterator<Item = &'a TableBatch>,
        last_tick: Instant,
    ) -> Instant {
        batches
            .filter_map(TableBatch::opened_at)
            .map(|t| t + self.max_age)
            .fold(last_tick + TICK, Instant::min)
    }

    /// Rows being held, when the idle gap after `last_flush` ends: the
    /// stream flushes then if it is idle by that time.
    pub fn idle_wake<'a>(
        &self,
        mut batches: impl Iterator<Item = &'a TableBatch>,
        last_flush: Instant,
    ) -> Option<Instant> {
        let gap = self.idle_gap?;
        batches
            .any(|b| b.opened_at().is_some())
            .then_some(last_flush + gap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use walshadow_emitter::{BatchConfig, DestTable, MetaColumns, RowBinaryEncoder, RowMeta};
    use walshadow_rows::Value;
    use walshadow_types::Lsn;
    use walshadow_types::catalog::fixtures;

    fn batch(max_rows: usize) -> TableBatch {
        let int4 = walshadow_pg_format::type_oid::INT4;
        let desc = fixtures::relation("t", vec![fixtures::attribute(1, "a", int4)], &["a"], vec![]);
        let dest = DestTable::new(&desc, &MetaColumns::default()).unwrap();
        TableBatch::new(
            "t",
            RowBinaryEncoder::new(&dest),
            BatchConfig {
                max_rows,
                max_bytes: 1 << 20,
            },
        )
    }

    fn push(b: &mut TableBatch) {
        let meta = RowMeta {
            lsn: Lsn(10),
            seq: Lsn(9),
            xid: 1,
            commit_time: 0,
            deleted: false,
        };
        b.push(&[Value::Int32(1)], &meta).unwrap();
    }

    #[test]
    fn full_old_or_idle() {
        let rule = FlushRule {
            max_age: Duration::from_secs(3600),
            idle_gap: None,
        };
        let now = Instant::now();
        let (mut a, mut b) = (batch(2), batch(2));
        assert!(!rule.due([&a, &b].into_iter(), now, now));
        // Nothing held, but the last flush is old: progress moves.
        assert!(rule.due([&a, &b].into_iter(), now, now + rule.max_age));
        push(&mut a);
        assert!(!rule.due([&a, &b].into_iter(), now, now));
        let opened = a.opened_at().unwrap();
        assert!(rule.due(
            [&a, &b].into_iter(),
            opened + rule.max_age,
            opened + rule.max_age
        ));
        push(&mut b);
        push(&mut b);
        assert!(rule.due([&a, &b].into_iter(), now, now));
    }

    #[test]
    fn wakes_for_the_oldest_row() {
        let rule = FlushRule {
            max_age: Duration::from_millis(50),
            idle_gap: None,
        };
        let tick = Instant::now();
        let mut a = batch(10);
        assert_eq!(rule.next_wake([&a].into_iter(), tick), tick + TICK);
        push(&mut a);
        let opened = a.opened_at().unwrap();
        assert_eq!(
            rule.next_wake([&a].into_iter(), tick),
            opened + rule.max_age
        );
    }

    #[test]
    fn idle_flushes_held_rows_after_the_gap() {
        let gap = Duration::from_millis(20);
        let rule = FlushRule {
            max_age: Duration::from_millis(500),
            idle_gap: Some(gap),
        };
        let flushed = Instant::now();
        let mut a = batch(10);
        // Nothing held: idleness flushes nothing, and the clock keeps its tick.
        assert!(!rule.idle([&a].into_iter(), flushed, flushed + gap));
        assert_eq!(rule.idle_wake([&a].into_iter(), flushed), None);
        push(&mut a);
        assert!(!rule.idle([&a].into_iter(), flushed, flushed + gap / 2));
        assert!(rule.idle([&a].into_iter(), flushed, flushed + gap));
        assert_eq!(
            rule.idle_wake([&a].into_iter(), flushed),
            Some(flushed + gap)
        );
        // Off: rows wait for their age.
        let off = FlushRule {
            idle_gap: None,
            ..rule
        };
        assert!(!off.idle([&a].into_iter(), flushed, flushed + gap * 100));
        assert_eq!(off.idle_wake([&a].into_iter(), flushed), None);
    }
}
