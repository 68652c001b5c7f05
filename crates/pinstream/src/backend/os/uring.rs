//! Positional reads through io_uring (Linux): the pieces of one block submitted together and
//! waited for together, so a file streamed from storage keeps several reads in flight per
//! reader thread. [`Uring::new`] fails where the kernel refuses io_uring (an old kernel, a
//! seccomp filter, `kernel.io_uring_disabled`); callers then read with `pread`.

use super::cache::{direct_aligned, misaligned, DIRECT_ALIGN};
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::os::fd::AsRawFd;

/// One thread's io_uring.
pub struct Uring {
    ring: IoUring,
    depth: usize,
}

impl Uring {
    /// A ring of `depth` entries.
    pub fn new(depth: u32) -> std::io::Result<Self> {
        let ring = IoUring::new(depth)?;
        Ok(Uring {
            ring,
            depth: depth as usize,
        })
    }

    /// Fills each `(offset, buffer)` of `reads` from `file`, all in flight at once (in
    /// batches of the ring's depth), short reads continued while they stop at a multiple of
    /// [`DIRECT_ALIGN`] (where a direct read may start); returns the bytes each got, fewer
    /// than its length where the file ended or a read stopped short elsewhere. Every read submitted is waited for before
    /// this returns, on every path.
    pub fn read_all(
        &mut self,
        file: &File,
        reads: &mut [(u64, &mut [u8])],
    ) -> std::io::Result<Vec<usize>> {
        let mut done = vec![0usize; reads.len()];
        let mut ended = vec![false; reads.len()];
        loop {
            let pending: Vec<usize> = (0..reads.len())
                .filter(|&k| !ended[k] && done[k] < reads[k].1.len())
                .take(self.depth)
                .collect();
            if pending.is_empty() {
                return Ok(done);
            }
            self.batch(file, reads, &pending, &mut done, &mut ended)?;
        }
    }

    /// Submits the reads `pending` of `reads` from where each stands, and waits for all.
    fn batch(
        &mut self,
        file: &File,
        reads: &mut [(u64, &mut [u8])],
        pending: &[usize],
        done: &mut [usize],
        ended: &mut [bool],
    ) -> std::io::Result<()> {
        let fd = types::Fd(file.as_raw_fd());
        let mut pushed = 0;
        let mut refused = None;
        for &k in pending {
            let (off, buf) = &mut reads[k];
            let rest = &mut buf[done[k]..];
            // At most 4 GiB less a page per read (a whole number of pages).
            let len = u32::try_from(rest.len()).unwrap_or(!4095);
            let at = *off + done[k] as u64;
            if !direct_aligned(at, len as usize, rest.as_ptr() as usize) {
                refused = Some(misaligned());
                break;
            }
            let entry = opcode::Read::new(fd, rest.as_mut_ptr(), len)
                .offset(at)
                .build()
                .user_data(k as u64);
            // SAFETY: the entry points into `reads[k]`, borrowed mutably for this call, and
            // this call waits for every entry it queued before returning (`wait_all`).
            match unsafe { self.ring.submission().push(&entry) } {
                Ok(()) => pushed += 1,
                Err(e) => {
                    refused = Some(std::io::Error::other(e));
                    break;
                }
            }
        }
        let results = self.wait_all(pushed);
        let mut first_error = refused;
        for (k, res) in results {
            match res {
                r if r < 0 => {
                    first_error.get_or_insert(std::io::Error::from_raw_os_error(-r));
                }
                0 => ended[k] = true,
                n => {
                    done[k] += n as usize;
                    // A short read stopped at an unaligned place (the file ended there): a
                    // direct read cannot go on from it, the caller reads the rest.
                    let short = done[k] < reads[k].1.len();
                    ended[k] = short && done[k] % DIRECT_ALIGN != 0;
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Submits what is queued and waits until `n` completions came back: (read, result).
    /// A failed wait is retried (an interrupted wait, a busy ring): returning before every
    /// read completed would leave the kernel writing into memory the caller got back.
    fn wait_all(&mut self, n: usize) -> Vec<(usize, i32)> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::yield_now();
            }
            out.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
        }
        out
    }
}
