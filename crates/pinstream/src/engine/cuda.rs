//! The stream engine through CUDA (feature `cuda`): the same layout, VRAM budget, slot count
//! and ring schedule (`engine::ring`) as the OpenCL engine, on three CUDA streams chained
//! by events, for the built-in workloads (`compare` runs the same work through both APIs).

use super::kernels::{GEMV_F16_CUDA, GEMV_GROUP, MIX_U32_CUDA};
use super::pool::Budget;
use super::ring::{stage_error, CommandError, Stages};
use super::stream::{
    mul, shape_layout, slots_for, stream_and_report, Layout, RunSizes, StreamError, StreamOptions,
    StreamReport,
};
use crate::backend::cuda::{
    CudaError, DeviceMem, Function, Gpu, KernelArg, Module, PinnedHost, Stream, Timed,
};
use crate::backend::opencl::Profile;

/// The built-in kernels, compiled with NVRTC.
pub struct CudaKernels {
    mix: Function,
    gemv: Function,
    _modules: [Module; 2],
}

impl CudaKernels {
    /// Compiles and loads the built-in kernels on `gpu`.
    pub fn build(gpu: &Gpu) -> Result<Self, CudaError> {
        let m1 = gpu.module("mix_u32", MIX_U32_CUDA)?;
        let m2 = gpu.module("gemv_f16", GEMV_F16_CUDA)?;
        Ok(CudaKernels {
            mix: m1.function("mix_u32")?,
            gemv: m2.function("gemv_f16")?,
            _modules: [m1, m2],
        })
    }
}

/// A built-in workload over CUDA pinned memory.
pub enum CudaWork<'a> {
    /// `x = mix(x)` over u32, in place (as `demo`'s first workload).
    InPlace {
        /// The data.
        data: &'a mut PinnedHost,
    },
    /// `y = W·x`: W f16 rows of `cols` streamed, x f32 resident, y f32 out.
    Gemv {
        /// The weights.
        w: &'a PinnedHost,
        /// The vector (`cols` f32).
        x: &'a PinnedHost,
        /// The result (one f32 per row).
        y: &'a mut PinnedHost,
        /// Columns of W.
        cols: usize,
    },
}

struct Slot {
    input: DeviceMem,
    out: Option<DeviceMem>,
}

/// Streams `work` on `gpu` with `o`'s block size, budget and slots (`o.dtype` and
/// `o.in_per_out` are set from the workload); `progress(blocks_done, bytes_done)`.
pub fn run_cuda(
    gpu: &Gpu,
    kernels: &CudaKernels,
    mut work: CudaWork,
    o: &StreamOptions,
    progress: &dyn Fn(u64, u64),
) -> Result<StreamReport, StreamError> {
    let mut o = o.clone();
    let (len, in_place, out_len) = match &work {
        CudaWork::InPlace { data } => {
            o.dtype = super::DType::U32;
            o.in_per_out = 1;
            (data.len(), true, None)
        }
        CudaWork::Gemv { w, y, cols, .. } => {
            o.dtype = super::DType::F16;
            o.out_dtype = super::DType::F32;
            o.in_per_out = *cols;
            (w.len(), false, Some(y.len()))
        }
    };
    let l = shape_layout(len, in_place, out_len, &o)?;
    let resident = match &work {
        CudaWork::Gemv { x, .. } => x.len() as u64,
        CudaWork::InPlace { .. } => 0,
    };
    let total = gpu.info().total_mem;
    let n_slots = slots_for(&o, &l, 1, !in_place, resident, total)?;
    // Memory first, streams last: locals drop in reverse order, so the streams (which
    // synchronise on drop) are gone before any memory their commands use is freed.
    let mut budget = Budget::new(o.vram_budget);
    let x_dev = match &work {
        CudaWork::Gemv { x, .. } => {
            let d = budget.take(x.len(), "resident buffer 0", || gpu.alloc(x.len()))?;
            let s = gpu.stream()?;
            // SAFETY: `x` and `d` outlive `s`, which synchronises on drop.
            unsafe { s.upload(&d, 0, x.span(0..x.len()), &[]) }
                .and_then(|t| t.wait())
                .map_err(|e| stage_error(0, "resident upload", e))?;
            Some(d)
        }
        CudaWork::InPlace { .. } => None,
    };
    let mut slots = Vec::new();
    for s in 0..n_slots {
        let in_bytes = l.block_elems * l.isz;
        let input = budget.take(in_bytes, &format!("slot {s} input 0"), || {
            gpu.alloc(in_bytes)
        })?;
        let out = if in_place {
            None
        } else {
            let n = l.out_block_bytes();
            Some(budget.take(n, &format!("slot {s} output"), || gpu.alloc(n))?)
        };
        slots.push(Slot { input, out });
    }
    let streams = Streams::new(gpu, o.sequential)?;
    let base = streams.up.mark()?;
    let mut st = CuStages {
        l: &l,
        slots: &slots,
        s: &streams,
        kernels,
        x: x_dev.as_ref(),
        work: &mut work,
        base,
    };
    // As the OpenCL engine does: one launch with n = 0 first (lazy module loading).
    st.launch(0, 0, &[], true)?
        .wait()
        .map_err(|e| stage_error(0, "kernel", e))?;
    let sizes = RunSizes {
        slots: n_slots,
        in_place,
        resident_bytes: resident,
        pool_bytes: budget.used(),
    };
    stream_and_report(&mut st, &l, &o, &sizes, progress)
}

/// Three streams, or one for the baseline. Declared before the memory they use in every
/// caller, and synchronised on drop, so no copy outlives its host or device memory.
struct Streams {
    up: Stream,
    k: Option<Stream>,
    down: Option<Stream>,
}

impl Streams {
    fn new(gpu: &Gpu, sequential: bool) -> Result<Self, CudaError> {
        Ok(Streams {
            up: gpu.stream()?,
            k: if sequential {
                None
            } else {
                Some(gpu.stream()?)
            },
            down: if sequential {
                None
            } else {
                Some(gpu.stream()?)
            },
        })
    }
    fn kernel(&self) -> &Stream {
        self.k.as_ref().unwrap_or(&self.up)
    }
    fn download(&self) -> &Stream {
        self.down.as_ref().unwrap_or(&self.up)
    }
}

struct CuStages<'r, 'w> {
    l: &'r Layout,
    slots: &'r [Slot],
    s: &'r Streams,
    kernels: &'r CudaKernels,
    x: Option<&'r DeviceMem>,
    work: &'r mut CudaWork<'w>,
    base: Timed,
}

impl CuStages<'_, '_> {
    fn launch(
        &self,
        i: usize,
        slot: usize,
        wait: &[&Timed],
        warm_up: bool,
    ) -> Result<Timed, StreamError> {
        let slot = &self.slots[slot];
        let r = self.l.input(i);
        let (n, block, offset) = if warm_up {
            (0, 0, 0)
        } else {
            (r.len() as u64, i as u64, r.start as u64)
        };
        let t = match &*self.work {
            CudaWork::InPlace { .. } => {
                let args = [
                    KernelArg::Mem(&slot.input),
                    KernelArg::U64(n),
                    KernelArg::U64(block),
                    KernelArg::U64(offset),
                ];
                let grid = (n as usize).div_ceil(256).max(1);
                // SAFETY: mix_u32 takes (uint*, ulong, ulong, ulong) and touches x[0..n),
                // inside the slot's input buffer.
                unsafe {
                    self.s
                        .kernel()
                        .launch(&self.kernels.mix, grid as u32, 256, &args, wait)
                }
            }
            CudaWork::Gemv { cols, .. } => {
                let (out, x) = (
                    slot.out
                        .as_ref()
                        .expect("out-of-place slots have an output"),
                    self.x.expect("gemv has a resident x"),
                );
                let args = [
                    KernelArg::Mem(&slot.input),
                    KernelArg::Mem(out),
                    KernelArg::Mem(x),
                    KernelArg::U64(n),
                    KernelArg::U64(block),
                    KernelArg::U64(offset),
                    KernelArg::U32(*cols as u32),
                ];
                let rows = (n as usize / cols).max(1);
                // SAFETY: gemv_f16 takes (ushort*, float*, float*, ulong, ulong, ulong, uint);
                // it reads w[0..n) and x[0..cols) and writes y[0..n/cols), all inside the
                // slot's buffers and the resident x.
                unsafe {
                    self.s.kernel().launch(
                        &self.kernels.gemv,
                        rows as u32,
                        GEMV_GROUP as u32,
                        &args,
                        wait,
                    )
                }
            }
        };
        t.map_err(|e| stage_error(i, "kernel", e))
    }
}

impl Stages for CuStages<'_, '_> {
    type Event = Timed;

    fn upload(
        &mut self,
        i: usize,
        slot: usize,
        wait: &[&Timed],
    ) -> Result<Vec<(Timed, u64)>, StreamError> {
        let bytes = mul(self.l.input(i), self.l.isz);
        let src = match &*self.work {
            CudaWork::InPlace { data } => data.span(bytes.clone()),
            CudaWork::Gemv { w, .. } => w.span(bytes.clone()),
        };
        // SAFETY: the host memory is borrowed by `run_cuda` for its whole length and the
        // streams are synchronised before it returns (Streams' drop); the ring makes this
        // block's range unwritten until the upload completes (its download waits for it).
        let t = unsafe { self.s.up.upload(&self.slots[slot].input, 0, src, wait) }
            .map_err(|e| stage_error(i, "upload", e))?;
        Ok(vec![(t, bytes.len() as u64)])
    }

    fn kernel(&mut self, i: usize, slot: usize, wait: &[&Timed]) -> Result<Timed, StreamError> {
        self.launch(i, slot, wait, false)
    }

    fn download(
        &mut self,
        i: usize,
        slot: usize,
        wait: &[&Timed],
    ) -> Result<Vec<(Timed, u64)>, StreamError> {
        let slot = &self.slots[slot];
        let bytes = mul(self.l.output(i), self.l.osz);
        let (dst, src) = match &mut *self.work {
            CudaWork::InPlace { data } => (data.span_mut(bytes.clone()), &slot.input),
            CudaWork::Gemv { y, .. } => (
                y.span_mut(bytes.clone()),
                slot.out
                    .as_ref()
                    .expect("out-of-place slots have an output"),
            ),
        };
        // SAFETY: as for uploads; no other command in flight touches this block's range.
        let t = unsafe { self.s.download().download(dst, src, 0, wait) }
            .map_err(|e| stage_error(i, "download", e))?;
        Ok(vec![(t, bytes.len() as u64)])
    }

    fn flush(&self) -> Result<(), StreamError> {
        Ok(()) // CUDA submits at enqueue.
    }

    fn finish(&self) {
        let _ = self.s.up.synchronize();
        let _ = self.s.kernel().synchronize();
        let _ = self.s.download().synchronize();
    }

    fn wait(&self, e: &Timed) -> Result<(), CommandError> {
        Ok(e.wait()?)
    }

    fn profile(&self, e: &Timed) -> Result<Profile, StreamError> {
        Ok(e.profile(&self.base)?)
    }
}
