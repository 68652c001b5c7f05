//! Queues and events: each command is one command buffer, submitted at once, bracketed by
//! two timestamps, that waits for the queue's previous command and for the events it is
//! given, and signals the queue's timeline semaphore at a new value. An event is that
//! (semaphore, value) pair with the command's timestamps.

use super::device::{lock, Piece, Shared, VulkanBuffer};
use super::{Result, VulkanError};
use crate::backend::api::Profile;
use ash::vk;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A timeline semaphore, destroyed when no queue or event holds it.
pub(super) struct Timeline {
    shared: Arc<Shared>,
    pub(super) semaphore: vk::Semaphore,
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // SAFETY: the queue that signals it waited for its commands before letting go, and
        // events only wait on it: no pending operation uses it.
        unsafe { self.shared.device.destroy_semaphore(self.semaphore, None) };
    }
}

impl Timeline {
    fn new(shared: &Arc<Shared>) -> Result<Self> {
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

/// Two timestamp queries: a command's start and end.
pub(super) struct Stamps {
    shared: Arc<Shared>,
    pool: vk::QueryPool,
}

impl Drop for Stamps {
    fn drop(&mut self) {
        // SAFETY: the queue holds the stamps until their command completed.
        unsafe { self.shared.device.destroy_query_pool(self.pool, None) };
    }
}

/// A point in a queue: the timeline value its command signals, and its timestamps.
pub struct VulkanEvent {
    pub(super) timeline: Arc<Timeline>,
    pub(super) value: u64,
    stamps: Arc<Stamps>,
}

impl VulkanEvent {
    /// Blocks until the command completed.
    pub(super) fn wait(&self) -> Result<()> {
        self.timeline.wait(self.value)
    }

    /// The command's device times, in nanoseconds (waits for it first).
    pub(super) fn profile(&self) -> Result<Profile> {
        self.wait()?;
        let shared = &self.stamps.shared;
        if shared.timestamp_bits == 0 {
            return Err(VulkanError::misuse(
                "profile",
                "the device's compute queue family has no timestamps (timestampValidBits 0)",
            ));
        }
        let mut ticks = [0u64; 2];
        // SAFETY: both queries were written by the completed command.
        unsafe {
            shared.device.get_query_pool_results(
                self.stamps.pool,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(VulkanError::call("vkGetQueryPoolResults"))?;
        let ns = |t: u64| (t as f64 * f64::from(shared.caps.timestamp_period)) as u64;
        Ok(Profile {
            queued: None,
            submit: None,
            start: ns(ticks[0]),
            end: ns(ticks[1]).max(ns(ticks[0])),
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
    cmd: vk::CommandBuffer,
    keep: Keep,
    _stamps: Arc<Stamps>,
}

struct State {
    pool: vk::CommandPool,
    last: u64,
    pending: VecDeque<Pending>,
}

/// An in-order queue on one of the device's compute queues.
pub struct VulkanQueue {
    shared: Arc<Shared>,
    slot: usize,
    timeline: Arc<Timeline>,
    state: Mutex<State>,
}

impl VulkanQueue {
    pub(super) fn new(shared: &Arc<Shared>) -> Result<Self> {
        let timeline = Arc::new(Timeline::new(shared)?);
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(shared.family)
            .flags(vk::CommandPoolCreateFlags::TRANSIENT);
        // SAFETY: `info` lives through the call.
        let pool = unsafe { shared.device.create_command_pool(&info, None) }
            .map_err(VulkanError::call("vkCreateCommandPool"))?;
        Ok(VulkanQueue {
            shared: shared.clone(),
            slot: shared.pick_queue(),
            timeline,
            state: Mutex::new(State {
                pool,
                last: 0,
                pending: VecDeque::new(),
            }),
        })
    }

    /// Frees what completed commands kept.
    fn reclaim(&self, state: &mut State, upto: u64) {
        while state.pending.front().is_some_and(|p| p.value <= upto) {
            let p = state.pending.pop_front().expect("checked");
            self.release(state.pool, p);
        }
    }

    fn release(&self, pool: vk::CommandPool, p: Pending) {
        // SAFETY: the command completed: nothing uses its command buffer.
        unsafe { self.shared.device.free_command_buffers(pool, &[p.cmd]) };
        self.discard(p.keep);
    }

    /// Frees what a command kept, once it completed or was never submitted.
    fn discard(&self, keep: Keep) {
        if let Some(dp) = keep.descriptors {
            // SAFETY: no pending command uses the pool (see the callers).
            unsafe { self.shared.device.destroy_descriptor_pool(dp, None) };
        }
    }

    /// Blocks until every command enqueued so far completed, and frees what they kept.
    pub(super) fn finish(&self) -> Result<()> {
        let mut state = lock(&self.state);
        self.timeline.wait(state.last)?;
        let last = state.last;
        self.reclaim(&mut state, last);
        Ok(())
    }

    /// Records one command (`record` between two timestamps), submits it after the queue's
    /// previous command and `wait`, and returns its event. `keep` lives until it completed.
    pub(super) fn submit(
        &self,
        wait: &[&VulkanEvent],
        keep: Keep,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer) -> Result<()>,
    ) -> Result<VulkanEvent> {
        let mut state = lock(&self.state);
        let reached = self.timeline.reached()?;
        self.reclaim(&mut state, reached);
        let made = self.stamps().map(Arc::new).and_then(|stamps| {
            let cmd = self.record(state.pool, &stamps, record)?;
            Ok((stamps, cmd))
        });
        let (stamps, cmd) = match made {
            Ok(m) => m,
            Err(e) => {
                self.discard(keep);
                return Err(e);
            }
        };
        let value = state.last + 1;
        if let Err(e) = self.send(cmd, wait, state.last, value) {
            // SAFETY: the buffer was never submitted.
            unsafe { self.shared.device.free_command_buffers(state.pool, &[cmd]) };
            self.discard(keep);
            return Err(e);
        }
        state.last = value;
        state.pending.push_back(Pending {
            value,
            cmd,
            keep,
            _stamps: stamps.clone(),
        });
        Ok(VulkanEvent {
            timeline: self.timeline.clone(),
            value,
            stamps,
        })
    }

    fn stamps(&self) -> Result<Stamps> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(2);
        // SAFETY: `info` lives through the call.
        let pool = unsafe { self.shared.device.create_query_pool(&info, None) }
            .map_err(VulkanError::call("vkCreateQueryPool"))?;
        Ok(Stamps {
            shared: self.shared.clone(),
            pool,
        })
    }

    /// A recorded command buffer: reset stamps, start stamp, `record`, end stamp.
    fn record(
        &self,
        pool: vk::CommandPool,
        stamps: &Stamps,
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
        // SAFETY: `cmd` is a new buffer of this device; the recorded handles are live.
        let recorded = unsafe {
            d.begin_command_buffer(cmd, &begin)
                .map_err(VulkanError::call("vkBeginCommandBuffer"))
                .and_then(|()| {
                    d.cmd_reset_query_pool(cmd, stamps.pool, 0, 2);
                    d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, stamps.pool, 0);
                    record(d, cmd)?;
                    d.cmd_write_timestamp(
                        cmd,
                        vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                        stamps.pool,
                        1,
                    );
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

    /// Submits `cmd` to wait for the queue's value `last` and `wait`, then signal `value`.
    fn send(
        &self,
        cmd: vk::CommandBuffer,
        wait: &[&VulkanEvent],
        last: u64,
        value: u64,
    ) -> Result<()> {
        let mut sems: Vec<vk::Semaphore> = wait.iter().map(|e| e.timeline.semaphore).collect();
        let mut values: Vec<u64> = wait.iter().map(|e| e.value).collect();
        if last > 0 {
            sems.push(self.timeline.semaphore);
            values.push(last);
        }
        let stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; sems.len()];
        let signal = [self.timeline.semaphore];
        let signal_values = [value];
        let mut timeline = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&values)
            .signal_semaphore_values(&signal_values);
        let cmds = [cmd];
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&sems)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal)
            .push_next(&mut timeline);
        let queue = lock(&self.shared.queues[self.slot]);
        // SAFETY: the queue is locked (external synchronization); everything `submit` points
        // to lives through the call; the command buffer is fully recorded.
        unsafe {
            self.shared
                .device
                .queue_submit(*queue, &[submit], vk::Fence::null())
        }
        .map_err(VulkanError::call("vkQueueSubmit"))
    }

    /// Copies `pieces` (host buffers) into `dst` at `dst_offset` after `wait`.
    pub(super) fn copy_in(
        &self,
        dst: &VulkanBuffer,
        dst_offset: u64,
        pieces: &[Piece],
        keep: Keep,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        self.submit(wait, keep, |d, cmd| {
            for p in pieces.iter().filter(|p| p.len > 0) {
                let region = vk::BufferCopy {
                    src_offset: p.offset,
                    dst_offset: dst_offset + p.at,
                    size: p.len,
                };
                // SAFETY: recording into `cmd`; both buffers are live and the ranges checked.
                unsafe { d.cmd_copy_buffer(cmd, p.buffer, dst.buffer, &[region]) };
            }
            Ok(())
        })
    }

    /// Copies `src` at `src_offset` into `pieces` (host buffers) after `wait`, then makes
    /// the bytes visible to the host.
    pub(super) fn copy_out(
        &self,
        pieces: &[Piece],
        src: &VulkanBuffer,
        src_offset: u64,
        keep: Keep,
        wait: &[&VulkanEvent],
    ) -> Result<VulkanEvent> {
        self.submit(wait, keep, |d, cmd| {
            for p in pieces.iter().filter(|p| p.len > 0) {
                let region = vk::BufferCopy {
                    src_offset: src_offset + p.at,
                    dst_offset: p.offset,
                    size: p.len,
                };
                // SAFETY: as in `copy_in`.
                unsafe { d.cmd_copy_buffer(cmd, src.buffer, p.buffer, &[region]) };
            }
            let to_host = vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ);
            // SAFETY: recording into `cmd`.
            unsafe {
                d.cmd_pipeline_barrier(
                    cmd,
                    vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::HOST,
                    vk::DependencyFlags::empty(),
                    &[to_host],
                    &[],
                    &[],
                )
            };
            Ok(())
        })
    }
}

impl Drop for VulkanQueue {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::warn!("a Vulkan queue's commands did not finish before it was dropped: {e}");
            // SAFETY: waiting failed (a lost device): wait for the whole device instead, so
            // nothing freed below is still in use.
            let _ = unsafe { self.shared.device.device_wait_idle() };
        }
        let mut state = lock(&self.state);
        let pool = state.pool;
        for p in std::mem::take(&mut state.pending) {
            self.release(pool, p);
        }
        // SAFETY: every command of the pool completed and its buffers were freed.
        unsafe { self.shared.device.destroy_command_pool(pool, None) };
    }
}
