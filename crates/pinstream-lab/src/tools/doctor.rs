//! `pinstream doctor`: for every way an API pins host memory on a device (OpenCL's
//! strategies, CUDA's `cuMemHostAlloc` and `cuMemHostRegister`), measure the time to pin, the
//! VRAM cost, H2D, D2H and both-ways bandwidth, and check every round trip byte for byte.
//! Written once over [`HostApi`]: what differs per API (its ways to pin, its default, what a
//! way gives the device) is the API's to say.

mod device;
mod measure;
mod report;
mod verdict;

pub use device::DoctorDevice;
pub use measure::blocks;
pub use report::{DoctorReport, StrategyReport};

use measure::Doctor;
use pinstream::backend::api::Device;
use pinstream::backend::error::BackendError;
use pinstream::host::{HostApi, HostError, PinKind};
use pinstream::units::Bytes;

/// What to measure (the ways to pin are given to [`run`], as [`chosen`] picks them).
#[derive(Debug, Clone)]
pub struct DoctorConfig {
    /// Region size per way to pin.
    pub size: usize,
    /// Transfer block size (device buffer size).
    pub block: usize,
    /// Cap on chunk size, where the API makes memory of chunks (tests force chunking).
    pub max_chunk: Option<usize>,
    /// Seed of the random data; `None`: fresh from the clock.
    pub seed: Option<u64>,
    /// Timed passes per direction; figures are their median.
    pub repeats: usize,
}

/// Which ways to pin to measure (`--strategy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every way the device offers.
    All,
    /// The API's own choice ([`HostApi::default_pinning`]; OpenCL's `auto`).
    Auto,
    /// The one of this name.
    Named(String),
}

impl From<&str> for Selection {
    fn from(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Selection::All,
            "auto" => Selection::Auto,
            name => Selection::Named(name.to_string()),
        }
    }
}

/// Why the doctor could not run at all (a failing strategy is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// Block size of zero or above the device's max allocation.
    #[error("block size {} is not usable on this device: it must be between 1 byte and the max allocation {}; pass a smaller --block", Bytes(*.block as u64), Bytes(*.max_alloc))]
    Block {
        /// Requested block.
        block: usize,
        /// Device limit.
        max_alloc: u64,
    },
    /// Region size problems (zero, above available memory).
    #[error(transparent)]
    Size(#[from] HostError),
    /// A way to pin that the API knows but this device lacks.
    #[error("strategy `{strategy}` is not available on this device: {why}; run `pinstream devices` to see the strategies it offers")]
    Unsupported {
        /// The way to pin.
        strategy: String,
        /// Why not.
        why: String,
    },
    /// A name that is no way to pin of the API.
    #[error("unknown strategy `{name}`: choose all, auto or one of {}", .known.join(", "))]
    Unknown {
        /// The name given.
        name: String,
        /// Every way the API knows.
        known: Vec<String>,
    },
    /// Queue or device buffer failure.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// The ways to pin on `device` that `selection` names, or why it names none there.
pub fn chosen<A: HostApi>(
    device: &A::Device,
    selection: &Selection,
) -> Result<Vec<A::Pinning>, DoctorError> {
    let offered = A::pinnings(device);
    let name = match selection {
        Selection::All => return Ok(offered),
        Selection::Auto => return Ok(A::default_pinning(device).0.into_iter().collect()),
        Selection::Named(name) => name,
    };
    let named = |p: &A::Pinning| p.to_string().eq_ignore_ascii_case(name);
    if let Some(&p) = offered.iter().find(|p| named(p)) {
        return Ok(vec![p]);
    }
    let lacking = A::lacking(device);
    if let Some((p, why)) = lacking.iter().find(|(p, _)| named(p)) {
        let (strategy, why) = (p.to_string(), why.clone());
        return Err(DoctorError::Unsupported { strategy, why });
    }
    let known = offered.iter().chain(lacking.iter().map(|(p, _)| p));
    Err(DoctorError::Unknown {
        name: name.clone(),
        known: known.map(ToString::to_string).collect(),
    })
}

/// Progress: (units done so far, a message). One unit per block moved or checked.
pub type ProgressFn<'a> = &'a (dyn Fn(u64, &str) + Sync);

/// Units of work [`run`] reports for `cfg` over `n` ways to pin (a progress bar's length).
pub fn total_units(cfg: &DoctorConfig, n: usize) -> u64 {
    (n * (1 + 3 * cfg.repeats.max(1)) * cfg.size.div_ceil(cfg.block.max(1))) as u64
}

/// Measures each of `pinnings` on `device` (`details`: how the report names it).
pub fn run<A: HostApi>(
    device: &A::Device,
    details: DoctorDevice,
    pinnings: &[A::Pinning],
    cfg: &DoctorConfig,
    progress: ProgressFn,
) -> Result<DoctorReport, DoctorError> {
    let max_alloc = device.max_alloc();
    if cfg.block == 0 || cfg.block as u64 > max_alloc {
        let block = cfg.block;
        return Err(DoctorError::Block { block, max_alloc });
    }
    pinstream::host::check_size(cfg.size)?;
    let doctor = Doctor::<A>::new(device, cfg)?;
    let seed = cfg.seed.unwrap_or_else(clock_seed);
    let mut reports = doctor.measure_all(pinnings, seed, progress);
    let pageable_h2d = reports
        .iter()
        .find(|r| r.kind == PinKind::Pageable)
        .and_then(|r| r.h2d.as_ref().map(|b| b.wall_gbps));
    for r in &mut reports {
        verdict::judge(r, cfg.size, device.is_cpu(), pageable_h2d);
    }
    let (auto, auto_reason) = A::default_pinning(device);
    let auto_strategy = auto.map(|p| p.to_string());
    let (recommendation, recommendation_reason) =
        verdict::recommend(auto_strategy.as_deref(), &reports);
    Ok(DoctorReport {
        vram_source: doctor.probe.source(),
        vram_note: doctor.probe.note().map(str::to_string),
        device: details,
        size: cfg.size,
        block: doctor.block,
        seed,
        repeats: cfg.repeats.max(1),
        auto_strategy,
        auto_reason,
        strategies: reports,
        recommendation,
        recommendation_reason,
        mapped: None,
    })
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::api::{Adapter, Api, Instance};
    use pinstream::backend::empty::{Empty, EmptyInstance};
    use std::sync::atomic::{AtomicU64, Ordering};

    fn empty_device() -> <Empty as Api>::Device {
        let instance = EmptyInstance::new_with(1, 1 << 30);
        instance.adapters().unwrap()[0].open().unwrap()
    }

    /// The doctor is the same code on any API: on the empty one (a device of host memory)
    /// it pins its one way, moves and checks every byte, times every pass and recommends it.
    #[test]
    fn the_doctor_measures_every_way_to_pin_of_any_api() {
        let device = empty_device();
        let cfg = DoctorConfig {
            size: (10 << 20) + 123,
            block: 4 << 20,
            max_chunk: None,
            seed: Some(3),
            repeats: 2,
        };
        let pinnings = chosen::<Empty>(&device, &Selection::All).unwrap();
        let done = AtomicU64::new(0);
        let progress = |n: u64, _: &str| done.store(n, Ordering::Relaxed);
        let details = DoctorDevice::adapter(device.info());
        let r = run::<Empty>(&device, details, &pinnings, &cfg, &progress).unwrap();
        assert_eq!(done.into_inner(), total_units(&cfg, 1));
        let [s] = &r.strategies[..] else {
            panic!("{r:?}")
        };
        assert_eq!((s.strategy.as_str(), s.error.as_deref()), ("heap", None));
        assert_eq!((s.verified_bytes, s.mismatched_bytes), (cfg.size as u64, 0));
        for b in [&s.h2d, &s.d2h, &s.both] {
            let b = b.as_ref().unwrap();
            assert_eq!((b.bytes, b.passes.len()), (cfg.size as u64, 2));
        }
        assert_eq!((s.chunks, s.contiguous), (1, true));
        assert_eq!(r.auto_strategy.as_deref(), Some("heap"));
        assert_eq!(r.recommendation.as_deref(), Some("heap"));
        assert!(r
            .recommendation_reason
            .starts_with("auto's choice, measured here"));
        assert_eq!(r.device.label(), "0: empty device 0 (none)");
    }

    /// `--strategy` names one of the API's own ways, in any case; a name it does not know is
    /// refused with the ones it does.
    #[test]
    fn a_strategy_is_named_in_the_apis_own_terms() {
        let device = empty_device();
        let pick = |s: &str| chosen::<Empty>(&device, &Selection::from(s));
        assert_eq!(pick("HEAP").unwrap().len(), 1);
        assert_eq!(pick("auto").unwrap().len(), 1);
        let e = pick("register").unwrap_err().to_string();
        assert_eq!(
            e,
            "unknown strategy `register`: choose all, auto or one of heap"
        );
    }

    #[test]
    fn a_block_past_the_devices_largest_allocation_is_refused() {
        let device = empty_device();
        let cfg = DoctorConfig {
            size: 1 << 20,
            block: (1 << 30) + 1,
            max_chunk: None,
            seed: None,
            repeats: 1,
        };
        let details = DoctorDevice::adapter(device.info());
        let e = run::<Empty>(&device, details, &[], &cfg, &|_, _| {}).unwrap_err();
        assert!(matches!(e, DoctorError::Block { .. }), "{e}");
    }
}
