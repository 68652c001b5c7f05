//! `run --from-storage --passes N`, the placement over the tiers: how much host memory keeps
//! whole blocks across passes (`--host-tier`), and the plan printed before the run: bytes in
//! each tier, and per pass the bytes over each link.

use super::settings::Settings;
use pinstream::backend::os;
use pinstream::engine::storage::{host_tier_held, StagingPlan};
use pinstream::engine::Residency;
use pinstream::units::Bytes;
use serde::Serialize;

/// Where a storage run's data lives across passes, and what each pass moves.
#[derive(Debug, Clone, Serialize)]
pub(super) struct TierPlan {
    /// Passes.
    pub passes: usize,
    /// Bytes in VRAM across passes (none: passes from storage stream every block).
    pub vram_bytes: u64,
    /// Bytes kept in pinned host memory across passes (all inputs).
    pub host_bytes: u64,
    /// Bytes read from storage in every pass (the rest).
    pub storage_bytes: u64,
    /// Bytes read from storage by the first pass.
    pub first_pass_storage_bytes: u64,
    /// Bytes each later pass reads from storage.
    pub later_pass_storage_bytes: u64,
    /// Bytes each pass uploads (host to device) and downloads.
    pub pass_h2d_bytes: u64,
    /// Bytes each pass downloads.
    pub pass_d2h_bytes: u64,
    /// Which link bounds a later pass: run measures no peak, so it says what would.
    pub bound: String,
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

/// The plan of `s.passes` passes over `inputs` inputs of `rings`' length with a host tier of
/// `tier` bytes.
pub(super) fn plan(s: &Settings, rings: &StagingPlan, inputs: usize, tier: u64) -> TierPlan {
    let tier = usize::try_from(tier).unwrap_or(usize::MAX);
    let held = (host_tier_held(rings, inputs, tier) * inputs) as u64;
    let data = (rings.len * inputs) as u64;
    let later = data - held;
    let d2h = rings.out_len as u64;
    let bound = "not measured: run measures neither the disk's read rate nor the link's peak; \
                 a later pass takes at least its storage bytes over the disk's rate and its \
                 host-to-device bytes over the link's peak (pinstream bench storage, pinstream bench)";
    TierPlan {
        passes: s.passes,
        vram_bytes: 0,
        host_bytes: held,
        storage_bytes: later,
        first_pass_storage_bytes: data,
        later_pass_storage_bytes: if s.passes > 1 { later } else { data },
        pass_h2d_bytes: data,
        pass_d2h_bytes: d2h,
        bound: bound.into(),
    }
}

impl TierPlan {
    /// The plan's lines.
    pub fn text(&self) -> String {
        format!(
            "plan: {} pass(es); VRAM tier none (passes from storage stream every block), host tier {}, storage {}\n\
             plan per pass: storage read {} (pass 1), {} ({}); host to device {}, device to host {}; bound: {}\n",
            self.passes,
            Bytes(self.host_bytes),
            Bytes(self.storage_bytes),
            Bytes(self.first_pass_storage_bytes),
            Bytes(self.later_pass_storage_bytes),
            match self.passes {
                2 => "pass 2".to_string(),
                n => format!("passes 2-{n}"),
            },
            Bytes(self.pass_h2d_bytes),
            Bytes(self.pass_d2h_bytes),
            self.bound,
        )
    }
}
