//! `tsvector`, read into `tsvectorout`'s text (tsvector.c, ts_type.h).
//!
//! Stored: after the varlena header an int32 lexeme count, that many
//! `WordEntry` words (bit 0 `haspos`, bits 1–11 the lexeme's length, bits
//! 12–31 its offset into the string area), then the string area. A lexeme
//! with positions is followed, at the next even offset, by a uint16 count
//! and that many uint16 `WordEntryPos` (weight in the top two bits, the
//! position in the other 14). `tsvectorsend`: an int32 count, then per
//! lexeme its bytes, a NUL, a uint16 count and the positions, big-endian.
//!
//! Text: lexemes in single quotes (`'` and `\` doubled), separated by a
//! space, each followed by `:` and its positions, `,`-separated, a weight
//! other than D written as `A`, `B` or `C` after the number.

/// One lexeme and its `WordEntryPos` values.
struct Lexeme<'a> {
    text: &'a [u8],
    positions: Vec<u16>,
}

fn u16_at(b: &[u8], at: usize, big_endian: bool) -> Result<u16, String> {
    let a = b
        .get(at..at + 2)
        .and_then(|s| s.first_chunk::<2>())
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    Ok(if big_endian {
        u16::from_be_bytes(*a)
    } else {
        u16::from_le_bytes(*a)
    })
}

fn u32_at(b: &[u8], at: usize, big_endian: bool) -> Result<u32, String> {
    let a = b
        .get(at..at + 4)
        .and_then(|s| s.first_chunk::<4>())
        .ok_or_else(|| format!("truncated at byte {at}"))?;
    Ok(if big_endian {
        u32::from_be_bytes(*a)
    } else {
        u32::from_le_bytes(*a)
    })
}

fn count(b: &[u8], big_endian: bool) -> Result<usize, String> {
    let n = u32_at(b, 0, big_endian)?;
    let n = usize::try_from(n).map_err(|_| format!("{n} lexemes"))?;
    // Every lexeme takes at least two bytes either way: no huge allocation
    // from a hostile count.
    if n > b.len() {
        return Err(format!("{n} lexemes in {} bytes", b.len()));
    }
    Ok(n)
}

/// A stored `tsvector` (varlena body: header stripped, detoasted).
pub(crate) fn stored_text(b: &[u8]) -> Result<String, String> {
    let n = count(b, false)?;
    let strings = 4 + 4 * n;
    let mut lexemes = Vec::with_capacity(n);
    for i in 0..n {
        let e = u32_at(b, 4 + 4 * i, false)?;
        let (haspos, len, pos) = (e & 1 != 0, (e >> 1) & 0x7ff, e >> 12);
        let (len, pos) = (len as usize, pos as usize);
        let start = strings + pos;
        let text = b
            .get(start..start + len)
            .ok_or_else(|| format!("lexeme {i} past the end"))?;
        let mut positions = Vec::new();
        if haspos {
            // SHORTALIGN of the offset past the lexeme.
            let at = strings + (pos + len).next_multiple_of(2);
            let npos = u16_at(b, at, false)?;
            for j in 0..usize::from(npos) {
                positions.push(u16_at(b, at + 2 + 2 * j, false)?);
            }
        }
        lexemes.push(Lexeme { text, positions });
    }
    render(&lexemes)
}

/// `tsvectorsend`'s form.
pub(crate) fn sent_text(b: &[u8]) -> Result<String, String> {
    let n = count(b, true)?;
    let mut at = 4;
    let mut lexemes = Vec::with_capacity(n);
    for i in 0..n {
        let rest = b.get(at..).unwrap_or_default();
        let len = rest
            .iter()
            .position(|c| *c == 0)
            .ok_or_else(|| format!("lexeme {i} without its NUL"))?;
        let text = rest.get(..len).unwrap_or_default();
        at += len + 1;
        let npos = u16_at(b, at, true)?;
        at += 2;
        let mut positions = Vec::with_capacity(usize::from(npos));
        for _ in 0..npos {
            positions.push(u16_at(b, at, true)?);
            at += 2;
        }
        lexemes.push(Lexeme { text, positions });
    }
    if at != b.len() {
        return Err(format!(
            "{} bytes after the lexemes",
            b.len().saturating_sub(at)
        ));
    }
    render(&lexemes)
}

/// A lexeme as `tsvectorout` and `tsqueryout` write it: in single quotes,
/// `'` and `\` doubled.
pub(crate) fn quote_lexeme(out: &mut String, text: &str) {
    out.push('\'');
    for c in text.chars() {
        if matches!(c, '\'' | '\\') {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
}

fn render(lexemes: &[Lexeme<'_>]) -> Result<String, String> {
    let mut out = String::new();
    for (i, l) in lexemes.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let text = std::str::from_utf8(l.text).map_err(|_| format!("lexeme {i} is not UTF-8"))?;
        quote_lexeme(&mut out, text);
        for (j, p) in l.positions.iter().enumerate() {
            out.push(if j == 0 { ':' } else { ',' });
            out.push_str(&(p & 0x3fff).to_string());
            match p >> 14 {
                3 => out.push('A'),
                2 => out.push('B'),
                1 => out.push('C'),
                _ => {}
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_and_sent() {
        // 'a':1A,2 'it''s' (no positions)
        let mut b = 2u32.to_le_bytes().to_vec();
        // "a" at 0 with positions; "it's" at 8 (after "a", padding, npos, 2 positions).
        b.extend((1u32 | (1 << 1)).to_le_bytes());
        b.extend(((4u32 << 1) | (8 << 12)).to_le_bytes());
        b.extend(b"a\0");
        b.extend(2u16.to_le_bytes());
        b.extend(((3u16 << 14) | 1).to_le_bytes());
        b.extend(2u16.to_le_bytes());
        b.extend(b"it's");
        assert_eq!(stored_text(&b).unwrap(), "'a':1A,2 'it''s'");

        let mut s = 2u32.to_be_bytes().to_vec();
        s.extend(b"a\0");
        s.extend(2u16.to_be_bytes());
        s.extend(((3u16 << 14) | 1).to_be_bytes());
        s.extend(2u16.to_be_bytes());
        s.extend(b"b\\\0");
        s.extend(0u16.to_be_bytes());
        assert_eq!(sent_text(&s).unwrap(), "'a':1A,2 'b\\\\'");
        assert_eq!(stored_text(&0u32.to_le_bytes()).unwrap(), "");
    }

    #[test]
    fn hostile() {
        assert!(stored_text(&[]).is_err());
        assert!(stored_text(&u32::MAX.to_le_bytes()).is_err());
        let mut b = 1u32.to_le_bytes().to_vec();
        b.extend((100u32 << 1).to_le_bytes());
        assert!(stored_text(&b).is_err(), "lexeme past the end");
        assert!(sent_text(&[0, 0, 0, 1, b'a']).is_err(), "no NUL");
    }
}
