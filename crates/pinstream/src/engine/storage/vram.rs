//! The VRAM tier of passes from storage: the device memory the ring does not need keeps
//! whole blocks across the passes ([`super::super::Residency`], as for runs from memory),
//! so that passes after the first neither read them from storage (nor the host tier) nor
//! upload them; in place, their results stay on the device between passes and are
//! downloaded once, by the last pass, into the output.
//!
//! The tiers split the blocks without overlap: the last blocks are in VRAM (computed at the
//! end of each pass, while the next pass's first reads run), the leading ones in the host
//! tier, the rest are read from storage every pass.
//!
//! Each pass is still a run of its own ([`super::run_from_storage`]); the resident blocks'
//! device buffers outlive them: the pass loop holds them (`slots::Carry`), the first pass's
//! run allocates and uploads them, later passes' runs use them as they are, and they are
//! released with the loop, on every path.

use super::{open_inputs, StorageError, StorageJob, StorageOptions};
use crate::backend::api::{Api, Device};
use crate::engine::layout::shape_layout;
use crate::engine::resident::ResidencyReason;
use crate::engine::slots::{plan_resident, Carry, Parts};
use crate::engine::{StreamError, StreamOptions};
use serde::Serialize;
use std::ops::Range;

/// The blocks a run of `opts.passes` passes from storage keeps in device memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VramTier {
    /// The blocks (the run's last ones; empty: none).
    pub blocks: Range<usize>,
    /// Blocks in the run.
    pub of: usize,
    /// Device bytes they take (each as a slot holds it: its input blocks and, out of place,
    /// its output block; guard zones counted).
    pub bytes: u64,
    /// Input bytes of one input they hold (the last block may be short).
    pub input_bytes: u64,
    /// Why so many ([`ResidencyReason`]).
    pub reason: ResidencyReason,
}

/// The VRAM tier of `job` over `opts.passes` passes on `device`, as the run will keep it:
/// what `opts.vram_budget` leaves after the residents and the ring's slots, under
/// `opts.residency` (refused where a size asked for is more than that leaves); none with
/// one pass.
pub fn vram_tier<D: Device>(
    device: &D,
    job: &StorageJob,
    opts: &StreamOptions,
    s: &StorageOptions,
) -> Result<VramTier, StorageError> {
    let len = open_inputs(&job.inputs, s)?.first().map_or(0, |f| f.len());
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let layout = shape_layout(len, job.in_place, None, opts).map_err(StreamError::from)?;
    let lens: Vec<usize> = job.residents.iter().map(|r| r.len()).collect();
    let parts = Parts {
        inputs: job.inputs.len(),
        in_place: job.in_place,
        residents: &lens,
    };
    let (blocks, reason, slot) = plan_resident(device, (opts, &layout, layout.blocks), &parts)?;
    let input_bytes = match blocks.is_empty() {
        true => 0,
        false => len.saturating_sub(blocks.start * layout.in_block_bytes()) as u64,
    };
    Ok(VramTier {
        bytes: slot.saturating_mul(blocks.len() as u64),
        blocks,
        of: layout.blocks,
        input_bytes,
        reason,
    })
}

/// The blocks of `c`'s VRAM tier that its next pass neither reads (after the first) nor
/// writes (in place, before the last); none without one.
pub(super) fn skipped<A: Api>(
    c: Option<&Carry<A>>,
    in_place: bool,
) -> (Range<usize>, Range<usize>) {
    let Some(c) = c else {
        return (0..0, 0..0);
    };
    let none = c.resident.end..c.resident.end;
    let read = match c.pass > 0 {
        true => c.resident.clone(),
        false => none.clone(),
    };
    let write = match in_place && c.pass + 1 < c.passes {
        true => c.resident.clone(),
        false => none,
    };
    (read, write)
}
