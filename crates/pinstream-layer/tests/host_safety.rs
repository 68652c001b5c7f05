//! The layer never harms the program it is loaded into (issue 21 class 4): C programs run
//! under it through `LD_PRELOAD` and `OPENCL_LAYERS` (where the loader honours it, else that
//! way in is skipped visibly: `common::ways_in`), with the layer logging a lot
//! (`PINSTREAM_LAYER_LOG=1`, the TEST HOOK rewrite path), while their stderr is closed or is a
//! pipe whose reader has gone (`program 2>&1 | head`), while signals arrive, and with a panic
//! forced inside the layer's entry points: each program finishes its work with its own exit
//! code and the results it has without the layer.
//!
//! The fuzz test runs random programs' buffer calls (c/fuzz_buffers.c: random flags, sizes,
//! host pointers, transfers, maps, sub-buffers, kernel arguments, releases) and compares
//! their transcripts, call by call, with the same programs run without the layer.
//!
//! Needs `cc`, the OpenCL headers and an OpenCL platform (CI: PoCL); fails, saying so, without.
#![cfg(unix)] // the layer is a Linux ICD-loader / LD_PRELOAD layer (see the crate docs)

mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// No run may take longer than this (a hang is a failure, not a stuck test).
const LIMIT: Duration = Duration::from_secs(120);

struct Programs {
    dir: PathBuf,
    classic: PathBuf,
    fuzz: PathBuf,
}

fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let dir = common::scratch_dir("host-safety");
        let build = |name: &str| {
            let src = common::c_dir().join(format!("{name}.c"));
            common::cc_args(&dir, name, &[src.to_str().expect("UTF-8 path"), "-lOpenCL"])
        };
        Programs {
            classic: build("classic_recipe"),
            fuzz: build("fuzz_buffers"),
            dir,
        }
    })
}

/// What the program's stderr is.
#[derive(Clone, Copy, Debug)]
enum Stderr {
    /// A pipe read to the end.
    Read,
    /// A pipe whose read end is closed at once: every write gets EPIPE (and SIGPIPE).
    ReaderGone,
    /// fd 2 closed (`2>&-`).
    Closed,
}

struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// A command for `program`, with fd 2 closed when asked and the layer's variables cleared.
fn command(program: &Path, args: &[&str], stderr: Stderr) -> Command {
    let mut cmd = match stderr {
        Stderr::Closed => {
            let mut c = Command::new("sh");
            c.args(["-c", r#"exec "$0" "$@" 2>&-"#]).arg(program);
            c
        }
        _ => Command::new(program),
    };
    cmd.args(args);
    for var in common::LAYER_VARS {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` with `env`; `signals` sends SIGUSR1 every 2 ms once the program's first stdout
/// line is out (c/fuzz_buffers.c prints "ready" once its handler is in place).
fn run(mut cmd: Command, env: &[(&str, &str)], stderr: Stderr, signals: bool) -> Outcome {
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    cmd.stderr(match stderr {
        Stderr::Closed => Stdio::inherit(),
        _ => Stdio::piped(),
    });
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let err_pipe = child.stderr.take();
    let err_reader = match stderr {
        Stderr::ReaderGone => {
            drop(err_pipe);
            None
        }
        _ => err_pipe.map(|mut p| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = p.read_to_string(&mut s);
                s
            })
        }),
    };
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut stdout = String::new();
    let _ = out.read_line(&mut stdout);
    let stop = Arc::new(AtomicBool::new(false));
    let storm = signals.then(|| storm(child.id(), stop.clone()));
    let _ = out.read_to_string(&mut stdout);
    let status = wait_bounded(&mut child, &cmd);
    stop.store(true, Ordering::Relaxed);
    if let Some(s) = storm {
        s.join().expect("the signal thread");
    }
    let stderr = err_reader.map_or_else(String::new, |r| r.join().expect("the stderr reader"));
    Outcome {
        status,
        stdout,
        stderr,
    }
}

/// Sends SIGUSR1 to `pid` every 2 ms until `stop`.
fn storm(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: a signal to our own child, which has a handler for it; once it has
            // exited (and until it is reaped) the pid still names it.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR1) };
            std::thread::sleep(Duration::from_millis(2));
        }
    })
}

fn wait_bounded(child: &mut Child, cmd: &Command) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            return status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("{cmd:?} still running after {LIMIT:?}: hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn layer() -> String {
    common::layer_library().display().to_string()
}

/// The classic recipe's result lines.
fn results(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| {
            [
                "buffers:",
                "words_checked:",
                "checksum:",
                "mismatches:",
                "result:",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .collect()
}

fn classic(env: &[(&str, &str)], stderr: Stderr) -> Outcome {
    let cmd = command(&programs().classic, common::CLASSIC_ARGS, stderr);
    run(cmd, env, stderr, false)
}

fn classic_baseline() -> String {
    let base = classic(&[], Stderr::Read);
    assert!(base.status.success(), "without the layer: {}", base.stderr);
    assert!(base.stdout.contains("result: ok"), "{}", base.stdout);
    base.stdout
}

/// Issue 21 class 4: with stderr a pipe whose reader is gone (as `| head` leaves it), the
/// layer's writes raised SIGPIPE and killed the program (exit 141). With fd 2 closed, nothing
/// may be written into whatever file later takes fd 2.
#[test]
fn a_closed_stderr_never_kills_or_changes_the_program() {
    let lib = layer();
    let want = classic_baseline();
    for way in common::ways_in() {
        for stderr in [Stderr::ReaderGone, Stderr::Closed] {
            let env = [
                (way, lib.as_str()),
                ("PINSTREAM_LAYER_LOG", "1"),
                ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
            ];
            let run = classic(&env, stderr);
            assert_eq!(
                run.status.code(),
                Some(0),
                "{way}, stderr {stderr:?}: {}",
                run.status
            );
            assert_eq!(results(&run.stdout), results(&want), "{way}, {stderr:?}");
        }
    }
}

/// With fd 2 closed when the program starts, the file the program opens next is fd 2: the
/// layer's lines must not land in it (they did, written to "stderr"). The file is opened once
/// the layer is loaded (under `OPENCL_LAYERS`, at the program's first OpenCL call; see
/// src/ffi/sink.rs for a file opened before that).
#[test]
fn nothing_is_written_into_a_file_that_takes_fd_2() {
    let lib = layer();
    let own = programs().dir.join("own-file.txt");
    let own_path = own.display().to_string();
    for way in common::ways_in() {
        let args = ["7", "60", "--open", own_path.as_str()];
        let cmd = command(&programs().fuzz, &args, Stderr::Closed);
        let env = [
            (way, lib.as_str()),
            ("PINSTREAM_LAYER_LOG", "1"),
            ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
            ("PINSTREAM_LAYER_MIN_SIZE", "4KiB"),
        ];
        let run = run(cmd, &env, Stderr::Closed, false);
        assert_eq!(run.status.code(), Some(3), "{way}: {}", run.status);
        let written = std::fs::read_to_string(&own).expect("the program's file");
        assert_eq!(
            written, "",
            "{way}: the layer wrote into the program's file"
        );
    }
}

/// A panic inside the layer (forced by the TEST HOOK) never reaches the program: each entry
/// point passes the call straight on, and the program's results are those without the layer.
#[test]
fn a_panic_in_an_entry_point_passes_the_call_on() {
    let lib = layer();
    let want = classic_baseline();
    let ways = common::ways_in();
    let cases = [
        ("LD_PRELOAD", "all"),
        (
            "OPENCL_LAYERS",
            "clCreateBuffer,clSetKernelArg,clEnqueueWriteBuffer",
        ),
        ("OPENCL_LAYERS", "clInitLayer"),
        // After the call was passed on (or made by the rewrite): its result is returned, the
        // call is not made again.
        (
            "LD_PRELOAD",
            "clCreateBuffer@forwarded,clSetKernelArg@forwarded,clEnqueueWriteBuffer@forwarded",
        ),
        ("OPENCL_LAYERS", "all@forwarded"),
    ];
    for (way, which) in cases.into_iter().filter(|(way, _)| ways.contains(way)) {
        let env = [
            (way, lib.as_str()),
            ("PINSTREAM_LAYER_LOG", "1"),
            ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
            ("PINSTREAM_LAYER_TEST_PANIC", which),
        ];
        let run = classic(&env, Stderr::Read);
        let at = format!("{way} {which}: {}\n{}", run.status, run.stderr);
        assert_eq!(run.status.code(), Some(0), "{at}");
        assert_eq!(results(&run.stdout), results(&want), "{at}");
        assert_eq!(run.stderr.matches("rewrote buffer #").count(), 0, "{at}");
        let first = which.split([',', '@']).next().expect("a name");
        let entry = if first == "all" {
            "clCreateBuffer"
        } else {
            first
        };
        assert!(
            run.stderr.contains(&format!(
                "internal error in {entry} (TEST HOOK PINSTREAM_LAYER_TEST_PANIC"
            )),
            "{at}"
        );
        assert!(!run.stderr.contains("panicked"), "{at}");
    }
}

/// `PINSTREAM_LAYER_LOG_FILE` takes the log off stderr, appending.
#[test]
fn the_log_can_go_to_a_file() {
    let lib = layer();
    let file = programs().dir.join("layer.log");
    let _ = std::fs::remove_file(&file);
    let path = file.display().to_string();
    for _ in 0..2 {
        let env = [
            ("LD_PRELOAD", lib.as_str()),
            ("PINSTREAM_LAYER_LOG", "1"),
            ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
            ("PINSTREAM_LAYER_LOG_FILE", path.as_str()),
        ];
        let run = classic(&env, Stderr::Read);
        assert!(run.status.success(), "{}", run.stderr);
        assert!(!run.stderr.contains("pinstream-layer"), "{}", run.stderr);
    }
    let log = std::fs::read_to_string(&file).expect("the log file");
    assert_eq!(
        log.matches("rewrote buffer #").count(),
        6,
        "appended:\n{log}"
    );
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_LOG_FILE", "/nonexistent/dir/layer.log"),
        ("PINSTREAM_LAYER_POLICY", "bogus"),
    ];
    let run = classic(&env, Stderr::Read);
    assert!(run.status.success(), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("cannot open PINSTREAM_LAYER_LOG_FILE=\"/nonexistent/dir/layer.log\""),
        "{}",
        run.stderr
    );
}

/// One fuzz program's run: its transcript and exit code.
fn fuzz(seed: u64, env: &[(&str, &str)], stderr: Stderr, ignore_sigpipe: bool) -> Outcome {
    let seed = seed.to_string();
    let mut args = vec![seed.as_str(), "220"];
    if ignore_sigpipe {
        args.push("--ignore-sigpipe");
    }
    let cmd = command(&programs().fuzz, &args, stderr);
    run(cmd, env, stderr, true)
}

/// Random programs' buffer calls under the layer, with stderr closed or its reader gone,
/// SIGPIPE default or ignored, SIGUSR1 arriving every 2 ms: each program completes with its own
/// exit code (3) and the transcript it has without the layer, call by call.
#[test]
fn random_buffer_programs_run_the_same_under_the_layer() {
    let lib = layer();
    let ways = common::ways_in();
    let stderrs = [Stderr::ReaderGone, Stderr::Closed];
    let policies = ["rewrite", "audit"];
    for seed in 1..=4u64 {
        let base = fuzz(seed, &[], Stderr::Read, false);
        assert_eq!(base.status.code(), Some(3), "seed {seed}: {}", base.stderr);
        assert!(base.stdout.ends_with("done\n"), "seed {seed}");
        for variant in 0..2u64 {
            let i = (seed * 2 + variant) as usize;
            let (way, stderr) = (ways[i % ways.len()], stderrs[(i / 2) % 2]);
            let ignore = (i / 4) % 2 == 1;
            let env = [
                (way, lib.as_str()),
                ("PINSTREAM_LAYER_LOG", "1"),
                ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
                ("PINSTREAM_LAYER_POLICY", policies[variant as usize]),
                ("PINSTREAM_LAYER_MIN_SIZE", "4KiB"),
            ];
            let run = fuzz(seed, &env, stderr, ignore);
            let at = format!("seed {seed}, {way}, stderr {stderr:?}, SIGPIPE ignored {ignore}");
            assert_eq!(run.status.code(), Some(3), "{at}: {}", run.status);
            assert_eq!(run.stdout, base.stdout, "{at}");
        }
    }
}

/// A stderr pipe that nobody reads while the program runs (a parent that collects it only at
/// the end) fills up after 64 KiB: the layer's next write blocked the program inside its
/// OpenCL call, for ever. The layer drops what the pipe cannot take and the program finishes
/// as fast as with stderr read.
#[test]
fn an_undrained_stderr_pipe_never_blocks_the_program() {
    let lib = layer();
    // About 20 bytes of log a step: 6000 steps log twice what a pipe holds.
    let args = ["5", "6000"];
    let base = run(
        command(&programs().fuzz, &args, Stderr::Read),
        &[],
        Stderr::Read,
        false,
    );
    assert_eq!(
        base.status.code(),
        Some(3),
        "without the layer: {}",
        base.stderr
    );
    let env = [
        ("LD_PRELOAD", lib.as_str()),
        ("PINSTREAM_LAYER_LOG", "1"),
        ("PINSTREAM_LAYER_TEST_FAKE_NV", "1"),
        ("PINSTREAM_LAYER_MIN_SIZE", "4KiB"),
    ];
    let mut cmd = fuzz_command(&args);
    cmd.envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run the fuzz program");
    let mut unread = child.stderr.take().expect("piped stderr");
    let mut out = child.stdout.take().expect("piped stdout");
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the program was still running after 20 s: blocked on its full stderr");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut logged = Vec::new();
    let _ = unread.read_to_end(&mut logged);
    assert_eq!(status.code(), Some(3), "{status}");
    assert_eq!(stdout.join().expect("the stdout reader"), base.stdout);
    let read = run(fuzz_command(&args), &env, Stderr::Read, false);
    assert!(
        read.stderr.len() > 64 * 1024,
        "only {} bytes of log with stderr read: a pipe holds 64 KiB, so nothing was tested",
        read.stderr.len()
    );
    assert!(logged.len() < read.stderr.len(), "nothing was dropped");
}

/// The fuzz program with `args`, stderr piped.
fn fuzz_command(args: &[&str]) -> Command {
    command(&programs().fuzz, args, Stderr::Read)
}
