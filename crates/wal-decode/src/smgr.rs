//! Storage manager records (`RM_SMGR_ID`, `catalog/storage_xlog.h`): only
//! `XLOG_SMGR_CREATE` is read, which says that a transaction made a new
//! relation file — a relation created, or given a new file (TRUNCATE, a
//! rewrite) — so the file holds nothing from before that transaction.

use walshadow_types::RelFileLocator;

use crate::cursor::Cursor;
use crate::record::RecordView;
use crate::rmgr::RmgrId;

/// `XLOG_SMGR_CREATE`.
const XLOG_SMGR_CREATE: u8 = 0x10;
/// `MAIN_FORKNUM`.
const MAIN_FORKNUM: i32 = 0;

/// The relation file whose main fork `rec` creates, for an
/// `XLOG_SMGR_CREATE` record (`xl_smgr_create`: the locator, then the fork
/// number); `None` for any other record, another fork or a record too short
/// to be one.
pub fn decode_smgr_create(rec: &RecordView<'_>) -> Option<RelFileLocator> {
    if rec.rmgr() != RmgrId::SMGR || rec.header.rmgr_info() != XLOG_SMGR_CREATE {
        return None;
    }
    let mut c = Cursor::new(rec.main_data());
    let locator = RelFileLocator {
        spc_oid: c.u32().ok()?,
        db_oid: c.u32().ok()?,
        rel_number: c.u32().ok()?,
    };
    (c.i32().ok()? == MAIN_FORKNUM).then_some(locator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_record::{Bytes, record};

    fn create(info: u8, fork: i32, len: Option<usize>) -> crate::WalRecord {
        let b = Bytes::default().u32(1663).u32(5).u32(16_999).i32(fork);
        let main = &b.0[..len.unwrap_or(b.0.len())];
        record(RmgrId::SMGR.0, info, 742, &[], main)
    }

    #[test]
    fn reads_the_created_main_fork() {
        let rec = create(XLOG_SMGR_CREATE, MAIN_FORKNUM, None);
        assert_eq!(
            decode_smgr_create(&rec.view()),
            Some(RelFileLocator {
                spc_oid: 1663,
                db_oid: 5,
                rel_number: 16_999
            })
        );
        assert_eq!(rec.view().xid(), 742);
        // Another fork, XLOG_SMGR_TRUNCATE, a short record: nothing.
        assert_eq!(
            decode_smgr_create(&create(XLOG_SMGR_CREATE, 1, None).view()),
            None
        );
        assert_eq!(
            decode_smgr_create(&create(0x20, MAIN_FORKNUM, None).view()),
            None
        );
        for len in 0..16 {
            assert_eq!(
                decode_smgr_create(&create(XLOG_SMGR_CREATE, MAIN_FORKNUM, Some(len)).view()),
                None
            );
        }
    }
}
