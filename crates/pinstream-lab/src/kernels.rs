//! Built-in kernels for `pinstream demo` (and `doctor`'s mapped-memory kernels) and their CPU
//! references, in each API's kernel language.

use pinstream::backend::api::{Api, KernelLanguage};

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

/// Streaming over mapped memory (`doctor`'s kernel read and write bandwidth): `mapped_read`
/// XORs 16-byte words of `src` (`n` words, grid-strided) into one word per work item of
/// `out`; `mapped_write` writes each word `k` of `dst` as `(k ^ salt, k >> 32, salt, k)`.
pub const MAPPED_STREAM: &str = r#"
__kernel void mapped_read(__global const uint4* src, __global uint* out, ulong n) {
    size_t i = get_global_id(0), g = get_global_size(0);
    uint4 acc = (uint4)(0u);
    for (ulong k = i; k < n; k += g) acc ^= src[k];
    out[i] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
__kernel void mapped_write(__global uint4* dst, ulong n, uint salt) {
    size_t i = get_global_id(0), g = get_global_size(0);
    for (ulong k = i; k < n; k += g) dst[k] = (uint4)((uint)k ^ salt, (uint)(k >> 32), salt, (uint)k);
}
"#;

/// [`MAPPED_STREAM`] in CUDA C: the same kernels, grid-strided over threads.
pub const MAPPED_STREAM_CUDA: &str = r#"
extern "C" __global__ void mapped_read(const uint4* src, unsigned int* out, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long g = (unsigned long long)gridDim.x * blockDim.x;
    uint4 acc = make_uint4(0u, 0u, 0u, 0u);
    for (unsigned long long k = i; k < n; k += g) {
        uint4 v = src[k];
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    out[i] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
extern "C" __global__ void mapped_write(uint4* dst, unsigned long long n, unsigned int salt) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long g = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long k = i; k < n; k += g)
        dst[k] = make_uint4((unsigned int)k ^ salt, (unsigned int)(k >> 32), salt, (unsigned int)k);
}
"#;

/// The word [`MAPPED_STREAM`]'s `mapped_write` writes at 16-byte word `k`.
pub fn mapped_word(k: u64, salt: u32) -> [u32; 4] {
    [(k as u32) ^ salt, (k >> 32) as u32, salt, k as u32]
}

/// An embedding-bag lookup (`demo --workload embedding`): `out[b * dim + d]` is the sum over
/// the `bag` row ids `ids[b * bag ..]` of column `d` of those rows of `table` (`dim` floats
/// per row), for `bags` bags; one work item per output value, so neighbouring items read
/// neighbouring columns of a row. The table may come as several buffers (where one buffer
/// cannot hold it: Vulkan's binding limit), [`Builtins::EMBEDDING_TABLES`] of them per launch,
/// the first parameters, each of `rows` rows but the last: they hold rows `first..`, ids
/// outside them are skipped, and the launch with `first` 0 writes `out` while a launch over
/// later rows adds to it. A table of one buffer is one launch with `first` 0.
pub const EMBEDDING_BAG: &str = r#"
__kernel void embedding_bag(__global const float* table, __global const uint* ids,
                            __global float* out, uint bag, uint dim, ulong bags,
                            uint first, uint rows) {
    size_t g = get_global_id(0);
    if (g >= bags * dim) return;
    size_t b = g / dim, d = g % dim;
    __global const uint* row = ids + b * bag;
    float s = 0.0f;
    for (uint k = 0; k < bag; k++) {
        uint r = row[k] - first; /* wraps below `first`: skipped as rows past the chunk */
        if (r < rows) s += table[(size_t)r * dim + d];
    }
    out[g] = first == 0 ? s : out[g] + s;
}
"#;

/// [`EMBEDDING_BAG`] in CUDA C: the same work split, one thread per output value.
pub const EMBEDDING_BAG_CUDA: &str = r#"
extern "C" __global__ void embedding_bag(const float* table, const unsigned int* ids, float* out,
                                         unsigned int bag, unsigned int dim,
                                         unsigned long long bags, unsigned int first,
                                         unsigned int rows) {
    unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= bags * dim) return;
    unsigned long long b = g / dim, d = g % dim;
    const unsigned int* row = ids + b * bag;
    float s = 0.0f;
    for (unsigned int k = 0; k < bag; k++) {
        unsigned int r = row[k] - first;
        if (r < rows) s += table[(unsigned long long)r * dim + d];
    }
    out[g] = first == 0 ? s : out[g] + s;
}
"#;

/// The CPU reference of [`EMBEDDING_BAG`] for one bag: the sum of its rows, column by column,
/// in the kernel's order.
pub fn embedding_bag_ref(table: &[f32], ids: &[u32], dim: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; dim];
    for &id in ids {
        let row = &table[id as usize * dim..(id as usize + 1) * dim];
        out.iter_mut().zip(row).for_each(|(o, r)| *o += r);
    }
    out
}

/// The built-in kernels in an API's kernel language, so a front written over the API runs
/// them through any API that has them: chosen by the language the API builds
/// ([`Api::LANGUAGE`]), so no API is named here and every API (a fault-injecting one
/// included) has them.
pub trait Builtins {
    /// [`MIX_U32`] (`mix_u32`).
    const MIX_U32: &'static str;
    /// [`GEMV_F16`] (`gemv_f16`).
    const GEMV_F16: &'static str;
    /// [`MAPPED_STREAM`] (`mapped_read`, `mapped_write`); `None` for an API without mapped
    /// pinned memory (`host::HostApi::mapped`).
    const MAPPED_STREAM: Option<&'static str>;
    /// [`EMBEDDING_BAG`] (`embedding_bag`); `None` as for [`Self::MAPPED_STREAM`].
    const EMBEDDING_BAG: Option<&'static str>;
    /// The table buffers [`Self::EMBEDDING_BAG`] takes per launch (its first parameters).
    const EMBEDDING_TABLES: usize = 1;
}

/// Sources by [`Api::LANGUAGE`]: OpenCL C, CUDA C, WGSL. An API of no language a program
/// writes for (a test's) has none: asking it for one fails the build (the constant's
/// evaluation panics), not the run.
impl<A: Api> Builtins for A {
    const MIX_U32: &'static str = match A::LANGUAGE {
        KernelLanguage::OpenClC => MIX_U32,
        KernelLanguage::CudaC => MIX_U32_CUDA,
        KernelLanguage::Wgsl => MIX_U32_WGSL,
        _ => panic!("no built-in kernels for this API's language"),
    };
    const GEMV_F16: &'static str = match A::LANGUAGE {
        KernelLanguage::OpenClC => GEMV_F16,
        KernelLanguage::CudaC => GEMV_F16_CUDA,
        KernelLanguage::Wgsl => GEMV_F16_WGSL,
        _ => panic!("no built-in kernels for this API's language"),
    };
    const MAPPED_STREAM: Option<&'static str> = match A::LANGUAGE {
        KernelLanguage::OpenClC => Some(MAPPED_STREAM),
        KernelLanguage::CudaC => Some(MAPPED_STREAM_CUDA),
        KernelLanguage::Wgsl => Some(MAPPED_STREAM_WGSL),
        _ => panic!("no built-in kernels for this API's language"),
    };
    const EMBEDDING_BAG: Option<&'static str> = match A::LANGUAGE {
        KernelLanguage::OpenClC => Some(EMBEDDING_BAG),
        KernelLanguage::CudaC => Some(EMBEDDING_BAG_CUDA),
        KernelLanguage::Wgsl => Some(EMBEDDING_BAG_WGSL),
        _ => panic!("no built-in kernels for this API's language"),
    };
    // WGSL's bindings reach 4 GiB on NVIDIA: four of them per launch.
    const EMBEDDING_TABLES: usize = match A::LANGUAGE {
        KernelLanguage::Wgsl => 4,
        _ => 1,
    };
}

/// [`MIX_U32`] in WGSL for Vulkan (compiled to SPIR-V by naga): the same arithmetic with
/// 32-bit counts (the offset wraps as the reference's `as u32` does).
pub const MIX_U32_WGSL: &str = include_str!("kernels/mix_u32.wgsl");

/// [`GEMV_F16`] in WGSL for Vulkan: the same work split; halves read as packed `u32` words.
pub const GEMV_F16_WGSL: &str = include_str!("kernels/gemv_f16.wgsl");

/// [`MAPPED_STREAM`] in WGSL for Vulkan: the same kernels over one binding (under 2^28 words).
pub const MAPPED_STREAM_WGSL: &str = include_str!("kernels/mapped_stream.wgsl");

/// [`EMBEDDING_BAG`] in WGSL for Vulkan: the same sums, one invocation per output value, over
/// four table bindings (16 GiB of table per launch on NVIDIA, whose bindings reach 4 GiB).
pub const EMBEDDING_BAG_WGSL: &str = include_str!("kernels/embedding_bag.wgsl");

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

pub use pinstream::units::value;

#[cfg(test)]
mod tests {
    #[test]
    fn mix_is_salted_by_index() {
        assert_ne!(super::mix_u32_ref(5, 0), super::mix_u32_ref(5, 1));
        assert_ne!(super::value(1, 0), super::value(1, 1));
    }
}
