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

    /// A request that comes while the stream waits for ClickHouse (or the
    /// source): answered at once. True when a reload made a new ClickHouse
    /// client, which the wait then tries without waiting more. A pause is
    /// refused: the rows in hand cannot land now.
    pub(super) fn on_request_while_waiting(
        &mut self,
        req: StreamRequest,
    ) -> Result<bool, StreamError> {
        match req {
            StreamRequest::Status(tx) => {
                let status = self.status_now();
                let _ = tx.send(serde_json::to_value(&status).unwrap_or_default());
            }
            StreamRequest::Pause(tx) => {
                let waiting = self
                    .destinations
                    .health
                    .waiting_for
                    .clone()
                    .unwrap_or_else(|| "a source read".into());
                answer(
                    tx,
                    Reply::refused(format!(
                        "the stream waits for ClickHouse ({waiting}; see walshadow status): a \
                         pause lands the rows in hand first, which cannot happen now; ask again \
                         once ClickHouse takes them"
                    )),
                );
            }
            StreamRequest::Resume(tx) => {
                let reply = self.resume_stream()?;
                answer(tx, reply);
            }
            StreamRequest::Reload(new, tx) => {
                let reloaded = self.reload_settings(&new);
                let new_client = reloaded.as_ref().is_ok_and(|r| r.new_client);
                let _ = tx.send(reloaded);
                return Ok(new_client);
            }
        }
        Ok(false)
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
        let mut plan = self.settings.reload_plan(new);
        // TLS files are read when a client is made: one rotated in place
        // (same path) needs a new client too.
        let tls_files = {
            let c = &new.clickhouse;
            c.ca_file.is_some() || c.client_cert.is_some() || c.client_key.is_some()
        };
        let mut live = self.settings.clone();
        live.apply_live(new);
        if self.settings.client_differs(new) || tls_files {
            let client = clickhouse_client(&live.clickhouse)
                .map_err(|e| e.to_string())?
                .on_runtime(self.tasks.clone());
            self.destinations.client = client.clone();
            self.backfills.set_client(client);
            plan.new_client = true;
            if tls_files {
                plan.applied
                    .push("[clickhouse] TLS files: read again".into());
            }
        }
        self.settings = live;
        if plan.patterns_changed {
            self.scope.patterns_due = true;
        }
        // A pin for a table the config table streams now: its row keeps
        // it until a restart makes the file's section win.
        let (pins_added, opted): (Vec<_>, Vec<_>) = std::mem::take(&mut plan.pins_added)
            .into_iter()
            .partition(|(k, _)| !self.scope.pinned.contains(k));
        plan.pins_added = pins_added;
        for (key, _) in opted {
            plan.applied
                .retain(|line| !line.starts_with(&format!("[table.{key:?}]: added")));
            plan.needs_restart.push(format!(
                "[table.{key:?}]: added (the config table streams it now)"
            ));
        }
        if !plan.pins_added.is_empty() || !plan.pins_removed.is_empty() {
            // The file's sections now; the stream takes and lets go at the
            // next commit boundary. A later reload nets out an earlier one.
            for key in &plan.pins_removed {
                self.settings.tables.remove(key);
                self.scope.pins_added.retain(|(k, _)| k != key);
            }
            for (key, config) in &plan.pins_added {
                self.settings.tables.insert(key.clone(), config.clone());
                self.scope.pins_removed.retain(|k| k != key);
            }
            self.scope
                .pins_added
                .extend(plan.pins_added.iter().cloned());
            self.scope
                .pins_removed
                .extend(plan.pins_removed.iter().cloned());
            self.scope.patterns_due = true;
        }
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
