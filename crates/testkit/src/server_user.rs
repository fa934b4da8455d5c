//! Who runs the PostgreSQL binaries.
//!
//! `postgres` and `initdb` refuse to run as root ("root" execution of the PostgreSQL server
//! is not permitted, see `check_root` in `src/backend/main/main.c`), and CI runs as root. So
//! when the effective uid is 0 every PostgreSQL binary is started as an unprivileged user:
//! `$WALSHADOW_PG_USER`, else `postgres` when it exists. `scripts/setup` creates
//! `walshadow-pg` when neither exists. Otherwise binaries run as the current user.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};

/// The OS user PostgreSQL binaries run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    /// True when the test process is root and commands switch to this user.
    pub switches_user: bool,
}

impl ServerUser {
    /// The user for this process, looked up once.
    pub fn get() -> Result<&'static ServerUser> {
        static USER: OnceLock<Result<ServerUser, String>> = OnceLock::new();
        USER.get_or_init(|| {
            let user = resolve().map_err(|e| format!("{e:#}"))?;
            if user.switches_user {
                eprintln!(
                    "walshadow-testkit: running as root; PostgreSQL binaries run as user `{}` (uid {}). \
                     Set WALSHADOW_PG_USER to use another user.",
                    user.name, user.uid
                );
            }
            Ok(user)
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// A command for `program` that runs as this user, with a predictable environment:
    /// no inherited `PG*` variables, C locale (so messages parse), `HOME` of the user, and
    /// `cwd` as working directory (the test's cwd may be unreachable for the user).
    pub fn command(&self, program: &Path, cwd: &Path) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_str().is_some_and(|k| k.starts_with("PG")) {
                cmd.env_remove(&key);
            }
        }
        cmd.env("LC_ALL", "C")
            .env_remove("LANG")
            .env_remove("LANGUAGE");
        cmd.current_dir(cwd);
        if self.switches_user {
            cmd.env("HOME", &self.home)
                .env("USER", &self.name)
                .env("LOGNAME", &self.name)
                .uid(self.uid)
                .gid(self.gid);
        }
        cmd
    }

    /// Creates `dir` (and no parents) with mode 0700, owned by this user.
    pub fn create_private_dir(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, chown};
        std::fs::DirBuilder::new().mode(0o700).create(dir)?;
        if self.switches_user {
            chown(dir, Some(self.uid), Some(self.gid))?;
        }
        Ok(())
    }
}

/// Effective uid of this process: `/proc/self` is owned by it.
fn effective_uid() -> Result<u32> {
    if let Ok(meta) = std::fs::metadata("/proc/self") {
        return Ok(meta.uid());
    }
    let out = Command::new("id")
        .arg("-u")
        .output()
        .context("running `id -u`")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("parsing the output of `id -u`")
}

fn resolve() -> Result<ServerUser> {
    let euid = effective_uid()?;
    if euid != 0 {
        let name = std::env::var("USER").unwrap_or_else(|_| format!("uid{euid}"));
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| "/".into());
        let gid = std::fs::metadata("/proc/self")
            .map(|m| m.gid())
            .unwrap_or(euid);
        return Ok(ServerUser {
            name,
            uid: euid,
            gid,
            home,
            switches_user: false,
        });
    }
    let wanted = std::env::var("WALSHADOW_PG_USER")
        .ok()
        .filter(|s| !s.is_empty());
    let candidates: Vec<String> = match &wanted {
        Some(name) => vec![name.clone()],
        None => vec!["postgres".into(), "walshadow-pg".into()],
    };
    for name in &candidates {
        if let Some(user) = lookup_user(name)? {
            if user.uid == 0 {
                bail!("WALSHADOW_PG_USER={name} is root; PostgreSQL refuses to run as root");
            }
            return Ok(user);
        }
    }
    match wanted {
        Some(name) => bail!(
            "WALSHADOW_PG_USER={name}, but no such user exists; create it \
             (`useradd --system --create-home {name}`) or run scripts/setup"
        ),
        None => bail!(
            "running as root, and PostgreSQL refuses to run as root; no user `postgres` or \
             `walshadow-pg` exists to run it as. Run scripts/setup (it creates one), or \
             `useradd --system --create-home walshadow-pg`, or set WALSHADOW_PG_USER"
        ),
    }
}

/// Looks `name` up with `getent passwd` (NSS-aware), falling back to `/etc/passwd`.
fn lookup_user(name: &str) -> Result<Option<ServerUser>> {
    let text = match Command::new("getent").args(["passwd", name]).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(_) => return Ok(None),
        Err(_) => std::fs::read_to_string("/etc/passwd").context("reading /etc/passwd")?,
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 || fields[0] != name {
            continue;
        }
        let uid = fields[2]
            .parse()
            .with_context(|| format!("bad uid in passwd line {line:?}"))?;
        let gid = fields[3]
            .parse()
            .with_context(|| format!("bad gid in passwd line {line:?}"))?;
        return Ok(Some(ServerUser {
            name: name.to_owned(),
            uid,
            gid,
            home: PathBuf::from(fields[5]),
            switches_user: true,
        }));
    }
    Ok(None)
}
