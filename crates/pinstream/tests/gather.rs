//! Gathered uploads and scattered downloads (issue 13, goal 2) against a CPU reference:
//! random pieces of odd sizes at unaligned host and device offsets, calls larger than the
//! staging (cut into pipelined batches, pieces split across them), both directions, and the
//! refusals.

mod common;

use pinstream::backend::opencl::{default_device, devices, Context, DeviceBuffer, Queue};
use pinstream::gather::{Destination, Gather, GatherError, GatherOptions};
use pinstream::host::{HostRegion, PinOptions};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, RngCore, SeedableRng};

fn context() -> Context {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    Context::new(default_device(&all).expect("an OpenCL device is needed")).unwrap()
}

/// `count` pieces as (length, device offset): random lengths in `1..=max_len` (every fifth
/// one 4 KiB), laid out disjoint with random gaps, in shuffled order; and the device size.
fn layout(rng: &mut SmallRng, count: usize, max_len: usize) -> (Vec<(usize, usize)>, usize) {
    let mut at = rng.gen_range(0..64);
    let mut out = Vec::new();
    for i in 0..count {
        let len = if i % 5 == 0 {
            4096
        } else {
            rng.gen_range(1..=max_len)
        };
        out.push((len, at));
        at += len + rng.gen_range(0..40);
    }
    out.shuffle(rng);
    (out, at + 17)
}

/// The whole device buffer, read back through a pinned region (not through the gather).
fn read_all(ctx: &Context, queue: &Queue, buf: &DeviceBuffer) -> Vec<u8> {
    let mut host = HostRegion::new(ctx, buf.size(), &PinOptions::default()).unwrap();
    for e in host.download(queue, buf, 0, 0..buf.size(), &[]).unwrap() {
        e.wait().unwrap();
    }
    host.slices(0..buf.size()).unwrap().concat()
}

/// A device buffer holding `bytes`.
fn device_with(ctx: &Context, queue: &Queue, bytes: &[u8]) -> DeviceBuffer {
    let buf = ctx.device_buffer(bytes.len()).unwrap();
    let mut host = HostRegion::new(ctx, bytes.len(), &PinOptions::default()).unwrap();
    host.as_mut_slice().unwrap().copy_from_slice(bytes);
    for e in host.upload(queue, 0..bytes.len(), &buf, 0, &[]).unwrap() {
        e.wait().unwrap();
    }
    buf
}

fn random_bytes(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    v
}

/// Uploads the pieces of `shape` from random host offsets of one random source, and checks
/// the whole device buffer against the reference (untouched bytes keep their old value).
fn upload_case(
    gather: &mut Gather,
    ctx: &Context,
    shape: &[(usize, usize)],
    size: usize,
    seed: u64,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let queue = ctx.queue().unwrap();
    let before = random_bytes(&mut rng, size);
    let dst = device_with(ctx, &queue, &before);
    let source = random_bytes(&mut rng, 1 << 20);
    let pieces: Vec<(&[u8], usize)> = shape
        .iter()
        .map(|&(len, off)| {
            let at = rng.gen_range(0..source.len() - len);
            (&source[at..at + len], off)
        })
        .collect();
    let mut want = before.clone();
    for (h, off) in &pieces {
        want[*off..*off + h.len()].copy_from_slice(h);
    }
    gather
        .upload_gather(&queue, &dst, &pieces, &[])
        .unwrap()
        .wait()
        .unwrap();
    let got = read_all(ctx, &queue, &dst);
    let wrong = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        wrong, 0,
        "{wrong} device bytes differ from the reference (seed {seed})"
    );
}

/// Downloads the pieces of `shape` (device ranges may overlap) and checks each against the
/// device contents.
fn download_case(
    gather: &mut Gather,
    ctx: &Context,
    shape: &[(usize, usize)],
    size: usize,
    seed: u64,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let queue = ctx.queue().unwrap();
    let device = random_bytes(&mut rng, size);
    let src = device_with(ctx, &queue, &device);
    let mut outs: Vec<Vec<u8>> = shape.iter().map(|&(len, _)| vec![0x5a; len]).collect();
    let mut pieces: Vec<(&mut [u8], usize)> = outs
        .iter_mut()
        .zip(shape)
        .map(|(o, &(_, off))| (&mut o[..], off))
        .collect();
    gather
        .download_scatter(&queue, &src, &mut pieces, &[])
        .unwrap();
    for (i, (o, &(len, off))) in outs.iter().zip(shape).enumerate() {
        assert!(
            o[..] == device[off..off + len],
            "piece {i} ({len} bytes at {off}), seed {seed}"
        );
    }
}

/// Runs `case` with a gather of each staging size (one batch, many small ones, a few): a seed
/// and a generator of its own each.
fn over_stagings(first_seed: u64, mut case: impl FnMut(&mut Gather, &Context, &mut SmallRng, u64)) {
    let ctx = context();
    for (k, (capacity, rows)) in [(4 << 20, 4096), (10_000, 7), (70_000, 1000)]
        .into_iter()
        .enumerate()
    {
        let mut gather = Gather::new(
            &ctx,
            &GatherOptions {
                capacity,
                rows,
                profile: false,
                ..Default::default()
            },
        )
        .unwrap();
        let seed = first_seed + k as u64;
        case(&mut gather, &ctx, &mut SmallRng::seed_from_u64(seed), seed);
    }
}

#[test]
fn uploads_match_the_reference_within_one_batch_and_across_many() {
    over_stagings(1, |gather, ctx, rng, seed| {
        let (shape, size) = layout(rng, 300, 9000);
        upload_case(gather, ctx, &shape, size, seed);
        // A few large pieces: cut into 64 KiB segments, and over a small capacity, across batches.
        let (shape, size) = layout(rng, 4, 300_000);
        upload_case(gather, ctx, &shape, size, seed + 100);
    });
}

#[test]
fn downloads_match_the_reference_within_one_batch_and_across_many() {
    over_stagings(4, |gather, ctx, rng, seed| {
        let (mut shape, size) = layout(rng, 300, 9000);
        shape.push((5000, 10)); // overlaps others: reads may
        download_case(gather, ctx, &shape, size, seed);
        let (shape, size) = layout(rng, 4, 300_000);
        download_case(gather, ctx, &shape, size, seed + 100);
    });
}

#[test]
fn back_to_back_uploads_never_overwrite_staging_in_flight() {
    // Many calls without waiting between them, each a different pattern over the same small
    // stages: a stage reused before its DMA or kernel finished would leave wrong bytes.
    let ctx = context();
    let queue = ctx.queue().unwrap();
    let opts = GatherOptions {
        capacity: 8192,
        rows: 4,
        profile: false,
        ..Default::default()
    };
    let mut gather = Gather::new(&ctx, &opts).unwrap();
    let dst = ctx.device_buffer(40 * 3000).unwrap();
    let mut want = vec![0u8; 40 * 3000];
    let mut last = None;
    for call in 0..40u8 {
        let data = vec![call.wrapping_mul(7).wrapping_add(1); 3000];
        let off = usize::from(call) * 3000;
        want[off..off + 3000].copy_from_slice(&data);
        let pieces = [(&data[..1234], off), (&data[1234..], off + 1234)];
        last = Some(gather.upload_gather(&queue, &dst, &pieces, &[]).unwrap());
        // `data` is dropped here, while the call's commands may still run: it was packed.
    }
    last.unwrap().wait().unwrap();
    assert!(read_all(&ctx, &queue, &dst) == want);
}

#[test]
fn bad_pieces_are_refused_with_the_fix() {
    let ctx = context();
    let queue = ctx.queue().unwrap();
    let mut gather = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let dst = ctx.device_buffer(1000).unwrap();
    let b = [7u8; 100];
    let up =
        |g: &mut Gather, p: &[(&[u8], usize)]| g.upload_gather(&queue, &dst, p, &[]).err().unwrap();
    let e = up(&mut gather, &[(&b[..10], 0), (&b[..0], 50)]);
    assert!(matches!(e, GatherError::EmptyPiece { index: 1 }), "{e}");
    let e = up(&mut gather, &[(&b[..], 950)]);
    assert!(
        e.to_string()
            .contains("ends past the 1000-byte device buffer"),
        "{e}"
    );
    let e = up(&mut gather, &[(&b[..], 0), (&b[..], 300), (&b[..50], 99)]);
    assert!(
        matches!(
            e,
            GatherError::Overlap {
                first: 0,
                second: 2
            }
        ),
        "{e}"
    );
    assert!(matches!(up(&mut gather, &[]), GatherError::NoPieces));
    // A caller that vouches for disjoint ranges skips the overlap check, not the bounds.
    gather.set_overlap_check(pinstream::gather::OverlapCheck::Vouched);
    let overlapping = [(&b[..], 0), (&b[..], 300), (&b[..50], 99)];
    gather
        .upload_gather(&queue, &dst, &overlapping, &[])
        .unwrap()
        .wait()
        .unwrap();
    let e = up(&mut gather, &[(&b[..], 950)]);
    assert!(
        matches!(e, GatherError::OutOfBuffer { index: 0, .. }),
        "{e}"
    );
    gather.set_overlap_check(pinstream::gather::OverlapCheck::On);
    let mut out = [0u8; 10];
    let e = gather
        .download_scatter(&queue, &dst, &mut [(&mut out[..], 995)], &[])
        .unwrap_err();
    assert!(
        matches!(e, GatherError::OutOfBuffer { index: 0, .. }),
        "{e}"
    );
    let e = Gather::new(
        &ctx,
        &GatherOptions {
            capacity: 0,
            rows: 1,
            profile: false,
            ..Default::default()
        },
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("give a larger capacity"), "{e}");
    // Refused calls left the gather usable.
    gather
        .upload_gather(&queue, &dst, &[(&b[..], 0)], &[])
        .unwrap()
        .wait()
        .unwrap();
    assert!(read_all(&ctx, &queue, &dst)[..100] == b);
}

/// A staging capacity or row count whose stage would not fit the address space is refused as
/// too large for the host memory (it overflowed the stage's size: a panic, or in a release
/// build a wrapped size), whatever the caller (the CLI's `bench --gather --staging`).
#[test]
fn a_staging_past_the_address_space_is_refused_not_overflowed() {
    let ctx = context();
    for (capacity, rows) in [
        (usize::MAX, 64),
        (usize::MAX - 15, 1),
        (1 << 20, usize::MAX),
    ] {
        let opts = GatherOptions {
            capacity,
            rows,
            ..Default::default()
        };
        let e = Gather::new(&ctx, &opts).err().expect("refused");
        assert!(
            matches!(e, GatherError::Host(_)) && e.to_string().contains("exceeds"),
            "{capacity}, {rows}: {e}"
        );
    }
}

#[test]
fn uploads_and_downloads_interleave_on_the_same_stages() {
    // A download right after an upload (no wait between them) reuses a stage whose scatter
    // kernel may still run: the download's table must not land under it.
    let ctx = context();
    let queue = ctx.queue().unwrap();
    let opts = GatherOptions {
        capacity: 4096,
        rows: 3,
        profile: false,
        ..Default::default()
    };
    let mut gather = Gather::new(&ctx, &opts).unwrap();
    let dst = ctx.device_buffer(64 * 1000).unwrap();
    let mut rng = SmallRng::seed_from_u64(9);
    for round in 0..10 {
        let data = random_bytes(&mut rng, 64 * 1000);
        let pieces: Vec<(&[u8], usize)> = (0..64)
            .map(|i| (&data[i * 1000..(i + 1) * 1000], i * 1000))
            .collect();
        gather.upload_gather(&queue, &dst, &pieces, &[]).unwrap();
        let mut back = vec![0u8; 64 * 1000];
        let mut outs: Vec<(&mut [u8], usize)> = back
            .chunks_mut(1000)
            .enumerate()
            .map(|(i, c)| (c, i * 1000))
            .collect();
        outs.reverse();
        gather
            .download_scatter(&queue, &dst, &mut outs, &[])
            .unwrap();
        assert!(back == data, "round {round}");
    }
}

#[test]
fn a_profiled_gather_gives_the_device_times_of_its_last_call() {
    let ctx = context();
    let queue = ctx.queue().unwrap();
    let dst = ctx.device_buffer(64 * 1024).unwrap();
    let data = vec![5u8; 3000];
    let pieces: Vec<(&[u8], usize)> = (0..8).map(|i| (&data[..], i * 4000 + 3)).collect();
    for profile in [false, true] {
        let opts = GatherOptions {
            capacity: 8192,
            rows: 64,
            profile,
            ..Default::default()
        };
        let mut gather = Gather::new(&ctx, &opts).unwrap();
        gather.upload_gather(&queue, &dst, &pieces, &[]).unwrap();
        let stats = gather.last_call();
        // 8 × 3000 bytes over 8 KiB stages: 3 or more batches.
        assert!(stats.batches >= 3, "{stats:?}");
        assert!(stats.call_s >= stats.copy_s + stats.plan_s, "{stats:?}");
        let times = gather.last_call_device().unwrap();
        if !profile {
            assert!(times.is_none());
            continue;
        }
        let t = times.unwrap();
        assert_eq!(t.dma.0, stats.batches, "{t:?}");
        assert_eq!(t.kernels.unwrap().0, stats.batches, "{t:?}");
        assert!(t.span_s > 0.0 && t.dma.1 > 0.0, "{t:?}");
        let mut out = vec![0u8; 3000];
        gather
            .download_scatter(&queue, &dst, &mut [(&mut out[..], 4003)], &[])
            .unwrap();
        assert!(out.iter().all(|&b| b == 5));
        let t = gather.last_call_device().unwrap().unwrap();
        // A download: the table up and the data down per batch, one kernel per batch.
        assert_eq!((t.dma.0, t.kernels.unwrap().0), (2, 1), "{t:?}");
    }
}

/// An asynchronous download's piece whose memory panics when the unpacking thread asks for
/// it: its second `as_mut` (the first is the call's own check of its length).
struct PanicsWhenUnpacked {
    bytes: Vec<u8>,
    asked: usize,
}

impl AsMut<[u8]> for PanicsWhenUnpacked {
    fn as_mut(&mut self) -> &mut [u8] {
        self.asked += 1;
        assert!(
            self.asked < 2,
            "a piece that panics when unpacked (on purpose)"
        );
        &mut self.bytes
    }
}

#[test]
fn a_panic_on_the_unpacking_thread_fails_the_event_and_the_next_call_still_runs() {
    let ctx = context();
    let queue = ctx.queue().unwrap();
    let src = device_with(&ctx, &queue, &[7u8; 4096]);
    let mut gather = Gather::new(&ctx, &GatherOptions::default()).unwrap();
    let bad = PanicsWhenUnpacked {
        bytes: vec![0; 100],
        asked: 0,
    };
    let pieces: Vec<(Destination, usize)> = vec![(Box::new(bad), 0)];
    let done = gather
        .download_scatter_async(&queue, &src, pieces, &[])
        .unwrap();
    // `failed` kept until the end: PoCL 3.1 may still be failing the marker on the thread
    // that failed the user event when the waiter wakes, and aborts if it is released then.
    let failed = done;
    let Some(waited) = common::wait_bounded(failed.clone()) else {
        // Dropping them would finish the queue, behind a marker that never completes.
        std::mem::forget((queue, gather, failed));
        panic!("the call's event never completed: a caller's clFinish would hang");
    };
    assert!(
        waited.is_err(),
        "the event of a call whose unpack panicked fails"
    );
    // The thread goes on (or another takes its place) for the next call. On another queue:
    // what a queue runs after a failed command is the driver's choice (PoCL 3.1 aborts
    // when a command is enqueued behind a failed one).
    let queue = ctx.queue().unwrap();
    let (good, bytes) = common::reported(100);
    let done = gather
        .download_scatter_async(&queue, &src, vec![(Box::new(good), 8)], &[])
        .unwrap();
    common::wait_bounded(done).expect("completes").unwrap();
    assert_eq!(
        bytes.recv_timeout(common::PATIENCE).unwrap(),
        vec![7u8; 100]
    );
    drop(failed);
}

/// The per-context cache the C library and the Python package keep: one gather per
/// context, the same on every call, made again after `take`; contexts kept apart, and the
/// cached gather works.
#[test]
fn the_cache_keeps_one_gather_per_context_until_taken() {
    use pinstream::gather::GatherCache;
    use std::sync::Arc;
    let cache = GatherCache::new();
    let (a, b) = (context(), context());
    let opts = GatherOptions::default();
    let key = |c: &Context| c.as_raw() as usize;
    assert!(cache.get(key(&a)).is_none());
    let first = cache.get_or_make(&a, &opts).unwrap();
    assert!(Arc::ptr_eq(&first, &cache.get_or_make(&a, &opts).unwrap()));
    assert!(Arc::ptr_eq(&first, &cache.get(key(&a)).unwrap()));
    let other = cache.get_or_make(&b, &opts).unwrap();
    assert!(!Arc::ptr_eq(&first, &other));
    assert_eq!(other.ctx.as_raw(), b.as_raw());
    let taken = cache.take(key(&a)).unwrap();
    assert!(Arc::ptr_eq(&first, &taken));
    assert!(cache.get(key(&a)).is_none() && cache.take(key(&a)).is_none());
    let again = cache.get_or_make(&a, &opts).unwrap();
    assert!(!Arc::ptr_eq(&first, &again));
    // The kept gather copies.
    let q = a.queue().unwrap();
    let dst = a.device_buffer(4096).unwrap();
    let piece = vec![7u8; 100];
    let done = again
        .lock()
        .upload_gather(&q, &dst, &[(&piece[..], 10)], &[]);
    done.unwrap().wait().unwrap();
    let mut back = vec![0u8; 100];
    let pieces = &mut [(&mut back[..], 10)];
    again
        .lock()
        .download_scatter(&q, &dst, pieces, &[])
        .unwrap();
    assert_eq!(back, piece);
}
