//! The pinning strategies, which devices offer them, and the automatic choice.

use crate::backend::opencl::{DeviceInfo, Vendor};
use crate::backend::pinning::PinKind;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// How a [`HostRegion`](super::HostRegion) gets its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `clCreateBufferNV` with `CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV`, mapped.
    NvHost,
    /// Page-aligned memory pinstream owns, registered by never-mapped `CL_MEM_USE_HOST_PTR`
    /// buffers; transfers use the raw pointer.
    Register,
    /// `clHostMemAllocINTEL` (`cl_intel_unified_shared_memory`).
    IntelUsm,
    /// The classic `CL_MEM_ALLOC_HOST_PTR` buffers, mapped.
    AllocHostPtr,
    /// Coarse-grained `clSVMAlloc`, mapped.
    Svm,
    /// Page-aligned memory locked with `mlock`, not known to the driver (a baseline).
    Mlock,
    /// Plain memory (a baseline).
    Pageable,
}

impl Strategy {
    /// Every strategy, in the order `auto` tries them after its vendor preference.
    pub const ALL: [Strategy; 7] = [
        Strategy::Register,
        Strategy::NvHost,
        Strategy::IntelUsm,
        Strategy::AllocHostPtr,
        Strategy::Svm,
        Strategy::Mlock,
        Strategy::Pageable,
    ];

    /// The name users type with `--strategy`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::NvHost => "nv-host",
            Strategy::Register => "register",
            Strategy::IntelUsm => "intel-usm",
            Strategy::AllocHostPtr => "alloc-host-ptr",
            Strategy::Svm => "svm",
            Strategy::Mlock => "mlock",
            Strategy::Pageable => "pageable",
        }
    }

    /// True when the driver itself pins the memory (it knows the pages and can DMA them).
    pub fn driver_pinned(self) -> bool {
        !matches!(self, Strategy::Mlock | Strategy::Pageable)
    }

    /// True when `auto` may try this strategy for memory `devices` use: a strategy the driver
    /// pins always; a baseline (`mlock`, `pageable`) only when every device is a CPU device,
    /// where nothing is pinned by any strategy. On a device that copies by DMA, success must
    /// mean pinned memory: the baselines are there only when asked for by name.
    pub fn auto_may_try(self, devices: &[DeviceInfo]) -> bool {
        self.driver_pinned() || !devices.iter().any(needs_pinning)
    }

    /// How memory pinned by this strategy reaches the device.
    pub fn pin_kind(self) -> PinKind {
        match self {
            _ if self.driver_pinned() => PinKind::Driver,
            Strategy::Mlock => PinKind::Resident,
            _ => PinKind::Pageable,
        }
    }

    /// True when the whole region is one contiguous range (one slice), whatever its size.
    pub fn contiguous(self) -> bool {
        matches!(
            self,
            Strategy::Register | Strategy::Mlock | Strategy::Pageable
        )
    }

    /// `Ok` when `device` offers this strategy, else why not.
    pub fn offered_by(self, device: &DeviceInfo) -> Result<(), String> {
        let need = |ext: &str| {
            if device.has_extension(ext) {
                Ok(())
            } else {
                Err(format!("the device lacks {ext}"))
            }
        };
        match self {
            Strategy::NvHost => need("cl_nv_create_buffer"),
            Strategy::IntelUsm => need("cl_intel_unified_shared_memory"),
            Strategy::Svm if !device.svm_coarse => {
                Err("the device has no coarse-grained SVM, or the OpenCL loader lacks clSVMAlloc (Wine's opencl.dll exports OpenCL 1.x only)".into())
            }
            _ => Ok(()),
        }
    }

    /// `Ok` when every device of a context offers this strategy, else why not (naming the
    /// first device that does not).
    pub fn offered_by_all(self, devices: &[DeviceInfo]) -> Result<(), String> {
        for d in devices {
            self.offered_by(d).map_err(|why| {
                if devices.len() > 1 {
                    format!("{why} (device {}: {})", d.index, d.name)
                } else {
                    why
                }
            })?;
        }
        Ok(())
    }

    /// The strategies `device` offers.
    pub fn offered(device: &DeviceInfo) -> Vec<Strategy> {
        Strategy::ALL
            .into_iter()
            .filter(|s| s.offered_by(device).is_ok())
            .collect()
    }

    /// The strategies `device` does not offer, each with why.
    pub fn unavailable(device: &DeviceInfo) -> Vec<(Strategy, String)> {
        let why_not = |s: Strategy| s.offered_by(device).err().map(|why| (s, why));
        Strategy::ALL.into_iter().filter_map(why_not).collect()
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// True when `device` copies host memory by DMA, so that memory must be pinned for it: any
/// device but a CPU device, whose memory is the host's.
pub fn needs_pinning(device: &DeviceInfo) -> bool {
    device.device_type != "CPU"
}

/// A strategy name that is not one of pinstream's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy `{0}`: choose one of auto, register, nv-host, intel-usm, alloc-host-ptr, svm, mlock, pageable")]
pub struct UnknownStrategy(pub String);

impl FromStr for Strategy {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Strategy::ALL
            .into_iter()
            .find(|x| x.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| UnknownStrategy(s.to_string()))
    }
}

/// `--strategy`: `auto` or one forced strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StrategyChoice {
    /// Chosen by driver and extensions; see [`auto_order`].
    #[default]
    Auto,
    /// Exactly this one, or an error.
    Forced(Strategy),
}

impl StrategyChoice {
    /// The forced strategy, `None` for `auto` ([`crate::host::PinRequest::pinning`]'s terms).
    pub fn forced(self) -> Option<Strategy> {
        match self {
            StrategyChoice::Forced(s) => Some(s),
            StrategyChoice::Auto => None,
        }
    }
}

impl FromStr for StrategyChoice {
    type Err = UnknownStrategy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().eq_ignore_ascii_case("auto") {
            Ok(StrategyChoice::Auto)
        } else {
            s.parse().map(StrategyChoice::Forced)
        }
    }
}

/// The order `auto` tries strategies on `device`, with the reason for the first.
///
/// NVIDIA: `register`, else `nv-host` (both pinned with no VRAM cost; registration over
/// huge pages pins about 10x faster, see gpu-facts.md). AMD: `register` (ROCclr pins
/// `USE_HOST_PTR` memory in place). Intel: `intel-usm` (NEO puts `ALLOC_HOST_PTR` in VRAM).
/// Others: `register`, then down the list. The baselines (`mlock`, `pageable`) only on a CPU
/// device ([`Strategy::auto_may_try`]).
pub fn auto_order(device: &DeviceInfo) -> (Vec<Strategy>, AutoRule) {
    use Strategy::*;
    let (first, why): (Vec<Strategy>, &str) = match device.vendor_kind {
        Vendor::Nvidia => (vec![Register, NvHost], "NVIDIA driver: USE_HOST_PTR registration of huge-page memory is DMA-pinned with no VRAM cost and pins fastest; nv-host is the fallback"),
        Vendor::Amd => (vec![Register], "AMD driver: USE_HOST_PTR pins the program's memory in place (the cudaHostRegister equivalent) with no VRAM cost"),
        Vendor::Intel if device.has_extension("cl_intel_unified_shared_memory") => (vec![IntelUsm], "Intel driver: USM host allocations are host memory the GPU can DMA; ALLOC_HOST_PTR buffers live in VRAM on discrete GPUs"),
        Vendor::Pocl if !device.is_gpu() => (vec![Register], "PoCL CPU device: host and device share memory, nothing is pinned by any strategy; register keeps one contiguous range"),
        _ => (vec![Register], "no vendor-specific mechanism known for this driver: register (USE_HOST_PTR) first, then down the list"),
    };
    let mut order: Vec<Strategy> = first.clone();
    order.extend(Strategy::ALL.into_iter().filter(|s| !first.contains(s)));
    let one = std::slice::from_ref(device);
    order.retain(|s| s.offered_by(device).is_ok() && s.auto_may_try(one));
    let rule = AutoRule {
        rule: why,
        disagree: Vec::new(),
    };
    (order, rule)
}

/// The order `auto` tries strategies for memory that every device of one context uses, with
/// the reason.
///
/// The devices of a context share a platform and usually agree. When they would choose
/// differently (PoCL's CPU and CUDA devices in one context, say), the first device's order is
/// kept (a context adopted by [`Context::from_raw`](crate::backend::opencl::Context::from_raw)
/// lists its first GPU first), restricted to strategies every device offers, and the reason
/// names each device's own first choice.
pub fn auto_order_for(devices: &[DeviceInfo]) -> (Vec<Strategy>, AutoRule) {
    let Some(first) = devices.first() else {
        let none = AutoRule {
            rule: "no device",
            disagree: Vec::new(),
        };
        return (Vec::new(), none);
    };
    let (mut order, mut rule) = auto_order(first);
    order.retain(|s| s.offered_by_all(devices).is_ok() && s.auto_may_try(devices));
    let firsts: Vec<FirstChoice> = devices
        .iter()
        .map(|d| FirstChoice {
            index: d.index,
            name: d.name.clone(),
            first: auto_order(d).0.first().copied(),
        })
        .collect();
    if firsts.iter().any(|c| c.first != firsts[0].first) {
        rule.disagree = firsts;
    }
    (order, rule)
}

/// A device's own first choice under `auto`, where the devices of a context disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstChoice {
    /// The device's index.
    pub index: usize,
    /// The device's name.
    pub name: String,
    /// The strategy `auto` would take first on it alone (`None`: none it offers).
    pub first: Option<Strategy>,
}

/// Why `auto` orders the strategies as it does ([`super::auto_order`],
/// [`super::auto_order_for`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoRule {
    /// The rule for the (first) device's driver, e.g. why NVIDIA takes `register` first.
    pub rule: &'static str,
    /// Each device's own first choice, where the devices of a context disagree (then the
    /// first device's order is kept, restricted to strategies every device offers); empty
    /// where they agree.
    pub disagree: Vec<FirstChoice>,
}

impl fmt::Display for AutoRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule)?;
        if self.disagree.is_empty() {
            return Ok(());
        }
        let each: Vec<String> = self
            .disagree
            .iter()
            .map(|d| {
                let first = d.first.map_or("none", Strategy::name);
                format!("device {} ({}) would take {first}", d.index, d.name)
            })
            .collect();
        write!(f, "; the context's devices disagree ({}): the first device's order is kept, restricted to strategies every device offers", each.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{proptest, ProptestConfig};

    #[test]
    fn names_round_trip() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        }
        assert_eq!(
            "AUTO".parse::<StrategyChoice>().unwrap(),
            StrategyChoice::Auto
        );
        let e = "pinned".parse::<Strategy>().unwrap_err().to_string();
        assert!(
            e.contains("unknown strategy `pinned`") && e.contains("nv-host"),
            "{e}"
        );
    }

    #[test]
    fn a_context_uses_what_every_device_offers() {
        use crate::backend::opencl::host::pin::test_device;
        let nv = test_device(0, Vendor::Nvidia, "GPU", &["cl_nv_create_buffer"]);
        let plain = test_device(1, Vendor::Nvidia, "GPU", &[]);
        assert!(Strategy::NvHost
            .offered_by_all(std::slice::from_ref(&nv))
            .is_ok());
        let e = Strategy::NvHost
            .offered_by_all(&[nv.clone(), plain.clone()])
            .unwrap_err();
        assert!(e.contains("device 1"), "{e}");
        let (order, why) = auto_order_for(&[nv.clone(), plain]);
        assert_eq!(order.first(), Some(&Strategy::Register));
        assert!(!order.contains(&Strategy::NvHost));
        assert!(why.disagree.is_empty(), "{why}");
        let intel = test_device(2, Vendor::Intel, "GPU", &["cl_intel_unified_shared_memory"]);
        let (order, why) = auto_order_for(&[nv, intel]);
        assert_eq!(order.first(), Some(&Strategy::Register));
        let firsts: Vec<_> = why.disagree.iter().map(|c| (c.index, c.first)).collect();
        assert_eq!(
            firsts,
            [(0, Some(Strategy::Register)), (2, Some(Strategy::IntelUsm))]
        );
        assert!(
            why.to_string()
                .contains("device 2 (dev2) would take intel-usm"),
            "{why}"
        );
    }

    #[test]
    fn auto_tries_baselines_only_where_nothing_is_pinned() {
        use crate::backend::opencl::host::pin::test_device;
        use Strategy::*;
        let gpu = test_device(0, Vendor::Nvidia, "GPU", &["cl_nv_create_buffer"]);
        let cpu = test_device(1, Vendor::Pocl, "CPU", &[]);
        assert_eq!(auto_order(&gpu).0, vec![Register, NvHost, AllocHostPtr]);
        assert_eq!(
            auto_order(&cpu).0,
            vec![Register, AllocHostPtr, Mlock, Pageable]
        );
        // A context with a GPU among CPU devices: pinned or nothing.
        let (order, _) = auto_order_for(&[cpu.clone(), gpu.clone()]);
        assert!(order.iter().all(|s| s.driver_pinned()), "{order:?}");
        assert!(!Mlock.auto_may_try(&[cpu.clone(), gpu]));
        assert!(Pageable.auto_may_try(&[cpu]));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        #[test]
        fn parse_never_panics(s in "\\PC{0,16}") {
            let _ = s.parse::<StrategyChoice>();
        }
    }
}
