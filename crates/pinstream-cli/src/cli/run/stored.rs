//! `run --from-storage`, the run: inputs streamed from their files through staging rings of
//! pinned memory, and the result written to `--output` block by block
//! ([`pinstream::engine::storage`]), so a run whose regions do not fit in host memory holds
//! only the rings. `storage` decides whether this runs.

use super::data::Data;
use super::output::{render_text, RunReport};
use super::settings::Settings;
use super::storage::{plan_rings, StorageLine};
use super::stream::Streams;
use super::tiers::{self, TierPlan};
use crate::cli::signals::{self, Mode};
use crate::cli::{files, out, stream_failure, Failure};
use pinstream::backend::api::{Device, KernelOf};
use pinstream::engine::io::Output;
use pinstream::engine::profile::{chrome_trace_with_host, HostSlice};
use pinstream::engine::storage::{
    run_from_storage_tiered, vram_tier as vram_tier_of, StagingPlan, StorageError, StorageJob,
    StorageOptions, StorageReport, VramTier,
};
use pinstream::engine::{HostMemory, Residency, ResidencyReason, StreamOptions};
use pinstream::host::HostApi;
use pinstream::units::Bytes;
use pinstream_cli::advice::Flags;

/// Streams the run from storage on `streams`' one device and reports it.
pub(super) fn run_stored<A: HostApi>(
    streams: &Streams<'_, A>,
    kernels: &mut [KernelOf<A>],
    outputs: &[Output],
    why: String,
) -> Result<(), Failure> {
    let (s, plan) = (streams.s, streams.plan);
    signals::phase("while pinning the staging rings", Mode::Exit)?;
    let rings = plan_rings(plan.len, plan.in_place, &plan.opts)?;
    let mut data = Data::staged(streams.devices, s, plan, &rings)?;
    let (mut tier, placed) = host_tier(streams, &rings, &data.residents)?;
    let named = files::given(&[("--output", &s.output), ("--trace", &s.trace)]);
    let output = named.iter().zip(outputs).find(|(n, _)| n.0 == "--output");
    let vram_before = streams.devices.probe().used();
    let (mut rep, peak) = streams.drive(kernels, false, |targets, o, progress| {
        let [target] = targets else {
            return Err(Failure::usage("storage streams on one device"));
        };
        fifo_phase(output.map(|(_, o)| o))?;
        let (staging, residents) = data.staging();
        let job = StorageJob {
            inputs: s.input_files.clone(),
            in_place: plan.in_place,
            output: output.map(|(_, o)| o.clone()),
            residents,
            args: s.args.clone(),
        };
        let tier = tier.as_mut().map(|m| m as &mut dyn HostMemory);
        let o = &StreamOptions {
            residency: vram_policy(s, target.device.is_cpu()),
            ..o.clone()
        };
        run_from_storage_tiered(
            target,
            job,
            staging,
            tier,
            o,
            &StorageOptions::default(),
            progress,
        )
        .map_err(storage_failure)
    })?;
    if placed.as_ref().is_some_and(|p| p.vram_cpu) {
        rep.stream.residency.reason = ResidencyReason::CpuDevice;
    }
    let trace = trace(&rep, placed.as_ref().map(|p| p.host_blocks))?;
    let traced = named.iter().zip(outputs).find(|(n, _)| n.0 == "--trace");
    let written = traced.map_or(Ok(()), |(_, o)| files::save(o, &trace));
    let vram = streams.vram(vram_before, peak);
    let mut line = StorageLine::streamed(why, &rep);
    line.plan = placed.map(|p| p.measured(&rep));
    let mut report = streams.report(&data, vram, rep.stream, None, true);
    report.storage = line;
    report.output = s.output.as_ref().map(|p| p.display().to_string());
    print(s, &report)?;
    written
}

/// Where the output is a FIFO: its open waits for a reader and its writes for room, so the
/// first stop must end the process, as every FIFO write does (nothing to clean up: no
/// temporary file).
fn fifo_phase(output: Option<&Output>) -> Result<(), Failure> {
    if let Some(o) = output.filter(|o| files::is_fifo(o)) {
        let during = format!(
            "while writing {} (a FIFO waits for its reader)",
            o.given.display()
        );
        signals::phase(during, Mode::Exit)?;
    }
    Ok(())
}

/// A run of several passes: its host tier, pinned (none where `--host-tier` leaves none, or
/// the VRAM tier holds every block), and the placement over the tiers, printed now (before
/// the run) in text.
fn host_tier<A: HostApi>(
    streams: &Streams<'_, A>,
    rings: &StagingPlan,
    residents: &[A::HostMemory],
) -> Result<(Option<A::HostMemory>, Option<TierPlan>), Failure> {
    let (s, plan) = (streams.s, streams.plan);
    let inputs = s.input_files.len();
    let vram = vram_tier(streams, residents)?;
    let below = (plan.len * inputs) as u64 - vram.input_bytes * inputs as u64;
    let tier_bytes = tiers::tier_bytes(s, below);
    // `auto` goes without a tier where its memory cannot be pinned; a SIZE asked for fails.
    let tier = match usize::try_from(tier_bytes).unwrap_or(0) {
        0 => None,
        n => match streams.devices.pin(s, n, &[]) {
            Ok((m, _)) => Some(m),
            Err(_) if matches!(s.host_tier, Residency::Auto) => None,
            Err(e) => return Err(e),
        },
    };
    let tier_bytes = tier.as_ref().map_or(0, |m| m.len() as u64);
    let placed = (s.passes > 1).then(|| tiers::plan(s, (rings, inputs), &vram, tier_bytes));
    if let Some(p) = placed.as_ref().filter(|_| !s.json) {
        out::emit(&p.text())?;
    }
    Ok((tier, placed))
}

/// The VRAM tier's policy of a run from storage: `--residency`, but none for `auto` on a
/// CPU device, whose memory is the host's: there the host tier keeps blocks (sized by the
/// room the container leaves), and a VRAM tier beside it would take host memory the room
/// does not count (a SIZE asks for one all the same).
fn vram_policy(s: &Settings, cpu: bool) -> Residency {
    match (s.residency, cpu) {
        (Residency::Auto, true) => Residency::Off,
        (r, _) => r,
    }
}

/// The blocks the run keeps in device memory across its passes, as the engine will.
fn vram_tier<A: HostApi>(
    streams: &Streams<'_, A>,
    residents: &[A::HostMemory],
) -> Result<VramTier, Failure> {
    let (s, plan) = (streams.s, streams.plan);
    let job = StorageJob {
        inputs: s.input_files.clone(),
        in_place: plan.in_place,
        output: None,
        residents: residents.iter().map(|r| r as &dyn HostMemory).collect(),
        args: s.args.clone(),
    };
    let device = (streams.devices.all().first()).ok_or_else(|| Failure::usage("no device"))?;
    let opts = StreamOptions {
        residency: vram_policy(s, device.is_cpu()),
        ..plan.opts.clone()
    };
    let storage = StorageOptions::default();
    let mut v = vram_tier_of(device, &job, &opts, &storage).map_err(storage_failure)?;
    if opts.residency != s.residency {
        v.reason = ResidencyReason::CpuDevice;
    }
    Ok(v)
}

/// The stream's commands with the storage's reads and writes on a track of their own, on
/// the host's time axis. With several passes (`host_blocks`: the leading blocks of each input
/// the host tier holds), each upload says where its block came from: ` (host tier)` in the
/// passes after the first for the blocks it holds, ` (storage)` otherwise; and the kernels
/// of the VRAM tier's blocks in those passes, which have no upload, say ` (VRAM tier)`
/// (`args.from` alike).
fn trace(r: &StorageReport, host_blocks: Option<usize>) -> Result<Vec<u8>, Failure> {
    let host: Vec<HostSlice> = (r.transfers.iter())
        .map(|&(write, start_s, end_s, bytes)| HostSlice {
            name: format!("{} {}", if write { "write" } else { "read" }, Bytes(bytes)),
            start_s,
            dur_s: end_s - start_s,
        })
        .collect();
    let first = r.stream.first_upload_s.unwrap_or(0.0);
    let (title, track) = (
        "stream from storage, three queues",
        "storage reads and writes",
    );
    let mut t = chrome_trace_with_host(title, &r.stream.records, track, &host, first);
    let vram = (r.stream.residency.of).saturating_sub(r.stream.residency.blocks);
    if let (Some(held), Some(events)) = (host_blocks, t["traceEvents"].as_array_mut()) {
        events.iter_mut().for_each(|e| name_tier(e, held, vram));
    }
    serde_json::to_vec(&t).map_err(Failure::run)
}

/// Names the tier an upload event's block came from: the host tier for blocks below `held`
/// in passes after the first (`args.pass` >= 2), storage otherwise; and a kernel event's of
/// a block from `vram` on in those passes: the VRAM tier (it was not uploaded).
fn name_tier(e: &mut serde_json::Value, held: usize, vram: usize) {
    let later = e["args"]["pass"].as_u64().is_some_and(|p| p >= 2);
    let block = e["args"]["block"].as_u64().unwrap_or(u64::MAX);
    let from = match (e["cat"].as_str(), later) {
        (Some("kernel"), true) if block >= vram as u64 => "VRAM tier",
        (Some("upload"), true) if block < held as u64 => "host tier",
        (Some("upload"), _) => "storage",
        _ => return,
    };
    let name = format!("{} ({from})", e["name"].as_str().unwrap_or("upload"));
    e["name"] = name.into();
    e["args"]["from"] = from.into();
}

/// Prints the report, as text or JSON.
pub(super) fn print(s: &Settings, report: &RunReport) -> Result<(), Failure> {
    signals::phase("while printing the report", Mode::Exit)?;
    if s.json {
        out::line(serde_json::to_string_pretty(report).map_err(Failure::run)?)
    } else {
        out::emit(&render_text(report))
    }
}

fn storage_failure(e: StorageError) -> Failure {
    match e {
        StorageError::Stream(e) => stream_failure(e, Flags::RUN),
        e @ StorageError::Io(_) => Failure::run(e),
        e => Failure::usage(e),
    }
}

/// The pinned staging of a storage run, lent to it.
impl<M: HostMemory> Data<M> {
    /// The rings (inputs, then the output out of place) and the residents.
    fn staging(&mut self) -> (Vec<&mut dyn HostMemory>, Vec<&dyn HostMemory>) {
        let rings = (self.regions.iter_mut())
            .chain(self.output.as_mut())
            .map(|r| r as &mut dyn HostMemory)
            .collect();
        let residents = self
            .residents
            .iter()
            .map(|r| r as &dyn HostMemory)
            .collect();
        (rings, residents)
    }
}
