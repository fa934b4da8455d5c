//! One frontend/backend protocol connection: transport (TCP, unix socket,
//! TLS), message framing, startup and authentication.
//!
//! Framing and authentication come from `postgres-protocol`; the one backend
//! message its parser does not know, CopyBothResponse (`W`, sent only by a
//! walsender answering `START_REPLICATION`), is recognised here by its tag
//! before the frame reaches that parser (see `BackendMessage`).

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::client::TlsStream;

use super::config::{AuthMethod, ChannelBindingMode, ConnConfig, Host, SslMode};
use super::error::{DbError, ReplicationError, Result};
use super::tls;

/// Largest backend message accepted by default. WAL arrives in CopyData of
/// at most 128 KiB (`MAX_SEND_SIZE` in walsender.c); this bound only stops a
/// broken peer from making us allocate without limit.
pub(crate) const MAX_MESSAGE_LEN: usize = 64 << 20;

const COPY_BOTH_RESPONSE_TAG: u8 = b'W';

pub(crate) enum Transport {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Transport {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Transport {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_flush(cx),
            Transport::Unix(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Transport::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A backend message: what `postgres-protocol` parses, plus CopyBothResponse.
pub(crate) enum BackendMessage {
    CopyBothResponse,
    Other(backend::Message),
}

/// Cancellation key from BackendKeyData, for CancelRequest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CancelKey {
    pub process_id: i32,
    pub secret_key: i32,
}

pub(crate) struct Connection {
    io: Transport,
    read_buf: BytesMut,
    /// Bytes queued for the server. Flushed incrementally so that a dropped
    /// future never leaves half a message unaccounted for.
    write_buf: BytesMut,
    pub params: HashMap<String, String>,
    pub cancel_key: Option<CancelKey>,
    pub tls: bool,
    /// `tls-server-end-point` data of the server's certificate, for SCRAM
    /// channel binding (TLS only).
    end_point: Option<Vec<u8>>,
    /// The bound on one backend message: [`MAX_MESSAGE_LEN`], raised while
    /// a `COPY … TO STDOUT` runs (one row per CopyData, up to 1 GiB).
    pub max_message_len: usize,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("tls", &self.tls)
            .field("server_version", &self.params.get("server_version"))
            .finish_non_exhaustive()
    }
}

/// The startup `options` of every SQL (non-replication) session: see
/// `Connection::startup`.
pub const SESSION_OPTIONS: &str = "-c search_path=pg_catalog -c standard_conforming_strings=on";

impl Connection {
    /// Opens the transport, negotiates TLS per `sslmode`, and runs startup
    /// and authentication, all within `connect_timeout`.
    pub async fn connect(cfg: &ConnConfig) -> Result<Connection> {
        let target = cfg.target();
        match tokio::time::timeout(cfg.connect_timeout, Self::connect_inner(cfg)).await {
            Ok(r) => r,
            Err(_) => Err(ReplicationError::ConnectTimeout {
                target,
                timeout: cfg.connect_timeout,
            }),
        }
    }

    async fn connect_inner(cfg: &ConnConfig) -> Result<Connection> {
        let (io, end_point) = open_transport(cfg).await?;
        let tls = matches!(io, Transport::Tls(_));
        let mut conn = Connection {
            io,
            read_buf: BytesMut::with_capacity(8192),
            write_buf: BytesMut::new(),
            params: HashMap::new(),
            cancel_key: None,
            tls,
            end_point,
            max_message_len: MAX_MESSAGE_LEN,
        };
        conn.startup(cfg).await?;
        Ok(conn)
    }

    async fn startup(&mut self, cfg: &ConnConfig) -> Result<()> {
        let mut params: Vec<(&str, &str)> =
            vec![("user", cfg.user.as_str()), ("client_encoding", "UTF8")];
        if cfg.physical {
            // Physical replication: the walsender accepts only replication
            // commands and SHOW (exec_replication_command in walsender.c).
            params.push(("replication", "true"));
        }
        if let Some(db) = &cfg.dbname {
            params.push(("database", db));
        }
        if let Some(app) = &cfg.application_name {
            params.push(("application_name", app));
        }
        if !cfg.physical {
            // An SQL session cannot be steered by the database's users:
            // only pg_catalog is searched (a `public.pg_relation_filenode`
            // planted by a database owner is never called; the temporary
            // schema is never searched for functions or operators), and
            // literals are quoted for standard_conforming_strings = on
            // whatever `ALTER DATABASE/ROLE … SET` says. Startup options
            // outrank per-database and per-role settings.
            params.push(("options", SESSION_OPTIONS));
        }
        frontend::startup_message(params.iter().copied(), &mut self.write_buf)?;
        self.flush().await?;
        self.authenticate(cfg).await?;
        // After AuthenticationOk: ParameterStatus*, BackendKeyData, ReadyForQuery.
        loop {
            match self.read_message().await? {
                BackendMessage::Other(backend::Message::ReadyForQuery(_)) => {
                    return self.check_session(cfg);
                }
                BackendMessage::Other(backend::Message::ParameterStatus(p)) => {
                    self.params
                        .insert(p.name()?.to_owned(), p.value()?.to_owned());
                }
                BackendMessage::Other(backend::Message::BackendKeyData(k)) => {
                    self.cancel_key = Some(CancelKey {
                        process_id: k.process_id(),
                        secret_key: k.secret_key(),
                    });
                }
                BackendMessage::Other(backend::Message::NoticeResponse(_)) => {}
                BackendMessage::Other(backend::Message::ErrorResponse(e)) => {
                    return Err(server_error("startup", db_error(&e)));
                }
                _ => {
                    return Err(ReplicationError::protocol(
                        "unexpected message during startup",
                    ));
                }
            }
        }
    }

    /// An SQL session runs only with the settings [`SESSION_OPTIONS`] asked
    /// for: every literal walshadow sends is quoted for them.
    fn check_session(&self, cfg: &ConnConfig) -> Result<()> {
        if cfg.physical {
            return Ok(());
        }
        match self
            .params
            .get("standard_conforming_strings")
            .map(String::as_str)
        {
            Some("on") => Ok(()),
            other => Err(ReplicationError::Config(format!(
                "the server reports standard_conforming_strings = {} for walshadow's session; \
                 walshadow quotes literals for on and will not go on (a server or pooler that \
                 drops startup options is in the way)",
                other.unwrap_or("(not reported)")
            ))),
        }
    }

    async fn authenticate(&mut self, cfg: &ConnConfig) -> Result<()> {
        let auth_err = |reason: String| ReplicationError::Auth {
            user: cfg.user.clone(),
            reason,
        };
        // The URL's (or PGPASSWORD), else the password file's, looked up
        // only when the server asks.
        let from_file = std::sync::OnceLock::new();
        let password = || {
            cfg.password
                .as_deref()
                .or_else(|| {
                    from_file
                        .get_or_init(|| super::pgpass::lookup(cfg))
                        .as_deref()
                })
                .ok_or_else(|| {
                    auth_err(
                        "the server asks for a password and none is configured (the URL, \
                         PGPASSWORD, or a line of ~/.pgpass / PGPASSFILE)"
                            .into(),
                    )
                })
        };
        let mut scram: Option<sasl::ScramSha256> = None;
        // What the server asked for, against require_auth.
        let allowed = |m: AuthMethod| -> Result<()> {
            if cfg.require_auth.allows(m) {
                Ok(())
            } else {
                Err(auth_err(format!(
                    "the server asks for {} authentication, which require_auth does not allow",
                    m.name()
                )))
            }
        };
        // channel_binding=require: nothing but SCRAM-SHA-256-PLUS gets the
        // password (a man in the middle asking for it in clear gets nothing).
        let unbound = |what: &str| -> Result<()> {
            if cfg.channel_binding == ChannelBindingMode::Require {
                Err(auth_err(format!(
                    "the server asks for {what}, and channel_binding=require allows only SCRAM-SHA-256-PLUS"
                )))
            } else {
                Ok(())
            }
        };
        let mut asked = false;
        let mut bound = false;
        loop {
            let msg = match self.read_message().await? {
                BackendMessage::Other(m) => m,
                BackendMessage::CopyBothResponse => {
                    return Err(ReplicationError::protocol(
                        "CopyBothResponse during authentication",
                    ));
                }
            };
            match msg {
                backend::Message::AuthenticationOk => {
                    if scram.is_some() {
                        return Err(auth_err("server skipped the SCRAM final message".into()));
                    }
                    if !asked {
                        allowed(AuthMethod::None)?;
                    }
                    if cfg.channel_binding == ChannelBindingMode::Require && !bound {
                        return Err(auth_err(
                            "channel_binding=require, and the server authenticated without \
                             SCRAM-SHA-256-PLUS over TLS"
                                .into(),
                        ));
                    }
                    return Ok(());
                }
                backend::Message::AuthenticationCleartextPassword => {
                    asked = true;
                    allowed(AuthMethod::Password)?;
                    unbound("a cleartext password")?;
                    frontend::password_message(password()?.as_bytes(), &mut self.write_buf)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationMd5Password(body) => {
                    asked = true;
                    allowed(AuthMethod::Md5)?;
                    unbound("an MD5 password")?;
                    let hash = md5_hash(cfg.user.as_bytes(), password()?.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.write_buf)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationSasl(body) => {
                    asked = true;
                    allowed(AuthMethod::ScramSha256)?;
                    let mut mechanisms = body.mechanisms();
                    let (mut has_scram, mut has_plus) = (false, false);
                    while let Some(m) = mechanisms.next()? {
                        has_scram |= m == sasl::SCRAM_SHA_256;
                        has_plus |= m == sasl::SCRAM_SHA_256_PLUS;
                    }
                    // Bound to the TLS channel when both sides can (libpq's
                    // channel_binding=prefer), or as required.
                    let plus = match (cfg.channel_binding, has_plus, &self.end_point) {
                        (ChannelBindingMode::Disable, _, _) => None,
                        (_, true, Some(end_point)) => Some(end_point.clone()),
                        (ChannelBindingMode::Require, _, _) => {
                            return Err(auth_err(format!(
                                "channel_binding=require, and {}",
                                if !self.tls {
                                    "the connection is not TLS"
                                } else if !has_plus {
                                    "the server does not offer SCRAM-SHA-256-PLUS"
                                } else {
                                    "the server's certificate names no hash to bind to"
                                }
                            )));
                        }
                        (ChannelBindingMode::Prefer, _, _) => None,
                    };
                    if !has_scram && plus.is_none() {
                        return Err(auth_err(
                            "server offers no SASL mechanism this client supports (SCRAM-SHA-256)"
                                .into(),
                        ));
                    }
                    let (mechanism, binding) = match plus {
                        Some(data) => {
                            bound = true;
                            (
                                sasl::SCRAM_SHA_256_PLUS,
                                sasl::ChannelBinding::tls_server_end_point(data),
                            )
                        }
                        // Over TLS with no PLUS offered, "y" (the client could
                        // bind): a server that does support it refuses, so a
                        // stripped mechanism list is caught. Otherwise "n".
                        None if self.tls && !has_plus => {
                            (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unrequested())
                        }
                        None => (sasl::SCRAM_SHA_256, sasl::ChannelBinding::unsupported()),
                    };
                    let s = sasl::ScramSha256::new(password()?.as_bytes(), binding);
                    frontend::sasl_initial_response(mechanism, s.message(), &mut self.write_buf)?;
                    self.flush().await?;
                    scram = Some(s);
                }
                backend::Message::AuthenticationSaslContinue(body) => {
                    let s = scram.as_mut().ok_or_else(|| {
                        ReplicationError::protocol("SASLContinue without SASL start")
                    })?;
                    s.update(body.data())
                        .map_err(|e| auth_err(format!("SCRAM: {e}")))?;
                    frontend::sasl_response(s.message(), &mut self.write_buf)?;
                    self.flush().await?;
                }
                backend::Message::AuthenticationSaslFinal(body) => {
                    let mut s = scram.take().ok_or_else(|| {
                        ReplicationError::protocol("SASLFinal without SASL start")
                    })?;
                    s.finish(body.data()).map_err(|e| {
                        auth_err(format!("SCRAM server signature did not verify: {e}"))
                    })?;
                }
                backend::Message::ErrorResponse(e) => {
                    let error = db_error(&e);
                    // 28000 invalid_authorization_specification (incl. no
                    // pg_hba.conf entry), 28P01 invalid_password.
                    if error.code.starts_with("28") {
                        return Err(auth_err(error.to_string()));
                    }
                    // Anything else is the server refusing sessions for
                    // now (53300 too many clients, 57P03 starting up or
                    // shutting down), not the credentials.
                    return Err(server_error("starting a session", error));
                }
                backend::Message::AuthenticationKerberosV5
                | backend::Message::AuthenticationScmCredential
                | backend::Message::AuthenticationGss
                | backend::Message::AuthenticationSspi
                | backend::Message::AuthenticationGssContinue(_) => {
                    return Err(auth_err(
                        "server asks for GSS/SSPI/Kerberos/SCM authentication; configure trust, password, md5 or scram-sha-256 in pg_hba.conf".into(),
                    ));
                }
                _ => {
                    return Err(ReplicationError::protocol(
                        "unexpected message during authentication",
                    ));
                }
            }
        }
    }

    /// Queues a message; `flush` sends it.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.write_buf
    }

    pub fn has_pending_writes(&self) -> bool {
        !self.write_buf.is_empty()
    }

    /// Writes out everything queued. Cancel-safe: progress is kept in the
    /// queue.
    pub async fn flush(&mut self) -> Result<()> {
        while !self.write_buf.is_empty() {
            let n = self.io.write(&self.write_buf).await?;
            if n == 0 {
                return Err(ReplicationError::ConnectionClosed {
                    context: " while writing".into(),
                });
            }
            self.write_buf.advance(n);
        }
        self.io.flush().await?;
        Ok(())
    }

    /// Reads one whole backend message. Cancel-safe: partial input stays in
    /// the read buffer.
    pub async fn read_message(&mut self) -> Result<BackendMessage> {
        loop {
            if let Some(m) = self.parse_buffered()? {
                return Ok(m);
            }
            let n = self.io.read_buf(&mut self.read_buf).await?;
            if n == 0 {
                return Err(ReplicationError::ConnectionClosed {
                    context: String::new(),
                });
            }
        }
    }

    fn parse_buffered(&mut self) -> Result<Option<BackendMessage>> {
        let Some(header) = backend::Header::parse(&self.read_buf)? else {
            return Ok(None);
        };
        // Header::parse rejects len < 4, so this does not underflow.
        let total = header.len() as usize + 1;
        if total > self.max_message_len {
            return Err(ReplicationError::protocol(format!(
                "backend message '{}' of {total} bytes exceeds the {}-byte limit",
                char::from(header.tag()),
                self.max_message_len
            )));
        }
        if self.read_buf.len() < total {
            self.read_buf.reserve(total - self.read_buf.len());
            return Ok(None);
        }
        if header.tag() == COPY_BOTH_RESPONSE_TAG {
            // postgres-protocol's parser does not know 'W'. Body: overall
            // format (i8) and per-column formats (i16 count, i16 each); the
            // walsender always sends format 0 with zero columns.
            self.read_buf.advance(total);
            return Ok(Some(BackendMessage::CopyBothResponse));
        }
        match backend::Message::parse(&mut self.read_buf)? {
            Some(m) => Ok(Some(BackendMessage::Other(m))),
            None => Err(ReplicationError::protocol(
                "incomplete message after length check",
            )),
        }
    }

    pub async fn shutdown(&mut self) {
        frontend::terminate(&mut self.write_buf);
        let _ = self.flush().await;
        let _ = self.io.shutdown().await;
    }
}

async fn open_transport(cfg: &ConnConfig) -> Result<(Transport, Option<Vec<u8>>)> {
    let target = cfg.target();
    match &cfg.host {
        Host::UnixDir(dir) => {
            // libpq never negotiates TLS over a unix socket (the server
            // answers 'N'); sslmode is ignored there.
            let path = dir.join(format!(".s.PGSQL.{}", cfg.port));
            let s = UnixStream::connect(&path)
                .await
                .map_err(|source| ReplicationError::Connect { target, source })?;
            Ok((Transport::Unix(s), None))
        }
        Host::Tcp(host) => {
            let mut s = TcpStream::connect((host.as_str(), cfg.port))
                .await
                .map_err(|source| ReplicationError::Connect {
                    target: target.clone(),
                    source,
                })?;
            s.set_nodelay(true)?;
            if cfg.sslmode == SslMode::Disable {
                return Ok((Transport::Tcp(s), None));
            }
            let mut req = BytesMut::new();
            frontend::ssl_request(&mut req);
            s.write_all(&req).await?;
            let answer = s.read_u8().await?;
            match answer {
                b'S' => {
                    let (tls, end_point) = tls::handshake(cfg, host, s).await?;
                    Ok((Transport::Tls(Box::new(tls)), end_point))
                }
                b'N' if cfg.sslmode == SslMode::Prefer => Ok((Transport::Tcp(s), None)),
                b'N' => Err(ReplicationError::Tls(format!(
                    "server {target} does not support TLS (ssl = off) but sslmode={:?} requires it",
                    cfg.sslmode
                ))),
                // An ErrorResponse here means a pre-3.0 server or a bad peer.
                other => Err(ReplicationError::protocol(format!(
                    "unexpected answer {other:#x} to SSLRequest"
                ))),
            }
        }
    }
}

/// Sends a CancelRequest for `key` on a fresh plain connection (the server
/// accepts cancels without TLS or authentication).
pub(crate) async fn send_cancel(cfg: &ConnConfig, key: CancelKey) -> Result<()> {
    let mut buf = BytesMut::new();
    frontend::cancel_request(key.process_id, key.secret_key, &mut buf);
    let target = cfg.target();
    match &cfg.host {
        Host::UnixDir(dir) => {
            let mut s = UnixStream::connect(dir.join(format!(".s.PGSQL.{}", cfg.port)))
                .await
                .map_err(|source| ReplicationError::Connect { target, source })?;
            s.write_all(&buf).await?;
            // The server closes the socket after reading the request.
            let _ = s.read_u8().await;
        }
        Host::Tcp(host) => {
            let mut s = TcpStream::connect((host.as_str(), cfg.port))
                .await
                .map_err(|source| ReplicationError::Connect { target, source })?;
            s.write_all(&buf).await?;
            let _ = s.read_u8().await;
        }
    }
    Ok(())
}

pub(crate) fn db_error(body: &backend::ErrorResponseBody) -> DbError {
    let mut e = DbError::default();
    let mut fields = body.fields();
    // A malformed field list ends the walk; what was read is still reported.
    while let Ok(Some(f)) = fields.next() {
        let v = String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'V' => e.severity = v,
            b'S' if e.severity.is_empty() => e.severity = v,
            b'C' => e.code = v,
            b'M' => e.message = v,
            b'D' => e.detail = Some(v),
            b'H' => e.hint = Some(v),
            _ => {}
        }
    }
    e
}

pub(crate) fn server_error(command: &str, error: DbError) -> ReplicationError {
    ReplicationError::Server {
        command: command.to_owned(),
        error: Box::new(error),
    }
}

/// Raw DataRow columns (NULL as `None`). Values stay bytes: TIMELINE_HISTORY
/// sends the history file's bytes as is.
pub(crate) fn data_row(body: &backend::DataRowBody) -> Result<Vec<Option<Bytes>>> {
    let buf = body.buffer_bytes();
    let mut ranges = body.ranges();
    let mut out = Vec::new();
    while let Some(r) = ranges.next()? {
        out.push(match r {
            Some(r) if r.end <= buf.len() && r.start <= r.end => Some(buf.slice(r)),
            Some(_) => return Err(ReplicationError::protocol("DataRow column out of bounds")),
            None => None,
        });
    }
    Ok(out)
}
