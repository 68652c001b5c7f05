//! The doctor's measurements of one way to pin: pin it, round-trip every block and check it,
//! time each direction and both ways at once, and read the VRAM counter around it all.

use super::{total_units, DoctorConfig, ProgressFn, StrategyReport};
use crate::tools::passes::{Bandwidth, Pass};
use crate::tools::pin_search;
use pinstream::backend::api::{Device, ErrorOf, EventOf};
use pinstream::backend::error::BackendError;
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView, Lanes, OutOfRange};
use pinstream::host::{HostApi, PinRequest, Pinned};
use pinstream::par;
use pinstream::vram::VramProbe;
use std::ops::Range;

/// What the doctor measures every way to pin through: two device buffers of the block size
/// (committed before the VRAM baseline) and the VRAM counter.
pub(super) struct Doctor<'d, A: HostApi> {
    device: &'d A::Device,
    dev_a: A::Buffer,
    dev_b: A::Buffer,
    pub(super) probe: VramProbe,
    cfg: &'d DoctorConfig,
    pub(super) block: usize,
}

/// A measurement that broke off: a device call, or host memory shorter than it said.
#[derive(Debug, thiserror::Error)]
enum Broke {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Range(#[from] OutOfRange),
}

/// One copy of a pass: a range of the host memory up to the device or down from it, on a lane
/// (lane 0 through the first device buffer, lane 1 through the second).
#[derive(Debug, Clone)]
struct Move {
    up: bool,
    lane: usize,
    range: Range<usize>,
}

impl<'d, A: HostApi> Doctor<'d, A> {
    pub(super) fn new(device: &'d A::Device, cfg: &'d DoctorConfig) -> Result<Self, BackendError> {
        let block = cfg.block.min(cfg.size);
        Ok(Doctor {
            dev_a: device.allocate(block).map_err(Into::into)?,
            dev_b: device.allocate(block).map_err(Into::into)?,
            probe: A::vram(device),
            device,
            cfg,
            block,
        })
    }

    /// Each of `pinnings` in turn, each with its own seed.
    pub(super) fn measure_all(
        &self,
        pinnings: &[A::Pinning],
        seed: u64,
        progress: ProgressFn,
    ) -> Vec<StrategyReport> {
        let mut done = 0u64;
        let mut reports = Vec::new();
        for (i, &p) in pinnings.iter().enumerate() {
            let mut tick = |n: u64, msg: &str| {
                done += n;
                progress(done, &format!("{p}: {msg}"));
            };
            reports.push(self.measure(p, seed.wrapping_add(i as u64), &mut tick));
        }
        reports
    }

    fn request(&self, pinning: A::Pinning) -> PinRequest<'static, A> {
        PinRequest {
            pinning: Some(pinning),
            max_chunk: self.cfg.max_chunk,
            ..Default::default()
        }
    }

    /// The largest size `pinning` pins, searched for after a pin of the whole size failed
    /// ([`pin_search`]), with the limit that stops it and what to do, as a note for the
    /// failure. Each try is released before the next.
    fn largest_pin(&self, pinning: A::Pinning) -> String {
        let size = self.cfg.size;
        let try_pin = |n| A::pin(self.device, n, self.request(pinning)).is_ok();
        let found = pin_search::largest_pinnable(size, try_pin);
        pin_search::note(A::pin_kind(pinning), size, found, cfg!(windows))
    }

    fn measure(&self, p: A::Pinning, seed: u64, tick: &mut dyn FnMut(u64, &str)) -> StrategyReport {
        let mut r = StrategyReport::empty(p.to_string(), A::pin_kind(p));
        r.vram_before = self.probe.used();
        let mut memory = match A::pin(self.device, self.cfg.size, self.request(p)) {
            Ok(memory) => memory,
            Err(e) => {
                r.error = Some(format!("{e}{}", self.largest_pin(p)));
                tick(total_units(self.cfg, 1), "failed");
                return r;
            }
        };
        r.pin_s = Some(memory.pin_time().as_secs_f64());
        r.resident_s = memory.resident_time().map(|t| t.as_secs_f64());
        r.chunks = memory.chunk_count();
        r.contiguous = memory.is_contiguous();
        r.vram_after_pin = self.probe.used();
        if let Err(e) = self.transfers(&mut memory, seed, &mut r, tick) {
            r.error = Some(e.to_string());
        }
        r.vram_after_transfers = self.probe.used();
        drop(memory);
        r.vram_after_release = self.probe.used();
        r.vram_cost = r.vram_before.and_then(|b| {
            let peak = r.vram_after_pin.max(r.vram_after_transfers)?;
            Some(peak as i64 - b as i64)
        });
        r
    }

    fn transfers(
        &self,
        memory: &mut A::HostMemory,
        seed: u64,
        r: &mut StrategyReport,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(), Broke> {
        let blocks = blocks(memory.len(), self.block);
        crate::tools::random::fill_random(memory.slices_mut(0..memory.len())?, seed);
        let (checked, bad) = self.round_trips(memory, &blocks, tick)?;
        r.verified_bytes = checked;
        r.mismatched_bytes = bad;
        let one_way = |up| {
            let each = |b: &Range<usize>| Move {
                up,
                lane: 0,
                range: b.clone(),
            };
            blocks.iter().map(each).collect::<Vec<_>>()
        };
        let bytes = total_bytes(&blocks);
        let mut timed = |moves: &[Move], what: &str| {
            self.timed(memory, moves, bytes, blocks.len() as u64, what, tick)
        };
        r.h2d = Some(timed(&one_way(true), "H2D")?);
        r.d2h = Some(timed(&one_way(false), "D2H")?);
        r.both = Some(timed(&both_ways(&blocks), "both ways")?);
        Ok(())
    }

    /// Every block: upload, invert the host copy, download, compare with the original.
    fn round_trips(
        &self,
        memory: &mut A::HostMemory,
        blocks: &[Range<usize>],
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<(u64, u64), Broke> {
        let mut original = vec![0u8; blocks[0].len()];
        let mut bad = 0;
        for b in blocks {
            let want = &mut original[..b.len()];
            par::copy(want, memory.slices(b.clone())?);
            self.pass(
                memory,
                &[Move {
                    up: true,
                    lane: 0,
                    range: b.clone(),
                }],
            )?;
            par::invert(memory.slices_mut(b.clone())?);
            self.pass(
                memory,
                &[Move {
                    up: false,
                    lane: 0,
                    range: b.clone(),
                }],
            )?;
            bad += par::count_diff(memory.slices(b.clone())?, want);
            tick(1, "round trip checked");
        }
        Ok((memory.len() as u64, bad))
    }

    /// `repeats` passes of `moves` (`bytes` in `units` blocks each).
    fn timed(
        &self,
        memory: &mut A::HostMemory,
        moves: &[Move],
        bytes: u64,
        units: u64,
        what: &str,
        tick: &mut dyn FnMut(u64, &str),
    ) -> Result<Bandwidth, BackendError> {
        let mut passes = Vec::new();
        for _ in 0..self.cfg.repeats.max(1) {
            passes.push(self.pass(memory, moves)?);
            tick(units, what);
        }
        Ok(Bandwidth::from_passes(bytes, passes))
    }

    /// One timed pass of `moves` on two lanes of their own, every copy waited for.
    fn pass(&self, memory: &mut A::HostMemory, moves: &[Move]) -> Result<Pass, BackendError> {
        let view = HostView::of_mut(memory);
        let buffers = [&self.dev_a, &self.dev_b];
        let enqueue = |lanes: &Lanes<'_, A>| enqueue(lanes, &view, &buffers, moves);
        copies_in_flight::<A, _>(self.device, 2, |lanes| {
            crate::tools::passes::timed_pass(lanes, enqueue)
        })
        .and_then(|r| r)
        .map(|(pass, _)| pass)
        .map_err(Into::into)
    }
}

/// Uploads from the first half of `blocks` on lane 0 while downloading into the second half
/// on lane 1.
fn both_ways(blocks: &[Range<usize>]) -> Vec<Move> {
    let (ups, downs) = blocks.split_at(blocks.len().div_ceil(2));
    let mut moves = Vec::new();
    for (i, up) in ups.iter().enumerate() {
        moves.push(Move {
            up: true,
            lane: 0,
            range: up.clone(),
        });
        if let Some(d) = downs.get(i) {
            moves.push(Move {
                up: false,
                lane: 1,
                range: d.clone(),
            });
        }
    }
    moves
}

/// Enqueues `moves`, each through the device buffer of its lane.
fn enqueue<'s, A: HostApi>(
    lanes: &Lanes<'s, A>,
    view: &HostView<'s>,
    buffers: &[&'s A::Buffer; 2],
    moves: &[Move],
) -> Result<Vec<EventOf<A>>, ErrorOf<A>> {
    let mut events = Vec::new();
    for m in moves {
        let (lane, buf, range) = (m.lane, buffers[m.lane], m.range.clone());
        events.extend(match m.up {
            true => lanes.upload(lane, buf, 0, view, range, &[])?,
            false => lanes.download(lane, view, range, buf, 0, &[])?,
        });
    }
    Ok(events)
}

fn total_bytes(blocks: &[Range<usize>]) -> u64 {
    blocks.iter().map(|b| b.len() as u64).sum()
}

/// Splits `len` bytes into blocks of `block` (the last may be shorter).
pub fn blocks(len: usize, block: usize) -> Vec<Range<usize>> {
    (0..len.div_ceil(block))
        .map(|i| i * block..((i + 1) * block).min(len))
        .collect()
}
