//! [`RowDecoder`]: a relation's descriptor resolved once, then any number
//! of its tuples decoded.

use walshadow_types::catalog::RelationDesc;

use crate::datum::decode_datum;
use crate::error::{RowError, UnsupportedType};
use crate::kind::{Align, Kind, Storage, TypeMap, fixed_len};
use crate::literal::parse_missing;
use crate::toast::ToastSource;
use crate::tuple::{DeformError, TupleRef, deform};
use crate::value::Value;

#[derive(Debug, Clone)]
struct Column {
    name: String,
    /// `None` for dropped columns: walked, never decoded.
    kind: Option<Kind>,
    /// `attmissingval`, parsed; the text is kept for the error message.
    missing: Option<(String, Result<Value, String>)>,
}

/// Decodes the tuples of one relation into one [`Value`] per live
/// (non-dropped) column, in attnum order.
#[derive(Debug, Clone)]
pub struct RowDecoder {
    table: String,
    columns: Vec<Column>,
    storage: Vec<Storage>,
}

/// Column `i` of `desc`: its storage and resolved kind (none if dropped),
/// or why it cannot be decoded.
fn resolve_column(
    desc: &RelationDesc,
    types: &TypeMap,
    table: &str,
    i: usize,
) -> Result<(Storage, Column), UnsupportedType> {
    let Some(a) = desc.attributes.get(i) else {
        return Err(UnsupportedType {
            table: table.to_owned(),
            column: String::new(),
            type_name: String::new(),
            type_oid: 0,
            reason: format!("no attribute at position {}", i + 1),
        });
    };
    let refuse = |type_name: String, reason: String| UnsupportedType {
        table: table.to_owned(),
        column: a.name.clone(),
        type_name,
        type_oid: a.type_oid,
        reason,
    };
    if usize::try_from(a.attnum).ok() != Some(i + 1) {
        return Err(refuse(
            types.display_name(a.type_oid),
            format!(
                "attribute numbers are not 1..n (found {} at position {})",
                a.attnum,
                i + 1
            ),
        ));
    }
    let Some(align) = Align::from_catalog(&a.align) else {
        return Err(refuse(
            types.display_name(a.type_oid),
            format!("unknown attalign {:?}", a.align),
        ));
    };
    let storage = Storage { len: a.len, align };
    if a.dropped {
        let column = Column {
            name: a.name.clone(),
            kind: None,
            missing: None,
        };
        return Ok((storage, column));
    }
    let (kind, _) = types
        .resolve(a.type_oid)
        .map_err(|r| refuse(r.type_name, r.reason))?;
    let len_ok = match fixed_len(&kind) {
        Some(l) => l == a.len,
        None => a.len > 0,
    };
    if !len_ok {
        return Err(refuse(
            types.display_name(a.type_oid),
            format!("attlen {} does not fit the type", a.len),
        ));
    }
    let missing = a
        .missing_value
        .as_ref()
        .map(|text| (text.clone(), parse_missing(&kind, text)));
    let column = Column {
        name: a.name.clone(),
        kind: Some(kind),
        missing,
    };
    Ok((storage, column))
}

impl RowDecoder {
    /// Resolves every column's type; refuses the relation if a live column
    /// has a type outside the supported list (or storage that contradicts
    /// its type).
    pub fn new(desc: &RelationDesc) -> Result<RowDecoder, UnsupportedType> {
        let table = format!("{}.{}", desc.schema, desc.name);
        let types = TypeMap::new(&desc.types);
        let mut columns = Vec::with_capacity(desc.attributes.len());
        let mut storage = Vec::with_capacity(desc.attributes.len());
        for i in 0..desc.attributes.len() {
            let (s, c) = resolve_column(desc, &types, &table, i)?;
            storage.push(s);
            columns.push(c);
        }
        Ok(RowDecoder {
            table,
            columns,
            storage,
        })
    }

    /// Every live column [`RowDecoder::new`] would refuse, each with why
    /// (`new` stops at the first): what a table's column rules may leave
    /// out.
    pub fn refusals(desc: &RelationDesc) -> Vec<UnsupportedType> {
        let table = format!("{}.{}", desc.schema, desc.name);
        let types = TypeMap::new(&desc.types);
        (0..desc.attributes.len())
            .filter_map(|i| resolve_column(desc, &types, &table, i).err())
            .collect()
    }

    /// The parsed `attmissingval` of column `attnum` (a column added with
    /// a default without a rewrite), if it has one and it parses.
    pub fn missing_value(&self, attnum: i16) -> Option<Value> {
        let i = usize::try_from(attnum).ok()?.checked_sub(1)?;
        match &self.columns.get(i)?.missing {
            Some((_, Ok(v))) => Some(v.clone()),
            _ => None,
        }
    }

    /// `schema.name` of the relation.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The live columns' names, in the order [`RowDecoder::decode`] returns
    /// their values.
    pub fn column_names(&self) -> impl Iterator<Item = &str> {
        self.columns
            .iter()
            .filter(|c| c.kind.is_some())
            .map(|c| c.name.as_str())
    }

    /// The live columns' resolved kinds, in [`RowDecoder::column_names`]
    /// order (for readers of the same values in other forms, such as
    /// binary COPY).
    pub fn column_kinds(&self) -> impl Iterator<Item = &Kind> {
        self.columns.iter().filter_map(|c| c.kind.as_ref())
    }

    /// Decodes one tuple. Columns the tuple lacks (added later without a
    /// rewrite) take their stored default, or NULL.
    pub fn decode(
        &self,
        tuple: TupleRef<'_>,
        toast: &dyn ToastSource,
    ) -> Result<Vec<Value>, RowError> {
        self.decode_some(tuple, toast, None)
    }

    /// Decodes only the live columns whose flag in `wanted` is set (same
    /// order as [`RowDecoder::column_names`]); the others come out NULL,
    /// unread. Lets a caller read a row's key when another column cannot
    /// be decoded yet.
    pub fn decode_only(
        &self,
        tuple: TupleRef<'_>,
        toast: &dyn ToastSource,
        wanted: &[bool],
    ) -> Result<Vec<Value>, RowError> {
        self.decode_some(tuple, toast, Some(wanted))
    }

    fn decode_some(
        &self,
        tuple: TupleRef<'_>,
        toast: &dyn ToastSource,
        wanted: Option<&[bool]>,
    ) -> Result<Vec<Value>, RowError> {
        let raw = deform(&tuple, &self.storage).map_err(|e| match e {
            DeformError::Tuple(s) => RowError::BadTuple(format!("{}: {s}", self.table)),
            DeformError::Datum(i, e) => e.at(self.columns.get(i).map_or("?", |c| c.name.as_str())),
        })?;
        let mut out = Vec::with_capacity(self.columns.len());
        for (i, col) in self.columns.iter().enumerate() {
            let Some(kind) = &col.kind else {
                continue;
            };
            if let Some(w) = wanted
                && !w.get(out.len()).copied().unwrap_or(false)
            {
                out.push(Value::Null);
                continue;
            }
            let v = match raw.get(i) {
                Some(Some(bytes)) => {
                    decode_datum(kind, bytes, toast).map_err(|e| e.at(&col.name))?
                }
                Some(None) => Value::Null,
                None => match &col.missing {
                    None => Value::Null,
                    Some((_, Ok(v))) => v.clone(),
                    Some((text, Err(detail))) => {
                        return Err(RowError::BadMissingValue {
                            column: col.name.clone(),
                            text: text.clone(),
                            detail: detail.clone(),
                        });
                    }
                },
            };
            out.push(v);
        }
        Ok(out)
    }
}
