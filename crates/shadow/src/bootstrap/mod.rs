//! `walshadow init`: from an empty state to a shadow ready to replay.
//!
//! ```text
//!  checks (major of source and pg_bin, wal_level, REPLICATION,
//!          max_wal_senders, full_page_writes)
//!    └─▶ physical slot (RESERVE_WAL), before the backup: WAL from its
//!        start on is kept
//!        └─▶ catalog classes per database (SQL, pg_relation_filenode)
//!            └─▶ BASE_BACKUP ─▶ landing: control files, every catalog file;
//!                │               user files never touch disk ([`landing`])
//!                │  └─ --bootstrap: the same stream (with its WAL) tee'd to
//!                │     the selected tables' files ([`kept`])
//!                └─▶ re-list classes: a catalog rewritten into a file the
//!                    landing skipped (or a selected table's file moved)
//!                    means retry on fresh lists
//!                    └─▶ seed for the filter ([`seed`]), shadow
//!                        configuration ([`shadow_conf`]), ownership,
//!                        init.json last
//! ```
//!
//! Idempotent: `init.json` is written last (write-temp, fsync, rename), so
//! its presence means a complete init and a second `init` changes nothing.
//! `<state>/init.partial` marks an init under way: it names a data
//! directory walshadow itself was filling, which a later `init` may clear
//! without `--force`. `walshadow run` starts the shadow and feeds it; `init`
//! only prepares.

pub mod kept;
pub mod landing;
pub mod page;
pub mod seed;
pub mod shadow_conf;
pub mod source;
pub mod state;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use walshadow_state_file::StateFile;

use walshadow_config::Config;
use walshadow_types::Oid;
use walshadow_wal_reader::replication::{BaseBackupOptions, Checkpoint, ReplicationError};

pub use seed::load_seed;
pub use state::{InitState, StateFileError};

use crate::process::{ProcessError, ServerUser};
use landing::Landing;
use source::ClassList;

/// Backups attempted before a catalog that keeps being rewritten under the
/// backup is reported.
const BACKUP_ATTEMPTS: usize = 3;
const PARTIAL_MARKER: &str = "init.partial";
const SHADOW_SOCKET_DIR: &str = "shadow-socket";
const FEEDER_DIR: &str = "feeder";

/// Why `init` stopped. `Requirement` and `NotOurs` are definite (fix the
/// named setting or path); `Source` errors from the network may pass on a
/// retry.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("source requirement {setting}: {problem}. Fix: {fix}")]
    Requirement {
        setting: &'static str,
        problem: String,
        fix: String,
    },
    #[error("{what}: {source}")]
    Source {
        what: String,
        source: ReplicationError,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(
        "{setting} {path} is not empty and walshadow did not fill it (no init.json in the state dir); \
         point {setting} at an empty or missing directory, or pass --force to delete its contents"
    )]
    NotOurs {
        setting: &'static str,
        path: PathBuf,
    },
    #[error(
        "[shadow] data_dir {0} belongs to a running PostgreSQL (postmaster.pid, pid {1}); stop `walshadow run` first"
    )]
    ShadowRunning(PathBuf, u32),
    #[error(
        "catalog files were rewritten during each of {attempts} base backups (last: {files}); \
         retry `walshadow init` when no VACUUM FULL/CLUSTER/REINDEX of catalogs runs"
    )]
    CatalogKeptMoving { attempts: usize, files: String },
    #[error(
        "the files of tables init --bootstrap loads were rewritten (TRUNCATE, VACUUM FULL, \
         CLUSTER) or created during each of {attempts} base backups (last: {tables}); retry \
         `walshadow init --bootstrap` when they are not, or init without --bootstrap and load \
         them with initial_load = 'copy'"
    )]
    SelectedKeptMoving { attempts: usize, tables: String },
    #[error("state file: {0}")]
    State(#[from] StateFileError),
    #[error(transparent)]
    Locked(#[from] crate::state_lock::StateLockError),
    #[error("filter seed {path}: {problem}")]
    Seed { path: PathBuf, problem: String },
}

impl InitError {
    fn source(what: &str, source: ReplicationError) -> InitError {
        InitError::Source {
            what: what.to_owned(),
            source,
        }
    }

    /// Whether running `init` again unchanged may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            InitError::Source { .. }
                | InitError::CatalogKeptMoving { .. }
                | InitError::SelectedKeptMoving { .. }
        )
    }
}

/// What one backup contributed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupFigures {
    pub attempts: usize,
    pub bytes_streamed: u64,
    pub bytes_landed: u64,
    pub files_kept: u64,
    pub files_skipped: u64,
    /// Statistics-catalog files landed empty.
    pub stats_files_emptied: u64,
    /// Size of the shadow's data directory after init.
    pub data_dir_bytes: u64,
    /// `--bootstrap`: the tables loaded from this backup at the first
    /// `run`, and what was kept for them.
    pub bootstrap: Option<(Vec<String>, kept::KeptStats)>,
}

/// What `init` did (or found already done).
#[derive(Debug, Clone)]
pub struct InitReport {
    /// `true`: a complete init was there; nothing was changed.
    pub already_initialised: bool,
    pub state: InitState,
    /// `None` when already initialised.
    pub backup: Option<BackupFigures>,
    pub slot_created: bool,
    pub warnings: Vec<String>,
    pub duration: Duration,
}

impl fmt::Display for InitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.state;
        if self.already_initialised {
            writeln!(
                f,
                "already initialised (system {}, PostgreSQL {}, backup {}..{}); nothing changed. \
                 Use --force to rebuild.",
                s.system_id, s.major, s.backup_start, s.backup_end
            )?;
            return Ok(());
        }
        writeln!(f, "initialised in {:.1?}", self.duration)?;
        writeln!(f, "  system id     {}", s.system_id)?;
        writeln!(f, "  PostgreSQL    {} ({})", s.major, s.server_version)?;
        writeln!(f, "  timeline      {}", s.timeline)?;
        writeln!(f, "  backup        {} .. {}", s.backup_start, s.backup_end)?;
        writeln!(
            f,
            "  slot          {}{}",
            s.slot,
            if self.slot_created {
                " (created)"
            } else {
                " (reused)"
            }
        )?;
        if let Some(b) = &self.backup {
            writeln!(f, "  attempts      {}", b.attempts)?;
            writeln!(f, "  streamed      {} bytes", b.bytes_streamed)?;
            writeln!(f, "  landed        {} bytes", b.bytes_landed)?;
            writeln!(
                f,
                "  members       {} kept, {} skipped ({} statistics files emptied)",
                b.files_kept, b.files_skipped, b.stats_files_emptied
            )?;
            writeln!(f, "  shadow size   {} bytes", b.data_dir_bytes)?;
            if let Some((tables, k)) = &b.bootstrap {
                writeln!(
                    f,
                    "  bootstrap     {} tables ({}), {} files and {} WAL segments kept ({} bytes); \
                     `walshadow run` loads them from it",
                    tables.len(),
                    tables.join(", "),
                    k.files,
                    k.wal_segments,
                    k.bytes
                )?;
            }
        }
        writeln!(
            f,
            "  shadow port   {} (socket only), feeder port {}",
            s.shadow_port, s.feeder_port
        )?;
        for w in &self.warnings {
            writeln!(f, "  warning: {w}")?;
        }
        Ok(())
    }
}

/// Each followed database's config table (`None`: the url's database).
fn config_tables(config: &Config) -> Result<Vec<(Option<String>, String)>, InitError> {
    let mut out = vec![(None, config.source.config_table.clone())];
    let url_db = source::sql_config(&config.source.url, None)?.database();
    // With "*", each database's is made when its stream first starts.
    let listed = config
        .source
        .databases
        .iter()
        .filter(|d| *d != walshadow_config::EVERY_DATABASE);
    for db in listed {
        let view = config
            .database_view(db, &url_db)
            .map_err(|e| InitError::Requirement {
                setting: "[source] databases",
                problem: e.to_string(),
                fix: "fix the config file".into(),
            })?;
        if *db == url_db {
            out[0].1 = view.source.config_table;
        } else {
            out.push((Some(db.clone()), view.source.config_table));
        }
    }
    Ok(out)
}

fn io_err(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InitError {
    let path = path.to_owned();
    move |source| InitError::Io { what, path, source }
}

/// Empty but for the state lock (taken before this check).
fn dir_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |d| {
        d.flatten()
            .all(|e| e.file_name() == crate::state_lock::LOCK_FILE)
    })
}

/// Removes everything inside `dir` (not `dir` itself) but the state lock,
/// which this process holds.
fn clear_dir(dir: &Path) -> Result<(), InitError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("listing", dir)(e)),
    };
    for entry in entries {
        let p = entry.map_err(io_err("listing", dir))?.path();
        if p.file_name() == Some(std::ffi::OsStr::new(crate::state_lock::LOCK_FILE)) {
            continue;
        }
        let meta = std::fs::symlink_metadata(&p).map_err(io_err("inspecting", &p))?;
        if meta.is_dir() {
            std::fs::remove_dir_all(&p).map_err(io_err("removing", &p))?;
        } else {
            std::fs::remove_file(&p).map_err(io_err("removing", &p))?;
        }
    }
    Ok(())
}

/// Bytes in regular files under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) if m.is_file() => m.len(),
            _ => 0,
        })
        .sum()
}

/// The pid in `data_dir/postmaster.pid` when that process is alive.
fn running_postmaster(data_dir: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

fn free_port(avoid: u16) -> Result<u16, InitError> {
    for _ in 0..16 {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0))
            .map_err(io_err("binding a port on", Path::new("127.0.0.1")))?;
        let port = l
            .local_addr()
            .map_err(io_err("binding", Path::new("127.0.0.1")))?
            .port();
        if port != avoid {
            return Ok(port);
        }
    }
    Ok(avoid.wrapping_add(1).max(1024))
}

/// Creates `dir` (and parents) as a private directory.
fn private_dir(dir: &Path, mode: u32) -> Result<(), InitError> {
    crate::process::private_dir(dir, mode).map_err(io_err("creating", dir))
}

/// Runs `walshadow init` (see the module doc); with `bootstrap`, the same
/// backup also keeps the selected tables' files for their load.
pub async fn init(config: &Config, force: bool, bootstrap: bool) -> Result<InitReport, InitError> {
    let started = Instant::now();
    let state_dir = &config.state.dir;
    let data_dir = &config.shadow.data_dir;
    let user = ServerUser::resolve(config.shadow.run_as.as_deref())?;
    crate::run::warn_about_transport(config);

    if !force && state_dir.join(InitState::FILE).exists() {
        let state = InitState::read_present(state_dir)?;
        return Ok(InitReport {
            already_initialised: true,
            state,
            backup: None,
            slot_created: false,
            warnings: Vec::new(),
            duration: started.elapsed(),
        });
    }
    // Before anything is touched: a `run` on this state directory refuses
    // us here, not halfway through.
    let _lock = crate::state_lock::StateLock::acquire(state_dir, "init")?;
    if let Some(pid) = running_postmaster(data_dir) {
        return Err(InitError::ShadowRunning(data_dir.clone(), pid));
    }
    let ours = state_dir.join(PARTIAL_MARKER).exists();
    if !force && !ours {
        for (setting, dir) in [("[shadow] data_dir", data_dir), ("[state] dir", state_dir)] {
            if !dir_is_empty(dir) {
                return Err(InitError::NotOurs {
                    setting,
                    path: dir.clone(),
                });
            }
        }
    }

    let facts = source::check(&config.source.url, &config.shadow.pg_bin).await?;
    let mut repl = source::replication(&config.source.url).await?;
    let ident = repl
        .identify_system()
        .await
        .map_err(|e| InitError::source("IDENTIFY_SYSTEM", e))?;
    let seg_text = repl
        .show("wal_segment_size")
        .await
        .map_err(|e| InitError::source("SHOW wal_segment_size", e))?;
    let segment_size = source::parse_size(&seg_text).ok_or_else(|| InitError::Requirement {
        setting: "wal_segment_size",
        problem: format!("the source reports {seg_text:?}, not a size"),
        fix: "report this as a walshadow bug".into(),
    })?;
    let server_version = repl
        .server_param("server_version")
        .map(str::to_owned)
        .unwrap_or_default();

    // From here on the state and data directories are walshadow's.
    private_dir(state_dir, if user.switch { 0o711 } else { 0o700 })?;
    clear_dir(state_dir)?;
    std::fs::write(
        state_dir.join(PARTIAL_MARKER),
        data_dir.display().to_string(),
    )
    .map_err(io_err("writing", &state_dir.join(PARTIAL_MARKER)))?;

    let slot = &config.source.slot;
    let slot_created = match repl
        .read_replication_slot(slot)
        .await
        .map_err(|e| InitError::source("READ_REPLICATION_SLOT", e))?
    {
        None => {
            repl.create_physical_slot(slot, true)
                .await
                .map_err(|e| InitError::source("creating the physical slot ([source] slot)", e))?;
            tracing::info!(slot, "physical slot created");
            true
        }
        Some(info) if info.slot_type != "physical" => {
            return Err(InitError::Requirement {
                setting: "[source] slot",
                problem: format!("slot {slot:?} exists and is {}", info.slot_type),
                fix: "name a physical slot, or a new name for walshadow to create".into(),
            });
        }
        Some(info) if info.restart_lsn.is_none() => {
            return Err(InitError::Requirement {
                setting: "[source] slot",
                problem: format!(
                    "physical slot {slot:?} exists but reserves no WAL (restart_lsn is NULL)"
                ),
                fix: format!(
                    "SELECT pg_drop_replication_slot('{slot}') and let walshadow create it with RESERVE_WAL"
                ),
            });
        }
        Some(_) => false,
    };

    let mut warnings = Vec::new();
    // Before the backup, so the shadow's catalog has it from the start.
    for (db, table) in config_tables(config)? {
        match source::ensure_config_table(&config.source.url, db.as_deref(), &table).await {
            Ok(()) => {
                tracing::info!(%table, database = db.as_deref().unwrap_or(""), "config table ready (rows there opt tables in and out)")
            }
            Err(source::ConfigTableProblem::NotCreated(e)) => warnings.push(format!(
                "the config table {table}{} could not be created: {e}",
                db.as_ref()
                    .map(|d| format!(" of database {d:?}"))
                    .unwrap_or_default()
            )),
            Err(source::ConfigTableProblem::NotOurs(problem)) => {
                return Err(InitError::Requirement {
                    setting: "[source] config_table",
                    problem,
                    fix: "give the config table and its schema to walshadow's role, or name \
                          another config table"
                        .into(),
                });
            }
        }
    }
    let opts = BaseBackupOptions {
        label: "walshadow init".into(),
        checkpoint: Checkpoint::Fast,
        // The bootstrap's window, redo to end, for its load's replay.
        wal: bootstrap,
        manifest: false,
        // The server reads every file, user data included; a bad checksum in
        // a user page walshadow discards must not stop init.
        verify_checksums: false,
        ..BaseBackupOptions::default()
    };
    let mut attempts = 0;
    let (result, landing_stats, db_dirs, after, kept, xid_horizon) = loop {
        attempts += 1;
        if let Some(pid) = running_postmaster(data_dir) {
            return Err(InitError::ShadowRunning(data_dir.clone(), pid));
        }
        private_dir(data_dir, 0o700)?;
        clear_dir(data_dir)?;
        let selected = if bootstrap {
            kept::clear(state_dir)?;
            Some(kept::select(config).await?)
        } else {
            None
        };
        let before = source::list_classes(&config.source.url).await?;
        let mut landing = Landing::new(data_dir, &before, facts.data_checksums);
        let (result, kept_backup) = match &selected {
            Some(sel) => {
                let mut tee = walshadow_wal_reader::replication::BackupTee::new(
                    landing,
                    kept::KeptBackup::new(&state_dir.join(kept::DIR), sel),
                );
                let result = repl.base_backup(&opts, &mut tee).await;
                let (l, k) = tee.into_inner();
                landing = l;
                (result, Some(k))
            }
            None => (repl.base_backup(&opts, &mut landing).await, None),
        };
        let result = result.map_err(|e| InitError::source("BASE_BACKUP", e))?;
        let xid_horizon = source::next_xid8(&config.source.url).await?;
        let after = source::list_classes(&config.source.url).await?;
        let moved = landing.skipped_catalogs(&after);
        // A selected table rewritten (or made) during the backup: its kept
        // file is not the one it is on.
        let mut selected_moved = String::new();
        if let Some(sel) = &selected {
            let now = kept::select(config).await?;
            if now.files != sel.files || now.tables != sel.tables {
                let all: BTreeSet<&String> = now.tables.iter().chain(&sel.tables).collect();
                selected_moved = all.into_iter().cloned().collect::<Vec<_>>().join(", ");
            }
        }
        if !selected_moved.is_empty() {
            if attempts >= BACKUP_ATTEMPTS {
                return Err(InitError::SelectedKeptMoving {
                    attempts,
                    tables: selected_moved,
                });
            }
            tracing::warn!(tables = %selected_moved, attempt = attempts, "a table init --bootstrap loads was rewritten or made during the base backup; retrying");
            continue;
        }
        if moved.is_empty() {
            for (db, name) in &landing.unlisted_skipped {
                let w = format!(
                    "database {} (oid {db}) allows no connections: its file {name} is not initdb's and was skipped as user data",
                    database_name(&after, *db)
                );
                tracing::warn!("{w}");
                warnings.push(w);
            }
            let stats = landing.stats;
            let dirs = std::mem::take(&mut landing.db_dirs);
            if let Some(k) = &kept_backup {
                k.sync_dirs()?;
            }
            let kept = selected.zip(kept_backup);
            break (result, stats, dirs, after, kept, xid_horizon);
        }
        let files = moved
            .iter()
            .map(|(db, f)| format!("{db}/{f}"))
            .collect::<Vec<_>>()
            .join(", ");
        if attempts >= BACKUP_ATTEMPTS {
            return Err(InitError::CatalogKeptMoving { attempts, files });
        }
        tracing::warn!(
            files,
            attempt = attempts,
            "catalog rewritten during the base backup; retrying"
        );
    };
    repl.close().await;

    seed::write_seed(state_dir, data_dir, &db_dirs, &after)?;

    let shadow_socket = state_dir.join(SHADOW_SOCKET_DIR);
    let feeder_dir = state_dir.join(FEEDER_DIR);
    let shadow_port = free_port(0)?;
    let feeder_port = free_port(shadow_port)?;
    shadow_conf::ShadowConf {
        socket_dir: &shadow_socket,
        port: shadow_port,
        standby_minimums: &facts.standby_minimums,
        segment_size,
    }
    .write(data_dir)?;
    let role = walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
        .map(|c| c.user)
        .unwrap_or_default();
    shadow_conf::ShadowAccess {
        os_user: &crate::process::os_user_name(),
        role: &role,
        feeder_dir: &feeder_dir,
        feeder_port,
        feeder_password: None,
    }
    .write(data_dir)
    .map_err(io_err("writing the access files of", data_dir))?;
    private_dir(&shadow_socket, 0o700)?;
    user.own_recursive(&shadow_socket)?;
    private_dir(data_dir, 0o700)?;
    user.own_recursive(data_dir)?;
    let data_dir_bytes = dir_size(data_dir);

    let state = InitState {
        format_version: InitState::FORMAT_VERSION,
        system_id: ident.systemid,
        major: facts.major.number(),
        server_version,
        timeline: result.start_tli,
        segment_size,
        backup_start: result.start_lsn,
        backup_end: result.end_lsn,
        slot: slot.clone(),
        shadow_port,
        feeder_port,
        database: walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
            .ok()
            .map(|c| c.database()),
        xid_horizon,
    };
    if let Some((sel, k)) = &kept {
        if sel.tables.is_empty() {
            let w = "init --bootstrap: no table is selected with an initial_load other than none \
                     (a [table] pin or pattern in the config file, or a config-table row that opts the table in): \
                     nothing is loaded from the backup"
                .to_owned();
            tracing::warn!("{w}");
            warnings.push(w);
            kept::clear(state_dir)?;
        } else {
            let manifest = walshadow_types::landed::LandedManifest {
                label: format!("walshadow bootstrap {}", result.start_lsn),
                start_lsn: result.start_lsn,
                stop_lsn: result.end_lsn,
                timeline: result.start_tli,
                system_id: ident.systemid,
                pg_version: facts.major.number().to_string(),
                segment_size,
                ended_unix: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs()),
                tables: sel.tables.clone(),
                files: k.kept.clone(),
            };
            let dir = state_dir.join(kept::DIR);
            let text = serde_json::to_vec_pretty(&manifest).map_err(|e| InitError::Seed {
                path: dir.join(walshadow_types::landed::MANIFEST),
                problem: e.to_string(),
            })?;
            // Written last: its presence means the landing is whole.
            walshadow_state_file::write_durably(&dir, walshadow_types::landed::MANIFEST, &text)
                .map_err(io_err("writing the bootstrap manifest in", &dir))?;
            tracing::info!(tables = %sel.tables.join(", "), "init --bootstrap: the tables' files and the backup's WAL are kept; `walshadow run` loads them");
        }
    }
    state.write(state_dir)?;
    let marker = state_dir.join(PARTIAL_MARKER);
    std::fs::remove_file(&marker).map_err(io_err("removing", &marker))?;
    let report = InitReport {
        already_initialised: false,
        state,
        backup: Some(BackupFigures {
            attempts,
            bytes_streamed: result.bytes_streamed,
            bytes_landed: landing_stats.bytes_landed,
            files_kept: landing_stats.files_kept,
            files_skipped: landing_stats.files_skipped,
            stats_files_emptied: landing_stats.stats_files_emptied,
            data_dir_bytes,
            bootstrap: kept.map(|(sel, k)| (sel.tables, k.stats)),
        }),
        slot_created,
        warnings,
        duration: started.elapsed(),
    };
    tracing::info!(
        system_id = report.state.system_id,
        backup_start = %report.state.backup_start,
        backup_end = %report.state.backup_end,
        data_dir_bytes,
        "init complete"
    );
    Ok(report)
}

fn database_name(list: &ClassList, db: Oid) -> String {
    list.databases
        .iter()
        .find(|d| d.oid == db)
        .map_or_else(|| "?".into(), |d| format!("{:?}", d.name))
}
