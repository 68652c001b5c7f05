//! `pinstream bench gather`: scattered pieces moved both ways by every path
//! (`tools::gather`), and its table.

use super::dispatch::ApiName;
use super::flags::{ReportFlags, VkFlags};
use super::signals::{self, Mode};
use super::{table, Failure};
use pinstream::gather::GatherOptions;
use pinstream::units::Bytes;
use pinstream_lab::tools::bench::parse_sizes;
use pinstream_lab::tools::gather::{GatherReport, Goals, Row, Shape};

/// Arguments of `bench gather`.
#[derive(clap::Args)]
pub struct Args {
    /// Device index from `pinstream devices` (with --api vulkan, in Vulkan's own list).
    #[arg(long)]
    device: Option<usize>,
    /// both (the default): pinstream's batch copies through OpenCL beside OpenCL's own calls,
    /// with CUDA's on the same GPU where CUDA is there; opencl: the same without CUDA's;
    /// vulkan: through Vulkan beside Vulkan's own calls and CUDA's, on the Vulkan device
    /// --device names.
    #[arg(long, default_value = "both", value_parser = ApiName::parser(&[ApiName::Both, ApiName::Opencl, ApiName::Vulkan]))]
    api: ApiName,
    #[command(flatten)]
    vk: VkFlags,
    /// How many pieces.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=16_777_216))]
    pieces: u64,
    /// Bytes per piece (e.g. 4KiB, 256, 64KiB).
    #[arg(long, default_value = "4KiB")]
    piece_size: String,
    /// Piece bytes per batch of pinstream's gather (OpenCL: two stages of it are pinned, and
    /// larger moves are cut into pipelined batches; other APIs: one staging of it, a batch at
    /// a time).
    #[arg(long, default_value = "16MiB")]
    staging: String,
    /// The seed of the offsets and the data.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs per row; figures are their median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    repeat: u64,
    #[command(flatten)]
    report: ReportFlags,
}

/// `bench gather`: the pieces both ways, every path, one table.
pub fn run(a: Args) -> Result<(), Failure> {
    let outputs = a.report.prepare()?;
    let (shape, staging) = shape(&a)?;
    signals::phase("while measuring", Mode::Exit)?;
    let bar = super::report::spinner(a.report.json);
    bar.set_message("moving scattered pieces");
    let report = super::bench_own::gather(a.api, &a.vk.options(), a.device, (shape, staging))?;
    bar.finish_and_clear();
    a.report.show(&outputs, &report, render)
}

/// The shape and staging the flags ask for.
fn shape(a: &Args) -> Result<(Shape, GatherOptions), Failure> {
    let one = |flag: &str, s: &str| match parse_sizes(s).as_deref() {
        Ok([one]) => Ok(*one),
        _ => Err(Failure::usage(format!(
            "invalid {flag} {s}: give one size such as 4KiB or 256"
        ))),
    };
    let piece_size = one("--piece-size", &a.piece_size)?;
    let staging = GatherOptions::for_capacity(one("--staging", &a.staging)?);
    let shape = Shape {
        pieces: a.pieces as usize,
        piece_size,
        seed: a.seed,
        repeat: a.repeat as usize,
    };
    Ok((shape, staging))
}

fn cells(r: &Row) -> Vec<String> {
    vec![
        r.direction.into(),
        r.api.into(),
        r.path.into(),
        format!("{:.1}", r.total_us),
        format!("{:.2}", r.gbps),
        format!("{:.3}", r.us_per_piece),
        r.vs_cuda_loop.map_or("-".into(), |x| format!("{x:.2}x")),
        r.host_copy_us.map_or("-".into(), |x| format!("{x:.1}")),
    ]
}

/// Where a gather row's time went: host (plan, copy, the call) and device (by profiling).
fn breakdown(r: &Row) -> Option<String> {
    let (plan, copy, call) = (r.plan_us?, r.host_copy_us?, r.call_us?);
    let mut line = format!(
        "{} {}: {} batches; host: plan {plan:.1} µs, copy {copy:.1} µs, call {call:.1} µs of {:.1}",
        r.direction,
        r.api,
        r.batches.unwrap_or(0),
        r.total_us
    );
    if let Some(d) = &r.device {
        line += &format!(
            "; device (one profiled call): DMA {:.1} µs in {}, ",
            d.dma.1 * 1e6,
            d.dma.0
        );
        line += &match d.kernels {
            Some((n, s)) => format!("kernels {:.1} µs in {n}, ", s * 1e6),
            None => "kernels not profiled, ".into(),
        };
        line += &format!("span {:.1} µs", d.span_s * 1e6);
    }
    Some(line + "\n")
}

fn goals(dir: &str, g: &Goals) -> String {
    let show = |x: Option<f64>, f: &dyn Fn(f64) -> String| x.map_or("not measured".into(), f);
    format!(
        "{dir}: gather / one-way peak {} (goal >= 50%); gather / CUDA per-piece loop {} (goal >= 10x); gather / cuMemcpyBatchAsync {}\n",
        show(g.of_peak, &|x| format!("{:.0}%", x * 100.0)),
        show(g.vs_cuda_loop, &|x| format!("{x:.1}x")),
        show(g.vs_cuda_batch, &|x| format!("{x:.2}x")),
    ) + &format!(
        "{dir}: zero-copy gather / one-way peak {} (goal >= 85%); zero-copy / CUDA zero-copy kernel {} (goal >= 0.97x); zero-copy / CUDA per-piece loop {} (goal >= 20x); zero-copy / cuMemcpyBatchAsync {} (goal >= 15x)\n",
        show(g.zero_copy_of_peak, &|x| format!("{:.0}%", x * 100.0)),
        show(g.zero_copy_vs_cuda_zero_copy, &|x| format!("{x:.2}x")),
        show(g.zero_copy_vs_cuda_loop, &|x| format!("{x:.1}x")),
        show(g.zero_copy_vs_cuda_batch, &|x| format!("{x:.1}x")),
    ) + &format!(
        "{dir}: the same, disjointness vouched (no overlap check): {} of the peak; {} of CUDA's zero-copy kernel; {} CUDA's per-piece loop; {} cuMemcpyBatchAsync\n",
        show(g.vouched_of_peak, &|x| format!("{:.0}%", x * 100.0)),
        show(g.vouched_vs_cuda_zero_copy, &|x| format!("{x:.2}x")),
        show(g.vouched_vs_cuda_loop, &|x| format!("{x:.1}x")),
        show(g.vouched_vs_cuda_batch, &|x| format!("{x:.1}x")),
    )
}

/// The goals alone, for `compare`'s text.
pub fn summary(r: &GatherReport) -> String {
    format!(
        "scattered pieces ({}, bench gather's rows in --json):\n",
        r.shape.label()
    ) + &goals("host to device", &r.h2d)
        + &goals("device to host", &r.d2h)
}

/// The report as text: one table of every row, then the goals read off it.
pub fn render(r: &GatherReport) -> String {
    let mut out = format!(
        "{} device {}; {}; every row read back and checked\n",
        r.api,
        r.device.label(),
        moved(&r.shape, r.total_bytes)
    );
    out += &format!(
        "pinstream's staged batch copies through {}: {}\n",
        r.api, r.batch_way
    );
    out += &not_measured(&[
        ("CUDA", &r.cuda_unavailable),
        (
            "pinstream's zero-copy batch copies",
            &r.zero_copy_unavailable,
        ),
    ]);
    for why in &r.batch_unavailable {
        out += &format!("a batch call: not measured: {why}\n");
    }
    out += "\n";
    out += &table_of(&r.rows);
    out += "\n\n";
    r.rows.iter().filter_map(breakdown).for_each(|l| out += &l);
    out += &goals("host to device", &r.h2d);
    out += &goals("device to host", &r.d2h);
    out
}

/// Every row as one table.
fn table_of(rows: &[Row]) -> String {
    let rows: Vec<Vec<String>> = rows.iter().map(cells).collect();
    table::render(
        &[
            "dir",
            "api",
            "path",
            "total µs",
            "GB/s",
            "µs/piece",
            "vs CUDA loop",
            "host copy µs",
        ],
        &rows,
    )
}

/// What was moved, as the report's first line says it (`total` bytes one way).
fn moved(s: &Shape, total: usize) -> String {
    format!(
        "{} pieces of {} ({} one way) at random host and device offsets (seed {}); median of {} repeats",
        s.pieces,
        Bytes(s.piece_size as u64),
        Bytes(total as u64),
        s.seed,
        s.repeat
    )
}

/// `WHAT: not measured: WHY` for each row that is missing, and why.
fn not_measured(whys: &[(&str, &Option<String>)]) -> String {
    let line = |(what, why): &(&str, &Option<String>)| {
        why.as_ref()
            .map(|why| format!("{what}: not measured: {why}\n"))
    };
    whys.iter().filter_map(line).collect()
}
