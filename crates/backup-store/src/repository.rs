//! Where a store's objects are, behind `object_store`'s one API: a local
//! path, or an S3 bucket (and S3-compatible servers) with a key prefix.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;

use crate::StoreError;

/// A store's objects under its root, addressed by `/`-separated keys.
#[derive(Debug, Clone)]
pub struct Repository {
    objects: Arc<dyn ObjectStore>,
    /// How the store is named in errors and logs.
    name: String,
    /// Listings come in key order (S3's do; a local directory's do not).
    ordered: bool,
}

/// An object's key and size, as a listing gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key below the repository's root.
    pub key: String,
    pub size: u64,
    /// When it was written, ms since the Unix epoch (wal-g orders its
    /// backups by their sentinel's).
    pub modified_ms: i64,
}

/// How to reach an S3 store; unset fields come from the environment
/// (`AWS_ENDPOINT`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …) as the AWS tools
/// read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// `https://host:port` of an S3-compatible server (AWS's own without).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// `https://endpoint/bucket/key` rather than `https://bucket.endpoint/key`.
    pub path_style: bool,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
}

impl Repository {
    /// The repository at `location`: an absolute local path, or
    /// `s3://bucket/prefix` reached with `s3`.
    pub fn open(location: &str, s3: &S3Options) -> Result<Self, StoreError> {
        let unsupported = |what: &str| StoreError::Unsupported {
            store: location.to_owned(),
            what: what.to_owned(),
            remedy: "give the repository as an absolute local path or as s3://bucket/prefix"
                .to_owned(),
        };
        if let Some(rest) = location.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(unsupported("an s3:// location without a bucket"));
            }
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_virtual_hosted_style_request(!s3.path_style);
            if let Some(e) = &s3.endpoint {
                // A plain-HTTP endpoint is the operator's explicit choice
                // (a server on loopback, say).
                b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
            }
            if let Some(r) = &s3.region {
                b = b.with_region(r);
            }
            if let Some(k) = &s3.access_key_id {
                b = b.with_access_key_id(k);
            }
            if let Some(k) = &s3.secret_access_key {
                b = b.with_secret_access_key(k);
            }
            if let Some(t) = &s3.session_token {
                b = b.with_token(t);
            }
            let store = b.build().map_err(|e| StoreError::Unsupported {
                store: location.to_owned(),
                what: format!("this S3 configuration ({e})"),
                remedy: "set [backup] endpoint, region and path_style as the store needs".into(),
            })?;
            let prefix = prefix.trim_matches('/');
            let objects: Arc<dyn ObjectStore> = if prefix.is_empty() {
                Arc::new(store)
            } else {
                Arc::new(PrefixStore::new(store, prefix))
            };
            return Ok(Repository {
                objects,
                name: location.to_owned(),
                // S3 lists in key order, but for S3 Express directory
                // buckets (`…--x-s3`).
                ordered: !bucket.ends_with("--x-s3"),
            });
        }
        if location.contains("://") {
            return Err(unsupported("a store addressed by this kind of URL"));
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
            ordered: false,
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
            e @ (object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }) => StoreError::Denied {
                store: self.name.clone(),
                path: key.to_owned(),
                source: Box::new(e),
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
        self.open_object(key)
            .await?
            .bytes()
            .await
            .map_err(|e| self.failed(key, e))
    }

    async fn open_object(&self, key: &str) -> Result<object_store::GetResult, StoreError> {
        let path = self.path(key)?;
        self.objects
            .get(&path)
            .await
            .map_err(|e| self.failed(key, e))
    }

    /// The object at `key` written to the local file `dest` as it arrives
    /// (a base backup's tar: cluster-sized, never held in memory). Returns
    /// its size.
    pub async fn download(&self, key: &str, dest: &std::path::Path) -> Result<u64, StoreError> {
        use std::io::Write;
        let got = self.open_object(key).await?;
        let local = |e: std::io::Error| StoreError::Unreachable {
            store: self.name.clone(),
            path: format!("{key} (writing {})", dest.display()),
            source: Box::new(e),
        };
        let mut file = std::io::BufWriter::new(std::fs::File::create(dest).map_err(local)?);
        let mut stream = got.into_stream();
        let mut size = 0u64;
        while let Some(chunk) = stream.try_next().await.map_err(|e| self.failed(key, e))? {
            file.write_all(&chunk).map_err(local)?;
            size += chunk.len() as u64;
        }
        file.into_inner()
            .map_err(|e| local(e.into_error()))?
            .sync_all()
            .map_err(local)?;
        Ok(size)
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
                modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// At most `max` objects below `prefix` whose keys sort after `after`,
    /// in key order (S3's start-after: the store skips the rest for us).
    pub async fn list_after(
        &self,
        prefix: &str,
        after: &str,
        max: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let path = self.path(prefix)?;
        let offset = self.path(after)?;
        let listed = self
            .objects
            .list_with_offset(Some(&path), &offset)
            .map_ok(|m| Entry {
                key: m.location.to_string(),
                size: m.size,
                modified_ms: m.last_modified.timestamp_millis(),
            });
        // In key order the first `max` are the ones; otherwise all are
        // read and sorted.
        let limit = if self.ordered { max } else { usize::MAX };
        let mut entries: Vec<Entry> = listed
            .take(limit)
            .try_collect()
            .await
            .map_err(|e| self.failed(prefix, e))?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries.truncate(max);
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
                modified_ms: m.last_modified.timestamp_millis(),
            })
            .try_collect()
            .await
            .map_err(|e| self.failed(prefix, e))?;
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }
}
