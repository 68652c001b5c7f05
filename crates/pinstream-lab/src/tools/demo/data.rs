//! The demo's data: the seeded values the workloads fill, and their checks against the CPU
//! reference.

use crate::kernels::{gemv_row_ref, mix_u32_ref, value};
use pinstream::engine::HostMemory;
use pinstream::host::HostError;
use pinstream::par;

// The demo's data, written and checked over either API's pinned memory (`parts`: one region's
// bytes, piece by piece in order), so that OpenCL and CUDA stream the same values.

/// Writes the in-place input: element `i` is `value(seed, i)`.
pub(crate) fn fill_in_place(seed: u64, parts: Vec<&mut [u8]>) {
    par::fill_with::<u32>(parts, |i| value(seed, i) as u32);
}

/// Writes bytes `off..` of the in-place input (`off` a multiple of 4), on all cores.
pub(crate) fn fill_in_place_at(seed: u64, off: usize, bytes: &mut [u8]) {
    let first = (off / 4) as u64;
    par::fill_with::<u32>(vec![bytes], |i| value(seed, first + i) as u32);
}

/// Elements of the in-place data that differ from the CPU reference applied `passes` times
/// to the data drawn from `seed`.
pub(crate) fn in_place_mismatches((seed, passes): (u64, usize), parts: Vec<&[u8]>) -> u64 {
    par::count_bad::<u32>(parts, |i, v| {
        v != (0..passes).fold(value(seed, i) as u32, |x, _| mix_u32_ref(x, i))
    })
}

/// Writes W (f16) and x (f32) of y = W·x, drawn with `seed` (see [`DemoConfig::gemv_shape`]).
pub(crate) fn fill_gemv(seed: u64, w: Vec<&mut [u8]>, x: Vec<&mut [u8]>) {
    par::fill_with::<half::f16>(w, |i| gemv_w(seed, i));
    par::fill_with::<f32>(x, |i| gemv_x(seed, i));
}

/// Sets every f32 to NaN, which no row's check passes, so a row never written is caught.
pub(crate) fn fill_nan(parts: Vec<&mut [u8]>) {
    par::fill_with::<f32>(parts, |_| f32::NAN);
}

/// Element `i` of the demo's W (drawn with `seed`), in [-1, 1].
fn gemv_w(seed: u64, i: u64) -> half::f16 {
    half::f16::from_f32((value(seed, i) % 2001) as f32 / 1000.0 - 1.0)
}

/// Element `i` of the demo's x (drawn with `seed`), in [-1, 1].
fn gemv_x(seed: u64, i: u64) -> f32 {
    (value(seed + 1, i) % 2001) as f32 / 1000.0 - 1.0
}

/// True when `got` is off row `w`·`x` by more than float32 summation can explain (NaN is).
pub(crate) fn gemv_row_bad(w: &[half::f16], x: &[f32], got: f32) -> bool {
    let (want, scale) = gemv_row_ref(w, x);
    let within = (f64::from(got) - want).abs() <= 1e-5 * scale + 1e-6;
    !within // NaN compares false, so it never passes
}

/// [`check_gemv`] over contiguous slices: W's rows, x, y.
#[cfg(test)]
fn gemv_mismatches(w: &[half::f16], x: &[f32], y: &[f32], cols: usize) -> u64 {
    let bad = std::sync::atomic::AtomicU64::new(0);
    par::for_ranges(y.len(), |r| {
        let n = r
            .filter(|&row| gemv_row_bad(&w[row * cols..(row + 1) * cols], x, y[row]))
            .count() as u64;
        bad.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    });
    bad.into_inner()
}

/// Rows whose result is off by more than float32 summation can explain (NaN never passes).
pub(super) fn check_gemv(
    w: &(impl HostMemory + Sync),
    x: &impl HostMemory,
    y: &impl HostMemory,
    rows: usize,
    cols: usize,
) -> Result<u64, HostError> {
    let xs: Vec<f32> = with_typed(x, 0..x.len(), <[f32]>::to_vec)?;
    let ys: Vec<f32> = with_typed(y, 0..rows * 4, <[f32]>::to_vec)?;
    let bad = std::sync::atomic::AtomicU64::new(0);
    let err = std::sync::Mutex::new(None);
    par::for_ranges(rows, |r| {
        let count = |ws: &[half::f16]| {
            r.clone()
                .filter(|&row| {
                    let k = row - r.start;
                    gemv_row_bad(&ws[k * cols..(k + 1) * cols], &xs, ys[row])
                })
                .count() as u64
        };
        match with_typed(w, r.start * cols * 2..r.end * cols * 2, count) {
            Ok(n) => bad.fetch_add(n, std::sync::atomic::Ordering::Relaxed),
            Err(e) => {
                *err.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                0
            }
        };
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(bad.into_inner()),
    }
}

/// Calls `f` with the bytes of `range` as `T`: in place where they are one aligned piece,
/// else from a copy (a range that crosses chunks).
fn with_typed<T: bytemuck::Pod, R>(
    r: &impl HostMemory,
    range: std::ops::Range<usize>,
    f: impl FnOnce(&[T]) -> R,
) -> Result<R, HostError> {
    let parts = r.slices(range.clone())?;
    if let [one] = parts.as_slice() {
        if let Ok(t) = bytemuck::try_cast_slice::<u8, T>(one) {
            return Ok(f(t));
        }
    }
    let mut v: Vec<T> = vec![T::zeroed(); range.len() / std::mem::size_of::<T>()];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    let mut off = 0;
    for p in parts {
        bytes[off..off + p.len()].copy_from_slice(p);
        off += p.len();
    }
    Ok(f(&v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::gemv_row_ref;

    #[test]
    fn gemv_check_catches_a_wrong_row_and_nan() {
        let (rows, cols) = (5, 300);
        let w: Vec<half::f16> = (0..rows * cols).map(|i| gemv_w(7, i as u64)).collect();
        let x: Vec<f32> = (0..cols).map(|i| gemv_x(7, i as u64)).collect();
        let mut y: Vec<f32> = (0..rows)
            .map(|r| gemv_row_ref(&w[r * cols..(r + 1) * cols], &x).0 as f32)
            .collect();
        assert_eq!(gemv_mismatches(&w, &x, &y, cols), 0);
        y[1] += 0.01;
        y[3] = f32::NAN;
        assert_eq!(gemv_mismatches(&w, &x, &y, cols), 2);
    }
}
