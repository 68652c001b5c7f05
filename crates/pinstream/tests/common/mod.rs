//! Helpers shared by the library's tests.
#![allow(dead_code)]

use rand::{RngCore, SeedableRng};

/// Fills the slices with random bytes from `seed`, spread over the cores.
pub fn fill_random(slices: Vec<&mut [u8]>, seed: u64) {
    pinstream::par::for_pieces(slices, |i, p| {
        rand::rngs::SmallRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .fill_bytes(p)
    });
}

use pinstream::backend::opencl::{Context, DeviceBuffer, Queue};
use pinstream::engine::{DType, StreamOptions, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use pinstream_lab::kernels::{gemv_row_ref, value, GEMV_GROUP};

/// W (`rows` x `cols` f16 in [-1, 1], pinned on `on_w`) and x (`cols` f32, on `on_x`) of
/// y = W·x, drawn from `seed`.
pub fn gemv_data(
    on_w: &Context,
    on_x: &Context,
    rows: usize,
    cols: usize,
    seed: u64,
) -> (HostRegion, HostRegion) {
    let mut w = HostRegion::new(on_w, rows * cols * 2, &PinOptions::default()).unwrap();
    for (i, v) in w.typed_mut::<half::f16>().unwrap().iter_mut().enumerate() {
        *v = half::f16::from_f32((value(seed, i as u64) % 2001) as f32 / 1000.0 - 1.0);
    }
    let mut x = HostRegion::new(on_x, cols * 4, &PinOptions::default()).unwrap();
    for (i, v) in x.typed_mut::<f32>().unwrap().iter_mut().enumerate() {
        *v = (value(seed + 1, i as u64) % 1000) as f32 / 500.0 - 1.0;
    }
    (w, x)
}

/// The built-in y = W·x's options over `base`: f16 in, f32 out, a work-group per row,
/// `rows_per_block` rows a block.
pub fn gemv_opts(base: StreamOptions, cols: usize, rows_per_block: usize) -> StreamOptions {
    StreamOptions {
        dtype: DType::F16,
        out_dtype: DType::F32,
        in_per_out: cols,
        block_bytes: rows_per_block * cols * 2,
        work: WorkSize {
            per_output: true,
            items_per: GEMV_GROUP,
            local: Some(GEMV_GROUP),
        },
        ..base
    }
}

/// Fails unless every row of `y` is `w`·`x` within float32 summation's error.
pub fn check_gemv(w: &HostRegion, x: &HostRegion, y: &HostRegion, cols: usize) {
    let (wv, xv) = (w.typed::<half::f16>().unwrap(), x.typed::<f32>().unwrap());
    for (r, got) in y.typed::<f32>().unwrap().iter().enumerate() {
        let (want, scale) = gemv_row_ref(&wv[r * cols..(r + 1) * cols], xv);
        assert!(
            (*got as f64 - want).abs() <= 1e-5 * scale + 1e-6,
            "row {r}: {got} vs {want}"
        );
    }
}

/// The test device's context: `PINSTREAM_TEST_DEVICE` (an index from `pinstream devices`),
/// else the default device (PoCL in CI).
pub fn test_ctx() -> Context {
    let all = pinstream::backend::opencl::devices()
        .expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    let dev = match std::env::var("PINSTREAM_TEST_DEVICE") {
        Ok(i) => all[i.parse::<usize>().unwrap()].clone(),
        Err(_) => pinstream::backend::opencl::default_device(&all)
            .unwrap()
            .clone(),
    };
    Context::new(&dev).unwrap()
}

/// In place over u32 in blocks of `block` bytes, four slots' worth of budget.
pub fn u32_opts(block: usize) -> StreamOptions {
    StreamOptions {
        dtype: DType::U32,
        out_dtype: DType::U32,
        block_bytes: block,
        in_per_out: 1,
        slots: None,
        vram_budget: 4 * block as u64,
        work: WorkSize::default(),
        sequential: false,
        stop: None,
        check_bounds: pinstream::engine::BoundsCheck::Auto,
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
    }
}

/// An asynchronous download's piece that reports its bytes when the gather lets go of it (on
/// the gather's own thread, or wherever the call ends): what a test reads a
/// [`pinstream::gather::Destination`] back with.
pub struct Reported {
    /// The piece's memory.
    pub bytes: Vec<u8>,
    /// Where its bytes go when it is dropped.
    pub to: std::sync::mpsc::Sender<Vec<u8>>,
}

impl AsMut<[u8]> for Reported {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for Reported {
    fn drop(&mut self) {
        let _ = self.to.send(std::mem::take(&mut self.bytes));
    }
}

/// A [`Reported`] piece of `len` zero bytes, and where its bytes arrive.
pub fn reported(len: usize) -> (Reported, std::sync::mpsc::Receiver<Vec<u8>>) {
    let (to, from) = std::sync::mpsc::channel();
    let bytes = vec![0; len];
    (Reported { bytes, to }, from)
}

/// How long a test waits for something the gather does on its own thread.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits for `event` on a thread of its own for at most [`PATIENCE`]: `None` when it has not
/// completed by then (a hang is a failed test, not a stuck one).
pub fn wait_bounded(
    event: pinstream::backend::opencl::Event,
) -> Option<Result<(), pinstream::backend::opencl::ClError>> {
    let (to, from) = std::sync::mpsc::channel();
    std::thread::spawn(move || to.send(event.wait()));
    from.recv_timeout(PATIENCE).ok()
}

/// The whole of `buf`, read back through a pinned region.
pub fn device_bytes(ctx: &Context, q: &Queue, buf: &DeviceBuffer) -> Vec<u8> {
    let mut host = HostRegion::new(ctx, buf.size(), &PinOptions::default()).unwrap();
    host.download(q, buf, 0, 0..buf.size(), &[]).unwrap();
    host.as_slice().unwrap().to_vec()
}

/// A device buffer holding `bytes`.
pub fn device_with(ctx: &Context, q: &Queue, bytes: &[u8]) -> DeviceBuffer {
    let buf = ctx.device_buffer(bytes.len()).unwrap();
    let mut host = HostRegion::new(ctx, bytes.len(), &PinOptions::default()).unwrap();
    host.as_mut_slice().unwrap().copy_from_slice(bytes);
    host.upload(q, 0..bytes.len(), &buf, 0, &[]).unwrap();
    host.wait().unwrap();
    buf
}
