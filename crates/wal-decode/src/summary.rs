//! A record's externally visible fields, in the stable shape
//! `walshadow wal dump` prints (one JSON object per line). Field names
//! follow pg_waldump's vocabulary so the two can be compared line by line.

use serde::Serialize;
use walshadow_types::{Lsn, PgMajor, Xid};

use crate::record::{RecordView, WalRecord};

/// One block reference as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BlockSummary {
    pub id: u8,
    pub spc: u32,
    pub db: u32,
    pub rel: u32,
    /// `main`, `fsm`, `vm` or `init`.
    pub fork: &'static str,
    pub blk: u32,
    /// Carries a full-page image.
    pub fpi: bool,
    /// The image is applied at redo (`BKPIMAGE_APPLY`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fpi_apply: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub will_init: bool,
    pub data_len: usize,
}

/// One record as printed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordSummary {
    pub lsn: Lsn,
    pub end: Lsn,
    pub prev: Lsn,
    pub rmgr: &'static str,
    #[serde(skip)]
    pub rmgr_id: u8,
    /// `xl_info`, rmgr-private bits included.
    pub info: u8,
    pub xid: Xid,
    pub tot_len: u32,
    pub main_len: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toplevel_xid: Option<Xid>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<u16>,
    pub blocks: Vec<BlockSummary>,
    /// The record's kind as pg_waldump's `desc:` begins (`INSERT+INIT`,
    /// `COMMIT`, `UNKNOWN (e0)`), once [`RecordSummary::with_kind`] knew the
    /// major. Last, so the fields before it keep their places.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl RecordSummary {
    /// With [`RecordSummary::kind`], named as `major`'s pg_waldump names it.
    pub fn with_kind(mut self, major: Option<PgMajor>) -> RecordSummary {
        self.kind = major.map(
            |m| match crate::identify::identify(self.rmgr_id, self.info, m) {
                Some(name) => name.to_owned(),
                // XLR_INFO_MASK: the low bits are the WAL machinery's.
                None => format!("UNKNOWN ({:x})", self.info & !0x0F),
            },
        );
        self
    }
}

impl From<&WalRecord> for RecordSummary {
    fn from(r: &WalRecord) -> Self {
        RecordSummary::from(&r.view())
    }
}

impl From<&RecordView<'_>> for RecordSummary {
    fn from(r: &RecordView<'_>) -> Self {
        RecordSummary {
            lsn: r.lsn,
            end: r.end,
            prev: r.header.xl_prev,
            rmgr: r.rmgr().name(),
            kind: None,
            rmgr_id: r.rmgr().0,
            info: r.header.xl_info,
            xid: r.header.xl_xid,
            tot_len: r.header.xl_tot_len,
            main_len: r.main_data().len(),
            toplevel_xid: r.toplevel_xid,
            origin: r.origin,
            blocks: r
                .blocks
                .iter()
                .map(|b| BlockSummary {
                    id: b.id,
                    spc: b.locator.spc_oid,
                    db: b.locator.db_oid,
                    rel: b.locator.rel_number,
                    fork: b.fork.name(),
                    blk: b.blkno,
                    fpi: b.has_image(),
                    fpi_apply: b.apply_image(),
                    will_init: b.will_init(),
                    data_len: b.data_len(),
                })
                .collect(),
        }
    }
}
