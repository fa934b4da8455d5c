//! Helpers the row-decoder tests share: a table's descriptor from the
//! catalog (the same SQL the shadow answers), its tuples decoded from the
//! cluster's heap files, and the check of every value against the
//! server's own text (the test kit reads the files and the text).
#![allow(dead_code)] // each test file uses a subset

use anyhow::{Context, Result};
use walshadow_rows::{RowDecoder, ToastChunks, TupleRef, Value};
use walshadow_shadow::catalog::{RelationDesc, ShadowCatalog};
use walshadow_testkit::{Cluster, assert_same_text, heap_tuples, relation_file, server_text};

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
    assert_same_text(table, &columns, &ours, Value::to_pg_text, &theirs)?;
    Ok((ours.len(), toast))
}
