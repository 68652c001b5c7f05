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

impl<D: Device> Allocated<'_, D> {
    /// Leaves the resident blocks' slots in `carry`, for the caller's next pass.
    pub(crate) fn hand_over(&mut self, carry: Option<&mut Carry<D::A>>) {
        if let Some(c) = carry {
            c.slots = self.slots.split_off(self.ring);
        }
    }

    /// The resident blocks, their device bytes, and why.
    pub(crate) fn kept(&self) -> (usize, u64, ResidencyReason) {
        let n = self.resident.len();
        (n, n as u64 * self.slot_bytes, self.why)
    }
}

/// Resident blocks that outlive one run: a caller that makes its passes as runs of their own
/// (passes from storage, [`super::storage`]) decides them once ([`plan_resident`]) and lends
/// this to each pass's run. The first pass's run allocates their slots and uploads them; it
/// leaves the slots here, and later passes' runs use them without an upload; in place, only
/// the last pass downloads them. Dropped with the caller's loop, the slots are released.
pub(crate) struct Carry<A: Api> {
    /// The pass the next run makes (0: the first) of the caller's `passes`.
    pub(crate) pass: usize,
    /// Passes the caller makes.
    pub(crate) passes: usize,
    /// The blocks that stay resident, and why.
    pub(crate) resident: Range<usize>,
    pub(crate) why: ResidencyReason,
    /// Their slots, once the first pass allocated them.
    pub(crate) slots: Vec<Slot<A>>,
}

/// What a device's slots and residents hold: streamed inputs (the in-place data counted),
/// whether the results go back in place, and each resident's bytes.
pub(crate) struct Parts<'a> {
    pub(crate) inputs: usize,
    pub(crate) in_place: bool,
    pub(crate) residents: &'a [usize],
}

/// The shape of one device's slots for `blocks` blocks of `layout`, and the ring's slot
/// count in its budget.
fn ring_shape<D: Device>(
    device: &D,
    (opts, layout, blocks): (&StreamOptions, &Layout, usize),
    parts: &Parts,
    guarded: bool,
) -> Result<(SlotShape, usize), StreamError> {
    let shape = SlotShape {
        inputs: parts.inputs,
        output: !parts.in_place,
        resident: (parts.residents.iter())
            .map(|&r| allocation(r, r, guarded) as u64)
            .sum(),
        max_alloc: device.max_alloc(),
        blocks,
        guarded,
    };
    let ring = slots_for(opts, layout, &shape)?;
    Ok((shape, ring))
}

/// The blocks of a device's `blocks` blocks of `layout` that stay resident over
/// `opts.passes` passes, as [`allocate`] decides them: the last ones, as many as what the
/// budget leaves after the residents and the ring's slots holds under the options' policy;
/// and the device bytes of one block's slot.
pub(crate) fn plan_resident<D: Device>(
    device: &D,
    (opts, layout, blocks): (&StreamOptions, &Layout, usize),
    parts: &Parts,
) -> Result<(Range<usize>, ResidencyReason, u64), StreamError> {
    let guarded = opts.check_bounds.applies(device.is_cpu());
    let (shape, ring) = ring_shape(device, (opts, layout, blocks), parts, guarded)?;
    let slot = shape.slot_bytes(layout);
    let room = Room {
        budget: opts.vram_budget,
        used: shape
            .resident
            .saturating_add(slot.saturating_mul(ring as u64)),
        slots: ring,
        slot,
    };
    let (resident, why) = resident_blocks(opts, blocks, &room)?;
    Ok((resident, why, slot))
}

/// Allocates the residents, as many slots as the budget holds and, across passes, a slot per
/// resident block in what the budget leaves; each buffer with a guard zone where `guarded`.
/// With `carry`, its blocks stay resident: allocated by its first pass, taken from it after.
pub(crate) fn allocate<'d, D: Device>(
    device: &'d D,
    sizing: &Sizing,
    guarded: bool,
    carry: Option<&mut Carry<D::A>>,
) -> Result<Allocated<'d, D>, StreamError> {
    let (views, layout, opts) = (sizing.views, sizing.layout, sizing.opts);
    let lens: Vec<usize> = views.residents.iter().map(|r| r.len()).collect();
    let parts = Parts {
        inputs: views.input_count(),
        in_place: views.in_place(),
        residents: &lens,
    };
    let (shape, ring) = ring_shape(device, (opts, layout, sizing.blocks), &parts, guarded)?;
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
    let (resident, why) = match &carry {
        Some(c) => (c.resident.clone(), c.why),
        None => {
            let room = Room {
                budget: opts.vram_budget,
                used: pool.used(),
                slots: ring,
                slot: slot_bytes,
            };
            resident_blocks(opts, sizing.blocks, &room)?
        }
    };
    let which = ring..ring + resident.len();
    let kept = resident_slots::<D::A>(&mut pool, (layout, &shape, slot_bytes), which, carry)?;
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

/// The slots of the resident blocks, numbered `which`: after a carry's first pass, the ones
/// that pass left in it (their blocks are on the device already, so the pass uploads none of
/// them), else allocated now. A carry past its first pass without them is an engine bug,
/// refused: fresh slots would hold no data, and the pass would run its kernel on them.
fn resident_slots<A: Api>(
    pool: &mut DevicePool<'_, A::Device>,
    (layout, shape, slot_bytes): (&Layout, &SlotShape, u64),
    which: Range<usize>,
    carry: Option<&mut Carry<A>>,
) -> Result<Vec<Slot<A>>, StreamError> {
    let Some(c) = carry.filter(|c| c.pass > 0) else {
        return alloc_slots::<A>(pool, layout, which, shape);
    };
    if c.slots.len() != which.len() {
        return Err(StreamError::Internal(format!(
            "pass {} of {} has {} slot(s) of resident blocks kept from the first pass, not the {} it keeps",
            c.pass + 1,
            c.passes,
            c.slots.len(),
            which.len()
        )));
    }
    if !which.is_empty() {
        let bytes = slot_bytes.saturating_mul(which.len() as u64);
        pool.adopt(bytes, "the resident blocks kept from the first pass")?;
    }
    Ok(std::mem::take(&mut c.slots))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::api::{Adapter, Instance};
    use crate::backend::empty::{EmptyInstance, HeapMemory};
    use crate::engine::job::Job;
    use crate::engine::layout::shape_layout;
    use crate::engine::{BoundsCheck, DType, Residency, WorkSize};

    fn opts() -> StreamOptions {
        StreamOptions {
            dtype: DType::U32,
            out_dtype: DType::U32,
            block_bytes: 4096,
            in_per_out: 1,
            slots: None,
            vram_budget: 1 << 20,
            work: WorkSize::default(),
            sequential: false,
            stop: None,
            check_bounds: BoundsCheck::Off,
            passes: 3,
            residency: Residency::Auto,
        }
    }

    /// A carry's first pass allocates the resident blocks' slots and leaves them in it; the
    /// next takes them; a pass after the first that finds none is an internal error, not
    /// fresh slots that would hold no data.
    #[test]
    fn a_later_pass_without_the_kept_slots_is_an_internal_error() {
        let device = EmptyInstance::new_with(1, 64 << 20).adapters().unwrap()[0]
            .open()
            .unwrap();
        let opts = opts();
        let mut data = HeapMemory(vec![0; 64 << 10]);
        let job = Job {
            in_place: Some(&mut data),
            ..Job::default()
        };
        let views = JobViews::new(job).unwrap();
        let layout = shape_layout(views.input_len(), true, None, &opts).unwrap();
        let blocks = layout.blocks;
        let (layout, views) = (&layout, &views);
        let sizing = Sizing {
            opts: &opts,
            layout,
            views,
            blocks,
        };
        let parts = Parts {
            inputs: 1,
            in_place: true,
            residents: &[],
        };
        let (resident, why, _) = plan_resident(&device, (&opts, layout, blocks), &parts).unwrap();
        assert!(!resident.is_empty(), "the budget keeps blocks resident");
        let mut carry = Carry {
            pass: 0,
            passes: 3,
            resident,
            why,
            slots: Vec::new(),
        };
        let mut first = allocate(&device, &sizing, false, Some(&mut carry)).unwrap();
        first.hand_over(Some(&mut carry));
        assert_eq!(carry.slots.len(), carry.resident.len());
        carry.pass = 1;
        let second = allocate(&device, &sizing, false, Some(&mut carry)).unwrap();
        assert!(carry.slots.is_empty());
        assert_eq!(second.slots.len(), second.ring + carry.resident.len());
        // The second pass never handed its slots back.
        carry.pass = 2;
        match allocate(&device, &sizing, false, Some(&mut carry)) {
            Err(StreamError::Internal(what)) => {
                assert!(what.contains("pass 3 of 3 has 0 slot(s)"), "{what}")
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("fresh slots for the resident blocks of a later pass"),
        }
    }
}
