//! The server's own text for every value of a table: the oracle a decoder's text
//! rendering (`Value::to_pg_text` in `walshadow-rows`) is compared with, value by value.
//!
//! The text is each type's output function under [`TEXT_SETTINGS`], the settings whose
//! output the rendering reproduces. `format('%s', v)` calls the output function; a
//! `::text` cast is not always that (bool gives true/false, bpchar drops its padding,
//! inet always shows the netmask).

use std::fmt::Debug;

use anyhow::{Context, Result, bail, ensure};

use crate::Cluster;

/// The settings whose output `Value::to_pg_text` reproduces.
pub const TEXT_SETTINGS: &str = "set timezone = 'UTC'; set datestyle = 'ISO, MDY'; \
    set intervalstyle = 'postgres'; set extra_float_digits = 1; set bytea_output = 'hex'; \
    set lc_monetary = 'C';";

/// The server's output-function text for `columns` of `table`, rows in ctid order;
/// `None` for NULL.
pub fn server_text(
    cluster: &Cluster,
    table: &str,
    columns: &[String],
) -> Result<Vec<Vec<Option<String>>>> {
    // One JSON array a row: one line each whatever the values hold, NULL kept apart
    // from the empty string.
    let list: Vec<String> = columns
        .iter()
        .map(|c| {
            let c = format!("\"{}\"", c.replace('"', "\"\""));
            // By its text: `row IS NULL` also holds for a row whose
            // fields are all NULL, and for a composite without fields.
            format!("case when ({c})::text is null then null else format('%s', {c}) end")
        })
        .collect();
    let out = cluster.psql(&format!(
        // An array constructor, not json_build_array: no 100-argument limit.
        "{TEXT_SETTINGS} select to_json(array[{}]::text[])::text from {table} order by ctid",
        list.join(", ")
    ))?;
    let mut rows = Vec::new();
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).with_context(|| line.to_owned())?;
        let serde_json::Value::Array(items) = v else {
            bail!("not an array: {line}");
        };
        rows.push(
            items
                .into_iter()
                .map(|i| match i {
                    serde_json::Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
        );
    }
    Ok(rows)
}

/// Compares decoded rows, rendered by `render`, with the server's text; every
/// mismatch is reported, naming row and column, with the decoded value's `Debug`.
pub fn assert_same_text<V: Debug>(
    table: &str,
    columns: &[String],
    ours: &[Vec<V>],
    render: impl Fn(&V) -> Option<String>,
    theirs: &[Vec<Option<String>>],
) -> Result<()> {
    ensure!(
        ours.len() == theirs.len(),
        "{table}: decoded {} rows, the server has {}",
        ours.len(),
        theirs.len()
    );
    let mut diffs = Vec::new();
    for (r, (a, b)) in ours.iter().zip(theirs).enumerate() {
        ensure!(
            a.len() == columns.len() && b.len() == columns.len(),
            "{table} row {r}: column count"
        );
        for ((va, vb), column) in a.iter().zip(b).zip(columns) {
            let text = render(va);
            if &text != vb {
                diffs.push(format!(
                    "  row {r} column {column}: decoded {text:?} ({va:?}), server {vb:?}"
                ));
            }
        }
    }
    ensure!(
        diffs.is_empty(),
        "{table}: {} values differ:\n{}",
        diffs.len(),
        diffs.join("\n")
    );
    Ok(())
}
