//! Built-in type OIDs (`pg_type.dat`), identical in PostgreSQL 15 to 18:
//! fixed below `FirstGenbkiObjectId`, so a column's type is known by its
//! OID alone.

use walshadow_types::Oid;

pub const BOOL: Oid = 16;
pub const BYTEA: Oid = 17;
pub const CHAR: Oid = 18;
pub const NAME: Oid = 19;
pub const INT8: Oid = 20;
pub const INT2: Oid = 21;
pub const INT4: Oid = 23;
pub const TEXT: Oid = 25;
pub const OID: Oid = 26;
pub const JSON: Oid = 114;
pub const XML: Oid = 142;
pub const POINT: Oid = 600;
pub const LSEG: Oid = 601;
pub const PATH: Oid = 602;
pub const BOX: Oid = 603;
pub const POLYGON: Oid = 604;
pub const LINE: Oid = 628;
pub const CIDR: Oid = 650;
pub const FLOAT4: Oid = 700;
pub const FLOAT8: Oid = 701;
pub const CIRCLE: Oid = 718;
pub const MACADDR8: Oid = 774;
pub const MONEY: Oid = 790;
pub const MACADDR: Oid = 829;
pub const INET: Oid = 869;
pub const BPCHAR: Oid = 1042;
pub const VARCHAR: Oid = 1043;
pub const DATE: Oid = 1082;
pub const TIME: Oid = 1083;
pub const TIMESTAMP: Oid = 1114;
pub const TIMESTAMPTZ: Oid = 1184;
pub const INTERVAL: Oid = 1186;
pub const TIMETZ: Oid = 1266;
pub const BIT: Oid = 1560;
pub const VARBIT: Oid = 1562;
pub const NUMERIC: Oid = 1700;
pub const UUID: Oid = 2950;
pub const PG_LSN: Oid = 3220;
pub const INT2VECTOR: Oid = 22;
pub const OIDVECTOR: Oid = 30;
pub const TXID_SNAPSHOT: Oid = 2970;
pub const PG_SNAPSHOT: Oid = 5038;
pub const TSVECTOR: Oid = 3614;
pub const TSQUERY: Oid = 3615;
pub const JSONB: Oid = 3802;
