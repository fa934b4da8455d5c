//! The compressions backup tools store files and WAL in: gzip, lz4 (frame
//! format), zstd and bzip2, or none.

use std::io::Read;

/// How a stored object is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gz,
    Lz4,
    Zst,
    Bz2,
}

/// Why an object would not decompress.
#[derive(Debug, thiserror::Error)]
pub enum DecompressError {
    #[error("{compression:?} data does not decompress: {source}")]
    Corrupt {
        compression: Compression,
        #[source]
        source: std::io::Error,
    },
    #[error("decompresses to more than the {limit} bytes expected")]
    TooLarge { limit: u64 },
}

impl Compression {
    /// The compression a file name's extension says (`.gz`, `.lz4`, `.zst`,
    /// `.bz2`), and the name without it; no known extension is `None`.
    pub fn from_name(name: &str) -> (Compression, &str) {
        for (ext, c) in [
            (".gz", Compression::Gz),
            (".lz4", Compression::Lz4),
            (".zst", Compression::Zst),
            (".bz2", Compression::Bz2),
        ] {
            if let Some(stem) = name.strip_suffix(ext) {
                return (c, stem);
            }
        }
        (Compression::None, name)
    }

    /// The extension files of this compression carry (`""` for none).
    pub fn extension(self) -> &'static str {
        match self {
            Compression::None => "",
            Compression::Gz => ".gz",
            Compression::Lz4 => ".lz4",
            Compression::Zst => ".zst",
            Compression::Bz2 => ".bz2",
        }
    }

    /// A reader of `inner`'s decompressed bytes.
    pub fn reader<'a, R: Read + 'a>(self, inner: R) -> std::io::Result<Box<dyn Read + 'a>> {
        Ok(match self {
            Compression::None => Box::new(inner),
            Compression::Gz => Box::new(flate2::read::MultiGzDecoder::new(inner)),
            Compression::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(inner)),
            Compression::Zst => Box::new(
                ruzstd::decoding::StreamingDecoder::new(inner)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            ),
            Compression::Bz2 => Box::new(bzip2::read::MultiBzDecoder::new(inner)),
        })
    }

    /// `data` decompressed, refused past `limit` bytes (what the store says
    /// the file holds: a corrupt or hostile object cannot take the memory).
    pub fn decompress(self, data: &[u8], limit: u64) -> Result<Vec<u8>, DecompressError> {
        let corrupt = |source| DecompressError::Corrupt {
            compression: self,
            source,
        };
        let reader = self.reader(data).map_err(corrupt)?;
        let mut out = Vec::new();
        reader
            .take(limit.saturating_add(1))
            .read_to_end(&mut out)
            .map_err(corrupt)?;
        if out.len() as u64 > limit {
            return Err(DecompressError::TooLarge { limit });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn every_compression(data: &[u8]) -> Vec<(Compression, Vec<u8>)> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
        lz4.write_all(data).unwrap();
        let mut bz2 = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        bz2.write_all(data).unwrap();
        let zst =
            ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest);
        vec![
            (Compression::None, data.to_vec()),
            (Compression::Gz, gz.finish().unwrap()),
            (Compression::Lz4, lz4.finish().unwrap()),
            (Compression::Zst, zst),
            (Compression::Bz2, bz2.finish().unwrap()),
        ]
    }

    #[test]
    fn each_round_trips_and_is_bounded() {
        let data: Vec<u8> = (0..100_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        for (c, packed) in every_compression(&data) {
            assert_eq!(
                c.decompress(&packed, data.len() as u64).unwrap(),
                data,
                "{c:?}"
            );
            assert!(
                matches!(
                    c.decompress(&packed, data.len() as u64 - 1),
                    Err(DecompressError::TooLarge { .. })
                ),
                "{c:?}"
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for c in [
            Compression::Gz,
            Compression::Lz4,
            Compression::Zst,
            Compression::Bz2,
        ] {
            for junk in [
                &b""[..],
                b"\x00",
                b"\x28\xb5\x2f\xfd\xff\xff\xff",
                &[0xffu8; 64],
            ] {
                let _ = c.decompress(junk, 1 << 20);
            }
        }
    }

    #[test]
    fn names_say_their_compression() {
        assert_eq!(
            Compression::from_name("000000010000000000000003-ab.lz4"),
            (Compression::Lz4, "000000010000000000000003-ab")
        );
        assert_eq!(
            Compression::from_name("16384"),
            (Compression::None, "16384")
        );
    }
}
