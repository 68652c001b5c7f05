//! Text for stream reports, the progress bar, and VRAM readings around a run.

use super::table;
use indicatif::{ProgressBar, ProgressStyle};
use pinstream::engine::StreamReport;
use pinstream::units::Bytes;
use serde::Serialize;

/// A progress bar over blocks, hidden for `--json` or when stderr is not a terminal.
pub fn blocks_bar(blocks: u64, hidden: bool, what: &str) -> ProgressBar {
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(blocks)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {prefix} [{elapsed_precise}] {bar:30} {pos}/{len} blocks {msg}",
        )
        .expect("static template"),
    );
    bar.set_prefix(what.to_string());
    bar
}

/// A spinner with a message, hidden for `--json`.
pub fn spinner(hidden: bool) -> ProgressBar {
    let bar = if hidden {
        ProgressBar::hidden()
    } else {
        ProgressBar::new_spinner()
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
            .expect("static template"),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// Device memory read before and at the peak of a run.
#[derive(Debug, Clone, Serialize)]
pub struct VramDuring {
    /// The counter.
    pub source: &'static str,
    /// Reading before the pool allocated anything.
    pub before: Option<u64>,
    /// Highest reading during the run.
    pub peak: Option<u64>,
    /// `peak - before`.
    pub peak_over_before: Option<i64>,
    /// The pool's budget.
    pub budget: u64,
}

impl VramDuring {
    /// One line for the report.
    pub fn line(&self) -> String {
        match self.peak_over_before {
            Some(d) => format!(
                "VRAM during the run ({}): peak {:+.2} GiB over the reading before it, budget {}",
                self.source,
                d as f64 / (1u64 << 30) as f64,
                Bytes(self.budget)
            ),
            None => format!(
                "VRAM during the run: {} (budget {})",
                self.source,
                Bytes(self.budget)
            ),
        }
    }
}

/// The stream report as text.
pub fn render(r: &StreamReport) -> String {
    let t = &r.totals;
    let mut out = format!(
        "{}: {} blocks of {} ({} out), {} slots, pool {} of a {} budget{}{}\n",
        r.mode,
        r.blocks,
        Bytes(r.block_bytes as u64),
        Bytes(r.out_block_bytes as u64),
        r.slots,
        Bytes(r.pool_bytes),
        Bytes(r.vram_budget),
        if r.devices.is_empty() {
            ""
        } else {
            " per device"
        },
        if r.resident_bytes > 0 {
            format!(", {} resident", Bytes(r.resident_bytes))
        } else {
            String::new()
        }
    );
    out += &stage_table(t);
    out += &format!(
        "\nwall {:.3} s by the device clock ({:.3} s on the host); upload + download {:.1} GB/s; overlap efficiency {:.3}\n",
        t.device_wall_s, r.host_wall_s, t.combined_gbps, t.overlap
    );
    if r.passes > 1 {
        out += &passes(r);
    }
    if !r.devices.is_empty() {
        out += &per_device(r);
    }
    out
}

/// The busy time, bytes and rates of each stage, one row each.
fn stage_table(t: &pinstream::engine::profile::Totals) -> String {
    let rows: Vec<Vec<String>> = [
        ("upload", &t.upload),
        ("kernel", &t.kernel),
        ("download", &t.download),
    ]
    .iter()
    .map(|(name, s)| {
        vec![
            name.to_string(),
            format!("{:.3} s", s.busy_s),
            if s.bytes > 0 {
                Bytes(s.bytes).to_string()
            } else {
                "-".into()
            },
            if s.bytes > 0 {
                format!("{:.1}", s.gbps)
            } else {
                "-".into()
            },
            if s.bytes > 0 {
                format!("{:.1}", s.busy_gbps)
            } else {
                "-".into()
            },
            s.commands.to_string(),
        ]
    })
    .collect();
    table::render(
        &[
            "stage",
            "busy",
            "bytes",
            "GB/s over wall",
            "GB/s while busy",
            "commands",
        ],
        &rows,
    )
}

/// A run of several passes: what stayed resident and why, and the bytes each pass moved
/// (consecutive passes that moved the same bytes on one line). No floor: the run measures no
/// link peak (`pinstream bench` does; a pass takes at least its bytes over that peak).
pub fn passes(r: &StreamReport) -> String {
    let mut out = format!("{} passes; resident blocks: {}\n", r.passes, r.residency);
    let mut k = 0;
    while k < r.pass_bytes.len() {
        let p = r.pass_bytes[k];
        let same = r.pass_bytes[k..].iter().take_while(|q| **q == p).count();
        let which = match same {
            1 => format!("pass {}", k + 1),
            n => format!("passes {}-{}, each", k + 1, k + n),
        };
        let secs =
            &r.pass_seconds[k.min(r.pass_seconds.len())..(k + same).min(r.pass_seconds.len())];
        out += &format!(
            "  {which}: {} host to device, {} device to host{}\n",
            Bytes(p.h2d),
            Bytes(p.d2h),
            pass_time(secs)
        );
        k += same;
    }
    out
}

/// The device time of a group of passes: one figure, or the median and the range.
fn pass_time(secs: &[f64]) -> String {
    match secs {
        [] => String::new(),
        [one] => format!(", {one:.3} s"),
        _ => {
            let mut v = secs.to_vec();
            v.sort_by(f64::total_cmp);
            let median = v[v.len() / 2];
            format!(", median {median:.3} s ({:.3}-{:.3})", v[0], v[v.len() - 1])
        }
    }
}

/// A run over several devices: a column per device plus the total.
pub fn per_device(r: &StreamReport) -> String {
    let mut header = vec!["".to_string()];
    header.extend(r.devices.iter().map(|d| d.device.clone()));
    header.push("total".into());
    let all: Vec<(&pinstream::engine::profile::Totals, usize, u64)> = r
        .devices
        .iter()
        .map(|d| (&d.totals, d.blocks, d.pool_bytes))
        .chain(std::iter::once((&r.totals, r.blocks, r.pool_bytes)))
        .collect();
    let row =
        |name: &str, f: &dyn Fn(&pinstream::engine::profile::Totals, usize, u64) -> String| {
            let mut v = vec![name.to_string()];
            v.extend(all.iter().map(|(t, b, p)| f(t, *b, *p)));
            v
        };
    let rows = vec![
        row("blocks", &|_, b, _| b.to_string()),
        row("pool", &|_, _, p| Bytes(p).to_string()),
        row("upload GB/s", &|t, _, _| format!("{:.1}", t.upload.gbps)),
        row("download GB/s", &|t, _, _| {
            format!("{:.1}", t.download.gbps)
        }),
        row("kernel busy", &|t, _, _| {
            format!("{:.3} s", t.kernel.busy_s)
        }),
        row("wall", &|t, _, _| format!("{:.3} s", t.device_wall_s)),
        row("up + down GB/s", &|t, _, _| {
            format!("{:.1}", t.combined_gbps)
        }),
    ];
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let table = table::render(&header, &rows);
    format!("\nper device:\n{}\n", table.trim_end())
}

/// The time to the first block (issue 13): from the start of pinning until the host saw the
/// first block's upload complete, and how the pin went. Empty when not measured.
pub fn first_block_line(
    progressive: bool,
    ms: Option<f64>,
    pin_done_s: f64,
    wait_s: f64,
) -> String {
    let Some(ms) = ms else { return String::new() };
    let how = if progressive {
        format!("pinned progressively: the last chunk was pinned {pin_done_s:.3} s after the call, the stream waited {wait_s:.3} s for chunks")
    } else {
        format!("pinned up front in {pin_done_s:.3} s, then filled")
    };
    format!("first block on the device {ms:.1} ms after the call ({how})\n")
}
