//! The small-transfer path of `HostRegion` (issue 13): what one upload costs on the host
//! beyond the driver's call, counted rather than timed (PoCL's CPU device in CI; the timing
//! is `pinstream bench --latency`'s, on the GPU).

use pinstream::backend::opencl::{default_device, devices, Context};
use pinstream::host::{HostRegion, PinOptions, Strategy, StrategyChoice};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts this thread's Rust allocations (the driver's own threads and its C allocations
/// are not Rust's, so only pinstream's and this test's are seen).
struct Counting;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

fn context() -> Context {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    Context::new(default_device(&all).expect("an OpenCL device is needed")).unwrap()
}

fn region(ctx: &Context, len: usize) -> HostRegion {
    let opts = PinOptions {
        strategy: StrategyChoice::Forced(Strategy::Register),
        ..Default::default()
    };
    HostRegion::new(ctx, len, &opts).unwrap()
}

/// One allocation per upload (the `Vec` of events it returns), however many are in flight:
/// before issue 13 it was three (two for the chunk pieces), plus a list of every event.
#[test]
fn an_upload_allocates_once_and_keeps_no_event() {
    let ctx = context();
    let r = region(&ctx, 1 << 20);
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(4096).unwrap();
    for _ in 0..10 {
        r.upload(&q, 0..4096, &buf, 0, &[]).unwrap();
    }
    r.wait().unwrap();
    let mut kept = Vec::with_capacity(1000);
    let before = allocs();
    for _ in 0..1000 {
        kept.push(r.upload(&q, 0..4096, &buf, 0, &[]).unwrap());
    }
    let per = (allocs() - before) as f64 / 1000.0;
    assert!(per <= 1.0, "{per} allocations per upload");
    r.wait().unwrap();
    // Every event is the caller's alone: the region holds none (a queue reference only).
    assert!(kept.iter().all(|e| e.len() == 1 && e[0].is_complete()));
}

/// Transfers on two queues are all waited for by `wait` (the region finishes each queue
/// that touched it), and again after a wait has emptied its list.
#[test]
fn wait_covers_every_queue_that_touched_the_region() {
    let ctx = context();
    let len = 1 << 20;
    let mut r = region(&ctx, len);
    r.slices_mut(0..len).unwrap()[0].fill(7);
    let (q1, q2) = (ctx.queue().unwrap(), ctx.queue().unwrap());
    let buf = ctx.device_buffer(len).unwrap();
    for round in 0..3u8 {
        r.slices_mut(0..len / 2).unwrap()[0].fill(round);
        let up = r.upload(&q1, 0..len / 2, &buf, 0, &[]).unwrap();
        let up: Vec<_> = up.iter().collect();
        r.download(&q2, &buf, 0, len / 2..len, &up).unwrap();
        r.wait().unwrap();
        assert!(
            r.slices(len / 2..len).unwrap()[0]
                .iter()
                .all(|&b| b == round),
            "round {round}: the download on the second queue was not waited for"
        );
    }
}

/// `WaitMode::Sleep` waits for commands never flushed (it flushes their queue first) and
/// sees the same data as the driver's wait. The mode is the context's: another context, and
/// the commands enqueued before the change, keep the default, `auto`.
#[test]
fn sleeping_waits_see_every_command_through() {
    use pinstream::backend::opencl::wait::WaitMode;
    let ctx = context();
    let other = context();
    let len = 256 << 10;
    let mut r = region(&ctx, len);
    let q = ctx.queue().unwrap();
    let buf = ctx.device_buffer(len).unwrap();
    let before = q.fill(&buf, 0, len, 0).unwrap();
    ctx.set_wait_mode(WaitMode::Sleep);
    assert_eq!(ctx.wait_mode(), WaitMode::Sleep);
    assert_eq!(other.wait_mode(), WaitMode::Auto);
    assert_eq!(before.wait_mode(), WaitMode::Auto);
    before.wait().unwrap();
    for round in 1..=3u8 {
        r.slices_mut(0..len / 2).unwrap()[0].fill(round);
        let up = r.upload(&q, 0..len / 2, &buf, 0, &[]).unwrap();
        let up: Vec<_> = up.iter().collect();
        let down = r.download(&q, &buf, 0, len / 2..len, &up).unwrap();
        // Waited by the event alone, in sleep mode, with nothing flushed by the caller.
        for e in &down {
            assert_eq!(e.wait_mode(), WaitMode::Sleep);
            e.wait().unwrap();
        }
        assert!(down.iter().all(|e| e.is_complete()));
        assert!(r.slices(len / 2..len).unwrap()[0]
            .iter()
            .all(|&b| b == round));
    }
    let elsewhere = other.user_event().unwrap();
    assert_eq!(elsewhere.wait_mode(), WaitMode::Auto);
    elsewhere.set_user_status(0).unwrap();
    ctx.set_wait_mode(WaitMode::Auto);
    assert_eq!(ctx.wait_mode(), WaitMode::Auto);
    assert_eq!(WaitMode::default(), WaitMode::Auto);
    assert_eq!("sleep".parse::<WaitMode>(), Ok(WaitMode::Sleep));
    assert_eq!("auto".parse::<WaitMode>(), Ok(WaitMode::Auto));
    assert!("spin"
        .parse::<WaitMode>()
        .unwrap_err()
        .contains("auto, driver and sleep"));
}

/// Lanes on queues without profiling (`plain_copies_in_flight`, what `bench latency` times a
/// program's plain queue with) move the bytes as the profiled lanes do, and the fault
/// wrapper passes them through; a context says how it waits (`Device::wait_mode`), and a
/// mode set through the device is the one it says.
#[test]
fn plain_lanes_move_the_bytes_and_the_wait_mode_is_read_back() {
    use pinstream::backend::api::{Device, WaitMode};
    use pinstream::backend::fault::FaultyDevice;
    use pinstream::backend::lanes::{plain_copies_in_flight, HostView};
    use pinstream::backend::opencl::OpenCl;
    let ctx = context();
    let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let buf = Device::allocate(&ctx, src.len()).unwrap();
    let back = plain_copies_in_flight::<OpenCl, _>(&ctx, 1, |lanes| {
        let view = HostView::reading(vec![&src[..]]);
        for e in lanes.upload(0, &buf, 0, &view, 0..src.len(), &[])? {
            lanes.wait_call(&e)?;
        }
        let read = lanes.read_back(0, &buf, 0, src.len(), &[])?;
        lanes.finish()?;
        read.bytes().map(<[u8]>::to_vec)
    });
    assert_eq!(
        back.unwrap().expect("OpenCL makes plain queues").unwrap(),
        src
    );
    let faulty = FaultyDevice::<OpenCl>::with_fault(ctx.clone(), None);
    assert!(faulty.plain_queue().unwrap().is_some());
    assert_eq!(Device::wait_mode(&ctx), Some(WaitMode::Auto));
    Device::set_wait_mode(&faulty, WaitMode::Sleep);
    assert_eq!(faulty.wait_mode(), Some(WaitMode::Sleep));
    Device::set_wait_mode(&ctx, WaitMode::Auto);
}
