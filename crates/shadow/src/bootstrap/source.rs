//! What `init` asks the source: its requirements (checked one by one, each
//! failure naming the setting and the fix) and the file classes of every
//! database, listed over ordinary SQL sessions (`physical = false`).
//!
//! The listing is what the landing sink decides by: `pg_relation_filenode`
//! gives every relation's current file number, mapped catalogs included, so
//! the rows fed to [`Classes`] carry the file the base backup will contain.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use walshadow_types::{Oid, PgMajor};
use walshadow_wal_reader::replication::{ConnConfig, QueryResult, ReplicationClient};

use super::InitError;
use crate::filter::classes::{
    Classes, FIRST_NORMAL_OBJECT_ID, FileClass, PG_TOAST_NAMESPACE, STATISTICS_CATALOGS,
};
use crate::filter::pg_class::PgClassRow;

/// The source settings a hot standby must have at least as high
/// (CheckRequiredParameterValues in xlogrecovery.c, 15..18).
pub const STANDBY_MINIMUMS: [&str; 5] = [
    "max_connections",
    "max_worker_processes",
    "max_wal_senders",
    "max_prepared_transactions",
    "max_locks_per_transaction",
];

/// The source, as the checks found it.
#[derive(Debug, Clone)]
pub struct SourceFacts {
    pub major: PgMajor,
    pub server_version_num: u32,
    pub data_checksums: bool,
    /// [`STANDBY_MINIMUMS`] with their values.
    pub standby_minimums: Vec<(&'static str, String)>,
    /// The role walshadow connects as.
    pub role: String,
}

/// The statistics catalogs' relations as initdb makes them (OID = file
/// number): pg_statistic, its index, its TOAST table and TOAST index, then
/// the same for pg_statistic_ext_data (toasting.h, indexing.h).
const INITDB_STATS_FILES: [(Oid, StatsFile); 8] = [
    (2619, StatsFile::Heap),
    (2696, StatsFile::Index),
    (2840, StatsFile::Heap),
    (2841, StatsFile::Index),
    (3429, StatsFile::Heap),
    (3433, StatsFile::Index),
    (3430, StatsFile::Heap),
    (3431, StatsFile::Index),
];

/// One database of `pg_database`.
#[derive(Debug, Clone)]
pub struct Database {
    pub oid: Oid,
    pub name: String,
    pub allow_conn: bool,
}

/// A file of a statistics catalog (`pg_statistic`, `pg_statistic_ext_data`,
/// their TOAST and indexes): user values, but the shadow needs a valid file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsFile {
    Heap,
    Index,
}

/// The classes of every listed database's files at one moment.
#[derive(Debug, Default, Clone)]
pub struct ClassList {
    pub databases: Vec<Database>,
    /// Databases whose pg_class was listed.
    pub listed: HashSet<Oid>,
    /// (database or 0 for shared, file number) → class.
    pub files: HashMap<(Oid, Oid), FileClass>,
    /// Relation OID → class, for the filter's TOAST rule.
    pub relations: HashMap<Oid, FileClass>,
    pub stats_files: HashMap<(Oid, Oid), StatsFile>,
}

impl ClassList {
    /// What the landing does with file `file` of database `db`: the listed
    /// class; for an unlisted database (no connections allowed, or created
    /// after the listing) initdb's numbers are catalogs and the rest user
    /// data (the filter's own rule, `RecordFilter::class_of`).
    pub fn class(&self, db: Oid, file: Oid) -> FileClass {
        if let Some(c) = self.files.get(&(db, file)) {
            return *c;
        }
        if file < FIRST_NORMAL_OBJECT_ID {
            FileClass::Catalog
        } else {
            FileClass::UserData
        }
    }

    pub fn is_listed(&self, db: Oid) -> bool {
        self.listed.contains(&db)
    }

    /// Whether file `file` of `db` belongs to a statistics catalog: as
    /// listed, or, in an unlisted database, by initdb's numbering (such a
    /// database was never connected to, so its catalogs keep their files).
    pub fn stats_file(&self, db: Oid, file: Oid) -> Option<StatsFile> {
        if let Some(s) = self.stats_files.get(&(db, file)) {
            return Some(*s);
        }
        if self.is_listed(db) {
            return None;
        }
        INITDB_STATS_FILES
            .iter()
            .find(|(n, _)| *n == file)
            .map(|(_, s)| *s)
    }
}

pub(super) fn sql_config(url: &str, dbname: Option<&str>) -> Result<ConnConfig, InitError> {
    let mut c = ConnConfig::from_url(url).map_err(|e| InitError::source("[source] url", e))?;
    c.physical = false;
    c.application_name
        .get_or_insert_with(|| "walshadow init".into());
    if let Some(db) = dbname {
        c.dbname = Some(db.to_owned());
    }
    Ok(c)
}

pub(super) async fn query(
    client: &mut ReplicationClient,
    what: &str,
    sql: &str,
) -> Result<QueryResult, InitError> {
    client
        .simple_query(sql)
        .await
        .map_err(|e| InitError::source(what, e))
}

/// Why the config table could not be made ready.
#[derive(Debug)]
pub enum ConfigTableProblem {
    /// It could not be created (privileges): a warning, walshadow streams
    /// pinned tables without it.
    NotCreated(String),
    /// It, or its schema, belongs to a role that is neither walshadow's nor
    /// a superuser: whoever owns them decides what walshadow reads (the
    /// owner of a schema may drop and re-create any table in it), so
    /// `init` refuses.
    NotOurs(String),
}

/// Makes the config table (`[source] config_table`) ready: created if it
/// is missing, owned by walshadow's role, with nothing granted to PUBLIC.
/// One that exists already is adopted only if it and its schema belong to
/// walshadow's role (or a superuser). `dbname`: in that database instead
/// of the url's.
pub async fn ensure_config_table(
    url: &str,
    dbname: Option<&str>,
    table: &str,
) -> Result<(), ConfigTableProblem> {
    use ConfigTableProblem::{NotCreated, NotOurs};
    let Some((schema, name)) = walshadow_config::split_table_name(table) else {
        return Err(NotCreated(format!("{table:?} is not schema.name")));
    };
    let sql = walshadow_config::config_table_sql(&schema, &name);
    let cfg = sql_config(url, dbname).map_err(|e| NotCreated(e.to_string()))?;
    let mut client = ReplicationClient::connect(&cfg)
        .await
        .map_err(|e| NotCreated(e.to_string()))?;
    // Checked before (for a clear refusal of what exists) and again after
    // the CREATE, in its transaction: a table another role made in between
    // is then seen, and nothing is committed.
    match owner_problem(&mut client, &schema, &name, table).await {
        Ok(None) => {}
        Ok(Some(p)) => {
            client.close().await;
            return Err(NotOurs(p));
        }
        Err(e) => {
            client.close().await;
            return Err(NotCreated(e));
        }
    }
    let revoke = format!(
        "REVOKE ALL ON TABLE {}.{} FROM PUBLIC",
        quote_ident(&schema),
        quote_ident(&name)
    );
    let created = async {
        client.simple_query("BEGIN").await?;
        client.simple_query(&sql).await?;
        Ok::<_, walshadow_wal_reader::replication::ReplicationError>(())
    }
    .await;
    let outcome = match created {
        // A schema or table another role committed meanwhile fails the
        // CREATE (a duplicate key): say whose it is.
        Err(e) => {
            let _ = client.simple_query("ROLLBACK").await;
            match owner_problem(&mut client, &schema, &name, table).await {
                Ok(Some(p)) => Err(NotOurs(p)),
                _ => Err(NotCreated(format!(
                    "{e}; create it as a role that may, with:\n{sql}\n{revoke};"
                ))),
            }
        }
        Ok(()) => match owner_problem(&mut client, &schema, &name, table).await {
            Err(e) => Err(NotCreated(e)),
            Ok(Some(p)) => Err(NotOurs(p)),
            Ok(None) => match client.simple_query(&revoke).await {
                Ok(_) => client
                    .simple_query("COMMIT")
                    .await
                    .map(drop)
                    .map_err(|e| NotCreated(e.to_string())),
                Err(e) => Err(NotCreated(format!(
                    "{e}; create it as a role that may, with:\n{sql}\n{revoke};"
                ))),
            },
        },
    };
    if outcome.is_err() {
        let _ = client.simple_query("ROLLBACK").await;
    }
    client.close().await;
    outcome
}

/// Whether the config table `table` (`schema`.`name`), or its schema, exists
/// and belongs to a role that is neither the session's nor a superuser.
async fn owner_problem(
    client: &mut ReplicationClient,
    schema: &str,
    name: &str,
    table: &str,
) -> Result<Option<String>, String> {
    let lit = |v: &str| format!("'{}'", v.replace('\'', "''"));
    let owners = client
        .simple_query(&format!(
            "select current_user, pg_get_userbyid(n.nspowner),
                    (select rolsuper from pg_roles where oid = n.nspowner),
                    pg_get_userbyid(c.relowner),
                    (select rolsuper from pg_roles where oid = c.relowner)
               from (select 1) one
               left join pg_namespace n on n.nspname = {s}
               left join pg_class c on c.relnamespace = n.oid and c.relname = {t}",
            s = lit(schema),
            t = lit(name)
        ))
        .await
        .map_err(|e| e.to_string())?;
    let me = owners.text(0, 0).unwrap_or_default().to_owned();
    let foreign = |owner: Option<&str>, superuser: Option<&str>| -> Option<String> {
        owner
            .filter(|o| *o != me && superuser != Some("t"))
            .map(str::to_owned)
    };
    if let Some(o) = foreign(owners.text(0, 1), owners.text(0, 2)) {
        return Ok(Some(format!(
            "schema {schema:?} belongs to role {o:?}, not to walshadow's role {me:?}: its owner may drop \
             and re-create the config table and so choose what walshadow reads; as a superuser run \
             ALTER SCHEMA {} OWNER TO {}, or set [source] config_table to a schema of walshadow's",
            quote_ident(schema),
            quote_ident(&me)
        )));
    }
    Ok(foreign(owners.text(0, 3), owners.text(0, 4)).map(|o| {
        format!(
            "table {table} belongs to role {o:?}, not to walshadow's role {me:?}: its owner \
             decides what walshadow reads; as a superuser run ALTER TABLE {}.{} OWNER TO {}, \
             or drop it for init to create it",
            quote_ident(schema),
            quote_ident(name),
            quote_ident(&me)
        )
    }))
}

/// An SQL identifier, double-quoted.
fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The major of the binaries in `pg_bin`, from `postgres --version`
/// ("postgres (PostgreSQL) 15.14 (Debian ...)").
pub fn pg_bin_major(pg_bin: &Path) -> Result<u32, InitError> {
    let postgres = pg_bin.join("postgres");
    let bad = |problem: String| {
        InitError::Requirement {
        setting: "[shadow] pg_bin",
        problem,
        fix: "point pg_bin at the bin directory of the source's major (e.g. /usr/lib/postgresql/15/bin)"
            .into(),
    }
    };
    let out = crate::process::child_command(&postgres)
        .arg("--version")
        .output()
        .map_err(|e| bad(format!("running {} --version: {e}", postgres.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_once("(PostgreSQL) ")
        .and_then(|(_, v)| {
            let digits: String = v.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .ok_or_else(|| {
            bad(format!(
                "{} --version said {:?}, not a PostgreSQL version",
                postgres.display(),
                text.trim()
            ))
        })
}

/// Checks the source over an SQL session on the URL's database.
pub async fn check(url: &str, pg_bin: &Path) -> Result<SourceFacts, InitError> {
    let mut sql = ReplicationClient::connect(&sql_config(url, None)?)
        .await
        .map_err(|e| InitError::source("connecting to the source ([source] url)", e))?;
    let mut cols = vec![
        "current_setting('server_version_num')".to_owned(),
        "current_setting('wal_level')".into(),
        "current_setting('max_wal_senders')".into(),
        "current_setting('max_replication_slots')".into(),
        "current_setting('full_page_writes')".into(),
        "current_setting('data_checksums')".into(),
        "current_setting('block_size')".into(),
        "r.rolsuper::text".into(),
        "r.rolreplication::text".into(),
        "current_user::text".into(),
    ];
    cols.extend(
        STANDBY_MINIMUMS
            .iter()
            .map(|s| format!("current_setting('{s}')")),
    );
    let r = query(
        &mut sql,
        "reading the source's settings",
        &format!(
            "SELECT {} FROM pg_roles r WHERE r.rolname = current_user",
            cols.join(", ")
        ),
    )
    .await?;
    sql.close().await;
    let v = |i: usize| r.text(0, i).unwrap_or_default().to_owned();
    let version_num: u32 = v(0).parse().unwrap_or(0);
    let major = PgMajor::from_version_num(version_num).map_err(|e| InitError::Requirement {
        setting: "source server version",
        problem: e.to_string(),
        fix: "replicate from PostgreSQL 15, 16, 17 or 18".into(),
    })?;
    let bin_major = pg_bin_major(pg_bin)?;
    if bin_major != major.number() {
        return Err(InitError::Requirement {
            setting: "[shadow] pg_bin",
            problem: format!(
                "{} holds PostgreSQL {bin_major} binaries, the source runs {major}",
                pg_bin.display()
            ),
            fix: format!(
                "point pg_bin at PostgreSQL {major}'s bin directory (e.g. /usr/lib/postgresql/{major}/bin)"
            ),
        });
    }
    let role = v(9);
    let restart = "then restart the source";
    if v(1) != "logical" {
        return Err(InitError::Requirement {
            setting: "wal_level",
            problem: format!(
                "the source has wal_level = {}; walshadow needs whole new tuples and replica-identity keys in heap records",
                v(1)
            ),
            fix: format!("ALTER SYSTEM SET wal_level = logical, {restart}"),
        });
    }
    if v(7) != "true" && v(8) != "true" {
        return Err(InitError::Requirement {
            setting: "REPLICATION",
            problem: format!("role {role:?} has neither REPLICATION nor SUPERUSER"),
            fix: format!(
                "ALTER ROLE \"{role}\" REPLICATION, and allow it a `replication` line in pg_hba.conf"
            ),
        });
    }
    if v(2).parse::<u32>().unwrap_or(0) == 0 {
        return Err(InitError::Requirement {
            setting: "max_wal_senders",
            problem: "the source has max_wal_senders = 0: no replication connection is possible"
                .into(),
            fix: format!("ALTER SYSTEM SET max_wal_senders = 10, {restart}"),
        });
    }
    if v(3).parse::<u32>().unwrap_or(0) == 0 {
        return Err(InitError::Requirement {
            setting: "max_replication_slots",
            problem: "the source has max_replication_slots = 0: walshadow needs a physical slot"
                .into(),
            fix: format!("ALTER SYSTEM SET max_replication_slots = 10, {restart}"),
        });
    }
    if v(4) != "on" {
        return Err(InitError::Requirement {
            setting: "full_page_writes",
            problem: "the source has full_page_writes = off: pages torn while the base backup copies them \
                      are repaired only by full-page images in the WAL"
                .into(),
            fix: "ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf()".into(),
        });
    }
    if v(6) != "8192" {
        return Err(InitError::Requirement {
            setting: "block_size",
            problem: format!("the source was built with block_size = {}", v(6)),
            fix: "walshadow reads 8 KiB pages only".into(),
        });
    }
    let standby_minimums = STANDBY_MINIMUMS
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, v(10 + i)))
        .collect();
    Ok(SourceFacts {
        major,
        server_version_num: version_num,
        data_checksums: v(5) == "on",
        standby_minimums,
        role,
    })
}

/// The replication connection (physical walsender).
pub async fn replication(url: &str) -> Result<ReplicationClient, InitError> {
    let mut c = ConnConfig::from_url(url).map_err(|e| InitError::source("[source] url", e))?;
    c.physical = true;
    c.application_name
        .get_or_insert_with(|| "walshadow init".into());
    ReplicationClient::connect(&c).await.map_err(|e| {
        InitError::source(
            "opening a replication connection to the source (pg_hba.conf needs a `replication` line for this role)",
            e,
        )
    })
}

/// `SHOW wal_segment_size` text ("16MB", "1GB", "1024kB") in bytes.
pub fn parse_size(text: &str) -> Option<u32> {
    let t = text.trim();
    let digits: String = t.chars().take_while(char::is_ascii_digit).collect();
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match t.get(digits.len()..)?.trim() {
        "" | "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        _ => return None,
    };
    u32::try_from(n * mult).ok()
}

/// A transaction id (xid8) above every one the source has handed out:
/// `pg_current_xact_id()` assigns one (a snapshot's `xmax` would not do: it
/// is past the last *completed* transaction, and one still running may be
/// above it). `None`, logged, if the answer is not a number.
pub async fn next_xid8(url: &str) -> Result<Option<u64>, InitError> {
    let mut sql = ReplicationClient::connect(&sql_config(url, None)?)
        .await
        .map_err(|e| InitError::source("connecting to the source ([source] url)", e))?;
    let r = query(
        &mut sql,
        "reading the next transaction id",
        "SELECT pg_current_xact_id()::text",
    )
    .await;
    sql.close().await;
    let r = r?;
    let next = r.text(0, 0).and_then(|t| t.parse().ok());
    if next.is_none() {
        tracing::warn!(answer = ?r.text(0, 0), "the source's next transaction id is not a number: initial loads will not wait for transactions open across init");
    }
    Ok(next)
}

/// Lists pg_database, then the classes of every database that allows
/// connections (one SQL session each).
pub async fn list_classes(url: &str) -> Result<ClassList, InitError> {
    let mut first = ReplicationClient::connect(&sql_config(url, None)?)
        .await
        .map_err(|e| InitError::source("connecting to the source ([source] url)", e))?;
    let r = query(
        &mut first,
        "listing pg_database",
        "SELECT oid, datname, datallowconn::text, current_database() = datname FROM pg_database ORDER BY oid",
    )
    .await?;
    let mut list = ClassList::default();
    let mut current = None;
    for i in 0..r.rows.len() {
        let db = Database {
            oid: r.text(i, 0).and_then(|s| s.parse().ok()).unwrap_or(0),
            name: r.text(i, 1).unwrap_or_default().to_owned(),
            allow_conn: r.text(i, 2) == Some("true"),
        };
        if r.text(i, 3) == Some("t") || r.text(i, 3) == Some("true") {
            current = Some(db.oid);
        }
        list.databases.push(db);
    }
    let mut classes = Classes::default();
    let mut rows: Vec<(Oid, PgClassRow)> = Vec::new();
    for db in list.databases.clone() {
        if !db.allow_conn {
            continue;
        }
        let r = if Some(db.oid) == current {
            list_rows(&mut first, &db).await?
        } else {
            let mut s = ReplicationClient::connect(&sql_config(url, Some(&db.name))?)
                .await
                .map_err(|e| {
                    InitError::source(
                        &format!(
                            "connecting to database {:?} (init lists the catalog of every database that allows connections)",
                            db.name
                        ),
                        e,
                    )
                })?;
            let r = list_rows(&mut s, &db).await?;
            s.close().await;
            r
        };
        list.listed.insert(db.oid);
        rows.extend(r.into_iter().map(|row| (db.oid, row)));
    }
    first.close().await;
    // Owners before their TOAST: twice, as the filter does.
    for _ in 0..2 {
        for (db, row) in &rows {
            classes.learn_row(*db, row);
        }
    }
    for (db, row) in &rows {
        let file_db = if row.relisshared { 0 } else { *db };
        let class = classes
            .file(file_db, row.relfilenode)
            .unwrap_or(FileClass::UserData);
        list.files.insert((file_db, row.relfilenode), class);
        if let Some(c) = classes.relation(row.oid) {
            list.relations.insert(row.oid, c);
        }
        if let Some(kind) = stats_file(row) {
            list.stats_files.insert((file_db, row.relfilenode), kind);
        }
    }
    Ok(list)
}

/// Whether `row` is a statistics catalog, its TOAST table or an index of
/// either.
fn stats_file(row: &PgClassRow) -> Option<StatsFile> {
    let owner = if row.relnamespace == PG_TOAST_NAMESPACE {
        let name = row.name();
        name.strip_prefix("pg_toast_")
            .map(|rest| rest.strip_suffix("_index").unwrap_or(rest))
            .and_then(|n| n.parse::<Oid>().ok())
    } else {
        None
    };
    if !STATISTICS_CATALOGS.contains(&row.oid)
        && !owner.is_some_and(|o| STATISTICS_CATALOGS.contains(&o))
    {
        return None;
    }
    Some(if row.relkind == b'i' {
        StatsFile::Index
    } else {
        StatsFile::Heap
    })
}

async fn list_rows(
    client: &mut ReplicationClient,
    db: &Database,
) -> Result<Vec<PgClassRow>, InitError> {
    let r = query(
        client,
        &format!("listing pg_class of database {:?}", db.name),
        "SELECT c.oid, c.relname, c.relnamespace, c.relkind, c.relisshared::text, c.reltoastrelid, \
                c.reltablespace, f.file \
         FROM pg_class c, LATERAL (SELECT pg_relation_filenode(c.oid) AS file) f \
         WHERE f.file IS NOT NULL",
    )
    .await?;
    let mut out = Vec::with_capacity(r.rows.len());
    for i in 0..r.rows.len() {
        let num = |c: usize| {
            r.text(i, c)
                .and_then(|s| s.parse::<Oid>().ok())
                .unwrap_or(0)
        };
        let mut relname = [0u8; 64];
        let name = r.text(i, 1).unwrap_or_default().as_bytes();
        let n = name.len().min(63);
        relname[..n].copy_from_slice(&name[..n]);
        out.push(PgClassRow {
            oid: num(0),
            relname,
            relnamespace: num(2),
            relkind: r.text(i, 3).and_then(|s| s.bytes().next()).unwrap_or(b'r'),
            relisshared: r.text(i, 4) == Some("true"),
            reltoastrelid: num(5),
            reltablespace: num(6),
            relfilenode: num(7),
            relrewrite: None,
        });
    }
    Ok(out)
}
