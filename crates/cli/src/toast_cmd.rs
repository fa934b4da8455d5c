//! `walshadow toast`: the TOAST chunk mirror while the daemon is stopped
//! (the running daemon holds the mirror's file; `walshadow status` shows
//! its figures then).

use std::path::PathBuf;
use walshadow_pipeline::progress::StateFile;

use anyhow::Context;
use walshadow_config::Config;
use walshadow_pipeline::progress::Progress;
use walshadow_pipeline::toast::MIRROR_FILE;
use walshadow_shadow::state_lock::StateLock;
use walshadow_toast_mirror::ChunkMirror;
use walshadow_types::Lsn;

#[derive(Debug, clap::Args)]
pub struct ToastArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The mirror, with the state directory locked for as long as it is open
/// (a `run` on it is refused meanwhile, and it refuses us).
fn open(config: &Config, command: &str) -> anyhow::Result<(ChunkMirror, Lsn, StateLock)> {
    let lock = StateLock::acquire(&config.state.dir, command)?;
    let path = config.state.dir.join(MIRROR_FILE);
    if !path.exists() {
        anyhow::bail!(
            "no TOAST chunk mirror at {} (has walshadow run streamed yet?)",
            path.display()
        );
    }
    let mirror = ChunkMirror::open(&path, config.stream.toast_cache_mb).with_context(|| {
        format!(
            "opening the TOAST chunk mirror {} (stop `walshadow run` first: it holds the file)",
            path.display()
        )
    })?;
    let applied = Progress::read(&config.state.dir)?.map_or(Lsn::INVALID, |p| p.applied);
    Ok((mirror, applied, lock))
}

fn print(mirror: &ChunkMirror, json: bool) -> anyhow::Result<()> {
    let s = mirror.stats();
    let mut relations = serde_json::Map::new();
    for relid in mirror.relations()? {
        relations.insert(relid.to_string(), mirror.value_ids(relid)?.len().into());
    }
    if json {
        let v = serde_json::json!({
            "values": s.values,
            "chunks": s.chunks,
            "data_bytes": s.data_bytes,
            "file_bytes": s.file_bytes,
            "pending": s.pending,
            "values_by_toast_relation": relations,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} values, {} chunks, {} bytes of chunk data; file {} bytes; {} deletions pending",
            s.values, s.chunks, s.data_bytes, s.file_bytes, s.pending
        );
        for (relid, n) in relations {
            println!("  TOAST relation {relid}: {n} values");
        }
    }
    Ok(())
}

/// `walshadow toast stats`.
pub fn stats(args: ToastArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let (mirror, _, _lock) = open(&config, "toast stats")?;
    print(&mirror, args.json)
}

/// `walshadow toast compact`: runs the deletions progress allows, then
/// gives the file's free pages back.
pub fn compact(args: ToastArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let (mut mirror, applied, _lock) = open(&config, "toast compact")?;
    let (before, after) = mirror.compact(applied)?;
    if !args.json {
        println!("compacted: file {before} -> {after} bytes");
    }
    print(&mirror, args.json)
}
