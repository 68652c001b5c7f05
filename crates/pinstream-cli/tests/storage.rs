//! `run --from-storage`: inputs streamed from their files through staging rings, the result
//! written block by block; the same bytes as a resident run, a report that says which was
//! used and why, and a trace with the storage's reads and writes.
//!
//! Issue 25's goal: an input three times a container's memory limit streamed from storage, and
//! an output as large written back, inside a memory cgroup (as `docker --memory` sets), give an
//! exact result and are not OOM-killed: `run`'s automatic choice streams the file through
//! staging rings because it does not fit in the container's room. CI runs it at 768 MiB inside
//! 256 MiB (1.5 GiB of disk); the issue's own size, 3 GiB inside 1 GiB (6 GiB of disk), is
//! `--ignored`. The test writes the input and checks the output piece by piece, never holding
//! either. Needs root and a memory controller; elsewhere it is skipped visibly
//! (`common::skip`).
mod common;

use common::{clean_exit, finish_within, fresh_dir, pinstream, spawn_until, stderr};
use std::io::Write;
use std::path::Path;

/// The input repeats a table of `PERIOD` elements, a period that divides no block size, so a
/// block computed at a wrong offset or written to a wrong place does not compare equal.
const PERIOD: u64 = (1 << 21) + 13;

const KERNEL: &str = r#"
__kernel void scramble(__global uint* x, ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * 2654435761u + (uint)((offset + i) % 2097165ul);
}
"#;

/// The input's table and the result's after `passes` runs of the kernel, as bytes (the CPU
/// reference of the kernel).
fn tables(passes: usize) -> (Vec<u8>, Vec<u8>) {
    let input = |i: u64| (i as u32).rotate_left(13) ^ 0x9e37_79b9;
    let once = |x: u32, i: u64| x.wrapping_mul(2_654_435_761).wrapping_add(i as u32);
    let want = |i: u64| (0..passes).fold(input(i), |x, _| once(x, i));
    let bytes = |f: &dyn Fn(u64) -> u32| (0..PERIOD).flat_map(|i| f(i).to_le_bytes()).collect();
    (bytes(&input), bytes(&want))
}

/// Writes `elements` elements of the input table, repeated, to `path`.
fn write_input(path: &Path, table: &[u8], elements: u64) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut left = elements * 4;
    while left > 0 {
        let n = (table.len() as u64).min(left) as usize;
        f.write_all(&table[..n]).unwrap();
        left -= n as u64;
    }
    f.flush().unwrap();
}

/// Checks `path` against the result table, repeated, a period at a time.
#[cfg(target_os = "linux")]
fn check_output(path: &Path, table: &[u8], elements: u64) {
    let f = std::fs::File::open(path).unwrap();
    assert_eq!(
        f.metadata().unwrap().len(),
        elements * 4,
        "the output's length"
    );
    let mut f = std::io::BufReader::new(f);
    let mut buf = vec![0u8; table.len()];
    let (mut at, end) = (0u64, elements * 4);
    while at < end {
        let n = (table.len() as u64).min(end - at) as usize;
        std::io::Read::read_exact(&mut f, &mut buf[..n]).unwrap();
        if buf[..n] != table[..n] {
            let k = (0..n).find(|&k| buf[k] != table[k]).unwrap_or(0);
            panic!(
                "byte {} of the output differs from the CPU reference",
                at + k as u64
            );
        }
        at += n as u64;
    }
}

/// `run` over `inputs` into `out` with `extra` flags; its JSON report.
fn run_json(
    kernel: &Path,
    entry: &str,
    inputs: &[&Path],
    out: &Path,
    extra: &[&str],
) -> serde_json::Value {
    let mut args = vec![
        "run",
        "--kernel",
        kernel.to_str().unwrap(),
        "--entry",
        entry,
    ];
    for i in inputs {
        args.extend(["--input", i.to_str().unwrap()]);
    }
    args.extend([
        "--output",
        out.to_str().unwrap(),
        "--dtype",
        "u32",
        "--json",
    ]);
    args.extend(extra);
    let o = pinstream(&args);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

const ADD: &str = r#"
__kernel void add(__global const uint* a, __global const uint* b, __global uint* c,
                  ulong n, ulong block, ulong offset) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + 3u * b[i] + (uint)(offset + i);
}
"#;

#[test]
fn streamed_from_storage_gives_the_resident_runs_bytes_and_says_so() {
    let d = fresh_dir("storage", "same");
    let (k, add) = (d.join("scramble.cl"), d.join("add.cl"));
    std::fs::write(&k, KERNEL).unwrap();
    std::fs::write(&add, ADD).unwrap();
    let (input, _) = tables(1);
    let (a, b) = (d.join("a.bin"), d.join("b.bin"));
    // 2.5 periods: 20 blocks of 1 MiB and a tail that is not a whole page.
    write_input(&a, &input, PERIOD * 5 / 2);
    std::fs::write(
        &b,
        &std::fs::read(&a).unwrap()[..(PERIOD * 5 / 2 * 4) as usize],
    )
    .unwrap();
    let block = ["--block", "1MiB"];
    let on = [&block[..], &["--from-storage", "on", "--trace"]].concat();
    for (kernel, entry, inputs) in [(&k, "scramble", vec![&*a]), (&add, "add", vec![&*a, &*b])] {
        let (x, y, t) = (d.join("x.bin"), d.join("y.bin"), d.join("t.json"));
        let mut flags = on.clone();
        flags.push(t.to_str().unwrap());
        let r = run_json(kernel, entry, &inputs, &x, &flags);
        let s = &r["storage"];
        assert_eq!(
            (s["mode"].as_str(), s["why"].as_str()),
            (
                Some("storage"),
                Some("streamed from disk: --from-storage on")
            )
        );
        assert!(
            s["read_gbps"].as_f64().unwrap() > 0.0 && s["write_s"].as_f64().is_some(),
            "{s}"
        );
        let r = run_json(kernel, entry, &inputs, &y, &block);
        assert_eq!(r["storage"]["mode"], "resident");
        assert!(
            r["storage"]["why"].as_str().unwrap().starts_with("fits"),
            "{}",
            r["storage"]
        );
        assert!(
            std::fs::read(&x).unwrap() == std::fs::read(&y).unwrap(),
            "{entry}"
        );
        let trace = std::fs::read_to_string(&t).unwrap();
        assert!(trace.contains("storage reads and writes") && trace.contains("\"read 1 MiB\""));
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn storage_refuses_what_it_cannot_stream_with_the_way_out() {
    let d = fresh_dir("storage", "refused");
    let k = d.join("scramble.cl");
    std::fs::write(&k, KERNEL).unwrap();
    let k = k.to_str().unwrap();
    let base = [
        "run",
        "--kernel",
        k,
        "--entry",
        "scramble",
        "--dtype",
        "u32",
        "--from-storage",
        "on",
    ];
    for (extra, says) in [
        (&["--synthetic", "1MiB"][..], "pass --input FILE"),
        (&["--input", k, "--compare-sequential"][..], "drop it"),
    ] {
        let o = pinstream(&[&base[..], extra].concat());
        clean_exit(&o);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--from-storage on cannot stream this run") && err.contains(says),
            "{err}"
        );
    }
    device_inputs_are_refused_with_a_way_out_the_next_run_takes(&base);
    let _ = std::fs::remove_dir_all(&d);
}

/// A device input (a FIFO alike) with `--from-storage on`, with `--elements` or without: the
/// refusal says storage streams regular files and gives the one way out that works. It
/// advised `--elements N` (which the next run refused: "--elements reads part of a file; drop
/// it"), which in turn advised dropping it. The advice, followed, runs.
fn device_inputs_are_refused_with_a_way_out_the_next_run_takes(base: &[&str]) {
    if cfg!(windows) {
        return; // no device path that std::fs reads
    }
    let advice = "/dev/zero is a character device: storage streams regular files, read at offsets ahead of the device; pass --from-storage off with --elements N to read N u32 elements from it, or save it to a file";
    for extra in [
        &["--input", "/dev/zero"][..],
        &["--input", "/dev/zero", "--elements", "1024"],
    ] {
        let o = pinstream(&[base, extra].concat());
        clean_exit(&o);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(
            err.contains("--from-storage on cannot stream this run: ") && err.contains(advice),
            "{extra:?}: {err}"
        );
    }
    let mut followed = base[..base.len() - 1].to_vec();
    followed.extend(["off", "--input", "/dev/zero", "--elements", "1024"]);
    let o = pinstream(&followed);
    assert!(o.status.success(), "{followed:?}: {}", stderr(&o));
}

#[test]
fn bench_storage_measures_direct_reads_the_chain_and_the_baseline_in_one_run() {
    let d = fresh_dir("storage", "bench");
    let f = d.join("data.bin");
    let (input, _) = tables(1);
    write_input(&f, &input, PERIOD * 3 + 5); // 24 MiB and a tail: two blocks and a part
    let o = pinstream(&["bench", "storage", f.to_str().unwrap(), "--json"]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["bytes"], (PERIOD * 3 + 5) * 4);
    for k in ["direct_read_gbps", "chain_gbps", "baseline_gbps"] {
        assert!(r[k].as_f64().is_some_and(|g| g > 0.0), "{k}: {r}");
    }
    // Two baselines of buffered reads into pageable memory, each named for how the page
    // cache serves them: in file order (readahead follows) and a page at a time with
    // POSIX_FADV_RANDOM in shuffled order (none does); the chain over each.
    let named = |k: &str, has: &str| r[k].as_str().is_some_and(|n| n.contains(has));
    assert!(named("baseline", "file order"), "{r}");
    #[cfg(target_os = "linux")]
    {
        assert!(named("random_baseline", "POSIX_FADV_RANDOM"), "{r}");
        for k in ["random_baseline_gbps", "chain_over_random_baseline"] {
            assert!(r[k].as_f64().is_some_and(|g| g > 0.0), "{k}: {r}");
        }
        let o = pinstream(&["bench", "storage", f.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", stderr(&o));
        let lines = text.lines().filter(|l| l.contains("+ pageable copies"));
        assert_eq!(
            lines.count(),
            4,
            "a row and a ratio for each baseline: {text}"
        );
    }
    let o = pinstream(&["bench", "storage", f.to_str().unwrap(), "--gather"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&d);
}

/// `--slots` past any ring (the most a u64 holds, and half of it): the rings are sized with
/// checked sums, as many blocks as there are at most. `2 * slots + read ahead` overflowed
/// (a panic in a debug build; a wrapped, wrong ring size in a release build).
#[test]
fn storage_with_more_slots_than_any_ring_runs() {
    let d = fresh_dir("storage", "slots");
    let (k, input) = (d.join("scramble.cl"), d.join("in.bin"));
    std::fs::write(&k, KERNEL).unwrap();
    let (table, _) = tables(1);
    write_input(&input, &table, 1 << 20); // 4 MiB: 4 blocks of 1 MiB
    for slots in ["18446744073709551615", "9223372036854775807"] {
        let out = d.join("out.bin");
        let flags = ["--block", "1MiB", "--from-storage", "on", "--slots", slots];
        let r = run_json(&k, "scramble", &[&input], &out, &flags);
        assert_eq!(r["storage"]["mode"], "storage", "{slots}: {r}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `scramble`, `iters` times over: blocks that take a while.
const SLOW: &str = r#"
__kernel void slow(__global uint* x, ulong n, ulong block, ulong offset, uint iters) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    uint v = x[i];
    for (uint k = 0; k < iters; k++) v = v * 2654435761u + (uint)k;
    x[i] = v;
}
"#;

/// A run streamed from storage into a FIFO: the reader gets every byte, the same as a file
/// gets. The writer opened the FIFO again for every block, so the reader saw the end after the
/// first, and the next open waited for a reader forever (a hang the first Ctrl-C could not
/// end: the stop waited for the writer).
#[test]
#[cfg_attr(windows, ignore = "a FIFO: Windows has none that std::fs opens")]
fn streamed_from_storage_into_a_fifo_the_reader_gets_every_byte() {
    let d = fresh_dir("storage", "fifo-out");
    let (k, input, file, fifo) = (
        d.join("scramble.cl"),
        d.join("in.bin"),
        d.join("out.bin"),
        d.join("out.fifo"),
    );
    std::fs::write(&k, SLOW).unwrap();
    let (table, _) = tables(1);
    write_input(&input, &table, 2 << 20); // 8 MiB: 8 blocks of 1 MiB, each a while apart
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let args = |iters: &str, out: &Path| {
        let a = [
            "run",
            "--kernel",
            &s(&k),
            "--entry",
            "slow",
            "--arg",
            iters,
            "--dtype",
        ];
        let b = [
            "u32",
            "--input",
            &s(&input),
            "--from-storage",
            "on",
            "--output",
            &s(out),
        ];
        [&a[..], &b, &["--block", "1MiB"]]
            .concat()
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
    };
    let limit = std::time::Duration::from_secs(60);
    let o = common::run_within(&args("iters=300", &fifo), limit);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = reader.join().unwrap();
    let o = common::run_within(&args("iters=300", &file), limit);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(got.len(), 8 << 20, "bytes the FIFO's reader got");
    assert!(
        got == std::fs::read(&file).unwrap(),
        "the same bytes as a file"
    );
    // No reader at all: the run waits for one, and the first Ctrl-C ends it.
    #[cfg(unix)]
    {
        let args = args("iters=1", &fifo);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (child, rest) = common::spawn_until(&args, "a FIFO waits for its reader");
        std::thread::sleep(std::time::Duration::from_millis(300));
        common::signal(&child, "INT");
        let o = finish_within(child, std::time::Duration::from_secs(10));
        let err = rest.join().unwrap();
        assert_eq!(o.status.code(), Some(130), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// `bench storage` on what is not a regular file: refused at once (a FIFO with no writer
/// used to hold `open` forever), naming what it is and what the bench measures, never a flag
/// of another command (it advised `--from-storage off`, which `bench` has not).
#[test]
#[cfg_attr(
    windows,
    ignore = "a FIFO and /dev/zero: Windows has no such paths that std::fs opens"
)]
fn bench_storage_refuses_what_is_not_a_regular_file_at_once() {
    let d = fresh_dir("storage", "not-a-file");
    let fifo = d.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.unwrap().success());
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (d.as_path(), "a folder"),
        (Path::new("/dev/zero"), "a character device"),
    ] {
        let args = ["bench", "storage", path.to_str().unwrap()];
        let o = common::run_within(&args, std::time::Duration::from_secs(30));
        clean_exit(&o);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        let says = format!(
            "bench storage measures a regular file, and {} is {kind}",
            path.display()
        );
        assert!(err.contains(&says), "{err}");
        assert!(!err.contains("--from-storage"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A file another process truncates while `bench storage` reads it: a clear error naming
/// the file, never a signal (the mmap baseline died of SIGBUS, with no message).
#[test]
fn bench_storage_of_a_file_truncated_meanwhile_says_so() {
    let d = fresh_dir("storage", "truncated");
    let f = d.join("data.bin");
    let (input, _) = tables(1);
    write_input(&f, &input, 16 << 20); // 64 MiB: four blocks
    let args = ["bench", "storage", f.to_str().unwrap()];
    let (child, rest) = spawn_until(&args, "while measuring the baseline of");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let o = finish_within(child, std::time::Duration::from_secs(120));
    let err = rest.join().unwrap();
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&o.status),
        None,
        "died by a signal: {err}"
    );
    assert_eq!(o.status.code(), Some(1), "{err}");
    let says = format!("{} ended after 1048576 bytes while being read", f.display());
    assert!(
        err.contains(&says) && err.contains("it shrank while being read"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[cfg(target_os = "linux")]
#[test]
fn three_times_a_256_mib_cgroup_in_and_out_are_exact() {
    three_times_the_cgroup_in_and_out(256 << 20, 1);
}

/// Issue 36's goal at a quarter of its size (12 GiB in 8 GiB there): three passes, passes 2
/// and 3 reading only what the host tier does not hold.
#[cfg(target_os = "linux")]
#[test]
fn three_passes_over_three_times_a_256_mib_cgroup_read_only_what_host_memory_does_not_hold() {
    three_times_the_cgroup_in_and_out(256 << 20, 3);
}

#[cfg(target_os = "linux")]
#[test]
#[ignore = "writes 6 GiB to disk; CI runs the same at a quarter of the size"]
fn three_gib_in_and_out_inside_a_one_gib_cgroup_are_exact() {
    three_times_the_cgroup_in_and_out(1 << 30, 1);
}

/// `run` in place over a file of three times `limit` plus a tail that is not a whole page,
/// inside a cgroup of `limit` bytes: streamed from storage, with rings under half the limit.
#[cfg(target_os = "linux")]
fn three_times_the_cgroup_in_and_out(limit: u64, passes: usize) {
    use common::bin;
    use common::cgroup::Cgroup;
    let name = format!("storage-{}m-{passes}", limit >> 20);
    let cg = match Cgroup::new(&name, limit) {
        Ok(cg) => cg,
        Err(why) => {
            common::skip(&why);
            return;
        }
    };
    let d = fresh_dir("storage", &name);
    let (k, src, dst) = (d.join("scramble.cl"), d.join("in.bin"), d.join("out.bin"));
    std::fs::write(&k, KERNEL).unwrap();
    let (input, result) = tables(passes);
    let elements = 3 * limit / 4 + 1234;
    let t = std::time::Instant::now();
    write_input(&src, &input, elements);
    let wrote = t.elapsed();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let args = [
        "run",
        "--kernel",
        &s(&k),
        "--entry",
        "scramble",
        "--dtype",
        "u32",
        "--input",
        &s(&src),
        "--output",
        &s(&dst),
        "--json",
        "--passes",
        &passes.to_string(),
        // The host tier is what this test is about: on a GPU the VRAM tier would hold all of
        // it (tests/storage_vram.rs and passes_cli.rs test that tier).
        "--residency",
        "off",
    ];
    let t = std::time::Instant::now();
    let o = cg.run(&bin(), &args);
    let ran = t.elapsed();
    clean_exit(&o);
    let err = stderr(&o);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let storage = &report["storage"];
    assert_eq!(storage["mode"], "storage", "{storage}");
    let why = storage["why"].as_str().unwrap();
    assert!(
        why.contains("do not fit") && why.contains("container's memory limit"),
        "{why}"
    );
    let all = elements * 4;
    let each = |k: &str| -> Vec<u64> {
        let a = storage[k]
            .as_array()
            .unwrap_or_else(|| panic!("{k}: {storage}"));
        a.iter().map(|b| b.as_u64().unwrap()).collect()
    };
    let (reads, served) = (each("pass_read_bytes"), each("pass_host_bytes"));
    assert_eq!(reads.len(), passes, "{storage}");
    assert_eq!(reads[0], all, "the first pass reads everything");
    for p in 1..passes {
        // Later passes read only what the host tier does not hold, and it holds some.
        assert!(served[p] > 0 && reads[p] + served[p] == all, "{storage}");
        assert_eq!(served[p], storage["plan"]["host_bytes"], "{storage}");
    }
    assert!(
        storage["staging_bytes"].as_u64().unwrap() < limit / 2,
        "{storage}"
    );
    let t = std::time::Instant::now();
    check_output(&dst, &result, elements);
    let peak = cg
        .peak()
        .map_or("not kept".into(), |p| format!("{} MiB", p >> 20));
    println!(
        "input written in {:.1} s, run in {:.1} s (cgroup peak {peak}), output checked in {:.1} s: {storage}",
        wrote.as_secs_f64(),
        ran.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&d);
}
