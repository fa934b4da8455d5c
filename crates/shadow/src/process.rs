//! Running the shadow's PostgreSQL binaries: as the configured unprivileged
//! user when walshadow runs as root (PostgreSQL refuses to run as root), and
//! handing that user the files it must own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Who the shadow's server processes run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// `false` when walshadow already runs as this user.
    pub switch: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(
        "walshadow runs as root and PostgreSQL refuses to: set [shadow] run_as to an unprivileged user \
         (e.g. run_as = \"postgres\")"
    )]
    RootWithoutRunAs,
    #[error("[shadow] run_as = {0:?}: no such user in /etc/passwd")]
    NoSuchUser(String),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl ServerUser {
    /// Resolves `run_as` (needed when running as root; ignored otherwise
    /// unless it names another user, which needs root).
    pub fn resolve(run_as: Option<&str>) -> Result<ServerUser, ProcessError> {
        let euid = effective_uid();
        match run_as {
            Some(name) => {
                let (uid, gid) = lookup_user(name)?;
                Ok(ServerUser {
                    name: name.to_owned(),
                    uid,
                    gid,
                    switch: uid != euid,
                })
            }
            None if euid == 0 => Err(ProcessError::RootWithoutRunAs),
            None => Ok(ServerUser {
                name: std::env::var("USER").unwrap_or_else(|_| euid.to_string()),
                uid: euid,
                gid: effective_gid(),
                switch: false,
            }),
        }
    }

    /// A command for `program` that runs as this user, with a clean
    /// environment ([`child_command`]).
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = child_command(program);
        if self.switch {
            use std::os::unix::process::CommandExt;
            cmd.uid(self.uid).gid(self.gid);
        }
        cmd
    }

    /// Gives `path` (recursively) to this user, when it is another one.
    ///
    /// Never through a link, even one swapped in while it runs: once a
    /// directory is this user's, the user could replace an entry in it with
    /// a link to `/etc` between a look and a chown by path. So a directory
    /// is opened without following links and walked through its open
    /// descriptor (`/proc/self/fd/N/...`, which resolves to the directory
    /// opened, not to whatever the path names now); entries are `lchown`ed.
    pub fn own_recursive(&self, path: &Path) -> Result<(), ProcessError> {
        if !self.switch {
            return Ok(());
        }
        let io = |source| ProcessError::Io {
            what: "chown",
            path: path.to_owned(),
            source,
        };
        match open_dir_nofollow(path) {
            Ok(dir) => self.own_dir(&dir).map_err(io),
            // Not a directory (or a link): the entry itself, not its target.
            Err(e) if not_a_directory(&e) => {
                std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid)).map_err(io)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn own_dir(&self, dir: &std::fs::File) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        std::os::unix::fs::fchown(dir, Some(self.uid), Some(self.gid))?;
        let base = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        for entry in std::fs::read_dir(&base)? {
            let entry = base.join(entry?.file_name());
            match open_dir_nofollow(&entry) {
                Ok(sub) => self.own_dir(&sub)?,
                Err(e) if not_a_directory(&e) => {
                    std::os::unix::fs::lchown(&entry, Some(self.uid), Some(self.gid))?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// What opening a non-directory, or a link, with `O_DIRECTORY |
/// O_NOFOLLOW` fails with (`ENOTDIR`, `ELOOP`).
fn not_a_directory(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    let raw = e.raw_os_error();
    raw == Some(Errno::NOTDIR.raw_os_error()) || raw == Some(Errno::LOOP.raw_os_error())
}

/// Opens directory `path` without following a link in its last component.
fn open_dir_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(i32::try_from(flags.bits()).unwrap_or(0))
        .open(path)
}

/// What of walshadow's environment its children (`pg_ctl`, `postgres`,
/// `pg_dump`) get: the search path, the time zone and the locale. Nothing
/// else — not `PGPASSWORD`, not a ClickHouse password, nothing another
/// user could read in `/proc/<pid>/environ` of a server process.
const CHILD_ENV: &[&str] = &["PATH", "TZ", "LANG", "LANGUAGE"];

/// A command for `program` with only [`CHILD_ENV`] and `LC_*` of this
/// process's environment.
pub fn child_command(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear();
    for (key, value) in std::env::vars_os() {
        let keep = key
            .to_str()
            .is_some_and(|k| CHILD_ENV.contains(&k) || k.starts_with("LC_"));
        if keep {
            cmd.env(key, value);
        }
    }
    cmd
}

/// Creates `dir` (and parents) with `mode`, and sets `mode` on it if it
/// existed: a directory planted or loosened by someone else is tightened
/// before anything goes in. A symlink in its place is refused.
pub fn private_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)?;
    if std::fs::symlink_metadata(dir)?.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link; walshadow keeps its files in a real directory",
            dir.display()
        )));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// Takes group and other permissions off everything under `dir` (not
/// `dir` itself, not through links) that has them: state an older
/// walshadow wrote under a looser umask. Returns how many entries changed.
pub fn close_to_others(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
    let me = effective_uid();
    let mut changed = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let meta = std::fs::symlink_metadata(&path)?;
        // Only what is ours: in a directory another user owns (the server
        // user's socket directories) an entry could be swapped for a link
        // between the look and the chmod, which would follow it.
        if meta.file_type().is_symlink() || meta.uid() != me {
            continue;
        }
        let mode = meta.permissions().mode();
        // Sockets keep their mode: their owners set it.
        if mode & 0o077 != 0 && !meta.file_type().is_socket() {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700))?;
            changed += 1;
        }
        if meta.is_dir() {
            changed += close_to_others(&path)?;
        }
    }
    Ok(changed)
}

/// The name of the OS user this process runs as (its uid as text when
/// `/etc/passwd` has no entry): what peer authentication sees.
pub fn os_user_name() -> String {
    let uid = effective_uid();
    std::fs::read_to_string("/etc/passwd")
        .ok()
        .and_then(|passwd| {
            passwd.lines().find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 4 && f.get(2)?.parse::<u32>().ok()? == uid)
                    .then(|| f.first().map(|n| (*n).to_owned()))?
            })
        })
        .unwrap_or_else(|| uid.to_string())
}

/// The effective uid: the owner of `/proc/self` (no libc call, no unsafe).
fn effective_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

fn effective_gid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.gid())
        .unwrap_or(u32::MAX)
}

/// `(uid, gid)` of `name` from /etc/passwd.
fn lookup_user(name: &str) -> Result<(u32, u32), ProcessError> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|source| ProcessError::Io {
        what: "reading",
        path: "/etc/passwd".into(),
        source,
    })?;
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 4 && f[0] == name)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
        })
        .next()
        .ok_or_else(|| ProcessError::NoSuchUser(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root: a tree is given away, a link in it is not followed.
    #[test]
    fn own_recursive_never_follows_a_link() {
        if effective_uid() != 0 {
            eprintln!("skipped: needs root to chown");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let base = std::env::temp_dir().join(format!("walshadow-own-{}", std::process::id()));
        let tree = base.join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("sub/file"), "x").unwrap();
        let outside = base.join("outside");
        std::fs::write(&outside, "keep").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("sub/link")).unwrap();
        std::os::unix::fs::symlink(&base, tree.join("up")).unwrap();
        let user = ServerUser {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
            switch: true,
        };
        user.own_recursive(&tree).unwrap();
        for p in ["", "sub", "sub/file"] {
            assert_eq!(std::fs::metadata(tree.join(p)).unwrap().uid(), 65534, "{p}");
        }
        assert_eq!(
            std::fs::symlink_metadata(tree.join("sub/link"))
                .unwrap()
                .uid(),
            65534
        );
        assert_eq!(
            std::fs::metadata(&outside).unwrap().uid(),
            0,
            "followed a link"
        );
        assert_eq!(
            std::fs::metadata(&base).unwrap().uid(),
            0,
            "followed a link"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
