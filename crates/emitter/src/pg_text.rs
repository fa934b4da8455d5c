//! PostgreSQL's text output for the values that map to a ClickHouse
//! `String` but are not text already (numeric without typmod, interval,
//! timetz, inet/cidr, macaddr/macaddr8, bit/varbit): the row decoder's
//! renderer (`Value::to_pg_text`), which is tested byte for byte against
//! the server's output functions.

use walshadow_rows::{Numeric, Value};

/// PostgreSQL's text for `value`, or `None` for values that are written as
/// they are (text, bytes, JSON) or are not strings at all.
pub(crate) fn pg_text(value: &Value) -> Option<String> {
    match value {
        Value::Numeric(_)
        | Value::Interval { .. }
        | Value::TimeTz { .. }
        | Value::Inet(_)
        | Value::MacAddr(_)
        | Value::MacAddr8(_)
        | Value::Bits { .. } => value.to_pg_text(),
        _ => None,
    }
}

/// `numeric_out`.
pub(crate) fn numeric_text(n: &Numeric) -> String {
    n.to_text()
}
