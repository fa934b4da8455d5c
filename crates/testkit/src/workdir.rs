//! A private work directory for tests that run walshadow's own server-side
//! pieces (the shadow, the feeder's socket): owned by the [`ServerUser`] so
//! PostgreSQL started as that user can reach it, removed on drop (kept with
//! `WALSHADOW_KEEP_CLUSTERS=1`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::{Cluster, ServerUser};

/// A throwaway directory the server user owns.
#[derive(Debug)]
pub struct WorkDir {
    pub path: PathBuf,
}

impl WorkDir {
    /// `/tmp/walshadow-<tag>-<pid>` (the system temp dir when not root).
    pub fn new(tag: &str) -> Result<WorkDir> {
        let user = ServerUser::get()?;
        let parent = if user.switches_user {
            PathBuf::from("/tmp")
        } else {
            std::env::temp_dir()
        };
        let path = parent.join(format!("walshadow-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        user.create_private_dir(&path)?;
        Ok(WorkDir { path })
    }

    /// A private subdirectory.
    pub fn sub(&self, name: &str) -> Result<PathBuf> {
        let p = self.path.join(name);
        ServerUser::get()?.create_private_dir(&p)?;
        Ok(p)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::env::var("WALSHADOW_KEEP_CLUSTERS").is_ok_and(|v| v == "1") {
            eprintln!("walshadow-testkit: kept {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Writes a walshadow config file for `source` into `work` (shadow data
/// directory `data_dir`, state in `work/state`, `run_as` the server user
/// when running as root) and returns its path.
pub fn write_walshadow_config(
    source: &Cluster,
    work: &Path,
    data_dir: &Path,
    slot: &str,
) -> Result<PathBuf> {
    let user = ServerUser::get()?;
    let run_as = if user.switches_user {
        format!("run_as = \"{}\"\n", user.name)
    } else {
        String::new()
    };
    let text = format!(
        "[source]\nurl = \"{}\"\nslot = \"{slot}\"\n\n[shadow]\ndata_dir = \"{}\"\npg_bin = \"{}\"\n{run_as}\n[state]\ndir = \"{}\"\n",
        source.url("postgres"),
        data_dir.display(),
        source.install().bin_dir().display(),
        work.join("state").display()
    );
    let path = work.join("walshadow.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}
