//! contrib's `hstore` (hstore.h, hstore_io.c), known by its extension.
//!
//! Stored, after the varlena header: a uint32 whose low 28 bits count the
//! pairs and whose top bit (`HS_FLAG_NEWVERSION`) marks the format every
//! release since 9.0 writes; then two uint32 `HEntry`s per pair (key,
//! value): the low 30 bits are the end offset of the string in the string
//! area, bit 30 marks a NULL value, bit 31 the first entry; then the
//! string area (keys and values, not terminated). Pairs are stored sorted
//! (by length, then bytes) and unique. `hstore_send`: an int32 count, then
//! per pair the key as int32 length and bytes, the value likewise (-1 for
//! NULL). `hstore_out`: `"key"=>"value"` pairs joined by `, `, `"` and `\`
//! escaped with a backslash, `NULL` unquoted.

/// `HS_FLAG_NEWVERSION`.
const NEW_VERSION: u32 = 0x8000_0000;
const COUNT_MASK: u32 = 0x0FFF_FFFF;
const ENTRY_NULL: u32 = 0x4000_0000;
const ENTRY_POS: u32 = 0x3FFF_FFFF;

/// One hstore's pairs, in stored order.
pub type Pairs = Vec<(String, Option<String>)>;

/// A stored hstore (varlena body: header stripped, detoasted).
pub(crate) fn stored(b: &[u8]) -> Result<Pairs, String> {
    let word = |at: usize| -> Option<u32> {
        b.get(at..at + 4)?
            .first_chunk::<4>()
            .map(|w| u32::from_le_bytes(*w))
    };
    let size = word(0).ok_or("shorter than its header")?;
    let count = usize::try_from(size & COUNT_MASK).map_err(|_| "pair count")?;
    if count > 0 && size & NEW_VERSION == 0 {
        return Err("an hstore in the pre-9.0 format (run hstore's upgrade)".into());
    }
    let strings_at = count
        .checked_mul(8)
        .and_then(|n| n.checked_add(4))
        .filter(|&n| n <= b.len())
        .ok_or_else(|| format!("{count} pairs in {} bytes", b.len()))?;
    let strings = b.get(strings_at..).unwrap_or_default();
    let mut end = 0usize;
    let mut next = |i: usize| -> Result<(Option<&[u8]>, bool), String> {
        let e = word(4 + 4 * i).ok_or("an entry past the end")?;
        let stop = usize::try_from(e & ENTRY_POS).map_err(|_| "entry offset")?;
        let s = strings
            .get(end..stop)
            .ok_or_else(|| format!("entry {i} spans {end}..{stop} of {}", strings.len()))?;
        end = stop;
        Ok((Some(s), e & ENTRY_NULL != 0))
    };
    let mut pairs = Vec::with_capacity(count.min(1 << 16));
    for i in 0..count {
        let (key, _) = next(2 * i)?;
        let (value, null) = next(2 * i + 1)?;
        let text = |s: Option<&[u8]>| {
            String::from_utf8(s.unwrap_or_default().to_vec()).map_err(|_| "not UTF-8".to_owned())
        };
        let value = if null { None } else { Some(text(value)?) };
        pairs.push((text(key)?, value));
    }
    if end != strings.len() {
        return Err(format!("{} bytes after the strings", strings.len() - end));
    }
    Ok(pairs)
}

/// `hstore_send`'s form.
pub(crate) fn sent(b: &[u8]) -> Result<Pairs, String> {
    let mut rest = b;
    let mut int = || -> Result<i32, String> {
        let (w, after) = rest.split_first_chunk::<4>().ok_or("past the end")?;
        rest = after;
        Ok(i32::from_be_bytes(*w))
    };
    let count = usize::try_from(int()?).map_err(|_| "a negative pair count")?;
    let mut pairs = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let mut string = |allow_null: bool| -> Result<Option<String>, String> {
            let (w, after) = rest.split_first_chunk::<4>().ok_or("past the end")?;
            let len = i32::from_be_bytes(*w);
            if len == -1 && allow_null {
                rest = after;
                return Ok(None);
            }
            let len = usize::try_from(len).map_err(|_| format!("a string of length {len}"))?;
            let s = after.get(..len).ok_or("a string past the end")?;
            rest = after.get(len..).unwrap_or_default();
            String::from_utf8(s.to_vec())
                .map(Some)
                .map_err(|_| "not UTF-8".to_owned())
        };
        let key = string(false)?.unwrap_or_default();
        let value = string(true)?;
        pairs.push((key, value));
    }
    if !rest.is_empty() {
        return Err(format!("{} bytes after the pairs", rest.len()));
    }
    Ok(pairs)
}

/// `hstore_out`.
pub(crate) fn write_text(out: &mut String, pairs: &[(String, Option<String>)]) {
    let quoted = |out: &mut String, s: &str| {
        out.push('"');
        for c in s.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    };
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        quoted(out, k);
        out.push_str("=>");
        match v {
            Some(v) => quoted(out, v),
            None => out.push_str("NULL"),
        }
    }
}

/// `hstore_out`'s text read back (a column's stored default): quoted or
/// bare words, `=>`, `NULL` (any case, bare) for a NULL value.
pub(crate) fn parse(s: &str) -> Result<Pairs, String> {
    let bad = |why: &str| format!("{s:?} is not an hstore: {why}");
    let mut chars = s.chars().peekable();
    let mut pairs = Vec::new();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
    };
    // A word and whether it was quoted.
    let word = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| -> Option<(String, bool)> {
        let mut w = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => return Some((w, true)),
                    '\\' => w.push(chars.next()?),
                    c => w.push(c),
                }
            }
        }
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || c == '=' || c == ',' {
                break;
            }
            chars.next();
            w.push(if c == '\\' { chars.next()? } else { c });
        }
        (!w.is_empty()).then_some((w, false))
    };
    loop {
        skip_ws(&mut chars);
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let (key, _) = word(&mut chars).ok_or_else(|| bad("a key"))?;
        skip_ws(&mut chars);
        if (chars.next(), chars.next()) != (Some('='), Some('>')) {
            return Err(bad("=> after a key"));
        }
        skip_ws(&mut chars);
        let (value, quoted) = word(&mut chars).ok_or_else(|| bad("a value"))?;
        let value = (quoted || !value.eq_ignore_ascii_case("null")).then_some(value);
        pairs.push((key, value));
        skip_ws(&mut chars);
        match chars.next() {
            None => return Ok(pairs),
            Some(',') => {}
            Some(_) => return Err(bad("a comma between pairs")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_form(pairs: &[(&str, Option<&str>)]) -> Vec<u8> {
        let mut b = (NEW_VERSION | pairs.len() as u32).to_le_bytes().to_vec();
        let mut strings: Vec<u8> = Vec::new();
        for (i, (k, v)) in pairs.iter().enumerate() {
            strings.extend(k.as_bytes());
            let first = if i == 0 { 0x8000_0000 } else { 0 };
            b.extend((first | strings.len() as u32).to_le_bytes());
            strings.extend(v.unwrap_or_default().as_bytes());
            let null = if v.is_none() { ENTRY_NULL } else { 0 };
            b.extend((null | strings.len() as u32).to_le_bytes());
        }
        b.extend(strings);
        b
    }

    #[test]
    fn stored_and_sent() {
        let pairs = stored(&stored_form(&[
            ("a", Some("1")),
            ("bb", None),
            ("cc", Some("")),
        ]))
        .unwrap();
        assert_eq!(
            pairs,
            [
                ("a".to_owned(), Some("1".to_owned())),
                ("bb".to_owned(), None),
                ("cc".to_owned(), Some(String::new()))
            ]
        );
        let mut text = String::new();
        write_text(&mut text, &pairs);
        assert_eq!(text, r#""a"=>"1", "bb"=>NULL, "cc"=>"""#);
        assert_eq!(stored(&stored_form(&[])).unwrap(), []);
        let good = stored_form(&[("key", Some("value"))]);
        for cut in 0..good.len() {
            assert!(stored(&good[..cut]).is_err(), "{cut}");
        }
        let mut old = good.clone();
        old[3] = 0;
        assert!(stored(&old).is_err(), "the pre-9.0 format");
        let mut s = 2i32.to_be_bytes().to_vec();
        for (k, v) in [("k", Some("v\"")), ("n", None)] {
            s.extend((k.len() as i32).to_be_bytes());
            s.extend(k.as_bytes());
            match v {
                Some(v) => {
                    s.extend((v.len() as i32).to_be_bytes());
                    s.extend(v.as_bytes());
                }
                None => s.extend((-1i32).to_be_bytes()),
            }
        }
        let pairs = sent(&s).unwrap();
        let mut text = String::new();
        write_text(&mut text, &pairs);
        assert_eq!(text, r#""k"=>"v\"", "n"=>NULL"#);
        assert!(sent(&s[..s.len() - 1]).is_err());
    }

    #[test]
    fn text_reads_back() {
        assert_eq!(
            parse(r#""a"=>"1", b => NULL, "c\"d"=>"NULL", e=>f"#).unwrap(),
            [
                ("a".to_owned(), Some("1".to_owned())),
                ("b".to_owned(), None),
                ("c\"d".to_owned(), Some("NULL".to_owned())),
                ("e".to_owned(), Some("f".to_owned()))
            ]
        );
        assert_eq!(parse("").unwrap(), []);
        assert!(parse("a").is_err());
        assert!(parse("a=>").is_err());
        assert!(parse(r#""a"=>"b" "c"=>"d""#).is_err());
    }
}
