//! Issue 12, classes 1 and 4, through the real binary: outputs never destroy what they name
//! (devices, FIFOs, links, another path of the run), temporary files of killed runs are
//! cleaned up, and closed pipes or full disks end cleanly. Every test checks that the process
//! neither panicked nor died by a signal.
//!
//! Unix only: devices, FIFOs, symbolic links, inodes and signals are unix file kinds. The
//! Windows output rules are tested in the library (engine/io, backend/os/windows.rs).
#![cfg(unix)]

mod common;

use common::{bin, clean_exit, fresh_dir, pinstream, stderr};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SCALE: &str = r#"
__kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float factor) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = x[i] * factor;
}
"#;

fn dir(name: &str) -> PathBuf {
    let d = fresh_dir("hout", name);
    std::fs::write(d.join("k.cl"), SCALE).unwrap();
    let input: Vec<u8> = (0..1000).flat_map(|i| (i as f32).to_le_bytes()).collect();
    std::fs::write(d.join("in.bin"), input).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The result `scale` with factor 2 gives for `in.bin`.
fn doubled() -> Vec<u8> {
    (0..1000)
        .flat_map(|i| (2.0 * i as f32).to_le_bytes())
        .collect()
}

/// `run` of `k.cl` over `in.bin` in `d`, doubling, with `extra` arguments.
fn run_scale(d: &Path, extra: &[&str]) -> Output {
    let (k, i) = (d.join("k.cl"), d.join("in.bin"));
    let mut args = vec![
        "run",
        "--kernel",
        s(&k),
        "--entry",
        "scale",
        "--input",
        s(&i),
        "--arg",
        "factor=2",
    ];
    args.extend(extra);
    pinstream(&args)
}

fn refused(o: &Output, needles: &[&str]) {
    clean_exit(o);
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` not in: {err}");
    }
}

/// Only `keep` is left in `d`: no temporary file, nothing else.
fn only(d: &Path, keep: &[&str]) {
    let mut left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
    want.sort();
    assert_eq!(left, want);
}

#[test]
fn a_character_device_is_written_through_never_replaced() {
    let d = dir("chardev");
    let dev = d.join("null");
    // A device node of our own, like /dev/null (major 1, minor 3), so the real one is never
    // at risk; making one needs root.
    let made = Command::new("mknod")
        .args([s(&dev), "c", "1", "3"])
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|st| st.success()) {
        eprintln!("skipped: mknod failed here (it needs root); /dev/null is checked below");
    } else {
        let o = run_scale(&d, &["--output", s(&dev), "--trace", s(&dev)]);
        clean_exit(&o);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(std::fs::metadata(&dev)
            .unwrap()
            .file_type()
            .is_char_device());
        assert!(stderr(&o).is_empty() || !stderr(&o).contains("error"));
        only(&d, &["k.cl", "in.bin", "null"]);
    }
    // The real /dev/null: written through in place (opened for writing, never renamed over).
    let before = std::fs::metadata("/dev/null").unwrap();
    let o = run_scale(&d, &["--output", "/dev/null"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let after = std::fs::metadata("/dev/null").unwrap();
    assert!(after.file_type().is_char_device());
    assert_eq!((before.ino(), before.rdev()), (after.ino(), after.rdev()));
}

#[test]
fn a_fifo_gets_the_bytes_and_stays_a_fifo() {
    let d = dir("fifo");
    let fifo = d.join("pipe");
    if !Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|st| st.success())
    {
        common::skip("mkfifo is not available");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = run_scale(&d, &["--output", s(&fifo)]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(reader.join().unwrap(), doubled());
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    only(&d, &["k.cl", "in.bin", "pipe"]);
}

#[test]
fn standard_output_gets_the_result_and_the_report_moves_to_stderr() {
    let d = dir("stdout");
    let o = run_scale(&d, &["--output", "/dev/stdout"]);
    clean_exit(&o);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, doubled(), "exactly the result on stdout");
    assert!(stderr(&o).contains("result written to /dev/stdout"));
}

#[test]
fn symbolic_links_write_their_target_or_are_refused() {
    let d = dir("links");
    let (real, link) = (d.join("real.bin"), d.join("link.bin"));
    std::fs::write(&real, b"old").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = run_scale(&d, &["--output", s(&link)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&real).unwrap(), doubled());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let dangling = d.join("dangling.bin");
    std::os::unix::fs::symlink(d.join("nowhere.bin"), &dangling).unwrap();
    let o = run_scale(&d, &["--output", s(&dangling)]);
    refused(&o, &["symbolic link to", "nowhere.bin", "does not exist"]);
    only(
        &d,
        &["k.cl", "in.bin", "real.bin", "link.bin", "dangling.bin"],
    );
}

#[test]
fn two_paths_naming_one_file_are_refused_up_front() {
    let d = dir("same");
    let (input, k) = (d.join("in.bin"), d.join("k.cl"));
    let original = std::fs::read(&input).unwrap();
    let o = run_scale(&d, &["--trace", s(&input)]);
    refused(
        &o,
        &[
            "--trace",
            "--input",
            "same file",
            "pass another path for --trace",
        ],
    );
    let out = d.join("out.bin");
    let o = run_scale(&d, &["--output", s(&out), "--trace", s(&out)]);
    refused(
        &o,
        &[
            "--output",
            "--trace",
            "same file",
            "each output needs a file",
        ],
    );
    let o = run_scale(&d, &["--output", s(&k)]);
    refused(&o, &["--output", "--kernel", "same file"]);
    // A hard link is the same file under another name.
    let alias = d.join("alias.bin");
    std::fs::hard_link(&input, &alias).unwrap();
    let o = run_scale(&d, &["--trace", s(&alias)]);
    refused(&o, &["same file"]);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        original,
        "the input is untouched"
    );
    only(&d, &["k.cl", "in.bin", "alias.bin"]);
    // The documented exception: --output may update an --input in place.
    let o = run_scale(&d, &["--output", s(&input)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&input).unwrap(), doubled());
}

#[test]
fn a_killed_runs_temporary_file_is_removed_by_the_next_run() {
    let d = dir("stale");
    let out = d.join("out.bin");
    // What a run killed with SIGKILL mid-write leaves: its temporary file, named after its
    // process id, which no longer runs.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let stale = d.join(format!(".out.bin.pinstream-tmp-{pid}.Xy3kQ9ab"));
    std::fs::write(&stale, b"half a result").unwrap();
    let o = run_scale(&d, &["--output", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("removed") && stderr(&o).contains(".out.bin.pinstream-tmp-"));
    assert_eq!(std::fs::read(&out).unwrap(), doubled());
    only(&d, &["k.cl", "in.bin", "out.bin"]);
}

#[test]
fn a_folder_that_takes_no_file_is_refused_before_any_work() {
    let d = dir("nofolder");
    let t = std::time::Instant::now();
    let o = run_scale(&d, &["--output", "/proc/pinstream-out.bin"]);
    refused(
        &o,
        &[
            "cannot write /proc/pinstream-out.bin",
            "cannot create a file in folder /proc",
        ],
    );
    assert!(t.elapsed().as_secs() < 10);
    let o = pinstream(&["doctor", "--size", "1MiB", "--save", s(&d)]);
    refused(&o, &["is a folder", "out.bin"]);
}

#[test]
fn a_report_is_printed_even_when_saving_it_fails() {
    let o = pinstream(&[
        "doctor",
        "--size",
        "4MiB",
        "--block",
        "1MiB",
        "--strategy",
        "pageable",
        "--repeat",
        "1",
        "--save",
        "/dev/full",
    ]);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("writing /dev/full failed") && err.contains("No space left"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("recommendation"));
}

#[test]
fn a_full_disk_is_an_error_naming_the_path() {
    let d = dir("full");
    let o = run_scale(&d, &["--output", "/dev/full"]);
    clean_exit(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("writing /dev/full failed: No space left on device"),
        "{err}"
    );
    // The report itself to a full standard output.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let o = Command::new(bin())
        .arg("devices")
        .stdout(full)
        .output()
        .unwrap();
    clean_exit(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("standard output: No space left on device"));
}

#[test]
fn a_closed_pipe_ends_quietly() {
    for args in [vec!["devices"], vec!["devices", "--json"]] {
        let mut child = Command::new(bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader goes away before anything is written
        let o = child.wait_with_output().unwrap();
        clean_exit(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).is_empty(), "{args:?}: {}", stderr(&o));
    }
}
