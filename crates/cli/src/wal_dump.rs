//! `walshadow wal dump`: records from segment files or a live source, as
//! JSON lines.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use walshadow_types::{Lsn, TimeLineId};
use walshadow_wal_decode::{RecordSummary, WalRecord};
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
    /// Segment files or folders of them.
    #[arg(value_name = "PATH", required_unless_present = "source")]
    paths: Vec<PathBuf>,
}

pub fn run(args: DumpArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout().lock();
    let mut out = BufWriter::with_capacity(1 << 16, stdout);
    let result = if args.source.is_some() {
        bail!("--source: live dumping is not wired yet")
    } else {
        dump_files(&args, &mut out)
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

pub fn write_record(out: &mut impl Write, rec: &WalRecord) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, &RecordSummary::from(rec))?;
    out.write_all(b"\n")?;
    Ok(())
}

fn dump_files(args: &DumpArgs, out: &mut impl Write) -> anyhow::Result<()> {
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
    for rec in records.by_ref() {
        let rec = rec?;
        write_record(out, &rec)?;
        n += 1;
    }
    if let Some((at, reason)) = records.end_of_wal() {
        tracing::info!(records = n, "end of WAL at {at}: {reason}");
    }
    Ok(())
}
