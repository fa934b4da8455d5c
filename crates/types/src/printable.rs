//! Names from the source (and errors that quote them) made safe to print:
//! a table name may hold a newline or a terminal escape, which would forge
//! a line of `walshadow status` or of the log.

use std::borrow::Cow;

/// `s` with every control character (newline, carriage return, escape, …)
/// written as its Rust escape (`\n`, `\u{1b}`); unchanged, and not
/// copied, when it has none.
pub fn printable(s: &str) -> Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
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
    }
}
