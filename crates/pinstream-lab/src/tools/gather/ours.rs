//! `bench gather`'s rows of pinstream's batch copies, written once over any API
//! ([`BatchApi`]): the staged calls both ways (with the device times of one more call through
//! batch copies made with profiling, where the API profiles them), and where the API offers
//! them the zero-copy calls, with the overlap check and with disjointness vouched. Each row
//! is checked: one more call onto zeros, read back and compared with the reference.

use super::pieces::{carve, host_order, row, timed, with_stats, wrong_bytes, wrong_pieces};
use super::{GatherBenchError, Row, Shape, Way};
use crate::tools::bench::BenchError;
use pinstream::backend::api::Device;
use pinstream::backend::lanes::HostMemory;
use pinstream::gather::{BatchApi, CallStats, DeviceTimes, GatherOptions, OverlapCheck};

/// The rows' names, each `[up, down]`.
pub(super) struct Names {
    /// The staged calls.
    pub staged: [&'static str; 2],
    /// The zero-copy calls, checked.
    pub zero_copy: [&'static str; 2],
    /// The zero-copy calls, disjointness vouched.
    pub vouched: [&'static str; 2],
}

/// The names of pinstream's rows, whatever the API (how the staged calls move a batch
/// through it is the report's `batch_way`).
pub(super) const NAMES: Names = Names {
    staged: [
        "BatchApi::upload_gather (pack into pinned staging, one move per batch)",
        "BatchApi::download_scatter (one move per batch into pinned staging, unpack)",
    ],
    zero_copy: [
        "BatchApi::upload_gather_mapped (one kernel reads mapped memory)",
        "BatchApi::download_scatter_mapped (one kernel writes mapped memory)",
    ],
    vouched: [
        "BatchApi::upload_gather_mapped (one kernel reads mapped memory), disjointness vouched: no overlap check",
        "BatchApi::download_scatter_mapped (one kernel writes mapped memory), disjointness vouched: no overlap check",
    ],
};

/// pinstream's rows, each direction in order (staged, zero-copy, vouched).
pub(super) struct Ours {
    /// Host to device.
    pub up: Vec<Row>,
    /// Device to host.
    pub down: Vec<Row>,
    /// How the staged calls move a batch.
    pub way: String,
    /// Why there are no zero-copy rows, if there are none.
    pub zero_copy_unavailable: Option<String>,
}

/// A backend failure as the bench's.
fn backend(e: impl Into<pinstream::backend::error::BackendError>) -> GatherBenchError {
    BenchError::Backend(e.into()).into()
}

/// Where a row's calls leave the pieces on the host: plain memory, or mapped.
#[derive(Clone, Copy)]
enum Host {
    Plain,
    Mapped,
}

/// One API's batch copies, their device buffer and host memory, and the reference.
struct Side<'a, A: BatchApi> {
    device: &'a A::Device,
    /// The calls' queue: one with per-command device times (the checked call's, and every
    /// command around the timed calls), swapped with `plain_q` while timing.
    q: A::Queue,
    /// A queue without device times where the API makes such queues, `q` while the calls
    /// are timed ([`Self::time`]): on OpenCL the NVIDIA driver's enqueue and wait take a few
    /// µs less on it, and CUDA's rows time no events either.
    plain_q: Option<A::Queue>,
    buf: A::Buffer,
    calls: Vec<CallStats>,
    shape: &'a Shape,
    offs: &'a [(usize, usize)],
    order: Vec<usize>,
    /// The device buffer as every up row leaves it.
    want: Vec<u8>,
    /// The download rows' destination.
    plain: Vec<u8>,
    /// Mapped source (a copy of the source) and destination, for the zero-copy rows.
    mapped: Option<(A::HostMemory, A::HostMemory)>,
}

/// The batch copies a row calls, and the same made with profiling (one more call per row).
struct Batches<A: BatchApi> {
    batch: A::Batch,
    profiled: A::Batch,
}

impl<A: BatchApi> Batches<A> {
    fn set_overlap_check(&mut self, check: OverlapCheck) {
        A::set_overlap_check(&mut self.batch, check);
        A::set_overlap_check(&mut self.profiled, check);
    }
}

/// A row's call: one move of every piece through the batch copies given.
type Call<'f, A> =
    dyn FnMut(&mut Side<'_, A>, &mut <A as BatchApi>::Batch) -> Result<(), GatherBenchError> + 'f;

/// Every row of pinstream's batch copies of `source`'s pieces on `device`.
pub(super) fn our_rows<A: BatchApi>(
    device: &A::Device,
    (shape, offs, source): (&Shape, &[(usize, usize)], &[u8]),
    staging: &GatherOptions,
    names: &Names,
) -> Result<Ours, GatherBenchError> {
    let mut s = Side::<A>::new(device, (shape, offs), source)?;
    let profiled = GatherOptions {
        profile: true,
        ..*staging
    };
    let mut b = Batches::<A> {
        batch: A::batch(device, staging)?,
        profiled: A::batch(device, &profiled)?,
    };
    let n = shape.piece_size;
    let pieces: Vec<(&[u8], usize)> = offs.iter().map(|&(h, d)| (&source[h..h + n], d)).collect();
    let up = s.up_row(&mut b, (Way::Gather, names.staged[0]), &mut |s, b| {
        let done = A::upload_gather(b, &s.q, &s.buf, &pieces)?;
        s.device.wait_call(&done).map_err(backend)
    })?;
    let down = s.down_row(
        &mut b,
        (Way::Gather, names.staged[1]),
        Host::Plain,
        &mut |s, b| {
            let mut pieces = carve(&mut s.plain, s.offs, &s.order, n);
            Ok(A::download_scatter(b, &s.q, &s.buf, &mut pieces)?)
        },
    )?;
    let mut ours = Ours {
        up: vec![up],
        down: vec![down],
        way: A::batch_way(&b.batch),
        zero_copy_unavailable: s.map(source).err(),
    };
    if ours.zero_copy_unavailable.is_none() {
        for (check, way, names) in [
            (OverlapCheck::On, Way::ZeroCopy, names.zero_copy),
            (OverlapCheck::Vouched, Way::ZeroCopyVouched, names.vouched),
        ] {
            b.set_overlap_check(check);
            let (up, down) = s.zero_copy_pair(&mut b, way, names);
            b.set_overlap_check(OverlapCheck::On);
            ours.up.push(up?);
            ours.down.push(down?);
        }
    }
    Ok(ours)
}

impl<'a, A: BatchApi> Side<'a, A> {
    fn new(
        device: &'a A::Device,
        (shape, offs): (&'a Shape, &'a [(usize, usize)]),
        source: &[u8],
    ) -> Result<Self, GatherBenchError> {
        let span = shape.span();
        Ok(Side {
            device,
            q: device.queue().map_err(backend)?,
            plain_q: device.plain_queue().map_err(backend)?,
            buf: device.allocate(span).map_err(backend)?,
            calls: Vec::new(),
            shape,
            offs,
            order: host_order(offs),
            want: super::pieces::expected_device(shape, offs, source),
            plain: vec![0u8; span],
            mapped: None,
        })
    }

    /// Makes the mapped source (a copy of `source`) and destination, or says why not.
    fn map(&mut self, source: &[u8]) -> Result<(), String> {
        if let Some(why) = A::zero_copy_missing() {
            return Err(why);
        }
        let span = source.len();
        let make = || A::mapped(self.device, span, false).map_err(|e| e.to_string());
        let (mut src, dst) = (make()?, make()?);
        let mut at = 0;
        for part in src.slices_mut(0..span).map_err(|e| e.to_string())? {
            part.copy_from_slice(&source[at..at + part.len()]);
            at += part.len();
        }
        self.mapped = Some((src, dst));
        Ok(())
    }

    /// The zero-copy rows up and down (`mapped` made).
    fn zero_copy_pair(
        &mut self,
        b: &mut Batches<A>,
        way: Way,
        [up, down]: [&'static str; 2],
    ) -> (Result<Row, GatherBenchError>, Result<Row, GatherBenchError>) {
        let n = self.shape.piece_size;
        let pieces: Vec<(usize, usize, usize)> =
            self.offs.iter().map(|&(h, d)| (h, n, d)).collect();
        let up = self.up_row(b, (way, up), &mut |s, b| {
            let (src, _) = s.mapped.as_ref().expect("mapped first");
            let done = A::upload_gather_mapped(b, &s.q, &s.buf, src, &pieces)?;
            s.device.wait_call(&done).map_err(backend)
        });
        let down = self.down_row(b, (way, down), Host::Mapped, &mut |s, b| {
            let (_, dst) = s.mapped.as_mut().expect("mapped first");
            let done = A::download_scatter_mapped(b, &s.q, &s.buf, dst, &pieces)?;
            s.device.wait_call(&done).map_err(backend)
        });
        (up, down)
    }

    /// Times `f` `repeat` times after one untimed call, each call's record kept, on the
    /// queue without device times where there is one (`plain_q`, swapped in as `q`).
    fn time(
        &mut self,
        b: &mut Batches<A>,
        f: &mut Call<'_, A>,
    ) -> Result<Vec<f64>, GatherBenchError> {
        self.calls.clear();
        let swap = |s: &mut Self| {
            if let Some(plain) = s.plain_q.as_mut() {
                std::mem::swap(&mut s.q, plain);
            }
        };
        swap(self);
        let us = timed(self.shape.repeat, || {
            f(self, &mut b.batch)?;
            self.calls.push(A::last_call(&b.batch));
            Ok(())
        });
        swap(self);
        us
    }

    /// One more call of `f`, the one a row checks, through the profiled batch copies; its
    /// device times where the API profiles.
    fn checked_call(
        &mut self,
        b: &mut Batches<A>,
        f: &mut Call<'_, A>,
    ) -> Result<Option<DeviceTimes>, GatherBenchError> {
        f(self, &mut b.profiled)?;
        Ok(A::last_call_device(&b.profiled)?)
    }

    /// An upload row: timed, then one more call onto a zeroed buffer, checked.
    fn up_row(
        &mut self,
        b: &mut Batches<A>,
        (way, path): (Way, &'static str),
        f: &mut Call<'_, A>,
    ) -> Result<Row, GatherBenchError> {
        let us = self.time(b, f)?;
        let zeros = vec![0u8; self.shape.span()];
        let done = A::upload_gather(&mut b.batch, &self.q, &self.buf, &[(&zeros, 0)])?;
        self.device.wait_call(&done).map_err(backend)?;
        let device = self.checked_call(b, f)?;
        let mut got = vec![0u8; self.shape.span()];
        A::download_scatter(&mut b.batch, &self.q, &self.buf, &mut [(&mut got[..], 0)])?;
        check(path, wrong_bytes(&got, &self.want))?;
        Ok(self.finish(row(("pinstream", way), path, true, self.shape, &us), device))
    }

    /// A download row: the reference written to the device, timed, then one more call into
    /// zeroed host memory, every piece checked.
    fn down_row(
        &mut self,
        b: &mut Batches<A>,
        (way, path): (Way, &'static str),
        host: Host,
        f: &mut Call<'_, A>,
    ) -> Result<Row, GatherBenchError> {
        let done = A::upload_gather(&mut b.batch, &self.q, &self.buf, &[(&self.want, 0)])?;
        self.device.wait_call(&done).map_err(backend)?;
        let us = self.time(b, f)?;
        self.host_bytes(host, |bytes| bytes.fill(0))?;
        let device = self.checked_call(b, f)?;
        let mut got = Vec::new();
        self.host_bytes(host, |bytes| got.extend_from_slice(bytes))?;
        check(path, wrong_pieces(self.shape, self.offs, &got, &self.want))?;
        Ok(self.finish(
            row(("pinstream", way), path, false, self.shape, &us),
            device,
        ))
    }

    /// Runs `f` over the download rows' destination, part by part.
    fn host_bytes(
        &mut self,
        host: Host,
        mut f: impl FnMut(&mut [u8]),
    ) -> Result<(), GatherBenchError> {
        match host {
            Host::Plain => f(&mut self.plain),
            Host::Mapped => {
                let (_, dst) = self.mapped.as_mut().expect("mapped first");
                let span = dst.len();
                let parts = dst
                    .slices_mut(0..span)
                    .map_err(|e| GatherBenchError::Usage(e.to_string()))?;
                parts.into_iter().for_each(f);
            }
        }
        Ok(())
    }

    /// `r` with the timed calls' host times and batches, and `device`.
    fn finish(&self, r: Row, device: Option<DeviceTimes>) -> Row {
        let mut r = with_stats(r, &self.calls);
        if r.batches.is_some() {
            r.device = device;
        }
        r
    }
}

/// A row whose checked call moved `wrong` bytes wrong refused.
fn check(path: &str, wrong: usize) -> Result<(), GatherBenchError> {
    match wrong {
        0 => Ok(()),
        wrong => Err(GatherBenchError::Wrong {
            row: path.into(),
            wrong,
        }),
    }
}
