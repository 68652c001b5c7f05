//! `pinstream bench --gather`: the table of `tools::gather`.

use super::table;
use pinstream::units::Bytes;
use pinstream_cli::tools::gather::api::ApiGatherReport;
use pinstream_cli::tools::gather::{GatherReport, Goals, Row};

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
    let s = &r.shape;
    format!(
        "scattered pieces ({} x {}, bench --gather's rows in --json):\n",
        s.pieces,
        Bytes(s.piece_size as u64)
    ) + &goals("host to device", &r.h2d)
        + &goals("device to host", &r.d2h)
}

/// The report as text: one table of every row, then the goals read off it.
pub fn render(r: &GatherReport) -> String {
    let s = &r.shape;
    let mut out = format!(
        "device {}: {} ({}); {} pieces of {} ({} one way) at random host and device offsets (seed {}); median of {} repeats; every row read back and checked\n",
        r.device.index, r.device.name, r.device.platform_name, s.pieces, Bytes(s.piece_size as u64),
        Bytes(r.total_bytes as u64), s.seed, s.repeat
    );
    if let Some(why) = &r.cuda_unavailable {
        out += &format!("CUDA: not measured: {why}\n");
    }
    if let Some(why) = &r.cuda_batch_unavailable {
        out += &format!("cuMemcpyBatchAsync: not measured: {why}\n");
    }
    if let Some(why) = &r.zero_copy_unavailable {
        out += &format!("zero-copy gather: not measured: {why}\n");
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

/// `bench --gather --api vulkan` as text: the rows, and the rows with no meaning there.
pub fn render_api(r: &ApiGatherReport) -> String {
    let s = &r.shape;
    let mut out = format!(
        "{} device {}; {} pieces of {} ({} one way) at random host and device offsets (seed {}); median of {} repeats; every row but the peak read back and checked\n",
        r.api, r.device.label(), s.pieces, Bytes(s.piece_size as u64),
        Bytes(r.total_bytes as u64), s.seed, s.repeat
    );
    let whys = [
        ("CUDA", &r.cuda_unavailable),
        ("a batch call", &r.batch_unavailable),
    ];
    for (what, why) in whys {
        if let Some(why) = why {
            out += &format!("{what}: not measured: {why}\n");
        }
    }
    for why in &r.not_measured {
        out += &format!("not measured: {why}\n");
    }
    out + "\n" + &table_of(&r.rows) + "\n"
}
