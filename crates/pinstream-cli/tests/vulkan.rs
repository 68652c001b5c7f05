//! Every command that takes `--api vulkan`, on the machine's Vulkan device (lavapipe in CI:
//! `mesa-vulkan-drivers`). Without Vulkan these tests fail, saying what to install: they are
//! never skipped.

mod common;

use common::{clean_exit, fresh_dir, pinstream, stderr};
use pinstream_lab::kernels::mix_u32_ref;
use std::process::Output;

/// Standard output as text, after checking the command succeeded.
fn ok(o: &Output) -> String {
    clean_exit(o);
    let err = stderr(o);
    assert!(
        !err.contains("Vulkan is not usable here"),
        "these tests need a Vulkan device: apt-get install mesa-vulkan-drivers (lavapipe): {err}"
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).expect("a JSON report")
}

#[test]
fn devices_lists_the_vulkan_device() {
    let text = ok(&pinstream(&["devices", "--api", "vulkan"]));
    assert!(text.starts_with("Vulkan devices:"), "{text}");
    let j = json(&pinstream(&["devices", "--api", "vulkan", "--json"]));
    let d = &j["devices"][0];
    assert_eq!(d["api"], "Vulkan");
    assert!(d["max_alloc"].as_u64().unwrap() > 0, "{j}");
}

#[test]
fn bench_measures_every_vulkan_pinning() {
    let j = json(&pinstream(&[
        "bench",
        "--api",
        "vulkan",
        "--sizes",
        "64KiB,256KiB",
        "--repeat",
        "1",
        "--json",
    ]));
    let names: Vec<&str> = j["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"host-visible"), "{names:?}");
    for s in j["strategies"].as_array().unwrap() {
        assert!(s["error"].is_null(), "{s}");
        assert_eq!(s["points"].as_array().unwrap().len(), 2, "{s}");
    }
    // --latency and --gather run through Vulkan (tests/vulkan_copy.rs); --strategy does not.
    let o = pinstream(&["bench", "--api", "vulkan", "--strategy", "register"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let want = "--strategy does not apply with --api vulkan";
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
}

#[test]
fn demo_checks_both_workloads_through_vulkan() {
    let j = json(&pinstream(&[
        "demo", "--api", "vulkan", "--size", "8MiB", "--json",
    ]));
    assert_eq!(j["device"]["api"], "Vulkan");
    for w in j["workloads"].as_array().unwrap() {
        assert_eq!(w["mismatches"], 0, "{w}");
        assert!(w["checked"].as_u64().unwrap() > 0, "{w}");
    }
}

#[test]
fn doctor_measures_through_vulkan() {
    let text = ok(&pinstream(&["doctor", "--api", "vulkan", "--size", "4MiB"]));
    assert!(text.contains("host-visible"), "{text}");
    // Mapped memory: kernels read and write it in place, checked against the CPU.
    assert!(
        text.contains(
            "mapped memory (vk-import-host, 4 MiB): a kernel reads it across the bus at "
        ),
        "{text}"
    );
    let j = json(&pinstream(&[
        "doctor", "--api", "vulkan", "--size", "4MiB", "--json",
    ]));
    let m = &j["mapped"];
    assert!(m["unavailable"].is_null(), "{m}");
    assert_eq!(m["verified"], true, "{m}");
    assert!(m["read_gbps"].as_f64().unwrap() > 0.0, "{m}");
    assert!(m["write_gbps"].as_f64().unwrap() > 0.0, "{m}");
}

#[test]
fn devices_name_the_mapped_memory_mechanism() {
    let text = ok(&pinstream(&["devices", "--api", "vulkan"]));
    assert!(
        text.contains("    mapped memory (kernels read host memory in place): vk-import-host (")
            && text.contains("(maxStorageBufferRange)"),
        "{text}"
    );
    let j = json(&pinstream(&["devices", "--api", "vulkan", "--json"]));
    assert_eq!(j["devices"][0]["zero_copy"], "vk-import-host", "{j}");
}

#[test]
fn the_embedding_demo_runs_through_vulkan_on_mapped_memory() {
    let j = json(&pinstream(&[
        "demo",
        "--api",
        "vulkan",
        "--workload",
        "embedding",
        "--size",
        "4MiB",
        "--bags",
        "1024",
        "--json",
    ]));
    assert_eq!(j["api"], "Vulkan", "{j}");
    assert_eq!(j["mechanism"], "vk-import-host", "{j}");
    assert_eq!(j["table_buffers"], 1, "{j}");
    assert_eq!(j["config"]["table_bytes"], 4 << 20, "{j}");
    assert!(j["checked_bags"].as_u64().unwrap() > 0, "{j}");
    assert_eq!(j["mismatched_bags"], 0, "{j}");
}

#[test]
fn run_streams_a_file_through_a_wgsl_kernel() {
    let d = fresh_dir("vulkan", "run");
    let n = 300_000u32;
    let input: Vec<u8> = (0..n).flat_map(|i| (i ^ 0x5a5a).to_ne_bytes()).collect();
    let (inp, out) = (d.join("in.bin"), d.join("out.bin"));
    std::fs::write(&inp, &input).unwrap();
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    ok(&pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        kernel,
        "--entry",
        "mix_u32",
        "--input",
        inp.to_str().unwrap(),
        "--dtype",
        "u32",
        "--output",
        out.to_str().unwrap(),
        "--block",
        "256KiB",
    ]));
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), input.len());
    for (i, v) in got.chunks(4).enumerate() {
        let v = u32::from_ne_bytes(v.try_into().unwrap());
        assert_eq!(v, mix_u32_ref(i as u32 ^ 0x5a5a, i as u64), "element {i}");
    }
}

#[test]
fn a_wgsl_mistake_is_refused_with_its_line() {
    let d = fresh_dir("vulkan", "bad");
    let k = d.join("bad.wgsl");
    std::fs::write(
        &k,
        "@compute @workgroup_size(64)\nfn k() { let a: u32 = 1.5; }\n",
    )
    .unwrap();
    let o = pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        k.to_str().unwrap(),
        "--entry",
        "k",
        "--synthetic",
        "1MiB",
        "--dtype",
        "u32",
    ]);
    clean_exit(&o);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains(":2:"), "{}", stderr(&o));
}

#[test]
fn no_vulkan_driver_names_what_to_install() {
    let o = std::process::Command::new(common::bin())
        .args(["devices", "--api", "vulkan"])
        .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("mesa-vulkan-drivers"), "{}", stderr(&o));
}

#[test]
fn run_refuses_the_flags_vulkan_would_ignore() {
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    for flag in [
        ["--strategy", "register"],
        ["--wait", "sleep"],
        ["--numa", "on"],
    ] {
        let mut args = vec![
            "run",
            "--api",
            "vulkan",
            "--kernel",
            kernel,
            "--entry",
            "mix_u32",
            "--synthetic",
            "1MiB",
            "--dtype",
            "u32",
        ];
        args.extend_from_slice(&flag);
        let o = pinstream(&args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{} does not apply with --api vulkan", flag[0])),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn a_work_group_size_the_kernel_does_not_declare_is_refused() {
    let kernel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/mix_u32.wgsl");
    let o = pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        kernel,
        "--entry",
        "mix_u32",
        "--synthetic",
        "1MiB",
        "--dtype",
        "u32",
        "--local",
        "128",
    ]);
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("declares @workgroup_size(256)"),
        "{}",
        stderr(&o)
    );
}

/// out[i] = the sum of row ids[i] of a host table (WGSL), read in place from mapped memory.
const ROW_SUMS: &str = r#"
struct Args { n: vec2<u32>, dim: u32 }
@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
var<immediate> a: Args;
@compute @workgroup_size(64)
fn row_sums(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 64u + lid;
    if (i < a.n.x) {
        var s = 0.0;
        for (var d = 0u; d < a.dim; d++) { s += table[ids[i] * a.dim + d]; }
        out[i] = s;
    }
}
"#;

/// ROW_SUMS that also writes 16 floats past its table in block `bad`.
const ROW_SUMS_OVER: &str = r#"
struct Args { n: vec2<u32>, block: vec2<u32>, dim: u32, rows: u32, bad: u32 }
@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> table: array<f32>;
var<immediate> a: Args;
@compute @workgroup_size(64)
fn row_sums(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 64u + lid;
    if (i < a.n.x) {
        var s = 0.0;
        for (var d = 0u; d < a.dim; d++) { s += table[ids[i] * a.dim + d]; }
        out[i] = s;
    }
    if (a.block.x == a.bad && i < 16u) { table[a.rows * a.dim + i] = 1.0; }
}
"#;

/// `run --api vulkan --host-table` with `--check-bounds on`: a kernel that writes past its
/// table is stopped by the guard, names the table and its flag, and writes no output (the
/// guard covers every buffer a kernel is bound to, whatever the API).
#[test]
fn a_kernel_writing_past_its_host_table_is_stopped_by_the_guard_through_vulkan() {
    let d = fresh_dir("vulkan", "host-table-over");
    std::fs::write(d.join("k.wgsl"), ROW_SUMS_OVER).unwrap();
    let (rows, dim) = (1000u32, 16u32);
    let table: Vec<f32> = (0..rows * dim).map(|i| (i % 101) as f32).collect();
    let ids: Vec<u32> = (0..10_000).map(|i| (i * 7919) % rows).collect();
    std::fs::write(d.join("table.bin"), bytemuck::cast_slice::<f32, u8>(&table)).unwrap();
    std::fs::write(d.join("ids.bin"), bytemuck::cast_slice::<u32, u8>(&ids)).unwrap();
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    let o = pinstream(&[
        "run",
        "--api",
        "vulkan",
        "--kernel",
        &p("k.wgsl"),
        "--entry",
        "row_sums",
        "--input",
        &p("ids.bin"),
        "--dtype",
        "u32",
        "--out-dtype",
        "f32",
        "--output",
        &p("out.bin"),
        "--arg",
        "dim=16",
        "--arg",
        &format!("rows={rows}"),
        "--arg",
        "bad=2",
        "--block",
        "16KiB",
        "--check-bounds",
        "on",
        "--host-table",
        &format!("table={}", p("table.bin")),
    ]);
    let table_bytes = (rows * dim * 4) as usize;
    common::stopped_writing_past_host_table(&o, None, table_bytes, &d.join("out.bin"), "");
}

/// out[i] = the lengths (`arrayLength`) of the host table, the input block and the output
/// block: table × 65536 + input + output.
const LENGTHS: &str = r#"
struct Args { n: vec2<u32> }
@group(0) @binding(0) var<storage, read> ids: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
var<immediate> a: Args;
@compute @workgroup_size(64)
fn lengths(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let i = (wg.y * groups.x + wg.x) * 64u + lid;
    if (i < a.n.x) { out[i] = arrayLength(&table) * 65536u + arrayLength(&ids) + arrayLength(&out); }
}
"#;

/// A WGSL kernel reads the length of each buffer it is bound to (`arrayLength`) as its data's
/// length, guarded or not: a host table of 16000 floats is 16000 long, an input and an output
/// block of 16 KiB 4096 each, not the guard zone after them too. Before, every buffer was
/// bound whole, so with the guard on (the default on lavapipe) the table read 32768 (its
/// 64 KiB zone and the page its memory is rounded to counted) and each block 8192, and a
/// kernel bounded by arrayLength read the canary as data; with the guard off the table read
/// 16384 (the page rounding).
#[test]
fn a_wgsl_kernel_reads_its_buffers_lengths_without_their_guard_zones() {
    let d = fresh_dir("vulkan", "lengths");
    std::fs::write(d.join("k.wgsl"), LENGTHS).unwrap();
    std::fs::write(d.join("table.bin"), vec![0u8; 64_000]).unwrap();
    let ids: Vec<u32> = (0..10_000).collect();
    std::fs::write(d.join("ids.bin"), bytemuck::cast_slice::<u32, u8>(&ids)).unwrap();
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    for check in ["on", "off"] {
        let out = p(&format!("out-{check}.bin"));
        let args = [
            "run",
            "--api",
            "vulkan",
            "--kernel",
            &p("k.wgsl"),
            "--entry",
            "lengths",
            "--input",
            &p("ids.bin"),
            "--dtype",
            "u32",
            "--out-dtype",
            "u32",
            "--output",
            &out,
            "--block",
            "16KiB",
            "--check-bounds",
            check,
            "--host-table",
            &format!("table={}", p("table.bin")),
        ];
        ok(&pinstream(&args));
        let got: Vec<u32> = std::fs::read(&out)
            .unwrap()
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got.len(), ids.len());
        let want = 16_000 * 65536 + 4096 + 4096;
        if let Some((i, v)) = got.iter().enumerate().find(|(_, &v)| v != want) {
            let (t, b) = (v / 65536, v % 65536);
            panic!("--check-bounds {check}, output {i}: the table's length read {t}, the blocks' {b} together (want 16000 and 8192)");
        }
    }
}

/// The most one binding of mapped memory covers on the first Vulkan device
/// (maxStorageBufferRange, at most 1 GiB), and the device's largest allocation.
fn mapped_binding() -> (u64, u64) {
    use pinstream::backend::api::{Adapter, Instance};
    let instance = pinstream::backend::vulkan::VulkanInstance::new().expect("Vulkan");
    let adapter = &instance.adapters().unwrap()[0];
    let range = adapter.caps().max_storage_range;
    let binding = pinstream::backend::vulkan::mapped_binding(range) as u64;
    (binding, adapter.info().max_alloc)
}

/// `run --host-table` through Vulkan: the table in mapped memory, one binding; a table above
/// one binding (maxStorageBufferRange: 128 MiB on lavapipe; 1 GiB on the H200, whose 4 GiB
/// range pinstream caps) is refused before anything is pinned, naming the limit, and no
/// output is left.
#[test]
fn run_reads_a_host_table_in_place_through_vulkan() {
    let d = fresh_dir("vulkan", "host-table");
    std::fs::write(d.join("k.wgsl"), ROW_SUMS).unwrap();
    let table: Vec<f32> = (0..16_000)
        .map(|i| ((i * 37) % 101) as f32 - 50.0)
        .collect();
    let ids: Vec<u32> = (0..10_000).map(|i| (i * 7919) % 1000).collect();
    std::fs::write(d.join("table.bin"), bytemuck::cast_slice::<f32, u8>(&table)).unwrap();
    std::fs::write(d.join("ids.bin"), bytemuck::cast_slice::<u32, u8>(&ids)).unwrap();
    // A table one page above the device's binding limit (sparse: read as zeros).
    let (binding, max_alloc) = mapped_binding();
    let big = std::fs::File::create(d.join("big.bin")).unwrap();
    big.set_len(binding + 4096).unwrap();
    let p = |f: &str| d.join(f).to_str().unwrap().to_string();
    let run = |table: &str, out: &str| {
        let (k, i, o, t) = (
            p("k.wgsl"),
            p("ids.bin"),
            p(out),
            format!("table={}", p(table)),
        );
        pinstream(&[
            "run",
            "--api",
            "vulkan",
            "--kernel",
            &k,
            "--entry",
            "row_sums",
            "--input",
            &i,
            "--dtype",
            "u32",
            "--out-dtype",
            "f32",
            "--output",
            &o,
            "--arg",
            "dim=16",
            "--block",
            "16KiB",
            "--host-table",
            &t,
        ])
    };
    let text = ok(&run("table.bin", "out.bin"));
    assert!(
        text.contains("in mapped pinned memory (vk-import-host)"),
        "{text}"
    );
    let out = std::fs::read(d.join("out.bin")).unwrap();
    for (i, v) in out.chunks(4).enumerate() {
        let r = ids[i] as usize;
        let want: f32 = table[r * 16..(r + 1) * 16].iter().sum();
        assert_eq!(
            f32::from_le_bytes(v.try_into().unwrap()),
            want,
            "output {i}"
        );
    }
    let o = run("big.bin", "out2.bin");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let want = format!(
        "lies in 2 buffers of at most {} (maxStorageBufferRange",
        pinstream::units::Bytes(binding / 4096 * 4096)
    );
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert!(!d.join("out2.bin").exists());
    // Above the device's largest allocation too: still the binding named (the check is the
    // API's, not OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE), before anything is pinned.
    let huge = std::fs::File::create(d.join("huge.bin")).unwrap();
    huge.set_len(max_alloc + 4096).unwrap();
    let o = run("huge.bin", "out3.bin");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(maxStorageBufferRange"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("CL_DEVICE"), "{}", stderr(&o));
    assert!(!d.join("out3.bin").exists());
}
