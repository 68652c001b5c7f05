//! `pinstream demo`: the README's main job.

use super::dispatch::{open_asked, with_api_as, ApiName, Front};
use super::flags::{BudgetFlags, DeviceFlags, OnOff, WaitFlag};
use super::report::{render, VramDuring};
use super::signals::{self, Mode};
use super::{files, size_arg, Failure};
use pinstream::backend::api::{Device, WaitMode};
use pinstream::engine::profile::{chrome_trace_runs, chrome_trace_with_host, HostSlice};
use pinstream::engine::Residency;
use pinstream::host::{HostApi, StrategyChoice};
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;
use pinstream_cli::advice::{self, Flags};
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::demo::{workloads, DemoConfig, DemoError, DemoReport};
use std::path::PathBuf;

/// Arguments of `demo`.
#[derive(clap::Args)]
#[command(mut_arg("device", |a| a.help("Device index from `pinstream devices` (default: the first GPU, else the first device)")))]
#[command(mut_arg("devices", |a| a.help("Several devices at once: indices (`0,1`) or `all` (every device of the default device's platform and type); each streams a contiguous share of every workload through a ring and a --vram-budget of its own")))]
#[command(mut_arg("vram_budget", |a| a.help("Device memory the stream may use (default: 4 GiB on a GPU, a quarter of the data on a CPU)")))]
pub struct Args {
    #[command(flatten)]
    dev: DeviceFlags,
    /// The API to stream through (`vulkan`: WGSL kernels; `cuda`: this pinstream built with
    /// the `cuda` feature); with --workload embedding, any of them (CUDA: `cudaHostAllocMapped`
    /// memory; Vulkan: imported host memory, one binding per chunk).
    #[arg(long, value_enum, default_value_t = ApiName::Opencl)]
    api: ApiName,
    #[command(flatten)]
    vk: super::flags::VkFlags,
    /// Data per workload (default: 10 GiB on a GPU where RAM allows, 1 GiB on a CPU device);
    /// with --workload embedding, the table (through OpenCL and CUDA, cut to the device's
    /// largest buffer).
    #[arg(long, value_parser = size_arg)]
    size: Option<u64>,
    /// The workloads: `stream` (the in-place and y = W·x streams through the engine) or
    /// `embedding` (bags of random rows of a table in mapped pinned memory, summed by one
    /// kernel reading the rows in place across the bus, checked against the CPU).
    #[arg(long, value_enum, default_value = "stream")]
    workload: Workload,
    #[command(flatten)]
    budget: BudgetFlags,
    /// Pinning strategy.
    #[arg(long, default_value = "auto")]
    strategy: StrategyChoice,
    /// Also run each workload on one in-order queue, as the baseline.
    #[arg(long)]
    compare_sequential: bool,
    /// Passes over each workload's data: in place, each pass reads what the one before
    /// wrote (checked against the CPU reference applied as many times); y = W·x computes
    /// y again each pass.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    passes: u64,
    /// With --passes above 1, the blocks kept in device memory across passes: `auto` (what
    /// the --vram-budget leaves after the ring's slots), `off`, or a SIZE (at most that much).
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto")]
    residency: Residency,
    /// Write a Chrome/Perfetto trace of the in-place workload here.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// With --workload embedding: bags per batch, one kernel launch each (default 16,384, the
    /// GPU's shape); fewer keep the lookup short on a CPU device. 64 bags of each batch are
    /// checked against the CPU (every bag, where there are fewer).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    bags: Option<u32>,
    /// Seed of the data.
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the JSON report here (whole or not at all).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    wait: WaitFlag,
    /// Pin the in-place data as the stream goes (`on`: chunk by chunk in the background, each
    /// filled as it is made resident; the first block moves after one chunk), or up front,
    /// then fill, then stream (`off`). Off by default: pinning and filling 10 GiB is slower
    /// than streaming it, so the stream waits for chunks and its own GB/s figure falls,
    /// while the time from the call to the first block and to the end falls too.
    #[arg(long, value_enum, default_value = "off")]
    progressive: OnOff,
}

/// `--workload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// The in-place and y = W·x streams.
    Stream,
    /// The embedding-bag lookup over mapped pinned memory.
    Embedding,
}

/// A `--block` the demo's data cannot use.
fn check_block(cfg: &DemoConfig) -> Result<(), Failure> {
    pinstream::engine::validate::block_size(cfg.data_bytes, cfg.block_bytes, 4)
        .map_err(|e| Failure::usage(advice::validate_error(&e, advice::Flags::DEMO)))
}

/// A `--size` too small for one row of the y = W·x workload (f16 weights).
pub(super) fn check_size(cfg: &DemoConfig) -> Result<(), Failure> {
    let row = cfg.cols * 2;
    if cfg.data_bytes < row {
        return Err(Failure::usage(format!(
            "--size {} holds less than one row of W ({} columns of f16): pass --size {} or more",
            Bytes(cfg.data_bytes as u64),
            cfg.cols,
            Bytes(row as u64)
        )));
    }
    Ok(())
}

pub fn run(a: Args) -> Result<(), Failure> {
    let wait = a.wait.wait.into();
    if a.workload == Workload::Embedding {
        return run_embedding(a, wait);
    }
    if a.bags.is_some() {
        return Err(Failure::usage(
            "--bags applies to --workload embedding: the streams' shape comes from --size and --block",
        ));
    }
    let named = files::given(&[("--trace", &a.trace), ("--save", &a.save)]);
    let outputs = files::prepare(&named, &[], None)?;
    let report = with_api_as(a.api, &a.vk.options(), Demo { a: &a, wait })?;
    let trace = serde_json::to_vec(&trace_of(&report.workloads[0])).map_err(Failure::run)?;
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(&named, &outputs, &json, &[("--trace", &trace)]);
    files::report_and_save(a.json, &json, || render_text(&report), &saves)?;
    if report.ok() {
        Ok(())
    } else {
        Err(Failure::run(
            "the results did not match the CPU reference (see mismatches above)",
        ))
    }
}

/// `--workload embedding`, refusing the flags only the streams use.
fn run_embedding(a: Args, wait: WaitMode) -> Result<(), Failure> {
    let stream_only = [
        ("--devices", a.dev.devices.is_some()),
        ("--vram-budget", a.budget.vram_budget.is_some()),
        ("--block", a.budget.block.is_some()),
        ("--compare-sequential", a.compare_sequential),
        ("--passes", a.passes > 1),
        ("--residency", a.residency != Residency::Auto),
        ("--trace", a.trace.is_some()),
        ("--progressive on", a.progressive.on()),
    ];
    // The Vulkan flags, as the one list of them names them (`ApiOptions::vulkan_flag`).
    let vulkan = a.vk.options().vulkan_flag().map(|flag| (flag, true));
    if let Some((flag, _)) = stream_only.into_iter().chain(vulkan).find(|f| f.1) {
        return Err(Failure::usage(format!("{flag} applies to --workload stream: the embedding lookup runs one kernel on one device (--device N), sized by --size")));
    }
    super::embedding::run(super::embedding::Ask {
        api: a.api,
        device: a.dev.device,
        size: a.size,
        bags: a.bags.map(|b| b as usize),
        seed: a.seed,
        wait,
        json: a.json,
        save: a.save,
    })
}

/// The demo over one API on the devices `--device` and `--devices` name in the API's own list
/// (chosen as every command chooses them: `device_sets::choices`): sized to the first, pinned,
/// streamed and checked.
struct Demo<'a> {
    a: &'a Args,
    /// How the devices wait for commands (`--wait`).
    wait: WaitMode,
}

impl Front for Demo<'_> {
    type Output = DemoReport;

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<DemoReport, Failure> {
        let a = self.a;
        let set = a.dev.devices.as_ref();
        let opened = open_asked::<A>(&instance, a.api, a.dev.device, set, self.wait)?;
        signals::phase("while sizing the demo", Mode::Exit)?;
        let cfg = config(a, &opened.devices[0], &opened.probe)?;
        let pinning = cfg.pinning::<A>().map_err(Failure::usage)?;
        let bar = super::report::spinner(a.json);
        let progress = |what: &str, blocks: u64, bytes: u64| {
            bar.set_message(format!("{what}: {blocks} blocks, {}", Bytes(bytes)))
        };
        let progressive = a.progressive.on();
        if progressive && opened.devices.len() > 1 {
            super::out::note(
                "--progressive on pins up front over several devices (every device registers every chunk): run one device (--device N) to pin as it streams",
            );
        }
        bar.set_message("pinning and filling");
        signals::phase(
            "after the blocks in flight of the current stream",
            Mode::Orderly,
        )?;
        let (devices, probe) = (&opened.devices, &opened.probe);
        let workloads = workloads::<A>(devices, probe, &cfg, pinning, progressive, &progress)
            .map_err(|e| match e {
                DemoError::Stream(e) => super::stream_failure(e, Flags::DEMO),
                e => super::demo_failure(e),
            })?;
        super::check_stop("at the end of the demo")?;
        bar.finish_and_clear();
        let described = &opened.described;
        let mut report = DemoReport::new(described, probe, &cfg, self.wait, workloads);
        report.copies = devices[0].copy_way();
        Ok(report)
    }
}

/// The demo's sizes: the machine's (see [`DemoConfig::for_machine`]), then the flags'.
fn config(a: &Args, device: &impl Device, probe: &VramProbe) -> Result<DemoConfig, Failure> {
    let mut cfg = DemoConfig::for_machine(device, probe);
    if let Some(s) = a.size {
        cfg.data_bytes = s as usize;
        cfg.sizing = format!("--size {}", Bytes(s));
    }
    if cfg.data_bytes == 0 {
        return Err(Failure::usage(
            "the demo needs some data: pass --size, e.g. --size 1GiB",
        ));
    }
    check_size(&cfg)?;
    cfg.vram_budget = a.budget.vram_budget.unwrap_or(cfg.vram_budget);
    cfg.block_bytes = a.budget.block.map_or(cfg.block_bytes, |b| b as usize);
    if a.budget.block.is_some() {
        check_block(&cfg)?;
    }
    cfg.strategy = a.strategy;
    cfg.compare_sequential = a.compare_sequential;
    cfg.passes = a.passes as usize;
    cfg.residency = a.residency;
    cfg.seed = a.seed.unwrap_or(cfg.seed);
    cfg.stop = Some(super::stop_flag());
    Ok(cfg)
}

/// The in-place workload's trace: with a progressive pin, on the time axis of the call with
/// each chunk's pinning on a track of its own; otherwise the stream (and its baseline).
fn trace_of(w: &pinstream_lab::tools::demo::Workload) -> serde_json::Value {
    if let (true, Some(ms)) = (w.progressive, w.first_block_ms) {
        if w.sequential.is_none() {
            let pins: Vec<HostSlice> = w
                .chunk_pins
                .iter()
                .enumerate()
                .map(|(k, p)| HostSlice {
                    name: format!("pin chunk {k} ({})", Bytes(p.range.len() as u64)),
                    start_s: p.start_s,
                    dur_s: p.took_s,
                })
                .collect();
            let title = "in place, three queues, pinned as it streams";
            return chrome_trace_with_host(
                title,
                &w.stream.records,
                "host pinning",
                &pins,
                ms / 1e3,
            );
        }
    }
    let mut runs = vec![("in place, three queues", w.stream.records.as_slice(), false)];
    if let Some(s) = &w.sequential {
        runs.push(("in place, one in-order queue", s.records.as_slice(), true));
    }
    chrome_trace_runs(&runs)
}

fn render_text(r: &DemoReport) -> String {
    let mut out = format!("device {}\n", r.device.short_label());
    for d in r.devices.iter().skip(1) {
        out += &format!("device {}\n", d.short_label());
    }
    out += &format!("sizing: {}\n", r.config.sizing);
    if let Some(how) = &r.copies {
        out += &format!("copies: {how}\n");
    }
    for w in &r.workloads {
        out += &format!("\n== {}: {}\n", w.name, w.description);
        out += &format!(
            "pinned {} with {} in {:.2} s ({}); VRAM cost of pinning: {}\n",
            Bytes(w.pinned_bytes),
            w.strategy,
            w.pin_s,
            w.strategy_reason,
            w.vram_pin_cost
                .map_or("unknown: this driver has no counter".into(), |c| format!(
                    "{:+.2} GiB",
                    c as f64 / (1u64 << 30) as f64
                ))
        );
        out += &super::report::first_block_line(
            w.progressive,
            w.first_block_ms,
            w.pin_done_s,
            w.stream.pin_wait_s,
        );
        out += &render(&w.stream);
        out += &format!(
            "CPU (process, user + system; OpenCL waits: {}): {:.3} s, {:.3} s per GiB moved\n",
            r.wait, w.cpu_s, w.cpu_s_per_gib
        );
        if let Some(s) = &w.sequential {
            out += &format!("baseline on one in-order queue: wall {:.3} s, upload + download {:.1} GB/s, overlap {:.3}; three queues are {:.2}x faster\n",
                s.totals.device_wall_s, s.totals.combined_gbps, s.totals.overlap, s.totals.device_wall_s / w.stream.totals.device_wall_s.max(1e-12));
        }
        let vram = VramDuring {
            source: r.vram_source,
            before: None,
            peak: None,
            peak_over_before: w.vram_peak_over_before,
            budget: w.stream.vram_budget,
        };
        out += &format!("{}\n", vram.line());
        out += &format!(
            "check: {} of {} {} match the CPU reference{}\n",
            w.checked - w.mismatches,
            w.checked,
            if w.name == "gemv" { "rows" } else { "values" },
            if w.mismatches == 0 {
                ""
            } else {
                "  <-- MISMATCH"
            }
        );
    }
    out
}
