//! `run --from-storage --passes N`, the placement over the tiers: how many of the last blocks
//! stay in device memory across passes (`--residency`, in what `--vram-budget` leaves after
//! the ring), how much host memory keeps the leading blocks (`--host-tier`), and the plan
//! printed before the run: bytes in each tier, and per pass the bytes over each link; after
//! the run, the floor those bytes imply at the rates the run measured, and which link bounds
//! a pass. No block is in two tiers.

use super::settings::Settings;
use pinstream::backend::os;
use pinstream::engine::storage::{host_tier_held, StagingPlan, StorageReport, VramTier};
use pinstream::engine::{Residency, ResidencyReason};
use pinstream::units::Bytes;
use serde::Serialize;

/// Where a storage run's data lives across passes, and what each pass moves.
#[derive(Debug, Clone, Serialize)]
pub(super) struct TierPlan {
    /// Passes.
    pub passes: usize,
    /// Bytes of the inputs kept in VRAM across passes (all inputs): the last blocks, which
    /// passes after the first neither read nor upload.
    pub vram_bytes: u64,
    /// The blocks the VRAM tier holds: the run's last `vram_blocks` of `blocks`.
    pub vram_blocks: usize,
    /// Blocks in the run.
    pub blocks: usize,
    /// Device bytes the VRAM tier takes (each block as a slot holds it, guards counted).
    pub vram_device_bytes: u64,
    /// How many blocks stayed in VRAM and why (`none (passes = 1)`, `off`, or the room).
    pub vram_why: String,
    /// No VRAM tier because the device is a CPU device (`--residency auto` there).
    pub vram_cpu: bool,
    /// Bytes kept in pinned host memory across passes (all inputs).
    pub host_bytes: u64,
    /// The leading blocks of each input the host tier holds: in passes after the first, the
    /// run's blocks below this come from host memory, the rest from storage.
    pub host_blocks: usize,
    /// Bytes read from storage in every pass (the rest).
    pub storage_bytes: u64,
    /// Bytes read from storage by the first pass.
    pub first_pass_storage_bytes: u64,
    /// Bytes each later pass reads from storage.
    pub later_pass_storage_bytes: u64,
    /// Bytes the first pass uploads (every block).
    pub first_pass_h2d_bytes: u64,
    /// Bytes each later pass uploads (host to device): all but the VRAM tier's.
    pub pass_h2d_bytes: u64,
    /// Bytes each pass but the last downloads: in place all but the VRAM tier's results,
    /// which stay on the device until the last pass; out of place every result.
    pub pass_d2h_bytes: u64,
    /// Bytes the last pass downloads: every result.
    pub last_pass_d2h_bytes: u64,
    /// Which link bounds a later pass: before the run none is measured, so it says what
    /// would; after it, see `floor`.
    pub bound: String,
    /// After the run: a later pass's floor on each link at the rates this run measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<PassFloor>,
}

/// A later pass's floor on each link: its bytes over the link at the rate this run measured
/// while the link was busy (the disk's reads and writes, the uploads, the downloads), and
/// which is the largest. A floor, not a forecast: the links overlap, so a pass takes at least
/// the largest. The disk counts as one link, its floor the larger of its reads and writes
/// (each rate measured while both ran).
#[derive(Debug, Clone, Serialize)]
pub(super) struct PassFloor {
    /// Seconds to read the pass's storage bytes at the disk's measured rate.
    pub storage_s: f64,
    /// The disk's rate while reading, GB/s (this run's).
    pub storage_gbps: f64,
    /// Seconds to write back what a pass but the last writes (what it streamed, as the first
    /// pass did) at the disk's measured write rate; the last pass writes every block, which
    /// its own floor in `pass_floor_s` counts.
    pub storage_write_s: f64,
    /// The disk's rate while writing, GB/s (this run's; 0 where nothing was written).
    pub storage_write_gbps: f64,
    /// Seconds to upload the pass's bytes at the uploads' measured rate.
    pub h2d_s: f64,
    /// The uploads' rate while busy, GB/s (this run's).
    pub h2d_gbps: f64,
    /// Seconds to download the pass's bytes at the downloads' measured rate.
    pub d2h_s: f64,
    /// The downloads' rate while busy, GB/s (this run's).
    pub d2h_gbps: f64,
    /// The link with the largest floor: `storage`, `host to device` or `device to host`.
    pub bound: &'static str,
    /// The later passes' measured seconds (device time, as `stream.pass_seconds`).
    pub measured_s: Vec<f64>,
    /// Each later pass's own floor: the largest of its bytes read, written, uploaded and
    /// downloaded over the run's rates (the last pass moves more than the others).
    pub pass_floor_s: Vec<f64>,
}

/// The host tier's bytes for `data` bytes of inputs: none with one pass or `off`; `auto`:
/// half the host memory available now (the staging rings pinned, the cgroup counted): the
/// device's buffers come after it, and on a CPU device (PoCL) they are host memory too (a
/// tier of all but a tenth was killed by a 256 MiB cgroup's limit); SIZE: that; at most the
/// data.
pub(super) fn tier_bytes(s: &Settings, data: u64) -> u64 {
    if s.passes < 2 {
        return 0;
    }
    let want = match s.host_tier {
        Residency::Off => 0,
        Residency::Bytes(n) => n,
        Residency::Auto => os::host_room().map_or(0, |r| r.bytes / 2),
    };
    want.min(data)
}

/// The plan of `s.passes` passes over `inputs` inputs of `rings`' length with the VRAM tier
/// `vram` and a host tier of `tier` bytes.
pub(super) fn plan(
    s: &Settings,
    (rings, inputs): (&StagingPlan, usize),
    vram: &VramTier,
    tier: u64,
) -> TierPlan {
    let tier = usize::try_from(tier).unwrap_or(usize::MAX);
    let per_input = host_tier_held(rings, inputs, tier, vram.blocks.len());
    let held = (per_input * inputs) as u64;
    let data = (rings.len * inputs) as u64;
    let on_device = vram.input_bytes * inputs as u64;
    let later = data - held - on_device;
    let d2h = rings.out_len as u64;
    // In place the data's VRAM blocks come back once, after the last pass.
    let kept_back = if rings.output_bytes == 0 {
        vram.input_bytes
    } else {
        0
    };
    let bound = "not measured: run measures neither the disk's read rate nor the link's peak; \
                 a later pass takes at least its storage bytes over the disk's rate and its \
                 host-to-device bytes over the link's peak (pinstream bench storage, pinstream bench)";
    TierPlan {
        passes: s.passes,
        vram_bytes: on_device,
        vram_blocks: vram.blocks.len(),
        blocks: vram.of,
        vram_device_bytes: vram.bytes,
        vram_why: vram_why(vram),
        vram_cpu: vram.reason == ResidencyReason::CpuDevice,
        host_bytes: held,
        host_blocks: per_input.div_ceil(rings.in_block.max(1)),
        storage_bytes: later,
        first_pass_storage_bytes: data,
        later_pass_storage_bytes: if s.passes > 1 { later } else { data },
        first_pass_h2d_bytes: data,
        pass_h2d_bytes: data - on_device,
        pass_d2h_bytes: d2h - kept_back,
        last_pass_d2h_bytes: d2h,
        bound: bound.into(),
        floor: None,
    }
}

/// What the VRAM tier holds and why, as the report's resident blocks line says it.
fn vram_why(v: &VramTier) -> String {
    let r = pinstream::engine::ResidencyReport {
        policy: Residency::Auto,
        blocks: v.blocks.len(),
        of: v.of,
        bytes: v.bytes,
        reason: v.reason,
    };
    r.to_string()
}

impl TierPlan {
    /// The plan with a later pass's floor at the rates `r` measured (none where a link moved
    /// nothing), and `bound` saying which link it is.
    pub fn measured(mut self, r: &StorageReport) -> Self {
        let rate = |bytes: u64, s: f64| (s > 0.0 && bytes > 0).then(|| bytes as f64 / s / 1e9);
        let t = &r.stream.totals;
        let rates = (
            rate(r.read_bytes, r.read_s),
            rate(t.upload.bytes, t.upload.busy_s),
            rate(t.download.bytes, t.download.busy_s),
        );
        let (Some(disk), Some(up), Some(down)) = rates else {
            return self;
        };
        let write = rate(r.written_bytes, r.write_s);
        let secs = |bytes: u64, gbps: f64| bytes as f64 / 1e9 / gbps;
        let writes = |bytes: u64| write.map_or(0.0, |w| secs(bytes, w));
        // A pass but the last writes back what it streamed, as the first did; the last
        // writes every block (its own floor, in `pass_floor_s`).
        let later_writes = writes(r.pass_written_bytes.first().copied().unwrap_or(0));
        let storage_s = secs(self.later_pass_storage_bytes, disk);
        let links = [
            ("storage", storage_s.max(later_writes)),
            ("host to device", secs(self.pass_h2d_bytes, up)),
            ("device to host", secs(self.pass_d2h_bytes, down)),
        ];
        let bound = links
            .iter()
            .fold(links[0], |a, &b| if b.1 > a.1 { b } else { a });
        self.bound = format!("{} (the largest floor at this run's rates)", bound.0);
        let bytes = |v: &[u64], k: usize| v.get(k).copied().unwrap_or(0);
        let pass_floor_s = (1..r.stream.pass_bytes.len())
            .map(|k| {
                let moved = &r.stream.pass_bytes[k];
                (secs(bytes(&r.pass_read_bytes, k), disk))
                    .max(writes(bytes(&r.pass_written_bytes, k)))
                    .max(secs(moved.h2d, up))
                    .max(secs(moved.d2h, down))
            })
            .collect();
        self.floor = Some(PassFloor {
            storage_s,
            storage_gbps: disk,
            storage_write_s: later_writes,
            storage_write_gbps: write.unwrap_or(0.0),
            h2d_s: links[1].1,
            h2d_gbps: up,
            d2h_s: links[2].1,
            d2h_gbps: down,
            bound: bound.0,
            measured_s: r.stream.pass_seconds.iter().skip(1).copied().collect(),
            pass_floor_s,
        });
        self
    }

    /// After the run: the floor's line (empty before it, or where a link moved nothing).
    pub fn floor_text(&self) -> String {
        let Some(f) = &self.floor else {
            return String::new();
        };
        let listed = |v: &[f64]| {
            v.iter()
                .map(|s| format!("{s:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "floor per later pass at this run's rates: storage {:.3} s ({} at {:.2} GB/s), storage writes {:.3} s ({:.2} GB/s), host to device {:.3} s ({:.2} GB/s), device to host {:.3} s ({:.2} GB/s); bound: {}; measured {} s against each pass's own floor {} s\n",
            f.storage_s,
            Bytes(self.later_pass_storage_bytes),
            f.storage_gbps,
            f.storage_write_s,
            f.storage_write_gbps,
            f.h2d_s,
            f.h2d_gbps,
            f.d2h_s,
            f.d2h_gbps,
            f.bound,
            listed(&f.measured_s),
            listed(&f.pass_floor_s),
        )
    }

    /// The plan's lines.
    pub fn text(&self) -> String {
        let vram = match self.vram_blocks {
            0 => format!("none ({})", self.vram_why),
            n => format!(
                "{} (the last {n} of {} blocks, {} of device memory)",
                Bytes(self.vram_bytes),
                self.blocks,
                Bytes(self.vram_device_bytes)
            ),
        };
        let later = match self.passes {
            2 => "pass 2".to_string(),
            n => format!("passes 2-{n}"),
        };
        format!(
            "plan: {} pass(es); VRAM tier {vram}, host tier {} ({} leading blocks), storage {}\n\
             plan per pass: storage read {} (pass 1), {} ({later}); host to device {} (pass 1), {} ({later}); device to host {} (the last pass), {} (the others); bound: {}\n",
            self.passes,
            Bytes(self.host_bytes),
            self.host_blocks,
            Bytes(self.storage_bytes),
            Bytes(self.first_pass_storage_bytes),
            Bytes(self.later_pass_storage_bytes),
            Bytes(self.first_pass_h2d_bytes),
            Bytes(self.pass_h2d_bytes),
            Bytes(self.last_pass_d2h_bytes),
            Bytes(self.pass_d2h_bytes),
            self.bound,
        )
    }
}
