//! Kernels over mapped pinned memory, through any API that has it ([`HostApi::mapped`]):
//! `doctor`'s kernel read and write bandwidth and the VRAM cost of a mapped allocation
//! ([`measure`]), and the launches the embedding-lookup demo makes ([`launch`]).

use crate::kernels::{mapped_word, Builtins};
use pinstream::backend::api::{Device, KernelOf, LaunchSize, Program};
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::{in_flight, HostMemory};
use pinstream::host::{HostApi, HostError, Pinned};
use serde::Serialize;
use std::time::Instant;

/// Work items of the streaming kernels (each walks the buffer grid-strided).
const ITEMS: usize = 1 << 16;

/// Why a kernel over mapped memory did not run.
#[derive(Debug, thiserror::Error)]
pub enum MappedError {
    /// The mapped memory was refused or failed (no mechanism, too large, ...).
    #[error(transparent)]
    Host(#[from] HostError),
    /// A built-in kernel did not build (a driver's compiler fault).
    #[error("the built-in kernel `{0}` does not build here: {1}")]
    Build(&'static str, String),
    /// A device call failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A kernel's result differs from the CPU's.
    #[error("{0}")]
    Mismatch(String),
}

/// `entry` of `source`, built on `device`; an error where the API has no such built-in.
pub fn kernel<A: HostApi>(
    device: &A::Device,
    source: Option<&str>,
    entry: &'static str,
) -> Result<KernelOf<A>, MappedError> {
    let source = source.ok_or_else(|| {
        MappedError::Build(
            entry,
            format!("{} has no built-in `{entry}` kernel", A::NAME),
        )
    })?;
    let program = device
        .build(source, "")
        .map_err(|e| MappedError::Build(entry, e.to_string()))?;
    program
        .kernel(entry)
        .map_err(|e| MappedError::Build(entry, e.to_string()))
}

/// Launches `kernel` over `global` work items with `buffers` and `values` at their
/// parameter indices, and waits for it: the seconds from launch to completion.
pub fn launch<A: HostApi>(
    device: &A::Device,
    kernel: &mut KernelOf<A>,
    buffers: &[(u32, &A::Buffer)],
    values: &[(u32, &[u8])],
    global: usize,
) -> Result<f64, MappedError> {
    let size = LaunchSize {
        global,
        local: None,
    };
    let ran = in_flight::<A, _>(device, kernel, 1, |lanes| {
        let start = Instant::now();
        let e = lanes.launch(0, buffers, values, size, &[])?;
        lanes.wait(&e)?;
        Ok::<_, A::Error>(start.elapsed().as_secs_f64())
    });
    let secs = ran.map_err(Into::<BackendError>::into)?;
    Ok(secs.map_err(Into::<BackendError>::into)?)
}

/// Mapped memory as `doctor` measures it.
#[derive(Debug, Clone, Serialize, Default)]
pub struct MappedReport {
    /// How kernels reach the memory in place (the zero-copy mechanism); `None` where the
    /// device has none ([`Self::unavailable`] says why).
    pub mechanism: Option<String>,
    /// Why nothing was measured, or what broke the measurement.
    pub unavailable: Option<String>,
    /// Bytes of the mapped allocation the kernels stream over.
    pub bytes: u64,
    /// A kernel reading the whole allocation across the bus, GB/s (median of the passes).
    pub read_gbps: Option<f64>,
    /// A kernel writing the whole allocation across the bus, GB/s (median of the passes).
    pub write_gbps: Option<f64>,
    /// Device memory in use after the allocation and its kernels less before, in bytes,
    /// where the device has a VRAM counter.
    pub vram_cost: Option<i64>,
    /// Every byte the write kernel wrote and the read kernel's sum were checked on the host.
    pub verified: bool,
}

/// Measures `bytes` of mapped memory on `device` with `repeats` timed passes each way.
/// Never fails: what stops it is the report's [`MappedReport::unavailable`].
pub fn measure<A: HostApi + Builtins>(
    device: &A::Device,
    bytes: usize,
    repeats: usize,
) -> MappedReport {
    let bytes = bytes / 16 * 16;
    let mut r = MappedReport {
        bytes: bytes as u64,
        ..MappedReport::default()
    };
    if let Err(e) = measure_into::<A>(device, repeats.max(1), &mut r) {
        r.unavailable = Some(e.to_string());
    }
    r
}

fn measure_into<A: HostApi + Builtins>(
    device: &A::Device,
    repeats: usize,
    r: &mut MappedReport,
) -> Result<(), MappedError> {
    let probe = A::vram(device);
    let before = probe.used();
    let memory = A::mapped(device, r.bytes as usize, false)?;
    r.mechanism = memory.zero_copy();
    let sums = A::mapped(device, ITEMS * 4, false)?;
    let (buf, out) = (first_buffer::<A>(&memory, r)?, A::device_buffer(&sums)?);
    let mut write = kernel::<A>(device, A::MAPPED_STREAM, "mapped_write")?;
    let mut read = kernel::<A>(device, A::MAPPED_STREAM, "mapped_read")?;
    let words = r.bytes / 16;
    let (n, salt) = (words.to_ne_bytes(), 0x5eed_u32.to_ne_bytes());
    // Untimed launches over nothing first: drivers that compile at the first launch (PoCL)
    // do it outside the passes.
    let none = 0u64.to_ne_bytes();
    launch::<A>(
        device,
        &mut write,
        &[(0, &buf)],
        &[(1, &none), (2, &salt)],
        ITEMS,
    )?;
    launch::<A>(
        device,
        &mut read,
        &[(0, &buf), (1, &out)],
        &[(2, &none)],
        ITEMS,
    )?;
    let mut times = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let w = launch::<A>(
            device,
            &mut write,
            &[(0, &buf)],
            &[(1, &n), (2, &salt)],
            ITEMS,
        )?;
        let rd = launch::<A>(
            device,
            &mut read,
            &[(0, &buf), (1, &out)],
            &[(2, &n)],
            ITEMS,
        )?;
        times.0.push(w);
        times.1.push(rd);
    }
    r.vram_cost = before.zip(probe.used()).map(|(b, a)| a as i64 - b as i64);
    r.write_gbps = Some(gbps(r.bytes, &mut times.0));
    r.read_gbps = Some(gbps(r.bytes, &mut times.1));
    drop((buf, out));
    r.verified = verify(&memory, r.bytes as usize, &sums, 0x5eed)?;
    Ok(())
}

/// The buffer over the start of `memory` that one kernel binding reaches: all of it where one
/// buffer covers it, else its first chunk (Vulkan: `maxStorageBufferRange`), whose bytes
/// `r` then counts.
fn first_buffer<A: HostApi>(
    memory: &A::HostMemory,
    r: &mut MappedReport,
) -> Result<A::Buffer, MappedError> {
    let (range, buf) = A::device_buffers(memory)?.swap_remove(0);
    r.bytes = r.bytes.min(range.len() as u64 / 16 * 16);
    Ok(buf)
}

/// GB/s of `bytes` in the median of `secs`.
fn gbps(bytes: u64, secs: &mut [f64]) -> f64 {
    secs.sort_by(f64::total_cmp);
    bytes as f64 / secs[secs.len() / 2].max(1e-9) / 1e9
}

/// Every word the write kernel wrote into the first `bytes` of `memory`, and the XOR of the
/// read kernel's `sums` against the XOR of every 32-bit word of them.
fn verify<M: HostMemory>(
    memory: &M,
    bytes: usize,
    sums: &M,
    salt: u32,
) -> Result<bool, MappedError> {
    let range = |m: &M| 0..m.len();
    let whole = memory.slices(0..bytes).map_err(host_range)?;
    let mut xor = 0u32;
    let mut k = 0u64;
    for slice in whole {
        for word in slice.chunks_exact(16) {
            let want = mapped_word(k, salt);
            for (c, w) in word.chunks_exact(4).zip(want) {
                let v = u32::from_ne_bytes(c.try_into().expect("4 bytes"));
                if v != w {
                    let at = k * 16;
                    return Err(MappedError::Mismatch(format!("the write kernel left byte {at} of mapped memory unlike the CPU's reference")));
                }
                xor ^= v;
            }
            k += 1;
        }
    }
    let got = sums.slices(range(sums)).map_err(host_range)?;
    let kernel_xor = got
        .iter()
        .flat_map(|s| s.chunks_exact(4))
        .fold(0u32, |a, c| {
            a ^ u32::from_ne_bytes(c.try_into().expect("4 bytes"))
        });
    if kernel_xor != xor {
        return Err(MappedError::Mismatch(format!(
            "the read kernel's XOR of mapped memory is {kernel_xor:#x}, the CPU's {xor:#x}"
        )));
    }
    Ok(true)
}

fn host_range(e: pinstream::backend::lanes::OutOfRange) -> MappedError {
    MappedError::Host(e.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::empty::HeapMemory;

    /// Memory as the write kernel leaves it, and the read kernel's sums of it (`items`).
    fn written(words: u64, salt: u32, items: usize) -> (HeapMemory, HeapMemory) {
        let m: Vec<u8> = (0..words)
            .flat_map(|k| mapped_word(k, salt))
            .flat_map(u32::to_ne_bytes)
            .collect();
        let mut sums = vec![0u32; items];
        for (k, w) in m.chunks_exact(16).enumerate() {
            let word = w
                .chunks_exact(4)
                .fold(0, |a, c| a ^ u32::from_ne_bytes(c.try_into().unwrap()));
            sums[k % items] ^= word;
        }
        let sums = sums.into_iter().flat_map(u32::to_ne_bytes).collect();
        (HeapMemory(m), HeapMemory(sums))
    }

    #[test]
    fn the_check_catches_a_wrong_word_and_a_wrong_sum() {
        let (mut m, mut sums) = written(1000, 7, 64);
        assert!(verify(&m, m.len(), &sums, 7).unwrap());
        sums.0[5] ^= 1;
        let e = verify(&m, m.len(), &sums, 7).unwrap_err().to_string();
        assert!(e.contains("the read kernel's XOR"), "{e}");
        sums.0[5] ^= 1;
        m.0[16 * 300 + 2] ^= 0x80;
        let e = verify(&m, m.len(), &sums, 7).unwrap_err().to_string();
        assert!(e.contains("byte 4800 of mapped memory"), "{e}");
    }
}
