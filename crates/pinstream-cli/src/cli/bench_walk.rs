//! `bench --region`: the in-place demo's copies taken apart (`tools::bench::walk`), through
//! one API, as a table per block size.

use super::dispatch::{self, ApiName, ApiOptions, Front};
use super::{table, Failure};
use pinstream::host::HostApi;
use pinstream::units::Bytes;
use pinstream_lab::tools::bench::walk::{walk, Rate, Row, WalkReport};

/// What `bench --region` was asked.
pub struct Ask<'a> {
    /// `--api` (one API).
    pub api: ApiName,
    /// The API's instance options (`--vk-copy`, `--vk-huge-pages`).
    pub options: ApiOptions,
    /// `--device`, in the API's own list.
    pub device: Option<usize>,
    /// `--region`.
    pub region: u64,
    /// `--max-chunk`.
    pub max_chunk: Option<u64>,
    /// `--sizes`: the blocks.
    pub sizes: &'a [usize],
    /// `--repeat`.
    pub repeats: usize,
}

/// Runs the walk through the API `--api` names.
pub fn run(ask: Ask<'_>, json: bool) -> Result<WalkReport, Failure> {
    let api = ask.api.one("--region")?;
    let region = usize::try_from(ask.region)
        .map_err(|_| Failure::usage("--region is larger than this machine's address space"))?;
    let bar = super::report::spinner(json);
    bar.set_message(format!("walking {}", Bytes(ask.region)));
    let front = Walk {
        ask: &ask,
        api,
        region,
    };
    let report = dispatch::with_api_as(api, &ask.options, front)?;
    bar.finish_and_clear();
    Ok(report)
}

struct Walk<'a> {
    ask: &'a Ask<'a>,
    api: ApiName,
    region: usize,
}

impl Front for Walk<'_> {
    type Output = WalkReport;

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<WalkReport, Failure> {
        let ask = self.ask;
        let opened =
            dispatch::open_asked::<A>(&instance, self.api, ask.device, None, Default::default())?;
        let max_chunk = ask.max_chunk.map(|c| c as usize);
        let dev = &opened.devices[0];
        walk::<A>(dev, None, self.region, max_chunk, ask.sizes, ask.repeats).map_err(Failure::from)
    }
}

/// The report as text: a table per block size.
pub fn render(r: &WalkReport) -> String {
    let mut out = format!(
        "{} device: {}; median of {} repeats; `busy`: GB/s over the commands' summed busy time (the demo's \"while busy\")\n",
        r.api, r.device, r.repeats
    );
    if let Some(how) = &r.copies {
        out += &format!("copies: {how}\n");
    }
    for g in &r.regions {
        let huge = g
            .huge_page_bytes
            .map_or("unknown".into(), |b| Bytes(b).to_string());
        out += &format!(
            "\nregion {} in {} chunk(s), pinned in {:.2} s; backed by huge pages: {huge}\n",
            Bytes(g.bytes as u64),
            g.chunks,
            g.pin_s
        );
        let rows: Vec<Vec<String>> = g.rows.iter().map(cells).collect();
        out += &table::render(
            &[
                "shape",
                "block",
                "blocks",
                "H2D",
                "busy",
                "D2H",
                "busy",
                "both",
                "up busy",
                "down busy",
            ],
            &rows,
        );
        out += "\n";
    }
    out
}

fn cells(row: &Row) -> Vec<String> {
    let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.1}"));
    let wall = |r: Option<Rate>| f(r.map(|r| r.wall_gbps));
    let busy = |r: Option<Rate>| f(r.map(|r| r.busy_gbps));
    let shape = serde_json::to_value(row.shape)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    vec![
        if row.first_touch {
            format!("{shape}, first touch")
        } else {
            shape
        },
        Bytes(row.block as u64).to_string(),
        row.blocks.to_string(),
        wall(row.h2d),
        busy(row.h2d),
        wall(row.d2h),
        busy(row.d2h),
        f(row.both_gbps),
        f(row.both_up_busy_gbps),
        f(row.both_down_busy_gbps),
    ]
}
