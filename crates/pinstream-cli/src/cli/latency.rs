//! `pinstream bench --latency`: the table of `tools::latency`.

use super::table;
use pinstream::units::Bytes;
use pinstream_cli::tools::latency::api::ApiLatencyReport;
use pinstream_cli::tools::latency::{cells, LatencyReport, SizeRows};

/// The report as text: one table per size, then the two goals read off it.
pub fn render(r: &LatencyReport) -> String {
    let mut out = format!(
        "device {}: {} ({}); OpenCL memory: {}; one write host to device per row, {} samples (back-to-back rows: batches of N, per transfer); queue: with event profiling (profiled) or without (plain); wall µs median and fastest, CPU µs per transfer (user+sys of the process)\n",
        r.device.index, r.device.name, r.device.platform_name, r.strategy, r.samples
    );
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    out + &sizes(&r.sizes, "driver's")
}

/// `bench --latency --api vulkan` as text: one table per size, then the gaps read off it.
pub fn render_api(r: &ApiLatencyReport) -> String {
    let mut out = format!(
        "{} device {}; pinstream's memory: {}; one write host to device per row, {} samples (back-to-back rows: batches of N, per transfer); wall µs median and fastest, CPU µs per transfer (user+sys of the process)\n",
        r.api, r.device.label(), r.pinning, r.samples
    );
    if let Some(how) = &r.copies {
        out += &format!("copies: {how}\n");
    }
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    out + &sizes(&r.sizes, r.api)
}

/// Each size's table and the figures read off it; `floor` names the rows the gaps are to.
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
        if let Some(g) = s.waited_gap_us {
            out += &format!(
                "pinstream waited - {floor} fastest wait{}: {g:+.2} µs (goal <= 1)\n",
                if floor == "driver's" {
                    ", plain queues"
                } else {
                    ""
                }
            );
        }
        if let Some(g) = s.profiled_gap_us {
            out +=
                &format!("pinstream waited - driver's fastest wait, profiled queues: {g:+.2} µs\n");
        }
        if let Some(c) = s.profiling_cost_us {
            out += &format!("event profiling costs the driver {c:+.2} µs per waited transfer\n");
        }
        if let Some(x) = s.back_to_back_vs_cuda {
            out += &format!("pinstream back to back / CUDA back to back: {x:.2}x (goal >= 1)\n");
        }
        if let Some(x) = s.driver_back_to_back_vs_cuda {
            let who = match floor {
                "driver's" => "the OpenCL driver's own",
                api => api,
            };
            out +=
                &format!("{who} back to back / CUDA's: {x:.2}x (the ceiling of the line above)\n");
        }
    }
    out
}
