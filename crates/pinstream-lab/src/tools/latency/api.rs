//! `bench latency` through an API other than OpenCL (`--api vulkan`): one small upload by
//! pinstream's path over the API ([`Lanes::upload`], each waited for by its event, or back to
//! back and waited for once) beside the API's own calls ([`NativeCopies::upload_floor`]: on
//! Vulkan a recorded `vkCmdCopyBuffer`, `vkQueueSubmit` and a fence) and CUDA's on the same GPU
//! where CUDA is there. The gap is pinstream's waited median minus the API's own.
//!
//! [`Lanes::upload`]: pinstream::backend::lanes::Lanes::upload
//! [`NativeCopies::upload_floor`]: pinstream::backend::native::NativeCopies::upload_floor

use super::{batch_len, measure, row, LatencyReport, Maker, OwnPath, Row, WARM_UP};
use crate::tools::bench::BenchError;
use crate::tools::doctor::DoctorDevice;
use pinstream::backend::api::{Device, ErrorOf};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView};
use pinstream::host::{HostApi, PinRequest, Pinned};
use std::time::Instant;

pub use crate::tools::OnCuda;

/// Every row at every size on `device`; `cuda` adds CUDA's rows on the same GPU.
pub fn api_latency<A: HostApi>(
    device: &A::Device,
    described: DoctorDevice,
    sizes: &[usize],
    samples: usize,
    cuda: OnCuda<'_>,
) -> Result<LatencyReport, BenchError> {
    let top = *sizes.iter().max().unwrap_or(&4096);
    let native = A::native_copies(device).ok_or(BenchError::NoPinning(A::NAME))?;
    let mut host = A::pin(device, top, PinRequest::default())?;
    crate::tools::random::fill_random(host.slices_mut(0..top)?, 17);
    let pinning = host.pinning_name();
    let buf = device.allocate(top).map_err(Into::into)?;
    let floor = match host.slices(0..top)?.as_slice() {
        [one] => native.upload_floor_over(one)?,
        _ => {
            let fill = &mut |b: &mut [u8]| crate::tools::random::fill_random(vec![b], 17);
            native.upload_floor(top, fill)?
        }
    };
    let ours = LanesPath::<A> {
        device,
        buf: &buf,
        host: &host,
    };
    let (sizes, cuda_unavailable) = measure((A::ID, floor), &ours, (sizes, samples), Some(cuda))?;
    Ok(LatencyReport {
        api: A::ID,
        device: described,
        floor: A::ID,
        pinning,
        copies: device.copy_way(),
        samples,
        sizes,
        cuda_unavailable,
    })
}

/// pinstream's path over any API: [`Lanes::upload`] on the device's queues (which time
/// each command on the device).
struct LanesPath<'a, A: HostApi> {
    device: &'a A::Device,
    buf: &'a A::Buffer,
    host: &'a A::HostMemory,
}

impl<A: HostApi> OwnPath for LanesPath<'_, A> {
    fn rows(&self, size: usize, samples: usize, profiled: bool) -> Result<Vec<Row>, BenchError> {
        match profiled {
            true => ours::<A>(self.device, self.buf, self.host, size, samples),
            false => Ok(Vec::new()),
        }
    }
}

/// pinstream's rows at `size`: one upload waited for by its event, and a batch back to back
/// waited for once.
fn ours<A: HostApi>(
    device: &A::Device,
    buf: &A::Buffer,
    host: &A::HostMemory,
    size: usize,
    samples: usize,
) -> Result<Vec<Row>, BenchError> {
    let view = HostView::of(host);
    let time = |count: usize, per: usize| {
        copies_in_flight::<A, _>(device, 1, |lanes| {
            let mut out = Vec::with_capacity(count);
            for _ in 0..count {
                let start = Instant::now();
                for _ in 0..per {
                    for e in lanes.upload(0, buf, 0, &view, 0..size, &[])? {
                        if per == 1 {
                            lanes.wait(&e)?;
                        }
                    }
                }
                if per > 1 {
                    lanes.finish()?;
                }
                out.push(start.elapsed().as_secs_f64() * 1e6 / per as f64);
            }
            Ok::<_, ErrorOf<A>>(out)
        })
        .and_then(|r| r)
        .map_err(|e| BenchError::Backend(e.into()))
    };
    time(WARM_UP, 1)?;
    let waited = Maker::Pinstream { sleep: false };
    let batch = batch_len(size);
    let path = "Lanes::upload + wait on its event";
    let one = row(waited, (path, true), size, 1, || time(samples, 1))?;
    let path = "Lanes::upload x N, then finish (per transfer)";
    let n = (samples / 10).max(3);
    let many = row(waited, (path, true), size, batch, || time(n, batch))?;
    Ok(vec![one, many])
}
