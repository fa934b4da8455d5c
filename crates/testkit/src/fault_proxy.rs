//! A fault-injecting HTTP/1.1 proxy between walshadow's ClickHouse client and a ClickHouse
//! HTTP endpoint on loopback.
//!
//! The emitter's error handling has to be tested against failures a healthy ClickHouse never
//! produces on demand: a load balancer answering 502/503/504 while ClickHouse is down, a wrong
//! service (or a lying proxy) answering `200 Ok.` without doing anything, a rotated password.
//! [`FaultProxy`] listens on its own loopback port, forwards to the real endpoint, and is
//! switched between [`ProxyMode`]s at runtime. The mode is read per request, so a switch takes
//! effect on the next request, on an already pooled keep-alive connection too.
//!
//! ```text
//!  client (hyper, keep-alive) ──▶ FaultProxy 127.0.0.1:P ──┬─ Forward / BadKey ─▶ upstream: one connection per request,
//!                                 one thread per connection │    `Connection: close`, answer relayed
//!                                                           │    (unreachable upstream ─▶ 502 Bad Gateway)
//!                                                           └─ Fake200 / Status(n) ─▶ answered here, upstream untouched
//! ```
//!
//! Only what that client sends is understood: requests framed by `Content-Length` (absent =
//! empty body), never chunked. std only: no async runtime, no HTTP library. Bad input from
//! either side ends that connection (after a `400`/`501` where one can still be sent); it
//! never panics.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// Longest request or response head (request/status line and headers) accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Read/write timeout on client connections; an idle keep-alive connection is closed after it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Read/write timeout towards the upstream: as long as the daemon's own request timeout, so a
/// slow query is not cut short by the proxy.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The `X-ClickHouse-Key` value [`ProxyMode::BadKey`] sends.
const WRONG_KEY: &str = "wrong-password";

/// What a [`FaultProxy`] does with the next request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyMode {
    /// Forward every request to the upstream unchanged and relay its answer.
    Forward,
    /// Answer every request `200 OK` with body `Ok.\n` and no ClickHouse headers (a proxy or
    /// a wrong service that lies).
    Fake200,
    /// Answer with this HTTP status and a short plain-text body, no `X-ClickHouse-*` headers
    /// (401, 403, 404, 502, 503, 504 from a load balancer). Meant for final statuses that
    /// carry a body: not 1xx, 204 or 304.
    Status(u16),
    /// Forward, but replace the `X-ClickHouse-Key` request header's value with
    /// `wrong-password` (added when the request has none), so a real ClickHouse answers
    /// AUTHENTICATION_FAILED (code 516): a rotated password.
    BadKey,
    /// Forward, but hold every `INSERT` (a request whose URL names one) until the mode
    /// changes, then answer it in the new mode: a ClickHouse slow to take inserts.
    HoldInserts,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    mode: Mutex<ProxyMode>,
    stop: AtomicBool,
    forwarded: AtomicU64,
    faked: AtomicU64,
    held: AtomicU64,
}

impl Shared {
    fn mode(&self) -> ProxyMode {
        self.mode.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A running proxy on a free port of 127.0.0.1, in [`ProxyMode::Forward`] until switched.
///
/// Dropping it stops accepting connections; connections already accepted are closed at their
/// next request (or idle timeout).
#[derive(Debug)]
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 on a free port, forwarding to `upstream` (`127.0.0.1:PORT` or
    /// `http://127.0.0.1:PORT`). The upstream need not be up yet.
    pub fn start(upstream: &str) -> Result<FaultProxy> {
        let upstream_addr = parse_upstream(upstream)?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .context("binding the fault proxy's socket on 127.0.0.1")?;
        let addr = listener
            .local_addr()
            .context("reading the fault proxy's address")?;
        let shared = Arc::new(Shared {
            upstream: upstream_addr,
            mode: Mutex::new(ProxyMode::Forward),
            stop: AtomicBool::new(false),
            forwarded: AtomicU64::new(0),
            faked: AtomicU64::new(0),
            held: AtomicU64::new(0),
        });
        let acceptor = thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn({
                let shared = Arc::clone(&shared);
                move || accept_loop(&listener, &shared)
            })
            .context("spawning the fault proxy's accept thread")?;
        Ok(FaultProxy {
            shared,
            addr,
            acceptor: Some(acceptor),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Switches the mode; requests received from now on are answered in it.
    pub fn set_mode(&self, mode: ProxyMode) {
        *self.shared.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    pub fn mode(&self) -> ProxyMode {
        self.shared.mode()
    }

    /// Requests answered so far: (in Forward or BadKey mode, in Fake200 or Status mode). A
    /// `502` for an unreachable upstream counts as forwarded. A request is counted before its
    /// answer is written, so a client that has read an answer sees it counted.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.forwarded.load(Ordering::SeqCst),
            self.shared.faked.load(Ordering::SeqCst),
        )
    }

    /// Inserts held so far in [`ProxyMode::HoldInserts`] (counted when the hold begins).
    pub fn held(&self) -> u64 {
        self.shared.held.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocked accept(); it then sees the flag, and the listener is closed.
        let woken = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT).is_ok();
        if let Some(acceptor) = self.acceptor.take()
            && woken
        {
            let _ = acceptor.join();
        }
    }
}

fn parse_upstream(upstream: &str) -> Result<SocketAddr> {
    let trimmed = upstream.trim();
    let host_port = trimmed
        .strip_prefix("http://")
        .unwrap_or(trimmed)
        .trim_end_matches('/');
    if host_port.is_empty() || host_port.contains('/') {
        bail!("upstream {upstream:?} is not HOST:PORT or http://HOST:PORT");
    }
    host_port
        .to_socket_addrs()
        .with_context(|| format!("resolving upstream {upstream:?}"))?
        .next()
        .ok_or_else(|| anyhow!("upstream {upstream:?} resolves to no address"))
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else {
            // ECONNABORTED, EMFILE and the like: try again, without spinning.
            thread::sleep(Duration::from_millis(10));
            continue;
        };
        let shared = Arc::clone(shared);
        // A failed spawn drops the stream: the client sees the connection closed.
        let _ = thread::Builder::new()
            .name("fault-proxy-conn".to_owned())
            .spawn(move || serve(stream, &shared));
    }
}

fn serve(mut client: TcpStream, shared: &Shared) {
    // Any error ends the connection: the client sees it closed, as from a server that gave up.
    let _ = serve_connection(&mut client, shared);
    let _ = client.shutdown(Shutdown::Both);
}

/// Answers requests on one client connection until it closes, errs or wants closing.
fn serve_connection(client: &mut TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    client.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let _ = client.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let Some(raw) = read_head(client, &mut buf)? else {
            return Ok(());
        };
        let Ok(head) = Head::parse(&raw) else {
            return client.write_all(&plain(400, false));
        };
        if head.get("transfer-encoding").is_some() {
            return client.write_all(&plain(501, false));
        }
        let Ok(length) = head.content_length() else {
            return client.write_all(&plain(400, false));
        };
        if head
            .get("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let mut body = Vec::new();
        read_body(client, &mut buf, length.unwrap_or(0), &mut body)?;

        let mut mode = shared.mode();
        if mode == ProxyMode::HoldInserts && is_insert(&head.start) {
            shared.held.fetch_add(1, Ordering::SeqCst);
            while mode == ProxyMode::HoldInserts && !shared.stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(10));
                mode = shared.mode();
            }
        }
        let answer = match mode {
            ProxyMode::Forward | ProxyMode::BadKey | ProxyMode::HoldInserts => {
                shared.forwarded.fetch_add(1, Ordering::SeqCst);
                forward(shared.upstream, &head, &body, mode == ProxyMode::BadKey)
            }
            ProxyMode::Fake200 => {
                shared.faked.fetch_add(1, Ordering::SeqCst);
                Answer::keep(plain_with(200, "Ok.\n", true))
            }
            ProxyMode::Status(status) => {
                shared.faked.fetch_add(1, Ordering::SeqCst);
                Answer::keep(plain(status, true))
            }
        };
        client.write_all(&answer.bytes)?;
        client.flush()?;
        if !answer.keep_alive {
            return Ok(());
        }
    }
}

/// Bytes for the client, and whether its connection stays open after them.
struct Answer {
    bytes: Vec<u8>,
    keep_alive: bool,
}

impl Answer {
    fn keep(bytes: Vec<u8>) -> Answer {
        Answer {
            bytes,
            keep_alive: true,
        }
    }

    fn close(bytes: Vec<u8>) -> Answer {
        Answer {
            bytes,
            keep_alive: false,
        }
    }
}

/// Whether a request line (`POST /?query=INSERT%20INTO… HTTP/1.1`) names an `INSERT`.
fn is_insert(start: &str) -> bool {
    start.to_ascii_uppercase().contains("QUERY=INSERT")
}

/// Sends the request to the upstream over a connection of its own and returns the answer to
/// relay; a gateway error when the upstream cannot be reached or does not answer.
fn forward(upstream: SocketAddr, head: &Head, body: &[u8], bad_key: bool) -> Answer {
    let mut request = Vec::with_capacity(head.start.len() + 64 * head.headers.len());
    request.extend_from_slice(head.start.as_bytes());
    request.extend_from_slice(b"\r\n");
    let mut key_sent = false;
    for (name, value) in &head.headers {
        // Hop-by-hop: the upstream connection is ours, one request long; `Expect` was
        // answered here.
        if ["connection", "keep-alive", "expect", "proxy-connection"]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        let value = if bad_key && name.eq_ignore_ascii_case("x-clickhouse-key") {
            key_sent = true;
            WRONG_KEY
        } else {
            value.as_str()
        };
        push_header(&mut request, name, value);
    }
    if bad_key && !key_sent {
        push_header(&mut request, "X-ClickHouse-Key", WRONG_KEY);
    }
    push_header(&mut request, "Connection", "close");
    request.extend_from_slice(b"\r\n");

    let Ok(mut stream) = TcpStream::connect_timeout(&upstream, CONNECT_TIMEOUT) else {
        return Answer::keep(plain(502, true));
    };
    if stream.set_read_timeout(Some(UPSTREAM_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(UPSTREAM_TIMEOUT)).is_err()
    {
        return Answer::keep(plain(502, true));
    }
    let _ = stream.set_nodelay(true);
    // A write error is not the end yet: a server may answer (an error) and close before
    // reading the whole body.
    let wrote = stream
        .write_all(&request)
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush());
    let answer = relay(&mut stream);
    if answer.is_none()
        && let Err(e) = wrote
    {
        return Answer::keep(gateway_error(&e));
    }
    answer.unwrap_or_else(|| Answer::keep(plain(502, true)))
}

/// Reads the upstream's answer and frames it for the client: `Connection: keep-alive` when it
/// has a `Content-Length` and that much body arrived, else relayed with `Connection: close`
/// and the client connection closed after it. `None` when nothing at all was answered.
fn relay(upstream: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let head = loop {
        match read_head(upstream, &mut buf) {
            Ok(Some(raw)) => match Head::parse(&raw) {
                // 1xx: informational, the final answer follows.
                Ok(head)
                    if head
                        .start
                        .split(' ')
                        .nth(1)
                        .is_some_and(|s| s.starts_with('1')) => {}
                Ok(head) => break head,
                Err(_) => {
                    // Not HTTP as understood here: pass on whatever came, then close.
                    let mut bytes = raw;
                    bytes.append(&mut buf);
                    let _ = upstream.read_to_end(&mut bytes);
                    return Some(Answer::close(bytes));
                }
            },
            Ok(None) => return None,
            Err(e) if buf.is_empty() => return Some(Answer::keep(gateway_error(&e))),
            Err(_) => return Some(Answer::close(std::mem::take(&mut buf))),
        }
    };
    let mut body = Vec::new();
    let complete = match head.content_length() {
        Ok(Some(length)) => read_body(upstream, &mut buf, length, &mut body).is_ok(),
        _ => {
            // No length: the body runs to EOF (we asked for `Connection: close`).
            body.append(&mut buf);
            let _ = upstream.read_to_end(&mut body);
            false
        }
    };
    let mut bytes = Vec::with_capacity(head.start.len() + 64 * head.headers.len() + body.len());
    bytes.extend_from_slice(head.start.as_bytes());
    bytes.extend_from_slice(b"\r\n");
    for (name, value) in &head.headers {
        if !name.eq_ignore_ascii_case("connection") && !name.eq_ignore_ascii_case("keep-alive") {
            push_header(&mut bytes, name, value);
        }
    }
    push_header(
        &mut bytes,
        "Connection",
        if complete { "keep-alive" } else { "close" },
    );
    bytes.extend_from_slice(b"\r\n");
    bytes.append(&mut body);
    Some(Answer {
        bytes,
        keep_alive: complete,
    })
}

/// What a load balancer answers when the upstream fails: 504 on a timeout, else 502.
fn gateway_error(e: &io::Error) -> Vec<u8> {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => plain(504, true),
        _ => plain(502, true),
    }
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A plain-text answer `{status} {reason}\n`, with no ClickHouse headers.
fn plain(status: u16, keep_alive: bool) -> Vec<u8> {
    plain_with(
        status,
        &format!("{status} {}\n", reason(status)),
        keep_alive,
    )
}

fn plain_with(status: u16, body: &str, keep_alive: bool) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {}\r\n\r\n{body}",
        reason(status),
        body.len(),
        if keep_alive { "keep-alive" } else { "close" },
    )
    .into_bytes()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Fault",
    }
}

/// A request or response head: the start line and the headers in order.
#[derive(Debug)]
struct Head {
    start: String,
    headers: Vec<(String, String)>,
}

impl Head {
    /// Parses a head as read by [`read_head`] (ending in `\r\n\r\n`).
    fn parse(raw: &[u8]) -> io::Result<Head> {
        let text = std::str::from_utf8(raw).map_err(|_| invalid("head is not UTF-8"))?;
        let mut lines = text.trim_end_matches("\r\n").split("\r\n");
        let start = lines.next().unwrap_or_default();
        if start.is_empty() || !start.contains(' ') {
            return Err(invalid("no start line"));
        }
        let mut headers = Vec::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| invalid("header line without a colon"))?;
            let name = name.trim();
            if name.is_empty() || name.contains(char::is_whitespace) {
                return Err(invalid("bad header name"));
            }
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
        Ok(Head {
            start: start.to_owned(),
            headers,
        })
    }

    /// The first header called `name` (case-insensitive).
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Content-Length`, `None` when absent; an error when unparsable or given twice
    /// differently.
    fn content_length(&self) -> io::Result<Option<u64>> {
        let mut length = None;
        for (_, value) in self
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        {
            let n: u64 = value.parse().map_err(|_| invalid("bad Content-Length"))?;
            if length.is_some_and(|l| l != n) {
                return Err(invalid("conflicting Content-Length headers"));
            }
            length = Some(n);
        }
        Ok(length)
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one head, through its `\r\n\r\n`, from `buf` (bytes already read from `stream`)
/// and then `stream`; what follows it stays in `buf`. `None` on EOF before any byte of it.
fn read_head(stream: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Option<Vec<u8>>> {
    let mut chunk = [0u8; 8192];
    loop {
        // Stray CRLFs between messages are skipped (RFC 9112, 2.2).
        while buf.starts_with(b"\r\n") {
            buf.drain(..2);
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Some(std::mem::replace(buf, rest)));
        }
        if buf.len() >= MAX_HEAD {
            return Err(invalid("head longer than 64 KiB"));
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Appends exactly `length` body bytes to `body`: first from `buf` (what follows stays
/// there), the rest from `stream`. On an early EOF or error, `body` keeps what arrived.
fn read_body(
    stream: &mut impl Read,
    buf: &mut Vec<u8>,
    length: u64,
    body: &mut Vec<u8>,
) -> io::Result<()> {
    let buffered = buf.len().min(usize::try_from(length).unwrap_or(usize::MAX));
    body.extend(buf.drain(..buffered));
    let missing = length - buffered as u64;
    if missing > 0 {
        let got = (&mut *stream).take(missing).read_to_end(body)?;
        if (got as u64) < missing {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::mpsc::{self, Receiver};

    const TEST_TIMEOUT: Duration = Duration::from_secs(10);

    /// A tiny upstream: answers every request `200` with an `X-ClickHouse-Summary` header and
    /// body `echo:<request body>`, then closes; each request head it saw goes to the channel.
    fn upstream() -> (String, Receiver<Head>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else { continue };
                let tx = tx.clone();
                thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(TEST_TIMEOUT));
                    let mut buf = Vec::new();
                    let Ok(Some(raw)) = read_head(&mut stream, &mut buf) else {
                        return;
                    };
                    let Ok(head) = Head::parse(&raw) else { return };
                    let mut body = b"echo:".to_vec();
                    let length = head.content_length().ok().flatten().unwrap_or(0);
                    if read_body(&mut stream, &mut buf, length, &mut body).is_err() {
                        return;
                    }
                    let _ = tx.send(head);
                    let mut answer = format!(
                        "HTTP/1.1 200 OK\r\nX-ClickHouse-Summary: {{\"written_rows\":\"1\"}}\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .into_bytes();
                    answer.extend_from_slice(&body);
                    let _ = stream.write_all(&answer);
                });
            }
        });
        (format!("http://{addr}"), rx)
    }

    struct Client {
        stream: TcpStream,
        buf: Vec<u8>,
    }

    struct Reply {
        status: u16,
        head: Head,
        body: String,
    }

    impl Client {
        fn connect(proxy: &FaultProxy) -> Client {
            let stream = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
            stream
                .set_read_timeout(Some(TEST_TIMEOUT))
                .expect("timeout");
            Client {
                stream,
                buf: Vec::new(),
            }
        }

        /// One keep-alive POST with `extra` header lines (each ending in `\r\n`).
        fn post(&mut self, extra: &str, body: &str) -> Reply {
            let request = format!(
                "POST /?query=INSERT%20INTO%20t%20FORMAT%20RowBinary HTTP/1.1\r\nhost: 127.0.0.1\r\n\
                 connection: keep-alive\r\n{extra}content-length: {}\r\n\r\n{body}",
                body.len()
            );
            self.stream
                .write_all(request.as_bytes())
                .expect("write request");
            let raw = read_head(&mut self.stream, &mut self.buf)
                .expect("read answer head")
                .expect("an answer");
            let head = Head::parse(&raw).expect("parse answer head");
            let status = head
                .start
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .expect("status");
            let length = head
                .content_length()
                .expect("content length")
                .expect("a Content-Length");
            let mut body = Vec::new();
            read_body(&mut self.stream, &mut self.buf, length, &mut body).expect("read body");
            Reply {
                status,
                head,
                body: String::from_utf8(body).expect("UTF-8 body"),
            }
        }

        /// Whether the proxy closed the connection (EOF, no more bytes).
        fn closed(&mut self) -> bool {
            let mut byte = [0u8; 1];
            matches!(self.stream.read(&mut byte), Ok(0))
        }
    }

    fn no_clickhouse_headers(reply: &Reply) -> bool {
        !reply
            .head
            .headers
            .iter()
            .any(|(k, _)| k.to_ascii_lowercase().starts_with("x-clickhouse-"))
    }

    #[test]
    fn forward_relays_upstream_answer() {
        let (url, seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        assert_eq!(proxy.mode(), ProxyMode::Forward);
        assert_eq!(proxy.url(), format!("http://127.0.0.1:{}", proxy.port()));
        let reply = Client::connect(&proxy).post("X-ClickHouse-Key: secret\r\n", "row");
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "echo:row");
        assert_eq!(
            reply.head.get("X-ClickHouse-Summary"),
            Some("{\"written_rows\":\"1\"}")
        );
        assert_eq!(reply.head.get("connection"), Some("keep-alive"));
        let head = seen.recv_timeout(TEST_TIMEOUT).expect("upstream saw it");
        assert!(head.start.starts_with("POST /?query=INSERT"));
        assert_eq!(head.get("x-clickhouse-key"), Some("secret"));
        assert_eq!(head.get("connection"), Some("close"));
        assert_eq!(proxy.counts(), (1, 0));
    }

    #[test]
    fn fake200_answers_ok_without_upstream() {
        let (url, seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        proxy.set_mode(ProxyMode::Fake200);
        let reply = Client::connect(&proxy).post("", "row");
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "Ok.\n");
        assert!(no_clickhouse_headers(&reply));
        assert!(seen.try_recv().is_err());
        assert_eq!(proxy.counts(), (0, 1));
    }

    #[test]
    fn status_answers_that_status() {
        let (url, seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        proxy.set_mode(ProxyMode::Status(503));
        assert_eq!(proxy.mode(), ProxyMode::Status(503));
        let mut client = Client::connect(&proxy);
        let reply = client.post("", "row");
        assert_eq!(reply.status, 503);
        assert_eq!(reply.body, "503 Service Unavailable\n");
        assert!(no_clickhouse_headers(&reply));
        // The connection stays usable.
        assert_eq!(client.post("", "again").status, 503);
        assert!(seen.try_recv().is_err());
        assert_eq!(proxy.counts(), (0, 2));
    }

    #[test]
    fn bad_key_replaces_the_key() {
        let (url, seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        proxy.set_mode(ProxyMode::BadKey);
        let reply = Client::connect(&proxy).post(
            "X-ClickHouse-User: walshadow\r\nx-clickhouse-key: right\r\n",
            "row",
        );
        assert_eq!(reply.status, 200);
        let head = seen.recv_timeout(TEST_TIMEOUT).expect("upstream saw it");
        assert_eq!(head.get("X-ClickHouse-Key"), Some("wrong-password"));
        assert_eq!(head.get("X-ClickHouse-User"), Some("walshadow"));
        assert_eq!(
            head.headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("x-clickhouse-key"))
                .count(),
            1
        );
        assert_eq!(proxy.counts(), (1, 0));
    }

    #[test]
    fn keep_alive_connection_serves_requests_and_follows_mode_switches() {
        let (url, seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        let mut client = Client::connect(&proxy);
        assert_eq!(client.post("", "one").body, "echo:one");
        assert_eq!(client.post("", "two").body, "echo:two");
        proxy.set_mode(ProxyMode::Fake200);
        assert_eq!(client.post("", "three").body, "Ok.\n");
        proxy.set_mode(ProxyMode::Status(401));
        assert_eq!(client.post("", "four").status, 401);
        proxy.set_mode(ProxyMode::Forward);
        assert_eq!(client.post("", "five").body, "echo:five");
        for _ in 0..3 {
            seen.recv_timeout(TEST_TIMEOUT).expect("upstream saw it");
        }
        assert!(seen.try_recv().is_err());
        assert_eq!(proxy.counts(), (3, 2));
    }

    #[test]
    fn unreachable_upstream_is_a_bad_gateway() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("probe port")
            .port();
        let proxy = FaultProxy::start(&format!("127.0.0.1:{port}")).expect("start proxy");
        let mut client = Client::connect(&proxy);
        let reply = client.post("", "row");
        assert_eq!(reply.status, 502);
        assert!(no_clickhouse_headers(&reply));
        assert_eq!(client.post("", "row").status, 502);
        assert_eq!(proxy.counts(), (2, 0));
    }

    #[test]
    fn bad_input_closes_the_connection() {
        let (url, _seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        let mut client = Client::connect(&proxy);
        client
            .stream
            .write_all(b"POST / HTTP/1.1\r\nContent-Length: lots\r\n\r\n")
            .expect("write");
        let raw = read_head(&mut client.stream, &mut client.buf)
            .expect("read")
            .expect("an answer");
        let head = Head::parse(&raw).expect("parse answer head");
        assert!(head.start.starts_with("HTTP/1.1 400 "));
        assert_eq!(head.get("connection"), Some("close"));
        let length = head.content_length().expect("length").unwrap_or(0);
        let mut body = Vec::new();
        read_body(&mut client.stream, &mut client.buf, length, &mut body).expect("body");
        assert!(client.buf.is_empty());
        assert!(client.closed());
        assert_eq!(proxy.counts(), (0, 0));
    }

    #[test]
    fn drop_stops_accepting() {
        let (url, _seen) = upstream();
        let proxy = FaultProxy::start(&url).expect("start proxy");
        let port = proxy.port();
        drop(proxy);
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }

    #[test]
    fn upstream_forms() {
        assert!(FaultProxy::start("127.0.0.1:8123").is_ok());
        assert!(FaultProxy::start("http://127.0.0.1:8123/").is_ok());
        assert!(FaultProxy::start("http://127.0.0.1:8123/path").is_err());
        assert!(FaultProxy::start("no port").is_err());
    }
}
