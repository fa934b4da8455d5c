//! Progress bars of initial loads, drawn when `walshadow run` has a
//! terminal (the CLI turns them on and routes its log lines around them).
//! Driven from the ledger once a second: blocks read of blocks to read.

use std::collections::HashMap;
use std::sync::OnceLock;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use walshadow_backfill::ledger::{Pass, Phase};

static MULTI: OnceLock<MultiProgress> = OnceLock::new();

/// Turns the bars on (drawn on stderr); returns the handle log lines must
/// be printed through (`MultiProgress::suspend`).
pub fn enable() -> &'static MultiProgress {
    MULTI.get_or_init(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
}

/// The bars, when turned on.
pub fn multi() -> Option<&'static MultiProgress> {
    MULTI.get()
}

/// One bar per load under way.
#[derive(Debug, Default)]
pub struct LoadBars {
    bars: HashMap<String, ProgressBar>,
}

impl LoadBars {
    pub fn update(&mut self, passes: &[(String, Pass)]) {
        let Some(multi) = multi() else {
            return;
        };
        for (key, pass) in passes {
            let (done, total) = pass.blocks();
            match pass.phase {
                Phase::Loading | Phase::Pending if total > 0 => {
                    let bar = self.bars.entry(key.clone()).or_insert_with(|| {
                        let b = multi.add(ProgressBar::new(total));
                        b.set_style(
                            ProgressStyle::with_template(
                                "{prefix} [{bar:30}] {percent:>3}% {pos}/{len} blocks {msg} ({elapsed})",
                            )
                            .unwrap_or_else(|_| ProgressStyle::default_bar())
                            .progress_chars("=> "),
                        );
                        b.set_prefix(format!("load {key}"));
                        b
                    });
                    bar.set_length(total);
                    bar.set_position(done);
                    bar.set_message(format!("{} rows", pass.rows));
                }
                _ => {
                    if let Some(bar) = self.bars.remove(key) {
                        bar.finish_and_clear();
                    }
                }
            }
        }
        self.bars.retain(|k, bar| {
            let keep = passes.iter().any(|(p, _)| p == k);
            if !keep {
                bar.finish_and_clear();
            }
            keep
        });
    }
}
