//! Finding devices, as wgpu-hal's Instance → Adapter: what every API says of each of its
//! devices ([`AdapterInfo`]), how a caller names one ([`DeviceChoice`]: the default, an index in
//! the API's list, or a PCI bus id) and the choice made over a list ([`choose`]). A leaf module:
//! plain data and pure functions, tested here once for every API.

use serde::Serialize;

/// What kind of processor a device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DeviceKind {
    /// A GPU.
    Gpu,
    /// A CPU (its buffers are the process's own memory).
    Cpu,
    /// An accelerator or anything else.
    Other,
}

/// Who makes a device's driver: the family that decides how memory is best pinned, and
/// whether CUDA can drive the same GPU (only NVIDIA's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA's proprietary driver.
    Nvidia,
    /// AMD (ROCm or legacy).
    Amd,
    /// Intel (NEO or CPU runtime).
    Intel,
    /// Portable Computing Language (CPU and other devices).
    Pocl,
    /// Anything else (Mesa's lavapipe, pinstream's empty API).
    Other,
}

/// What an API says of one of its devices, before it is opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterInfo {
    /// The API: `OpenCL`, `CUDA`.
    pub api: &'static str,
    /// Index in the API's list (OpenCL: across every platform; CUDA: the ordinal).
    pub index: usize,
    /// Device name.
    pub name: String,
    /// Who drives it: the OpenCL platform's name, `CUDA`.
    pub driver: String,
    /// PCI bus id, `0000:3b:00.0` form, where the driver tells.
    pub pci_address: Option<String>,
    /// Global memory, bytes.
    pub memory: u64,
    /// The largest single allocation, bytes.
    pub max_alloc: u64,
    /// GPU, CPU or other.
    pub kind: DeviceKind,
    /// Who makes its driver (`vendor_kind` in JSON, as OpenCL's description names the same
    /// family: its `vendor` is the driver's own string).
    #[serde(rename = "vendor_kind")]
    pub vendor: Vendor,
}

impl AdapterInfo {
    /// `INDEX: NAME`, and the driver where it is not the API's only one, for reports.
    pub fn label(&self) -> String {
        format!("{}: {} ({})", self.index, self.name, self.driver)
    }
}

/// Which device a caller wants.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// The first GPU, else the first device. (The loader's order is no preference: on the
    /// H200 machine PoCL's CPU device comes before the NVIDIA GPU.)
    #[default]
    Default,
    /// The device at this index of the API's list.
    Index(usize),
    /// The device at this PCI bus id (any case, with or without the domain).
    Pci(String),
}

impl std::str::FromStr for DeviceChoice {
    type Err = std::num::ParseIntError;

    /// A whole number is an index; anything with a `:` a PCI bus id.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains(':') {
            Ok(DeviceChoice::Pci(s.to_string()))
        } else {
            s.trim().parse().map(DeviceChoice::Index)
        }
    }
}

/// A choice that names no device of the list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChoiceError {
    /// The API lists no device at all.
    #[error("{api} lists no device")]
    NoDevice {
        /// The API.
        api: &'static str,
    },
    /// No device has the index or bus id asked for.
    #[error("{api} has no device {asked}; it has {}", .listed.join(", "))]
    NotListed {
        /// The API.
        api: &'static str,
        /// The index or bus id asked for.
        asked: String,
        /// Each listed device's label.
        listed: Vec<String>,
    },
}

/// The position in `list` of the device `choice` names.
pub fn choose(
    api: &'static str,
    list: &[AdapterInfo],
    choice: &DeviceChoice,
) -> Result<usize, ChoiceError> {
    if list.is_empty() {
        return Err(ChoiceError::NoDevice { api });
    }
    let found = match choice {
        DeviceChoice::Default => list
            .iter()
            .position(|a| a.kind == DeviceKind::Gpu)
            .or(Some(0)),
        DeviceChoice::Index(i) => list.iter().position(|a| a.index == *i),
        DeviceChoice::Pci(bus) => list
            .iter()
            .position(|a| a.pci_address.as_deref().is_some_and(|p| same_pci(p, bus))),
    };
    found.ok_or_else(|| ChoiceError::NotListed {
        api,
        asked: match choice {
            DeviceChoice::Index(i) => i.to_string(),
            DeviceChoice::Pci(bus) => format!("at PCI {bus}"),
            DeviceChoice::Default => unreachable!("the default always finds a device"),
        },
        listed: list.iter().map(AdapterInfo::label).collect(),
    })
}

/// True when two PCI bus ids name the same device: case-insensitive, the domain's width
/// free (`0000:3b:00.0` = `00000000:3B:00.0`) and optional (`3b:00.0`).
pub fn same_pci(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim_matches(char::from(0)).trim().to_ascii_lowercase();
        let s = if s.matches(':').count() == 1 {
            format!("0:{s}")
        } else {
            s
        };
        match s.split_once(':') {
            Some((dom, rest)) => format!("{:x}:{rest}", u64::from_str_radix(dom, 16).unwrap_or(0)),
            None => s,
        }
    };
    norm(a) == norm(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(index: usize, kind: DeviceKind, pci: Option<&str>) -> AdapterInfo {
        AdapterInfo {
            api: "OpenCL",
            index,
            name: format!("dev{index}"),
            driver: "d".into(),
            pci_address: pci.map(str::to_string),
            memory: 1 << 30,
            max_alloc: 1 << 28,
            kind,
            vendor: Vendor::Other,
        }
    }

    #[test]
    fn the_default_is_the_first_gpu_else_the_first_device() {
        let l = [
            dev(0, DeviceKind::Cpu, None),
            dev(1, DeviceKind::Gpu, Some("0000:3b:00.0")),
        ];
        assert_eq!(choose("OpenCL", &l, &DeviceChoice::Default), Ok(1));
        assert_eq!(choose("OpenCL", &l[..1], &DeviceChoice::Default), Ok(0));
    }

    #[test]
    fn an_index_or_a_bus_id_names_one_device() {
        let l = [
            dev(0, DeviceKind::Cpu, None),
            dev(1, DeviceKind::Gpu, Some("0000:3b:00.0")),
        ];
        assert_eq!(choose("OpenCL", &l, &DeviceChoice::Index(0)), Ok(0));
        for bus in ["0000:3b:00.0", "3B:00.0", "00000000:3b:00.0"] {
            assert_eq!(choose("OpenCL", &l, &bus.parse().unwrap()), Ok(1), "{bus}");
        }
    }

    #[test]
    fn a_choice_that_names_nothing_lists_what_there_is() {
        let l = [dev(0, DeviceKind::Cpu, None)];
        let e = choose("OpenCL", &l, &DeviceChoice::Index(4)).unwrap_err();
        assert_eq!(e.to_string(), "OpenCL has no device 4; it has 0: dev0 (d)");
        let e = choose("CUDA", &[], &DeviceChoice::Default).unwrap_err();
        assert_eq!(e, ChoiceError::NoDevice { api: "CUDA" });
        assert!("x".parse::<DeviceChoice>().is_err());
    }
}
