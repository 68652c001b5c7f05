//! A `vkGetInstanceProcAddr` over the loader's, as a layer would be: it hands out the
//! loader's functions, except those this thread hides ([`hide`], [`only`]); and it counts the
//! buffers and memory objects alive ([`live`]) by handing out counting wrappers around the
//! loader's `vkCreateBuffer`, `vkDestroyBuffer`, `vkAllocateMemory` and `vkFreeMemory`.
//! Device functions are hidden and counted too: its `vkGetDeviceProcAddr` is a wrapper. Calls
//! that would wait on or destroy the program's own objects (`vkDeviceWaitIdle`,
//! `vkQueueWaitIdle`, `vkDestroyDevice`, `vkDestroyInstance`) are counted ([`owner_calls`]):
//! pinstream must never make them on a program's device.

use ash::vk;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::OnceLock;

/// What this thread's lookups do not find.
#[derive(Clone, Default)]
enum Hidden {
    #[default]
    Nothing,
    /// This one function.
    One(CString),
    /// Every function but these.
    AllBut(Vec<CString>),
}

thread_local! {
    static HIDDEN: RefCell<Hidden> = const { RefCell::new(Hidden::Nothing) };
    /// Every name this thread looked up, in order, while [`record`] is on.
    static LOOKED_UP: RefCell<Option<Vec<CString>>> = const { RefCell::new(None) };
}

/// The loader's functions the wrappers call, by instance-level lookup (the loader's
/// trampolines, which dispatch on the device handle).
struct Real {
    gipa: vk::PFN_vkGetInstanceProcAddr,
    gdpa: vk::PFN_vkGetDeviceProcAddr,
    create_buffer: vk::PFN_vkCreateBuffer,
    destroy_buffer: vk::PFN_vkDestroyBuffer,
    allocate_memory: vk::PFN_vkAllocateMemory,
    free_memory: vk::PFN_vkFreeMemory,
    device_wait_idle: vk::PFN_vkDeviceWaitIdle,
    queue_wait_idle: vk::PFN_vkQueueWaitIdle,
    destroy_device: vk::PFN_vkDestroyDevice,
    destroy_instance: vk::PFN_vkDestroyInstance,
}

static REAL: OnceLock<Real> = OnceLock::new();
static BUFFERS: AtomicIsize = AtomicIsize::new(0);
static MEMORIES: AtomicIsize = AtomicIsize::new(0);
static OWNER_CALLS: AtomicIsize = AtomicIsize::new(0);

/// Readies the wrapper over `gipa` (the loader's) for `instance`'s lookups; returns the
/// fake `vkGetInstanceProcAddr` to hand to the psVk calls.
pub fn install(
    gipa: vk::PFN_vkGetInstanceProcAddr,
    instance: vk::Instance,
) -> vk::PFN_vkGetInstanceProcAddr {
    REAL.get_or_init(|| {
        let get = |name: &CStr| {
            // SAFETY: a live instance of this loader; a NUL-terminated name.
            let f = unsafe { gipa(instance, name.as_ptr()) };
            f.unwrap_or_else(|| panic!("the loader has no {name:?}"))
        };
        // SAFETY: each pointer is the loader's function of that name, so of that type.
        unsafe {
            Real {
                gipa,
                gdpa: typed(get(c"vkGetDeviceProcAddr")),
                create_buffer: typed(get(c"vkCreateBuffer")),
                destroy_buffer: typed(get(c"vkDestroyBuffer")),
                allocate_memory: typed(get(c"vkAllocateMemory")),
                free_memory: typed(get(c"vkFreeMemory")),
                device_wait_idle: typed(get(c"vkDeviceWaitIdle")),
                queue_wait_idle: typed(get(c"vkQueueWaitIdle")),
                destroy_device: typed(get(c"vkDestroyDevice")),
                destroy_instance: typed(get(c"vkDestroyInstance")),
            }
        }
    });
    fake_gipa
}

fn real() -> &'static Real {
    REAL.get().expect("fake::install first")
}

/// Lookups of `name` on this thread find nothing until [`reset`].
pub fn hide(name: &CStr) {
    HIDDEN.with(|h| *h.borrow_mut() = Hidden::One(name.to_owned()));
}

/// Lookups on this thread find only `names` until [`reset`].
pub fn only(names: &[&CStr]) {
    let keep = names.iter().map(|n| (*n).to_owned()).collect();
    HIDDEN.with(|h| *h.borrow_mut() = Hidden::AllBut(keep));
}

/// Lookups on this thread find every function again.
pub fn reset() {
    HIDDEN.with(|h| *h.borrow_mut() = Hidden::Nothing);
}

/// Buffers and memory objects made through the wrapper and not destroyed or freed yet.
pub fn live() -> (isize, isize) {
    (
        BUFFERS.load(Ordering::SeqCst),
        MEMORIES.load(Ordering::SeqCst),
    )
}

/// Calls made through the fake that wait on or destroy the program's device or instance.
pub fn owner_calls() -> isize {
    OWNER_CALLS.load(Ordering::SeqCst)
}

/// Starts keeping the names this thread looks up ([`looked_up`]).
pub fn record() {
    LOOKED_UP.with(|l| *l.borrow_mut() = Some(Vec::new()));
}

/// The names looked up on this thread since [`record`], each once, in order; stops keeping
/// them.
pub fn looked_up() -> Vec<CString> {
    let all = LOOKED_UP
        .with(|l| l.borrow_mut().take())
        .unwrap_or_default();
    let mut once = Vec::new();
    for n in all {
        if !once.contains(&n) {
            once.push(n);
        }
    }
    once
}

/// Whether lookups of `name` on this thread find nothing (and records the lookup).
fn hidden(name: &CStr) -> bool {
    LOOKED_UP.with(|l| {
        if let Some(list) = l.borrow_mut().as_mut() {
            list.push(name.to_owned());
        }
    });
    HIDDEN.with(|h| match &*h.borrow() {
        Hidden::Nothing => false,
        Hidden::One(n) => n.as_c_str() == name,
        Hidden::AllBut(keep) => !keep.iter().any(|k| k.as_c_str() == name),
    })
}

/// The untyped pointer Vulkan hands out, as `F`, the function type of its name.
///
/// # Safety
/// `f` is a function of type `F`.
unsafe fn typed<F: Copy>(f: unsafe extern "system" fn()) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of_val(&f));
    // SAFETY: the contract; both are function pointers of one size.
    unsafe { std::mem::transmute_copy(&f) }
}

/// `f` (a function pointer) as the untyped pointer Vulkan hands out.
fn untyped<F: Copy>(f: F) -> vk::PFN_vkVoidFunction {
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<unsafe extern "system" fn()>()
    );
    // SAFETY: `F` is a function pointer type of that size (every caller's); the pointer is
    // only cast back to its own type by whoever looked its name up.
    Some(unsafe { std::mem::transmute_copy::<F, unsafe extern "system" fn()>(&f) })
}

/// The wrapper standing in for `name`, if it is one the fake wraps.
fn wrapped(name: &CStr) -> vk::PFN_vkVoidFunction {
    match name.to_bytes() {
        b"vkGetDeviceProcAddr" => untyped(fake_gdpa as vk::PFN_vkGetDeviceProcAddr),
        b"vkCreateBuffer" => untyped(create_buffer as vk::PFN_vkCreateBuffer),
        b"vkDestroyBuffer" => untyped(destroy_buffer as vk::PFN_vkDestroyBuffer),
        b"vkAllocateMemory" => untyped(allocate_memory as vk::PFN_vkAllocateMemory),
        b"vkFreeMemory" => untyped(free_memory as vk::PFN_vkFreeMemory),
        b"vkDeviceWaitIdle" => untyped(device_wait_idle as vk::PFN_vkDeviceWaitIdle),
        b"vkQueueWaitIdle" => untyped(queue_wait_idle as vk::PFN_vkQueueWaitIdle),
        b"vkDestroyDevice" => untyped(destroy_device as vk::PFN_vkDestroyDevice),
        b"vkDestroyInstance" => untyped(destroy_instance as vk::PFN_vkDestroyInstance),
        _ => None,
    }
}

unsafe extern "system" fn fake_gipa(
    instance: vk::Instance,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: Vulkan's contract: a NUL-terminated name.
    let n = unsafe { CStr::from_ptr(name) };
    if hidden(n) {
        return None;
    }
    // SAFETY: the caller's arguments, passed on.
    wrapped(n).or_else(|| unsafe { (real().gipa)(instance, name) })
}

unsafe extern "system" fn fake_gdpa(
    device: vk::Device,
    name: *const c_char,
) -> vk::PFN_vkVoidFunction {
    // SAFETY: Vulkan's contract: a NUL-terminated name.
    let n = unsafe { CStr::from_ptr(name) };
    if hidden(n) {
        return None;
    }
    let counted = n.to_bytes() != b"vkGetDeviceProcAddr";
    // SAFETY: the caller's arguments, passed on.
    (if counted { wrapped(n) } else { None }).or_else(|| unsafe { (real().gdpa)(device, name) })
}

unsafe extern "system" fn create_buffer(
    device: vk::Device,
    info: *const vk::BufferCreateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::Buffer,
) -> vk::Result {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { (real().create_buffer)(device, info, allocator, out) };
    if r == vk::Result::SUCCESS {
        BUFFERS.fetch_add(1, Ordering::SeqCst);
    }
    r
}

unsafe extern "system" fn destroy_buffer(
    device: vk::Device,
    buffer: vk::Buffer,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    if buffer != vk::Buffer::null() {
        BUFFERS.fetch_sub(1, Ordering::SeqCst);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().destroy_buffer)(device, buffer, allocator) }
}

unsafe extern "system" fn allocate_memory(
    device: vk::Device,
    info: *const vk::MemoryAllocateInfo<'_>,
    allocator: *const vk::AllocationCallbacks<'_>,
    out: *mut vk::DeviceMemory,
) -> vk::Result {
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { (real().allocate_memory)(device, info, allocator, out) };
    if r == vk::Result::SUCCESS {
        MEMORIES.fetch_add(1, Ordering::SeqCst);
    }
    r
}

unsafe extern "system" fn free_memory(
    device: vk::Device,
    memory: vk::DeviceMemory,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    if memory != vk::DeviceMemory::null() {
        MEMORIES.fetch_sub(1, Ordering::SeqCst);
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().free_memory)(device, memory, allocator) }
}

unsafe extern "system" fn device_wait_idle(device: vk::Device) -> vk::Result {
    OWNER_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().device_wait_idle)(device) }
}

unsafe extern "system" fn queue_wait_idle(queue: vk::Queue) -> vk::Result {
    OWNER_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().queue_wait_idle)(queue) }
}

unsafe extern "system" fn destroy_device(
    device: vk::Device,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    OWNER_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().destroy_device)(device, allocator) }
}

unsafe extern "system" fn destroy_instance(
    instance: vk::Instance,
    allocator: *const vk::AllocationCallbacks<'_>,
) {
    OWNER_CALLS.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller's arguments, passed on.
    unsafe { (real().destroy_instance)(instance, allocator) }
}
