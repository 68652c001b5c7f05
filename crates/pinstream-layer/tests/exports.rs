//! What the library shows the dynamic linker: the two layer entry points and the seven
//! interposed OpenCL functions, and no dependency on libOpenCL (the layer must never pull a
//! loader of its own into a process). And an executable that links the crate as an rlib (as
//! `pinstream` does, for `pinstream devices`) exports none of them, so that the drivers it
//! loads never bind to them. Uses binutils' `nm` and `readelf` (installed with `cc`).
#![cfg(unix)] // the layer is a Linux ICD-loader / LD_PRELOAD layer (see the crate docs)

mod common;

use std::process::Command;

const ENTRY_POINTS: [&str; 9] = [
    "clCreateBuffer",
    "clCreateBufferWithProperties",
    "clCreateSubBuffer",
    "clEnqueueCopyBuffer",
    "clEnqueueReadBuffer",
    "clEnqueueWriteBuffer",
    "clGetLayerInfo",
    "clInitLayer",
    "clSetKernelArg",
];

/// The defined dynamic symbols of `path` whose names start with `cl`.
fn exported_cl_symbols(path: &std::path::Path) -> Vec<String> {
    let mut cmd = Command::new("nm");
    cmd.args(["-D", "--defined-only"]).arg(path);
    let out = common::run_ok(cmd);
    let mut names: Vec<String> = out
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|n| n.starts_with("cl"))
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

#[test]
fn the_library_exports_its_entry_points_and_needs_no_opencl_loader() {
    let lib = common::layer_library();
    assert_eq!(exported_cl_symbols(&lib), ENTRY_POINTS);
    let mut cmd = Command::new("readelf");
    cmd.arg("-d").arg(&lib);
    let dynamic = common::run_ok(cmd);
    assert!(
        dynamic.contains("NEEDED"),
        "readelf lists dependencies:\n{dynamic}"
    );
    assert!(
        !dynamic.contains("libOpenCL"),
        "the layer links no loader:\n{dynamic}"
    );
}

#[test]
fn an_executable_linking_the_crate_exports_none_of_them() {
    // Use the crate as `pinstream devices` does, so its code is linked in.
    let report = pinstream_layer::probe::report();
    assert!(!report.lines().is_empty());
    let exe = std::env::current_exe().expect("this test's path");
    assert_eq!(exported_cl_symbols(&exe), Vec::<String>::new());
}
