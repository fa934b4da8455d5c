//! Catalog descriptors: what the decoders need to know about a relation, its
//! columns and their types. Read from the shadow (`ShadowCatalog`), used by
//! the row decoder and the emitter; kept here so those depend on nothing
//! heavier.

use serde::{Deserialize, Serialize};

use crate::Oid;

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttributeDesc {
    pub attnum: i16,
    pub name: String,
    pub type_oid: Oid,
    pub typmod: i32,
    /// `attlen`: byte length, -1 varlena, -2 C string.
    pub len: i16,
    pub by_value: bool,
    /// `attalign`: c, s, i or d.
    pub align: String,
    /// `attstorage`: p, e, m or x.
    pub storage: String,
    pub not_null: bool,
    pub dropped: bool,
    /// `attndims`: declared array dimensions (0 when not declared as an
    /// array or declared without brackets; PostgreSQL does not enforce it).
    #[serde(default)]
    pub ndims: i16,
    /// `attmissingval` in text form, for columns added with a default
    /// without a rewrite.
    pub missing_value: Option<String>,
}

/// A type, with what a decoder needs to read its values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeDesc {
    pub oid: Oid,
    pub schema: String,
    pub name: String,
    /// `typtype`: b base, c composite, d domain, e enum, p pseudo, r range,
    /// m multirange.
    pub typtype: String,
    pub category: String,
    pub len: i16,
    pub by_value: bool,
    pub align: String,
    pub storage: String,
    /// Arrays: the element type.
    pub element: Option<Oid>,
    /// Domains: the base type and its typmod.
    pub base_type: Option<Oid>,
    pub base_typmod: Option<i32>,
    /// Enums: labels in sort order.
    pub enum_labels: Vec<String>,
    /// Enums: the `pg_enum` OID of each label, in the same order (a stored
    /// enum value is that OID).
    #[serde(default)]
    pub enum_oids: Vec<Oid>,
    /// Composites: the relation holding the fields.
    pub composite_relid: Option<Oid>,
    /// Ranges: the subtype.
    pub range_subtype: Option<Oid>,
}

/// A relation as the decoders need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelationDesc {
    pub oid: Oid,
    pub schema: String,
    pub name: String,
    pub relkind: String,
    pub relfilenode: Oid,
    pub persistence: String,
    /// Column names of the replica identity (primary key, the chosen index,
    /// or every column for FULL); empty for NOTHING or no key.
    pub replica_identity: Vec<String>,
    /// `relreplident`: d, n, f or i.
    pub replica_identity_kind: String,
    pub toast_relid: Option<Oid>,
    pub partition_parent: Option<Oid>,
    /// In attnum order, dropped columns included.
    pub attributes: Vec<AttributeDesc>,
    /// Every type the columns use, and the types those are built from
    /// (domain bases, array elements, composite fields, range subtypes),
    /// by OID; built-in scalar types included.
    pub types: Vec<TypeDesc>,
}
