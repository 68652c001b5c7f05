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

/// The program's call as an entry point passes it on: made at most once. The hook makes it
/// through [`Forward::call`] (or records the result of the call it made instead, the
/// rewrite, with [`Forward::made`]), so that after a panic [`guarded`] returns that result
/// instead of making the call a second time (a second buffer, a second transfer).
pub(crate) struct Forward<'a, R> {
    name: &'static str,
    call: &'a dyn Fn() -> R,
    made: Cell<Option<R>>,
}

impl<R: Copy> Forward<'_, R> {
    /// Makes the program's call, once: again, it returns the first call's result.
    pub(crate) fn call(&self) -> R {
        if let Some(r) = self.made.get() {
            return r;
        }
        let r = (self.call)();
        self.made(r);
        r
    }

    /// Records `r` as the call's result, made by the layer in the call's place.
    pub(crate) fn made(&self, r: R) {
        self.made.set(Some(r));
        test_panic(self.name, Point::Forwarded);
    }
}

/// Runs `work` for the entry point `name`; `work` passes the call on through the
/// [`Forward`] it is given. If it panics, the call's result is the one already made, else
/// the call is passed on with `pass`; if that panics too, the answer is `missing()` (the
/// call's "no next function" answer).
pub(crate) fn guarded<R: Copy>(
    name: &'static str,
    work: impl FnOnce(&Forward<'_, R>) -> R,
    pass: &dyn Fn() -> R,
    missing: impl FnOnce() -> R,
) -> R {
    let _depth = Depth::enter();
    let forward = Forward {
        name,
        call: pass,
        made: Cell::new(None),
    };
    let done = panic::catch_unwind(AssertUnwindSafe(|| {
        // Inside the boundary: a panic while installing the hook passes the call on too.
        HOOK.call_once(install_hook);
        test_panic(name, Point::Entry);
        work(&forward)
    }));
    done.unwrap_or_else(|_| {
        let _ = panic::catch_unwind(|| note(name));
        // Made directly: no TEST HOOK fires on the way out.
        let again = || panic::catch_unwind(AssertUnwindSafe(forward.call));
        forward
            .made
            .get()
            .unwrap_or_else(|| again().unwrap_or_else(|_| missing()))
    })
}

/// Where [`test_panic`] fires in an entry point.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Point {
    /// On entry (`NAME`).
    Entry,
    /// Once the call was made (`NAME@forwarded`).
    Forwarded,
}

/// TEST HOOK `PINSTREAM_LAYER_TEST_PANIC`: panics in the entry points it names, on entry
/// (`clCreateBuffer`, `all`) or once the call was made (`clCreateBuffer@forwarded`).
fn test_panic(name: &str, point: Point) {
    if let Some(which) = Settings::current().test_panic.as_deref() {
        let named = |w: &str| w == name || w == "all";
        let hit = which
            .split(',')
            .map(str::trim)
            .any(|w| match w.split_once('@') {
                Some((w, "forwarded")) => point == Point::Forwarded && named(w),
                Some(_) => false,
                None => point == Point::Entry && named(w),
            });
        if hit {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The program's call, counted: returns how many times it was made.
    fn counting(calls: &Cell<u32>) -> impl Fn() -> u32 + '_ {
        move || {
            calls.set(calls.get() + 1);
            calls.get() * 10
        }
    }

    /// A panic after the hook passed the call on returns that call's result: the call is not
    /// made a second time (it was, creating a second buffer).
    #[test]
    fn a_panic_after_the_call_was_made_returns_its_result() {
        let calls = Cell::new(0);
        let pass = counting(&calls);
        let work = |fwd: &Forward<'_, u32>| {
            let made = fwd.call();
            if made > 0 {
                panic!("after the call");
            }
            made
        };
        assert_eq!(guarded("test after", work, &pass, || 99), 10);
        assert_eq!(calls.get(), 1, "the call was made once");
    }

    /// A panic before the call was made passes it on, once.
    #[test]
    fn a_panic_before_the_call_passes_it_on() {
        let calls = Cell::new(0);
        let pass = counting(&calls);
        let work = |_: &Forward<'_, u32>| -> u32 { panic!("before the call") };
        assert_eq!(guarded("test before", work, &pass, || 99), 10);
        assert_eq!(calls.get(), 1);
    }

    /// A call the layer made in the program's call's place (the rewrite) counts as made.
    #[test]
    fn a_panic_after_the_layer_made_the_call_returns_that() {
        let calls = Cell::new(0);
        let pass = counting(&calls);
        let work = |fwd: &Forward<'_, u32>| -> u32 {
            fwd.made(7);
            panic!("after the rewrite")
        };
        assert_eq!(guarded("test rewrite", work, &pass, || 99), 7);
        assert_eq!(
            calls.get(),
            0,
            "the program's own call was not made as well"
        );
    }

    /// Without a panic, `work`'s answer stands and the call is made only by it.
    #[test]
    fn without_a_panic_the_work_answers() {
        let calls = Cell::new(0);
        let pass = counting(&calls);
        let work = |fwd: &Forward<'_, u32>| fwd.call() + fwd.call();
        assert_eq!(guarded("test plain", work, &pass, || 99), 20);
        assert_eq!(calls.get(), 1, "a second call returns the first result");
    }
}
