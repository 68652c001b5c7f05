//! Freeing a region without waiting ([`HostRegion::release_when_idle`]), for fronts whose
//! frees come from a garbage collector (Python's arrays): `Drop` waits for the work in
//! flight on the region before it frees the memory, and where that work waits on something
//! the freeing thread itself would do next (a user event it sets after `del`), or a thread
//! that cannot run while the freeing one holds a lock (the GIL), waiting never ends.

use super::HostRegion;
use std::sync::Mutex;
use std::thread::JoinHandle;

/// How [`HostRegion::release_when_idle`] frees a region.
#[derive(Debug)]
pub enum Released {
    /// Nothing could still use it on a device: it was freed before the call returned.
    Now,
    /// A thread of its own waits for the work in flight on it (as `Drop` does) and then frees
    /// it; joining the handle waits for that, and dropping the handle lets it run on.
    Later(JoinHandle<()>),
    /// No thread could be started: the region is kept, and freed by a later
    /// [`HostRegion::release_when_idle`] that finds its work ended.
    Kept,
}

/// Regions whose freeing thread could not be started, each freed by the first release that
/// finds it idle. Only table operations run under the lock: nothing is freed there.
static KEPT: Mutex<Vec<HostRegion>> = Mutex::new(Vec::new());

impl HostRegion {
    /// Frees the region without ever waiting for work in flight on it: at once where nothing
    /// may still use it on a device ([`Released::Now`]; freeing still ends the region's own
    /// mapping, a short driver call), else on a thread that waits for that work and never for
    /// more (the events of batch calls on callers' queues, the queues of its transfers) and
    /// then frees it ([`Released::Later`]). The memory is never freed while a kernel or a
    /// transfer may still touch it. Regions kept earlier because no thread could be started
    /// are freed first where their work has ended.
    pub fn release_when_idle(self) -> Released {
        free_idle_kept();
        self.release_with(|free| {
            std::thread::Builder::new()
                .name("pinstream-release".into())
                .spawn(free)
        })
    }

    /// [`Self::release_when_idle`] with `spawn` starting the freeing thread.
    fn release_with(
        self,
        spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<JoinHandle<()>>,
    ) -> Released {
        if self.is_idle() {
            drop(self);
            return Released::Now;
        }
        // Shared with the thread, so that a thread that never starts leaves it here.
        let slot = std::sync::Arc::new(Mutex::new(Some(self)));
        let theirs = slot.clone();
        match spawn(Box::new(move || drop(take(&theirs)))) {
            Ok(handle) => Released::Later(handle),
            Err(e) => {
                tracing::warn!("no thread to free a busy pinned region ({e}): kept until a later release finds it idle");
                let kept = take(&slot);
                lock(&KEPT).extend(kept);
                Released::Kept
            }
        }
    }

    /// True when nothing may still use the region on a device: no transfer's queue is left
    /// to finish, and every batch call's event is complete.
    fn is_idle(&self) -> bool {
        let f = lock(&self.in_flight);
        f.queues.is_empty() && f.events.iter().all(|(_, e)| e.is_done())
    }
}

/// Frees the kept regions whose work has ended, outside [`KEPT`]'s lock.
fn free_idle_kept() {
    let idle: Vec<HostRegion> = {
        let mut kept = lock(&KEPT);
        let (idle, busy) = std::mem::take(&mut *kept)
            .into_iter()
            .partition(HostRegion::is_idle);
        *kept = busy;
        idle
    };
    drop(idle);
}

fn take(slot: &Mutex<Option<HostRegion>>) -> Option<HostRegion> {
    lock(slot).take()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::opencl::{default_device, devices, Context};

    /// A region whose freeing thread cannot be started is kept, not freed while its work may
    /// run and not waited for; a later release frees it once that work has ended.
    #[test]
    fn a_region_with_no_thread_to_free_it_is_kept_until_its_work_ends() {
        let Ok(all) = devices() else {
            return; // no OpenCL here; the PoCL CI has one
        };
        let ctx = Context::new(default_device(&all).unwrap()).unwrap();
        let region = HostRegion::mapped(&ctx, 4096, false).unwrap();
        let ptr = region.as_ptr().unwrap() as usize;
        let gate = ctx.user_event().unwrap();
        let q = ctx.queue().unwrap();
        let pending = region.in_flight_until(&q, || {
            Ok::<_, crate::backend::opencl::ClError>(gate.clone())
        });
        pending.unwrap();
        let no_thread = |_| Err(std::io::Error::other("no threads"));
        assert!(matches!(region.release_with(no_thread), Released::Kept));
        let kept = |p: usize| lock(&KEPT).iter().any(|r| r.as_ptr() == Some(p as *mut u8));
        free_idle_kept();
        assert!(kept(ptr), "freed while its work may still run");
        gate.set_user_status(0).unwrap();
        free_idle_kept();
        assert!(!kept(ptr), "kept after its work ended");
    }
}
