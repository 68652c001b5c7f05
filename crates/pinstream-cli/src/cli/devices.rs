//! `pinstream devices`: the devices of the API `--api` names, listed and the default chosen
//! by the same code for every API ([`Instance::adapters`], [`choose`]); where the API's
//! driver says more, that section follows from [`HostApi::driver_details`], kept whatever the
//! API as [`Details`]: where it is OpenCL's [`DeviceInfo`], the listing adds OpenCL's own
//! sections (platforms, extensions, the strategies offered, the ICD loader and the layer).

use super::dispatch::{with_api, ApiName, Front};
use super::signals::{self, Mode};
use super::Failure;
use pinstream::backend::adapter::{choose, AdapterInfo, DeviceChoice};
use pinstream::backend::api::{Adapter, Instance};
use pinstream::backend::details::Details;
use pinstream::backend::opencl::{unregistered_nvidia_fix, DeviceInfo};
use pinstream::host::{auto_order, HostApi, Strategy, ZeroCopy};
use pinstream::units::Bytes;
use pinstream_lab::kernels::Builtins;
use serde::Serialize;

/// Arguments of `devices`.
#[derive(clap::Args)]
pub struct Args {
    /// The API whose devices to list.
    #[arg(long, default_value = "opencl", value_parser = ApiName::parser(ApiName::ONE))]
    api: ApiName,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let listing = with_api(args.api, List(args))?;
    super::out::emit(&listing)
}

/// The listing of one API's devices, as text or JSON.
struct List(Args);

impl Front for List {
    type Output = String;

    fn check(&self) -> Result<(), Failure> {
        signals::phase("while listing the devices", Mode::Exit)
    }

    fn run<A: HostApi + Builtins>(self, instance: A::Instance) -> Result<String, Failure> {
        let all = instance.adapters().map_err(Failure::run)?;
        let infos: Vec<AdapterInfo> = all.iter().map(Adapter::info).collect();
        if infos.is_empty() {
            return Err(super::dispatch::none_listed(self.0.api));
        }
        let default = choose(A::NAME, &infos, &DeviceChoice::Default)
            .ok()
            .map(|i| infos[i].index);
        // OpenCL's own listing where its driver described every device, else every API's.
        let described: Vec<Option<Details>> = (all.iter())
            .map(|a| A::driver_details(a).map(Details::new))
            .collect();
        let opencl: Option<Vec<&DeviceInfo>> =
            described.iter().map(|d| d.as_ref()?.of_api()).collect();
        match opencl {
            Some(devices) => driver_listing(&devices, default, self.0.json),
            None => {
                let mapped: Vec<_> = all.iter().map(A::mapped_mechanism).collect();
                plain_listing(A::NAME, &infos, &mapped, default, self.0.json)
            }
        }
    }
}

/// A device as every API describes it.
#[derive(Serialize)]
struct Plain<'a> {
    #[serde(flatten)]
    device: &'a AdapterInfo,
    default: bool,
    /// Mapped memory's mechanism ([`HostApi::mapped_mechanism`]).
    zero_copy: Option<&'a str>,
    zero_copy_note: &'a str,
}

/// The devices of an API whose driver says no more than [`AdapterInfo`] (CUDA, Vulkan), each
/// with its mapped memory's mechanism and basis (`mapped`).
fn plain_listing(
    api: &str,
    infos: &[AdapterInfo],
    mapped: &[(Option<String>, String)],
    default: Option<usize>,
    json: bool,
) -> Result<String, Failure> {
    let devices: Vec<Plain> = infos
        .iter()
        .zip(mapped)
        .map(|(d, m)| Plain {
            device: d,
            default: Some(d.index) == default,
            zero_copy: m.0.as_deref(),
            zero_copy_note: &m.1,
        })
        .collect();
    if json {
        let v = serde_json::json!({ "devices": devices });
        return Ok(serde_json::to_string_pretty(&v).map_err(Failure::run)? + "\n");
    }
    let mut out = format!("{api} devices:\n");
    for e in &devices {
        out += &plain_entry(e);
    }
    Ok(out)
}

fn plain_entry(e: &Plain) -> String {
    let d = e.device;
    let default = if e.default { "  (default)" } else { "" };
    let mut out = format!("  device {}: {} [{:?}]{default}\n", d.index, d.name, d.kind);
    out += &format!("    driver {}\n", d.driver);
    out += &format!(
        "    global memory {}, max allocation {}\n",
        Bytes(d.memory),
        Bytes(d.max_alloc)
    );
    if let Some(pci) = &d.pci_address {
        out += &format!("    PCI {pci}\n");
    }
    out + &zero_copy_line(e.zero_copy, e.zero_copy_note)
}

#[derive(Serialize)]
struct Entry<'a> {
    #[serde(flatten)]
    device: &'a DeviceInfo,
    default: bool,
    strategies: Vec<Strategy>,
    unavailable: Vec<(Strategy, String)>,
    auto: Option<Strategy>,
    auto_reason: String,
    /// How mapped memory (kernels reading host memory in place) is made on the device.
    zero_copy: Option<ZeroCopy>,
    /// Its basis, or why the device has none.
    zero_copy_note: String,
}

#[derive(Serialize)]
struct Listing<'a> {
    devices: Vec<Entry<'a>>,
    icd_warning: Option<String>,
    /// The OpenCL layer: active here? which way in works? (unix only: the layer is an
    /// `LD_PRELOAD`/ICD-loader layer.)
    #[cfg(unix)]
    layer: pinstream_layer::probe::LayerReport,
}

/// The devices with what the OpenCL driver says of each: platforms, versions, extensions,
/// the strategies offered and `auto`'s choice; the ICD loader's warning and the layer.
fn driver_listing(
    devices: &[&DeviceInfo],
    default: Option<usize>,
    json: bool,
) -> Result<String, Failure> {
    let entries: Vec<Entry> = devices
        .iter()
        .map(|d| {
            let (order, auto_reason) = auto_order(d);
            let (zero_copy, zero_copy_note) = ZeroCopy::report(d);
            Entry {
                device: d,
                default: Some(d.index) == default,
                strategies: Strategy::offered(d),
                unavailable: Strategy::unavailable(d),
                auto: order.first().copied(),
                auto_reason: auto_reason.to_string(),
                zero_copy,
                zero_copy_note,
            }
        })
        .collect();
    let listing = Listing {
        devices: entries,
        icd_warning: unregistered_nvidia_fix(),
        #[cfg(unix)]
        layer: pinstream_layer::probe::report(),
    };
    match json {
        true => Ok(serde_json::to_string_pretty(&listing).map_err(Failure::run)? + "\n"),
        false => Ok(render(&listing)),
    }
}

/// The listing's line on mapped memory: the mechanism and its basis, or none and why.
pub fn zero_copy_line(m: Option<impl std::fmt::Display>, note: &str) -> String {
    match m {
        Some(m) => format!("    mapped memory (kernels read host memory in place): {m} ({note})\n"),
        None => format!("    mapped memory (kernels read host memory in place): none: {note}\n"),
    }
}

/// A device's driver, memory, copy engines, PCI bus and extensions, a line each.
fn hardware_lines(d: &DeviceInfo) -> String {
    let mut out = format!("    driver {}, {}\n", d.driver_version, d.version);
    out += &format!(
        "    global memory {}, max allocation {}\n",
        Bytes(d.global_mem),
        Bytes(d.max_alloc)
    );
    out += &match d.copy_engines {
        Some(n) => format!("    copy engines {n}\n"),
        None => "    copy engines: not reported by this driver\n".into(),
    };
    if let Some(pci) = &d.pci_address {
        out += &format!("    PCI {pci}\n");
    }
    let ext = if d.extensions.is_empty() {
        "none of interest".to_string()
    } else {
        d.extensions.join(" ")
    };
    out += &format!("    extensions: {ext}\n");
    out
}

fn render(l: &Listing) -> String {
    let mut out = String::new();
    let mut platform = usize::MAX;
    for e in &l.devices {
        let d = e.device;
        if d.platform_index != platform {
            platform = d.platform_index;
            out += &format!(
                "platform {}: {} ({})\n",
                platform, d.platform_name, d.platform_version
            );
        }
        out += &format!(
            "  device {}: {} [{}]{}\n",
            d.index,
            d.name,
            d.device_type,
            if e.default { "  (default)" } else { "" }
        );
        out += &hardware_lines(d);
        let names: Vec<&str> = e.strategies.iter().map(|s| s.name()).collect();
        out += &format!("    strategies: {}\n", names.join(", "));
        for (s, why) in &e.unavailable {
            out += &format!("      no {s}: {why}\n");
        }
        if let Some(a) = e.auto {
            out += &format!("    auto: {a} ({})\n", e.auto_reason);
        }
        out += &zero_copy_line(e.zero_copy, &e.zero_copy_note);
    }
    if let Some(w) = &l.icd_warning {
        out += &format!("\nnote: {w}\n");
    }
    #[cfg(unix)]
    {
        out.push('\n');
        for line in l.layer.lines() {
            out += &line;
            out.push('\n');
        }
    }
    out
}
