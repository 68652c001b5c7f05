//! The ring's schedule, the same for every API and device: which command of a block waits
//! for which, how far ahead blocks are enqueued, when progress is reported and a stop is
//! answered.
//!
//! Block `i` goes to slot `i % N`. Its upload waits for the kernel of block `i - N` (which
//! read that slot) and, in place, for that block's download; its kernel waits for the upload
//! and, out of place, for the download of block `i - N` (which read the slot's output); its
//! download waits for its kernel. [`Stages`] enqueues the commands; the engine's one
//! implementation ([`super::device`]) does it through any [`crate::backend::api::Api`].
//!
//! A block's events are kept only while the block is in flight: once its download is waited
//! for, its commands' device times become compact [`Record`]s and the events are released.

use super::error::StreamError;
use super::profile::{Record, Stage};
use crate::backend::api::Profile;
use crate::backend::error::BackendError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// One way to enqueue the three stages of a block. The commands of one stage of one block go
/// to one in-order queue, so waiting for the last of them waits for all.
pub(crate) trait Stages {
    /// What a command returns and later commands wait for.
    type Event;
    /// Enqueues block `block`'s uploads into slot `slot` after `wait`; events with bytes.
    fn upload(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Enqueues block `block`'s kernel on slot `slot` after `wait`.
    fn kernel(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Self::Event, StreamError>;
    /// Enqueues block `block`'s download from slot `slot` after `wait`; events with bytes.
    fn download(
        &mut self,
        block: usize,
        slot: usize,
        wait: &[&Self::Event],
    ) -> Result<Vec<(Self::Event, u64)>, StreamError>;
    /// Checks block `block` once its commands completed (the bounds guard); blocks are
    /// checked in order, each once.
    fn check(&mut self, block: usize) -> Result<(), StreamError>;
    /// Submits what was enqueued.
    fn flush(&self) -> Result<(), StreamError>;
    /// Waits for everything enqueued (errors ignored: used on the way out).
    fn finish(&self);
    /// Waits for one command; its failure if it failed.
    fn wait(&self, e: &Self::Event) -> Result<(), BackendError>;
    /// Device times of a completed command.
    fn profile(&self, e: &Self::Event) -> Result<Profile, StreamError>;
}

/// The shape of one ring's run.
pub(crate) struct Schedule<'a> {
    /// The first block of the run this ring streams (its blocks are `first..first + blocks`).
    pub first: usize,
    /// Blocks this ring streams.
    pub blocks: usize,
    /// Slots in the ring.
    pub slots: usize,
    /// Each block's result goes back where it came from.
    pub in_place: bool,
    /// The device's index in the run, for the records.
    pub device: u16,
    /// Stop request (see [`super::StreamOptions::stop`]).
    pub stop: Option<&'a AtomicUsize>,
    /// Set when another ring of the run failed: this one stops too.
    pub abort: Option<&'a AtomicBool>,
}

/// The events of one block in flight.
struct InFlight<E> {
    up: Vec<(E, u64)>,
    kernel: E,
    down: Vec<(E, u64)>,
}

/// Enqueues every block of `sched` through `s`, at most two rings ahead of the last
/// completed download (so a stop is answered within a few blocks and progress is live);
/// returns every command's record. `progress(blocks_done, bytes_done)` counts this ring's.
pub(crate) fn run_ring<S: Stages>(
    stages: &mut S,
    sched: &Schedule,
    progress: &dyn Fn(u64, u64),
) -> Result<Vec<Record>, StreamError> {
    let window = 2 * sched.slots;
    let blocks = sched.blocks;
    // Blocks `waited..` (at most `window` of them) are in flight, oldest first.
    let mut flight: VecDeque<InFlight<S::Event>> = VecDeque::with_capacity(window + 1);
    // Three records a block where no transfer crosses a chunk boundary: reserved at once, so
    // a run of many tiny blocks does not hold a doubled buffer while the Vec grows.
    let mut records = Vec::with_capacity(blocks.saturating_mul(3));
    let (mut waited, mut bytes) = (0, 0);
    for i in 0..=blocks {
        while waited < i && (i == blocks || waited + window <= i) {
            let done = flight.pop_front().expect("block `waited` is in flight");
            bytes += complete(stages, sched, waited, &done, &mut records)?;
            stages.check(sched.first + waited)?;
            waited += 1;
            progress(waited as u64, bytes);
            check_stop(stages, sched, waited)?;
        }
        if i < blocks {
            check_stop(stages, sched, waited)?;
            let events = enqueue_block(stages, sched, i, &flight, waited)?;
            flight.push_back(events);
            stages.flush()?;
        }
    }
    Ok(records)
}

/// Waits for block `i`'s downloads and kernel, records its commands' device times and
/// returns the bytes it downloaded; its events are released when `d` is dropped.
fn complete<S: Stages>(
    stages: &S,
    sched: &Schedule,
    i: usize,
    events: &InFlight<S::Event>,
    records: &mut Vec<Record>,
) -> Result<u64, StreamError> {
    let block = sched.first + i;
    for (e, _) in &events.down {
        stages
            .wait(e)
            .map_err(|e| stage_error(block, first_failed(stages, events), e))?;
    }
    stages
        .wait(&events.kernel)
        .map_err(|e| stage_error(block, "kernel", e))?;
    let mut push = |stage, e: &S::Event, bytes| -> Result<(), StreamError> {
        let p = stages.profile(e)?;
        records.push(Record::new(stage, sched.device, block, bytes, &p));
        Ok(())
    };
    for (e, b) in &events.up {
        push(Stage::Upload, e, *b)?;
    }
    push(Stage::Kernel, &events.kernel, 0)?;
    for (e, b) in &events.down {
        push(Stage::Download, e, *b)?;
    }
    Ok(events.down.iter().map(|(_, b)| b).sum())
}

/// Enqueues block `i` (ring-local) behind the blocks in `flight`, which start at `waited`.
fn enqueue_block<S: Stages>(
    stages: &mut S,
    sched: &Schedule,
    i: usize,
    flight: &VecDeque<InFlight<S::Event>>,
    waited: usize,
) -> Result<InFlight<S::Event>, StreamError> {
    let slot = i % sched.slots;
    let block = sched.first + i;
    // Block i - N is still in flight: at most 2N blocks are, and i - N > i - 2N.
    let prev = i.checked_sub(sched.slots).map(|p| &flight[p - waited]);
    // Upload: the slot's previous kernel (and, in place, its download) must be done.
    let mut wait: Vec<&S::Event> = prev.map(|p| vec![&p.kernel]).unwrap_or_default();
    if let (true, Some(p)) = (sched.in_place, prev) {
        wait.extend(p.down.last().map(|(e, _)| e));
    }
    let up = stages.upload(block, slot, &wait)?;
    // Kernel: after the upload and, out of place, after the slot's previous download.
    let mut kwait: Vec<&S::Event> = up.last().map(|(e, _)| e).into_iter().collect();
    if let (false, Some(p)) = (sched.in_place, prev) {
        kwait.extend(p.down.last().map(|(e, _)| e));
    }
    let kernel = stages.kernel(block, slot, &kwait)?;
    // Download: after the kernel.
    let down = stages.download(block, slot, &[&kernel])?;
    Ok(InFlight { up, kernel, down })
}

/// Returns `Stopped` (after letting the blocks in flight finish) once a stop is requested or
/// another ring of the run failed (code 0: the run reports that ring's error instead).
fn check_stop<S: Stages>(stages: &S, sched: &Schedule, done: usize) -> Result<(), StreamError> {
    let code = sched.stop.map_or(0, |f| f.load(Ordering::Relaxed));
    let aborted = sched.abort.is_some_and(|a| a.load(Ordering::Relaxed));
    if code == 0 && !aborted {
        return Ok(());
    }
    stages.finish();
    Err(StreamError::Stopped {
        code,
        done,
        blocks: sched.blocks,
    })
}

/// The first stage of a block whose command failed: a failed upload or kernel makes the
/// download that waits for it fail too, and the cause is what the user needs to see.
fn first_failed<S: Stages>(stages: &S, events: &InFlight<S::Event>) -> &'static str {
    if events.up.iter().any(|(e, _)| stages.wait(e).is_err()) {
        "upload"
    } else if stages.wait(&events.kernel).is_err() {
        "kernel"
    } else {
        "download"
    }
}

/// A failed command of block `block` in `stage`.
pub(crate) fn stage_error(
    block: usize,
    stage: &'static str,
    source: impl Into<BackendError>,
) -> StreamError {
    StreamError::Stage {
        block,
        stage,
        source: source.into(),
    }
}

/// Attributes `total` bytes to the events of one stage of one block (they are per chunk
/// piece; their exact split does not matter for totals).
pub(crate) fn spread_bytes<E>(events: &mut [(E, u64)], total: u64) {
    let n = events.len() as u64;
    for (k, e) in events.iter_mut().enumerate() {
        e.1 = total / n.max(1) + u64::from((k as u64) < total % n.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Commands as numbers, and for each the commands it waited for.
    #[derive(Default)]
    struct Log {
        next: usize,
        /// (block, stage, waited-for command numbers)
        made: Vec<(usize, &'static str, Vec<usize>)>,
        profiled: usize,
        /// Blocks checked, in order; the block whose check fails.
        checked: Vec<usize>,
        fail_at: Option<usize>,
    }

    struct Mock(RefCell<Log>);

    impl Mock {
        fn cmd(&self, block: usize, stage: &'static str, wait: &[&usize]) -> usize {
            let mut l = self.0.borrow_mut();
            let n = l.next;
            l.next += 1;
            l.made
                .push((block, stage, wait.iter().map(|w| **w).collect()));
            n
        }
        fn find(&self, block: usize, stage: &str) -> usize {
            let l = self.0.borrow();
            l.made
                .iter()
                .position(|m| m.0 == block && m.1 == stage)
                .unwrap()
        }
        fn waits(&self, block: usize, stage: &str) -> Vec<usize> {
            self.0.borrow().made[self.find(block, stage)].2.clone()
        }
    }

    impl Stages for Mock {
        type Event = usize;
        fn upload(
            &mut self,
            b: usize,
            _: usize,
            w: &[&usize],
        ) -> Result<Vec<(usize, u64)>, StreamError> {
            Ok(vec![(self.cmd(b, "up", w), 10)])
        }
        fn kernel(&mut self, b: usize, _: usize, w: &[&usize]) -> Result<usize, StreamError> {
            Ok(self.cmd(b, "kernel", w))
        }
        fn download(
            &mut self,
            b: usize,
            _: usize,
            w: &[&usize],
        ) -> Result<Vec<(usize, u64)>, StreamError> {
            Ok(vec![(self.cmd(b, "down", w), 7)])
        }
        fn check(&mut self, b: usize) -> Result<(), StreamError> {
            let mut l = self.0.borrow_mut();
            l.checked.push(b);
            match l.fail_at {
                Some(f) if f == b => Err(StreamError::Stopped {
                    code: 99,
                    done: b,
                    blocks: 0,
                }),
                _ => Ok(()),
            }
        }
        fn flush(&self) -> Result<(), StreamError> {
            Ok(())
        }
        fn finish(&self) {}
        fn wait(&self, _: &usize) -> Result<(), BackendError> {
            Ok(())
        }
        fn profile(&self, e: &usize) -> Result<Profile, StreamError> {
            self.0.borrow_mut().profiled += 1;
            let t = *e as u64 * 10;
            Ok(Profile {
                queued: None,
                submit: None,
                start: t,
                end: t + 5,
            })
        }
    }

    fn sched(first: usize, blocks: usize, slots: usize, in_place: bool) -> Schedule<'static> {
        Schedule {
            first,
            blocks,
            slots,
            in_place,
            device: 0,
            stop: None,
            abort: None,
        }
    }

    #[test]
    fn the_wait_rules_hold_in_place_and_out_of_place() {
        for in_place in [true, false] {
            let mut m = Mock(RefCell::new(Log::default()));
            let recs = run_ring(&mut m, &sched(100, 9, 3, in_place), &|_, _| {}).unwrap();
            assert_eq!(recs.len(), 27);
            assert_eq!(m.0.borrow().profiled, 27, "every command profiled once");
            // Block 104 (ring block 4) reuses the slot of block 101.
            let (k1, d1) = (m.find(101, "kernel"), m.find(101, "down"));
            let want_up = if in_place { vec![k1, d1] } else { vec![k1] };
            assert_eq!(m.waits(104, "up"), want_up);
            let up4 = m.find(104, "up");
            let want_k = if in_place { vec![up4] } else { vec![up4, d1] };
            assert_eq!(m.waits(104, "kernel"), want_k);
            assert_eq!(m.waits(104, "down"), vec![m.find(104, "kernel")]);
            assert!(m.waits(100, "up").is_empty());
            assert!(recs.iter().all(|r| (100..109).contains(&r.block)));
        }
    }

    #[test]
    fn every_block_is_checked_in_order_and_a_failed_check_stops_the_ring() {
        let mut m = Mock(RefCell::new(Log::default()));
        run_ring(&mut m, &sched(10, 5, 2, false), &|_, _| {}).unwrap();
        assert_eq!(m.0.borrow().checked, [10, 11, 12, 13, 14]);
        let log = Log {
            fail_at: Some(12),
            ..Log::default()
        };
        let mut m = Mock(RefCell::new(log));
        let seen = RefCell::new(0);
        let r = run_ring(&mut m, &sched(10, 5, 2, false), &|b, _| {
            *seen.borrow_mut() = b
        });
        assert!(matches!(r, Err(StreamError::Stopped { code: 99, .. })));
        assert_eq!(m.0.borrow().checked, [10, 11, 12]);
        assert_eq!(*seen.borrow(), 2, "the failed block is not counted as done");
    }

    #[test]
    fn progress_counts_downloaded_bytes_and_a_stop_is_answered() {
        let seen = RefCell::new(Vec::new());
        let mut m = Mock(RefCell::new(Log::default()));
        run_ring(&mut m, &sched(0, 5, 2, true), &|b, bytes| {
            seen.borrow_mut().push((b, bytes))
        })
        .unwrap();
        assert_eq!(*seen.borrow(), [(1, 7), (2, 14), (3, 21), (4, 28), (5, 35)]);
        let stop = AtomicUsize::new(15);
        let s = Schedule {
            stop: Some(&stop),
            ..sched(0, 5, 2, true)
        };
        let mut m = Mock(RefCell::new(Log::default()));
        match run_ring(&mut m, &s, &|_, _| {}) {
            Err(StreamError::Stopped {
                code: 15,
                done: 0,
                blocks: 5,
            }) => {}
            other => panic!("{other:?}"),
        }
        let abort = AtomicBool::new(true);
        let s = Schedule {
            abort: Some(&abort),
            ..sched(0, 5, 2, true)
        };
        assert!(matches!(
            run_ring(&mut Mock(RefCell::new(Log::default())), &s, &|_, _| {}),
            Err(StreamError::Stopped { code: 0, .. })
        ));
    }
}
