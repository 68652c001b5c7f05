//! The queue's tests, on the first Vulkan device (lavapipe in CI).

use super::*;
use crate::backend::fault::OutOfResources;
use crate::backend::vulkan::VulkanInstance;
use std::cell::RefCell;
use std::sync::mpsc;
use std::time::Duration;

/// Called before each batch this thread submits, with its hardware queue: an error it gives
/// fails the batch as the driver's would.
type Injector = Box<dyn FnMut(Hw) -> Option<VulkanError>>;

thread_local! {
    static INJECT: RefCell<Option<Injector>> = const { RefCell::new(None) };
}

/// The error this thread's injector gives the batch about to be submitted to `hw`, if any
/// (`VulkanQueue::batch`, in tests only).
pub(super) fn injected(hw: Hw) -> Option<VulkanError> {
    INJECT.with(|i| i.borrow_mut().as_mut().and_then(|f| f(hw)))
}

/// A split copy whose second half fails to submit after its first half was submitted waits
/// for the queues before freeing its command buffers, taking each hardware queue's lock as
/// a submit does: while another thread holds the queue the first half went to (as one in
/// `vkQueueSubmit` does), the failed submit does not return. Before, it called
/// `vkDeviceWaitIdle` holding no queue's lock, which the spec forbids while another thread
/// submits, and returned while the queue was still held.
#[test]
fn a_partly_submitted_command_waits_for_the_queues_under_their_locks() {
    let inst = VulkanInstance::load().expect("a Vulkan device: mesa-vulkan-drivers");
    let adapter = inst.list().unwrap().remove(0);
    let mut shared = super::super::device::open(&adapter).unwrap();
    shared.copy = super::super::plan::VkCopy::Split;
    let shared = Arc::new(shared);
    let q = VulkanQueue::new(&shared, None).unwrap();
    let first = shared.route(Role::Upload, q.slot)[0];
    let empty = |_: &ash::Device, _: vk::CommandBuffer, _: Part| Ok(());
    let (go, go_rx) = mpsc::channel();
    let (held, held_rx) = mpsc::channel();
    let shared = &shared;
    std::thread::scope(|s| {
        let holder = s.spawn(move || {
            go_rx.recv().unwrap();
            let family = shared.family(first);
            let queue = lock(&family.queues[first.queue % family.queues.len()]);
            held.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            let released = Instant::now();
            drop(queue);
            released
        });
        let mut batches = 0;
        let inject: Injector = Box::new(move |_| {
            batches += 1;
            (batches == 2).then(|| {
                go.send(()).unwrap();
                held_rx.recv().unwrap();
                VulkanError::out_of_resources(crate::backend::fault::Operation::Upload)
            })
        });
        INJECT.with(|i| *i.borrow_mut() = Some(inject));
        let sent = q.submit(Role::Upload, &[], Keep::default(), empty);
        let returned = Instant::now();
        INJECT.with(|i| *i.borrow_mut() = None);
        assert!(sent.is_err(), "the second half's submit failed");
        let released = holder.join().unwrap();
        assert!(
            returned >= released,
            "the failed submit returned {:?} before another thread let go of the queue",
            released - returned
        );
    });
    q.finish().unwrap();
}

/// A family without timestamps (timestampValidBits 0, as a transfer family may have):
/// commands are timed by the host's clock instead of failing to profile.
#[test]
fn without_timestamps_commands_are_timed_by_the_host_clock() {
    let inst = VulkanInstance::load().expect("a Vulkan device: mesa-vulkan-drivers");
    let adapter = inst.list().unwrap().remove(0);
    let mut shared = super::super::device::open(&adapter).unwrap();
    shared.host_clock = true;
    let shared = Arc::new(shared);
    let q = VulkanQueue::new(&shared, None).unwrap();
    let empty = |_: &ash::Device, _: vk::CommandBuffer, _: Part| Ok(());
    let a = q
        .submit(Role::Compute, &[], Keep::default(), empty)
        .unwrap();
    let b = q
        .submit(Role::Upload, &[&a], Keep::default(), empty)
        .unwrap();
    assert!(a.stamps.pool == vk::QueryPool::null());
    let (pa, pb) = (a.profile().unwrap(), b.profile().unwrap());
    assert!(pa.start <= pa.end && pa.start <= pb.start, "{pa:?} {pb:?}");
    assert!(pb.start <= pb.end && pb.end > 0, "{pb:?}");
    q.finish().unwrap();
}

/// `finish` waits without holding the queue's lock: while it waits for a command held
/// back by a semaphore the host has not signalled yet (a user event), another thread
/// enqueues on the queue at once.
#[test]
fn finish_waits_without_holding_the_queue() {
    let inst = VulkanInstance::load().expect("a Vulkan device: mesa-vulkan-drivers");
    let adapter = inst.list().unwrap().remove(0);
    let shared = Arc::new(super::super::device::open(&adapter).unwrap());
    let q = VulkanQueue::new(&shared, None).unwrap();
    let empty = |_: &ash::Device, _: vk::CommandBuffer, _: Part| Ok(());
    let timeline = Arc::new(Timeline::new(&shared).unwrap());
    let gate = VulkanEvent {
        value: timeline.reached().unwrap() + 1,
        timeline,
        stamps: Arc::new(q.stamps(1).unwrap()),
    };
    q.submit(Role::Compute, &[&gate], Keep::default(), empty)
        .unwrap();
    let q = &q;
    std::thread::scope(|s| {
        let finished = s.spawn(|| q.finish());
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            let e = q.submit(Role::Compute, &[], Keep::default(), empty);
            let _ = tx.send(e.is_ok());
        });
        let enqueued = rx.recv_timeout(std::time::Duration::from_secs(5));
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(gate.timeline.semaphore)
            .value(gate.value);
        // SAFETY: a live timeline semaphore, signalled from the host to a higher value.
        unsafe { shared.device.signal_semaphore(&info) }.unwrap();
        assert!(finished.join().unwrap().is_ok());
        assert_eq!(enqueued, Ok(true), "an enqueue waited for finish's wait");
    });
}

/// Queues that come and go reuse the semaphores the dropped ones gave back (kept until
/// the device goes: see `Shared::retire`): a new queue's commands go on from the value
/// its semaphore reached, and the semaphores kept stay two per queue alive at once.
#[test]
fn dropped_queues_semaphores_are_taken_again_and_signal_on() {
    let inst = VulkanInstance::load().expect("a Vulkan device: mesa-vulkan-drivers");
    let adapter = inst.list().unwrap().remove(0);
    let shared = Arc::new(super::super::device::open(&adapter).unwrap());
    let empty = |_: &ash::Device, _: vk::CommandBuffer, _: Part| Ok(());
    let mut seen = std::collections::HashSet::new();
    for round in 0..20u64 {
        let q = VulkanQueue::new(&shared, None).unwrap();
        seen.insert(q.timeline.semaphore);
        seen.insert(q.aux.semaphore);
        let e = q.submit(Role::Upload, &[], Keep::default(), empty).unwrap();
        e.wait().unwrap();
        assert!(e.value > round / 2, "round {round}: value {}", e.value);
    }
    assert_eq!(
        seen.len(),
        2,
        "one queue alive at a time uses the same two semaphores"
    );
}
