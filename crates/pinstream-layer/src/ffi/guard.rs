//! The panic boundary around every way into the layer (its exported functions, the destructor
//! callbacks it hands the driver, the summary at exit). The layer lives in other people's
//! programs: a panic must never unwind into C (it would abort the program) and never change
//! what the call does. A panic in the layer's own work is caught, logged once per entry point,
//! and the call is passed straight on to the next layer or driver, as if the layer were not
//! there. The default panic message (which writes to stderr, and so could raise SIGPIPE) is
//! replaced, inside the layer only, by a line through the layer's own log.

use super::sink;
use crate::settings::{LogLevel, Settings};
use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Mutex, Once};

thread_local! {
    /// Guarded calls this thread is inside.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// The message of the last panic inside a guarded call on this thread.
    static MESSAGE: RefCell<String> = const { RefCell::new(String::new()) };
}

static HOOK: Once = Once::new();
/// Entry points whose panic was logged: one line each.
static NOTED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// Runs `work` for the entry point `name`. If it panics, the call is passed on with `pass`;
/// if that panics too, the answer is `missing()` (the call's "no next function" answer).
pub(crate) fn guarded<R>(
    name: &'static str,
    work: impl FnOnce() -> R,
    pass: impl FnOnce() -> R,
    missing: impl FnOnce() -> R,
) -> R {
    HOOK.call_once(install_hook);
    let _depth = Depth::enter();
    let done = panic::catch_unwind(AssertUnwindSafe(|| {
        test_panic(name);
        work()
    }));
    done.unwrap_or_else(|_| {
        let _ = panic::catch_unwind(|| note(name));
        panic::catch_unwind(AssertUnwindSafe(pass)).unwrap_or_else(|_| missing())
    })
}

/// TEST HOOK `PINSTREAM_LAYER_TEST_PANIC`: panics in the entry points it names.
fn test_panic(name: &str) {
    if let Some(which) = Settings::current().test_panic.as_deref() {
        if which
            .split(',')
            .any(|w| w.trim() == name || w.trim() == "all")
        {
            panic!("TEST HOOK PINSTREAM_LAYER_TEST_PANIC={which} in {name}");
        }
    }
}

fn note(name: &'static str) {
    let mut noted = NOTED.lock().unwrap_or_else(|e| e.into_inner());
    if noted.contains(&name) {
        return;
    }
    noted.push(name);
    drop(noted);
    let msg = MESSAGE
        .try_with(|m| std::mem::take(&mut *m.borrow_mut()))
        .unwrap_or_default();
    sink::log(
        LogLevel::Warnings,
        &format!("internal error in {name} ({msg}): the call was passed straight on to the driver, as without the layer; please report it"),
    );
}

/// Inside guarded calls, a panic's message is kept for [`note`] instead of printed; elsewhere
/// (the rlib linked into a program, the tests) the previous hook runs.
fn install_hook() {
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let inside = DEPTH.try_with(Cell::get).unwrap_or(0) > 0;
        if !inside {
            return previous(info);
        }
        let text = match info.location() {
            Some(at) => format!("{} at {at}", payload_text(info.payload())),
            None => payload_text(info.payload()),
        };
        let _ = MESSAGE.try_with(|m| *m.borrow_mut() = text);
    }));
}

fn payload_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// This thread's nesting of guarded calls, restored however the call ends.
struct Depth;

impl Depth {
    fn enter() -> Depth {
        let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}
