//! The keys of `devices --json` and `doctor --json`, through OpenCL (PoCL) and Vulkan
//! (lavapipe): scripts read them, so a change of what describes a device
//! (`HostApi::driver_details`, kept whatever the API as `backend::details::Details`) must not
//! drop or rename one. OpenCL's devices are described by its driver (`DeviceInfo`), Vulkan's
//! by what every API says (`AdapterInfo`).

mod common;

use common::{clean_exit, pinstream, stderr};
use serde_json::Value;

/// What OpenCL's driver says of a device, in `devices` and `doctor` alike.
const OPENCL_DEVICE: [&str; 16] = [
    "index",
    "platform_index",
    "platform_name",
    "platform_version",
    "name",
    "vendor",
    "vendor_kind",
    "driver_version",
    "version",
    "device_type",
    "global_mem",
    "max_alloc",
    "copy_engines",
    "pci_address",
    "svm_coarse",
    "extensions",
];

/// What every API says of a device (`AdapterInfo`).
const ADAPTER: [&str; 8] = [
    "api",
    "index",
    "name",
    "driver",
    "pci_address",
    "memory",
    "max_alloc",
    "kind",
];

/// The JSON report of `args`, after checking the command succeeded.
fn report(args: &[&str]) -> Value {
    let o = pinstream(args);
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("a JSON report")
}

/// `v`'s keys, sorted.
fn keys(v: &Value) -> Vec<String> {
    let map = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"));
    map.keys().cloned().collect()
}

/// `groups`' keys together, sorted as [`keys`] gives them.
fn sorted(groups: &[&[&str]]) -> Vec<String> {
    let mut all: Vec<String> = groups.concat().iter().map(|k| k.to_string()).collect();
    all.sort();
    all
}

#[test]
fn opencl_devices_json_keeps_its_keys() {
    let v = report(&["devices", "--json"]);
    let top: &[&str] = if cfg!(unix) {
        &["devices", "icd_warning", "layer"]
    } else {
        &["devices", "icd_warning"]
    };
    assert_eq!(keys(&v), sorted(&[top]), "{v}");
    let listing = [
        "default",
        "strategies",
        "unavailable",
        "auto",
        "auto_reason",
        "zero_copy",
        "zero_copy_note",
    ];
    for d in v["devices"].as_array().unwrap() {
        assert_eq!(keys(d), sorted(&[&OPENCL_DEVICE, &listing]), "{d}");
    }
}

#[test]
fn opencl_doctor_json_keeps_its_device_keys() {
    let v = report(&[
        "doctor", "--size", "8MiB", "--block", "4MiB", "--repeat", "1", "--json",
    ]);
    assert_eq!(keys(&v["device"]), sorted(&[&OPENCL_DEVICE]), "{v}");
}

#[test]
fn vulkan_devices_json_keeps_its_keys() {
    let v = report(&["devices", "--api", "vulkan", "--json"]);
    assert_eq!(keys(&v), ["devices"], "{v}");
    let listing = ["default", "zero_copy", "zero_copy_note"];
    for d in v["devices"].as_array().unwrap() {
        assert_eq!(keys(d), sorted(&[&ADAPTER, &listing]), "{d}");
    }
}

#[test]
fn vulkan_doctor_json_keeps_its_device_keys() {
    let args = [
        "doctor", "--api", "vulkan", "--size", "4MiB", "--repeat", "1", "--json",
    ];
    let v = report(&args);
    assert_eq!(keys(&v["device"]), sorted(&[&ADAPTER]), "{v}");
}
