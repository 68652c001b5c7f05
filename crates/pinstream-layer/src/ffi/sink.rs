//! Where the layer's log lines go, written so that they can never harm the program that loaded
//! the layer:
//! - No signal. A write to a pipe whose reader has gone (`program 2>&1 | head`) raises SIGPIPE,
//!   which kills a program that keeps the default disposition (exit 141). `MSG_NOSIGNAL` is for
//!   sockets only, and changing the process's disposition would change the program. So each
//!   write runs with SIGPIPE blocked in the calling thread only (`pthread_sigmask`), and a
//!   SIGPIPE the write left pending is consumed (`sigtimedwait`, zero timeout) only when the
//!   write failed with EPIPE and SIGPIPE was not already pending before it: the well-known
//!   technique of PostgreSQL's libpq (`pq_block_sigpipe` / `pq_reset_sigpipe`). SIGPIPE is
//!   generated for the writing thread, so no other thread sees it; the mask is then restored.
//! - Nothing written into the program's files. Where stderr was closed when the layer was
//!   loaded, fd 2 may later be a file the program (or its driver) opened: a line is written
//!   to fd 2 only while it is the file it was at load time (same device and inode). The limit:
//!   through `OPENCL_LAYERS` the loader loads the layer at the program's first OpenCL call, so
//!   a program that closed stderr and opened a file before that call has that file as fd 2 at
//!   load time; `PINSTREAM_LAYER_LOG_FILE` or `PINSTREAM_LAYER_LOG=0` is the choice there.
//!   Through `LD_PRELOAD`, fd 2 is judged before `main`.
//! - Never a wait. A pipe nobody drains (a parent that reads the program's stderr only at
//!   exit) fills up, and a blocking `write` to it would stop the program inside its OpenCL
//!   call. The layer cannot make fd 2 non-blocking (the flag belongs to the file description
//!   the program shares), so before each write of at most `PIPE_BUF` bytes it asks `poll`
//!   (zero timeout) whether fd 2 can take it, and drops the rest of the line when it cannot;
//!   `PIPE_BUF` bytes fit in a pipe that `poll` calls writable, so the write never blocks.
//!   Dropped lines are counted, and the next line that is written says how many were lost.
//! - Once a write fails, nothing more is written.
//! - `PINSTREAM_LAYER_LOG_FILE=/path` sends the log to that file instead (appended, created
//!   if missing, close-on-exec, non-blocking so that a FIFO without a reader cannot hang).

use crate::settings::{LogLevel, Settings};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// The log's destination, chosen on the first line.
enum Sink {
    /// fd 2, while it is the file it was at load time (device, inode); `None`: closed then.
    Stderr(Option<(u64, u64)>),
    /// The file `PINSTREAM_LAYER_LOG_FILE` names.
    File(File),
}

static SINK: OnceLock<Sink> = OnceLock::new();
static STDERR_AT_LOAD: OnceLock<Option<(u64, u64)>> = OnceLock::new();
/// Set by the first failed write: nothing is written after it.
static BROKEN: AtomicBool = AtomicBool::new(false);
/// Lines dropped (whole or in part) because the log could not take them without a wait,
/// since the last line written.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// What became of a write.
#[derive(Debug, PartialEq, Eq)]
enum Wrote {
    /// All of it.
    All,
    /// Not all: the log could not take more without a wait (a full pipe).
    Full,
    /// A failure (EPIPE, EBADF, ...): the log is broken.
    Failed,
}

/// Records what fd 2 is when the library is loaded (before `main` under `LD_PRELOAD`, at the
/// loader's `dlopen` under `OPENCL_LAYERS`): an `fstat`, nothing else.
#[cfg(target_os = "linux")]
#[used]
#[link_section = ".init_array"]
static RECORD_STDERR_AT_LOAD: extern "C" fn() = record_stderr_at_load;

#[cfg(target_os = "linux")]
extern "C" fn record_stderr_at_load() {
    stderr_at_load();
}

fn stderr_at_load() -> Option<(u64, u64)> {
    *STDERR_AT_LOAD.get_or_init(|| identity(2))
}

/// The (device, inode) of the open file `fd`, or `None` where `fd` is not open.
fn identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: `fstat` writes one `struct stat` into `st`, which is all-zero valid plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable `struct stat`; an invalid fd makes fstat fail with EBADF.
    let rc = unsafe { libc::fstat(fd, &mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// Writes `msg` as one line to the log (stderr or `PINSTREAM_LAYER_LOG_FILE`) when the log
/// level allows it; never raises a signal.
pub(crate) fn log(level: LogLevel, msg: &str) {
    if Settings::current().log >= level {
        // One write per line, so lines from several threads do not interleave.
        write_line(&format!("pinstream-layer: {msg}\n"));
    }
}

/// Writes one log line (with its newline) to the log, or nothing once the log is broken.
pub(crate) fn write_line(line: &str) {
    if BROKEN.load(Ordering::Relaxed) {
        return;
    }
    let fd = match SINK.get_or_init(open) {
        Sink::File(f) => f.as_raw_fd(),
        Sink::Stderr(at_load) if at_load.is_some() && identity(2) == *at_load => 2,
        Sink::Stderr(_) => return BROKEN.store(true, Ordering::Relaxed),
    };
    let dropped = DROPPED.swap(0, Ordering::Relaxed);
    let text = match dropped {
        0 => line.to_string(),
        n => format!("pinstream-layer: {n} log lines dropped: the log was full (a pipe nobody read), and the layer never waits for it\n{line}"),
    };
    match write_all_quietly(fd, text.as_bytes()) {
        Wrote::All => {}
        Wrote::Full => {
            DROPPED.fetch_add(dropped + 1, Ordering::Relaxed);
        }
        Wrote::Failed => BROKEN.store(true, Ordering::Relaxed),
    }
}

/// The sink the settings ask for; a log file that cannot be opened is reported on stderr,
/// which is used instead.
fn open() -> Sink {
    let Some(path) = Settings::current().log_file.as_deref() else {
        return Sink::Stderr(stderr_at_load());
    };
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    match opened {
        Ok(f) => Sink::File(f),
        Err(e) => {
            let at_load = stderr_at_load();
            if at_load.is_some() && identity(2) == at_load {
                let msg = format!("pinstream-layer: cannot open PINSTREAM_LAYER_LOG_FILE={path:?} ({e}): logging to stderr; name a file this program may create or append to\n");
                write_all_quietly(2, msg.as_bytes());
            }
            Sink::Stderr(at_load)
        }
    }
}

/// Writes as much of `bytes` to `fd` as it takes without a wait: never blocks, never raises
/// SIGPIPE (see the module docs).
fn write_all_quietly(fd: RawFd, bytes: &[u8]) -> Wrote {
    let block = SigpipeBlocked::new();
    let mut rest = bytes;
    let mut epipe = false;
    let wrote = loop {
        if rest.is_empty() {
            break Wrote::All;
        }
        match writable(fd) {
            Some(true) => {}
            Some(false) => break Wrote::Full,
            None => break Wrote::Failed,
        }
        let piece = &rest[..rest.len().min(libc::PIPE_BUF)];
        // SAFETY: `piece` is a live byte slice; write reads at most its length from it.
        let n = unsafe { libc::write(fd, piece.as_ptr().cast(), piece.len()) };
        if n > 0 {
            rest = &rest[n as usize..];
            continue;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) if n < 0 => continue,
            Some(libc::EAGAIN) if n < 0 => break Wrote::Full,
            err => epipe = err == Some(libc::EPIPE),
        }
        break Wrote::Failed;
    };
    block.restore(epipe);
    wrote
}

/// Whether `fd` takes a write now (`poll`, zero timeout); `None` when it never will (an
/// error, or the reader gone: the write is made, to fail with EPIPE, where POLLERR says so).
fn writable(fd: RawFd) -> Option<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one live pollfd; a zero timeout returns at once.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return match n {
            0 => Some(false),
            n if n > 0 && p.revents & libc::POLLNVAL != 0 => None,
            // POLLOUT, or POLLERR/POLLHUP: the write tells which (EPIPE is handled there).
            n if n > 0 => Some(true),
            _ => None,
        };
    }
}

/// SIGPIPE blocked in this thread, and what to restore.
struct SigpipeBlocked {
    set: libc::sigset_t,
    old: libc::sigset_t,
    was_pending: bool,
}

impl SigpipeBlocked {
    fn new() -> Self {
        // SAFETY: sigset_t is plain data that sigemptyset initialises; pthread_sigmask and
        // sigpending write into the sets given, which live on this stack frame.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            let mut pending: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::sigemptyset(&mut pending);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            let was_pending = libc::sigpending(&mut pending) == 0
                && libc::sigismember(&pending, libc::SIGPIPE) == 1;
            SigpipeBlocked {
                set,
                old,
                was_pending,
            }
        }
    }

    /// Consumes the SIGPIPE this thread's write raised (when `epipe` and none was pending
    /// before), then restores the thread's mask.
    fn restore(self, epipe: bool) {
        if epipe && !self.was_pending {
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `set` holds SIGPIPE only, which is blocked here; a zero timeout returns at
            // once, with the pending SIGPIPE taken or EAGAIN when there is none.
            while unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &zero) } < 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
            {}
        }
        // SAFETY: `old` is the mask pthread_sigmask reported for this thread in `new`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write into a pipe whose reader is gone fails quietly: no SIGPIPE is left pending or
    /// delivered (the test process would die of it were it not consumed, since the mask is
    /// restored; Rust's test harness ignores SIGPIPE, so the pending set is checked instead).
    #[test]
    fn a_write_to_a_closed_pipe_fails_without_a_signal() {
        let mut fds = [0; 2];
        // SAFETY: `fds` holds the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the read end, ours, closed once.
        unsafe { libc::close(fds[0]) };
        let blocked = SigpipeBlocked::new();
        assert_eq!(write_all_quietly(fds[1], b"line\n"), Wrote::Failed);
        // SAFETY: a sigset_t filled by sigpending.
        let pending = unsafe {
            let mut p: libc::sigset_t = std::mem::zeroed();
            libc::sigpending(&mut p);
            libc::sigismember(&p, libc::SIGPIPE)
        };
        blocked.restore(false);
        assert_eq!(pending, 0, "the write's SIGPIPE was consumed");
        // SAFETY: the write end, ours, closed once.
        unsafe { libc::close(fds[1]) };
    }

    /// A pipe nobody reads fills up: the write that would wait is cut short instead (it
    /// blocked the program inside its OpenCL call).
    #[test]
    fn a_full_pipe_is_not_waited_for() {
        let mut fds = [0; 2];
        // SAFETY: `fds` holds the two descriptors pipe writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let line = [b'x'; 1000];
        // 256 KB: more than any pipe's default capacity (64 KiB on Linux).
        let wrote: Vec<Wrote> = (0..256)
            .map(|_| write_all_quietly(fds[1], &line))
            .take_while(|w| *w == Wrote::All)
            .collect();
        assert!(wrote.len() >= 16, "a fresh pipe took {} lines", wrote.len());
        assert!(wrote.len() < 256, "the pipe never filled up");
        assert_eq!(write_all_quietly(fds[1], b"more\n"), Wrote::Full);
        for fd in fds {
            // SAFETY: ours, closed once.
            unsafe { libc::close(fd) };
        }
    }
}
