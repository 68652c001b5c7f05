//! The one-way peak of `bench gather`: the total bytes in one transfer each way, through
//! pinstream's path over the API (`Lanes`), the figure the goals' shares are of.

use super::{row, timed, GatherBenchError, Row, Shape, Way};
use crate::tools::bench::BenchError;
use pinstream::backend::api::{Device, ErrorOf};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView};
use pinstream::host::{HostApi, PinRequest};

/// The peak rows' name, each direction.
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
    // its own events as a caller waits (as pinstream's rows are): the peak times the copies,
    // not a queue's making or a sleeping wait's wake-up.
    let backend = |e: ErrorOf<A>| GatherBenchError::from(BenchError::Backend(e.into()));
    let (up, down) = {
        let view = HostView::of_mut(&mut host);
        copies_in_flight::<A, _>(device, 1, |lanes| {
            let copy = |up: bool| {
                let events = match up {
                    true => lanes.upload(0, &buf, 0, &view, 0..total, &[]),
                    false => lanes.download(0, &view, total..2 * total, &buf, 0, &[]),
                }?;
                events.iter().try_for_each(|e| lanes.wait_call(e))
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
