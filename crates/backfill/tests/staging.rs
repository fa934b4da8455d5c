//! The staging swap against the ClickHouse engine: publish, the crash
//! drills (stopped between steps, then `recover`), the schema gate, and
//! what `prepare` refuses.
//!
//! Every test loads `kv` the same way: the destination already holds rows
//! of an earlier life (`_lsn < S`), staging gets the loaded rows
//! (`_lsn = S`), and the live stream writes the destination meanwhile
//! (`_lsn > S`: an update, a delete, an insert).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use walshadow_backfill::ledger::{Ledger, LedgerError, Pass, Phase};
use walshadow_backfill::staging::{
    FoundPhase, Gate, Recovered, StagingError, StagingTable, SwapCounters, SwapMark, SwapOutcome,
    schema_fingerprint, staging_name, table_uuid,
};
use walshadow_emitter::{ClickHouseClient, ClientConfig, DestTable, MetaColumns, TableSettings};
use walshadow_testkit::{ClickHouseEngine, WorkDir};
use walshadow_types::Lsn;
use walshadow_types::catalog::fixtures::{attribute, relation};
use walshadow_types::catalog::{AttributeDesc, RelationDesc};

const DB: &str = "db";
const KEY: &str = "public.kv";
const S: u64 = 1000;
/// What `kv FINAL` shows after a publish: loaded rows 1..5, then the live
/// window's update of 2, delete of 3 and insert of 6; 9 (earlier life) gone.
const PUBLISHED: &str = "1\tL1\n2\tlive2\n4\tL4\n5\tL5\n6\tlive6\n";
/// The destination before a publish: earlier life plus live window.
const UNPUBLISHED: &str = "1\told1\n2\tlive2\n6\tlive6\n9\tstale\n";

fn kv() -> RelationDesc {
    let id = AttributeDesc {
        not_null: true,
        ..attribute(1, "id", 23)
    };
    relation("kv", vec![id, attribute(2, "v", 25)], &["id"], vec![])
}

struct Setup {
    engine: ClickHouseEngine,
    ch: ClickHouseClient,
    work: WorkDir,
}

impl Setup {
    /// An engine, the `kv` destination as the emitter creates it (with
    /// rows of an earlier life) and a ledger with a loading pass.
    async fn new(tag: &str) -> Setup {
        let engine = ClickHouseEngine::start().expect("engine");
        let ch = client(&engine);
        ch.ensure_database().await.unwrap();
        let dest = DestTable::new(&kv(), &MetaColumns::default()).unwrap();
        ch.execute(&dest.create_table_sql(DB, "kv", &TableSettings::default()))
            .await
            .unwrap();
        insert(&ch, "kv", "(1, 'old1', 600, 1, 0), (9, 'stale', 500, 1, 0)").await;
        let work = WorkDir::new(&format!("staging-{tag}")).unwrap();
        let mut ledger = Ledger::default();
        let mut pass = Pass::new("base_backup", Lsn(S));
        pass.phase = Phase::Loading;
        ledger.tables.insert(KEY.into(), pass);
        ledger.write(work.path()).unwrap();
        Setup { engine, ch, work }
    }

    fn staging(&self) -> StagingTable {
        StagingTable::new(self.ch.clone(), DB, "kv", Lsn(S), &MetaColumns::default())
            .with_insert_timeout(Duration::from_millis(300))
    }

    fn pass(&self) -> Pass {
        Ledger::read(self.work.path()).unwrap().tables[KEY].clone()
    }

    /// The pass from `prepare` up to a loaded staging table, with the live
    /// window written to the destination meanwhile.
    async fn load(&self, staging: &StagingTable) {
        staging.prepare().await.unwrap();
        insert(
            &self.ch,
            staging.name(),
            "(1, 'L1', 1000, 1, 0), (2, 'L2', 1000, 1, 0), (3, 'L3', 1000, 1, 0), \
             (4, 'L4', 1000, 1, 0), (5, 'L5', 1000, 1, 0)",
        )
        .await;
        insert(
            &self.ch,
            "kv",
            "(2, 'live2', 1010, 1010, 0), (3, NULL, 1020, 1020, 1), (6, 'live6', 1030, 1030, 0)",
        )
        .await;
    }

    async fn final_rows(&self) -> String {
        self.ch
            .query("SELECT id, v FROM db.kv FINAL ORDER BY id")
            .await
            .unwrap()
    }

    async fn uuid(&self, table: &str) -> Option<String> {
        table_uuid(&self.ch, DB, table).await.unwrap()
    }
}

fn client(engine: &ClickHouseEngine) -> ClickHouseClient {
    ClickHouseClient::new(ClientConfig::new(engine.url(), DB)).unwrap()
}

async fn insert(ch: &ClickHouseClient, table: &str, values: &str) {
    ch.execute(&format!(
        "INSERT INTO db.`{table}` (id, v, _lsn, _seq, _is_deleted) VALUES {values}"
    ))
    .await
    .unwrap();
}

/// What a mark callback saw: the mark, and the staging name's uuid and
/// the destination's uuid at that moment (read over a second connection).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    mark: SwapMark,
    staging_uuid: Option<String>,
    dest_uuid: Option<String>,
}

/// A mark callback that writes the ledger file, as the daemon does, and
/// records what it saw.
fn ledger_marks(
    dir: PathBuf,
    engine_url: String,
    seen: SeenLog,
) -> impl FnMut(&SwapMark) -> Result<(), LedgerError> + use<> {
    move |mark| {
        let mut ledger = Ledger::read(&dir)?;
        if let Some(pass) = ledger.tables.get_mut(KEY) {
            mark.apply(pass);
        }
        ledger.write(&dir)?;
        let uuid = |t: &str| {
            let sql = format!(
                "SELECT toString(uuid) FROM system.tables WHERE database = 'db' AND name = '{t}'"
            );
            let out = ureq_query(&engine_url, &sql);
            (!out.trim().is_empty()).then(|| out.trim().to_owned())
        };
        seen.lock().unwrap().push(Seen {
            mark: mark.clone(),
            staging_uuid: uuid(&staging_name("kv")),
            dest_uuid: uuid("kv"),
        });
        Ok(())
    }
}

/// The marks a callback saw, in order.
type SeenLog = Arc<Mutex<Vec<Seen>>>;

/// A blocking query on its own thread (the callback runs inside the
/// swap's future).
fn ureq_query(url: &str, sql: &str) -> String {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            ClickHouseClient::new(ClientConfig::new(url, DB))
                .unwrap()
                .query(&sql)
                .await
                .unwrap()
        })
    })
    .join()
    .unwrap()
}

fn marks(
    setup: &Setup,
) -> (
    SeenLog,
    impl FnMut(&SwapMark) -> Result<(), LedgerError> + use<>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let f = ledger_marks(
        setup.work.path().to_owned(),
        setup.engine.url(),
        Arc::clone(&seen),
    );
    (seen, f)
}

fn recorded_uuid(dir: &Path) -> String {
    Ledger::read(dir).unwrap().tables[KEY]
        .swap
        .clone()
        .expect("swapped entry")
        .staging_uuid
}

#[tokio::test]
async fn publish_swaps_in_the_load_and_copies_the_live_window_back() {
    let setup = Setup::new("publish").await;
    let counters = Arc::new(SwapCounters::default());
    let staging = setup.staging().with_counters(Arc::clone(&counters));
    setup.load(&staging).await;
    // The clone keeps the computed version column.
    let fp = schema_fingerprint(&setup.ch, DB, staging.name())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        Some(fp.clone()),
        schema_fingerprint(&setup.ch, DB, "kv").await.unwrap()
    );
    let version = fp.columns.iter().find(|c| c.name == "_version").unwrap();
    assert_eq!(
        (version.ch_type.as_str(), version.default_kind.as_str()),
        ("UInt128", "MATERIALIZED")
    );
    assert_eq!(setup.final_rows().await, UNPUBLISHED);
    let loaded_uuid = setup.uuid(staging.name()).await.unwrap();
    let old_dest_uuid = setup.uuid("kv").await.unwrap();

    let (seen, mut mark) = marks(&setup);
    let started = tokio::time::Instant::now();
    let outcome = staging.publish(&mut mark).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "copy-back waits an insert timeout"
    );
    assert_eq!(outcome, SwapOutcome::Published { copied_back: 3 });
    assert_eq!(setup.final_rows().await, PUBLISHED);
    assert_eq!(setup.uuid(staging.name()).await, None);
    assert_eq!(
        setup.uuid("kv").await.as_deref(),
        Some(loaded_uuid.as_str())
    );

    // Swapped (with the staging uuid, before the exchange), then done
    // (after the drop).
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0],
        Seen {
            mark: SwapMark::Swapped(walshadow_backfill::ledger::SwapState {
                staging_uuid: loaded_uuid.clone()
            }),
            staging_uuid: Some(loaded_uuid.clone()),
            dest_uuid: Some(old_dest_uuid),
        }
    );
    assert_eq!(
        seen[1],
        Seen {
            mark: SwapMark::Done,
            staging_uuid: None,
            dest_uuid: Some(loaded_uuid),
        }
    );
    let pass = setup.pass();
    assert_eq!((pass.phase, pass.swap), (Phase::Done, None));
    let c = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        (
            c(&counters.prepared),
            c(&counters.exchanged),
            c(&counters.copied_back_rows),
            c(&counters.dropped),
            c(&counters.discarded),
        ),
        (1, 1, 3, 1, 0)
    );
}

#[tokio::test]
async fn crash_after_the_swapped_mark_exchanges_once_at_recovery() {
    let setup = Setup::new("crash-marked").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    assert_eq!(staging.gate().await.unwrap(), Gate::Match);
    let (seen, mut mark) = marks(&setup);
    let uuid = staging.mark_swapped(&mut mark).await.unwrap();
    drop(staging); // the process dies before EXCHANGE TABLES
    assert_eq!(setup.final_rows().await, UNPUBLISHED);

    let recorded = recorded_uuid(setup.work.path());
    assert_eq!(recorded, uuid);
    let counters = Arc::new(SwapCounters::default());
    let staging = setup.staging().with_counters(Arc::clone(&counters));
    let recovered = staging.recover(&recorded, &mut mark).await.unwrap();
    assert_eq!(
        recovered,
        Recovered {
            found: FoundPhase::NotExchanged,
            outcome: SwapOutcome::Published { copied_back: 3 },
        }
    );
    assert_eq!(setup.final_rows().await, PUBLISHED);
    // Exchanged once: the loaded table holds the name (twice would swap back).
    assert_eq!(setup.uuid("kv").await, Some(recorded));
    assert_eq!(setup.uuid(staging.name()).await, None);
    assert_eq!(
        counters
            .exchanged
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(setup.pass().phase, Phase::Done);
    let marks: Vec<SwapMark> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.mark.clone())
        .collect();
    assert!(
        matches!(marks.as_slice(), [SwapMark::Swapped(_), SwapMark::Done]),
        "{marks:?}"
    );
}

#[tokio::test]
async fn crash_after_the_exchange_copies_back_at_recovery() {
    let mut setup = Setup::new("crash-exchanged").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    assert_eq!(staging.gate().await.unwrap(), Gate::Match);
    let (_seen, mut mark) = marks(&setup);
    let uuid = staging.mark_swapped(&mut mark).await.unwrap();
    staging.exchange(&uuid, false).await.unwrap();
    // An insert that resolved the name before the exchange lands in the
    // swapped-out storage afterwards.
    insert(&setup.ch, staging.name(), "(7, 'late7', 1040, 1040, 0)").await;
    // DDL after the exchange must not wedge the copy-back.
    setup
        .ch
        .execute("ALTER TABLE db.kv ADD COLUMN x Nullable(Int32) AFTER v")
        .await
        .unwrap();
    drop(staging);
    // ClickHouse goes down too.
    setup.engine.crash().unwrap();
    setup.engine.start_again().unwrap();
    setup.ch = client(&setup.engine);
    assert_eq!(
        setup.final_rows().await,
        "1\tL1\n2\tL2\n3\tL3\n4\tL4\n5\tL5\n"
    );

    let recorded = recorded_uuid(setup.work.path());
    let staging = setup.staging();
    let recovered = staging.recover(&recorded, &mut mark).await.unwrap();
    assert_eq!(
        recovered,
        Recovered {
            found: FoundPhase::Exchanged,
            outcome: SwapOutcome::Published { copied_back: 4 },
        }
    );
    assert_eq!(setup.final_rows().await, format!("{PUBLISHED}7\tlate7\n"));
    assert_eq!(
        setup
            .ch
            .query("SELECT count() FROM db.kv FINAL WHERE x IS NOT NULL")
            .await
            .unwrap(),
        "0\n"
    );
    assert_eq!(setup.uuid("kv").await, Some(recorded));
    assert_eq!(setup.uuid(staging.name()).await, None);
    let pass = setup.pass();
    assert_eq!((pass.phase, pass.swap), (Phase::Done, None));
}

#[tokio::test]
async fn crash_after_the_drop_owes_only_the_done_mark() {
    let setup = Setup::new("crash-dropped").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    let (seen, mut mark) = marks(&setup);
    let uuid = staging.mark_swapped(&mut mark).await.unwrap();
    staging.exchange(&uuid, false).await.unwrap();
    let at = tokio::time::Instant::now();
    assert_eq!(staging.copy_back(at).await.unwrap(), 3);
    staging.drop_staging().await.unwrap();
    drop(staging);
    assert_eq!(setup.pass().phase, Phase::Loading);

    let staging = setup.staging();
    let recovered = staging
        .recover(&recorded_uuid(setup.work.path()), &mut mark)
        .await
        .unwrap();
    assert_eq!(
        recovered,
        Recovered {
            found: FoundPhase::Dropped,
            outcome: SwapOutcome::Published { copied_back: 0 },
        }
    );
    assert_eq!(setup.final_rows().await, PUBLISHED);
    let pass = setup.pass();
    assert_eq!((pass.phase, pass.swap), (Phase::Done, None));
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn schema_change_during_the_load_discards_staging() {
    let setup = Setup::new("schema").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    setup
        .ch
        .execute("ALTER TABLE db.kv ADD COLUMN IF NOT EXISTS w Nullable(String) AFTER v")
        .await
        .unwrap();
    let (seen, mut mark) = marks(&setup);
    let outcome = staging.publish(&mut mark).await.unwrap();
    let SwapOutcome::Discarded { reason } = outcome else {
        panic!("published despite a schema change: {outcome:?}");
    };
    assert!(
        reason.contains("column 3: w Nullable(String) vs _lsn UInt64"),
        "{reason}"
    );
    assert_eq!(setup.uuid(staging.name()).await, None);
    assert_eq!(setup.final_rows().await, UNPUBLISHED);
    let pass = setup.pass();
    assert_eq!((pass.phase, pass.swap.is_none()), (Phase::Pending, true));
    assert_eq!(pass.error.as_deref(), Some(reason.as_str()));
    let marks: Vec<SwapMark> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.mark.clone())
        .collect();
    assert_eq!(marks, vec![SwapMark::Discarded { reason }]);

    // The retry prepares a fresh staging table in the new shape.
    staging.prepare().await.unwrap();
    assert_eq!(staging.gate().await.unwrap(), Gate::Match);
}

#[tokio::test]
async fn schema_change_before_a_recovered_exchange_discards_staging() {
    let setup = Setup::new("schema-recover").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    let (_seen, mut mark) = marks(&setup);
    staging.mark_swapped(&mut mark).await.unwrap();
    setup
        .ch
        .execute("ALTER TABLE db.kv DROP COLUMN v")
        .await
        .unwrap();
    let recovered = staging
        .recover(&recorded_uuid(setup.work.path()), &mut mark)
        .await
        .unwrap();
    assert_eq!(recovered.found, FoundPhase::NotExchanged);
    assert!(matches!(recovered.outcome, SwapOutcome::Discarded { .. }));
    assert_eq!(setup.uuid(staging.name()).await, None);
    assert_eq!(
        setup
            .ch
            .query("SELECT id FROM db.kv FINAL ORDER BY id")
            .await
            .unwrap(),
        "1\n2\n6\n9\n"
    );
    let pass = setup.pass();
    assert_eq!((pass.phase, pass.swap.is_none()), (Phase::Pending, true));
}

#[tokio::test]
async fn prepare_rebuilds_discard_drops_and_other_engines_are_refused() {
    let setup = Setup::new("prepare").await;
    let staging = setup.staging();
    setup.load(&staging).await;
    let first = setup.uuid(staging.name()).await.unwrap();
    // Rebuilt per attempt: a new, empty table.
    staging.prepare().await.unwrap();
    assert_ne!(setup.uuid(staging.name()).await.unwrap(), first);
    assert_eq!(
        setup
            .ch
            .query("SELECT count() FROM db.kv__wsstg")
            .await
            .unwrap(),
        "0\n"
    );
    // Opt-out mid-pass.
    staging.discard("opted out").await.unwrap();
    assert_eq!(setup.uuid(staging.name()).await, None);
    staging.discard("again").await.unwrap();
    assert_eq!(
        staging.gate().await.unwrap(),
        Gate::Differs {
            reason: "staging table kv__wsstg is gone".into()
        }
    );

    // No destination table.
    let none = StagingTable::new(
        setup.ch.clone(),
        DB,
        "nope",
        Lsn(S),
        &MetaColumns::default(),
    );
    let e = none.prepare().await.unwrap_err();
    assert!(matches!(e, StagingError::Missing { .. }), "{e}");
    assert!(!e.is_transient());

    // A database engine that cannot exchange tables: refused before
    // anything is loaded (EXCHANGE there fails with NOT_IMPLEMENTED).
    setup
        .ch
        .execute("CREATE DATABASE mem ENGINE = Memory")
        .await
        .unwrap();
    setup
        .ch
        .execute("CREATE TABLE mem.t (id Int32) ENGINE = MergeTree ORDER BY id")
        .await
        .unwrap();
    let mem = StagingTable::new(
        setup.ch.clone(),
        "mem",
        "t",
        Lsn(S),
        &MetaColumns::default(),
    );
    let e = mem.prepare().await.unwrap_err();
    assert!(
        matches!(&e, StagingError::DatabaseEngine { engine, .. } if engine == "Memory"),
        "{e}"
    );
    assert_eq!(
        table_uuid(&setup.ch, "mem", "t__wsstg").await.unwrap(),
        None
    );
}
