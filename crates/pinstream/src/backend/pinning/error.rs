//! [`HostError`]: why pinned memory could not be made or used, whatever the API, with the
//! fields each front phrases its own fix from. It names no API's types: a pinning by its name,
//! a driver's failure as a [`BackendError`].

use super::PinKind;
use crate::backend::error::BackendError;
use crate::backend::os;
use crate::units::Bytes;

/// What limits a driver's pin on this OS, after "; ", for a driver pinning's failed driver
/// call (Windows: WDDM's budget); empty otherwise (a failure before any call included).
fn driver_limit(kind: PinKind, source: &BackendError) -> String {
    match os::driver_pin_limit() {
        Some(limit) if kind == PinKind::Driver && !source.call.is_empty() => format!("; {limit}"),
        _ => String::new(),
    }
}

/// [`HostError::AutoFailed`]'s message: what was tried, each failure, and the fix.
fn auto_failed(bytes: usize, tried: &[String]) -> String {
    let what = if tried.is_empty() {
        "the device offers no strategy that pins memory".to_string()
    } else {
        format!("tried {}", tried.join("; "))
    };
    format!("no strategy could pin {}: {what}. No unpinned memory is handed out in its place: fix what the errors name, pin less, or, where unpinned memory will do, ask for the `mlock` or `pageable` baseline by name", Bytes(bytes as u64))
}

/// Why pinned memory could not be made or used; each message names the fix in terms of the
/// library's data (sizes, strategy names, mappings), never a front's flag or function: each
/// front (CLI, C library, Python) adds its own spelling of the fix from the variant's fields.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// A size of zero bytes.
    #[error("a region must be larger than 0 bytes: give a positive size")]
    ZeroSize,
    /// More than this process may still take: the machine's `MemAvailable`, or its memory
    /// cgroup's room (a container's limit), whichever is smaller.
    #[error("size {} exceeds {room}: choose a smaller size", Bytes(*.requested))]
    TooLarge {
        /// Requested bytes.
        requested: u64,
        /// The room, and what bounds it.
        room: os::HostRoom,
    },
    /// Registering would fault in more pages than this process may still take.
    #[error("registering {} would fault in {} of it (its pages not in memory now), more than {room}: register a smaller range, or write the memory (or free other memory) first", Bytes(*.len as u64), Bytes(*.absent))]
    RegisterTooLarge {
        /// Bytes asked to register.
        len: usize,
        /// Bytes of it not resident now.
        absent: u64,
        /// The room, and what bounds it.
        room: os::HostRoom,
    },
    /// A forced strategy the device does not offer.
    #[error("strategy `{pinning}` is not available on device {device}: {why}; choose a strategy every device of the context offers, or auto")]
    Unsupported {
        /// The pinning's name (OpenCL: the strategy's).
        pinning: String,
        /// The device name.
        device: String,
        /// What is missing.
        why: String,
    },
    /// Locking pages failed: `mlock` hit `RLIMIT_MEMLOCK` (unix), or `VirtualLock` the
    /// working-set quota (Windows); the message names the limit and the fix.
    #[error("{}", os::lock_failure(*.bytes as u64, *.limit, .source))]
    Memlock {
        /// Bytes asked for.
        bytes: usize,
        /// The limit: the soft `RLIMIT_MEMLOCK` (`None` if unlimited) on unix, the minimum
        /// working set on Windows.
        limit: Option<u64>,
        /// The OS error.
        source: std::io::Error,
    },
    /// The mechanism failed (on Windows a driver's failure also names WDDM's budget).
    #[error("strategy `{pinning}` could not pin {}: {source}{}", Bytes(*.bytes as u64), driver_limit(*.kind, .source))]
    Alloc {
        /// The pinning's name (OpenCL: the strategy's).
        pinning: String,
        /// How memory pinned that way reaches the device.
        kind: PinKind,
        /// Bytes asked for.
        bytes: usize,
        /// The failure: a driver call's (its `call` named), or one before any call (an empty
        /// `call`: the OS's map, the data's fill, a function the platform lacks).
        source: BackendError,
    },
    /// Every strategy `auto` tried failed (`auto` never hands out unpinned memory for a device
    /// that needs pinned memory).
    #[error("{}", auto_failed(*.bytes, .tried))]
    AutoFailed {
        /// Bytes asked for.
        bytes: usize,
        /// Each strategy's failure.
        tried: Vec<String>,
    },
    /// `PINSTREAM_INJECT_FAULT` (a test hook) is set to a value it does not know.
    #[error(transparent)]
    FaultHook(#[from] crate::backend::FaultSpecError),
    /// A null pointer given as memory to register.
    #[error("a null pointer cannot be registered: pass the start of memory your program owns")]
    NullPointer,
    /// Part of a range to register is not mapped memory of this process.
    #[error("bytes {start:#x}..{end:#x} of the range are not mapped memory of this process: pass memory your program allocated (malloc, mmap) and its true length")]
    Unmapped {
        /// First unmapped address.
        start: usize,
        /// End of the unmapped part.
        end: usize,
    },
    /// A range the driver would accept without pinning it.
    #[error("cannot register {start:#x}..{end:#x}: {why} ({mapping}). NVIDIA's OpenCL driver accepts such a registration with CL_SUCCESS but does not pin it (transfers stay at pageable speed), so pinstream refuses it. What works: a writable private mapping (mmap with PROT_READ|PROT_WRITE and MAP_PRIVATE; a file mapped so is copied into RAM as it is written), or pinned memory allocated by pinstream that you read the data into")]
    NotPinnable {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// What is wrong with the mapping.
        why: String,
        /// The mapping, as the OS describes it (`r--s file /data/x`).
        mapping: String,
    },
    /// Part of a range lies in a private file mapping past the file's end, where no page can
    /// be read or written.
    #[error("cannot register {start:#x}..{end:#x}: bytes {from:#x}..{end:#x} of it lie past the end of {} ({} bytes long), where a mapping of the file has no pages to read or write (touching them raises SIGBUS): register only the part that lies within the file, or extend the file (ftruncate) before mapping it", .file.display(), .file_len)]
    PastEndOfFile {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// First address past the file's last page.
        from: usize,
        /// The mapped file.
        file: std::path::PathBuf,
        /// Its length in bytes.
        file_len: u64,
    },
    /// The kind of mapping could not be read, so a pin could not be promised.
    #[error("cannot register {start:#x}..{end:#x}: the kind of memory mapping could not be read ({source}), and the driver may accept a registration it does not pin. Allocate pinned memory from pinstream instead")]
    MappingUnknown {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// One contiguous range was asked for, and the strategy gives pieces.
    #[error("strategy `{pinning}` gives pieces of at most {} (the device's largest allocation), so {} cannot be one contiguous pointer: use `register` (one range of any size) or `auto`, or ask for at most {}", Bytes(*.chunk as u64), Bytes(*.bytes as u64), Bytes(*.chunk as u64))]
    NotContiguous {
        /// The pinning's name (OpenCL: the strategy's).
        pinning: String,
        /// Bytes asked for.
        bytes: usize,
        /// The largest piece.
        chunk: usize,
    },
    /// The background part of a progressive pin failed (the message names the chunk).
    #[error("{0}")]
    Background(String),
    /// A byte range outside the region or the device buffer.
    #[error("range {start}..{end} is outside a region of {len} bytes")]
    Range {
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// Region length.
        len: usize,
    },
    /// Mapped memory was asked for, and the context's devices have no mechanism that keeps
    /// kernel access in host memory (OpenCL: `ZeroCopy::for_devices` says why).
    #[error("no zero-copy mechanism on this driver: {why}. Kernels cannot read host memory in place here: use pinned memory that is copied to the device (the streaming engine, or transfers from a region made without `mapped`)")]
    NoZeroCopy {
        /// Why (the device and what its driver lacks).
        why: String,
    },
    /// Mapped memory larger than one buffer of the device may be: its one buffer over the
    /// whole allocation cannot exceed `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
    #[error("mapped memory of {} exceeds the device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE, {}): kernels reach it through one buffer, so ask for at most {} per allocation and split a larger table into several", Bytes(*.bytes as u64), Bytes(*.max_alloc as u64), Bytes(*.max_alloc as u64))]
    MappedTooLarge {
        /// Bytes asked for.
        bytes: usize,
        /// The smallest `CL_DEVICE_MAX_MEM_ALLOC_SIZE` of the context's devices.
        max_alloc: usize,
    },
    /// One buffer was asked of mapped memory that lies in several (or would), because one
    /// kernel buffer binds at most `binding` bytes (Vulkan's `maxStorageBufferRange`, at most
    /// 1 GiB).
    #[error("mapped memory of {} lies in {chunks} buffers of at most {} (maxStorageBufferRange, or 1 GiB where that is larger: the most one kernel buffer binds), so no one buffer covers it: ask for at most {} per allocation, or take a buffer per chunk and split the kernel's work by chunk", Bytes(*.bytes as u64), Bytes(*.binding as u64), Bytes(*.binding as u64))]
    MappedInChunks {
        /// Bytes of the memory.
        bytes: usize,
        /// Buffers it lies in.
        chunks: usize,
        /// The most bytes one buffer binds.
        binding: usize,
    },
    /// A device buffer was asked of memory that is not mapped.
    #[error("this memory (strategy `{pinning}`) is not mapped, so kernels have no buffer over it: allocate it mapped to hand it to kernels (a `register` buffer given to a kernel is copied into VRAM on discrete GPUs)")]
    NotMapped {
        /// The name of the pinning that made it.
        pinning: String,
    },
    /// Memory of an API that pins it for one device alone (Vulkan) was asked to be shared
    /// with other devices (`PinRequest::shared_with`).
    #[error("{api} memory is pinned for one device and cannot be shared with other devices: pin it for a single device")]
    OneDevice {
        /// The API (`Vulkan`).
        api: &'static str,
    },
    /// A call of the API failed (`api` says which).
    #[error(transparent)]
    Backend(#[from] BackendError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_failure_lists_what_was_tried_and_the_fix() {
        let tried = vec!["register: out of memory".to_string(), "nv-host: no".into()];
        let e = HostError::AutoFailed {
            bytes: 1 << 30,
            tried,
        }
        .to_string();
        assert!(
            e.starts_with(
                "no strategy could pin 1 GiB: tried register: out of memory; nv-host: no."
            ) && e.contains("No unpinned memory is handed out")
                && e.contains("`mlock` or `pageable` baseline by name"),
            "{e}"
        );
        let none = HostError::AutoFailed {
            bytes: 1,
            tried: Vec::new(),
        };
        assert!(none.to_string().contains("offers no strategy that pins"));
    }
}
