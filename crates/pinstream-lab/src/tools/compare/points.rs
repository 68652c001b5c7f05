//! The bench points: each half's passes paired with the other's, pass by pass.

use super::half::{Half, PointSide};
use super::stream::alternating;
use super::{CompareConfig, CompareError, StopCheck};
use crate::tools::bench::Point;
use serde::Serialize;

/// GB/s of one pass (by the wall clock) each way; serialized as `[H2D, D2H, both]`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PassRates {
    /// Host to device.
    pub h2d: f64,
    /// Device to host.
    pub d2h: f64,
    /// Both at once.
    pub both: f64,
}

impl PassRates {
    /// The rates of a one-pass point.
    fn of(p: &Point) -> Self {
        PassRates {
            h2d: p.h2d.wall_gbps,
            d2h: p.d2h.wall_gbps,
            both: p.both.wall_gbps,
        }
    }

    /// The three directions, with their names in figures.
    pub fn each(&self) -> [(&'static str, f64); 3] {
        [
            ("H2D", self.h2d),
            ("D2H", self.d2h),
            ("both ways", self.both),
        ]
    }
}

impl Serialize for PassRates {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        [self.h2d, self.d2h, self.both].serialize(s)
    }
}

/// Per half, per bench size, every pass.
pub(super) type HalfPasses = Vec<Vec<PassRates>>;

/// The bench points, paired pass by pass (the order alternating), after one throw-away pass
/// per half at the largest size (first-use costs, lazy allocation and first DMA mappings,
/// land on no measured pass). Per half, its passes.
pub(super) fn bench_points(
    halves: &[&dyn Half],
    cfg: &CompareConfig,
    stop: &StopCheck,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<HalfPasses>, CompareError> {
    let top = *cfg.sizes.iter().max().unwrap_or(&1);
    let failed = |h: &dyn Half, e: String| stop.or_stopped(CompareError::bench(h, e));
    let mut sides = halves
        .iter()
        .map(|&h| h.points(top).map_err(|e| failed(h, e)))
        .collect::<Result<Vec<_>, _>>()?;
    for (side, &h) in sides.iter_mut().zip(halves) {
        side.point(top).map_err(|e| failed(h, e))?;
    }
    let mut out = vec![vec![Vec::new(); cfg.sizes.len()]; halves.len()];
    let passes = cfg.point_repeats.max(1);
    for r in 0..passes {
        progress(&format!("bench points, pass {}/{passes}", r + 1));
        for (k, &size) in cfg.sizes.iter().enumerate() {
            for i in alternating(halves.len(), r + k) {
                stop.here()?;
                let point = pass(&mut *sides[i], size).map_err(|e| failed(halves[i], e))?;
                out[i][k].push(point);
            }
        }
    }
    Ok(out)
}

fn pass(side: &mut dyn PointSide, size: usize) -> Result<PassRates, String> {
    side.point(size).map(|p| PassRates::of(&p))
}
