//! Helpers shared by the tests that run the real binary.
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[cfg(target_os = "linux")]
pub mod cgroup;

/// The binary under test; `CARGO_BIN_EXE_pinstream` at run time lets the GPU script point
/// these tests at the binary it carried.
pub fn bin() -> String {
    std::env::var("CARGO_BIN_EXE_pinstream")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pinstream").to_string())
}

/// Runs the binary with `args`.
pub fn pinstream(args: &[&str]) -> Output {
    let run = || Command::new(bin()).args(args).output();
    // Wine now and then fails to start a child (ERROR_INTERNAL_ERROR, 1359, after "wine client
    // error: sendmsg: Socket operation on non-socket"; once in CI on 2026-12-06): one retry
    // there. The binary did not start, so nothing of it ran twice.
    match run() {
        Err(e) if cfg!(windows) && e.raw_os_error() == Some(1359) => run(),
        r => r,
    }
    .expect("binary runs")
}

/// Its standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The process neither panicked nor died by a signal.
pub fn clean_exit(o: &Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{err}");
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        None,
        "{err}"
    );
    assert_ne!(o.status.code(), Some(101), "{err}");
}

/// Runs `pinstream args`, which must end cleanly with exit code 2 (a refusal) and `needle` in
/// its message.
pub fn refused_with(args: &[&str], needle: &str) -> Output {
    let o = pinstream(args);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: `{needle}` not in: {err}");
    o
}

/// The scenario of a kernel that writes 16 floats past the end of its host table `table`
/// (`run --host-table table=…`, `table_bytes` long) in block 2, as every API runs it: the
/// bounds guard stops the run with exit 1, the message names the overrun (with `kernel` where
/// given: "kernel `row_sums` wrote …"), the table's flag and that no output was written, and
/// nothing is left at `out`. `context` starts every failure's message.
pub fn stopped_writing_past_host_table(
    o: &Output,
    kernel: Option<&str>,
    table_bytes: usize,
    out: &std::path::Path,
    context: &str,
) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{context}{err}");
    let what = format!(
        "{}wrote 64 bytes past the end of its buffer `table` (the host-resident buffer, {table_bytes} bytes) in block 2",
        kernel.map_or(String::new(), |k| format!("kernel `{k}` "))
    );
    for needle in [what.as_str(), "--host-table table", "wrote no output"] {
        assert!(err.contains(needle), "{context}`{needle}` not in: {err}");
    }
    assert!(!out.exists(), "{context}no output is left behind");
}

/// The flags of a `run` of the host-table tests' `row_sums` kernel (OpenCL's and CUDA's) after
/// its kernel and entry: u32 row ids streamed from `ids`, one f32 sum per id into `out`,
/// rows of 16 floats.
pub fn row_sums_flags<'a>(ids: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "--input",
        ids,
        "--dtype",
        "u32",
        "--out-dtype",
        "f32",
        "--output",
        out,
        "--arg",
        "dim=16",
    ]
}

/// Writes `values` to `path`, each as its little-endian bytes (`le`: `f32::to_le_bytes`, …).
pub fn write_le<T: Copy, const N: usize>(
    path: &std::path::Path,
    values: &[T],
    le: fn(T) -> [u8; N],
) {
    let bytes: Vec<u8> = values.iter().flat_map(|&v| le(v)).collect();
    std::fs::write(path, bytes).unwrap();
}

/// A fresh, empty folder for one test: `pinstream-TAG-NAME-PID` in the temporary folder.
pub fn fresh_dir(tag: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pinstream-{tag}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Skips the calling test visibly (`pinstream_testkit::skip`: reported, counted by
/// scripts/gpu-tests.sh, never a pass).
#[allow(unused_imports)] // each test binary includes this module; not all of them skip
pub use pinstream_testkit::skip;

/// The OpenCL platforms `pinstream devices` lists under `env` other than PoCL's (Portable
/// Computing Language). A loader that ignores `OCL_ICD_VENDORS` (CUDA's libOpenCL.so.1 on the
/// H200 machine) lists the GPU's platform even where `env` names PoCL's ICD file alone.
pub fn platforms_besides_pocl(env: &[(&str, &str)]) -> Vec<String> {
    let o = Command::new(bin())
        .arg("devices")
        .envs(env.iter().copied())
        .output()
        .expect("binary runs");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("platform ") && !l.contains("Portable Computing Language"))
        .map(str::to_string)
        .collect()
}

/// Whether the default device (what `run` uses without `--device`) is a CPU device, from
/// `pinstream devices --json`: where `run --check-bounds auto` guards.
pub fn default_device_is_cpu() -> bool {
    let o = pinstream(&["devices", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("devices --json");
    let devices = v["devices"].as_array().expect("a device list");
    let default = devices.iter().find(|d| d["default"] == true);
    default.expect("a default device")["device_type"] == "CPU"
}

/// Spawns with the phases logged, and waits (at most a minute) until stderr shows `phase`;
/// returns the child and a thread collecting the rest of stderr.
pub fn spawn_until(args: &[&str], phase: &str) -> (Child, std::thread::JoinHandle<String>) {
    use std::io::BufRead;
    let mut child = Command::new(bin())
        .args(args)
        .env("PINSTREAM_LOG", "pinstream::phase=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let phase = phase.to_string();
    let rest = std::thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains(&phase) {
                let _ = tx.send(());
            }
            all += &line;
            all += "\n";
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the phase was reached");
    (child, rest)
}

pub fn signal(child: &Child, sig: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// Runs `pinstream args` for at most `limit` (see [`finish_within`]).
pub fn run_within<S: AsRef<std::ffi::OsStr>>(args: &[S], limit: Duration) -> Output {
    let child = Command::new(bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish_within(child, limit)
}

/// Waits for `child` at most `limit`; kills it and fails the test if it is still running.
pub fn finish_within(mut child: Child, limit: Duration) -> Output {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!(
                "still running after {limit:?}: {:?}",
                child.wait_with_output().map(|o| stderr(&o))
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
