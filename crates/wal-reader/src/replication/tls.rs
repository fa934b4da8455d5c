//! TLS per libpq's `sslmode`, with rustls and the ring provider.
//!
//! - `prefer`/`require`: encrypt, accept any certificate (libpq does the
//!   same when no root certificate is given). Handshake signatures are still
//!   checked against the presented key.
//! - `verify-ca`: the chain must lead to `sslrootcert`; the host name is not
//!   checked.
//! - `verify-full`: chain and host name.
//!
//! OpenSSL (libpq) also accepts a self-signed server certificate that is
//! itself listed in `sslrootcert`; webpki refuses that shape (a CA used as
//! end entity, or no issuer), so a certificate byte-identical to one in
//! `sslrootcert` is accepted as pinned (with the name checked for
//! `verify-full`).

use std::sync::Arc;

use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme,
};

use walshadow_tls::AnyCertificate;

use super::config::{ConnConfig, SslMode};
use super::error::{ReplicationError, Result};

/// libpq's default root certificate, `~/.postgresql/root.crt`, if present.
pub(crate) fn default_root() -> Option<std::path::PathBuf> {
    let home = std::env::var_os("HOME")?;
    let path = std::path::Path::new(&home).join(".postgresql/root.crt");
    path.is_file().then_some(path)
}

/// The `sslmode` in effect: as libpq, `require` verifies the chain
/// (`verify-ca`) when a root certificate is given or present by default.
pub(crate) fn effective_mode(cfg: &ConnConfig) -> (SslMode, Option<std::path::PathBuf>) {
    let root = cfg.sslrootcert.clone().or_else(default_root);
    match (cfg.sslmode, &root) {
        (SslMode::Require, Some(_)) => (SslMode::VerifyCa, root),
        (mode, _) => (mode, root),
    }
}

/// The TLS session, and the `tls-server-end-point` channel-binding data
/// of the server's certificate when its signature names a hash.
pub(crate) async fn handshake(
    cfg: &ConnConfig,
    host: &str,
    tcp: TcpStream,
) -> Result<(TlsStream<TcpStream>, Option<Vec<u8>>)> {
    let provider = walshadow_tls::provider();
    let (mode, root) = effective_mode(cfg);
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let path = root.as_ref().ok_or_else(|| {
                ReplicationError::Config(
                    "sslmode verify-ca/verify-full needs sslrootcert (or ~/.postgresql/root.crt)"
                        .into(),
                )
            })?;
            let sslrootcert = |e: walshadow_tls::TlsFileError| {
                ReplicationError::Config(format!("sslrootcert {e}"))
            };
            let certs = walshadow_tls::certificates(path).map_err(sslrootcert)?;
            let (roots, ignored) = walshadow_tls::roots_from(path).map_err(sslrootcert)?;
            if ignored > 0 {
                tracing::warn!(path = %path.display(), ignored, "sslrootcert: some certificates could not be used as trust anchors");
            }
            let webpki = if roots.is_empty() {
                None
            } else {
                Some(
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| ReplicationError::Tls(format!("building verifier: {e}")))?,
                )
            };
            Arc::new(Verifier {
                mode,
                webpki,
                pinned: certs,
                signatures: AnyCertificate::new(provider.clone()),
            })
        }
        _ => Arc::new(AnyCertificate::new(provider.clone())),
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ReplicationError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_owned()).map_err(|e| {
        ReplicationError::Config(format!("host {host:?} is not a valid TLS server name: {e}"))
    })?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            match e
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                Some(tls) => ReplicationError::Tls(format!("handshake with {host}: {tls}")),
                None => ReplicationError::Io(e),
            }
        })?;
    let end_point = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| server_end_point(c.as_ref()));
    Ok((tls, end_point))
}

/// `tls-server-end-point` (RFC 5929): the hash of the server's
/// certificate with the hash of its signature algorithm, SHA-256 for MD5
/// and SHA-1 (what PostgreSQL's `be_tls_get_certificate_hash` computes).
/// `None` for an algorithm that names no hash this client knows (RSA-PSS,
/// Ed25519): channel binding is then not offered. Read by hand because
/// only the signature algorithm's OID is needed, not an X.509 parser.
pub(crate) fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    use ::ring::digest::{SHA256, SHA384, SHA512, digest};
    let oid = signature_algorithm_oid(cert)?;
    const RSA: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04];
    let alg = match oid.split_last() {
        Some((&last, head)) if head == RSA => match last {
            0x04 | 0x05 | 0x0B => &SHA256,
            0x0C => &SHA384,
            0x0D => &SHA512,
            _ => return None,
        },
        _ if oid == [ECDSA, &[0x01]].concat() => &SHA256,
        Some((&last, head)) if head == [ECDSA, &[0x03]].concat() => match last {
            0x02 => &SHA256,
            0x03 => &SHA384,
            0x04 => &SHA512,
            _ => return None,
        },
        _ => return None,
    };
    Some(digest(alg, cert).as_ref().to_vec())
}

/// The OID bytes of `Certificate.signatureAlgorithm` (the second element
/// of the outer DER SEQUENCE).
fn signature_algorithm_oid(der: &[u8]) -> Option<&[u8]> {
    /// Tag and content of the DER element at the start of `b`, and what
    /// follows it.
    fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = b.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let n = usize::from(first & 0x7F);
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let (bytes, rest) = rest.split_at(n);
            (
                bytes.iter().fold(0usize, |l, &x| (l << 8) | usize::from(x)),
                rest,
            )
        };
        (rest.len() >= len).then(|| {
            let (content, after) = rest.split_at(len);
            (tag, content, after)
        })
    }
    let (0x30, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, _tbs, rest) = element(cert)? else {
        return None;
    };
    let (0x30, alg, _) = element(rest)? else {
        return None;
    };
    match element(alg)? {
        (0x06, oid, _) => Some(oid),
        _ => None,
    }
}

#[derive(Debug)]
struct Verifier {
    mode: SslMode,
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    /// Checks the handshake's signatures.
    signatures: AnyCertificate,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let chain_result = match &self.webpki {
            Some(v) => {
                v.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
            None => Err(rustls::Error::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
        };
        match chain_result {
            Ok(ok) => Ok(ok),
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if self.mode == SslMode::VerifyCa => Ok(ServerCertVerified::assertion()),
            Err(e) => {
                if !self
                    .pinned
                    .iter()
                    .any(|p| p.as_ref() == end_entity.as_ref())
                {
                    return Err(e);
                }
                if self.mode == SslMode::VerifyFull {
                    let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
                        rustls::Error::InvalidCertificate(CertificateError::BadEncoding)
                    })?;
                    cert.verify_is_valid_for_subject_name(server_name)
                        .map_err(|_| {
                            rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
                        })?;
                }
                Ok(ServerCertVerified::assertion())
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.signatures.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.signatures.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A certificate's outer shape: an empty TBS, a signature algorithm,
    /// an empty signature.
    fn cert_with(oid: &[u8]) -> Vec<u8> {
        let mut alg = vec![0x06, u8::try_from(oid.len()).unwrap()];
        alg.extend_from_slice(oid);
        let mut body = vec![0x30, 0x00, 0x30, u8::try_from(alg.len()).unwrap()];
        body.extend(alg);
        body.extend([0x03, 0x01, 0x00]);
        let mut der = vec![0x30, u8::try_from(body.len()).unwrap()];
        der.extend(body);
        der
    }

    #[test]
    fn end_point_hash_follows_the_signature_algorithm() {
        use ::ring::digest::{SHA256, SHA384, digest};
        let rsa_sha256 = cert_with(&[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B]);
        assert_eq!(
            server_end_point(&rsa_sha256).unwrap(),
            digest(&SHA256, &rsa_sha256).as_ref()
        );
        let rsa_sha1 = cert_with(&[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05]);
        assert_eq!(server_end_point(&rsa_sha1).unwrap().len(), 32);
        let ecdsa_sha384 = cert_with(&[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x03]);
        assert_eq!(
            server_end_point(&ecdsa_sha384).unwrap(),
            digest(&SHA384, &ecdsa_sha384).as_ref()
        );
        // RSA-PSS names its hash in parameters; Ed25519 has none: no binding.
        assert_eq!(
            server_end_point(&cert_with(&[
                0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0A
            ])),
            None
        );
        assert_eq!(server_end_point(&cert_with(&[0x2B, 0x65, 0x70])), None);
        // Truncated or not DER: none, no panic.
        assert_eq!(server_end_point(&rsa_sha256[..rsa_sha256.len() - 4]), None);
        assert_eq!(server_end_point(&[0x30, 0x84, 0xFF]), None);
        assert_eq!(server_end_point(&[]), None);
    }
}
