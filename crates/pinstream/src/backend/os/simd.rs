//! Loops compiled for the widest vector unit this CPU has, chosen at run time: the
//! binary is built for baseline x86-64 (SSE2), which has no unsigned 64-bit compare,
//! minimum or maximum, so a loop of offset checks stays scalar there; with AVX-512 (F, VL,
//! BW, DQ: what Skylake-SP and later Xeons, and Zen 4, have; so did the H100's host measured
//! below) LLVM vectorises it, masks and all. For the zero-copy checks: on that host a vouched
//! 4,096-piece call's checks and rows took 8–10 µs against 17–27 before, checked 16–19
//! against 25–41 (bench/results/h100/session-2026-12-08, the second of two runs after).
//!
//! The loops use 512-bit registers. On Skylake-SP and Cascade Lake a burst of them can lower
//! the core's clock for a while after; the H100 figures above include whatever that cost.
//!
//! Written here rather than taken from a crate: `multiversion` does the same by a macro
//! that puts its `unsafe` in the caller's module; this is one function, with its `unsafe`
//! in the backend. `#[target_feature]` with AVX-512 needs Rust 1.89 (the workspace's
//! `rust-version`).

/// A loop to compile for the widest unit: its [`Loop::run`] is marked `#[inline(always)]`
/// (and what it calls too), so that it is compiled inside [`widest`]'s function for the
/// unit. A closure would not do: LLVM may leave one out of line, where it is compiled for
/// baseline x86-64 whatever its caller.
pub(crate) trait Loop {
    /// What the loop gives.
    type Out;
    /// Runs the loop.
    fn run(self) -> Self::Out;
}

/// `job.run()`, compiled for AVX-512 where this CPU has it (detected once by `std`, then a
/// few loads of a cached word), otherwise as it is; the result is the same either way.
#[inline(always)]
pub(crate) fn widest<L: Loop>(job: L) -> L::Out {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: `avx512` needs the features it enables, which `has_avx512` found on this
        // CPU.
        return unsafe { avx512(job) };
    }
    job.run()
}

/// Whether this CPU has every feature [`avx512`] enables.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
}

/// `job.run()`, compiled with AVX-512 where it is inlined here.
///
/// # Safety
/// Only on a CPU with AVX-512 F, VL, BW and DQ ([`has_avx512`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq")]
unsafe fn avx512<L: Loop>(job: L) -> L::Out {
    job.run()
}

#[cfg(test)]
mod tests {
    use super::{widest, Loop};

    /// The greatest and least of some numbers.
    struct Extremes<'a>(&'a [u64]);

    impl Loop for Extremes<'_> {
        type Out = (u64, u64);
        #[inline(always)]
        fn run(self) -> (u64, u64) {
            let fold = |(most, least): (u64, u64), &x: &u64| (most.max(x), least.min(x));
            self.0.iter().fold((0, u64::MAX), fold)
        }
    }

    /// The same result from the wide unit (where this CPU has it) as from baseline code.
    #[test]
    fn a_loop_gives_the_same_result_in_either_unit() {
        let v: Vec<u64> = (0..10_000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9))
            .collect();
        assert_eq!(widest(Extremes(&v)), Extremes(&v).run());
    }
}
