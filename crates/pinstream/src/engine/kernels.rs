//! Built-in kernels for `pinstream demo` and their CPU references.

/// In place over `uint`: a bijective mix of each element, salted with its global index, so a
/// block written to the wrong place or not at all cannot pass the check.
pub const MIX_U32: &str = r#"
__kernel void mix_u32(__global uint* x, ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    uint v = x[i];
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
    v += (uint)(offset + i);
    x[i] = v;
}
"#;

/// [`MIX_U32`] in CUDA C (compiled with NVRTC by the CUDA engine): the same arithmetic,
/// one thread per element.
pub const MIX_U32_CUDA: &str = r#"
extern "C" __global__ void mix_u32(unsigned int* x, unsigned long long n,
                                   unsigned long long block, unsigned long long offset) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int v = x[i];
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
    v += (unsigned int)(offset + i);
    x[i] = v;
}
"#;

/// [`GEMV_F16`] in CUDA C: the same work split (one block of [`GEMV_GROUP`] threads per row,
/// a strided dot product, a shared-memory tree sum). The half load is one PTX `cvt`, so
/// NVRTC needs no `cuda_fp16.h`.
pub const GEMV_F16_CUDA: &str = include_str!("kernels/gemv_f16.cu");

/// The built-in kernels in an API's kernel language, so a front written over the API runs
/// them through any API that has them.
pub trait Builtins {
    /// [`MIX_U32`] (`mix_u32`).
    const MIX_U32: &'static str;
    /// [`GEMV_F16`] (`gemv_f16`).
    const GEMV_F16: &'static str;
}

impl Builtins for crate::backend::opencl::OpenCl {
    const MIX_U32: &'static str = MIX_U32;
    const GEMV_F16: &'static str = GEMV_F16;
}

/// `A`'s kernels, for `A` with a fault injected.
impl<A: Builtins> Builtins for crate::backend::fault::Faulty<A> {
    const MIX_U32: &'static str = A::MIX_U32;
    const GEMV_F16: &'static str = A::GEMV_F16;
}

#[cfg(feature = "cuda")]
impl Builtins for crate::backend::cuda::Cuda {
    const MIX_U32: &'static str = MIX_U32_CUDA;
    const GEMV_F16: &'static str = GEMV_F16_CUDA;
}

/// The CPU reference of [`MIX_U32`] for the element at global index `index`.
pub fn mix_u32_ref(v: u32, index: u64) -> u32 {
    let mut v = v;
    v ^= v >> 15;
    v = v.wrapping_mul(0x2c1b_3c6d);
    v ^= v >> 12;
    v.wrapping_add(index as u32)
}

/// Work-group size of [`GEMV_F16`]; launch with one group per output row.
pub const GEMV_GROUP: usize = 256;

/// y = W·x over blocks of rows: W (`half`, row-major, `cols` per row) streamed, y (`float`)
/// out of place, x (`float`, `cols`) resident. One work-group of [`GEMV_GROUP`] per row.
pub const GEMV_F16: &str = include_str!("kernels/gemv_f16.cl");

/// The CPU reference of one row of [`GEMV_F16`] in f64, and the sum of |w·x| (the scale of
/// the rounding error a float32 sum in another order may make).
pub fn gemv_row_ref(w: &[half::f16], x: &[f32]) -> (f64, f64) {
    w.iter().zip(x).fold((0.0, 0.0), |(s, a), (w, x)| {
        let p = f64::from(w.to_f32()) * f64::from(*x);
        (s + p, a + p.abs())
    })
}

pub use crate::units::value;

#[cfg(test)]
mod tests {
    #[test]
    fn mix_is_salted_by_index() {
        assert_ne!(super::mix_u32_ref(5, 0), super::mix_u32_ref(5, 1));
        assert_ne!(super::value(1, 0), super::value(1, 1));
    }
}
