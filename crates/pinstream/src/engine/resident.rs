//! Blocks that stay in device memory across the passes of a run ([`super::Residency`]): how
//! many of a device's blocks the budget left by its slots and residents holds, why, and the
//! bytes each pass moved as its records count them.
//!
//! A device keeps the last blocks of its share resident: they are computed at the end of each
//! pass, while the next pass's first uploads already run. Passes from storage keep them too,
//! across the runs that make their passes (`storage::VramTier`).

use super::error::BudgetError;
use super::options::{Residency, StreamOptions};
use super::profile::{Record, Stage};
use crate::units::Bytes;
use serde::Serialize;
use std::fmt;
use std::ops::Range;

/// Why a device kept the blocks it kept resident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum ResidencyReason {
    /// One pass: a block is used once, so none is kept.
    OnePass,
    /// The policy is [`Residency::Off`].
    Off,
    /// None: a run from storage on a CPU device, whose memory is the host's, keeps blocks in
    /// its host tier instead (the CLI's `--residency auto` there).
    CpuDevice,
    /// As many blocks as `room` holds: what the budget left after the slots and the
    /// residents ([`Residency::Auto`]), or what was asked for ([`Residency::Bytes`]).
    Room {
        /// Bytes for resident blocks.
        room: u64,
        /// The budget.
        budget: u64,
        /// Slots in the ring.
        slots: usize,
        /// Bytes of one slot, and of one resident block.
        slot: u64,
        /// `room` was asked for rather than all the budget left.
        asked: bool,
    },
}

/// The resident blocks of a run (all devices together) and why.
#[derive(Debug, Clone, Serialize)]
pub struct ResidencyReport {
    /// The policy asked for.
    pub policy: Residency,
    /// Blocks that stayed in device memory across the passes.
    pub blocks: usize,
    /// Blocks in the run.
    pub of: usize,
    /// Device bytes they took (guard zones counted).
    pub bytes: u64,
    /// Why (the first device's reason, with several devices).
    pub reason: ResidencyReason,
}

impl fmt::Display for ResidencyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            ResidencyReason::OnePass => f.write_str("none (passes = 1)"),
            ResidencyReason::Off => f.write_str("off"),
            ResidencyReason::CpuDevice => f.write_str(
                "none: on a CPU device, whose memory is the host's, the host tier keeps blocks instead",
            ),
            ResidencyReason::Room {
                room,
                budget,
                slots,
                slot,
                asked,
            } => {
                let (b, of, bytes) = (self.blocks, self.of, Bytes(self.bytes));
                let (room, budget, slot) = (Bytes(room), Bytes(budget), Bytes(slot));
                match (b, asked) {
                    (0, true) => write!(f, "none: the {room} asked for holds no block's slot of {slot}"),
                    (0, false) => write!(f, "none: the {budget} budget leaves {room} after {slots} slot(s) of {slot}, less than a block's slot"),
                    (_, true) => write!(f, "{b} of {of} blocks resident ({bytes} of the {room} asked for)"),
                    (_, false) => write!(f, "{b} of {of} blocks resident ({bytes} of the {room} the {budget} budget left after {slots} slot(s) of {slot})"),
                }
            }
        }
    }
}

/// The bytes one pass moved, as its commands' records count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PassBytes {
    /// Host to device.
    pub h2d: u64,
    /// Device to host.
    pub d2h: u64,
}

impl PassBytes {
    /// The shortest time these bytes take over a link of `h2d_gbps` one way and `d2h_gbps`
    /// the other (peaks measured by the caller, GB/s), each direction on its own (a link
    /// copies both ways at once); `None` without a positive peak for a direction that moved
    /// bytes.
    pub fn floor_s(&self, h2d_gbps: f64, d2h_gbps: f64) -> Option<f64> {
        let one = |bytes: u64, gbps: f64| match (bytes, gbps > 0.0) {
            (0, _) => Some(0.0),
            (_, true) => Some(bytes as f64 / (gbps * 1e9)),
            (_, false) => None,
        };
        Some(one(self.h2d, h2d_gbps)?.max(one(self.d2h, d2h_gbps)?))
    }
}

/// The bytes each of `passes` passes moved, by the records of every device.
pub fn pass_bytes(records: &[Record], passes: usize) -> Vec<PassBytes> {
    let mut all = vec![PassBytes::default(); passes];
    for r in records {
        let Some(p) = all.get_mut(r.pass as usize) else {
            continue;
        };
        match r.stage {
            Stage::Upload => p.h2d += r.bytes,
            Stage::Download => p.d2h += r.bytes,
            Stage::Kernel => {}
        }
    }
    all
}

/// The device seconds each of `passes` passes took, by the records of every device: on each
/// device, from the end of the pass before (the first command's start, for the first pass) to
/// the end of the pass's last command; the slowest device's. Passes overlap at their edges (a
/// pass's first uploads run beside the last downloads of the one before), so these add up to
/// the run's device time without counting an overlap twice. 0 where a pass left no records.
pub fn pass_seconds(records: &[Record], passes: usize) -> Vec<f64> {
    // One sweep: each device's first start, and each (device, pass)'s last end.
    let devices = records
        .iter()
        .map(|r| r.device as usize + 1)
        .max()
        .unwrap_or(0);
    let mut first = vec![u64::MAX; devices];
    let mut ends = vec![None::<u64>; devices * passes];
    for r in records {
        let d = r.device as usize;
        first[d] = first[d].min(r.start);
        if let Some(end) = ends.get_mut(d * passes + r.pass as usize) {
            *end = Some(end.map_or(r.end, |e| e.max(r.end)));
        }
    }
    let mut secs = vec![0.0f64; passes];
    for (d, &start) in first.iter().enumerate() {
        let mut before = start;
        for (k, slot) in secs.iter_mut().enumerate() {
            if let Some(end) = ends[d * passes + k] {
                *slot = slot.max(end.saturating_sub(before) as f64 * 1e-9);
                before = before.max(end);
            }
        }
    }
    secs
}

/// Where one device's slots left room for resident blocks.
pub(crate) struct Room {
    /// The device's budget.
    pub(crate) budget: u64,
    /// Bytes its pool allocated already (residents and slots).
    pub(crate) used: u64,
    /// Slots in its ring.
    pub(crate) slots: usize,
    /// Device bytes of one slot, and of one resident block.
    pub(crate) slot: u64,
}

/// The blocks of a share of `blocks` blocks (ring-local indices) that stay resident: the
/// last ones, as many as the room holds under the options' policy, and why; refused where
/// the policy asks for more than the budget leaves.
pub(crate) fn resident_blocks(
    opts: &StreamOptions,
    blocks: usize,
    room: &Room,
) -> Result<(Range<usize>, ResidencyReason), BudgetError> {
    let left = room.budget.saturating_sub(room.used);
    let (bytes, asked) = match (opts.passes, opts.residency) {
        (0 | 1, _) => return Ok((blocks..blocks, ResidencyReason::OnePass)),
        (_, Residency::Off) => return Ok((blocks..blocks, ResidencyReason::Off)),
        (_, Residency::Auto) => (left, false),
        (_, Residency::Bytes(asked)) if asked > left => {
            return Err(BudgetError::ResidencyAbove {
                asked,
                left,
                budget: room.budget,
                slots: room.slots,
                slot: room.slot,
            })
        }
        (_, Residency::Bytes(asked)) => (asked, true),
    };
    let fit = (bytes / room.slot.max(1)).min(blocks as u64) as usize;
    let why = ResidencyReason::Room {
        room: bytes,
        budget: room.budget,
        slots: room.slots,
        slot: room.slot,
        asked,
    };
    Ok((blocks - fit..blocks, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{BoundsCheck, DType, WorkSize};

    fn opts(passes: usize, residency: Residency) -> StreamOptions {
        StreamOptions {
            dtype: DType::U32,
            out_dtype: DType::U32,
            block_bytes: 1 << 20,
            in_per_out: 1,
            slots: None,
            vram_budget: 10 << 20,
            work: WorkSize::default(),
            sequential: false,
            stop: None,
            check_bounds: BoundsCheck::Off,
            passes,
            residency,
        }
    }

    const ROOM: Room = Room {
        budget: 10 << 20,
        used: 4 << 20,
        slots: 4,
        slot: 1 << 20,
    };

    #[test]
    fn auto_keeps_the_last_blocks_the_budget_leaves_room_for() {
        let (r, why) = resident_blocks(&opts(3, Residency::Auto), 40, &ROOM).unwrap();
        assert_eq!(r, 34..40);
        assert!(matches!(why, ResidencyReason::Room { room, asked: false, .. } if room == 6 << 20));
        let (r, _) = resident_blocks(&opts(3, Residency::Auto), 5, &ROOM).unwrap();
        assert_eq!(r, 0..5, "never more than the share's blocks");
    }

    #[test]
    fn one_pass_or_off_keeps_none_and_too_much_is_refused() {
        for (o, want) in [
            (opts(1, Residency::Auto), ResidencyReason::OnePass),
            (opts(1, Residency::Bytes(1 << 40)), ResidencyReason::OnePass),
            (opts(2, Residency::Off), ResidencyReason::Off),
        ] {
            assert_eq!(resident_blocks(&o, 40, &ROOM).unwrap(), (40..40, want));
        }
        let (r, _) = resident_blocks(&opts(2, Residency::Bytes(5 << 19)), 40, &ROOM).unwrap();
        assert_eq!(r, 38..40, "2.5 MiB holds two blocks of 1 MiB");
        match resident_blocks(&opts(2, Residency::Bytes(7 << 20)), 40, &ROOM) {
            Err(BudgetError::ResidencyAbove { asked, left, .. }) => {
                assert_eq!((asked, left), (7 << 20, 6 << 20))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pass_bytes_count_each_pass_and_the_floor_takes_the_slower_direction() {
        let rec = |stage, pass, bytes| Record {
            stage,
            device: 0,
            pass,
            block: 0,
            bytes,
            start: 0,
            end: 1,
        };
        let records = [
            rec(Stage::Upload, 0, 10),
            rec(Stage::Kernel, 0, 0),
            rec(Stage::Download, 0, 4),
            rec(Stage::Upload, 1, 6),
        ];
        let p = pass_bytes(&records, 2);
        assert_eq!(
            p,
            [PassBytes { h2d: 10, d2h: 4 }, PassBytes { h2d: 6, d2h: 0 }]
        );
        assert_eq!(p[0].floor_s(10e-9, 1e-9), Some(4.0));
        assert_eq!(p[1].floor_s(2e-9, 0.0), Some(3.0));
        assert_eq!(p[0].floor_s(1.0, 0.0), None);
    }

    #[test]
    fn pass_seconds_run_from_one_pass_end_to_the_next_on_the_slowest_device() {
        let rec = |device, pass, start, end| Record {
            stage: Stage::Upload,
            device,
            pass,
            block: 0,
            bytes: 1,
            start,
            end,
        };
        // Device 0: pass 0 over 100..400 ns, pass 1 overlapping it and ending at 600.
        // Device 1 (its own clock): pass 0 over 5000..5200, pass 1 ending at 5700.
        let records = [
            rec(0, 0, 100, 400),
            rec(0, 1, 350, 600),
            rec(1, 0, 5000, 5200),
            rec(1, 1, 5100, 5700),
        ];
        let s = pass_seconds(&records, 3);
        assert!((s[0] - 300e-9).abs() < 1e-15, "{s:?}");
        assert!((s[1] - 500e-9).abs() < 1e-15, "{s:?}");
        assert_eq!(s[2], 0.0, "a pass without records");
        assert!(pass_seconds(&[], 2).iter().all(|&x| x == 0.0));
    }

    #[test]
    fn the_report_says_how_many_blocks_stayed_and_why() {
        let o = opts(3, Residency::Auto);
        let report = |blocks: usize, room: u64| {
            let (_, reason) = resident_blocks(
                &o,
                40,
                &Room {
                    used: (10u64 << 20) - room,
                    ..ROOM
                },
            )
            .unwrap();
            ResidencyReport {
                policy: o.residency,
                blocks,
                of: 40,
                bytes: (blocks as u64) << 20,
                reason,
            }
            .to_string()
        };
        let six = report(6, 6 << 20);
        assert!(
            six.starts_with("6 of 40 blocks resident (") && six.contains("after 4 slot(s) of"),
            "{six}"
        );
        let none = report(0, 1 << 19);
        assert!(
            none.starts_with("none: the ") && none.ends_with("less than a block's slot"),
            "{none}"
        );
    }
}
