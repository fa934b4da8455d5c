//! Errors. A relation the decoder cannot read at all is refused up front
//! ([`UnsupportedType`]); a tuple that cannot be read gives a [`RowError`]
//! naming the column and what was wrong with its bytes.

use walshadow_types::Oid;

/// A column of a type outside what the row decoder reads: the relation
/// cannot be streamed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "table {table}: column {column} has type {type_name} (oid {type_oid}), which walshadow \
     cannot decode ({reason}); the table cannot be streamed unless the column is left out: \
     exclude_columns = [\"{column}\"] or unsupported_columns = \"skip\" in its [table] section"
)]
pub struct UnsupportedType {
    /// `schema.name` of the relation.
    pub table: String,
    pub column: String,
    pub type_name: String,
    pub type_oid: Oid,
    pub reason: String,
}

/// A tuple that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    /// The tuple header contradicts itself or the relation.
    #[error("bad tuple: {0}")]
    BadTuple(String),
    #[error("column {column}: the tuple ends before the value does (at byte {offset})")]
    Truncated { column: String, offset: usize },
    #[error("column {column}: bad varlena: {detail}")]
    BadVarlena { column: String, detail: String },
    #[error("column {column}: cannot decompress {method} data: {detail}")]
    Decompression {
        column: String,
        method: &'static str,
        detail: String,
    },
    /// The value lives in TOAST chunks that the [`crate::ToastSource`] does
    /// not have (all of them, or some).
    #[error(
        "column {column}: TOAST value {value_id} of TOAST relation {toast_relid} is not available"
    )]
    UnresolvedToast {
        column: String,
        toast_relid: Oid,
        value_id: Oid,
    },
    #[error("column {column}: bad {type_name} value: {detail}")]
    BadValue {
        column: String,
        type_name: &'static str,
        detail: String,
    },
    #[error("column {column}: {type_name} value out of range: {detail}")]
    OutOfRange {
        column: String,
        type_name: &'static str,
        detail: String,
    },
    /// `attmissingval` (the default of a column added without a rewrite)
    /// could not be read, and a tuple needs it.
    #[error("column {column}: stored default {text:?} cannot be read: {detail}")]
    BadMissingValue {
        column: String,
        text: String,
        detail: String,
    },
}

/// What went wrong with one datum, before the column is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DatumError {
    Truncated(usize),
    BadVarlena(String),
    Decompression {
        method: &'static str,
        detail: String,
    },
    UnresolvedToast {
        toast_relid: Oid,
        value_id: Oid,
    },
    BadValue {
        type_name: &'static str,
        detail: String,
    },
    OutOfRange {
        type_name: &'static str,
        detail: String,
    },
}

impl DatumError {
    pub(crate) fn bad(type_name: &'static str, detail: impl Into<String>) -> Self {
        DatumError::BadValue {
            type_name,
            detail: detail.into(),
        }
    }

    pub(crate) fn range(type_name: &'static str, detail: impl Into<String>) -> Self {
        DatumError::OutOfRange {
            type_name,
            detail: detail.into(),
        }
    }

    pub(crate) fn varlena(detail: impl Into<String>) -> Self {
        DatumError::BadVarlena(detail.into())
    }

    /// Names the column the datum belongs to.
    pub(crate) fn at(self, column: &str) -> RowError {
        let column = column.to_owned();
        match self {
            DatumError::Truncated(offset) => RowError::Truncated { column, offset },
            DatumError::BadVarlena(detail) => RowError::BadVarlena { column, detail },
            DatumError::Decompression { method, detail } => RowError::Decompression {
                column,
                method,
                detail,
            },
            DatumError::UnresolvedToast {
                toast_relid,
                value_id,
            } => RowError::UnresolvedToast {
                column,
                toast_relid,
                value_id,
            },
            DatumError::BadValue { type_name, detail } => RowError::BadValue {
                column,
                type_name,
                detail,
            },
            DatumError::OutOfRange { type_name, detail } => RowError::OutOfRange {
                column,
                type_name,
                detail,
            },
        }
    }
}
