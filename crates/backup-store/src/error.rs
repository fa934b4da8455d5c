//! What can go wrong reading a store, told apart the way callers act on it:
//! an unreachable store is waited out, a missing or malformed object is the
//! operator's to fix, an unsupported feature names what is not read.

/// A failed read of a backup store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer (I/O error, network, permissions): retry later.
    #[error("backup store {store}: reading {path}: {source}")]
    Unreachable {
        store: String,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The store refused the credentials (or has none for them).
    #[error(
        "backup store {store}: reading {path} was refused ({source}): check the credentials \
         ([backup] credentials_file, or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
    )]
    Denied {
        store: String,
        path: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The object is not in the store.
    #[error("backup store {store}: {path} does not exist")]
    NotFound { store: String, path: String },
    /// The object is there but is not what the tool writes.
    #[error("backup store {store}: {path}: {reason}")]
    Malformed {
        store: String,
        path: String,
        reason: String,
    },
    /// The backup asked for (`[backup] backup`) is not among the store's.
    #[error("backup store {store}: backup {wanted:?} is not in the store (it holds: {held})")]
    NoSuchBackup {
        store: String,
        wanted: String,
        held: String,
    },
    /// Something the store uses that walshadow does not read (yet).
    #[error("backup store {store}: {what} is not supported: {remedy}")]
    Unsupported {
        store: String,
        what: String,
        remedy: String,
    },
}

impl StoreError {
    /// Worth retrying: the store may answer later.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. })
    }
}
