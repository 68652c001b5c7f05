//! The streaming workloads: each API's run of a workload paired with the other's, back to
//! back, the order alternating, every run checked against the CPU.

use super::half::Half;
use super::runs::{RunFigures, Runs};
use super::{CompareConfig, CompareError, StopCheck};
use crate::tools::demo::{DemoError, Gemv, InPlace};
use pinstream::backend::api::Api;
use pinstream::engine::{HostMemory, StreamReport};

/// One API's streaming runs, per repeat.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamRuns {
    /// The in-place stream.
    pub in_place: Vec<RunFigures>,
    /// y = W·x.
    pub gemv: Vec<RunFigures>,
}

/// `Ok` when nothing differed, else the mismatch.
pub(super) fn verdict(
    api: &'static str,
    workload: &'static str,
    bad: u64,
) -> Result<(), CompareError> {
    match bad {
        0 => Ok(()),
        bad => Err(CompareError::Mismatch {
            api,
            workload,
            bad,
            unit: if workload == "gemv" {
                "rows"
            } else {
                "elements"
            },
        }),
    }
}

impl<A: Api, M: HostMemory> Runs for InPlace<'_, A, M> {
    fn reset(&mut self) -> Result<(), CompareError> {
        Ok(self.fill().map_err(DemoError::from)?)
    }
    fn run(&mut self) -> Result<RunFigures, CompareError> {
        let (s, cpu) = crate::tools::cpu::measured(|| self.stream(false, &|_, _| {}));
        let s = s.map_err(stream_failed::<A>)?;
        Ok(RunFigures {
            gbps: processed_gbps(&s, 2 * self.data_bytes(), s.totals.combined_gbps),
            overlap: s.totals.overlap,
            cpu_s_per_gib: crate::tools::cpu::per_gib(cpu, crate::tools::cpu::moved(&s)),
            per_device_gbps: s.devices.iter().map(|d| d.totals.combined_gbps).collect(),
        })
    }
    fn check(&self) -> Result<(), CompareError> {
        let bad = self.mismatches().map_err(DemoError::from)?;
        verdict(A::NAME, "in-place", bad)
    }
}

impl<A: Api, M: HostMemory + Sync> Runs for Gemv<'_, A, M> {
    fn reset(&mut self) -> Result<(), CompareError> {
        Ok(Gemv::reset(self).map_err(DemoError::from)?)
    }
    fn run(&mut self) -> Result<RunFigures, CompareError> {
        let (s, cpu) = crate::tools::cpu::measured(|| self.stream(false, &|_, _| {}));
        let s = s.map_err(stream_failed::<A>)?;
        Ok(RunFigures {
            gbps: processed_gbps(&s, self.weight_bytes(), s.totals.upload.gbps),
            overlap: s.totals.overlap,
            cpu_s_per_gib: crate::tools::cpu::per_gib(cpu, crate::tools::cpu::moved(&s)),
            per_device_gbps: s.devices.iter().map(|d| d.totals.upload.gbps).collect(),
        })
    }
    fn check(&self) -> Result<(), CompareError> {
        let bad = self.mismatches().map_err(DemoError::from)?;
        verdict(A::NAME, "gemv", bad)
    }
}

/// With one pass, `moved` (the GB/s of the bytes the run moved). With several, residency
/// moves fewer bytes than the passes process, so the figure is the data processed,
/// `per_pass` bytes each pass, over the run's device time: its ratio between two APIs is that
/// of their passes per second.
fn processed_gbps(s: &StreamReport, per_pass: u64, moved: f64) -> f64 {
    let wall = s.totals.device_wall_s;
    match s.passes > 1 && wall > 0.0 {
        true => per_pass as f64 * s.passes as f64 / wall / 1e9,
        false => moved,
    }
}

fn stream_failed<A: Api>(source: pinstream::engine::StreamError) -> CompareError {
    CompareError::Stream {
        api: A::NAME,
        source: Box::new(source),
    }
}

/// The streaming workloads, one at a time, every half's runs paired; per half, its runs.
pub(super) fn stream_workloads(
    halves: &[&dyn Half],
    cfg: &CompareConfig,
    stop: &StopCheck,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<StreamRuns>, CompareError> {
    let repeats = cfg.repeats.max(1);
    let stop_here = || stop.here();
    let mut out = vec![StreamRuns::default(); halves.len()];
    stop.here()?;
    let in_place = {
        let mut made = made(halves, stop, |h| h.in_place(&cfg.demo))?;
        let mut sides: Vec<&mut dyn Runs> = made.iter_mut().map(|b| &mut **b as _).collect();
        paired_runs("in-place stream", &mut sides, repeats, &stop_here, progress)
            .map_err(|e| stop.or_stopped(e))?
    };
    stop.here()?;
    let gemv = {
        let mut made = made(halves, stop, |h| h.gemv(&cfg.demo))?;
        let mut sides: Vec<&mut dyn Runs> = made.iter_mut().map(|b| &mut **b as _).collect();
        paired_runs("y = W·x stream", &mut sides, repeats, &stop_here, progress)
            .map_err(|e| stop.or_stopped(e))?
    };
    for ((o, a), b) in out.iter_mut().zip(in_place).zip(gemv) {
        (o.in_place, o.gemv) = (a, b);
    }
    Ok(out)
}

/// Each half's workload, made by `make`; the first failure as that half's.
fn made<'a>(
    halves: &[&'a dyn Half],
    stop: &StopCheck,
    make: impl Fn(&'a dyn Half) -> Result<Box<dyn Runs + 'a>, String>,
) -> Result<Vec<Box<dyn Runs + 'a>>, CompareError> {
    halves
        .iter()
        .map(|&h| make(h).map_err(|why| stop.or_stopped(CompareError::half(h, why))))
        .collect()
}

/// Runs each half's workload `repeats` times after a throw-away round; the runs of a repeat
/// go back to back, the order alternating (reversed every other repeat), and every run's
/// results are checked; `stop_here` fails once a stop is asked for. Each half's figures per
/// repeat.
pub(super) fn paired_runs(
    what: &str,
    sides: &mut [&mut dyn Runs],
    repeats: usize,
    stop_here: &dyn Fn() -> Result<(), CompareError>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Vec<RunFigures>>, CompareError> {
    let mut out = vec![Vec::new(); sides.len()];
    for r in 0..=repeats {
        progress(&match r {
            0 => format!("{what}: warm-up pair"),
            r => format!("{what}, repeat {r}/{repeats}"),
        });
        let order = alternating(sides.len(), r);
        stop_here()?;
        for &i in &order {
            sides[i].reset()?;
        }
        for &i in &order {
            stop_here()?;
            let got = sides[i].run()?;
            if r > 0 {
                out[i].push(got);
            }
        }
        for s in sides.iter() {
            s.check()?;
        }
    }
    Ok(out)
}

/// `0..n` in round `r`'s order: as listed in even rounds, reversed in odd ones.
pub(super) fn alternating(n: usize, r: usize) -> Vec<usize> {
    match r % 2 {
        0 => (0..n).collect(),
        _ => (0..n).rev().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A workload that logs what it is asked to do; its n-th run (from 1) reads `bad_run`; a
    /// run that no reset came before panics.
    struct Mock<'a> {
        api: usize,
        log: &'a RefCell<Vec<String>>,
        runs: usize,
        bad_run: Option<usize>,
        fresh: bool,
    }

    impl Runs for Mock<'_> {
        fn reset(&mut self) -> Result<(), CompareError> {
            self.log.borrow_mut().push(format!("reset{}", self.api));
            self.fresh = true;
            Ok(())
        }
        fn run(&mut self) -> Result<RunFigures, CompareError> {
            assert!(self.fresh, "run {} without a reset", self.runs + 1);
            self.fresh = false;
            self.runs += 1;
            self.log.borrow_mut().push(format!("run{}", self.api));
            Ok(figures(self.runs as f64))
        }
        fn check(&self) -> Result<(), CompareError> {
            self.log.borrow_mut().push(format!("check{}", self.api));
            verdict(
                "Mock",
                "gemv",
                u64::from(self.bad_run == Some(self.runs)) * 3,
            )
        }
    }

    fn figures(gbps: f64) -> RunFigures {
        RunFigures {
            gbps,
            overlap: 0.5,
            cpu_s_per_gib: 0.25,
            per_device_gbps: Vec::new(),
        }
    }

    fn mock(api: usize, log: &RefCell<Vec<String>>) -> Mock<'_> {
        Mock {
            api,
            log,
            runs: 0,
            bad_run: None,
            fresh: false,
        }
    }

    fn run_all(
        sides: &mut [&mut dyn Runs],
        repeats: usize,
    ) -> Result<Vec<Vec<RunFigures>>, CompareError> {
        paired_runs("w", sides, repeats, &|| Ok(()), &|_| {})
    }

    #[test]
    fn paired_runs_go_back_to_back_alternating_after_a_warm_up_pair() {
        let log = RefCell::new(Vec::new());
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        let out = run_all(&mut [&mut a, &mut b], 2).unwrap();
        // The warm-up pair (run 1 of each) is not reported.
        assert_eq!(out[0], vec![figures(2.0), figures(3.0)]);
        assert_eq!(out[1], vec![figures(2.0), figures(3.0)]);
        let runs: Vec<String> = log
            .borrow()
            .iter()
            .filter(|s| s.starts_with("run"))
            .cloned()
            .collect();
        assert_eq!(runs, ["run0", "run1", "run1", "run0", "run0", "run1"]);
        // Every repeat resets both (in run order) before either runs, and checks both after.
        let want = [
            ["reset0", "reset1", "run0", "run1", "check0", "check1"],
            ["reset1", "reset0", "run1", "run0", "check0", "check1"],
            ["reset0", "reset1", "run0", "run1", "check0", "check1"],
        ]
        .concat();
        assert_eq!(*log.borrow(), want);
    }

    #[test]
    fn paired_runs_of_one_half_run_it_alone() {
        let log = RefCell::new(Vec::new());
        let mut a = mock(0, &log);
        let out = run_all(&mut [&mut a], 3).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), 3);
    }

    #[test]
    fn a_wrong_result_or_a_stop_ends_the_runs() {
        let log = RefCell::new(Vec::new());
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        b.bad_run = Some(2);
        match run_all(&mut [&mut a, &mut b], 5) {
            Err(e @ CompareError::Mismatch { bad: 3, .. }) => {
                assert!(e.to_string().contains("in 3 rows"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.runs, 2, "no run after the wrong one");
        // The throw-away pair is checked too.
        let (mut a, mut b) = (mock(0, &log), mock(1, &log));
        a.bad_run = Some(1);
        assert!(matches!(
            run_all(&mut [&mut a, &mut b], 5),
            Err(CompareError::Mismatch { .. })
        ));
        assert_eq!((a.runs, b.runs), (1, 1));
        let mut a = mock(0, &log);
        let stopped = paired_runs(
            "w",
            &mut [&mut a],
            5,
            &|| Err(CompareError::Stopped(15)),
            &|_| {},
        );
        match stopped {
            Err(CompareError::Stopped(15)) => assert_eq!(a.runs, 0),
            other => panic!("{other:?}"),
        }
    }
}
