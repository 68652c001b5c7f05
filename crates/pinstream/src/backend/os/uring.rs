//! Positional reads through io_uring (Linux): the pieces of one block submitted together and
//! waited for together, so a file streamed from storage keeps several reads in flight per
//! reader thread. [`Uring::new`] fails where the kernel refuses io_uring (an old kernel, a
//! seccomp filter, `kernel.io_uring_disabled`); callers then read with `pread`.
//!
//! Failures that heal (an interrupted or busy wait, a read answered `EAGAIN` or `EINTR`) are
//! retried, at most [`RETRIES`] times per [`Uring::read_all`]; any other ends it at once,
//! returned as its error. A wait that failed for good leaves the ring unused from then on
//! (`PINSTREAM_INJECT_FAULT=uring:N` fails the process's N-th wait and every one after with
//! `EIO`, a test hook).

use super::cache::{direct_aligned, misaligned, DIRECT_ALIGN};
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Failures that heal that one [`Uring::read_all`] retries before it gives up with the last.
pub const RETRIES: usize = 64;

/// True where failure `e` may heal and `retries` (counted up here) are not spent: an
/// interrupted wait or read (`EINTR`), a kernel short of resources for now (`EAGAIN`), a
/// completion queue full for now (`EBUSY`).
fn retry(e: &std::io::Error, retries: &mut usize) -> bool {
    let heals = matches!(
        e.raw_os_error(),
        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
    );
    let retried = heals && *retries < RETRIES;
    *retries += usize::from(retried);
    retried
}

/// The test hook `PINSTREAM_INJECT_FAULT=uring:N`: true for the process's N-th wait (from 0)
/// and every one after, which then fail with `EIO` as a lasting error would.
fn injected_wait_failure() -> bool {
    static WAITS: AtomicUsize = AtomicUsize::new(0);
    let Some(("uring", n)) = crate::backend::injected_fault() else {
        return false;
    };
    WAITS.fetch_add(1, Ordering::Relaxed) >= n
}

/// Where the reads of one [`Uring::read_all`] stand.
struct Progress {
    /// Bytes each read got.
    done: Vec<usize>,
    /// Each read is over (the file ended, or it stopped short at an unaligned place).
    ended: Vec<bool>,
    /// Failures that heal retried so far.
    retries: usize,
}

impl Progress {
    /// Takes completion `res` of read `k` of `len` bytes: bytes counted, a failure that heals
    /// left for the next batch to submit again, any other returned.
    fn take(&mut self, k: usize, res: i32, len: usize) -> std::io::Result<()> {
        if res < 0 {
            let e = std::io::Error::from_raw_os_error(-res);
            return if retry(&e, &mut self.retries) {
                Ok(())
            } else {
                Err(e)
            };
        }
        if res == 0 {
            self.ended[k] = true;
            return Ok(());
        }
        self.done[k] += res as usize;
        // A short read stopped at an unaligned place (the file ended there): a direct read
        // cannot go on from it, the caller reads the rest.
        self.ended[k] = self.done[k] < len && !self.done[k].is_multiple_of(DIRECT_ALIGN);
        Ok(())
    }
}

/// One thread's io_uring.
pub struct Uring {
    ring: IoUring,
    depth: usize,
    /// A wait failed for good: reads may still be queued in it, never to be submitted.
    broken: bool,
}

impl Uring {
    /// A ring of `depth` entries.
    pub fn new(depth: u32) -> std::io::Result<Self> {
        let ring = IoUring::new(depth)?;
        Ok(Uring {
            ring,
            depth: depth as usize,
            broken: false,
        })
    }

    /// True once a wait failed for good: the ring refuses further reads, drop it.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Fills each `(offset, buffer)` of `reads` from `file`, all in flight at once (in
    /// batches of the ring's depth), short reads continued while they stop at a multiple of
    /// [`DIRECT_ALIGN`] (where a direct read may start); returns the bytes each got, fewer
    /// than its length where the file ended or a read stopped short elsewhere. Every read
    /// submitted is waited for before this returns, on every path.
    pub fn read_all(
        &mut self,
        file: &File,
        reads: &mut [(u64, &mut [u8])],
    ) -> std::io::Result<Vec<usize>> {
        if self.broken {
            return Err(std::io::Error::other(
                "this io_uring failed a wait before and reads no more",
            ));
        }
        let mut p = Progress {
            done: vec![0; reads.len()],
            ended: vec![false; reads.len()],
            retries: 0,
        };
        loop {
            let pending: Vec<usize> = (0..reads.len())
                .filter(|&k| !p.ended[k] && p.done[k] < reads[k].1.len())
                .take(self.depth)
                .collect();
            if pending.is_empty() {
                return Ok(p.done);
            }
            self.batch(file, reads, &pending, &mut p)?;
        }
    }

    /// Submits the reads `pending` of `reads` from where each stands, and waits for all.
    fn batch(
        &mut self,
        file: &File,
        reads: &mut [(u64, &mut [u8])],
        pending: &[usize],
        p: &mut Progress,
    ) -> std::io::Result<()> {
        let (pushed, refused) = self.push(file, reads, pending, &p.done);
        let results = self.wait_all(pushed, &mut p.retries)?;
        let mut first_error = refused;
        for (k, res) in results {
            if let Err(e) = p.take(k, res, reads[k].1.len()) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Queues the reads `pending` of `reads`, each from `done` bytes in: how many were
    /// queued, and why the rest were not.
    fn push(
        &mut self,
        file: &File,
        reads: &mut [(u64, &mut [u8])],
        pending: &[usize],
        done: &[usize],
    ) -> (usize, Option<std::io::Error>) {
        let fd = types::Fd(file.as_raw_fd());
        let mut pushed = 0;
        for &k in pending {
            let (off, buf) = &mut reads[k];
            let rest = &mut buf[done[k]..];
            // At most 4 GiB less a page per read (a whole number of pages).
            let len = u32::try_from(rest.len()).unwrap_or(!4095);
            let at = *off + done[k] as u64;
            if !direct_aligned(at, len as usize, rest.as_ptr() as usize) {
                return (pushed, Some(misaligned()));
            }
            let entry = opcode::Read::new(fd, rest.as_mut_ptr(), len)
                .offset(at)
                .build()
                .user_data(k as u64);
            // SAFETY: the entry points into `reads[k]`, borrowed mutably by `read_all`, which
            // waits for every entry the kernel took before returning (`wait_all`), and a
            // ring whose entries may still be queued is not used again (`broken`).
            if let Err(e) = unsafe { self.ring.submission().push(&entry) } {
                return (pushed, Some(std::io::Error::other(e)));
            }
            pushed += 1;
        }
        (pushed, None)
    }

    /// Submits what is queued and waits until `n` completions came back: (read, result).
    /// A failed wait is retried where it may heal ([`retry`]); else the ring gives up
    /// ([`Self::give_up`]) and the failure is returned.
    fn wait_all(&mut self, n: usize, retries: &mut usize) -> std::io::Result<Vec<(usize, i32)>> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if let Err(e) = self.enter() {
                if !retry(&e, retries) {
                    self.give_up(n, &mut out);
                    return Err(e);
                }
                std::thread::yield_now();
            }
            self.reap(&mut out);
        }
        Ok(out)
    }

    /// Submits what is queued and waits for a completion.
    fn enter(&mut self) -> std::io::Result<()> {
        if injected_wait_failure() {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.ring.submit_and_wait(1).map(drop)
    }

    /// Moves what completed into `out`.
    fn reap(&mut self, out: &mut Vec<(usize, i32)>) {
        let done = self.ring.completion();
        out.extend(done.map(|c| (c.user_data() as usize, c.result())));
    }

    /// After a wait that failed for good, of `n` reads queued: the ring is not used again
    /// (reads still queued in it are never submitted), and those the kernel took are waited
    /// for without entering it (their completions reach the shared queue as the kernel ends
    /// them, which it does for each, with an error at worst): returning before would leave
    /// the kernel writing into memory the caller got back.
    fn give_up(&mut self, n: usize, out: &mut Vec<(usize, i32)>) {
        self.broken = true;
        let taken = n.saturating_sub(self.ring.submission().len());
        self.reap(out);
        while out.len() < taken {
            std::thread::sleep(Duration::from_micros(200));
            self.reap(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{retry, RETRIES};
    use std::io::Error;

    #[test]
    fn failures_that_heal_are_retried_a_bounded_number_of_times_others_never() {
        for errno in [libc::EIO, libc::EBADF, libc::EINVAL, libc::EFAULT] {
            let mut n = 0;
            assert!(!retry(&Error::from_raw_os_error(errno), &mut n), "{errno}");
            assert_eq!(n, 0);
        }
        for errno in [libc::EINTR, libc::EAGAIN, libc::EBUSY] {
            let mut n = 0;
            let e = Error::from_raw_os_error(errno);
            let tries = std::iter::repeat_with(|| retry(&e, &mut n)).take(RETRIES + 5);
            assert_eq!(tries.filter(|&r| r).count(), RETRIES, "{errno}");
        }
    }
}
