//! One device's share of a run, through any API: its buffers ([`super::slots`]), its queues
//! (three, or one for the sequential baseline), the kernel's warm-up launch, and the stages
//! of its blocks, which [`super::ring::run_ring`] schedules over every pass.

use super::bind::Binding;
use super::error::{Argument, BindError, BindProblem, StreamError};
use super::guard::{self, Guarded, Watch};
use super::job::{JobViews, Target};
use super::layout::Layout;
use super::options::StreamOptions;
use super::profile::Record;
use super::resident::ResidencyReason;
use super::ring::{run_ring, spread_bytes, stage_error, Schedule, Stages, Step};
use super::slots::{allocate, hosted_zones, Allocated, Carry, Sizing, Slot};
use crate::backend::api::{Api, Device, EventOf, Kernel, LaunchSize, Profile};
use crate::backend::error::BackendError;
use crate::backend::lanes::{in_flight, HostView, Lanes};
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The queues of a ring, by stage (all the same queue for the sequential baseline).
const UPLOAD: usize = 0;
const COMPUTE: usize = 1;
const DOWNLOAD: usize = 2;

/// What one device streams of a run.
pub(crate) struct Share<'r, 'h> {
    pub(crate) layout: &'r Layout,
    pub(crate) opts: &'r StreamOptions,
    pub(crate) views: &'r JobViews<'h>,
    /// The kernel's arguments on this device.
    pub(crate) binding: Binding,
    /// The run's blocks this device streams.
    pub(crate) blocks: Range<usize>,
    /// The device's index in the run.
    pub(crate) index: u16,
    /// Set by the first device that fails, so that the others stop (several devices only).
    pub(crate) abort: Option<&'r AtomicBool>,
}

/// What one device did.
pub(crate) struct ShareReport {
    pub(crate) device: String,
    pub(crate) blocks: usize,
    pub(crate) slots: usize,
    pub(crate) pool_bytes: u64,
    /// Host wall time of the ring, first enqueue to last completion.
    pub(crate) wall_s: f64,
    pub(crate) records: Vec<Record>,
    /// When the host saw the first block's upload complete.
    pub(crate) first_upload: Option<Instant>,
    /// Time the ring waited for host memory still being pinned in the background.
    pub(crate) pin_wait: Duration,
    /// Its buffers had bounds guards.
    pub(crate) guarded: bool,
    /// Its blocks that stayed resident across passes, their device bytes, and why.
    pub(crate) resident: (usize, u64, ResidencyReason),
}

/// What a device's ring returns: its records, its wall time, when the host saw the first
/// upload complete, and the time it waited for memory being pinned.
type Ran = (Vec<Record>, f64, Option<Instant>, Duration);

/// Streams `share` on `target`'s device: allocates, warms up, runs the ring, and waits for
/// every command before returning, on every path. With `carry`, the run is one pass of the
/// caller's and its resident blocks are the carry's (their slots left in it after the run).
pub(crate) fn run_share<D: Device>(
    target: &mut Target<'_, D>,
    share: &Share,
    progress: &dyn Fn(u64, u64),
    mut carry: Option<&mut Carry<D::A>>,
) -> Result<ShareReport, StreamError> {
    let device = target.device;
    let guarded = share.opts.check_bounds.applies(device.is_cpu());
    let (hosted, zones) = hosted_zones(device, &target.hosted, guarded)?;
    let sizing = Sizing {
        opts: share.opts,
        layout: share.layout,
        views: share.views,
        blocks: share.blocks.len(),
    };
    let mut mem = allocate(device, &sizing, guarded, carry.as_deref_mut())?;
    let canary = guard::canary();
    let bound = Bound {
        slots: &mem.slots,
        residents: &mem.residents,
        hosted: (&hosted, &zones),
    };
    let watch = (guarded)
        .then(|| watch::<D::A>(share, &*target.kernel, &bound, &canary))
        .transpose()?;
    let sched = schedule(share, &mem, carry.as_ref().map(|c| (c.pass, c.passes)));
    let lanes = if share.opts.sequential { 1 } else { 3 };
    let ran = in_flight(device, &mut *target.kernel, lanes, |lanes| {
        let mut ring = DeviceRing {
            lanes,
            share,
            bound: &bound,
            watch,
            origin: None,
            first_upload: None,
            pin_wait: Duration::ZERO,
        };
        ring.prepare()?;
        let start = Instant::now();
        let records = run_ring(&mut ring, &sched, progress)?;
        let wall_s = start.elapsed().as_secs_f64();
        Ok::<Ran, StreamError>((records, wall_s, ring.first_upload, ring.pin_wait))
    });
    let (records, wall_s, first_upload, pin_wait) =
        ran.map_err(|e| StreamError::Backend(e.into()))??;
    mem.hand_over(carry);
    Ok(ShareReport {
        device: device.describe(),
        blocks: share.blocks.len(),
        slots: mem.ring,
        pool_bytes: mem.pool.used(),
        wall_s,
        records,
        first_upload,
        pin_wait,
        guarded,
        resident: mem.kept(),
    })
}

/// Every buffer a share's kernel is bound to: the slots, the residents, and the
/// host-resident buffers with their (usable, guard) bytes.
struct Bound<'s, A: Api> {
    slots: &'s [Slot<A>],
    residents: &'s [A::Buffer],
    hosted: (&'s [&'s A::Buffer], &'s [(usize, usize)]),
}

/// The bounds guard of a ring over the buffers `bound` ([`super::guard`]): each buffer
/// named by the kernel parameter it is bound to.
fn watch<'s, A: Api>(
    share: &Share,
    kernel: &A::Kernel,
    bound: &Bound<'s, A>,
    canary: &'s [u8],
) -> Result<Watch<'s, A>, StreamError> {
    let params = kernel.params().map_err(backend::<A>)?;
    let name = |i: u32| {
        let p = params.get(i as usize);
        p.map_or(format!("argument {i}"), |p| p.name.clone())
    };
    let pairs = bound.residents.iter().zip(&share.binding.residents);
    let mut shared: Vec<Guarded<'s, A>> = (pairs.zip(&share.views.residents).enumerate())
        .map(|(j, ((buffer, &i), v))| Guarded {
            buffer,
            usable: v.len(),
            guard: guard::guard_bytes(v.len(), v.len()),
            argument: name(i),
            role: format!("resident {j}"),
            hosted: false,
        })
        .collect();
    let (buffers, zones) = bound.hosted;
    let hosted = buffers.iter().zip(zones).zip(&share.binding.hosted);
    shared.extend(hosted.map(|((&buffer, &(usable, guard)), &i)| Guarded {
        buffer,
        usable,
        guard,
        argument: name(i),
        role: "the host-resident buffer".into(),
        hosted: true,
    }));
    let slots = bound
        .slots
        .iter()
        .map(|s| slot_guards(share, s, &name))
        .collect();
    let kernel = (
        kernel.name().to_string(),
        share.opts.in_per_out,
        share.layout.blocks,
    );
    Ok(Watch::new(canary, kernel, slots, shared))
}

/// The guarded buffers of `slot`: its inputs (the first is the in-place block, in place),
/// then its output block.
fn slot_guards<'s, A: Api>(
    share: &Share,
    slot: &'s Slot<A>,
    name: &dyn Fn(u32) -> String,
) -> Vec<Guarded<'s, A>> {
    let (b, l) = (&share.binding, share.layout);
    let in_place = share.views.in_place();
    let ins = slot.ins.iter().zip(&b.inputs).enumerate();
    let mut all: Vec<_> = ins
        .map(|(j, (buffer, &i))| Guarded {
            buffer,
            usable: l.in_block_bytes(),
            guard: guard::guard_bytes(l.in_block_bytes(), l.in_block_bytes()),
            argument: name(i),
            role: match (in_place, j) {
                (true, 0) => "the in-place block".into(),
                _ => format!("input {j}"),
            },
            hosted: false,
        })
        .collect();
    let out = slot.out.as_ref().zip(b.output);
    all.extend(out.map(|(buffer, i)| Guarded {
        buffer,
        usable: l.out_block_bytes(),
        guard: guard::guard_bytes(l.out_block_bytes(), l.out_reach()),
        argument: name(i),
        role: "the output block".into(),
        hosted: false,
    }));
    all
}

/// A device's ring while it runs: the [`Stages`] of its blocks through its lanes.
struct DeviceRing<'l, 's, 'r, 'h, A: Api> {
    lanes: &'l mut Lanes<'s, A>,
    share: &'r Share<'r, 'h>,
    /// Its buffers (the host-resident ones in the order of [`Binding::hosted`]).
    bound: &'s Bound<'s, A>,
    /// The bounds guard, where the run has one.
    watch: Option<Watch<'s, A>>,
    /// The event the device times of a run count from (CUDA), marked after the warm-up.
    origin: Option<EventOf<A>>,
    /// When the host saw the first block's upload complete.
    first_upload: Option<Instant>,
    /// Time spent waiting for host memory still being pinned in the background.
    pin_wait: Duration,
}

/// The shape of `share`'s ring over its buffers `mem`; with `carried`, the run is pass
/// `carried.0` of `carried.1` passes of a caller's ([`Carry`]).
fn schedule<'r, D: Device>(
    share: &'r Share,
    mem: &Allocated<'_, D>,
    carried: Option<(usize, usize)>,
) -> Schedule<'r> {
    Schedule {
        first: share.blocks.start,
        blocks: share.blocks.len(),
        slots: mem.ring,
        in_place: share.views.in_place(),
        passes: share.opts.passes,
        carried: carried.unwrap_or((0, share.opts.passes)),
        resident: mem.resident.clone(),
        device: share.index,
        stop: share.opts.stop.as_deref(),
        abort: share.abort,
    }
}

impl<'s, A: Api> DeviceRing<'_, 's, '_, '_, A> {
    /// How the bounds guard names `step`: the block in the first pass, then past the run's
    /// blocks ([`Watch::new`]).
    fn watch_key(&self, step: Step) -> usize {
        step.pass * self.share.layout.blocks + step.block
    }

    /// The queue of a stage.
    fn lane(&self, stage: usize) -> usize {
        if self.share.opts.sequential {
            0
        } else {
            stage
        }
    }

    /// Uploads the residents, launches the kernel once with an element count of 0 (drivers
    /// that compile at the first launch, PoCL, do it outside the measured stream; kernels
    /// that follow the convention write nothing), and marks the origin of the run's times.
    fn prepare(&mut self) -> Result<(), StreamError> {
        let residents: &'s [A::Buffer] = self.bound.residents;
        let share = self.share;
        for (view, buf) in share.views.residents.iter().zip(residents) {
            self.wait_pinned(0, view, 0..view.len())?;
            let events = self
                .lanes
                .upload(UPLOAD, buf, 0, view, 0..view.len(), &[])
                .map_err(|e| stage_error(0, "resident upload", e))?;
            for e in &events {
                self.lanes
                    .wait(e)
                    .map_err(|e| stage_error(0, "resident upload", e))?;
            }
        }
        if let Some(w) = &self.watch {
            w.arm(self.lanes, UPLOAD).map_err(backend::<A>)?;
        }
        let warm = self.launch(None, 0, &[])?;
        self.lanes.wait(&warm).map_err(backend::<A>)?;
        let origin = self.lanes.mark(UPLOAD).map_err(backend::<A>)?;
        self.lanes.wait(&origin).map_err(backend::<A>)?;
        self.origin = Some(origin);
        Ok(())
    }

    /// Waits until `view`'s bytes `range` are pinned (memory pinned progressively, in the
    /// background), counting the time waited.
    fn wait_pinned(
        &mut self,
        block: usize,
        view: &HostView,
        range: Range<usize>,
    ) -> Result<(), StreamError> {
        if !view.is_gated() {
            return Ok(());
        }
        let start = Instant::now();
        let ready = view.wait_ready(range);
        self.pin_wait += start.elapsed();
        ready.map_err(|why| StreamError::NotPinned { block, why })
    }

    /// Waits for the first block's upload and notes when the host saw it complete (the
    /// run's time to first block; the next upload could not start earlier anyway, its
    /// queue being in order).
    fn see_first_upload(
        &mut self,
        block: usize,
        up: &[(EventOf<A>, u64)],
    ) -> Result<(), StreamError> {
        if let Some((e, _)) = up.last() {
            self.lanes.flush().map_err(backend::<A>)?;
            self.lanes
                .wait(e)
                .map_err(|e| stage_error(block, "upload", e))?;
        }
        self.first_upload = Some(Instant::now());
        Ok(())
    }

    /// The buffers of a launch on `slot` at their parameter indices, each with the bytes the
    /// kernel may use (the rest is its guard zone, if any).
    fn buffers(&self, slot: usize) -> Vec<(u32, &'s A::Buffer, usize)> {
        let (b, l, views) = (&self.share.binding, self.share.layout, self.share.views);
        let bound: &'s Bound<'s, A> = self.bound;
        let s = &bound.slots[slot];
        let ins = (b.inputs.iter().zip(&s.ins)).map(|(&i, buf)| (i, buf, l.in_block_bytes()));
        let out = (b.output.zip(s.out.as_ref())).map(|(i, buf)| (i, buf, l.out_block_bytes()));
        let residents = (b
            .residents
            .iter()
            .zip(bound.residents)
            .zip(&views.residents))
        .map(|((&i, buf), v)| (i, buf, v.len()));
        let (hosted, zones) = bound.hosted;
        let hosted = (b.hosted.iter().zip(hosted).zip(zones))
            .map(|((&i, &buf), &(usable, _))| (i, buf, usable));
        ins.chain(out).chain(residents).chain(hosted).collect()
    }

    /// Launches the kernel on `slot` for `block` (`None`: the warm-up, counts 0).
    fn launch(
        &mut self,
        block: Option<usize>,
        slot: usize,
        wait: &[&EventOf<A>],
    ) -> Result<EventOf<A>, StreamError> {
        let (l, w, b) = (self.share.layout, self.share.opts.work, &self.share.binding);
        let (counts, global) = match block {
            None => ([0, 0, 0], w.local.unwrap_or(1)),
            Some(i) => {
                let r = l.input(i);
                let count = if w.per_output {
                    l.output(i).len()
                } else {
                    r.len()
                };
                // Never None: shape_layout refused a block whose launch passes usize::MAX.
                ([r.len(), i, r.start], w.global(count).unwrap_or(usize::MAX))
            }
        };
        let buffers = self.buffers(slot);
        let counts = encode_counts(self.lanes.kernel().name(), b, counts)?;
        let values: Vec<(u32, &[u8])> = counts
            .iter()
            .chain(&b.scalars)
            .map(|(i, v)| (*i, v.as_slice()))
            .collect();
        let size = LaunchSize {
            global,
            local: w.local,
        };
        let lane = self.lane(COMPUTE);
        let launched = self
            .lanes
            .launch_within(lane, &buffers, &values, size, wait);
        launched.map_err(|e| match block {
            Some(i) => stage_error(i, "kernel", e),
            None => backend::<A>(e),
        })
    }
}

/// The element count, block index and offset in the integer types the kernel declared
/// (checked to fit before the run started).
fn encode_counts(
    kernel: &str,
    binding: &Binding,
    counts: [usize; 3],
) -> Result<Vec<(u32, Vec<u8>)>, BindError> {
    binding
        .counts
        .iter()
        .zip(counts)
        .map(|(&(i, t), v)| {
            t.encode_count(v as u64)
                .map(|bytes| (i, bytes))
                .ok_or_else(|| BindError {
                    kernel: kernel.into(),
                    problem: Box::new(BindProblem::CountTooNarrow {
                        argument: Argument {
                            name: i.to_string(),
                            type_name: t.cl_name().into(),
                        },
                        max: v as u64,
                    }),
                })
        })
        .collect()
}

fn backend<A: Api>(e: A::Error) -> StreamError {
    StreamError::Backend(e.into())
}

impl<'s, A: Api> Stages for DeviceRing<'_, 's, '_, '_, A> {
    type Event = EventOf<A>;

    fn upload(
        &mut self,
        step: Step,
        wait: &[&EventOf<A>],
    ) -> Result<Vec<(EventOf<A>, u64)>, StreamError> {
        let Step { block, slot, pass } = step;
        let bytes = self.share.layout.input_bytes(block);
        let share = self.share;
        for view in share.views.sources() {
            self.wait_pinned(block, view, bytes.clone())?;
        }
        let slots: &'s [Slot<A>] = self.bound.slots;
        let mut up = Vec::new();
        for (view, buf) in self.share.views.sources().zip(&slots[slot].ins) {
            let events = self
                .lanes
                .upload(self.lane(UPLOAD), buf, 0, view, bytes.clone(), wait)
                .map_err(|e| stage_error(block, "upload", e))?;
            up.extend(events.into_iter().map(|e| (e, 0)));
        }
        spread_bytes(&mut up, bytes.len() as u64 * slots[slot].ins.len() as u64);
        // The time to the first block, pinned progressively or not (demo and run compare
        // the two): the host waits once for block 0's upload, which delays the next
        // enqueue by one wake-up (tens of µs once per run; the upload queue is in order,
        // so block 1's upload could not start earlier anyway).
        if block == self.share.blocks.start && pass == 0 {
            self.see_first_upload(block, &up)?;
        }
        Ok(up)
    }

    fn kernel(&mut self, step: Step, wait: &[&EventOf<A>]) -> Result<EventOf<A>, StreamError> {
        let lane = self.lane(COMPUTE);
        let key = self.watch_key(step);
        if let Some(w) = &mut self.watch {
            w.before_kernel(self.lanes, lane, (key, step.slot))?;
        }
        self.launch(Some(step.block), step.slot, wait)
    }

    fn check(&mut self, step: Step) -> Result<(), StreamError> {
        let lane = self.lane(COMPUTE);
        let key = self.watch_key(step);
        let lanes: &Lanes<'s, A> = self.lanes;
        self.watch
            .as_mut()
            .map_or(Ok(()), |w| w.check(lanes, lane, key))
    }

    fn download(
        &mut self,
        step: Step,
        wait: &[&EventOf<A>],
    ) -> Result<Vec<(EventOf<A>, u64)>, StreamError> {
        let Step { block, slot, .. } = step;
        let bytes = self.share.layout.output_bytes(block);
        let share = self.share;
        self.wait_pinned(block, share.views.target(), bytes.clone())?;
        let slots: &'s [Slot<A>] = self.bound.slots;
        let src = slots[slot].out.as_ref().unwrap_or(&slots[slot].ins[0]);
        let lane = self.lane(DOWNLOAD);
        let target = self.share.views.target();
        let events = self
            .lanes
            .download(lane, target, bytes.clone(), src, 0, wait)
            .map_err(|e| stage_error(block, "download", e))?;
        let mut down: Vec<(EventOf<A>, u64)> = events.into_iter().map(|e| (e, 0)).collect();
        spread_bytes(&mut down, bytes.len() as u64);
        Ok(down)
    }

    fn flush(&self) -> Result<(), StreamError> {
        self.lanes.flush().map_err(backend::<A>)
    }

    fn finish(&self) {
        let _ = self.lanes.finish();
    }

    fn wait(&self, e: &EventOf<A>) -> Result<(), BackendError> {
        self.lanes.wait(e).map_err(Into::into)
    }

    fn profile(&self, e: &EventOf<A>) -> Result<Profile, StreamError> {
        let origin = self.origin.as_ref().expect("prepare() marked the origin");
        self.lanes.profile(e, origin).map_err(backend::<A>)
    }
}
