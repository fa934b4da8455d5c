//! Where a store's objects are, behind `object_store`'s one API: a local
//! path today; S3 (and S3-compatible servers) through the same calls.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use crate::StoreError;

/// A store's objects under its root, addressed by `/`-separated keys.
#[derive(Debug, Clone)]
pub struct Repository {
    objects: Arc<dyn ObjectStore>,
    /// How the store is named in errors and logs.
    name: String,
}

/// An object's key and size, as a listing gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key below the repository's root.
    pub key: String,
    pub size: u64,
}

impl Repository {
    /// The repository at `location`: an absolute local path (`s3://` to come).
    pub fn open(location: &str) -> Result<Self, StoreError> {
        let unsupported = |what: &str| StoreError::Unsupported {
            store: location.to_owned(),
            what: what.to_owned(),
            remedy: "give the repository as an absolute local path (a mounted or synced copy \
                     of the bucket serves too)"
                .to_owned(),
        };
        if location.contains("://") {
            return Err(unsupported("a store addressed by URL"));
        }
        if !std::path::Path::new(location).is_absolute() {
            return Err(unsupported("a relative path"));
        }
        let objects =
            LocalFileSystem::new_with_prefix(location).map_err(|e| StoreError::Unreachable {
                store: location.to_owned(),
                path: String::new(),
                source: Box::new(e),
            })?;
        Ok(Repository {
            objects: Arc::new(objects),
            name: location.to_owned(),
        })
    }

    /// The store's name for errors: its location.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn path(&self, key: &str) -> Result<Path, StoreError> {
        Path::parse(key).map_err(|e| self.malformed(key, format!("not a valid key: {e}")))
    }

    /// A [`StoreError::Malformed`] about `key`.
    pub fn malformed(&self, key: &str, reason: impl Into<String>) -> StoreError {
        StoreError::Malformed {
            store: self.name.clone(),
            path: key.to_owned(),
            reason: reason.into(),
        }
    }

    fn failed(&self, key: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NotFound {
                store: self.name.clone(),
                path: key.to_owned(),
            },
            e => StoreError::Unreachable {
                store: self.name.clone(),
                path: key.to_owned(),
                source: Box::new(e),
            },
        }
    }

    /// The whole object at `key`.
    pub async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let path = self.path(key)?;
        let got = self
            .objects
            .get(&path)
            .await
            .map_err(|e| self.failed(key, e))?;
        got.bytes().await.map_err(|e| self.failed(key, e))
    }

    /// `len` bytes of the object at `key` from `offset` (a file in a bundle).
    pub async fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let path = self.path(key)?;
        let end = offset
            .checked_add(len)
            .ok_or_else(|| self.malformed(key, "range past 2^64"))?;
        self.objects
            .get_range(&path, offset..end)
            .await
            .map_err(|e| self.failed(key, e))
    }

    /// The objects directly under `prefix` (a "directory"), sorted by key.
    pub async fn list(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        let path = self.path(prefix)?;
        let listed = self
            .objects
            .list_with_delimiter(Some(&path))
            .await
            .map_err(|e| self.failed(prefix, e))?;
        let mut entries: Vec<Entry> = listed
            .objects
            .into_iter()
            .map(|m| Entry {
                key: m.location.to_string(),
                size: m.size,
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Every object below `prefix`, at any depth, sorted by key.
    pub async fn list_all(&self, prefix: &str) -> Result<Vec<Entry>, StoreError> {
        let path = self.path(prefix)?;
        let mut entries: Vec<Entry> = self
            .objects
            .list(Some(&path))
            .map_ok(|m| Entry {
                key: m.location.to_string(),
                size: m.size,
            })
            .try_collect()
            .await
            .map_err(|e| self.failed(prefix, e))?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }
}
