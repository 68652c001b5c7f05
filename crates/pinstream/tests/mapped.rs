//! Mapped pinned memory on the test device (PoCL's CPU device in CI): kernels read and write
//! the host memory in place through the region's buffer.

mod common;

use pinstream::backend::opencl::{Context, DeviceBuffer, Event, Kernel};
use pinstream::gather::{Gather, GatherOptions};
use pinstream::host::{
    HostError, HostRegion, PinOptions, Pinned, Released, Strategy, StrategyChoice,
};

const SRC: &str = "__kernel void bump(__global uint *a, uint first) {
    size_t i = first + get_global_id(0);
    a[i] = a[i] * 2u + 1u;
}";

fn bump(ctx: &Context, buf: &DeviceBuffer, first: u32, count: usize) {
    let program = ctx.build_program(SRC, "").unwrap();
    let mut k: Kernel = program.kernel("bump").unwrap();
    k.set_buffer(0, buf).unwrap();
    k.set_bytes(1, &first.to_ne_bytes()).unwrap();
    let q = ctx.queue().unwrap();
    q.launch(&k, count, None, &[]).unwrap().wait().unwrap();
}

fn mapped_words(ctx: &Context, words: usize) -> HostRegion {
    let mut region = HostRegion::mapped(ctx, words * 4, false).unwrap();
    for (i, w) in region.typed_mut::<u32>().unwrap().iter_mut().enumerate() {
        *w = i as u32;
    }
    region
}

#[test]
fn a_kernel_reads_and_writes_mapped_memory_in_place() {
    let ctx = common::test_ctx();
    let words = 1 << 16;
    let region = mapped_words(&ctx, words);
    assert!(region.is_mapped() && region.is_contiguous());
    let m = region.zero_copy().unwrap();
    assert!(region.reason().contains(m.name()), "{}", region.reason());
    assert_eq!(Pinned::zero_copy(&region), Some(m.name().to_string()));
    let buf = region.device_buffer().unwrap();
    assert_eq!(buf.size(), words * 4);
    // An interior range: the words from 1000 on, 5000 of them.
    bump(&ctx, &buf, 1000, 5000);
    let got = region.typed::<u32>().unwrap();
    for (i, &w) in got.iter().enumerate() {
        let want = if (1000..6000).contains(&i) {
            i as u32 * 2 + 1
        } else {
            i as u32
        };
        assert_eq!(w, want, "word {i}");
    }
}

#[test]
fn the_buffer_keeps_the_memory_alive_after_the_region_is_dropped() {
    let ctx = common::test_ctx();
    let words = 4096;
    let region = mapped_words(&ctx, words);
    let buf = region.device_buffer().unwrap();
    drop(region);
    bump(&ctx, &buf, 0, words);
    let mut back = HostRegion::new(&ctx, words * 4, &PinOptions::default()).unwrap();
    let q = ctx.queue().unwrap();
    back.download(&q, &buf, 0, 0..words * 4, &[]).unwrap();
    let got = back.typed::<u32>().unwrap();
    assert!(got.iter().enumerate().all(|(i, &w)| w == i as u32 * 2 + 1));
}

#[test]
fn mapped_memory_refuses_what_it_cannot_give() {
    let ctx = common::test_ctx();
    let max = ctx.devices().iter().map(|d| d.max_alloc).min().unwrap() as usize;
    let e = HostRegion::mapped(&ctx, max + 1, false).unwrap_err();
    assert!(
        matches!(e, HostError::MappedTooLarge { bytes, max_alloc } if bytes == max + 1 && max_alloc == max),
        "{e}"
    );
    assert!(
        e.to_string().contains("CL_DEVICE_MAX_MEM_ALLOC_SIZE"),
        "{e}"
    );
    assert!(matches!(
        HostRegion::mapped(&ctx, 0, false),
        Err(HostError::ZeroSize)
    ));
    let opts = PinOptions {
        strategy: StrategyChoice::Forced(Strategy::Register),
        ..Default::default()
    };
    let plain = HostRegion::new(&ctx, 4096, &opts).unwrap();
    assert!(!plain.is_mapped() && plain.zero_copy().is_none());
    assert_eq!(Pinned::zero_copy(&plain), None);
    let Err(e) = plain.device_buffer() else {
        panic!("unmapped memory gave a buffer")
    };
    assert!(
        matches!(&e, HostError::NotMapped { pinning } if pinning == "register"),
        "{e}"
    );
    assert!(e.to_string().contains("copied into VRAM"), "{e}");
}

/// Releases `host`, whose `what` waits behind `gate`: it is neither freed at once nor
/// waited for, and is freed once `gate` opens and the kernel has run.
fn freed_once_open(host: HostRegion, gate: &Event, what: &str) {
    let Released::Later(freeing) = host.release_when_idle() else {
        panic!("freed at once, under {what} still queued");
    };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!freeing.is_finished(), "freed before {what} ran");
    gate.set_user_status(0).unwrap();
    freeing.wait();
}

/// Released while a zero-copy kernel on it waits behind a user event, a region is neither
/// waited for nor freed under the kernel: the call returns at once, a thread frees it once the
/// kernel has run, and the kernel read the region's own bytes. An idle region is freed at once.
#[test]
fn a_busy_region_released_is_freed_once_its_kernel_ran_without_waiting_for_it() {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let dst = ctx.device_buffer(4096).unwrap();
    let mut host = HostRegion::mapped(&ctx, 4096, false).unwrap();
    host.as_mut_slice().unwrap().fill(3);
    let gate = ctx.user_event().unwrap();
    let pieces = [(0, 4096, 0)];
    let up = g.upload_gather_mapped(&q, &dst, &host, &pieces, &[&gate]);
    let up = up.unwrap();
    freed_once_open(host, &gate, "a kernel");
    assert!(up.is_complete());
    assert!(common::device_bytes(&ctx, &q, &dst).iter().all(|&b| b == 3));
    let idle = HostRegion::mapped(&ctx, 4096, false).unwrap();
    assert!(matches!(idle.release_when_idle(), Released::Now));
}

/// A scatter into mapped memory shared by its holders (Python's arrays) is in flight on the
/// region too: released while the scatter's kernel waits behind a user event, the region is
/// freed later, once the kernel has written it, never at once under the kernel. The bytes
/// land in the memory (read back through a buffer kept over it).
#[test]
fn a_region_released_while_a_scatter_into_it_waits_is_freed_once_its_kernel_ran() {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let src = common::device_with(&ctx, &q, &[9; 4096]);
    let mut host = HostRegion::mapped(&ctx, 4096, false).unwrap();
    host.as_mut_slice().unwrap().fill(1);
    let kept = host.device_buffer().unwrap();
    let gate = ctx.user_event().unwrap();
    let pieces = [(100, 1000, 0)];
    let down = g.download_scatter_mapped_shared(&q, &src, &host, &pieces, &[&gate]);
    let down = down.unwrap();
    freed_once_open(host, &gate, "a scatter");
    assert!(down.is_complete());
    let got = common::device_bytes(&ctx, &q, &kept);
    assert!(
        got[100..1100].iter().all(|&b| b == 9),
        "the scatter's bytes"
    );
    assert!(got[..100].iter().chain(&got[1100..]).all(|&b| b == 1));
}

/// Busy regions released by the thousand are freed by one thread of pinstream's, not a
/// thread each (each with its own stack): the process's threads hardly grow while their
/// kernels wait, and every region is freed once they have run.
#[cfg(target_os = "linux")]
#[test]
fn many_busy_regions_released_share_one_freeing_thread() {
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let dst = ctx.device_buffer(4096).unwrap();
    let gate = ctx.user_event().unwrap();
    let before = threads();
    let mut freeing = Vec::new();
    for _ in 0..200 {
        let host = HostRegion::mapped(&ctx, 4096, false).unwrap();
        g.upload_gather_mapped(&q, &dst, &host, &[(0, 64, 0)], &[&gate])
            .unwrap();
        match host.release_when_idle() {
            Released::Later(f) => freeing.push(f),
            other => panic!("a busy region was released as {other:?}"),
        }
    }
    let grew = threads().saturating_sub(before);
    gate.set_user_status(0).unwrap();
    freeing.iter().for_each(pinstream::host::Freeing::wait);
    // Other tests of this binary run alongside: a margin for their threads.
    assert!(grew < 20, "{grew} more threads for 200 busy frees");
}
