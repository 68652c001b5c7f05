//! Zero-copy gathers and scatters (issue 23, item 3): pieces of mapped memory read and
//! written by one kernel in place, checked against the CPU; the call never waits for the
//! caller's queue; the refusals.

mod common;

use common::{device_bytes, device_with};
use pinstream::backend::opencl::{Context, DeviceBuffer, Queue};
use pinstream::gather::{Gather, GatherError, GatherOptions};
use pinstream::host::{HostError, HostRegion, PinOptions};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

/// `count` pieces `(host offset, length, device offset)`: random lengths (some past a 64 KiB
/// segment), disjoint and shuffled on both sides; with the host and device sizes.
fn pieces(rng: &mut SmallRng, count: usize) -> (Vec<(usize, usize, usize)>, usize, usize) {
    let lens: Vec<usize> = (0..count)
        .map(|i| match i % 7 {
            0 => 4096,
            1 => rng.gen_range(65_000..140_000),
            _ => rng.gen_range(1..600),
        })
        .collect();
    let lay = |rng: &mut SmallRng| {
        let mut order: Vec<usize> = (0..count).collect();
        order.shuffle(rng);
        let mut at = vec![0; count];
        let mut end = rng.gen_range(0..64);
        for i in order {
            at[i] = end;
            end += lens[i] + rng.gen_range(0..40);
        }
        (at, end + 13)
    };
    let (host, host_len) = lay(rng);
    let (dev, dev_len) = lay(rng);
    let p = (0..count).map(|i| (host[i], lens[i], dev[i])).collect();
    (p, host_len, dev_len)
}

fn random(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

#[test]
fn mapped_pieces_gather_and_scatter_in_place_as_the_cpu_does() {
    round_trips(&GatherOptions::default(), 300, 0..4);
}

/// The checks and table rows split over threads (forced: `host_threads`, chunks of at
/// least 1,024 pieces) land every piece as on one thread.
#[test]
fn checks_split_over_threads_land_every_piece() {
    for threads in [1, 2, 4] {
        let opts = GatherOptions {
            host_threads: Some(threads),
            ..Default::default()
        };
        round_trips(&opts, 2500, 7..8);
    }
}

/// Gathers and scatters `count` random pieces each way with a gather made with `opts`, for
/// each seed, checked against the CPU.
fn round_trips(opts: &GatherOptions, count: usize, seeds: std::ops::Range<u64>) {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, opts).unwrap();
    for seed in seeds {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (p, host_len, dev_len) = pieces(&mut rng, count);
        let mut host = HostRegion::mapped(&ctx, host_len, false).unwrap();
        let data = random(&mut rng, host_len);
        host.as_mut_slice().unwrap().copy_from_slice(&data);
        let before = random(&mut rng, dev_len);
        let dst = device_with(&ctx, &q, &before);
        g.upload_gather_mapped(&q, &dst, &host, &p, &[])
            .unwrap()
            .wait()
            .unwrap();
        let mut want = before.clone();
        for &(h, n, d) in &p {
            want[d..d + n].copy_from_slice(&data[h..h + n]);
        }
        assert!(device_bytes(&ctx, &q, &dst) == want, "upload, seed {seed}");
        assert_eq!(g.last_call().batches, 1, "one launch");
        // Back the other way, into a region holding other bytes.
        let other = random(&mut rng, host_len);
        host.as_mut_slice().unwrap().copy_from_slice(&other);
        let done = g
            .download_scatter_mapped(&q, &dst, &mut host, &p, &[])
            .unwrap();
        let mut back = other.clone();
        for &(h, n, d) in &p {
            back[h..h + n].copy_from_slice(&want[d..d + n]);
        }
        // The accessor waits for the kernel's event.
        assert!(host.as_slice().unwrap() == back, "download, seed {seed}");
        assert!(done.is_complete());
    }
}

/// The one-call tests' setup: a context, its queue, a gather, an 8 KiB device buffer.
fn one_call() -> (Context, Queue, Gather, DeviceBuffer) {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let dst = ctx.device_buffer(8192).unwrap();
    (ctx, q, g, dst)
}

/// Frees `host` on another thread (calling `wait` first where `wait_first`); the receiver
/// hears when it is freed.
fn free_elsewhere(
    host: HostRegion,
    wait_first: bool,
) -> (std::sync::mpsc::Receiver<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let freeing = std::thread::spawn(move || {
        if wait_first {
            host.wait().unwrap();
        }
        drop(host);
        tx.send(()).unwrap();
    });
    (rx, freeing)
}

#[test]
fn a_zero_copy_call_never_waits_for_the_callers_queue() {
    let (ctx, q, mut g, dst) = one_call();
    let mut host = HostRegion::mapped(&ctx, 8192, false).unwrap();
    host.as_mut_slice().unwrap().fill(9);
    let gate = ctx.user_event().unwrap();
    let up = g.upload_gather_mapped(&q, &dst, &host, &[(0, 4096, 4096)], &[&gate]);
    let up = up.unwrap();
    assert!(!up.is_complete(), "ran before the gate opened");
    let down = g.download_scatter_mapped(&q, &dst, &mut host, &[(0, 100, 4096)], &[]);
    assert!(!down.unwrap().is_complete());
    gate.set_user_status(0).unwrap();
    up.wait().unwrap();
    assert_eq!(device_bytes(&ctx, &q, &dst)[4096..8192], [9u8; 4096]);
}

/// A region that a zero-copy call used waits, before it hands out a slice or frees its
/// memory, for that call's kernel and not for the caller's queue: work the caller enqueued
/// after it, held by a user event that the caller sets only later, does not hold the region
/// up. (The queue was finished before, and this hung until the event was set.)
#[test]
fn a_region_waits_for_its_own_kernel_not_for_the_callers_later_work() {
    let (ctx, q, mut g, dst) = one_call();
    let host = HostRegion::mapped(&ctx, 8192, false).unwrap();
    let other = HostRegion::mapped(&ctx, 8192, false).unwrap();
    let mine = g.upload_gather_mapped(&q, &dst, &host, &[(0, 4096, 0)], &[]);
    mine.unwrap().wait().unwrap();
    let gate = ctx.user_event().unwrap();
    let later = g.upload_gather_mapped(&q, &dst, &other, &[(0, 4096, 4096)], &[&gate]);
    let later = later.unwrap();
    let (rx, freeing) = free_elsewhere(host, true);
    let ended = rx.recv_timeout(std::time::Duration::from_secs(10));
    gate.set_user_status(0).unwrap();
    later.wait().unwrap();
    freeing.join().unwrap();
    assert!(
        ended.is_ok(),
        "the region waited for the caller's later work on its queue"
    );
}

/// And it does wait for that kernel: freeing a region whose zero-copy kernel has not run yet
/// (held by a user event) waits until it has, without `wait` being called first.
#[test]
fn freeing_a_region_waits_for_its_zero_copy_kernel() {
    let (ctx, q, mut g, dst) = one_call();
    let mut host = HostRegion::mapped(&ctx, 8192, false).unwrap();
    host.as_mut_slice().unwrap().fill(5);
    let gate = ctx.user_event().unwrap();
    let up = g.upload_gather_mapped(&q, &dst, &host, &[(0, 4096, 0)], &[&gate]);
    let up = up.unwrap();
    let (rx, freeing) = free_elsewhere(host, false);
    let early = rx.recv_timeout(std::time::Duration::from_millis(300));
    gate.set_user_status(0).unwrap();
    let ended = rx.recv_timeout(std::time::Duration::from_secs(10));
    freeing.join().unwrap();
    assert!(early.is_err(), "the region was freed before its kernel ran");
    assert!(
        ended.is_ok(),
        "freeing the region did not end once its kernel ran"
    );
    assert!(up.is_complete());
    assert_eq!(device_bytes(&ctx, &q, &dst)[..4096], [5u8; 4096]);
}

#[test]
fn zero_copy_calls_refuse_what_they_cannot_do() {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let dst = ctx.device_buffer(4096).unwrap();
    let plain = HostRegion::new(&ctx, 4096, &PinOptions::default()).unwrap();
    let e = g.upload_gather_mapped(&q, &dst, &plain, &[(0, 16, 0)], &[]);
    assert!(matches!(
        e,
        Err(GatherError::Host(HostError::NotMapped { .. }))
    ));
    let mut host = HostRegion::mapped(&ctx, 4096, false).unwrap();
    let e = g.upload_gather_mapped(&q, &dst, &host, &[(0, 16, 0), (4090, 16, 100)], &[]);
    let Err(e) = e else {
        panic!("a piece past the region was taken")
    };
    assert!(
        matches!(e, GatherError::OutOfRegion { index: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("mapped region"), "{e}");
    let e = g.upload_gather_mapped(&q, &dst, &host, &[(0, 16, 0), (100, 16, 8)], &[]);
    assert!(matches!(e, Err(GatherError::Overlap { .. })));
    let e = g.download_scatter_mapped(&q, &dst, &mut host, &[(0, 16, 0), (8, 16, 100)], &[]);
    assert!(
        matches!(e, Err(GatherError::Overlap { .. })),
        "host pieces overlap"
    );
    let e = g.download_scatter_mapped(&q, &dst, &mut host, &[], &[]);
    assert!(matches!(e, Err(GatherError::NoPieces)));
}

#[test]
fn a_scatter_into_a_shared_region_lands_in_it_and_checks_its_size() {
    let ctx = common::test_ctx();
    let q = ctx.queue().unwrap();
    let mut g = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    let (p, host_len, dev_len) = pieces(&mut rng, 200);
    let mut host = HostRegion::mapped(&ctx, host_len, false).unwrap();
    let other = random(&mut rng, host_len);
    host.as_mut_slice().unwrap().copy_from_slice(&other);
    let data = random(&mut rng, dev_len);
    let src = device_with(&ctx, &q, &data);
    let shared = &host;
    let done = g.download_scatter_mapped_shared(&q, &src, shared, &p, &[]);
    let done = done.unwrap();
    // Without waiting for the event: the region's accessors wait for the kernel.
    let mut want = other.clone();
    for &(h, n, d) in &p {
        want[h..h + n].copy_from_slice(&data[d..d + n]);
    }
    assert!(host.as_slice().unwrap() == want);
    assert!(done.is_complete());
    let past = [(host.len() - 8, 16, 0)];
    let e = g.download_scatter_mapped_shared(&q, &src, &host, &past, &[]);
    assert!(matches!(e, Err(GatherError::OutOfRegion { .. })));
    let e = g.download_scatter_mapped_shared(&q, &src, &host, &[(0, 16, 0), (8, 16, 99)], &[]);
    assert!(matches!(e, Err(GatherError::Overlap { .. })));
}
