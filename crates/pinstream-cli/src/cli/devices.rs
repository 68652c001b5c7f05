//! `pinstream devices`: the devices of the API `--api` names, listed by one code for every
//! API: each device as every API describes it ([`AdapterInfo`]), or as its driver does where
//! the API's says more ([`HostApi::driver_details`], kept whatever the API as [`Details`]), the
//! ways it offers to pin and the one chosen when none is asked for ([`HostApi::offer`]), and
//! its mapped memory ([`HostApi::mapped_mechanism`]); the default device chosen by
//! [`choose`]. Where OpenCL's driver describes the devices, the listing adds OpenCL's own
//! sections: platforms, extensions, the ICD loader's warning and the layer.

use super::dispatch::{with_api, ApiName, Front};
use super::signals::{self, Mode};
use super::Failure;
use pinstream::backend::adapter::{choose, AdapterInfo, DeviceChoice};
use pinstream::backend::api::{Adapter, Instance};
use pinstream::backend::details::Details;
use pinstream::backend::opencl::{unregistered_nvidia_fix, DeviceInfo};
use pinstream::host::HostApi;
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
        let devices: Vec<Entry> = (all.iter().zip(&infos))
            .map(|(a, info)| Entry::of::<A>(a, info, Some(info.index) == default))
            .collect();
        // OpenCL's loader and layer, where OpenCL's driver described the devices.
        let opencl = devices.iter().all(|e| e.opencl().is_some());
        let listing = Listing {
            api: A::NAME,
            devices,
            loader: opencl.then(LoaderNotes::here),
        };
        match self.0.json {
            true => Ok(serde_json::to_string_pretty(&listing).map_err(Failure::run)? + "\n"),
            false => Ok(render(&listing)),
        }
    }
}

/// What describes a device: its driver's own description where the API's driver says more
/// than every API does, else what every API says.
#[derive(Serialize)]
#[serde(untagged)]
enum Described<'a> {
    /// OpenCL's driver's description ([`HostApi::Details`]: [`DeviceInfo`]).
    OpenCl(Box<DeviceInfo>),
    /// What every API says.
    Plain(&'a AdapterInfo),
}

/// One device of the listing.
#[derive(Serialize)]
struct Entry<'a> {
    #[serde(flatten)]
    device: Described<'a>,
    default: bool,
    /// The ways the device offers to pin ([`HostApi::offer`]).
    strategies: Vec<String>,
    /// The ways the API knows but the device lacks, each with why.
    unavailable: Vec<(String, String)>,
    /// The way chosen when none is asked for.
    auto: Option<String>,
    auto_reason: String,
    /// How mapped memory (kernels reading host memory in place) is made on the device.
    zero_copy: Option<String>,
    /// Its basis, or why the device has none.
    zero_copy_note: String,
}

impl<'a> Entry<'a> {
    /// `adapter`, described by `info` (and its driver), with what it offers.
    fn of<A: HostApi>(adapter: &A::Adapter, info: &'a AdapterInfo, default: bool) -> Self {
        let offer = A::offer(adapter);
        let (zero_copy, zero_copy_note) = A::mapped_mechanism(adapter);
        // The driver's description where it is OpenCL's, whose sections the listing has;
        // what every API says otherwise (JSON and text then describe the device alike).
        let details = A::driver_details(adapter).map(Details::new);
        let device = match details.as_ref().and_then(Details::of_api::<DeviceInfo>) {
            Some(d) => Described::OpenCl(Box::new(d.clone())),
            None => Described::Plain(info),
        };
        Entry {
            device,
            default,
            strategies: offer.offered.iter().map(|p| p.to_string()).collect(),
            unavailable: (offer.lacking.iter())
                .map(|(p, why)| (p.to_string(), why.clone()))
                .collect(),
            auto: offer.default.map(|p| p.to_string()),
            auto_reason: offer.why,
            zero_copy,
            zero_copy_note,
        }
    }

    /// OpenCL's driver's description, where it described the device.
    fn opencl(&self) -> Option<&DeviceInfo> {
        match &self.device {
            Described::OpenCl(d) => Some(d),
            Described::Plain(_) => None,
        }
    }
}

/// OpenCL's ICD loader and the layer, as this machine has them.
#[derive(Serialize)]
struct LoaderNotes {
    icd_warning: Option<String>,
    /// The OpenCL layer: active here? which way in works? (unix only: the layer is an
    /// `LD_PRELOAD`/ICD-loader layer.)
    #[cfg(unix)]
    layer: pinstream_layer::probe::LayerReport,
}

impl LoaderNotes {
    fn here() -> Self {
        LoaderNotes {
            icd_warning: unregistered_nvidia_fix(),
            #[cfg(unix)]
            layer: pinstream_layer::probe::report(),
        }
    }
}

#[derive(Serialize)]
struct Listing<'a> {
    #[serde(skip)]
    api: &'static str,
    devices: Vec<Entry<'a>>,
    #[serde(flatten)]
    loader: Option<LoaderNotes>,
}

/// The listing's line on mapped memory: the mechanism and its basis, or none and why.
pub fn zero_copy_line(m: Option<impl std::fmt::Display>, note: &str) -> String {
    match m {
        Some(m) => format!("    mapped memory (kernels read host memory in place): {m} ({note})\n"),
        None => format!("    mapped memory (kernels read host memory in place): none: {note}\n"),
    }
}

/// What OpenCL's driver says of a device: its driver, memory, copy engines, PCI bus and
/// extensions, a line each.
fn opencl_lines(d: &DeviceInfo) -> String {
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

/// What every API says of a device, a line each.
fn plain_lines(d: &AdapterInfo) -> String {
    let mut out = format!("    driver {}\n", d.driver);
    out += &format!(
        "    global memory {}, max allocation {}\n",
        Bytes(d.memory),
        Bytes(d.max_alloc)
    );
    if let Some(pci) = &d.pci_address {
        out += &format!("    PCI {pci}\n");
    }
    out
}

/// The device's heading (under its OpenCL platform's, when that changes) and its lines.
fn described(e: &Entry, platform: &mut Option<usize>) -> String {
    let default = if e.default { "  (default)" } else { "" };
    let d = match &e.device {
        Described::OpenCl(d) => d,
        Described::Plain(i) => {
            return format!("  device {}: {} [{:?}]{default}\n", i.index, i.name, i.kind)
                + &plain_lines(i)
        }
    };
    let mut out = String::new();
    if *platform != Some(d.platform_index) {
        *platform = Some(d.platform_index);
        out += &format!(
            "platform {}: {} ({})\n",
            d.platform_index, d.platform_name, d.platform_version
        );
    }
    out += &format!(
        "  device {}: {} [{}]{default}\n",
        d.index, d.name, d.device_type
    );
    out + &opencl_lines(d)
}

fn render(l: &Listing) -> String {
    let mut out = match &l.loader {
        Some(_) => String::new(),
        None => format!("{} devices:\n", l.api),
    };
    let mut platform = None;
    for e in &l.devices {
        out += &described(e, &mut platform);
        out += &format!("    strategies: {}\n", e.strategies.join(", "));
        for (s, why) in &e.unavailable {
            out += &format!("      no {s}: {why}\n");
        }
        if let Some(a) = &e.auto {
            out += &format!("    auto: {a} ({})\n", e.auto_reason);
        }
        out += &zero_copy_line(e.zero_copy.as_deref(), &e.zero_copy_note);
    }
    if let Some(notes) = &l.loader {
        out += &loader_lines(notes);
    }
    out
}

/// The ICD loader's warning and the layer's report.
fn loader_lines(notes: &LoaderNotes) -> String {
    let mut out = String::new();
    if let Some(w) = &notes.icd_warning {
        out += &format!("\nnote: {w}\n");
    }
    #[cfg(unix)]
    {
        out.push('\n');
        for line in notes.layer.lines() {
            out += &line;
            out.push('\n');
        }
    }
    out
}
