//! The walked pages the backup's WAL window defines whole, which the walk
//! reads instead of the backup's copies of them.
//!
//! A backup copies each page while the server may be writing it: a page
//! written during the copy can read torn (part old, part new), and without
//! data checksums nothing on the page says so. Recovery makes such a copy
//! consistent by replaying the window, where the first change of every page
//! after the backup's redo point carries a full-page image (the backup
//! forces full-page writes) or initialises the page. The walk does the
//! same without replaying the records: a page the window defines is taken
//! from its last definition, which is the page as it was at that record,
//! as good a state of it as any copy made during the backup. A page the
//! window initialised holds only tuples written in the window, which the
//! window's replay (or the stream) delivers, so it is not walked. A page
//! the window holds nothing of was not written while it was copied.
//!
//! ```text
//!  window WAL ─▶ GapWal::defined_pages ─▶ WindowPages::define
//!                  image: into its block's slot of the slot file (8 KiB each,
//!                         a block's later image overwrites its slot)
//!                  init:  marked, nothing kept
//!  walked page ─▶ WindowPages::get ─▶ Image(page) | Initialised | None (the copy)
//! ```
//!
//! Memory holds one index entry per defined block; the images themselves
//! are on disk, at most one per block of the walked relations.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use walshadow_heap::heap_page::BLCKSZ;
use walshadow_types::{BlockNumber, Lsn, RelFileLocator};

/// In a block's index value: the window initialised it after its latest
/// image (if any). The rest of the value is its slot + 1 (0: none).
const INITIALISED: u64 = 1 << 63;

/// A walked page as the window defines it.
#[derive(Debug, PartialEq, Eq)]
pub enum WindowPage {
    /// The page as of the record at `lsn`.
    Image { page: Vec<u8>, lsn: Lsn },
    /// Initialised in the window: every tuple on it was written there.
    Initialised,
}

/// The index and slot file of one pass's window pages. The index holds
/// about 20 bytes per block the window defines (a `u64` key, relation
/// number and block, and a `u64` value), plus 8 per image slot.
#[derive(Debug)]
pub struct WindowPages {
    path: PathBuf,
    file: File,
    relations: HashMap<RelFileLocator, u32>,
    blocks: HashMap<u64, u64>,
    /// The record LSN of each slot's image.
    slot_lsns: Vec<Lsn>,
    pub images: u64,
    pub initialised: u64,
}

impl WindowPages {
    /// An empty set whose images go to `path` (created anew).
    pub fn create(path: &Path) -> std::io::Result<WindowPages> {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(WindowPages {
            path: path.to_owned(),
            file,
            relations: HashMap::new(),
            blocks: HashMap::new(),
            slot_lsns: Vec::new(),
            images: 0,
            initialised: 0,
        })
    }

    fn key(&self, locator: RelFileLocator, block: BlockNumber) -> Option<u64> {
        let rel = self.relations.get(&locator)?;
        Some(u64::from(*rel) << 32 | u64::from(block))
    }

    /// Records the window's next definition of `block` (in WAL order).
    pub fn define(
        &mut self,
        locator: RelFileLocator,
        block: BlockNumber,
        lsn: Lsn,
        image: Option<&[u8]>,
    ) -> std::io::Result<()> {
        let n = self.relations.len() as u32;
        let rel = *self.relations.entry(locator).or_insert(n);
        let key = u64::from(rel) << 32 | u64::from(block);
        let old_slot = self.blocks.get(&key).map_or(0, |v| v & !INITIALISED);
        let value = match image {
            Some(page) => {
                if page.len() != BLCKSZ {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("an image of {} bytes, not a page", page.len()),
                    ));
                }
                let slot = match old_slot.checked_sub(1) {
                    Some(s) => s,
                    None => {
                        self.slot_lsns.push(lsn);
                        self.slot_lsns.len() as u64 - 1
                    }
                };
                self.file.write_all_at(page, slot * BLCKSZ as u64)?;
                if let Some(l) = self.slot_lsns.get_mut(slot as usize) {
                    *l = lsn;
                }
                self.images += 1;
                slot + 1
            }
            None => {
                self.initialised += 1;
                old_slot | INITIALISED
            }
        };
        self.blocks.insert(key, value);
        Ok(())
    }

    /// How the window defines `block`, if it does.
    pub fn get(
        &self,
        locator: RelFileLocator,
        block: BlockNumber,
    ) -> std::io::Result<Option<WindowPage>> {
        let Some(value) = self.key(locator, block).and_then(|k| self.blocks.get(&k)) else {
            return Ok(None);
        };
        if value & INITIALISED != 0 {
            return Ok(Some(WindowPage::Initialised));
        }
        let slot = value.saturating_sub(1);
        let lsn = self
            .slot_lsns
            .get(slot as usize)
            .copied()
            .ok_or_else(|| std::io::Error::other(format!("window page slot {slot} unknown")))?;
        let mut page = vec![0u8; BLCKSZ];
        self.file.read_exact_at(&mut page, slot * BLCKSZ as u64)?;
        Ok(Some(WindowPage::Image { page, lsn }))
    }

    /// Blocks the window defines.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

impl Drop for WindowPages {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(rel: u32) -> RelFileLocator {
        RelFileLocator {
            spc_oid: 1663,
            db_oid: 5,
            rel_number: rel,
        }
    }

    fn page(fill: u8) -> Vec<u8> {
        vec![fill; BLCKSZ]
    }

    #[test]
    fn the_last_definition_of_a_block_wins_and_reuses_its_slot() {
        let dir = std::env::temp_dir().join(format!("walshadow-window-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pages");
        let mut w = WindowPages::create(&path).unwrap();
        w.define(loc(1), 0, Lsn(10), Some(&page(1))).unwrap();
        w.define(loc(1), 1, Lsn(11), Some(&page(2))).unwrap();
        w.define(loc(2), 0, Lsn(12), None).unwrap();
        w.define(loc(1), 0, Lsn(13), Some(&page(3))).unwrap();
        assert_eq!(
            w.get(loc(1), 0).unwrap(),
            Some(WindowPage::Image {
                page: page(3),
                lsn: Lsn(13)
            })
        );
        assert_eq!(
            w.get(loc(1), 1).unwrap(),
            Some(WindowPage::Image {
                page: page(2),
                lsn: Lsn(11)
            })
        );
        assert_eq!(w.get(loc(2), 0).unwrap(), Some(WindowPage::Initialised));
        assert_eq!(w.get(loc(2), 1).unwrap(), None);
        // Initialised after its image: the page is not walked; an image
        // after that takes the old slot again.
        w.define(loc(1), 1, Lsn(14), None).unwrap();
        assert_eq!(w.get(loc(1), 1).unwrap(), Some(WindowPage::Initialised));
        w.define(loc(1), 1, Lsn(15), Some(&page(4))).unwrap();
        assert_eq!(
            w.get(loc(1), 1).unwrap(),
            Some(WindowPage::Image {
                page: page(4),
                lsn: Lsn(15)
            })
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * BLCKSZ as u64);
        assert!(w.define(loc(3), 0, Lsn(16), Some(&[0u8; 10])).is_err());
        assert_eq!((w.images, w.initialised, w.len()), (4, 2, 3));
        drop(w);
        assert!(!path.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
