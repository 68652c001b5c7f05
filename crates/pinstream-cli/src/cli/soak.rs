//! `pinstream soak`: pin, stream, release, again and again; resident and device memory must
//! stay flat.

use super::signals::{self, Mode};
use super::{files, size_arg, Failure};
use indicatif::ProgressBar;
use pinstream::units::Bytes;
use pinstream::vram::VramProbe;
use pinstream_cli::advice::{validate_error, Flags};
use pinstream_lab::tools::soak::{soak, spread_from, SoakReport, MIN_CYCLES};
use std::path::PathBuf;

/// Arguments of `soak`.
#[derive(clap::Args)]
pub struct Args {
    /// Device index from `pinstream devices`.
    #[arg(long)]
    device: Option<usize>,
    /// Cycles of pin, stream, release (at least 16).
    #[arg(long, default_value_t = 500, value_parser = cycles)]
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
    /// Largest allowed rise of the resident memory level from the settled cycles on (a fifth of them, at least cycle 50), as a fraction
    /// (0.05: 5%; 0 or more).
    #[arg(long, default_value_t = 0.05, value_parser = fraction, allow_hyphen_values = true)]
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

/// `--max-rss-growth`: a finite fraction, 0 or more.
fn fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a fraction of 0 or more (a finite number: 0.05 allows a 5% rise)"
        )),
    }
}

/// `--cycles`: enough for the spread window.
fn cycles(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= MIN_CYCLES => Ok(n),
        _ => Err(format!(
            "`{s}` is not a whole number of {MIN_CYCLES} or more: the resident-memory level is compared between the first and the last quarter of the cycles after the first fifth of them (at least 50; from the middle for 100 cycles or fewer), each at least two cycles"
        )),
    }
}

pub fn run(a: Args) -> Result<(), Failure> {
    if a.size == 0 || !a.size.is_multiple_of(4) {
        return Err(Failure::usage(
            "--size must be a positive multiple of 4 bytes",
        ));
    }
    pinstream::engine::validate::block_size(a.size as usize, a.block as usize, 4)
        .map_err(|e| Failure::usage(validate_error(&e, Flags::SOAK)))?;
    let named = files::given(&[("--save", &a.save)]);
    let outputs = files::prepare(&named, &[], None)?;
    let (device, ctx) = super::device_sets::open_one(a.device)?;
    signals::phase("during the soak", Mode::Exit)?;
    let probe = VramProbe::new(&device);
    let bar = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(a.cycles as u64)
    };
    let each = |i: usize, c: &pinstream_lab::tools::soak::Cycle| {
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
    let saves = files::contents(&named, &outputs, &json, &[]);
    files::report_and_save(
        a.json,
        &json,
        || {
            summary(&r, &device.name)
                + "
"
        },
        &saves,
    )?;
    judge(&a, &r)
}

fn summary(r: &SoakReport, device: &str) -> String {
    let last = r.cycles.last().expect("at least one cycle");
    format!(
        "{} cycles of pin {}, stream, release on {device} in {:.1} s: RSS level {:+.2}%, spread {:.2}% from cycle {} on (last {}); VRAM drift from baseline {}",
        r.cycles.len(),
        Bytes(r.size as u64),
        r.seconds,
        100.0 * r.rss_growth,
        100.0 * r.rss_spread,
        spread_from(r.cycles.len()),
        Bytes(last.rss),
        r.vram_max_drift.map_or("unknown: this driver has no counter".into(), |d| format!("at most {}", Bytes(d)))
    )
}

fn judge(a: &Args, r: &SoakReport) -> Result<(), Failure> {
    if r.rss_growth > a.max_rss_growth {
        return Err(Failure::run(format!(
            "resident memory grew by {:.2}% from cycle {} on (limit {:.2}%): something is not released",
            100.0 * r.rss_growth,
            spread_from(r.cycles.len()),
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
