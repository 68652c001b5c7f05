//! The batch copies' checks written once over any API (`BatchApi`): random piece lists moved
//! up and down and checked byte for byte against a CPU reference, calls larger than the
//! staging, the refusals (overlap, bounds, empty) with nothing enqueued, and the zero-copy
//! calls (a round trip where the API offers them, else its refusal as data). Used by the
//! OpenCL and Vulkan tests (`batch_copies.rs`) and the CUDA ones (the CLI's `tests/cuda`).

use pinstream::backend::api::{Device, DeviceOf};
use pinstream::backend::lanes::HostMemory;
use pinstream::gather::{BatchApi, GatherError, GatherOptions};
use pinstream::host::PinRequest;

/// Random numbers below a bound: a xorshift64 stream from `seed`.
pub fn below(seed: u64) -> impl FnMut(usize) -> usize {
    let mut x = seed | 1;
    move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m.max(1) as u64) as usize
    }
}

/// `count` disjoint pieces `(length, device offset)` with random gaps, in shuffled order,
/// and the buffer size they need.
fn layout(
    rng: &mut impl FnMut(usize) -> usize,
    count: usize,
    max_len: usize,
) -> (Vec<(usize, usize)>, usize) {
    let mut at = rng(64);
    let mut out = Vec::new();
    for _ in 0..count {
        let len = 1 + rng(max_len);
        out.push((len, at));
        at += len + rng(40);
    }
    for i in (1..out.len()).rev() {
        out.swap(i, rng(i + 1));
    }
    (out, at + 17)
}

/// Uploads `data` as one piece at 0 and waits.
fn put<A: BatchApi>(
    dev: &DeviceOf<A>,
    batch: &mut A::Batch,
    q: &A::Queue,
    buf: &A::Buffer,
    data: &[u8],
) {
    let done = A::upload_gather(batch, q, buf, &[(data, 0)]).unwrap();
    dev.wait(&done).map_err(Into::into).unwrap();
}

/// The whole buffer, read back as one piece.
fn get<A: BatchApi>(batch: &mut A::Batch, q: &A::Queue, buf: &A::Buffer, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    A::download_scatter(batch, q, buf, &mut [(&mut out[..], 0)]).unwrap();
    out
}

/// Random pieces up, then random (overlapping) ranges down, each checked byte for byte
/// against a CPU copy; with `options` small, calls are cut into many batches.
pub fn round_trip<A: BatchApi>(
    dev: &DeviceOf<A>,
    options: &GatherOptions,
    seed: u64,
    count: usize,
    max_len: usize,
) {
    let mut rng = below(seed);
    let (shape, size) = layout(&mut rng, count, max_len);
    let mut batch = A::batch(dev, options).unwrap();
    let q = dev.queue().map_err(Into::into).unwrap();
    let buf = dev.allocate(size).map_err(Into::into).unwrap();
    let mut want: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
    put::<A>(dev, &mut batch, &q, &buf, &want);
    let data: Vec<Vec<u8>> = shape
        .iter()
        .map(|&(len, _)| (0..len).map(|_| rng(256) as u8).collect())
        .collect();
    let pieces: Vec<(&[u8], usize)> = data
        .iter()
        .zip(&shape)
        .map(|(d, &(_, o))| (&d[..], o))
        .collect();
    let done = A::upload_gather(&mut batch, &q, &buf, &pieces).unwrap();
    dev.wait(&done).map_err(Into::into).unwrap();
    for (d, &(_, o)) in data.iter().zip(&shape) {
        want[o..o + d.len()].copy_from_slice(d);
    }
    assert!(
        get::<A>(&mut batch, &q, &buf, size) == want,
        "{}: upload, seed {seed}",
        A::NAME
    );
    let ranges: Vec<(usize, usize)> = (0..count)
        .map(|_| {
            let at = rng(size);
            (at, 1 + rng((size - at).min(max_len)))
        })
        .collect();
    let mut outs: Vec<Vec<u8>> = ranges.iter().map(|&(_, len)| vec![0u8; len]).collect();
    let mut down: Vec<(&mut [u8], usize)> = outs
        .iter_mut()
        .zip(&ranges)
        .map(|(o, &(at, _))| (&mut o[..], at))
        .collect();
    A::download_scatter(&mut batch, &q, &buf, &mut down).unwrap();
    for (i, (o, &(at, len))) in outs.iter().zip(&ranges).enumerate() {
        assert!(
            o[..] == want[at..at + len],
            "{}: download piece {i}, seed {seed}",
            A::NAME
        );
    }
}

/// Every refusal, and the buffer unchanged after each (nothing was enqueued).
pub fn refusals<A: BatchApi>(dev: &DeviceOf<A>) {
    let mut batch = A::batch(dev, &GatherOptions::for_capacity(4096)).unwrap();
    let q = dev.queue().map_err(Into::into).unwrap();
    let buf = dev.allocate(1000).map_err(Into::into).unwrap();
    let base: Vec<u8> = (0..1000).map(|i| i as u8).collect();
    put::<A>(dev, &mut batch, &q, &buf, &base);
    let (a, b) = (vec![9u8; 100], vec![8u8; 50]);
    let err = |r: Result<A::Event, GatherError>| r.err().expect("refused");
    let e = err(A::upload_gather(
        &mut batch,
        &q,
        &buf,
        &[(&a[..], 0), (&b[..], 60)],
    ));
    assert!(
        matches!(
            e,
            GatherError::Overlap {
                first: 0,
                second: 1
            }
        ),
        "{e}"
    );
    let e = err(A::upload_gather(
        &mut batch,
        &q,
        &buf,
        &[(&a[..], 0), (&b[..], 960)],
    ));
    assert!(
        matches!(
            e,
            GatherError::OutOfBuffer {
                index: 1,
                size: 1000,
                ..
            }
        ),
        "{e}"
    );
    let e = err(A::upload_gather(&mut batch, &q, &buf, &[]));
    assert!(matches!(e, GatherError::NoPieces), "{e}");
    let e = err(A::upload_gather(
        &mut batch,
        &q,
        &buf,
        &[(&a[..], 0), (&[][..], 500)],
    ));
    assert!(matches!(e, GatherError::EmptyPiece { index: 1 }), "{e}");
    let (mut x, mut y) = (vec![0u8; 10], vec![0u8; 10]);
    let e = A::download_scatter(
        &mut batch,
        &q,
        &buf,
        &mut [(&mut x[..], 0), (&mut y[..], 995)],
    );
    assert!(
        matches!(e, Err(GatherError::OutOfBuffer { index: 1, .. })),
        "{e:?}"
    );
    let e = A::download_scatter(&mut batch, &q, &buf, &mut []);
    assert!(matches!(e, Err(GatherError::NoPieces)), "{e:?}");
    assert!(
        get::<A>(&mut batch, &q, &buf, 1000) == base,
        "{}: a refused call changed the buffer",
        A::NAME
    );
    assert!(
        x.iter().all(|&v| v == 0),
        "a refused download wrote a piece"
    );
}

/// Where the API offers zero-copy calls: pieces of mapped memory up and down, checked; else
/// the refusal, as data naming the API.
pub fn zero_copy<A: BatchApi>(dev: &DeviceOf<A>) {
    let mut batch = A::batch(dev, &GatherOptions::for_capacity(4096)).unwrap();
    let q = dev.queue().map_err(Into::into).unwrap();
    let buf = dev.allocate(4096).map_err(Into::into).unwrap();
    let pieces = [(0, 100, 3000), (500, 7, 10), (1000, 1000, 1200)];
    if let Some(why) = A::zero_copy_missing() {
        let mut host = A::pin(dev, 4096, PinRequest::default()).unwrap();
        let e = A::upload_gather_mapped(&mut batch, &q, &buf, &host, &pieces)
            .err()
            .expect("refused");
        assert!(
            matches!(&e, GatherError::NotOffered { .. }) && e.to_string().contains(A::NAME),
            "{e}"
        );
        assert!(e.to_string().contains(&why), "{e}");
        let e = A::download_scatter_mapped(&mut batch, &q, &buf, &mut host, &pieces)
            .err()
            .expect("refused");
        assert!(matches!(e, GatherError::NotOffered { .. }), "{e}");
        return;
    }
    let mut host = A::mapped(dev, 4096, false).unwrap();
    let src: Vec<u8> = (0..4096).map(|i| (i * 13 + 1) as u8).collect();
    host.slices_mut(0..4096).unwrap()[0].copy_from_slice(&src);
    put::<A>(dev, &mut batch, &q, &buf, &[0u8; 4096]);
    let done = A::upload_gather_mapped(&mut batch, &q, &buf, &host, &pieces).unwrap();
    dev.wait(&done).map_err(Into::into).unwrap();
    let on_dev = get::<A>(&mut batch, &q, &buf, 4096);
    for &(h, len, d) in &pieces {
        assert!(
            on_dev[d..d + len] == src[h..h + len],
            "{}: zero-copy upload",
            A::NAME
        );
    }
    let mut out = A::mapped(dev, 4096, false).unwrap();
    let back = [(0, 100, 3000), (2000, 1000, 1200)];
    let done = A::download_scatter_mapped(&mut batch, &q, &buf, &mut out, &back).unwrap();
    dev.wait(&done).map_err(Into::into).unwrap();
    let got = out.slices(0..4096).unwrap().concat();
    for &(h, len, d) in &back {
        assert!(
            got[h..h + len] == on_dev[d..d + len],
            "{}: zero-copy download",
            A::NAME
        );
    }
}
