//! Configuration: the TOML file every command reads (`--config FILE`).
//!
//! ```toml
//! [source]
//! url  = "postgres://walshadow@db:5432/postgres?sslmode=verify-full&sslrootcert=/etc/walshadow/ca.pem"
//! slot = "walshadow"                       # physical slot, created by `walshadow init`
//!
//! [shadow]
//! data_dir = "/var/lib/walshadow/shadow"    # the catalog-only standby's PGDATA
//! pg_bin   = "/usr/lib/postgresql/15/bin"   # binaries of the source's major
//! # run_as = "postgres"                     # when walshadow runs as root
//! # checkpoint_every_mb = 64                # filter-state checkpoint every N MB of WAL
//! # checkpoint_every_secs = 30              # ... or every T seconds, whichever first
//!
//! [state]
//! dir = "/var/lib/walshadow/state"          # progress, filtered WAL, feeder socket
//! ```
//!
//! Unknown keys are errors (a typo must not silently fall back to a
//! default); every error names the key and what to write instead. The
//! source-side config table (tables opted in at runtime) comes with the
//! streaming issues.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Why a config file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: {key}: {problem}")]
    Invalid {
        path: PathBuf,
        key: &'static str,
        problem: String,
    },
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub source: SourceConfig,
    pub shadow: ShadowConfig,
    pub state: StateConfig,
}

/// `[source]`: the PostgreSQL server walshadow replicates from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// libpq-style URL of a role with REPLICATION.
    pub url: String,
    /// Physical replication slot holding WAL for walshadow.
    #[serde(default = "default_slot")]
    pub slot: String,
}

/// `[shadow]`: the catalog-only standby walshadow runs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowConfig {
    pub data_dir: PathBuf,
    /// Folder with `postgres`, `pg_ctl`, `initdb`, `pg_dump` of the
    /// source's major version.
    pub pg_bin: PathBuf,
    /// Unprivileged user to run the shadow as when walshadow runs as root
    /// (PostgreSQL refuses to run as root).
    #[serde(default)]
    pub run_as: Option<String>,
    /// A checkpoint of the shadow filter's state is taken after this many
    /// MB of WAL (and at clean shutdown); the slot advances only to the
    /// last checkpoint, so this bounds the WAL a restart re-reads.
    #[serde(default = "default_checkpoint_every_mb")]
    pub checkpoint_every_mb: u64,
    /// ... or after this many seconds, whichever comes first.
    #[serde(default = "default_checkpoint_every_secs")]
    pub checkpoint_every_secs: u64,
}

/// `[state]`: where walshadow keeps what must survive a restart.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    pub dir: PathBuf,
}

fn default_slot() -> String {
    "walshadow".into()
}

fn default_checkpoint_every_mb() -> u64 {
    64
}

fn default_checkpoint_every_secs() -> u64 {
    30
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks `text` (read from `path`, named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        config.check(path)?;
        Ok(config)
    }

    fn check(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |key, problem: String| ConfigError::Invalid {
            path: path.to_owned(),
            key,
            problem,
        };
        if !(self.source.url.starts_with("postgres://")
            || self.source.url.starts_with("postgresql://"))
        {
            return Err(invalid(
                "source.url",
                "expected a URL such as postgres://user@host:5432/postgres".into(),
            ));
        }
        let slot = &self.source.slot;
        if slot.is_empty()
            || slot.len() > 63
            || !slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(invalid(
                "source.slot",
                format!("{slot:?}: slot names are 1 to 63 characters of a-z, 0-9 and _"),
            ));
        }
        for (key, dir) in [
            ("shadow.data_dir", &self.shadow.data_dir),
            ("shadow.pg_bin", &self.shadow.pg_bin),
            ("state.dir", &self.state.dir),
        ] {
            if !dir.is_absolute() {
                return Err(invalid(
                    key,
                    format!("{}: use an absolute path", dir.display()),
                ));
            }
        }
        for (key, v) in [
            (
                "shadow.checkpoint_every_mb",
                self.shadow.checkpoint_every_mb,
            ),
            (
                "shadow.checkpoint_every_secs",
                self.shadow.checkpoint_every_secs,
            ),
        ] {
            if v == 0 {
                return Err(invalid(key, "must be at least 1".into()));
            }
        }
        if !self.shadow.pg_bin.join("postgres").is_file() {
            return Err(invalid(
                "shadow.pg_bin",
                format!(
                    "{} has no `postgres` binary; point it at the bin folder of the source's PostgreSQL major (e.g. /usr/lib/postgresql/15/bin)",
                    self.shadow.pg_bin.display()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    const GOOD: &str = r#"
        [source]
        url = "postgres://walshadow@127.0.0.1:5432/postgres"
        [shadow]
        data_dir = "/tmp/shadow"
        pg_bin = "/usr/lib/postgresql/15/bin"
        [state]
        dir = "/tmp/state"
    "#;

    #[test]
    fn minimal_file_with_defaults() {
        if !Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
            return; // the check needs a real bin folder
        }
        let c = parse(GOOD).unwrap();
        assert_eq!(c.source.slot, "walshadow");
        assert_eq!(c.shadow.run_as, None);
        assert_eq!(
            (c.shadow.checkpoint_every_mb, c.shadow.checkpoint_every_secs),
            (64, 30)
        );
    }

    #[test]
    fn unknown_keys_are_errors() {
        let err = parse(&GOOD.replace("[state]", "[state]\ndirr = \"/x\"")).unwrap_err();
        assert!(err.to_string().contains("dirr"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = parse(&GOOD.replace("postgres://", "mysql://")).unwrap_err();
        assert!(err.to_string().contains("source.url"), "{err}");
        let err = parse(&GOOD.replace("[source]", "[source]\nslot = \"Bad-Name\"")).unwrap_err();
        assert!(err.to_string().contains("source.slot"), "{err}");
        let err = parse(&GOOD.replace("\"/tmp/state\"", "\"state\"")).unwrap_err();
        assert!(err.to_string().contains("state.dir"), "{err}");
        let err = parse(&GOOD.replace("/usr/lib/postgresql/15/bin", "/nonexistent")).unwrap_err();
        assert!(err.to_string().contains("shadow.pg_bin"), "{err}");
    }
}
