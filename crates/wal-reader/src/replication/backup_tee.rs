//! One `BASE_BACKUP` read, two sinks: each member goes to the sinks that
//! keep it (a bootstrap lands the catalog files and walks the selected
//! tables' pages from the same stream; a member both want reaches both).

use bytes::Bytes;

use super::base_backup::{ArchiveInfo, BackupSink, FileAction, SinkError};
use super::ustar::TarEntry;

/// Both sinks, in the order given: every archive event reaches both, each
/// member's data the ones that kept it.
#[derive(Debug)]
pub struct BackupTee<A, B> {
    pub first: A,
    pub second: B,
    /// Which of the two kept the current member.
    keeping: (bool, bool),
}

impl<A, B> BackupTee<A, B> {
    pub fn new(first: A, second: B) -> BackupTee<A, B> {
        BackupTee {
            first,
            second,
            keeping: (false, false),
        }
    }

    /// The two sinks, after the backup.
    pub fn into_inner(self) -> (A, B) {
        (self.first, self.second)
    }
}

impl<A: BackupSink + Send, B: BackupSink + Send> BackupSink for BackupTee<A, B> {
    async fn begin_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
        self.first.begin_archive(archive).await?;
        self.second.begin_archive(archive).await
    }

    async fn begin_file(
        &mut self,
        archive: &ArchiveInfo,
        file: &TarEntry,
    ) -> Result<FileAction, SinkError> {
        let first = self.first.begin_file(archive, file).await? == FileAction::Keep;
        let second = self.second.begin_file(archive, file).await? == FileAction::Keep;
        self.keeping = (first, second);
        Ok(if first || second {
            FileAction::Keep
        } else {
            FileAction::Skip
        })
    }

    async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        // `Bytes` clones share the buffer: no copy for the second sink.
        match self.keeping {
            (true, true) => {
                self.first.file_data(chunk.clone()).await?;
                self.second.file_data(chunk).await
            }
            (true, false) => self.first.file_data(chunk).await,
            (false, true) => self.second.file_data(chunk).await,
            (false, false) => Ok(()),
        }
    }

    async fn end_file(&mut self) -> Result<(), SinkError> {
        let (first, second) = std::mem::take(&mut self.keeping);
        if first {
            self.first.end_file().await?;
        }
        if second {
            self.second.end_file().await?;
        }
        Ok(())
    }

    async fn end_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
        self.first.end_archive(archive).await?;
        self.second.end_archive(archive).await
    }

    async fn manifest_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
        self.first.manifest_data(chunk.clone()).await?;
        self.second.manifest_data(chunk).await
    }

    fn progress(&mut self, bytes_done: u64) {
        self.first.progress(bytes_done);
        self.second.progress(bytes_done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::ustar::EntryKind;

    /// Keeps members whose path starts with `prefix`; records what it got.
    #[derive(Debug, Default)]
    struct Recorder {
        prefix: &'static str,
        events: Vec<String>,
    }

    impl BackupSink for Recorder {
        async fn begin_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
            self.events.push(format!("begin {}", archive.name));
            Ok(())
        }

        async fn begin_file(
            &mut self,
            _: &ArchiveInfo,
            file: &TarEntry,
        ) -> Result<FileAction, SinkError> {
            if file.path.starts_with(self.prefix) {
                self.events.push(format!("file {}", file.path));
                Ok(FileAction::Keep)
            } else {
                Ok(FileAction::Skip)
            }
        }

        async fn file_data(&mut self, chunk: Bytes) -> Result<(), SinkError> {
            self.events
                .push(format!("data {}", String::from_utf8_lossy(&chunk)));
            Ok(())
        }

        async fn end_file(&mut self) -> Result<(), SinkError> {
            self.events.push("end".into());
            Ok(())
        }

        async fn end_archive(&mut self, archive: &ArchiveInfo) -> Result<(), SinkError> {
            self.events.push(format!("end {}", archive.name));
            Ok(())
        }
    }

    fn entry(path: &str) -> TarEntry {
        TarEntry {
            path: path.into(),
            size: 1,
            kind: EntryKind::File,
            mode: 0o600,
            mtime: 0,
        }
    }

    #[tokio::test]
    async fn each_member_reaches_the_sinks_that_keep_it() {
        let mut tee = BackupTee::new(
            Recorder {
                prefix: "global/",
                ..Default::default()
            },
            Recorder {
                prefix: "base/",
                ..Default::default()
            },
        );
        let base = ArchiveInfo {
            name: "base.tar".into(),
            spcoid: None,
            location: None,
        };
        tee.begin_archive(&base).await.unwrap();
        for (path, data) in [
            ("global/1262", "g"),
            ("base/5/16384", "b"),
            ("pg_wal/x", "w"),
        ] {
            let action = tee.begin_file(&base, &entry(path)).await.unwrap();
            assert_eq!(
                action == FileAction::Keep,
                !path.starts_with("pg_wal"),
                "{path}"
            );
            if action == FileAction::Keep {
                tee.file_data(Bytes::from(data)).await.unwrap();
                tee.end_file().await.unwrap();
            }
        }
        tee.end_archive(&base).await.unwrap();
        let (landing, walk) = tee.into_inner();
        assert_eq!(
            landing.events,
            [
                "begin base.tar",
                "file global/1262",
                "data g",
                "end",
                "end base.tar"
            ]
        );
        assert_eq!(
            walk.events,
            [
                "begin base.tar",
                "file base/5/16384",
                "data b",
                "end",
                "end base.tar"
            ]
        );
    }

    #[tokio::test]
    async fn a_member_both_keep_reaches_both() {
        let mut tee = BackupTee::new(
            Recorder {
                prefix: "pg_xact/",
                ..Default::default()
            },
            Recorder {
                prefix: "pg_",
                ..Default::default()
            },
        );
        let base = ArchiveInfo {
            name: "base.tar".into(),
            spcoid: None,
            location: None,
        };
        assert_eq!(
            tee.begin_file(&base, &entry("pg_xact/0000")).await.unwrap(),
            FileAction::Keep
        );
        tee.file_data(Bytes::from("x")).await.unwrap();
        tee.end_file().await.unwrap();
        let (a, b) = tee.into_inner();
        assert_eq!(a.events, ["file pg_xact/0000", "data x", "end"]);
        assert_eq!(b.events, ["file pg_xact/0000", "data x", "end"]);
    }
}
