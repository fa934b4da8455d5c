//! https to ClickHouse, against the engine's HTTPS port with a certificate
//! from a throwaway CA, client certificates required:
//!
//! - the CA in `ca_file` and a client certificate: statements and inserts
//!   go through;
//! - no `ca_file` (the system's roots), another CA, or a URL host the
//!   certificate does not name: refused in the handshake, a TLS error of
//!   the environment class (the stream pauses, no table stops), with the
//!   remedy in the message;
//! - no client certificate: the server's refusal is a TLS error too;
//! - `insecure_skip_verify`: another CA's certificate is accepted;
//! - a client key others can read, and TLS options on an http:// URL, are
//!   refused when the client is made.

mod common;

use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use walshadow_emitter::{
    ClickHouseClient, ClickHouseError, ClientConfig, ErrorClass, InsertSettings, TlsOptions,
};
use walshadow_testkit::{ClickHouseEngine, ClickHouseOptions, EngineTls, TestCa, WorkDir};

fn client(url: &str, tls: TlsOptions) -> Result<ClickHouseClient, ClickHouseError> {
    let mut config = ClientConfig::new(url, "tls");
    config.tls = tls;
    ClickHouseClient::new(config)
}

#[test]
fn https_verifies_the_server_and_presents_a_client_certificate() {
    let work = WorkDir::new("emitter-tls").unwrap();
    let ca = TestCa::new(work.path(), "good").unwrap();
    let other = TestCa::new(work.path(), "other").unwrap();
    let server = ca.issue("server", &["DNS:localhost"]).unwrap();
    let client_pair = ca.issue("client", &["DNS:walshadow"]).unwrap();
    let engine = ClickHouseEngine::start_with(ClickHouseOptions::default().tls(EngineTls {
        server,
        client_ca: Some(ca.cert().to_owned()),
    }))
    .unwrap();
    let url = engine.https_url().unwrap();
    let port = engine.tls_port().unwrap();
    let trusted = TlsOptions {
        ca_file: Some(ca.cert().to_owned()),
        client_cert: Some((client_pair.cert.clone(), client_pair.key.clone())),
        insecure_skip_verify: false,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    rt.block_on(async {
        // Trusted both ways: DDL, an insert, a query.
        let ch = client(&url, trusted.clone()).unwrap();
        ch.ensure_database().await.unwrap();
        ch.execute("CREATE TABLE tls.t (id UInt32) ENGINE = MergeTree ORDER BY id")
            .await
            .unwrap();
        let rows = Bytes::from_static(&[1, 0, 0, 0, 2, 0, 0, 0]);
        ch.insert("t", &["id".into()], rows, 2, &InsertSettings::default())
            .await
            .unwrap();
        assert_eq!(
            ch.query("SELECT sum(id) FROM tls.t").await.unwrap().trim(),
            "3"
        );

        let refused = |tls: TlsOptions, url: String| async move {
            let e = client(&url, tls)
                .unwrap()
                .query("SELECT 1")
                .await
                .unwrap_err();
            assert_eq!(e.class(), ErrorClass::Environment, "{e}");
            assert!(matches!(e, ClickHouseError::Tls { .. }), "{e}");
            e.to_string()
        };
        // The system's roots do not hold the test CA (a host without any
        // is refused when the client is made, naming the remedy).
        let system = TlsOptions {
            ca_file: None,
            ..trusted.clone()
        };
        let mut config = ClientConfig::new(&url, "tls");
        config.tls = system.clone();
        match ClickHouseClient::new(config) {
            Ok(_) => {
                let e = refused(system, url.clone()).await;
                assert!(
                    e.contains("UnknownIssuer") && e.contains("clickhouse.ca_file"),
                    "{e}"
                );
            }
            Err(e) => assert!(e.to_string().contains("no system root certificates"), "{e}"),
        }
        // Another CA.
        let wrong_ca = TlsOptions {
            ca_file: Some(other.cert().to_owned()),
            ..trusted.clone()
        };
        let e = refused(wrong_ca, url.clone()).await;
        assert!(e.contains("UnknownIssuer"), "{e}");
        // The certificate names localhost only.
        let e = refused(trusted.clone(), format!("https://127.0.0.1:{port}")).await;
        assert!(e.contains("not valid for name \"127.0.0.1\""), "{e}");
        // No client certificate: the server ends the handshake.
        let anonymous = TlsOptions {
            client_cert: None,
            ..trusted.clone()
        };
        let e = client(&url, anonymous)
            .unwrap()
            .query("SELECT 1")
            .await
            .unwrap_err();
        assert!(
            matches!(
                e,
                ClickHouseError::Tls { .. } | ClickHouseError::Connection { .. }
            ),
            "{e}"
        );
        assert_ne!(e.class(), ErrorClass::Definite);

        // Verification off, by the explicit setting: another CA's
        // certificate is accepted (and the host is not checked).
        let insecure = TlsOptions {
            ca_file: None,
            insecure_skip_verify: true,
            ..trusted.clone()
        };
        let ch = client(&format!("https://127.0.0.1:{port}"), insecure).unwrap();
        assert_eq!(ch.query("SELECT 1").await.unwrap().trim(), "1");

        // Plain HTTP spoken to the TLS port is no answer.
        let plain = client(&format!("http://localhost:{port}"), TlsOptions::default()).unwrap();
        let e = plain.query("SELECT 1").await.unwrap_err();
        assert!(!matches!(e, ClickHouseError::Server { .. }), "{e}");
    });

    // A client key others can read is refused before anything is sent.
    std::fs::set_permissions(&client_pair.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = client(&url, trusted.clone()).unwrap_err().to_string();
    assert!(e.contains("client_key") && e.contains("chmod 0600"), "{e}");
    // TLS options on a plain-http URL.
    let e = client(&engine.url(), trusted).unwrap_err().to_string();
    assert!(e.contains("plain http"), "{e}");
}
