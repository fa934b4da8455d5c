//! walshadow's small state files, in one place: how a file is replaced
//! durably ([`write_durably`]) and the envelope every JSON state file
//! shares ([`StateFile`]: a format version, a CRC-32C, a verified read).
//!
//! ```text
//!  progress.json   {"progress": {"format_version": 1, …}, "crc32c": N}   Envelope::Nested("progress")
//!  init.json       {"format_version": 1, …, "crc32c": N}                 Envelope::Flat
//! ```
//!
//! The checksum is the CRC-32C of the document serialized alone (compact
//! JSON, fields in declaration order), so a file is checked by what it
//! means, not by its spacing: `init.json` is written pretty, and a reader
//! that only knows the document's fields still parses a flat file.

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Replaces `dir/name` with `content` durably: write-temp, fsync, rename,
/// fsync of the directory. A crash leaves either the old file or the new
/// one, never a torn one. Every state file walshadow keeps is replaced this
/// way (`init.json`, `progress.json`, `filter.ckpt`, `backfills.toml`),
/// except the segment store's, which every flush updates: it is created
/// this way and then written in place in alternate slots.
pub fn write_durably(dir: &Path, name: &str, content: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(content)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Where the document sits in its file, beside the `crc32c` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Envelope {
    /// `{"<key>": document, "crc32c": N}`.
    Nested(&'static str),
    /// The document's own fields and `crc32c` in one object.
    Flat,
}

/// A state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    /// The file is there but cannot be used; `remedy` says what to do.
    #[error("{path}: {problem}; {remedy}")]
    Invalid {
        path: PathBuf,
        problem: String,
        remedy: &'static str,
    },
}

/// A JSON document kept in the state directory under [`StateFile::FILE`].
pub trait StateFile: Serialize + DeserializeOwned {
    const FILE: &'static str;
    /// The version this walshadow writes and reads; the document carries
    /// its own in a `format_version` field.
    const FORMAT_VERSION: u32;
    const ENVELOPE: Envelope;
    /// What an operator does about a file that cannot be used.
    const REMEDY: &'static str;
    /// Written indented, for a reader; a file rewritten often is not.
    const PRETTY: bool = true;

    /// The document's `format_version` field.
    fn format_version(&self) -> u32;

    /// Reads and checks `<dir>/FILE`; `None` when there is none.
    fn read(dir: &Path) -> Result<Option<Self>, StateFileError> {
        let path = dir.join(Self::FILE);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StateFileError::Io { path, source }),
        };
        let invalid = |problem: String| StateFileError::Invalid {
            path: path.clone(),
            problem,
            remedy: Self::REMEDY,
        };
        let serde_json::Value::Object(mut file) =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?
        else {
            return Err(invalid("not a JSON object".into()));
        };
        let stored = file
            .remove("crc32c")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| invalid("no crc32c".into()))?;
        let doc = match Self::ENVELOPE {
            Envelope::Nested(key) => file
                .remove(key)
                .ok_or_else(|| invalid(format!("no {key:?}")))?,
            Envelope::Flat => serde_json::Value::Object(file),
        };
        let doc: Self = serde_json::from_value(doc).map_err(|e| invalid(e.to_string()))?;
        if doc.format_version() != Self::FORMAT_VERSION {
            return Err(invalid(format!(
                "format version {} (this walshadow reads {})",
                doc.format_version(),
                Self::FORMAT_VERSION
            )));
        }
        if u64::from(checksum(&doc).map_err(|e| invalid(e.to_string()))?) != stored {
            return Err(invalid("checksum mismatch (torn or edited file)".into()));
        }
        Ok(Some(doc))
    }

    /// [`StateFile::read`] of a file that must be there.
    fn read_present(dir: &Path) -> Result<Self, StateFileError> {
        Self::read(dir)?.ok_or_else(|| StateFileError::Io {
            path: dir.join(Self::FILE),
            source: io::ErrorKind::NotFound.into(),
        })
    }

    /// Replaces `<dir>/FILE` durably ([`write_durably`]).
    fn write(&self, dir: &Path) -> Result<(), StateFileError> {
        let body = serde_json::to_vec(self).map_err(|e| StateFileError::Invalid {
            path: dir.join(Self::FILE),
            problem: e.to_string(),
            remedy: Self::REMEDY,
        })?;
        Self::write_serialized(dir, &body)
    }

    /// [`StateFile::write`] of `body`, which must be what
    /// `serde_json::to_vec` makes of the document (a caller may build it
    /// faster, from parts it keeps serialized). The checksum is over these
    /// bytes; a compact nested file wraps them as they are.
    fn write_serialized(dir: &Path, body: &[u8]) -> Result<(), StateFileError> {
        let path = dir.join(Self::FILE);
        let invalid = |e: serde_json::Error| StateFileError::Invalid {
            path: path.clone(),
            problem: e.to_string(),
            remedy: Self::REMEDY,
        };
        let crc = crc32c::crc32c(body);
        let text = match Self::ENVELOPE {
            Envelope::Nested(key) if !Self::PRETTY => {
                let key = serde_json::to_vec(key).map_err(invalid)?;
                let mut text = Vec::with_capacity(body.len() + key.len() + 24);
                text.push(b'{');
                text.extend_from_slice(&key);
                text.push(b':');
                text.extend_from_slice(body);
                text.extend_from_slice(format!(",\"crc32c\":{crc}}}").as_bytes());
                text
            }
            envelope => {
                let doc: serde_json::Value = serde_json::from_slice(body).map_err(invalid)?;
                let file = match envelope {
                    Envelope::Nested(key) => {
                        let mut map = serde_json::Map::new();
                        map.insert(key.to_owned(), doc);
                        map.insert("crc32c".to_owned(), crc.into());
                        map
                    }
                    Envelope::Flat => {
                        let serde_json::Value::Object(mut map) = doc else {
                            return Err(StateFileError::Invalid {
                                path,
                                problem: "a flat state document must be a struct".into(),
                                remedy: Self::REMEDY,
                            });
                        };
                        map.insert("crc32c".to_owned(), crc.into());
                        map
                    }
                };
                if Self::PRETTY {
                    serde_json::to_vec_pretty(&file)
                } else {
                    serde_json::to_vec(&file)
                }
                .map_err(invalid)?
            }
        };
        write_durably(dir, Self::FILE, &text).map_err(|source| StateFileError::Io { path, source })
    }
}

/// The CRC-32C of `doc` serialized alone, compactly.
fn checksum<T: Serialize>(doc: &T) -> Result<u32, serde_json::Error> {
    Ok(crc32c::crc32c(&serde_json::to_vec(doc)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Nested {
        format_version: u32,
        n: u64,
        name: String,
    }
    impl StateFile for Nested {
        const FILE: &'static str = "nested.json";
        const FORMAT_VERSION: u32 = 1;
        const ENVELOPE: Envelope = Envelope::Nested("nested");
        const REMEDY: &'static str = "remove it";
        fn format_version(&self) -> u32 {
            self.format_version
        }
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Flat {
        format_version: u32,
        n: u64,
    }
    impl StateFile for Flat {
        const FILE: &'static str = "flat.json";
        const FORMAT_VERSION: u32 = 2;
        const ENVELOPE: Envelope = Envelope::Flat;
        const REMEDY: &'static str = "run init again";
        fn format_version(&self) -> u32 {
            self.format_version
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "walshadow-state-file-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trips_and_reads_files_written_by_hand_in_either_spacing() {
        let d = dir("round");
        assert!(Nested::read(&d).unwrap().is_none());
        let doc = Nested {
            format_version: 1,
            n: 7,
            name: "x".into(),
        };
        doc.write(&d).unwrap();
        assert_eq!(Nested::read(&d).unwrap(), Some(doc.clone()));
        // A file written compactly, as progress.json was before this crate.
        let crc = crc32c::crc32c(&serde_json::to_vec(&doc).unwrap());
        let compact = format!(
            r#"{{"nested":{},"crc32c":{crc}}}"#,
            serde_json::to_string(&doc).unwrap()
        );
        std::fs::write(d.join(Nested::FILE), compact).unwrap();
        assert_eq!(Nested::read(&d).unwrap(), Some(doc));
        let flat = Flat {
            format_version: 2,
            n: 9,
        };
        flat.write(&d).unwrap();
        let text = std::fs::read_to_string(d.join(Flat::FILE)).unwrap();
        assert!(
            text.contains("\"crc32c\"") && text.contains("\"n\": 9"),
            "{text}"
        );
        assert_eq!(Flat::read_present(&d).unwrap(), flat);
    }

    #[test]
    fn refuses_edits_versions_and_garbage_naming_the_remedy() {
        let d = dir("bad");
        let flat = Flat {
            format_version: 2,
            n: 9,
        };
        flat.write(&d).unwrap();
        let path = d.join(Flat::FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"n\": 9", "\"n\": 10")).unwrap();
        let e = Flat::read(&d).unwrap_err().to_string();
        assert!(
            e.contains("checksum mismatch") && e.contains("run init again"),
            "{e}"
        );
        Flat {
            format_version: 3,
            n: 9,
        }
        .write(&d)
        .unwrap();
        let e = Flat::read(&d).unwrap_err().to_string();
        assert!(
            e.contains("format version 3 (this walshadow reads 2)"),
            "{e}"
        );
        for garbage in ["", "[]", "{\"n\": 1}", "{\"crc32c\": 1}", "\u{0}\u{ff}"] {
            std::fs::write(&path, garbage).unwrap();
            assert!(
                matches!(Flat::read(&d), Err(StateFileError::Invalid { .. })),
                "{garbage:?}"
            );
        }
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            Flat::read_present(&d),
            Err(StateFileError::Io { .. })
        ));
    }
}
