//! Random batched copies between blocks of pinstream's memory and a device buffer, as a
//! careless or hostile program makes them: the zero-copy calls (pieces in one block of
//! mapped memory, `PS_HOST_ALLOC_MAPPED`), and pieces in a plain `psHostAlloc` block (the
//! staged path), both directions, with and without `PS_BATCH_DISJOINT`. Pieces lie inside
//! the block, straddle its end, run into it from before, have a length of 0 or near
//! `SIZE_MAX`, device offsets that run past the buffer or overflow, host addresses that wrap
//! around the address space, and overlap one another.
//!
//! Each call is judged against a model of the documented checks: refused with
//! `PS_ERROR_INVALID_VALUE` (a detail naming the call, no event, nothing enqueued or
//! written: the block and the buffer are unchanged) exactly when a piece breaks one of them,
//! and otherwise copied exactly (where vouched pieces overlap, the overlap's bytes are one of
//! theirs and nothing outside the pieces changes). Several threads at once, each with its own
//! blocks, queue and buffer, in one context (its gather is shared).
//!
//! The seed is printed; `PINSTREAM_FUZZ_SEED=N` replays a run.

mod common;
mod fuzzing;

use common::{batch_call, release, Cl, Raw};
use pinstream_capi::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::ffi::{c_void, CStr};
use std::ptr;
use std::time::Duration;

const THREADS: usize = 2;
const CALLS: usize = 800;
/// Each block of host memory, and each thread's device buffer.
const BLOCK: usize = 64 << 10;
const BUF: usize = 32 << 10;
const LIMIT: Duration = Duration::from_secs(120);

fn detail() -> String {
    // SAFETY: this thread's NUL-terminated detail, read before another call.
    unsafe { CStr::from_ptr(psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

/// A piece: host address, length, device offset.
type Piece = (usize, usize, usize);

/// Where a piece lies in one side's model.
type Where<'a> = dyn Fn(&Piece) -> usize + 'a;

/// One thread's blocks (mapped, plain), queue and buffer, with what each should hold.
struct Fuzz {
    rng: SmallRng,
    queue: cl_command_queue,
    buf: cl_mem,
    blocks: [usize; 2],
    host: [Vec<u8>; 2],
    dev: Vec<u8>,
    /// Calls copied, and calls refused.
    done: (usize, usize),
}

/// `pieces` less each that shares a host byte with one kept before it.
fn disjoint(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut kept: Vec<Piece> = Vec::new();
    for p in pieces {
        let end = |q: &Piece| q.0.saturating_add(q.1);
        if kept.iter().all(|q| end(&p) <= q.0 || end(q) <= p.0) {
            kept.push(p);
        }
    }
    kept
}

/// Whether two ranges of the written side share a byte.
fn overlapping(spans: &mut [(usize, usize)]) -> bool {
    spans.sort_unstable();
    spans.windows(2).any(|w| w[1].0 < w[0].0 + w[0].1)
}

impl Fuzz {
    /// A piece of one of the kinds the file's docs list, against the block at `base`.
    fn piece(&mut self, base: usize) -> Piece {
        let r = &mut self.rng;
        let len = [1, 3, 16, 100, 4096, 5000][r.gen_range(0..6)];
        let dev = r.gen_range(0..=BUF - len);
        let host = base + r.gen_range(0..=BLOCK - len);
        match r.gen_range(0..40) {
            0 => (base + BLOCK - r.gen_range(1..=len.min(BLOCK)), len + 1, dev), // straddles
            1 => (base - r.gen_range(1..=64), len + 64, dev),                    // runs into
            2 => (host, 0, dev),                                                 // empty
            3 => (host, usize::MAX - r.gen_range(0..2), dev),                    // SIZE_MAX
            4 => (usize::MAX - r.gen_range(0..64), len + 64, dev),               // wraps
            5 => (host, len, BUF - len + r.gen_range(1..=len)),                  // past buffer
            6 => (host, len, usize::MAX - r.gen_range(0..len)),                  // overflows
            _ => (host, len, dev),
        }
    }

    /// Whether the model refuses `pieces` into or out of the block at `base` (`up`: the
    /// device side is written), with `vouched` overlaps.
    fn refused(pieces: &[Piece], base: usize, up: bool, vouched: bool) -> bool {
        let bad = |&(h, n, d): &Piece| {
            let host_end = h.checked_add(n);
            n == 0
                || n > isize::MAX as usize
                || host_end.is_none()
                || h < base && host_end.is_some_and(|e| e > base)
                || (base..base + BLOCK).contains(&h) && host_end.is_some_and(|e| e > base + BLOCK)
                || d.checked_add(n).is_none_or(|e| e > BUF)
        };
        let mut written: Vec<(usize, usize)> = pieces
            .iter()
            .map(|&(h, n, d)| if up { (d, n) } else { (h, n) })
            .collect();
        pieces.is_empty() || pieces.iter().any(bad) || !vouched && overlapping(&mut written)
    }

    fn step(&mut self) {
        let which = usize::from(self.rng.gen_bool(0.25));
        let base = self.blocks[which];
        let count = [0, 1, 2, 3, 8, 16][self.rng.gen_range(0..6)];
        let mut pieces: Vec<Piece> = (0..count).map(|_| self.piece(base)).collect();
        if count > 1 && self.rng.gen_bool(0.3) {
            // Overlap on purpose: piece 1 takes piece 0's ranges, shifted a little.
            let (h, n, d) = pieces[0];
            let s = self.rng.gen_range(0..n.clamp(1, BLOCK));
            pieces[1] = (h.wrapping_add(s), n, d.wrapping_add(s));
        }
        let (up, vouched) = (self.rng.gen_bool(0.5), self.rng.gen_bool(0.5));
        if which == 1 && !up {
            // Downloads to memory outside mapped blocks: disjoint host pieces are the
            // caller's promise (the header's safety), unchecked; keep it.
            pieces = disjoint(pieces);
        }
        let code = self.call(&pieces, up, vouched);
        let refused = Self::refused(&pieces, base, up, vouched);
        let name = match up {
            true => "psMemcpyBatchHtoDAsyncWithFlags",
            false => "psMemcpyBatchDtoHAsyncWithFlags",
        };
        let shown = format!("{name} {pieces:x?} vouched {vouched}");
        if refused {
            assert_eq!(code, Err(PS_ERROR_INVALID_VALUE), "{shown}");
            assert!(detail().starts_with(name), "{shown}: {}", detail());
            self.done.1 += 1;
        } else {
            assert_eq!(code, Ok(()), "{shown}: {}", detail());
            self.done.0 += 1;
            self.apply(which, &pieces, up);
        }
        self.compare(which, &pieces, up, &shown);
    }

    /// The call, waited for where it succeeded; `Err(code)` where it did not (with no event).
    fn call(&mut self, pieces: &[Piece], up: bool, vouched: bool) -> Result<(), psError_t> {
        let flags = if vouched { PS_BATCH_DISJOINT } else { 0 };
        let raw: Vec<(*mut u8, usize, usize)> = pieces
            .iter()
            .map(|&(h, n, d)| (h as *mut u8, n, d))
            .collect();
        let (code, ev) = batch_call((self.queue, self.buf), &raw, flags, up);
        if code != PS_SUCCESS {
            assert!(ev.is_null(), "a refused call handed out an event");
            return Err(code);
        }
        cl3::event::wait_for_events(&[ev]).expect("the call's event completes");
        release(ev);
        Ok(())
    }

    /// The model after an accepted call: each piece's bytes where they go, in order (the
    /// bytes where vouched pieces overlap are checked apart, in [`Self::compare`]).
    fn apply(&mut self, which: usize, pieces: &[Piece], up: bool) {
        let base = self.blocks[which];
        for &(h, n, d) in pieces {
            let h = h - base;
            match up {
                true => self.dev[d..d + n].copy_from_slice(&self.host[which][h..h + n]),
                false => {
                    let from = self.dev[d..d + n].to_vec();
                    self.host[which][h..h + n].copy_from_slice(&from);
                }
            }
        }
    }

    /// The block and the buffer against the model: equal outside the bytes vouched pieces
    /// overlap on, and there one of those pieces' bytes; the model then takes what is there.
    fn compare(&mut self, which: usize, pieces: &[Piece], up: bool, shown: &str) {
        let mut have = vec![0u8; BUF];
        // SAFETY: a blocking read of the buffer into `have`, which holds BUF bytes.
        unsafe {
            cl3::command_queue::enqueue_read_buffer(
                self.queue,
                self.buf,
                1,
                0,
                BUF,
                have.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map(release)
        .expect("clEnqueueReadBuffer");
        // SAFETY: the thread's block, BLOCK bytes until freed; nothing of pinstream writes it
        // now (every call was waited for).
        let block = unsafe { std::slice::from_raw_parts(self.blocks[which] as *const u8, BLOCK) };
        let (got, want) = match up {
            true => (&have[..], &self.dev[..]),
            false => (block, &self.host[which][..]),
        };
        // Where a piece writes, and where it reads from, in the model's vectors.
        let base = self.blocks[which];
        let host_at = |p: &Piece| p.0 - base;
        let dev_at = |p: &Piece| p.2;
        let (to, from): (&Where<'_>, &Where<'_>) = match up {
            true => (&dev_at, &host_at),
            false => (&host_at, &dev_at),
        };
        let source = if up { &self.host[which] } else { &self.dev };
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            // A byte vouched pieces overlap on holds one of theirs.
            let theirs = |p: &&Piece| {
                let (t, f) = (to(p), from(p));
                (t..t + p.1).contains(&i) && source[f + i - t] == *g
            };
            let ok = g == w || pieces.len() > 1 && pieces.iter().any(|p| theirs(&p));
            assert!(ok, "{shown}: byte {i} is {g:#x}, not {w:#x}");
        }
        let untouched = match up {
            true => block == &self.host[which][..],
            false => have == self.dev,
        };
        assert!(untouched, "{shown}: the side not written changed");
        match up {
            true => self.dev = have,
            false => self.host[which] = block.to_vec(),
        }
    }
}

/// One thread's run: its counts of calls copied and refused.
fn run(seed: u64, cl: Raw, queue: Raw, buf: Raw) -> (usize, usize) {
    let mut blocks = [0usize; 2];
    for (b, flags) in blocks.iter_mut().zip([PS_HOST_ALLOC_MAPPED, 0]) {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: a live context; `p` is writable.
        let code = unsafe { psHostAlloc({ cl }.0, BLOCK, flags, &mut p) };
        assert_eq!(code, PS_SUCCESS, "{}", detail());
        // SAFETY: the block's BLOCK bytes, the thread's until freed.
        unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), BLOCK) }.fill(0);
        *b = p as usize;
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut host = [vec![0u8; BLOCK], vec![0u8; BLOCK]];
    for (h, &b) in host.iter_mut().zip(&blocks) {
        rng.fill(&mut h[..]);
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(b as *mut u8, BLOCK) }.copy_from_slice(h);
    }
    let mut f = Fuzz {
        rng,
        queue: { queue }.0.cast(),
        buf: { buf }.0.cast(),
        blocks,
        host,
        dev: vec![0u8; BUF],
        done: (0, 0),
    };
    for _ in 0..CALLS {
        f.step();
    }
    for b in f.blocks {
        assert_eq!(psHostFree(b as *mut c_void), PS_SUCCESS, "{}", detail());
    }
    f.done
}

#[test]
fn random_zero_copy_batches_are_refused_or_copied_exactly() {
    let seed = fuzzing::seed();
    let cl = Cl::new();
    let queues: Vec<_> = (0..THREADS)
        .map(|_| common::queue(cl.ctx, cl.device, 0))
        .collect();
    let bufs: Vec<_> = (0..THREADS)
        .map(|_| cl.buffer(cl3::memory::CL_MEM_READ_WRITE, BUF))
        .collect();
    let mut runs: Vec<fuzzing::Work<(usize, usize)>> = Vec::new();
    for t in 0..THREADS {
        common::write(queues[t], bufs[t].0, &[0u8; BUF]);
        let (c, q, b) = (Raw(cl.ctx), Raw(queues[t].cast()), Raw(bufs[t].0));
        runs.push(Box::new(move |seed| run(seed, c, q, b)));
    }
    let done = fuzzing::threads(seed, LIMIT, runs);
    let copied: usize = done.iter().map(|d| d.0).sum();
    let refused: usize = done.iter().map(|d| d.1).sum();
    eprintln!("{copied} calls copied, {refused} refused");
    let calls = THREADS * CALLS;
    assert!(
        copied >= calls / 5 && refused >= calls / 5,
        "too few of one outcome to test it: {copied} copied, {refused} refused"
    );
    assert_eq!(psMemcpyBatchRelease(cl.ctx), PS_SUCCESS);
    for q in queues {
        // SAFETY: the queues made above, released once.
        let _ = unsafe { cl3::command_queue::release_command_queue(q) };
    }
}
