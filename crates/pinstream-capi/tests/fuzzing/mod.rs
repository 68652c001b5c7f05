//! What the fuzz tests share: the seed of a run (printed, and replayed from
//! `PINSTREAM_FUZZ_SEED`), and their threads, each run to its end or its panic within a time
//! limit (a thread still running then is a call that hangs).
#![allow(dead_code)]

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `PINSTREAM_FUZZ_SEED`, else one from the clock; printed, so that a failed run is replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("PINSTREAM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("PINSTREAM_FUZZ_SEED={seed}");
    seed
}

/// A thread's work: given its seed, what it returns.
pub type Work<T> = Box<dyn FnOnce(u64) -> T + Send>;

/// Runs each of `runs` on a thread of its own, with seed `seed + its index`; their results,
/// in the order they ended. Panics (naming the seed) where a thread panicked, or did not end
/// within `limit`.
pub fn threads<T: Send + 'static>(seed: u64, limit: Duration, runs: Vec<Work<T>>) -> Vec<T> {
    let (tx, rx) = mpsc::channel();
    let count = runs.len();
    for (t, run) in runs.into_iter().enumerate() {
        let tx = tx.clone();
        let own = seed.wrapping_add(t as u64);
        std::thread::spawn(move || {
            let done = std::panic::catch_unwind(AssertUnwindSafe(|| run(own)));
            let _ = tx.send(done.map_err(|p| panic_text(&*p)));
        });
    }
    let deadline = Instant::now() + limit;
    (0..count)
        .map(|_| {
            let left = deadline.saturating_duration_since(Instant::now());
            let done = rx.recv_timeout(left).unwrap_or_else(|_| {
                panic!("a thread did not end in {limit:?}: a call hangs (seed {seed})")
            });
            done.unwrap_or_else(|m| panic!("seed {seed}: {m}"))
        })
        .collect()
}

/// A panic's message.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// This thread's detail of its last failed call.
pub fn detail() -> String {
    // SAFETY: this thread's NUL-terminated detail, read before another call.
    unsafe { std::ffi::CStr::from_ptr(pinstream_capi::psGetLastErrorDetail()) }
        .to_string_lossy()
        .into_owned()
}

/// `code`, checked to be known (`PS_SUCCESS` to `last`, never `PS_ERROR_INTERNAL`) and, when
/// it is not success, to come with a detail that names `call` and says something.
pub fn known(call: &str, code: i32, last: i32) -> i32 {
    use pinstream_capi::{PS_ERROR_INTERNAL, PS_SUCCESS};
    assert!(
        (PS_SUCCESS..=last).contains(&code) && code != PS_ERROR_INTERNAL,
        "{call} returned {code}: {}",
        detail()
    );
    if code != PS_SUCCESS {
        let d = detail();
        assert!(
            d.starts_with(call) && d.len() > call.len() + 10,
            "{call}: `{d}`"
        );
    }
    code
}
