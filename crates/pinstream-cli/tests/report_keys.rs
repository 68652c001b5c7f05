//! The keys of `devices --json` and `doctor --json`, through OpenCL (PoCL) and Vulkan
//! (lavapipe): scripts read them, so a change of what describes a device
//! (`HostApi::driver_details`, kept whatever the API as `backend::details::Details`) must not
//! drop or rename one. OpenCL's devices are described by its driver (`DeviceInfo`), Vulkan's
//! by what every API says (`AdapterInfo`); the rest of a listed device (the ways to pin, the
//! one chosen, mapped memory) has the same keys for every API.

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

/// What every API says of a device (`AdapterInfo`; `vendor_kind` since the CLI finds the same
/// GPU through another API by it, named as OpenCL's description names it).
const ADAPTER: [&str; 9] = [
    "api",
    "index",
    "name",
    "driver",
    "pci_address",
    "memory",
    "max_alloc",
    "kind",
    "vendor_kind",
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
    for d in v["devices"].as_array().unwrap() {
        assert_eq!(keys(d), sorted(&[&OPENCL_DEVICE, &LISTING]), "{d}");
        offers_what_it_chooses(d);
    }
}

/// What the listing says of a device beside its description, whatever the API.
const LISTING: [&str; 7] = [
    "default",
    "strategies",
    "unavailable",
    "auto",
    "auto_reason",
    "zero_copy",
    "zero_copy_note",
];

/// A listed device offers at least one way to pin, and the way chosen for it is one of those
/// (the listing asks the adapter, not an opened device, so both must come from one source).
fn offers_what_it_chooses(d: &Value) {
    let offered: Vec<&str> = (d["strategies"].as_array().unwrap().iter())
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(!offered.is_empty(), "{d}");
    let auto = d["auto"].as_str().unwrap_or_else(|| panic!("no auto: {d}"));
    assert!(offered.contains(&auto), "{d}");
    assert!(!d["auto_reason"].as_str().unwrap().is_empty(), "{d}");
    for lacking in d["unavailable"].as_array().unwrap() {
        assert!(!offered.contains(&lacking[0].as_str().unwrap()), "{d}");
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
    for d in v["devices"].as_array().unwrap() {
        assert_eq!(keys(d), sorted(&[&ADAPTER, &LISTING]), "{d}");
        offers_what_it_chooses(d);
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
