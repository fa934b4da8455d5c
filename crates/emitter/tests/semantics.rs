//! The destination's behaviour against the ClickHouse engine: versions and
//! deletes under `FINAL`, deduplicated retries, the transient/definite
//! error split, retries across an engine restart, and schema changes.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use walshadow_emitter::{
    BatchConfig, ClickHouseClient, ClickHouseError, DestTable, FlushError, InsertSettings,
    MetaColumns, RetryPolicy, RowBinaryEncoder, RowMeta, SchemaChange, SchemaDiff, SchemaError,
    SealedBatch, TableBatch, TableSettings, create_database_sql,
};
use walshadow_rows::Value;
use walshadow_testkit::{ClickHouseEngine, ClickHouseOptions};
use walshadow_types::Lsn;
use walshadow_types::catalog::RelationDesc;

const INT4: u32 = 23;
const INT8: u32 = 20;
const TEXT: u32 = 25;
const FLOAT8: u32 = 701;

fn kv() -> RelationDesc {
    relation(
        "kv",
        vec![attr(1, "id", INT4, -1, true), attr(2, "v", TEXT, -1, false)],
        &["id"],
        vec![],
    )
}

fn meta(lsn: u64, seq: u64, deleted: bool) -> RowMeta {
    RowMeta {
        lsn: Lsn(lsn),
        seq: Lsn(seq),
        xid: 1000,
        commit_time: pg_ts(2024, 5, 6, 7, 8, 9, 0),
        deleted,
    }
}

/// Engine, client and an empty `kv` table in database `db`.
async fn setup(db: &str) -> (ClickHouseEngine, ClickHouseClient, DestTable) {
    let engine = ClickHouseEngine::start().expect("engine");
    let client = client(&engine, db);
    client.ensure_database().await.unwrap();
    let dest = DestTable::new(&kv(), &MetaColumns::default()).unwrap();
    let ddl = dest.create_table_sql(db, "kv", &TableSettings::default());
    client.execute(&ddl).await.unwrap();
    // Idempotent: IF NOT EXISTS.
    client.execute(&ddl).await.unwrap();
    client
        .execute(&create_database_sql(db, walshadow_emitter::OnCluster(None)))
        .await
        .unwrap();
    (engine, client, dest)
}

fn batch_of(dest: &DestTable, rows: &[(i32, Option<&str>, RowMeta)]) -> SealedBatch {
    let mut b = TableBatch::new("kv", RowBinaryEncoder::new(dest), BatchConfig::default());
    for (id, v, m) in rows {
        let v = v.map_or(Value::Null, |s| Value::Text(s.into()));
        b.push(&[Value::Int32(*id), v], m).unwrap();
    }
    b.seal().unwrap()
}

async fn flush(client: &ClickHouseClient, batch: &SealedBatch) {
    let attempts = batch
        .insert(client, &batch.range_token(), &RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(attempts, 1);
}

async fn final_rows(client: &ClickHouseClient, db: &str) -> String {
    client
        .query(&format!("SELECT id, v FROM {db}.kv FINAL ORDER BY id"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_keeps_the_latest_version_and_hides_deletes() {
    let (_engine, client, dest) = setup("rmt").await;
    flush(
        &client,
        &batch_of(
            &dest,
            &[
                (1, Some("a"), meta(100, 90, false)),
                (2, Some("x"), meta(100, 91, false)),
            ],
        ),
    )
    .await;
    // Two changes of one key in one transaction: the later record wins.
    flush(
        &client,
        &batch_of(
            &dest,
            &[
                (1, Some("b"), meta(200, 150, false)),
                (1, Some("c"), meta(200, 160, false)),
            ],
        ),
    )
    .await;
    // An older commit arriving late (a replayed overlap) loses, whatever its seq.
    flush(
        &client,
        &batch_of(&dest, &[(1, Some("old"), meta(150, 999, false))]),
    )
    .await;
    assert_eq!(final_rows(&client, "rmt").await, "1\tc\n2\tx\n");

    // A delete carries the key only; FINAL drops the key.
    flush(
        &client,
        &batch_of(&dest, &[(2, None, meta(300, 290, true))]),
    )
    .await;
    assert_eq!(final_rows(&client, "rmt").await, "1\tc\n");
    let deleted = client
        .query("SELECT id, v, _is_deleted FROM rmt.kv WHERE _lsn = 300")
        .await
        .unwrap();
    assert_eq!(
        deleted, "2\t\\N\t1\n",
        "non-key columns of a delete are defaults"
    );

    // Inserted again later: back.
    flush(
        &client,
        &batch_of(&dest, &[(2, Some("y"), meta(400, 390, false))]),
    )
    .await;
    assert_eq!(final_rows(&client, "rmt").await, "1\tc\n2\ty\n");

    // Merges agree with FINAL.
    client.execute("OPTIMIZE TABLE rmt.kv FINAL").await.unwrap();
    let merged = client
        .query("SELECT id, v FROM rmt.kv WHERE _is_deleted = 0 ORDER BY id")
        .await
        .unwrap();
    assert_eq!(merged, "1\tc\n2\ty\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_insert_with_the_same_token_is_a_no_op() {
    let (_engine, client, dest) = setup("dedup").await;
    let batch = batch_of(
        &dest,
        &[
            (1, Some("a"), meta(100, 90, false)),
            (2, Some("b"), meta(100, 91, false)),
        ],
    );
    let count = || async {
        client
            .query("SELECT count() FROM dedup.kv")
            .await
            .unwrap()
            .trim()
            .to_string()
    };
    flush(&client, &batch).await;
    assert_eq!(count().await, "2");
    // The same batch again (a retry after an unknown outcome): dropped.
    flush(&client, &batch).await;
    assert_eq!(count().await, "2");
    // The same rows under another token are written again (a replay with
    // other batch boundaries); versions collapse them under FINAL.
    batch
        .insert(&client, "another-token", &RetryPolicy::default())
        .await
        .unwrap();
    assert_eq!(count().await, "4");
    assert_eq!(final_rows(&client, "dedup").await, "1\ta\n2\tb\n");
}

fn expect_environment(err: &FlushError, code: u32) {
    assert!(
        matches!(err, FlushError::GaveUp { attempts: 2, .. }),
        "{err}"
    );
    assert_eq!(
        err.clickhouse_error().class(),
        walshadow_emitter::ErrorClass::Environment,
        "{err}"
    );
    assert_eq!(err.clickhouse_error().exception_code(), Some(code), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_errors_are_retried_definite_ones_are_not() {
    let (_engine, client, dest) = setup("errs").await;
    // A table or column gone from the destination is the destination's
    // state, fixed there: retried, never taken for bad rows.
    let quick = RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(10),
        max_attempts: 2,
        max_elapsed: Duration::from_secs(60),
    };
    // Unknown table: UNKNOWN_TABLE (60).
    let mut batch = batch_of(&dest, &[(1, Some("a"), meta(100, 90, false))]);
    batch.table = "missing".into();
    expect_environment(&batch.insert(&client, "t1", &quick).await.unwrap_err(), 60);

    // Unknown column: NO_SUCH_COLUMN_IN_TABLE (16).
    let mut batch = batch_of(&dest, &[(1, Some("a"), meta(100, 90, false))]);
    batch.columns[1] = "nope".into();
    expect_environment(&batch.insert(&client, "t2", &quick).await.unwrap_err(), 16);

    let policy = RetryPolicy {
        initial_backoff: Duration::from_secs(5),
        ..RetryPolicy::default()
    };
    let started = Instant::now();

    // Truncated RowBinary: the server cannot read the row.
    let mut batch = batch_of(&dest, &[(1, Some("a"), meta(100, 90, false))]);
    batch.body = batch.body.slice(..batch.body.len() - 3);
    let err = batch.insert(&client, "t3", &policy).await.unwrap_err();
    assert!(matches!(err, FlushError::Definite { .. }), "{err}");
    assert!(err.clickhouse_error().exception_code().is_some(), "{err}");

    // No retry happened: a single backoff would have taken 5 s.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        client.query("SELECT count() FROM errs.kv").await.unwrap(),
        "0\n"
    );

    // Statements: a syntax error is definite with its code.
    let err = client.execute("CREATE TABLE (").await.unwrap_err();
    assert!(err.is_definite());
    assert_eq!(err.exception_code(), Some(62), "{err}");
    assert!(
        matches!(err, ClickHouseError::Server { status: 400, .. }),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_pause_rather_than_stop() {
    let engine = ClickHouseEngine::start_with(
        ClickHouseOptions::default().credentials("walshadow", "s3cret"),
    )
    .expect("engine");
    let good = client(&engine, "auth");
    good.ensure_database().await.unwrap();
    let mut config = good.config().clone();
    config.password = "wrong".into();
    let bad = ClickHouseClient::new(config).unwrap();
    let err = bad.query("SELECT 1").await.unwrap_err();
    assert_eq!(
        err.class(),
        walshadow_emitter::ErrorClass::Environment,
        "{err}"
    );
    assert_eq!(err.exception_code(), Some(516), "{err}");
    assert!(!err.to_string().contains("s3cret") && !err.to_string().contains("wrong"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_engine_is_transient_and_retries_reach_it_again() {
    let (mut engine, client, dest) = setup("down").await;
    let batch = batch_of(&dest, &[(1, Some("a"), meta(100, 90, false))]);
    engine.stop().unwrap();

    let err = client.query("SELECT 1").await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(matches!(err, ClickHouseError::Connection { .. }), "{err}");

    // The policy's cap ends the retries.
    let quick = RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
        max_attempts: 3,
        max_elapsed: Duration::from_secs(60),
    };
    match batch.insert(&client, "tok", &quick).await {
        Err(FlushError::GaveUp {
            attempts, source, ..
        }) => {
            assert_eq!(attempts, 3);
            assert!(source.is_transient());
        }
        other => panic!("expected GaveUp, got {other:?}"),
    }

    // Retrying while the engine comes back: the flush lands once.
    let patient = RetryPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(500),
        max_attempts: 1000,
        max_elapsed: Duration::from_secs(300),
    };
    let flush = {
        let client = client.clone();
        let batch = batch.clone();
        let patient = patient.clone();
        tokio::spawn(async move { batch.insert(&client, "tok", &patient).await })
    };
    // Let at least one attempt fail before the engine is back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let engine = tokio::task::spawn_blocking(move || {
        engine.start_again().unwrap();
        engine
    })
    .await
    .unwrap();
    let attempts = flush.await.unwrap().unwrap();
    assert!(attempts > 1, "attempts {attempts}");
    assert_eq!(
        client.query("SELECT id, v FROM down.kv").await.unwrap(),
        "1\ta\n"
    );
    // And the same token again is still a no-op after the restart.
    batch.insert(&client, "tok", &patient).await.unwrap();
    assert_eq!(
        client.query("SELECT count() FROM down.kv").await.unwrap(),
        "1\n"
    );
    drop(engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_changes_follow_in_place() {
    let engine = ClickHouseEngine::start().expect("engine");
    let client = client(&engine, "ddl");
    client.ensure_database().await.unwrap();
    let v1 = relation(
        "t",
        vec![
            attr(1, "id", INT4, -1, true),
            attr(2, "a", TEXT, -1, false),
            attr(3, "b", INT8, -1, true),
            attr(4, "c", INT8, -1, false),
        ],
        &["id"],
        vec![],
    );
    let meta_cols = MetaColumns::default();
    let old = DestTable::new(&v1, &meta_cols).unwrap();
    client
        .execute(&old.create_table_sql("ddl", "t", &TableSettings::default()))
        .await
        .unwrap();
    let mut rows = Vec::new();
    let enc = RowBinaryEncoder::new(&old);
    enc.encode_row(
        &mut rows,
        &[
            Value::Int32(1),
            Value::Text("x".into()),
            Value::Int64(10),
            Value::Int64(100),
        ],
        &meta(100, 90, false),
    )
    .unwrap();
    // A delete row: non-key columns are NULL (c) or zero (b) — the NULL in
    // `c` is what SET NOT NULL must get past.
    enc.encode_row(
        &mut rows,
        &[Value::Int32(2), Value::Null, Value::Null, Value::Null],
        &meta(110, 95, true),
    )
    .unwrap();
    client
        .insert(
            "t",
            &enc.columns(),
            Bytes::from(rows),
            2,
            &InsertSettings::default(),
        )
        .await
        .unwrap();

    // v2: drop a, rename b to b2 and drop its NOT NULL, SET NOT NULL on c,
    // add d int4 NOT NULL DEFAULT 7 and e text.
    let mut v2 = v1.clone();
    v2.attributes[1].dropped = true;
    v2.attributes[1].name = "........pg.dropped.2........".into();
    v2.attributes[2].name = "b2".into();
    v2.attributes[2].not_null = false;
    v2.attributes[3].not_null = true;
    let mut d = attr(5, "d", INT4, -1, true);
    d.missing_value = Some("7".into());
    v2.attributes.push(d);
    v2.attributes.push(attr(6, "e", TEXT, -1, false));
    let new = DestTable::new(&v2, &meta_cols).unwrap();
    let diff = SchemaDiff::between(&old, &new).unwrap();
    assert_eq!(diff.changes.len(), 6, "{:?}", diff.changes);
    assert!(matches!(diff.changes[0], SchemaChange::DropColumn { .. }));
    let statements = diff
        .ddl("ddl", "t", walshadow_emitter::OnCluster(None), |c| {
            (c.name == "d").then_some(Value::Int32(7))
        })
        .unwrap();
    for sql in &statements {
        client
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let described = client
        .query(
            "SELECT name, type FROM system.columns WHERE database = 'ddl' AND table = 't' \
             AND name NOT LIKE '\\_%' ORDER BY position FORMAT TSVRaw",
        )
        .await
        .unwrap();
    let want: Vec<String> = new
        .columns
        .iter()
        .map(|c| format!("{}\t{}", c.name, c.ch_type))
        .collect();
    assert_eq!(described.lines().collect::<Vec<_>>(), want);

    // Rows from before the change read back with PostgreSQL's view of them.
    let enc2 = RowBinaryEncoder::new(&new);
    let mut rows = Vec::new();
    enc2.encode_row(
        &mut rows,
        &[
            Value::Int32(3),
            Value::Null,
            Value::Null,
            Value::Int64(300),
            Value::Int32(8),
            Value::Text("e".into()),
        ],
        &meta(200, 190, false),
    )
    .unwrap();
    client
        .insert(
            "t",
            &enc2.columns(),
            Bytes::from(rows),
            1,
            &InsertSettings::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        client
            .query("SELECT id, b2, c, d, e FROM ddl.t FINAL ORDER BY id")
            .await
            .unwrap(),
        "1\t10\t100\t7\t\\N\n3\t\\N\t300\t8\te\n"
    );

    // Two columns swapping names: each goes through a temporary name.
    let mut v3 = v2.clone();
    v3.attributes[3].name = "d".into();
    v3.attributes[4].name = "c".into();
    let swapped = DestTable::new(&v3, &meta_cols).unwrap();
    let statements = SchemaDiff::between(&new, &swapped)
        .unwrap()
        .ddl("ddl", "t", walshadow_emitter::OnCluster(None), |_| None)
        .unwrap();
    for sql in &statements {
        client
            .execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert_eq!(
        client
            .query("SELECT id, c, d FROM ddl.t FINAL ORDER BY id")
            .await
            .unwrap(),
        "1\t7\t100\n3\t8\t300\n"
    );

    // What cannot follow in place is refused with the remedy: int8 to
    // float8 is no widening (not every int8 is a float8).
    let mut retyped = v2.clone();
    retyped.attributes[3].type_oid = FLOAT8;
    let err =
        SchemaDiff::between(&new, &DestTable::new(&retyped, &meta_cols).unwrap()).unwrap_err();
    assert!(matches!(err, SchemaError::TypeChange { .. }), "{err}");
    let mut key_renamed = v2.clone();
    key_renamed.attributes[0].name = "ident".into();
    key_renamed.replica_identity = vec!["ident".into()];
    let err =
        SchemaDiff::between(&new, &DestTable::new(&key_renamed, &meta_cols).unwrap()).unwrap_err();
    assert!(matches!(err, SchemaError::KeyChange { .. }), "{err}");
    // ... which is also what ClickHouse itself says about renaming the key.
    let err = client
        .execute("ALTER TABLE ddl.t RENAME COLUMN id TO ident")
        .await
        .unwrap_err();
    assert!(!err.is_transient(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_identity_keys_on_nullable_columns() {
    let engine = ClickHouseEngine::start().expect("engine");
    let client = client(&engine, "full");
    client.ensure_database().await.unwrap();
    let mut desc = relation(
        "f",
        vec![attr(1, "a", INT4, -1, false), attr(2, "b", TEXT, -1, false)],
        &[],
        vec![],
    );
    desc.replica_identity_kind = "f".into();
    let dest = DestTable::new(&desc, &MetaColumns::default()).unwrap();
    let ddl = dest.create_table_sql("full", "f", &TableSettings::default());
    assert!(ddl.contains("allow_nullable_key = 1"), "{ddl}");
    client.execute(&ddl).await.unwrap();
    let enc = RowBinaryEncoder::new(&dest);
    let mut rows = Vec::new();
    enc.encode_row(
        &mut rows,
        &[Value::Int32(1), Value::Null],
        &meta(100, 90, false),
    )
    .unwrap();
    enc.encode_row(
        &mut rows,
        &[Value::Null, Value::Text("x".into())],
        &meta(100, 91, false),
    )
    .unwrap();
    // The update of (1, NULL) under FULL: delete the old image, insert the new.
    enc.encode_row(
        &mut rows,
        &[Value::Int32(1), Value::Null],
        &meta(200, 150, true),
    )
    .unwrap();
    enc.encode_row(
        &mut rows,
        &[Value::Int32(1), Value::Text("y".into())],
        &meta(200, 151, false),
    )
    .unwrap();
    client
        .insert(
            "f",
            &enc.columns(),
            Bytes::from(rows),
            4,
            &InsertSettings::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        client
            .query("SELECT a, b FROM full.f FINAL ORDER BY a, b")
            .await
            .unwrap(),
        "1\ty\n\\N\tx\n"
    );
}

/// `attmissingval` defaults of added columns, as ClickHouse literals: rows
/// written before the change must read back with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_column_defaults_are_exact_literals() {
    use walshadow_emitter::add_column_sql;
    use walshadow_rows::ArrayValue;

    let (_engine, client, dest) = setup("defaults").await;
    flush(
        &client,
        &batch_of(&dest, &[(1, Some("a"), meta(100, 90, false))]),
    )
    .await;

    const BOOL: u32 = 16;
    const FLOAT8: u32 = 701;
    const MONEY: u32 = 790;
    const DATE: u32 = 1082;
    const TIME: u32 = 1083;
    const TIMESTAMPTZ: u32 = 1184;
    const NUMERIC: u32 = 1700;
    const UUID: u32 = 2950;
    const INT4_ARRAY: u32 = 1007;
    const BYTEA: u32 = 17;
    let mut int_array = type_desc(INT4_ARRAY, "_int4", "b", "A");
    int_array.element = Some(INT4);
    let cases: Vec<(u32, i32, bool, Value, &str)> = vec![
        (BOOL, -1, true, Value::Bool(true), "true"),
        (FLOAT8, -1, false, Value::Float64(-1.25e300), "-1.25e300"),
        (FLOAT8, -1, false, Value::Float64(f64::NEG_INFINITY), "-inf"),
        (MONEY, -1, true, Value::Money(-123_405), "-1234.05"),
        (
            NUMERIC,
            numeric_typmod(40, 5),
            true,
            numeric("-1234567890123456789012345.00001"),
            "-1234567890123456789012345.00001",
        ),
        (NUMERIC, -1, false, numeric("1.500"), "1.500"),
        (
            DATE,
            -1,
            true,
            Value::Date(pg_date(1900, 1, 1)),
            "1900-01-01",
        ),
        (
            TIME,
            -1,
            true,
            Value::Time(3_723_000_001),
            "01:02:03.000001",
        ),
        (
            TIMESTAMPTZ,
            -1,
            true,
            Value::TimestampTz(pg_ts(2299, 12, 31, 23, 59, 59, 999_999)),
            "2299-12-31 23:59:59.999999",
        ),
        (
            UUID,
            -1,
            true,
            uuid("00112233-4455-6677-8899-aabbccddeeff"),
            "00112233-4455-6677-8899-aabbccddeeff",
        ),
        (
            TEXT,
            -1,
            true,
            Value::Text("it's \\ \u{1}".into()),
            "it's \\ \u{1}",
        ),
        (
            BYTEA,
            -1,
            true,
            Value::Bytea(vec![0, 0xff, b'\'']),
            "hex:00FF27",
        ),
        (TEXT, -1, false, Value::Null, "\\N"),
        (
            INT4_ARRAY,
            -1,
            false,
            Value::Array(ArrayValue {
                element_type: INT4,
                dims: vec![(2, 1)],
                elements: vec![Value::Int32(5), Value::Null],
                delimiter: ',',
            }),
            "[5,NULL]",
        ),
    ];
    let mut attrs = kv().attributes;
    for (i, (type_oid, typmod, not_null, _, _)) in cases.iter().enumerate() {
        attrs.push(attr(
            i as i16 + 3,
            &format!("c{i}"),
            *type_oid,
            *typmod,
            *not_null,
        ));
    }
    let wide = relation("kv", attrs, &["id"], vec![int_array]);
    let new = DestTable::new(&wide, &MetaColumns::default()).unwrap();
    for (i, (_, _, _, value, _)) in cases.iter().enumerate() {
        let column = &new.columns[i + 2];
        let after = new.columns[i + 1].name.clone();
        let sql = add_column_sql(
            "defaults",
            "kv",
            walshadow_emitter::OnCluster(None),
            column,
            Some(&after),
            Some(value),
        )
        .unwrap();
        client
            .execute_with_settings(&sql, &new.query_settings())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for (i, (_, _, _, _, want)) in cases.iter().enumerate() {
        let (expr, want) = match want.strip_prefix("hex:") {
            Some(hex) => (format!("hex(c{i})"), hex),
            None => (format!("toString(c{i})"), *want),
        };
        let got = client
            .query(&format!("SELECT {expr} FROM defaults.kv FORMAT TSVRaw"))
            .await
            .unwrap();
        assert_eq!(
            got.trim_end_matches('\n'),
            want,
            "column c{i} ({})",
            new.columns[i + 2].ch_type
        );
    }
}

/// Every code the classes name has that name in the engine itself
/// (`errorCodeToName`): a wrong number would misfile an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_code_tables_match_the_engine() {
    let (_engine, client, _dest) = setup("codes").await;
    let known = walshadow_emitter::error::TRANSIENT_CODES
        .iter()
        .chain(walshadow_emitter::error::DEFINITE_CODES);
    for (code, name) in known {
        let got = client
            .query(&format!("SELECT errorCodeToName({code})"))
            .await
            .unwrap();
        assert_eq!(got.trim(), *name, "code {code}");
        assert_eq!(walshadow_emitter::code_name(*code), Some(*name));
    }
}
