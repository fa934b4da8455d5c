//! `walshadow wal dump`: records from segment files or a live source, as
//! JSON lines.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use walshadow_intake::{SourceSettings, WalSource};
use walshadow_types::{Lsn, PgMajor, TimeLineId};
use walshadow_wal_decode::{RecordSummary, WalStreamDecoder, XLOG_BLCKSZ};
use walshadow_wal_reader::replication::{ConnConfig, FollowEvent, ReplicationClient};
use walshadow_wal_reader::segments::SegmentSet;

#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// First record to print: the record at this LSN, or the first one after
    /// it (PostgreSQL's X/X form). Required with --source.
    #[arg(long, value_name = "LSN")]
    start: Option<Lsn>,
    /// Stop before the first record that starts at or after this LSN.
    #[arg(long, value_name = "LSN")]
    end: Option<Lsn>,
    /// Timeline to read. Files: default is the highest timeline holding the
    /// start. Live: default is the server's current timeline.
    #[arg(long, value_name = "TLI")]
    timeline: Option<TimeLineId>,
    /// Stream from this PostgreSQL server over physical replication instead
    /// of reading files, e.g. postgres://repl@db:5432/postgres?sslmode=require
    #[arg(long, value_name = "URL", conflicts_with = "paths")]
    source: Option<String>,
    /// Physical replication slot to stream from (live mode; optional).
    #[arg(long, value_name = "NAME", requires = "source")]
    slot: Option<String>,
    /// A walshadow config whose [backup] store's WAL archive serves what the
    /// source no longer has (live mode): the dump reads it from the
    /// archive, then from the source again, as `walshadow run` does.
    #[arg(long, value_name = "FILE", requires = "source")]
    config: Option<PathBuf>,
    /// Segment files or folders of them.
    #[arg(value_name = "PATH", required_unless_present_any = ["source", "rmgr"])]
    paths: Vec<PathBuf>,
    /// Only records of this resource manager, as pg_waldump names them
    /// (Heap, Heap2, Transaction, XLOG, Btree, …); repeat for several.
    /// `--rmgr list` prints the names.
    #[arg(long, value_name = "RMGR")]
    rmgr: Vec<String>,
    /// Only records that touch a block of this relation, as
    /// TABLESPACE/DATABASE/RELFILENODE (pg_waldump's -R).
    #[arg(long, value_name = "T/D/R")]
    relation: Option<RelationArg>,
    /// With --relation: only records touching this block.
    #[arg(long, value_name = "N", requires = "relation")]
    block: Option<u32>,
    /// Only records touching blocks of this fork (main, fsm, vm, init).
    #[arg(long, value_name = "FORK", value_parser = ["main", "fsm", "vm", "init"])]
    fork: Option<String>,
    /// Only records of this transaction (its own xid in the record).
    #[arg(long, value_name = "XID")]
    xid: Option<u32>,
}

/// `TABLESPACE/DATABASE/RELFILENODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RelationArg {
    spc: u32,
    db: u32,
    rel: u32,
}

impl std::str::FromStr for RelationArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split('/').collect();
        let n = |p: &str| p.parse::<u32>().map_err(|_| format!("{p:?} is not an OID"));
        match parts.as_slice() {
            [spc, db, rel] => Ok(RelationArg {
                spc: n(spc)?,
                db: n(db)?,
                rel: n(rel)?,
            }),
            _ => Err(format!(
                "{s:?}: expected TABLESPACE/DATABASE/RELFILENODE, e.g. 1663/5/16384"
            )),
        }
    }
}

/// Which records a dump prints (pg_waldump's filters: every one given must
/// match).
#[derive(Debug, Default)]
struct DumpFilter {
    rmgrs: Vec<String>,
    relation: Option<RelationArg>,
    block: Option<u32>,
    fork: Option<String>,
    xid: Option<u32>,
}

impl DumpFilter {
    fn of(args: &DumpArgs) -> anyhow::Result<DumpFilter> {
        for r in &args.rmgr {
            if !rmgr_names().any(|n| n.eq_ignore_ascii_case(r)) {
                bail!("--rmgr {r:?}: no such resource manager; `--rmgr list` prints the names");
            }
        }
        Ok(DumpFilter {
            rmgrs: args.rmgr.clone(),
            relation: args.relation,
            block: args.block,
            fork: args.fork.clone(),
            xid: args.xid,
        })
    }

    fn matches(&self, r: &RecordSummary) -> bool {
        if !self.rmgrs.is_empty() && !self.rmgrs.iter().any(|n| n.eq_ignore_ascii_case(r.rmgr)) {
            return false;
        }
        if self.xid.is_some_and(|x| x != r.xid) {
            return false;
        }
        if self.relation.is_none() && self.fork.is_none() {
            return true;
        }
        r.blocks.iter().any(|b| {
            self.relation
                .is_none_or(|t| (b.spc, b.db, b.rel) == (t.spc, t.db, t.rel))
                && self.block.is_none_or(|n| n == b.blk)
                && self.fork.as_deref().is_none_or(|f| f == b.fork)
        })
    }
}

/// The built-in resource managers' names.
fn rmgr_names() -> impl Iterator<Item = &'static str> {
    (0..=walshadow_wal_decode::RmgrId::MAX_BUILTIN).map(|i| walshadow_wal_decode::RmgrId(i).name())
}

pub fn run(args: DumpArgs) -> anyhow::Result<()> {
    if args.rmgr.iter().any(|r| r == "list") {
        let names: Vec<&str> = rmgr_names().collect();
        return crate::print_quietly(&format!("{}\n", names.join("\n")));
    }
    let filter = DumpFilter::of(&args)?;
    let stdout = std::io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let result = match &args.source {
        Some(url) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(dump_live(url, &args, &filter, &mut out))
        }
        None => dump_files(&args, &filter, &mut out),
    };
    match result.and_then(|()| out.flush().map_err(Into::into)) {
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn write_record(
    out: &mut impl Write,
    filter: &DumpFilter,
    summary: RecordSummary,
) -> anyhow::Result<()> {
    if filter.matches(&summary) {
        serde_json::to_writer(&mut *out, &summary)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn dump_files(args: &DumpArgs, filter: &DumpFilter, out: &mut impl Write) -> anyhow::Result<()> {
    let set = SegmentSet::scan(&args.paths)?;
    let tli = match args.timeline {
        Some(t) => t,
        None => set
            .default_timeline(args.start)
            .with_context(|| match args.start {
                Some(s) => format!("no segment file holds {s}"),
                None => "no segment files".to_owned(),
            })?,
    };
    let mut records = set.records(tli, args.start, args.end)?;
    let mut n: u64 = 0;
    while let Some(rec) = records.next_ref()? {
        let summary = RecordSummary::from(&rec);
        // The page magic read for it says the major.
        let major = records.decoder().major();
        write_record(out, filter, summary.with_kind(major))?;
        n += 1;
    }
    if let Some((at, reason)) = records.end_of_wal() {
        tracing::info!(records = n, "end of WAL at {at}: {reason}");
    }
    Ok(())
}

/// Streams from a live server: `START_REPLICATION` at the page holding
/// `--start`, on `--timeline` (default: the server's), following timeline
/// switches; prints records until `--end` (or forever).
async fn dump_live(
    url: &str,
    args: &DumpArgs,
    filter: &DumpFilter,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let Some(start) = args.start else {
        bail!(
            "--start LSN is required with --source (e.g. the output of SELECT pg_current_wal_lsn())"
        );
    };
    let config = ConnConfig::from_url(url)?;
    let mut client = ReplicationClient::connect(&config)
        .await
        .with_context(|| format!("connecting to {}", config.target()))?;
    let ident = client.identify_system().await?;
    let seg_text = client.show("wal_segment_size").await?;
    let seg_size = walshadow_shadow::bootstrap::source::parse_size(&seg_text)
        .with_context(|| format!("the source's wal_segment_size {seg_text:?} is not a size"))?;
    let timeline = args.timeline.unwrap_or(ident.timeline);
    tracing::info!(
        system = ident.systemid,
        timeline,
        server_wal_end = %ident.xlogpos,
        "streaming from {}",
        config.target()
    );
    // Start at the page holding `start`, so the decoder finds the record
    // boundaries itself whatever `start` points at.
    let feed_start = Lsn(start.0 - start.0 % u64::from(XLOG_BLCKSZ));
    let mut decoder = WalStreamDecoder::new(feed_start, start, seg_size)?;
    decoder.expect_system_id(ident.systemid);
    let archive = match &args.config {
        Some(path) => {
            let config = walshadow_config::Config::load(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let settings = config.backup.as_ref().with_context(|| {
                format!(
                    "{} has no [backup] section: add the store the source archives its WAL to",
                    path.display()
                )
            })?;
            Some(std::sync::Arc::new(walshadow_pipeline::backup_admin::open(
                settings,
            )?))
        }
        None => None,
    };
    let version = client
        .server_param("server_version")
        .unwrap_or_default()
        .to_owned();
    let major = version
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .map(PgMajor::from_number)
        .with_context(|| format!("the source's server_version {version:?}"))??;
    client.close().await;
    let source = SourceSettings {
        conn: config,
        slot: args.slot.clone(),
        manage_slot: false,
        system_id: ident.systemid,
        major,
        seg_size,
        archive,
        turns: None,
        remedy_without_archive: "pass --config with a [backup] section naming the store the \
                                 source archives its WAL to, or dump the archive's segment files",
    };
    let mut follower = WalSource::start(source, feed_start, timeline).await?;
    let mut flushed = feed_start;
    'stream: loop {
        match follower.next().await? {
            FollowEvent::Wal { start, data, .. } => {
                decoder.feed_at(start, &data)?;
                while let Some(rec) = decoder.poll_ref()? {
                    if args.end.is_some_and(|e| rec.lsn >= e) {
                        break 'stream;
                    }
                    write_record(
                        out,
                        filter,
                        RecordSummary::from(&rec).with_kind(Some(major)),
                    )?;
                    flushed = rec.end;
                }
                out.flush()?;
                // A slot may release what has been printed.
                follower.set_positions(flushed, flushed, flushed);
            }
            FollowEvent::TimelineSwitch {
                from,
                to,
                switch_lsn,
                ..
            } => {
                tracing::info!("timeline {from} ended at {switch_lsn}; following timeline {to}");
            }
            FollowEvent::ServerWalEnd(_) => {}
        }
    }
    follower.send_status().await.ok();
    Ok(())
}
