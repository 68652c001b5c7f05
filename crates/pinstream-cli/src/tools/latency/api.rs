//! `bench latency` through an API other than OpenCL (`--api vulkan`): one small upload by
//! pinstream's path over the API ([`Lanes::upload`], each waited for by its event, or back to
//! back and waited for once) beside the API's own calls ([`NativeCopies::upload_floor`]: on
//! Vulkan a recorded `vkCmdCopyBuffer`, `vkQueueSubmit` and a fence) and CUDA's on the same GPU
//! where CUDA is there. The gap is pinstream's waited median minus the API's own.
//!
//! [`Lanes::upload`]: pinstream::backend::lanes::Lanes::upload

use super::{batch_len, cuda_rows, row, Maker, SizeRows, WARM_UP};
use crate::tools::bench::BenchError;
use crate::tools::doctor::DoctorDevice;
use pinstream::backend::api::{Device, ErrorOf};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView};
use pinstream::backend::native::NativeCopies;
use pinstream::host::{HostApi, PinRequest, Pinned};
use serde::Serialize;
use std::time::Instant;

/// Runs a measurement on CUDA's own calls on the same GPU, or says why it cannot.
pub type OnCuda<'a> =
    &'a dyn Fn(&mut dyn FnMut(&dyn NativeCopies) -> Result<(), String>) -> Result<(), String>;

/// The report of `bench latency --api vulkan`.
#[derive(Debug, Clone, Serialize)]
pub struct ApiLatencyReport {
    /// The API (`vulkan`).
    pub api: &'static str,
    /// The device.
    pub device: DoctorDevice,
    /// How the API pinned pinstream's memory.
    pub pinning: String,
    /// How the device copies, where its API offers a choice.
    pub copies: Option<String>,
    /// Timed samples per row.
    pub samples: usize,
    /// Per size.
    pub sizes: Vec<SizeRows>,
    /// Why there are no CUDA rows, if there are none.
    pub cuda_unavailable: Option<String>,
}

/// Every row at every size on `device`; `cuda` adds CUDA's rows on the same GPU.
pub fn api_latency<A: HostApi>(
    device: &A::Device,
    described: DoctorDevice,
    sizes: &[usize],
    samples: usize,
    cuda: OnCuda<'_>,
) -> Result<ApiLatencyReport, BenchError> {
    let top = *sizes.iter().max().unwrap_or(&4096);
    let native = A::native_copies(device).ok_or(BenchError::NoPinning(A::NAME))?;
    let fill = &mut |b: &mut [u8]| crate::tools::random::fill_random(vec![b], 17);
    let floor = native.upload_floor(top, fill)?;
    let mut host = A::pin(device, top, PinRequest::default())?;
    crate::tools::random::fill_random(host.slices_mut(0..top)?, 17);
    let pinning = host.pinning_name();
    let buf = device.allocate(top).map_err(Into::into)?;
    let mut out = Vec::new();
    for &size in sizes {
        let mut rows = ours::<A>(device, &buf, &host, size, samples)?;
        let [one, batched] = floor.paths();
        floor.time(size, WARM_UP, 1)?;
        let (n, batch) = ((samples / 10).max(3), batch_len(size));
        let own = Maker::Native(A::ID);
        rows.push(row(own, (one, false), size, 1, || {
            floor.time(size, samples, 1)
        })?);
        rows.push(row(own, (batched, false), size, batch, || {
            floor.time(size, n, batch)
        })?);
        out.push(SizeRows::of(size, rows));
    }
    drop(floor);
    let cuda_unavailable = cuda(&mut |n| cuda_rows(n, top, samples, &mut out)).err();
    out.iter_mut().for_each(|s| s.summarise_against(A::ID));
    Ok(ApiLatencyReport {
        api: A::ID,
        device: described,
        pinning,
        copies: device.copy_way(),
        samples,
        sizes: out,
        cuda_unavailable,
    })
}

/// pinstream's rows at `size`: one upload waited for by its event, and a batch back to back
/// waited for once.
fn ours<A: HostApi>(
    device: &A::Device,
    buf: &A::Buffer,
    host: &A::HostMemory,
    size: usize,
    samples: usize,
) -> Result<Vec<super::Row>, BenchError> {
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
