//! One device's buffers inside its VRAM budget: the residents, the ring's slots and, across
//! passes, the slots of the blocks that stay resident ([`super::resident`]); and the
//! host-resident buffers a target brings, checked before the canary is written into them.

use super::error::{LayoutError, StreamError};
use super::guard::{self, allocation};
use super::job::{Hosted, JobViews};
use super::layout::{slots_for, Layout, SlotShape};
use super::options::StreamOptions;
use super::pool::DevicePool;
use super::resident::{resident_blocks, ResidencyReason, Room};
use crate::backend::api::{Api, Device};
use std::ops::Range;

/// A slot: one buffer per input block and, out of place, one for the output block. The
/// ring's slots come first, then one per resident block.
pub(crate) struct Slot<A: Api> {
    pub(crate) ins: Vec<A::Buffer>,
    pub(crate) out: Option<A::Buffer>,
}

/// What a device streams, as its buffers are sized: the run's options, layout and memory,
/// and how many of the run's blocks it streams.
pub(crate) struct Sizing<'r, 'h> {
    pub(crate) opts: &'r StreamOptions,
    pub(crate) layout: &'r Layout,
    pub(crate) views: &'r JobViews<'h>,
    pub(crate) blocks: usize,
}

/// A device's buffers: its pool, its slots (the ring's, then the resident blocks'), its
/// residents, and which of its blocks (share-local) stay resident, and why.
pub(crate) struct Allocated<'d, D: Device> {
    pub(crate) pool: DevicePool<'d, D>,
    pub(crate) slots: Vec<Slot<D::A>>,
    pub(crate) residents: Vec<<D::A as Api>::Buffer>,
    /// Slots of the ring (the rest are resident blocks').
    pub(crate) ring: usize,
    /// The share-local blocks that stay resident.
    pub(crate) resident: Range<usize>,
    pub(crate) why: ResidencyReason,
    /// Device bytes of one slot, guards counted.
    pub(crate) slot_bytes: u64,
}

/// Allocates the residents, as many slots as the budget holds and, across passes, a slot per
/// resident block in what the budget leaves; each buffer with a guard zone where `guarded`.
pub(crate) fn allocate<'d, D: Device>(
    device: &'d D,
    sizing: &Sizing,
    guarded: bool,
) -> Result<Allocated<'d, D>, StreamError> {
    let (views, layout, opts) = (sizing.views, sizing.layout, sizing.opts);
    let shape = SlotShape {
        inputs: views.input_count(),
        output: !views.in_place(),
        resident: (views.residents.iter())
            .map(|r| allocation(r.len(), r.len(), guarded) as u64)
            .sum(),
        max_alloc: device.max_alloc(),
        blocks: sizing.blocks,
        guarded,
    };
    let ring = slots_for(opts, layout, &shape)?;
    let mut pool = DevicePool::new(device, opts.vram_budget);
    let residents = (views.residents.iter().enumerate())
        .map(|(j, r)| {
            pool.alloc(
                allocation(r.len(), r.len(), guarded),
                &format!("resident buffer {j}"),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut slots = alloc_slots::<D::A>(&mut pool, layout, 0..ring, &shape)?;
    let slot_bytes = shape.slot_bytes(layout);
    let room = Room {
        budget: opts.vram_budget,
        used: pool.used(),
        slots: ring,
        slot: slot_bytes,
    };
    let (resident, why) = resident_blocks(opts, sizing.blocks, &room)?;
    let kept = alloc_slots::<D::A>(&mut pool, layout, ring..ring + resident.len(), &shape)?;
    slots.extend(kept);
    Ok(Allocated {
        pool,
        slots,
        residents,
        ring,
        resident,
        why,
        slot_bytes,
    })
}

/// Allocates the slots numbered `which` (those past the ring's slots hold resident blocks).
fn alloc_slots<A: Api>(
    pool: &mut DevicePool<'_, A::Device>,
    layout: &Layout,
    which: Range<usize>,
    shape: &SlotShape,
) -> Result<Vec<Slot<A>>, StreamError> {
    let mut slots = Vec::with_capacity(which.len());
    for s in which {
        let alloc = |bytes, reach| allocation(bytes, reach, shape.guarded);
        let ins = (0..shape.inputs)
            .map(|j| {
                pool.alloc(
                    alloc(layout.in_block_bytes(), layout.in_block_bytes()),
                    &format!("slot {s} input {j}"),
                )
            })
            .collect::<Result<_, _>>()?;
        let out = shape
            .output
            .then(|| {
                pool.alloc(
                    alloc(layout.out_block_bytes(), layout.out_reach()),
                    &format!("slot {s} output"),
                )
            })
            .transpose()?;
        slots.push(Slot { ins, out });
    }
    Ok(slots)
}

/// A target's host-resident buffers, and each one's (usable, guard) bytes.
pub(crate) type HostedZones<'a, A> = (Vec<&'a <A as Api>::Buffer>, Vec<(usize, usize)>);

/// The host-resident buffers of a target on `device`, and each one's (usable, guard) bytes;
/// refused where one's buffer is shorter than both, or where the run is `guarded` and one
/// has no guard zone (before the canary is written into it).
pub(crate) fn hosted_zones<'a, D: Device>(
    device: &D,
    hosted: &[Hosted<'a, D::A>],
    guarded: bool,
) -> Result<HostedZones<'a, D::A>, StreamError> {
    for h in hosted {
        let has = device.buffer_len(h.buffer);
        if h.len.checked_add(h.guard).is_none_or(|need| need > has) {
            let (name, len, guard) = (h.name.clone(), h.len, h.guard);
            return Err(LayoutError::HostedShort {
                name,
                has,
                len,
                guard,
            }
            .into());
        }
    }
    if let Some(h) = hosted.iter().find(|h| guarded && h.guard < guard::PROBE) {
        let name = h.name.clone();
        return Err(LayoutError::HostedUnguarded { name }.into());
    }
    let zones = hosted.iter().map(|h| (h.len, h.guard)).collect();
    Ok((hosted.iter().map(|h| h.buffer).collect(), zones))
}
