//! The ClickHouse engine tests replicate into.
//!
//! No ClickHouse server package installs here, so tests run `scripts/clickhouse-engine`: the
//! ClickHouse 26.9 engine in-process (PyPI `chdb-core`) behind the subset of ClickHouse's HTTP
//! interface walshadow uses. The daemon talks to it with the same HTTP code it uses against a
//! real server; see `scripts/clickhouse_engine.py` for what is served and how it differs.
//!
//! ```text
//! ClickHouseEngine::start() ──▶ scripts/clickhouse-engine --port P --data <dir>/data
//!   <dir> = own WorkDir          (stdout+stderr appended to <dir>/engine.log)
//!   or ClickHouseOptions::dir    │
//!                                ├─ GET / == "Ok." ─▶ url(), query(sql), post/get/send
//!                                ├─ stop() (SIGTERM) / crash() (SIGKILL) ─▶ start_again(): same port, same data
//!                                └─ Drop: stopped; an own WorkDir is removed
//! ```
//!
//! The engine is not PostgreSQL: it runs as the test's own user, root included.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cluster::free_port;
use crate::{WorkDir, wait_until};

/// Long enough for the first start on a fresh machine, when the wrapper pip-installs chdb.
const START_TIMEOUT: Duration = Duration::from_secs(300);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
const PORT_ATTEMPTS: usize = 5;

/// How to start a [`ClickHouseEngine`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClickHouseOptions {
    /// User and password the engine requires; `None` accepts user `default` with an empty
    /// password, like a fresh ClickHouse server.
    pub credentials: Option<(String, String)>,
    /// Directory for the engine's data (`data/`) and log (`engine.log`), created if missing
    /// and left in place; `None` uses a WorkDir of its own, removed on drop.
    pub dir: Option<PathBuf>,
    /// Also serve HTTPS on a port of its own ([`ClickHouseEngine::https_url`]).
    pub tls: Option<EngineTls>,
    /// Stand in for a cluster of this name: each DDL statement is recorded as sent
    /// ([`ClickHouseEngine::cluster_ddl`]) and run as one server would (`ON CLUSTER` dropped,
    /// `Replicated*` without its Keeper path, `Distributed` as `Merge`).
    pub cluster_standin: Option<String>,
}

/// The engine's HTTPS port: its certificate, and the CA whose client certificates it
/// requires (`None`: no client certificate asked for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineTls {
    pub server: crate::CertPair,
    pub client_ca: Option<PathBuf>,
}

impl ClickHouseOptions {
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    pub fn tls(mut self, tls: EngineTls) -> Self {
        self.tls = Some(tls);
        self
    }

    pub fn cluster_standin(mut self, name: impl Into<String>) -> Self {
        self.cluster_standin = Some(name.into());
        self
    }
}

/// One HTTP exchange with the engine, error replies included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    pub status: u16,
    /// `X-ClickHouse-Exception-Code`, on errors.
    pub exception_code: Option<u32>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `Ok(self)` on 200, else an error with the status, code and ClickHouse's message.
    pub fn ok(self) -> Result<HttpReply> {
        if self.status == 200 {
            return Ok(self);
        }
        bail!(
            "ClickHouse answered HTTP {} (exception code {}): {}",
            self.status,
            self.exception_code
                .map_or_else(|| "none".to_owned(), |c| c.to_string()),
            self.text().trim()
        )
    }
}

/// A running `scripts/clickhouse-engine` on a loopback port. Dropping it stops the engine
/// (and removes its directory when it made its own, unless `WALSHADOW_KEEP_CLUSTERS=1`).
#[derive(Debug)]
pub struct ClickHouseEngine {
    child: Option<Child>,
    port: u16,
    /// The HTTPS port, with [`ClickHouseOptions::tls`].
    tls_port: Option<u16>,
    tls: Option<EngineTls>,
    cluster_standin: Option<String>,
    dir: PathBuf,
    credentials: Option<(String, String)>,
    agent: ureq::Agent,
    // Declared last: dropped after the engine has stopped.
    _own_dir: Option<WorkDir>,
}

impl ClickHouseEngine {
    /// Starts an engine with default options in a directory of its own.
    pub fn start() -> Result<ClickHouseEngine> {
        Self::start_with(ClickHouseOptions::default())
    }

    /// Starts an engine on a free port and waits until it answers `GET /` with `Ok.`.
    pub fn start_with(opts: ClickHouseOptions) -> Result<ClickHouseEngine> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let (dir, own_dir) = match opts.dir {
            Some(dir) => (dir, None),
            None => {
                let work = WorkDir::new(&format!(
                    "clickhouse-{}",
                    SEQ.fetch_add(1, Ordering::Relaxed)
                ))?;
                (work.path().to_owned(), Some(work))
            }
        };
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("creating {}", dir.join("data").display()))?;
        let mut engine = ClickHouseEngine {
            child: None,
            port: 0,
            tls_port: None,
            tls: opts.tls,
            cluster_standin: opts.cluster_standin,
            dir,
            credentials: opts.credentials,
            agent: new_agent(),
            _own_dir: own_dir,
        };
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            engine.port = free_port()?;
            if engine.tls.is_some() {
                engine.tls_port = Some(free_port()?);
            }
            match engine.spawn() {
                Ok(()) => return Ok(engine),
                Err(SpawnError::PortTaken(e)) => last_err = Some(e),
                Err(SpawnError::Other(e)) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
            .context(format!("no free port after {PORT_ATTEMPTS} attempts"))
    }

    /// The DDL statements received as sent, oldest first, with
    /// [`ClickHouseOptions::cluster_standin`].
    pub fn cluster_ddl(&self) -> Result<Vec<String>> {
        let path = self.dir.join("cluster-ddl.jsonl");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l)?;
                v["sql"]
                    .as_str()
                    .map(str::to_owned)
                    .with_context(|| format!("{}: a line without sql: {l}", path.display()))
            })
            .collect()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `https://localhost:PORT` of the HTTPS port, with [`ClickHouseOptions::tls`].
    pub fn https_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("https://localhost:{p}"))
    }

    /// The HTTPS port, with [`ClickHouseOptions::tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The HTTPS port's certificates from the next [`ClickHouseEngine::start_again`] on (a
    /// certificate rotated, or replaced by an impostor's).
    pub fn set_tls(&mut self, tls: EngineTls) -> Result<()> {
        if self.tls_port.is_none() {
            bail!("the engine was started without an HTTPS port");
        }
        self.tls = Some(tls);
        Ok(())
    }

    /// The directory the engine keeps its data in (a chDB session path).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The engine's log: one line per request, plus start and stop.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("engine.log")
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The user and password the engine requires, if it was started with some.
    pub fn credentials(&self) -> Option<(&str, &str)> {
        self.credentials
            .as_ref()
            .map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Runs `sql` (POST body) and returns its TabSeparated output; an error reply is an `Err`
    /// carrying ClickHouse's code and message.
    pub fn query(&self, sql: &str) -> Result<String> {
        let reply = self
            .post(&[], sql.as_bytes())
            .and_then(HttpReply::ok)
            .with_context(|| format!("query `{}`", abbreviate(sql)))?;
        String::from_utf8(reply.body).context("query output is not UTF-8")
    }

    /// Sends `data` for `insert` (`INSERT INTO t (cols) FORMAT F`) the way the daemon does:
    /// the statement in the `query` parameter, the data as the body.
    pub fn insert(&self, insert: &str, data: &[u8]) -> Result<HttpReply> {
        self.post(&[("query", insert)], data)
            .and_then(HttpReply::ok)
            .with_context(|| format!("insert `{}`", abbreviate(insert)))
    }

    /// POST with URL parameters `params`, body `body` and the engine's credentials.
    pub fn post(&self, params: &[(&str, &str)], body: &[u8]) -> Result<HttpReply> {
        self.send("POST", params, &self.credential_headers(), body)
    }

    /// GET (read-only, as in ClickHouse) with URL parameters `params` and the engine's
    /// credentials.
    pub fn get(&self, params: &[(&str, &str)]) -> Result<HttpReply> {
        self.send("GET", params, &self.credential_headers(), &[])
    }

    /// One request exactly as given: no credentials are added. `method` is `GET` or `POST`.
    pub fn send(
        &self,
        method: &str,
        params: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpReply> {
        self.send_to("/", method, params, headers, body)
    }

    /// Like [`ClickHouseEngine::send`], to another path (`/ping`).
    pub fn send_to(
        &self,
        path: &str,
        method: &str,
        params: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<HttpReply> {
        let url = format!("{}{path}", self.url());
        let pairs = params.iter().copied();
        let response = match method {
            "GET" => {
                let mut req = self.agent.get(&url).query_pairs(pairs);
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                req.call()
            }
            "POST" => {
                let mut req = self.agent.post(&url).query_pairs(pairs);
                for (k, v) in headers {
                    req = req.header(*k, *v);
                }
                req.send(body)
            }
            other => bail!("unsupported method {other}"),
        };
        let mut response = response.with_context(|| {
            format!("{method} {url} (engine log: {})", self.log_path().display())
        })?;
        let status = response.status().as_u16();
        let headers: Vec<(String, String)> = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()
            .with_context(|| format!("reading the reply to {method} {url}"))?;
        let exception_code = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("X-ClickHouse-Exception-Code"))
            .and_then(|(_, v)| v.trim().parse().ok());
        Ok(HttpReply {
            status,
            exception_code,
            headers,
            body,
        })
    }

    /// Whether the engine process is alive (it may not be serving yet or any more).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops the engine as an operator would (SIGTERM, then SIGKILL after a minute), keeping
    /// its data for [`ClickHouseEngine::start_again`].
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .stderr(Stdio::null())
            .status();
        if sent.is_ok_and(|s| s.success()) {
            let mut exited = false;
            let _ = wait_until(STOP_TIMEOUT, "the ClickHouse engine to exit", || {
                exited = child.try_wait()?.is_some();
                Ok(exited)
            });
            if exited {
                return Ok(());
            }
        }
        child.kill().context("killing the ClickHouse engine")?;
        child.wait().context("waiting for the ClickHouse engine")?;
        Ok(())
    }

    /// Kills the engine at once (SIGKILL), as a crash would; data already accepted stays.
    pub fn crash(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().context("killing the ClickHouse engine")?;
            child.wait().context("waiting for the ClickHouse engine")?;
        }
        Ok(())
    }

    /// Starts a stopped engine again on the same port and data directory.
    pub fn start_again(&mut self) -> Result<()> {
        if self.is_running() {
            bail!(
                "the ClickHouse engine on port {} is still running",
                self.port
            );
        }
        self.child = None;
        // Pooled connections went down with the old process.
        self.agent = new_agent();
        self.spawn().map_err(|e| match e {
            SpawnError::PortTaken(e) => e.context(format!(
                "port {} was taken while the engine was down",
                self.port
            )),
            SpawnError::Other(e) => e,
        })
    }

    fn credential_headers(&self) -> Vec<(&str, &str)> {
        match &self.credentials {
            Some((user, password)) => vec![
                ("X-ClickHouse-User", user.as_str()),
                ("X-ClickHouse-Key", password.as_str()),
            ],
            None => vec![],
        }
    }

    fn spawn(&mut self) -> Result<(), SpawnError> {
        let script = engine_script();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .with_context(|| format!("opening {}", self.log_path().display()))?;
        let log2 = log.try_clone().context("duplicating the log handle")?;
        let mut cmd = Command::new(&script);
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--data")
            .arg(self.data_dir())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some((user, password)) = &self.credentials {
            cmd.args(["--user", user, "--password", password]);
        }
        if let Some(name) = &self.cluster_standin {
            cmd.args(["--cluster-standin", name]);
        }
        if let (Some(tls), Some(port)) = (&self.tls, self.tls_port) {
            cmd.arg("--tls-port")
                .arg(port.to_string())
                .arg("--tls-cert")
                .arg(&tls.server.cert)
                .arg("--tls-key")
                .arg(&tls.server.key);
            if let Some(ca) = &tls.client_ca {
                cmd.arg("--tls-client-ca").arg(ca);
            }
        }
        let log_start = std::fs::metadata(self.log_path()).map_or(0, |m| m.len());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        self.child = Some(child);

        let mut exited = None;
        let ready = wait_until(
            START_TIMEOUT,
            "the ClickHouse engine to answer GET /",
            || {
                if let Some(status) = self
                    .child
                    .as_mut()
                    .map(Child::try_wait)
                    .transpose()?
                    .flatten()
                {
                    exited = Some(status);
                    return Ok(true);
                }
                let reply = self.send("GET", &[], &[], &[])?;
                Ok(reply.status == 200 && reply.body == b"Ok.\n")
            },
        );
        let log_now = std::fs::read(self.log_path()).unwrap_or_default();
        let this_run =
            String::from_utf8_lossy(log_now.get(log_start as usize..).unwrap_or(&[])).into_owned();
        if let Some(status) = exited {
            self.child = None;
            let err = anyhow::anyhow!(
                "the ClickHouse engine exited ({status}) before it was ready; its log:\n{}",
                this_run.trim()
            );
            return Err(if this_run.contains("cannot listen on") {
                SpawnError::PortTaken(err)
            } else {
                SpawnError::Other(err)
            });
        }
        if let Err(e) = ready {
            let _ = self.crash();
            return Err(SpawnError::Other(e.context(format!(
                "the ClickHouse engine did not come up on port {}; its log:\n{}",
                self.port,
                this_run.trim()
            ))));
        }
        Ok(())
    }
}

impl Drop for ClickHouseEngine {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("walshadow-testkit: stopping the ClickHouse engine: {e:#}");
        }
    }
}

enum SpawnError {
    /// Another process took the port between choosing and binding it.
    PortTaken(anyhow::Error),
    Other(anyhow::Error),
}

impl From<anyhow::Error> for SpawnError {
    fn from(e: anyhow::Error) -> Self {
        SpawnError::Other(e)
    }
}

/// `scripts/clickhouse-engine` of this checkout.
fn engine_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse-engine")
}

fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        // Below the engine's keep-alive timeout, so a pooled connection is never one the
        // engine has already closed.
        .max_idle_age(Duration::from_secs(10))
        .build()
        .into()
}

fn abbreviate(sql: &str) -> String {
    let one_line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}
