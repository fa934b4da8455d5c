//! Identifiers every walshadow crate shares, kept apart so that the decoders
//! depend on nothing heavier than this.
//!
//! Names mirror PostgreSQL's (`XLogRecPtr` is [`Lsn`], `TransactionId` is
//! [`Xid`], `RelFileLocator` is [`RelFileLocator`]).

mod backoff;
pub mod catalog;
mod column_type;
pub mod landed;
mod lsn;
mod major;
mod printable;
mod rel;
mod secret;
pub mod table_key;

pub use backoff::Backoff;
pub use column_type::{GeoShape, TypeOverride};
pub use lsn::{Lsn, ParseLsnError};
pub use major::{PgMajor, UnsupportedMajor};
pub use printable::printable;
pub use rel::{
    BlockNumber, FIRST_NORMAL_OBJECT_ID, ForkNumber, Oid, RelFileLocator, Tid, TimeLineId, Xid,
};
pub use secret::same_secret;
pub use table_key::{
    RESYNC_SUFFIX, STAGING_SUFFIX, VERIFY_SUFFIX, default_destination, destination_problem,
    split_table_key, table_key,
};
