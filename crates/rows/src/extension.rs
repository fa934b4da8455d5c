//! Types of contrib extensions, known by extension and name (see
//! `TypeDesc::is_extension_type`). `citext` needs nothing here: it is
//! stored and sent as `text`.
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
}
