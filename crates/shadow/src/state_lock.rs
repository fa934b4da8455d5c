//! One process per state directory.
//!
//! `run`, `init` and the commands that write the TOAST mirror take an
//! exclusive lock on `<state dir>/walshadow.lock` before they touch anything
//! (the shadow, its sockets, the metrics port, the mirror). Two processes on
//! one state directory — a unit file and a person, two hosts on shared
//! storage — would stop each other's shadow and remove each other's feeder
//! socket; the second one is refused instead, naming the first.
//!
//! The lock is `flock(2)` (std's `File::try_lock`): the kernel drops it when
//! the process ends, however it ends, so a `kill -9` leaves no stale lock to
//! clean up. The file's contents (pid and command of the holder) only make
//! the refusal readable. Files are opened close-on-exec, so the shadow's
//! postmaster (started by `run`) never inherits the lock.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The lock file's name inside the state directory (`init --force` keeps it).
pub const LOCK_FILE: &str = "walshadow.lock";

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum StateLockError {
    #[error(
        "another walshadow ({holder}) holds {dir}; stop it first — two processes on one \
         state directory would break each other"
    )]
    Held { dir: PathBuf, holder: String },
    #[error("locking {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Held for as long as the value lives.
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl StateLock {
    /// Locks `dir` (created, private, if missing) for `command`.
    pub fn acquire(dir: &Path, command: &str) -> Result<StateLock, StateLockError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| StateLockError::Io { path, source }
        };
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        let path = dir.join(LOCK_FILE);
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(StateLockError::Held {
                    dir: dir.to_owned(),
                    holder: holder_text(&text),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        file.set_len(0).map_err(io(&path))?;
        writeln!(file, "{}\n{command}", std::process::id()).map_err(io(&path))?;
        Ok(StateLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// "pid N, `walshadow run`" from the lock file's lines.
fn holder_text(text: &str) -> String {
    let mut lines = text.lines();
    match (lines.next().map(str::trim), lines.next().map(str::trim)) {
        (Some(pid), Some(cmd)) if !pid.is_empty() => format!("pid {pid}, `walshadow {cmd}`"),
        (Some(pid), _) if !pid.is_empty() => format!("pid {pid}"),
        _ => "a process".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_and_released_on_drop() {
        let dir = std::env::temp_dir().join(format!("walshadow-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = StateLock::acquire(&dir, "run").unwrap();
        let e = StateLock::acquire(&dir, "init").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(&format!("pid {}, `walshadow run`", std::process::id())),
            "{text}"
        );
        assert!(text.contains(&dir.display().to_string()), "{text}");
        drop(first);
        let again = StateLock::acquire(&dir, "init").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(again.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn holder_lines() {
        assert_eq!(holder_text("12\nrun\n"), "pid 12, `walshadow run`");
        assert_eq!(holder_text("12"), "pid 12");
        assert_eq!(holder_text(""), "a process");
    }
}
