//! Spill files: one per transaction buffer, frames appended in LSN order,
//! read back through a small buffered reader. The format is documented in
//! the crate docs ("Spill file format").

#![cfg_attr(
    not(test),
    deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)
)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use walshadow_types::{Lsn, Xid};

use crate::error::TxnError;

/// File names are `walshadow-txn-<xid>-<seq>.spill`.
pub(crate) const FILE_PREFIX: &str = "walshadow-txn-";
pub(crate) const FILE_SUFFIX: &str = ".spill";

/// Format version 1 is part of the magic.
pub(crate) const MAGIC: [u8; 8] = *b"WSTXNSP1";
/// Magic, xid, CRC-32C of the first 12 bytes.
pub(crate) const FILE_HEADER_LEN: u64 = 16;
/// Payload length (u32) and LSN (u64), both little-endian.
pub(crate) const FRAME_HEADER_LEN: usize = 12;
/// CRC-32C of the frame header and payload.
pub(crate) const FRAME_TRAILER_LEN: usize = 4;

/// Write buffer used while a spill (or a merge pass) runs.
pub(crate) const WRITE_BUFFER_BYTES: usize = 64 * 1024;

pub(crate) fn file_name(xid: Xid, seq: u64) -> String {
    format!("{FILE_PREFIX}{xid}-{seq}{FILE_SUFFIX}")
}

/// Whether `name` is one of ours (so a leftover from a crashed run):
/// exactly `walshadow-txn-<digits>-<digits>.spill`.
pub(crate) fn is_spill_file_name(name: &str) -> bool {
    let Some(middle) = name
        .strip_prefix(FILE_PREFIX)
        .and_then(|rest| rest.strip_suffix(FILE_SUFFIX))
    else {
        return false;
    };
    let Some((xid, seq)) = middle.split_once('-') else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    digits(xid) && digits(seq)
}

/// Bytes one frame takes on disk.
pub(crate) fn frame_len(payload_len: usize) -> u64 {
    (FRAME_HEADER_LEN + FRAME_TRAILER_LEN) as u64 + payload_len as u64
}

fn file_header(xid: Xid) -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&xid.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn frame_header(lsn: Lsn, len: u32) -> [u8; FRAME_HEADER_LEN] {
    let mut h = [0u8; FRAME_HEADER_LEN];
    h[..4].copy_from_slice(&len.to_le_bytes());
    h[4..].copy_from_slice(&lsn.0.to_le_bytes());
    h
}

/// One spill file: where it is and what it holds. No handle stays open
/// between spills, so thousands of spilled transactions cost no descriptors.
#[derive(Debug)]
pub(crate) struct SpillFile {
    pub path: PathBuf,
    /// The xid written in the header (the buffer's own, or the top-level
    /// xid for a file a merge pass wrote).
    pub xid: Xid,
    /// Bytes written and kept, header included.
    pub len: u64,
    /// A failed append could not be cut back off: reading must refuse.
    pub damaged: bool,
}

impl SpillFile {
    /// Creates the file (0600) with its header. An existing file of that
    /// name is replaced (names carry a per-run sequence number, so only a
    /// leftover could be there); the file itself is always new, never a
    /// link planted under its name.
    pub fn create(dir: &Path, xid: Xid, seq: u64) -> Result<SpillFile, TxnError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(file_name(xid, seq));
        let write_err = |source| TxnError::SpillWrite {
            path: path.clone(),
            source,
        };
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(write_err(e)),
            _ => {}
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(write_err)?;
        if let Err(e) = f.write_all(&file_header(xid)) {
            drop(f);
            let _ = fs::remove_file(&path);
            return Err(write_err(e));
        }
        Ok(SpillFile {
            path,
            xid,
            len: FILE_HEADER_LEN,
            damaged: false,
        })
    }

    /// Appends the frames `fill` writes. On failure the file is cut back to
    /// its previous length so it never holds a partial or duplicated frame;
    /// if even that fails it is marked damaged.
    pub fn append(
        &mut self,
        fill: impl FnOnce(&mut FrameWriter) -> Result<(), TxnError>,
    ) -> Result<u64, TxnError> {
        let write_err = |source| TxnError::SpillWrite {
            path: self.path.clone(),
            source,
        };
        if self.damaged {
            return Err(write_err(io::Error::other(
                "an earlier failed write could not be cut off",
            )));
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(write_err)?;
        let mut fw = FrameWriter {
            path: &self.path,
            out: BufWriter::with_capacity(WRITE_BUFFER_BYTES, file),
            written: 0,
        };
        let result = fill(&mut fw).and_then(|()| fw.out.flush().map_err(write_err));
        let written = fw.written;
        // Dropping the writer may flush once more; cut back after that.
        drop(fw);
        match result {
            Ok(()) => {
                self.len += written;
                Ok(written)
            }
            Err(e) => {
                let cut = OpenOptions::new()
                    .write(true)
                    .open(&self.path)
                    .and_then(|f| f.set_len(self.len));
                if let Err(cut_err) = cut {
                    tracing::error!(
                        path = %self.path.display(),
                        error = %cut_err,
                        "could not cut a failed spill write off; the transaction is lost for this run"
                    );
                    self.damaged = true;
                }
                Err(e)
            }
        }
    }

    /// Removes the file; a failure is logged, not returned (the next
    /// `Assembler::open` removes leftovers anyway).
    pub fn remove(&self) {
        if let Err(e) = fs::remove_file(&self.path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "could not remove spill file");
        }
    }
}

/// Writes frames into a spill file during [`SpillFile::append`].
pub(crate) struct FrameWriter<'a> {
    path: &'a Path,
    out: BufWriter<File>,
    written: u64,
}

impl FrameWriter<'_> {
    pub fn push(&mut self, lsn: Lsn, payload: &[u8]) -> Result<(), TxnError> {
        let len = u32::try_from(payload.len()).map_err(|_| TxnError::SpillWrite {
            path: self.path.to_path_buf(),
            source: io::Error::other("payload longer than u32::MAX"),
        })?;
        let header = frame_header(lsn, len);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&header), payload);
        let io = (|| {
            self.out.write_all(&header)?;
            self.out.write_all(payload)?;
            self.out.write_all(&crc.to_le_bytes())
        })();
        io.map_err(|source| TxnError::SpillWrite {
            path: self.path.to_path_buf(),
            source,
        })?;
        self.written += frame_len(payload.len());
        Ok(())
    }
}

/// Reads one spill file back frame by frame. The next frame's header is
/// read ahead (so the merge can order by its LSN) but its payload only when
/// taken, so a reader holds its buffer and nothing else.
pub(crate) struct SpillReader {
    path: PathBuf,
    input: BufReader<File>,
    /// File offset of the next unread byte.
    offset: u64,
    end: u64,
    peeked: Option<Peeked>,
    last_lsn: Lsn,
}

struct Peeked {
    start: u64,
    len: u32,
    lsn: Lsn,
    header: [u8; FRAME_HEADER_LEN],
}

impl std::fmt::Debug for SpillReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpillReader")
            .field("path", &self.path)
            .field("offset", &self.offset)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl SpillReader {
    pub fn open(file: &SpillFile, buffer_bytes: usize) -> Result<SpillReader, TxnError> {
        let corrupt = |offset, reason: String| TxnError::CorruptSpill {
            path: file.path.clone(),
            offset,
            reason,
        };
        if file.damaged {
            return Err(corrupt(
                file.len,
                "a failed write could not be cut off".into(),
            ));
        }
        let read_err = |offset, source| TxnError::SpillRead {
            path: file.path.clone(),
            offset,
            source,
        };
        let f = File::open(&file.path).map_err(|e| read_err(0, e))?;
        let on_disk = f.metadata().map_err(|e| read_err(0, e))?.len();
        if on_disk != file.len {
            return Err(corrupt(
                on_disk.min(file.len),
                format!("file is {on_disk} bytes, {} were written", file.len),
            ));
        }
        let mut input = BufReader::with_capacity(buffer_bytes, f);
        let mut header = [0u8; FILE_HEADER_LEN as usize];
        input.read_exact(&mut header).map_err(|e| read_err(0, e))?;
        if header != file_header(file.xid) {
            return Err(corrupt(
                0,
                format!(
                    "bad file header (expected format WSTXNSP1 for xid {})",
                    file.xid
                ),
            ));
        }
        Ok(SpillReader {
            path: file.path.clone(),
            input,
            offset: FILE_HEADER_LEN,
            end: file.len,
            peeked: None,
            last_lsn: Lsn::INVALID,
        })
    }

    fn corrupt(&self, offset: u64, reason: String) -> TxnError {
        TxnError::CorruptSpill {
            path: self.path.clone(),
            offset,
            reason,
        }
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), TxnError> {
        self.input.read_exact(buf).map_err(|source| {
            if source.kind() == io::ErrorKind::UnexpectedEof {
                self.corrupt(self.offset, "file ends inside a frame".into())
            } else {
                TxnError::SpillRead {
                    path: self.path.clone(),
                    offset: self.offset,
                    source,
                }
            }
        })?;
        self.offset += buf.len() as u64;
        Ok(())
    }

    /// The LSN of the next frame, or `None` at the end of the file.
    pub fn peek_lsn(&mut self) -> Result<Option<Lsn>, TxnError> {
        if let Some(p) = &self.peeked {
            return Ok(Some(p.lsn));
        }
        if self.offset == self.end {
            return Ok(None);
        }
        let start = self.offset;
        let mut header = [0u8; FRAME_HEADER_LEN];
        self.read_exact(&mut header)?;
        let [l0, l1, l2, l3, rest @ ..] = header;
        let len = u32::from_le_bytes([l0, l1, l2, l3]);
        let lsn = Lsn(u64::from_le_bytes(rest));
        let room = self.end - start;
        if frame_len(len as usize) > room {
            return Err(self.corrupt(
                start,
                format!("frame length {len} runs past the end of the file ({room} bytes left)"),
            ));
        }
        if lsn < self.last_lsn {
            return Err(self.corrupt(
                start,
                format!(
                    "frame LSN {lsn} is before the previous frame's {}",
                    self.last_lsn
                ),
            ));
        }
        self.peeked = Some(Peeked {
            start,
            len,
            lsn,
            header,
        });
        Ok(Some(lsn))
    }

    /// Reads the peeked frame's payload and checks its CRC.
    pub fn take(&mut self) -> Result<(Lsn, Vec<u8>), TxnError> {
        self.peek_lsn()?;
        let Some(p) = self.peeked.take() else {
            return Err(self.corrupt(self.offset, "read past the last frame".into()));
        };
        let mut payload = vec![0u8; p.len as usize];
        self.read_exact(&mut payload)?;
        let mut trailer = [0u8; FRAME_TRAILER_LEN];
        self.read_exact(&mut trailer)?;
        let stored = u32::from_le_bytes(trailer);
        let computed = crc32c::crc32c_append(crc32c::crc32c(&p.header), &payload);
        if stored != computed {
            return Err(self.corrupt(
                p.start,
                format!("frame CRC-32C mismatch (stored {stored:08X}, computed {computed:08X})"),
            ));
        }
        self.last_lsn = p.lsn;
        Ok((p.lsn, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_spill_file_name(&file_name(1234, 7)));
        assert!(is_spill_file_name("walshadow-txn-4294967295-0.spill"));
        for n in [
            "walshadow-txn-1.spill",
            "walshadow-txn--1.spill",
            "walshadow-txn-1-.spill",
            "walshadow-txn-a-1.spill",
            "walshadow-txn-1-2.spill.tmp",
            "other-1-2.spill",
        ] {
            assert!(!is_spill_file_name(n), "{n}");
        }
    }
}
