//! `bench storage FILE`: in one run, over the same file, (1) its raw direct-read speed
//! (`O_DIRECT` sequential reads of large blocks into pinned memory, no device), (2)
//! pinstream's storage → device chain (the file streamed from storage through the staging
//! rings and uploaded; a kernel that reads each block and writes one byte back, so the chain
//! is upload-bound) and the common way as two baselines: (3) each block read through the page
//! cache into pageable memory in file order, where the kernel's readahead follows the reads,
//! and uploaded from there, and (4) the same with readahead off
//! (`posix_fadvise(POSIX_FADV_RANDOM)`), the blocks in a shuffled order and each read a page
//! at a time, as the faults of scattered reads of a mapped file fetch them (Linux only). The
//! page cache is dropped for the file before each (`posix_fadvise`), so none reads from memory
//! what another left there. Why reads and not a mapping: [`baseline`].

use super::flags::ReportFlags;
use super::signals::{self, Mode};
use super::{table, Failure};
use pinstream::backend::lanes::{copies_in_flight, HostView};
use pinstream::backend::opencl::{Context, Kernel, OpenCl};
use pinstream::backend::os::cache::{advise_random, drop_cached};
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

/// Arguments of `bench storage`.
#[derive(clap::Args)]
pub struct Args {
    /// The regular file to read.
    #[arg(value_name = "FILE")]
    file: std::path::PathBuf,
    /// Device index from `pinstream devices`.
    #[arg(long)]
    device: Option<usize>,
    #[command(flatten)]
    report: ReportFlags,
}

/// `bench storage FILE`: the file's three speeds, in one run.
pub fn run(a: Args) -> Result<(), Failure> {
    let outputs = a.report.prepare()?;
    check(&a.file)?;
    let (_, ctx) = super::device_sets::open_one(a.device)?;
    signals::phase("while measuring", Mode::Exit)?;
    let bar = super::report::spinner(a.report.json);
    bar.set_message(format!("measuring {}", a.file.display()));
    let report = storage_bench(&ctx, &a.file)?;
    bar.finish_and_clear();
    a.report.show(&outputs, &report, render)
}

/// Bytes per read and per block.
const BLOCK: usize = 16 << 20;

const SINK: &str = r#"
__kernel void sink(__global const uchar* x, __global uchar* y, ulong n) {
    if (get_global_id(0) == 0 && n > 0) y[0] = x[n - 1];
}
"#;

/// What `bench storage` measured.
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
    /// How the baseline reads: [`READ_SEQUENTIAL`], buffered reads of whole blocks in file
    /// order into pageable memory (nothing is mapped: [`baseline`] says why).
    pub baseline: &'static str,
    /// The baseline: GB/s.
    pub baseline_gbps: f64,
    /// The chain over the baseline.
    pub chain_over_baseline: f64,
    /// The second baseline, whose reads readahead cannot follow ([`READ_RANDOM`]); `None` off
    /// Linux, where pinstream cannot turn readahead off (`advise_random`).
    pub random_baseline: Option<&'static str>,
    /// It: GB/s, over the blocks it read (at most [`RANDOM_BLOCKS`], in a shuffled order).
    pub random_baseline_gbps: Option<f64>,
    /// The chain over it.
    pub chain_over_random_baseline: Option<f64>,
    /// Fallbacks the chain took.
    pub notes: Vec<String>,
}

/// Refuses, before a device is opened and without opening it, what `bench storage` cannot
/// measure: a path that is not a regular file (a FIFO would hold the open until a writer
/// came), or an empty one.
fn check(path: &Path) -> Result<(), Failure> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Failure::usage(format!("cannot open {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(not_a_file(path, io::kind_of(meta.file_type())));
    }
    if meta.len() == 0 {
        return Err(empty(path));
    }
    Ok(())
}

/// `bench storage` names an empty file.
fn empty(path: &Path) -> Failure {
    Failure::usage(format!(
        "{} is empty: pass a file with data to measure",
        path.display()
    ))
}

/// `bench storage` names a FIFO, a device or a folder.
fn not_a_file(path: &Path, kind: &str) -> Failure {
    Failure::usage(format!(
        "bench storage measures a regular file, and {} is {kind}: pass a file on the storage to measure (e.g. one written with `dd if=/dev/urandom of=FILE bs=1M count=1024`)",
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
fn storage_bench(ctx: &Context, path: &Path) -> Result<StorageBench, Failure> {
    check(path)?;
    let reader = DirectReader::open_with(path, true, true).map_err(file_error)?;
    let file = io::open_regular(path, "measure", "the bench reads a file at offsets");
    let file = Paged {
        path,
        file: file.map_err(file_error)?,
        len: reader.len(),
    };
    let len = usize::try_from(file.len)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| empty(path))?;
    let block = BLOCK.min(len.div_ceil(4096) * 4096);
    measuring("direct reads", &file)?;
    let direct = direct_reads(ctx, &reader, block)?;
    measuring("pinstream's chain", &file)?;
    let (chain, notes) = chain(ctx, path, len, block)?;
    measuring("the baseline", &file)?;
    let (baseline, base) = baseline(ctx, &file, block)?;
    measuring("the random baseline", &file)?;
    let random = random_baseline(ctx, &file, block)?;
    let gbps = |s: f64| len as f64 / s.max(1e-9) / 1e9;
    Ok(StorageBench {
        file: path.display().to_string(),
        bytes: file.len,
        block,
        direct_read_gbps: gbps(direct),
        chain_gbps: gbps(chain),
        chain_over_direct: direct / chain.max(1e-9),
        baseline,
        baseline_gbps: gbps(base),
        chain_over_baseline: base / chain.max(1e-9),
        random_baseline: random.map(|_| READ_RANDOM),
        random_baseline_gbps: random,
        chain_over_random_baseline: random.map(|r| gbps(chain) / r.max(1e-9)),
        notes,
    })
}

/// Enters the phase of measuring `what` over `file` (a stop ends the process at once: the
/// bench writes nothing until it prints), its pages dropped from the page cache first, so
/// that no measurement reads from memory what another left there.
fn measuring(what: &str, file: &Paged) -> Result<(), Failure> {
    let during = format!("while measuring {what} of {}", file.path.display());
    super::signals::phase(during, super::signals::Mode::Exit)?;
    drop_cached(&file.file, 0, file.len);
    Ok(())
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
        passes: 1,
        residency: pinstream::engine::Residency::Auto,
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

/// The sequential baseline: each block read into pageable memory in file order, so the
/// kernel's readahead follows the reads, then uploaded from there.
pub const READ_SEQUENTIAL: &str =
    "buffered reads + pageable copies, blocks in file order (readahead follows the reads)";
/// The baseline readahead cannot follow: `posix_fadvise(POSIX_FADV_RANDOM)` on the file, the
/// blocks in a shuffled order and each read one page at a time, so that each read fetches
/// the one page it asks for, as each fault of a mapped file under `MADV_RANDOM` does.
pub const READ_RANDOM: &str = "buffered reads of one page each + pageable copies, POSIX_FADV_RANDOM and blocks in shuffled order (no readahead: each read fetches its page, as a fault of a mapped file does; 1 GiB at most)";

/// Seconds for the common way: each block read (buffered) into pageable memory in file
/// order and uploaded from there; its name.
///
/// Reads, not a mapping of the file (`mmap`), which the first version measured: a file that
/// another process truncates kills a process touching the mapping past the new end with
/// SIGBUS, and a library may not install a handler for it. A read returns the end of the file
/// instead ([`io::read_exact_at`]: an error naming it). The disk sees the same requests: the
/// page cache's readahead serves reads in file order as it serves faults in file order, and
/// page-sized reads with readahead off ([`READ_RANDOM`]) fetch a page each, as faults under
/// `MADV_RANDOM` do; a read adds one copy from the page cache, a fault a page-table update.
fn baseline(ctx: &Context, file: &Paged, block: usize) -> Result<(&'static str, f64), Failure> {
    let offsets: Vec<u64> = file.blocks(block).collect();
    Ok((
        READ_SEQUENTIAL,
        upload_blocks(ctx, file, block, &offsets, None)?,
    ))
}

/// Blocks [`random_baseline`] reads at most (1 GiB of 16 MiB blocks): page by page, a slow
/// disk takes minutes over a whole file of several GiB.
const RANDOM_BLOCKS: usize = 64;

/// GB/s of [`READ_RANDOM`]: the file's blocks uploaded in a shuffled order (the same every
/// run; the first [`RANDOM_BLOCKS`] of it), each read a page at a time with readahead off;
/// `None` where readahead cannot be turned off ([`advise_random`]: Linux only).
fn random_baseline(ctx: &Context, file: &Paged, block: usize) -> Result<Option<f64>, Failure> {
    if advise_random(&file.file).is_err() {
        return Ok(None);
    }
    let mut offsets: Vec<u64> = file.blocks(block).collect();
    offsets.shuffle(&mut SmallRng::seed_from_u64(25));
    offsets.truncate(RANDOM_BLOCKS);
    let bytes: u64 = offsets
        .iter()
        .map(|&o| file.block_len(o, block) as u64)
        .sum();
    let page = Some(pinstream::backend::os::page_size());
    let secs = upload_blocks(ctx, file, block, &offsets, page)?;
    Ok(Some(bytes as f64 / secs.max(1e-9) / 1e9))
}

/// The measured file, read through the page cache into pageable memory.
struct Paged<'a> {
    path: &'a Path,
    file: File,
    len: u64,
}

impl Paged<'_> {
    /// The offsets of its blocks of `block` bytes.
    fn blocks(&self, block: usize) -> impl Iterator<Item = u64> {
        (0..self.len).step_by(block)
    }

    /// Bytes of the block at `off`: `block`, or what is left of the file.
    fn block_len(&self, off: u64, block: usize) -> usize {
        usize::try_from(self.len - off).map_or(block, |left| left.min(block))
    }

    /// Fills `buf` from `off`, in reads of `piece` bytes where given (else one read).
    fn read(&self, off: u64, buf: &mut [u8], piece: Option<usize>) -> Result<(), Failure> {
        let piece = piece.unwrap_or(buf.len()).max(1);
        let mut at = off;
        for part in buf.chunks_mut(piece) {
            io::read_exact_at(&self.file, self.path, at, part).map_err(file_error)?;
            at += part.len() as u64;
        }
        Ok(())
    }
}

/// Seconds to read the blocks of `block` bytes at `offsets` into pageable memory (in reads of
/// `piece` bytes where given) and upload each, in that order and one at a time.
fn upload_blocks(
    ctx: &Context,
    file: &Paged,
    block: usize,
    offsets: &[u64],
    piece: Option<usize>,
) -> Result<f64, Failure> {
    let dev = pinstream::backend::api::Device::allocate(ctx, block).map_err(Failure::run)?;
    let mut buf = vec![0u8; block];
    let t = Instant::now();
    let copied = copies_in_flight::<OpenCl, _>(ctx, 1, |lanes| {
        for &off in offsets {
            let n = file.block_len(off, block);
            file.read(off, &mut buf[..n], piece)?;
            let view = HostView::reading(vec![&buf[..n]]);
            let up = lanes.upload(0, &dev, 0, &view, 0..n, &[]);
            for e in up.map_err(Failure::run)? {
                lanes.wait(&e).map_err(Failure::run)?;
            }
        }
        Ok::<_, Failure>(())
    });
    copied.map_err(Failure::run)??;
    Ok(t.elapsed().as_secs_f64())
}

/// The report as text.
fn render(r: &StorageBench) -> String {
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
            READ_RANDOM.to_string(),
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
        out += &format!("pinstream's chain: {x:.2}x {READ_RANDOM}\n");
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    out
}
