//! `ReplicationClient::copy_out` on an SQL session against real PostgreSQL
//! 15 and 18: the payloads equal what psql's `COPY … TO STDOUT` prints, one
//! per row; server errors mid-COPY, statements that are not a COPY TO
//! STDOUT, stalls and cancels leave the session usable; a row beyond the
//! default 64 MiB message bound comes through; a COPY dropped midway
//! poisons the client.

use std::time::Duration;

use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};
use walshadow_wal_reader::replication::{ConnConfig, CopyOut, ReplicationClient, ReplicationError};

const MAJORS: [PgMajor; 4] = PgMajor::ALL;

async fn sql_session(pg: &Cluster) -> ReplicationClient {
    let mut cfg = ConnConfig::from_url(&pg.socket_url("postgres")).unwrap();
    cfg.physical = false;
    cfg.command_timeout = Duration::from_secs(60);
    ReplicationClient::connect(&cfg).await.unwrap()
}

async fn drain(copy: &mut CopyOut<'_>) -> Result<Vec<bytes::Bytes>, ReplicationError> {
    let mut out = Vec::new();
    while let Some(b) = copy.next().await? {
        out.push(b);
    }
    Ok(out)
}

async fn assert_usable(c: &mut ReplicationClient, what: &str) {
    let r = c
        .simple_query("select 40 + 2")
        .await
        .unwrap_or_else(|e| panic!("after {what}: {e}"));
    assert_eq!(r.text(0, 0), Some("42"), "after {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_out_streams_rows_and_recovers_from_errors() {
    for major in MAJORS {
        let pg = Cluster::start(major, ClusterOptions::default()).unwrap();
        pg.psql(
            "create table t as select g, repeat('x', g % 50) || E'\\t\\\\é' as s, \
             case when g % 7 = 0 then null else g * 1.5 end as n from generate_series(1, 5000) g",
        )
        .unwrap();
        let mut c = sql_session(&pg).await;

        // Text: byte for byte what psql prints, one CopyData per row.
        let mut copy = c.copy_out("COPY public.t TO STDOUT").await.unwrap();
        assert!(!copy.is_binary());
        assert_eq!(copy.column_count(), 3);
        let parts = drain(&mut copy).await.unwrap();
        assert_eq!(copy.rows(), Some(5000));
        assert_eq!(copy.next().await.unwrap(), None, "{major}: stays ended");
        assert_eq!(parts.len(), 5000, "{major}: one message per row");
        let ours: Vec<u8> = parts.concat();
        let theirs = pg.psql("copy t to stdout").unwrap();
        assert_eq!(String::from_utf8(ours).unwrap(), format!("{theirs}\n"));

        // Binary: signature first, trailer last.
        let mut copy = c
            .copy_out("COPY (select g, s from public.t order by g) TO STDOUT (FORMAT binary)")
            .await
            .unwrap();
        assert!(copy.is_binary());
        let bin = drain(&mut copy).await.unwrap().concat();
        assert!(bin.starts_with(b"PGCOPY\n\xff\r\n\0"));
        assert!(bin.ends_with(&[0xff, 0xff]));
        assert_eq!(copy.rows(), Some(5000));

        // The server's error mid-COPY surfaces with its message; the
        // session is usable.
        let mut copy = c
            .copy_out("COPY (select 1 / (3000 - g) from generate_series(1, 5000) g) TO STDOUT")
            .await
            .unwrap();
        let e = drain(&mut copy).await.unwrap_err();
        let db = e.db_error().unwrap_or_else(|| panic!("{major}: {e}"));
        assert_eq!(db.code, "22012", "{major}: {e}");
        assert!(e.to_string().contains("division by zero"), "{e}");
        assert!(copy.next().await.is_err(), "next after a failure errors");
        assert_usable(&mut c, "an error mid-COPY").await;

        // Inside a transaction the error aborts it: ROLLBACK brings it back.
        c.simple_query("begin isolation level repeatable read")
            .await
            .unwrap();
        let mut copy = c
            .copy_out("COPY (select 1 / (10 - g) from generate_series(1, 20) g) TO STDOUT")
            .await
            .unwrap();
        assert!(drain(&mut copy).await.is_err());
        let e = c.simple_query("select 1").await.unwrap_err();
        assert_eq!(e.db_error().map(|d| d.code.as_str()), Some("25P02"));
        c.simple_query("rollback").await.unwrap();
        assert_usable(&mut c, "a rolled back transaction").await;

        // Errors before the COPY begins.
        let e = c.copy_out("COPY nope TO STDOUT").await.unwrap_err();
        assert_eq!(e.db_error().map(|d| d.code.as_str()), Some("42P01"), "{e}");
        assert_usable(&mut c, "an unknown table").await;
        let e = c.copy_out("select 1").await.unwrap_err();
        assert!(matches!(e, ReplicationError::Config(_)), "{e}");
        assert_usable(&mut c, "a SELECT").await;
        let e = c.copy_out("COPY public.t FROM STDIN").await.unwrap_err();
        assert!(
            matches!(&e, ReplicationError::Config(m) if m.contains("COPY FROM STDIN")),
            "{e}"
        );
        assert_usable(&mut c, "a COPY FROM STDIN").await;
        assert_eq!(pg.query_one("select count(*) from t").unwrap(), "5000");
        let mut copy = c
            .copy_out("COPY (select 1) TO STDOUT; select 2")
            .await
            .unwrap();
        let e = drain(&mut copy).await.unwrap_err();
        assert!(matches!(e, ReplicationError::Config(_)), "{e}");
        assert_usable(&mut c, "a second statement").await;

        // A row over the default 64 MiB message bound.
        let big = 70 << 20;
        let mut copy = c
            .copy_out(&format!("COPY (select repeat('y', {big})) TO STDOUT"))
            .await
            .unwrap();
        let parts = drain(&mut copy).await.unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].len(), big + 1);
        assert_usable(&mut c, "a 70 MiB row").await;

        // Cancelled midway: usable.
        let mut copy = c
            .copy_out("COPY (select g from generate_series(1, 50000000) g) TO STDOUT")
            .await
            .unwrap();
        for _ in 0..10 {
            assert!(copy.next().await.unwrap().is_some());
        }
        copy.cancel().await.unwrap();
        assert_usable(&mut c, "a cancel").await;

        // A stall: cancelled and drained, reported as transient. (The
        // server flushes once its 8 KiB send buffer fills: the first row
        // arrives before the third sleeps.)
        let mut copy = c
            .copy_out(
                "COPY (select g, repeat('z', 10000), pg_sleep(case when g = 3 then 30 else 0 end) \
                 from generate_series(1, 3) g) TO STDOUT",
            )
            .await
            .unwrap();
        copy.set_idle_timeout(Duration::from_millis(500));
        assert!(copy.next().await.unwrap().is_some());
        let e = loop {
            match copy.next().await {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("{major}: the sleeping COPY ended"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(e, ReplicationError::Stalled { .. }) && e.is_transient(),
            "{e}"
        );
        assert_usable(&mut c, "a stall").await;

        // Dropped midway: poisoned, the caller must reconnect.
        let mut copy = c
            .copy_out("COPY (select g from generate_series(1, 1000000) g) TO STDOUT")
            .await
            .unwrap();
        assert!(copy.next().await.unwrap().is_some());
        drop(copy);
        let e = c.simple_query("select 1").await.unwrap_err();
        assert!(matches!(e, ReplicationError::Poisoned(_)), "{e}");
        c.close().await;
    }
}
