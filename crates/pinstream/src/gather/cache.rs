//! Gathers kept per OpenCL context for fronts whose calls name only a queue (the C library's
//! `psMemcpyBatch*Async`, the Python package's `gather`/`scatter`): made on a context's first
//! call, kept until released, so the copy kernels and staging are built once per context.

use super::{Gather, GatherError, GatherOptions};
use crate::backend::opencl::Context;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A context's kept gather, with a reference to the context: while it is kept, the context's
/// address cannot be reused by a new context, so the address stays a sound key.
pub struct CachedGather {
    /// The context, so calls need not describe it again.
    pub ctx: Context,
    gather: Mutex<Gather>,
}

impl CachedGather {
    /// The gather, one call at a time (a call that panicked leaves it usable: every call
    /// starts from the gather's own state, not from the panicked call's).
    pub fn lock(&self) -> MutexGuard<'_, Gather> {
        crate::sync::lock(&self.gather)
    }
}

/// Gathers by context address (see the module's docs). A `static` in each front.
pub struct GatherCache {
    map: Mutex<Option<HashMap<usize, Arc<CachedGather>>>>,
}

impl Default for GatherCache {
    fn default() -> Self {
        Self::new()
    }
}

impl GatherCache {
    /// An empty cache.
    pub const fn new() -> Self {
        GatherCache {
            map: Mutex::new(None),
        }
    }

    fn map(&self) -> MutexGuard<'_, Option<HashMap<usize, Arc<CachedGather>>>> {
        crate::sync::lock(&self.map)
    }

    /// The gather kept for the context at address `key`, where there is one.
    pub fn get(&self, key: usize) -> Option<Arc<CachedGather>> {
        self.map().as_ref()?.get(&key).cloned()
    }

    /// The gather kept for `ctx`, made with `options` where there is none. It is made outside
    /// the cache's lock (building the kernels takes a while, and other contexts' calls go
    /// on); where two threads make one at once, the first kept is the one both get.
    pub fn get_or_make(
        &self,
        ctx: &Context,
        options: &GatherOptions,
    ) -> Result<Arc<CachedGather>, GatherError> {
        let key = ctx.as_raw() as usize;
        if let Some(kept) = self.get(key) {
            return Ok(kept);
        }
        let made = Arc::new(CachedGather {
            ctx: ctx.clone(),
            gather: Mutex::new(Gather::new(ctx, options)?),
        });
        let kept = {
            let mut map = self.map();
            let kept = map.get_or_insert_with(HashMap::new).entry(key);
            kept.or_insert_with(|| made.clone()).clone()
        };
        // Where another thread kept one first, `made` drops here, outside the lock.
        drop(made);
        Ok(kept)
    }

    /// Takes out the gather kept for the context at address `key`, for the caller to drop
    /// outside the cache's lock (dropping waits for the gather's own DMA). The next
    /// [`Self::get_or_make`] for that context makes a new one.
    pub fn take(&self, key: usize) -> Option<Arc<CachedGather>> {
        self.map().as_mut()?.remove(&key)
    }
}
