//! Where rows go: the ClickHouse client, each table's destination name,
//! and the stream's requests that wait out a destination that does not
//! take them (status, metrics and the log say so meanwhile).

use std::time::Duration;

use walshadow_emitter::{ClickHouseClient, ClickHouseError, ClientConfig, TlsOptions};

use super::{DESTINATION_BACKOFF, StreamError, Streamer};

/// How often an unreachable ClickHouse is asked whether it is back.
const PING_EVERY: Duration = Duration::from_millis(500);

/// The destination, as the stream uses it.
#[derive(Debug)]
pub(super) struct Destinations {
    pub client: ClickHouseClient,
    /// Whether requests go through, for `status` and the metrics.
    pub health: crate::status::DestinationStatus,
    /// Held for each insert and DDL statement into a ClickHouse table;
    /// `base_backup` swaps hold it from their schema gate to the exchange.
    pub locks: walshadow_backfill::staging::DestLocks,
    /// One server or a cluster, read at the start.
    pub topology: walshadow_emitter::Topology,
}

/// The default destination of `key` (see [`walshadow_types::default_destination`]).
pub(super) fn default_destination(key: &str) -> String {
    match walshadow_config::split_table_name(key) {
        Some((schema, name)) => walshadow_types::default_destination(&schema, &name),
        None => key.to_owned(),
    }
}

/// The ClickHouse client `[clickhouse]` describes; connects lazily. `init`
/// makes one too, so it refuses exactly what `run` would (a URL, a CA file,
/// a client certificate).
pub fn clickhouse_client(
    ch_cfg: &walshadow_config::ClickHouseConfig,
) -> Result<ClickHouseClient, ClickHouseError> {
    let mut client_cfg = ClientConfig::new(&ch_cfg.url, &ch_cfg.database);
    client_cfg.user = ch_cfg.user.clone();
    client_cfg.password = ch_cfg.password.clone();
    client_cfg.request_timeout = Duration::from_secs(ch_cfg.request_timeout_s.max(1));
    client_cfg.cluster = ch_cfg.cluster.clone();
    client_cfg.tls = TlsOptions {
        ca_file: ch_cfg.ca_file.clone(),
        client_cert: ch_cfg.client_cert.clone().zip(ch_cfg.client_key.clone()),
        insecure_skip_verify: ch_cfg.insecure_skip_tls_verify,
    };
    ClickHouseClient::new(client_cfg)
}

impl Streamer {
    /// The ClickHouse database the tables are in.
    pub(super) fn database(&self) -> &str {
        &self.settings.clickhouse.database
    }

    /// The ClickHouse table `key` streams into.
    pub(super) fn dest_of(&self, key: &str) -> String {
        self.progress
            .tables
            .get(key)
            .map_or_else(|| default_destination(key), |t| t.destination.clone())
    }

    /// Why `key` may not stream into `dest`: a reserved name, or one that
    /// another table in scope streams into (their rows would mix).
    pub(super) fn destination_refused(&self, key: &str, dest: &str) -> Option<String> {
        if let Some(problem) = walshadow_types::destination_problem(dest) {
            return Some(format!("{key}: {problem}"));
        }
        // `<destination><distributed_suffix>` is the Distributed table's.
        if let Some(suffix) = &self.settings.clickhouse.distributed_suffix
            && dest.ends_with(suffix.as_str())
        {
            return Some(format!(
                "{key}: destination {dest:?} ends with [clickhouse] distributed_suffix {suffix:?}, which names the Distributed tables; give the table another destination"
            ));
        }
        // Opted-out tables keep their ClickHouse tables, and a resyncing
        // one streams elsewhere until it swaps back into its own.
        let other = self
            .progress
            .tables
            .iter()
            .find(|(k, t)| {
                // A table owns its destination while in scope, or once a
                // ClickHouse table was made for it (a refused one never).
                let owns = self.scope.pinned.contains(k.as_str()) || t.schema.is_some();
                k.as_str() != key
                    && owns
                    && (t.destination == dest
                        || t.resync.as_ref().is_some_and(|r| r.destination == dest))
            })
            .map(|(k, _)| k)?;
        Some(format!(
            "source tables {other} and {key} would both stream into ClickHouse table {dest:?}"
        ))
    }

    /// Runs `f` until ClickHouse takes it. Transient and environment
    /// errors pause the stream here (backoff to 10 s; status written every
    /// second, so `walshadow status` and the metrics show what it waits
    /// for); only a definite error comes back, as
    /// [`StreamError::ClickHouse`]. A stop request ends the wait with
    /// [`StreamError::Stopping`]: nothing past the request was recorded, so
    /// nothing is lost by giving up.
    ///
    /// The flush in flight lands first: the stream's requests follow its
    /// inserts, as they did when it sent one thing at a time.
    pub(super) async fn retry_clickhouse<F, Fut>(
        &mut self,
        what: &str,
        f: F,
    ) -> Result<(), StreamError>
    where
        F: Fn(ClickHouseClient) -> Fut,
        Fut: std::future::Future<Output = Result<(), walshadow_emitter::ClickHouseError>>,
    {
        if self.in_flight.is_some() {
            // Boxed: landing retries an insert through here (with nothing
            // in flight by then).
            Box::pin(self.finish_flush()).await?;
        }
        let mut backoff = DESTINATION_BACKOFF;
        loop {
            let e = match f(self.destinations.client.clone()).await {
                Ok(()) => {
                    self.destination_ok();
                    return Ok(());
                }
                Err(e) if e.is_definite() => {
                    self.destination_ok();
                    return Err(e.into());
                }
                Err(e) => e,
            };
            let delay = backoff.next_delay();
            self.destination_failed(what, &e, delay);
            // Nothing answered: ClickHouse's health check is asked
            // meanwhile, and the request retried once it answers, not at
            // the end of a backoff that grew while the server was down (it
            // may be back before the first ask). A server that answers the
            // health check but keeps breaking the request is so retried
            // every PING_EVERY, each failure logged.
            let ping = e.is_unreachable().then_some(PING_EVERY);
            if self.pause_asking(delay, ping).await? {
                tracing::info!("ClickHouse answers again: {what} is retried now");
            }
        }
    }

    pub(super) fn destination_ok(&mut self) {
        let d = &mut self.destinations.health;
        if let Some(since) = d.failing_since_unix_ms.take() {
            let secs = crate::status::unix_ms_now().saturating_sub(since) as f64 / 1000.0;
            tracing::info!(
                failures = d.failures,
                "ClickHouse takes requests again after {secs:.1} s: {} done",
                d.waiting_for.as_deref().unwrap_or("the request")
            );
        }
        d.failures = 0;
        d.waiting_for = None;
        d.last_success_unix_ms = Some(crate::status::unix_ms_now());
        self.metrics.set_destination_ok(true);
    }

    pub(super) fn destination_failed(
        &mut self,
        what: &str,
        e: &walshadow_emitter::ClickHouseError,
        retry_in: Duration,
    ) {
        let class = e.class();
        let d = &mut self.destinations.health;
        d.failing_since_unix_ms
            .get_or_insert_with(crate::status::unix_ms_now);
        d.failures += 1;
        d.waiting_for = Some(what.to_owned());
        d.last_error = Some(e.to_string());
        d.last_class = Some(class.as_str().to_owned());
        self.metrics
            .add_destination_error(&e.label(), class.as_str());
        self.metrics.add_destination_retry();
        self.metrics.set_destination_ok(false);
        let failures = d.failures;
        match class {
            walshadow_emitter::ErrorClass::Environment => tracing::error!(
                failures,
                "ClickHouse cannot take the stream's requests ({what}): {e}; \
                 the stream waits, retrying in {retry_in:?} (nothing is lost meanwhile: \
                 progress and the slot stay behind these rows); fix the destination"
            ),
            _ => tracing::warn!(
                failures,
                "ClickHouse: {what}: {e}; retrying in {retry_in:?}"
            ),
        }
        self.write_status();
    }

    /// [`Streamer::retry_clickhouse`] for a request with an answer.
    pub(super) async fn query_clickhouse<T, F, Fut>(
        &mut self,
        what: &str,
        f: F,
    ) -> Result<T, StreamError>
    where
        F: Fn(ClickHouseClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, walshadow_emitter::ClickHouseError>>,
    {
        let slot = std::sync::Arc::new(std::sync::Mutex::new(None));
        let out = std::sync::Arc::clone(&slot);
        let f = &f;
        self.retry_clickhouse(what, move |ch| {
            let out = std::sync::Arc::clone(&out);
            async move {
                let v = f(ch).await?;
                if let Ok(mut o) = out.lock() {
                    *o = Some(v);
                }
                Ok(())
            }
        })
        .await?;
        let v = slot.lock().ok().and_then(|mut o| o.take());
        v.ok_or_else(|| StreamError::State(format!("{what}: no answer kept")))
    }
}
