//! Queues and events: each command is one command buffer (two for a split copy), on the
//! hardware queue its kind is routed to (`plan`), submitted at once, bracketed by two
//! timestamps, that waits for the queue's previous command and for the events it is given,
//! and signals the queue's timeline semaphore at a new value. An event is that (semaphore,
//! value) pair with the command's times. The timeline orders a queue's commands whichever
//! hardware queues they run on.

use super::device::{Shared, VulkanBuffer};
use super::plan::{Hw, Role};
use super::program::VulkanKernel;
use super::{Result, VulkanError};
use crate::backend::api::Profile;
use crate::sync::lock;
use ash::vk;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A timeline semaphore, given back to its device when no queue or event holds it, for the
/// next queue to take again, and destroyed with the device ([`Shared::retire`]).
pub(super) struct Timeline {
    shared: Arc<Shared>,
    pub(super) semaphore: vk::Semaphore,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.shared.retire(self.semaphore);
    }
}

impl Timeline {
    /// A semaphore a dropped queue gave back (its value where that queue left it: see
    /// [`Self::reached`]), or a new one at 0.
    fn new(shared: &Arc<Shared>) -> Result<Self> {
        if let Some(semaphore) = shared.reuse() {
            return Ok(Timeline {
                shared: shared.clone(),
                semaphore,
            });
        }
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        // SAFETY: `info` lives through the call.
        let semaphore = unsafe { shared.device.create_semaphore(&info, None) }
            .map_err(VulkanError::call("vkCreateSemaphore"))?;
        Ok(Timeline {
            shared: shared.clone(),
            semaphore,
        })
    }

    /// Blocks until the semaphore reaches `value`.
    pub(super) fn wait(&self, value: u64) -> Result<()> {
        let sems = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&sems)
            .values(&values);
        // SAFETY: the semaphore is live; `info` lives through the call.
        unsafe { self.shared.device.wait_semaphores(&info, u64::MAX) }
            .map_err(VulkanError::call("vkWaitSemaphores"))
    }

    fn reached(&self) -> Result<u64> {
        // SAFETY: the semaphore is live.
        unsafe {
            self.shared
                .device
                .get_semaphore_counter_value(self.semaphore)
        }
        .map_err(VulkanError::call("vkGetSemaphoreCounterValue"))
    }
}

/// A command's times: timestamp pairs (one per command buffer), or, where the device is
/// timed by the host's clock, when it was submitted and when the host first saw it done.
pub(super) struct Stamps {
    shared: Arc<Shared>,
    /// Null on the host's clock.
    pool: vk::QueryPool,
    pairs: u32,
    submitted: Instant,
    done: OnceLock<Instant>,
}

impl Drop for Stamps {
    fn drop(&mut self) {
        // SAFETY: the queue holds the stamps until their command completed; a null pool is
        // ignored.
        unsafe { self.shared.device.destroy_query_pool(self.pool, None) };
    }
}

/// A point in a queue: the timeline value its command signals, and its times.
pub struct VulkanEvent {
    pub(super) timeline: Arc<Timeline>,
    pub(super) value: u64,
    stamps: Arc<Stamps>,
}

impl VulkanEvent {
    /// Blocks until the command completed.
    pub(super) fn wait(&self) -> Result<()> {
        self.timeline.wait(self.value)?;
        self.stamps.done.get_or_init(Instant::now);
        Ok(())
    }

    /// The command's times, in nanoseconds (waits for it first): by the device's clock, or
    /// by the host's where a family in use has no timestamps (the end then is when the host
    /// first saw the command done: coarse).
    pub(super) fn profile(&self) -> Result<Profile> {
        self.wait()?;
        let st = &self.stamps;
        let shared = &st.shared;
        if st.pool == vk::QueryPool::null() {
            let ns = |t: Instant| t.duration_since(shared.epoch).as_nanos() as u64;
            let done = *st.done.get().expect("set by wait");
            return Ok(Profile {
                queued: None,
                submit: None,
                start: ns(st.submitted),
                end: ns(done),
            });
        }
        let mut ticks = vec![0u64; 2 * st.pairs as usize];
        // SAFETY: every query was written by the completed command.
        unsafe {
            shared.device.get_query_pool_results(
                st.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(VulkanError::call("vkGetQueryPoolResults"))?;
        let ns = |t: u64| (t as f64 * f64::from(shared.caps.timestamp_period)) as u64;
        let start = ticks.iter().step_by(2).map(|&t| ns(t)).min().unwrap_or(0);
        let end = ticks.iter().skip(1).step_by(2).map(|&t| ns(t)).max();
        Ok(Profile {
            queued: None,
            submit: None,
            start,
            end: end.unwrap_or(0).max(start),
        })
    }
}

/// What a submitted command keeps alive until it completed.
#[derive(Default)]
pub(super) struct Keep {
    pub(super) _staging: Option<VulkanBuffer>,
    pub(super) descriptors: Option<vk::DescriptorPool>,
}

struct Pending {
    value: u64,
    /// Each command buffer with the index of its pool.
    cmds: Vec<(usize, vk::CommandBuffer)>,
    keep: Keep,
    _stamps: Arc<Stamps>,
}

struct State {
    /// The command pools: the compute family's, then the side family's (null if none).
    pools: [vk::CommandPool; 2],
    last: u64,
    /// The last value the second half of a split copy signalled on `aux`.
    aux_last: u64,
    pending: VecDeque<Pending>,
}

/// One command buffer to record: its part of the command and the number of parts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Part {
    pub(super) index: usize,
    pub(super) of: usize,
}

/// An in-order queue: kernels on one of the device's compute queues, copies where the
/// device's copy way sends them, each command after the previous one.
pub struct VulkanQueue {
    pub(super) shared: Arc<Shared>,
    slot: usize,
    timeline: Arc<Timeline>,
    /// Signalled by the second half of split copies, waited on before the first signals.
    aux: Arc<Timeline>,
    state: Mutex<State>,
    /// The shader that copies in 16-byte words (the ways that use it: `VkCopy::uses_shader`).
    pub(super) copier: Option<Arc<VulkanKernel>>,
}

/// A command pool of `family`.
fn command_pool(shared: &Shared, family: u32) -> Result<vk::CommandPool> {
    let info = vk::CommandPoolCreateInfo::default()
        .queue_family_index(family)
        .flags(vk::CommandPoolCreateFlags::TRANSIENT);
    // SAFETY: `info` lives through the call.
    unsafe { shared.device.create_command_pool(&info, None) }
        .map_err(VulkanError::call("vkCreateCommandPool"))
}

impl VulkanQueue {
    pub(super) fn new(shared: &Arc<Shared>, copier: Option<Arc<VulkanKernel>>) -> Result<Self> {
        let timeline = Arc::new(Timeline::new(shared)?);
        let aux = Arc::new(Timeline::new(shared)?);
        // A semaphore given back by a dropped queue goes on from the value it reached.
        let (last, aux_last) = (timeline.reached()?, aux.reached()?);
        let compute = command_pool(shared, shared.compute.index)?;
        let side = match &shared.side {
            Some(t) => command_pool(shared, t.index).inspect_err(|_| {
                // SAFETY: the pool is new and unused.
                unsafe { shared.device.destroy_command_pool(compute, None) }
            })?,
            None => vk::CommandPool::null(),
        };
        Ok(VulkanQueue {
            shared: shared.clone(),
            slot: shared.pick_queue(),
            timeline,
            aux,
            state: Mutex::new(State {
                pools: [compute, side],
                last,
                aux_last,
                pending: VecDeque::new(),
            }),
            copier,
        })
    }

    /// Frees what completed commands kept.
    fn reclaim(&self, state: &mut State, upto: u64) {
        while state.pending.front().is_some_and(|p| p.value <= upto) {
            let p = state.pending.pop_front().expect("checked");
            self.release(&state.pools, p);
        }
    }

    fn release(&self, pools: &[vk::CommandPool; 2], p: Pending) {
        self.free(pools, &p.cmds);
        self.discard(p.keep);
    }

    /// Frees command buffers no pending work uses.
    fn free(&self, pools: &[vk::CommandPool; 2], cmds: &[(usize, vk::CommandBuffer)]) {
        for &(pool, cmd) in cmds {
            // SAFETY: the caller's contract: the buffer completed or was never submitted.
            unsafe { self.shared.device.free_command_buffers(pools[pool], &[cmd]) };
        }
    }

    /// Frees what a command kept, once it completed or was never submitted.
    pub(super) fn discard(&self, keep: Keep) {
        if let Some(dp) = keep.descriptors {
            // SAFETY: no pending command uses the pool (see the callers).
            unsafe { self.shared.device.destroy_descriptor_pool(dp, None) };
        }
    }

    /// Blocks until every command enqueued so far completed, and frees what they kept. The
    /// queue's lock is not held while waiting: other threads enqueue meanwhile.
    pub(super) fn finish(&self) -> Result<()> {
        let last = lock(&self.state).last;
        self.timeline.wait(last)?;
        self.reclaim(&mut lock(&self.state), last);
        Ok(())
    }

    /// Records one command of `role` (`record` called once per command buffer, each between
    /// timestamps), submits it after the queue's previous command and `wait`, and returns its
    /// event. `keep` lives until it completed.
    pub(super) fn submit(
        &self,
        role: Role,
        wait: &[&VulkanEvent],
        keep: Keep,
        mut record: impl FnMut(&ash::Device, vk::CommandBuffer, Part) -> Result<()>,
    ) -> Result<VulkanEvent> {
        let mut state = lock(&self.state);
        let reached = self.timeline.reached()?;
        self.reclaim(&mut state, reached);
        let hws = self.shared.route(role, self.slot);
        let made = self
            .stamps(hws.len() as u32)
            .map(Arc::new)
            .and_then(|stamps| {
                let cmds = self.record_all(&state.pools, &stamps, &hws, &mut record)?;
                Ok((stamps, cmds))
            });
        let (stamps, cmds) = match made {
            Ok(m) => m,
            Err(e) => {
                self.discard(keep);
                return Err(e);
            }
        };
        let value = state.last + 1;
        if let Err((e, partly)) = self.send(&mut state, &cmds, &hws, wait, value) {
            if partly {
                drop(state);
                // Part of it may be in flight: let it end before the buffers are freed,
                // without holding this queue's state (each hardware queue's lock is taken
                // in turn).
                let _ = self.shared.wait_idle();
                state = lock(&self.state);
            }
            self.free(&state.pools, &cmds);
            self.discard(keep);
            return Err(e);
        }
        state.last = value;
        self.shared.copied(role, self.timeline.semaphore, value);
        state.pending.push_back(Pending {
            value,
            cmds,
            keep,
            _stamps: stamps.clone(),
        });
        Ok(VulkanEvent {
            timeline: self.timeline.clone(),
            value,
            stamps,
        })
    }

    /// One recorded command buffer per hardware queue in `hws`, or none (all freed).
    fn record_all(
        &self,
        pools: &[vk::CommandPool; 2],
        stamps: &Stamps,
        hws: &[Hw],
        record: &mut impl FnMut(&ash::Device, vk::CommandBuffer, Part) -> Result<()>,
    ) -> Result<Vec<(usize, vk::CommandBuffer)>> {
        let mut cmds = Vec::new();
        for (index, &hw) in hws.iter().enumerate() {
            let pool = usize::from(hw.side && self.shared.side.is_some());
            let part = Part {
                index,
                of: hws.len(),
            };
            match self.record(pools[pool], stamps, part, |d, c| record(d, c, part)) {
                Ok(cmd) => cmds.push((pool, cmd)),
                Err(e) => {
                    self.free(pools, &cmds);
                    return Err(e);
                }
            }
        }
        Ok(cmds)
    }

    /// Timestamp queries for `pairs` command buffers (none on the host's clock), reset.
    fn stamps(&self, pairs: u32) -> Result<Stamps> {
        let mut stamps = Stamps {
            shared: self.shared.clone(),
            pool: vk::QueryPool::null(),
            pairs,
            submitted: Instant::now(),
            done: OnceLock::new(),
        };
        if self.shared.host_clock {
            return Ok(stamps);
        }
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(2 * pairs);
        // SAFETY: `info` lives through the call.
        stamps.pool = unsafe { self.shared.device.create_query_pool(&info, None) }
            .map_err(VulkanError::call("vkCreateQueryPool"))?;
        // SAFETY: the pool is new and unused (hostQueryReset is enabled: `device::open`).
        unsafe {
            self.shared
                .device
                .reset_query_pool(stamps.pool, 0, 2 * pairs)
        };
        Ok(stamps)
    }

    /// A recorded command buffer: start stamp, `record`, end stamp (no stamps on the host's
    /// clock).
    fn record(
        &self,
        pool: vk::CommandPool,
        stamps: &Stamps,
        part: Part,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> Result<()>,
    ) -> Result<vk::CommandBuffer> {
        let d = &self.shared.device;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and used under the state lock only.
        let cmd = unsafe { d.allocate_command_buffers(&info) }
            .map_err(VulkanError::call("vkAllocateCommandBuffers"))?[0];
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let q = 2 * part.index as u32;
        let timed = stamps.pool != vk::QueryPool::null();
        // SAFETY: `cmd` is a new buffer of this device; the recorded handles are live; the
        // queries were reset on the host and are written once each.
        let recorded = unsafe {
            d.begin_command_buffer(cmd, &begin)
                .map_err(VulkanError::call("vkBeginCommandBuffer"))
                .and_then(|()| {
                    if timed {
                        d.cmd_write_timestamp(
                            cmd,
                            vk::PipelineStageFlags::TOP_OF_PIPE,
                            stamps.pool,
                            q,
                        );
                    }
                    record(d, cmd)?;
                    if timed {
                        let end = vk::PipelineStageFlags::BOTTOM_OF_PIPE;
                        d.cmd_write_timestamp(cmd, end, stamps.pool, q + 1);
                    }
                    d.end_command_buffer(cmd)
                        .map_err(VulkanError::call("vkEndCommandBuffer"))
                })
        };
        if let Err(e) = recorded {
            // SAFETY: never submitted.
            unsafe { d.free_command_buffers(pool, &[cmd]) };
            return Err(e);
        }
        Ok(cmd)
    }

    /// Submits `cmds` (one per queue of `hws`) to wait for the queue's last value and
    /// `wait`, then signal `value`. Two parts run at once: the second signals `aux`, and an
    /// empty batch on the first part's queue (after it in submission order) waits for that
    /// and signals `value`. On an error, whether part of it was submitted (and may run).
    fn send(
        &self,
        state: &mut State,
        cmds: &[(usize, vk::CommandBuffer)],
        hws: &[Hw],
        wait: &[&VulkanEvent],
        value: u64,
    ) -> std::result::Result<(), (VulkanError, bool)> {
        let mut waits: Vec<(vk::Semaphore, u64)> = wait
            .iter()
            .map(|e| (e.timeline.semaphore, e.value))
            .collect();
        if state.last > 0 {
            waits.push((self.timeline.semaphore, state.last));
        }
        let main = (self.timeline.semaphore, value);
        if cmds.len() == 1 {
            let sent = self.batch(hws[0], &[cmds[0].1], &waits, Some(main));
            return sent.map_err(|e| (e, false));
        }
        let aux = (self.aux.semaphore, state.aux_last + 1);
        self.batch(hws[0], &[cmds[0].1], &waits, None)
            .map_err(|e| (e, false))?;
        self.batch(hws[1], &[cmds[1].1], &waits, Some(aux))
            .and_then(|()| {
                state.aux_last = aux.1;
                self.batch(hws[0], &[], &[aux], Some(main))
            })
            .map_err(|e| (e, true))
    }

    /// Submits one batch to hardware queue `hw`: `cmds` after `waits`, then `signal`.
    fn batch(
        &self,
        hw: Hw,
        cmds: &[vk::CommandBuffer],
        waits: &[(vk::Semaphore, u64)],
        signal: Option<(vk::Semaphore, u64)>,
    ) -> Result<()> {
        #[cfg(test)]
        if let Some(e) = tests::injected(hw) {
            return Err(e);
        }
        let (sems, values): (Vec<_>, Vec<_>) = waits.iter().copied().unzip();
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; sems.len()];
        let (signal, signal_values): (Vec<_>, Vec<_>) = signal.into_iter().unzip();
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&sems)
            .wait_dst_stage_mask(&stages)
            .command_buffers(cmds)
            .signal_semaphores(&signal)
            .push_next(&mut timeline);
        let family = self.shared.family(hw);
        let queue = lock(&family.queues[hw.queue % family.queues.len()]);
        // SAFETY: the queue is locked (external synchronization); everything `submit` points
        // to lives through the call; the command buffers are fully recorded.
        unsafe {
            self.shared
                .device
                .queue_submit(*queue, &[submit], vk::Fence::null())
        }
        .map_err(VulkanError::call("vkQueueSubmit"))
    }
}

impl Drop for VulkanQueue {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::warn!("a Vulkan queue's commands did not finish before it was dropped: {e}");
            // Waiting failed (a lost device): wait for every hardware queue instead, so
            // nothing freed below is still in use.
            let _ = self.shared.wait_idle();
        }
        let mut state = lock(&self.state);
        let pools = state.pools;
        for p in std::mem::take(&mut state.pending) {
            self.release(&pools, p);
        }
        for pool in pools {
            // SAFETY: every command of the pool completed and its buffers were freed; a null
            // pool is ignored.
            unsafe { self.shared.device.destroy_command_pool(pool, None) };
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
