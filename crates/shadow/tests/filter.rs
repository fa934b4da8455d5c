//! The record filter on real WAL: a DDL drill interleaved with DML on
//! PostgreSQL 15 and 18. Oracles:
//! - every relation file the source has at the end is classified as the
//!   source's own catalog says (catalog, sequence or user data);
//! - no record touching a user file is kept, and none touching a catalog
//!   file is rewritten;
//! - the filtered WAL still decodes (every CRC, every record), keeps every
//!   LSN, and no longer contains the marker written into user rows.

use std::collections::HashMap;
use walshadow_testkit::per_major;

use anyhow::{Context, Result, ensure};
use walshadow_shadow::filter::classes::FileClass;
use walshadow_shadow::filter::pipeline::FilterPipeline;
use walshadow_shadow::filter::{RecordFilter, Verdict};
use walshadow_testkit::{Cluster, ClusterOptions, Lsn, PgMajor};
use walshadow_types::Oid;
use walshadow_wal_decode::{RmgrId, WalStreamDecoder};
use walshadow_wal_reader::segments::SegmentSet;

/// A record's LSN, verdict and files (database, file number).
type Judged = (Lsn, Verdict, Vec<(Oid, Oid)>);

const MARKER: &str = "zebra-marker-7f3a9c";

/// Seeds a filter from the data directory, as `init` does from a base
/// backup: relation maps and pg_class pages of every database.
fn seed(c: &Cluster, major: PgMajor) -> Result<RecordFilter> {
    let mut f = RecordFilter::new(major);
    let data = c.data_dir();
    f.load_relmap_file(0, &std::fs::read(data.join("global/pg_filenode.map"))?);
    for entry in std::fs::read_dir(data.join("base"))? {
        let entry = entry?;
        let Ok(db) = entry.file_name().to_string_lossy().parse::<Oid>() else {
            continue;
        };
        ensure!(f.load_relmap_file(db, &std::fs::read(entry.path().join("pg_filenode.map"))?));
        let file = f.pg_class_file(db).context("no pg_class in the map")?;
        let bytes = std::fs::read(entry.path().join(file.to_string()))?;
        for (blk, page) in bytes.chunks(8192).enumerate() {
            f.load_pg_class_page(db, blk as u32, page);
        }
    }
    Ok(f)
}

fn drill(c: &Cluster) -> Result<()> {
    let steps: Vec<String> = vec![
        "create type mood as enum ('sad', 'ok', 'happy')".into(),
        "create domain posint as int check (value > 0)".into(),
        "create sequence s1".into(),
        "create table t1 (id int primary key, v text, m mood, p posint, big text)".into(),
        format!(
            "insert into t1 select g, '{MARKER}' || g, 'ok', g, null from generate_series(1, 5000) g"
        ),
        format!("insert into t1 values (-1, 'toast', 'sad', 1, repeat('{MARKER}', 20000))"),
        "alter table t1 add column added int default 42".into(),
        "alter table t1 drop column p".into(),
        "alter table t1 rename column v to v2".into(),
        "create index t1_v2 on t1 (v2)".into(),
        format!("update t1 set v2 = v2 || '{MARKER}' where id % 3 = 0"),
        "delete from t1 where id % 5 = 0".into(),
        "analyze t1".into(),
        "vacuum full t1".into(),
        "create table parent (id int, k int) partition by range (k)".into(),
        "create table part1 partition of parent for values from (0) to (100)".into(),
        "create table part2 (id int, k int)".into(),
        "alter table parent attach partition part2 for values from (100) to (200)".into(),
        format!("insert into parent select g, g % 200 from generate_series(1, 3000) g"),
        "truncate part1".into(),
        "select nextval('s1') from generate_series(1, 50)".into(),
        "alter table t1 alter column added type bigint".into(),
        "cluster t1 using t1_pkey".into(),
        "vacuum full pg_constraint".into(),
        "vacuum full pg_class".into(),
        "reindex table pg_attribute".into(),
        "create table t2 as select * from t1".into(),
        "drop table t2".into(),
        format!("insert into t1 values (-2, '{MARKER}', 'happy', null, null)"),
        "create database d2".into(),
        // A segment's zeros after a switch, which the pipeline must not
        // hold (the second switch pads almost a whole segment).
        "select pg_switch_wal()".into(),
        "create table after_switch (id int)".into(),
        "select pg_switch_wal()".into(),
    ];
    for s in &steps {
        c.psql(s).with_context(|| format!("drill step: {s}"))?;
    }
    c.psql_db("d2", &format!(
        "create table in_d2 (id int primary key, v text); insert into in_d2 select g, '{MARKER}' from generate_series(1, 1000) g"
    ))?;
    c.psql("vacuum full t1")?;
    c.psql(&format!(
        "insert into t1 values (-3, '{MARKER}', 'ok', null, null)"
    ))?;
    Ok(())
}

/// (db, file) → class, from the source's catalog at the end.
fn truth(c: &Cluster) -> Result<HashMap<(Oid, Oid), FileClass>> {
    let mut out = HashMap::new();
    for db in ["postgres", "d2"] {
        let db_oid: Oid = c
            .query_one(&format!(
                "select oid from pg_database where datname = '{db}'"
            ))?
            .parse()?;
        let rows = c.psql_db(
            db,
            "select c.oid, n.nspname, c.relkind, c.relisshared, pg_relation_filenode(c.oid),
                    coalesce((select t.oid from pg_class t where t.reltoastrelid = c.oid), 0),
                    coalesce((select i.indrelid from pg_index i where i.indexrelid = c.oid), 0)
               from pg_class c join pg_namespace n on n.oid = c.relnamespace
              where pg_relation_filenode(c.oid) is not null",
        )?;
        let mut by_oid = HashMap::new();
        let mut parsed = Vec::new();
        for line in rows.lines() {
            let f: Vec<&str> = line.split('|').collect();
            let (oid, nsp, kind, shared, file, toast_of, index_of): (
                Oid,
                &str,
                &str,
                bool,
                Oid,
                Oid,
                Oid,
            ) = (
                f[0].parse()?,
                f[1],
                f[2],
                f[3] == "t",
                f[4].parse()?,
                f[5].parse()?,
                f[6].parse()?,
            );
            parsed.push((
                oid,
                nsp.to_owned(),
                kind.to_owned(),
                shared,
                file,
                toast_of,
                index_of,
            ));
        }
        let stats = [2619, 2696, 3429, 3433];
        let base_class = |oid: Oid, nsp: &str, kind: &str| {
            if kind == "S" {
                FileClass::Sequence
            } else if stats.contains(&oid) && kind == "i" {
                FileClass::StatisticsIndex
            } else if stats.contains(&oid) {
                FileClass::UserData
            } else if oid < 16384 || nsp == "pg_catalog" {
                FileClass::Catalog
            } else {
                FileClass::UserData
            }
        };
        for (oid, nsp, kind, ..) in &parsed {
            by_oid.insert(*oid, base_class(*oid, nsp, kind));
        }
        for (oid, nsp, kind, shared, file, toast_of, index_of) in &parsed {
            // TOAST tables follow their owner; a TOAST table's index its table.
            let mut class = base_class(*oid, nsp, kind);
            if nsp == "pg_toast" {
                let owner = if *toast_of != 0 { *toast_of } else { *index_of };
                let owner = parsed
                    .iter()
                    .find(|p| p.0 == owner && p.5 != 0)
                    .map(|p| p.5)
                    .unwrap_or(owner);
                class = by_oid.get(&owner).copied().unwrap_or(class);
                // The TOAST index of a statistics catalog is a statistics index.
                if class == FileClass::UserData && kind == "i" && stats.contains(&owner) {
                    class = FileClass::StatisticsIndex;
                }
            }
            out.insert((if *shared { 0 } else { db_oid }, *file), class);
        }
    }
    Ok(out)
}

/// The pipeline's input chunks, about a walsender message.
const CHUNK: usize = 100_000;

fn run(major: PgMajor) -> Result<()> {
    let c = Cluster::start(
        major,
        ClusterOptions::default()
            .wal_segment_size_mb(1)
            .conf("wal_keep_size", "2GB")
            .conf("autovacuum", "off"),
    )?;
    c.checkpoint()?;
    let start = c.insert_lsn()?;
    let filter = seed(&c, major)?;
    drill(&c)?;
    let end = c.insert_lsn()?;
    c.checkpoint()?;

    // Judge every record, and run the same bytes through the pipeline.
    let set = SegmentSet::scan(&[c.wal_dir()])?;
    let seg = set.segment_size();
    let seg_start = Lsn(start.0 - start.0 % u64::from(seg));
    let mut judge = filter.clone();
    let mut verdicts: Vec<Judged> = Vec::new();
    let mut records = set.records(1, Some(start), Some(end))?;
    while let Some(rec) = records.next_ref()? {
        let v = judge
            .process(&rec)
            .with_context(|| format!("record {}", rec.lsn))?;
        let files = rec
            .blocks
            .iter()
            .map(|b| (b.locator.db_oid, b.locator.rel_number))
            .collect();
        verdicts.push((rec.lsn, v, files));
    }
    // Records that waited for their files' class: decide them now.
    for (lsn, v, files) in verdicts.iter_mut() {
        if *v == Verdict::Undecided {
            let classes: Option<Vec<_>> = files
                .iter()
                .map(|(db, rel)| judge.class_of(*db, *rel))
                .collect();
            let classes = classes.with_context(|| format!("record {lsn} never decided"))?;
            *v = if classes.iter().all(|c| c.reaches_shadow()) {
                Verdict::Keep
            } else {
                Verdict::Noop
            };
        }
    }
    let truth = truth(&c)?;
    let mut checked = 0;
    for ((db, file), class) in &truth {
        if *db != 0 && *file >= 16384 {
            let got = judge.classes().file(*db, *file);
            ensure!(
                got == Some(*class),
                "file {db}/{file}: filter says {got:?}, the source's catalog {class:?}"
            );
            checked += 1;
        }
    }
    ensure!(checked > 20, "only {checked} files checked");
    let (mut kept_user, mut nooped_catalog, mut nooped) = (0, 0, 0);
    for (lsn, v, files) in &verdicts {
        for f in files {
            match (truth.get(f), v) {
                (Some(FileClass::UserData), Verdict::Keep) => {
                    kept_user += 1;
                    eprintln!("kept a user record at {lsn}: {f:?}");
                }
                (Some(FileClass::Catalog | FileClass::Sequence), Verdict::Noop) => {
                    nooped_catalog += 1;
                    eprintln!("rewrote a catalog record at {lsn}: {f:?}");
                }
                _ => {}
            }
        }
        if *v == Verdict::Noop {
            nooped += 1;
        }
    }
    ensure!(
        kept_user == 0 && nooped_catalog == 0,
        "{kept_user} user records kept, {nooped_catalog} catalog records rewritten"
    );
    ensure!(nooped > 1000, "only {nooped} records rewritten");

    // The pipeline over the raw bytes from the start's segment.
    let mut raw = Vec::new();
    let mut segno = seg_start.0 / u64::from(seg);
    while Lsn(segno * u64::from(seg)) < end {
        let name = walshadow_wal_reader::segments::segment_file_name(1, segno, seg);
        raw.extend(std::fs::read(c.wal_dir().join(name))?);
        segno += 1;
    }
    // Only WAL that was written: the stream never carries the zeros after it.
    raw.truncate(end.distance_from(seg_start) as usize);
    let mut pipe = FilterPipeline::new(filter, seg_start, seg)?;
    let mut filtered = Vec::new();
    let mut fed = seg_start;
    let mut most_held = 0;
    let mut switch_checkpoint = None;
    // Chunks that end at each segment's end, as well, so a checkpoint can
    // fall there.
    let seg_bytes = seg as usize;
    let chunks = raw.chunks(seg_bytes).flat_map(|s| s.chunks(CHUNK));
    for chunk in chunks {
        let (from, out) = pipe.push(fed, chunk)?;
        fed = Lsn(fed.0 + chunk.len() as u64);
        most_held = most_held.max(pipe.held());
        ensure!(
            from.0 == seg_start.0 + filtered.len() as u64,
            "released bytes not contiguous"
        );
        filtered.extend(out);
        // A checkpoint at the segment a switch ended (the zeros released):
        // where a restart resumes.
        if let Some(at) = pipe.checkpoint_lsn()
            && at.0 % u64::from(seg) == 0
            && at > seg_start
            && switch_checkpoint.is_none()
        {
            switch_checkpoint = Some((at, pipe.filter().clone()));
        }
    }
    ensure!(
        Lsn(seg_start.0 + filtered.len() as u64).align8() == end,
        "pipeline released up to {}, not {end} ({} undecided)",
        Lsn(seg_start.0 + filtered.len() as u64),
        pipe.undecided()
    );
    // Held: at most a chunk and the record it ends inside.
    ensure!(
        most_held < 4 * CHUNK,
        "the pipeline held {most_held} bytes at once (chunks of {CHUNK})"
    );
    // Resumed there, the pipeline releases the same bytes from there on.
    let (at, saved) = switch_checkpoint.context("no checkpoint at the switched segment's end")?;
    let mut resumed = FilterPipeline::resume(saved, at, seg)?;
    let page = FilterPipeline::resume_page(at);
    let from_page = page.distance_from(seg_start) as usize;
    let mut again = Vec::new();
    let mut fed = page;
    for chunk in raw.get(from_page..).unwrap_or_default().chunks(CHUNK) {
        let (from, out) = resumed.push(fed, chunk)?;
        fed = Lsn(fed.0 + chunk.len() as u64);
        ensure!(
            from.0 == at.0 + again.len() as u64,
            "resumed: released bytes not contiguous"
        );
        again.extend(out);
    }
    let skip = at.distance_from(seg_start) as usize;
    ensure!(
        filtered.get(skip..) == Some(&again[..]),
        "resumed at {at}, the pipeline released other bytes ({} vs {})",
        again.len(),
        filtered.len().saturating_sub(skip)
    );
    let marker = MARKER.as_bytes();
    ensure!(
        raw.windows(marker.len()).any(|w| w == marker),
        "the marker is not in the source WAL"
    );
    ensure!(
        !filtered.windows(marker.len()).any(|w| w == marker),
        "the marker survived filtering"
    );
    // Filtered WAL decodes record for record at the same LSNs.
    let mut d = WalStreamDecoder::new(seg_start, start, seg)?;
    d.feed(&filtered);
    let mut i = 0;
    while let Some(rec) = d.poll_ref()? {
        if rec.lsn >= end {
            break;
        }
        let (lsn, v, _) = &verdicts[i];
        ensure!(rec.lsn == *lsn, "record {i}: {} vs {lsn}", rec.lsn);
        let is_noop = rec.rmgr() == RmgrId::XLOG && rec.header.rmgr_info() == 0x20;
        ensure!(
            is_noop == (*v == Verdict::Noop),
            "record at {lsn}: NOOP {is_noop}, verdict {v:?}"
        );
        i += 1;
    }
    ensure!(
        i == verdicts.len(),
        "filtered WAL has {i} records, the source {}",
        verdicts.len()
    );
    eprintln!(
        "PostgreSQL {major}: {} records, {nooped} rewritten, {checked} files classified, {:?}",
        verdicts.len(),
        judge.stats()
    );
    Ok(())
}

per_major!(run => ddl_drill: pg15, pg16, pg17, pg18);
