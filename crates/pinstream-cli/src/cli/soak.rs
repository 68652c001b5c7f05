//! `pinstream soak`: pin, stream, release, again and again; resident and device memory must
//! stay flat.

use super::{pick_device, size_arg, write_atomically, Failure};
use indicatif::ProgressBar;
use pinstream::backend::opencl::Context;
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;
use pinstream_cli::tools::soak::soak;
use std::path::PathBuf;

/// Arguments of `soak`.
#[derive(clap::Args)]
pub struct Args {
    /// Device index from `pinstream devices`.
    #[arg(long)]
    device: Option<usize>,
    /// Cycles of pin, stream, release.
    #[arg(long, default_value_t = 500)]
    cycles: usize,
    /// Bytes pinned and streamed per cycle.
    #[arg(long, value_parser = size_arg, default_value = "1GiB")]
    size: u64,
    /// Block size of the stream.
    #[arg(long, value_parser = size_arg, default_value = "64MiB")]
    block: u64,
    /// VRAM budget of the stream.
    #[arg(long, value_parser = size_arg, default_value = "512MiB")]
    vram_budget: u64,
    /// Largest allowed rise of the resident memory level from cycle 50 on, as a fraction.
    #[arg(long, default_value_t = 0.05)]
    max_rss_growth: f64,
    /// Largest allowed drift of device memory after a cycle from its baseline.
    #[arg(long, value_parser = size_arg, default_value = "64MiB")]
    max_vram_drift: u64,
    /// Also write the JSON report (every cycle's readings) here.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), Failure> {
    if a.cycles == 0 || a.size == 0 || a.size % 4 != 0 {
        return Err(Failure::usage(
            "--cycles must be at least 1 and --size a positive multiple of 4 bytes",
        ));
    }
    if let Some(p) = &a.save {
        super::check_writable(p)?;
    }
    let device = pick_device(a.device)?;
    let ctx = Context::new(&device).map_err(Failure::run)?;
    let probe = VramProbe::new(&device);
    let bar = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(a.cycles as u64)
    };
    let each = |i: usize, c: &pinstream_cli::tools::soak::Cycle| {
        bar.set_position(i as u64 + 1);
        bar.set_message(format!("RSS {}", Bytes(c.rss)));
    };
    let r = soak(
        &ctx,
        &probe,
        a.cycles,
        a.size as usize,
        a.block as usize,
        a.vram_budget,
        &each,
    )
    .map_err(Failure::run)?;
    bar.finish_and_clear();
    let json = serde_json::to_string_pretty(&r).map_err(Failure::run)?;
    if let Some(p) = &a.save {
        write_atomically(p, json.as_bytes())?;
    }
    if a.json {
        println!("{json}");
    } else {
        let last = r.cycles.last().expect("at least one cycle");
        println!(
            "{} cycles of pin {}, stream, release on {} in {:.1} s: RSS level {:+.2}%, spread {:.2}% from cycle 50 on (last {}); VRAM drift from baseline {}",
            r.cycles.len(),
            Bytes(r.size as u64),
            device.name,
            r.seconds,
            100.0 * r.rss_growth,
            100.0 * r.rss_spread,
            Bytes(last.rss),
            r.vram_max_drift.map_or("unknown: this driver has no counter".into(), |d| format!("at most {}", Bytes(d)))
        );
    }
    if r.rss_growth > a.max_rss_growth {
        return Err(Failure::run(format!(
            "resident memory grew by {:.2}% from cycle 50 on (limit {:.2}%): something is not released",
            100.0 * r.rss_growth,
            100.0 * a.max_rss_growth
        )));
    }
    if r.vram_max_drift.is_some_and(|d| d > a.max_vram_drift) {
        return Err(Failure::run(format!(
            "device memory did not return to its baseline: drift {}",
            Bytes(r.vram_max_drift.unwrap_or(0))
        )));
    }
    Ok(())
}
