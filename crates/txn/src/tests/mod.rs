//! Unit tests that need the assembler's insides (the merge fan-in).

mod model;
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
            "walshadow-txn-test-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TestDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Spill files in the directory and their total size.
    pub fn spill_files(&self) -> (usize, u64) {
        let mut n = 0;
        let mut bytes = 0;
        for e in std::fs::read_dir(&self.0).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_str().unwrap().ends_with(".spill") {
                n += 1;
                bytes += e.metadata().unwrap().len();
            }
        }
        (n, bytes)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
