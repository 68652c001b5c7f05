//! Where each block of a run lies, and how many slots of it the VRAM budget holds.

use super::error::{BudgetError, LayoutError};
use super::guard::allocation;
use super::options::StreamOptions;
use std::ops::Range;

/// Where each block's input and output lie.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// Input element size, bytes.
    pub(crate) in_elem: usize,
    /// Output element size, bytes.
    pub(crate) out_elem: usize,
    elems: usize,
    pub(crate) block_elems: usize,
    in_per_out: usize,
    pub(crate) blocks: usize,
}

impl Layout {
    /// Input elements of block `i`.
    pub(crate) fn input(&self, i: usize) -> Range<usize> {
        i * self.block_elems..((i + 1) * self.block_elems).min(self.elems)
    }

    /// Output elements of block `i`.
    pub(crate) fn output(&self, i: usize) -> Range<usize> {
        let r = self.input(i);
        r.start / self.in_per_out..r.end.div_ceil(self.in_per_out)
    }

    /// Input bytes of block `i`.
    pub(crate) fn input_bytes(&self, i: usize) -> Range<usize> {
        byte_range(self.input(i), self.in_elem)
    }

    /// Output bytes of block `i`.
    pub(crate) fn output_bytes(&self, i: usize) -> Range<usize> {
        byte_range(self.output(i), self.out_elem)
    }

    /// Input bytes of a full block.
    pub(crate) fn in_block_bytes(&self) -> usize {
        self.block_elems * self.in_elem
    }

    /// Output bytes of a full block.
    pub(crate) fn out_block_bytes(&self) -> usize {
        self.block_elems / self.in_per_out * self.out_elem
    }

    /// Output bytes a kernel writing one output element per input element of a full block
    /// would write (the bounds guard's reach, [`super::guard::guard_bytes`]).
    pub(crate) fn out_reach(&self) -> usize {
        self.block_elems * self.out_elem
    }
}

/// The bytes of an element range, for elements of `size` bytes.
fn byte_range(elements: Range<usize>, size: usize) -> Range<usize> {
    elements.start * size..elements.end * size
}

/// The blocks of a run over `len` input bytes per input, in place or into an output of
/// `out_len` bytes, checked against the options.
pub(crate) fn shape_layout(
    len: usize,
    in_place: bool,
    out_len: Option<usize>,
    opts: &StreamOptions,
) -> Result<Layout, LayoutError> {
    let in_elem = opts.dtype.size();
    let (in_per_out, unit) = check_shape(len, in_place, opts)?;
    debug_assert_eq!(unit, in_elem * in_per_out);
    let out_elem = if in_place {
        in_elem
    } else {
        opts.out_dtype.size()
    };
    let elems = len / in_elem;
    let whole_units = elems.div_ceil(in_per_out).saturating_mul(in_per_out);
    let block_elems = (opts.block_bytes / in_elem).min(whole_units);
    if let Some(have) = out_len {
        let need = elems.div_ceil(in_per_out).saturating_mul(out_elem);
        if have < need {
            return Err(LayoutError::OutputTooSmall { have, need });
        }
    }
    let counted = if opts.work.per_output {
        block_elems.div_ceil(in_per_out)
    } else {
        block_elems
    };
    if opts.work.global(counted).is_none() {
        return Err(LayoutError::LaunchTooLarge {
            count: counted,
            items_per: opts.work.items_per,
            local: opts.work.local,
        });
    }
    Ok(Layout {
        in_elem,
        out_elem,
        elems,
        block_elems,
        in_per_out,
        blocks: elems.div_ceil(block_elems),
    })
}

/// The checks of [`shape_layout`] before any size is worked out: whole elements, no reduction
/// in place, a work-group size, and a block of whole units. Gives (inputs per output, the
/// unit: the bytes of one output's inputs).
fn check_shape(
    len: usize,
    in_place: bool,
    opts: &StreamOptions,
) -> Result<(usize, usize), LayoutError> {
    let in_elem = opts.dtype.size();
    if !len.is_multiple_of(in_elem) {
        return Err(LayoutError::PartialElement {
            len,
            dtype: opts.dtype.to_string(),
            element: in_elem,
        });
    }
    let in_per_out = opts.in_per_out.max(1);
    if in_place && in_per_out != 1 {
        return Err(LayoutError::InPlaceReduce { in_per_out });
    }
    if opts.work.local == Some(0) {
        return Err(LayoutError::ZeroLocal);
    }
    // A unit past the address space is no block's divisor: refused as a block that does not
    // hold whole units (it overflowed before).
    let unit = in_elem.saturating_mul(in_per_out);
    if opts.block_bytes == 0 || unit == usize::MAX || !opts.block_bytes.is_multiple_of(unit) {
        return Err(LayoutError::Block {
            block: opts.block_bytes,
            unit,
            in_per_out,
            dtype: opts.dtype.to_string(),
        });
    }
    Ok((in_per_out, unit))
}

/// What the slots of a run hold on one device.
pub(crate) struct SlotShape {
    /// Input blocks per slot.
    pub(crate) inputs: usize,
    /// Slots have an output block.
    pub(crate) output: bool,
    /// Device bytes of the residents (uploaded once), their guard zones counted.
    pub(crate) resident: u64,
    /// The device's largest allocation.
    pub(crate) max_alloc: u64,
    /// Blocks this device streams.
    pub(crate) blocks: usize,
    /// Each buffer has a guard zone after it ([`super::guard`]).
    pub(crate) guarded: bool,
}

impl SlotShape {
    /// Device bytes of one slot: its input blocks and output block, guards counted.
    pub(crate) fn slot_bytes(&self, layout: &Layout) -> u64 {
        let output = if self.output {
            allocation(layout.out_block_bytes(), layout.out_reach(), self.guarded)
        } else {
            0
        };
        let input = allocation(
            layout.in_block_bytes(),
            layout.in_block_bytes(),
            self.guarded,
        );
        (self.inputs as u64)
            .saturating_mul(input as u64)
            .saturating_add(output as u64)
    }
}

/// How many slots the budget holds (at most `o.slots`, else 4), or why too few.
pub(crate) fn slots_for(
    opts: &StreamOptions,
    layout: &Layout,
    shape: &SlotShape,
) -> Result<usize, BudgetError> {
    if opts.block_bytes as u64 > shape.max_alloc {
        return Err(BudgetError::BlockAboveMaxAlloc {
            block: opts.block_bytes as u64,
            max_alloc: shape.max_alloc,
        });
    }
    let out_block = if shape.output {
        layout.out_block_bytes() as u64
    } else {
        0
    };
    if out_block > shape.max_alloc {
        return Err(BudgetError::OutputBlockAboveMaxAlloc {
            out_block,
            max_alloc: shape.max_alloc,
        });
    }
    let slot = shape.slot_bytes(layout);
    let room = opts.vram_budget.saturating_sub(shape.resident);
    let fit = (room / slot.max(1)) as usize;
    let wanted = opts.slots.unwrap_or(4).min(shape.blocks).max(1);
    let need = if opts.slots.is_some() {
        wanted
    } else {
        2.min(shape.blocks).max(1)
    };
    if fit < need {
        return Err(BudgetError::TooSmall {
            budget: opts.vram_budget,
            resident: shape.resident,
            slot,
            inputs: shape.inputs,
            output: shape.output,
            fit,
            need,
            need_bytes: shape
                .resident
                .saturating_add((need as u64).saturating_mul(slot)),
            largest_block: largest_block(room, need, slot, layout),
            guarded: shape.guarded,
        });
    }
    Ok(wanted.min(fit))
}

/// The largest input block (a whole number of output elements' inputs) of which `need` slots
/// fit in `room` bytes, where a slot of the current block takes `slot` bytes.
fn largest_block(room: u64, need: usize, slot: u64, layout: &Layout) -> u64 {
    let unit = (layout.in_elem * layout.in_per_out) as u64;
    let per_block_byte = slot as f64 / layout.in_block_bytes().max(1) as f64;
    let fits = (room / need.max(1) as u64) as f64 / per_block_byte;
    (fits as u64) / unit * unit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DType, WorkSize};

    fn opts(block: usize, budget: u64, slots: Option<usize>) -> StreamOptions {
        StreamOptions {
            dtype: DType::U32,
            out_dtype: DType::U32,
            block_bytes: block,
            in_per_out: 1,
            slots,
            vram_budget: budget,
            work: WorkSize::default(),
            sequential: false,
            stop: None,
            check_bounds: crate::engine::BoundsCheck::Auto,
            passes: 1,
            residency: crate::engine::Residency::Auto,
        }
    }

    #[test]
    fn inputs_per_output_past_the_address_space_are_refused_not_overflowed() {
        for in_per_out in [usize::MAX / 2 + 1, usize::MAX] {
            let mut o = opts(1024, 1 << 20, None);
            o.in_per_out = in_per_out;
            let e = shape_layout(4096, false, Some(4096), &o).unwrap_err();
            assert!(matches!(e, LayoutError::Block { .. }), "{e:?}");
        }
    }

    #[test]
    fn a_launch_past_the_address_space_is_refused_not_overflowed() {
        for (items_per, local) in [
            (usize::MAX, None),
            (usize::MAX / 256, Some(usize::MAX / 2 + 1)),
        ] {
            let mut o = opts(1024, 1 << 20, None);
            o.work.items_per = items_per;
            o.work.local = local;
            let e = shape_layout(4096, true, None, &o).unwrap_err();
            assert!(
                matches!(e, LayoutError::LaunchTooLarge { count: 256, .. }),
                "{e:?}"
            );
        }
    }

    #[test]
    fn blocks_cover_the_input_and_the_last_is_short() {
        let o = opts(1024, 1 << 20, None);
        let l = shape_layout(4096 * 3 + 12, true, None, &o).unwrap();
        assert_eq!(l.blocks, 13);
        assert_eq!(l.input_bytes(12), 12288..12300);
        assert_eq!(l.output_bytes(12), 12288..12300);
    }

    #[test]
    fn a_guarded_slot_counts_its_guard_zones() {
        let o = opts(1 << 20, 4 << 20, None);
        let l = shape_layout(16 << 20, false, Some(16 << 20), &o).unwrap();
        let mut shape = SlotShape {
            inputs: 1,
            output: true,
            resident: 0,
            max_alloc: 1 << 30,
            blocks: l.blocks,
            guarded: false,
        };
        assert_eq!(shape.slot_bytes(&l), 2 << 20);
        assert_eq!(slots_for(&o, &l, &shape).unwrap(), 2);
        shape.guarded = true;
        assert_eq!(shape.slot_bytes(&l), 4 << 20);
        assert!(matches!(
            slots_for(&o, &l, &shape),
            Err(BudgetError::TooSmall {
                fit: 1,
                need: 2,
                ..
            })
        ));
    }

    #[test]
    fn a_budget_too_small_says_what_would_fit() {
        let o = opts(1 << 20, (3 << 20) + 5, None);
        let l = shape_layout(16 << 20, false, Some(16 << 20), &o).unwrap();
        let shape = SlotShape {
            inputs: 1,
            output: true,
            resident: 1 << 20,
            max_alloc: 1 << 30,
            blocks: l.blocks,
            guarded: false,
        };
        match slots_for(&o, &l, &shape) {
            Err(BudgetError::TooSmall {
                fit: 1,
                need: 2,
                slot,
                need_bytes,
                largest_block,
                ..
            }) => {
                assert_eq!(slot, 2 << 20);
                assert_eq!(need_bytes, 5 << 20);
                // 2 MiB + 5 bytes of room for two slots of (input + output): 512 KiB blocks.
                assert_eq!(largest_block, 512 << 10);
            }
            other => panic!("{other:?}"),
        }
    }
}
