//! A small client for ClickHouse's HTTP interface: statements as POST
//! bodies, inserts as `INSERT … FORMAT RowBinary` in the `query` parameter
//! with the rows as the body.
//!
//! Every request carries `wait_end_of_query=1`, so ClickHouse buffers the
//! result and a `200 OK` means the statement finished (for an insert: the
//! parts are written); failures come back as an HTTP error with the
//! exception code in `X-ClickHouse-Exception-Code`. A body that still ends
//! in an exception is reported as one (see [`crate::error`]).
//!
//! `https://` URLs use rustls (through `hyper-rustls`): the system's trust
//! anchors or a CA file, host names verified, an optional client
//! certificate; verification is off only with
//! [`TlsOptions::insecure_skip_verify`], which warns each time a client is
//! made.
//!
//! Credentials go in the `X-ClickHouse-User`/`X-ClickHouse-Key` headers,
//! never in the URL. Connections are pooled (HTTP/1.1 keep-alive); idle ones
//! are closed after `pool_idle_timeout`, which should stay below the
//! server's `keep_alive_timeout` so a request is not sent on a connection
//! the server is closing. Statements name their tables with the database
//! (no `database` parameter), so `CREATE DATABASE` works like the rest.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use walshadow_tls::rustls;

use crate::ddl::quote_ident;
use crate::error::{ClickHouseError, trailing_exception};
use crate::topology::Topology;

/// Where and how to reach ClickHouse.
#[derive(Clone)]
pub struct ClientConfig {
    /// `http://host:port` of the HTTP interface (a path prefix is kept).
    pub url: String,
    pub user: String,
    pub password: String,
    /// The destination database (inserts go to its tables).
    pub database: String,
    pub connect_timeout: Duration,
    /// Whole request: send, server work, response.
    pub request_timeout: Duration,
    pub pool_idle_timeout: Duration,
    /// Larger responses are refused (the client reads small results only).
    pub max_response_bytes: usize,
    /// For `https://` URLs only.
    pub tls: TlsOptions,
    /// `[clickhouse] cluster`: DDL `ON CLUSTER` it (over an Atomic
    /// database; see [`Topology`]).
    pub cluster: Option<String>,
}

/// How an `https://` client authenticates the server, and itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM trust anchors to use instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate chain and its private key (0600), presented
    /// when the server asks for a client certificate.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Accept any server certificate: encrypted, but anyone on the path
    /// can pose as ClickHouse and read rows and password.
    pub insecure_skip_verify: bool,
}

impl TlsOptions {
    fn is_set(&self) -> bool {
        *self != TlsOptions::default()
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url)
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .field("database", &self.database)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("tls", &self.tls)
            .finish()
    }
}

impl ClientConfig {
    pub fn new(url: impl Into<String>, database: impl Into<String>) -> ClientConfig {
        ClientConfig {
            url: url.into(),
            user: "default".into(),
            password: String::new(),
            database: database.into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            pool_idle_timeout: Duration::from_secs(2),
            max_response_bytes: 64 << 20,
            tls: TlsOptions::default(),
            cluster: None,
        }
    }
}

/// Settings sent with one insert (`name=value` URL parameters).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InsertSettings {
    /// `insert_deduplication_token`: the same token on a retried insert
    /// makes ClickHouse drop it as a duplicate (tables need
    /// `non_replicated_deduplication_window > 0`).
    pub deduplication_token: Option<String>,
    /// Further settings, e.g. `("max_insert_block_size", "1000000")`.
    pub extra: Vec<(String, String)>,
}

/// A pooled client; cheap to clone.
#[derive(Clone)]
pub struct ClickHouseClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `scheme://authority/path` with no trailing `?`.
    base: String,
    user: HeaderValue,
    key: HeaderValue,
    config: Arc<ClientConfig>,
    /// Read once, on the first DDL: shared by the clones.
    topology: Arc<tokio::sync::OnceCell<Topology>>,
    /// Where requests run ([`ClickHouseClient::on_runtime`]); `None`: in
    /// the caller's task.
    runtime: Option<tokio::runtime::Handle>,
}

impl fmt::Debug for ClickHouseClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClickHouseClient")
            .field("config", &self.config)
            .finish()
    }
}

impl ClickHouseClient {
    /// A client for `config`; connects lazily. Needs a tokio runtime when
    /// used.
    pub fn new(config: ClientConfig) -> Result<ClickHouseClient, ClickHouseError> {
        let url = config.url.trim_end_matches('/');
        let https = url.starts_with("https://");
        let scheme_len = if https { "https://" } else { "http://" }.len();
        if !(https || url.starts_with("http://")) || url.len() <= scheme_len {
            return Err(ClickHouseError::Config(format!(
                "{:?}: expected ClickHouse's HTTP interface, e.g. http://127.0.0.1:8123 \
                 or https://clickhouse.example.com:8443",
                config.url
            )));
        }
        if !https && config.tls.is_set() {
            return Err(ClickHouseError::Config(format!(
                "{url}: ca_file, client_cert and insecure_skip_tls_verify apply to https:// URLs; \
                 this one is plain http"
            )));
        }
        // Parse once so a bad URL fails here, not on the first request.
        format!("{url}/")
            .parse::<hyper::Uri>()
            .map_err(|e| ClickHouseError::Config(format!("{:?}: {e}", config.url)))?;
        let user = HeaderValue::from_str(&config.user).map_err(|_| {
            ClickHouseError::Config("the user name cannot be sent in an HTTP header".into())
        })?;
        let mut key = HeaderValue::from_str(&config.password).map_err(|_| {
            ClickHouseError::Config("the password cannot be sent in an HTTP header".into())
        })?;
        key.set_sensitive(true);

        let mut tcp = HttpConnector::new();
        tcp.set_connect_timeout(Some(config.connect_timeout));
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        let tls = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_config(
            &config.url,
            &config.tls,
            https,
        )?);
        let connector = if https {
            tls.https_only().enable_http1().wrap_connector(tcp)
        } else {
            tls.https_or_http().enable_http1().wrap_connector(tcp)
        };
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.pool_idle_timeout)
            .build(connector);
        Ok(ClickHouseClient {
            http,
            base: url.to_string(),
            user,
            key,
            config: Arc::new(config),
            topology: Arc::new(tokio::sync::OnceCell::new()),
            runtime: None,
        })
    }

    /// Requests (the connection they open or reuse, and its task) run on
    /// `runtime`, whichever thread asks: a connection opened from another
    /// runtime would be driven by that one, and the pool shares it with
    /// every clone of the client (the stream's own thread asks; the
    /// daemon's runtime runs the inserts and loads that reuse it).
    #[must_use]
    pub fn on_runtime(mut self, runtime: tokio::runtime::Handle) -> ClickHouseClient {
        self.runtime = Some(runtime);
        self
    }

    /// The topology once [`ClickHouseClient::topology`] read it.
    pub fn known_topology(&self) -> Option<Topology> {
        self.topology.get().cloned()
    }

    /// How the database takes DDL: from `[clickhouse] cluster` and the
    /// database's engine (`system.databases`), read once. A database not
    /// made yet counts as Atomic, and is not remembered.
    pub async fn topology(&self) -> Result<Topology, ClickHouseError> {
        if let Some(t) = self.topology.get() {
            return Ok(t.clone());
        }
        let sql = format!(
            "SELECT engine FROM system.databases WHERE name = {}",
            crate::ddl::quote_string(&self.config.database)
        );
        let text = self.query(&sql).await?;
        let engine = text.lines().next().map(str::trim).filter(|e| !e.is_empty());
        let topology = Topology::of(self.config.cluster.as_deref(), engine);
        if engine.is_some() {
            let _ = self.topology.set(topology.clone());
        }
        Ok(topology)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// Run a query and return its result as text (`TabSeparated` unless
    /// the query says `FORMAT`).
    pub async fn query(&self, sql: &str) -> Result<String, ClickHouseError> {
        let body = self
            .request(
                &[("default_format", "TabSeparated")],
                Bytes::copy_from_slice(sql.as_bytes()),
                summary(sql),
            )
            .await?
            .body;
        String::from_utf8(body.to_vec()).map_err(|_| ClickHouseError::Response {
            context: summary(sql),
            message: "the result is not UTF-8 text".into(),
        })
    }

    /// ClickHouse's health check (`GET /ping`, no credentials): `Ok` once
    /// the server answers it. Waits at most `within`.
    pub async fn ping(&self, within: Duration) -> Result<(), ClickHouseError> {
        let context = "GET /ping";
        let uri = format!("{}/ping", self.base);
        let request = Request::get(uri)
            .body(Full::new(Bytes::new()))
            .map_err(|e| ClickHouseError::Config(format!("cannot build a request: {e}")))?;
        match tokio::time::timeout(within, self.send(request, context)).await {
            Ok(answer) => answer.map(drop),
            Err(_) => Err(ClickHouseError::Timeout {
                endpoint: self.base.clone(),
                context: context.into(),
                after: within,
            }),
        }
    }

    /// The columns of `database.table` as `(name, type)` in table order;
    /// empty when there is no such table.
    pub async fn column_types(
        &self,
        database: &str,
        table: &str,
    ) -> Result<Vec<(String, String)>, ClickHouseError> {
        let mut tables = self
            .columns_where(&format!(
                "database = {} AND table = {}",
                crate::ddl::quote_string(database),
                crate::ddl::quote_string(table)
            ))
            .await?;
        Ok(tables.remove(table).unwrap_or_default())
    }

    /// The columns of `tables` of `database`, as
    /// [`ClickHouseClient::column_types`] gives them, in a query per 500
    /// tables; a table that does not exist is not in the map.
    pub async fn tables_column_types(
        &self,
        database: &str,
        tables: &[String],
    ) -> Result<BTreeMap<String, Vec<(String, String)>>, ClickHouseError> {
        let mut all = BTreeMap::new();
        for part in tables.chunks(500) {
            let names: Vec<String> = part.iter().map(|t| crate::ddl::quote_string(t)).collect();
            all.extend(
                self.columns_where(&format!(
                    "database = {} AND table IN ({})",
                    crate::ddl::quote_string(database),
                    names.join(", ")
                ))
                .await?,
            );
        }
        Ok(all)
    }

    async fn columns_where(
        &self,
        condition: &str,
    ) -> Result<BTreeMap<String, Vec<(String, String)>>, ClickHouseError> {
        let sql = format!(
            "SELECT table, name, type FROM system.columns WHERE {condition} \
             ORDER BY table, position FORMAT JSONCompactEachRow"
        );
        let text = self.query(&sql).await?;
        let mut tables: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            let (table, name, ty) =
                serde_json::from_str::<(String, String, String)>(l).map_err(|e| {
                    ClickHouseError::Response {
                        context: summary(&sql),
                        message: format!("unexpected system.columns row {l:?}: {e}"),
                    }
                })?;
            tables.entry(table).or_default().push((name, ty));
        }
        Ok(tables)
    }

    /// Run a statement that returns nothing of interest (DDL).
    pub async fn execute(&self, sql: &str) -> Result<(), ClickHouseError> {
        self.execute_with_settings(sql, &[]).await
    }

    /// [`ClickHouseClient::execute`] with query-level settings (e.g.
    /// [`crate::DestTable::query_settings`]).
    pub async fn execute_with_settings(
        &self,
        sql: &str,
        settings: &[(String, String)],
    ) -> Result<(), ClickHouseError> {
        let params: Vec<(&str, &str)> = settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.request(
            &params,
            Bytes::copy_from_slice(sql.as_bytes()),
            summary(sql),
        )
        .await
        .map(drop)
    }

    /// `CREATE DATABASE IF NOT EXISTS` for the configured database.
    pub async fn ensure_database(&self) -> Result<(), ClickHouseError> {
        let topology = self.topology().await?;
        self.execute(&crate::ddl::create_database_sql(
            &self.config.database,
            topology.on_cluster(),
        ))
        .await
    }

    /// Insert `row_count` RowBinary rows for `columns` into `table` of the
    /// configured database. `Ok` means ClickHouse has written them (or
    /// recognised them as a duplicate of an earlier insert with the same
    /// token): its answer carries ClickHouse's `X-ClickHouse-Summary` with
    /// a `written_rows` count. A `200` without it came from something that
    /// is not ClickHouse, and is an error: a proxy answering `Ok.` to
    /// everything takes no rows. The count itself may differ from
    /// `row_count` on a real server (materialized views add theirs; a
    /// repeat after an unknown outcome may be deduplicated in part, block
    /// by block), so a difference is logged, not refused.
    pub async fn insert(
        &self,
        table: &str,
        columns: &[String],
        rows: Bytes,
        row_count: usize,
        settings: &InsertSettings,
    ) -> Result<(), ClickHouseError> {
        let cols: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
        let statement = format!(
            "INSERT INTO {}.{} ({}) FORMAT RowBinary",
            quote_ident(&self.config.database),
            quote_ident(table),
            cols.join(", ")
        );
        let mut params: Vec<(&str, &str)> = vec![("query", &statement)];
        if let Some(token) = &settings.deduplication_token {
            params.push(("insert_deduplication_token", token));
        }
        for (k, v) in &settings.extra {
            params.push((k, v));
        }
        let context = format!(
            "INSERT INTO {}.{}",
            quote_ident(&self.config.database),
            quote_ident(table)
        );
        let answer = self.request(&params, rows, context.clone()).await?;
        check_written(&context, answer.summary.as_deref(), row_count)
    }

    async fn request(
        &self,
        params: &[(&str, &str)],
        body: Bytes,
        context: String,
    ) -> Result<Answer, ClickHouseError> {
        let mut uri = format!("{}/?wait_end_of_query=1", self.base);
        for (k, v) in params {
            uri.push('&');
            percent_encode_into(&mut uri, k);
            uri.push('=');
            percent_encode_into(&mut uri, v);
        }
        let request = Request::post(uri)
            .header("X-ClickHouse-User", self.user.clone())
            .header("X-ClickHouse-Key", self.key.clone())
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(Full::new(body))
            .map_err(|e| ClickHouseError::Config(format!("cannot build a request: {e}")))?;
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, self.send(request, &context)).await {
            Ok(result) => result,
            Err(_) => Err(ClickHouseError::Timeout {
                endpoint: self.base.clone(),
                context,
                after: timeout,
            }),
        }
    }

    async fn send(
        &self,
        request: Request<Full<Bytes>>,
        context: &str,
    ) -> Result<Answer, ClickHouseError> {
        let connection = |message: String| ClickHouseError::Connection {
            endpoint: self.base.clone(),
            context: context.to_string(),
            message,
        };
        let limit = self.config.max_response_bytes;
        let exchange = exchange(self.http.clone(), request, limit);
        let exchanged = match &self.runtime {
            Some(runtime) => {
                let mut task = AbortOnDrop(runtime.spawn(exchange));
                match (&mut task.0).await {
                    Ok(r) => r,
                    Err(e) => return Err(connection(format!("the request's task ended: {e}"))),
                }
            }
            None => exchange.await,
        };
        let (response, body) = exchanged.map_err(|e| {
            let message = error_chain(&e);
            match tls_failure(&e) {
                Some(tls) => ClickHouseError::Tls {
                    endpoint: self.base.clone(),
                    context: context.to_string(),
                    message: match tls {
                        rustls::Error::InvalidCertificate(_) => format!(
                            "{message} (clickhouse.ca_file names the CA that signed \
                             ClickHouse's certificate; the URL's host must be one the \
                             certificate names)"
                        )
                        .into(),
                        _ => message.into(),
                    },
                },
                None => connection(message),
            }
        })?;
        let status = response.status;
        let code = response
            .headers
            .get("X-ClickHouse-Exception-Code")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok());
        let summary = response
            .headers
            .get("X-ClickHouse-Summary")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = body.map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ClickHouseError::Response {
                    context: context.to_string(),
                    message: format!("response larger than {limit} bytes"),
                }
            } else {
                connection(format!("reading the response: {}", error_chain(e.as_ref())))
            }
        })?;
        if !status.is_success() || code.is_some() {
            return Err(ClickHouseError::Server {
                context: context.to_string(),
                status: status.as_u16(),
                code,
                message: message_of(&body),
            });
        }
        if let Some((code, message)) = trailing_exception(&body) {
            return Err(ClickHouseError::Server {
                context: context.to_string(),
                status: status.as_u16(),
                code: Some(code),
                message,
            });
        }
        Ok(Answer { body, summary })
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Sends `request` and reads its response body, at most `limit` bytes.
async fn exchange(
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    request: Request<Full<Bytes>>,
    limit: usize,
) -> Result<
    (hyper::http::response::Parts, Result<Bytes, BoxError>),
    hyper_util::client::legacy::Error,
> {
    let (parts, body) = http.request(request).await?.into_parts();
    let body = Limited::new(body, limit)
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes);
    Ok((parts, body))
}

/// A request's task, aborted when its caller stops waiting (a timeout):
/// as the request itself would be, in the caller's task.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The rustls configuration for `options`; for a plain-http client (which
/// never uses it) one that trusts nothing.
fn tls_config(
    url: &str,
    options: &TlsOptions,
    https: bool,
) -> Result<rustls::ClientConfig, ClickHouseError> {
    let config_error = |e: &dyn fmt::Display| ClickHouseError::Config(format!("{url}: {e}"));
    let provider = walshadow_tls::provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| config_error(&e))?;
    let builder = if !https {
        builder.with_root_certificates(rustls::RootCertStore::empty())
    } else if options.insecure_skip_verify {
        tracing::warn!(
            url,
            "clickhouse.insecure_skip_tls_verify is on: ClickHouse's certificate is not checked, \
             so anyone on the network path can pose as it and read the rows and the password; \
             name its CA in clickhouse.ca_file instead"
        );
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(walshadow_tls::AnyCertificate::new(
                provider,
            )))
    } else {
        let roots = match &options.ca_file {
            Some(path) => {
                let (roots, ignored) = walshadow_tls::roots_from(path)
                    .map_err(|e| config_error(&format!("ca_file {e}")))?;
                if roots.is_empty() {
                    return Err(config_error(&format!(
                        "ca_file {}: none of its {ignored} certificates can be a trust anchor",
                        path.display()
                    )));
                }
                roots
            }
            None => walshadow_tls::system_roots().map_err(|e| config_error(&e))?,
        };
        builder.with_root_certificates(roots)
    };
    match &options.client_cert {
        Some((cert, key)) => {
            let chain = walshadow_tls::certificates(cert)
                .map_err(|e| config_error(&format!("client_cert {e}")))?;
            let key = walshadow_tls::private_key(key)
                .map_err(|e| config_error(&format!("client_key {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| config_error(&format!("client_cert and client_key: {e}")))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// A successful answer: the body and ClickHouse's `X-ClickHouse-Summary`.
struct Answer {
    body: Bytes,
    summary: Option<String>,
}

/// The insert's summary shows at least `sent` rows written, or 0 (see
/// [`ClickHouseClient::insert`]).
fn check_written(context: &str, summary: Option<&str>, sent: usize) -> Result<(), ClickHouseError> {
    let not_clickhouse = |message: String| ClickHouseError::Response {
        context: context.to_string(),
        message,
    };
    let Some(summary) = summary else {
        return Err(not_clickhouse(format!(
            "answered 200 without X-ClickHouse-Summary: not ClickHouse's HTTP interface \
             (a proxy or another service at this URL?); {sent} rows not counted as written"
        )));
    };
    let written = serde_json::from_str::<serde_json::Value>(summary)
        .ok()
        .and_then(|v| match &v["written_rows"] {
            serde_json::Value::String(s) => s.parse::<u64>().ok(),
            serde_json::Value::Number(n) => n.as_u64(),
            _ => None,
        })
        .ok_or_else(|| {
            not_clickhouse(format!(
                "X-ClickHouse-Summary without written_rows: {summary:?}"
            ))
        })?;
    if written < sent as u64 {
        tracing::debug!(
            context,
            sent,
            written,
            "insert answered fewer rows written than sent: a (partly) deduplicated repeat"
        );
    }
    Ok(())
}

/// The first line of a statement, shortened, for error context.
fn summary(sql: &str) -> String {
    let line = sql.trim().lines().next().unwrap_or("");
    match line.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", line.get(..i).unwrap_or(line)),
        None => line.to_string(),
    }
}

fn message_of(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(2000) {
        Some((i, _)) => format!("{}…", text.get(..i).unwrap_or(text)),
        None => text.to_string(),
    }
}

/// The rustls error among `e`'s sources, if the TLS layer failed.
/// tokio-rustls and hyper-rustls each wrap it in an `io::Error`, whose
/// `source()` skips what it wraps, so wrapped errors are opened too.
fn tls_failure<'e>(e: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut next = Some(e);
    while let Some(inner) = next {
        if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        next = match inner.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|wrapped| wrapped as _),
            None => inner.source(),
        };
    }
    None
}

/// An error and its sources ("connection refused" sits a few levels down).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// RFC 3986 percent-encoding of everything but unreserved characters.
fn percent_encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b >> 4)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(b & 15)]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding() {
        let mut s = String::new();
        percent_encode_into(&mut s, "INSERT INTO `d`.`t` (a) FORMAT RowBinary é&=");
        assert_eq!(
            s,
            "INSERT%20INTO%20%60d%60.%60t%60%20%28a%29%20FORMAT%20RowBinary%20%C3%A9%26%3D"
        );
    }

    #[test]
    fn tls_options_need_https() {
        let mut c = ClientConfig::new("http://127.0.0.1:8123", "d");
        c.tls.insecure_skip_verify = true;
        let e = ClickHouseClient::new(c).unwrap_err().to_string();
        assert!(e.contains("plain http"), "{e}");
        let mut c = ClientConfig::new("https://127.0.0.1:8443", "d");
        c.tls.ca_file = Some("/nonexistent/ca.pem".into());
        let e = ClickHouseClient::new(c).unwrap_err().to_string();
        assert!(e.contains("ca_file /nonexistent/ca.pem"), "{e}");
        let mut c = ClientConfig::new("https://127.0.0.1:8443", "d");
        c.tls.insecure_skip_verify = true;
        assert!(ClickHouseClient::new(c).is_ok());
    }

    #[test]
    fn config_errors() {
        assert!(matches!(
            ClickHouseClient::new(ClientConfig::new("ftp://x", "d")),
            Err(ClickHouseError::Config(_))
        ));
        let mut c = ClientConfig::new("http://127.0.0.1:8123", "d");
        c.password = "bad\npassword".into();
        let e = ClickHouseClient::new(c).unwrap_err();
        assert!(!e.to_string().contains("bad\npassword"));
        assert!(format!("{:?}", ClientConfig::new("http://h", "d")).contains("<hidden>"));
    }

    #[test]
    fn written_rows_checked() {
        let ok = |s: Option<&str>, n| check_written("INSERT", s, n).is_ok();
        assert!(ok(Some(r#"{"read_rows":"0","written_rows":"3"}"#), 3));
        assert!(ok(Some(r#"{"written_rows":"5"}"#), 3), "views add rows");
        assert!(
            ok(Some(r#"{"written_rows":"0"}"#), 3),
            "a deduplicated repeat"
        );
        assert!(ok(Some(r#"{"written_rows":3}"#), 3));
        assert!(!ok(None, 3), "a proxy's 200 Ok.");
        assert!(
            ok(Some(r#"{"written_rows":"2"}"#), 3),
            "partly deduplicated"
        );
        assert!(!ok(Some("Ok."), 3));
        assert!(!ok(Some(r#"{"read_rows":"1"}"#), 3));
        let e = check_written("INSERT INTO t", None, 500).unwrap_err();
        assert_eq!(e.class(), crate::error::ErrorClass::Environment);
        assert!(e.to_string().contains("500 rows"), "{e}");
    }

    #[test]
    fn summaries() {
        assert_eq!(summary("  SELECT 1\nFROM x"), "SELECT 1");
        assert_eq!(summary(&"x".repeat(200)).chars().count(), 121);
    }
}
