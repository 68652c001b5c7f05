//! CUDA's own zero-copy way of moving scattered pieces, the honest anchor for pinstream's
//! mapped-memory gather: the pinned host memory is `cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)`
//! (what `cudaHostAlloc(..., cudaHostAllocMapped)` makes), and one kernel launch moves every
//! piece across the bus, one block per piece, reading or writing the host memory through its
//! device pointer (`cuMemHostGetDevicePointer`). The pieces' table (host offset, device
//! offset, length) is copied to the device in the call and counted in its time.
//!
//! The bus side is accessed in aligned 16-byte words, the device side byte by byte: the
//! pieces lie at any misalignment, and a PCIe read or write of whole aligned words is what
//! keeps the link busy. Reading, a piece's first and last words are read whole (they lie in
//! the allocation's pages, which `cuMemHostAlloc` makes whole) and only the piece's bytes
//! kept; writing, they are written in the fewest naturally aligned parts (8, 4, 2, 1 bytes),
//! never past the piece (a neighbour may share the word).

use super::scattered::{check, finish, Piece};
use super::{CudaError, CudaKernel, DeviceMem, Gpu, PinnedHost, Result, Stream};
use cudarc::driver::{result, sys};
use std::ffi::c_void;
use std::time::Instant;

/// The two kernels: pieces from mapped host memory into device memory, and back.
const SOURCE: &str = r#"
struct Piece { unsigned long long host, dev, len; };

extern "C" __global__ void pieces_from_host(const unsigned char* __restrict__ host,
                                            unsigned char* __restrict__ dev,
                                            const Piece* __restrict__ pieces) {
    const Piece p = pieces[blockIdx.x];
    const unsigned long long s = (unsigned long long)(host + p.host), end = s + p.len;
    unsigned char* d = dev + p.dev;
    for (unsigned long long a = (s & ~15ull) + 16ull * threadIdx.x; a < end;
         a += 16ull * blockDim.x) {
        const uint4 v = *(const uint4*)a;
        const unsigned char* b = (const unsigned char*)&v;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            const unsigned long long x = a + k;
            if (x >= s && x < end) d[x - s] = b[k];
        }
    }
}

/* Host bytes [x, e) of a piece starting at host address s, from src[x - s ..], in the
   fewest naturally aligned writes (8, 4, 2 or 1 bytes): each is one transaction on the bus,
   so a piece's partial first and last words cost a few, not one per byte. */
__device__ void edge(unsigned long long x, unsigned long long e, const unsigned char* src,
                     unsigned long long s) {
    while (x < e) {
        unsigned n = ((x & 7) == 0 && x + 8 <= e) ? 8 : ((x & 3) == 0 && x + 4 <= e) ? 4
                   : ((x & 1) == 0 && x + 2 <= e) ? 2 : 1;
        unsigned long long v = 0;
        for (unsigned k = 0; k < n; k++) v |= (unsigned long long)src[x - s + k] << (8 * k);
        if (n == 8) *(unsigned long long*)x = v;
        else if (n == 4) *(unsigned int*)x = (unsigned int)v;
        else if (n == 2) *(unsigned short*)x = (unsigned short)v;
        else *(unsigned char*)x = (unsigned char)v;
        x += n;
    }
}

extern "C" __global__ void pieces_to_host(unsigned char* __restrict__ host,
                                          const unsigned char* __restrict__ dev,
                                          const Piece* __restrict__ pieces) {
    const Piece p = pieces[blockIdx.x];
    const unsigned long long s = (unsigned long long)(host + p.host), end = s + p.len;
    const unsigned char* src = dev + p.dev;
    for (unsigned long long a = (s & ~15ull) + 16ull * threadIdx.x; a < end;
         a += 16ull * blockDim.x) {
        if (a >= s && a + 16 <= end) {
            uint4 v;
            unsigned char* b = (unsigned char*)&v;
#pragma unroll
            for (int k = 0; k < 16; k++) b[k] = src[a + k - s];
            *(uint4*)a = v;
        } else {
            edge(a > s ? a : s, a + 16 < end ? a + 16 : end, src, s);
        }
    }
}
"#;

/// One piece as the kernels read it.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Entry {
    host: u64,
    dev: u64,
    len: u64,
}

/// The compiled kernels and the pieces' table (pinned on the host, and on the device), grown
/// to the largest call so far.
pub struct ZeroCopy {
    gpu: Gpu,
    up: CudaKernel,
    down: CudaKernel,
    table: Option<(PinnedHost, DeviceMem)>,
}

impl ZeroCopy {
    /// Compiles the kernels (NVRTC) on `gpu`.
    pub fn new(gpu: &Gpu) -> Result<ZeroCopy> {
        let program = gpu.build(SOURCE, "")?;
        Ok(ZeroCopy {
            gpu: gpu.clone(),
            up: program.kernel("pieces_from_host")?,
            down: program.kernel("pieces_to_host")?,
            table: None,
        })
    }

    /// The table memories, at least `bytes` long.
    fn table(&mut self, bytes: usize) -> Result<&mut (PinnedHost, DeviceMem)> {
        if self.table.as_ref().is_none_or(|(h, _)| h.len() < bytes) {
            self.table = None;
            let host = self.gpu.pinned(bytes, super::CudaPinning::HostAlloc)?;
            self.table = Some((host, self.gpu.alloc(bytes)?));
        }
        Ok(self.table.as_mut().expect("made above"))
    }

    /// Moves every piece between `host` (mapped: [`Gpu::pinned_mapped`]) and `dev`, host to
    /// device (`up`) or back, in one launch on `stream` after the table's copy, then
    /// synchronises; the wall time in µs, the table's filling and copy included.
    pub fn copy(
        &mut self,
        stream: &Stream,
        dev: &DeviceMem,
        host: &mut PinnedHost,
        pieces: &[Piece],
        up: bool,
    ) -> Result<f64> {
        check(dev, host, pieces)?;
        let grid = u32::try_from(pieces.len()).map_err(|_| {
            CudaError::Unavailable("more pieces than one launch has blocks: move fewer".into())
        })?;
        let mapped = host.device_ptr()?;
        let block = threads(pieces.iter().map(|p| p.len).max().unwrap_or(0));
        let start = Instant::now();
        let bytes = pieces.len() * size_of::<Entry>();
        let f = if up { &self.up } else { &self.down }
            .function
            .cu_function();
        let (table_host, table_dev) = self.table(bytes.max(1))?;
        let entries: &mut [Entry] =
            bytemuck::cast_slice_mut(&mut table_host.as_mut_slice()[..bytes]);
        for (e, p) in entries.iter_mut().zip(pieces) {
            *e = Entry {
                host: p.host as u64,
                dev: p.device as u64,
                len: p.len as u64,
            };
        }
        stream.gpu.bind()?;
        let table = table_dev.ptr;
        let src = table_host.span(0..bytes).ptr;
        // SAFETY: the table's host memory and device memory are `bytes` long and outlive the
        // stream's synchronisation in `finish`.
        let r = unsafe { sys::cuMemcpyHtoDAsync_v2(table, src.cast(), bytes, stream.raw) }
            .result()
            .map_err(CudaError::driver("cuMemcpyHtoDAsync"))
            .and_then(|()| {
                let args = [mapped, dev.ptr, table];
                let mut params: Vec<*mut c_void> = args
                    .iter()
                    .map(|a| (a as *const u64).cast_mut().cast())
                    .collect();
                // SAFETY: three pointer parameters, each at a u64 alive until the call
                // returns; every piece lies inside the host and device memory (checked),
                // both borrowed until `finish` synchronises the stream.
                unsafe {
                    result::launch_kernel(
                        f,
                        (grid, 1, 1),
                        (block, 1, 1),
                        0,
                        stream.raw,
                        &mut params,
                    )
                }
                .map_err(CudaError::driver("cuLaunchKernel"))
            });
        finish(stream, r, start)
    }
}

/// Threads per block for pieces of at most `len` bytes: a 16-byte word each (one more for a
/// misaligned start), in whole warps, from 32 to 256.
fn threads(len: usize) -> u32 {
    ((len / 16 + 1).div_ceil(32) * 32).clamp(32, 256) as u32
}

#[cfg(test)]
mod tests {
    use super::threads;

    #[test]
    fn a_block_covers_a_piece_in_whole_warps() {
        assert_eq!(threads(0), 32);
        assert_eq!(threads(256), 32);
        assert_eq!(threads(1024), 96);
        assert_eq!(threads(4096), 256);
        assert_eq!(threads(1 << 20), 256);
    }
}
