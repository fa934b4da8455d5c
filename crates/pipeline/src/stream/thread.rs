//! The streaming loop on a thread of its own.
//!
//! Decoding is the CPU-heavy half of `run`; the intake (source socket,
//! record filter, segment store, shadow feed) is the other. On the shared
//! workers the tap's wake-up puts the stream task in the intake's worker's
//! LIFO slot, which no other worker steals: in a catch-up both halves then
//! take turns on one core. Here the stream has a core to itself, with a
//! current-thread runtime of its own (its timers and ClickHouse requests
//! wake only it), and the WAL crosses threads once, through the tap.
//! Loads, a flush's inserts and every ClickHouse request (the client's
//! `on_runtime`) run on the daemon's runtime ([`Streamer::new`] captures
//! its handle), so they overlap decoding and share one connection pool
//! driven there.

use tokio::sync::{mpsc, oneshot};
use walshadow_intake::TapEvent;

use super::{StreamError, Streamer};

/// A running [`Streamer::run`]; dropping it stops the loop where it waits
/// (what it held is streamed again at the next start, as after `kill -9`).
#[derive(Debug)]
pub struct StreamThread {
    ended: oneshot::Receiver<Result<(), StreamError>>,
    /// Dropped (or sent) to end the loop early.
    cancel: Option<oneshot::Sender<()>>,
}

impl StreamThread {
    pub fn start(
        streamer: Streamer,
        tap: mpsc::Receiver<TapEvent>,
    ) -> Result<StreamThread, StreamError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| StreamError::State(format!("starting the stream's runtime: {e}")))?;
        let (ended_tx, ended) = oneshot::channel();
        let (cancel, cancelled) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("walshadow-stream".into())
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(async move {
                        tokio::select! {
                            r = streamer.run(tap) => Some(r),
                            _ = cancelled => None,
                        }
                    })
                });
                let ended = match std::panic::catch_unwind(run) {
                    Ok(r) => r,
                    // The message, for `run`'s error (the hook printed
                    // the rest).
                    Err(panic) => {
                        let what = panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Some(Err(StreamError::State(format!(
                            "the streaming loop panicked: {what}"
                        ))))
                    }
                };
                if let Some(r) = ended {
                    let _ = ended_tx.send(r);
                }
            })
            .map_err(|e| StreamError::State(format!("starting the stream's thread: {e}")))?;
        Ok(StreamThread {
            ended,
            cancel: Some(cancel),
        })
    }

    /// The loop's result once it ends.
    pub async fn join(&mut self) -> Result<(), StreamError> {
        match (&mut self.ended).await {
            Ok(r) => r,
            Err(_) => Err(StreamError::State(
                "the streaming thread ended without a result (it was stopped)".into(),
            )),
        }
    }

    /// Ends the loop where it waits, and waits for its thread to drop it.
    pub async fn stop(&mut self) {
        if let Some(c) = self.cancel.take() {
            let _ = c.send(());
        }
        let _ = (&mut self.ended).await;
    }
}
