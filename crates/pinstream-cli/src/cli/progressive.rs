//! `run --progressive on`: each input's data written into its region chunk by chunk as the
//! background pin makes the chunk resident (issue 13, goal 3), so that the first block moves
//! after one chunk, not after the whole input is pinned and read.

use pinstream::engine::io;
use pinstream::host::Fill;
use std::path::Path;
use std::sync::Arc;

/// Reads each chunk of the input file at `path` as it is pinned; `None` for what is not a
/// regular file (a FIFO or a device is read in order, whole, before the stream).
pub(super) fn from_file(path: &Path) -> Option<Fill> {
    let file = std::fs::File::open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let name = path.display().to_string();
    Some(Arc::new(move |off, bytes: &mut [u8]| {
        io::read_chunk(&file, off as u64, vec![bytes])
            .map_err(|e| format!("reading bytes {off}.. of {name}: {e}"))
    }))
}

/// Draws each chunk of the synthetic input from `seed` as it is pinned (the same bytes as
/// drawing the whole input at once).
pub(super) fn random(seed: u64) -> Fill {
    Arc::new(move |off, bytes: &mut [u8]| {
        pinstream_cli::tools::random::fill_random_at(seed, off, bytes);
        Ok(())
    })
}
