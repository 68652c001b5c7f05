//! The `psVkHost*` calls: pinned host memory for Vulkan programs, in the program's own
//! `VkDevice` (what ggml's `ggml_vk_host_malloc` does by hand, without its 4 GiB limit). The
//! functions come from the program's `vkGetInstanceProcAddr`: no loader of pinstream's own.
//! They are the Vulkan spelling of the `psHost*` calls' code: the program's device is adopted
//! (`VulkanDevice::from_program`) and pinned through `HostApi`, as every front pins with any
//! API's device; memory is imported with `VK_EXT_external_memory_host` in chunks of at
//! most `maxMemoryAllocationSize`.
//!
//! The ranges live in the C library's one registry (module `registry`, which also holds their
//! kind and block), under Vulkan's key: a range may overlap an OpenCL call's (the same memory
//! pinned for both APIs), never another `psVkHost*` range; the same refusals, with the Vulkan
//! calls' names.

use crate::api::{max_chunk, non_null, range_of};
use crate::error::{
    boundary, Failure, PS_ERROR_INVALID_VALUE, PS_ERROR_MEMORY_ALLOCATION, PS_ERROR_NOT_PINNABLE,
    PS_ERROR_STRATEGY_UNAVAILABLE, PS_ERROR_VULKAN,
};
use crate::info::{psHostKind, put, PS_HOST_INFO_TEXT};
use crate::registry::{self, Block, Kind};
use pinstream::backend::error::ErrorKind;
use pinstream::backend::pinning::CallerRange;
use pinstream::backend::vulkan::{
    vk, HostChunk, VkPinning, Vulkan, VulkanDevice, VulkanError, VulkanHost,
};
use pinstream::host::{
    check_registrable, check_size, HostApi, HostError, PinRequest, RegisterRequest,
};
use std::ffi::{c_char, c_uint, c_void};
use std::ops::Range;

/// A Vulkan instance, as `vulkan/vulkan.h` declares it.
pub type VkInstance = vk::Instance;
/// A Vulkan physical device, as `vulkan/vulkan.h` declares it.
pub type VkPhysicalDevice = vk::PhysicalDevice;
/// A Vulkan device, as `vulkan/vulkan.h` declares it.
pub type VkDevice = vk::Device;
/// A Vulkan buffer, as `vulkan/vulkan.h` declares it.
pub type VkBuffer = vk::Buffer;
/// Vulkan device memory, as `vulkan/vulkan.h` declares it.
pub type VkDeviceMemory = vk::DeviceMemory;
/// A size or offset in Vulkan memory, as `vulkan/vulkan.h` declares it.
pub type VkDeviceSize = vk::DeviceSize;
/// `vkGetInstanceProcAddr`'s type, as `vulkan/vulkan.h` declares it (NULL allowed: refused).
#[allow(non_camel_case_types)]
pub type PFN_vkGetInstanceProcAddr = Option<vk::PFN_vkGetInstanceProcAddr>;

/// `psVkHostAlloc` and `psVkHostRegister` flags: the only value they take.
pub const PS_VK_HOST_DEFAULT: c_uint = 0;

/// How a `psVkHost*` range is pinned.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum psVkPinning {
    /// Host pages imported with `VK_EXT_external_memory_host`: no device memory spent.
    PS_VK_PINNING_IMPORT = 1,
    /// The driver's host-visible memory, mapped (`psVkHostAlloc` only, where the device does
    /// not import: `note` says why).
    PS_VK_PINNING_HOST_VISIBLE = 2,
}

/// One chunk of a range: the range's bytes `ptr + offset .. ptr + offset + size` are the
/// buffer's bytes `buffer_offset .. buffer_offset + size` (`VkBufferCopy`'s terms: copy with
/// `srcOffset = buffer_offset`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psVkChunk {
    /// The buffer over the chunk (usage: transfer source and destination, storage).
    pub buffer: VkBuffer,
    /// Its memory (the imported or host-visible allocation).
    pub memory: VkDeviceMemory,
    /// Where the chunk's part of the range starts in the buffer.
    pub buffer_offset: VkDeviceSize,
    /// Where it starts in the range (bytes from the range's start).
    pub offset: usize,
    /// Bytes of the range in this chunk.
    pub size: usize,
}

/// What `psVkHostGetInfo` reports about a range. Plain data: the caller owns its copy.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct psVkHostInfo {
    /// Start of the range (the pointer `psVkHostAlloc` returned or `psVkHostRegister` got).
    pub base: *mut c_void,
    /// Length of the range in bytes.
    pub bytes: usize,
    /// `PS_HOST_ALLOCATED` (`psVkHostAlloc`) or `PS_HOST_REGISTERED` (`psVkHostRegister`).
    pub kind: psHostKind,
    /// Imported or the driver's host-visible memory.
    pub pinning: psVkPinning,
    /// Chunks (buffers) over the range: `psVkHostGetChunks` lists them.
    pub chunk_count: usize,
    /// How it was pinned, and for host-visible memory why not imported; NUL-terminated.
    pub note: [c_char; PS_HOST_INFO_TEXT],
}

/// The chunks' parts of `block`'s range.
fn parts(block: &Block<VulkanHost>) -> Vec<psVkChunk> {
    let Range { start, end } = block.range;
    let part = |c: &HostChunk| {
        let (from, to) = (c.ptr as usize, c.ptr as usize + c.len);
        let (lo, hi) = (from.max(start), to.min(end));
        (lo < hi).then_some(psVkChunk {
            buffer: c.buffer,
            memory: c.memory,
            buffer_offset: (lo - from) as VkDeviceSize,
            offset: lo - start,
            size: hi - lo,
        })
    };
    block.host.chunks().iter().filter_map(part).collect()
}

/// The class of a Vulkan failure (the adoption's: a program's device lacking what the calls
/// need is the caller's to mend); `import` is the code of an import the driver refused. The
/// rest are classed as a pin's failures are.
fn vk_failure(e: VulkanError, import: crate::error::psError_t) -> Failure {
    match e {
        VulkanError::Lacking(why) => Failure::new(PS_ERROR_INVALID_VALUE, why),
        VulkanError::Import { .. } => Failure::new(import, e.to_string()),
        e => pin_failure(HostError::Backend(e.into()), "psVkHostAlloc", import),
    }
}

/// The class of a pin's failure; `import` is the code of an import the driver refused
/// ([`HostError::Alloc`]: the mechanism's failure).
pub(crate) fn pin_failure(e: HostError, call: &str, import: crate::error::psError_t) -> Failure {
    let code = match &e {
        // The driver's own words (VulkanError::Import's, with what works instead).
        HostError::Alloc { source, .. } => return Failure::new(import, source.to_string()),
        HostError::Unsupported { .. } | HostError::NotContiguous { .. } => {
            PS_ERROR_STRATEGY_UNAVAILABLE
        }
        HostError::Backend(b) => match b.kind() {
            ErrorKind::OutOfMemory => PS_ERROR_MEMORY_ALLOCATION,
            ErrorKind::Unsupported => PS_ERROR_STRATEGY_UNAVAILABLE,
            _ if b.call == "import" => PS_ERROR_STRATEGY_UNAVAILABLE,
            _ => PS_ERROR_VULKAN,
        },
        _ => return Failure::host(e, call),
    };
    Failure::new(code, e.to_string())
}

/// The refusal of a NULL handle of the program's, `what`.
fn null_handle(what: &str) -> Failure {
    Failure::new(
        PS_ERROR_INVALID_VALUE,
        format!("{what} is NULL: pass your program's own (the one your Vulkan calls use)"),
    )
}

/// The program's `vkGetInstanceProcAddr`, refused (as its instance and physical device are)
/// where NULL.
pub(crate) fn program_handles(
    instance: VkInstance,
    physical: VkPhysicalDevice,
    gipa: PFN_vkGetInstanceProcAddr,
) -> Result<vk::PFN_vkGetInstanceProcAddr, Failure> {
    let gipa = gipa.ok_or_else(|| null_handle("vkGetInstanceProcAddr"))?;
    if instance == VkInstance::null() {
        return Err(null_handle("the VkInstance"));
    }
    if physical == VkPhysicalDevice::null() {
        return Err(null_handle("the VkPhysicalDevice"));
    }
    Ok(gipa)
}

/// The program's device, checked for NULL handles.
///
/// # Safety
/// The handles are NULL or live, as the header says.
unsafe fn adopt(
    instance: VkInstance,
    physical: VkPhysicalDevice,
    device: VkDevice,
    gipa: PFN_vkGetInstanceProcAddr,
) -> Result<VulkanDevice, Failure> {
    let gipa = program_handles(instance, physical, gipa)?;
    if device == VkDevice::null() {
        return Err(null_handle("the VkDevice"));
    }
    // SAFETY: non-null handles are live and outlive the blocks made with them (the caller's
    // contract).
    unsafe { VulkanDevice::from_program(gipa, instance, physical, device) }
        .map_err(|e| vk_failure(e, PS_ERROR_VULKAN))
}

fn check_flags(flags: c_uint, call: &str) -> Result<(), Failure> {
    if flags == PS_VK_HOST_DEFAULT {
        return Ok(());
    }
    Err(Failure::new(
        PS_ERROR_INVALID_VALUE,
        format!("flags {flags:#x}: {call} takes PS_VK_HOST_DEFAULT (0) only"),
    ))
}

fn non_zero(bytes: usize) -> Result<(), Failure> {
    if bytes == 0 {
        return Err(Failure::new(
            PS_ERROR_INVALID_VALUE,
            "bytes is 0: pin at least one byte",
        ));
    }
    Ok(())
}

/// How `host`'s chunks were made, in words.
fn imported_note(host: &VulkanHost, align: u64) -> String {
    let chunks = host.chunks();
    let most = chunks.iter().map(|c| c.len).max().unwrap_or(0);
    format!("imported with VK_EXT_external_memory_host ({align}-byte alignment) in {} chunk(s) of at most {most} bytes", chunks.len())
}

/// `bytes` of pinstream's memory imported into `device`, else (where the device does not
/// import) the driver's host-visible memory in one mapping, which maps one allocation at a
/// time: at most one chunk, so that the range is contiguous.
fn allocate(device: &VulkanDevice, bytes: usize) -> Result<Block<VulkanHost>, Failure> {
    let request = PinRequest {
        max_chunk: max_chunk()?,
        contiguous: true,
        ..PinRequest::default()
    };
    let why = || device.import_refusal().unwrap_or_default();
    let host = <Vulkan as HostApi>::pin(device, bytes, request).map_err(|e| match e {
        HostError::NotContiguous { chunk, .. } => Failure::new(PS_ERROR_STRATEGY_UNAVAILABLE, format!("{bytes} bytes: {}, and the driver's host-visible memory maps one allocation of at most {chunk} bytes at a time: enable VK_EXT_external_memory_host on the VkDevice, or allocate in parts of at most {chunk} bytes", why())),
        e => pin_failure(e, "psVkHostAlloc", PS_ERROR_MEMORY_ALLOCATION),
    })?;
    let start = host.chunks()[0].ptr as usize;
    let note = match (host.pinning(), device.caps().import_alignment) {
        (VkPinning::Import, Some(align)) => imported_note(&host, align),
        _ => format!("the driver's host-visible memory, mapped: {}", why()),
    };
    Ok(Block {
        host,
        kind: Kind::Allocated,
        range: start..start + bytes,
        note,
        devices: 1,
        guests: Default::default(),
    })
}

/// Allocates `bytes` of host memory pinned for the program's `device`, as one contiguous
/// range, and returns it in `*ptr` (`cudaHostAlloc`; ggml's `ggml_vk_host_malloc`, at any
/// size): pinstream's page-aligned memory imported with `VK_EXT_external_memory_host` in
/// chunks of at most `maxMemoryAllocationSize` (`PINSTREAM_MAX_CHUNK` lowers it), no device
/// memory spent. Where the device does not import (the extension not offered, or not enabled
/// on `device`), the driver's host-visible memory instead, one allocation, so at most
/// `maxMemoryAllocationSize` bytes; `psVkHostGetInfo` says which and why. `psVkHostGetChunks`
/// gives the buffers to copy with. On failure `*ptr` is NULL.
///
/// The handles are the program's: `vkGetInstanceProcAddr` is its loader's (or the one it got
/// from its loader), `instance` made `device` from `physical`, and the instance's API
/// version is 1.1 or later (checked: an instance created below 1.1 is refused, as is a
/// `vkGetInstanceProcAddr` that gives no core function the calls need, before any is called).
/// `flags` must be `PS_VK_HOST_DEFAULT` (0).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, bytes 0, flags not 0, an instance or
/// device below Vulkan 1.1, a function the calls need missing: the detail names what is
/// needed), `PS_ERROR_STRATEGY_UNAVAILABLE` (no import, and more than one host-visible
/// allocation), `PS_ERROR_MEMORY_ALLOCATION` (more than this process may still take, as
/// sizes near `SIZE_MAX`, or out of memory), `PS_ERROR_VULKAN`,
/// `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (the new memory lies where a `psVkHostRegister`
/// range was freed without `psVkHostUnregister`: the detail names it; unregister it, and free
/// memory only after).
///
/// # Safety
/// The handles are NULL or live handles of the program; `ptr` is NULL or points at a
/// writable `void *`. `device` outlives the block (free it before `vkDestroyDevice`).
#[no_mangle]
pub unsafe extern "C" fn psVkHostAlloc(
    instance: VkInstance,
    physical: VkPhysicalDevice,
    device: VkDevice,
    get_instance_proc_addr: PFN_vkGetInstanceProcAddr,
    bytes: usize,
    flags: c_uint,
    ptr: *mut *mut c_void,
) -> crate::error::psError_t {
    boundary("psVkHostAlloc", || {
        non_null(ptr, "ptr (where to store the pointer)")?;
        // SAFETY: `ptr` is non-null and points at a `void *` the caller lets us write.
        unsafe { ptr.write(std::ptr::null_mut()) };
        non_zero(bytes)?;
        check_flags(flags, "psVkHostAlloc")?;
        check_size(bytes).map_err(|e| Failure::host(e, "psVkHostAlloc"))?;
        // SAFETY: the header's contract.
        let device = unsafe { adopt(instance, physical, device, get_instance_proc_addr) }?;
        let start = registry::insert(allocate(&device, bytes)?)?;
        // SAFETY: as above.
        unsafe { ptr.write(start as *mut c_void) };
        Ok(())
    })
}

/// Imports the caller's `bytes` at `ptr` into the program's `device`, in chunks of at most
/// `maxMemoryAllocationSize`, with `VK_EXT_external_memory_host` (`cudaHostRegister`), which
/// `device` must have been created with. Any alignment: the import covers the whole pages
/// (of `minImportedHostPointerAlignment`) the range touches, and `psVkHostGetChunks` gives
/// each chunk's buffer with the offset of the range's bytes in it. The range is checked
/// first as `psHostRegister` checks it: addresses nothing maps, read-only mappings and shared
/// mappings of disk files are refused with `PS_ERROR_NOT_PINNABLE`. A driver that refuses the
/// memory (NVIDIA refuses file-backed mappings) is an error, never a pin claimed. The handles
/// are checked as `psVkHostAlloc` checks them.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, bytes 0, flags not 0, a range that
/// wraps, an instance or device below Vulkan 1.1, a function the calls need missing),
/// `PS_ERROR_STRATEGY_UNAVAILABLE` (the device does not import: the detail says whether the
/// driver lacks the extension or `device` was created without it),
/// `PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED` (overlaps a `psVkHost*` range),
/// `PS_ERROR_NOT_PINNABLE` (memory registration does not pin, or the driver refused the
/// import), `PS_ERROR_NOT_SUPPORTED` (this operating system cannot tell what the range is),
/// `PS_ERROR_MEMORY_ALLOCATION` (its pages not in memory exceed what this process may still
/// take, or out of memory), `PS_ERROR_VULKAN`.
///
/// # Safety
/// The handles are NULL or live handles of the program; `ptr..ptr+bytes` stays allocated
/// until `psVkHostUnregister` (the range itself is checked: unmapped parts are refused), and
/// `device` outlives the registration. Where the range does not start and end on the driver's
/// import alignment (`minImportedHostPointerAlignment`), the rest of the first and last of
/// those pages is imported too: it is checked at the call, and must stay mapped until
/// `psVkHostUnregister` as well (do not unmap a neighbour sharing those pages).
#[no_mangle]
pub unsafe extern "C" fn psVkHostRegister(
    instance: VkInstance,
    physical: VkPhysicalDevice,
    device: VkDevice,
    get_instance_proc_addr: PFN_vkGetInstanceProcAddr,
    ptr: *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> crate::error::psError_t {
    boundary("psVkHostRegister", || {
        non_null(ptr, "ptr")?;
        non_zero(bytes)?;
        check_flags(flags, "psVkHostRegister")?;
        let Range { start, end } = range_of(ptr, bytes)?;
        // SAFETY: the header's contract.
        let device = unsafe { adopt(instance, physical, device, get_instance_proc_addr) }?;
        let align = device.caps().import_alignment.ok_or_else(|| {
            let why = device.import_refusal().unwrap_or_default();
            Failure::new(PS_ERROR_STRATEGY_UNAVAILABLE, format!("import: {why}: psVkHostRegister needs it; psVkHostAlloc falls back to the driver's host-visible memory"))
        })?;
        // psHostRegister's check, before the reservation: a range registration cannot pin is
        // refused as such, whatever another thread reserves at once (`HostApi::register`
        // checks it again, as it checks every registration).
        check_registrable(start, end).map_err(|e| Failure::host(e, "psVkHostAlloc"))?;
        let claim = registry::reserve::<VulkanHost>(start..end)?;
        let block = import(&device, start..end, align)?;
        claim.complete(block);
        Ok(())
    })
}

/// The caller's `range` registered with `device` (Vulkan imports the whole `align`-byte
/// pages it touches).
fn import(
    device: &VulkanDevice,
    range: Range<usize>,
    align: u64,
) -> Result<Block<VulkanHost>, Failure> {
    let request = RegisterRequest {
        max_chunk: max_chunk()?,
        measure_vram: false,
    };
    // SAFETY: the caller's range stays allocated until psVkHostUnregister drops the block
    // (the header's contract).
    let caller = unsafe { CallerRange::new(range.start as *mut u8, range.len()) };
    let host = <Vulkan as HostApi>::register(device, caller, request)
        .map_err(|e| pin_failure(e, "psVkHostAlloc", PS_ERROR_NOT_PINNABLE))?;
    Ok(Block {
        note: imported_note(&host, align),
        host,
        kind: Kind::Registered,
        range,
        devices: 1,
        guests: Default::default(),
    })
}

/// Frees memory from `psVkHostAlloc`: destroys its buffers, frees their memory and unmaps it.
/// Never waits on the device: the caller owes that no command using the buffers is pending
/// (wait for its fence, or `vkQueueWaitIdle`, first).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_INVALID_HOST_POINTER` (not a pointer
/// `psVkHostAlloc` returned, freed twice, or a `psVkHostRegister` range).
#[no_mangle]
pub extern "C" fn psVkHostFree(ptr: *mut c_void) -> crate::error::psError_t {
    boundary("psVkHostFree", || {
        non_null(ptr, "ptr")?;
        drop(registry::remove::<VulkanHost>(
            ptr as usize,
            Kind::Allocated,
        )?);
        Ok(())
    })
}

/// Releases a `psVkHostRegister` range: destroys its buffers and frees their imports; the
/// memory stays the caller's, untouched. Never waits on the device: the caller owes that no
/// command using the buffers is pending.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (NULL), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (not a
/// registered range's start, unregistered twice, or memory from `psVkHostAlloc`).
#[no_mangle]
pub extern "C" fn psVkHostUnregister(ptr: *mut c_void) -> crate::error::psError_t {
    boundary("psVkHostUnregister", || {
        non_null(ptr, "ptr")?;
        drop(registry::remove::<VulkanHost>(
            ptr as usize,
            Kind::Registered,
        )?);
        Ok(())
    })
}

/// The chunks of the range holding `ptr`, in order, as Vulkan's enumerations give lists:
/// `*count` is set to their number; with `chunks` NULL nothing else is written, else the
/// chunks are written when `capacity` holds them all (else `PS_ERROR_INVALID_VALUE`, with
/// `*count` set: call again with that many). Copy the range's bytes `offset .. offset+size`
/// as the buffer's `buffer_offset .. buffer_offset+size` (`vkCmdCopyBuffer`).
///
/// Errors: `PS_ERROR_INVALID_VALUE` (ptr or count NULL, capacity too small),
/// `PS_ERROR_HOST_MEMORY_NOT_REGISTERED` (no `psVkHost*` range holds `ptr`).
///
/// # Safety
/// `count` is NULL or writable; `chunks` is NULL or holds `capacity` writable entries.
#[no_mangle]
pub unsafe extern "C" fn psVkHostGetChunks(
    ptr: *const c_void,
    chunks: *mut psVkChunk,
    capacity: usize,
    count: *mut usize,
) -> crate::error::psError_t {
    boundary("psVkHostGetChunks", || {
        non_null(ptr, "ptr")?;
        non_null(count, "count")?;
        let parts = registry::with_block(ptr as usize, parts)?;
        // SAFETY: `count` is non-null and writable (the contract).
        unsafe { count.write(parts.len()) };
        if chunks.is_null() {
            return Ok(());
        }
        if capacity < parts.len() {
            return Err(Failure::new(PS_ERROR_INVALID_VALUE, format!("capacity {capacity} is less than the range's {} chunks: pass an array of *count entries", parts.len())));
        }
        // SAFETY: `chunks` holds `capacity >= parts.len()` writable entries (the contract).
        unsafe { std::ptr::copy_nonoverlapping(parts.as_ptr(), chunks, parts.len()) };
        Ok(())
    })
}

/// Describes the `psVkHost*` range holding `ptr` (any address in it): its start and size,
/// how it came, how it is pinned and why, and its number of chunks.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument), `PS_ERROR_HOST_MEMORY_NOT_REGISTERED`.
///
/// # Safety
/// `info` is NULL or points at a writable `psVkHostInfo`.
#[no_mangle]
pub unsafe extern "C" fn psVkHostGetInfo(
    ptr: *const c_void,
    info: *mut psVkHostInfo,
) -> crate::error::psError_t {
    boundary("psVkHostGetInfo", || {
        non_null(ptr, "ptr")?;
        non_null(info, "info")?;
        let filled = registry::with_block(ptr as usize, describe)?;
        // SAFETY: `info` is non-null and writable (the contract).
        unsafe { info.write(filled) };
        Ok(())
    })
}

fn describe(block: &Block<VulkanHost>) -> psVkHostInfo {
    let mut info = psVkHostInfo {
        base: block.range.start as *mut c_void,
        bytes: block.range.len(),
        kind: match block.kind {
            Kind::Allocated => psHostKind::PS_HOST_ALLOCATED,
            Kind::Registered => psHostKind::PS_HOST_REGISTERED,
        },
        pinning: match block.host.pinning() {
            VkPinning::Import => psVkPinning::PS_VK_PINNING_IMPORT,
            VkPinning::HostVisible => psVkPinning::PS_VK_PINNING_HOST_VISIBLE,
        },
        chunk_count: block.host.chunk_count(),
        note: [0; PS_HOST_INFO_TEXT],
    };
    put(&mut info.note, &block.note);
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vulkan_failures_are_classed_by_what_failed() {
        let import = VulkanError::Import {
            call: "vkAllocateMemory",
            result: vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
            bytes: 4096,
            address: 0x1000,
        };
        let f = vk_failure(import, PS_ERROR_NOT_PINNABLE);
        assert_eq!(f.code, PS_ERROR_NOT_PINNABLE);
        assert!(f.detail.contains("anonymous memory"), "{}", f.detail);
        let call = |result| VulkanError::Call {
            call: "vkCreateBuffer",
            result,
        };
        let oom = vk_failure(call(vk::Result::ERROR_OUT_OF_HOST_MEMORY), 0);
        assert_eq!(oom.code, PS_ERROR_MEMORY_ALLOCATION);
        let lost = vk_failure(call(vk::Result::ERROR_DEVICE_LOST), 0);
        assert_eq!(lost.code, PS_ERROR_VULKAN);
        assert!(lost.detail.contains("vkCreateBuffer"), "{}", lost.detail);
        let none = VulkanError::Misuse {
            call: "import",
            what: "the driver does not offer VK_EXT_external_memory_host".into(),
        };
        assert_eq!(vk_failure(none, 0).code, PS_ERROR_STRATEGY_UNAVAILABLE);
    }

    #[test]
    fn pin_failures_are_classed_by_what_failed() {
        let refused = VulkanError::Import {
            call: "vkAllocateMemory",
            result: vk::Result::ERROR_INVALID_EXTERNAL_HANDLE,
            bytes: 4096,
            address: 0x1000,
        };
        let alloc = HostError::Alloc {
            pinning: "import".into(),
            kind: pinstream::backend::pinning::PinKind::Driver,
            bytes: 4096,
            source: refused.clone().into(),
        };
        let f = pin_failure(alloc, "psVkHostAlloc", PS_ERROR_NOT_PINNABLE);
        assert_eq!(f.code, PS_ERROR_NOT_PINNABLE);
        assert_eq!(f.detail, refused.to_string(), "the driver's own words");
        let backend = |e: VulkanError| HostError::Backend(e.into());
        let oom = VulkanError::Call {
            call: "vkCreateBuffer",
            result: vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        };
        let code = |e, import| pin_failure(e, "psVkHostAlloc", import).code;
        assert_eq!(code(backend(oom), 0), PS_ERROR_MEMORY_ALLOCATION);
        let lost = VulkanError::Call {
            call: "vkBindBufferMemory",
            result: vk::Result::ERROR_DEVICE_LOST,
        };
        assert_eq!(code(backend(lost), 0), PS_ERROR_VULKAN);
        let no_import = VulkanError::Misuse {
            call: "import",
            what: "the driver does not offer it".into(),
        };
        assert_eq!(code(backend(no_import), 0), PS_ERROR_STRATEGY_UNAVAILABLE);
        let lacking = HostError::Unsupported {
            pinning: "import".into(),
            device: "lavapipe".into(),
            why: "created without it".into(),
        };
        assert_eq!(code(lacking, 0), PS_ERROR_STRATEGY_UNAVAILABLE);
        let pieces = HostError::NotContiguous {
            pinning: "host-visible".into(),
            bytes: 9000,
            chunk: 8192,
        };
        assert_eq!(code(pieces, 0), PS_ERROR_STRATEGY_UNAVAILABLE);
        let unmapped = HostError::Unmapped {
            start: 0,
            end: 4096,
        };
        assert_eq!(code(unmapped, 0), PS_ERROR_NOT_PINNABLE);
    }
}
