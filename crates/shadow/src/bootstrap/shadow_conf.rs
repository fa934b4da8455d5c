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
    pub feeder_dir: &'a Path,
    pub feeder_port: u16,
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
        let conninfo = format!(
            "host={} port={} user=walshadow application_name=walshadow-shadow",
            conninfo_quote(&self.feeder_dir.display().to_string()),
            self.feeder_port
        );
        let mut lines: Vec<(String, String)> = vec![
            ("listen_addresses".into(), conf_quote("")),
            (
                "unix_socket_directories".into(),
                conf_quote(&self.socket_dir.display().to_string()),
            ),
            ("port".into(), self.port.to_string()),
            ("hot_standby".into(), "on".into()),
            ("primary_conninfo".into(), conf_quote(&conninfo)),
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
             # The source's own settings are in postgresql.conf.source (not read).\n\n",
        );
        for (k, v) in lines {
            out.push_str(&format!("{k} = {v}\n"));
        }
        // `run` raises settings here when the source does (XLOG_PARAMETER_CHANGE).
        out.push_str("include_if_exists = 'walshadow.params.conf'\n");
        out
    }

    /// Moves the source's configuration aside and writes the shadow's:
    /// postgresql.conf, an empty postgresql.auto.conf, pg_hba.conf (local
    /// trust only), pg_ident.conf if missing, standby.signal; removes what
    /// must not be there (postmaster.pid/opts, recovery.signal).
    pub fn write(&self, data_dir: &Path) -> Result<(), InitError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_owned();
            move |source| InitError::Io { what, path, source }
        };
        for name in ["postgresql.conf", "postgresql.auto.conf", "pg_hba.conf"] {
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
        write(
            "postgresql.auto.conf",
            "# Do not edit: ALTER SYSTEM writes here (the shadow is a standby; nothing should).\n",
        )?;
        write(
            "pg_hba.conf",
            "# Written by `walshadow init`: the shadow's private socket only.\nlocal all all trust\n",
        )?;
        if !data_dir.join("pg_ident.conf").exists() {
            write("pg_ident.conf", "")?;
        }
        write("standby.signal", "")
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
            feeder_dir: Path::new("/st/it's"),
            feeder_port: 6000,
            standby_minimums: &mins,
            segment_size: 1 << 30,
        };
        let text = c.postgresql_conf();
        assert!(text.contains("listen_addresses = ''\n"));
        assert!(text.contains(
            "primary_conninfo = 'host=''/st/it\\''s'' port=6000 user=walshadow application_name=walshadow-shadow'\n"
        ));
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
}
