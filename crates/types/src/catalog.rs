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
    /// Composites: the fields in attnum order, dropped ones included
    /// (their bytes are still in values written before the drop).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<FieldDesc>,
    /// Ranges: the subtype. Multiranges: their range type.
    pub range_subtype: Option<Oid>,
    /// The extension the type belongs to (`pg_depend` deptype `e`): types
    /// such as `citext` are known by their extension and name, never by
    /// name alone (anyone may create a type called `citext`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<String>,
}

/// One field of a composite type (its relation's `pg_attribute` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDesc {
    pub name: String,
    /// 0 for a dropped field.
    pub type_oid: Oid,
    pub typmod: i32,
    /// `attlen` and `attalign`, which a dropped field keeps.
    pub len: i16,
    pub align: String,
    pub dropped: bool,
}

impl TypeDesc {
    /// Whether this is type `name` of extension `extension`.
    pub fn is_extension_type(&self, extension: &str, name: &str) -> bool {
        self.extension.as_deref() == Some(extension) && self.name == name
    }
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

/// Descriptors built by hand for tests that need no catalog to describe a
/// table: a plain heap table in `public` (OID 16384, `relkind` r, replica
/// identity DEFAULT) with nullable varlena columns, a test spelling out
/// with `..` only what it is about (`AttributeDesc { not_null: true,
/// ..attribute(1, "id", 23) }`). Compiled for this crate's tests and with
/// feature `test-fixtures`, which the other crates' dev-dependencies turn
/// on.
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures {
    use super::{AttributeDesc, RelationDesc, TypeDesc};
    use crate::Oid;

    /// The OID and relfilenode of [`relation`]: the first a user table
    /// gets in a fresh cluster (`FirstNormalObjectId`).
    pub const RELATION_OID: Oid = crate::FIRST_NORMAL_OBJECT_ID;

    /// Column `attnum` of type `type_oid`: no typmod, nullable, varlena
    /// (`attlen` -1, int-aligned, storage x).
    pub fn attribute(attnum: i16, name: &str, type_oid: Oid) -> AttributeDesc {
        AttributeDesc {
            attnum,
            name: name.into(),
            type_oid,
            typmod: -1,
            len: -1,
            by_value: false,
            align: "i".into(),
            storage: "x".into(),
            not_null: false,
            dropped: false,
            ndims: 0,
            missing_value: None,
        }
    }

    /// Type `public.name`: varlena, int-aligned, storage x, no element,
    /// base, labels, fields or subtype.
    pub fn type_desc(oid: Oid, name: &str, typtype: &str, category: &str) -> TypeDesc {
        TypeDesc {
            oid,
            schema: "public".into(),
            name: name.into(),
            typtype: typtype.into(),
            category: category.into(),
            len: -1,
            by_value: false,
            align: "i".into(),
            storage: "x".into(),
            element: None,
            base_type: None,
            base_typmod: None,
            enum_labels: vec![],
            enum_oids: vec![],
            composite_relid: None,
            fields: vec![],
            range_subtype: None,
            extension: None,
        }
    }

    /// Table `public.name` of `attributes`, replica identity DEFAULT on
    /// the `key` columns (none: no key), using `types`.
    pub fn relation(
        name: &str,
        attributes: Vec<AttributeDesc>,
        key: &[&str],
        types: Vec<TypeDesc>,
    ) -> RelationDesc {
        RelationDesc {
            oid: RELATION_OID,
            schema: "public".into(),
            name: name.into(),
            relkind: "r".into(),
            relfilenode: RELATION_OID,
            persistence: "p".into(),
            replica_identity: key.iter().map(|k| k.to_string()).collect(),
            replica_identity_kind: "d".into(),
            toast_relid: None,
            partition_parent: None,
            attributes,
            types,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_fixture_is_a_plain_public_table() {
            let desc = relation(
                "kv",
                vec![
                    AttributeDesc {
                        not_null: true,
                        ..attribute(1, "id", 23)
                    },
                    attribute(2, "v", 25),
                ],
                &["id"],
                vec![type_desc(900_000, "mood", "e", "E")],
            );
            assert_eq!(
                (desc.schema.as_str(), desc.relkind.as_str()),
                ("public", "r")
            );
            assert_eq!(desc.oid, 16384);
            assert_eq!(desc.replica_identity, ["id"]);
        }
    }
}
