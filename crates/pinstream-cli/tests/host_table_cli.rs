//! `run --host-table NAME=FILE` through the real binary on PoCL: a kernel summing rows of a
//! table it reads in place from mapped pinned memory, checked against the CPU, beside a
//! streamed input; and every refusal, naming the flag, with no output left behind.

use std::path::{Path, PathBuf};
mod common;

use common::{clean_exit, pinstream, refused_with, stderr, stopped_writing_past_host_table};

const DIM: usize = 16;
const ROWS: usize = 1000;

/// out[i] = the sum of row ids[i] of the table.
const ROW_SUMS: &str = r#"
__kernel void row_sums(__global const uint* ids, __global float* out,
                       __global const float* table, ulong n, uint dim) {
    size_t i = get_global_id(0);
    if (i < n) {
        float s = 0.0f;
        for (uint d = 0; d < dim; d++) s += table[(size_t)ids[i] * dim + d];
        out[i] = s;
    }
}
"#;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A folder with the kernel, a table of ROWS × DIM floats and `ids` row ids.
fn setup(name: &str, ids: usize) -> (PathBuf, Vec<f32>, Vec<u32>) {
    let d = common::fresh_dir("host-table", name);
    std::fs::write(d.join("k.cl"), ROW_SUMS).unwrap();
    let table: Vec<f32> = (0..ROWS * DIM)
        .map(|i| ((i * 37) % 101) as f32 - 50.0)
        .collect();
    let ids: Vec<u32> = (0..ids).map(|i| ((i * 7919) % ROWS) as u32).collect();
    common::write_le(&d.join("table.bin"), &table, f32::to_le_bytes);
    common::write_le(&d.join("ids.bin"), &ids, u32::to_le_bytes);
    (d, table, ids)
}

/// `run` of the row sums in `d`, with `extra` flags after the usual ones.
fn run(d: &Path, table_flag: &str, extra: &[&str]) -> std::process::Output {
    run_in(&[], d, table_flag, extra)
}

/// [`run`] with the environment variables `env` set.
fn run_in(
    env: &[(&str, &str)],
    d: &Path,
    table_flag: &str,
    extra: &[&str],
) -> std::process::Output {
    let (k, ids, out) = (d.join("k.cl"), d.join("ids.bin"), d.join("out.bin"));
    let mut args = vec!["run", "--kernel", s(&k), "--entry", "row_sums"];
    args.extend(common::row_sums_flags(s(&ids), s(&out)));
    args.extend(["--block", "64KiB", "--host-table", table_flag]);
    args.extend_from_slice(extra);
    let o = std::process::Command::new(common::bin())
        .envs(env.iter().copied())
        .args(&args)
        .output()
        .expect("binary runs");
    clean_exit(&o);
    o
}

#[test]
fn a_kernel_sums_rows_of_a_host_table_read_in_place() {
    let (d, table, ids) = setup("sums", 100_003);
    let flag = format!("table={}", s(&d.join("table.bin")));
    let o = run(&d, &flag, &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = &v["host_tables"][0];
    assert_eq!(t["name"], "table");
    assert_eq!(t["bytes"], (ROWS * DIM * 4) as u64);
    // PoCL's CPU device reads its heap; a GPU names its own mechanism (NVIDIA: nv-host).
    match common::default_device_is_cpu() {
        true => assert_eq!(t["mechanism"], "cpu-heap"),
        false => assert!(
            t["mechanism"].as_str().is_some_and(|m| !m.is_empty()),
            "{t}"
        ),
    }
    assert!(
        v["stream"]["blocks"].as_u64().unwrap() > 1,
        "several blocks stream beside it"
    );
    let got = std::fs::read(d.join("out.bin")).unwrap();
    assert_eq!(got.len(), ids.len() * 4);
    for (k, (c, &id)) in got.chunks(4).zip(&ids).enumerate() {
        let row = &table[id as usize * DIM..(id as usize + 1) * DIM];
        let want: f32 = row.iter().sum();
        let have = f32::from_le_bytes(c.try_into().unwrap());
        assert_eq!(have, want, "output {k} (row {id})");
    }
}

/// The row sums, and 16 floats (64 bytes) written past the end of the table in block `bad`.
const ROW_SUMS_OVER: &str = r#"
__kernel void row_sums(__global const uint* ids, __global float* out,
                       __global float* table, ulong n, ulong block, uint dim, uint rows,
                       uint bad) {
    size_t i = get_global_id(0);
    if (i < n) {
        float s = 0.0f;
        for (uint d = 0; d < dim; d++) s += table[(size_t)ids[i] * dim + d];
        out[i] = s;
    }
    if (block == bad && i < 16) table[(size_t)rows * dim + i] = 1.0f;
}
"#;

/// A kernel that writes past the end of its host table is caught by the bounds guard as an
/// overrun of any other buffer is: the run stops naming the kernel, the table, the block and
/// how far it wrote, exit 1, and no output. Before the guard covered host tables, the write
/// landed in PoCL's heap after the table: `free(): invalid next size` (exit 134) or SIGSEGV
/// (139), with `--check-bounds on` too, and at times after "result written".
#[test]
fn a_kernel_writing_past_its_host_table_is_stopped_by_the_guard() {
    let checks = if common::default_device_is_cpu() {
        vec![None, Some("on")]
    } else {
        vec![Some("on")]
    };
    for check in checks {
        let (d, _, _) = setup(&format!("over-{check:?}"), 100_003);
        std::fs::write(d.join("k.cl"), ROW_SUMS_OVER).unwrap();
        let flag = format!("table={}", s(&d.join("table.bin")));
        let rows = format!("rows={ROWS}");
        let mut extra = vec!["--arg", &rows, "--arg", "bad=2"];
        extra.extend(check.map(|c| ["--check-bounds", c]).into_iter().flatten());
        let o = run(&d, &flag, &extra);
        let (bytes, out) = (ROWS * DIM * 4, d.join("out.bin"));
        let context = format!("{check:?}: ");
        stopped_writing_past_host_table(&o, Some("row_sums"), bytes, &out, &context);
    }
}

/// Refused with exit 2, the message holding each of `want`, and no output written.
fn refused(d: &Path, o: &std::process::Output, want: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for w in want {
        assert!(err.contains(w), "`{w}` not in: {err}");
    }
    assert!(!d.join("out.bin").exists(), "no output is left behind");
}

#[test]
fn every_bad_host_table_is_refused_naming_the_flag() {
    let (d, _, _) = setup("refused", 1000);
    let table = s(&d.join("table.bin")).to_string();
    let o = run(&d, "table", &[]);
    refused(
        &d,
        &o,
        &["`table` is not NAME=FILE", "--host-table table=rows.bin"],
    );
    let o = run(&d, &format!("rows={table}"), &[]);
    refused(&d, &o, &["no buffer argument `rows`", "float* table"]);
    let o = run(&d, &format!("dim={table}"), &[]);
    refused(&d, &o, &["argument `dim` (uint) is no pointer"]);
    let missing = d.join("missing.bin");
    let o = run(&d, &format!("table={}", s(&missing)), &[]);
    refused(&d, &o, &[&format!("--host-table table={}: ", s(&missing))]);
    std::fs::write(d.join("empty.bin"), b"").unwrap();
    let empty = d.join("empty.bin");
    let o = run(&d, &format!("table={}", s(&empty)), &[]);
    refused(
        &d,
        &o,
        &[&format!(
            "--host-table table={}: {} is empty",
            s(&empty),
            s(&empty)
        )],
    );
    // Named twice: a second --host-table for the same argument.
    let o = run(
        &d,
        &format!("table={table}"),
        &["--host-table", &format!("table={table}")],
    );
    refused(&d, &o, &["bound to argument `table` twice"]);
}

/// The default device's largest buffer, as `devices --json` gives it.
fn default_max_alloc() -> u64 {
    max_alloc_in(&[])
}

/// [`default_max_alloc`] with the environment variables `env` set.
fn max_alloc_in(env: &[(&str, &str)]) -> u64 {
    let o = std::process::Command::new(common::bin())
        .envs(env.iter().copied())
        .args(["devices", "--json"])
        .output()
        .expect("binary runs");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    let default = devices.iter().find(|x| x["default"] == true).unwrap();
    default["max_alloc"].as_u64().unwrap()
}

#[test]
fn a_host_table_above_the_largest_buffer_is_refused_with_the_limit() {
    let (d, _, _) = setup("too-large", 1000);
    let max_alloc = default_max_alloc();
    // A sparse file one word above the limit: refused before anything is read or pinned.
    let big = d.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(max_alloc + 4)
        .unwrap();
    let o = run(&d, &format!("table={}", s(&big)), &[]);
    let limit = pinstream::units::Bytes(max_alloc).to_string();
    refused(
        &d,
        &o,
        &[
            "CL_DEVICE_MAX_MEM_ALLOC_SIZE",
            &limit,
            "--host-table table=",
        ],
    );
}

/// With the bounds guard on, a table takes a guard zone in the same buffer (as large as the
/// table, at most 1 MiB): one that fits the largest buffer alone but not with its zone (here
/// a page below the limit) is refused before anything is read, naming the zone and the flag
/// that binds it unguarded.
#[test]
fn a_host_table_whose_guard_zone_does_not_fit_one_buffer_is_refused() {
    let (d, _, _) = setup("guard-too-large", 1000);
    let max_alloc = default_max_alloc();
    let big = d.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(max_alloc - 4096)
        .unwrap();
    let o = run(&d, &format!("table={}", s(&big)), &["--check-bounds", "on"]);
    refused(
        &d,
        &o,
        &[
            "--host-table table=",
            "the table with its bounds guard zone (1 MiB)",
            "does not fit one buffer",
            "pass --check-bounds off to bind it unguarded",
        ],
    );
}

/// A guarded table's zone is at most 1 MiB, not as large as the table: a table above half
/// the largest buffer loads and runs with the guard on (PoCL told to have 1 GiB, so a
/// largest buffer of 256 MiB, and a table of 128 MiB and a page: its rows first, then
/// zeros). Before, its zone was as large as the table, so it was refused (`does not fit one
/// buffer`, exit 2) where it loaded unguarded, and every guarded table took twice its size
/// in pinned memory.
#[test]
fn a_guarded_host_table_above_half_the_largest_buffer_loads() {
    if !common::default_device_is_cpu() {
        common::skip("POCL_MEMORY_LIMIT sets the largest buffer of PoCL's CPU device only");
        return;
    }
    let env = [("POCL_MEMORY_LIMIT", "1")];
    let max_alloc = max_alloc_in(&env);
    assert!(
        max_alloc <= 1 << 30,
        "POCL_MEMORY_LIMIT=1 gives {max_alloc}"
    );
    let (d, table, ids) = setup("guard-half", 10_000);
    let big = max_alloc / 2 + 4096;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("table.bin"));
    file.unwrap().set_len(big).unwrap();
    let flag = format!("table={}", s(&d.join("table.bin")));
    let o = run_in(&env, &d, &flag, &["--check-bounds", "on", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["host_tables"][0]["bytes"], big);
    let got = std::fs::read(d.join("out.bin")).unwrap();
    for (c, &id) in got.chunks(4).zip(&ids) {
        let want: f32 = table[id as usize * DIM..(id as usize + 1) * DIM]
            .iter()
            .sum();
        assert_eq!(f32::from_le_bytes(c.try_into().unwrap()), want, "row {id}");
    }
}

#[test]
fn host_tables_on_several_devices_are_refused() {
    let (d, _, _) = setup("several", 1000);
    let flag = format!("table={}", s(&d.join("table.bin")));
    let (k, ids) = (d.join("k.cl"), d.join("ids.bin"));
    let o = std::process::Command::new(common::bin())
        .env("POCL_DEVICES", "pthread pthread")
        .args([
            "run",
            "--kernel",
            s(&k),
            "--entry",
            "row_sums",
            "--input",
            s(&ids),
            "--dtype",
            "u32",
            "--out-dtype",
            "f32",
            "--arg",
            "dim=16",
            "--devices",
            "0,1",
            "--host-table",
            &flag,
        ])
        .output()
        .unwrap();
    clean_exit(&o);
    let err = stderr(&o);
    if err.contains("no device") || err.contains("--devices") && !err.contains("--host-table") {
        common::skip(&format!("two PoCL devices are not available here: {err}"));
        return;
    }
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--host-table binds one buffer in one device's"),
        "{err}"
    );
}

/// `demo --workload embedding`: bags of random rows of a table in mapped pinned memory,
/// summed by one kernel reading the rows in place, every checked bag equal to the CPU's.
#[test]
fn the_embedding_demo_sums_bags_of_rows_read_in_place() {
    let d = common::fresh_dir("host-table", "embedding");
    let save = d.join("report.json");
    let o = pinstream(&[
        "demo",
        "--workload",
        "embedding",
        "--size",
        "4MiB",
        "--bags",
        "1024",
        "--seed",
        "3",
        "--json",
        "--save",
        s(&save),
    ]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"]["table_bytes"], 4 << 20, "{v}");
    assert_eq!(
        (v["checked_bags"].as_u64(), v["mismatched_bags"].as_u64()),
        (Some(512), Some(0))
    );
    assert!(v["mechanism"].is_string(), "{v}");
    assert!(v["rows_per_s"].as_f64().unwrap() > 0.0 && v["read_gbps"].as_f64().unwrap() > 0.0);
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&save).unwrap()).unwrap();
    assert_eq!(saved, v, "--save holds the printed report");
    let text = pinstream(&[
        "demo",
        "--workload",
        "embedding",
        "--size",
        "1MiB",
        "--bags",
        "1024",
    ]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("check: 512 of 512 bags match the CPU reference"),
        "{out}"
    );
    assert!(
        out.contains("rows/s") && out.contains("VRAM cost of the table"),
        "{out}"
    );
}

#[test]
fn the_embedding_demo_refuses_what_it_cannot_do() {
    let embedding = ["demo", "--workload", "embedding"];
    refused_with(
        &[&embedding[..], &["--size", "100"]].concat(),
        "holds no row of the table",
    );
    for (flag, value) in [
        ("--block", "1MiB"),
        ("--vram-budget", "1GiB"),
        ("--devices", "0"),
    ] {
        let args = [&embedding[..], &["--size", "1MiB", flag, value]].concat();
        refused_with(&args, &format!("{flag} applies to --workload stream"));
    }
    let args = ["demo", "--size", "1MiB", "--bags", "10"];
    refused_with(&args, "--bags applies to --workload embedding");
    for bags in ["0", "many"] {
        refused_with(&[&embedding[..], &["--bags", bags]].concat(), "--bags");
    }
}

/// With fewer bags a batch than are checked, every bag of every timed batch is checked.
#[test]
fn the_embedding_demo_checks_every_bag_of_small_batches() {
    let o = pinstream(&[
        "demo",
        "--workload",
        "embedding",
        "--size",
        "1MiB",
        "--bags",
        "10",
        "--json",
    ]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["config"]["bags"], 10, "{v}");
    let batches = v["config"]["batches"].as_u64().unwrap();
    assert_eq!(
        (v["checked_bags"].as_u64(), v["mismatched_bags"].as_u64()),
        (Some(10 * batches), Some(0)),
        "{v}"
    );
}
