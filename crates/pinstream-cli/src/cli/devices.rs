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
    /// The OpenCL layer: active here? which way in works?
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
                auto_reason,
            }
        })
        .collect();
    let listing = Listing {
        devices: entries,
        icd_warning: unregistered_nvidia_fix(),
        layer: pinstream_layer::probe::report(),
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&listing).map_err(Failure::run)?
        );
    } else {
        print_text(&listing);
    }
    Ok(())
}

fn print_text(l: &Listing) {
    let mut platform = usize::MAX;
    for e in &l.devices {
        let d = e.device;
        if d.platform_index != platform {
            platform = d.platform_index;
            println!(
                "platform {}: {} ({})",
                platform, d.platform_name, d.platform_version
            );
        }
        println!(
            "  device {}: {} [{}]{}",
            d.index,
            d.name,
            d.device_type,
            if e.default { "  (default)" } else { "" }
        );
        println!("    driver {}, {}", d.driver_version, d.version);
        println!(
            "    global memory {}, max allocation {}",
            Bytes(d.global_mem),
            Bytes(d.max_alloc)
        );
        match d.copy_engines {
            Some(n) => println!("    copy engines {n}"),
            None => println!("    copy engines: not reported by this driver"),
        }
        if let Some(pci) = &d.pci_address {
            println!("    PCI {pci}");
        }
        let ext = if d.extensions.is_empty() {
            "none of interest".to_string()
        } else {
            d.extensions.join(" ")
        };
        println!("    extensions: {ext}");
        let names: Vec<&str> = e.strategies.iter().map(|s| s.name()).collect();
        println!("    strategies: {}", names.join(", "));
        for (s, why) in &e.unavailable {
            println!("      no {s}: {why}");
        }
        if let Some(a) = e.auto {
            println!("    auto: {a} ({})", e.auto_reason);
        }
    }
    if let Some(w) = &l.icd_warning {
        println!("\nnote: {w}");
    }
    println!();
    for line in l.layer.lines() {
        println!("{line}");
    }
}
