//! The caller's own context and memory: `Context::from_raw`, `HostRegion::register`, one
//! contiguous pointer (`PinOptions::contiguous`), and what a region says about its pin.
//! Runs on the default OpenCL platform (PoCL's CPU device in CI).

mod common;

use cl3::types::{cl_context, cl_device_id};
use pinstream::backend::opencl::{Context, QueueRefusal};
use pinstream::host::{
    HostError, HostRegion, PinOptions, PinState, RegisterOptions, Strategy, StrategyChoice,
    VramCost,
};
use std::ptr;

/// The driver's first discovery, made once before any test of this file asks for devices:
/// PoCL's first `clGetPlatformIDs`/`clGetDeviceIDs` from two threads at once can leave one of
/// them with no device (pinstream's own discovery takes a lock; [`raw_devices`] asks the
/// driver directly, as a C caller does).
fn discovered() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| drop(pinstream::backend::opencl::devices()));
}

/// The devices of the first platform, found as a C caller finds them.
fn raw_devices() -> Vec<cl_device_id> {
    discovered();
    let platforms = cl3::platform::get_platform_ids()
        .expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    cl3::device::get_device_ids(platforms[0], cl3::device::CL_DEVICE_TYPE_ALL).unwrap()
}

/// A context made outside pinstream, as a C program makes it (reference count 1).
fn foreign_context(devices: &[cl_device_id]) -> cl_context {
    cl3::context::create_context(devices, ptr::null(), None, ptr::null_mut()).unwrap()
}

fn refcount(raw: cl_context) -> u32 {
    match cl3::context::get_context_info(raw, cl3::context::CL_CONTEXT_REFERENCE_COUNT) {
        Ok(cl3::info_type::InfoType::Uint(n)) => n,
        other => panic!("CL_CONTEXT_REFERENCE_COUNT: {other:?}"),
    }
}

/// The reference count once the driver has let go of what it holds for finished commands:
/// PoCL releases a completed command's event, and with it a context reference, on its own
/// worker thread, a moment after the host saw the command complete. A reference pinstream
/// kept would never go away, so this still fails on a leak (after two seconds).
fn settled_refcount(raw: cl_context, want: u32) -> u32 {
    let start = std::time::Instant::now();
    loop {
        let n = refcount(raw);
        if n == want || start.elapsed() > std::time::Duration::from_secs(2) {
            return n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn release(raw: cl_context) {
    // SAFETY: the test owns this one reference.
    unsafe { cl3::context::release_context(raw) }.unwrap();
}

#[test]
fn adopted_context_is_retained_and_released() {
    let raw = foreign_context(&raw_devices()[..1]);
    assert_eq!(refcount(raw), 1);
    // SAFETY: `raw` is live until the release at the end.
    let ctx = unsafe { Context::from_raw(raw) }.unwrap();
    assert_eq!(refcount(raw), 2, "from_raw retains");
    assert_eq!(ctx.as_raw(), raw);
    let clone = ctx.clone();
    assert_eq!(refcount(raw), 2, "clones share one reference");
    let region = HostRegion::new(&ctx, 1 << 20, &PinOptions::default()).unwrap();
    drop(ctx);
    drop(clone);
    assert!(refcount(raw) >= 2, "a region keeps the context alive");
    drop(region);
    assert_eq!(
        refcount(raw),
        1,
        "the last drop releases exactly our reference"
    );
    release(raw);
}

#[test]
fn adopted_context_works_and_knows_its_device() {
    let raw = foreign_context(&raw_devices()[..1]);
    // SAFETY: `raw` is live until the release at the end.
    let ctx = unsafe { Context::from_raw(raw) }.unwrap();
    assert_eq!(ctx.devices().len(), 1);
    assert!(!ctx.device().name.is_empty());
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(4096).unwrap();
    q.fill(&buf, 0, 4096, 7).unwrap().wait().unwrap();
    drop((q, buf, ctx));
    assert_eq!(settled_refcount(raw, 1), 1);
    release(raw);
}

#[test]
fn adopting_null_is_an_error() {
    // SAFETY: null is checked before any OpenCL call.
    let e = unsafe { Context::from_raw(ptr::null_mut()) }.err().unwrap();
    assert_eq!(e.name(), "CL_INVALID_CONTEXT");
}

/// Runs `test` in a child process of this test binary with two PoCL CPU devices (PoCL 3 calls
/// its CPU driver `pthread`, PoCL 5 `cpu`); true in the parent, false in the child.
fn in_two_device_child(test: &str) -> bool {
    if std::env::var_os("PINSTREAM_TEST_TWO_DEVICES").is_some() {
        return false;
    }
    let mut outputs = Vec::new();
    for devices in ["pthread pthread", "cpu cpu"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture"])
            .env("PINSTREAM_TEST_TWO_DEVICES", "1")
            .env("POCL_DEVICES", devices)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains("1 passed") {
            return true;
        }
        outputs.push(format!(
            "POCL_DEVICES={devices:?}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    panic!("{}", outputs.join("\n"));
}

#[test]
#[cfg_attr(
    windows,
    ignore = "under Wine a child process's POCL_DEVICES does not reach PoCL (Wine 8 builds the Unix environment of a process it starts from its own): .ci/run runs it with --ignored and the variables set from outside"
)]
fn a_context_with_two_devices_pins_for_both() {
    if in_two_device_child("a_context_with_two_devices_pins_for_both") {
        return;
    }
    let devices = raw_devices();
    assert_eq!(devices.len(), 2, "POCL_DEVICES gives two devices");
    let raw = foreign_context(&devices);
    // SAFETY: `raw` is live until the release at the end.
    let ctx = unsafe { Context::from_raw(raw) }.unwrap();
    assert_eq!(ctx.devices().len(), 2);
    let region = HostRegion::new(&ctx, 3 << 20, &PinOptions::default()).unwrap();
    assert_eq!(region.strategy(), Strategy::Register);
    assert_eq!(region.pin_state(), PinState::NotNeeded);
    drop((region, ctx));
    release(raw);
}

/// A caller's queue on the other of two devices that share a name (PoCL's two CPU devices,
/// as two GPUs of one model do): the refusal tells them apart by their place in the context.
/// It said "the queue is on device `X`, not on `X`".
#[test]
#[cfg_attr(
    windows,
    ignore = "under Wine a child process's POCL_DEVICES does not reach PoCL (Wine 8 builds the Unix environment of a process it starts from its own): .ci/run runs it with --ignored and the variables set from outside"
)]
fn a_queue_on_the_other_of_two_like_named_devices_is_refused_saying_which() {
    if in_two_device_child("a_queue_on_the_other_of_two_like_named_devices_is_refused_saying_which")
    {
        return;
    }
    let devices = raw_devices();
    let raw = foreign_context(&devices);
    // SAFETY: `raw` is live until the release at the end.
    let ctx = unsafe { Context::from_raw(raw) }.unwrap();
    let names: Vec<&str> = ctx.devices().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names[0], names[1], "PoCL names its CPU devices alike");
    // pinstream builds for the first of two CPU devices; the queue is on the second.
    // SAFETY: a live context and one of its devices; no properties.
    #[allow(deprecated)]
    let q = unsafe { cl3::command_queue::create_command_queue(raw, devices[1], 0) }.unwrap();
    // SAFETY: `q` is live until its release below.
    let e = unsafe { pinstream::backend::opencl::Queue::from_raw(q, &ctx) }
        .err()
        .unwrap();
    let m = e.to_string();
    let want = format!(
        "the queue is on the context's device 1 (`{0}`), not on its device 0 (`{0}`)",
        names[0]
    );
    assert!(m.starts_with(&want), "{m}");
    // SAFETY: the test's own reference to `q`.
    unsafe { cl3::command_queue::release_command_queue(q) }.unwrap();
    drop(ctx);
    release(raw);
}

/// `Context::on_device`: the same context with the other device as its own, so a queue on that
/// device is taken (as the C library's psStreamCreate takes a caller's queue); its reference
/// to the context goes with it.
#[test]
#[cfg_attr(
    windows,
    ignore = "under Wine a child process's POCL_DEVICES does not reach PoCL (Wine 8 builds the Unix environment of a process it starts from its own): .ci/run runs it with --ignored and the variables set from outside"
)]
fn on_device_takes_the_device_of_a_queue_on_the_other_of_two_devices() {
    if in_two_device_child("on_device_takes_the_device_of_a_queue_on_the_other_of_two_devices") {
        return;
    }
    let devices = raw_devices();
    let raw = foreign_context(&devices);
    // SAFETY: `raw` is live until the release at the end.
    let ctx = unsafe { Context::from_raw(raw) }.unwrap();
    let on = ctx.on_device(devices[1]).unwrap();
    assert_eq!((on.as_raw(), on.devices().len()), (raw, 2));
    assert!(ctx.on_device(ptr::null_mut()).is_err());
    // SAFETY: a live context and one of its devices; no properties.
    #[allow(deprecated)]
    let q = unsafe { cl3::command_queue::create_command_queue(raw, devices[1], 0) }.unwrap();
    // SAFETY: `q` is live until its release below.
    let refused = unsafe { pinstream::backend::opencl::Queue::from_raw(q, &ctx) };
    assert!(
        matches!(refused, Err(QueueRefusal::OtherDevice { .. })),
        "the context it came from keeps its device"
    );
    // SAFETY: as above.
    let adopted = unsafe { pinstream::backend::opencl::Queue::from_raw(q, &on) }.unwrap();
    let buf = on.device_buffer(4096).unwrap();
    adopted.fill(&buf, 0, 4096, 7).unwrap().wait().unwrap();
    drop((adopted, buf, on, ctx));
    // SAFETY: the test's own reference to `q`.
    unsafe { cl3::command_queue::release_command_queue(q) }.unwrap();
    assert_eq!(settled_refcount(raw, 1), 1);
    release(raw);
}

fn default_ctx() -> Context {
    discovered();
    let all = pinstream::backend::opencl::devices().unwrap();
    Context::new(pinstream::backend::opencl::default_device(&all).unwrap()).unwrap()
}

#[test]
fn registering_unaligned_malloc_memory_round_trips_and_leaves_it_alone() {
    let ctx = default_ctx();
    let len = (3 << 20) + 5;
    let mut backing = vec![0u8; len + 64];
    let start = 16 + 3; // malloc's alignment and then some: no page alignment at all
    common::fill_random(vec![&mut backing[..]], 42);
    let before = backing.clone();
    let ptr = backing[start..].as_mut_ptr();
    let opts = RegisterOptions {
        max_chunk: Some(1 << 20),
        measure_vram: true,
        ..Default::default()
    };
    // SAFETY: `backing` outlives the region, and is not touched while the region lives.
    let mut region = unsafe { HostRegion::register(&ctx, ptr, len, &opts) }.unwrap();
    assert!(!region.owns_memory() && region.is_contiguous());
    assert_eq!(region.as_ptr(), Some(ptr));
    assert!(region.chunk_count() >= 4, "{} chunks", region.chunk_count());
    // PoCL's CPU device (CI) needs no pinning; the NVIDIA driver pins (the GPU machine).
    let gpu = ctx.device().vendor_kind == pinstream::backend::opencl::Vendor::Nvidia;
    let want = if gpu {
        PinState::Pinned
    } else {
        PinState::NotNeeded
    };
    assert_eq!(region.pin_state(), want, "{}", ctx.device().name);
    if !gpu {
        assert!(matches!(region.vram_cost(), VramCost::Unknown { .. }));
    }
    assert_eq!(
        region.as_slice().unwrap(),
        &before[start..start + len],
        "registration wrote"
    );
    let q = ctx.queue().unwrap();
    let dev = ctx.device_buffer(len).unwrap();
    region.upload(&q, 0..len, &dev, 0, &[]).unwrap();
    region.wait().unwrap();
    region.as_mut_slice().unwrap().fill(0);
    region.download(&q, &dev, 0, 0..len, &[]).unwrap();
    assert_eq!(region.as_slice().unwrap(), &before[start..start + len]);
    drop(region);
    // The memory is still the caller's: intact around the range, and freed by Vec's drop.
    assert_eq!(&backing[..start], &before[..start]);
    assert_eq!(&backing[start + len..], &before[start + len..]);
}

/// Maps `path` as asked; the caller unmaps.
#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
fn map_file(path: &std::path::Path, len: usize, prot: i32, flags: i32) -> *mut u8 {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    // SAFETY: a fresh mapping of a file we own; checked below.
    let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, f.as_raw_fd(), 0) };
    assert_ne!(p, libc::MAP_FAILED);
    p.cast()
}

#[cfg(unix)] // used by the mmap tests only
fn register_err(ctx: &Context, ptr: *mut u8, len: usize) -> HostError {
    // SAFETY: the range is mapped for the whole call; any region made is dropped at once.
    unsafe { HostRegion::register(ctx, ptr, len, &RegisterOptions::default()) }.unwrap_err()
}

#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
#[test]
fn file_mappings_the_driver_would_not_pin_are_refused() {
    let ctx = default_ctx();
    let dir = std::env::temp_dir();
    let path = std::path::Path::new(&dir).join(format!("adopt-{}.bin", std::process::id()));
    let len = 1 << 20;
    std::fs::write(&path, vec![9u8; len]).unwrap();
    let ro = map_file(&path, len, libc::PROT_READ, libc::MAP_SHARED);
    let msg = register_err(&ctx, ro, len).to_string();
    assert!(
        msg.contains("read-only mapping")
            && msg.contains("MAP_PRIVATE")
            && msg.contains("pinned memory allocated by pinstream"),
        "{msg}"
    );
    let ro_private = map_file(&path, len, libc::PROT_READ, libc::MAP_PRIVATE);
    assert!(matches!(
        register_err(&ctx, ro_private, len),
        HostError::NotPinnable { .. }
    ));
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let private = map_file(&path, len, rw, libc::MAP_PRIVATE);
    // SAFETY: the mapping lives until the munmap below, after the region is dropped.
    let region = unsafe { HostRegion::register(&ctx, private, len, &RegisterOptions::default()) };
    assert_eq!(region.unwrap().as_slice().unwrap()[len - 1], 9);
    for p in [ro, ro_private, private] {
        // SAFETY: each was mapped above with `len` bytes and is no longer used.
        unsafe { libc::munmap(p.cast(), len) };
    }
    std::fs::remove_file(&path).unwrap();
}

/// Issue 21, class 9: no-access and write-only mappings are called what they are, and a
/// private mapping past the file's end is refused naming the file and the fix (it failed with
/// "Bad address (os error 14)").
#[cfg(unix)] // mmap test fixtures
#[test]
fn protections_and_pages_past_the_end_of_a_file_are_named() {
    let ctx = default_ctx();
    let path = std::env::temp_dir().join(format!("eof-{}.bin", std::process::id()));
    let page = pinstream::backend::os::page_size();
    std::fs::write(&path, vec![7u8; page + 10]).unwrap();
    let len = 4 * page;
    for (prot, name) in [
        (libc::PROT_NONE, "no access"),
        (libc::PROT_WRITE, "write-only"),
    ] {
        let p = map_file(&path, len, prot, libc::MAP_PRIVATE);
        let msg = register_err(&ctx, p, len).to_string();
        assert!(msg.contains(name) && !msg.contains("read-only"), "{msg}");
        // SAFETY: mapped above with `len` bytes, no longer used.
        unsafe { libc::munmap(p.cast(), len) };
    }
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let p = map_file(&path, len, rw, libc::MAP_PRIVATE);
    let e = register_err(&ctx, p, len);
    let msg = e.to_string();
    assert!(matches!(e, HostError::PastEndOfFile { .. }), "{msg}");
    assert!(
        msg.contains("past the end of")
            && msg.contains(&format!("({} bytes long)", page + 10))
            && msg.contains("ftruncate"),
        "{msg}"
    );
    // The part within the file (its last page partly) registers.
    // SAFETY: the mapping lives until the munmap below, after the region is dropped.
    let region = unsafe { HostRegion::register(&ctx, p, 2 * page, &RegisterOptions::default()) };
    assert_eq!(region.unwrap().as_slice().unwrap()[page + 9], 7);
    // SAFETY: mapped above with `len` bytes, no longer used.
    unsafe { libc::munmap(p.cast(), len) };
    std::fs::remove_file(&path).unwrap();
}

#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
#[test]
fn a_shared_mapping_of_a_disk_file_is_refused_when_the_file_is_on_disk() {
    let ctx = default_ctx();
    let dir = std::env::temp_dir();
    let path = std::path::Path::new(&dir).join(format!("shared-{}.bin", std::process::id()));
    let len = 1 << 16;
    std::fs::write(&path, vec![1u8; len]).unwrap();
    let shared = map_file(
        &path,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    );
    let tmpfs = pinstream::backend::os::mappings(shared as usize, shared as usize + len)
        .unwrap()
        .iter()
        .any(|m| matches!(m.backing, pinstream::backend::os::Backing::SharedMemory(_)));
    // SAFETY: the mapping lives until the munmap below.
    let made = unsafe { HostRegion::register(&ctx, shared, len, &RegisterOptions::default()) };
    if tmpfs {
        // A target dir on tmpfs: writable shared memory pins (measured on the H200).
        assert!(made.is_ok(), "{:?}", made.err());
    } else {
        let msg = made.unwrap_err().to_string();
        assert!(msg.contains("shared mapping of a disk file"), "{msg}");
    }
    // SAFETY: mapped above, no longer used.
    unsafe { libc::munmap(shared.cast(), len) };
    std::fs::remove_file(&path).unwrap();
}

#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
#[test]
fn unmapped_null_and_empty_ranges_are_refused() {
    let ctx = default_ctx();
    let page = pinstream::backend::os::page_size();
    // SAFETY: an anonymous mapping of three pages; the middle one is unmapped at once.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            3 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    } as *mut u8;
    // SAFETY: the middle page of our own mapping.
    unsafe { libc::munmap(p.add(page).cast(), page) };
    let msg = register_err(&ctx, p, 3 * page).to_string();
    assert!(msg.contains("not mapped memory"), "{msg}");
    assert!(matches!(
        register_err(&ctx, ptr::null_mut(), 8),
        HostError::NullPointer
    ));
    assert!(matches!(register_err(&ctx, p, 0), HostError::ZeroSize));
    // SAFETY: the two remaining pages of our mapping.
    unsafe {
        libc::munmap(p.cast(), page);
        libc::munmap(p.add(2 * page).cast(), page);
    }
}

#[test]
fn contiguous_regions_are_one_pointer_of_any_size() {
    let ctx = default_ctx();
    let opts = PinOptions {
        contiguous: true,
        max_chunk: Some(1 << 20),
        ..Default::default()
    };
    let size = (5 << 20) + 11;
    let region = HostRegion::new(&ctx, size, &opts).unwrap();
    assert!(region.chunk_count() > 1 && region.is_contiguous());
    assert!(region.as_ptr().is_some() && region.owns_memory());
    let forced = PinOptions {
        strategy: StrategyChoice::Forced(Strategy::AllocHostPtr),
        ..opts
    };
    let e = HostRegion::new(&ctx, size, &forced).unwrap_err();
    assert!(matches!(e, HostError::NotContiguous { .. }), "{e}");
    assert!(e.to_string().contains("use `register`"), "{e}");
}

#[test]
fn baselines_never_claim_a_pin() {
    let ctx = default_ctx();
    for s in [Strategy::Pageable, Strategy::Mlock] {
        let opts = PinOptions {
            strategy: StrategyChoice::Forced(s),
            ..Default::default()
        };
        let Ok(region) = HostRegion::new(&ctx, 1 << 16, &opts) else {
            continue; // mlock may hit RLIMIT_MEMLOCK
        };
        assert!(!region.pin_state().is_pinned(), "{s}");
        assert!(matches!(region.vram_cost(), VramCost::NotMeasured));
    }
}

/// Pages of `p..p + len` that are resident, by `mincore`.
#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
fn resident_pages(p: *mut u8, len: usize) -> usize {
    let page = pinstream::backend::os::page_size();
    let mut v = vec![0u8; len.div_ceil(page)];
    // SAFETY: `v` holds one byte per page of `len`, as mincore writes; a range that is not
    // mapped makes mincore fail with ENOMEM (the assert), it reads no memory of its own.
    assert_eq!(unsafe { libc::mincore(p.cast(), len, v.as_mut_ptr()) }, 0);
    v.iter().filter(|&&b| b & 1 == 1).count()
}

#[cfg(unix)] // mmap/mincore test fixtures; Windows maps through VirtualQuery (backend/os/maps.rs tests)
#[test]
fn fresh_memory_is_made_resident_before_registration_and_left_unchanged() {
    // Fresh anonymous pages, never written: registration faults them in first, writably and
    // without writing (os::populate_write says why). mincore shows the faulting; the content
    // stays zero.
    let ctx = default_ctx();
    let len = 8 << 20;
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    // SAFETY: an anonymous private mapping at an address the kernel picks touches no
    // existing memory; MAP_FAILED is checked below.
    let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) }.cast::<u8>();
    assert_ne!(p.cast(), libc::MAP_FAILED);
    assert_eq!(resident_pages(p, len), 0, "fresh pages start out absent");
    // SAFETY: `register`'s contract holds: `p..p + len` is the mapping made above, unmapped only
    // after `region` is dropped, and no other thread touches it.
    let region = unsafe { HostRegion::register(&ctx, p, len, &RegisterOptions::default()) };
    let region = region.unwrap();
    let page = pinstream::backend::os::page_size();
    assert_eq!(
        resident_pages(p, len),
        len / page,
        "every page resident after registration"
    );
    assert!(region.chunk(0).iter().all(|&b| b == 0), "content unchanged");
    drop(region);
    // SAFETY: `p..p + len` is the mapping made above; the region that used it is dropped and
    // nothing else refers to it.
    unsafe { libc::munmap(p.cast(), len) };
}
