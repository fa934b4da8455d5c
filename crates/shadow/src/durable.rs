//! Durable small files: write-temp, fsync, rename, fsync of the directory.
//! A crash leaves either the old file or the new one, never a torn one.
//! Every state file walshadow keeps (init.json, filter.ckpt, progress.json)
//! is written this way, except the segment store's, which every flush updates:
//! it is created this way and then written in place in alternate slots (see
//! [`crate::segment_store`]).

use std::io::{self, Write};
use std::path::Path;

/// Replaces `dir/name` with `content` durably.
pub fn write_file(dir: &Path, name: &str, content: &[u8]) -> io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(content)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}
