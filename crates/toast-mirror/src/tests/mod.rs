//! Tests of the mirror: one per rule (`unit`), a model-based property test
//! (`model`), crash drills (`crash`) and an ignored timing run (`timing`).

mod crash;
mod model;
mod timing;
mod unit;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A scratch directory removed on drop.
pub(crate) struct TestDir(PathBuf);

impl TestDir {
    pub fn new(tag: &str) -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "walshadow-toast-mirror-test-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir(path)
    }

    /// The mirror file inside the directory.
    pub fn file(&self) -> PathBuf {
        self.0.join("toast.redb")
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
