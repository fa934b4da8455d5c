//! `walshadow ctl`'s requests, answered by the stream between chunks of
//! WAL: status, pause and resume, and a reloaded config file.

use tokio::sync::oneshot;

use super::{StreamError, StreamRequest, StreamSettings, Streamer, clickhouse_client};
use crate::control::Reply;
use crate::progress::Paused;

impl Streamer {
    pub(super) async fn on_request(&mut self, req: StreamRequest) -> Result<(), StreamError> {
        match req {
            StreamRequest::Status(tx) => {
                let status = self.status_now();
                let _ = tx.send(serde_json::to_value(&status).unwrap_or_default());
            }
            StreamRequest::Pause(tx) => {
                let reply = self.pause_stream().await?;
                answer(tx, reply);
            }
            StreamRequest::Resume(tx) => {
                let reply = self.resume_stream()?;
                answer(tx, reply);
            }
            StreamRequest::Reload(new, tx) => {
                let _ = tx.send(self.reload_settings(&new));
            }
        }
        Ok(())
    }

    /// Lands the rows in hand, then takes no more WAL: nothing is applied
    /// past `applied` until `resume`, and a restart stays paused.
    async fn pause_stream(&mut self) -> Result<Reply, StreamError> {
        if let Some(p) = &self.progress.paused {
            return Ok(Reply::ok(format!(
                "already paused, at {} (everything committed up to it is in ClickHouse)",
                p.at
            )));
        }
        self.flush_all().await?;
        let at = self.progress.applied;
        self.progress.paused = Some(Paused {
            since_unix_ms: crate::status::unix_ms_now(),
            at,
        });
        self.write_progress()?;
        self.write_status();
        tracing::warn!(
            %at,
            "paused by `walshadow ctl pause`: no WAL is taken (the slot keeps it) until `walshadow ctl resume`"
        );
        Ok(Reply::ok(format!(
            "paused at {at}: everything committed up to it is in ClickHouse; no WAL is taken (the \
             source's slot keeps it, so its pg_wal grows) until `walshadow ctl resume`, across \
             restarts too"
        )))
    }

    fn resume_stream(&mut self) -> Result<Reply, StreamError> {
        let Some(p) = self.progress.paused.take() else {
            return Ok(Reply::ok("not paused: streaming"));
        };
        self.write_progress()?;
        self.write_status();
        tracing::info!(paused_at = %p.at, "resumed by `walshadow ctl resume`: taking WAL again");
        Ok(Reply::ok(format!(
            "resumed: streaming again from {} (paused there)",
            p.at
        )))
    }

    /// Applies what can change while running; a ClickHouse setting that
    /// does not make a client changes nothing.
    fn reload_settings(&mut self, new: &StreamSettings) -> Result<super::Reloaded, String> {
        let plan = self.settings.reload_plan(new);
        let client_changed = self.settings.client_differs(new);
        let mut live = self.settings.clone();
        live.apply_live(new);
        if client_changed {
            let client = clickhouse_client(&live.clickhouse).map_err(|e| e.to_string())?;
            self.destinations.client = client.clone();
            self.backfills.set_client(client);
        }
        self.settings = live;
        for t in self.tables.values_mut() {
            if let Some(b) = t.batch.as_mut() {
                b.set_config(self.settings.batch.clone());
            }
        }
        Ok(plan)
    }
}

fn answer(tx: oneshot::Sender<Reply>, reply: Reply) {
    // The client may have gone; the pause or resume stands.
    let _ = tx.send(reply);
}
