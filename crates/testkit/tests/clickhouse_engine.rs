//! The ClickHouse engine (`scripts/clickhouse-engine`: chdb behind ClickHouse's HTTP
//! interface) answers as a ClickHouse server does for what walshadow sends: text and binary
//! inserts, the `database` and settings parameters, error statuses and codes, credentials,
//! restarts on the same data, ReplacingMergeTree FINAL and insert deduplication tokens.

use walshadow_testkit::{ClickHouseEngine, ClickHouseOptions, HttpReply};

fn engine() -> ClickHouseEngine {
    ClickHouseEngine::start().unwrap()
}

/// The error reply ClickHouse gives for `code`: its status, header and message prefix.
fn assert_error(reply: &HttpReply, status: u16, code: u32) {
    assert_eq!(reply.status, status, "{}", reply.text());
    assert_eq!(reply.exception_code, Some(code), "{}", reply.text());
    let text = reply.text();
    assert!(
        text.starts_with(&format!("Code: {code}. DB::Exception: ")),
        "{text}"
    );
}

/// ClickHouse's RowBinary String: LEB128 length, then the bytes.
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(s);
}

fn count(ch: &ClickHouseEngine, table: &str) -> u64 {
    ch.query(&format!("SELECT count() FROM {table}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn ping_version_and_headers() {
    let ch = engine();
    assert!(ch.url().ends_with(&format!(":{}", ch.port())));
    for path in ["/", "/ping"] {
        let reply = ch.send_to(path, "GET", &[], &[], &[]).unwrap();
        assert_eq!((reply.status, reply.text().as_str()), (200, "Ok.\n"));
    }
    let unknown = ch.send_to("/nope", "GET", &[], &[], &[]).unwrap();
    assert_eq!(unknown.status, 404);

    assert!(
        ch.query("SELECT version()").unwrap().starts_with("26.9."),
        "chdb-core 26.9 is ClickHouse 26.9"
    );
    // TabSeparated by default, with its escaping.
    assert_eq!(
        ch.query("SELECT 1, 'a\tb', NULL").unwrap(),
        "1\ta\\tb\t\\N\n"
    );
    let reply = ch
        .post(
            &[("query_id", "walshadow-q1")],
            b"SELECT 1 FORMAT JSONEachRow",
        )
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(reply.header("X-ClickHouse-Query-Id"), Some("walshadow-q1"));
    assert_eq!(reply.header("X-ClickHouse-Format"), Some("JSONEachRow"));
    let summary: serde_json::Value =
        serde_json::from_str(reply.header("X-ClickHouse-Summary").unwrap()).unwrap();
    assert_eq!(summary["read_rows"], "1");
    assert_eq!(reply.text(), "{\"1\":1}\n");
    // The query parameter and the body join with a newline, as in ClickHouse.
    let joined = ch
        .post(&[("query", "SELECT 40 +")], b"2")
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(joined.text(), "42\n");
}

#[test]
fn text_formats_and_database_parameter() {
    let ch = engine();
    ch.query("CREATE DATABASE shop").unwrap();
    let db = [("database", "shop")];
    ch.post(
        &db,
        b"CREATE TABLE items (id UInt32, name String, qty Nullable(Int64)) \
          ENGINE = MergeTree ORDER BY id",
    )
    .unwrap()
    .ok()
    .unwrap();

    let tsv = ch
        .post(
            &[
                ("database", "shop"),
                (
                    "query",
                    "INSERT INTO items (id, name, qty) FORMAT TabSeparated",
                ),
            ],
            b"1\tone\t\\N\n2\ttab\\there\t-5\n",
        )
        .unwrap()
        .ok()
        .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(tsv.header("X-ClickHouse-Summary").unwrap()).unwrap();
    assert_eq!(summary["written_rows"], "2");
    ch.insert(
        "INSERT INTO shop.items FORMAT JSONEachRow",
        b"{\"id\":3,\"name\":\"three\",\"qty\":7}\n{\"id\":4,\"name\":\"\\u00e9\",\"qty\":null}\n",
    )
    .unwrap();
    // The statement and its data in the body alone.
    ch.post(&[], b"INSERT INTO shop.items FORMAT TSV\n5\tfive\t5\n")
        .unwrap()
        .ok()
        .unwrap();

    let select = |params: &[(&str, &str)]| ch.get(params).unwrap().ok().unwrap().text();
    assert_eq!(
        select(&[
            ("database", "shop"),
            ("query", "SELECT id, name, qty FROM items ORDER BY id")
        ]),
        "1\tone\t\\N\n2\ttab\\there\t-5\n3\tthree\t7\n4\té\t\\N\n5\tfive\t5\n"
    );
    let json = select(&[
        ("database", "shop"),
        ("default_format", "JSONEachRow"),
        (
            "query",
            "SELECT id, name FROM items WHERE id IN (2, 4) ORDER BY id",
        ),
    ]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{json}");
    assert_eq!(rows[0]["name"], "tab\there");
    assert_eq!(rows[1]["name"], "é");

    // Without the parameter the default database is `default`.
    let unqualified = ch.post(&[], b"SELECT count() FROM items").unwrap();
    assert_error(&unqualified, 404, 60);
    let missing_db = ch
        .get(&[("database", "nowhere"), ("query", "SELECT 1")])
        .unwrap();
    assert_error(&missing_db, 404, 81);
}

#[test]
fn row_binary_insert_is_binary_safe() {
    let ch = engine();
    ch.query(
        "CREATE TABLE bin (id UInt32, s String, f FixedString(3)) ENGINE = MergeTree ORDER BY id",
    )
    .unwrap();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let rows: [(u32, &[u8], &[u8; 3]); 5] = [
        (0, &all_bytes, b"\0\0\0"),
        (1, b"", b"a\0b"),
        (2, b"\0", b"\xff\xfe\xfd"),
        (3, b"\r\n\t\\'\"\x1b", b"\n\n\n"),
        (4, b"\xc3\x28 not UTF-8 \x80\x80\0\0", b"\t\\\0"),
    ];
    let mut data = Vec::new();
    for (id, s, f) in rows {
        data.extend_from_slice(&id.to_le_bytes());
        put_string(&mut data, s);
        data.extend_from_slice(f);
    }
    let reply = ch
        .insert("INSERT INTO bin (id, s, f) FORMAT RowBinary", &data)
        .unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(reply.header("X-ClickHouse-Summary").unwrap()).unwrap();
    assert_eq!(summary["written_rows"], "5");

    // Byte for byte back, in the same format.
    let back = ch
        .post(
            &[],
            b"SELECT id, s, f FROM bin ORDER BY id FORMAT RowBinary",
        )
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(back.body, data);
    let hex: String = all_bytes.iter().map(|b| format!("{b:02X}")).collect();
    assert_eq!(
        ch.query("SELECT hex(s), length(s), hex(f) FROM bin WHERE id = 0")
            .unwrap(),
        format!("{hex}\t256\t000000\n")
    );

    // The same bytes after the statement in a body-only request.
    let mut body = b"INSERT INTO bin (id, s, f) FORMAT RowBinary\n".to_vec();
    body.extend_from_slice(&10u32.to_le_bytes());
    put_string(&mut body, &all_bytes);
    body.extend_from_slice(b"\n\0\n");
    ch.post(&[], &body).unwrap().ok().unwrap();
    assert_eq!(
        ch.query("SELECT s = (SELECT s FROM bin WHERE id = 0), hex(f) FROM bin WHERE id = 10")
            .unwrap(),
        "1\t0A000A\n"
    );

    // A truncated row is refused whole.
    let truncated = &data[..data.len() - 2];
    let reply = ch
        .post(
            &[("query", "INSERT INTO bin (id, s, f) FORMAT RowBinary")],
            truncated,
        )
        .unwrap();
    assert_error(&reply, 500, 33); // CANNOT_READ_ALL_DATA
    assert_eq!(count(&ch, "bin"), 6);
}

/// Rows that parse but that the engine refuses while writing its part (a
/// row laid out for another shape: here a flag byte of 5 where
/// ReplacingMergeTree's `is_deleted` takes 0 or 1) fail the insert with the
/// engine's code, as a real server answers; chdb's streaming insert alone
/// would report them written.
#[test]
fn malformed_row_binary_insert_fails_with_the_engines_code() {
    let ch = engine();
    ch.query(
        "CREATE TABLE r (id Int32, v Int32, _lsn UInt64, _is_deleted UInt8) \
         ENGINE = ReplacingMergeTree(_lsn, _is_deleted) ORDER BY id",
    )
    .unwrap();
    let rows = |flag: u8| {
        let mut data = Vec::new();
        for i in 0..3i32 {
            data.extend_from_slice(&i.to_le_bytes());
            data.extend_from_slice(&(i * 3).to_le_bytes());
            data.extend_from_slice(&(1000 + i as u64).to_le_bytes());
            data.push(flag);
        }
        data
    };
    let stmt = "INSERT INTO r (id, v, _lsn, _is_deleted) FORMAT RowBinary";
    let reply = ch.post(&[("query", stmt)], &rows(5)).unwrap();
    assert_error(&reply, 400, 117); // INCORRECT_DATA
    assert!(reply.text().contains("is_deleted"), "{}", reply.text());
    assert_eq!(count(&ch, "r"), 0);
    // The next insert is judged on its own.
    let reply = ch.post(&[("query", stmt)], &rows(0)).unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(count(&ch, "r"), 3);
}

#[test]
fn errors_carry_status_and_code() {
    let ch = engine();
    assert_error(&ch.post(&[], b"SELECT * FROM missing").unwrap(), 404, 60);
    assert_error(
        &ch.post(&[], b"SELECT * FROM nodb.missing").unwrap(),
        404,
        81,
    );
    assert_error(&ch.post(&[], b"SELEC 1").unwrap(), 400, 62);
    assert_error(&ch.post(&[], b"SELECT 1; SELECT 2").unwrap(), 400, 62);
    assert_error(&ch.post(&[], b"").unwrap(), 400, 62);
    assert_error(
        &ch.post(
            &[("query", "INSERT INTO missing FORMAT RowBinary")],
            b"\x01",
        )
        .unwrap(),
        404,
        60,
    );
    // GET is read-only, as ClickHouse makes it (readonly=2).
    ch.query("CREATE TABLE t (a UInt8) ENGINE = MergeTree ORDER BY a")
        .unwrap();
    assert_error(
        &ch.get(&[("query", "INSERT INTO t VALUES (1)")]).unwrap(),
        500,
        164,
    );
    assert_eq!(count(&ch, "t"), 0);
    // query() turns error replies into errors that name the code.
    let err = format!("{:#}", ch.query("SELECT * FROM missing").unwrap_err());
    assert!(err.contains("HTTP 404") && err.contains("code 60"), "{err}");
    // The connection serves on after errors.
    assert_eq!(ch.query("SELECT 2").unwrap(), "2\n");
}

#[test]
fn settings_and_query_parameters_apply_to_one_request() {
    let ch = engine();
    let setting = |extra: &[(&str, &str)]| {
        let mut params = vec![("query", "SELECT getSetting('max_execution_time')")];
        params.extend_from_slice(extra);
        ch.get(&params).unwrap().ok().unwrap().text()
    };
    assert_eq!(
        setting(&[("max_execution_time", "7"), ("wait_end_of_query", "1")]),
        "7\n"
    );
    assert_eq!(setting(&[]), "0\n");
    assert_error(
        &ch.get(&[("query", "SELECT 1"), ("no_such_setting", "1")])
            .unwrap(),
        404,
        115,
    );
    let params = ch
        .get(&[
            ("query", "SELECT {x:UInt32} + 1, {s:String}"),
            ("param_x", "41"),
            ("param_s", "it's"),
        ])
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(params.text(), "42\tit\\'s\n");
}

#[test]
fn wrong_credentials_are_refused() {
    let ch = ClickHouseEngine::start_with(
        ClickHouseOptions::default().credentials("walshadow", "s3cret"),
    )
    .unwrap();
    assert_eq!(ch.credentials(), Some(("walshadow", "s3cret")));
    assert_eq!(ch.query("SELECT 1").unwrap(), "1\n");
    let q = [("query", "SELECT 1")];
    let as_headers = |user: &str, key: &str| {
        ch.send(
            "GET",
            &q,
            &[("X-ClickHouse-User", user), ("X-ClickHouse-Key", key)],
            &[],
        )
        .unwrap()
    };
    assert_eq!(as_headers("walshadow", "s3cret").status, 200);
    // ClickHouse answers AUTHENTICATION_FAILED (516) with 403 Forbidden.
    assert_error(&as_headers("walshadow", "wrong"), 403, 516);
    assert_error(&as_headers("default", ""), 403, 516);
    assert_error(&ch.send("GET", &q, &[], &[]).unwrap(), 403, 516);
    let basic = |token: &str| {
        ch.send("POST", &[], &[("Authorization", token)], b"SELECT 3")
            .unwrap()
    };
    assert_eq!(basic("Basic d2Fsc2hhZG93OnMzY3JldA==").text(), "3\n");
    assert_error(&basic("Basic d2Fsc2hhZG93Ondyb25n"), 403, 516);
    let by_params = ch
        .send(
            "GET",
            &[
                ("query", "SELECT 4"),
                ("user", "walshadow"),
                ("password", "s3cret"),
            ],
            &[],
            &[],
        )
        .unwrap();
    assert_eq!(by_params.text(), "4\n");
    // Health checks need no credentials.
    assert_eq!(
        ch.send_to("/ping", "GET", &[], &[], &[]).unwrap().status,
        200
    );
}

#[test]
fn restart_keeps_data() {
    let mut ch = engine();
    ch.query("CREATE TABLE kept (id UInt64, v String) ENGINE = MergeTree ORDER BY id")
        .unwrap();
    ch.insert("INSERT INTO kept FORMAT TSV", b"1\tone\n2\ttwo\n")
        .unwrap();
    let port = ch.port();

    ch.stop().unwrap();
    assert!(!ch.is_running());
    assert!(
        ch.send_to("/ping", "GET", &[], &[], &[]).is_err(),
        "a stopped engine does not answer"
    );
    ch.start_again().unwrap();
    assert_eq!(ch.port(), port);
    assert_eq!(
        ch.query("SELECT id, v FROM kept ORDER BY id").unwrap(),
        "1\tone\n2\ttwo\n"
    );

    // A crash keeps what was accepted, too.
    ch.insert("INSERT INTO kept FORMAT TSV", b"3\tthree\n")
        .unwrap();
    ch.crash().unwrap();
    ch.start_again().unwrap();
    assert_eq!(count(&ch, "kept"), 3);
    assert!(
        ch.log_tail(200).contains("received SIGTERM"),
        "{}",
        ch.log_tail(20)
    );
}

#[test]
fn replacing_merge_tree_final_drops_deleted_rows() {
    let ch = engine();
    ch.query(
        "CREATE TABLE r (id Int64, v String, _lsn UInt64, _seq UInt32, _is_deleted UInt8, \
         _version UInt128 MATERIALIZED bitShiftLeft(toUInt128(_lsn), 32) + _seq) \
         ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY id",
    )
    .unwrap();
    let batch = |rows: &[(i64, &str, u64, u32, u8)]| {
        let mut data = Vec::new();
        for (id, v, lsn, seq, deleted) in rows {
            data.extend_from_slice(&id.to_le_bytes());
            put_string(&mut data, v.as_bytes());
            data.extend_from_slice(&lsn.to_le_bytes());
            data.extend_from_slice(&seq.to_le_bytes());
            data.push(*deleted);
        }
        ch.insert(
            "INSERT INTO r (id, v, _lsn, _seq, _is_deleted) FORMAT RowBinary",
            &data,
        )
        .unwrap();
    };
    batch(&[
        (1, "a", 100, 0, 0),
        (2, "b", 100, 1, 0),
        (3, "c", 100, 2, 0),
    ]);
    batch(&[(1, "a2", 200, 0, 0), (2, "b", 200, 1, 1)]);
    // A replayed older change loses to what is there, whatever order it arrives in.
    batch(&[
        (3, "stale", 50, 0, 0),
        (1, "a1", 199, 5, 0),
        (1, "a3", 150, 9, 0),
    ]);

    assert_eq!(
        ch.query("SELECT id, v, _version FROM r FINAL ORDER BY id")
            .unwrap(),
        format!("1\ta2\t{}\n3\tc\t{}\n", 200u128 << 32, (100u128 << 32) + 2)
    );
    // The materialized column stays out of SELECT *.
    assert_eq!(
        ch.query("SELECT * FROM r FINAL WHERE id = 3").unwrap(),
        "3\tc\t100\t2\t0\n"
    );
    ch.query("OPTIMIZE TABLE r FINAL").unwrap();
    assert_eq!(
        ch.query("SELECT id, v FROM r FINAL ORDER BY id").unwrap(),
        "1\ta2\n3\tc\n"
    );
}

#[test]
fn insert_deduplication_token_dedups_with_a_window() {
    let ch = engine();
    ch.query(
        "CREATE TABLE dd (id UInt32, s String) ENGINE = MergeTree ORDER BY id \
         SETTINGS non_replicated_deduplication_window = 100",
    )
    .unwrap();
    ch.query("CREATE TABLE nowin (id UInt32, s String) ENGINE = MergeTree ORDER BY id")
        .unwrap();
    let insert = |table: &str, token: &str, data: &[u8]| {
        let q = format!("INSERT INTO {table} (id, s) FORMAT TabSeparated");
        ch.post(
            &[
                ("query", q.as_str()),
                ("insert_deduplication_token", token),
                ("async_insert", "0"),
            ],
            data,
        )
        .unwrap()
        .ok()
        .unwrap();
    };
    insert("dd", "batch-1", b"1\ta\n2\tb\n");
    insert("dd", "batch-1", b"1\ta\n2\tb\n");
    assert_eq!(count(&ch, "dd"), 2, "a repeated token is dropped");
    insert("dd", "batch-1", b"3\tc\n");
    assert_eq!(
        count(&ch, "dd"),
        2,
        "the token, not the data, names the block"
    );
    insert("dd", "batch-2", b"1\ta\n2\tb\n");
    assert_eq!(
        count(&ch, "dd"),
        4,
        "a new token inserts the same data again"
    );

    insert("nowin", "batch-1", b"1\ta\n");
    insert("nowin", "batch-1", b"1\ta\n");
    assert_eq!(
        count(&ch, "nowin"),
        2,
        "without a deduplication window MergeTree keeps both"
    );
}
