//! `run --from-storage`, the choice: whether the inputs stream from their files through
//! staging rings of pinned memory ([`choose`]; auto: when the regions do not fit in the host
//! memory available, the cgroup's room counted), the rings' plan and block, and the report's
//! storage line. `stored` runs it.

use super::settings::{FromStorage, Settings, Source};
use super::tiers::TierPlan;
use crate::cli::{stream_failure, Failure};
use pinstream::backend::os::HostRoom;
use pinstream::engine::io;
use pinstream::engine::storage::{staging_plan, StagingPlan, StorageOptions, StorageReport};
use pinstream::engine::StreamOptions;
use pinstream::units::Bytes;
use pinstream_cli::advice::Flags;
use serde::Serialize;

/// How a run got its inputs, and why; with the storage's numbers when streamed from it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct StorageLine {
    /// `storage` (streamed from disk) or `resident` (pinned whole first).
    pub mode: &'static str,
    /// Why.
    pub why: String,
    /// Bytes read from the input files (storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    /// Of them, each pass's (storage; one per pass).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pass_read_bytes: Vec<u64>,
    /// Bytes each pass took from the host tier (storage, several passes).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pass_host_bytes: Vec<u64>,
    /// The placement over VRAM, host tier and storage (several passes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<TierPlan>,
    /// Seconds some read was in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_s: Option<f64>,
    /// Read bytes over those seconds, GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_gbps: Option<f64>,
    /// Bytes written to the output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written_bytes: Option<u64>,
    /// Of them, each pass's (storage; one per pass).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pass_written_bytes: Vec<u64>,
    /// Seconds some write was in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_s: Option<f64>,
    /// Written bytes over those seconds, GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_gbps: Option<f64>,
    /// Pinned bytes of the staging rings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staging_bytes: Option<u64>,
    /// Reads and writes went past the page cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<bool>,
    /// Reads went through io_uring (else positional reads on threads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_uring: Option<bool>,
    /// Fallbacks taken.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl StorageLine {
    /// Inputs made resident, because `why`.
    pub fn resident(why: String) -> Self {
        StorageLine {
            mode: "resident",
            why,
            read_bytes: None,
            pass_read_bytes: Vec::new(),
            pass_host_bytes: Vec::new(),
            plan: None,
            read_s: None,
            read_gbps: None,
            written_bytes: None,
            pass_written_bytes: Vec::new(),
            write_s: None,
            write_gbps: None,
            staging_bytes: None,
            direct: None,
            io_uring: None,
            notes: Vec::new(),
        }
    }

    /// Streamed from storage because `why`, as `r` reports.
    pub(super) fn streamed(why: String, r: &StorageReport) -> Self {
        let gbps = |b: u64, s: f64| (s > 0.0).then(|| b as f64 / s / 1e9);
        StorageLine {
            mode: "storage",
            why,
            read_bytes: Some(r.read_bytes),
            pass_read_bytes: r.pass_read_bytes.clone(),
            pass_host_bytes: r.pass_host_bytes.clone(),
            plan: None,
            read_s: Some(r.read_s),
            read_gbps: gbps(r.read_bytes, r.read_s),
            written_bytes: Some(r.written_bytes),
            pass_written_bytes: r.pass_written_bytes.clone(),
            write_s: Some(r.write_s),
            write_gbps: gbps(r.written_bytes, r.write_s),
            staging_bytes: Some(r.staging_bytes),
            direct: Some(r.direct),
            io_uring: Some(r.io_uring),
            notes: r.notes.clone(),
        }
    }

    /// The report's lines.
    pub fn text(&self) -> String {
        let mut t = format!("{}: {}\n", self.mode, self.why);
        if let (Some(b), Some(s)) = (self.read_bytes, self.read_s) {
            let rate = self.read_gbps.map_or("-".into(), |g| format!("{g:.2}"));
            let how = if self.io_uring == Some(true) {
                "io_uring"
            } else {
                "pread"
            };
            t += &format!(
                "storage read  {} in {s:.3} s busy, {rate} GB/s while busy ({how})\n",
                Bytes(b)
            );
        }
        if self.pass_read_bytes.len() > 1 {
            let each: Vec<String> = (self.pass_read_bytes.iter().enumerate())
                .map(|(k, &b)| format!("pass {} {}", k + 1, Bytes(b)))
                .collect();
            t += &format!("storage read per pass: {}\n", each.join(", "));
            let each: Vec<String> = (self.pass_host_bytes.iter().enumerate())
                .map(|(k, &b)| format!("pass {} {}", k + 1, Bytes(b)))
                .collect();
            t += &format!("host tier per pass: {}\n", each.join(", "));
            let each: Vec<String> = (self.pass_written_bytes.iter().enumerate())
                .map(|(k, &b)| format!("pass {} {}", k + 1, Bytes(b)))
                .collect();
            t += &format!("storage write per pass: {}\n", each.join(", "));
        }
        if let Some(p) = &self.plan {
            t += &p.floor_text();
        }
        if let (Some(b), Some(s)) = (self.written_bytes, self.write_s) {
            let rate = self.write_gbps.map_or("-".into(), |g| format!("{g:.2}"));
            t += &format!(
                "storage write {} in {s:.3} s busy, {rate} GB/s while busy\n",
                Bytes(b)
            );
        }
        for n in &self.notes {
            t += &format!("note: {n}\n");
        }
        t
    }
}

/// The run's decision: `Ok(Some(why))` to stream from storage, `Ok(None)` for resident
/// (the reason in `resident_why`), an error where `--from-storage on` cannot be honoured.
pub(super) fn choose(
    s: &Settings,
    devices: usize,
    regions: u64,
    room: Option<HostRoom>,
) -> Result<Result<String, String>, Failure> {
    let cannot = cannot_stream(s, devices);
    match (s.from_storage, cannot) {
        (FromStorage::Off, _) => Ok(Err("--from-storage off".into())),
        (FromStorage::On, Some(why)) => Err(Failure::usage(format!(
            "--from-storage on cannot stream this run: {why}"
        ))),
        (FromStorage::On, None) => Ok(Ok("streamed from disk: --from-storage on".into())),
        (FromStorage::Auto, cannot) => Ok(auto(regions, room, cannot)),
    }
}

/// Auto: storage when the regions do not fit in the room with a margin (a tenth of it, for
/// the rest of the process), and storage can stream the run.
fn auto(regions: u64, room: Option<HostRoom>, cannot: Option<String>) -> Result<String, String> {
    let Some(room) = room else {
        return Err("fits: the host memory available is not known".into());
    };
    let usable = room.bytes - room.bytes / 10;
    if regions <= usable {
        return Err(format!("fits: {} of regions in {room}", Bytes(regions)));
    }
    match cannot {
        None => Ok(format!(
            "streamed from disk because the regions ({}) do not fit in {room}",
            Bytes(regions)
        )),
        Some(why) => Err(format!(
            "does not fit, and cannot stream from storage: {why}"
        )),
    }
}

/// `--from-storage on` with an input that is not a regular file, refused before its length
/// is asked for (a FIFO or a device has none, and the advice to state one with `--elements`
/// would be refused next: storage reads files whole), with the way out that runs.
pub(super) fn refuse_device_inputs(s: &Settings) -> Result<(), Failure> {
    match (s.from_storage, device_input(s)) {
        (FromStorage::On, Some(why)) => Err(Failure::usage(format!(
            "--from-storage on cannot stream this run: {why}; pass --from-storage off with --elements N to read N {} elements from it, or save it to a file",
            s.dtype
        ))),
        _ => Ok(()),
    }
}

/// The first input that is not a regular file (a FIFO, a device), and why storage cannot
/// stream it.
fn device_input(s: &Settings) -> Option<String> {
    s.sources.iter().find_map(|x| {
        let Source::File(p) = x else { return None };
        let t = std::fs::metadata(p).ok()?.file_type();
        (!t.is_file()).then(|| {
            format!(
                "{} is {}: storage streams regular files, read at offsets ahead of the device",
                p.display(),
                io::kind_of(t)
            )
        })
    })
}

/// Why storage cannot stream this run, if it cannot.
fn cannot_stream(s: &Settings, devices: usize) -> Option<String> {
    if let Some(why) = device_input(s) {
        return Some(why);
    }
    if s.sources.iter().any(|x| matches!(x, Source::Synthetic(_))) {
        return Some("--synthetic inputs have no file to stream from; pass --input FILE".into());
    }
    if devices > 1 {
        return Some("it streams on one device; pass --device N (or --from-storage off)".into());
    }
    if s.compare_sequential {
        return Some("--compare-sequential needs the inputs resident; drop it".into());
    }
    if s.elements.is_some() {
        return Some("--elements reads part of a file; drop it to stream the files whole".into());
    }
    None
}

/// The staging rings a storage run over `len` bytes per input pins.
pub(super) fn plan_rings(
    len: usize,
    in_place: bool,
    opts: &StreamOptions,
) -> Result<StagingPlan, Failure> {
    staging_plan(len, in_place, opts, &StorageOptions::default())
        .map_err(|e| stream_failure(e, Flags::RUN))
}

/// The largest block for which the rings of a storage run take at most a quarter of
/// `room` (and at most `ceiling`): a whole number of `unit`s and of pages, at least one.
pub(super) fn block_for(
    s: &Settings,
    room: Option<HostRoom>,
    unit: usize,
    ceiling: usize,
) -> usize {
    let grain = unit.saturating_mul(4096);
    let per_block = s.sources.len() as u64 + 1;
    // Saturating: a ring past any memory leaves the smallest block (the plan caps the ring
    // at the blocks there are).
    let ring = (s.slots.unwrap_or(4) as u64)
        .saturating_mul(2)
        .saturating_add(StorageOptions::default().read_ahead as u64);
    let fit = room.map_or(u64::MAX, |r| r.bytes / 4 / ring.saturating_mul(per_block));
    let fit = usize::try_from(fit).unwrap_or(usize::MAX);
    (fit.min(ceiling) / grain * grain).max(grain)
}
