//! Flag combinations that do not apply are refused before anything runs, each with exit
//! code 2 and one shape of message: `--FLAG does not apply with|without --MODE: what to do`.

mod common;

use common::{pinstream, stderr};

/// `args` exit with 2 and `error: <message>` on standard error, and print nothing.
fn refused(args: &[&str], message: &str) {
    let o = pinstream(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    assert_eq!(stderr(&o), format!("error: {message}\n"), "{args:?}");
    assert!(o.stdout.is_empty(), "{args:?}");
}

/// `args` exit with 2 and clap's `error: ...` naming `flag`, and print nothing: the
/// subcommand does not take it (or not that value).
fn not_taken(args: &[&str], flag: &str) {
    let o = pinstream(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: ") && err.contains(flag),
        "{args:?}: {err}"
    );
    assert!(o.stdout.is_empty(), "{args:?}");
}

#[test]
fn bench_devices_refuses_what_takes_one_device() {
    for (extra, flag) in [
        (&["--gather"][..], "--gather"),
        (&["--latency"], "--latency"),
        (&["--device", "0"], "--device"),
        (&["--strategy", "all"], "'all' for '--strategy"),
        (&["--api", "cuda"], "'cuda' for '--api"),
        (&["--plot", "x.svg"], "--plot"),
    ] {
        let mut args = vec!["bench", "devices", "--devices", "0"];
        args.extend_from_slice(extra);
        not_taken(&args, flag);
    }
}

#[test]
fn bench_latency_refuses_every_strategy_and_cuda_alone() {
    for (extra, flag) in [
        (&["--strategy", "all"][..], "'all' for '--strategy"),
        (&["--api", "cuda"], "'cuda' for '--api"),
        (&["--repeat", "3"], "--repeat"),
        (&["--gather"], "--gather"),
        (&["--plot", "x.svg"], "--plot"),
    ] {
        let mut args = vec!["bench", "latency"];
        args.extend_from_slice(extra);
        not_taken(&args, flag);
    }
    refused(
        &["bench", "latency", "--api", "vulkan", "--strategy", "auto"],
        "--strategy does not apply with --api vulkan: --strategy picks OpenCL strategies, and --api vulkan measures Vulkan's own pinning: leave --strategy out",
    );
}

#[test]
fn bench_gather_refuses_cuda_alone_and_a_strategy() {
    for (extra, flag) in [
        (&["--api", "cuda"][..], "'cuda' for '--api"),
        (&["--strategy", "auto"], "--strategy"),
        (&["--sizes", "4KiB"], "--sizes"),
    ] {
        let mut args = vec!["bench", "gather"];
        args.extend_from_slice(extra);
        not_taken(&args, flag);
    }
}

#[test]
fn bench_refuses_the_flags_of_a_mode_not_asked_for() {
    not_taken(&["bench", "--staging", "1MiB"], "--staging");
    not_taken(&["bench", "latency", "--pieces", "4"], "--pieces");
    not_taken(&["bench", "--samples", "10"], "--samples");
    not_taken(&["bench", "storage"], "FILE");
    refused(
        &["bench", "--api", "cuda", "--strategy", "all"],
        "--strategy does not apply with --api cuda: --strategy picks OpenCL strategies, and --api cuda measures cuMemHostAlloc and cuMemHostRegister memory: leave --strategy out, or use --api both",
    );
}

/// The old spellings of `bench`'s modes still run, for one release, each with one note on
/// standard error that names the new one; what they refuse, they refuse as the new one does.
#[test]
fn bench_old_mode_flags_work_with_a_note() {
    let o = pinstream(&["bench", "--latency", "--strategy", "all"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    let note = "note: `bench --latency` is deprecated and goes in the next release: use `pinstream bench latency`\n";
    assert!(err.starts_with(note), "{err}");
    assert!(err.contains("invalid value 'all' for '--strategy"), "{err}");
    let o = pinstream(&["bench", "--staging", "1MiB", "--gather", "--pieces", "0"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.starts_with("note: `bench --gather` is deprecated and goes in the next release: use `pinstream bench gather`\n"), "{err}");
    assert!(err.contains("--pieces"), "{err}");
    let o = pinstream(&["bench", "--storage", "/nonexistent/file"]);
    let err = stderr(&o);
    assert!(err.starts_with("note: `bench --storage` is deprecated and goes in the next release: use `pinstream bench storage FILE`\n"), "{err}");
    assert!(err.contains("cannot open /nonexistent/file"), "{err}");
    let o = pinstream(&["bench", "--devices", "7,8", "--sizes", "4KiB"]);
    let err = stderr(&o);
    assert!(err.starts_with("note: `bench --devices` is deprecated and goes in the next release: use `pinstream bench devices --devices SET`\n"), "{err}");
}

#[test]
fn commands_refuse_an_api_they_do_not_take() {
    not_taken(&["compare", "--api", "opencl"], "'opencl' for '--api");
    not_taken(&["devices", "--api", "both"], "'both' for '--api");
    not_taken(&["doctor", "--api", "both"], "'both' for '--api");
    let o = pinstream(&["demo", "--api", "both", "--size", "1MiB"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--api both measures two APIs side by side, which only `bench` does")
    );
}

#[test]
fn run_refuses_what_its_api_or_inputs_ignore() {
    let run = |extra: &[&str]| {
        let mut a = vec!["run", "--kernel", "k.cl", "--entry", "k"];
        a.extend_from_slice(extra);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let cases: [(&[&str], &str); 6] = [
        (&["--synthetic", "1KiB", "--numa", "on"], "--numa on does not apply without --devices: --numa on binds each device's share of several devices to the device's node: add --devices, or leave --numa out"),
        (&["--input", "x", "--seed", "1"], "--seed does not apply without --synthetic: --seed draws the --synthetic inputs: add --synthetic SIZE, or leave --seed out"),
        (&["--synthetic", "1KiB", "--api", "cuda", "--wait", "sleep"], "--wait does not apply with --api cuda: --wait sets how OpenCL waits for commands: leave it out with --api cuda"),
        (&["--synthetic", "1KiB", "--api", "cuda", "--numa", "on"], "--numa does not apply with --api cuda: --api cuda places no memory on NUMA nodes: leave --numa out"),
        (&["--synthetic", "1KiB", "--api", "cuda", "--strategy", "auto"], "--strategy does not apply with --api cuda: --strategy picks OpenCL strategies, and --api cuda pins with cuMemHostRegister: leave --strategy out"),
        (&["--synthetic", "1KiB", "--device", "0", "--devices", "0"], "--device does not apply with --devices: name the one device in --devices, or leave --devices out"),
    ];
    for (extra, message) in cases {
        let args = run(extra);
        refused(
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            message,
        );
    }
}

#[test]
fn demo_and_compare_refuse_a_device_beside_devices() {
    for command in ["demo", "compare"] {
        refused(
            &[command, "--device", "0", "--devices", "all"],
            "--device does not apply with --devices: name the one device in --devices, or leave --devices out",
        );
    }
}
