//! What a stream costs the CPU: the process's CPU time (user + system, every thread, the
//! driver's included; `getrusage`) around a run, per GiB it moved across the bus.

use pinstream::backend::os::cpu_time;
use pinstream::engine::StreamReport;

/// Runs `f`; its result and the process's CPU seconds meanwhile.
pub fn measured<R>(f: impl FnOnce() -> R) -> (R, f64) {
    let before = cpu_time();
    let r = f();
    (r, (cpu_time() - before).as_secs_f64())
}

/// Bytes a run moved across the bus: uploads and downloads together.
pub fn moved(s: &StreamReport) -> u64 {
    s.totals.upload.bytes + s.totals.download.bytes
}

/// CPU seconds per GiB of `bytes` (0 when nothing moved).
pub fn per_gib(cpu_s: f64, bytes: u64) -> f64 {
    match bytes {
        0 => 0.0,
        b => cpu_s / (b as f64 / f64::from(1u32 << 30)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_costs_cpu_time_and_per_gib_scales() {
        let (sum, s) = measured(|| {
            let t = std::time::Instant::now();
            let mut x = 0u64;
            while t.elapsed() < std::time::Duration::from_millis(50) {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            x
        });
        assert!(sum > 0);
        assert!(s > 0.02, "50 ms of spinning measured as {s} s of CPU");
        assert_eq!(per_gib(2.0, 2 << 30), 1.0);
        assert_eq!(per_gib(1.0, 0), 0.0);
    }
}
