//! The ring's unit tests: its wait rules, passes and stops, over a mock of the stages.

use super::*;
use std::cell::RefCell;

/// Commands as numbers, and for each the commands it waited for.
#[derive(Default)]
struct Log {
    next: usize,
    /// (step, stage, waited-for command numbers)
    made: Vec<(Step, &'static str, Vec<usize>)>,
    profiled: usize,
    /// Blocks checked, in order; the block whose check fails.
    checked: Vec<usize>,
    fail_at: Option<usize>,
}

struct Mock(RefCell<Log>);

impl Mock {
    fn cmd(&self, step: Step, stage: &'static str, wait: &[&usize]) -> usize {
        let mut l = self.0.borrow_mut();
        let n = l.next;
        l.next += 1;
        l.made
            .push((step, stage, wait.iter().map(|w| **w).collect()));
        n
    }
    /// The command of `stage` of `block` in `pass`, if one was enqueued.
    fn find_in(&self, block: usize, pass: usize, stage: &str) -> Option<usize> {
        let l = self.0.borrow();
        (l.made.iter()).position(|m| m.0.block == block && m.0.pass == pass && m.1 == stage)
    }
    fn find(&self, block: usize, stage: &str) -> usize {
        self.find_in(block, 0, stage).unwrap()
    }
    fn waits_in(&self, block: usize, pass: usize, stage: &str) -> Vec<usize> {
        self.0.borrow().made[self.find_in(block, pass, stage).unwrap()]
            .2
            .clone()
    }
    fn waits(&self, block: usize, stage: &str) -> Vec<usize> {
        self.waits_in(block, 0, stage)
    }
}

impl Stages for Mock {
    type Event = usize;
    fn upload(&mut self, s: Step, w: &[&usize]) -> Result<Vec<(usize, u64)>, StreamError> {
        Ok(vec![(self.cmd(s, "up", w), 10)])
    }
    fn kernel(&mut self, s: Step, w: &[&usize]) -> Result<usize, StreamError> {
        Ok(self.cmd(s, "kernel", w))
    }
    fn download(&mut self, s: Step, w: &[&usize]) -> Result<Vec<(usize, u64)>, StreamError> {
        Ok(vec![(self.cmd(s, "down", w), 7)])
    }
    fn check(&mut self, s: Step) -> Result<(), StreamError> {
        let b = s.block;
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
        passes: 1,
        carried: (0, 1),
        resident: blocks..blocks,
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

#[test]
fn later_passes_skip_the_resident_blocks_transfers_and_wait_for_the_pass_before() {
    for in_place in [true, false] {
        // 2 blocks streamed through 2 slots, blocks 12 and 13 resident: a window of 6
        // steps holds the pass before.
        let s = Schedule {
            passes: 3,
            carried: (0, 3),
            resident: 2..4,
            ..sched(10, 4, 2, in_place)
        };
        let mut m = Mock(RefCell::new(Log::default()));
        run_ring(&mut m, &s, &|_, _| {}).unwrap();
        let slot = |b, pass, stage| m.0.borrow().made[m.find_in(b, pass, stage).unwrap()].0.slot;
        for pass in 0..3 {
            for b in 10..12 {
                assert!(m.find_in(b, pass, "up").is_some());
                assert!(m.find_in(b, pass, "down").is_some());
                assert_eq!(
                    slot(b, pass, "up"),
                    b - 10,
                    "the ring's slots turn over the streamed blocks"
                );
            }
            let (up, down) = (m.find_in(13, pass, "up"), m.find_in(13, pass, "down"));
            assert_eq!(up.is_some(), pass == 0, "a resident block is uploaded once");
            assert_eq!(
                down.is_some(),
                !in_place || pass == 2,
                "in place: downloaded once"
            );
            assert_eq!(
                slot(13, pass, "kernel"),
                3,
                "a resident block keeps its own slot"
            );
        }
        // The resident block's kernel in pass 2 waits for its kernel of pass 1.
        let k1 = m.find_in(13, 1, "kernel").unwrap();
        assert!(m.waits_in(13, 2, "kernel").contains(&k1));
        // In place, block 11's upload in pass 1 waits for its download of pass 0.
        let d0 = m.find_in(11, 0, "down").unwrap();
        assert_eq!(m.waits_in(11, 1, "up").contains(&d0), in_place);
    }
}

#[test]
fn a_later_pass_spreads_its_resident_kernels_among_the_streamed_blocks() {
    for in_place in [true, false] {
        // Blocks 0, 1 and 6 streamed through 2 slots, 2..6 resident.
        let s = Schedule {
            passes: 3,
            carried: (0, 3),
            resident: 2..6,
            ..sched(0, 7, 2, in_place)
        };
        let mut m = Mock(RefCell::new(Log::default()));
        run_ring(&mut m, &s, &|_, _| {}).unwrap();
        let kernels = |pass| {
            let l = m.0.borrow();
            let k = l
                .made
                .iter()
                .filter(|c| c.0.pass == pass && c.1 == "kernel");
            k.map(|c| c.0.block).collect::<Vec<_>>()
        };
        assert_eq!(kernels(0), [0, 1, 2, 3, 4, 5, 6], "the first pass in order");
        for pass in 1..3 {
            assert_eq!(kernels(pass), [0, 2, 1, 3, 6, 4, 5], "pass {pass}");
        }
        for pass in 0..3 {
            for b in [0, 1, 6] {
                assert!(m.find_in(b, pass, "up").is_some(), "{b} streamed in {pass}");
            }
        }
        // In place, each pass reads what the pass before wrote, whatever their orders
        // (each of these steps is still in flight, within 8 steps, when its next is made).
        for (b, pass) in [(0, 1), (6, 1), (1, 2), (6, 2)] {
            let d = m.find_in(b, pass - 1, "down").unwrap();
            assert_eq!(
                m.waits_in(b, pass, "up").contains(&d),
                in_place,
                "{b}, {pass}"
            );
        }
        let k = m.find_in(4, 1, "kernel").unwrap();
        assert!(m.waits_in(4, 2, "kernel").contains(&k));
        // A caller's pass that is a run of its own keeps the blocks' order (its staging ring
        // is filled in it), however its run is shaped.
        for passes in [1, 3] {
            let carried = Schedule {
                passes,
                carried: (1, 4),
                resident: 2..6,
                ..sched(0, 7, 2, true)
            };
            assert!(carried.later_order().is_none());
        }
    }
}

#[test]
fn a_carried_pass_uploads_resident_blocks_first_and_downloads_them_last() {
    for in_place in [true, false] {
        for (k, of) in [(0, 3), (1, 3), (2, 3)] {
            // One pass of a caller's three, blocks 2 and 3 resident (kept across runs).
            let s = Schedule {
                carried: (k, of),
                resident: 2..4,
                ..sched(0, 4, 2, in_place)
            };
            let mut m = Mock(RefCell::new(Log::default()));
            run_ring(&mut m, &s, &|_, _| {}).unwrap();
            let (up, down) = (m.find_in(3, 0, "up"), m.find_in(3, 0, "down"));
            assert_eq!(up.is_some(), k == 0, "pass {k}: uploaded in the first only");
            assert_eq!(down.is_some(), !in_place || k == 2, "pass {k}");
            assert!(m.find_in(3, 0, "kernel").is_some());
            assert!(m.find_in(1, 0, "up").is_some() && m.find_in(1, 0, "down").is_some());
        }
    }
}

#[test]
fn a_stop_counts_the_steps_of_every_pass() {
    let stop = AtomicUsize::new(2);
    let s = Schedule {
        passes: 4,
        stop: Some(&stop),
        ..sched(0, 5, 2, true)
    };
    match run_ring(&mut Mock(RefCell::new(Log::default())), &s, &|_, _| {}) {
        Err(StreamError::Stopped {
            code: 2,
            done: 0,
            blocks: 20,
        }) => {}
        other => panic!("{other:?}"),
    }
}

proptest::proptest! {
    /// Every later pass takes each block once, the streamed ones in their order on the ring's
    /// slots in turn, and in place each step waits for its block's step of the pass before
    /// while that step is still in flight.
    #[test]
    fn later_orders_take_every_block_once_and_keep_the_in_place_chain(
        blocks in 1usize..24,
        slots in 1usize..5,
        resident_share in 0usize..24,
        passes in 1usize..4,
        in_place: bool,
    ) {
        // The engine's layout: the resident blocks are the last ones.
        let resident = resident_share.min(blocks);
        let streamed = blocks - resident;
        let s = Schedule {
            passes,
            carried: (0, passes),
            resident: streamed..blocks,
            ..sched(0, blocks, slots, in_place)
        };
        let mut m = Mock(RefCell::new(Log::default()));
        run_ring(&mut m, &s, &|_, _| {}).unwrap();
        let kernels: Vec<Step> = {
            let l = m.0.borrow();
            l.made.iter().filter(|c| c.1 == "kernel").map(|c| c.0).collect()
        };
        proptest::prop_assert_eq!(kernels.len(), blocks * passes);
        for pass in 0..passes {
            let order: Vec<usize> = (kernels.iter())
                .filter(|k| k.pass == pass)
                .map(|k| k.block)
                .collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            proptest::prop_assert_eq!(sorted, (0..blocks).collect::<Vec<_>>());
            let own: Vec<usize> = order.iter().copied().filter(|&b| b < streamed).collect();
            proptest::prop_assert_eq!(own, (0..streamed).collect::<Vec<_>>());
        }
        let window = 2 * slots + resident;
        for (i, k) in kernels.iter().enumerate() {
            if k.block < streamed {
                let turn = kernels[..i].iter().filter(|p| p.block < streamed).count();
                proptest::prop_assert_eq!(k.slot, turn % slots);
            }
            if !in_place || k.pass == 0 {
                continue;
            }
            let before = (kernels.iter())
                .position(|p| p.pass == k.pass - 1 && p.block == k.block)
                .unwrap();
            let (Some(down), true) = (m.find_in(k.block, k.pass - 1, "down"), i - before < window)
            else {
                continue;
            };
            let stage = match m.find_in(k.block, k.pass, "up") {
                Some(_) => "up",
                None => "kernel",
            };
            let waits = m.waits_in(k.block, k.pass, stage);
            proptest::prop_assert!(waits.contains(&down), "{:?} waits {:?}", k, waits);
        }
    }
}
