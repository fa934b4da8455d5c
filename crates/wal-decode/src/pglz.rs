//! PostgreSQL's LZ compression, decompression side (`pglz_decompress` in
//! common/pg_lzcompress.c). Hand-written because no maintained crate speaks
//! this format; it is small and is checked against images PostgreSQL wrote.

/// The compressed stream does not decode to the expected size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt pglz data: {0}")]
pub struct PglzError(&'static str);

/// Decompresses `src` into exactly `rawsize` bytes. With `check_complete`,
/// both the input and the output must be consumed exactly, as PostgreSQL
/// demands for full-page images and TOAST values.
pub fn pglz_decompress(
    src: &[u8],
    rawsize: usize,
    check_complete: bool,
) -> Result<Vec<u8>, PglzError> {
    // Reserve only what `src` could fill: `rawsize` may come from hostile
    // bytes (a TOAST header), and one 3-byte tag yields at most 273 bytes.
    let mut out: Vec<u8> = Vec::with_capacity(rawsize.min(src.len().saturating_mul(91)));
    let mut sp = src.iter().copied();
    let mut consumed_all = false;
    'outer: while out.len() < rawsize {
        let Some(mut ctrl) = sp.next() else {
            consumed_all = true;
            break;
        };
        for _ in 0..8 {
            if out.len() >= rawsize {
                break 'outer;
            }
            if ctrl & 1 != 0 {
                // A tag: 2 or 3 bytes giving a back reference.
                let (Some(b0), Some(b1)) = (sp.next(), sp.next()) else {
                    return Err(PglzError("truncated back reference"));
                };
                let mut len = usize::from(b0 & 0x0f) + 3;
                let off = (usize::from(b0 & 0xf0) << 4) | usize::from(b1);
                if len == 18 {
                    let Some(extra) = sp.next() else {
                        return Err(PglzError("truncated back reference length"));
                    };
                    len += usize::from(extra);
                }
                if off == 0 || off > out.len() {
                    return Err(PglzError("back reference before start of output"));
                }
                len = len.min(rawsize - out.len());
                // Overlapping copies repeat the pattern, byte by byte.
                let from = out.len() - off;
                for i in 0..len {
                    let b = out
                        .get(from + i)
                        .copied()
                        .ok_or(PglzError("bad reference"))?;
                    out.push(b);
                }
            } else {
                let Some(b) = sp.next() else {
                    consumed_all = true;
                    break 'outer;
                };
                out.push(b);
            }
            ctrl >>= 1;
        }
    }
    if sp.next().is_none() {
        consumed_all = true;
    }
    if check_complete && (out.len() != rawsize || !consumed_all) {
        return Err(PglzError("decompressed size does not match"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_back_reference() {
        // ctrl 0b0000_0100: two literals 'a','b', then a tag len 3+3=6 off 2.
        let src = [0b0000_0100, b'a', b'b', 0x03, 0x02];
        let out = pglz_decompress(&src, 8, true).unwrap();
        assert_eq!(out, b"abababab");
    }

    #[test]
    fn rejects_reference_before_start() {
        let src = [0b0000_0001, 0x00, 0x05];
        assert!(pglz_decompress(&src, 8, true).is_err());
    }

    #[test]
    fn rejects_short_output() {
        let src = [0, b'a'];
        assert!(pglz_decompress(&src, 4, true).is_err());
        assert_eq!(pglz_decompress(&src, 4, false).unwrap(), b"a");
    }
}
