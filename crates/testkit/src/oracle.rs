//! The row-by-row oracle: a source table against its ClickHouse table
//! `FINAL` (deleted rows left out), each row as one line of canonical text
//! that both sides produce from their own expressions ([`OracleColumn`]),
//! compared as sorted lists.

use anyhow::{Result, bail};

use crate::{ClickHouseEngine, Cluster};

/// One column of the oracle: the same canonical text from both sides.
#[derive(Debug, Clone)]
pub struct OracleColumn {
    pub pg: String,
    pub ch: String,
}

/// `pg` and `ch` expressions for a column.
pub fn col(pg: &str, ch: &str) -> OracleColumn {
    OracleColumn {
        pg: pg.into(),
        ch: ch.into(),
    }
}

/// The same expression on both sides (ints, text).
pub fn same(name: &str) -> OracleColumn {
    col(name, name)
}

/// Rows of the source table, canonical text, sorted.
pub fn source_rows(source: &Cluster, table: &str, cols: &[OracleColumn]) -> Result<Vec<String>> {
    let exprs: Vec<String> = cols
        .iter()
        .map(|c| format!("coalesce(({})::text, '<NULL>')", c.pg))
        .collect();
    let sql = format!("select {} from {table}", exprs.join(" || E'\\t' || "));
    Ok(sorted_lines(&source.psql(&sql)?))
}

/// Rows of ClickHouse table `database.table` `FINAL`, canonical text,
/// sorted.
pub fn clickhouse_rows(
    ch: &ClickHouseEngine,
    database: &str,
    table: &str,
    cols: &[OracleColumn],
) -> Result<Vec<String>> {
    let exprs: Vec<String> = cols
        .iter()
        .map(|c| format!("ifNull(toString({}), '<NULL>')", c.ch))
        .collect();
    let sql = format!(
        "SELECT concat({}) FROM {database}.`{table}` FINAL WHERE _is_deleted = 0 FORMAT TSVRaw",
        exprs.join(", '\\t', ")
    );
    Ok(sorted_lines(&ch.query(&sql)?))
}

/// The oracle: `source_rows` equal `clickhouse_rows`; their count, or the
/// counts and the first rows only one side has.
pub fn assert_same_rows(
    pg_table: &str,
    source_rows: &[String],
    clickhouse_rows: &[String],
) -> Result<usize> {
    let (src, dst) = (source_rows, clickhouse_rows);
    if src != dst {
        let only_src: Vec<_> = src.iter().filter(|r| !dst.contains(r)).take(10).collect();
        let only_dst: Vec<_> = dst.iter().filter(|r| !src.contains(r)).take(10).collect();
        bail!(
            "{pg_table}: source has {} rows, ClickHouse FINAL {}\nonly in source: {only_src:#?}\nonly in ClickHouse: {only_dst:#?}",
            src.len(),
            dst.len(),
        );
    }
    Ok(src.len())
}

fn sorted_lines(out: &str) -> Vec<String> {
    let mut rows: Vec<String> = out.lines().map(str::to_owned).collect();
    rows.sort();
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_rows_count_and_differ_by_name() {
        let a = vec!["1\tx".to_string(), "2\ty".to_string()];
        assert_eq!(assert_same_rows("t", &a, &a).unwrap(), 2);
        let b = vec!["1\tx".to_string(), "2\tz".to_string()];
        let e = assert_same_rows("t", &a, &b).unwrap_err().to_string();
        assert!(
            e.contains("t: source has 2 rows, ClickHouse FINAL 2"),
            "{e}"
        );
        assert!(e.contains("2\\ty") && e.contains("2\\tz"), "{e}");
    }
}
