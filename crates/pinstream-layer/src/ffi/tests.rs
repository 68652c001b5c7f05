//! The layer entry, driven by a fake driver: a target dispatch table whose functions record
//! what reaches them. No OpenCL library is involved; every line of the layer between
//! `clInitLayer` and the driver is the real one.
//!
//! The fake world: contexts `CTX_NV` (one device with `cl_nv_create_buffer`, platform
//! `P_NV`), `CTX_PLAIN` (one device without it), `CTX_MIXED` (one of each) and `CTX_FAILS`
//! (an NV device on `P_FAILS`, whose clCreateBufferNV fails).

use super::layer::{clGetLayerInfo, clInitLayer, HOOKED, KHRONOS_ENTRIES};
use crate::decide::NV_HOST_PINNED;
use opencl_sys::cl_icd::cl_icd_dispatch;
use opencl_sys::cl_layer::{CL_LAYER_API_VERSION, CL_LAYER_NAME};
use opencl_sys::*;
use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::mem::offset_of;
use std::ptr;
use std::sync::{Mutex, MutexGuard, OnceLock};

const CTX_NV: usize = 0xC1;
const CTX_PLAIN: usize = 0xC2;
const CTX_MIXED: usize = 0xC3;
const CTX_FAILS: usize = 0xC5;
const DEV_NV: usize = 0xD1;
const DEV_PLAIN: usize = 0xD2;
const DEV_FAILS: usize = 0xD5;
const P_NV: usize = 0x91;
const P_FAILS: usize = 0x95;
const MIB: usize = 1 << 20;
const CLASSIC: cl_mem_flags = CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR;

/// What reached the fake driver.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    CreateBuffer {
        ctx: usize,
        flags: cl_mem_flags,
        size: usize,
        host_ptr: bool,
    },
    CreateBufferNv {
        ctx: usize,
        flags: cl_mem_flags,
        nv_flags: u64,
        size: usize,
        host_ptr: bool,
    },
    SetKernelArg {
        kernel: usize,
        index: u32,
    },
}

#[derive(Default)]
struct World {
    calls: Vec<Call>,
    next_handle: usize,
    /// Destructor callbacks: handle -> (callback, user data).
    destructors: HashMap<usize, (unsafe extern "C" fn(cl_mem, *mut c_void), usize)>,
}

fn world() -> MutexGuard<'static, World> {
    static W: OnceLock<Mutex<World>> = OnceLock::new();
    W.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// One test at a time: the fake world and the layer's books are process-wide.
fn serial() -> MutexGuard<'static, ()> {
    static S: Mutex<()> = Mutex::new(());
    S.lock().unwrap_or_else(|e| e.into_inner())
}

fn new_handle(w: &mut World) -> cl_mem {
    w.next_handle += 0x10;
    (0x10_0000 + w.next_handle) as cl_mem
}

unsafe extern "C" fn fake_create_buffer(
    ctx: cl_context,
    flags: cl_mem_flags,
    size: usize,
    host: *mut c_void,
    err: *mut cl_int,
) -> cl_mem {
    let mut w = world();
    w.calls.push(Call::CreateBuffer {
        ctx: ctx as usize,
        flags,
        size,
        host_ptr: !host.is_null(),
    });
    // SAFETY: the layer passes the program's errcode_ret, here a live cl_int of the test.
    unsafe { *err = CL_SUCCESS };
    new_handle(&mut w)
}

unsafe extern "C" fn fake_create_buffer_nv(
    ctx: cl_context,
    flags: cl_mem_flags,
    nv_flags: u64,
    size: usize,
    host: *mut c_void,
    err: *mut cl_int,
) -> cl_mem {
    let mut w = world();
    w.calls.push(Call::CreateBufferNv {
        ctx: ctx as usize,
        flags,
        nv_flags,
        size,
        host_ptr: !host.is_null(),
    });
    if ctx as usize == CTX_FAILS {
        // SAFETY: the layer passes the program's errcode_ret, here a live cl_int of the test.
        unsafe { *err = CL_OUT_OF_RESOURCES };
        return ptr::null_mut();
    }
    // SAFETY: the layer passes the program's errcode_ret, here a live cl_int of the test.
    unsafe { *err = CL_SUCCESS };
    new_handle(&mut w)
}

unsafe extern "C" fn fake_context_info(
    ctx: cl_context,
    param: cl_context_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    assert_eq!(param, CL_CONTEXT_DEVICES);
    let devices: &[usize] = match ctx as usize {
        CTX_NV => &[DEV_NV],
        CTX_PLAIN => &[DEV_PLAIN],
        CTX_MIXED => &[DEV_NV, DEV_PLAIN],
        CTX_FAILS => &[DEV_FAILS],
        _ => return CL_INVALID_CONTEXT,
    };
    // SAFETY: the layer's query pointers, valid for `size` bytes as the layer passes them.
    unsafe { answer(bytes_of(devices), size, value, size_ret) }
}

unsafe extern "C" fn fake_device_info(
    dev: cl_device_id,
    param: cl_device_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let nv = dev as usize != DEV_PLAIN;
    let platform = match dev as usize {
        DEV_FAILS => P_FAILS,
        _ => P_NV,
    };
    let bytes: Vec<u8> = match param {
        CL_DEVICE_NAME => {
            if nv {
                b"fake-nv\0".to_vec()
            } else {
                b"fake-cpu\0".to_vec()
            }
        }
        CL_DEVICE_EXTENSIONS => {
            if nv {
                b"cl_khr_icd cl_nv_create_buffer\0".to_vec()
            } else {
                b"cl_khr_icd\0".to_vec()
            }
        }
        CL_DEVICE_PLATFORM => bytes_of(&[platform]),
        _ => return CL_INVALID_VALUE,
    };
    // SAFETY: the layer's query pointers, valid for `size` bytes as the layer passes them.
    unsafe { answer(bytes, size, value, size_ret) }
}

unsafe extern "C" fn fake_extension_address(
    _p: cl_platform_id,
    name: *const c_char,
) -> *mut c_void {
    // SAFETY: the layer passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) };
    if name.to_bytes() == b"clCreateBufferNV" {
        fake_create_buffer_nv as *mut c_void
    } else {
        ptr::null_mut()
    }
}

unsafe extern "C" fn fake_destructor(
    mem: cl_mem,
    f: Option<unsafe extern "C" fn(cl_mem, *mut c_void)>,
    user: *mut c_void,
) -> cl_int {
    world()
        .destructors
        .insert(mem as usize, (f.expect("a callback"), user as usize));
    CL_SUCCESS
}

unsafe extern "C" fn fake_sub_buffer(
    _parent: cl_mem,
    _f: cl_mem_flags,
    _t: cl_buffer_create_type,
    _info: *const c_void,
    err: *mut cl_int,
) -> cl_mem {
    // SAFETY: the layer passes the program's errcode_ret, here a live cl_int of the test.
    unsafe { *err = CL_SUCCESS };
    new_handle(&mut world())
}

unsafe extern "C" fn fake_set_kernel_arg(
    kernel: cl_kernel,
    index: cl_uint,
    _size: usize,
    _value: *const c_void,
) -> cl_int {
    world().calls.push(Call::SetKernelArg {
        kernel: kernel as usize,
        index,
    });
    CL_SUCCESS
}

fn bytes_of(words: &[usize]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

unsafe fn answer(bytes: Vec<u8>, size: usize, value: *mut c_void, size_ret: *mut usize) -> cl_int {
    if !size_ret.is_null() {
        // SAFETY: a non-null size_t pointer from the layer.
        unsafe { *size_ret = bytes.len() };
    }
    if !value.is_null() {
        assert!(size >= bytes.len());
        // SAFETY: `value` holds `size` >= bytes.len() bytes (asserted).
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), value.cast::<u8>(), bytes.len()) };
    }
    CL_SUCCESS
}

/// A target table: every entry a distinct never-called address, then the fakes above.
fn fake_target(tag: usize) -> &'static cl_icd_dispatch {
    // SAFETY: all-zero is a valid table (every entry None).
    let t: &'static mut cl_icd_dispatch = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    let words = (t as *mut cl_icd_dispatch).cast::<usize>();
    for i in 0..KHRONOS_ENTRIES {
        // SAFETY: i < KHRONOS_ENTRIES, inside the table; these entries are only compared.
        unsafe { words.add(i).write(tag + 0x1000 + 8 * i) };
    }
    t.clCreateBuffer = Some(fake_create_buffer);
    t.clGetContextInfo = Some(fake_context_info);
    t.clGetDeviceInfo = Some(fake_device_info);
    t.clGetExtensionFunctionAddressForPlatform = Some(fake_extension_address);
    t.clSetMemObjectDestructorCallback = Some(fake_destructor);
    t.clSetKernelArg = Some(fake_set_kernel_arg);
    t.clCreateSubBuffer = Some(fake_sub_buffer);
    t
}

fn init(target: &'static cl_icd_dispatch) -> Result<&'static cl_icd_dispatch, cl_int> {
    let (mut n, mut table) = (0, ptr::null());
    // SAFETY: a full table and two writable out pointers.
    let rc = unsafe { clInitLayer(KHRONOS_ENTRIES as cl_uint, target, &mut n, &mut table) };
    if rc != CL_SUCCESS {
        return Err(rc);
    }
    assert_eq!(n as usize, KHRONOS_ENTRIES);
    // SAFETY: the layer's table lives in a static slot.
    Ok(unsafe { &*table })
}

fn shared_target() -> &'static cl_icd_dispatch {
    static T: OnceLock<&'static cl_icd_dispatch> = OnceLock::new();
    T.get_or_init(|| fake_target(0))
}

/// The table of the one loader most tests use.
fn shared() -> &'static cl_icd_dispatch {
    static T: OnceLock<&'static cl_icd_dispatch> = OnceLock::new();
    T.get_or_init(|| init(shared_target()).expect("the first loader gets a slot"))
}

fn create(
    table: &cl_icd_dispatch,
    ctx: usize,
    flags: cl_mem_flags,
    size: usize,
    host: *mut c_void,
) -> (cl_mem, cl_int) {
    let mut err = 1;
    // SAFETY: the fake world's contexts; `host` is null or holds `size` bytes.
    let mem = unsafe {
        table.clCreateBuffer.expect("hooked")(ctx as cl_context, flags, size, host, &mut err)
    };
    (mem, err)
}

fn last_call() -> Call {
    world()
        .calls
        .last()
        .cloned()
        .expect("a call reached the driver")
}

#[test]
fn every_entry_but_the_hooked_ones_is_the_target_s_own() {
    let _s = serial();
    let ours = shared() as *const cl_icd_dispatch as *const usize;
    let target = shared_target() as *const cl_icd_dispatch as *const usize;
    let hooked: Vec<usize> = [
        offset_of!(cl_icd_dispatch, clCreateBuffer),
        offset_of!(cl_icd_dispatch, clCreateBufferWithProperties),
        offset_of!(cl_icd_dispatch, clCreateSubBuffer),
        offset_of!(cl_icd_dispatch, clSetKernelArg),
        offset_of!(cl_icd_dispatch, clEnqueueReadBuffer),
        offset_of!(cl_icd_dispatch, clEnqueueWriteBuffer),
        offset_of!(cl_icd_dispatch, clEnqueueCopyBuffer),
    ]
    .iter()
    .map(|o| o / size_of::<usize>())
    .collect();
    assert_eq!(hooked.len(), HOOKED.len());
    for i in 0..KHRONOS_ENTRIES {
        // SAFETY: both tables hold KHRONOS_ENTRIES words.
        let (a, b) = unsafe { (ours.add(i).read(), target.add(i).read()) };
        if hooked.contains(&i) {
            assert_ne!(a, b, "entry {i} is the layer's");
        } else {
            assert_eq!(a, b, "entry {i} passes straight to the target");
        }
    }
}

#[test]
fn a_classic_buffer_on_an_nv_device_becomes_clcreatebuffernv_with_its_own_flags() {
    let _s = serial();
    for flags in [
        CLASSIC,
        CL_MEM_READ_ONLY | CL_MEM_ALLOC_HOST_PTR | CL_MEM_HOST_WRITE_ONLY,
    ] {
        let (mem, err) = create(shared(), CTX_NV, flags, 2 * MIB, ptr::null_mut());
        assert_eq!(err, CL_SUCCESS);
        assert!(!mem.is_null());
        assert_eq!(
            last_call(),
            Call::CreateBufferNv {
                ctx: CTX_NV,
                flags,
                nv_flags: NV_HOST_PINNED,
                size: 2 * MIB,
                host_ptr: false
            }
        );
    }
}

#[test]
fn everything_else_reaches_the_driver_as_the_program_asked() {
    let _s = serial();
    let cases = [
        (CTX_NV, CLASSIC, MIB - 1),
        (CTX_NV, CL_MEM_READ_WRITE, 64 * MIB),
        (CTX_NV, CLASSIC | CL_MEM_HOST_NO_ACCESS, 64 * MIB),
        (CTX_PLAIN, CLASSIC, 64 * MIB),
        (CTX_MIXED, CLASSIC, 64 * MIB),
        (0xBAD, CLASSIC, 64 * MIB),
    ];
    for (ctx, flags, size) in cases {
        let (_, err) = create(shared(), ctx, flags, size, ptr::null_mut());
        assert_eq!(err, CL_SUCCESS);
        assert_eq!(
            last_call(),
            Call::CreateBuffer {
                ctx,
                flags,
                size,
                host_ptr: false
            },
            "ctx {ctx:#x} flags {flags:#x}"
        );
    }
}

#[test]
fn copy_host_ptr_reaches_the_driver_as_asked_and_nothing_else_is_made() {
    let _s = serial();
    let flags = CLASSIC | CL_MEM_COPY_HOST_PTR;
    let mut data = vec![7u8; 2 * MIB];
    let kept = || {
        super::state::ledger()
            .totals()
            .kept
            .get("with COPY_HOST_PTR")
            .copied()
            .unwrap_or_default()
    };
    let (count, bytes) = kept();
    let before = world().calls.len();
    let (mem, err) = create(
        shared(),
        CTX_NV,
        flags,
        data.len(),
        data.as_mut_ptr().cast(),
    );
    assert_eq!(err, CL_SUCCESS);
    assert!(!mem.is_null());
    assert_eq!(
        world().calls[before..],
        [Call::CreateBuffer {
            ctx: CTX_NV,
            flags,
            size: data.len(),
            host_ptr: true
        }],
        "one call, the program's own: no clCreateBufferNV, no probe buffer"
    );
    assert_eq!(kept(), (count + 1, bytes + data.len() as u64));
}

#[test]
fn a_failing_nv_call_falls_back_to_the_program_s_own_call() {
    let _s = serial();
    let (mem, err) = create(shared(), CTX_FAILS, CLASSIC, 4 * MIB, ptr::null_mut());
    assert_eq!(err, CL_SUCCESS);
    assert!(!mem.is_null());
    let calls = world().calls.clone();
    assert!(matches!(
        calls[calls.len() - 2],
        Call::CreateBufferNv { ctx: CTX_FAILS, .. }
    ));
    assert_eq!(
        calls[calls.len() - 1],
        Call::CreateBuffer {
            ctx: CTX_FAILS,
            flags: CLASSIC,
            size: 4 * MIB,
            host_ptr: false
        }
    );
}

#[test]
fn kernel_bindings_pass_on_and_a_released_buffer_is_forgotten() {
    let _s = serial();
    let (mem, _) = create(shared(), CTX_NV, CLASSIC, 2 * MIB, ptr::null_mut());
    let binds = || super::state::ledger().totals().kernel_binds;
    let before = binds();
    let set = shared().clSetKernelArg.expect("hooked");
    // SAFETY: a handle-sized argument, as a program binds a buffer.
    let rc = unsafe {
        set(
            0xEE as cl_kernel,
            3,
            size_of::<cl_mem>(),
            (&raw const mem).cast(),
        )
    };
    assert_eq!(rc, CL_SUCCESS);
    assert_eq!(
        last_call(),
        Call::SetKernelArg {
            kernel: 0xEE,
            index: 3
        }
    );
    assert_eq!(binds(), before + 1);
    let (callback, user) = world().destructors[&(mem as usize)];
    // SAFETY: what the driver does when the buffer is destroyed.
    unsafe { callback(mem, user as *mut c_void) };
    let value = 42u64;
    // SAFETY: a scalar argument of handle size.
    unsafe {
        set(
            0xEE as cl_kernel,
            3,
            size_of::<cl_mem>(),
            (&raw const mem).cast(),
        )
    };
    // SAFETY: the layer's clSetKernelArg with a handle-sized value that lives on this stack.
    unsafe {
        set(
            0xEE as cl_kernel,
            4,
            size_of::<u64>(),
            (&raw const value).cast(),
        )
    };
    assert_eq!(
        binds(),
        before + 1,
        "a released handle is no longer tracked"
    );
}

#[test]
fn a_sub_buffer_of_a_rewritten_buffer_is_tracked_as_its_storage() {
    let _s = serial();
    let (parent, _) = create(shared(), CTX_NV, CLASSIC, 4 * MIB, ptr::null_mut());
    let (plain, _) = create(shared(), CTX_PLAIN, CLASSIC, 4 * MIB, ptr::null_mut());
    let region = [MIB, MIB]; // cl_buffer_region {origin, size}
    let sub_of = |buffer: cl_mem| {
        let mut err = 1;
        // SAFETY: a region inside the (fake) buffer.
        let sub = unsafe {
            shared().clCreateSubBuffer.expect("hooked")(
                buffer,
                CL_MEM_READ_WRITE,
                CL_BUFFER_CREATE_TYPE_REGION,
                region.as_ptr().cast(),
                &mut err,
            )
        };
        assert_eq!(err, CL_SUCCESS);
        sub
    };
    let (sub, plain_sub) = (sub_of(parent), sub_of(plain));
    let binds = || super::state::ledger().totals().kernel_binds;
    let before = binds();
    let set = shared().clSetKernelArg.expect("hooked");
    // SAFETY: handle-sized arguments, as a program binds buffers.
    unsafe {
        set(
            0xEF as cl_kernel,
            0,
            size_of::<cl_mem>(),
            (&raw const plain_sub).cast(),
        )
    };
    assert_eq!(
        binds(),
        before,
        "a sub-buffer of a buffer left as asked is not tracked"
    );
    // SAFETY: the layer's clSetKernelArg with a handle-sized value that lives on this stack.
    unsafe {
        set(
            0xEF as cl_kernel,
            0,
            size_of::<cl_mem>(),
            (&raw const sub).cast(),
        )
    };
    assert_eq!(binds(), before + 1, "a sub-buffer of a rewritten buffer is");
    assert!(
        world().destructors.contains_key(&(sub as usize)),
        "its release is watched"
    );
}

#[test]
fn each_loader_gets_its_own_slot_up_to_four() {
    let _s = serial();
    let first = shared();
    let again = init(shared_target()).expect("the same target again");
    assert!(
        ptr::eq(again, first),
        "a repeated clInitLayer returns the same table"
    );
    let mut others = Vec::new();
    let refused = loop {
        match init(fake_target(0x100_0000 * (others.len() + 1))) {
            Ok(t) => others.push(t),
            Err(rc) => break rc,
        }
    };
    assert_eq!(refused, CL_OUT_OF_RESOURCES);
    assert_eq!(others.len(), 3, "four loaders in all");
    for (k, t) in others.iter().enumerate() {
        assert!(!ptr::eq(*t, first));
        let finish = t.clFinish.map_or(0, |f| f as usize);
        let offset = offset_of!(cl_icd_dispatch, clFinish);
        assert_eq!(
            finish,
            0x100_0000 * (k + 1) + 0x1000 + offset,
            "that loader's own clFinish"
        );
    }
}

#[test]
fn get_layer_info_answers_version_and_name() {
    let mut version: u32 = 0;
    let mut size = 0usize;
    // SAFETY: a u32 and a size_t out pointer.
    let rc = unsafe {
        clGetLayerInfo(
            CL_LAYER_API_VERSION,
            4,
            (&raw mut version).cast(),
            &mut size,
        )
    };
    assert_eq!((rc, version, size), (CL_SUCCESS, 100, 4));
    let mut name = [0u8; 256];
    // SAFETY: `name` is writable for its 256 bytes, `size` a local.
    let rc = unsafe {
        clGetLayerInfo(
            CL_LAYER_NAME,
            name.len(),
            name.as_mut_ptr().cast(),
            &mut size,
        )
    };
    assert_eq!(rc, CL_SUCCESS);
    assert!(CStr::from_bytes_until_nul(&name)
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("pinstream-layer"));
    assert_eq!(
        // SAFETY: the out pointers are locals of this test.
        unsafe {
            clGetLayerInfo(
                CL_LAYER_API_VERSION,
                2,
                (&raw mut version).cast(),
                ptr::null_mut(),
            )
        },
        CL_INVALID_VALUE
    );
    assert_eq!(
        // SAFETY: `size` is a local; no value pointer.
        unsafe { clGetLayerInfo(0x1234, 0, ptr::null_mut(), &mut size) },
        CL_INVALID_VALUE
    );
    let mut n = 0;
    let mut t = ptr::null();
    assert_eq!(
        // SAFETY: null arguments, which clInitLayer refuses.
        unsafe { clInitLayer(0, ptr::null(), &mut n, &mut t) },
        CL_INVALID_VALUE
    );
}
