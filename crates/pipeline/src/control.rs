//! `walshadow ctl`: commands to a running `walshadow run` over a unix
//! socket in the state directory.
//!
//! The socket is `<state>/control.sock`, mode 0600 (the state directory
//! itself is 0700, or 0711 when `run` runs as root and hands the shadow
//! its socket directories); on top of that a connection is served only
//! when its peer is the socket's owner or root (`SO_PEERCRED`), so another
//! user of the host can neither pause the stream nor read its status. One
//! request a connection: a JSON line in, a JSON line out.
//!
//! The socket, not the metrics listener: it needs no token to keep and no
//! port to open.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The socket's name in the state directory.
pub const SOCKET: &str = "control.sock";

/// A request's longest line: commands are a few words.
const MAX_REQUEST: u64 = 4096;

/// How long a client waits for the answer (a pause waits for the rows in
/// hand to land in ClickHouse first).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// What `walshadow ctl` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    /// The running stream's status document (the fields of
    /// `<state>/status.json`, now).
    Status,
    /// Stop taking WAL (the slot keeps it) once the rows in hand are in
    /// ClickHouse; kept across restarts until `resume`.
    Pause,
    /// Take WAL again.
    Resume,
    /// Read the config file again and apply what can change while running.
    Reload,
}

impl Command {
    pub fn name(self) -> &'static str {
        match self {
            Command::Status => "status",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Reload => "reload",
        }
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    /// What happened, for a person.
    pub message: String,
    /// `status`: the status document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
}

impl Reply {
    pub fn ok(message: impl Into<String>) -> Reply {
        Reply {
            ok: true,
            message: message.into(),
            status: None,
        }
    }

    pub fn refused(message: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            message: message.into(),
            status: None,
        }
    }
}

/// Why a control request or the socket failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(
        "nothing answers on {path}: is `walshadow run` running with this state directory? ({source})"
    )]
    NotRunning {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: permission denied: only the user walshadow runs as, or root, may control it")]
    NotAllowed { path: PathBuf },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no answer within {0:?}", ANSWER_TIMEOUT)]
    Timeout { path: PathBuf },
    #[error("{path}: the answer is not understood: {detail}")]
    BadAnswer { path: PathBuf, detail: String },
}

/// The listening socket of a `run`.
#[derive(Debug)]
pub struct ControlSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's owner: the user `run` runs as.
    owner: u32,
}

impl ControlSocket {
    /// Listens at `<state_dir>/control.sock`. A file left there by a `run`
    /// that ended without removing it is replaced: the caller holds the
    /// state directory's lock, so no other `run` serves it.
    pub fn bind(state_dir: &Path) -> Result<ControlSocket, ControlError> {
        let path = state_dir.join(SOCKET);
        let io = |source| ControlError::Io {
            path: path.clone(),
            source,
        };
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let listener = UnixListener::bind(&path).map_err(io)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        let owner = std::fs::metadata(&path).map_err(io)?.uid();
        Ok(ControlSocket {
            listener,
            path,
            owner,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next request from an allowed peer. Refused peers and requests
    /// that do not parse are answered (or dropped) here and logged.
    pub async fn next(&self) -> Result<(Command, Responder), ControlError> {
        loop {
            let (stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|source| ControlError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            let uid = match stream.peer_cred() {
                Ok(c) => c.uid(),
                Err(e) => {
                    tracing::warn!("control socket: peer credentials unavailable ({e}); refused");
                    continue;
                }
            };
            let mut responder = Responder { stream };
            if uid != self.owner && uid != 0 {
                tracing::warn!(
                    uid,
                    "control socket: a connection of another user refused (only uid {} and root may control this run)",
                    self.owner
                );
                responder
                    .send(&Reply::refused(
                        "only the user walshadow runs as, or root, may control it",
                    ))
                    .await;
                continue;
            }
            match responder.read_command().await {
                Ok(cmd) => return Ok((cmd, responder)),
                Err(why) => {
                    responder.send(&Reply::refused(why)).await;
                }
            }
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where the answer to one request goes.
#[derive(Debug)]
pub struct Responder {
    stream: UnixStream,
}

impl Responder {
    async fn read_command(&mut self) -> Result<Command, String> {
        let mut line = String::new();
        let mut reader = BufReader::new((&mut self.stream).take(MAX_REQUEST));
        match tokio::time::timeout(Duration::from_secs(5), reader.read_line(&mut line)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("reading the request: {e}")),
            Err(_) => return Err("no request within 5 s".into()),
        }
        serde_json::from_str(line.trim()).map_err(|e| {
            format!(
                "not a request walshadow knows ({e}); one of status, pause, resume, reload, as `walshadow ctl` sends"
            )
        })
    }

    /// Sends the answer; a client that left is not an error of the run.
    pub async fn send(&mut self, reply: &Reply) {
        let Ok(mut text) = serde_json::to_vec(reply) else {
            return;
        };
        text.push(b'\n');
        // A client that does not read holds up no later request.
        match tokio::time::timeout(Duration::from_secs(5), self.stream.write_all(&text)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("control socket: the client left before its answer: {e}"),
            Err(_) => tracing::warn!("control socket: the client took no answer within 5 s"),
        }
    }
}

/// Sends `cmd` to the `run` of `state_dir` and returns its answer.
pub async fn request(state_dir: &Path, cmd: Command) -> Result<Reply, ControlError> {
    let path = state_dir.join(SOCKET);
    let mut stream = UnixStream::connect(&path).await.map_err(|source| {
        if source.kind() == std::io::ErrorKind::PermissionDenied {
            ControlError::NotAllowed { path: path.clone() }
        } else {
            ControlError::NotRunning {
                path: path.clone(),
                source,
            }
        }
    })?;
    let io = |source| ControlError::Io {
        path: path.clone(),
        source,
    };
    let mut line = serde_json::to_vec(&cmd).map_err(|e| io(std::io::Error::other(e)))?;
    line.push(b'\n');
    // A run that refuses this peer answers without reading the request:
    // its answer is what to show, not the broken pipe.
    let sent = stream.write_all(&line).await;
    let mut answer = String::new();
    let mut reader = BufReader::new(&mut stream);
    match tokio::time::timeout(ANSWER_TIMEOUT, reader.read_line(&mut answer)).await {
        Ok(r) => {
            r.map_err(io)?;
        }
        Err(_) => return Err(ControlError::Timeout { path }),
    }
    if answer.is_empty() {
        sent.map_err(io)?;
    }
    serde_json::from_str(answer.trim()).map_err(|e| ControlError::BadAnswer {
        path,
        detail: format!("{e}: {answer:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("walshadow-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_request_reaches_the_run_and_its_answer_comes_back() {
        let dir = temp_dir("control-socket");
        let socket = ControlSocket::bind(&dir).unwrap();
        let mode = std::fs::metadata(socket.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let server = async {
            let (cmd, mut r) = socket.next().await.unwrap();
            assert_eq!(cmd, Command::Pause);
            r.send(&Reply::ok("paused")).await;
        };
        let (_, reply) = tokio::join!(server, request(&dir, Command::Pause));
        assert_eq!(reply.unwrap(), Reply::ok("paused"));
        drop(socket);
        assert!(!dir.join(SOCKET).exists());
        let e = request(&dir, Command::Status).await.unwrap_err();
        assert!(e.to_string().contains("is `walshadow run` running"), "{e}");
    }

    #[tokio::test]
    async fn an_unknown_request_is_answered_with_what_is_known() {
        let dir = temp_dir("control-socket-bad");
        let socket = ControlSocket::bind(&dir).unwrap();
        let path = socket.path().to_owned();
        let client = async {
            let mut s = UnixStream::connect(&path).await.unwrap();
            s.write_all(b"\"drop_everything\"\n").await.unwrap();
            let mut answer = String::new();
            BufReader::new(&mut s).read_line(&mut answer).await.unwrap();
            serde_json::from_str::<Reply>(answer.trim()).unwrap()
        };
        let reply = tokio::select! {
            r = client => r,
            _ = socket.next() => unreachable!("an unknown request is not handed on"),
        };
        assert!(!reply.ok);
        assert!(
            reply.message.contains("status, pause, resume, reload"),
            "{}",
            reply.message
        );
    }
}
