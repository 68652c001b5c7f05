//! The one place a command chooses its API. A command's work is written once, generic over
//! [`HostApi`] (a [`Front`]); [`with_api`] loads the API asked for and runs it there. The
//! `cuda` and `vulkan` cargo features are branched on here and nowhere else in the CLI.

use super::Failure;
use pinstream::backend::adapter::Vendor;
use pinstream::backend::adapter::{choose, AdapterInfo, DeviceChoice};
use pinstream::backend::api::{Adapter, Instance, WaitMode};
use pinstream::backend::fault::Faulty;
use pinstream::backend::opencl::OpenCl;
use pinstream::gather::BatchApi;
use pinstream::host::HostApi;
use pinstream::vram::VramProbe;
use pinstream_lab::kernels::Builtins;
use pinstream_lab::tools::doctor::DoctorDevice;

/// The CLI's one API enum: a compute API a command can run through (`--api`), or, for
/// `bench` alone, OpenCL with CUDA on the same GPU beside it (`both`). A command that takes
/// only some of them says so with [`ApiName::parser`], so clap refuses the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiName {
    /// OpenCL (any driver).
    Opencl,
    /// CUDA (NVIDIA GPUs; this pinstream built with the `cuda` feature).
    Cuda,
    /// Vulkan (any driver; this pinstream built with the `vulkan` feature). Kernels are WGSL.
    Vulkan,
    /// OpenCL, and CUDA on the same GPU beside it (`bench`'s). Not one API: hidden from the
    /// commands that list every value, and refused by [`with_api`].
    #[value(hide = true)]
    Both,
}

impl ApiName {
    /// One API each: what a command that runs through one API takes.
    pub const ONE: &'static [ApiName] = &[ApiName::Opencl, ApiName::Cuda, ApiName::Vulkan];

    /// `--api`'s parser for a command that takes only `allowed` (in the order its help lists
    /// them): clap refuses any other value, listing these.
    pub fn parser(allowed: &'static [ApiName]) -> impl clap::builder::TypedValueParser {
        use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
        use clap::ValueEnum;
        let names = allowed.iter().map(|a| PossibleValue::new(a.name()));
        PossibleValuesParser::new(names)
            .map(|s| ApiName::from_str(&s, false).expect("a possible value names a variant"))
    }

    /// The value's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ApiName::Opencl => "opencl",
            ApiName::Cuda => "cuda",
            ApiName::Vulkan => "vulkan",
            ApiName::Both => "both",
        }
    }

    /// The API a measurement runs through first: OpenCL for `both`, else this one.
    pub fn first(self) -> ApiName {
        match self {
            ApiName::Both => ApiName::Opencl,
            api => api,
        }
    }

    /// The API measured again beside the first on the same GPUs: CUDA for `both`.
    pub fn beside(self) -> Option<ApiName> {
        (self == ApiName::Both).then_some(ApiName::Cuda)
    }

    /// This API, where a measurement runs through one; `both` refused, naming `flag`.
    pub fn one(self, flag: &str) -> Result<ApiName, Failure> {
        match self {
            ApiName::Both => Err(Failure::usage(format!(
                "{flag} measures one API: pass --api vulkan, --api cuda or --api opencl"
            ))),
            api => Ok(api),
        }
    }
}

/// How `--api vulkan` moves bytes between host memory and the device (`--vk-copy`; the
/// library's `VkCopy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VkCopyName {
    /// vkCmdCopyBuffer on the transfer-only queue family (NVIDIA's copy engines): uploads on
    /// one queue, downloads on another, beside kernels (the compute family where the device
    /// has no transfer-only one).
    Transfer,
    /// vkCmdCopyBuffer on the compute family's queue of each lane (on NVIDIA the universal
    /// family).
    Universal,
    /// A compute shader copies 16-byte words, reading or writing the imported host memory.
    Shader,
    /// Each copy cut in halves on two transfer-only queues at once.
    Split,
    /// Uploads as `transfer` (the copy engine), downloads as `shader` (the compute family),
    /// so the two directions run on different hardware.
    Mixed,
    /// Each copy as `universal` while the other direction has no copy in flight, else as
    /// `transfer` (on an H100, the faster way one way and the faster both ways). The default.
    Auto,
    /// Uploads by the compute shader (512 workgroups) on the compute family, downloads by
    /// vkCmdCopyBuffer on the compute-only family (plain Vulkan's fastest pair both ways on an
    /// H100).
    Crossed,
}

/// How the API's instance is made, where the API offers a choice (Vulkan's `--vk-copy` and
/// `--vk-huge-pages`): read by [`with_api_as`] when it loads the API, not by each front.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiOptions {
    /// `--vk-copy`: how Vulkan copies; `None`: the library's default way.
    pub vk_copy: Option<VkCopyName>,
    /// `--vk-huge-pages`: whether Vulkan's imported host memory asks for 2 MiB pages;
    /// `None`: the library's default (on).
    pub vk_huge_pages: Option<bool>,
    /// The `--api` value that chose the API loaded, where it is not the API itself (`both`
    /// loads OpenCL): what a refusal to load names.
    pub asked: Option<ApiName>,
}

impl ApiOptions {
    /// The first Vulkan-only flag given, if any.
    pub fn vulkan_flag(&self) -> Option<&'static str> {
        [
            ("--vk-copy", self.vk_copy.is_some()),
            ("--vk-huge-pages", self.vk_huge_pages.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}

/// A command's work over one API.
pub trait Front {
    /// What it gives.
    type Output;
    /// What it refuses before its API is loaded (loading may take seconds, and a refusal that
    /// does not depend on the API is clearer than the API's absence). The default: nothing.
    fn check(&self) -> Result<(), Failure> {
        Ok(())
    }
    /// Runs it through `A`, loaded as `instance`.
    fn run<A: HostApi + Builtins + BatchApi>(
        self,
        instance: A::Instance,
    ) -> Result<Self::Output, Failure>;
}

/// Loads `api` and runs `front` through it, or says why the API cannot run here (`--api`
/// being the flag that chose it).
///
/// Every front runs over [`Faulty`]`<A>`, the API wrapped for the test hook
/// `PINSTREAM_INJECT_FAULT` (`alloc`, `upload`, `kernel`, `download`), so each front is
/// compiled once per API, not once for `A` and again for `Faulty<A>`. With the variable unset
/// the wrapper passes every call through, at the cost of one check of a value read once per
/// process, per command.
pub fn with_api<F: Front>(api: ApiName, front: F) -> Result<F::Output, Failure> {
    with_api_as(api, &ApiOptions::default(), front)
}

/// [`with_api`], the API's instance made as `options` say; an option of another API than
/// `api` is refused, naming its flag.
pub fn with_api_as<F: Front>(
    api: ApiName,
    options: &ApiOptions,
    front: F,
) -> Result<F::Output, Failure> {
    refuse_vulkan_flags(api, options)?;
    match api {
        ApiName::Opencl => {
            super::refuse_empty_pocl_cache()?;
            front.check()?;
            front.run::<Faulty<OpenCl>>(load::<Faulty<OpenCl>>(options.asked)?)
        }
        #[cfg(feature = "cuda")]
        ApiName::Cuda => {
            use pinstream::backend::cuda::Cuda;
            front.check()?;
            front.run::<Faulty<Cuda>>(load::<Faulty<Cuda>>(options.asked)?)
        }
        #[cfg(not(feature = "cuda"))]
        ApiName::Cuda => Err(Failure::run(
            "--api cuda: this pinstream was built without the `cuda` cargo feature: build it with default features (or `--features cuda`)",
        )),
        #[cfg(feature = "vulkan")]
        ApiName::Vulkan => {
            use pinstream::backend::fault::{Fault, FaultyInstance};
            use pinstream::backend::vulkan::Vulkan;
            front.check()?;
            let instance = load::<Vulkan>(options.asked)?.with_options(vk_options(options));
            front.run::<Faulty<Vulkan>>(FaultyInstance::with_fault(instance, Fault::from_env()))
        }
        #[cfg(not(feature = "vulkan"))]
        ApiName::Vulkan => Err(Failure::run(
            "--api vulkan: this pinstream was built without the `vulkan` cargo feature: build it with default features (or `--features vulkan`)",
        )),
        ApiName::Both => Err(Failure::usage(
            "--api both measures two APIs side by side, which only `bench` does: pass --api opencl, cuda or vulkan",
        )),
    }
}

/// The one refusal of a Vulkan-only flag (`--vk-copy`, `--vk-huge-pages`) with another API
/// than Vulkan, for every command that takes them.
pub fn refuse_vulkan_flags(api: ApiName, options: &ApiOptions) -> Result<(), Failure> {
    match (api != ApiName::Vulkan, options.vulkan_flag()) {
        (true, Some(flag)) => Err(Failure::usage(format!(
            "{flag} applies to --api vulkan only: drop it, or pass --api vulkan"
        ))),
        _ => Ok(()),
    }
}

/// The library's Vulkan options for `options` (the library's defaults where a flag is not
/// given).
#[cfg(feature = "vulkan")]
fn vk_options(options: &ApiOptions) -> pinstream::backend::vulkan::VkOptions {
    use pinstream::backend::vulkan::{VkCopy, VkOptions};
    let default = VkOptions::default();
    let copy = options.vk_copy.map(|w| match w {
        VkCopyName::Transfer => VkCopy::Transfer,
        VkCopyName::Universal => VkCopy::Universal,
        VkCopyName::Shader => VkCopy::Shader,
        VkCopyName::Split => VkCopy::Split,
        VkCopyName::Mixed => VkCopy::Mixed,
        VkCopyName::Auto => VkCopy::Auto,
        VkCopyName::Crossed => VkCopy::Crossed,
    });
    VkOptions {
        copy: copy.unwrap_or(default.copy),
        huge_pages: options.vk_huge_pages.unwrap_or(default.huge_pages),
    }
}

/// The device of `api` that is the same GPU as `dev`, another API's device (to measure one
/// GPU through two APIs): the one at its PCI bus id, or why there can be none (CUDA drives
/// only NVIDIA's GPUs; an API that does not tell a device's bus cannot be matched).
pub fn same_gpu(dev: &AdapterInfo, api: ApiName) -> Result<DeviceChoice, Failure> {
    if api == ApiName::Cuda && dev.vendor != Vendor::Nvidia {
        return Err(Failure::run(format!(
            "device {} ({}, {}) is not driven by NVIDIA's {} driver, so there is no CUDA device to compare it with; pick the NVIDIA GPU with --device (see `pinstream devices --api {}`)",
            dev.index, dev.name, dev.driver, dev.api, dev.api.to_lowercase()
        )));
    }
    match &dev.pci_address {
        Some(bus) => Ok(DeviceChoice::Pci(bus.clone())),
        None => Err(Failure::run(format!(
            "{} does not report the PCI bus id of device {} ({}), so the same GPU cannot be found through another API",
            dev.api, dev.index, dev.name
        ))),
    }
}

/// The devices of `api` that are the same GPUs as `devs`, another API's devices, in order
/// (see [`same_gpu`]).
pub fn same_gpus(devs: &[AdapterInfo], api: ApiName) -> Result<Vec<DeviceChoice>, Failure> {
    devs.iter().map(|d| same_gpu(d, api)).collect()
}

/// Where a measurement runs: the devices the flags name in the API's own list, or the GPUs
/// that are OpenCL devices (to measure one GPU through two APIs).
#[derive(Clone, Copy)]
pub enum Where<'a> {
    /// `--device` (`one`) or `--devices` (`set`), in the API's own list (default: the first
    /// GPU, else the first device).
    Asked {
        /// `--device`.
        one: Option<usize>,
        /// `--devices`.
        set: Option<&'a super::device_sets::DeviceSet>,
    },
    /// The GPUs that are these devices of another API, found by their PCI bus ids.
    SameGpus(&'a [AdapterInfo]),
}

impl Where<'_> {
    /// What can be refused before the API is loaded: devices with no GPU of `api` behind
    /// them.
    pub fn check(&self, api: ApiName) -> Result<(), Failure> {
        match self {
            Where::Asked { .. } => Ok(()),
            Where::SameGpus(devs) => same_gpus(devs, api).map(drop),
        }
    }
}

/// Opens the devices `at` names of `api`, each waiting as `wait` says.
pub fn open_at<A: HostApi>(
    instance: &A::Instance,
    api: ApiName,
    at: Where<'_>,
    wait: WaitMode,
) -> Result<Opened<A>, Failure> {
    match at {
        Where::Asked { one, set } => open_asked::<A>(instance, api, one, set, wait),
        Where::SameGpus(devs) => open::<A>(instance, &same_gpus(devs, api)?, wait),
    }
}

/// `api` lists no device: why, and the fix (OpenCL: PoCL's kernel cache, the variables that
/// hide devices, or no driver).
pub fn none_listed(api: ApiName) -> Failure {
    Failure::run(match api {
        ApiName::Opencl | ApiName::Both => super::pocl_cache_problem().unwrap_or_else(super::no_device),
        ApiName::Cuda => {
            "CUDA lists no device: the driver sees no NVIDIA GPU (check `nvidia-smi` and CUDA_VISIBLE_DEVICES)".into()
        }
        ApiName::Vulkan => {
            "Vulkan lists no device: install a Vulkan driver (the GPU vendor's, or mesa-vulkan-drivers for lavapipe on the CPU), or check VK_DRIVER_FILES".into()
        }
    })
}

/// `A` loaded, or why not (naming `--api` and the value that chose it: `asked`, else `A`'s
/// own).
fn load<A: HostApi>(asked: Option<ApiName>) -> Result<A::Instance, Failure> {
    let flag = asked.map_or(A::ID, ApiName::name);
    A::Instance::new().map_err(|e| Failure::run(format!("--api {flag}: {e}")))
}

/// Devices of one API opened for a command.
pub struct Opened<A: HostApi> {
    /// What the API says of each.
    pub adapters: Vec<AdapterInfo>,
    /// Each as a report describes it: what its driver says where the API has more to say
    /// ([`HostApi::driver_details`], kept whatever the API: OpenCL's [`DeviceInfo`]), else what
    /// the API says.
    pub described: Vec<DoctorDevice>,
    /// A context on each, in the order chosen.
    pub devices: Vec<A::Device>,
    /// The first device's memory counter.
    pub probe: VramProbe,
}

impl<A: HostApi> Opened<A> {
    /// The devices as a report names them.
    pub fn names(&self) -> String {
        let names: Vec<String> = self.adapters.iter().map(AdapterInfo::label).collect();
        names.join(", ")
    }
}

/// Opens the devices `--device` (`one`) or `--devices` (`set`) name of `api` (default: the
/// first GPU, else the first device), each waiting as `wait` says; where the API lists no
/// device, why (PoCL's cache, a variable that hides devices, the driver to install).
pub fn open_asked<A: HostApi>(
    instance: &A::Instance,
    api: ApiName,
    one: Option<usize>,
    set: Option<&super::device_sets::DeviceSet>,
    wait: WaitMode,
) -> Result<Opened<A>, Failure> {
    let infos: Vec<AdapterInfo> = instance
        .adapters()
        .map_err(Failure::run)?
        .iter()
        .map(Adapter::info)
        .collect();
    if infos.is_empty() {
        return Err(none_listed(api));
    }
    open::<A>(
        instance,
        &super::device_sets::choices(&infos, one, set)?,
        wait,
    )
}

/// Opens the devices `choices` name (one at least; `[Default]` for the default device), each
/// waiting for commands as `wait` says.
pub fn open<A: HostApi>(
    instance: &A::Instance,
    choices: &[DeviceChoice],
    wait: WaitMode,
) -> Result<Opened<A>, Failure> {
    let all = instance.adapters().map_err(Failure::run)?;
    let infos: Vec<AdapterInfo> = all.iter().map(Adapter::info).collect();
    let (mut adapters, mut described, mut devices) = (Vec::new(), Vec::new(), Vec::new());
    for choice in choices {
        let i = choose(A::NAME, &infos, choice).map_err(|e| {
            Failure::usage(format!(
                "--device: {e}; pass a device from `pinstream devices`"
            ))
        })?;
        let device = all[i].open().map_err(|e| {
            Failure::run(format!(
                "device {} does not open: {e}; pass another with --device (`pinstream devices --api {}` lists them)",
                infos[i].label(),
                A::ID
            ))
        })?;
        // Every command sets the wait mode on every device it opens (`--wait`, or the
        // default), so none can forget one; APIs with one way of waiting ignore it.
        pinstream::backend::api::Device::set_wait_mode(&device, wait);
        adapters.push(infos[i].clone());
        described.push(DoctorDevice::of::<A>(&all[i]));
        devices.push(device);
    }
    let probe = A::vram(&devices[0]);
    Ok(Opened {
        adapters,
        described,
        devices,
        probe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::adapter::DeviceKind;

    fn adapter(api: &'static str, vendor: Vendor, pci: Option<&str>) -> AdapterInfo {
        AdapterInfo {
            api,
            index: 1,
            name: "gpu".into(),
            driver: "a driver".into(),
            pci_address: pci.map(str::to_string),
            memory: 1 << 30,
            max_alloc: 1 << 28,
            kind: DeviceKind::Gpu,
            vendor,
        }
    }

    /// The same GPU is found by the bus id whatever API the device is of; CUDA is refused
    /// for another vendor's device, naming the listing of the device's own API, and a device
    /// with no bus id is refused for every API.
    #[test]
    fn the_same_gpu_is_found_by_bus_and_cuda_only_behind_nvidias() {
        let bus = Some("0000:3b:00.0");
        for api in ["OpenCL", "Vulkan"] {
            let nv = adapter(api, Vendor::Nvidia, bus);
            let pci = DeviceChoice::Pci("0000:3b:00.0".into());
            assert_eq!(same_gpu(&nv, ApiName::Cuda).ok(), Some(pci.clone()));
            let amd = adapter(api, Vendor::Amd, bus);
            assert_eq!(same_gpu(&amd, ApiName::Vulkan).ok(), Some(pci));
            let why = same_gpu(&amd, ApiName::Cuda).err().unwrap().message;
            assert!(
                why.contains(&format!("not driven by NVIDIA's {api} driver")),
                "{why}"
            );
            let list = format!("`pinstream devices --api {}`", api.to_lowercase());
            assert!(why.contains(&list), "{why}");
            let no_bus = adapter(api, Vendor::Nvidia, None);
            let why = same_gpu(&no_bus, ApiName::Vulkan).err().unwrap().message;
            assert!(
                why.starts_with(&format!("{api} does not report the PCI bus id")),
                "{why}"
            );
        }
    }
}
