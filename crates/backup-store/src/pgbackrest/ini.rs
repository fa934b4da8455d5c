//! pgBackRest's info and manifest files: INI sections of `key=value` lines
//! whose values are JSON (`backup.info`, `archive.info`, `backup.manifest`).
//! Hand-written: the values are JSON, which no INI crate parses, and the
//! format is a few lines of rules.

use std::collections::BTreeMap;

/// One file's sections, each its keys in file order.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Ini {
    sections: BTreeMap<String, Vec<(String, serde_json::Value)>>,
}

impl Ini {
    /// Parses the file's text. A key is what precedes a line's first `=`
    /// (pgBackRest writes no `=` in the keys walshadow reads: labels, ids,
    /// `pg_data/…` paths of PostgreSQL's own files).
    pub fn parse(text: &str) -> Result<Ini, String> {
        let mut ini = Ini::default();
        let mut current: Option<&mut Vec<(String, serde_json::Value)>> = None;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                current = Some(ini.sections.entry(name.to_owned()).or_default());
                continue;
            }
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("line {}: neither a [section] nor key=value", n + 1))?;
            let value: serde_json::Value = serde_json::from_str(value)
                .map_err(|e| format!("line {}: the value of {key} is not JSON: {e}", n + 1))?;
            current
                .as_mut()
                .ok_or_else(|| format!("line {}: {key} before any [section]", n + 1))?
                .push((key.to_owned(), value));
        }
        Ok(ini)
    }

    /// The keys and values of `[name]`, empty when it is absent.
    pub fn section(&self, name: &str) -> &[(String, serde_json::Value)] {
        self.sections.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn has_section(&self, name: &str) -> bool {
        self.sections.contains_key(name)
    }

    /// `key` of `[section]`.
    pub fn get(&self, section: &str, key: &str) -> Option<&serde_json::Value> {
        self.section(section)
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// `key` of `[section]` as a string.
    pub fn str(&self, section: &str, key: &str) -> Result<&str, String> {
        self.get(section, key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("[{section}] has no string {key}"))
    }

    /// `key` of `[section]` as an unsigned integer.
    pub fn u64(&self, section: &str, key: &str) -> Result<u64, String> {
        self.get(section, key)
            .and_then(|v| v.as_u64())
            .ok_or_else(|| format!("[{section}] has no number {key}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_keys_and_json_values() {
        let ini = Ini::parse(
            "[backrest]\nbackrest-format=5\nbackrest-version=\"2.45\"\n\n[backup:current]\n\
             20261203-184938F={\"backup-type\":\"full\",\"db-id\":1}\n[db]\ndb-id=1\n",
        )
        .unwrap();
        assert_eq!(ini.u64("backrest", "backrest-format"), Ok(5));
        assert_eq!(ini.str("backrest", "backrest-version"), Ok("2.45"));
        let (label, v) = &ini.section("backup:current")[0];
        assert_eq!(label, "20261203-184938F");
        assert_eq!(v["backup-type"], "full");
        assert!(ini.section("nope").is_empty());
        assert!(ini.str("db", "db-id").is_err());
    }

    #[test]
    fn malformed_lines_are_errors() {
        assert!(Ini::parse("key=1\n").is_err());
        assert!(Ini::parse("[a]\nno equals sign\n").is_err());
        assert!(Ini::parse("[a]\nk={unquoted}\n").is_err());
    }
}
