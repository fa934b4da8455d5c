//! What each column holds, resolved once from the catalog: domains are
//! replaced by their base types, enums carry their labels, arrays their
//! element's kind and storage. Anything outside the supported list is
//! refused here, before a single tuple is read.

use std::collections::HashMap;
use std::sync::Arc;

use walshadow_types::Oid;
use walshadow_types::catalog::TypeDesc;

use crate::geometric::Geometric;

/// `attalign`/`typalign` (see `att_align_nominal` in tupmacs.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Char,
    Short,
    Int,
    Double,
}

impl Align {
    pub(crate) fn from_catalog(s: &str) -> Option<Align> {
        match s {
            "c" => Some(Align::Char),
            "s" => Some(Align::Short),
            "i" => Some(Align::Int),
            "d" => Some(Align::Double),
            _ => None,
        }
    }

    /// `off` rounded up to this alignment; `None` on overflow.
    pub(crate) fn align(self, off: usize) -> Option<usize> {
        let a = match self {
            Align::Char => return Some(off),
            Align::Short => 2,
            Align::Int => 4,
            Align::Double => 8,
        };
        Some(off.checked_add(a - 1)? & !(a - 1))
    }
}

/// How a datum sits in a tuple or an array: `typlen` and `typalign`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Storage {
    /// Bytes; -1 varlena, -2 C string.
    pub len: i16,
    pub align: Align,
}

/// Enum labels by `pg_enum` OID.
#[derive(Debug)]
pub struct EnumLabels {
    pub type_name: String,
    pub labels: HashMap<Oid, String>,
}

/// An array's element, domains resolved.
#[derive(Debug, Clone)]
pub struct ArrayKind {
    pub element: Kind,
    /// The declared element type (a domain, for arrays of a domain).
    pub element_oid: Oid,
    pub(crate) element_storage: Storage,
}

/// A composite type's fields in attnum order; a dropped field keeps its
/// storage (its bytes are walked) and has no kind.
#[derive(Debug, Clone)]
pub struct CompositeKind {
    pub(crate) fields: Vec<(String, Option<Kind>)>,
    pub(crate) storage: Vec<Storage>,
}

/// A range's subtype, domains resolved.
#[derive(Debug, Clone)]
pub struct RangeKind {
    pub subtype: Kind,
    pub(crate) subtype_storage: Storage,
}

/// A supported type, domains resolved.
///
/// Public (read-only use) so that other readers of the same columns — the
/// binary COPY decoder of walshadow-backfill — resolve types exactly as
/// [`crate::RowDecoder`] does (see [`crate::RowDecoder::column_kinds`]).
#[derive(Debug, Clone)]
pub enum Kind {
    Bool,
    Int2,
    Int4,
    Int8,
    Oid,
    Float4,
    Float8,
    Numeric,
    Money,
    /// `"char"`.
    Char,
    Name,
    /// text, varchar, bpchar.
    Text,
    Bytea,
    Date,
    Time,
    TimeTz,
    Timestamp,
    TimestampTz,
    Interval,
    Uuid,
    Json,
    Jsonb,
    Inet,
    Cidr,
    MacAddr,
    MacAddr8,
    /// bit, varbit.
    Bit,
    Xml,
    /// point, line, lseg, box, path, polygon, circle.
    Geometric(Geometric),
    PgLsn,
    /// PostGIS `geometry` and `geography` (by their extension).
    Geometry,
    TsVector,
    TsQuery,
    /// `pg_snapshot`, `txid_snapshot`: `xmin:xmax:xip,…`.
    Snapshot,
    /// `int2vector`, `oidvector`: a one-dimensional array (lower bound 0)
    /// written space-separated, as their output functions do.
    SpaceVector(Box<ArrayKind>),
    /// `ltree` (extension ltree): labels joined by dots.
    Ltree,
    /// `vector` (extension pgvector): float4 dimensions.
    Vector,
    /// `halfvec` (extension pgvector): half-precision dimensions.
    HalfVec,
    /// `sparsevec` (extension pgvector): indexed non-zero dimensions.
    SparseVec,
    /// `hstore` (extension hstore): key/value pairs.
    Hstore,
    /// A range over a supported subtype.
    Range(Box<RangeKind>),
    /// A multirange: ranges of its range type's subtype.
    Multirange(Box<RangeKind>),
    /// A composite (row) value: `record_out`'s text.
    Composite(Arc<CompositeKind>),
    Enum(Arc<EnumLabels>),
    Array(Box<ArrayKind>),
}

impl Kind {
    /// The name used in error messages.
    /// The type's `typdelim`: what separates its elements in an array's
    /// text.
    pub fn array_delimiter(&self) -> char {
        match self {
            Kind::Geometric(crate::geometric::Geometric::Box) => ';',
            Kind::Geometry => ':',
            _ => ',',
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Int2 => "smallint",
            Kind::Int4 => "integer",
            Kind::Int8 => "bigint",
            Kind::Oid => "oid",
            Kind::Float4 => "real",
            Kind::Float8 => "double precision",
            Kind::Numeric => "numeric",
            Kind::Money => "money",
            Kind::Char => "\"char\"",
            Kind::Name => "name",
            Kind::Text => "text",
            Kind::Bytea => "bytea",
            Kind::Date => "date",
            Kind::Time => "time",
            Kind::TimeTz => "timetz",
            Kind::Timestamp => "timestamp",
            Kind::TimestampTz => "timestamptz",
            Kind::Interval => "interval",
            Kind::Uuid => "uuid",
            Kind::Json => "json",
            Kind::Jsonb => "jsonb",
            Kind::Inet => "inet",
            Kind::Cidr => "cidr",
            Kind::MacAddr => "macaddr",
            Kind::MacAddr8 => "macaddr8",
            Kind::Bit => "bit",
            Kind::Xml => "xml",
            Kind::Geometric(g) => g.type_name(),
            Kind::PgLsn => "pg_lsn",
            Kind::Range(_) => "range",
            Kind::Multirange(_) => "multirange",
            Kind::Composite(_) => "record",
            Kind::Ltree => "ltree",
            Kind::TsVector => "tsvector",
            Kind::Geometry => "geometry",
            Kind::TsQuery => "tsquery",
            Kind::Snapshot => "pg_snapshot",
            Kind::SpaceVector(ak) if ak.element_oid == walshadow_pg_format::type_oid::OID => {
                "oidvector"
            }
            Kind::SpaceVector(_) => "int2vector",
            Kind::Vector => "vector",
            Kind::HalfVec => "halfvec",
            Kind::SparseVec => "sparsevec",
            Kind::Hstore => "hstore",
            Kind::Enum(_) => "enum",
            Kind::Array(_) => "array",
        }
    }
}

/// The built-in types read, by OID (pg_type.dat), with their storage.
fn builtin(type_oid: Oid) -> Option<(Kind, Storage)> {
    use Align::*;
    use walshadow_pg_format::type_oid as oid;
    let s = |len, align| Storage { len, align };
    let geometric = |g: Geometric| (Kind::Geometric(g), s(g.len(), Double));
    Some(match type_oid {
        oid::BOOL => (Kind::Bool, s(1, Char)),
        oid::BYTEA => (Kind::Bytea, s(-1, Int)),
        oid::CHAR => (Kind::Char, s(1, Char)),
        oid::NAME => (Kind::Name, s(64, Char)),
        oid::INT8 => (Kind::Int8, s(8, Double)),
        oid::INT2 => (Kind::Int2, s(2, Short)),
        oid::INT4 => (Kind::Int4, s(4, Int)),
        oid::TEXT => (Kind::Text, s(-1, Int)),
        oid::OID => (Kind::Oid, s(4, Int)),
        oid::JSON => (Kind::Json, s(-1, Int)),
        oid::XML => (Kind::Xml, s(-1, Int)),
        oid::CIDR => (Kind::Cidr, s(-1, Int)),
        oid::FLOAT4 => (Kind::Float4, s(4, Int)),
        oid::FLOAT8 => (Kind::Float8, s(8, Double)),
        oid::MACADDR8 => (Kind::MacAddr8, s(8, Int)),
        oid::MONEY => (Kind::Money, s(8, Double)),
        oid::MACADDR => (Kind::MacAddr, s(6, Int)),
        oid::INET => (Kind::Inet, s(-1, Int)),
        oid::BPCHAR | oid::VARCHAR => (Kind::Text, s(-1, Int)),
        oid::DATE => (Kind::Date, s(4, Int)),
        oid::TIME => (Kind::Time, s(8, Double)),
        oid::TIMESTAMP => (Kind::Timestamp, s(8, Double)),
        oid::TIMESTAMPTZ => (Kind::TimestampTz, s(8, Double)),
        oid::INTERVAL => (Kind::Interval, s(16, Double)),
        oid::TIMETZ => (Kind::TimeTz, s(12, Double)),
        oid::BIT | oid::VARBIT => (Kind::Bit, s(-1, Int)),
        oid::NUMERIC => (Kind::Numeric, s(-1, Int)),
        oid::UUID => (Kind::Uuid, s(16, Char)),
        oid::JSONB => (Kind::Jsonb, s(-1, Int)),
        oid::POINT => geometric(Geometric::Point),
        oid::LINE => geometric(Geometric::Line),
        oid::LSEG => geometric(Geometric::Lseg),
        oid::BOX => geometric(Geometric::Box),
        oid::PATH => geometric(Geometric::Path),
        oid::POLYGON => geometric(Geometric::Polygon),
        oid::CIRCLE => geometric(Geometric::Circle),
        oid::PG_LSN => (Kind::PgLsn, s(8, Double)),
        oid::TSVECTOR => (Kind::TsVector, s(-1, Int)),
        oid::TSQUERY => (Kind::TsQuery, s(-1, Int)),
        oid::PG_SNAPSHOT | oid::TXID_SNAPSHOT => (Kind::Snapshot, s(-1, Double)),
        oid::INT2VECTOR => (
            Kind::SpaceVector(Box::new(ArrayKind {
                element: Kind::Int2,
                element_oid: oid::INT2,
                element_storage: s(2, Short),
            })),
            s(-1, Int),
        ),
        oid::OIDVECTOR => (
            Kind::SpaceVector(Box::new(ArrayKind {
                element: Kind::Oid,
                element_oid: oid::OID,
                element_storage: s(4, Int),
            })),
            s(-1, Int),
        ),
        _ => return None,
    })
}

/// Why a type cannot be read, and the name to show for it.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub type_name: String,
    pub reason: String,
}

/// The relation's types by OID.
pub(crate) struct TypeMap<'a> {
    by_oid: HashMap<Oid, &'a TypeDesc>,
}

/// Domains over domains are allowed; a cycle is not (and cannot happen).
const MAX_DOMAIN_DEPTH: usize = 64;

impl<'a> TypeMap<'a> {
    pub(crate) fn new(types: &'a [TypeDesc]) -> Self {
        TypeMap {
            by_oid: types.iter().map(|t| (t.oid, t)).collect(),
        }
    }

    /// `format_type`-like: `int4[]` for `_int4`, the type's name otherwise.
    pub(crate) fn display_name(&self, oid: Oid) -> String {
        match self.by_oid.get(&oid) {
            Some(t) => match t.element {
                Some(e) => format!("{}[]", self.display_name_shallow(e)),
                _ => t.name.clone(),
            },
            None => format!("type {oid}"),
        }
    }

    fn display_name_shallow(&self, oid: Oid) -> String {
        self.by_oid
            .get(&oid)
            .map_or_else(|| format!("type {oid}"), |t| t.name.clone())
    }

    /// The kind and storage of type `oid`.
    pub(crate) fn resolve(&self, oid: Oid) -> Result<(Kind, Storage), Refusal> {
        self.resolve_at(oid, 0)
    }

    fn refuse(&self, oid: Oid, reason: impl Into<String>) -> Refusal {
        Refusal {
            type_name: self.display_name(oid),
            reason: reason.into(),
        }
    }

    fn resolve_at(&self, oid: Oid, depth: usize) -> Result<(Kind, Storage), Refusal> {
        if depth > MAX_DOMAIN_DEPTH {
            return Err(self.refuse(oid, "domains nest too deeply"));
        }
        let desc = self.by_oid.get(&oid).copied();
        let own_storage = desc.and_then(|t| {
            Some(Storage {
                len: t.len,
                align: Align::from_catalog(&t.align)?,
            })
        });
        if let Some((kind, storage)) = builtin(oid) {
            return Ok((kind, own_storage.unwrap_or(storage)));
        }
        let Some(t) = desc else {
            return Err(self.refuse(oid, "the type is missing from the relation's type list"));
        };
        let Some(storage) = own_storage else {
            return Err(self.refuse(oid, format!("unknown alignment {:?}", t.align)));
        };
        // Extension types, known by extension and name (their OIDs differ
        // from one database to the next).
        if t.is_extension_type("citext", "citext") {
            // Stored, sent and written exactly as text (citext.c).
            return Ok((Kind::Text, storage));
        }
        if t.is_extension_type("ltree", "ltree") {
            return Ok((Kind::Ltree, storage));
        }
        if t.is_extension_type("vector", "vector") {
            return Ok((Kind::Vector, storage));
        }
        if t.is_extension_type("vector", "halfvec") {
            return Ok((Kind::HalfVec, storage));
        }
        if t.is_extension_type("vector", "sparsevec") {
            return Ok((Kind::SparseVec, storage));
        }
        if t.is_extension_type("hstore", "hstore") {
            return Ok((Kind::Hstore, storage));
        }
        if t.is_extension_type("postgis", "geometry") || t.is_extension_type("postgis", "geography")
        {
            return Ok((Kind::Geometry, storage));
        }
        match t.typtype.as_str() {
            "d" => {
                let Some(base) = t.base_type else {
                    return Err(self.refuse(oid, "domain without a base type"));
                };
                let (kind, _) = self.resolve_at(base, depth + 1).map_err(|r| {
                    self.refuse(oid, format!("its base type {}: {}", r.type_name, r.reason))
                })?;
                Ok((kind, storage))
            }
            "e" => {
                if t.enum_oids.len() != t.enum_labels.len() {
                    return Err(self.refuse(oid, "the catalog gave enum labels without their OIDs"));
                }
                let labels = t
                    .enum_oids
                    .iter()
                    .copied()
                    .zip(t.enum_labels.iter().cloned())
                    .collect();
                Ok((
                    Kind::Enum(Arc::new(EnumLabels {
                        type_name: t.name.clone(),
                        labels,
                    })),
                    storage,
                ))
            }
            "b" if t.element.is_some() => {
                let Some(elem) = t.element else {
                    return Err(self.refuse(oid, "array without an element type"));
                };
                let (element, element_storage) = self.resolve_at(elem, depth + 1).map_err(|r| {
                    self.refuse(
                        oid,
                        format!("its element type {}: {}", r.type_name, r.reason),
                    )
                })?;
                if element_storage.len == -2 || element_storage.len == 0 {
                    return Err(self.refuse(oid, "element storage length not supported"));
                }
                Ok((
                    Kind::Array(Box::new(ArrayKind {
                        element,
                        element_oid: elem,
                        element_storage,
                    })),
                    storage,
                ))
            }
            "c" => {
                // No fields (`CREATE TYPE t AS ()`): record_out's "()".
                let mut fields = Vec::with_capacity(t.fields.len());
                let mut storages = Vec::with_capacity(t.fields.len());
                for f in &t.fields {
                    let (kind, storage) = if f.dropped {
                        let align = Align::from_catalog(&f.align).ok_or_else(|| {
                            self.refuse(oid, format!("dropped field with alignment {:?}", f.align))
                        })?;
                        (None, Storage { len: f.len, align })
                    } else {
                        let (k, s) = self.resolve_at(f.type_oid, depth + 1).map_err(|r| {
                            self.refuse(
                                oid,
                                format!(
                                    "its field {:?} of type {}: {}",
                                    f.name, r.type_name, r.reason
                                ),
                            )
                        })?;
                        (Some(k), s)
                    };
                    if storage.len == 0 || storage.len < -2 {
                        return Err(self.refuse(oid, "field storage length not supported"));
                    }
                    fields.push((f.name.clone(), kind));
                    storages.push(storage);
                }
                Ok((
                    Kind::Composite(Arc::new(CompositeKind {
                        fields,
                        storage: storages,
                    })),
                    storage,
                ))
            }
            "r" => {
                let Some(sub) = t.range_subtype else {
                    return Err(self.refuse(oid, "range without a subtype"));
                };
                let (subtype, subtype_storage) = self.resolve_at(sub, depth + 1).map_err(|r| {
                    self.refuse(oid, format!("its subtype {}: {}", r.type_name, r.reason))
                })?;
                if subtype_storage.len == -2 || subtype_storage.len == 0 {
                    return Err(self.refuse(oid, "subtype storage length not supported"));
                }
                Ok((
                    Kind::Range(Box::new(RangeKind {
                        subtype,
                        subtype_storage,
                    })),
                    storage,
                ))
            }
            "m" => {
                let Some(range) = t.range_subtype else {
                    return Err(self.refuse(oid, "multirange without a range type"));
                };
                match self.resolve_at(range, depth + 1) {
                    Ok((Kind::Range(rk), _)) => Ok((Kind::Multirange(rk), storage)),
                    Ok(_) => Err(self.refuse(oid, "its range type is not a range")),
                    Err(r) => {
                        Err(self
                            .refuse(oid, format!("its range type {}: {}", r.type_name, r.reason)))
                    }
                }
            }
            "p" => Err(self.refuse(oid, "pseudo-types cannot be decoded")),
            _ => Err(self.refuse(oid, "not among the supported types")),
        }
    }
}

/// The storage length a kind's values have, when fixed; `None` for kinds
/// whose length the catalog decides (name) or that are varlena.
pub(crate) fn fixed_len(kind: &Kind) -> Option<i16> {
    Some(match kind {
        Kind::Bool | Kind::Char => 1,
        Kind::Int2 => 2,
        Kind::Int4 | Kind::Oid | Kind::Float4 | Kind::Date | Kind::Enum(_) => 4,
        Kind::Int8
        | Kind::Float8
        | Kind::Money
        | Kind::Time
        | Kind::Timestamp
        | Kind::TimestampTz
        | Kind::MacAddr8
        | Kind::PgLsn => 8,
        Kind::Geometric(g) => g.len(),
        Kind::TimeTz => 12,
        Kind::Interval | Kind::Uuid => 16,
        Kind::MacAddr => 6,
        Kind::Name => return None,
        Kind::Numeric
        | Kind::Text
        | Kind::Bytea
        | Kind::Json
        | Kind::Jsonb
        | Kind::Inet
        | Kind::Cidr
        | Kind::Bit
        | Kind::Xml
        | Kind::Range(_)
        | Kind::Multirange(_)
        | Kind::Composite(_)
        | Kind::Ltree
        | Kind::TsVector
        | Kind::TsQuery
        | Kind::Geometry
        | Kind::Snapshot
        | Kind::SpaceVector(_)
        | Kind::Vector
        | Kind::HalfVec
        | Kind::SparseVec
        | Kind::Hstore
        | Kind::Array(_) => -1,
    })
}
