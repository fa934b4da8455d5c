//! Regenerates the `heap_page` and `visibility_gate` fixtures. Ignored: the
//! first test starts two PostgreSQL 15 clusters. From `fuzz/`:
//!
//! ```sh
//! cargo test --release --test capture -- --ignored --test-threads 1
//! ```
//!
//! - `capture_pg15`: the all-types table of the test kit
//!   (`crates/testkit/src/all_types.rs`) with out-of-line values, dropped
//!   columns, an updated, a deleted and a rolled-back row, and multixacts
//!   (lock-only, with a committed and with an aborted updater), on a
//!   cluster without and one with data checksums. Writes its descriptor as
//!   `ShadowCatalog` reads it (`data/all_types_pg15.json`), every page of
//!   the table and of its TOAST table after a `CHECKPOINT`
//!   (`corpus/heap_page/pg15-*`), and the cluster's `pg_xact`/
//!   `pg_multixact` segments with the table's tuple headers
//!   (`corpus/visibility_gate/pg15-*`).
//! - `hand_built_seeds`: small gate inputs for each rule and SLRU case
//!   (`corpus/visibility_gate/hand-*`) and a new page (`heap_page/new-page`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use walshadow_fuzz::{GateInputBuilder, PageInput, run_visibility_gate};
use walshadow_heap::heap_page::{BLCKSZ, HeapPage};
use walshadow_heap::visibility::{
    HEAP_MOVED_IN, HEAP_MOVED_OFF, HEAP_XMAX_COMMITTED, HEAP_XMAX_EXCL_LOCK, HEAP_XMAX_INVALID,
    HEAP_XMAX_IS_MULTI, HEAP_XMAX_LOCK_ONLY, HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN,
    HEAP_XMIN_INVALID, Slru,
};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_testkit::all_types::{
    EDGES, HUGE, MORE_EDGES, TYPES_SQL, TYPICAL, create_table_sql, insert, without_dropped,
};
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor, relation_file};

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn write(rel: &str, bytes: &[u8]) -> Result<()> {
    let path = fuzz_dir().join(rel);
    fs::create_dir_all(path.parent().context("a parent")?)?;
    fs::write(&path, bytes).with_context(|| path.display().to_string())
}

/// The all-types table with every kind of tuple version a backup carries.
fn workload(c: &Cluster) -> Result<()> {
    c.psql(TYPES_SQL)?;
    c.psql(&create_table_sql("all_types", &[]))?;
    // Out of line uncompressed ("by", storage external) and compressed.
    c.psql(r#"alter table all_types alter column "by" set storage external"#)?;
    for row in [TYPICAL, EDGES, MORE_EDGES, HUGE] {
        insert(c, "all_types", row)?;
    }
    let big: &[(&str, &str)] = &[
        (
            "tx",
            "(select string_agg(md5(g::text), ' ') from generate_series(1, 700) g)",
        ),
        (
            r#""by""#,
            "(select decode(string_agg(md5(g::text), ''), 'hex') from generate_series(1, 700) g)",
        ),
        (
            "jb",
            "(select jsonb_agg(jsonb_build_object('k', g, 'v', md5(g::text))) \
             from generate_series(1, 300) g)",
        ),
        (
            "a_tx",
            "(select array_agg(md5(g::text)) from generate_series(1, 200) g)",
        ),
    ];
    insert(c, "all_types", &[TYPICAL, big].concat())?;
    // Old tuples keep the dropped columns' bytes.
    c.psql("alter table all_types drop column dropped_early, drop column dropped_late")?;
    insert(c, "all_types", &without_dropped(TYPICAL))?;
    insert(c, "all_types", &without_dropped(EDGES))?;
    // Hint bits on what is there so far; what follows stays unhinted.
    c.psql("select count(*) from all_types")?;
    c.psql(
        "update all_types set i4 = 7, tx = 'updated' where id = 1;
         delete from all_types where id = 2;
         update all_types set tx = left(tx, 10) where id = 5;
         begin; insert into all_types (i4) values (99); rollback;",
    )?;
    // Multixacts, the lockers prepared so they stay open while others
    // lock or update: row 3 two share lockers (lock only), row 4 two
    // key-share lockers and a committed update, row 6 a key-share locker
    // and a rolled-back update.
    c.psql(
        "begin; select id from all_types where id = 3 for share; prepare transaction 's1';
         begin; select id from all_types where id = 3 for share; prepare transaction 's2';
         commit prepared 's1'; commit prepared 's2';
         begin; select id from all_types where id = 4 for key share; prepare transaction 'k1';
         begin; select id from all_types where id = 4 for key share; prepare transaction 'k2';
         update all_types set i2 = 1 where id = 4;
         commit prepared 'k1'; commit prepared 'k2';
         begin; select id from all_types where id = 6 for key share; prepare transaction 'k3';
         begin; update all_types set i2 = 2 where id = 6; rollback;
         commit prepared 'k3';",
    )?;
    c.checkpoint()
}

fn start(checksums: bool) -> Result<Cluster> {
    Cluster::start(
        PgMajor::V15,
        ClusterOptions::default()
            .data_checksums(checksums)
            .conf("autovacuum", "off")
            .conf("max_prepared_transactions", "4"),
    )
}

/// Writes every page of `file` as a `heap_page` seed `<prefix>-<block>`.
fn page_seeds(file: &Path, prefix: &str, flags: u8, verify: bool) -> Result<usize> {
    let bytes = fs::read(file).with_context(|| file.display().to_string())?;
    ensure!(bytes.len().is_multiple_of(BLCKSZ), "not whole pages");
    let mut n = 0;
    for (block, page) in (0u32..).zip(bytes.chunks(BLCKSZ)) {
        let p = HeapPage::parse(page, block, verify)
            .with_context(|| format!("{prefix} block {block}"))?;
        ensure!(!p.tuples().is_empty(), "{prefix} block {block} is empty");
        let input = PageInput::encode(flags, block, page);
        // The descriptor this run writes is compiled into the harness by
        // the next build: `tests/seeds.rs` decodes the seeds with it.
        let fixed = PageInput::parse(&input).context("an input")?;
        HeapPage::parse(&fixed.page, block, true)
            .with_context(|| format!("{prefix} block {block} as the fuzzer sees it"))?;
        write(&format!("corpus/heap_page/{prefix}-{block}"), &input)?;
        n += 1;
    }
    Ok(n)
}

fn slru(c: &Cluster, rel: &str) -> Result<Vec<u8>> {
    let path = c.data_dir().join(rel);
    fs::read(&path).with_context(|| path.display().to_string())
}

#[test]
#[ignore = "starts two PostgreSQL 15 clusters; regenerates the committed fixtures"]
fn capture_pg15() -> Result<()> {
    for checksums in [false, true] {
        let c = start(checksums)?;
        workload(&c)?;
        let prefix = if checksums { "pg15-checksums" } else { "pg15" };
        if !checksums {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let desc = rt.block_on(async {
                let mut cat =
                    ShadowCatalog::connect(&c.socket_dir(), c.port(), c.superuser(), "postgres")
                        .await?;
                cat.relation_by_name("public", "all_types")
                    .await?
                    .context("no table all_types")
            })?;
            let mut json = serde_json::to_string_pretty(&desc)?;
            json.push('\n');
            write("data/all_types_pg15.json", json.as_bytes())?;
        }
        // Without checksums the fix-up bit gets the verified parse past
        // pd_checksum; with them the stored one is right.
        let flags = if checksums { 0xAA } else { 0xAB };
        let heap = relation_file(&c, "'all_types'::regclass")?;
        let toast = relation_file(
            &c,
            "(select reltoastrelid from pg_class where relname = 'all_types')",
        )?;
        let pages = page_seeds(&heap, &format!("{prefix}-all_types"), flags, checksums)?;
        let toast_pages = page_seeds(&toast, &format!("{prefix}-toast"), flags, checksums)?;
        eprintln!("{prefix}: {pages} heap pages, {toast_pages} TOAST pages");

        if checksums {
            continue;
        }
        let row = c.query_one(
            "select next_xid, next_multixact_id, next_multi_offset from pg_control_checkpoint()",
        )?;
        let f: Vec<&str> = row.split('|').collect();
        ensure!(f.len() == 3, "pg_control_checkpoint(): {row}");
        // next_xid is epoch:xid.
        let next_xid: u32 = f[0].rsplit(':').next().context("next_xid")?.parse()?;
        let (next_multi, next_offset): (u32, u32) = (f[1].parse()?, f[2].parse()?);
        let xact = slru(&c, "pg_xact/0000")?;
        let offsets = slru(&c, "pg_multixact/offsets/0000")?;
        let members = slru(&c, "pg_multixact/members/0000")?;
        let tuples = walshadow_testkit::heap_tuples(&heap)?;
        ensure!(tuples.len() < 256, "{} tuples", tuples.len());
        let live: usize = c.query_one("select count(*) from all_types")?.parse()?;

        let with_headers = |mut b: GateInputBuilder| {
            for t in &tuples {
                b = b.raw_header(t);
            }
            b
        };
        let seed = with_headers(GateInputBuilder::new())
            .next_xid(next_xid)
            .next_multi(next_multi, next_offset)
            .segment(Slru::Xact, 0, &xact)
            .segment(Slru::MultiXactOffsets, 0, &offsets)
            .segment(Slru::MultiXactMembers, 0, &members)
            .build();
        let by_path = with_headers(GateInputBuilder::new())
            .backup_file("pg_xact/0000", &xact)
            .backup_file("./pg_multixact/offsets/0000", &offsets)
            .backup_file("pg_multixact/members/0000", &members)
            .build();
        for (name, input) in [("pg15-all_types", seed), ("pg15-all_types-paths", by_path)] {
            let s = run_visibility_gate(&input);
            eprintln!(
                "{name}: {s:?}, {live} live rows, next {next_xid}/{next_multi}/{next_offset}"
            );
            // The gate over a finished workload's complete SLRUs: exactly
            // the live rows.
            ensure!(s.segments == 3 && s.decide_errors == 0 && s.resolve_errors == 0);
            ensure!(s.resolved_emit == live, "{s:?}, {live} live rows");
            write(&format!("corpus/visibility_gate/{name}"), &input)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Hand-built gate seeds.

const SEG_BYTES: usize = 32 * BLCKSZ;

/// Segments of one SLRU, by number, grown a page at a time.
#[derive(Default)]
struct Segs(BTreeMap<u32, Vec<u8>>);

impl Segs {
    fn at(&mut self, page: u32, byte: usize) -> &mut [u8] {
        let seg = self.0.entry(page / 32).or_default();
        let start = (page % 32) as usize * BLCKSZ;
        if seg.len() < start + BLCKSZ {
            seg.resize(start + BLCKSZ, 0);
        }
        &mut seg[start + byte..]
    }

    /// Two status bits per xid (clog.c).
    fn xact(mut self, xid: u32, status: u8) -> Self {
        let index = xid % (BLCKSZ as u32 * 4);
        let b = &mut self.at(xid / (BLCKSZ as u32 * 4), (index / 4) as usize)[0];
        *b |= status << ((index % 4) * 2);
        self
    }

    /// A multixact's starting member offset.
    fn offset(mut self, multi: u32, off: u32) -> Self {
        let at = (multi % 2048) as usize * 4;
        self.at(multi / 2048, at)[..4].copy_from_slice(&off.to_le_bytes());
        self
    }

    /// A member: flag byte and xid in its group of four (multixact.c).
    fn member(mut self, off: u32, xid: u32, flags: u8) -> Self {
        let base = ((off / 4) % 409 * 20) as usize;
        let m = (off % 4) as usize;
        self.at(off / 1636, base + m)[0] = flags;
        self.at(off / 1636, base + 4 + 4 * m)[..4].copy_from_slice(&xid.to_le_bytes());
        self
    }

    fn add(self, mut b: GateInputBuilder, slru: Slru) -> GateInputBuilder {
        for (n, bytes) in self.0 {
            assert!(bytes.len() <= SEG_BYTES);
            b = b.segment(slru, n, &bytes);
        }
        b
    }
}

const COMMITTED: u8 = 1;
const ABORTED: u8 = 2;
const SUB_COMMITTED: u8 = 3;
const FOR_KEY_SHARE: u8 = 0;
const FOR_SHARE: u8 = 1;
const NO_KEY_UPDATE: u8 = 4;
const UPDATE: u8 = 5;

#[test]
#[ignore = "regenerates committed seeds"]
fn hand_built_seeds() -> Result<()> {
    let xc = HEAP_XMIN_COMMITTED;
    let multi = HEAP_XMIN_COMMITTED | HEAP_XMAX_IS_MULTI;
    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();

    // Hints alone, nothing copied: what needs a lookup errors after the walk.
    seeds.push((
        "hand-hints",
        GateInputBuilder::new()
            .header(1000, 0, 0, xc | HEAP_XMAX_INVALID)
            .header(1000, 0, 0, HEAP_XMIN_INVALID)
            .header(1000, 0, 0, HEAP_XMIN_FROZEN | HEAP_XMAX_INVALID)
            .header(1000, 1001, 0, xc | HEAP_XMAX_COMMITTED)
            .header(1000, 1001, 0, xc | HEAP_XMAX_LOCK_ONLY)
            .header(1000, 1001, 0, xc | HEAP_XMAX_EXCL_LOCK)
            .header(1000, 0, 1005, HEAP_MOVED_OFF | HEAP_XMAX_INVALID)
            .header(1000, 0, 1005, HEAP_MOVED_IN | HEAP_XMAX_INVALID)
            .header(1000, 0, 0, 0)
            .header(1, 0, 0, HEAP_XMAX_INVALID)
            .build(),
    ));

    // pg_xact statuses; xid 40000 lies on page 1, which is not copied.
    let xact = Segs::default()
        .xact(1000, COMMITTED)
        .xact(1001, ABORTED)
        .xact(1003, SUB_COMMITTED);
    let mut b = xact.add(GateInputBuilder::new(), Slru::Xact).next_xid(1004);
    for (xmin, xmax) in [
        (1000, 0),
        (1001, 0),
        (1002, 0),
        (1003, 0),
        (1000, 1000),
        (1000, 1001),
        (1000, 1002),
        (1000, 1003),
        (1002, 1000),
        (40000, 0),
        (1000, 40000),
        (2, 1000),
    ] {
        b = b.header(xmin, xmax, 0, 0);
    }
    seeds.push(("hand-xact", b.build()));

    // Multixacts 1..=3 recorded, 4's offset written but not its members,
    // 5 not recorded, 3000 on an offsets page not copied.
    let xact = Segs::default()
        .xact(1000, COMMITTED)
        .xact(1001, COMMITTED)
        .xact(1002, ABORTED);
    let offsets = Segs::default()
        .offset(1, 1)
        .offset(2, 3)
        .offset(3, 5)
        .offset(4, 7);
    let members = Segs::default()
        .member(1, 1000, FOR_SHARE)
        .member(2, 1001, UPDATE)
        .member(3, 1000, FOR_KEY_SHARE)
        .member(4, 1002, NO_KEY_UPDATE)
        .member(5, 1000, FOR_SHARE)
        .member(6, 1001, FOR_SHARE);
    let mut b = GateInputBuilder::new().next_multi(5, 7);
    b = xact.add(b, Slru::Xact);
    b = offsets.add(b, Slru::MultiXactOffsets);
    b = members.add(b, Slru::MultiXactMembers);
    for m in [1, 2, 3, 4, 5, 3000] {
        b = b.header(1000, m, 0, multi);
    }
    b = b.header(1000, 3, 0, multi | HEAP_XMAX_LOCK_ONLY);
    seeds.push(("hand-multi", b.build()));

    // pg_xact segments 0 and 2 (one page each): an xid on the pages
    // between is in a hole, one in segment 3 below the bound was lost.
    let xact = Segs::default()
        .xact(1000, COMMITTED)
        .xact(2 * 1_048_576 + 10, COMMITTED);
    let mut b = xact
        .add(GateInputBuilder::new(), Slru::Xact)
        .next_xid(3 * 1_048_576 + 100);
    for xmin in [1000, 1_048_576 + 5, 2 * 1_048_576 + 10, 3 * 1_048_576 + 5] {
        b = b.header(xmin, 0, 0, HEAP_XMAX_INVALID);
    }
    seeds.push(("hand-hole", b.build()));

    // Members wrapping at 2^32: multixact 10 from offset 2^32 - 2 (segment
    // 82040, its last page), slot 0 skipped, its updater at offset 1.
    let top = u32::MAX - 1;
    let xact = Segs::default().xact(1000, COMMITTED).xact(1001, COMMITTED);
    let offsets = Segs::default().offset(10, top).offset(11, 2);
    let members = Segs::default()
        .member(top, 1000, FOR_KEY_SHARE)
        .member(top + 1, 1000, FOR_KEY_SHARE)
        .member(1, 1001, NO_KEY_UPDATE);
    let mut b = GateInputBuilder::new().next_multi(12, 2);
    b = xact.add(b, Slru::Xact);
    b = offsets.add(b, Slru::MultiXactOffsets);
    b = members.add(b, Slru::MultiXactMembers);
    b = b.header(1000, 10, 0, multi).header(1000, 11, 0, multi);
    seeds.push(("hand-wrap", b.build()));

    for (name, input) in &seeds {
        let s = run_visibility_gate(input);
        eprintln!("{name}: {} bytes, {s:?}", input.len());
        write(&format!("corpus/visibility_gate/{name}"), input)?;
    }
    write("corpus/heap_page/new-page", &PageInput::encode(1, 0, &[]))?;
    Ok(())
}
