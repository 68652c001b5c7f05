//! The `psVkStream*` calls: the `psStream*` family for a Vulkan program. The stream runs on a
//! `VkDevice` of its own, opened by pinstream's own Vulkan loader on the program's GPU (the
//! physical device with the program's `deviceUUID`), with the queues the engine streams on;
//! the program's own device and queues are never used, so nothing the program submits waits
//! for the stream, or the stream for it. Its host memory comes from `psVkHostAlloc` /
//! `psVkHostRegister` (imported once more into the stream's device, on the first run over
//! each block), its kernel is WGSL. Every other call is `psStream*`'s: the job's description,
//! `psStreamRun`, `psStreamSynchronize`, `psStreamCancel`, `psStreamGetReport`,
//! `psStreamDestroy`.

use super::handle::{On, StreamKernel};
use super::{options, psStream_t};
use crate::api::non_null;
use crate::error::{
    boundary, psError_t, Failure, PS_ERROR_INVALID_KERNEL, PS_ERROR_INVALID_VALUE,
    PS_ERROR_STRATEGY_UNAVAILABLE, PS_ERROR_VULKAN,
};
use crate::vulkan::{program_handles, PFN_vkGetInstanceProcAddr, VkInstance, VkPhysicalDevice};
use pinstream::backend::api::{Adapter as _, Device as _, Program as _};
use pinstream::backend::fault::FaultyKernel;
use pinstream::backend::vulkan::{VulkanError, VulkanHost, VulkanInstance};
use std::ffi::{c_char, c_uint, CStr};
use std::sync::{Arc, Mutex};

/// The failure of opening the stream's device on the program's GPU.
fn open_failure(e: VulkanError) -> Failure {
    match e {
        VulkanError::Lacking(why) => Failure::new(PS_ERROR_INVALID_VALUE, why),
        e => Failure::new(PS_ERROR_VULKAN, e.to_string()),
    }
}

/// Creates a stream for a Vulkan program (`cudaStreamCreate`): `psStreamCreate`'s ring of
/// device buffers of `block_bytes` inside `vram_budget` bytes, on a `VkDevice` of the
/// stream's own, opened by pinstream's own Vulkan loader on the program's `physical` device
/// (the device with its `deviceUUID`), with queues of its own. The program's `VkDevice` and
/// queues are never used: the stream submits nothing to them and waits for none of them.
///
/// Then describe the job with the `psStream*` calls, the kernel with `psVkStreamSetKernel`
/// (WGSL), the data in memory from `psVkHostAlloc` or `psVkHostRegister` (each block is
/// imported into the stream's device on the first run over it, and released when the block
/// is freed or the stream destroyed), and run it with `psStreamRun` or `psVkStreamRunAsync`.
///
/// The kernel convention (the CLI's `run --api vulkan`): its buffers are `var<storage>`
/// arrays at `@group(0) @binding(0..n)`, in `psStreamCreate`'s order (one per input, the
/// in-place range first and `read_write`, then the output, then the residents); its values
/// are the members of one `var<immediate>` struct (push constants), in order: the block's
/// input element count, then optionally the block index, then optionally the block's element
/// offset (`u32`, or `vec2<u32>` for a 64-bit count, low word first), then the scalars set by
/// name with `psStreamSetArg` (an integer member set by name ends the counts: the members
/// before it are the counts). Its `@workgroup_size(N)` is the group size it runs with; one
/// invocation per input element (guard with `if (i < n)`), launched once with a count of 0
/// before the stream starts; more groups than `maxComputeWorkGroupCount[0]` come as a second
/// grid dimension (the group index is `wg.y * num_workgroups.x + wg.x`).
///
/// ```wgsl
/// struct Args { n: u32, block: u32, offset: vec2<u32>, s: f32 }
/// @group(0) @binding(0) var<storage, read_write> x: array<f32>;
/// var<immediate> a: Args;
/// @compute @workgroup_size(64)
/// fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) g: vec3<u32>,
///          @builtin(local_invocation_index) l: u32) {
///     let i = (wg.y * g.x + wg.x) * 64u + l;
///     if (i < a.n) { x[i] = x[i] * a.s; }
/// }
/// ```
///
/// ```c
/// // in place: x = x * s, 10 GiB through a 4 GiB budget in 256 MiB blocks
/// psStream_t s;
/// psVkStreamCreate(&s, instance, physical, vkGetInstanceProcAddr, 4ull << 30, 256 << 20);
/// psVkStreamSetKernel(s, wgsl_source, "scale");
/// psStreamSetInPlace(s, host, 10ull << 30);       // from psVkHostAlloc or psVkHostRegister
/// psStreamSetArg(s, "s", "2.0");
/// if (psStreamRun(s, 1, PS_RESIDENCY_AUTO, NULL) != PS_SUCCESS) puts(psGetLastErrorDetail());
/// psStreamDestroy(s);
/// ```
///
/// The handles are the program's, as `psVkHostAlloc` takes them (an instance of Vulkan 1.1 or
/// later). The stream's device is the one pinstream's own loader lists with the same
/// `deviceUUID`: `VK_ICD_FILENAMES` or `VK_DRIVER_FILES` set for the process apply to both.
///
/// The stream's device needs Vulkan 1.2 (timeline semaphores) and
/// `VK_EXT_external_memory_host` from the GPU's driver (NVIDIA's, AMD's, Intel's and lavapipe
/// offer both); `psVkHostAlloc` memory must be imported memory (the program's `VkDevice`
/// created with that extension), not the host-visible fallback.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (a NULL argument, vram_budget or block_bytes 0,
/// block_bytes above vram_budget, an instance below Vulkan 1.1, no device of pinstream's
/// loader with the program's device's UUID: the detail lists those it found),
/// `PS_ERROR_STRATEGY_UNAVAILABLE` (the driver cannot import host memory), `PS_ERROR_VULKAN`
/// (the loader or the device could not be opened, a device below Vulkan 1.2: the detail says
/// which), `PS_ERROR_INTERNAL`.
///
/// # Safety
/// `stream` is NULL or points at a writable `psStream_t`; the handles are NULL or live
/// handles of the program, `physical` of `instance`.
#[no_mangle]
pub unsafe extern "C" fn psVkStreamCreate(
    stream: *mut psStream_t,
    instance: VkInstance,
    physical: VkPhysicalDevice,
    get_instance_proc_addr: PFN_vkGetInstanceProcAddr,
    vram_budget: usize,
    block_bytes: usize,
) -> psError_t {
    boundary("psVkStreamCreate", || {
        let on = || {
            let gipa = program_handles(instance, physical, get_instance_proc_addr)?;
            let loaded =
                VulkanInstance::load().map_err(|u| Failure::new(PS_ERROR_VULKAN, u.to_string()))?;
            // SAFETY: live handles of the program, `physical` of `instance` (the contract).
            let adapter = unsafe { loaded.adapter_of_program(gipa, instance, physical) }
                .map_err(open_failure)?;
            let device = adapter.open().map_err(open_failure)?;
            if let Some(why) = device.import_refusal() {
                // Each block is imported into the stream's device; without the extension every
                // run would fail, so the stream is refused here.
                return Err(Failure::new(
                    PS_ERROR_STRATEGY_UNAVAILABLE,
                    format!("the stream's own device cannot import host memory ({why}): a Vulkan stream needs VK_EXT_external_memory_host on the GPU's driver; stream through OpenCL (psStreamCreate) there"),
                ));
            }
            Ok(On::Vulkan(device))
        };
        // SAFETY: `stream` is NULL or writable (the contract).
        unsafe { super::create(stream, vram_budget, block_bytes, on) }
    })
}

/// Sets the kernel a stream of `psVkStreamCreate` runs: entry point `entry` of the WGSL
/// `source` (`@compute @workgroup_size(N) fn entry(...)`), compiled to SPIR-V on the stream's
/// device, following the convention `psVkStreamCreate` describes. Whether its parameters fit
/// the job is checked when a run starts. The strings are copied: the caller may free them.
///
/// Errors: `PS_ERROR_INVALID_VALUE` (not a live stream, a stream of `psStreamCreate`, a NULL
/// string or one not UTF-8), `PS_ERROR_INVALID_KERNEL` (the source does not compile: the
/// detail gives the compiler's message with its line; no entry point `entry`: the detail
/// lists those there are).
///
/// # Safety
/// `source` and `entry` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn psVkStreamSetKernel(
    stream: psStream_t,
    source: *const c_char,
    entry: *const c_char,
) -> psError_t {
    boundary("psVkStreamSetKernel", || {
        let s = super::stream(stream)?;
        let On::Vulkan(device) = &s.on else {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                "psVkStreamSetKernel takes WGSL, for a stream of psVkStreamCreate: give a stream of psStreamCreate its cl_kernel with psStreamSetKernel",
            ));
        };
        non_null(source, "source")?;
        non_null(entry, "entry")?;
        let text = |p: *const c_char, what: &str| {
            // SAFETY: non-null NUL-terminated strings (the caller's promise).
            unsafe { CStr::from_ptr(p) }
                .to_str()
                .map(str::to_owned)
                .map_err(|_| {
                    Failure::new(PS_ERROR_INVALID_VALUE, format!("the {what} is not UTF-8"))
                })
        };
        let (source, entry) = (text(source, "source")?, text(entry, "entry")?);
        let program = device
            .build(&source, "")
            .map_err(|e| Failure::new(PS_ERROR_INVALID_KERNEL, format!("the WGSL source: {e}")))?;
        let kernel = program.kernel(&entry).map_err(|e| {
            let names = program.kernel_names().join(", ");
            Failure::new(
                PS_ERROR_INVALID_KERNEL,
                format!("{e}: pass the name of one of the source's entry points ({names})"),
            )
        })?;
        let kernel = StreamKernel::Vulkan(Arc::new(Mutex::new(FaultyKernel::new(kernel))));
        s.job().kernel = Some(kernel);
        Ok(())
    })
}

/// Issues a run of a `psVkStreamCreate` stream's job and returns at once (`cudaLaunchKernel`
/// on a stream): `psStreamSynchronize` waits for it and returns its failure, if any
/// (`psGetLastErrorDetail` says why). Runs issued on one stream run one after another, in
/// issue order. `passes` and `residency` are `psStreamRun`'s; the caller owes what
/// `psStreamRunAsync` lists, until `psStreamSynchronize` returns. Before exiting the program
/// or unloading the library, call `psStreamSynchronize` or `psStreamDestroy`.
///
/// Errors (of the issue; the run's own come from `psStreamSynchronize`): those of
/// `psStreamRun` found before the run starts (not a live stream, a stream of
/// `psStreamCreate`, passes 0, no kernel, a range `psVkHostAlloc` or `psVkHostRegister` did
/// not pin, a range the run writes that overlaps another), `PS_ERROR_INTERNAL`.
#[no_mangle]
pub extern "C" fn psVkStreamRunAsync(
    stream: psStream_t,
    passes: c_uint,
    residency: u64,
) -> psError_t {
    boundary("psVkStreamRunAsync", || {
        let s = super::stream(stream)?;
        if let On::OpenCl(_) = s.on {
            return Err(Failure::new(
                PS_ERROR_INVALID_VALUE,
                "psVkStreamRunAsync is for a stream of psVkStreamCreate: issue a psStreamCreate stream's runs with psStreamRunAsync, which gives a cl_event",
            ));
        }
        s.run_quiet(options(&s, passes, residency)?)
    })
}

/// Test hook, not part of the C API: how many streams hold an import of the `psVkHost*` block
/// that contains `ptr` (0 where none, or where no such block holds it).
#[doc(hidden)]
pub fn vk_stream_imports(ptr: *const std::ffi::c_void) -> usize {
    use crate::registry::{with_block, Block};
    let list = with_block(ptr as usize, |b: &Block<VulkanHost>| b.guests.clone());
    // Read outside the registry's lock: an import in progress holds the list's.
    list.map_or(0, |l| l.lock().map_or(0, |g| g.len()))
}
