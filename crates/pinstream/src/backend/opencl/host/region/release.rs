//! Freeing a region without waiting ([`HostRegion::release_when_idle`]), for fronts whose
//! frees come from a garbage collector (Python's arrays): `Drop` waits for the work in
//! flight on the region before it frees the memory, and where that work waits on something
//! the freeing thread itself would do next (a user event it sets after `del`), or a thread
//! that cannot run while the freeing one holds a lock (the GIL), waiting never ends.
//!
//! A busy region goes to the reaper: one thread of pinstream's, started on the first busy
//! free and kept for the process's life, fed by a channel. It frees the regions in the order
//! they came, each once the work in flight on it has ended (it waits as `Drop` does: for the
//! events of batch calls on callers' queues, and the queues of the region's own transfers,
//! never for more). Regions queued behind one whose work has not ended wait with it: their
//! memory is freed once it ends. Should no thread be available to start the reaper, the
//! regions wait in the channel and the next busy free tries again; the memory is never freed
//! while a kernel or transfer may still touch it, and the caller never waits.
//!
//! At process exit nothing waits for the reaper: regions still queued are not freed by
//! pinstream (exit runs no destructor of theirs, and never waits for a kernel) and their
//! memory goes back to the system with the process, as the driver's own objects do.

use super::HostRegion;
use crate::sync::lock;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Condvar, LazyLock, Mutex};

/// How [`HostRegion::release_when_idle`] frees a region.
#[derive(Debug)]
pub enum Released {
    /// Nothing could still use it on a device: it was freed before the call returned.
    Now,
    /// It went to pinstream's freeing thread, which frees it once the work in flight on it
    /// has ended; the handle tells when that has happened.
    Later(Freeing),
}

/// A region given to the freeing thread ([`Released::Later`]): whether it has been freed.
/// Dropping the handle changes nothing.
#[derive(Debug, Clone, Default)]
pub struct Freeing(Arc<Freed>);

#[derive(Debug, Default)]
struct Freed {
    done: Mutex<bool>,
    changed: Condvar,
}

impl Freeing {
    /// True once the region has been freed.
    pub fn is_finished(&self) -> bool {
        *lock(&self.0.done)
    }

    /// Waits until the region has been freed, which is once the work in flight on it (and
    /// on the regions released before it) has ended.
    pub fn wait(&self) {
        let mut done = lock(&self.0.done);
        while !*done {
            done = self.0.changed.wait(done).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn finish(&self) {
        *lock(&self.0.done) = true;
        self.0.changed.notify_all();
    }
}

/// A region waiting for the freeing thread, with its handle.
type Pending = (HostRegion, Freeing);

/// Starts a thread running the closure (the freeing thread's start, made replaceable for
/// tests).
type Spawn = fn(Box<dyn FnOnce() + Send>) -> std::io::Result<()>;

/// The freeing thread's channel. Its receiver waits here until the thread takes it, so that
/// a thread that could not be started leaves the queued regions for the next try.
struct Reaper {
    to: Sender<Pending>,
    from: Arc<Mutex<Option<Receiver<Pending>>>>,
    started: AtomicBool,
    /// Regions queued and not yet freed.
    waiting: Arc<AtomicUsize>,
}

/// The process's one freeing thread, made on the first busy free.
static REAPER: LazyLock<Reaper> = LazyLock::new(Reaper::new);

impl Reaper {
    fn new() -> Self {
        let (to, from) = channel();
        Reaper {
            to,
            from: Arc::new(Mutex::new(Some(from))),
            started: AtomicBool::new(false),
            waiting: Arc::default(),
        }
    }

    /// Queues `region` to be freed once its work has ended, starting the thread with
    /// `spawn` where it is not running yet. Never waits.
    fn free_later(&self, region: HostRegion, spawn: Spawn) -> Freeing {
        let freeing = Freeing::default();
        self.waiting.fetch_add(1, Ordering::AcqRel);
        if let Err(back) = self.to.send((region, freeing.clone())) {
            // Unreachable: the receiver is kept here or by the thread, which never returns.
            // Kept, never freed under a kernel nor waited for.
            tracing::warn!("pinstream's freeing thread is gone: a busy pinned region is kept");
            std::mem::forget(back.0);
            return freeing;
        }
        self.start(spawn);
        freeing
    }

    /// Starts the thread, once; where it cannot be started, the queued regions wait for the
    /// next busy free to try again.
    fn start(&self, spawn: Spawn) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let (from, waiting) = (self.from.clone(), self.waiting.clone());
        if let Err(e) = spawn(Box::new(move || reap(&from, &waiting))) {
            tracing::warn!("no thread to free busy pinned regions ({e}): they wait until a later free can start one");
            self.started.store(false, Ordering::Release);
        }
    }
}

/// The freeing thread: frees each region in the order they came, once its work has ended.
fn reap(from: &Mutex<Option<Receiver<Pending>>>, waiting: &AtomicUsize) {
    let Some(from) = lock(from).take() else {
        return;
    };
    for (region, freeing) in from {
        // `Drop` waits for the region's work in flight, then frees it; a panic there (a
        // driver's) must not end the thread that frees every later region.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(region)));
        waiting.fetch_sub(1, Ordering::AcqRel);
        freeing.finish();
    }
}

/// Starts the freeing thread of the process.
fn spawn_thread(run: Box<dyn FnOnce() + Send>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("pinstream-release".into())
        .spawn(run)
        .map(drop)
}

impl HostRegion {
    /// Frees the region without ever waiting for work in flight on it: at once where nothing
    /// may still use it on a device ([`Released::Now`]; freeing still ends the region's own
    /// mapping, a short driver call), else by pinstream's one freeing thread, which waits for
    /// that work and never for more (the events of batch calls on callers' queues, the queues
    /// of its transfers) and then frees it ([`Released::Later`]). The memory is never freed
    /// while a kernel or a transfer may still touch it. Regions still waiting at process exit
    /// are left to the system (see the module's docs).
    pub fn release_when_idle(self) -> Released {
        self.release_to(&REAPER, spawn_thread)
    }

    /// How many regions [`Self::release_when_idle`] gave the freeing thread that it has not
    /// freed yet (their work in flight, or that of regions released before them, has not
    /// ended).
    pub fn pending_releases() -> usize {
        REAPER.waiting.load(Ordering::Acquire)
    }

    /// [`Self::release_when_idle`] through `reaper`, whose thread `spawn` starts.
    fn release_to(self, reaper: &Reaper, spawn: Spawn) -> Released {
        if self.is_idle() {
            drop(self);
            return Released::Now;
        }
        Released::Later(reaper.free_later(self, spawn))
    }

    /// True when nothing may still use the region on a device: no transfer's queue is left
    /// to finish, and every batch call's event is complete.
    fn is_idle(&self) -> bool {
        let f = lock(&self.in_flight);
        f.queues.is_empty() && f.events.iter().all(|(_, e)| e.is_done())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::{default_device, devices, ClError, Context, Event};
    use std::time::Duration;

    /// A mapped region of `ctx` with work in flight on it until `gate` completes.
    fn busy(ctx: &Context, gate: &Event) -> HostRegion {
        let region = HostRegion::mapped(ctx, 4096, false).unwrap();
        let q = ctx.queue().unwrap();
        let pending = region.in_flight_until(&q, || Ok::<_, ClError>(gate.clone()));
        pending.unwrap();
        region
    }

    /// A busy region released where no thread can be started is neither freed while its
    /// work may run nor waited for: it waits in the channel, and a later release that can
    /// start the thread has it freed once that work has ended, in order with its own.
    #[test]
    fn a_region_with_no_thread_to_free_it_waits_until_one_starts_and_its_work_ends() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let gate = ctx.user_event().unwrap();
        let reaper = Reaper::new();
        let no_thread: Spawn = |_| Err(std::io::Error::other("no threads"));
        let Released::Later(first) = busy(&ctx, &gate).release_to(&reaper, no_thread) else {
            panic!("a busy region was freed at once");
        };
        let Released::Later(second) = busy(&ctx, &gate).release_to(&reaper, spawn_thread) else {
            panic!("a busy region was freed at once");
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(!first.is_finished(), "freed while its work may still run");
        assert!(!second.is_finished(), "freed while its work may still run");
        assert_eq!(reaper.waiting.load(Ordering::Acquire), 2);
        gate.set_user_status(0).unwrap();
        first.wait();
        second.wait();
        assert_eq!(reaper.waiting.load(Ordering::Acquire), 0);
        let idle = HostRegion::mapped(&ctx, 4096, false).unwrap();
        assert!(matches!(idle.release_to(&reaper, no_thread), Released::Now));
    }
}
