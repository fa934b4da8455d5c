//! Errors of the chunk mirror. Each names the mirror file and the operation.

use std::path::{Path, PathBuf};

/// What went wrong with the mirror file at `path`.
///
/// Every variant is definite for the running pipeline: the open write
/// transaction is lost (see [`MirrorError::Poisoned`]) and the remedy is to
/// stop, fix the cause named here and restart, which replays from the last
/// durable progress.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// redb failed (I/O, a full disk, a damaged file).
    #[error("TOAST chunk mirror {}: {op} failed: {source}", .path.display())]
    Storage {
        path: PathBuf,
        op: &'static str,
        // Boxed: redb::Error is large and this is the cold path.
        #[source]
        source: Box<redb::Error>,
    },
    /// Another process holds the file (redb locks it for its writer).
    #[error(
        "TOAST chunk mirror {} is open in another process (a running walshadow); \
         stop it first, or read the running daemon's own status report",
        .path.display()
    )]
    InUse { path: PathBuf },
    /// A stored entry does not decode: the file was written by something else
    /// or damaged beneath redb's checksums.
    #[error(
        "TOAST chunk mirror {}: {op}: corrupt entry: {detail}; \
         remove the file so that walshadow rebuilds the mirror",
        .path.display()
    )]
    Corrupt {
        path: PathBuf,
        op: &'static str,
        detail: String,
    },
    /// The file was written by a walshadow with another on-disk layout.
    #[error(
        "TOAST chunk mirror {} has format version {found}, this walshadow reads version {expected}; \
         remove the file so that walshadow rebuilds the mirror",
        .path.display()
    )]
    Format {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    /// An earlier mutation or commit failed part way, so the open transaction
    /// may hold half an operation and must never be committed.
    #[error(
        "TOAST chunk mirror {}: unusable after an earlier failed {op}; \
         reopen it (uncommitted changes are discarded and replayed)",
        .path.display()
    )]
    Poisoned { path: PathBuf, op: &'static str },
    /// A plain file-system call failed (file size for the report).
    #[error("TOAST chunk mirror {}: {op}: {source}", .path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl MirrorError {
    pub(crate) fn storage(path: &Path, op: &'static str, source: impl Into<redb::Error>) -> Self {
        MirrorError::Storage {
            path: path.to_path_buf(),
            op,
            source: Box::new(source.into()),
        }
    }

    pub(crate) fn corrupt(path: &Path, op: &'static str, detail: impl Into<String>) -> Self {
        MirrorError::Corrupt {
            path: path.to_path_buf(),
            op,
            detail: detail.into(),
        }
    }
}
