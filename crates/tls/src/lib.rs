//! TLS client pieces shared by the source connection (`wal-reader`) and the
//! ClickHouse client (`emitter`), so both read certificates, keys and trust
//! anchors the same way:
//!
//! - [`provider`]: rustls with ring, the one crypto provider (no aws-lc-rs,
//!   no OpenSSL);
//! - [`certificates`], [`private_key`]: PEM files, with the path in every
//!   error, and a private key refused when others can read it (as libpq
//!   refuses `sslkey`);
//! - [`system_roots`]: the host's trust anchors (`SSL_CERT_FILE`,
//!   `SSL_CERT_DIR`, or the distribution's bundle);
//! - [`AnyCertificate`]: a verifier that trusts every certificate but still
//!   checks the handshake's signatures against it, for the modes that
//!   encrypt without authenticating the server.

pub use tokio_rustls::rustls;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{
    CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A TLS file that cannot be used, with the path and why.
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("no system root certificates: {0}")]
    NoSystemRoots(String),
}

fn file_error(path: &Path, message: impl Into<String>) -> TlsFileError {
    TlsFileError::File {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// rustls' ring provider.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// Every PEM certificate in `path`; a file with none is an error.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| file_error(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The PEM private key in `path` (PKCS#8, PKCS#1 or SEC1). Refused when
/// its group or others have any access to it, before it is read.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| file_error(path, e.to_string()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(file_error(
            path,
            format!(
                "private key has group or other access (mode {:04o}); `chmod 0600` it",
                mode & 0o7777
            ),
        ));
    }
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e.to_string()))
}

/// Trust anchors from the certificates in `path`, and how many of them
/// could not be used as one.
pub fn roots_from(path: &Path) -> Result<(RootCertStore, usize), TlsFileError> {
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(certificates(path)?);
    Ok((roots, ignored))
}

/// The host's trust anchors. Unreadable entries are skipped with a
/// warning; finding none at all is an error.
pub fn system_roots() -> Result<RootCertStore, TlsFileError> {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::warn!(error = %e, "skipping a system root certificate that cannot be read");
    }
    let mut roots = RootCertStore::empty();
    let (_, ignored) = roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsFileError::NoSystemRoots(format!(
            "none found ({ignored} unusable, {} errors); install the distribution's \
             ca-certificates package, set SSL_CERT_FILE, or name a CA file",
            found.errors.len()
        )));
    }
    Ok(roots)
}

/// Trusts any server certificate; checks that the handshake was signed
/// by the key of the certificate presented.
#[derive(Debug)]
pub struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl AnyCertificate {
    pub fn new(provider: Arc<CryptoProvider>) -> AnyCertificate {
        AnyCertificate { provider }
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_name_their_path() {
        let dir = std::env::temp_dir().join(format!("walshadow-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = certificates(&empty).unwrap_err().to_string();
        assert!(e.contains("empty.pem") && e.contains("no PEM"), "{e}");
        let e = certificates(&dir.join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");

        use std::os::unix::fs::PermissionsExt;
        let key = dir.join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = private_key(&key).unwrap_err().to_string();
        assert!(e.contains("0640") && e.contains("chmod 0600"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
