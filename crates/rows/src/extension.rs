//! Types of contrib extensions, known by extension and name (see
//! `TypeDesc::is_extension_type`). `citext` needs nothing here: it is
//! stored and sent as `text`.
//!
//! `vector` (pgvector's vector.h): after the varlena header an int16
//! dimension count, an int16 that is always zero, then the float4 values;
//! `vector_send` is the same fields in network order (`vector_recv`
//! refuses a non-zero `unused`, NaN and infinities). `halfvec`
//! (halfvec.h) is the same with IEEE half-precision values, written as
//! float4 (`halfvec_out` converts each to float4 first).
//!
//! `sparsevec` (sparsevec.h): after the varlena header an int32 `dim`, an
//! int32 `nnz`, an int32 that is always zero, `nnz` int32 0-based indices
//! (ascending, below `dim`), then `nnz` float4 values; `sparsevec_send` is
//! the same fields in network order. `sparsevec_out` writes
//! `{i:v,…}/dim` with 1-based indices.
//!
//! `ltree` (contrib/ltree/ltree.h): after the varlena header a uint16 level
//! count and padding to 8 bytes (`LTREE_HDRSIZE`), then each level as a
//! uint16 length and its label, padded to 8 bytes (`LEVEL_NEXT`, MAXALIGN
//! of length + 2). `ltree_out` joins the labels with dots; `ltree_send` is
//! a version byte (1) and that text.

use crate::error::DatumError;

fn bad(detail: impl Into<String>) -> DatumError {
    DatumError::bad("ltree", detail)
}

/// A stored `ltree` (varlena body: header stripped, detoasted).
pub(crate) fn ltree_stored(b: &[u8]) -> Result<String, DatumError> {
    // Offsets below are body offsets; the varlena's own are 4 more, and
    // its MAXALIGN padding is relative to the varlena's start.
    let levels = b
        .first_chunk::<2>()
        .map(|n| u16::from_le_bytes(*n))
        .ok_or_else(|| bad("no level count"))?;
    let mut pos: usize = 4; // LTREE_HDRSIZE (8) less the header
    let mut out = String::new();
    for i in 0..levels {
        let len = b
            .get(pos..pos + 2)
            .and_then(|l| l.first_chunk::<2>())
            .map(|l| usize::from(u16::from_le_bytes(*l)))
            .ok_or_else(|| bad(format!("level {i} past the end")))?;
        let label = b
            .get(pos + 2..pos + 2 + len)
            .ok_or_else(|| bad(format!("level {i} of {len} bytes past the end")))?;
        let label =
            std::str::from_utf8(label).map_err(|_| bad(format!("level {i} is not UTF-8")))?;
        if i > 0 {
            out.push('.');
        }
        out.push_str(label);
        // MAXALIGN(len + 2), counted from the level's start.
        pos += (len + 2).div_ceil(8) * 8;
    }
    if pos < b.len() {
        return Err(bad(format!("{} bytes after the last level", b.len() - pos)));
    }
    Ok(out)
}

/// `ltree_send`'s form.
pub(crate) fn ltree_sent(b: &[u8]) -> Result<String, String> {
    match b.split_first() {
        Some((1, text)) => String::from_utf8(text.to_vec()).map_err(|_| "not UTF-8".to_owned()),
        Some((v, _)) => Err(format!("format version {v}")),
        None => Err("no format version".into()),
    }
}

/// A `vector`'s float4 values, from its stored body (little-endian) or
/// its `_send` form (big-endian).
pub(crate) fn vector(b: &[u8], sent: bool) -> Result<Vec<f32>, String> {
    dimensions::<4>(b, sent, |a| {
        if sent {
            f32::from_be_bytes(a)
        } else {
            f32::from_le_bytes(a)
        }
    })
}

/// A `halfvec`'s values as float4, stored or sent.
pub(crate) fn halfvec(b: &[u8], sent: bool) -> Result<Vec<f32>, String> {
    dimensions::<2>(b, sent, |a| {
        half_to_f32(if sent {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        })
    })
}

/// IEEE 754 binary16 to binary32 (exact: every half is a float).
fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let bits = match (exp, mant) {
        (0, 0) => sign,
        // Subnormal: mant × 2^-24, normalised for binary32.
        (0, m) => {
            let shift = m.leading_zeros() - 21;
            sign | ((113 - shift) << 23) | (((m << shift) & 0x3ff) << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// The pgvector header (int16 dim, int16 unused = 0) and `dim` values of
/// `N` bytes each.
fn dimensions<const N: usize>(
    b: &[u8],
    sent: bool,
    value: impl Fn([u8; N]) -> f32,
) -> Result<Vec<f32>, String> {
    let head = b.first_chunk::<4>().ok_or("shorter than its header")?;
    let (dim, unused) = if sent {
        (
            i16::from_be_bytes([head[0], head[1]]),
            i16::from_be_bytes([head[2], head[3]]),
        )
    } else {
        (
            i16::from_le_bytes([head[0], head[1]]),
            i16::from_le_bytes([head[2], head[3]]),
        )
    };
    let values = b.get(4..).unwrap_or_default();
    let dim = usize::try_from(dim).map_err(|_| format!("{dim} dimensions"))?;
    if unused != 0 || values.len() != dim * N {
        return Err(format!(
            "{dim} dimensions (unused {unused}) in {} bytes",
            values.len()
        ));
    }
    Ok(values
        .chunks_exact(N)
        .filter_map(|c| c.first_chunk::<N>())
        .map(|&a| value(a))
        .collect())
}

/// A `sparsevec`'s dimension count, indices and values, stored or sent.
pub(crate) fn sparsevec(b: &[u8], sent: bool) -> Result<(u32, Vec<u32>, Vec<f32>), String> {
    let word = |at: usize| -> Option<[u8; 4]> { b.get(at..at + 4)?.first_chunk::<4>().copied() };
    let int = |at: usize| -> Result<i32, String> {
        let w = word(at).ok_or("shorter than its header")?;
        Ok(if sent {
            i32::from_be_bytes(w)
        } else {
            i32::from_le_bytes(w)
        })
    };
    let (dim, nnz, unused) = (int(0)?, int(4)?, int(8)?);
    let (Ok(dim_u), Ok(n)) = (u32::try_from(dim), usize::try_from(nnz)) else {
        return Err(format!("{dim} dimensions, {nnz} non-zero"));
    };
    if unused != 0 || i64::from(nnz) > i64::from(dim) || b.len() != 12 + 8 * n {
        return Err(format!(
            "{dim} dimensions, {nnz} non-zero (unused {unused}) in {} bytes",
            b.len()
        ));
    }
    let mut indices = Vec::with_capacity(n);
    for i in 0..n {
        let index = int(12 + 4 * i)?;
        let ok = u32::try_from(index)
            .ok()
            .filter(|&x| x < dim_u && indices.last().is_none_or(|&prev| x > prev));
        indices.push(
            ok.ok_or_else(|| format!("index {index} out of order or past {dim} dimensions"))?,
        );
    }
    let values = (0..n)
        .map(|i| {
            let w = word(12 + 4 * n + 4 * i).ok_or("shorter than its values")?;
            Ok(if sent {
                f32::from_be_bytes(w)
            } else {
                f32::from_le_bytes(w)
            })
        })
        .collect::<Result<Vec<f32>, String>>()?;
    Ok((dim_u, indices, values))
}

/// `sparsevec_in`'s text (`{1:1.5,3:2}/5`), for a column's stored default.
pub(crate) fn parse_sparsevec(s: &str) -> Result<(u32, Vec<u32>, Vec<f32>), String> {
    let bad = || format!("{s:?} is not a sparsevec");
    let (pairs, dim) = s.trim().rsplit_once('/').ok_or_else(bad)?;
    let dim: u32 = dim.trim().parse().map_err(|_| bad())?;
    let pairs = pairs
        .trim()
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .ok_or_else(bad)?;
    let (mut indices, mut values) = (Vec::new(), Vec::new());
    for pair in pairs.split(',').filter(|p| !p.trim().is_empty()) {
        let (i, v) = pair.split_once(':').ok_or_else(bad)?;
        let i: u32 = i.trim().parse().map_err(|_| bad())?;
        let i = i.checked_sub(1).filter(|&i| i < dim).ok_or_else(bad)?;
        indices.push(i);
        values.push(crate::float::parse_f32(v.trim())?);
    }
    Ok((dim, indices, values))
}

/// `vector_in`'s text (`[1,2.5,-3]`), for a column's stored default.
pub(crate) fn parse_vector(s: &str) -> Result<Vec<f32>, String> {
    let inner = s
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| format!("{s:?} is not a vector"))?;
    inner
        .split(',')
        .map(|v| crate::float::parse_f32(v.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(labels: &[&str]) -> Vec<u8> {
        let mut b = (labels.len() as u16).to_le_bytes().to_vec();
        b.extend([0, 0]);
        for l in labels {
            let start = b.len();
            b.extend((l.len() as u16).to_le_bytes());
            b.extend(l.as_bytes());
            let padded = (l.len() + 2).div_ceil(8) * 8;
            b.resize(start + padded, 0);
        }
        b
    }

    #[test]
    fn halves() {
        assert_eq!(half_to_f32(0x3c00), 1.0);
        assert_eq!(half_to_f32(0x7bff), 65504.0);
        assert_eq!(half_to_f32(0x0400), 2f32.powi(-14));
        assert_eq!(half_to_f32(0x03ff), 1023.0 * 2f32.powi(-24));
        assert_eq!(half_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert!(half_to_f32(0x7c00).is_infinite() && half_to_f32(0x7e00).is_nan());
        assert_eq!(half_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn ltrees() {
        assert_eq!(
            ltree_stored(&stored(&["Top", "Science", "Astronomy"])).unwrap(),
            "Top.Science.Astronomy"
        );
        assert_eq!(ltree_stored(&stored(&[])).unwrap(), "");
        assert_eq!(
            ltree_stored(&stored(&["a_very_long_label_1"])).unwrap(),
            "a_very_long_label_1"
        );
        let mut cut = stored(&["abc", "def"]);
        cut.truncate(cut.len() - 9);
        assert!(ltree_stored(&cut).is_err());
        assert!(ltree_stored(&[5]).is_err());
        assert_eq!(ltree_sent(b"\x01a.b").unwrap(), "a.b");
        assert!(ltree_sent(b"\x02a").is_err());
    }

    #[test]
    fn vectors() {
        let mut b = 2i16.to_le_bytes().to_vec();
        b.extend([0, 0]);
        b.extend(1.5f32.to_le_bytes());
        b.extend((-2f32).to_le_bytes());
        assert_eq!(vector(&b, false).unwrap(), [1.5, -2.0]);
        let mut s = 1i16.to_be_bytes().to_vec();
        s.extend([0, 0]);
        s.extend(0.25f32.to_be_bytes());
        assert_eq!(vector(&s, true).unwrap(), [0.25]);
        assert!(vector(&b[..b.len() - 1], false).is_err());
        assert!(
            vector(&[0xff, 0xff, 0, 0], false).is_err(),
            "negative dimensions"
        );
        assert!(vector(&[0, 0, 1, 0], false).is_err(), "unused is not zero");
        assert_eq!(parse_vector("[1,2.5,-3]").unwrap(), [1.0, 2.5, -3.0]);
        let mut h = 3i16.to_le_bytes().to_vec();
        h.extend([0, 0]);
        for half in [0x3c00u16, 0xc000, 0x0001] {
            h.extend(half.to_le_bytes());
        }
        assert_eq!(halfvec(&h, false).unwrap(), [1.0, -2.0, 2f32.powi(-24)]);
        assert!(parse_vector("{1}").is_err());
    }

    #[test]
    fn sparse_vectors() {
        let stored = |dim: i32, pairs: &[(i32, f32)]| {
            let mut b = Vec::new();
            for n in [dim, pairs.len() as i32, 0] {
                b.extend(n.to_le_bytes());
            }
            for (i, _) in pairs {
                b.extend(i.to_le_bytes());
            }
            for (_, v) in pairs {
                b.extend(v.to_le_bytes());
            }
            b
        };
        assert_eq!(
            sparsevec(&stored(5, &[(0, 1.5), (3, -2.0)]), false).unwrap(),
            (5, vec![0, 3], vec![1.5, -2.0])
        );
        assert_eq!(
            sparsevec(&stored(3, &[]), false).unwrap(),
            (3, vec![], vec![])
        );
        for bad in [
            stored(3, &[(3, 1.0)]),
            stored(5, &[(2, 1.0), (1, 1.0)]),
            stored(5, &[(2, 1.0), (2, 1.0)]),
            stored(-1, &[]),
            stored(1, &[(0, 1.0), (1, 1.0)]),
        ] {
            assert!(sparsevec(&bad, false).is_err(), "{bad:?}");
        }
        let mut cut = stored(5, &[(0, 1.5)]);
        cut.pop();
        assert!(sparsevec(&cut, false).is_err());
        let mut sent = Vec::new();
        for n in [4i32, 1, 0, 2] {
            sent.extend(n.to_be_bytes());
        }
        sent.extend(0.5f32.to_be_bytes());
        assert_eq!(sparsevec(&sent, true).unwrap(), (4, vec![2], vec![0.5]));
        assert_eq!(
            parse_sparsevec("{1:1.5,4:-2}/5").unwrap(),
            (5, vec![0, 3], vec![1.5, -2.0])
        );
        assert_eq!(parse_sparsevec("{}/3").unwrap(), (3, vec![], vec![]));
        assert!(parse_sparsevec("{6:1}/5").is_err());
        assert!(parse_sparsevec("{0:1}/5").is_err());
    }
}
