//! A self-signed server certificate for TLS test clusters, made with the `openssl` CLI.
//!
//! The certificate names `localhost` and `127.0.0.1`, so a client that trusts it as a root
//! certificate can verify the server fully (`sslmode=verify-full`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::ServerUser;

/// Finds `openssl` on `PATH`.
pub(crate) fn openssl() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("openssl"))
        .find(|p| p.is_file())
        .context("a TLS cluster needs the `openssl` CLI, which is not on PATH; install it (scripts/setup does)")
}

/// Writes `server.crt` and `server.key` (mode 0600) into `data_dir` as `user`.
pub(crate) fn make_server_cert(user: &ServerUser, data_dir: &Path) -> Result<()> {
    let out = user
        .command(&openssl()?, data_dir)
        .args([
            "req",
            "-new",
            "-x509",
            "-days",
            "3650",
            "-nodes",
            "-newkey",
            "rsa:2048",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.crt",
        ])
        .output()
        .context("running openssl req")?;
    if !out.status.success() {
        bail!(
            "openssl req failed making a server certificate in {}: {}",
            data_dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        data_dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .context("chmod 0600 server.key")?;
    Ok(())
}
