//! Connection settings, parsed from a libpq-style URL.
//!
//! Accepted form (see libpq's "Connection URIs"):
//! `postgres://user:pass@host:port/db?sslmode=..&sslrootcert=..&host=..&application_name=..&connect_timeout=..`
//! A `host` that starts with `/` (in the authority, percent-encoded, or as the
//! `host` query parameter) is a unix-socket directory: the client connects to
//! `<dir>/.s.PGSQL.<port>`.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::error::ReplicationError;

/// libpq's `sslmode`. `allow` is treated as `prefer` and `disable` never
/// sends an SSLRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    Disable,
    /// Try TLS, fall back to plain text if the server declines; no verification.
    #[default]
    Prefer,
    /// Encrypt, do not verify the server certificate (libpq's `require`
    /// without a root certificate).
    Require,
    /// Encrypt and verify the chain against `sslrootcert`, not the host name.
    VerifyCa,
    /// Encrypt and verify the chain and the host name.
    VerifyFull,
}

/// libpq's `channel_binding`: whether SCRAM binds to the TLS channel
/// (`SCRAM-SHA-256-PLUS`, `tls-server-end-point`), which defeats a man in
/// the middle that holds a certificate the client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelBindingMode {
    Disable,
    /// When the server offers it over TLS.
    #[default]
    Prefer,
    /// Or fail: the connection must be TLS and authenticate with
    /// SCRAM-SHA-256-PLUS.
    Require,
}

/// An authentication method, as `require_auth` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMethod {
    /// No authentication asked (trust, peer).
    None,
    /// Cleartext password.
    Password,
    Md5,
    ScramSha256,
}

impl AuthMethod {
    pub fn name(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::Password => "password",
            AuthMethod::Md5 => "md5",
            AuthMethod::ScramSha256 => "scram-sha-256",
        }
    }

    fn parse(s: &str) -> Option<AuthMethod> {
        Some(match s {
            "none" => AuthMethod::None,
            "password" => AuthMethod::Password,
            "md5" => AuthMethod::Md5,
            "scram-sha-256" => AuthMethod::ScramSha256,
            _ => return None,
        })
    }
}

/// libpq's `require_auth`: the methods the server may ask for (`a,b`), or
/// those it may not (`!a,!b`); every method when unset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequireAuth {
    listed: Vec<AuthMethod>,
    negated: bool,
}

impl RequireAuth {
    fn parse(v: &str) -> Result<RequireAuth, ReplicationError> {
        let bad = |why: String| ReplicationError::Config(format!("require_auth {v:?}: {why}"));
        let mut listed = Vec::new();
        let mut negated = None;
        for item in v.split(',').map(str::trim) {
            let (neg, name) = match item.strip_prefix('!') {
                Some(n) => (true, n),
                None => (false, item),
            };
            if negated.is_some_and(|n| n != neg) {
                return Err(bad("negated and plain methods cannot be mixed".into()));
            }
            negated = Some(neg);
            listed.push(AuthMethod::parse(name).ok_or_else(|| {
                bad(format!(
                    "{name:?} is not one of none, password, md5, scram-sha-256"
                ))
            })?);
        }
        Ok(RequireAuth {
            listed,
            negated: negated.unwrap_or(false),
        })
    }

    /// Whether the server may authenticate this way.
    pub fn allows(&self, m: AuthMethod) -> bool {
        self.listed.is_empty() || self.listed.contains(&m) != self.negated
    }
}

impl SslMode {
    fn parse(s: &str) -> Result<Self, ReplicationError> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(ReplicationError::Config(format!(
                    "sslmode {other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                )));
            }
        })
    }

    pub(crate) fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Tcp(String),
    /// A directory holding `.s.PGSQL.<port>`.
    UnixDir(PathBuf),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Tcp(h) => f.write_str(h),
            Host::UnixDir(d) => write!(f, "{}", d.display()),
        }
    }
}

/// Settings for one replication connection.
#[derive(Clone)]
pub struct ConnConfig {
    pub host: Host,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    /// Sent as `database`; physical replication ignores it, but `IDENTIFY_SYSTEM`
    /// reports it.
    pub dbname: Option<String>,
    pub application_name: Option<String>,
    pub sslmode: SslMode,
    pub sslrootcert: Option<PathBuf>,
    pub channel_binding: ChannelBindingMode,
    pub require_auth: RequireAuth,
    /// Bounds TCP connect, TLS handshake and authentication together.
    pub connect_timeout: Duration,
    /// Default bound for replication commands (slot creation and drop, ...).
    pub command_timeout: Duration,
    /// How often a streaming connection sends a standby status update
    /// unprompted (the walreceiver's `wal_receiver_status_interval`).
    pub status_interval: Duration,
    /// `true` (default): a physical walsender (`replication=true`). `false`:
    /// an ordinary SQL session on `dbname`, for the catalog checks walshadow
    /// runs before it replicates (simple queries only).
    pub physical: bool,
}

impl fmt::Debug for ConnConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("dbname", &self.dbname)
            .field("application_name", &self.application_name)
            .field("sslmode", &self.sslmode)
            .field("sslrootcert", &self.sslrootcert)
            .field("channel_binding", &self.channel_binding)
            .field("require_auth", &self.require_auth)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("status_interval", &self.status_interval)
            .field("physical", &self.physical)
            .finish()
    }
}

impl ConnConfig {
    /// The database a SQL session reaches: `dbname`, else the user's name,
    /// as libpq does.
    pub fn database(&self) -> String {
        self.dbname.clone().unwrap_or_else(|| self.user.clone())
    }

    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
    pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_secs(10);

    /// An SQL session on the unix socket in `dir`, as `user` on `db`: the
    /// fields set as given (no URL in between, so a role named `a:b` or a
    /// database named `x?y` stays what it is), no TLS, no password (not
    /// even `PGPASSWORD`).
    pub fn unix_socket(dir: &std::path::Path, port: u16, user: &str, db: &str) -> ConnConfig {
        ConnConfig {
            host: Host::UnixDir(dir.to_owned()),
            port,
            user: user.to_owned(),
            password: None,
            dbname: Some(db.to_owned()),
            application_name: None,
            sslmode: SslMode::Disable,
            sslrootcert: None,
            channel_binding: ChannelBindingMode::Disable,
            require_auth: RequireAuth::default(),
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
            status_interval: Self::DEFAULT_STATUS_INTERVAL,
            physical: false,
        }
    }

    /// Parses a `postgres://` or `postgresql://` URL, or a libpq
    /// `keyword=value` connection string (`host=db port=5432 user=walshadow
    /// sslmode=verify-full`). The password falls back to `PGPASSWORD` when
    /// the string has none (and to the password file at connect time).
    pub fn from_url(url: &str) -> Result<Self, ReplicationError> {
        Self::from_url_with_env(url, std::env::var("PGPASSWORD").ok())
    }

    /// Whether `s` looks like a connection string this parser takes.
    pub fn is_connection_string(s: &str) -> bool {
        s.starts_with("postgres://") || s.starts_with("postgresql://") || s.contains('=')
    }

    fn from_url_with_env(
        url: &str,
        env_password: Option<String>,
    ) -> Result<Self, ReplicationError> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://"))
            && url.contains('=')
            && !url.contains("://")
        {
            // keyword=value: the same parameters as a URL's query.
            let pairs = parse_conninfo(url)?;
            let query: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", percent_encode(v)))
                .collect();
            return Self::from_url_with_env(
                &format!("postgres:///?{}", query.join("&")),
                env_password,
            );
        }
        let bad = |why: &str| ReplicationError::Config(format!("connection URL: {why}"));
        let rest = url
            .strip_prefix("postgres://")
            .or_else(|| url.strip_prefix("postgresql://"))
            .ok_or_else(|| bad("must start with postgres:// or postgresql://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (mut user, mut password) = (None, None);
        if let Some(ui) = userinfo {
            let (u, p) = match ui.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (ui, None),
            };
            if !u.is_empty() {
                user = Some(percent_decode(u).map_err(|e| bad(&e))?);
            }
            if let Some(p) = p {
                password = Some(percent_decode(p).map_err(|_| bad(PASSWORD_ESCAPE))?);
            }
        }
        let (host_s, port_s) = if let Some(h) = hostport.strip_prefix('[') {
            let (h, after) = h.split_once(']').ok_or_else(|| bad("unclosed [ in host"))?;
            (h.to_owned(), after.strip_prefix(':').map(str::to_owned))
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (percent_decode(h).map_err(|e| bad(&e))?, Some(p.to_owned())),
                None => (percent_decode(hostport).map_err(|e| bad(&e))?, None),
            }
        };
        let mut host = (!host_s.is_empty()).then_some(host_s);
        let mut port = match port_s.as_deref() {
            Some(p) if !p.is_empty() => Some(parse_port(p)?),
            _ => None,
        };
        let mut dbname = (!path.is_empty())
            .then(|| percent_decode(path))
            .transpose()
            .map_err(|e| bad(&e))?;
        let mut cfg_sslmode = SslMode::default();
        let mut sslrootcert = None;
        let mut application_name = None;
        let mut channel_binding = ChannelBindingMode::default();
        let mut require_auth = RequireAuth::default();
        let mut connect_timeout = Self::DEFAULT_CONNECT_TIMEOUT;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).map_err(|e| {
                // A password never appears in a message.
                if k == "password" {
                    bad(PASSWORD_ESCAPE)
                } else {
                    bad(&e)
                }
            })?;
            match k {
                "sslmode" => cfg_sslmode = SslMode::parse(&v)?,
                "sslrootcert" => sslrootcert = Some(PathBuf::from(v)),
                "host" => host = Some(v),
                "port" => port = Some(parse_port(&v)?),
                "user" => user = Some(v),
                "password" => password = Some(v),
                "dbname" => dbname = Some(v),
                "application_name" => application_name = Some(v),
                "connect_timeout" => {
                    let secs: u64 = v.parse().map_err(|_| {
                        ReplicationError::Config(format!(
                            "connect_timeout {v:?} is not a number of seconds"
                        ))
                    })?;
                    // libpq: zero (or negative) means wait forever; we keep a bound.
                    connect_timeout = if secs == 0 {
                        Self::DEFAULT_CONNECT_TIMEOUT
                    } else {
                        Duration::from_secs(secs)
                    };
                }
                "channel_binding" => {
                    channel_binding = match v.as_str() {
                        "disable" => ChannelBindingMode::Disable,
                        "prefer" => ChannelBindingMode::Prefer,
                        "require" => ChannelBindingMode::Require,
                        other => {
                            return Err(ReplicationError::Config(format!(
                                "channel_binding {other:?} is not one of disable, prefer, require"
                            )));
                        }
                    }
                }
                "require_auth" => require_auth = RequireAuth::parse(&v)?,
                // Harmless libpq options that do not apply to this client.
                "replication" | "target_session_attrs" | "gssencmode" => {}
                other => {
                    return Err(ReplicationError::Config(format!(
                        "connection URL parameter {other:?} is not supported; supported: sslmode, sslrootcert, channel_binding, require_auth, host, port, user, password, dbname, application_name, connect_timeout"
                    )));
                }
            }
        }
        let host = match host {
            Some(h) if h.starts_with('/') => Host::UnixDir(PathBuf::from(h)),
            Some(h) => Host::Tcp(h),
            None => Host::Tcp("localhost".to_owned()),
        };
        let user = user.ok_or_else(|| bad("no user name (postgres://USER@host/...)"))?;
        if cfg_sslmode.verifies() && sslrootcert.is_none() && super::tls::default_root().is_none() {
            return Err(ReplicationError::Config(format!(
                "sslmode={} needs sslrootcert=PATH (the CA certificate to verify the server against), or ~/.postgresql/root.crt",
                if cfg_sslmode == SslMode::VerifyCa {
                    "verify-ca"
                } else {
                    "verify-full"
                }
            )));
        }
        Ok(ConnConfig {
            host,
            port: port.unwrap_or(5432),
            user,
            password: password.or(env_password),
            dbname,
            application_name,
            sslmode: cfg_sslmode,
            sslrootcert,
            channel_binding,
            require_auth,
            connect_timeout,
            command_timeout: Self::DEFAULT_COMMAND_TIMEOUT,
            status_interval: Self::DEFAULT_STATUS_INTERVAL,
            physical: true,
        })
    }

    /// A warning worth logging at start when the connection crosses a
    /// network without `verify-full` (TLS that checks the certificate and
    /// the name): anyone on the path could read or stand in for the source.
    /// `None` for unix sockets and loopback addresses.
    pub fn transport_warning(&self) -> Option<String> {
        let Host::Tcp(host) = &self.host else {
            return None;
        };
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        let (mode, _) = super::tls::effective_mode(self);
        (!loopback && mode != SslMode::VerifyFull).then(|| {
            format!(
                "the source connection to {host} is sslmode={}: its traffic (WAL, rows) can be read \
                 or its server impersonated on the way; use sslmode=verify-full with sslrootcert",
                match mode {
                    SslMode::Disable => "disable",
                    SslMode::Prefer => "prefer",
                    SslMode::Require => "require",
                    SslMode::VerifyCa => "verify-ca",
                    SslMode::VerifyFull => "verify-full",
                }
            )
        })
    }

    /// A short description of the target for error messages (no secrets).
    pub fn target(&self) -> String {
        match &self.host {
            Host::Tcp(h) => format!("{h}:{}", self.port),
            Host::UnixDir(d) => format!("{}/.s.PGSQL.{}", d.display(), self.port),
        }
    }
}

fn parse_port(p: &str) -> Result<u16, ReplicationError> {
    p.parse().map_err(|_| {
        ReplicationError::Config(format!("port {p:?} is not a number from 1 to 65535"))
    })
}

/// A libpq `keyword=value` connection string as pairs: whitespace between
/// pairs (and around `=`); a value single-quoted (with `\'` and `\\`) or
/// up to the next whitespace (with `\` escaping the next character).
fn parse_conninfo(s: &str) -> Result<Vec<(String, String)>, ReplicationError> {
    let bad = |why: String| ReplicationError::Config(format!("connection string: {why}"));
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            // Not quoted: a stray word may be part of a password.
            return Err(bad(format!(
                "word {} is not followed by =; quote values with spaces ('…')",
                out.len() + 1
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.extend(chars.next()),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => {
                        return Err(bad(format!(
                            "the value of keyword {} has no closing quote",
                            out.len() + 1
                        )));
                    }
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// Every byte but unreserved ones, percent-encoded (for a URL query value).
fn percent_encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The error for a password that does not decode (never quoting it).
const PASSWORD_ESCAPE: &str =
    "the password has a bad percent-escape or is not UTF-8 once decoded (write % as %25)";

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent-escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_a_url_reaches_is_libpqs() {
        let named = ConnConfig::from_url_with_env("postgres://ws@h/shop", None).unwrap();
        assert_eq!(named.database(), "shop");
        // No database named: the role's, not `postgres` (what
        // export-schema took before).
        let unnamed = ConnConfig::from_url_with_env("postgres://ws@h", None).unwrap();
        assert_eq!(unnamed.database(), "ws");
    }

    #[test]
    fn keyword_value_connection_strings() {
        let c = ConnConfig::from_url_with_env(
            "host=db.example port = 6543 user=walshadow dbname='my db' password='it\\'s \\\\ x' sslmode=verify-full sslrootcert=/etc/ca.pem application_name=a\\ b",
            None,
        )
        .unwrap();
        assert_eq!(c.host, Host::Tcp("db.example".into()));
        assert_eq!(c.port, 6543);
        assert_eq!(c.user, "walshadow");
        assert_eq!(c.dbname.as_deref(), Some("my db"));
        assert_eq!(c.password.as_deref(), Some("it's \\ x"));
        assert_eq!(c.sslmode, SslMode::VerifyFull);
        assert_eq!(c.application_name.as_deref(), Some("a b"));
        let c = ConnConfig::from_url_with_env("host=/run/postgresql user=u", None).unwrap();
        assert_eq!(c.host, Host::UnixDir("/run/postgresql".into()));
        for bad in ["host=h user", "user='open", "host=h user=u nope=1"] {
            assert!(ConnConfig::from_url_with_env(bad, None).is_err(), "{bad}");
        }
        // Mistakes never echo a password.
        for typo in [
            "postgress://u:S3cret@h/db?sslmode=require",
            "host=h user=u password=ab S3cret",
            "host=h user=u password='S3cret",
        ] {
            let e = ConnConfig::from_url_with_env(typo, None)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("S3cret"), "{e}");
        }
    }

    #[test]
    fn require_auth_and_channel_binding() {
        let c = ConnConfig::from_url(
            "postgres://u@db.example/x?require_auth=scram-sha-256,md5&channel_binding=require",
        )
        .unwrap();
        assert_eq!(c.channel_binding, ChannelBindingMode::Require);
        assert!(
            c.require_auth.allows(AuthMethod::ScramSha256)
                && c.require_auth.allows(AuthMethod::Md5)
        );
        assert!(
            !c.require_auth.allows(AuthMethod::Password)
                && !c.require_auth.allows(AuthMethod::None)
        );
        let c = ConnConfig::from_url("postgres://u@h/x?require_auth=!password").unwrap();
        assert!(
            !c.require_auth.allows(AuthMethod::Password) && c.require_auth.allows(AuthMethod::None)
        );
        assert!(
            ConnConfig::from_url("postgres://u@h/x")
                .unwrap()
                .require_auth
                .allows(AuthMethod::Password)
        );
        for bad in [
            "require_auth=password,!md5",
            "require_auth=gss",
            "channel_binding=yes",
        ] {
            assert!(
                ConnConfig::from_url(&format!("postgres://u@h/x?{bad}")).is_err(),
                "{bad}"
            );
        }
        // Below verify-full across a network: a warning; loopback and sockets: none.
        let w = ConnConfig::from_url("postgres://u@db.example/x?sslmode=require").unwrap();
        assert!(w.transport_warning().unwrap().contains("verify-full"));
        for quiet in [
            "postgres://u@127.0.0.1/x?sslmode=disable",
            "postgres://u@localhost/x",
            "postgres://u@db.example/x?sslmode=verify-full&sslrootcert=/r.pem",
            "postgres://u@/x?host=/run/postgresql",
        ] {
            assert_eq!(
                ConnConfig::from_url(quiet).unwrap().transport_warning(),
                None,
                "{quiet}"
            );
        }
    }

    #[test]
    fn a_password_that_does_not_decode_is_not_echoed() {
        for url in [
            "postgres://u:S3cr%t-pass@h/db",
            "postgres://u@h/db?password=S3cr%t-pass",
        ] {
            let e = ConnConfig::from_url_with_env(url, None)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("S3cr"), "{e}");
            assert!(e.contains("%25"), "{e}");
        }
    }

    #[test]
    fn unix_socket_sessions_keep_names_as_given() {
        let c = ConnConfig::unix_socket(std::path::Path::new("/st/s"), 5999, "a:b@c", "x?y%z/w");
        assert_eq!(c.user, "a:b@c");
        assert_eq!(c.dbname.as_deref(), Some("x?y%z/w"));
        assert_eq!(c.host, Host::UnixDir("/st/s".into()));
        assert_eq!((c.port, c.password, c.physical), (5999, None, false));
        assert_eq!(c.sslmode, SslMode::Disable);
    }

    #[test]
    fn full_url() {
        let c = ConnConfig::from_url_with_env(
            "postgres://rep%40x:p%3Ass@db.example:6543/app?sslmode=verify-full&sslrootcert=/ca.pem&application_name=ws&connect_timeout=5",
            None,
        )
        .unwrap();
        assert_eq!(c.host, Host::Tcp("db.example".into()));
        assert_eq!(c.port, 6543);
        assert_eq!(c.user, "rep@x");
        assert_eq!(c.password.as_deref(), Some("p:ss"));
        assert_eq!(c.dbname.as_deref(), Some("app"));
        assert_eq!(c.sslmode, SslMode::VerifyFull);
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/ca.pem")));
        assert_eq!(c.application_name.as_deref(), Some("ws"));
        assert_eq!(c.connect_timeout, Duration::from_secs(5));
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("p:ss"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }

    #[test]
    fn unix_socket_and_env_password() {
        let c = ConnConfig::from_url_with_env(
            "postgres://u@/db?host=/tmp/sock&port=5433",
            Some("envpw".into()),
        )
        .unwrap();
        assert_eq!(c.host, Host::UnixDir("/tmp/sock".into()));
        assert_eq!(c.target(), "/tmp/sock/.s.PGSQL.5433");
        assert_eq!(c.password.as_deref(), Some("envpw"));
        let c = ConnConfig::from_url_with_env("postgresql://u@%2Fvar%2Frun%2Fpostgresql/db", None)
            .unwrap();
        assert_eq!(c.host, Host::UnixDir("/var/run/postgresql".into()));
        assert_eq!(c.port, 5432);
        assert_eq!(c.sslmode, SslMode::Prefer);
    }

    #[test]
    fn ipv6_host() {
        let c = ConnConfig::from_url_with_env("postgres://u@[::1]:5999", None).unwrap();
        assert_eq!(c.host, Host::Tcp("::1".into()));
        assert_eq!(c.port, 5999);
        assert_eq!(c.dbname, None);
    }

    #[test]
    fn rejects_bad_input() {
        for url in [
            "mysql://u@h/db",
            "postgres://u@h/db?sslmode=maybe",
            "postgres://u@h:99999/db",
            "postgres://u@h/db?sslmode=verify-ca",
            "postgres://u@h/db?frobnicate=1",
            "postgres://h/db",
            "postgres://u@h/d%zz",
        ] {
            let e = ConnConfig::from_url_with_env(url, None).unwrap_err();
            assert!(!e.is_transient(), "{url}: {e}");
        }
    }
}
