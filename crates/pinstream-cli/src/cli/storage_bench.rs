//! `bench --storage FILE`: in one run, over the same file, (1) its raw direct-read speed
//! (`O_DIRECT` sequential reads of large blocks into pinned memory, no device), (2)
//! pinstream's storage → device chain (the file streamed from storage through the staging
//! rings and uploaded; a kernel that reads each block and writes one byte back, so the chain
//! is upload-bound) and (3) the common way as the baseline: the file mapped (`mmap`) and each
//! block uploaded from the mapped pageable pages (Windows: buffered reads into pageable
//! memory). The page cache is dropped for the file before each (`posix_fadvise`), so none
//! reads from memory what another left there.

use super::table;
use super::Failure;
use pinstream::backend::lanes::{copies_in_flight, HostView};
use pinstream::backend::opencl::{Context, Kernel, OpenCl};
use pinstream::backend::os::cache::{drop_cached, MappedFile};
use pinstream::engine::io::direct::DirectReader;
use pinstream::engine::storage::{run_from_storage, staging_plan, StorageJob, StorageOptions};
use pinstream::engine::{BoundsCheck, DType, HostMemory, StreamOptions, Target, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use pinstream::units::Bytes;
use serde::Serialize;
use std::fs::File;
use std::path::Path;
use std::time::Instant;

/// Bytes per read and per block.
const BLOCK: usize = 16 << 20;

const SINK: &str = r#"
__kernel void sink(__global const uchar* x, __global uchar* y, ulong n) {
    if (get_global_id(0) == 0 && n > 0) y[0] = x[n - 1];
}
"#;

/// What `bench --storage` measured.
#[derive(Debug, Serialize)]
pub struct StorageBench {
    /// The file.
    pub file: String,
    /// Its bytes.
    pub bytes: u64,
    /// Bytes per read and per block.
    pub block: usize,
    /// The file read past the page cache, no device: GB/s.
    pub direct_read_gbps: f64,
    /// Storage → device through pinstream's rings: GB/s.
    pub chain_gbps: f64,
    /// The chain over the raw direct reads.
    pub chain_over_direct: f64,
    /// How the baseline reads: `mmap + pageable copies`, or buffered reads where files cannot
    /// be mapped.
    pub baseline: &'static str,
    /// The baseline: GB/s.
    pub baseline_gbps: f64,
    /// The chain over the baseline.
    pub chain_over_baseline: f64,
    /// Fallbacks the chain took.
    pub notes: Vec<String>,
}

/// Measures `path` on `ctx`'s device.
pub fn storage_bench(ctx: &Context, path: &Path) -> Result<StorageBench, Failure> {
    let reader = DirectReader::open_with(path, true, true).map_err(Failure::usage)?;
    let len = reader.len() as usize;
    if len == 0 {
        return Err(Failure::usage(format!(
            "{} is empty: pass a file with data to measure",
            path.display()
        )));
    }
    let file = File::open(path).map_err(Failure::usage)?;
    let block = BLOCK.min(len.div_ceil(4096) * 4096);
    drop_cached(&file, 0, len as u64);
    let direct = direct_reads(ctx, &reader, block)?;
    drop_cached(&file, 0, len as u64);
    let (chain, notes) = chain(ctx, path, len, block)?;
    drop_cached(&file, 0, len as u64);
    let (baseline, base) = baseline(ctx, &file, len, block)?;
    let gbps = |s: f64| len as f64 / s.max(1e-9) / 1e9;
    Ok(StorageBench {
        file: path.display().to_string(),
        bytes: len as u64,
        block,
        direct_read_gbps: gbps(direct),
        chain_gbps: gbps(chain),
        chain_over_direct: direct / chain.max(1e-9),
        baseline,
        baseline_gbps: gbps(base),
        chain_over_baseline: base / chain.max(1e-9),
        notes,
    })
}

/// Seconds to read the file sequentially past the page cache into pinned memory.
fn direct_reads(ctx: &Context, reader: &DirectReader, block: usize) -> Result<f64, Failure> {
    let mut buf = HostRegion::new(ctx, block, &PinOptions::default()).map_err(Failure::run)?;
    let len = reader.len() as usize;
    let t = Instant::now();
    for off in (0..len).step_by(block) {
        let n = block.min(len - off);
        let mut slices = buf.slices_mut(0..n).map_err(Failure::run)?;
        reader
            .read_at(off as u64, &mut slices)
            .map_err(Failure::run)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// Seconds for pinstream's storage → device chain over the file; its fallbacks.
fn chain(
    ctx: &Context,
    path: &Path,
    len: usize,
    block: usize,
) -> Result<(f64, Vec<String>), Failure> {
    let program = ctx.build_program(SINK, "").map_err(Failure::run)?;
    let mut kernel: Kernel = program.kernel("sink").map_err(Failure::run)?;
    let opts = StreamOptions {
        dtype: DType::U8,
        out_dtype: DType::U8,
        block_bytes: block,
        in_per_out: block,
        slots: None,
        vram_budget: 8 * block as u64,
        work: WorkSize {
            per_output: true,
            items_per: 1,
            local: None,
        },
        sequential: false,
        stop: Some(super::stop_flag()),
        check_bounds: BoundsCheck::Off,
    };
    let s = StorageOptions::default();
    let plan = staging_plan(len, false, &opts, &s).map_err(Failure::run)?;
    let pin = |n| HostRegion::new(ctx, n, &PinOptions::default()).map_err(Failure::run);
    let (mut input, mut output) = (pin(plan.input_bytes)?, pin(plan.output_bytes)?);
    let job = StorageJob {
        inputs: vec![path.to_path_buf()],
        in_place: false,
        output: None,
        residents: Vec::new(),
        args: Vec::new(),
    };
    let staging: Vec<&mut dyn HostMemory> = vec![&mut input, &mut output];
    let t = Instant::now();
    let target = &mut Target::new(ctx, &mut kernel);
    let r = run_from_storage(target, job, staging, &opts, &s, &|_| {}).map_err(Failure::run)?;
    Ok((t.elapsed().as_secs_f64(), r.notes))
}

/// Seconds for the common way: the file mapped and each block uploaded from the mapped pages
/// (or, where files cannot be mapped, read buffered into pageable memory and uploaded).
fn baseline(
    ctx: &Context,
    file: &File,
    len: usize,
    block: usize,
) -> Result<(&'static str, f64), Failure> {
    let dev = pinstream::backend::api::Device::allocate(ctx, block).map_err(Failure::run)?;
    let mapped = MappedFile::map(file);
    let mut pageable = vec![0u8; if mapped.is_ok() { 0 } else { block }];
    let t = Instant::now();
    let copied = copies_in_flight::<OpenCl, _>(ctx, 1, |lanes| {
        for off in (0..len).step_by(block) {
            let n = block.min(len - off);
            let bytes: &[u8] = match &mapped {
                Ok(m) => &m.bytes()[off..off + n],
                Err(_) => {
                    pinstream::engine::io::read_chunk(file, off as u64, vec![&mut pageable[..n]])?;
                    &pageable[..n]
                }
            };
            let view = HostView::reading(vec![bytes]);
            for e in lanes
                .upload(0, &dev, 0, &view, 0..n, &[])
                .map_err(std::io::Error::other)?
            {
                lanes.wait(&e).map_err(std::io::Error::other)?;
            }
        }
        Ok::<_, std::io::Error>(())
    });
    copied.map_err(Failure::run)?.map_err(Failure::run)?;
    let how = if mapped.is_ok() {
        "mmap + pageable copies"
    } else {
        "buffered reads + pageable copies"
    };
    Ok((how, t.elapsed().as_secs_f64()))
}

/// The report as text.
pub fn render(r: &StorageBench) -> String {
    let rows = vec![
        vec![
            "direct reads (O_DIRECT, no device)".into(),
            format!("{:.2}", r.direct_read_gbps),
            "1.00".into(),
        ],
        vec![
            "pinstream storage -> device".into(),
            format!("{:.2}", r.chain_gbps),
            format!("{:.2}", r.chain_gbps / r.direct_read_gbps.max(1e-9)),
        ],
        vec![
            r.baseline.to_string(),
            format!("{:.2}", r.baseline_gbps),
            format!("{:.2}", r.baseline_gbps / r.direct_read_gbps.max(1e-9)),
        ],
    ];
    let mut out = format!(
        "{}: {} in blocks of {}\n",
        r.file,
        Bytes(r.bytes),
        Bytes(r.block as u64)
    );
    out += &table::render(&["path", "GB/s", "x direct reads"], &rows);
    out += &format!(
        "\npinstream's chain: {:.2}x the direct reads, {:.2}x {}\n",
        r.chain_gbps / r.direct_read_gbps.max(1e-9),
        r.chain_gbps / r.baseline_gbps.max(1e-9),
        r.baseline
    );
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    out
}
