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

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::client::WebPkiServerVerifier;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};
use tokio_rustls::rustls::crypto::{
    CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature,
};
use tokio_rustls::rustls::{
    self, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use super::config::{ConnConfig, SslMode};
use super::error::{ReplicationError, Result};

pub(crate) async fn handshake(
    cfg: &ConnConfig,
    host: &str,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>> {
    let provider = Arc::new(ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match cfg.sslmode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            let path = cfg.sslrootcert.as_ref().ok_or_else(|| {
                ReplicationError::Config("sslmode verify-ca/verify-full needs sslrootcert".into())
            })?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| {
                    ReplicationError::Config(format!("sslrootcert {}: {e}", path.display()))
                })?;
            if certs.is_empty() {
                return Err(ReplicationError::Config(format!(
                    "sslrootcert {} holds no PEM certificate",
                    path.display()
                )));
            }
            let mut roots = RootCertStore::empty();
            let (_, ignored) = roots.add_parsable_certificates(certs.iter().cloned());
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
                mode: cfg.sslmode,
                webpki,
                pinned: certs,
                provider: provider.clone(),
            })
        }
        _ => Arc::new(Verifier {
            mode: cfg.sslmode,
            webpki: None,
            pinned: Vec::new(),
            provider: provider.clone(),
        }),
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
    TlsConnector::from(Arc::new(config))
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
        })
}

#[derive(Debug)]
struct Verifier {
    mode: SslMode,
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
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
        if !self.mode.verifies() {
            return Ok(ServerCertVerified::assertion());
        }
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
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
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
