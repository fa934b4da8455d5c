//! A sans-IO streaming reader of the ustar archives `BASE_BACKUP` sends.
//!
//! ```text
//!  push(chunk) ──▶ [header bytes ≤ 512 buffered] ──▶ next_event ──▶ Entry{path, size, kind}
//!                                                                  Data(slice of the chunk)…
//!                                                                  EntryEnd
//!                                                                  … End (two zero blocks)
//! ```
//!
//! Chunks may split headers, data and padding anywhere. File data is handed
//! out as zero-copy slices of the pushed chunks, so memory stays at one
//! header plus the current chunk whatever the file sizes.
//!
//! Hand-written rather than the `tar` crate: `tar::Archive` pulls from a
//! blocking `Read`, while CopyData arrives pushed, in an async loop; bridging
//! needs a thread and a channel. The server writes only what
//! `tarCreateHeader` in src/port/tar.c writes — plain ustar headers, types
//! `0`/`5`/`2`, names under 100 bytes with a trailing `/` on directories and
//! symlinks, sizes in octal or GNU base-256, then two zero blocks — so a push
//! parser of that subset is small. Anything else (pax, GNU long names, hard
//! links) is an error, never a silent skip.

use bytes::{Buf, Bytes};

/// Tar block size (`TAR_BLOCK_SIZE` in pgtar.h).
pub const TAR_BLOCK_SIZE: usize = 512;

/// What a tar member is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Directory,
    /// A symbolic link (in a base backup only `pg_tblspc/<oid>`) and its target.
    Symlink(String),
}

/// One tar member header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TarEntry {
    /// Relative path without a leading `./` or a trailing `/`.
    pub path: String,
    /// Data bytes that follow (0 for directories and symlinks).
    pub size: u64,
    pub kind: EntryKind,
    /// Permission bits (`mode & 07777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TarEvent {
    Entry(TarEntry),
    /// The next data bytes of the current entry.
    Data(Bytes),
    /// The current entry's data is complete.
    EntryEnd,
    /// The end-of-archive marker (two zero blocks).
    End,
}

/// A malformed archive; `offset` is the archive offset of the block at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tar archive at offset {offset}: {reason}")]
pub struct TarError {
    pub offset: u64,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Header,
    Data {
        remaining: u64,
        pad: usize,
    },
    Padding {
        remaining: usize,
    },
    /// One zero block seen; the next block must be zero too.
    Zero,
    End,
}

#[derive(Debug)]
pub struct UstarReader {
    state: State,
    header: Vec<u8>,
    input: Bytes,
    /// Archive bytes consumed so far.
    offset: u64,
}

impl Default for UstarReader {
    fn default() -> Self {
        Self::new()
    }
}

impl UstarReader {
    pub fn new() -> Self {
        UstarReader {
            state: State::Header,
            header: Vec::with_capacity(TAR_BLOCK_SIZE),
            input: Bytes::new(),
            offset: 0,
        }
    }

    /// Adds archive bytes. Call only once `next_event` has returned `None`
    /// (everything pushed before is consumed).
    pub fn push(&mut self, chunk: Bytes) -> Result<(), TarError> {
        if !self.input.is_empty() {
            return Err(self.error("push before the previous chunk was consumed"));
        }
        if self.state == State::End && !chunk.is_empty() {
            return Err(self.error("data after the end-of-archive blocks"));
        }
        self.input = chunk;
        Ok(())
    }

    /// True once the end-of-archive marker has been read.
    pub fn is_finished(&self) -> bool {
        self.state == State::End
    }

    /// Archive bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next event, or `None` when the pushed bytes are used up.
    pub fn next_event(&mut self) -> Result<Option<TarEvent>, TarError> {
        loop {
            match self.state {
                State::End => return Ok(None),
                State::Data { remaining, pad } => {
                    if remaining == 0 {
                        self.state = State::Padding { remaining: pad };
                        return Ok(Some(TarEvent::EntryEnd));
                    }
                    if self.input.is_empty() {
                        return Ok(None);
                    }
                    let n = usize::try_from(remaining)
                        .unwrap_or(usize::MAX)
                        .min(self.input.len());
                    let data = self.input.split_to(n);
                    self.offset += n as u64;
                    self.state = State::Data {
                        remaining: remaining - n as u64,
                        pad,
                    };
                    return Ok(Some(TarEvent::Data(data)));
                }
                State::Padding { remaining } => {
                    let n = remaining.min(self.input.len());
                    self.input.advance(n);
                    self.offset += n as u64;
                    if n < remaining {
                        self.state = State::Padding {
                            remaining: remaining - n,
                        };
                        return Ok(None);
                    }
                    self.state = State::Header;
                }
                State::Header | State::Zero => {
                    let need = TAR_BLOCK_SIZE - self.header.len();
                    let n = need.min(self.input.len());
                    self.header.extend_from_slice(&self.input.split_to(n));
                    if self.header.len() < TAR_BLOCK_SIZE {
                        return Ok(None);
                    }
                    let block = std::mem::take(&mut self.header);
                    let result = self.on_block(&block);
                    self.offset += TAR_BLOCK_SIZE as u64;
                    self.header = block;
                    self.header.clear();
                    if let Some(ev) = result? {
                        return Ok(Some(ev));
                    }
                }
            }
        }
    }

    fn on_block(&mut self, block: &[u8]) -> Result<Option<TarEvent>, TarError> {
        let zero = block.iter().all(|&b| b == 0);
        if self.state == State::Zero {
            if !zero {
                return Err(self.error("a lone zero block inside the archive"));
            }
            self.state = State::End;
            return Ok(Some(TarEvent::End));
        }
        if zero {
            self.state = State::Zero;
            return Ok(None);
        }
        let entry = self.parse_header(block)?;
        let size = entry.size;
        let pad = padding(size);
        self.state = State::Data {
            remaining: size,
            pad,
        };
        Ok(Some(TarEvent::Entry(entry)))
    }

    fn parse_header(&self, h: &[u8]) -> Result<TarEntry, TarError> {
        let field = |start: usize, len: usize| h.get(start..start + len).unwrap_or(&[]);
        // Checksum: the byte sum with the checksum field read as spaces
        // (tarChecksum in src/port/tar.c).
        let stored = read_number(field(148, 8))
            .ok_or_else(|| self.error("checksum field is not a number"))?;
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        if stored != sum {
            return Err(self.error(format!(
                "header checksum mismatch (stored {stored}, computed {sum})"
            )));
        }
        if !field(257, 5).eq(b"ustar") {
            return Err(self.error("not a ustar header (no \"ustar\" magic)"));
        }
        let mut name = c_string(field(0, 100));
        let prefix = c_string(field(345, 155));
        if !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        let path = normalize_path(&name).ok_or_else(|| {
            self.error(format!("member name {name:?} is not a safe relative path"))
        })?;
        let size =
            read_number(field(124, 12)).ok_or_else(|| self.error("size field is not a number"))?;
        let mode = read_number(field(100, 8))
            .and_then(|m| u32::try_from(m & 0o7777).ok())
            .ok_or_else(|| self.error("mode field is not a number"))?;
        let mtime =
            read_number(field(136, 12)).ok_or_else(|| self.error("mtime field is not a number"))?;
        let typeflag = h.get(156).copied().unwrap_or(0);
        let kind = match typeflag {
            b'0' | 0 => EntryKind::File,
            b'5' => EntryKind::Directory,
            b'2' => EntryKind::Symlink(c_string(field(157, 100))),
            other => {
                return Err(self.error(format!(
                    "member {path:?} has tar type {:?}, which a base backup never sends",
                    char::from(other)
                )));
            }
        };
        if kind != EntryKind::File && size != 0 {
            return Err(self.error(format!(
                "directory or symlink {path:?} claims {size} data bytes"
            )));
        }
        Ok(TarEntry {
            path,
            size,
            kind,
            mode,
            mtime,
        })
    }

    fn error(&self, reason: impl Into<String>) -> TarError {
        TarError {
            offset: self.offset,
            reason: reason.into(),
        }
    }
}

/// Zero bytes after `size` data bytes up to the next block boundary.
fn padding(size: u64) -> usize {
    let rem = (size % TAR_BLOCK_SIZE as u64) as usize;
    if rem == 0 { 0 } else { TAR_BLOCK_SIZE - rem }
}

/// A numeric header field: octal ended by space or NUL, or GNU base-256
/// (first byte 0x80, then big-endian), as read_tar_number in src/port/tar.c.
fn read_number(field: &[u8]) -> Option<u64> {
    let (&first, rest) = field.split_first()?;
    if first == 0x80 {
        let mut v: u64 = 0;
        for &b in rest {
            v = v.checked_mul(256)?.checked_add(u64::from(b))?;
        }
        return Some(v);
    }
    let digits = field
        .iter()
        .skip_while(|&&b| b == b' ')
        .take_while(|&&b| (b'0'..=b'7').contains(&b));
    let mut v: u64 = 0;
    let mut any = false;
    for &d in digits {
        v = v.checked_mul(8)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(v)
}

/// Bytes up to the first NUL, lossily as UTF-8 (PostgreSQL file names are ASCII).
fn c_string(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(field.get(..end).unwrap_or(&[])).into_owned()
}

/// Strips `./` and trailing `/` (basebackup.c writes `./pg_wal/archive_status`
/// and a `/` after every directory and symlink name); `None` for an empty,
/// absolute or `..`-containing path, which no sink should ever be handed.
fn normalize_path(name: &str) -> Option<String> {
    let mut parts = Vec::new();
    for part in name.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    if name.starts_with('/') || parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header shaped like tarCreateHeader's (src/port/tar.c).
    fn pg_header(name: &str, link: Option<&str>, size: u64, dir: bool) -> [u8; 512] {
        let mut h = [0u8; 512];
        let mut n = name.as_bytes().to_vec();
        if dir || link.is_some() {
            n.push(b'/');
        }
        h[..n.len()].copy_from_slice(&n);
        let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
            let s = format!("{v:0w$o} ", w = len - 1);
            h[at..at + len].copy_from_slice(s.as_bytes());
        };
        octal(&mut h, 100, 8, 0o600);
        octal(&mut h, 108, 8, 101);
        octal(&mut h, 116, 8, 104);
        if size < 1 << 33 {
            octal(&mut h, 124, 12, size);
        } else {
            h[124] = 0x80;
            h[128..136].copy_from_slice(&size.to_be_bytes());
        }
        octal(&mut h, 136, 12, 1_700_000_000);
        h[156] = match (link, dir) {
            (Some(_), _) => b'2',
            (None, true) => b'5',
            _ => b'0',
        };
        if let Some(l) = link {
            h[157..157 + l.len()].copy_from_slice(l.as_bytes());
        }
        h[257..262].copy_from_slice(b"ustar");
        h[263..265].copy_from_slice(b"00");
        let sum: u64 = h
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        octal(&mut h, 148, 8, sum);
        h
    }

    fn pg_archive(members: &[(&str, Option<&str>, &[u8], bool)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, link, data, dir) in members {
            out.extend_from_slice(&pg_header(name, *link, data.len() as u64, *dir));
            out.extend_from_slice(data);
            out.resize(out.len() + padding(data.len() as u64), 0);
        }
        out.resize(out.len() + 2 * TAR_BLOCK_SIZE, 0);
        out
    }

    /// Reads `archive` pushed in `chunk`-byte pieces; file data is joined.
    fn read_all(archive: &[u8], chunk: usize) -> Result<Vec<(TarEntry, Vec<u8>)>, TarError> {
        let mut r = UstarReader::new();
        let mut out: Vec<(TarEntry, Vec<u8>)> = Vec::new();
        let mut ended = false;
        for piece in archive.chunks(chunk) {
            r.push(Bytes::copy_from_slice(piece))?;
            while let Some(ev) = r.next_event()? {
                match ev {
                    TarEvent::Entry(e) => out.push((e, Vec::new())),
                    TarEvent::Data(d) => out.last_mut().unwrap().1.extend_from_slice(&d),
                    TarEvent::EntryEnd => {
                        let (e, d) = out.last().unwrap();
                        assert_eq!(e.size, d.len() as u64);
                    }
                    TarEvent::End => ended = true,
                }
            }
        }
        assert!(ended && r.is_finished());
        assert_eq!(r.offset(), archive.len() as u64);
        Ok(out)
    }

    const CHUNKS: [usize; 8] = [1, 7, 511, 512, 513, 1000, 32768, usize::MAX];

    #[test]
    fn reads_postgres_shaped_members_in_any_chunking() {
        let big: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let archive = pg_archive(&[
            (
                "backup_label",
                None,
                b"START WAL LOCATION: 0/2000028\n",
                false,
            ),
            ("base", None, b"", true),
            ("base/5/16384", None, &big, false),
            ("base/5/16384_fsm", None, &[7u8; 512], false),
            ("./pg_wal/archive_status", None, b"", true),
            ("pg_tblspc/16385", Some("/srv/ts"), b"", false),
            ("empty", None, b"", false),
        ]);
        for chunk in CHUNKS {
            let got = read_all(&archive, chunk.min(archive.len())).unwrap();
            let names: Vec<_> = got.iter().map(|(e, _)| e.path.as_str()).collect();
            assert_eq!(
                names,
                [
                    "backup_label",
                    "base",
                    "base/5/16384",
                    "base/5/16384_fsm",
                    "pg_wal/archive_status",
                    "pg_tblspc/16385",
                    "empty"
                ]
            );
            assert_eq!(got[2].1, big);
            assert_eq!(got[1].0.kind, EntryKind::Directory);
            assert_eq!(got[5].0.kind, EntryKind::Symlink("/srv/ts".into()));
            assert_eq!(got[0].0.mode, 0o600);
            assert_eq!(got[0].0.mtime, 1_700_000_000);
        }
    }

    #[test]
    fn reads_archives_written_by_the_tar_crate() {
        let mut b = tar::Builder::new(Vec::new());
        for (name, len) in [
            ("a", 0usize),
            ("dir/b", 1),
            ("dir/c", 512),
            ("dir/d", 70_001),
        ] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
            let mut h = tar::Header::new_ustar();
            h.set_size(len as u64);
            h.set_mode(0o640);
            h.set_cksum();
            b.append_data(&mut h, name, data.as_slice()).unwrap();
        }
        let archive = b.into_inner().unwrap();
        for chunk in CHUNKS {
            let got = read_all(&archive, chunk.min(archive.len())).unwrap();
            let sizes: Vec<_> = got.iter().map(|(e, d)| (e.path.clone(), d.len())).collect();
            assert_eq!(
                sizes,
                [
                    ("a".to_string(), 0),
                    ("dir/b".into(), 1),
                    ("dir/c".into(), 512),
                    ("dir/d".into(), 70_001)
                ]
            );
            assert_eq!(got[3].1[70_000], (70_000usize * 31 % 256) as u8);
        }
    }

    #[test]
    fn base_256_size() {
        let size = (1u64 << 33) + 5; // past the 11 octal digits of the field
        let h = pg_header("base/5/huge", None, size, false);
        let mut r = UstarReader::new();
        r.push(Bytes::copy_from_slice(&h)).unwrap();
        match r.next_event().unwrap() {
            Some(TarEvent::Entry(e)) => assert_eq!(e.size, size),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.next_event().unwrap(), None);
    }

    #[test]
    fn rejects_damage_and_unsafe_names() {
        let good = pg_archive(&[("PG_VERSION", None, b"15\n", false)]);
        let mut bad_sum = good.clone();
        bad_sum[0] = b'Q';
        assert!(
            read_all(&bad_sum, 512)
                .unwrap_err()
                .reason
                .contains("checksum")
        );

        for name in ["../etc/passwd", "/abs", "a/../../b"] {
            let a = pg_archive(&[(name, None, b"x", false)]);
            let e = read_all(&a, 100).unwrap_err();
            assert!(e.reason.contains("safe relative path"), "{name}: {e}");
        }

        let mut hardlink = pg_header("x", None, 0, false);
        hardlink[156] = b'1';
        let sum: u64 = hardlink
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u64::from(b)
                }
            })
            .sum();
        hardlink[148..156].copy_from_slice(format!("{sum:07o} ").as_bytes());
        let mut r = UstarReader::new();
        r.push(Bytes::copy_from_slice(&hardlink)).unwrap();
        assert!(r.next_event().unwrap_err().reason.contains("tar type '1'"));

        // A single zero block followed by a header.
        let mut lone = vec![0u8; 512];
        lone.extend_from_slice(&good);
        let mut r = UstarReader::new();
        r.push(Bytes::from(lone)).unwrap();
        assert!(
            r.next_event()
                .unwrap_err()
                .reason
                .contains("lone zero block")
        );

        // Bytes after the end marker.
        let mut r = UstarReader::new();
        r.push(Bytes::from(good.clone())).unwrap();
        while r.next_event().unwrap().is_some() {}
        assert!(r.is_finished());
        assert!(r.push(Bytes::from_static(b"x")).is_err());

        // Truncated: not finished.
        let mut r = UstarReader::new();
        r.push(Bytes::copy_from_slice(&good[..700])).unwrap();
        while r.next_event().unwrap().is_some() {}
        assert!(!r.is_finished());
    }
}
