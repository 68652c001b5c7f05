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

#[test]
fn bench_devices_refuses_what_takes_one_device() {
    refused(
        &["bench", "--devices", "0", "--gather"],
        "--gather does not apply with --devices: --gather measures one device: run them as two commands",
    );
    refused(
        &["bench", "--devices", "all", "--latency"],
        "--latency does not apply with --devices: --latency measures one device: run them as two commands",
    );
    refused(
        &["bench", "--devices", "0", "--device", "0"],
        "--device does not apply with --devices: name the one device in --devices, or leave --devices out",
    );
    refused(
        &["bench", "--devices", "0", "--strategy", "all"],
        "--strategy all does not apply with --devices: --devices measures one strategy: name it, or leave --strategy out for auto's first",
    );
    refused(
        &["bench", "--devices", "0", "--api", "cuda"],
        "--api cuda does not apply with --devices: --devices puts OpenCL and CUDA side by side: use --api both, or --api opencl",
    );
}

#[test]
fn bench_latency_refuses_every_strategy_and_cuda_alone() {
    refused(
        &["bench", "--latency", "--strategy", "all"],
        "--strategy all does not apply with --latency: --latency measures one strategy: name it, or leave --strategy out for auto's first",
    );
    refused(
        &["bench", "--latency", "--api", "cuda"],
        "--api cuda does not apply with --latency: --latency always measures the OpenCL rows, with CUDA's beside them under --api both (the default): use --api both",
    );
    refused(
        &["bench", "--latency", "--repeat", "3"],
        "--repeat does not apply with --latency: --latency takes its samples from --samples: pass --samples N",
    );
    refused(
        &["bench", "--gather", "--latency"],
        "--gather does not apply with --latency: run them as two commands",
    );
}

#[test]
fn bench_gather_refuses_cuda_alone_and_a_strategy() {
    refused(
        &["bench", "--gather", "--api", "cuda"],
        "--api cuda does not apply with --gather: --gather always measures the OpenCL rows, with CUDA's beside them under --api both (the default): use --api both",
    );
    refused(
        &["bench", "--gather", "--strategy", "auto"],
        "--strategy does not apply with --gather: the gather pins its own staging and host memory: leave --strategy out",
    );
    refused(
        &["bench", "--gather", "--sizes", "4KiB"],
        "--sizes does not apply with --gather: --gather measures one shape: set it with --pieces and --piece-size",
    );
}

#[test]
fn bench_refuses_the_flags_of_a_mode_not_asked_for() {
    refused(
        &["bench", "--staging", "1MiB"],
        "--staging does not apply without --gather: add --gather, or leave --staging out",
    );
    refused(
        &["bench", "--latency", "--pieces", "4"],
        "--pieces does not apply without --gather: add --gather, or leave --pieces out",
    );
    refused(
        &["bench", "--samples", "10"],
        "--samples does not apply without --latency: --samples counts the samples of --latency: add --latency, or leave --samples out",
    );
    refused(
        &["bench", "--api", "cuda", "--strategy", "all"],
        "--strategy does not apply with --api cuda: --strategy picks OpenCL strategies, and --api cuda measures cuMemHostAlloc and cuMemHostRegister memory: leave --strategy out, or use --api both",
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
