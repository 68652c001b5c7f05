//! An input of `run` ready to read ([`Reader`]), and `run --progressive on`: each input's
//! data written into its region chunk by chunk as the background pin makes the chunk
//! resident (issue 13, goal 3), so that the first block moves after one chunk, not after the
//! whole input is pinned and read.

use super::Failure;
use pinstream::engine::io;
use pinstream::engine::HostMemory;
use pinstream::host::Fill;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

/// One input, ready to fill a region: a file opened once (the same handle says whether it
/// is a regular file and serves every read: a FIFO opened a second time would have lost its
/// writer to SIGPIPE, and the second open would wait forever), or synthetic data's seed.
pub(super) enum Reader {
    /// An input file, opened.
    File {
        /// Its path, for messages.
        path: PathBuf,
        /// The one handle.
        file: Arc<File>,
        /// A regular file (not a FIFO or a device).
        regular: bool,
    },
    /// Synthetic data drawn from this seed.
    Drawn(u64),
}

impl Reader {
    /// Opens input `path` (once).
    pub(super) fn open(path: &std::path::Path) -> Result<Self, Failure> {
        let file = io::open_input(path).map_err(Failure::usage)?;
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        Ok(Reader::File {
            path: path.to_path_buf(),
            file: Arc::new(file),
            regular,
        })
    }

    /// Fills each chunk as it is pinned (`--progressive on`); `None` for what is not a
    /// regular file (a FIFO or a device is read in order, whole, before the stream).
    pub(super) fn as_pinned(&self) -> Option<Fill> {
        match self {
            Reader::File { regular: false, .. } => None,
            Reader::File { path, file, .. } => Some(from_file(file.clone(), path)),
            Reader::Drawn(seed) => Some(random(*seed)),
        }
    }

    /// Fills all of `region` (`stated`: the flag that stated the size, if one did, for a
    /// short file's message).
    pub(super) fn fill(
        &self,
        region: &mut dyn HostMemory,
        stated: Option<&str>,
    ) -> Result<(), Failure> {
        match self {
            Reader::File { path, file, .. } => io::read_file_into(file, path, region)
                .map_err(|e| Failure::usage(pinstream_cli::advice::io_error(&e, stated))),
            Reader::Drawn(seed) => {
                // Chunk by chunk at their offsets: the same bytes however the region is cut.
                let mut off = 0;
                for s in region.slices_mut(0..region.len()).map_err(Failure::run)? {
                    pinstream_lab::tools::random::fill_random_at(*seed, off, s);
                    off += s.len();
                }
                Ok(())
            }
        }
    }
}

/// Reads each chunk of the regular input `file` (at `path`) as it is pinned.
fn from_file(file: Arc<File>, path: &std::path::Path) -> Fill {
    let name = path.display().to_string();
    Arc::new(move |off, bytes: &mut [u8]| {
        io::read_chunk(&file, off as u64, vec![bytes])
            .map_err(|e| format!("reading bytes {off}.. of {name}: {e}"))
    })
}

/// Draws each chunk of the synthetic input from `seed` as it is pinned (the same bytes as
/// drawing the whole input at once).
fn random(seed: u64) -> Fill {
    Arc::new(move |off, bytes: &mut [u8]| {
        pinstream_lab::tools::random::fill_random_at(seed, off, bytes);
        Ok(())
    })
}
