//! `demo --workload embedding`: an embedding-bag lookup over a table in mapped pinned memory,
//! the pattern recommenders and GNNs use. Bags of random row ids; one kernel sums each bag's
//! rows, reading them in place across the bus (no copy of the table into VRAM); a sample of
//! the bags checked against the CPU. Written once over [`HostApi`].
//!
//! The table is read through the buffers [`HostApi::device_buffers`] gives: one on OpenCL and
//! CUDA, one per chunk of at most one binding (`maxStorageBufferRange`) on Vulkan, whose kernel
//! takes four (16 GiB of table on NVIDIA). Chunks are whole rows (a multiple of the page or
//! import alignment, and a row is 512 bytes); a batch is one launch per
//! [`Builtins::EMBEDDING_TABLES`] buffers: each sums its bags' rows that lie in its buffers, the
//! first writing the sums and the others adding to them ([`EMBEDDING_BAG`]).

#[cfg(doc)]
use crate::kernels::EMBEDDING_BAG;
use crate::kernels::{embedding_bag_ref, Builtins};
use crate::tools::mapped::{kernel, launch, MappedError};
use pinstream::backend::api::{Device, KernelOf};
use pinstream::backend::lanes::HostMemory;
use pinstream::host::{HostApi, Pinned};
use pinstream::units::Bytes;
use serde::Serialize;
use std::ops::Range;
use std::time::Instant;

/// The workload's shape.
#[derive(Debug, Clone, Serialize)]
pub struct EmbeddingConfig {
    /// Bytes of the table (whole rows of `dim` floats).
    pub table_bytes: usize,
    /// Floats per row.
    pub dim: usize,
    /// Row ids per bag.
    pub bag: usize,
    /// Bags per batch (one kernel launch).
    pub bags: usize,
    /// Timed batches, each with fresh ids.
    pub batches: usize,
    /// Bags of each batch checked against the CPU.
    pub checked_per_batch: usize,
    /// Seed of the row ids.
    pub seed: u64,
    /// How the table was sized.
    pub sizing: String,
}

impl EmbeddingConfig {
    /// The shape for a table of about `table_bytes` on a device whose largest mapped table
    /// is `max_alloc` ([`HostApi::largest_mapped`]: one buffer, where the table is one): 128
    /// floats a row, 64 ids a bag, 16,384 bags a batch, 8 batches, 64 bags of each checked.
    pub fn new(table_bytes: usize, max_alloc: u64, sizing: String, seed: u64) -> Self {
        let dim = 128;
        let row = dim * 4;
        let fit = table_bytes.min(max_alloc as usize);
        let sizing = match fit < table_bytes {
            true => format!("{sizing}; cut to the device's largest buffer, {} (CL_DEVICE_MAX_MEM_ALLOC_SIZE: the table is one buffer)", Bytes(max_alloc)),
            false => sizing,
        };
        EmbeddingConfig {
            table_bytes: fit / row * row,
            dim,
            bag: 64,
            bags: 16384,
            batches: 8,
            checked_per_batch: 64,
            seed,
            sizing,
        }
    }

    /// The same with `bags` bags a batch, each checked where there are fewer than
    /// [`Self::new`]'s 64 checked a batch.
    pub fn with_bags(self, bags: usize) -> Self {
        EmbeddingConfig {
            bags,
            checked_per_batch: self.checked_per_batch.min(bags),
            ..self
        }
    }

    /// Rows of the table.
    pub fn rows(&self) -> usize {
        self.table_bytes / (self.dim * 4)
    }
}

/// What the workload did.
#[derive(Debug, Clone, Serialize)]
pub struct EmbeddingReport {
    /// The API that ran it.
    pub api: String,
    /// The device.
    pub device: String,
    /// How the kernel reached the table in place (the zero-copy mechanism).
    pub mechanism: String,
    /// Buffers the table was read through, one launch each per batch (Vulkan: one per
    /// binding of at most `maxStorageBufferRange`; elsewhere one).
    pub table_buffers: usize,
    /// The shape.
    pub config: EmbeddingConfig,
    /// Seconds to allocate the table and fill it.
    pub fill_s: f64,
    /// Kernel seconds of all batches (launch to completion, by the host clock).
    pub kernel_s: f64,
    /// Rows summed per second.
    pub rows_per_s: f64,
    /// Table bytes the kernels read across the bus per second (rows × row bytes; the ids and
    /// the sums, 1/128 and 1/64 of that, are not counted), GB/s.
    pub read_gbps: f64,
    /// Device memory in use after the table and its kernels less before, where counted.
    pub vram_cost: Option<i64>,
    /// Where the VRAM figure comes from.
    pub vram_source: String,
    /// Bags checked against the CPU.
    pub checked_bags: usize,
    /// Of them, bags whose sums differ.
    pub mismatched_bags: usize,
}

/// The table, the ids and the sums in mapped memory, and their buffers.
struct Mapped<A: HostApi> {
    /// The table's buffers, each with the rows it holds.
    table_bufs: Vec<(Range<usize>, A::Buffer)>,
    /// The ids' and the sums' buffers.
    bufs: [A::Buffer; 2],
    table: A::HostMemory,
    ids: A::HostMemory,
    out: A::HostMemory,
}

/// Runs the workload on `device`.
pub fn run<A: HostApi + Builtins>(
    device: &A::Device,
    cfg: &EmbeddingConfig,
) -> Result<EmbeddingReport, MappedError> {
    let probe = A::vram(device);
    let before = probe.used();
    let start = Instant::now();
    let mut m = allocate::<A>(device, cfg)?;
    fill_table(&mut m.table, cfg.dim)?;
    let fill_s = start.elapsed().as_secs_f64();
    let mut k = kernel::<A>(device, A::EMBEDDING_BAG, "embedding_bag")?;
    let (bag, dim) = (
        (cfg.bag as u32).to_ne_bytes(),
        (cfg.dim as u32).to_ne_bytes(),
    );
    let global = cfg.bags * cfg.dim;
    let (mut kernel_s, mut checked, mut bad) = (0.0, 0, 0);
    for batch in 0..=cfg.batches {
        draw_ids(&mut m.ids, cfg, batch as u64)?;
        // Batch 0 is untimed and unchecked with no bags: drivers that compile at the first
        // launch do it there.
        let bags = if batch == 0 { 0u64 } else { cfg.bags as u64 };
        let values = [&bag[..], &dim[..], &bags.to_ne_bytes()[..]];
        let t = launch_chunks::<A>(device, &mut k, &m, values, global)?;
        if batch > 0 {
            kernel_s += t;
            let (c, b) = check(&m, cfg)?;
            (checked, bad) = (checked + c, bad + b);
        }
    }
    let vram_cost = before.zip(probe.used()).map(|(b, a)| a as i64 - b as i64);
    let rows = (cfg.batches * cfg.bags * cfg.bag) as f64;
    Ok(EmbeddingReport {
        api: A::NAME.into(),
        device: device.describe(),
        mechanism: m.table.zero_copy().unwrap_or_default(),
        table_buffers: m.table_bufs.len(),
        config: cfg.clone(),
        fill_s,
        kernel_s,
        rows_per_s: rows / kernel_s.max(1e-12),
        read_gbps: rows * (cfg.dim * 4) as f64 / kernel_s.max(1e-12) / 1e9,
        vram_cost,
        vram_source: probe.source().describe().to_string(),
        checked_bags: checked,
        mismatched_bags: bad,
    })
}

/// One batch: a launch over each [`Builtins::EMBEDDING_TABLES`] of the table's buffers (the
/// last repeated where fewer are left) with `values` (bag, dim, bags), the first row and the
/// rows of each buffer; the seconds of them all.
fn launch_chunks<A: HostApi + Builtins>(
    device: &A::Device,
    k: &mut KernelOf<A>,
    m: &Mapped<A>,
    values: [&[u8]; 3],
    global: usize,
) -> Result<f64, MappedError> {
    let tables = A::EMBEDDING_TABLES.max(1);
    let mut secs = 0.0;
    for group in m.table_bufs.chunks(tables) {
        let rows = &group[0].0;
        let (first, count) = (
            (rows.start as u32).to_ne_bytes(),
            (rows.len() as u32).to_ne_bytes(),
        );
        let last = &group[group.len() - 1].1;
        let mut buffers: Vec<(u32, &A::Buffer)> = (0..tables)
            .map(|j| (j as u32, group.get(j).map_or(last, |b| &b.1)))
            .collect();
        let t = tables as u32;
        buffers.extend([(t, &m.bufs[0]), (t + 1, &m.bufs[1])]);
        let v = [values[0], values[1], values[2], &first[..], &count[..]];
        let values: Vec<(u32, &[u8])> = (t + 2..).zip(v).collect();
        secs += launch::<A>(device, k, &buffers, &values, global)?;
    }
    Ok(secs)
}

/// The table, the ids and the sums, each mapped, with their buffers.
fn allocate<A: HostApi>(
    device: &A::Device,
    cfg: &EmbeddingConfig,
) -> Result<Mapped<A>, MappedError> {
    let table = A::mapped(device, cfg.table_bytes, false)?;
    let ids = A::mapped(device, cfg.bags * cfg.bag * 4, false)?;
    let out = A::mapped(device, cfg.bags * cfg.dim * 4, false)?;
    let table_bufs = A::device_buffers(&table)?;
    let table_bufs = row_ranges(table_bufs, cfg.dim * 4)?;
    let bufs = [A::device_buffer(&ids)?, A::device_buffer(&out)?];
    Ok(Mapped {
        table_bufs,
        bufs,
        table,
        ids,
        out,
    })
}

/// The rows each of the table's buffers holds, from the bytes it covers; an error where a
/// buffer does not hold whole rows of `row` bytes.
fn row_ranges<B>(
    bufs: Vec<(Range<usize>, B)>,
    row: usize,
) -> Result<Vec<(Range<usize>, B)>, MappedError> {
    bufs.into_iter()
        .map(
            |(bytes, b)| match bytes.start % row == 0 && bytes.end % row == 0 {
                true => Ok((bytes.start / row..bytes.end / row, b)),
                false => Err(MappedError::Mismatch(format!(
                "the table's buffer over bytes {bytes:?} does not hold whole rows of {row} bytes"
            ))),
            },
        )
        .collect()
}

/// The value of column `d` of row `r`: small multiples of 1/64, so sums of 64 are exact.
fn value(r: usize, d: usize) -> f32 {
    ((r * 131 + d * 7) % 1021) as f32 / 64.0 - 8.0
}

/// Fills the table, one thread per core.
fn fill_table<M: HostMemory>(table: &mut M, dim: usize) -> Result<(), MappedError> {
    let len = table.len();
    let row = dim * 4;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut slices = table.slices_mut(0..len).map_err(host_range)?;
    let mut offset = 0;
    for slice in slices.iter_mut() {
        let per = slice.len().div_ceil(threads).div_ceil(row) * row;
        std::thread::scope(|s| {
            for (k, part) in slice.chunks_mut(per.max(row)).enumerate() {
                let first = (offset + k * per) / 4;
                s.spawn(move || {
                    for (j, c) in part.chunks_exact_mut(4).enumerate() {
                        let i = first + j;
                        c.copy_from_slice(&value(i / dim, i % dim).to_ne_bytes());
                    }
                });
            }
        });
        offset += slice.len();
    }
    Ok(())
}

/// Random row ids for `batch` (splitmix64 of the seed, the batch and the index).
fn draw_ids<M: HostMemory>(
    ids: &mut M,
    cfg: &EmbeddingConfig,
    batch: u64,
) -> Result<(), MappedError> {
    let len = ids.len();
    let rows = cfg.rows() as u64;
    let mut n = 0u64;
    for slice in ids.slices_mut(0..len).map_err(host_range)? {
        for c in slice.chunks_exact_mut(4) {
            let id = splitmix(cfg.seed ^ (batch << 40) ^ n) % rows;
            c.copy_from_slice(&(id as u32).to_ne_bytes());
            n += 1;
        }
    }
    Ok(())
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `cfg.checked_per_batch` bags, spread over the batch, against the CPU: (checked, bad).
fn check<A: HostApi>(m: &Mapped<A>, cfg: &EmbeddingConfig) -> Result<(usize, usize), MappedError> {
    let floats = |mem: &A::HostMemory| -> Result<Vec<u8>, MappedError> {
        let s = mem.slices(0..mem.len()).map_err(host_range)?;
        Ok(s.concat())
    };
    let (ids, out) = (floats(&m.ids)?, floats(&m.out)?);
    let table = m.table.slices(0..m.table.len()).map_err(host_range)?;
    let n = cfg.checked_per_batch.min(cfg.bags);
    let mut bad = 0;
    for k in 0..n {
        let b = k * cfg.bags / n;
        let bag_ids: Vec<u32> = ids[b * cfg.bag * 4..(b + 1) * cfg.bag * 4]
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let want = reference(&table, &bag_ids, cfg.dim);
        let got = out[b * cfg.dim * 4..(b + 1) * cfg.dim * 4].chunks_exact(4);
        let got: Vec<f32> = got
            .map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes")))
            .collect();
        bad += usize::from(got != want);
    }
    Ok((n, bad))
}

/// The CPU's sums of the rows `ids` of the table's bytes, in `slices`.
fn reference(slices: &[&[u8]], ids: &[u32], dim: usize) -> Vec<f32> {
    let row = dim * 4;
    let rows: Vec<f32> = ids
        .iter()
        .flat_map(|&id| {
            let bytes = bytes_at(slices, id as usize * row, row);
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_ne_bytes(c.try_into().expect("4 bytes")))
                .collect::<Vec<_>>()
        })
        .collect();
    let local: Vec<u32> = (0..ids.len() as u32).collect();
    embedding_bag_ref(&rows, &local, dim)
}

/// `len` bytes at `at` of the memory whose consecutive pieces are `slices`.
fn bytes_at(slices: &[&[u8]], mut at: usize, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    for s in slices {
        if at >= s.len() {
            at -= s.len();
            continue;
        }
        let take = (len - out.len()).min(s.len() - at);
        out.extend_from_slice(&s[at..at + take]);
        at = 0;
        if out.len() == len {
            break;
        }
    }
    out
}

fn host_range(e: pinstream::backend::lanes::OutOfRange) -> MappedError {
    MappedError::Host(e.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_cut_to_the_largest_buffer_in_whole_rows_and_says_so() {
        let c = EmbeddingConfig::new(10 << 30, (1 << 30) + 100, "10 GiB".into(), 1);
        assert_eq!(c.table_bytes, 1 << 30);
        assert!(
            c.sizing.contains("cut to the device's largest buffer"),
            "{}",
            c.sizing
        );
        let c = EmbeddingConfig::new(1000, 1 << 30, "small".into(), 1);
        assert_eq!(
            (c.table_bytes, c.rows(), c.sizing.as_str()),
            (512, 1, "small")
        );
    }

    #[test]
    fn the_reference_sums_each_column_of_the_bags_rows() {
        let dim = 2;
        let table: Vec<u8> = [1.0f32, 2.0, 10.0, 20.0, 100.0, 200.0]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        assert_eq!(reference(&[&table], &[2, 0, 2], dim), vec![201.0, 402.0]);
        // The same table in two pieces, split inside row 1.
        let (a, b) = table.split_at(12);
        assert_eq!(reference(&[a, b], &[1, 2], dim), vec![110.0, 220.0]);
    }

    #[test]
    fn the_table_buffers_hold_whole_rows() {
        let r = row_ranges(vec![(0..1024, 'a'), (1024..1536, 'b')], 512).unwrap();
        assert_eq!(r, vec![(0..2, 'a'), (2..3, 'b')]);
        let e = row_ranges(vec![(0..1000, 'a')], 512).unwrap_err();
        assert!(e.to_string().contains("whole rows of 512 bytes"), "{e}");
    }
}
