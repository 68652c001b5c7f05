//! `pinstream devices`.

use super::{list_devices, Failure};
use pinstream::backend::opencl::{default_device, unregistered_nvidia_fix, DeviceInfo};
use pinstream::host::{auto_order, Strategy};
use pinstream::units::Bytes;
use serde::Serialize;

/// Arguments of `devices`.
#[derive(clap::Args)]
pub struct Args {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
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

pub fn run(args: Args) -> Result<(), Failure> {
    let devices = list_devices()?;
    let default = default_device(&devices).map(|d| d.index);
    let entries: Vec<Entry> = devices
        .iter()
        .map(|d| {
            let (order, auto_reason) = auto_order(d);
            Entry {
                device: d,
                default: Some(d.index) == default,
                strategies: Strategy::offered(d),
                unavailable: Strategy::ALL
                    .into_iter()
                    .filter_map(|s| s.offered_by(d).err().map(|why| (s, why)))
                    .collect(),
                auto: order.first().copied(),
                auto_reason: auto_reason.to_string(),
            }
        })
        .collect();
    let listing = Listing {
        devices: entries,
        icd_warning: unregistered_nvidia_fix(),
        #[cfg(unix)]
        layer: pinstream_layer::probe::report(),
    };
    if args.json {
        super::out::line(serde_json::to_string_pretty(&listing).map_err(Failure::run)?)
    } else {
        super::out::emit(&render(&listing))
    }
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
        out += &format!("    driver {}, {}\n", d.driver_version, d.version);
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
        let names: Vec<&str> = e.strategies.iter().map(|s| s.name()).collect();
        out += &format!("    strategies: {}\n", names.join(", "));
        for (s, why) in &e.unavailable {
            out += &format!("      no {s}: {why}\n");
        }
        if let Some(a) = e.auto {
            out += &format!("    auto: {a} ({})\n", e.auto_reason);
        }
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
