//! Device memory in use, measured: NVML on NVIDIA, `CL_DEVICE_GLOBAL_FREE_MEMORY_AMD` on AMD,
//! and "unknown" elsewhere, never guessed. Neutral: each API's probe is made by that API
//! (OpenCL's `VramProbe::new` lives in `backend::opencl::vram`, which adds AMD's counter).

use nvml_wrapper::Nvml;

/// The library `Nvml::init` loads (nvml-wrapper's names).
const NVML_LIB: &str = if cfg!(windows) {
    "nvml.dll"
} else {
    "libnvidia-ml.so.1"
};
use serde::Serialize;

/// Where VRAM figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum VramSource {
    /// NVIDIA Management Library, device memory used.
    Nvml,
    /// AMD's free-memory device query.
    AmdFreeMemory,
    /// Vulkan's `VK_EXT_memory_budget`: this process's use of the device-local heaps.
    VulkanBudget,
    /// No counter on this driver.
    Unknown,
}

impl VramSource {
    /// How reports name the source.
    pub fn describe(self) -> &'static str {
        match self {
            VramSource::Nvml => "NVML (device memory used)",
            VramSource::AmdFreeMemory => "CL_DEVICE_GLOBAL_FREE_MEMORY_AMD",
            VramSource::VulkanBudget => {
                "VK_EXT_memory_budget (this process's use of device-local memory)"
            }
            VramSource::Unknown => "unknown: this driver has no counter",
        }
    }
}

/// Reads the device memory in use by everyone on one device.
pub struct VramProbe {
    nvml: Option<(Nvml, u32)>,
    /// AMD's free-memory query, turned into memory in use (an OpenCL device on AMD's driver).
    amd: Option<Counter>,
    /// A Vulkan device's budget query ([`Self::vulkan_budget`]).
    budget: Option<Counter>,
    note: Option<String>,
}

/// A query of device memory in use, in bytes.
pub(crate) type Counter = Box<dyn Fn() -> Option<u64> + Send + Sync>;

impl VramProbe {
    /// A probe that reads AMD's counter through `amd` (where given), and NVML's for the NVIDIA
    /// device at `nvidia` (its PCI address, where known, and name), where given.
    pub(crate) fn with(nvidia: Option<(Option<&str>, &str)>, amd: Option<Counter>) -> Self {
        let mut probe = VramProbe {
            nvml: None,
            amd,
            budget: None,
            note: None,
        };
        if let Some((pci_address, name)) = nvidia {
            probe.find_nvml(pci_address, name);
        }
        probe
    }

    /// No counter, for the reason `note` gives.
    pub fn none(note: &str) -> Self {
        VramProbe {
            nvml: None,
            amd: None,
            budget: None,
            note: Some(note.into()),
        }
    }

    /// Finds the counter for the NVIDIA GPU at `pci_address` named `name` (a CUDA device).
    pub fn nvidia(pci_address: &str, name: &str) -> Self {
        let mut probe = VramProbe {
            nvml: None,
            amd: None,
            budget: None,
            note: None,
        };
        probe.find_nvml(Some(pci_address), name);
        probe
    }

    /// Reads a Vulkan device's `VK_EXT_memory_budget` through `read` (where NVML does not
    /// know the device).
    pub fn vulkan_budget(read: impl Fn() -> Option<u64> + Send + Sync + 'static) -> Self {
        VramProbe {
            nvml: None,
            amd: None,
            budget: Some(Box::new(read)),
            note: None,
        }
    }

    fn find_nvml(&mut self, pci_address: Option<&str>, name: &str) {
        match Nvml::init() {
            Ok(nvml) => match nvml_index(&nvml, pci_address, name) {
                Ok((i, how)) => {
                    self.note = Some(how);
                    self.nvml = Some((nvml, i));
                }
                Err(why) => self.note = Some(why),
            },
            Err(e) => self.note = Some(format!("NVML ({NVML_LIB}) did not initialise: {e}")),
        }
    }

    /// The source of [`Self::used`].
    pub fn source(&self) -> VramSource {
        if self.nvml.is_some() {
            VramSource::Nvml
        } else if self.budget.is_some() {
            VramSource::VulkanBudget
        } else if self.amd.as_ref().and_then(|read| read()).is_some() {
            VramSource::AmdFreeMemory
        } else {
            VramSource::Unknown
        }
    }

    /// Why a counter that should exist is missing, if it is.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// Bytes of device memory in use now, where a counter exists.
    pub fn used(&self) -> Option<u64> {
        if let Some((nvml, i)) = &self.nvml {
            return nvml
                .device_by_index(*i)
                .ok()?
                .memory_info()
                .ok()
                .map(|m| m.used);
        }
        if let Some(read) = &self.budget {
            return read();
        }
        self.amd.as_ref().and_then(|read| read())
    }
}

/// Finds the NVML device of a device: by PCI address, else by a name only one device has.
/// Returns the index and how it matched, or why none did.
fn nvml_index(nvml: &Nvml, pci_address: Option<&str>, name: &str) -> Result<(u32, String), String> {
    let count = nvml
        .device_count()
        .map_err(|e| format!("NVML cannot count devices: {e}"))?;
    let mut seen = Vec::new();
    for i in 0..count {
        let Ok(d) = nvml.device_by_index(i) else {
            continue;
        };
        let bus = d.pci_info().map(|p| p.bus_id).unwrap_or_default();
        if pci_address.is_some_and(|a| same_pci(&bus, a)) {
            return Ok((i, format!("matched by PCI address {bus}")));
        }
        seen.push((i, d.name().unwrap_or_default(), bus));
    }
    let named: Vec<_> = seen.iter().filter(|(_, n, _)| n == name).collect();
    if let [(i, _, bus)] = named.as_slice() {
        return Ok((
            *i,
            format!("matched by name: the only {name} NVML lists ({bus})"),
        ));
    }
    let list: Vec<String> = seen.iter().map(|(_, n, b)| format!("{n} at {b}")).collect();
    Err(format!(
        "NVML lists no device matching this device (PCI {}; NVML has {})",
        pci_address.unwrap_or("unknown"),
        list.join(", ")
    ))
}

pub use super::adapter::same_pci;

impl VramProbe {
    /// Runs `f` while reading device memory in use every 10 ms; returns `f`'s result and the
    /// highest reading (where a counter exists).
    pub fn peak_during<T>(&self, f: impl FnOnce() -> T) -> (T, Option<u64>) {
        if self.source() == VramSource::Unknown {
            return (f(), None);
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let peak = std::sync::atomic::AtomicU64::new(0);
        let out = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Some(u) = self.used() {
                        peak.fetch_max(u, std::sync::atomic::Ordering::Relaxed);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
            let out = f();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            out
        });
        let p = peak.into_inner();
        (out, (p > 0).then_some(p))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pci_forms() {
        assert!(super::same_pci("00000000:3B:00.0", "0000:3b:00.0"));
        assert!(!super::same_pci("00000000:3B:00.0", "00000000:3c:00.0"));
    }
}
