//! A timed pass of transfers and the bandwidth of several, as `doctor` and `bench` both
//! measure them: a leaf module under both.

use pinstream::backend::api::{ErrorOf, EventOf, Profile};
use pinstream::backend::lanes::Lanes;
use pinstream::host::HostApi;
use pinstream::units::{gb_per_s, median};
use serde::Serialize;
use std::time::Instant;

/// One timed pass.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    /// Wall seconds from first enqueue to completion.
    pub wall_s: f64,
    /// Seconds from the first command's start to the last one's end (event profiling).
    pub events_s: f64,
}

/// A bandwidth figure from the wall clock and from event profiling: the median pass, with
/// the slowest and fastest beside it.
#[derive(Debug, Clone, Serialize)]
pub struct Bandwidth {
    /// Bytes moved per pass (both directions added for both-ways).
    pub bytes: u64,
    /// Median GB/s by the wall clock.
    pub wall_gbps: f64,
    /// Median GB/s by event profiling.
    pub events_gbps: f64,
    /// Slowest pass, GB/s by the wall clock.
    pub min_gbps: f64,
    /// Fastest pass, GB/s by the wall clock.
    pub max_gbps: f64,
    /// Every pass.
    pub passes: Vec<Pass>,
}

impl Bandwidth {
    pub(crate) fn from_passes(bytes: u64, passes: Vec<Pass>) -> Self {
        let rates = |f: fn(&Pass) -> f64| {
            let mut v: Vec<f64> = passes.iter().map(|p| gb_per_s(bytes, f(p))).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let (wall, events) = (rates(|p| p.wall_s), rates(|p| p.events_s));
        Bandwidth {
            bytes,
            wall_gbps: median(&wall),
            events_gbps: median(&events),
            min_gbps: wall.first().copied().unwrap_or(0.0),
            max_gbps: wall.last().copied().unwrap_or(0.0),
            passes,
        }
    }
}

impl Pass {
    /// A pass of `wall_s` seconds whose commands ran as `profiles` (any API's device times):
    /// the event time is the span from the first start to the last end.
    pub(crate) fn from_profiles(wall_s: f64, profiles: &[Profile]) -> Self {
        let start = profiles.iter().map(|p| p.start).min().unwrap_or(0);
        let end = profiles.iter().map(|p| p.end).max().unwrap_or(0);
        Pass {
            wall_s,
            events_s: end.saturating_sub(start) as f64 / 1e9,
        }
    }
}

/// Times what `enqueue` enqueues on `lanes`: by the wall clock from the first enqueue to the
/// end of every lane (one wait per lane, not one per command), and each command by its device
/// times. The pass and the commands' summed busy time (ns).
pub fn timed_pass<'s, A: HostApi>(
    lanes: &Lanes<'s, A>,
    enqueue: impl FnOnce(&Lanes<'s, A>) -> Result<Vec<EventOf<A>>, ErrorOf<A>>,
) -> Result<(Pass, u64), ErrorOf<A>> {
    let origin = lanes.mark(0)?;
    lanes.wait(&origin)?;
    let start = Instant::now();
    let events = enqueue(lanes)?;
    lanes.finish()?;
    let wall_s = start.elapsed().as_secs_f64();
    let profiles = events
        .iter()
        .map(|e| lanes.profile(e, &origin))
        .collect::<Result<Vec<_>, _>>()?;
    let busy = profiles.iter().map(Profile::duration_ns).sum();
    Ok((Pass::from_profiles(wall_s, &profiles), busy))
}
