//! `pinstream bench latency`: single small writes by every way of issuing and waiting for
//! them (`tools::latency`), and their tables.

use super::dispatch::ApiName;
use super::flags::{one_strategy, ReportFlags, VkFlags};
use super::signals::{self, Mode};
use super::{table, Failure};
use pinstream::host::StrategyChoice;
use pinstream::units::Bytes;
use pinstream_lab::tools::latency::{cells, LatencyReport, SizeRows};

/// Arguments of `bench latency`.
#[derive(clap::Args)]
pub struct Args {
    /// Device index from `pinstream devices` (with --api vulkan, in Vulkan's own list).
    #[arg(long)]
    device: Option<usize>,
    /// auto (the first of auto's order, the default) or one strategy.
    #[arg(long, value_parser = one_strategy)]
    strategy: Option<String>,
    /// both (the default): the OpenCL rows, with CUDA's beside them on the same GPU where
    /// CUDA is there; opencl: the OpenCL rows alone; vulkan: pinstream's path over Vulkan
    /// beside Vulkan's own calls, on the Vulkan device --device names.
    #[arg(long, default_value = "both", value_parser = ApiName::parser(&[ApiName::Both, ApiName::Opencl, ApiName::Vulkan]))]
    api: ApiName,
    #[command(flatten)]
    vk: VkFlags,
    /// Sizes of the writes: a power-of-two range `4KiB..1MiB` or a list `64KiB,1MiB`.
    #[arg(long, default_value = "4KiB,64KiB,1MiB,8MiB")]
    sizes: String,
    /// Timed samples per row (back-to-back rows: a tenth, at least 3).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    samples: u64,
    #[command(flatten)]
    report: ReportFlags,
}

/// `bench latency`: one pinning (the one `--strategy` names, or the API's own choice), every
/// size, through the API `--api` names.
pub fn run(a: Args) -> Result<(), Failure> {
    let outputs = a.report.prepare()?;
    let sizes = super::flags::sizes(Some(&a.sizes), "")?;
    let strategy = match a.strategy.as_deref() {
        None => StrategyChoice::Auto,
        Some(s) => s.parse::<StrategyChoice>().map_err(Failure::usage)?,
    };
    signals::phase("while measuring", Mode::Exit)?;
    let bar = super::report::spinner(a.report.json);
    bar.set_message("measuring single transfers");
    let ask = (&sizes[..], a.samples as usize, strategy);
    let report = super::bench_own::latency(a.api, &a.vk.options(), a.device, ask)?;
    bar.finish_and_clear();
    a.report.show(&outputs, &report, render)
}

/// The report as text: one table per size, then the gaps and goals read off it.
pub fn render(r: &LatencyReport) -> String {
    let mut out = format!(
        "{} device {}; pinstream's memory: {}; one write host to device per row, {} samples (back-to-back rows: batches of N, per transfer); queue: with event profiling (profiled) or without (plain); wall µs median and fastest, CPU µs per transfer (user+sys of the process)\n",
        r.api, r.device.label(), r.pinning, r.samples
    );
    if let Some(how) = &r.copies {
        out += &format!("copies: {how}\n");
    }
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    out + &sizes(&r.sizes, r.floor)
}

/// Each size's table and the figures read off it; `floor` names the API whose own rows the
/// gaps are to.
fn sizes(sizes: &[SizeRows], floor: &str) -> String {
    let mut out = String::new();
    for s in sizes {
        out += &format!("\n{}\n", Bytes(s.size as u64));
        let rows: Vec<Vec<String>> = s.rows.iter().map(cells).collect();
        out += &table::render(
            &[
                "api",
                "queue",
                "path",
                "N",
                "median µs",
                "min µs",
                "CPU µs",
                "GB/s",
            ],
            &rows,
        );
        out += "\n";
        let kinds = s.profiled_gap_us.is_some();
        if let Some(g) = s.waited_gap_us {
            let queues = if kinds { ", plain queues" } else { "" };
            out += &format!(
                "pinstream waited - {floor}'s fastest wait{queues}: {g:+.2} µs (goal <= 1)\n"
            );
        }
        if let Some(g) = s.profiled_gap_us {
            out += &format!(
                "pinstream waited - {floor}'s fastest wait, profiled queues: {g:+.2} µs\n"
            );
        }
        if let Some(c) = s.profiling_cost_us {
            out += &format!("event profiling costs the driver {c:+.2} µs per waited transfer\n");
        }
        if let Some(x) = s.back_to_back_vs_cuda {
            out += &format!("pinstream back to back / CUDA back to back: {x:.2}x (goal >= 1)\n");
        }
        if let Some(x) = s.driver_back_to_back_vs_cuda {
            out += &format!(
                "{floor}'s own back to back / CUDA's: {x:.2}x (the ceiling of the line above)\n"
            );
        }
    }
    out
}
