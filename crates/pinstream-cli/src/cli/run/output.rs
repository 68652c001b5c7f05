//! What a run leaves: the result and the trace written (each whole or not at all), and the
//! report ([`RunReport`]) as text or JSON.

use super::settings::Settings;
use super::storage::StorageLine;
use super::tables::TableReport;
use crate::cli::report::{render, VramDuring};
use crate::cli::{files, signals, Failure};
use pinstream::engine::io::{self, Output};
use pinstream::engine::profile::chrome_trace_runs;
use pinstream::engine::{HostMemory, StreamReport};
use pinstream::units::Bytes;
use serde::Serialize;

/// The report of a run.
#[derive(Serialize)]
pub(super) struct RunReport {
    pub device: String,
    pub numa: String,
    pub kernel: String,
    pub in_place: bool,
    pub strategy: String,
    pub strategy_reason: String,
    pub pinned_bytes: u64,
    pub pin_s: f64,
    pub read_s: f64,
    /// The inputs were pinned as the stream went (`--progressive on`).
    pub progressive: bool,
    /// Milliseconds from the start of pinning the inputs until the host saw the first
    /// block's upload complete.
    pub first_block_ms: Option<f64>,
    /// The `--host-table`s, read in place from mapped pinned memory.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_tables: Vec<TableReport>,
    pub vram: VramDuring,
    pub stream: StreamReport,
    pub sequential: Option<StreamReport>,
    /// How the inputs reached the device: resident, or streamed from storage, and why.
    pub storage: StorageLine,
    pub output: Option<String>,
}

/// The outputs the run writes, checked with its inputs before any work.
pub(super) fn prepare(s: &Settings) -> Result<Vec<Output>, Failure> {
    let outputs = files::given(&[("--output", &s.output), ("--trace", &s.trace)]);
    let inputs: Vec<files::Named> = std::iter::once(("--kernel", s.kernel.as_path()))
        .chain(s.input_files.iter().map(|p| ("--input", p.as_path())))
        .chain(s.residents.iter().map(|p| ("--resident", p.as_path())))
        .chain(
            s.host_tables
                .iter()
                .map(|t| ("--host-table", t.1.as_path())),
        )
        .collect();
    files::prepare(&outputs, &inputs, Some(("--output", "--input")))
}

/// Writes the result and the trace, each whole or not at all; the first failure.
pub(super) fn write_results(
    s: &Settings,
    outputs: &[Output],
    result: &dyn HostMemory,
    len: usize,
    trace: &[u8],
) -> Result<(), Failure> {
    let mut first = Ok(());
    let named = files::given(&[("--output", &s.output), ("--trace", &s.trace)]);
    for ((flag, _), o) in named.iter().zip(outputs) {
        let written = if *flag == "--output" {
            files::writing(o).and_then(|()| {
                io::write_from(o, result, len, &|| signals::stopped() != 0)
                    .map_err(|e| files::write_failure(o, e))
            })
        } else {
            files::save(o, trace)
        };
        if first.is_ok() {
            first = written;
        }
    }
    first
}

/// The stream, and the baseline beside it, as one Chrome/Perfetto trace.
pub(super) fn trace_json(
    rep: &StreamReport,
    sequential: Option<&StreamReport>,
) -> Result<Vec<u8>, Failure> {
    let mut runs = vec![("stream, three queues", rep.records.as_slice(), false)];
    if let Some(s) = sequential {
        runs.push(("baseline, one in-order queue", s.records.as_slice(), true));
    }
    serde_json::to_vec(&chrome_trace_runs(&runs)).map_err(Failure::run)
}

/// The report as text.
pub(super) fn render_text(r: &RunReport) -> String {
    let mut out = format!(
        "device {}; kernel {} ({})\n",
        r.device,
        r.kernel,
        if r.in_place {
            "in place"
        } else {
            "out of place"
        }
    );
    out += &format!(
        "pinned {} with {} in {:.2} s ({}); inputs filled in {:.2} s\n",
        Bytes(r.pinned_bytes),
        r.strategy,
        r.pin_s,
        r.strategy_reason,
        r.read_s
    );
    out += &format!("NUMA: {}\n", r.numa);
    for t in &r.host_tables {
        out += &format!(
            "host table {}: {}, {} in mapped pinned memory ({}), read in place by the kernel; made and read in {:.2} s\n",
            t.name, t.file, Bytes(t.bytes), t.mechanism, t.load_s
        );
    }
    let pin_wait = r.stream.pin_wait_s;
    out +=
        &crate::cli::report::first_block_line(r.progressive, r.first_block_ms, r.pin_s, pin_wait);
    out += &r.storage.text();
    out += &render(&r.stream);
    if let Some(s) = &r.sequential {
        out += "\nbaseline, same work on one in-order queue:\n";
        out += &render(s);
        out += &format!(
            "three queues / one queue: {:.2}x the combined bandwidth\n",
            r.stream.totals.combined_gbps / s.totals.combined_gbps.max(1e-9)
        );
    }
    out += &format!("{}\n", r.vram.line());
    out += &match &r.output {
        Some(p) => format!("result written to {p}\n"),
        None => "result not written (no --output, or writing it failed)\n".to_string(),
    };
    out
}
