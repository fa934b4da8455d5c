//! `pg_multixact` as a backup copied it (src/backend/access/transam/
//! multixact.c, 15 to 18; 32-bit offsets):
//!
//! ```text
//! offsets/<seg>  one MultiXactOffset (u32) per multixact, 2048 to a page:
//!                page = multi / 2048, entry = multi % 2048
//! members/<seg>  groups of 20 bytes, 409 to a page (1636 members):
//!                4 flag bytes (one MultiXactStatus per member), then 4 xids
//!                page = off / 1636; group = off / 4 % 409; member = off % 4
//!                flags at group * 20 + member, xid at group * 20 + 4 + member * 4
//! ```
//!
//! A multixact's members run from its offset to the next multixact's;
//! offsets wrap at 2^32, and offset 0 is never a multixact's start
//! (`GetNewMultiXactId` skips it, leaving that slot zero). Pages are
//! zeroed before use, so a zero offset or member xid in a copied page was
//! not yet written when the page was.
//!
//! The gate needs only the updating member (`MultiXactIdGetUpdateXid`):
//! a multixact on a tuple whose infomask does not say lock-only has
//! exactly one. It is found scanning from the multixact's offset, so the
//! end is not needed: the newest multixact of a copy has no next offset
//! on disk, and members of later multixacts may follow its own in the copy
//! (the members file can be copied after the offsets file), but its own
//! members come first. When the next offset is known, the scan stops there
//! and checks there is exactly one updater.

use bytes::Bytes;
use walshadow_pg_format::cursor::u32_at as le_u32;
use walshadow_types::Xid;

use super::error::GateError;
use super::slru::{BLCKSZ, Runs, Slru, SlruStore};

/// `MultiXactId`.
pub type MultiXactId = u32;
/// `MultiXactOffset` (32 bits up to 18).
pub type MultiXactOffset = u32;

/// `FirstMultiXactId`: multixact ids wrap from `u32::MAX` to it.
pub const FIRST_MULTI_XACT_ID: MultiXactId = 1;
/// `MULTIXACT_OFFSETS_PER_PAGE`.
pub const MULTIXACT_OFFSETS_PER_PAGE: u32 = (BLCKSZ / 4) as u32;
/// `MULTIXACT_FLAGBYTES_PER_GROUP`.
pub const MULTIXACT_FLAGBYTES_PER_GROUP: u32 = 4;
/// `MULTIXACT_MEMBERS_PER_MEMBERGROUP`.
pub const MULTIXACT_MEMBERS_PER_MEMBERGROUP: u32 = 4;
/// `MULTIXACT_MEMBERGROUP_SIZE`: 4 xids and their flag bytes.
pub const MULTIXACT_MEMBERGROUP_SIZE: u32 =
    4 * MULTIXACT_MEMBERS_PER_MEMBERGROUP + MULTIXACT_FLAGBYTES_PER_GROUP;
/// `MULTIXACT_MEMBERGROUPS_PER_PAGE`.
pub const MULTIXACT_MEMBERGROUPS_PER_PAGE: u32 = BLCKSZ as u32 / MULTIXACT_MEMBERGROUP_SIZE;
/// `MULTIXACT_MEMBERS_PER_PAGE`.
pub const MULTIXACT_MEMBERS_PER_PAGE: u32 =
    MULTIXACT_MEMBERGROUPS_PER_PAGE * MULTIXACT_MEMBERS_PER_MEMBERGROUP;

/// Members one multixact can have, with room: one lock and one update per
/// transaction, and no more transactions than `MAX_BACKENDS` (2^18 - 1)
/// plus prepared ones. More is garbage.
pub const MAX_MEMBERS: u32 = 1 << 20;

/// `MultiXactStatus` (multixact.h), one flag byte per member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MultiXactStatus {
    ForKeyShare,
    ForShare,
    ForNoKeyUpdate,
    ForUpdate,
    /// An update that changes no key column.
    NoKeyUpdate,
    /// Any other update, and delete.
    Update,
}

impl MultiXactStatus {
    pub fn from_flags(flags: u8) -> Option<MultiXactStatus> {
        Some(match flags {
            0 => MultiXactStatus::ForKeyShare,
            1 => MultiXactStatus::ForShare,
            2 => MultiXactStatus::ForNoKeyUpdate,
            3 => MultiXactStatus::ForUpdate,
            4 => MultiXactStatus::NoKeyUpdate,
            5 => MultiXactStatus::Update,
            _ => return None,
        })
    }

    /// `ISUPDATE_from_mxstatus`: an update or delete, not a lock.
    pub fn is_update(self) -> bool {
        matches!(self, MultiXactStatus::NoKeyUpdate | MultiXactStatus::Update)
    }
}

/// One member of a multixact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MultiXactMember {
    pub xid: Xid,
    pub status: MultiXactStatus,
}

/// A page the copy does not hold (yet): the walk may still copy it; after
/// the walk, the copied range tells why it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Absent {
    pub slru: Slru,
    /// The entry the page would hold: a multixact id or a member offset.
    pub item: u32,
}

/// What the copy says of a multixact's updater.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiLookup {
    /// The updating (or deleting) member.
    Updater(MultiXactMember),
    /// Every member up to the next multixact's offset only locks.
    LockersOnly,
    /// A page needed is not in the copy.
    Absent(Absent),
    /// The copied page holds zeros where the multixact's offset or its
    /// members would be: it was recorded after the page was copied.
    NotRecorded,
}

/// The backup's `pg_multixact`, fed segment by segment.
#[derive(Debug, Clone)]
pub struct MultiXacts {
    offsets: SlruStore,
    members: SlruStore,
}

impl Default for MultiXacts {
    fn default() -> Self {
        MultiXacts::new()
    }
}

impl MultiXacts {
    pub fn new() -> MultiXacts {
        MultiXacts {
            offsets: SlruStore::new(Slru::MultiXactOffsets),
            members: SlruStore::new(Slru::MultiXactMembers),
        }
    }

    /// Adds `pg_multixact/offsets/<name>`; `Ok(false)` for a name that is
    /// not a segment's.
    pub fn add_offsets_file(
        &mut self,
        name: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<bool, GateError> {
        self.offsets.add_file(name, bytes.into())
    }

    /// Adds `pg_multixact/members/<name>`; `Ok(false)` for a name that is
    /// not a segment's.
    pub fn add_members_file(
        &mut self,
        name: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<bool, GateError> {
        self.members.add_file(name, bytes.into())
    }

    pub fn add_offsets_segment(
        &mut self,
        segno: u64,
        bytes: impl Into<Bytes>,
    ) -> Result<(), GateError> {
        self.offsets.add_segment(segno, bytes.into())
    }

    pub fn add_members_segment(
        &mut self,
        segno: u64,
        bytes: impl Into<Bytes>,
    ) -> Result<(), GateError> {
        self.members.add_segment(segno, bytes.into())
    }

    /// Declares the `nextMulti`/`nextMultiOffset` read from the source
    /// before `BASE_BACKUP` (see [`super::XactLog::set_next_xid`]): pages
    /// below them were created before the backup's checkpoint, so after
    /// the walk a missing one is an error ([`GateError::Lost`]) instead of
    /// "recorded after the copy". A zero slot in a copied page still means
    /// "recorded after the copy": a multixact is assigned before it is
    /// written, and one written after the checkpoint belongs to an update
    /// the live stream delivers.
    pub fn set_next(&mut self, next_multi: MultiXactId, next_offset: MultiXactOffset) {
        self.offsets.set_bound(next_multi);
        self.members.set_bound(next_offset);
    }

    /// Segment files held: offsets, members.
    pub fn segment_counts(&self) -> (usize, usize) {
        (self.offsets.segment_count(), self.members.segment_count())
    }

    /// Bytes held (whole pages).
    pub fn bytes(&self) -> u64 {
        self.offsets.bytes() + self.members.bytes()
    }

    /// `multi`'s starting offset: `Err` when its page is not copied, `Ok(0)`
    /// when not recorded.
    fn offset_of(&self, multi: MultiXactId) -> Result<MultiXactOffset, Absent> {
        let absent = Absent {
            slru: Slru::MultiXactOffsets,
            item: multi,
        };
        let page = self
            .offsets
            .page(multi / MULTIXACT_OFFSETS_PER_PAGE)
            .ok_or(absent)?;
        let at = (multi % MULTIXACT_OFFSETS_PER_PAGE) as usize * 4;
        le_u32(page, at).ok_or(absent)
    }

    /// The member at offset `off`: its xid (0 when not written) and flag
    /// byte.
    fn member_at(&self, off: MultiXactOffset) -> Result<(Xid, u8), Absent> {
        let absent = Absent {
            slru: Slru::MultiXactMembers,
            item: off,
        };
        let page = self
            .members
            .page(off / MULTIXACT_MEMBERS_PER_PAGE)
            .ok_or(absent)?;
        let group = (off / MULTIXACT_MEMBERS_PER_MEMBERGROUP) % MULTIXACT_MEMBERGROUPS_PER_PAGE;
        let base = (group * MULTIXACT_MEMBERGROUP_SIZE) as usize;
        let member = (off % MULTIXACT_MEMBERS_PER_MEMBERGROUP) as usize;
        // Flags are read as bytes: the page is little-endian, as the
        // servers walshadow reads are.
        let flags = *page.get(base + member).ok_or(absent)?;
        let xid = le_u32(
            page,
            base + MULTIXACT_FLAGBYTES_PER_GROUP as usize + member * 4,
        )
        .ok_or(absent)?;
        Ok((xid, flags))
    }

    /// The updating member of `multi` (`MultiXactIdGetUpdateXid`), as far
    /// as the copied bytes tell. See the module docs for the scan.
    pub fn updater(&self, multi: MultiXactId) -> Result<MultiLookup, GateError> {
        let garbage = |reason: String| GateError::MultiXactGarbage { multi, reason };
        if multi == 0 {
            return Err(garbage(
                "an invalid multixact id (0) as a tuple's xmax".into(),
            ));
        }
        let start = match self.offset_of(multi) {
            Err(a) => return Ok(MultiLookup::Absent(a)),
            Ok(0) => return Ok(MultiLookup::NotRecorded),
            Ok(o) => o,
        };
        let next = match multi.wrapping_add(1) {
            0 => FIRST_MULTI_XACT_ID,
            n => n,
        };
        // The next offset bounds the members when it is copied and written.
        let end = self.offset_of(next).ok().filter(|o| *o != 0);
        let count = match end {
            Some(e) => {
                let n = e.wrapping_sub(start);
                if n == 0 || n > MAX_MEMBERS {
                    return Err(garbage(format!(
                        "its members run from offset {start} to {e}, {n} members"
                    )));
                }
                n
            }
            None => MAX_MEMBERS,
        };
        let mut updater: Option<MultiXactMember> = None;
        for i in 0..count {
            let off = start.wrapping_add(i);
            let (xid, flags) = match self.member_at(off) {
                Ok(m) => m,
                Err(_) if updater.is_some() => break,
                Err(a) => return Ok(MultiLookup::Absent(a)),
            };
            if xid == 0 {
                // Slot 0 is left empty at the offset wraparound.
                if off == 0 {
                    continue;
                }
                if updater.is_some() {
                    break;
                }
                return Ok(MultiLookup::NotRecorded);
            }
            let status = MultiXactStatus::from_flags(flags).ok_or_else(|| {
                garbage(format!(
                    "member at offset {off} (xid {xid}) has flags {flags:#04x}, not a status"
                ))
            })?;
            if xid < 3 {
                return Err(garbage(format!(
                    "member at offset {off} has the special xid {xid}"
                )));
            }
            if !status.is_update() {
                continue;
            }
            if let Some(first) = updater {
                return Err(garbage(format!(
                    "two updating members, xids {} and {xid}",
                    first.xid
                )));
            }
            let member = MultiXactMember { xid, status };
            if end.is_none() {
                // Past its own members, a scan without an end reads other
                // multixacts' members: the first updater is the answer.
                return Ok(MultiLookup::Updater(member));
            }
            updater = Some(member);
        }
        match (updater, end) {
            (Some(m), _) => Ok(MultiLookup::Updater(m)),
            (None, Some(_)) => Ok(MultiLookup::LockersOnly),
            (None, None) => Err(garbage(format!(
                "no updating member in the {MAX_MEMBERS} members from offset {start}"
            ))),
        }
    }

    pub(crate) fn offsets_runs(&self) -> Runs {
        self.offsets.runs()
    }

    pub(crate) fn members_runs(&self) -> Runs {
        self.members.runs()
    }
}

/// Builds `pg_multixact` segment bytes for tests: multixacts from `first`
/// with the given members, laid out as `RecordNewMultiXact` writes them.
#[cfg(test)]
pub(crate) mod build {
    use std::collections::BTreeMap;

    use super::*;
    use crate::visibility::slru::SLRU_PAGES_PER_SEGMENT;

    #[derive(Debug, Default)]
    pub struct Builder {
        pub offsets: BTreeMap<u32, Vec<u8>>,
        pub members: BTreeMap<u32, Vec<u8>>,
    }

    fn slot(segs: &mut BTreeMap<u32, Vec<u8>>, page: u32, at: usize) -> &mut [u8] {
        let seg = segs.entry(page / SLRU_PAGES_PER_SEGMENT).or_default();
        let start = (page % SLRU_PAGES_PER_SEGMENT) as usize * BLCKSZ;
        if seg.len() < start + BLCKSZ {
            seg.resize(start + BLCKSZ, 0);
        }
        &mut seg[start + at..]
    }

    impl Builder {
        pub fn set_offset(&mut self, multi: u32, off: u32) {
            let page = multi / MULTIXACT_OFFSETS_PER_PAGE;
            let at = (multi % MULTIXACT_OFFSETS_PER_PAGE) as usize * 4;
            slot(&mut self.offsets, page, at)[..4].copy_from_slice(&off.to_le_bytes());
        }

        pub fn set_member(&mut self, off: u32, xid: u32, flags: u8) {
            let page = off / MULTIXACT_MEMBERS_PER_PAGE;
            let group = (off / 4) % MULTIXACT_MEMBERGROUPS_PER_PAGE;
            let base = (group * MULTIXACT_MEMBERGROUP_SIZE) as usize;
            let m = (off % 4) as usize;
            slot(&mut self.members, page, base + m)[0] = flags;
            slot(&mut self.members, page, base + 4 + m * 4)[..4]
                .copy_from_slice(&xid.to_le_bytes());
        }

        /// Records `multi` at `off` with `members`; returns the next offset.
        pub fn record(&mut self, multi: u32, off: u32, members: &[(u32, u8)]) -> u32 {
            self.set_offset(multi, off);
            let mut o = off;
            for &(xid, flags) in members {
                self.set_member(o, xid, flags);
                o = o.wrapping_add(1);
            }
            o
        }

        pub fn into_multixacts(self) -> MultiXacts {
            let mut m = MultiXacts::new();
            for (n, b) in self.offsets {
                m.add_offsets_segment(u64::from(n), b).unwrap();
            }
            for (n, b) in self.members {
                m.add_members_segment(u64::from(n), b).unwrap();
            }
            m
        }
    }
}

#[cfg(test)]
mod tests {
    use super::build::Builder;
    use super::*;

    const SH: u8 = 1;
    const KSH: u8 = 0;
    const UPD: u8 = 5;
    const NKUPD: u8 = 4;

    fn upd(xid: u32, status: MultiXactStatus) -> MultiLookup {
        MultiLookup::Updater(MultiXactMember { xid, status })
    }

    #[test]
    fn layout_constants() {
        assert_eq!(MULTIXACT_MEMBERGROUP_SIZE, 20);
        assert_eq!(MULTIXACT_MEMBERGROUPS_PER_PAGE, 409);
        assert_eq!(MULTIXACT_MEMBERS_PER_PAGE, 1636);
        assert_eq!(MULTIXACT_OFFSETS_PER_PAGE, 2048);
    }

    #[test]
    fn finds_the_updater() {
        let mut b = Builder::default();
        // As a fresh cluster: the first multixact at offset 1.
        let o = b.record(1, 1, &[(700, SH), (701, SH)]);
        let o = b.record(2, o, &[(700, SH), (700, UPD)]);
        let o = b.record(3, o, &[(702, KSH), (703, NKUPD), (704, KSH)]);
        // Multixact 4: the newest, no next offset written.
        b.record(4, o, &[(705, SH), (706, UPD)]);
        // Members of a later multixact whose offset the copy lacks.
        b.set_member(o + 2, 707, UPD);
        let m = b.into_multixacts();
        assert_eq!(m.updater(1).unwrap(), MultiLookup::LockersOnly);
        assert_eq!(m.updater(2).unwrap(), upd(700, MultiXactStatus::Update));
        assert_eq!(
            m.updater(3).unwrap(),
            upd(703, MultiXactStatus::NoKeyUpdate)
        );
        assert_eq!(m.updater(4).unwrap(), upd(706, MultiXactStatus::Update));
        // Not recorded: the offset slot is zero.
        assert_eq!(m.updater(5).unwrap(), MultiLookup::NotRecorded);
        // Not copied: page 1 of the offsets.
        assert_eq!(
            m.updater(MULTIXACT_OFFSETS_PER_PAGE + 1).unwrap(),
            MultiLookup::Absent(Absent {
                slru: Slru::MultiXactOffsets,
                item: MULTIXACT_OFFSETS_PER_PAGE + 1
            })
        );
        assert!(matches!(
            m.updater(0),
            Err(GateError::MultiXactGarbage { .. })
        ));
    }

    #[test]
    fn members_not_yet_written_or_copied() {
        let mut b = Builder::default();
        // Multixact 10's offset is written, its members are not.
        b.set_offset(10, 50);
        b.set_member(0, 0, 0); // members page 0 exists, zeros
        // Multixact 11 starts on members page 1, which is not copied.
        b.set_offset(11, MULTIXACT_MEMBERS_PER_PAGE + 3);
        let m = b.into_multixacts();
        assert_eq!(m.updater(10).unwrap(), MultiLookup::NotRecorded);
        assert_eq!(
            m.updater(11).unwrap(),
            MultiLookup::Absent(Absent {
                slru: Slru::MultiXactMembers,
                item: MULTIXACT_MEMBERS_PER_PAGE + 3
            })
        );
    }

    #[test]
    fn offsets_wrap_around() {
        let mut b = Builder::default();
        // Multixact 9 takes the last two member slots before 2^32 and the
        // first after (slot 0 is a member here: the wrap fell inside it).
        let o = b.record(9, u32::MAX - 1, &[(800, SH), (801, SH), (802, UPD)]);
        assert_eq!(o, 1);
        // Multixact 10 starts exactly at the wrap: PostgreSQL gives it
        // offset 1 and leaves slot 0 empty (here already used by 9, so
        // build the empty-slot case on multixact 20 instead).
        b.record(10, o, &[(803, SH), (804, NKUPD)]);
        let m = b.into_multixacts();
        assert_eq!(m.updater(9).unwrap(), upd(802, MultiXactStatus::Update));
        assert_eq!(
            m.updater(10).unwrap(),
            upd(804, MultiXactStatus::NoKeyUpdate)
        );

        let mut b = Builder::default();
        b.set_offset(20, 0u32.wrapping_sub(1));
        b.set_member(u32::MAX, 900, SH);
        // Slot 0 stays zero; the next members follow at 1.
        b.set_member(0, 0, 0);
        b.set_member(1, 901, UPD);
        b.set_offset(21, 2);
        let m = b.into_multixacts();
        assert_eq!(m.updater(20).unwrap(), upd(901, MultiXactStatus::Update));
    }

    #[test]
    fn multixact_ids_wrap_to_first() {
        let mut b = Builder::default();
        let o = b.record(u32::MAX, 100, &[(1000, SH), (1001, SH)]);
        b.set_offset(FIRST_MULTI_XACT_ID, o);
        let m = b.into_multixacts();
        assert_eq!(m.updater(u32::MAX).unwrap(), MultiLookup::LockersOnly);
    }

    #[test]
    fn garbage_is_an_error() {
        let garbage = |m: &MultiXacts, multi| {
            matches!(m.updater(multi), Err(GateError::MultiXactGarbage { .. }))
        };
        let mut b = Builder::default();
        b.record(1, 1, &[(700, 9), (701, UPD)]); // bad flags
        b.record(2, 3, &[(700, UPD), (701, UPD)]); // two updaters
        b.record(3, 5, &[(1, UPD)]); // special xid
        b.set_offset(4, 6);
        b.set_offset(5, 2); // runs backwards: 2^32 - 4 members
        b.set_offset(6, 3);
        let m = b.into_multixacts();
        assert!(garbage(&m, 1));
        assert!(garbage(&m, 2));
        assert!(garbage(&m, 3));
        assert!(garbage(&m, 4));
    }
}
