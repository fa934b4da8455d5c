//! Helpers the row-decoder tests share: a table's tuples read straight
//! from the cluster's heap files, its descriptor from the catalog (the
//! same SQL the shadow answers), and the server's own text for every value
//! to compare against.
#![allow(dead_code)] // each test file uses a subset

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use walshadow_rows::{RowDecoder, ToastChunks, TupleRef, Value};
use walshadow_shadow::catalog::{RelationDesc, ShadowCatalog};
use walshadow_testkit::Cluster;

const BLCKSZ: usize = 8192;
/// `SizeOfPageHeaderData`.
const PAGE_HEADER: usize = 24;
/// `LP_NORMAL`.
const LP_NORMAL: u32 = 1;

/// The settings whose output `Value::to_pg_text` reproduces.
pub const TEXT_SETTINGS: &str = "set timezone = 'UTC'; set datestyle = 'ISO, MDY'; \
    set intervalstyle = 'postgres'; set extra_float_digits = 1; set bytea_output = 'hex'; \
    set lc_monetary = 'C';";

/// The descriptor of `public.<table>`, as ShadowCatalog reads it.
pub async fn describe(cluster: &Cluster, table: &str) -> Result<RelationDesc> {
    let mut cat = ShadowCatalog::connect(
        &cluster.socket_dir(),
        cluster.port(),
        cluster.superuser(),
        "postgres",
    )
    .await?;
    cat.relation_by_name("public", table)
        .await?
        .with_context(|| format!("no table {table}"))
}

/// The main-fork file of relation `regclass` (an SQL expression).
pub fn relation_file(cluster: &Cluster, regclass: &str) -> Result<PathBuf> {
    let rel = cluster.query_one(&format!("select pg_relation_filepath({regclass})"))?;
    Ok(cluster.data_dir().join(rel.trim()))
}

/// Every normal tuple of a heap file, in ctid order (block, then line
/// pointer): the bytes a line pointer points at.
pub fn heap_tuples(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let file = std::fs::read(path).with_context(|| path.display().to_string())?;
    ensure!(
        file.len() % BLCKSZ == 0,
        "{}: not whole pages",
        path.display()
    );
    let mut out = Vec::new();
    for page in file.chunks(BLCKSZ) {
        let pd_lower = usize::from(u16::from_le_bytes([page[12], page[13]]));
        let pd_upper = usize::from(u16::from_le_bytes([page[14], page[15]]));
        if pd_upper == 0 {
            continue; // a new, never initialized page
        }
        ensure!(
            (PAGE_HEADER..=BLCKSZ).contains(&pd_lower),
            "bad pd_lower {pd_lower}"
        );
        for lp in page[PAGE_HEADER..pd_lower].chunks_exact(4) {
            let v = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]);
            let (off, flags, len) = ((v & 0x7fff) as usize, (v >> 15) & 3, (v >> 17) as usize);
            if flags != LP_NORMAL {
                continue;
            }
            ensure!(off + len <= BLCKSZ, "line pointer past the page");
            out.push(page[off..off + len].to_vec());
        }
    }
    Ok(out)
}

/// The server's output-function text for each live column of `table`, rows in ctid
/// order; `None` for NULL.
pub fn server_text(
    cluster: &Cluster,
    table: &str,
    columns: &[String],
) -> Result<Vec<Vec<Option<String>>>> {
    // `format('%s', v)` calls the type's output function; a `::text` cast
    // is not always that (bool gives true/false, bpchar drops its padding,
    // inet always shows the netmask).
    let list: Vec<String> = columns
        .iter()
        .map(|c| {
            let c = format!("\"{}\"", c.replace('"', "\"\""));
            format!("case when {c} is null then null else format('%s', {c}) end")
        })
        .collect();
    let out = cluster.psql(&format!(
        "{TEXT_SETTINGS} select json_build_array({})::text from {table} order by ctid",
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

/// Compares decoded rows with the server's text, value by value; every
/// mismatch is reported.
pub fn assert_same(
    table: &str,
    columns: &[String],
    ours: &[Vec<Value>],
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
        for (c, (va, vb)) in a.iter().zip(b).enumerate() {
            let text = va.to_pg_text();
            if &text != vb {
                diffs.push(format!(
                    "  row {r} column {}: decoded {text:?} ({va:?}), server {vb:?}",
                    columns[c]
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

/// Decodes every tuple of a heap file.
pub fn decode_file(
    decoder: &RowDecoder,
    path: &std::path::Path,
    toast: &dyn walshadow_rows::ToastSource,
) -> Result<Vec<Vec<Value>>> {
    heap_tuples(path)?
        .iter()
        .map(|t| Ok(decoder.decode(TupleRef::from_heap_tuple(t)?, toast)?))
        .collect()
}

/// The chunks of the TOAST table of `desc`, read from its heap file.
pub fn load_toast(cluster: &Cluster, desc: &RelationDesc) -> Result<ToastChunks> {
    let mut chunks = ToastChunks::new();
    if let Some(toast_relid) = desc.toast_relid {
        for t in heap_tuples(&relation_file(cluster, &toast_relid.to_string())?)? {
            chunks.add_chunk_tuple(toast_relid, TupleRef::from_heap_tuple(&t)?)?;
        }
    }
    Ok(chunks)
}

/// Checks the row decoder against the server for `table`: decodes its heap
/// file, TOAST resolved from its TOAST table's heap file, and compares
/// every value's text. Returns the number of rows and the chunks.
pub async fn check_table(cluster: &Cluster, table: &str) -> Result<(usize, ToastChunks)> {
    let desc = describe(cluster, table).await?;
    let toast = load_toast(cluster, &desc)?;
    let decoder = RowDecoder::new(&desc)?;
    let columns: Vec<String> = decoder.column_names().map(str::to_owned).collect();
    let ours = decode_file(
        &decoder,
        &relation_file(cluster, &format!("'{table}'::regclass"))?,
        &toast,
    )?;
    let theirs = server_text(cluster, table, &columns)?;
    assert_same(table, &columns, &ours, &theirs)?;
    Ok((ours.len(), toast))
}
