//! What a region's pinning amounts to: whether the driver pinned it ([`PinState`]) and what
//! it cost in VRAM ([`VramCost`]), each with its basis, never assumed.

use super::Strategy;
use crate::backend::opencl::{DeviceId, DeviceInfo, Vendor};
pub use crate::backend::pinning::PinState;
use crate::vram::{VramProbe, VramSource};
use serde::Serialize;
use std::sync::{Arc, Mutex};

/// The vendor whose driver (not only hardware) runs `d`, where pinstream has a basis for it:
/// NVIDIA's own OpenCL platform, AMD's ROCclr platform, PoCL's CUDA device. The same hardware
/// under another driver (Mesa's rusticl or Clover, PoCL's other devices) gets no basis.
pub(super) fn driver_of(d: &DeviceInfo) -> Option<Vendor> {
    let platform = d.platform_name.to_lowercase();
    match d.vendor_kind {
        Vendor::Nvidia if platform.starts_with("nvidia cuda") => Some(Vendor::Nvidia),
        Vendor::Amd if platform.starts_with("amd accelerated parallel processing") => {
            Some(Vendor::Amd)
        }
        Vendor::Intel | Vendor::Pocl => Some(d.vendor_kind),
        _ => None,
    }
}

/// True for PoCL's CUDA device (the one PoCL device whose USE_HOST_PTR pins).
fn pocl_cuda(d: &DeviceInfo) -> bool {
    d.vendor_kind == Vendor::Pocl && d.vendor.to_lowercase().contains("nvidia")
}

/// Why a strategy pins on a vendor's driver, where pinstream knows it does.
fn basis(s: Strategy, v: Vendor) -> Option<&'static str> {
    use Strategy::*;
    Some(match (s, v) {
        (Register, Vendor::Nvidia) => "NVIDIA: never-mapped USE_HOST_PTR registration pins with no VRAM cost (measured on the H200)",
        (NvHost, Vendor::Nvidia) => "NVIDIA: clCreateBufferNV host memory with CL_MEM_PINNED_NV (measured on the H200)",
        (AllocHostPtr | Svm, Vendor::Nvidia) => "NVIDIA: pinned, and charged as much VRAM (measured on the H200)",
        (Register, Vendor::Amd) => "AMD ROCclr: USE_HOST_PTR pins the memory in place (driver source; not measured)",
        (AllocHostPtr, Vendor::Amd) => "AMD ROCclr: ALLOC_HOST_PTR is pinned system memory (driver source; not measured)",
        (Register, Vendor::Pocl) => "PoCL's CUDA device registers USE_HOST_PTR memory with cuMemHostRegister (driver source; not measured)",
        (IntelUsm, Vendor::Intel | Vendor::Pocl) => "USM host allocation: host memory the device can DMA by the extension's contract",
        _ => return None,
    })
}

/// The pin state of memory made by `s` for `devices`, with its basis.
pub(crate) fn pin_state(s: Strategy, devices: &[DeviceInfo]) -> (PinState, String) {
    let dma: Vec<&DeviceInfo> = devices
        .iter()
        .filter(|d| super::strategy::needs_pinning(d))
        .collect();
    if dma.is_empty() {
        return (
            PinState::NotNeeded,
            "CPU devices only: host memory is the device's memory, nothing needs pinning".into(),
        );
    }
    if !s.driver_pinned() {
        let why = match s {
            Strategy::Mlock => "mlock keeps the pages resident but the driver does not know them: transfers run at pageable speed",
            _ => "plain pageable memory: the driver stages every transfer",
        };
        return (PinState::NotPinned, why.into());
    }
    let mut notes: Vec<&str> = Vec::new();
    for d in dma {
        let known = driver_of(d).and_then(|v| basis(s, v)).filter(|_| {
            !(s == Strategy::Register && d.vendor_kind == Vendor::Pocl) || pocl_cuda(d)
        });
        match known {
            Some(b) if !notes.contains(&b) => notes.push(b),
            Some(_) => {}
            None => {
                return (
                    PinState::Unknown,
                    format!("{s} on device {} ({}, {}): the driver accepted it, but pinstream has no measurement or driver source showing that this driver pins it", d.index, d.name, d.platform_name),
                )
            }
        }
    }
    (PinState::Pinned, notes.join("; "))
}

/// The VRAM a region cost when it was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VramCost {
    /// Not asked for (see `measure_vram` in the options).
    NotMeasured,
    /// Device memory in use after pinning minus before, summed over the context's devices.
    Measured {
        /// The difference in bytes (may be negative when other work freed memory meanwhile).
        bytes: i64,
        /// The counter, and what else the difference may include.
        source: String,
    },
    /// No counter could measure it.
    Unknown {
        /// Why not.
        why: String,
    },
}

/// One probe per device for the whole process: NVML starts once, not at every region.
fn probe_for(device: &DeviceInfo) -> Arc<VramProbe> {
    static PROBES: Mutex<Vec<(DeviceId, Arc<VramProbe>)>> = Mutex::new(Vec::new());
    let mut probes = crate::sync::lock(&PROBES);
    if let Some((_, p)) = probes.iter().find(|(id, _)| *id == device.id) {
        return p.clone();
    }
    let p = Arc::new(VramProbe::new(device));
    probes.push((device.id, p.clone()));
    p
}

/// Runs `make` and measures the device memory in use on every device before and after.
pub(crate) fn measure<T>(devices: &[DeviceInfo], make: impl FnOnce() -> T) -> (T, VramCost) {
    let probes: Vec<Arc<VramProbe>> = devices.iter().map(probe_for).collect();
    let blind = devices
        .iter()
        .zip(&probes)
        .find(|(_, p)| p.source() == VramSource::Unknown);
    if let Some((d, p)) = blind {
        let note = p.note().map(|n| format!(" ({n})")).unwrap_or_default();
        let why = format!(
            "device {} ({}): this driver has no VRAM counter{note}",
            d.index, d.name
        );
        return (make(), VramCost::Unknown { why });
    }
    let read = || {
        probes
            .iter()
            .map(|p| p.used())
            .collect::<Option<Vec<u64>>>()
    };
    let before = read();
    let out = make();
    let cost = match (before, read()) {
        (Some(b), Some(a)) => VramCost::Measured {
            bytes: a.iter().zip(&b).map(|(a, b)| *a as i64 - *b as i64).sum(),
            source: format!(
                "{}, read before and after pinning; other allocations on the device meanwhile count too",
                probes[0].source().describe()
            ),
        },
        _ => VramCost::Unknown {
            why: "the device memory counter could not be read".into(),
        },
    };
    (out, cost)
}

/// A device description for unit tests (no OpenCL call).
#[cfg(test)]
pub(crate) fn test_device(index: usize, vendor: Vendor, kind: &str, exts: &[&str]) -> DeviceInfo {
    use crate::backend::opencl::PlatformId;
    DeviceInfo {
        index,
        platform_index: 0,
        platform_name: match vendor {
            Vendor::Nvidia => "NVIDIA CUDA",
            Vendor::Amd => "AMD Accelerated Parallel Processing",
            Vendor::Intel => "Intel(R) OpenCL Graphics",
            Vendor::Pocl => "Portable Computing Language",
            Vendor::Other => "test",
        }
        .into(),
        platform_version: String::new(),
        name: format!("dev{index}"),
        vendor: String::new(),
        vendor_kind: vendor,
        driver_version: String::new(),
        version: String::new(),
        device_type: kind.into(),
        global_mem: 1 << 34,
        max_alloc: 1 << 32,
        copy_engines: None,
        pci_address: None,
        svm_coarse: false,
        extensions: Vec::new(),
        all_extensions: exts.iter().map(|e| e.to_string()).collect(),
        platform: PlatformId(std::ptr::null_mut()),
        id: DeviceId(index as _),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_is_claimed_only_where_known() {
        let nv = test_device(0, Vendor::Nvidia, "GPU", &[]);
        let intel = test_device(1, Vendor::Intel, "GPU", &[]);
        let cpu = test_device(2, Vendor::Pocl, "CPU", &[]);
        let state = |s, d: &[DeviceInfo]| pin_state(s, d).0;
        assert_eq!(
            state(Strategy::Register, std::slice::from_ref(&nv)),
            PinState::Pinned
        );
        assert_eq!(
            state(Strategy::Mlock, std::slice::from_ref(&nv)),
            PinState::NotPinned
        );
        assert_eq!(
            state(Strategy::Pageable, std::slice::from_ref(&nv)),
            PinState::NotPinned
        );
        assert_eq!(
            state(Strategy::Register, std::slice::from_ref(&intel)),
            PinState::Unknown
        );
        assert_eq!(state(Strategy::IntelUsm, &[intel]), PinState::Pinned);
        assert_eq!(
            state(Strategy::Register, std::slice::from_ref(&cpu)),
            PinState::NotNeeded
        );
        // A CPU device beside a GPU does not change the GPU's answer.
        assert_eq!(
            state(Strategy::Register, &[nv.clone(), cpu]),
            PinState::Pinned
        );
        // The same hardware under another driver (Mesa's rusticl) has no basis: not claimed.
        for v in [Vendor::Nvidia, Vendor::Amd] {
            let rusticl = DeviceInfo {
                platform_name: "rusticl".into(),
                ..test_device(3, v, "GPU", &[])
            };
            assert_eq!(state(Strategy::Register, &[rusticl]), PinState::Unknown);
        }
        // PoCL's GPU devices: only its CUDA device registers with cuMemHostRegister.
        let pocl_gpu = |vendor: &str| DeviceInfo {
            vendor: vendor.into(),
            ..test_device(4, Vendor::Pocl, "GPU", &[])
        };
        assert_eq!(
            state(Strategy::Register, &[pocl_gpu("NVIDIA Corporation")]),
            PinState::Pinned
        );
        assert_eq!(
            state(Strategy::Register, &[pocl_gpu("Intel")]),
            PinState::Unknown
        );
    }

    #[test]
    fn measuring_without_a_counter_says_why() {
        let cpu = test_device(0, Vendor::Pocl, "CPU", &[]);
        let (v, cost) = measure(&[cpu], || 5);
        assert_eq!(v, 5);
        let VramCost::Unknown { why } = cost else {
            panic!("{cost:?}")
        };
        assert!(why.contains("no VRAM counter"), "{why}");
    }
}
