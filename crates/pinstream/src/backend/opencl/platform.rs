//! Platform and device discovery: what is installed, what each device can do.

use super::error::{Call, ClError};
use crate::backend::details::DriverDetails;
use cl3::types::{cl_device_id, cl_platform_id};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// `CL_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT_NV`: copy engines (`cl_nv_device_attribute_query`).
const CL_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT_NV: u32 = 0x4007;
/// `CL_DEVICE_PCI_BUS_ID_NV`.
const CL_DEVICE_PCI_BUS_ID_NV: u32 = 0x4008;
/// `CL_DEVICE_PCI_SLOT_ID_NV`.
const CL_DEVICE_PCI_SLOT_ID_NV: u32 = 0x4009;
/// `CL_DEVICE_PCI_DOMAIN_ID_NV`.
const CL_DEVICE_PCI_DOMAIN_ID_NV: u32 = 0x400A;

/// Extensions that decide which pinning strategies a device offers.
pub const RELEVANT_EXTENSIONS: &[&str] = &[
    "cl_nv_create_buffer",
    "cl_nv_device_attribute_query",
    "cl_intel_unified_shared_memory",
    "cl_intel_mem_force_host_memory",
    "cl_amd_device_attribute_query",
    "cl_arm_import_memory",
    "cl_pocl_pinned_buffers",
    "cl_khr_external_memory",
];

/// A platform handle. OpenCL handles may be used from any thread (OpenCL 1.1 onwards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformId(pub(crate) cl_platform_id);
// SAFETY: platform ids are plain identifiers that OpenCL allows on any thread.
unsafe impl Send for PlatformId {}
// SAFETY: as above; no interior state on the Rust side.
unsafe impl Sync for PlatformId {}

/// A device handle (root devices only: never released).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceId(pub(crate) cl_device_id);
// SAFETY: root device ids are plain identifiers that OpenCL allows on any thread.
unsafe impl Send for DeviceId {}
// SAFETY: as above.
unsafe impl Sync for DeviceId {}

/// The vendor family, which decides the automatic strategy (the API-neutral one every
/// adapter says, [`crate::backend::adapter::AdapterInfo::vendor`]).
pub use crate::backend::adapter::Vendor;

/// Everything pinstream needs to know about one device.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    /// Index across all platforms, as `--device` takes it.
    pub index: usize,
    /// Index of the platform in the loader's list.
    pub platform_index: usize,
    /// Platform name, e.g. `NVIDIA CUDA`.
    pub platform_name: String,
    /// Platform version string.
    pub platform_version: String,
    /// Device name.
    pub name: String,
    /// Device vendor string.
    pub vendor: String,
    /// Vendor family.
    pub vendor_kind: Vendor,
    /// Driver version.
    pub driver_version: String,
    /// `CL_DEVICE_VERSION`.
    pub version: String,
    /// `GPU`, `CPU`, `ACCELERATOR` or `OTHER`.
    pub device_type: String,
    /// `CL_DEVICE_GLOBAL_MEM_SIZE` in bytes.
    pub global_mem: u64,
    /// `CL_DEVICE_MAX_MEM_ALLOC_SIZE` in bytes.
    pub max_alloc: u64,
    /// Copy engines (`CL_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT_NV`) where the driver tells.
    pub copy_engines: Option<u32>,
    /// PCI address `domain:bus:slot` where the driver tells (NVIDIA).
    pub pci_address: Option<String>,
    /// Coarse-grained SVM buffers supported by the device and callable through the loader
    /// (Wine's `opencl.dll` exports OpenCL 1.x entry points only, so not there).
    pub svm_coarse: bool,
    /// The extensions from [`RELEVANT_EXTENSIONS`] this device has.
    pub extensions: Vec<String>,
    /// Every extension the device reports.
    #[serde(skip)]
    pub all_extensions: Vec<String>,
    /// Raw platform handle.
    #[serde(skip)]
    pub platform: PlatformId,
    /// Raw device handle.
    #[serde(skip)]
    pub id: DeviceId,
}

/// OpenCL's description of a device, as reports and listings keep it.
impl DriverDetails for DeviceInfo {
    fn driver_version(&self) -> &str {
        &self.driver_version
    }
}

impl DeviceInfo {
    /// True when the device reports extension `name`.
    pub fn has_extension(&self, name: &str) -> bool {
        self.all_extensions.iter().any(|e| e == name)
    }

    /// True for GPU devices.
    pub fn is_gpu(&self) -> bool {
        self.device_type == "GPU"
    }

    /// `CL_DEVICE_HOST_UNIFIED_MEMORY`, asked of the driver: true where the device shares the
    /// host's memory (integrated GPUs, CPU devices); false where the driver says no or cannot
    /// tell.
    pub fn host_unified_memory(&self) -> bool {
        device_u64(self.id.0, cl3::device::CL_DEVICE_HOST_UNIFIED_MEMORY).is_ok_and(|v| v != 0)
    }
}

/// Why no device could be listed, each with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// No OpenCL loader (`libOpenCL.so.1`; `OpenCL.dll` on Windows) could be loaded.
    #[error("no OpenCL loader ({OPENCL_LOADER}) found: {INSTALL_LOADER}{hint}")]
    NoLoader {
        /// Extra advice, e.g. about an unregistered NVIDIA driver.
        hint: String,
    },
    /// The loader found no platform.
    #[error("the OpenCL loader lists no platform: install a driver, e.g. `apt-get install pocl-opencl-icd` for the CPU, or your GPU vendor's OpenCL driver{hint}")]
    NoPlatform {
        /// Extra advice, e.g. about an unregistered NVIDIA driver.
        hint: String,
    },
    /// An OpenCL query failed.
    #[error(transparent)]
    Cl(#[from] ClError),
}

fn decode_string(bytes: Vec<u8>) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).trim().to_string()
}

fn decode_u64(bytes: &[u8]) -> u64 {
    let mut raw = [0u8; 8];
    let n = bytes.len().min(8);
    raw[..n].copy_from_slice(&bytes[..n]);
    u64::from_ne_bytes(raw)
}

fn platform_string(p: cl_platform_id, param: u32, call: &'static str) -> Result<String, ClError> {
    cl3::platform::get_platform_data(p, param)
        .map(decode_string)
        .call(call)
}

fn device_bytes(d: cl_device_id, param: u32) -> Result<Vec<u8>, ClError> {
    cl3::device::get_device_data(d, param).call("clGetDeviceInfo")
}

fn device_string(d: cl_device_id, param: u32) -> Result<String, ClError> {
    device_bytes(d, param).map(decode_string)
}

fn device_u64(d: cl_device_id, param: u32) -> Result<u64, ClError> {
    device_bytes(d, param).map(|b| decode_u64(&b))
}

/// Lists the platforms, or says what to install.
pub fn platforms() -> Result<Vec<PlatformId>, DiscoveryError> {
    if cl3::load_library().is_err() {
        return Err(DiscoveryError::NoLoader {
            hint: icd_hint_suffix(),
        });
    }
    match cl3::platform::get_platform_ids() {
        Ok(ids) if !ids.is_empty() => Ok(ids.into_iter().map(PlatformId).collect()),
        Ok(_) | Err(-1001) => Err(DiscoveryError::NoPlatform {
            hint: icd_hint_suffix(),
        }),
        Err(code) => Err(ClError::new("clGetPlatformIDs", code).into()),
    }
}

/// The name of every platform the loader lists (to say why one lists no device).
pub fn platform_names() -> Result<Vec<String>, DiscoveryError> {
    let _one_at_a_time = crate::sync::lock(&DISCOVERY);
    platforms()?
        .iter()
        .map(|p| {
            platform_string(p.0, cl3::platform::CL_PLATFORM_NAME, "clGetPlatformInfo")
                .map_err(DiscoveryError::from)
        })
        .collect()
}

/// The ICD loader's first enumeration is not safe to run from several threads at once
/// (seen with ocl-icd + PoCL: a concurrent caller got an empty device list).
static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Lists every device of every platform, numbered as `--device` takes them.
pub fn devices() -> Result<Vec<DeviceInfo>, DiscoveryError> {
    let _one_at_a_time = crate::sync::lock(&DISCOVERY);
    let mut out = Vec::new();
    for (pi, p) in platforms()?.into_iter().enumerate() {
        let ids = match cl3::device::get_device_ids(p.0, cl3::device::CL_DEVICE_TYPE_ALL) {
            Ok(ids) => ids,
            Err(-1) => Vec::new(), // CL_DEVICE_NOT_FOUND: a platform with no device
            Err(code) => return Err(ClError::new("clGetDeviceIDs", code).into()),
        };
        for id in ids {
            out.push(device_info(out.len(), pi, p, id)?);
        }
    }
    Ok(out)
}

fn vendor_kind(platform: &str, vendor: &str) -> Vendor {
    let text = format!("{platform} {vendor}").to_lowercase();
    if text.contains("portable computing language") || text.contains("pocl") {
        Vendor::Pocl
    } else if text.contains("nvidia") {
        Vendor::Nvidia
    } else if text.contains("amd") || text.contains("advanced micro devices") {
        Vendor::Amd
    } else if text.contains("intel") {
        Vendor::Intel
    } else {
        Vendor::Other
    }
}

fn device_type_name(bits: u64) -> &'static str {
    use cl3::device::{CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU};
    if bits & CL_DEVICE_TYPE_GPU != 0 {
        "GPU"
    } else if bits & CL_DEVICE_TYPE_CPU != 0 {
        "CPU"
    } else if bits & CL_DEVICE_TYPE_ACCELERATOR != 0 {
        "ACCELERATOR"
    } else {
        "OTHER"
    }
}

fn device_info(
    index: usize,
    platform_index: usize,
    p: PlatformId,
    d: cl_device_id,
) -> Result<DeviceInfo, ClError> {
    use cl3::device::*;
    let platform_name = platform_string(p.0, cl3::platform::CL_PLATFORM_NAME, "clGetPlatformInfo")?;
    let vendor = device_string(d, CL_DEVICE_VENDOR)?;
    let all_extensions: Vec<String> = device_string(d, CL_DEVICE_EXTENSIONS)?
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let has = |e: &str| all_extensions.iter().any(|x| x == e);
    let nv_query = has("cl_nv_device_attribute_query");
    let copy_engines = nv_query
        .then(|| device_u64(d, CL_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT_NV).ok())
        .flatten()
        .map(|v| v as u32);
    let pci_address = nv_query.then(|| nv_pci_address(d)).flatten();
    let svm_caps = device_u64(d, CL_DEVICE_SVM_CAPABILITIES).unwrap_or(0);
    Ok(DeviceInfo {
        index,
        platform_index,
        platform_version: platform_string(
            p.0,
            cl3::platform::CL_PLATFORM_VERSION,
            "clGetPlatformInfo",
        )?,
        name: device_string(d, CL_DEVICE_NAME)?,
        vendor_kind: vendor_kind(&platform_name, &vendor),
        platform_name,
        vendor,
        driver_version: device_string(d, CL_DRIVER_VERSION)?,
        version: device_string(d, CL_DEVICE_VERSION)?,
        device_type: device_type_name(device_u64(d, CL_DEVICE_TYPE)?).to_string(),
        global_mem: device_u64(d, CL_DEVICE_GLOBAL_MEM_SIZE)?,
        max_alloc: device_u64(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE)?,
        copy_engines,
        pci_address,
        svm_coarse: svm_caps & CL_DEVICE_SVM_COARSE_GRAIN_BUFFER != 0 && loader_has_svm(),
        extensions: RELEVANT_EXTENSIONS
            .iter()
            .filter(|e| has(e))
            .map(|e| e.to_string())
            .collect(),
        all_extensions,
        platform: p,
        id: DeviceId(d),
    })
}

/// Describes the device `d` (from a context the caller made), numbered as [`devices`]
/// numbers it; a sub-device gets its root device's number and its own properties.
pub(crate) fn describe_device(d: cl_device_id) -> Result<DeviceInfo, ClError> {
    let _one_at_a_time = crate::sync::lock(&DISCOVERY);
    let platform = device_u64(d, cl3::device::CL_DEVICE_PLATFORM)? as cl_platform_id;
    let root = root_device(d);
    let (mut index, mut platform_index) = (0, 0);
    for (pi, p) in cl3::platform::get_platform_ids()
        .call("clGetPlatformIDs")?
        .into_iter()
        .enumerate()
    {
        let ids =
            cl3::device::get_device_ids(p, cl3::device::CL_DEVICE_TYPE_ALL).unwrap_or_default();
        if p == platform {
            platform_index = pi;
            index += ids.iter().position(|&x| x == root).unwrap_or(0);
            break;
        }
        index += ids.len();
    }
    device_info(index, platform_index, PlatformId(platform), d)
}

/// The root device of `d` (itself unless it is a sub-device).
fn root_device(mut d: cl_device_id) -> cl_device_id {
    while let Ok(parent) = device_u64(d, cl3::device::CL_DEVICE_PARENT_DEVICE) {
        if parent == 0 {
            break;
        }
        d = parent as cl_device_id;
    }
    d
}

fn nv_pci_address(d: cl_device_id) -> Option<String> {
    let bus = device_u64(d, CL_DEVICE_PCI_BUS_ID_NV).ok()? as u32;
    let slot = device_u64(d, CL_DEVICE_PCI_SLOT_ID_NV).ok()? as u32;
    let domain = device_u64(d, CL_DEVICE_PCI_DOMAIN_ID_NV).unwrap_or(0) as u32;
    Some(nv_pci(domain, bus, slot))
}

/// The PCI address from NVIDIA's domain, bus and slot ids. NVIDIA reports the PCI device
/// number as the slot (the H200 at 0000:00:06.0 in nvidia-smi reports slot 6); a value above
/// 31 cannot be a device number, so it is read as lspci's packed dev.fn instead.
fn nv_pci(domain: u32, bus: u32, slot: u32) -> String {
    let (dev, func) = if slot < 32 {
        (slot, 0)
    } else {
        (slot >> 3, slot & 7)
    };
    format!("{domain:08x}:{bus:02x}:{dev:02x}.{func}")
}

#[cfg(test)]
mod pci_tests {
    #[test]
    fn nvidia_slot_is_the_device_number() {
        assert_eq!(super::nv_pci(0, 0, 6), "00000000:00:06.0");
        assert_eq!(super::nv_pci(0, 0x3b, 0), "00000000:3b:00.0");
        assert_eq!(super::nv_pci(1, 0x81, 0x31), "00000001:81:06.1");
    }
}

/// The device pinstream uses when none is named: the first GPU, else the first device.
///
/// The loader's order is not a preference: on the H200 machine PoCL's CPU device comes
/// before the NVIDIA GPU.
pub fn default_device(devices: &[DeviceInfo]) -> Option<&DeviceInfo> {
    devices
        .iter()
        .find(|d| d.is_gpu())
        .or_else(|| devices.first())
}

/// True when the loader exports `clSVMAlloc`. Wine's `opencl.dll` forwards only the OpenCL
/// 1.x entry points, so a device that reports SVM cannot use it there.
fn loader_has_svm() -> bool {
    // SAFETY: clSVMAlloc with a null context allocates nothing and returns NULL (ICD loaders
    // refuse it before any driver sees it); cl3 returns
    // DLOPEN_FUNCTION_NOT_AVAILABLE instead when the loader lacks the function.
    let probe = unsafe { cl3::memory::svm_alloc(std::ptr::null_mut(), 0, 0, 0) };
    probe != Err(cl3::error_codes::DLOPEN_FUNCTION_NOT_AVAILABLE)
}

/// The OpenCL loader cl3 loads (`OPENCL_DYLIB_PATH` overrides it).
#[cfg(not(windows))]
const OPENCL_LOADER: &str = "libOpenCL.so.1";
#[cfg(not(windows))]
const INSTALL_LOADER: &str = "install one with a driver, e.g. `apt-get install ocl-icd-libopencl1 pocl-opencl-icd` for the CPU, or your GPU vendor's OpenCL driver";
/// The OpenCL loader cl3 loads on Windows (`OPENCL_DYLIB_PATH` overrides it).
#[cfg(windows)]
const OPENCL_LOADER: &str = "OpenCL.dll";
#[cfg(windows)]
const INSTALL_LOADER: &str = "GPU drivers (NVIDIA, AMD, Intel) install it in System32: install or repair your GPU vendor's driver, or set OPENCL_DYLIB_PATH to the DLL's path";

const NVIDIA_OPENCL_LIB: &str = "libnvidia-opencl.so.1";
const NVIDIA_LIB_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/aarch64-linux-gnu",
];

fn icd_dir() -> PathBuf {
    std::env::var_os("OCL_ICD_VENDORS")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/etc/OpenCL/vendors"))
}

fn icd_names_nvidia(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.path().extension().is_some_and(|x| x == "icd")
            && std::fs::read_to_string(e.path()).is_ok_and(|s| s.contains("libnvidia-opencl"))
    })
}

/// Where `libnvidia-opencl.so.1` exists but no ICD file names it: the one-line fix.
pub fn unregistered_nvidia_fix() -> Option<String> {
    let lib = NVIDIA_LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(NVIDIA_OPENCL_LIB))
        .find(|p| p.exists())?;
    let dir = icd_dir();
    if icd_names_nvidia(&dir) {
        return None;
    }
    Some(format!(
        "NVIDIA's OpenCL driver {} is installed but no ICD file in {} names it, so the loader cannot list it. Register it (as root): mkdir -p {dir} && echo {} > {dir}/nvidia.icd",
        lib.display(),
        dir.display(),
        lib.display(),
        dir = dir.display()
    ))
}

fn icd_hint_suffix() -> String {
    unregistered_nvidia_fix()
        .map(|s| format!(". {s}"))
        .unwrap_or_default()
}

/// `CL_DEVICE_GLOBAL_FREE_MEMORY_AMD` in bytes (the driver reports KiB), where present.
pub(crate) fn amd_free_memory(device: &DeviceInfo) -> Option<u64> {
    if !device.has_extension("cl_amd_device_attribute_query") {
        return None;
    }
    let bytes = device_bytes(device.id.0, 0x4039).ok()?;
    Some(decode_u64(&bytes) * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports keep OpenCL's description as `Details` (whatever the API): their JSON is the
    /// description's, keys in its order, and OpenCL's sections get their `DeviceInfo` back.
    #[test]
    fn reports_keep_the_description_as_it_is() {
        use crate::backend::details::Details;
        use crate::backend::opencl::host::pin::test_device;
        let device = test_device(2, Vendor::Nvidia, "GPU", &["cl_nv_create_buffer"]);
        let kept = Details::new(device.clone());
        assert_eq!(
            serde_json::to_string_pretty(&kept).unwrap(),
            serde_json::to_string_pretty(&device).unwrap()
        );
        assert_eq!(kept.driver_version(), device.driver_version);
        assert_eq!(kept.of_api::<DeviceInfo>().map(|d| d.index), Some(2));
    }

    #[test]
    fn vendor_kinds() {
        assert_eq!(
            vendor_kind("NVIDIA CUDA", "NVIDIA Corporation"),
            Vendor::Nvidia
        );
        assert_eq!(
            vendor_kind("Portable Computing Language", "GenuineIntel"),
            Vendor::Pocl
        );
        assert_eq!(
            vendor_kind(
                "AMD Accelerated Parallel Processing",
                "Advanced Micro Devices, Inc."
            ),
            Vendor::Amd
        );
        assert_eq!(
            vendor_kind("Intel(R) OpenCL Graphics", "Intel(R) Corporation"),
            Vendor::Intel
        );
    }

    #[test]
    fn icd_file_detection() {
        let dir = std::env::temp_dir().join(format!("pinstream-icd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!icd_names_nvidia(&dir));
        std::fs::write(dir.join("nvidia.icd"), "/usr/lib/libnvidia-opencl.so.1\n").unwrap();
        assert!(icd_names_nvidia(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
