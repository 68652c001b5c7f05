//! `bench gather` through an API other than OpenCL (`--api vulkan`): pinstream's staged batch
//! copies through the API ([`BatchApi`], `staged`), the pieces moved by the API's own calls
//! ([`NativeCopies::piece_copies`]: on Vulkan a `vkCmdCopyBuffer` per piece, and one
//! `vkCmdCopyBuffer` with a region per piece, its batch), one transfer of the total bytes by
//! pinstream's path over the API (the one-way peak), and CUDA's rows on the same GPU where
//! CUDA is there; each row checked. pinstream's zero-copy batch calls, where the API does not
//! offer them ([`BatchApi::zero_copy_missing`]): the report says why instead of a row.
//!
//! [`NativeCopies::piece_copies`]: pinstream::backend::native::NativeCopies::piece_copies

use super::ours::{our_rows, Names};
use super::{
    compare_with_cuda, native_rows, offsets, row, timed, GatherBenchError, Row, Shape, Way,
};
use crate::tools::bench::BenchError;
use crate::tools::doctor::DoctorDevice;
use crate::tools::latency::api::OnCuda;
use pinstream::backend::api::{Device, ErrorOf};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView};
use pinstream::gather::{BatchApi, GatherOptions};
use pinstream::host::{HostApi, PinRequest};
use serde::Serialize;

/// The names of pinstream's rows through an API other than OpenCL.
const NAMES: Names = Names {
    staged: [
        "BatchApi::upload_gather (pack into pinned staging, one copy call per batch)",
        "BatchApi::download_scatter (one copy call per batch into pinned staging, unpack)",
    ],
    zero_copy: [
        "BatchApi::upload_gather_mapped (one kernel reads mapped memory)",
        "BatchApi::download_scatter_mapped (one kernel writes mapped memory)",
    ],
    vouched: [
        "BatchApi::upload_gather_mapped (one kernel reads mapped memory), disjointness vouched",
        "BatchApi::download_scatter_mapped (one kernel writes mapped memory), disjointness vouched",
    ],
};

/// The report of `bench gather --api vulkan`.
#[derive(Debug, Clone, Serialize)]
pub struct ApiGatherReport {
    /// The API (`vulkan`).
    pub api: &'static str,
    /// The device.
    pub device: DoctorDevice,
    /// What was moved.
    pub shape: Shape,
    /// Bytes moved one way.
    pub total_bytes: usize,
    /// Every row, each direction.
    pub rows: Vec<Row>,
    /// Rows with no meaning through this API, and why.
    pub not_measured: Vec<String>,
    /// Why there are no CUDA rows, if there are none.
    pub cuda_unavailable: Option<String>,
    /// Why a way of the API's own calls or CUDA's is missing, if one is.
    pub batch_unavailable: Option<String>,
    /// How pinstream's staged batch copies move a batch through this API.
    pub batch_way: String,
}

/// Every row of `shape` on `device`, pinstream's batch copies with `staging`; `cuda` adds
/// CUDA's rows on the same GPU.
pub fn api_gather<A: BatchApi>(
    device: &A::Device,
    described: DoctorDevice,
    (shape, staging): (&Shape, &GatherOptions),
    cuda: OnCuda<'_>,
) -> Result<ApiGatherReport, GatherBenchError> {
    super::check_shape(shape)?;
    let offs = offsets(shape);
    let source = super::source(shape);
    let ours = our_rows::<A>(device, (shape, &offs, &source), staging, &NAMES)?;
    let mut rows: Vec<Row> = ours.up.into_iter().chain(ours.down).collect();
    let native = A::native_copies(device).ok_or(BenchError::NoPinning(A::NAME))?;
    let (own, mut batch_unavailable) = native_rows(A::ID, native, shape, &offs, &source)?;
    rows.extend(own);
    rows.extend(peak::<A>(device, shape)?);
    let cuda_unavailable = cuda(&mut |n| {
        let (r, why) = native_rows("cuda", n, shape, &offs, &source).map_err(|e| e.to_string())?;
        rows.extend(r);
        batch_unavailable = batch_unavailable.take().or(why);
        Ok(())
    })
    .err();
    compare_with_cuda(&mut rows);
    Ok(ApiGatherReport {
        api: A::ID,
        device: described,
        shape: *shape,
        total_bytes: shape.total(),
        rows,
        not_measured: (ours.zero_copy_unavailable)
            .map(|why| format!("pinstream's zero-copy batch copies: {why}"))
            .into_iter()
            .collect(),
        cuda_unavailable,
        batch_unavailable,
        batch_way: ours.way,
    })
}

/// The peak rows' name, each direction (OpenCL's rows have always had it).
const PEAK: &str = "one transfer of the total bytes, pinned (the one-way peak)";

/// The one-way peak both ways, through pinstream's path over the API (`Lanes`): the total
/// bytes in one upload from pinned memory and one download into its other half, checked
/// against each other.
pub(super) fn peak<A: HostApi>(
    device: &A::Device,
    shape: &Shape,
) -> Result<Vec<Row>, GatherBenchError> {
    let total = shape.total();
    let mut host = A::pin(device, 2 * total, PinRequest::default()).map_err(BenchError::from)?;
    crate::tools::random::fill_random(host.slices_mut(0..total).map_err(BenchError::from)?, 3);
    let buf = device
        .allocate(total)
        .map_err(|e| BenchError::Backend(e.into()))?;
    // One queue for every repeat (made before the timing starts), each copy waited for by
    // its own events: the peak times the copies, not a queue's making.
    let backend = |e: ErrorOf<A>| GatherBenchError::from(BenchError::Backend(e.into()));
    let (up, down) = {
        let view = HostView::of_mut(&mut host);
        copies_in_flight::<A, _>(device, 1, |lanes| {
            let copy = |up: bool| {
                let events = match up {
                    true => lanes.upload(0, &buf, 0, &view, 0..total, &[]),
                    false => lanes.download(0, &view, total..2 * total, &buf, 0, &[]),
                }?;
                events.iter().try_for_each(|e| lanes.wait(e))
            };
            Ok::<_, ErrorOf<A>>((
                timed(shape.repeat, || copy(true))?,
                timed(shape.repeat, || copy(false))?,
            ))
        })
        .and_then(|r| r)
        .map_err(backend)?
    };
    let bytes = host
        .slices(0..2 * total)
        .map_err(BenchError::from)?
        .concat();
    super::check(PEAK, super::wrong_bytes(&bytes[total..], &bytes[..total]))?;
    Ok(vec![
        row((A::ID, Way::Peak), PEAK, true, shape, &up),
        row((A::ID, Way::Peak), PEAK, false, shape, &down),
    ])
}
