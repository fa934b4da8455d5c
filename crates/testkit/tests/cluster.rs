//! The test kit on real servers of each major: clusters start configured as walshadow
//! needs, standbys stream and promote onto a new timeline, pg_waldump output parses.

use walshadow_testkit::{Auth, Cluster, ClusterOptions, Lsn, PgMajor, per_major};

fn basics(major: PgMajor) {
    let pg = Cluster::start(major, ClusterOptions::default()).unwrap();
    assert_eq!(pg.major(), major);
    assert_eq!(pg.query_one("show wal_level").unwrap(), "logical");
    assert_eq!(pg.query_one("show fsync").unwrap(), "off");
    assert_eq!(pg.query_one("show full_page_writes").unwrap(), "on");
    let server_major: u32 = pg
        .query_one("select current_setting('server_version_num')::int / 10000")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(server_major, major.number());

    pg.psql("create table t(id int primary key, v text); insert into t select g, 'v' || g from generate_series(1, 3) g;")
        .unwrap();
    assert_eq!(
        pg.psql("select id, v from t order by id").unwrap(),
        "1|v1\n2|v2\n3|v3"
    );
    assert_eq!(pg.query_one("select count(*) from t").unwrap(), "3");
    assert!(
        pg.query_one("select id from t").is_err(),
        "three rows are not one"
    );
    let err = pg.psql("select 1/0").unwrap_err().to_string();
    assert!(
        err.contains("division by zero") && err.contains("select 1/0"),
        "{err}"
    );

    let before = pg.insert_lsn().unwrap();
    pg.psql("insert into t values (4, 'four')").unwrap();
    assert!(pg.flush_lsn().unwrap() > before);
    assert!(pg.current_lsn().unwrap() > before);
    let switched = pg.switch_wal().unwrap();
    assert!(switched > before);
    pg.checkpoint().unwrap();
    assert!(pg.wal_dir().is_dir());
    assert_eq!(pg.timeline().unwrap(), 1);
    assert!(pg.url("postgres").starts_with(&format!(
        "postgres://postgres@127.0.0.1:{}/postgres?",
        pg.port()
    )));
}

fn standby_promotes_to_timeline_2(major: PgMajor) {
    let primary = Cluster::start(major, ClusterOptions::default()).unwrap();
    primary
        .psql("create table t(id int primary key); insert into t values (1), (2);")
        .unwrap();
    let standby = primary.start_standby().unwrap();
    assert_ne!(standby.port(), primary.port());
    assert!(standby.is_in_recovery().unwrap());
    assert_eq!(standby.timeline().unwrap(), 1);

    primary.psql("insert into t values (3)").unwrap();
    let lsn = primary.flush_lsn().unwrap();
    walshadow_testkit::wait_until(
        std::time::Duration::from_secs(60),
        "the standby to replay the insert",
        || {
            let replayed: Lsn = standby
                .query_one("select pg_last_wal_replay_lsn()")?
                .parse()?;
            Ok(replayed >= lsn)
        },
    )
    .unwrap();
    assert_eq!(standby.query_one("select count(*) from t").unwrap(), "3");

    standby.promote().unwrap();
    assert!(!standby.is_in_recovery().unwrap());
    assert_eq!(standby.timeline().unwrap(), 2);
    standby.psql("insert into t values (4)").unwrap();
    assert_eq!(standby.query_one("select count(*) from t").unwrap(), "4");
    assert_eq!(primary.query_one("select count(*) from t").unwrap(), "3");
}

fn waldump_sees_the_workload(major: PgMajor) {
    let pg = Cluster::start(major, ClusterOptions::default().conf("autovacuum", "off")).unwrap();
    pg.psql("create table t(id int primary key, v text)")
        .unwrap();
    let start = pg.insert_lsn().unwrap();
    pg.psql("insert into t values (1, 'a'); update t set v = 'b' where id = 1; delete from t where id = 1;")
        .unwrap();
    let end = pg.flush_lsn().unwrap();
    let records = pg.waldump(start, Some(end)).unwrap();
    assert!(!records.is_empty());
    assert!(records.iter().all(|r| r.lsn >= start && r.lsn < end));
    let heap: Vec<&str> = records
        .iter()
        .filter(|r| r.rmgr == "Heap")
        .map(|r| r.kind())
        .collect();
    assert!(
        heap.contains(&"INSERT") || heap.contains(&"INSERT+INIT"),
        "{heap:?}"
    );
    assert!(heap.iter().any(|k| k.contains("UPDATE")), "{heap:?}");
    assert!(heap.contains(&"DELETE"), "{heap:?}");
    assert!(
        records
            .iter()
            .any(|r| r.rmgr == "Transaction" && r.kind() == "COMMIT")
    );
    assert!(records.iter().any(|r| r.rmgr == "Btree"));
    let oid: u32 = pg
        .query_one("select pg_relation_filenode('t')")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        records
            .iter()
            .filter(|r| r.rmgr == "Heap")
            .all(|r| r.blocks.iter().any(|b| b.rel == oid && b.fork == "main")),
        "every Heap record touches t"
    );
    // Consecutive records chain through prev.
    for pair in records.windows(2) {
        assert_eq!(pair[1].prev, pair[0].lsn);
    }

    // Without an end, pg_waldump runs into the end of WAL, which is not an error...
    let to_end = pg.waldump(start, None).unwrap();
    assert!(to_end.len() >= records.len());
    // ...but an end beyond the WAL that exists is.
    let beyond = Lsn(end.0 + 64 * 1024 * 1024);
    assert!(pg.waldump(start, Some(beyond)).is_err());
}

fn password_auth(major: PgMajor, auth: Auth) {
    let pg = Cluster::start(major, ClusterOptions::default().auth(auth.clone())).unwrap();
    assert_eq!(pg.password(), auth.password());
    assert_eq!(pg.query_one("select 1").unwrap(), "1");
    let stored = pg
        .query_one("select left(rolpassword, 3) from pg_authid where rolname = current_user")
        .unwrap();
    match auth {
        Auth::Md5 { .. } => assert_eq!(stored, "md5"),
        Auth::Scram { .. } => assert_eq!(stored, "SCR"),
        Auth::Trust => unreachable!(),
    }
    // A wrong password is refused over TCP.
    let out = pg
        .pg_command("psql")
        .args(["-X", "-At", "-c", "select 1", "-d"])
        .arg(format!(
            "postgres://postgres:wrong@127.0.0.1:{}/postgres?sslmode=disable",
            pg.port()
        ))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("password authentication failed"));
    // The right one is accepted over TCP and the socket.
    for url in [pg.url("postgres"), pg.socket_url("postgres")] {
        let out = pg
            .pg_command("psql")
            .args(["-X", "-At", "-c", "select 7", "-d", &url])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "7",
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

per_major!(basics => basics: pg15, pg16, pg17, pg18);
per_major!(standby_promotes_to_timeline_2 => standby_promotes_to_timeline_2: pg15, pg16, pg17, pg18);
per_major!(waldump_sees_the_workload => waldump: pg15, pg16, pg17, pg18);
per_major!(|m| password_auth(m, Auth::md5("md5 pw/with:odd@chars")) => md5: pg15, pg16, pg17, pg18);
per_major!(|m| password_auth(m, Auth::scram("scram pw/with:odd@chars")) => scram: pg15, pg16, pg17, pg18);

#[test]
fn pg15_tls_and_small_segments() {
    let pg = Cluster::start(
        PgMajor::V15,
        ClusterOptions::default()
            .ssl(true)
            .wal_segment_size_mb(1)
            .conf("wal_compression", "lz4"),
    )
    .unwrap();
    assert_eq!(pg.query_one("show ssl").unwrap(), "on");
    assert_eq!(pg.query_one("show wal_segment_size").unwrap(), "1MB");
    assert_eq!(pg.wal_segment_size(), 1024 * 1024);
    assert_eq!(pg.query_one("show wal_compression").unwrap(), "lz4");
    let cert = pg.ssl_root_cert().unwrap();
    assert!(cert.is_file());
    let url = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert={}",
        pg.port(),
        cert.display()
    );
    let out = pg
        .pg_command("psql")
        .args([
            "-X",
            "-At",
            "-c",
            "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
            "-d",
            &url,
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "t",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pg18_tls_is_refused_clearly() {
    let err = Cluster::start(PgMajor::V18, ClusterOptions::default().ssl(true))
        .unwrap_err()
        .to_string();
    assert!(err.contains("without OpenSSL"), "{err}");
}
