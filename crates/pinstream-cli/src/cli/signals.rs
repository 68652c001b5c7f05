//! SIGINT and SIGTERM: the first is honoured in every phase of every command, the second
//! ends the process at once.
//!
//! Every command declares what it is doing with [`phase`], in one of two modes:
//! - [`Mode::Exit`] (pinning, reading files, measuring, building, printing): nothing is being
//!   written that a stop must clean up, and the work may block in the operating system or
//!   the driver (a read from a FIFO, a slow disk, a long measurement). The first signal ends
//!   the process at once with the usual message and 128 + the signal: the operating system
//!   releases pinned and device memory with the process.
//! - [`Mode::Orderly`] (streaming, writing an output): the code checks the stop flag itself
//!   and stops cleanly (the blocks in flight finish, a temporary file is removed). The first
//!   signal prints at once what the stop waits for, e.g. "waiting for the kernel of block 3",
//!   since a running kernel cannot be interrupted; a second signal exits at once.
//!
//! A watcher thread turns the flag the first signal sets into those actions. It also enforces
//! `run --kernel-timeout`: when no block completes within the limit, the run is aborted.
//! Every way of ending at once (a stop in [`Mode::Exit`], the second signal, the watchdog)
//! goes through [`leave`], which removes the temporary files of outputs being written
//! (`pinstream::engine::io::remove_temporaries`) before the process exits: the target is
//! left as it was and nothing beside it. "At once" holds whatever blocks: a message that
//! standard error does not take at once is given up ([`say`]), and the [`backstop`] exits
//! within [`GRACE`] should the removal hang in the file system.

use super::Failure;
use pinstream_cli::advice::Flags;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// What a stop does in the current phase (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// End the process at once.
    Exit,
    /// The code stops cleanly; say what it waits for.
    Orderly,
}

/// The current phase: what the command is doing, and how a stop is answered.
struct Phase {
    during: String,
    mode: Mode,
    /// With `--kernel-timeout`: the limit and when the last block completed.
    watchdog: Option<(Duration, Instant)>,
}

fn current() -> &'static Mutex<Phase> {
    static PHASE: OnceLock<Mutex<Phase>> = OnceLock::new();
    PHASE.get_or_init(|| {
        Mutex::new(Phase {
            during: "while starting".into(),
            mode: Mode::Exit,
            watchdog: None,
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Phase> {
    current().lock().unwrap_or_else(|p| p.into_inner())
}

/// Set to the signal number when SIGINT or SIGTERM arrives.
pub fn stop_flag() -> Arc<AtomicUsize> {
    static FLAG: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    FLAG.get_or_init(Default::default).clone()
}

/// Enters a phase: `during` completes "interrupted by SIGINT …" (e.g. "while pinning the
/// inputs") or, in [`Mode::Orderly`], says what a stop waits for. Fails if a stop was already
/// asked for: every phase change is a stop point.
pub fn phase(during: impl Into<String>, mode: Mode) -> Result<(), Failure> {
    let during = during.into();
    check_stop(&during)?;
    tracing::debug!(target: "pinstream::phase", "{during}");
    let mut p = lock();
    p.during = during;
    p.mode = mode;
    p.watchdog = None;
    Ok(())
}

/// Updates what an orderly phase waits for (e.g. the next block), and restarts the
/// kernel watchdog's clock.
pub fn waiting_for(what: impl Into<String>) {
    let mut p = lock();
    p.during = what.into();
    if let Some((_, last)) = p.watchdog.as_mut() {
        *last = Instant::now();
    }
}

/// Aborts the process when [`waiting_for`] is not called again within `limit`.
pub fn watchdog(limit: Duration) {
    lock().watchdog = Some((limit, Instant::now()));
}

/// How long an exit at once may take, whatever holds it up: past it, [`backstop`] exits.
const GRACE: Duration = Duration::from_secs(1);
/// How long [`leave`] waits for the list of temporary files, held only while one is
/// created, renamed or removed.
const CLEANUP_PATIENCE: Duration = Duration::from_millis(250);
/// How long [`say`] waits for standard error to take a line.
const SAY_PATIENCE: Duration = Duration::from_millis(100);

/// The exit code of the exit at once under way ([`leave`]), 0 before one starts.
static LEAVING: AtomicI32 = AtomicI32::new(0);

/// Installs the handlers, the watcher and the [`backstop`]. The first SIGINT/SIGTERM sets
/// [`stop_flag`]; the second exits at once with 128 + the signal ([`received`]).
pub fn install() -> Result<(), Failure> {
    platform::install(received)
        .map_err(|e| Failure::run(format!("cannot install the signal handler: {e}")))?;
    let spawn = |name: &str, body: fn()| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(body)
            .map_err(|e| Failure::run(format!("cannot start the signal watcher: {e}")))
    };
    spawn("pinstream-signals", watch)?;
    let backstop = spawn("pinstream-exit", backstop)?;
    let _ = BACKSTOP.set(backstop.thread().clone());
    Ok(())
}

/// A signal has come (called on a thread of its own, never in a signal handler): the first
/// sets [`stop_flag`], which the watcher answers as the phase asks; a second ends the process
/// at once, its temporary files removed.
fn received(sig: i32) {
    static SEEN: AtomicUsize = AtomicUsize::new(0);
    if SEEN.fetch_add(1, Ordering::SeqCst) > 0 {
        leave(
            128 + sig,
            &interrupted(sig as usize, "again: aborted at once").message,
        );
    }
    stop_flag().store(sig as usize, Ordering::SeqCst);
}

/// Ends the process at once with `code`, nothing unwinding: says `message` where standard
/// error takes it at once ([`say`]), removes the temporary files of the outputs being written
/// (nothing else would) and exits, holding their list until then, so that no temporary file
/// appears or is renamed meanwhile. Nothing here waits for long: the list is given up where
/// another thread holds it past [`CLEANUP_PATIENCE`] (its file system hung), and the
/// [`backstop`] exits with `code` [`GRACE`] after the start, whatever still blocks. A second
/// call while one is under way (a signal meanwhile) exits at once with the first's code.
fn leave(code: i32, message: &str) -> ! {
    if let Err(first) = LEAVING.compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst) {
        platform::exit(first);
    }
    if let Some(t) = BACKSTOP.get() {
        t.unpark();
    }
    say(message);
    let _held = pinstream::engine::io::remove_temporaries(CLEANUP_PATIENCE);
    platform::exit(code)
}

/// The backstop's thread, for [`leave`] to wake.
static BACKSTOP: OnceLock<std::thread::Thread> = OnceLock::new();

/// Waits for [`leave`] to start, then exits with its code [`GRACE`] later, should it still
/// be held up (a file system hung in the removal of a temporary file).
fn backstop() {
    loop {
        std::thread::park();
        let code = LEAVING.load(Ordering::SeqCst);
        if code != 0 {
            std::thread::sleep(GRACE);
            platform::exit(code);
        }
    }
}

/// The watcher: answers the first signal as the phase asks, and the kernel watchdog. It
/// copies the phase out before acting, so that the phase is never held while it acts.
fn watch() {
    let flag = stop_flag();
    let mut announced = false;
    loop {
        std::thread::sleep(Duration::from_millis(25));
        let sig = flag.load(Ordering::Relaxed);
        let (during, mode, timeout) = {
            let p = lock();
            let late = p.watchdog.filter(|(limit, last)| last.elapsed() > *limit);
            (p.during.clone(), p.mode, late.map(|(limit, _)| limit))
        };
        if let Some(limit) = timeout {
            abort_on_timeout(&during, limit);
        }
        if sig == 0 || announced {
            continue;
        }
        match mode {
            Mode::Exit => leave(128 + sig as i32, &interrupted(sig, &during).message),
            Mode::Orderly => {
                say(&format!(
                    "{}: stopping, {during}; Ctrl-C again to abort now",
                    signal_name(sig)
                ));
                announced = true;
            }
        }
    }
}

fn abort_on_timeout(during: &str, limit: Duration) -> ! {
    let message = format!(
        "error: no block completed within --kernel-timeout {} s ({during}): aborted; no output written (a kernel that loops forever cannot be stopped any other way)",
        limit.as_secs_f64()
    );
    leave(124, &message)
}

/// One line on standard error, given up where standard error does not take it within
/// [`SAY_PATIENCE`]: a pipe nobody reads (full), a terminal stopped with Ctrl-S, or another
/// thread holding it (blocked in such a write) would otherwise hold the stop up for as long.
/// The write goes on in a thread of its own, which an exit ends. A closed standard error is
/// ignored.
fn say(line: &str) {
    use std::io::Write;
    let line = format!("{line}\n");
    let (done, wait) = std::sync::mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("pinstream-say".into())
        .spawn(move || {
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
            let _ = done.send(());
        });
    if writer.is_ok() {
        let _ = wait.recv_timeout(SAY_PATIENCE);
    }
}

/// The signal's name, for messages.
fn signal_name(sig: usize) -> &'static str {
    match sig as i32 {
        platform::SIGINT => "SIGINT",
        platform::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// A failure for a stop request, with the conventional exit code 128 + signal.
pub fn interrupted(sig: usize, during: &str) -> Failure {
    Failure {
        code: 128 + sig as i32,
        message: format!(
            "interrupted by {} {during}: pinned and device memory released, no output written",
            signal_name(sig)
        ),
    }
}

/// Fails with [`interrupted`] once a stop was requested.
pub fn check_stop(during: &str) -> Result<(), Failure> {
    match stop_flag().load(Ordering::Relaxed) {
        0 => Ok(()),
        sig => Err(interrupted(sig, during)),
    }
}

/// The signal number once a stop was requested, else 0.
pub fn stopped() -> usize {
    stop_flag().load(Ordering::Relaxed)
}

/// Maps a stream error to a failure: stops to 128 + signal, the rest to 1, with the flags
/// that fix it where the command takes some (`flags`).
pub fn stream_failure(e: pinstream::engine::StreamError, flags: Flags) -> Failure {
    match e {
        pinstream::engine::StreamError::Stopped { code, done, blocks } => {
            interrupted(code, &format!("after {done} of {blocks} blocks"))
        }
        e => Failure::run(pinstream_cli::advice::stream_error(&e, flags)),
    }
}

/// unix: SIGINT and SIGTERM through `signal-hook`'s iterator: its handler only wakes a thread
/// of its own, which calls `on` for each signal, outside any signal handler (so `on` may
/// remove files and print).
#[cfg(unix)]
mod platform {
    pub use signal_hook::consts::{SIGINT, SIGTERM};
    pub use signal_hook::low_level::exit;

    pub fn install(on: fn(i32)) -> std::io::Result<()> {
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        std::thread::Builder::new()
            .name("pinstream-signal-in".into())
            .spawn(move || signals.forever().for_each(on))?;
        Ok(())
    }
}

/// Windows: the console's control events through `ctrlc` (which wraps
/// `SetConsoleCtrlHandler`; with its `termination` feature it also sees Ctrl-Break and the
/// console window closing), whose handler runs on a thread of its own. `ctrlc` does not say
/// which event came, so each is reported as SIGINT: exit code 130, as for Ctrl-C on Linux
/// (143, SIGTERM's, has no Windows event that can be told apart).
#[cfg(windows)]
mod platform {
    /// SIGINT's number, as in the C runtime's `signal.h`.
    pub const SIGINT: i32 = 2;
    /// SIGTERM's number, as in the C runtime's `signal.h` (never raised here).
    pub const SIGTERM: i32 = 15;

    pub fn exit(code: i32) -> ! {
        std::process::exit(code)
    }

    pub fn install(on: fn(i32)) -> std::io::Result<()> {
        ctrlc::set_handler(move || on(SIGINT)).map_err(std::io::Error::other)
    }
}
