//! Several devices from the command line: `--devices 0,1` / `--devices all`, which OpenCL
//! devices that means, each device's NUMA node, and `--numa`.

use super::{list_devices, Failure};
use pinstream::backend::adapter::{choose, AdapterInfo, DeviceChoice};
use pinstream::backend::api::{Adapter, Api};
use pinstream::backend::opencl::wait::WaitMode;
use pinstream::backend::opencl::{Context, DeviceInfo, OpenCl};
use pinstream::backend::os::numa;
use pinstream::host::numa_placement;
use std::ops::Range;

/// What `--devices` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSet {
    /// Every device of the default device's platform and type (every GPU of a host).
    All,
    /// These indices (OpenCL indices from `pinstream devices`, CUDA ordinals with
    /// `--api cuda`), in order, each once.
    List(Vec<usize>),
}

/// Parses `--devices`: `all`, or indices separated by commas (`0,1`).
pub fn parse_devices(s: &str) -> Result<DeviceSet, String> {
    if s.trim() == "all" {
        return Ok(DeviceSet::All);
    }
    let mut list = Vec::new();
    for part in s.split(',') {
        let i: usize = part.trim().parse().map_err(|_| {
            format!(
                "`{part}` is not a device index: give indices separated by commas (0,1) or `all`"
            )
        })?;
        if list.contains(&i) {
            return Err(format!(
                "device {i} is named twice: name each device once (0,1)"
            ));
        }
        list.push(i);
    }
    Ok(DeviceSet::List(list))
}

/// The OpenCL devices `--devices` (else `--device`, else the default: the first GPU, else the
/// first device) names, chosen as every API's are ([`choices`]).
pub fn chosen(device: Option<usize>, set: Option<&DeviceSet>) -> Result<Vec<DeviceInfo>, Failure> {
    let all = list_devices()?;
    let infos: Vec<AdapterInfo> = all.iter().map(Adapter::info).collect();
    let pick = |c: &DeviceChoice| {
        let i = choose(OpenCl::NAME, &infos, c).map_err(Failure::usage)?;
        Ok(all[i].clone())
    };
    choices(&infos, device, set)?.iter().map(pick).collect()
}

/// The OpenCL devices `--devices` (else `--device`, else the default) names, with a context on
/// each waiting as `wait` says: how the commands that run through OpenCL alone open theirs.
pub fn open_contexts(
    device: Option<usize>,
    set: Option<&DeviceSet>,
    wait: WaitMode,
) -> Result<(Vec<DeviceInfo>, Vec<Context>), Failure> {
    let devices = chosen(device, set)?;
    let ctxs = devices
        .iter()
        .map(|d| Context::new(d).map_err(Failure::run))
        .collect::<Result<Vec<_>, _>>()?;
    ctxs.iter().for_each(|c| c.set_wait_mode(wait));
    Ok((devices, ctxs))
}

/// The OpenCL device `--device` (else the default) names, with a context on it that waits as
/// a new one does ([`open_contexts`]).
pub fn open_one(device: Option<usize>) -> Result<(DeviceInfo, Context), Failure> {
    let (mut devices, mut ctxs) = open_contexts(device, None, WaitMode::default())?;
    Ok((devices.remove(0), ctxs.remove(0)))
}

/// The devices `--devices` (else `--device`, else the default) names among `all` (any API's
/// list): `all` is every device of the default device's driver and kind.
pub fn choices(
    all: &[AdapterInfo],
    device: Option<usize>,
    set: Option<&DeviceSet>,
) -> Result<Vec<DeviceChoice>, Failure> {
    let listed = |i: usize, fix: &str| match all.iter().any(|a| a.index == i) {
        true => Ok(DeviceChoice::Index(i)),
        false => Err(not_listed(i, all, fix)),
    };
    match (set, device) {
        (None, None) => Ok(vec![DeviceChoice::Default]),
        (None, Some(i)) => Ok(vec![listed(i, "--device")?]),
        (Some(DeviceSet::List(l)), _) => l.iter().map(|&i| listed(i, "--devices")).collect(),
        (Some(DeviceSet::All), _) => {
            let first = &all[choose("", all, &DeviceChoice::Default).map_err(Failure::run)?];
            let like = |a: &&AdapterInfo| a.driver == first.driver && a.kind == first.kind;
            Ok(all
                .iter()
                .filter(like)
                .map(|a| DeviceChoice::Index(a.index))
                .collect())
        }
    }
}

/// Device `i` is not in `all`: the devices there are, and what to pass with `flag`.
fn not_listed(i: usize, all: &[AdapterInfo], flag: &str) -> Failure {
    let names: Vec<String> = all
        .iter()
        .map(|d| format!("{}: {}", d.index, d.name))
        .collect();
    let fix = match flag {
        "--devices" => format!(
            "--devices with indices 0..{} or `all`,",
            all.len().saturating_sub(1)
        ),
        _ => format!("--device 0..{}", all.len().saturating_sub(1)),
    };
    Failure::usage(format!(
        "device index {i} is out of range: this machine has {} device(s) ({}); pass {fix} or run `pinstream devices`",
        all.len(),
        names.join(", "),
    ))
}

/// `--numa`: place each device's share of the host memory on the device's NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Numa {
    /// Bind each device's share to its node (`mbind` before the first touch).
    On,
    /// Leave the pages where the touching threads' first touch puts them.
    Off,
}

/// The NUMA node of each device (by its PCI address; `None` where unknown).
pub fn device_nodes(devices: &[AdapterInfo]) -> Vec<Option<u32>> {
    devices
        .iter()
        .map(|d| d.pci_address.as_deref().and_then(numa::device_node))
        .collect()
}

/// The placement of a region of `len` bytes whose shares go to devices on `nodes`, and the
/// line the report prints about it.
pub fn placement(
    numa: Numa,
    shares: &[Range<usize>],
    nodes: &[Option<u32>],
) -> (Vec<(Range<usize>, u32)>, String) {
    let host = numa::nodes();
    let seen: Vec<String> = nodes
        .iter()
        .map(|n| n.map_or("?".into(), |n| n.to_string()))
        .collect();
    let about = format!(
        "host NUMA nodes {:?}, devices on node(s) {}",
        host,
        seen.join(", ")
    );
    if host.len() < 2 {
        return (
            Vec::new(),
            format!("{about}: one node, placement changes nothing"),
        );
    }
    if numa == Numa::Off {
        return (
            Vec::new(),
            format!("{about}: placement off (--numa on binds each device's share to its node)"),
        );
    }
    let plan = numa_placement(shares, nodes);
    let line = if plan.is_empty() {
        format!("{about}: no device's node is known, nothing placed")
    } else {
        format!("{about}: each device's share bound to its node")
    };
    (plan, line)
}

/// Byte ranges of `len` bytes in blocks of `block` bytes, as the engine shares the blocks
/// among `devices` devices (contiguous, as even as whole blocks allow).
pub fn byte_shares(len: usize, block: usize, devices: usize) -> Vec<Range<usize>> {
    let blocks = len.div_ceil(block.max(1));
    pinstream::engine::partition(blocks, devices)
        .into_iter()
        .map(|r| (r.start * block).min(len)..(r.end * block).min(len))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::adapter::DeviceKind;

    #[test]
    fn device_lists_parse() {
        assert_eq!(parse_devices("all"), Ok(DeviceSet::All));
        assert_eq!(parse_devices("0,1"), Ok(DeviceSet::List(vec![0, 1])));
        assert_eq!(parse_devices(" 1 "), Ok(DeviceSet::List(vec![1])));
        assert!(parse_devices("0,0").unwrap_err().contains("twice"));
        assert!(parse_devices("0,x")
            .unwrap_err()
            .contains("not a device index"));
    }

    fn adapter(index: usize, driver: &str, kind: DeviceKind) -> AdapterInfo {
        AdapterInfo {
            api: "OpenCL",
            index,
            name: format!("dev{index}"),
            driver: driver.into(),
            pci_address: None,
            memory: 1 << 30,
            max_alloc: 1 << 28,
            kind,
            vendor: pinstream::backend::adapter::Vendor::Other,
        }
    }

    #[test]
    fn choices_map_device_flags_to_devices_of_any_api() {
        let all = [
            adapter(0, "PoCL", DeviceKind::Cpu),
            adapter(1, "NVIDIA", DeviceKind::Gpu),
            adapter(2, "NVIDIA", DeviceKind::Gpu),
        ];
        assert_eq!(
            choices(&all, None, None).ok().unwrap(),
            [DeviceChoice::Default]
        );
        let every = choices(&all, None, Some(&DeviceSet::All)).ok().unwrap();
        assert_eq!(
            every,
            [DeviceChoice::Index(1), DeviceChoice::Index(2)],
            "the default's driver and kind"
        );
        let list = DeviceSet::List(vec![2, 0]);
        let listed = choices(&all, None, Some(&list)).ok().unwrap();
        assert_eq!(listed, [DeviceChoice::Index(2), DeviceChoice::Index(0)]);
        let e = choices(&all, Some(7), None).err().unwrap().message;
        assert!(e.starts_with("device index 7 is out of range: this machine has 3 device(s) (0: dev0, 1: dev1, 2: dev2); pass --device 0..2"), "{e}");
        let e = choices(&all, None, Some(&DeviceSet::List(vec![0, 3])))
            .err()
            .unwrap()
            .message;
        assert!(
            e.contains("pass --devices with indices 0..2 or `all`, or run `pinstream devices`"),
            "{e}"
        );
    }

    #[test]
    fn byte_shares_follow_the_engines_blocks() {
        assert_eq!(byte_shares(10, 3, 2), [0..6, 6..10], "4 blocks: 2 and 2");
        assert_eq!(byte_shares(12, 3, 2), [0..6, 6..12]);
        assert_eq!(byte_shares(5, 8, 2), [0..0, 0..5]);
    }
}

/// What a stream over one or several devices waits for, device by device: what a stop and
/// `run --kernel-timeout` say, so that a kernel that never ends is named with its device.
pub struct Waiting {
    /// Each device, as messages name it.
    names: Vec<String>,
    /// Each device's share of the blocks, as the engine cuts them.
    shares: Vec<Range<usize>>,
    /// Blocks each device has completed.
    done: std::sync::Mutex<Vec<u64>>,
}

impl Waiting {
    /// A stream of `blocks` blocks over the devices `names` (in the targets' order).
    pub fn new(names: Vec<String>, blocks: usize) -> Self {
        let shares = pinstream::engine::partition(blocks, names.len());
        let done = std::sync::Mutex::new(vec![0; names.len()]);
        Waiting {
            names,
            shares,
            done,
        }
    }

    /// Records `p` (`None`: nothing completed yet) and says what the stream waits for now:
    /// the next block, and with several devices the device of each unfinished share.
    pub fn after(&self, p: Option<&pinstream::engine::Progress>) -> String {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = p {
            done[p.device] = p.device_blocks;
        }
        if let [_] = self.names.as_slice() {
            return format!("waiting for the kernel of block {}", done[0]);
        }
        let open: Vec<String> = (0..self.names.len())
            .filter(|&d| (done[d] as usize) < self.shares[d].len())
            .map(|d| {
                let block = self.shares[d].start + done[d] as usize;
                format!("block {block} on device {}", self.names[d])
            })
            .collect();
        format!("waiting for the kernel of {}", open.join(", "))
    }
}

#[cfg(test)]
mod waiting_tests {
    use super::Waiting;
    use pinstream::engine::Progress;

    #[test]
    fn several_devices_name_each_unfinished_share_with_its_device() {
        let w = Waiting::new(vec!["0 (a)".into(), "1 (b)".into()], 10);
        assert_eq!(
            w.after(None),
            "waiting for the kernel of block 0 on device 0 (a), block 5 on device 1 (b)"
        );
        let p = Progress {
            device: 1,
            device_blocks: 2,
            blocks: 2,
            bytes: 0,
        };
        assert_eq!(
            w.after(Some(&p)),
            "waiting for the kernel of block 0 on device 0 (a), block 7 on device 1 (b)"
        );
        let p = Progress {
            device: 0,
            device_blocks: 5,
            blocks: 7,
            bytes: 0,
        };
        assert_eq!(
            w.after(Some(&p)),
            "waiting for the kernel of block 7 on device 1 (b)"
        );
    }

    #[test]
    fn one_device_names_the_next_block() {
        let w = Waiting::new(vec!["0 (a)".into()], 4);
        let p = Progress {
            device: 0,
            device_blocks: 2,
            blocks: 2,
            bytes: 0,
        };
        assert_eq!(w.after(Some(&p)), "waiting for the kernel of block 2");
    }
}
