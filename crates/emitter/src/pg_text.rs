//! PostgreSQL's text output for the values written to a ClickHouse
//! `String` that are not text already (numeric without typmod, interval,
//! timetz, inet/cidr, macaddr/macaddr8, bit/varbit, and any value of a
//! column under `out_of_range = "string"`): the row decoder's renderer
//! (`Value::to_pg_text`), which is tested byte for byte against the
//! server's output functions.

use walshadow_rows::{Numeric, Value};

/// PostgreSQL's text for `value` (`None` for NULL). Text, JSON and bytes
/// a `String` column holds as they are never come here.
pub(crate) fn pg_text(value: &Value) -> Option<String> {
    value.to_pg_text()
}

/// `numeric_out`.
pub(crate) fn numeric_text(n: &Numeric) -> String {
    n.to_text()
}
