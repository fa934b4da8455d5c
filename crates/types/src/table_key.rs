//! A table's key: its schema and name as one string, `schema.name`, the
//! spelling used in the config file (`[table."public.orders"]`), the config
//! table's rows, `progress.json`, the ledger, logs and metrics.
//!
//! The two parts are joined by a dot; a part that holds a dot or a double
//! quote (or is empty) is written double-quoted, with inner quotes doubled,
//! as PostgreSQL quotes identifiers. So every (schema, name) pair has one
//! key and every key one pair: `x."y.z"` is table `y.z` in schema `x`,
//! `"x.y".z` table `z` in schema `x.y`. Other characters (case included)
//! stand for themselves: `public.Orders` is the table `"Orders"`.

/// The suffix of the staging table a `base_backup` load fills beside a
/// destination table (`orders__wsstg`): reserved, no replicated table's
/// destination may end with it.
pub const STAGING_SUFFIX: &str = "__wsstg";

/// The suffix of the table a resync loads beside a destination table
/// (`orders__wsresync`) and swaps in once loaded: reserved too.
pub const RESYNC_SUFFIX: &str = "__wsresync";

/// The suffix of the table `walshadow verify` copies the source's rows
/// into beside a destination table (`orders__wsverify`): reserved too.
pub const VERIFY_SUFFIX: &str = "__wsverify";

/// The ClickHouse table a source table streams into unless one is named
/// (`destination = "…"`): `name` in `public`, `schema__name` elsewhere.
/// Two source tables can share it (`a__b.c` and `a.b__c`); walshadow
/// refuses the second rather than mix their rows.
pub fn default_destination(schema: &str, name: &str) -> String {
    if schema == "public" {
        name.to_owned()
    } else {
        format!("{schema}__{name}")
    }
}

/// Why `dest` cannot be a replicated table's destination.
pub fn destination_problem(dest: &str) -> Option<String> {
    if dest.is_empty() {
        return Some("the destination name is empty".into());
    }
    for suffix in [STAGING_SUFFIX, RESYNC_SUFFIX, VERIFY_SUFFIX] {
        if dest.ends_with(suffix) {
            return Some(format!(
                "destination {dest:?} ends with {suffix:?}, which walshadow reserves for its staging tables"
            ));
        }
    }
    None
}

/// The key of `name` in `schema`.
pub fn table_key(schema: &str, name: &str) -> String {
    format!("{}.{}", part(schema), part(name))
}

fn part(s: &str) -> std::borrow::Cow<'_, str> {
    if s.is_empty() || s.contains(['.', '"']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// The (schema, name) pair a key names; `None` unless it is exactly two
/// non-empty parts as [`table_key`] writes them.
pub fn split_table_key(key: &str) -> Option<(String, String)> {
    let (schema, rest) = take_part(key)?;
    let rest = rest.strip_prefix('.')?;
    let (name, rest) = take_part(rest)?;
    (rest.is_empty() && !schema.is_empty() && !name.is_empty()).then_some((schema, name))
}

/// One part and what follows it.
fn take_part(s: &str) -> Option<(String, &str)> {
    let Some(mut rest) = s.strip_prefix('"') else {
        let end = s.find('.').unwrap_or(s.len());
        let (p, rest) = s.split_at(end);
        return (!p.contains('"')).then(|| (p.to_owned(), rest));
    };
    let mut out = String::new();
    loop {
        let q = rest.find('"')?;
        out.push_str(rest.get(..q)?);
        rest = rest.get(q + 1..)?;
        match rest.strip_prefix('"') {
            Some(after) => {
                out.push('"');
                rest = after;
            }
            None => return Some((out, rest)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_per_pair() {
        for (schema, name, key) in [
            ("public", "orders", "public.orders"),
            ("public", "Orders", "public.Orders"),
            ("x", "y.z", "x.\"y.z\""),
            ("x.y", "z", "\"x.y\".z"),
            ("a__b", "c", "a__b.c"),
            ("s", "q\"uote", "s.\"q\"\"uote\""),
            ("s", "", "s.\"\""),
        ] {
            assert_eq!(table_key(schema, name), key);
            if !name.is_empty() {
                assert_eq!(
                    split_table_key(key),
                    Some((schema.to_owned(), name.to_owned())),
                    "{key}"
                );
            }
        }
        assert_ne!(table_key("x", "y.z"), table_key("x.y", "z"));
    }

    #[test]
    fn destinations() {
        assert_eq!(default_destination("public", "orders"), "orders");
        assert_eq!(
            default_destination("a__b", "c"),
            default_destination("a", "b__c")
        );
        assert!(destination_problem("items__wsstg").is_some());
        assert!(destination_problem("").is_some());
        assert!(destination_problem("items").is_none());
    }

    #[test]
    fn malformed_keys() {
        for key in [
            "orders", ".t", "s.", "a.b.c", "\"s.t", "s\"x.t", "\"s\"x.t", "s.\"\"",
        ] {
            assert_eq!(split_table_key(key), None, "{key}");
        }
    }

    #[test]
    fn never_panics() {
        for key in ["\"", "\"\"", ".", "\"\".\"\"", "é.\"ü", "\"a\"\".b"] {
            let _ = split_table_key(key);
        }
    }
}
