//! `walshadow table list`, `add`, `remove` and `resync`: wiring only; the
//! work is in `walshadow_pipeline::table_admin`.

use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// With [source] databases: the database the table is in (default:
    /// the url's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ResyncArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// With [source] databases: the database the table is in (default:
    /// the url's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// The table, as `schema.name` (a part holding a dot or a double quote
    /// double-quoted: x."y.z").
    #[arg(value_name = "SCHEMA.TABLE")]
    table: String,
    /// How its rows are loaded again: copy (a snapshot read with COPY) or
    /// base_backup (the pages of a fresh BASE_BACKUP).
    #[arg(long, value_name = "MODE", default_value = "copy")]
    initial_load: String,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// With [source] databases: the database the table is in (default:
    /// the url's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// The table, as `schema.name` (a part holding a dot or a double quote
    /// double-quoted: x."y.z").
    #[arg(value_name = "SCHEMA.TABLE")]
    table: String,
    /// How its existing rows are loaded: none (only changes from now on),
    /// copy, base_backup or object_store.
    #[arg(long, value_name = "MODE", default_value = "copy")]
    initial_load: String,
    /// The ClickHouse table (default: the table's name in public,
    /// schema__name elsewhere).
    #[arg(long, value_name = "NAME")]
    destination: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// With [source] databases: the database the table is in (default:
    /// the url's).
    #[arg(long, value_name = "NAME")]
    database: Option<String>,
    /// The table, as `schema.name`.
    #[arg(value_name = "SCHEMA.TABLE")]
    table: String,
}

pub fn add(args: AddArgs) -> anyhow::Result<()> {
    let config = crate::load_view(&args.config, args.database.as_deref())?;
    let lsn = crate::shadow_cmd::runtime()?.block_on(walshadow_pipeline::table_admin::add(
        &config,
        &args.table,
        &args.initial_load,
        args.destination.as_deref(),
    ))?;
    println!(
        "{} added to the config table {} (source WAL at {lsn}): walshadow run streams it from \
         that commit on, loading its existing rows with {}; `walshadow table list` shows how far \
         it is",
        args.table, config.source.config_table, args.initial_load
    );
    Ok(())
}

pub fn remove(args: RemoveArgs) -> anyhow::Result<()> {
    let config = crate::load_view(&args.config, args.database.as_deref())?;
    let lsn = crate::shadow_cmd::runtime()?.block_on(walshadow_pipeline::table_admin::remove(
        &config,
        &args.table,
    ))?;
    println!(
        "{} set not to replicate in the config table {} (source WAL at {lsn}): walshadow run \
         stops streaming it at that commit; its ClickHouse table stays",
        args.table, config.source.config_table
    );
    Ok(())
}

pub fn list(args: ListArgs) -> anyhow::Result<()> {
    let config = crate::load_view(&args.config, args.database.as_deref())?;
    let rows = walshadow_pipeline::table_admin::list(&config)?;
    let text = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&rows)?)
    } else {
        walshadow_pipeline::table_admin::TableList(rows).to_string()
    };
    crate::print_quietly(&text)
}

pub fn resync(args: ResyncArgs) -> anyhow::Result<()> {
    let config = crate::load_view(&args.config, args.database.as_deref())?;
    let lsn = crate::shadow_cmd::runtime()?.block_on(
        walshadow_pipeline::table_admin::request_resync(&config, &args.table, &args.initial_load),
    )?;
    println!(
        "resync of {} requested (source WAL at {lsn}): walshadow run loads it again with {} into a \
         table beside its ClickHouse table and swaps it in once loaded; `walshadow table list` \
         shows how far it is",
        args.table, args.initial_load
    );
    Ok(())
}
