//! Raw host allocations, one constructor per pinning mechanism.
//!
//! Each value owns what it allocated and releases it in `Drop`, in the right order
//! (unmap before release, release registrations before unmapping the pages they cover).
//! A constructor that fails half-way drops what it made so far: nothing stays pinned.

use super::context::{Context, MemObject, Queue};
use super::error::{Call, ClError};
pub use super::hostbuf::AllocError;
use super::hostbuf::{create_nv_host, map_whole, unmap_whole};
use super::pin_ceiling;
use super::zerocopy::ZeroCopyAlloc;
use crate::backend::os::{self, PageMap, Residency};
use std::io;
use std::ptr;

/// One contiguous piece of host memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawChunk {
    pub ptr: *mut u8,
    pub len: usize,
}

fn split(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..len.div_ceil(chunk)).map(move |i| (i * chunk, chunk.min(len - i * chunk)))
}

/// Pieces of `len` bytes starting at address `start`, at most `chunk` bytes each (`chunk` a
/// multiple of `page`), with every inner boundary on a page boundary: the first piece ends at
/// the first page boundary at least a chunk's worth in (or `chunk` bytes in when `chunk`
/// is smaller than a page), the rest are whole chunks. Offsets relative to `start`.
fn split_at_pages(start: usize, len: usize, chunk: usize, page: usize) -> Vec<(usize, usize)> {
    let chunk = chunk.max(1);
    let aligned_end = start.saturating_add(chunk) / page * page;
    let first = if aligned_end > start {
        aligned_end - start
    } else {
        chunk
    }
    .min(len);
    let mut parts = vec![(0, first)];
    parts.extend(split(len - first, chunk).map(|(off, n)| (first + off, n)));
    parts
}

/// Host memory obtained through one mechanism.
pub(crate) enum HostAlloc {
    /// Pages pinstream owns, optionally registered (`USE_HOST_PTR`, never mapped) or locked.
    Pages {
        /// Registrations; dropped before `map` (field order).
        _registrations: Vec<MemObject>,
        map: PageMap,
        /// The chunks (offset, length), in order.
        parts: Vec<(usize, usize)>,
        /// Time to map and make the pages resident (before any registration).
        resident: std::time::Duration,
    },
    /// Memory the caller owns, registered by never-mapped `USE_HOST_PTR` buffers; `Drop`
    /// releases the buffers and never frees the memory.
    Registered {
        registrations: Vec<MemObject>,
        chunks: Vec<RawChunk>,
    },
    /// Driver-allocated buffers kept mapped for their whole life.
    Mapped {
        bufs: Vec<(MemObject, *mut u8)>,
        queue: Queue,
    },
    /// Coarse-grained SVM allocations kept mapped.
    Svm {
        chunks: Vec<RawChunk>,
        queue: Queue,
        ctx: Context,
    },
    /// Intel USM host allocations.
    Usm { chunks: Vec<RawChunk>, ctx: Context },
    /// One buffer over the whole allocation, which kernels use in place (mapped memory).
    ZeroCopy(ZeroCopyAlloc),
}

// SAFETY: every variant owns its memory exclusively; OpenCL objects inside are thread-safe.
unsafe impl Send for HostAlloc {}
// SAFETY: shared access only reads the chunk table; memory access is mediated by HostRegion.
unsafe impl Sync for HostAlloc {}

/// How [`HostAlloc::pages`] holds its pages in RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageHold {
    /// Registered with the driver: one never-mapped `USE_HOST_PTR` buffer per chunk.
    Register,
    /// Locked with `mlock` (pinned for the kernel, not for the driver).
    Mlock,
    /// Neither: pageable memory.
    Pageable,
}

impl HostAlloc {
    /// Page-aligned memory of `len` bytes, held as `hold` says: [`PageHold::Register`] adds
    /// one never-mapped `USE_HOST_PTR` buffer per `chunk` (see
    /// [`crate::host::PinOptions::max_chunk`] for why the default is one buffer up to the max
    /// allocation); [`PageHold::Mlock`] calls `mlock`.
    ///
    /// Registered, with more chunks than threads, the pages are made resident and
    /// registered chunk by chunk on up to `how.touch_threads` threads at once, each thread
    /// touching a chunk and registering it straight away, so registration overlaps the first
    /// touch of the next chunks.
    ///
    /// With a `place`ment (byte range, NUMA node), the pages of each range are bound to its
    /// node before anything touches them, so they are allocated there.
    pub fn pages(
        ctx: &Context,
        len: usize,
        chunk: usize,
        how: Residency,
        place: &[(std::ops::Range<usize>, u32)],
        hold: PageHold,
    ) -> Result<Self, AllocError> {
        let register = hold == PageHold::Register;
        let start = std::time::Instant::now();
        // Pipelining needs at least as many chunks as threads; otherwise touch all pages on
        // every thread first, then register.
        let pipelined =
            register && how.touch_threads > 0 && len.div_ceil(chunk.max(1)) >= how.touch_threads;
        let first = Residency {
            touch_threads: if pipelined || !place.is_empty() {
                0
            } else {
                how.touch_threads
            },
            ..how
        };
        let mut map =
            PageMap::new(len, first).map_err(|source| AllocError::Map { bytes: len, source })?;
        if !place.is_empty() {
            place_pages(&map, place)?;
            if !pipelined {
                map.touch_on(how.touch_threads);
            }
        }
        let mut resident = start.elapsed();
        if hold == PageHold::Mlock {
            let len = map.len();
            pin_ceiling::check_lock(len)
                .and_then(|()| map.lock())
                .map_err(|source| AllocError::Lock { bytes: len, source })?;
        }
        let mut registrations = Vec::new();
        if register {
            pin_ceiling::check_driver(len, "clCreateBuffer")?;
            let parts: Vec<_> = split(len, chunk).collect();
            let prepare = if pipelined {
                Prepare::Touch(&map)
            } else {
                Prepare::Nothing
            };
            let threads = how.touch_threads.max(1);
            let (regs, touched) = register_chunks(ctx, map.as_ptr(), &parts, threads, prepare)?;
            registrations = regs;
            if pipelined {
                resident = touched.saturating_duration_since(start);
            }
        }
        Ok(HostAlloc::Pages {
            _registrations: registrations,
            map,
            parts: split(len, chunk).collect(),
            resident,
        })
    }

    /// Page-aligned memory of `len` bytes with the chunk boundaries `parts` (offset,
    /// length), mapped but neither touched nor registered: for a progressive pin
    /// (`crate::host::HostRegion::new` with `PinOptions::progressive`), which makes each
    /// chunk resident and registers it itself ([`register_one`]), keeping the registrations
    /// apart and dropping them before this value. Every part must lie inside `0..len`:
    /// [`HostAlloc::chunks`] offsets the mapping by them.
    pub fn pages_untouched(len: usize, parts: Vec<(usize, usize)>) -> Result<Self, AllocError> {
        let how = Residency {
            huge_pages: true,
            touch_threads: 0,
        };
        let start = std::time::Instant::now();
        let map =
            PageMap::new(len, how).map_err(|source| AllocError::Map { bytes: len, source })?;
        Ok(HostAlloc::Pages {
            _registrations: Vec::new(),
            map,
            parts,
            resident: start.elapsed(),
        })
    }

    /// Registers `len` bytes of the caller's memory at `ptr` as never-mapped
    /// `CL_MEM_USE_HOST_PTR` buffers of at most `chunk` bytes (inner boundaries on page
    /// boundaries), on up to `threads` threads, after faulting the pages in writable
    /// ([`os::populate_write`]). The memory's content is not changed.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be mapped memory that stays valid until the value is dropped.
    pub unsafe fn registered(
        ctx: &Context,
        ptr: *mut u8,
        len: usize,
        chunk: usize,
        threads: usize,
    ) -> Result<Self, AllocError> {
        let page = crate::backend::os::page_size();
        let parts = split_at_pages(ptr as usize, len, chunk, page);
        let threads = threads.max(1);
        // Fewer chunks than threads (one registration is the default): fault the pages in on
        // every thread first, then register.
        let prepare = if parts.len() >= threads {
            Prepare::Populate
        } else {
            // SAFETY: the caller's range is mapped, readable and writable (`registered`'s
            // contract and the mapping check before it).
            unsafe { populate_on_threads(ptr, len, threads) }?;
            Prepare::Nothing
        };
        let (registrations, _) = register_chunks(ctx, ptr, &parts, threads, prepare)?;
        let chunks = parts
            .iter()
            .map(|&(off, n)| RawChunk {
                // SAFETY: `split_at_pages` keeps every piece inside `0..len`, and the caller's
                // range `ptr..ptr+len` is one mapping (`registered`'s contract), so the offset
                // stays inside the same allocation.
                ptr: unsafe { ptr.add(off) },
                len: n,
            })
            .collect();
        Ok(HostAlloc::Registered {
            registrations,
            chunks,
        })
    }

    /// Driver-allocated, mapped buffers: `clCreateBufferNV` host-located when `nv_host`,
    /// else `CL_MEM_ALLOC_HOST_PTR`.
    pub fn mapped(
        ctx: &Context,
        len: usize,
        chunk: usize,
        nv_host: bool,
    ) -> Result<Self, AllocError> {
        pin_ceiling::check_driver(len, "clCreateBuffer")?;
        let queue = ctx.queue()?;
        let mut alloc = HostAlloc::Mapped {
            bufs: Vec::new(),
            queue,
        };
        let HostAlloc::Mapped { bufs, queue } = &mut alloc else {
            unreachable!()
        };
        let flags = cl3::memory::CL_MEM_READ_WRITE | cl3::memory::CL_MEM_ALLOC_HOST_PTR;
        for (_, n) in split(len, chunk) {
            let mem = if nv_host {
                create_nv_host(ctx, flags, n)?
            } else {
                ctx.create_mem(flags, n, ptr::null_mut())?
            };
            let ptr = map_whole(queue, &mem)?;
            bufs.push((mem, ptr));
        }
        Ok(alloc)
    }

    /// Coarse-grained SVM, mapped for host access.
    pub fn svm(ctx: &Context, len: usize, chunk: usize) -> Result<Self, AllocError> {
        pin_ceiling::check_driver(len, "clSVMAlloc")?;
        let mut alloc = HostAlloc::Svm {
            chunks: Vec::new(),
            queue: ctx.queue()?,
            ctx: ctx.clone(),
        };
        let HostAlloc::Svm { chunks, queue, .. } = &mut alloc else {
            unreachable!()
        };
        for (_, n) in split(len, chunk) {
            // SAFETY: a plain allocation call on a live context.
            let p = unsafe {
                cl3::memory::svm_alloc(ctx.as_raw(), cl3::memory::CL_MEM_READ_WRITE, n, 0)
            }
            .call("clSVMAlloc")?;
            chunks.push(RawChunk {
                ptr: p.cast(),
                len: n,
            });
            let flags = cl3::memory::CL_MAP_READ | cl3::memory::CL_MAP_WRITE;
            // SAFETY: `p` is a live SVM allocation of `n` bytes; blocking map.
            unsafe {
                cl3::command_queue::enqueue_svm_map(queue.raw, 1, flags, p, n, 0, ptr::null())
            }
            .call("clEnqueueSVMMap")
            .map(|raw| queue.event(raw))?;
        }
        Ok(alloc)
    }

    /// Intel unified shared memory, host allocations.
    pub fn usm(ctx: &Context, len: usize, chunk: usize) -> Result<Self, AllocError> {
        let f = ctx
            .inner
            .ext
            .host_mem_alloc_intel
            .ok_or(AllocError::Missing("clHostMemAllocINTEL"))?;
        ctx.inner
            .ext
            .mem_blocking_free_intel
            .ok_or(AllocError::Missing("clMemBlockingFreeINTEL"))?;
        pin_ceiling::check_driver(len, "clHostMemAllocINTEL")?;
        let mut alloc = HostAlloc::Usm {
            chunks: Vec::new(),
            ctx: ctx.clone(),
        };
        let HostAlloc::Usm { chunks, .. } = &mut alloc else {
            unreachable!()
        };
        for (_, n) in split(len, chunk) {
            let mut err = 0;
            // SAFETY: `f` is clHostMemAllocINTEL of this platform; null properties are allowed.
            let p = unsafe { f(ctx.as_raw(), ptr::null(), n, 0, &mut err) };
            if p.is_null() || err != 0 {
                return Err(
                    ClError::new("clHostMemAllocINTEL", if err != 0 { err } else { -6 }).into(),
                );
            }
            chunks.push(RawChunk {
                ptr: p.cast(),
                len: n,
            });
        }
        Ok(alloc)
    }

    /// The pieces, in order; together they cover the region.
    pub fn chunks(&self) -> Vec<RawChunk> {
        match self {
            HostAlloc::Pages { map, parts, .. } => parts
                .iter()
                .map(|&(off, n)| RawChunk {
                    // SAFETY: every part lies inside `0..len` of the mapping `map` owns (off
                    // <= len <= map.len()): `pages` splits that length itself, and
                    // `pages_untouched`'s caller passes parts inside it (its doc says so).
                    ptr: unsafe { map.as_ptr().add(off) },
                    len: n,
                })
                .collect(),
            HostAlloc::Mapped { bufs, .. } => bufs
                .iter()
                .map(|(m, p)| RawChunk {
                    ptr: *p,
                    len: m.size,
                })
                .collect(),
            HostAlloc::Svm { chunks, .. }
            | HostAlloc::Usm { chunks, .. }
            | HostAlloc::Registered { chunks, .. } => chunks.clone(),
            HostAlloc::ZeroCopy(z) => vec![RawChunk {
                ptr: z.ptr(),
                len: z.len(),
            }],
        }
    }

    /// Time spent making pages resident, for memory pinstream maps itself.
    pub fn resident_time(&self) -> Option<std::time::Duration> {
        match self {
            HostAlloc::Pages { resident, .. } => Some(*resident),
            _ => None,
        }
    }

    /// True when the chunks are adjacent pieces of one range.
    pub fn is_contiguous(&self) -> bool {
        matches!(self, HostAlloc::Pages { .. } | HostAlloc::Registered { .. })
            || self.chunks().len() <= 1
    }
}

/// Binds each range of `place` to its node before any page of `map` is touched; a range is
/// widened to whole 2 MiB huge pages at neither end (the boundary pages go to the kernel's
/// default).
fn place_pages(map: &PageMap, place: &[(std::ops::Range<usize>, u32)]) -> Result<(), AllocError> {
    for (range, node) in place {
        let range = range.start.min(map.len())..range.end.min(map.len());
        // SAFETY: the range lies inside `map`, our own fresh mapping.
        unsafe { os::numa::bind_range(map.as_ptr(), range.clone(), *node, 2 << 20) }.map_err(
            |source| AllocError::Map {
                bytes: range.len(),
                source: io::Error::new(
                    source.kind(),
                    format!("mbind of these bytes to NUMA node {node}: {source}"),
                ),
            },
        )?;
    }
    Ok(())
}

/// Registers memory that is already in place with one more context: one never-mapped
/// `USE_HOST_PTR` buffer per chunk, with the same boundaries as the memory's own chunks. The
/// boundaries must match: NVIDIA's driver runs a transfer that crosses two registrations at
/// pageable speed (see [`crate::host::PinOptions::max_chunk`]), and pinstream's transfers
/// split at the region's chunk boundaries, so every context must hold each chunk whole.
///
/// # Safety
/// Every chunk must be live, resident memory that stays valid until the returned objects
/// are dropped.
pub(crate) unsafe fn register_in(
    ctx: &Context,
    chunks: &[RawChunk],
) -> Result<Vec<MemObject>, AllocError> {
    let mut all = Vec::with_capacity(chunks.len());
    for c in chunks {
        let (mut one, _) = register_chunks(ctx, c.ptr, &[(0, c.len)], 1, Prepare::Nothing)?;
        all.append(&mut one);
    }
    Ok(all)
}

/// Registers the `parts` (offset, length) of the memory at `base` on `threads` threads; with
/// `touch` (pinstream's own mapping, not yet handed out), each thread first makes its part
/// resident. Returns the registrations in order and when the last touch finished.
/// [`os::populate_write`] over `ptr..ptr + len`, split into page-aligned pieces over
/// `threads` threads (faulting 10 GiB in on one thread takes seconds).
///
/// # Safety
/// As for [`os::populate_write`].
unsafe fn populate_on_threads(ptr: *mut u8, len: usize, threads: usize) -> Result<(), AllocError> {
    let page = os::page_size();
    let piece = len.div_ceil(threads).div_ceil(page) * page;
    let parts = split_at_pages(ptr as usize, len, piece, page);
    let base = ptr as usize;
    std::thread::scope(|s| {
        let handles: Vec<_> = parts
            .iter()
            .map(|&(off, n)| {
                // SAFETY: the piece lies in the caller's range (this function's contract).
                s.spawn(move || unsafe { os::populate_write((base + off) as *mut u8, n) })
            })
            .collect();
        handles
            .into_iter()
            .zip(&parts)
            .try_for_each(|(h, &(_, n))| match h.join() {
                Ok(r) => r.map_err(|source| AllocError::Populate { bytes: n, source }),
                Err(p) => std::panic::resume_unwind(p),
            })
    })
}

/// What each registration thread does to its piece before registering it.
#[derive(Clone, Copy)]
enum Prepare<'a> {
    /// Already resident and written (pinstream's own pages, touched elsewhere).
    Nothing,
    /// Pinstream's own fresh pages: write a zero into each (see [`PageMap::touch`]).
    Touch(&'a PageMap),
    /// The caller's pages: fault them in writable without changing them
    /// ([`os::populate_write`]); the driver does not pin pages never written.
    Populate,
}

/// Registers `n` bytes at `ptr` as one never-mapped `CL_MEM_USE_HOST_PTR` buffer.
///
/// The memory must stay mapped until the returned object is dropped (the callers keep the
/// registrations in values dropped before the memory).
pub(crate) fn register_one(ctx: &Context, ptr: *mut u8, n: usize) -> Result<MemObject, AllocError> {
    let flags = cl3::memory::CL_MEM_READ_WRITE | cl3::memory::CL_MEM_USE_HOST_PTR;
    Ok(ctx.create_mem(flags, n, ptr.cast())?)
}

fn register_chunks(
    ctx: &Context,
    base: *mut u8,
    parts: &[(usize, usize)],
    threads: usize,
    prepare: Prepare,
) -> Result<(Vec<MemObject>, std::time::Instant), AllocError> {
    let base = base as usize;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let touched = std::sync::Mutex::new(std::time::Instant::now());
    let mut slots: Vec<Option<Result<MemObject, AllocError>>> =
        (0..parts.len()).map(|_| None).collect();
    let slots_ref = std::sync::Mutex::new(&mut slots);
    std::thread::scope(|s| {
        for _ in 0..threads.min(parts.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(off, n)) = parts.get(i) else { break };
                let prepared = match prepare {
                    Prepare::Touch(map) => {
                        map.touch(off..off + n);
                        let mut t = crate::sync::lock(&touched);
                        *t = (*t).max(std::time::Instant::now());
                        Ok(())
                    }
                    // SAFETY: the piece lies in the caller's range, which `registered`'s
                    // contract keeps mapped, readable and writable.
                    Prepare::Populate => unsafe { os::populate_write((base + off) as *mut u8, n) }
                        .map_err(|source| AllocError::Populate { bytes: n, source }),
                    Prepare::Nothing => Ok(()),
                };
                // The range lies inside memory that outlives the registration (field order
                // in `HostAlloc::Pages` drops registrations first; the caller's contract for
                // `HostAlloc::Registered`).
                let r = prepared.and_then(|()| register_one(ctx, (base + off) as *mut u8, n));
                crate::sync::lock(&slots_ref)[i] = Some(r);
            });
        }
    });
    let touched = touched.into_inner().unwrap_or_else(|p| p.into_inner());
    // On failure the registrations made so far drop here, before the caller unmaps.
    let regs = slots
        .into_iter()
        .map(|r| r.expect("every chunk was registered"))
        .collect::<Result<_, _>>()?;
    Ok((regs, touched))
}

impl Drop for HostAlloc {
    fn drop(&mut self) {
        match self {
            HostAlloc::Pages { .. } => {} // fields drop in order: registrations, then pages
            HostAlloc::ZeroCopy(_) => {}  // its own Drop
            HostAlloc::Registered { registrations, .. } => registrations.clear(),
            HostAlloc::Mapped { bufs, queue } => {
                for (mem, p) in bufs.iter() {
                    unmap_whole(queue, mem, *p);
                }
                let _ = queue.finish();
            }
            HostAlloc::Svm { chunks, queue, ctx } => {
                for c in chunks.iter() {
                    // SAFETY: `c` is a mapped SVM allocation of ours; unmapped once.
                    if let Ok(ev) = unsafe {
                        cl3::command_queue::enqueue_svm_unmap(
                            queue.raw,
                            c.ptr.cast(),
                            0,
                            ptr::null(),
                        )
                    } {
                        drop(super::context::Event(ev, Default::default()));
                    }
                }
                let _ = queue.finish();
                for c in chunks.iter() {
                    // SAFETY: allocated by clSVMAlloc in this context, no longer in use.
                    let _ = unsafe { cl3::memory::svm_free(ctx.as_raw(), c.ptr.cast()) };
                }
            }
            HostAlloc::Usm { chunks, ctx } => {
                if let Some(free) = ctx.inner.ext.mem_blocking_free_intel {
                    for c in chunks.iter() {
                        // SAFETY: allocated by clHostMemAllocINTEL in this context.
                        let code = unsafe { free(ctx.as_raw(), c.ptr.cast()) };
                        if code != 0 {
                            tracing::warn!("{}", ClError::new("clMemBlockingFreeINTEL", code));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn caller_ranges_split_on_page_boundaries() {
        let parts = super::split_at_pages(4096 + 16, 3 * 8192, 8192, 4096);
        assert_eq!(
            parts,
            vec![(0, 8192 - 16), (8176, 8192), (16368, 8192), (24560, 16)]
        );
        assert!(parts[1..]
            .iter()
            .all(|(off, _)| (4096 + 16 + off) % 4096 == 0));
        assert_eq!(super::split_at_pages(4096, 100, 8192, 4096), vec![(0, 100)]);
        assert_eq!(
            super::split_at_pages(10, 30, 16, 4096),
            vec![(0, 16), (16, 14)]
        );
    }

    #[test]
    fn split_covers_exactly() {
        let parts: Vec<_> = split(10, 4).collect();
        assert_eq!(parts, vec![(0, 4), (4, 4), (8, 2)]);
        assert_eq!(split(8, 4).count(), 2);
    }
}
