//! Names from the source (and errors that quote them) made safe to print:
//! a table name may hold a newline or a terminal escape, which would forge
//! a line of `walshadow status` or of the log.

use std::borrow::Cow;

/// `s` with every control character (newline, carriage return, escape, …),
/// line separator and bidi control
/// written as its Rust escape (`\n`, `\u{1b}`); unchanged, and not
/// copied, when it has none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_to_print) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_to_print(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Control characters (C0, DEL, C1), line and paragraph separators
/// (a terminal or log viewer may break the line there), and the bidi
/// controls that reorder what follows them on screen ("Trojan Source").
fn unsafe_to_print(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200E}' | '\u{200F}' | '\u{061C}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert!(matches!(printable("public.orders"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nb"), "a\\nb");
        assert_eq!(printable("t\u{1b}[32m ok\r"), "t\\u{1b}[32m ok\\r");
        assert_eq!(printable("it\\'s é"), "it\\'s é");
        assert_eq!(printable("a\u{2028}b\u{85}"), "a\\u{2028}b\\u{85}");
        assert_eq!(
            printable("ok\u{202E}txt.exe\u{2066}"),
            "ok\\u{202e}txt.exe\\u{2066}"
        );
    }
}
