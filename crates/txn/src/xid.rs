//! 32-bit transaction id comparisons (see transam.h and transam.c).

use walshadow_types::Xid;

/// `InvalidTransactionId`.
pub const INVALID_XID: Xid = 0;
/// `FirstNormalTransactionId`: 1 is `BootstrapTransactionId`, 2
/// `FrozenTransactionId`; neither ever writes changes we decode.
pub const FIRST_NORMAL_XID: Xid = 3;

/// `TransactionIdIsNormal`.
pub fn xid_is_normal(xid: Xid) -> bool {
    xid >= FIRST_NORMAL_XID
}

/// `TransactionIdPrecedes`: is `a` logically older than `b`?
///
/// Normal xids live on a circle of 2^32 where each xid sees the 2^31 before
/// it as the past; special xids (< 3) compare as plain integers, so they
/// precede every normal xid.
pub fn xid_precedes(a: Xid, b: Xid) -> bool {
    if !xid_is_normal(a) || !xid_is_normal(b) {
        return a < b;
    }
    // The signed difference is the distance on the circle (int32 cast in
    // TransactionIdPrecedes).
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedes_follows_postgres() {
        assert!(xid_precedes(3, 4));
        assert!(!xid_precedes(4, 3));
        assert!(!xid_precedes(4, 4));
        // Across the wrap: u32::MAX is just before 3.
        assert!(xid_precedes(u32::MAX, 3));
        assert!(!xid_precedes(3, u32::MAX));
        // 2^31 apart: the later one (by the cast) is in the past.
        assert!(xid_precedes(3 + (1 << 31), 3));
        assert!(xid_precedes(3, 2 + (1 << 31)));
        // Special xids compare as integers.
        assert!(xid_precedes(0, 3));
        assert!(xid_precedes(2, u32::MAX));
        assert!(!xid_precedes(u32::MAX, 2));
        assert!(xid_precedes(1, 2));
    }
}
