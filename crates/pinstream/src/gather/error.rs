//! The gather's errors, in one leaf module: what a gathered upload or a scattered download
//! refuses (each message names the fix) and what fails while it runs.

use crate::backend::error::BackendError;

/// Why a gathered upload or a scattered download ([`super::Gather`]) was refused or
/// failed; each message names the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatherError {
    /// No pieces at all.
    #[error(
        "a gather needs at least one piece: give one or more (host bytes, device offset) pairs"
    )]
    NoPieces,
    /// A piece of zero bytes.
    #[error("piece {index} is empty: give every piece at least one byte, or leave it out")]
    EmptyPiece {
        /// Its index in the list.
        index: usize,
    },
    /// A piece whose device range ends past the buffer.
    #[error("piece {index} ({len} bytes at device offset {offset}) ends past the {size}-byte device buffer: give an offset and length inside it")]
    OutOfBuffer {
        /// Its index in the list.
        index: usize,
        /// Its device offset.
        offset: usize,
        /// Its length.
        len: usize,
        /// The buffer's size.
        size: usize,
    },
    /// A piece whose host range ends past the mapped region it lies in (a zero-copy call).
    #[error("piece {index} ({len} bytes at host offset {offset}) ends past the {size}-byte mapped region: give an offset and length inside it")]
    OutOfRegion {
        /// Its index in the list.
        index: usize,
        /// Its offset in the region.
        offset: usize,
        /// Its length.
        len: usize,
        /// The region's size.
        size: usize,
    },
    /// Mapped memory of another context than the gather's (a zero-copy call).
    #[error("the mapped region belongs to another OpenCL context than the gather's: allocate it in the context of the queue and buffer")]
    OtherContext,
    /// The caller's buffer was made with a flag that forbids what the copy kernel does to it:
    /// writing a `CL_MEM_READ_ONLY` destination, reading a `CL_MEM_WRITE_ONLY` source.
    #[error("the buffer was made with {flag}, and batched copies {} it with a kernel: make it CL_MEM_READ_WRITE, or copy each piece with {}", if *.write { "write" } else { "read" }, if *.write { "clEnqueueWriteBuffer" } else { "clEnqueueReadBuffer" })]
    KernelAccess {
        /// The flag, by name.
        flag: &'static str,
        /// True where the kernel writes the buffer (an upload), false where it reads it.
        write: bool,
    },
    /// Two pieces of one upload write the same device bytes.
    #[error("pieces {first} and {second} overlap on the device, so which one lands last would be undefined: give each upload disjoint device ranges")]
    Overlap {
        /// The lower index.
        first: usize,
        /// The higher index.
        second: usize,
    },
    /// A staging capacity that cannot hold anything.
    #[error("a gather's staging capacity must be at least {min} bytes and {min_rows} rows (got {bytes} bytes, {rows} rows): give a larger capacity")]
    Capacity {
        /// Bytes given.
        bytes: usize,
        /// Rows given.
        rows: usize,
        /// The least bytes.
        min: usize,
        /// The least rows.
        min_rows: usize,
    },
    /// The copy kernels did not build on this device.
    #[error("the gather kernels did not build: {0}")]
    Build(String),
    /// The pinned staging could not be made or used.
    #[error("gather staging: {0}")]
    Host(#[from] crate::host::HostError),
    /// The pinned staging is not one contiguous range (a strategy that chunks it).
    #[error("gather staging: the pinned region is not one contiguous range: pin it with a strategy that gives one (register)")]
    NotContiguous,
    /// The thread that unpacks asynchronous downloads could not be started or has ended.
    #[error("the gather's unpacking thread: {0}: free memory or threads (ulimit -u) and retry")]
    Unpacker(String),
    /// A call this API does not offer (zero-copy batch copies on Vulkan and CUDA).
    #[error("{what} are not offered through {api}: {why}")]
    NotOffered {
        /// The API's name.
        api: &'static str,
        /// What was asked for.
        what: &'static str,
        /// Why not, and what to use instead.
        why: String,
    },
    /// A command failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

impl From<crate::backend::opencl::ClError> for GatherError {
    fn from(e: crate::backend::opencl::ClError) -> Self {
        GatherError::Backend(BackendError::from(e))
    }
}
