//! The `walshadow` binary: parses the command line and wires the library
//! crates together. No processing logic lives here.

mod backup_cmd;
mod catalog_cmd;
mod ctl_cmd;
mod shadow_cmd;
mod table_cmd;
mod teardown_cmd;
mod toast_cmd;
mod verify_cmd;
mod wal_dump;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// walshadow replicates PostgreSQL tables into ClickHouse by decoding the
/// source's physical WAL itself: no logical slot, no publication, no output
/// plugin on the source.
#[derive(Debug, Parser)]
#[command(name = "walshadow", version, about, long_about = None)]
struct Cli {
    /// How log events are written to stderr: `text` (one line each on a
    /// file or journald, values escaped), or `json`, one JSON object per
    /// line (timestamp, level, target, fields) for a log shipper.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "WALSHADOW_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Prepare a shadow: check the source, create the physical slot, take a
    /// base backup and land only the catalog (user files never touch disk),
    /// and write the shadow's configuration. Does nothing on an initialised
    /// state unless --force.
    Init(shadow_cmd::InitArgs),
    /// Run: start the shadow and keep it fed with the source's WAL (user
    /// data filtered out), and stream the pinned tables ([table."s.t"]) into
    /// ClickHouse, until interrupted (Ctrl-C / SIGTERM drain cleanly:
    /// buffered rows are flushed and progress recorded).
    Run(shadow_cmd::RunArgs),
    /// Show where streaming stands: positions (received, decoded, applied,
    /// slot flush), lag in bytes and seconds, and per-table row counts and
    /// stopped tables with the reason and remedy.
    Status(shadow_cmd::StatusArgs),
    /// Control a running `walshadow run` over its socket in the state
    /// directory (owner only): its live status, pause and resume the
    /// stream, reload the config file.
    Ctl(ctl_cmd::CtlArgs),
    /// Read relation descriptors from the shadow's catalog.
    #[command(subcommand)]
    Catalog(CatalogCommand),
    // No doc comment here: it would replace ExportArgs' own, which names
    // what the export leaves out.
    ExportSchema(catalog_cmd::ExportArgs),
    /// Inspect WAL.
    #[command(subcommand)]
    Wal(WalCommand),
    /// The tables in scope: list them, or load one again (the way back
    /// for a stopped table).
    #[command(subcommand)]
    Table(TableCommand),
    /// The TOAST chunk mirror (`<state dir>/toast-mirror.redb`), while
    /// `walshadow run` is stopped.
    #[command(subcommand)]
    Toast(ToastCommand),
    /// The backup store of [backup] (a pgBackRest repository, a
    /// barman-cloud store on S3, or a wal-g store): its backups and WAL
    /// archive. Reads only.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// Compare each table at the source with its ClickHouse table, key by
    /// key, at one source position: the rows are copied at a snapshot
    /// into `<destination>__wsverify` (as a load writes them), and once
    /// `run` has applied up to the snapshot, ClickHouse compares each key
    /// with the destination's latest version. Keys changed since the
    /// snapshot are counted, not compared; differences are checked again
    /// with a new snapshot, then printed (missing, extra, differing, with
    /// the columns). Needs `walshadow run` running. Exits non-zero when a
    /// table differs or could not be verified.
    Verify(verify_cmd::VerifyArgs),
    /// Drop what `init` made on the source: the physical slot (the source
    /// stops keeping WAL for walshadow) and, with --drop-config-table, the
    /// config table. Then init.json goes, so nothing starts on what is
    /// left. Refused while `walshadow run` runs; without --yes, says what
    /// it would do. The state and shadow directories and the ClickHouse
    /// tables stay (listed).
    Teardown(teardown_cmd::TeardownArgs),
    /// Print a shell completion script: `walshadow completions bash >
    /// /etc/bash_completion.d/walshadow` (zsh: into a directory of
    /// `$fpath` as `_walshadow`; fish: `~/.config/fish/completions/`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), made from this command line's own
    /// definition: `walshadow man > /usr/share/man/man1/walshadow.1`; with
    /// --dir, write one page per command there.
    Man {
        /// Write walshadow.1 and a page per subcommand
        /// (walshadow-run.1, …) into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum BackupCommand {
    /// Every backup in the store, oldest first: name, type, start (redo)
    /// and stop LSNs, timeline, size, and whether it can serve a load as
    /// far as the store tells (it finished and reads; its first and last
    /// WAL segments are archived).
    List(backup_cmd::BackupArgs),
    /// Check the chosen backup ([backup] backup, default latest: the one
    /// `initial_load = 'object_store'` loads from) against
    /// the store and the source: the same cluster and major, on the
    /// source's timeline branch with the history file of every newer
    /// timeline archived, and the archive continuous from the backup's
    /// start to its newest segment (segments the source has not archived
    /// yet are counted, not a problem). Asks the source over replication
    /// only, no SQL. Exits non-zero on a problem, each printed with its
    /// remedy.
    Check(backup_cmd::BackupArgs),
}

#[derive(Debug, Subcommand)]
enum TableCommand {
    /// Every table in scope: its state (streaming, loading, resyncing,
    /// waiting, stopped with reason and remedy, opted out), destination,
    /// rows streamed and rows loaded. Reads the state directory; works
    /// whether or not `walshadow run` is running.
    List(table_cmd::ListArgs),
    /// Load a table again and swap it in: from the request's commit S the
    /// table streams into a new ClickHouse table made from the catalog as
    /// it is now, a load fills it with the rows at S (later changes win),
    /// and once loaded it replaces the table (readers see the old rows
    /// until then). Clears a stopped table. Works whether or not `walshadow
    /// run` is running: the request is a change of the config table's
    /// `resync` column, which `run` reads from the WAL. Same as
    /// `UPDATE walshadow.tables SET resync = resync + 1 WHERE …`.
    Resync(table_cmd::ResyncArgs),
    /// Opt a table in: its config-table row says replicate, with its
    /// initial load. `run` applies it at that commit, running now or
    /// later. Same as `INSERT INTO walshadow.tables … ON CONFLICT … DO
    /// UPDATE SET replicate = true`. A table pinned in the config file is
    /// refused: its [table] section wins over the config table.
    Add(table_cmd::AddArgs),
    /// Opt a table out: its config-table row says not to replicate (`UPDATE
    /// … SET replicate = false`); streaming stops at that commit and its
    /// ClickHouse table stays. A pinned table is refused, as for add.
    Remove(table_cmd::RemoveArgs),
}

#[derive(Debug, Subcommand)]
enum ToastCommand {
    /// Print the mirror's size: values, chunks, chunk bytes, file size,
    /// deletions pending, values per TOAST relation.
    Stats(toast_cmd::ToastArgs),
    /// Run the deletions the recorded progress allows, then compact the
    /// file (free pages returned to the file system), and print the size.
    Compact(toast_cmd::ToastArgs),
}

#[derive(Debug, Subcommand)]
enum CatalogCommand {
    /// Print a relation as the shadow's catalog describes it, as JSON: oid,
    /// schema, name, relkind, relfilenode, replica identity and attributes
    /// in attnum order (dropped ones included).
    Show(catalog_cmd::ShowArgs),
}

#[derive(Debug, Subcommand)]
enum WalCommand {
    /// Print WAL records, one JSON object per line.
    ///
    /// Reads segment files (PATH is a segment file or a folder of them, such
    /// as pg_wal or an archive) or a live source over physical replication
    /// (--source). Each line carries at least lsn, prev, rmgr (spelled as
    /// pg_waldump spells it), kind (the record's kind as pg_waldump's desc
    /// begins: INSERT+INIT, HOT_UPDATE, COMMIT, RUNNING_XACTS…), info, xid,
    /// tot_len and blocks (id, spc, db, rel, fork, blk, fpi). Every record's CRC is verified; a damaged
    /// record stops the dump with an error naming its LSN.
    Dump(wal_dump::DumpArgs),
}

/// Writes `text` to standard output; a reader that closed the pipe early
/// (`walshadow status | head`) is not an error.
/// The config file at `path` as database `database` sees it (`None`: the
/// url's), for a command about one database's tables.
fn load_view(
    path: &std::path::Path,
    database: Option<&str>,
) -> anyhow::Result<walshadow_config::Config> {
    let config = walshadow_config::Config::load(path)?;
    Ok(walshadow_pipeline::databases::view_for(&config, database)?)
}

fn print_quietly(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Log lines to stderr, printed around the load progress bars when they
/// are drawn. Without a terminal (a file, journald) each event is one
/// line: control characters in it (a table name with a newline or an
/// escape, a multi-line statement) are written escaped, so no value can
/// forge a line. On a terminal the colours are the log's own.
struct LogWriter {
    plain: bool,
}

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let escaped;
        let out = match (self.plain, std::str::from_utf8(buf)) {
            (true, Ok(text)) => {
                let (body, end) = match text.strip_suffix('\n') {
                    Some(b) => (b, "\n"),
                    None => (text, ""),
                };
                escaped = format!("{}{end}", walshadow_types::printable(body));
                escaped.as_bytes()
            }
            _ => buf,
        };
        match walshadow_pipeline::load_bars::multi() {
            Some(m) => m.suspend(|| std::io::stderr().write_all(out))?,
            None => std::io::stderr().write_all(out)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// `walshadow(1)` on stdout; with `dir`, a page per command into it
/// (`walshadow.1`, `walshadow-run.1`, `walshadow-table-resync.1`, …).
fn man_page(dir: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    match dir {
        Some(dir) => clap_mangen::generate_to(Cli::command(), &dir)
            .map_err(|e| anyhow::anyhow!("writing the manual pages into {}: {e}", dir.display())),
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut out)?;
            print_quietly(&String::from_utf8_lossy(&out))
        }
    }
}

/// The environment variable that sets what is logged (over `[log] level`).
const LOG_ENV: &str = "WALSHADOW_LOG";

type LogLevel = walshadow_pipeline::daemon::LogLevelHook;

/// Sets what is logged; `None` while `WALSHADOW_LOG` decides.
static LOG_LEVEL: std::sync::OnceLock<Option<LogLevel>> = std::sync::OnceLock::new();

/// The hook `[log] level` goes through, unless `WALSHADOW_LOG` is set.
fn log_level() -> Option<LogLevel> {
    LOG_LEVEL.get().cloned().flatten()
}

/// `[log] level` applied through the subscriber's reload handle.
fn level_setter<S: 'static>(
    handle: tracing_subscriber::reload::Handle<tracing_subscriber::EnvFilter, S>,
) -> LogLevel {
    std::sync::Arc::new(move |level: &str| {
        let f = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
        handle.reload(f).map_err(|e| e.to_string())
    })
}

fn main() -> std::process::ExitCode {
    // Everything walshadow writes — state, spill files, the filtered WAL,
    // the TOAST mirror, scratch files of loads, sockets — holds source data
    // or secrets: files 0600, directories 0700, whatever the caller's umask.
    // (What the shadow's server user must reach is handed to it by
    // ownership; PostgreSQL sets its own umask.)
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    // Test builds only: the failpoints FAILPOINTS arms (empty otherwise).
    let _failpoints = walshadow_failpoints::setup();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let cli = Cli::parse();
    let log_format = cli.log_format;
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // `[log] level` is set, and reloaded, through the handle.
    let level: LogLevel = match cli.log_format {
        LogFormat::Text => {
            let b = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(move || LogWriter { plain: !terminal })
                .with_ansi(terminal)
                .with_filter_reloading();
            let handle = b.reload_handle();
            b.init();
            level_setter(handle)
        }
        // JSON escapes every value itself: one event, one line.
        LogFormat::Json => {
            let b = tracing_subscriber::fmt()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_env_filter(filter)
                .with_writer(move || LogWriter { plain: false })
                .with_filter_reloading();
            let handle = b.reload_handle();
            b.init();
            level_setter(handle)
        }
    };
    // `WALSHADOW_LOG` wins over the file.
    let _ = LOG_LEVEL.set(std::env::var_os(LOG_ENV).is_none().then_some(level));
    if terminal && matches!(cli.command, Command::Run(_)) {
        walshadow_pipeline::load_bars::enable();
    }
    let result = match cli.command {
        Command::Init(args) => shadow_cmd::init(args),
        Command::Run(args) => shadow_cmd::run(args),
        Command::Status(args) => shadow_cmd::status(args),
        Command::Ctl(args) => ctl_cmd::ctl(args),
        Command::Table(TableCommand::List(args)) => table_cmd::list(args),
        Command::Table(TableCommand::Resync(args)) => table_cmd::resync(args),
        Command::Table(TableCommand::Add(args)) => table_cmd::add(args),
        Command::Table(TableCommand::Remove(args)) => table_cmd::remove(args),
        Command::Toast(ToastCommand::Stats(args)) => toast_cmd::stats(args),
        Command::Toast(ToastCommand::Compact(args)) => toast_cmd::compact(args),
        Command::Catalog(CatalogCommand::Show(args)) => catalog_cmd::show(args),
        Command::ExportSchema(args) => catalog_cmd::export(args),
        Command::Wal(WalCommand::Dump(args)) => wal_dump::run(args),
        Command::Backup(BackupCommand::List(args)) => backup_cmd::list(args),
        Command::Backup(BackupCommand::Check(args)) => backup_cmd::check(args),
        Command::Teardown(args) => teardown_cmd::teardown(args),
        Command::Verify(args) => verify_cmd::verify_cmd(args),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "walshadow", &mut out);
            print_quietly(&String::from_utf8_lossy(&out))
        }
        Command::Man { dir } => man_page(dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A log shipper reading JSON gets the last word as JSON too.
            match log_format {
                LogFormat::Text => eprintln!("walshadow: error: {e:#}"),
                LogFormat::Json => tracing::error!(error = %format!("{e:#}"), "walshadow: error"),
            }
            std::process::ExitCode::FAILURE
        }
    }
}
