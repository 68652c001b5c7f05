//! `bench --region`: the in-place demo's copies taken apart (issue 24: uploads at 29 GB/s
//! inside the demo against 49 in bench). Over one region of pinned memory, per block size, the
//! same bytes moved in each shape the demo differs from bench in, each row with its GB/s by
//! the wall clock and while its commands were busy (the demo's figure), so one run tells
//! which difference costs: block size (a row per `--sizes`), pages the GPU has never touched
//! (the first walk), a walk over the whole region against one block repeated, a block across
//! two of the memory's chunks, and per-block waits between the two copy queues as the demo's
//! slots make (chained). Written once over [`HostApi`]: CUDA's rows are the reference.

use super::{check_top, BenchError};
use crate::tools::passes::Pass;
use pinstream::backend::api::{Device, ErrorOf, EventOf, Profile};
use pinstream::backend::lanes::{copies_in_flight, HostMemory, HostView, Lanes};
use pinstream::host::{HostApi, PinRequest};
use pinstream::units::{gb_per_s, median};
use serde::Serialize;
use std::time::Instant;

/// Slots the demo streams through: a chained upload waits for the download this many blocks
/// back.
const SLOTS: usize = 4;

/// Which blocks a shape moves, by offset in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// Every block at offset 0 (bench's curves).
    Same,
    /// Blocks at successive offsets over the whole region; downloads half a region behind.
    Walk,
    /// Every block across the first boundary between two chunks of the memory.
    Across,
    /// A walk both ways, each upload after the download `SLOTS` blocks back and each download
    /// after its upload (the demo's per-block waits between queues).
    Chained,
}

/// GB/s of one direction.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rate {
    /// By the wall clock, from the first enqueue to the end.
    pub wall_gbps: f64,
    /// Over the commands' summed busy time (the demo's "while busy").
    pub busy_gbps: f64,
}

/// One shape at one block size (a direction it does not move: `None`).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What it moves.
    pub shape: Shape,
    /// The first pass over memory the device has not copied before (one pass, no repeat).
    pub first_touch: bool,
    /// Block size.
    pub block: usize,
    /// Blocks per pass.
    pub blocks: usize,
    /// Uploads alone.
    pub h2d: Option<Rate>,
    /// Downloads alone.
    pub d2h: Option<Rate>,
    /// Both at once on two lanes, bytes of both directions by the wall clock.
    pub both_gbps: Option<f64>,
    /// The uploads of the both-ways pass, over their busy time.
    pub both_up_busy_gbps: Option<f64>,
    /// The downloads of the both-ways pass, over their busy time.
    pub both_down_busy_gbps: Option<f64>,
}

/// The pinned region of one block size.
#[derive(Debug, Clone, Serialize)]
pub struct Region {
    /// Bytes pinned.
    pub bytes: usize,
    /// The pieces (chunks) the API lends it in.
    pub chunks: usize,
    /// Bytes of it backed by transparent huge pages (Linux's AnonHugePages); `None` elsewhere.
    pub huge_page_bytes: Option<u64>,
    /// Seconds pinning took.
    pub pin_s: f64,
    /// Its rows.
    pub rows: Vec<Row>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct WalkReport {
    /// The API (`vulkan`, `cuda`, `opencl`).
    pub api: &'static str,
    /// The device.
    pub device: String,
    /// How the device copied, where its API offers a choice.
    pub copies: Option<String>,
    /// Repeats per row (medians).
    pub repeats: usize,
    /// One region per block size, pinned afresh.
    pub regions: Vec<Region>,
}

/// Every shape at every block of `sizes` over `region` bytes pinned with `pinning` in chunks
/// of at most `max_chunk` (the API's limit where `None`), pinned afresh per block size.
pub fn walk<A: HostApi>(
    device: &A::Device,
    pinning: Option<A::Pinning>,
    region: usize,
    max_chunk: Option<usize>,
    sizes: &[usize],
    repeats: usize,
) -> Result<WalkReport, BenchError> {
    let mut regions = Vec::new();
    for &block in sizes {
        check_top(device, block)?;
        if block > region {
            return Err(BenchError::Usage(format!(
                "block {block} is larger than --region {region}: lower --sizes or raise --region"
            )));
        }
        regions.push(one_region::<A>(
            device, pinning, region, max_chunk, block, repeats,
        )?);
    }
    Ok(WalkReport {
        api: A::ID,
        device: device.info().name,
        copies: device.copy_way(),
        repeats: repeats.max(1),
        regions,
    })
}

fn one_region<A: HostApi>(
    device: &A::Device,
    pinning: Option<A::Pinning>,
    bytes: usize,
    max_chunk: Option<usize>,
    block: usize,
    repeats: usize,
) -> Result<Region, BenchError> {
    let request = PinRequest {
        pinning,
        max_chunk,
        ..Default::default()
    };
    let start = Instant::now();
    let mut host = A::pin(device, bytes, request)?;
    let pin_s = start.elapsed().as_secs_f64();
    let parts: Vec<(usize, usize)> = host
        .slices(0..bytes)?
        .iter()
        .map(|s| (s.as_ptr() as usize, s.len()))
        .collect();
    let mut walk = Walker::<A> {
        device,
        up: device.allocate(block).map_err(Into::into)?,
        down: device.allocate(block).map_err(Into::into)?,
        block,
        blocks: bytes / block,
        boundary: boundary(&parts, block),
    };
    let view = HostView::of_mut(&mut host);
    let rows = walk.rows(&view, repeats.max(1))?;
    Ok(Region {
        bytes,
        chunks: parts.len(),
        huge_page_bytes: huge_page_bytes(&parts),
        pin_s,
        rows,
    })
}

/// The offset of a block that crosses the first boundary between two parts, where there are
/// two and the block fits across it.
fn boundary(parts: &[(usize, usize)], block: usize) -> Option<usize> {
    let first = parts.first()?.1;
    let total: usize = parts.iter().map(|p| p.1).sum();
    (parts.len() > 1 && block >= 2 && first + block / 2 <= total && first >= block / 2)
        .then(|| first - block / 2)
}

/// One block size's buffers over a pinned region.
struct Walker<'d, A: HostApi> {
    device: &'d A::Device,
    up: A::Buffer,
    down: A::Buffer,
    block: usize,
    blocks: usize,
    boundary: Option<usize>,
}

/// One pass: the blocks' offsets each way (empty: that way not moved), chained or not.
struct Plan {
    up: Vec<usize>,
    down: Vec<usize>,
    chained: bool,
}

/// A pass's wall time and each direction's summed busy time (ns).
struct Timed {
    pass: Pass,
    up_ns: u64,
    down_ns: u64,
}

impl<A: HostApi> Walker<'_, A> {
    /// The first walk up (pages never copied), then every shape.
    fn rows(&mut self, view: &HostView<'_>, repeats: usize) -> Result<Vec<Row>, BenchError> {
        let first = self.plan(Shape::Walk, true, false);
        let timed = self.time(view, &first)?;
        let mut touch = self.row(Shape::Walk, vec![timed], vec![], vec![]);
        touch.first_touch = true;
        let mut rows = vec![touch];
        for shape in [Shape::Same, Shape::Walk, Shape::Across, Shape::Chained] {
            if shape == Shape::Across && self.boundary.is_none() {
                continue;
            }
            rows.push(self.shape(view, shape, repeats)?);
        }
        Ok(rows)
    }

    /// `shape` measured `repeats` times each way.
    fn shape(&self, view: &HostView<'_>, shape: Shape, repeats: usize) -> Result<Row, BenchError> {
        let (mut up, mut down, mut both) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..repeats {
            if shape != Shape::Chained {
                up.push(self.time(view, &self.plan(shape, true, false))?);
                down.push(self.time(view, &self.plan(shape, false, true))?);
            }
            both.push(self.time(view, &self.plan(shape, true, true))?);
        }
        Ok(self.row(shape, up, down, both))
    }

    /// The offsets `shape` moves up (where `up`) and down (where `down`).
    fn plan(&self, shape: Shape, up: bool, down: bool) -> Plan {
        let n = self.blocks;
        let at = |i: usize| match shape {
            Shape::Same => 0,
            Shape::Across => self.boundary.unwrap_or(0),
            Shape::Walk | Shape::Chained => (i % n) * self.block,
        };
        let lag = if up && down { n / 2 } else { 0 };
        Plan {
            up: if up { (0..n).map(at).collect() } else { vec![] },
            down: if down {
                (0..n).map(|i| at(i + lag)).collect()
            } else {
                vec![]
            },
            chained: shape == Shape::Chained,
        }
    }

    fn row(&self, shape: Shape, up: Vec<Timed>, down: Vec<Timed>, both: Vec<Timed>) -> Row {
        let bytes = (self.blocks * self.block) as u64;
        let rate = |t: &[Timed], ns: fn(&Timed) -> u64| {
            (!t.is_empty()).then(|| Rate {
                wall_gbps: med(t, |x| gb_per_s(bytes, x.pass.wall_s)),
                busy_gbps: med(t, |x| gb_per_s(bytes, ns(x) as f64 / 1e9)),
            })
        };
        let both_rate = rate(&both, |t| t.up_ns);
        Row {
            shape,
            first_touch: false,
            block: self.block,
            blocks: self.blocks,
            h2d: rate(&up, |t| t.up_ns),
            d2h: rate(&down, |t| t.down_ns),
            both_gbps: both_rate.map(|_| med(&both, |x| gb_per_s(2 * bytes, x.pass.wall_s))),
            both_up_busy_gbps: both_rate.map(|r| r.busy_gbps),
            both_down_busy_gbps: rate(&both, |t| t.down_ns).map(|r| r.busy_gbps),
        }
    }

    /// Runs `plan` on two copy lanes, every copy waited for before it returns.
    fn time(&self, view: &HostView<'_>, plan: &Plan) -> Result<Timed, BenchError> {
        let (up, down) = (&self.up, &self.down);
        let block = self.block;
        copies_in_flight::<A, _>(self.device, 2, |lanes| {
            timed(lanes, |l| enqueue::<A>(l, view, (up, down), block, plan))
        })
        .and_then(|r| r)
        .map_err(|e| BenchError::Backend(e.into()))
    }
}

/// The median of `f` over `t`.
fn med(t: &[Timed], f: impl Fn(&Timed) -> f64) -> f64 {
    let mut v: Vec<f64> = t.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    median(&v)
}

/// Each direction's events, in order.
type Events<A> = (Vec<EventOf<A>>, Vec<EventOf<A>>);

/// Times what `enqueue` enqueues: the wall clock from the first enqueue to the end of both
/// lanes, and each direction's commands by their device times.
fn timed<'s, A: HostApi>(
    lanes: &Lanes<'s, A>,
    enqueue: impl FnOnce(&Lanes<'s, A>) -> Result<Events<A>, ErrorOf<A>>,
) -> Result<Timed, ErrorOf<A>> {
    let origin = lanes.mark(0)?;
    lanes.wait(&origin)?;
    let start = Instant::now();
    let (up, down) = enqueue(lanes)?;
    lanes.finish()?;
    let wall_s = start.elapsed().as_secs_f64();
    let profile = |events: &[EventOf<A>]| -> Result<Vec<Profile>, ErrorOf<A>> {
        events.iter().map(|e| lanes.profile(e, &origin)).collect()
    };
    let (up, down) = (profile(&up)?, profile(&down)?);
    let busy = |p: &[Profile]| p.iter().map(Profile::duration_ns).sum();
    let all: Vec<Profile> = up.iter().chain(&down).cloned().collect();
    Ok(Timed {
        pass: Pass::from_profiles(wall_s, &all),
        up_ns: busy(&up),
        down_ns: busy(&down),
    })
}

/// Enqueues `plan`: uploads on lane 0, downloads on lane 1 (lane 0 when alone), chained where
/// it says.
fn enqueue<'s, A: HostApi>(
    lanes: &Lanes<'s, A>,
    view: &HostView<'s>,
    (up, down): (&'s A::Buffer, &'s A::Buffer),
    block: usize,
    plan: &Plan,
) -> Result<Events<A>, ErrorOf<A>> {
    let mut ups: Vec<Vec<EventOf<A>>> = Vec::new();
    let mut downs: Vec<Vec<EventOf<A>>> = Vec::new();
    let down_lane = usize::from(!plan.up.is_empty());
    for i in 0..plan.up.len().max(plan.down.len()) {
        if let Some(&at) = plan.up.get(i) {
            let back = i.checked_sub(SLOTS).filter(|_| plan.chained);
            let wait: Vec<&EventOf<A>> = back.map_or(vec![], |b| downs[b].iter().collect());
            ups.push(lanes.upload(0, up, 0, view, at..at + block, &wait)?);
        }
        if let Some(&at) = plan.down.get(i) {
            let wait: Vec<&EventOf<A>> = match plan.chained {
                true => ups[i].iter().collect(),
                false => vec![],
            };
            downs.push(lanes.download(down_lane, view, at..at + block, down, 0, &wait)?);
        }
    }
    let flat = |v: Vec<Vec<EventOf<A>>>| v.into_iter().flatten().collect();
    Ok((flat(ups), flat(downs)))
}

/// Bytes of the parts backed by transparent huge pages: the `AnonHugePages` of every mapping
/// of `/proc/self/smaps` that overlaps them (`None` where there is no such file).
fn huge_page_bytes(parts: &[(usize, usize)]) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let overlaps = |lo: usize, hi: usize| parts.iter().any(|&(p, n)| p < hi && lo < p + n);
    let (mut inside, mut total) = (false, 0u64);
    for line in smaps.lines() {
        if let Some(kb) = line.strip_prefix("AnonHugePages:") {
            let kb: u64 = kb.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            total += if inside { kb * 1024 } else { 0 };
        } else if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                let hex = |s| usize::from_str_radix(s, 16).ok();
                if let (Some(lo), Some(hi)) = (hex(lo), hex(hi)) {
                    inside = overlaps(lo, hi);
                }
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossing_block_straddles_the_first_boundary() {
        assert_eq!(boundary(&[(0, 100)], 10), None);
        assert_eq!(boundary(&[(0, 100), (200, 100)], 10), Some(95));
        assert_eq!(boundary(&[(0, 4), (200, 100)], 10), None);
    }

    #[test]
    fn huge_pages_of_memory_not_mapped_are_none_counted() {
        assert_eq!(huge_page_bytes(&[(usize::MAX - 10, 1)]).unwrap_or(0), 0);
    }
}
