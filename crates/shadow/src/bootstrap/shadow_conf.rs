//! The shadow's own configuration, written from scratch over the landed
//! data directory: a hot standby on a private socket, streaming from the
//! feeder, small, never archiving. The source's configuration files are
//! moved aside as `*.source` (for reference only; none is read).

use std::path::Path;

use super::InitError;

/// Ports and paths the configuration names.
#[derive(Debug, Clone)]
pub struct ShadowConf<'a> {
    pub socket_dir: &'a Path,
    pub port: u16,
    /// Settings a hot standby needs at least as high as the primary.
    pub standby_minimums: &'a [(&'static str, String)],
    /// The source's WAL segment size in bytes (the WAL size settings must
    /// hold at least two segments, or the shadow does not start).
    pub segment_size: u32,
}

/// A value for postgresql.conf: single-quoted, `'` doubled.
fn conf_quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

/// A value inside a libpq conninfo string: single-quoted, `\` and `'`
/// backslash-escaped.
fn conninfo_quote(v: &str) -> String {
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

impl ShadowConf<'_> {
    pub fn postgresql_conf(&self) -> String {
        let mut lines: Vec<(String, String)> = vec![
            ("listen_addresses".into(), conf_quote("")),
            (
                "unix_socket_directories".into(),
                conf_quote(&self.socket_dir.display().to_string()),
            ),
            ("port".into(), self.port.to_string()),
            ("hot_standby".into(), "on".into()),
            ("archive_mode".into(), "off".into()),
            ("shared_buffers".into(), conf_quote("32MB")),
            ("max_standby_streaming_delay".into(), conf_quote("30s")),
            ("hot_standby_feedback".into(), "off".into()),
            ("logging_collector".into(), "off".into()),
            ("wal_receiver_status_interval".into(), conf_quote("1s")),
            // Tablespaces land as directories in pg_tblspc (in-place); without
            // this, reaching consistency PANICs on them
            // (CheckTablespaceDirectory in xlogrecovery.c).
            ("allow_in_place_tablespaces".into(), "on".into()),
        ];
        // A catalog-only standby needs little WAL: restartpoints (which let it
        // and the feeder's store drop WAL) come every ~max_wal_size/2 of
        // replay once the source has checkpointed, instead of every ~540 MB
        // with the default 1GB. Both settings must hold two segments.
        let seg_mb = (self.segment_size >> 20).max(1);
        lines.push((
            "min_wal_size".into(),
            conf_quote(&format!("{}MB", (2 * seg_mb).max(32))),
        ));
        lines.push((
            "max_wal_size".into(),
            conf_quote(&format!("{}MB", (4 * seg_mb).max(256))),
        ));
        for (name, value) in self.standby_minimums {
            lines.push(((*name).to_owned(), conf_quote(value)));
        }
        let mut out = String::from(
            "# Written by `walshadow init`: the catalog-only shadow standby.\n\
             # Private socket only; fed filtered WAL by walshadow's feeder.\n\
             # The source's own settings are in postgresql.conf.source (not read);\n\
             # primary_conninfo is in postgresql.auto.conf, written at every start.\n\n",
        );
        for (k, v) in lines {
            out.push_str(&format!("{k} = {v}\n"));
        }
        // `run` raises settings here when the source does (XLOG_PARAMETER_CHANGE).
        out.push_str("include_if_exists = 'walshadow.params.conf'\n");
        out
    }

    /// Moves the source's configuration aside and writes the shadow's
    /// postgresql.conf and standby.signal ([`ShadowAccess`] writes the
    /// rest); removes what must not be there (postmaster.pid/opts,
    /// recovery.signal).
    pub fn write(&self, data_dir: &Path) -> Result<(), InitError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| InitError::Io { what, path, source }
        };
        for name in [
            "postgresql.conf",
            "postgresql.auto.conf",
            "pg_hba.conf",
            "pg_ident.conf",
        ] {
            let p = data_dir.join(name);
            if p.exists() {
                let to = data_dir.join(format!("{name}.source"));
                std::fs::rename(&p, &to).map_err(io("renaming", &p))?;
            }
        }
        for name in ["postmaster.pid", "postmaster.opts", "recovery.signal"] {
            let p = data_dir.join(name);
            if p.exists() {
                std::fs::remove_file(&p).map_err(io("removing", &p))?;
            }
        }
        let write = |name: &str, text: &str| {
            let p = data_dir.join(name);
            std::fs::write(&p, text).map_err(io("writing", &p))
        };
        write("postgresql.conf", &self.postgresql_conf())?;
        write("standby.signal", "")
    }
}

/// Who may use the shadow, and how it proves itself to the feeder. Written
/// by `init` and again at every `run` start, before the shadow starts: the
/// feeder's password is new at each start, and the role follows the
/// config.
///
/// The shadow holds the source's roles, superusers included, so nothing
/// trusts a local connection: `pg_hba.conf` admits its socket by peer
/// authentication only, through a map that lets the OS user walshadow runs
/// as (and no one else) be the role walshadow connects as; the socket is
/// `0700` (`unix_socket_permissions`) in a `0700` directory of the server
/// user. `postgresql.auto.conf` carries `primary_conninfo` with the
/// feeder's password, so the walreceiver it starts is the one session the
/// feeder serves.
#[derive(Debug, Clone)]
pub struct ShadowAccess<'a> {
    /// The OS user walshadow runs as (`root` under `[shadow] run_as`).
    pub os_user: &'a str,
    /// The role walshadow connects to the shadow as: the source's.
    pub role: &'a str,
    pub feeder_dir: &'a Path,
    pub feeder_port: u16,
    /// The feeder's password for this start; `None` when no feeder runs
    /// (`init` writes the files before any `run`).
    pub feeder_password: Option<&'a str>,
}

/// The peer-authentication map of `pg_hba.conf` and `pg_ident.conf`.
const IDENT_MAP: &str = "walshadow";

/// A `pg_hba.conf`/`pg_ident.conf` token: double-quoted, `"` doubled.
fn hba_quote(v: &str) -> String {
    format!("\"{}\"", v.replace('"', "\"\""))
}

impl ShadowAccess<'_> {
    pub fn pg_hba_conf() -> String {
        format!(
            "# Written by walshadow: the shadow's private socket, by peer authentication\n\
             # through the {IDENT_MAP} map of pg_ident.conf only. Rewritten at every start.\n\
             local all all peer map={IDENT_MAP}\n\
             # pg_basebackup of the shadow (export-schema --format datadir), same map:\n\
             local replication all peer map={IDENT_MAP}\n"
        )
    }

    pub fn pg_ident_conf(&self) -> String {
        format!(
            "# Written by walshadow: the OS user walshadow runs as may be the role it\n\
             # connects as. Rewritten at every start.\n\
             {IDENT_MAP} {} {}\n",
            hba_quote(self.os_user),
            hba_quote(self.role)
        )
    }

    pub fn auto_conf(&self) -> String {
        let mut conninfo = format!(
            "host={} port={} user=walshadow application_name=walshadow-shadow",
            conninfo_quote(&self.feeder_dir.display().to_string()),
            self.feeder_port
        );
        if let Some(p) = self.feeder_password {
            conninfo.push_str(&format!(" password={}", conninfo_quote(p)));
        }
        format!(
            "# Written by walshadow at every start (do not edit; ALTER SYSTEM must not\n\
             # be used on the shadow): the feeder's password for this start.\n\
             primary_conninfo = {}\n\
             unix_socket_permissions = 0700\n",
            conf_quote(&conninfo)
        )
    }

    /// Writes `pg_hba.conf`, `pg_ident.conf` and `postgresql.auto.conf`
    /// into `data_dir`, each readable by its owner only (each replaced
    /// whole, never half written); returns their paths, to hand to the
    /// server user.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut paths = Vec::new();
        for (name, text) in [
            ("pg_hba.conf", Self::pg_hba_conf()),
            ("pg_ident.conf", self.pg_ident_conf()),
            ("postgresql.auto.conf", self.auto_conf()),
        ] {
            let path = data_dir.join(name);
            let tmp = data_dir.join(format!("{name}.walshadow-tmp"));
            match std::fs::remove_file(&tmp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            paths.push(path);
        }
        Ok(paths)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let mins = [("max_connections", "100".to_owned())];
        let c = ShadowConf {
            socket_dir: Path::new("/st/shadow-socket"),
            port: 5999,
            standby_minimums: &mins,
            segment_size: 1 << 30,
        };
        let text = c.postgresql_conf();
        assert!(text.contains("listen_addresses = ''\n"));
        assert!(!text.contains("\nprimary_conninfo ="));
        assert!(text.contains("max_connections = '100'\n"));
        // A 1 GB-segment source: both WAL sizes hold at least two segments.
        assert!(text.contains("min_wal_size = '2048MB'\n"));
        assert!(text.contains("max_wal_size = '4096MB'\n"));
        let small = ShadowConf {
            segment_size: 16 << 20,
            ..c
        }
        .postgresql_conf();
        assert!(small.contains("min_wal_size = '32MB'\n"));
        assert!(small.contains("max_wal_size = '256MB'\n"));
    }

    #[test]
    fn access_files() {
        let a = ShadowAccess {
            os_user: "root",
            role: "wal \"shadow\"",
            feeder_dir: Path::new("/st/it's"),
            feeder_port: 6000,
            feeder_password: Some("c0ffee"),
        };
        let hba = ShadowAccess::pg_hba_conf();
        assert!(hba.contains("\nlocal all all peer map=walshadow\n"));
        assert!(!hba.contains("trust"));
        assert!(
            a.pg_ident_conf()
                .ends_with("\nwalshadow \"root\" \"wal \"\"shadow\"\"\"\n")
        );
        let auto = a.auto_conf();
        assert!(auto.contains(
            "primary_conninfo = 'host=''/st/it\\''s'' port=6000 user=walshadow application_name=walshadow-shadow password=''c0ffee'''\n"
        ));
        assert!(auto.contains("unix_socket_permissions = 0700\n"));
    }
}
