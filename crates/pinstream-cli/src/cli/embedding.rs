//! `pinstream demo --workload embedding`: the embedding-bag lookup over a table in mapped
//! pinned memory ([`pinstream_lab::tools::embedding`]), through the API `--api` names.

use super::dispatch::{open_asked, with_api, ApiName, Front};
use super::signals::{self, Mode};
use super::{files, Failure};
use pinstream::backend::api::{Device, WaitMode};
use pinstream::host::{HostApi, HostError};
use pinstream::units::Bytes;
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::demo::DemoConfig;
use pinstream_lab::tools::embedding::{self, EmbeddingConfig, EmbeddingReport};
use pinstream_lab::tools::mapped::MappedError;
use std::path::PathBuf;

/// What `demo --workload embedding` is asked for.
pub(super) struct Ask {
    /// `--api`.
    pub api: ApiName,
    /// `--device`.
    pub device: Option<usize>,
    /// `--size`: bytes of the table.
    pub size: Option<u64>,
    /// `--bags`: bags per batch.
    pub bags: Option<usize>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--wait`.
    pub wait: WaitMode,
    /// `--json`.
    pub json: bool,
    /// `--save`.
    pub save: Option<PathBuf>,
}

/// Runs the workload as `ask` says, prints and saves its report; a mismatch is a failed run.
pub(super) fn run(ask: Ask) -> Result<(), Failure> {
    let named = files::given(&[("--save", &ask.save)]);
    let outputs = files::prepare(&named, &[], None)?;
    let report = with_api(ask.api, Embedding { ask: &ask })?;
    let json = serde_json::to_string_pretty(&report).map_err(Failure::run)?;
    let saves = files::contents(&named, &outputs, &json, &[]);
    files::report_and_save(ask.json, &json, || render(&report), &saves)?;
    match report.mismatched_bags {
        0 => Ok(()),
        n => Err(Failure::run(format!(
            "{n} bag(s) of the embedding lookup did not match the CPU reference"
        ))),
    }
}

/// The workload over one API.
struct Embedding<'a> {
    ask: &'a Ask,
}

impl Front for Embedding<'_> {
    type Output = EmbeddingReport;

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<EmbeddingReport, Failure> {
        let ask = self.ask;
        let mut opened = open_asked::<A>(&instance, ask.api, ask.device, None, ask.wait)?;
        let device = opened.devices.remove(0);
        signals::phase("while sizing the embedding table", Mode::Exit)?;
        let machine = DemoConfig::for_machine(&device, &opened.probe);
        let (bytes, sizing) = match ask.size {
            Some(s) => (s as usize, format!("--size {}", Bytes(s))),
            None => (machine.data_bytes, machine.sizing),
        };
        let mut cfg = EmbeddingConfig::new(
            bytes,
            A::largest_mapped(&device),
            sizing,
            ask.seed.unwrap_or(machine.seed),
        );
        if let Some(bags) = ask.bags {
            cfg = cfg.with_bags(bags);
            check_bags(
                &cfg,
                device.max_alloc(),
                pinstream::backend::os::host_room(),
            )?;
        }
        if cfg.rows() == 0 {
            return Err(Failure::usage(format!(
                "--size {} holds no row of the table ({} floats, {} bytes): pass --size {} or more",
                Bytes(bytes as u64),
                cfg.dim,
                cfg.dim * 4,
                Bytes((cfg.dim * 4) as u64)
            )));
        }
        signals::phase("while running the embedding lookup", Mode::Exit)?;
        embedding::run::<A>(&device, &cfg).map_err(failure)
    }
}

/// `--bags` against what holds the bags: their ids (`bag` u32s a bag) and sums (`dim` floats
/// a bag) are mapped memory of one buffer each (at most `max_alloc` bytes), beside the
/// table in the host memory (`room`). Refused naming `--bags` and the most that fit: the
/// allocation's own refusal named a size to shrink, which no `--size` fixes.
fn check_bags(
    cfg: &EmbeddingConfig,
    max_alloc: u64,
    room: Option<pinstream::backend::os::HostRoom>,
) -> Result<(), Failure> {
    let per_bag = ((cfg.bag + cfg.dim) * 4) as u64;
    let per_buffer = (cfg.bag.max(cfg.dim) * 4) as u64;
    let by_buffer = (
        max_alloc / per_buffer,
        format!(
            "the device's largest buffer, {} (the sums are one buffer of {per_buffer} bytes a bag)",
            Bytes(max_alloc)
        ),
    );
    let by_host = room.map(|r| {
        let left = r.bytes.saturating_sub(cfg.table_bytes as u64);
        (
            left / per_bag,
            format!("{r}, less the table's {}", Bytes(cfg.table_bytes as u64)),
        )
    });
    let (most, limit) = by_host
        .into_iter()
        .chain([by_buffer])
        .min_by_key(|l| l.0)
        .expect("one limit");
    let bags = cfg.bags as u64;
    if bags <= most {
        return Ok(());
    }
    let need = bags
        .checked_mul(per_bag)
        .map_or("more than 16 EiB".into(), |b| Bytes(b).to_string());
    let fix = match most {
        0 => "the table leaves no room for one bag: pass a smaller --size".to_string(),
        n => format!("pass --bags {n} or fewer"),
    };
    Err(Failure::usage(format!(
        "--bags {bags} needs {need} of mapped memory for the bags' ids and sums ({per_bag} bytes a bag), above {limit}: {fix}"
    )))
}

/// A refusal (no mapped memory here, a table above the largest buffer) as a usage error
/// naming the workload; a failed device call as a failed run.
fn failure(e: MappedError) -> Failure {
    let text = format!("demo --workload embedding: {e}");
    match e {
        MappedError::Host(HostError::Backend(_)) => Failure::run(text),
        MappedError::Host(_) => Failure::usage(text),
        _ => Failure::run(text),
    }
}

/// The report as text.
fn render(r: &EmbeddingReport) -> String {
    let c = &r.config;
    let vram = match r.vram_cost {
        Some(v) => format!(
            "{:+.1} MiB ({})",
            v as f64 / (1u64 << 20) as f64,
            r.vram_source
        ),
        None => r.vram_source.clone(),
    };
    format!(
        "device {} through {}\nsizing: {}\n\n== embedding: bags of {} random rows of a {} table ({} rows of {} floats) in mapped pinned memory ({}, {} buffer(s)), summed by one kernel reading the rows in place\n\
         table made and filled in {:.2} s\n\
         {} batches of {} bags: kernel {:.3} s, {:.3e} rows/s, {:.1} GB/s of rows read across the bus\n\
         VRAM cost of the table and its kernels: {vram}\n\
         check: {} of {} bags match the CPU reference{}\n",
        r.device, r.api, c.sizing, c.bag, Bytes(c.table_bytes as u64), c.rows(), c.dim, r.mechanism, r.table_buffers,
        r.fill_s, c.batches, c.bags, r.kernel_s, r.rows_per_s, r.read_gbps,
        r.checked_bags - r.mismatched_bags, r.checked_bags,
        if r.mismatched_bags == 0 { "" } else { "  <-- MISMATCH" }
    )
}
