//! Several source databases in one `run`: which databases are followed,
//! and each one's view of the config file and its state directory.
//!
//! ```text
//!                    ┌─▶ stream "shop" (state dir, config table, ClickHouse "pg_shop")
//!  slot ─▶ intake ─▶ fan-out
//!     ▲              └─▶ stream "crm"  (<state>/db/crm, its config table, "pg_crm")
//!     └── hold: the streams' lowest restart     shadow ceiling: their lowest
//! ```
//!
//! Each database gets a stream of its own (`docs/design/databases.md`):
//! every map keyed by an OID or a relfilenumber stays within one
//! database, so two databases copied from one template, whose OIDs repeat,
//! never mix. The url's database keeps the state directory's own files, as
//! with one database; another keeps its own under `<state>/db/<name>/`.

use std::path::{Path, PathBuf};

use walshadow_config::{Config, ConfigError};

/// One database a `run` streams.
#[derive(Debug, Clone)]
pub struct Followed {
    /// Its name on the source.
    pub name: String,
    /// The config file as it sees it (its tables, its config table, its
    /// ClickHouse database, its state directory).
    pub view: Config,
    /// Whether it is `[source] url`'s database.
    pub is_url_db: bool,
}

/// Why the databases to follow are not known.
#[derive(Debug, thiserror::Error)]
pub enum DatabasesError {
    #[error(
        "[source] databases = {listed:?} does not name the url's database {url_db:?}: list it \
         too (its tables are the top-level [table] sections), or point the url at one of them"
    )]
    UrlDatabaseLeftOut { listed: Vec<String>, url_db: String },
    #[error("database {0:?} is not followed: [source] databases = {1:?}")]
    NotFollowed(String, Vec<String>),
    #[error("[source] url: {0}")]
    Url(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// `[source] url`'s database.
pub fn url_database(config: &Config) -> Result<String, DatabasesError> {
    walshadow_wal_reader::replication::ConnConfig::from_url(&config.source.url)
        .map(|c| c.database())
        .map_err(|e| DatabasesError::Url(e.to_string()))
}

/// Every database `config` follows, as [`followed`] gives them.
pub fn all(config: &Config) -> Result<Vec<Followed>, DatabasesError> {
    followed(config, &url_database(config)?)
}

/// The config file as database `db` sees it (`None`: the url's), for a
/// command about its tables: its state directory, config table, tables
/// and ClickHouse database.
pub fn view_for(config: &Config, db: Option<&str>) -> Result<Config, DatabasesError> {
    if let Some(db) = db
        && config.source.every_database()
    {
        let url_db = url_database(config)?;
        let mut one = followed_names(config, &url_db, [db.to_owned()])?;
        return Ok(one.swap_remove(usize::from(db != url_db)).view);
    }
    let mut all = all(config)?;
    let at = match db {
        None => Some(0),
        Some(db) => all.iter().position(|f| f.name == db),
    };
    match at {
        Some(i) if i < all.len() => Ok(all.swap_remove(i).view),
        _ => Err(DatabasesError::NotFollowed(
            db.unwrap_or_default().to_owned(),
            config.source.databases.clone(),
        )),
    }
}

/// The databases `config` follows (the url's first): only the url's
/// without `[source] databases`, its own file unchanged. With `["*"]`:
/// the url's, those with a `[database]` section and those that streamed
/// before (the rest come as the shadow shows them).
pub fn followed(config: &Config, url_db: &str) -> Result<Vec<Followed>, DatabasesError> {
    let listed = &config.source.databases;
    if listed.is_empty() {
        return Ok(vec![Followed {
            name: url_db.to_owned(),
            view: config.clone(),
            is_url_db: true,
        }]);
    }
    if config.source.every_database() {
        let mut names = known_databases(&config.state.dir);
        names.extend(config.databases.keys().cloned());
        return followed_names(config, url_db, names);
    }
    if !listed.iter().any(|d| d == url_db) {
        return Err(DatabasesError::UrlDatabaseLeftOut {
            listed: listed.clone(),
            url_db: url_db.to_owned(),
        });
    }
    followed_names(config, url_db, listed.iter().cloned())
}

/// The views of the url's database and of `names`, the url's first.
pub fn followed_names(
    config: &Config,
    url_db: &str,
    names: impl IntoIterator<Item = String>,
) -> Result<Vec<Followed>, DatabasesError> {
    let mut others: Vec<String> = names.into_iter().filter(|d| d != url_db).collect();
    others.sort();
    others.dedup();
    let order = std::iter::once(url_db).chain(others.iter().map(String::as_str));
    order
        .map(|name| {
            let mut view = config.database_view(name, url_db)?;
            let is_url_db = name == url_db;
            if !is_url_db {
                view.state.dir = state_dir(&config.state.dir, name);
                view.state.spill_dir = config
                    .state
                    .spill_dir
                    .as_ref()
                    .map(|d| d.join("db").join(dir_name(name)));
            }
            Ok(Followed {
                name: name.to_owned(),
                view,
                is_url_db,
            })
        })
        .collect()
}

/// How a database new to the state directory (not the url's) started:
/// `<state>/db/<name>/start.json`. Its loads read once no transaction
/// older than its start runs, as `init`'s loads do with `init.json`'s
/// horizon: a transaction of the database open across the start has
/// changes before it that the stream never decodes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DatabaseStart {
    pub format_version: u32,
    /// The database's name (its directory's is encoded).
    pub database: String,
    /// `pg_current_xact_id()` on the source when its stream started.
    pub xid_horizon: Option<u64>,
}

impl walshadow_state_file::StateFile for DatabaseStart {
    const FILE: &'static str = "start.json";
    const FORMAT_VERSION: u32 = 1;
    const ENVELOPE: walshadow_state_file::Envelope = walshadow_state_file::Envelope::Flat;
    const REMEDY: &'static str = "remove it: the database's loads then read without waiting for \
         transactions open across its start";

    fn format_version(&self) -> u32 {
        self.format_version
    }
}

/// The databases with a state directory of their own in `base` (named by
/// their `start.json`); dropped ones, set aside, are not.
pub fn known_databases(base: &Path) -> std::collections::BTreeSet<String> {
    use walshadow_state_file::StateFile;
    let Ok(entries) = std::fs::read_dir(base.join("db")) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| DatabaseStart::read(&e.path()).ok().flatten())
        .map(|s| s.database)
        .collect()
}

/// Where database `db` (not the url's) keeps its progress, ledger, TOAST
/// mirror and status in state directory `base`.
pub fn state_dir(base: &Path, db: &str) -> PathBuf {
    base.join("db").join(dir_name(db))
}

/// Where the state of database `db`, dropped, is set aside (at
/// `unix_secs`): out of the way of one created again under its name.
pub fn dropped_dir(base: &Path, db: &str, unix_secs: u64) -> PathBuf {
    base.join("db")
        .join(".dropped")
        .join(format!("{}.{unix_secs}", dir_name(db)))
}

/// `db` as one path component: any name PostgreSQL takes (`..`, `a/b`, a
/// leading dot) stays inside `db/`, and two names never meet.
fn dir_name(db: &str) -> String {
    let mut out = String::with_capacity(db.len());
    for (i, b) in db.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_names_stay_inside() {
        assert_eq!(dir_name("shop"), "shop");
        assert_eq!(dir_name("my-db_2.x"), "my-db_2.x");
        assert_eq!(dir_name(".."), "%2E.");
        assert_eq!(dir_name("a/b"), "a%2Fb");
        assert_eq!(dir_name("%2F"), "%252F");
        assert_eq!(dir_name("Ünï"), "%C3%9Cn%C3%AF");
        let base = Path::new("/s");
        assert_eq!(state_dir(base, "../x"), Path::new("/s/db/%2E.%2Fx"));
    }
}
