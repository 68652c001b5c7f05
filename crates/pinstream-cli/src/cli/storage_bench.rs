//! `bench --storage FILE`: in one run, over the same file, (1) its raw direct-read speed
//! (`O_DIRECT` sequential reads of large blocks into pinned memory, no device), (2)
//! pinstream's storage → device chain (the file streamed from storage through the staging
//! rings and uploaded; a kernel that reads each block and writes one byte back, so the chain
//! is upload-bound) and the common way as two baselines: (3) the file mapped (`mmap`) and each
//! block uploaded from the mapped pageable pages in file order, where the kernel's readahead
//! follows the faults (Windows: buffered reads into pageable memory), and (4) the same with
//! `madvise(MADV_RANDOM)` on the mapping and the blocks in a shuffled order, so that no
//! readahead follows a fault (unix only). The page cache is dropped for the file before each
//! (`posix_fadvise`), so none reads from memory what another left there.

use super::table;
use super::Failure;
use pinstream::backend::lanes::{copies_in_flight, HostView};
use pinstream::backend::opencl::{Context, Kernel, OpenCl};
use pinstream::backend::os::cache::{drop_cached, MappedFile};
use pinstream::engine::io::direct::DirectReader;
use pinstream::engine::io::{self, IoError};
use pinstream::engine::storage::{run_from_storage, staging_plan, StorageJob, StorageOptions};
use pinstream::engine::{BoundsCheck, DType, HostMemory, StreamOptions, Target, WorkSize};
use pinstream::host::{HostRegion, PinOptions};
use pinstream::units::Bytes;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
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
    /// How the baseline reads: the file mapped and read in file order ([`MMAP_SEQUENTIAL`]),
    /// or buffered reads where files cannot be mapped.
    pub baseline: &'static str,
    /// The baseline: GB/s.
    pub baseline_gbps: f64,
    /// The chain over the baseline.
    pub chain_over_baseline: f64,
    /// The second baseline, whose faults readahead cannot follow ([`MMAP_RANDOM`]); `None`
    /// where files cannot be mapped.
    pub random_baseline: Option<&'static str>,
    /// It: GB/s, over the blocks it read (at most [`RANDOM_BLOCKS`], in a shuffled order).
    pub random_baseline_gbps: Option<f64>,
    /// The chain over it.
    pub chain_over_random_baseline: Option<f64>,
    /// Fallbacks the chain took.
    pub notes: Vec<String>,
}

/// Refuses, before a device is opened and without opening it, what `bench --storage` cannot
/// measure: a path that is not a regular file (a FIFO would hold the open until a writer
/// came), or an empty one.
pub fn check(path: &Path) -> Result<(), Failure> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(not_a_file(path, io::kind_of(meta.file_type())));
    }
    if meta.len() == 0 {
        return Err(Failure::usage(format!(
            "{} is empty: pass a file with data to measure",
            path.display()
        )));
    }
    Ok(())
}

/// `bench --storage` names a FIFO, a device or a folder.
fn not_a_file(path: &Path, kind: &str) -> Failure {
    Failure::usage(format!(
        "bench --storage measures a regular file, and {} is {kind}: pass a file on the storage to measure (e.g. one written with `dd if=/dev/urandom of=FILE bs=1M count=1024`)",
        path.display()
    ))
}

/// A file error of the bench: a refused path as [`not_a_file`], the rest naming the file.
fn file_error(e: IoError) -> Failure {
    match e {
        IoError::NotRegular { path, kind, .. } => not_a_file(&path, kind),
        e @ (IoError::Open { .. } | IoError::Refused { .. }) => Failure::usage(e),
        e => Failure::run(e),
    }
}

/// Measures `path` on `ctx`'s device.
pub fn storage_bench(ctx: &Context, path: &Path) -> Result<StorageBench, Failure> {
    check(path)?;
    let reader = DirectReader::open_with(path, true, true).map_err(file_error)?;
    let len = reader.len() as usize;
    if len == 0 {
        return Err(Failure::usage(format!(
            "{} is empty: pass a file with data to measure",
            path.display()
        )));
    }
    let file = File::open(path).map_err(Failure::usage)?;
    let block = BLOCK.min(len.div_ceil(4096) * 4096);
    measuring("direct reads", path)?;
    drop_cached(&file, 0, len as u64);
    let direct = direct_reads(ctx, &reader, block)?;
    measuring("pinstream's chain", path)?;
    drop_cached(&file, 0, len as u64);
    let (chain, notes) = chain(ctx, path, len, block)?;
    measuring("the baseline", path)?;
    drop_cached(&file, 0, len as u64);
    let (baseline, base) = baseline(ctx, &file, len, block)?;
    measuring("the random baseline", path)?;
    drop_cached(&file, 0, len as u64);
    let random = random_baseline(ctx, &file, len, block)?;
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
        random_baseline: random.map(|_| MMAP_RANDOM),
        random_baseline_gbps: random,
        chain_over_random_baseline: random.map(|r| gbps(chain) / r.max(1e-9)),
        notes,
    })
}

/// Enters the phase of measuring `what` over `path` (a stop ends the process at once: the
/// bench writes nothing until it prints).
fn measuring(what: &str, path: &Path) -> Result<(), Failure> {
    let during = format!("while measuring {what} of {}", path.display());
    super::signals::phase(during, super::signals::Mode::Exit)
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
            .map_err(file_error)?;
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

/// The sequential mmap baseline: blocks read in file order, so the kernel's readahead
/// follows the faults (on a disk with readahead this is close to its sequential speed).
pub const MMAP_SEQUENTIAL: &str =
    "mmap + pageable copies, blocks in file order (readahead follows the faults)";
/// The mmap baseline whose faults readahead cannot follow: `madvise(MADV_RANDOM)` on the
/// mapping and the blocks in a shuffled order, so each fault reads the one page it touched.
pub const MMAP_RANDOM: &str = "mmap + pageable copies, MADV_RANDOM and blocks in shuffled order (no readahead: each fault reads its page; 1 GiB at most)";

/// Seconds for the common way: the file mapped and each block uploaded from the mapped pages
/// in file order (or, where files cannot be mapped, read buffered into pageable memory and
/// uploaded); its name.
fn baseline(
    ctx: &Context,
    file: &File,
    len: usize,
    block: usize,
) -> Result<(&'static str, f64), Failure> {
    let offsets: Vec<usize> = (0..len).step_by(block).collect();
    let (how, from) = match MappedFile::map(file) {
        Ok(m) => (MMAP_SEQUENTIAL, Pageable::Mapped(m)),
        Err(_) => (
            "buffered reads + pageable copies",
            Pageable::Read(file, vec![0u8; block]),
        ),
    };
    Ok((how, upload_blocks(ctx, len, block, &offsets, from)?))
}

/// Blocks [`random_baseline`] reads at most (1 GiB of 16 MiB blocks): page by page, a slow
/// disk takes minutes over a whole file of several GiB.
const RANDOM_BLOCKS: usize = 64;

/// GB/s of [`MMAP_RANDOM`]: the mapped file's blocks uploaded in a shuffled order (the same
/// every run; the first [`RANDOM_BLOCKS`] of it) with readahead off; `None` where files
/// cannot be mapped.
fn random_baseline(
    ctx: &Context,
    file: &File,
    len: usize,
    block: usize,
) -> Result<Option<f64>, Failure> {
    let Ok(m) = MappedFile::map(file) else {
        return Ok(None);
    };
    m.advise_random().map_err(Failure::run)?;
    let mut offsets: Vec<usize> = (0..len).step_by(block).collect();
    offsets.shuffle(&mut SmallRng::seed_from_u64(25));
    offsets.truncate(RANDOM_BLOCKS);
    let bytes: usize = offsets.iter().map(|&o| block.min(len - o)).sum();
    let secs = upload_blocks(ctx, len, block, &offsets, Pageable::Mapped(m))?;
    Ok(Some(bytes as f64 / secs.max(1e-9) / 1e9))
}

/// Where a baseline's blocks come from: a mapping of the file, or buffered reads of it into
/// pageable memory.
enum Pageable<'a> {
    Mapped(MappedFile),
    Read(&'a File, Vec<u8>),
}

impl Pageable<'_> {
    /// The `n` bytes at `off`.
    fn bytes(&mut self, off: usize, n: usize) -> std::io::Result<&[u8]> {
        match self {
            Pageable::Mapped(m) => Ok(&m.bytes()[off..off + n]),
            Pageable::Read(f, buf) => {
                pinstream::engine::io::read_chunk(f, off as u64, vec![&mut buf[..n]])?;
                Ok(&buf[..n])
            }
        }
    }
}

/// Seconds to upload the blocks of `block` bytes (of a file of `len`) at `offsets`, in that
/// order and one at a time, from `from`.
fn upload_blocks(
    ctx: &Context,
    len: usize,
    block: usize,
    offsets: &[usize],
    mut from: Pageable,
) -> Result<f64, Failure> {
    let dev = pinstream::backend::api::Device::allocate(ctx, block).map_err(Failure::run)?;
    let t = Instant::now();
    let copied = copies_in_flight::<OpenCl, _>(ctx, 1, |lanes| {
        for &off in offsets {
            let n = block.min(len - off);
            let view = HostView::reading(vec![from.bytes(off, n)?]);
            let up = lanes.upload(0, &dev, 0, &view, 0..n, &[]);
            for e in up.map_err(std::io::Error::other)? {
                lanes.wait(&e).map_err(std::io::Error::other)?;
            }
        }
        Ok::<_, std::io::Error>(())
    });
    copied.map_err(Failure::run)?.map_err(Failure::run)?;
    Ok(t.elapsed().as_secs_f64())
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
    let rows = rows.into_iter().chain(r.random_baseline_gbps.map(|g| {
        vec![
            MMAP_RANDOM.to_string(),
            format!("{g:.2}"),
            format!("{:.2}", g / r.direct_read_gbps.max(1e-9)),
        ]
    }));
    let mut out = format!(
        "{}: {} in blocks of {}\n",
        r.file,
        Bytes(r.bytes),
        Bytes(r.block as u64)
    );
    out += &table::render(
        &["path", "GB/s", "x direct reads"],
        &rows.collect::<Vec<_>>(),
    );
    out += &format!(
        "\npinstream's chain: {:.2}x the direct reads, {:.2}x {}\n",
        r.chain_gbps / r.direct_read_gbps.max(1e-9),
        r.chain_over_baseline,
        r.baseline
    );
    if let Some(x) = r.chain_over_random_baseline {
        out += &format!("pinstream's chain: {x:.2}x {MMAP_RANDOM}\n");
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    out
}
