//! NUMA: which node a PCI device hangs off, which nodes the host has, and placing a range of
//! fresh pages on a node with `mbind` before they are first touched.
//!
//! Written by hand over sysfs and one system call: the NUMA crates on crates.io either wrap
//! libnuma (a C library the GPU machine need not have) or are unmaintained, and pinstream
//! needs three reads and `mbind`.

use std::io;
use std::ops::Range;

/// `MPOL_BIND` from `<linux/mempolicy.h>`.
#[cfg(target_os = "linux")]
const MPOL_BIND: libc::c_long = 2;

/// The NUMA node of the PCI device at `address` (`0000:3b:00.0`, any case; NVIDIA's
/// 8-digit domain is accepted), from `/sys/bus/pci/devices/<address>/numa_node`; `None` where
/// the file is missing or says -1 (a host with one node, or firmware that does not tell).
pub fn device_node(address: &str) -> Option<u32> {
    let address = sysfs_address(address);
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{address}/numa_node")).ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// The sysfs form of a PCI address: lower case, a 4-digit domain.
fn sysfs_address(address: &str) -> String {
    let a = address.trim().to_ascii_lowercase();
    match a.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => a,
    }
}

/// The host's NUMA nodes, from `/sys/devices/system/node/online` (`0-1`); `[0]` where the
/// file is missing.
pub fn nodes() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/node/online")
        .ok()
        .and_then(|t| parse_list(&t))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| vec![0])
}

/// The CPUs of `node`, from `/sys/devices/system/node/node<N>/cpulist`.
pub fn node_cpus(node: u32) -> Option<Vec<u32>> {
    let t = std::fs::read_to_string(format!("/sys/devices/system/node/node{node}/cpulist")).ok()?;
    parse_list(&t)
}

/// A kernel list (`0-3,8,10-11`) as numbers; `None` if malformed.
pub fn parse_list(text: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Binds the pages of `range` (bytes from `base`; rounded inward to whole pages of `page`
/// bytes) to `node` with `mbind(MPOL_BIND)`. Pages not yet touched are then allocated on that
/// node at their first touch, whichever CPU touches them; pages already present stay where
/// they are.
///
/// # Safety
/// `base..base + range.end` must be a mapping of this process (`mbind` changes no content).
#[cfg(target_os = "linux")]
pub unsafe fn bind_range(
    base: *mut u8,
    range: Range<usize>,
    node: u32,
    page: usize,
) -> io::Result<()> {
    let start = range.start.div_ceil(page) * page;
    let end = range.end / page * page;
    if start >= end {
        return Ok(());
    }
    let bits = 64usize;
    let mut mask = vec![0u64; node as usize / bits + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // maxnode counts bits, and the kernel reads one fewer than given.
    let maxnode = (mask.len() * bits + 1) as libc::c_ulong;
    // SAFETY: the range lies in the caller's mapping; the mask outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            base.add(start),
            end - start,
            MPOL_BIND,
            mask.as_ptr(),
            maxnode,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Not on this OS: placement is Linux-only.
///
/// # Safety
/// None needed; it does nothing.
#[cfg(not(target_os = "linux"))]
pub unsafe fn bind_range(_: *mut u8, _: Range<usize>, _: u32, _: usize) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "NUMA placement is implemented for Linux only",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_addresses_parse() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("0"), Some(vec![0]));
        assert_eq!(parse_list("3-1"), None);
        assert_eq!(parse_list("x"), None);
        assert_eq!(sysfs_address("00000000:3B:00.0"), "0000:3b:00.0");
        assert_eq!(sysfs_address("0000:3b:00.0"), "0000:3b:00.0");
    }

    #[test]
    fn this_host_has_a_node_with_cpus() {
        let n = nodes();
        assert!(!n.is_empty());
        assert!(node_cpus(n[0]).is_some_and(|c| !c.is_empty()));
    }

    #[test]
    #[cfg(target_os = "linux")] // elsewhere bind_range says placement is Linux only
    fn binding_fresh_pages_to_node_0_keeps_them_usable() {
        let page = crate::backend::os::page_size();
        let map = crate::backend::os::PageMap::new(
            8 * page,
            crate::backend::os::Residency {
                huge_pages: false,
                touch_threads: 0,
            },
        )
        .unwrap();
        // SAFETY: the range is the map's.
        unsafe { bind_range(map.as_ptr(), 0..8 * page, nodes()[0], page) }.unwrap();
        map.touch(0..8 * page);
    }
}
