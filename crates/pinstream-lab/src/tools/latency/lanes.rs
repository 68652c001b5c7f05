//! pinstream's rows of `bench latency`, through any API: one small upload by
//! [`Lanes::upload`], each waited for by its event as a program waits for a call it made
//! ([`Lanes::wait_call`]), or back to back and waited for once ([`Lanes::finish`]); on
//! queues with per-command device times, and on queues without them where the API makes
//! such queues ([`plain_copies_in_flight`]: OpenCL); and, where the API has ways of waiting
//! to choose from (OpenCL), once more waited for by [`WaitMode::Sleep`].

use super::{batch_len, row, Maker, Row, WARM_UP};
use crate::tools::bench::BenchError;
use pinstream::backend::api::{Device, ErrorOf, WaitMode};
use pinstream::backend::lanes::{copies_in_flight, plain_copies_in_flight, HostView, Lanes};
use pinstream::host::HostApi;
use std::time::Instant;

/// pinstream's path over any API: [`Lanes::upload`] from `host` into `buf` on `device`'s
/// queues.
pub(super) struct LanesPath<'a, A: HostApi> {
    /// The device.
    pub device: &'a A::Device,
    /// The device buffer every upload writes.
    pub buf: &'a A::Buffer,
    /// The pinned memory every upload reads.
    pub host: &'a A::HostMemory,
}

impl<'a, A: HostApi> LanesPath<'a, A> {
    /// pinstream's rows at `size` on a queue with event profiling (`profiled`) or without;
    /// none where the device makes no queues without it. Every row of the call runs on one
    /// lane, warmed up first, as a program reuses its queue.
    pub fn rows(
        &self,
        size: usize,
        samples: usize,
        profiled: bool,
    ) -> Result<Vec<Row>, BenchError> {
        let (buf, device, host): (&'a _, &'a A::Device, &'a A::HostMemory) =
            (self.buf, self.device, self.host);
        let view = HostView::of(host);
        let all = |lanes: &mut Lanes<'a, A>| -> Result<Vec<Row>, BenchError> {
            let backend = |e: ErrorOf<A>| BenchError::Backend(e.into());
            let mut time = |count: usize, per: usize| {
                samples_of(lanes, buf, &view, size, (count, per)).map_err(backend)
            };
            time(WARM_UP, 1)?;
            let waited = Maker::Pinstream { sleep: false };
            let mut rows = Vec::new();
            let path = ("Lanes::upload + wait on its event", profiled);
            rows.push(row(waited, path, size, 1, || time(samples, 1))?);
            if let (true, Some(was)) = (profiled, device.wait_mode()) {
                let path = ("Lanes::upload + wait on its event, WaitMode::Sleep", true);
                let sleep = Maker::Pinstream { sleep: true };
                rows.push(row(sleep, path, size, 1, || {
                    device.set_wait_mode(WaitMode::Sleep);
                    let r = time(samples, 1);
                    device.set_wait_mode(was);
                    r
                })?);
            }
            let path = ("Lanes::upload x N, then finish (per transfer)", profiled);
            let (batch, batches) = (batch_len(size), (samples / 10).max(3));
            rows.push(row(waited, path, size, batch, || time(batches, batch))?);
            Ok(rows)
        };
        let rows = match profiled {
            true => copies_in_flight::<A, _>(device, 1, all).map(Some),
            false => plain_copies_in_flight::<A, _>(device, 1, all),
        };
        let rows = rows.map_err(|e| BenchError::Backend(e.into()))?;
        Ok(rows.transpose()?.unwrap_or_default())
    }
}

/// `count` samples on `lanes`, each of `per` uploads of `size` bytes of `view` into `buf`,
/// each sample's wall time per upload in µs: one upload waited for by its event as a caller
/// waits, several back to back and waited for once.
fn samples_of<'s, A: HostApi>(
    lanes: &mut Lanes<'s, A>,
    buf: &'s A::Buffer,
    view: &HostView<'s>,
    size: usize,
    (count, per): (usize, usize),
) -> Result<Vec<f64>, ErrorOf<A>> {
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        for _ in 0..per {
            for e in lanes.upload(0, buf, 0, view, 0..size, &[])? {
                if per == 1 {
                    lanes.wait_call(&e)?;
                }
            }
        }
        if per > 1 {
            lanes.finish()?;
        }
        out.push(start.elapsed().as_secs_f64() * 1e6 / per as f64);
    }
    Ok(out)
}
