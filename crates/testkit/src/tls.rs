//! Certificates for TLS tests, made with the `openssl` CLI:
//!
//! - a self-signed server certificate for TLS test clusters, naming `localhost` and
//!   `127.0.0.1`, so a client that trusts it as a root certificate can verify the server fully
//!   (`sslmode=verify-full`);
//! - [`TestCa`]: a throwaway certificate authority issuing server and client certificates, for
//!   the engine's HTTPS port (EC P-256 keys: fast to make).

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

/// A certificate and its private key (0600), both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A certificate authority in a directory of its own: `<name>-ca.pem` and its key.
#[derive(Debug, Clone)]
pub struct TestCa {
    dir: PathBuf,
    name: String,
    pair: CertPair,
}

fn run_openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(openssl()?)
        .current_dir(dir)
        .args(args)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed in {}: {}",
            args.first().copied().unwrap_or_default(),
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn private(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))
}

const EC_KEY: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

impl TestCa {
    /// A new CA named `name`, its files in `dir` (created if missing).
    pub fn new(dir: &Path, name: &str) -> Result<TestCa> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let pair = CertPair {
            cert: dir.join(format!("{name}-ca.pem")),
            key: dir.join(format!("{name}-ca.key")),
        };
        let (cert, key) = (pair.cert.to_string_lossy(), pair.key.to_string_lossy());
        let subject = format!("/CN={name} test CA");
        let mut args = vec!["req", "-x509", "-new", "-nodes", "-days", "3650"];
        args.extend(EC_KEY);
        args.extend([
            "-subj",
            &subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &key,
            "-out",
            &cert,
        ]);
        run_openssl(dir, &args)?;
        private(&pair.key)?;
        Ok(TestCa {
            dir: dir.to_owned(),
            name: name.to_owned(),
            pair,
        })
    }

    /// The CA's own certificate: what a client trusts.
    pub fn cert(&self) -> &Path {
        &self.pair.cert
    }

    /// A certificate for `leaf`, signed by this CA, usable by a server and a client, naming
    /// `names` (`DNS:localhost`, `IP:127.0.0.1`) as subject alternative names.
    pub fn issue(&self, leaf: &str, names: &[&str]) -> Result<CertPair> {
        let base = format!("{}-{leaf}", self.name);
        let pair = CertPair {
            cert: self.dir.join(format!("{base}.pem")),
            key: self.dir.join(format!("{base}.key")),
        };
        let csr = self.dir.join(format!("{base}.csr"));
        let ext = self.dir.join(format!("{base}.ext"));
        std::fs::write(
            &ext,
            format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                 extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName={}\n",
                names.join(",")
            ),
        )
        .with_context(|| format!("writing {}", ext.display()))?;
        let subject = format!("/CN={leaf}");
        let (cert, key, csr_s, ext_s) = (
            pair.cert.to_string_lossy(),
            pair.key.to_string_lossy(),
            csr.to_string_lossy(),
            ext.to_string_lossy(),
        );
        let mut args = vec!["req", "-new", "-nodes"];
        args.extend(EC_KEY);
        args.extend(["-subj", &subject, "-keyout", &key, "-out", &csr_s]);
        run_openssl(&self.dir, &args)?;
        private(&pair.key)?;
        let (ca_cert, ca_key) = (
            self.pair.cert.to_string_lossy(),
            self.pair.key.to_string_lossy(),
        );
        run_openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr_s,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-days",
                "3650",
                "-extfile",
                &ext_s,
                "-out",
                &cert,
            ],
        )?;
        Ok(pair)
    }
}
