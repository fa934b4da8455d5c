//! The page walk against real PostgreSQL 15 and 18 (data checksums on):
//! a table with 30k rows, out-of-line values (plain and compressed), a
//! VACUUM for its free space and visibility maps, then deletes and updates
//! left unvacuumed; `BASE_BACKUP` through [`PageWalkSink`] with the table's
//! and its TOAST table's filenodes. Then
//!
//! - only those two files were walked (paths and sizes as the server
//!   reports them; their `_fsm`/`_vm` forks, the index, another table and
//!   everything else skipped);
//! - every page passes its checksum, and every walked tuple decodes with
//!   the WAL path's `RowDecoder`, TOAST resolved from the walked chunks;
//! - every live row of `SELECT` is among the walked tuples (values compared
//!   as PostgreSQL text), and the walk holds exactly one tuple per row
//!   version: deleted rows and old versions of updated ones carry the
//!   mutating transaction as xmax;
//! - the captured `pg_xact` says that transaction committed;
//! - real pages corrupted at random never make the parser or the decoder
//!   panic, and the checksum catches the corruption.

use std::collections::HashMap;
use std::time::Duration;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_backfill::walk_sink::{PageConsumer, PageWalkSink, WalkOptions, WalkedPage};
use walshadow_heap::heap_page::{BLCKSZ, HeapPage};
use walshadow_rows::{RowDecoder, ToastChunk, ToastChunks, TupleRef};
use walshadow_shadow::catalog::ShadowCatalog;
use walshadow_testkit::{Cluster, ClusterOptions, PgMajor};
use walshadow_types::{BlockNumber, Oid, RelFileLocator, Xid};
use walshadow_wal_reader::replication::{
    BaseBackupOptions, Checkpoint, ConnConfig, ReplicationClient, SinkError,
};

const ROWS: i64 = 30_000;
const BIG_ROWS: i64 = 200;

const SCHEMA: &str = "
create table t (id int primary key, n int not null, note text, ext text, cmp text);
alter table t alter column ext set storage external;
insert into t select g, g, 'row ' || g from generate_series(1, 30000) g;
-- ext: ~3.2 kB of hex stored out of line uncompressed; cmp: ~12.8 kB of hex
-- (which pglz cannot shrink below the TOAST threshold) compressed out of line.
insert into t select g, g, 'big ' || g,
    (select string_agg(md5(g::text || '/' || i), '') from generate_series(1, 100) i),
    (select string_agg(md5(i || '/' || g::text), '') from generate_series(1, 400) i)
  from generate_series(30001, 30200) g;
vacuum t;
create table other (id int, v text);
insert into other select g, 'other ' || g from generate_series(1, 2000) g;
checkpoint;
";

/// Deletes and updates in one transaction; prints its xid. Nothing reads
/// `t` afterwards until the backup is taken, so no page is pruned.
const MUTATE: &str = "
begin;
delete from t where id % 10 = 0;
update t set n = -n, note = note || ' updated' where id % 7 = 0;
update t set ext = ext || 'x' where id between 30001 and 30050;
select txid_current();
commit;
";

/// A row as PostgreSQL text, NULL as `None`.
type TextRow = Vec<Option<String>>;

/// A walked tuple of `t`, owned.
#[derive(Debug, Clone)]
struct Walked {
    block: BlockNumber,
    xmin: Xid,
    xmax: Xid,
    infomask2: u16,
    infomask: u16,
    hoff: u8,
    data: Vec<u8>,
}

#[derive(Debug, Default)]
struct Collector {
    table: Oid,
    toast: Oid,
    toast_relid: Oid,
    tuples: Vec<Walked>,
    chunks: ToastChunks,
    /// Raw pages kept for the corruption drill: (relfilenode, block, bytes).
    samples: Vec<(Oid, BlockNumber, Vec<u8>)>,
    pages: HashMap<Oid, u64>,
    new_pages: u64,
}

impl PageConsumer for Collector {
    async fn page(&mut self, page: WalkedPage<'_>) -> Result<(), SinkError> {
        let heap = page.heap()?;
        let rel = page.locator.rel_number;
        *self.pages.entry(rel).or_default() += 1;
        if heap.is_new() {
            self.new_pages += 1;
        }
        if self.samples.iter().filter(|s| s.0 == rel).count() < 4 && !heap.is_new() {
            self.samples.push((rel, page.block, page.bytes.to_vec()));
        }
        for t in heap.tuples() {
            // ctid of an unchanged tuple is itself.
            if t.xmax == 0 && t.ctid != (page.block, t.offset) {
                return Err(format!("{}: live tuple with ctid {:?}", page.file, t.ctid).into());
            }
            if rel == self.toast {
                let c = ToastChunk::from_tuple(t.tuple_ref())?;
                self.chunks
                    .add_chunk(self.toast_relid, c.chunk_id, c.chunk_seq, c.data);
            } else if rel == self.table {
                self.tuples.push(Walked {
                    block: page.block,
                    xmin: t.xmin,
                    xmax: t.xmax,
                    infomask2: t.infomask2,
                    infomask: t.infomask,
                    hoff: t.hoff,
                    data: t.data.get(23..).unwrap_or_default().to_vec(),
                });
            }
        }
        Ok(())
    }
}

async fn sql_session(pg: &Cluster) -> Result<ReplicationClient> {
    let mut cfg = ConnConfig::from_url(&pg.socket_url("postgres"))?;
    cfg.physical = false;
    cfg.command_timeout = Duration::from_secs(120);
    Ok(ReplicationClient::connect(&cfg).await?)
}

fn num<T: std::str::FromStr>(pg: &Cluster, sql: &str) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    Ok(pg.query_one(sql)?.trim().parse()?)
}

/// xorshift64, seeded and printed so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn seed() -> u64 {
    let s = std::env::var("PAGE_WALK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
                | 1
        });
    eprintln!("PAGE_WALK_SEED={s}");
    s
}

async fn walk(major: PgMajor) -> Result<()> {
    let pg = Cluster::start(
        major,
        ClusterOptions::default()
            .conf("autovacuum", "off")
            .data_checksums(true),
    )?;
    pg.psql(SCHEMA)?;
    let xid: Xid = pg.psql(MUTATE)?.trim().parse().context("txid")?;
    let db: Oid = num(
        &pg,
        "select oid from pg_database where datname = current_database()",
    )?;
    let table: Oid = num(&pg, "select pg_relation_filenode('t')")?;
    let toast: Oid = num(
        &pg,
        "select pg_relation_filenode(reltoastrelid) from pg_class where oid = 't'::regclass",
    )?;
    let table_path = pg.query_one("select pg_relation_filepath('t')")?;
    let toast_path = pg.query_one(
        "select pg_relation_filepath(reltoastrelid) from pg_class where oid = 't'::regclass",
    )?;
    // The forks the walk must leave alone exist.
    for fork in ["fsm", "vm"] {
        let size: i64 = num(&pg, &format!("select pg_relation_size('t', '{fork}')"))?;
        ensure!(size > 0, "{major}: t has no {fork} fork to skip");
    }

    let mut cat =
        ShadowCatalog::connect(&pg.socket_dir(), pg.port(), pg.superuser(), "postgres").await?;
    let desc = cat
        .relation_by_name("public", "t")
        .await?
        .context("no table t")?;
    let toast_relid = desc.toast_relid.context("t has no TOAST table")?;

    let mut repl = ReplicationClient::connect(&ConnConfig::from_url(&pg.url("postgres"))?).await?;
    let opts = WalkOptions::for_server(
        &repl.show("block_size").await?,
        &repl.show("segment_size").await?,
        &repl.show("data_checksums").await?,
    )?;
    ensure!(opts.verify_checksums, "{major}: checksums are on");
    let loc = |rel| RelFileLocator {
        spc_oid: 1663,
        db_oid: db,
        rel_number: rel,
    };
    let collector = Collector {
        table,
        toast,
        toast_relid,
        ..Collector::default()
    };
    let mut sink = PageWalkSink::new([loc(table), loc(toast)], collector, opts)?;
    let backup = BaseBackupOptions {
        label: "page walk test".into(),
        checkpoint: Checkpoint::Fast,
        ..BaseBackupOptions::default()
    };
    let result = repl.base_backup(&backup, &mut sink).await?;
    let out = sink.finish()?;
    let c = out.consumer;

    // Only the two relations' main forks were walked.
    let mut walked: Vec<(String, u64)> = out
        .files
        .iter()
        .map(|f| (f.file.clone(), f.bytes))
        .collect();
    walked.sort();
    let size = |rel: &str| -> Result<u64> { num(&pg, &format!("select pg_relation_size({rel})")) };
    let mut expected = vec![
        (table_path.clone(), size("'t'")?),
        (
            toast_path.clone(),
            size("(select reltoastrelid from pg_class where oid = 't'::regclass)")?,
        ),
    ];
    expected.sort();
    ensure!(
        walked == expected,
        "{major}: walked {walked:?}, expected {expected:?}"
    );
    let s = out.stats;
    eprintln!("{major}: {s:?}; pages {:?}, new {}", c.pages, c.new_pages);
    ensure!(
        s.files_walked == 2 && s.bytes_walked == expected.iter().map(|e| e.1).sum::<u64>(),
        "{major}: {s:?}"
    );
    ensure!(
        s.pages_walked * BLCKSZ as u64 == s.bytes_walked && s.partial_pages == 0,
        "{major}: {s:?}"
    );
    ensure!(
        s.files_skipped > 500 && s.bytes_skipped > s.bytes_walked,
        "{major}: {s:?}"
    );
    ensure!(
        result.files_kept == s.files_walked + s.slru_files
            && result.bytes_kept == s.bytes_walked + s.slru_bytes,
        "{major}: the client kept {} files / {} bytes, the sink {s:?}",
        result.files_kept,
        result.bytes_kept
    );
    ensure!(
        c.pages.get(&table).copied().unwrap_or(0) > 200 && c.pages.contains_key(&toast),
        "{major}: pages {:?}",
        c.pages
    );

    // pg_xact: the mutating transaction committed (clog.c: 4 xacts per
    // byte, 32 pages of 8 KiB per segment, TRANSACTION_STATUS_COMMITTED 1).
    let per_segment = 4 * BLCKSZ as u64 * 32;
    let seg = out
        .slru
        .pg_xact
        .get(u64::from(xid) / per_segment)
        .context("pg_xact segment of the xid")?;
    let at = (u64::from(xid) % per_segment / 4) as usize;
    let status =
        (seg.get(at).copied().context("xid past the pg_xact bytes")? >> ((xid % 4) * 2)) & 3;
    ensure!(status == 1, "{major}: xid {xid} status {status}");
    ensure!(
        !out.slru.multixact_offsets.is_empty() && !out.slru.multixact_members.is_empty(),
        "{major}: pg_multixact not captured"
    );

    // Decode every walked tuple the way the WAL path does.
    let decoder = RowDecoder::new(&desc)?;
    let mut versions: HashMap<String, Vec<(Walked, TextRow)>> = HashMap::new();
    for w in &c.tuples {
        let t = TupleRef::from_wal(w.infomask2, w.infomask, w.hoff, &w.data);
        let values = decoder
            .decode(t, &c.chunks)
            .with_context(|| format!("{major}: block {} xmin {}", w.block, w.xmin))?;
        let text: Vec<Option<String>> = values.iter().map(|v| v.to_pg_text()).collect();
        let id = text[0].clone().context("id is NULL")?;
        versions.entry(id).or_default().push((w.clone(), text));
    }

    // Exactly one walked tuple per row version.
    let u7 = (1..=ROWS + BIG_ROWS)
        .filter(|i| i % 7 == 0 && i % 10 != 0)
        .count();
    let uext = (ROWS + 1..=ROWS + 50).filter(|i| i % 10 != 0).count();
    ensure!(
        c.tuples.len() == (ROWS + BIG_ROWS) as usize + u7 + uext,
        "{major}: {} walked tuples",
        c.tuples.len()
    );
    for id in 1..=ROWS + BIG_ROWS {
        let v = versions
            .get(&id.to_string())
            .with_context(|| format!("{major}: id {id} not walked"))?;
        let changed = v.iter().filter(|(w, _)| w.xmax == xid).count();
        let created = v.iter().filter(|(w, _)| w.xmin == xid).count();
        if id % 10 == 0 {
            ensure!(
                v.len() == 1 && changed == 1,
                "{major}: deleted id {id}: {v:?}"
            );
        } else {
            let updates =
                usize::from(id % 7 == 0) + usize::from((ROWS + 1..=ROWS + 50).contains(&id));
            ensure!(
                v.len() == 1 + updates && changed == updates && created == updates,
                "{major}: id {id}: {} versions, {changed} superseded, {created} created",
                v.len()
            );
        }
    }

    // Every live row is among the walked tuples, value for value.
    let mut s = sql_session(&pg).await?;
    let live = s
        .simple_query("select id::text, n::text, note, ext, cmp from public.t order by id")
        .await?;
    let expected_live = (ROWS + BIG_ROWS) - (ROWS + BIG_ROWS) / 10;
    ensure!(
        live.rows.len() as i64 == expected_live,
        "{major}: {} live rows",
        live.rows.len()
    );
    let mut toasted = 0;
    for i in 0..live.rows.len() {
        let row: Vec<Option<String>> = (0..5).map(|j| live.text(i, j).map(str::to_owned)).collect();
        let id = row[0].clone().context("id")?;
        let found = versions
            .get(&id)
            .is_some_and(|v| v.iter().any(|(w, text)| text == &row && w.xmax != xid));
        ensure!(
            found,
            "{major}: live row id {id} not among the walked tuples"
        );
        if row[3].as_ref().is_some_and(|e| e.len() > 3000) {
            toasted += 1;
        }
    }
    ensure!(
        toasted == BIG_ROWS - BIG_ROWS / 10,
        "{major}: {toasted} toasted rows"
    );
    s.close().await;
    repl.close().await;

    corrupt_pages(&c, &decoder)?;
    Ok(())
}

/// Random byte changes to real pages: parsing and decoding never panic,
/// and the checksum notices.
fn corrupt_pages(c: &Collector, decoder: &RowDecoder) -> Result<()> {
    ensure!(c.samples.len() >= 5, "{} sample pages", c.samples.len());
    let mut rng = Rng(seed());
    let rounds = 3000;
    let mut unchanged = 0;
    let mut detected = 0;
    for _ in 0..rounds {
        let (rel, block, page) = &c.samples[rng.below(c.samples.len())];
        let mut bad = page.clone();
        // Bias towards the header, line pointers and tuple headers.
        for _ in 0..1 + rng.below(8) {
            let at = match rng.below(3) {
                0 => rng.below(64),
                1 => {
                    let upper = usize::from(u16::from_le_bytes([page[14], page[15]]));
                    upper + rng.below(BLCKSZ - upper)
                }
                _ => rng.below(BLCKSZ),
            };
            bad[at] = rng.next() as u8;
        }
        if &bad == page {
            unchanged += 1;
            continue;
        }
        if HeapPage::parse(&bad, *block, true).is_err() {
            detected += 1;
        }
        if let Ok(p) = HeapPage::parse(&bad, *block, false) {
            for t in p.tuples() {
                if *rel == c.toast {
                    let _ = ToastChunk::from_tuple(t.tuple_ref());
                } else {
                    let _ = decoder.decode(t.tuple_ref(), &c.chunks);
                }
            }
        }
    }
    eprintln!("corrupted {}: {detected} detected", rounds - unchanged);
    // A 16-bit checksum lets about one change in 65535 through.
    ensure!(
        detected + 5 >= rounds - unchanged,
        "only {detected} of {} corrupted pages detected",
        rounds - unchanged
    );
    Ok(())
}

per_major!(async walk => walks_only_the_table_and_decodes_every_version: pg15, pg16, pg17, pg18);
