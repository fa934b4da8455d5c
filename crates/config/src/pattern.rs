//! Tables chosen by pattern: `[table."public.*"]` (a glob over schema and
//! name, `*` any run of characters, `?` one) or `[table."~^app\.ev_\d+$"]`
//! (a regular expression over `schema.name`), each with `exclude`, names or
//! patterns of the same forms that win over it.

/// One side of a pattern: a glob per part, or a regular expression.
#[derive(Debug, Clone)]
enum Matcher {
    Glob { schema: String, name: String },
    Regex(regex_lite::Regex),
}

impl Matcher {
    fn parse(text: &str) -> Result<Matcher, String> {
        if let Some(re) = text.strip_prefix('~') {
            return regex_lite::Regex::new(re)
                .map(Matcher::Regex)
                .map_err(|e| format!("{text:?} is not a regular expression: {e}"));
        }
        let (schema, name) = crate::split_table_name(text).ok_or_else(|| {
            format!("{text:?} is neither schema.name (with * and ? as wildcards) nor ~regex")
        })?;
        Ok(Matcher::Glob { schema, name })
    }

    fn matches(&self, schema: &str, name: &str) -> bool {
        match self {
            Matcher::Glob { schema: s, name: n } => glob(s, schema) && glob(n, name),
            Matcher::Regex(re) => re.is_match(&format!("{schema}.{name}")),
        }
    }
}

/// Whether `key` (a `[table]` section's name) is a pattern rather than one
/// table.
pub fn is_pattern(key: &str) -> bool {
    key.starts_with('~')
        || crate::split_table_name(key)
            .is_some_and(|(s, n)| s.contains(['*', '?']) || n.contains(['*', '?']))
}

/// A `[table]` section that names tables by pattern.
#[derive(Debug, Clone)]
pub struct TablePattern {
    /// The section's name, as written.
    pub key: String,
    /// What each table it takes is streamed with (`destination` unset:
    /// each its own default).
    pub config: crate::TableConfig,
    matcher: Matcher,
    exclude: Vec<Matcher>,
}

impl PartialEq for TablePattern {
    fn eq(&self, other: &TablePattern) -> bool {
        self.key == other.key && self.config == other.config
    }
}

impl Eq for TablePattern {}

impl TablePattern {
    /// The pattern of section `key`; the problem, for the error, when it or
    /// an `exclude` entry does not parse.
    pub fn new(key: &str, config: crate::TableConfig) -> Result<TablePattern, String> {
        let matcher = Matcher::parse(key)?;
        let exclude = config
            .exclude
            .iter()
            .map(|e| Matcher::parse(e).map_err(|p| format!("exclude: {p}")))
            .collect::<Result<_, _>>()?;
        Ok(TablePattern {
            key: key.to_owned(),
            config,
            matcher,
            exclude,
        })
    }

    /// Whether the table `schema.name` is taken: the pattern matches it and
    /// no `exclude` does.
    pub fn takes(&self, schema: &str, name: &str) -> bool {
        self.matcher.matches(schema, name) && !self.exclude.iter().any(|e| e.matches(schema, name))
    }
}

/// `*` matches any run of characters, `?` one; everything else itself.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it has covered up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == '?' || Some(c) == t.get(ti) => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p.get(pi..)
        .is_some_and(|rest| rest.iter().all(|c| *c == '*'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(key: &str, exclude: &[&str]) -> TablePattern {
        let config = crate::TableConfig {
            exclude: exclude.iter().map(|e| (*e).to_owned()).collect(),
            ..Default::default()
        };
        TablePattern::new(key, config).unwrap()
    }

    #[test]
    fn globs_match_per_part() {
        for (p, t, yes) in [
            ("*", "", true),
            ("*", "orders", true),
            ("ord*", "orders", true),
            ("ord*", "ord", true),
            ("*ers", "orders", true),
            ("o?ders", "orders", true),
            ("o?ders", "oders", false),
            ("*d*r*", "orders", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYbZ", false),
            ("orders", "orders_2", false),
            ("é*", "été", true),
        ] {
            assert_eq!(glob(p, t), yes, "{p:?} on {t:?}");
        }
        let p = pattern("public.ord_*", &[]);
        assert!(p.takes("public", "ord_a"));
        assert!(!p.takes("app", "ord_a"));
        // A dot belongs to the name when the schema is named first.
        assert!(pattern("*.*", &[]).takes("a", "b.c"));
    }

    #[test]
    fn exclusions_win_and_regexes_see_schema_dot_name() {
        let p = pattern("public.*", &["public.tmp_*", "~\\.audit$"]);
        assert!(p.takes("public", "orders"));
        assert!(!p.takes("public", "tmp_1"));
        assert!(!p.takes("public", "audit"));
        let r = pattern("~^app\\.ev_[0-9]+$", &[]);
        assert!(r.takes("app", "ev_12"));
        assert!(!r.takes("app", "ev_x"));
        assert!(!r.takes("public", "ev_1"));
    }

    #[test]
    fn patterns_are_told_from_names() {
        assert!(is_pattern("public.*"));
        assert!(is_pattern("*.orders"));
        assert!(is_pattern("~orders"));
        assert!(!is_pattern("public.orders"));
        assert!(TablePattern::new("~(", Default::default()).is_err());
        let bad = crate::TableConfig {
            exclude: vec!["nodot".into()],
            ..Default::default()
        };
        assert!(
            TablePattern::new("public.*", bad)
                .unwrap_err()
                .contains("exclude")
        );
    }
}
