//! After a failed pin, `doctor` looks for the largest size that pins: it halves from the size
//! that failed down to 1 MiB, then bisects between the size that pinned and the one above it
//! that failed a few times more. A pure search over a `try_pin(size)` closure, so that it is
//! tested with any limit; [`note`] says which limit stopped the pin and what to do.

use pinstream::host::PinKind;
use pinstream::units::Bytes;

/// The smallest size the search tries, and the step it rounds to.
pub const FLOOR: usize = 1 << 20;

/// Bisection steps after halving found a size that pins.
pub const REFINE_STEPS: usize = 3;

/// The largest size below `failed` for which `try_pin` succeeds, searched by halving from
/// `failed / 2` down to [`FLOOR`], then by [`REFINE_STEPS`] bisections between the size that
/// pinned and the smallest that failed (in whole multiples of [`FLOOR`]). `None` when nothing
/// of [`FLOOR`] or more pins. `try_pin` is called at most log2(failed / FLOOR) + 3 times.
pub fn largest_pinnable(failed: usize, mut try_pin: impl FnMut(usize) -> bool) -> Option<usize> {
    let mut bad = failed;
    let mut good = None;
    let mut size = failed / 2;
    while size >= FLOOR {
        if try_pin(size) {
            good = Some(size);
            break;
        }
        bad = size;
        size /= 2;
    }
    let mut good = good?;
    for _ in 0..REFINE_STEPS {
        let mid = (good + (bad - good) / 2) / FLOOR * FLOOR;
        if mid <= good {
            break;
        }
        if try_pin(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

/// What a failed pin of `size` adds to its error: the largest size that pinned (`found`),
/// which limit stops memory pinned as `kind` on this platform (`windows`) and what to do.
pub fn note(kind: PinKind, size: usize, found: Option<usize>, windows: bool) -> String {
    let found = match found {
        Some(n) => format!(
            "the largest size that pinned, searching down from {}: {}",
            Bytes(size as u64),
            Bytes(n as u64)
        ),
        None => format!("nothing of {} or more pinned either", Bytes(FLOOR as u64)),
    };
    let limit = match (kind, windows) {
        (PinKind::Resident, true) => "VirtualLock is bounded by the process's minimum working set (see the error above for its size and the fix)",
        (PinKind::Resident, false) => "`mlock` is bounded by RLIMIT_MEMLOCK (see the error above for its value and the fix)",
        (PinKind::Driver, true) => "WDDM's budget on the memory drivers lock stops it (see the error above): pin at most that, or stream through a ring of smaller buffers (`pinstream run` does)",
        (PinKind::Driver, false) => "the driver's own limit or the memory available stops it: pin at most that, or stream through a ring of smaller buffers (`pinstream run` does)",
        (PinKind::Pageable, _) => "the memory available stops it: ask for less",
    };
    let mut limit = limit.chars();
    let first = limit.next().map(|c| c.to_ascii_uppercase());
    format!("; {found}. {}{}", first.unwrap_or(' '), limit.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// The search against a pin that succeeds up to `limit`, with the sizes it tried.
    fn search(failed: usize, limit: usize) -> (Option<usize>, Vec<usize>) {
        let mut tried = Vec::new();
        let found = largest_pinnable(failed, |s| {
            tried.push(s);
            s <= limit
        });
        (found, tried)
    }

    #[test]
    fn halves_then_bisects_to_a_limit_between_powers_of_two() {
        let (found, tried) = search(64 * MIB, 20 * MIB);
        assert_eq!(found, Some(20 * MIB));
        assert_eq!(tried, [32, 16, 24, 20, 22].map(|m| m * MIB));
    }

    #[test]
    fn a_limit_at_a_halving_step_is_found_exactly() {
        assert_eq!(search(64 * MIB, 8 * MIB).0, Some(8 * MIB));
        assert_eq!(search(64 * MIB, 8 * MIB + 100).0, Some(8 * MIB));
    }

    #[test]
    fn the_first_halving_may_pin_and_is_then_refined_upward() {
        let (found, tried) = search(64 * MIB, 60 * MIB);
        assert_eq!(found, Some(60 * MIB));
        assert_eq!(tried, [32, 48, 56, 60].map(|m| m * MIB));
    }

    #[test]
    fn nothing_pins_at_all() {
        let (found, tried) = search(64 * MIB, 0);
        assert_eq!(found, None);
        assert_eq!(tried, [32, 16, 8, 4, 2, 1].map(|m| m * MIB));
        assert_eq!(search(64 * MIB, MIB - 1).0, None);
    }

    #[test]
    fn sizes_below_two_floors_try_nothing() {
        assert_eq!(search(MIB + 1, usize::MAX), (None, vec![]));
        assert_eq!(search(2 * MIB, usize::MAX).0, Some(MIB));
    }

    #[test]
    fn notes_name_the_platforms_limit() {
        let n = note(PinKind::Driver, 64 * MIB, Some(20 * MIB), true);
        assert!(
            n.starts_with(
                "; the largest size that pinned, searching down from 64 MiB: 20 MiB. WDDM's budget"
            ),
            "{n}"
        );
        assert!(n.contains("stream through a ring"), "{n}");
        let n = note(PinKind::Driver, 64 * MIB, None, false);
        assert!(
            n.contains("nothing of 1 MiB or more") && n.contains("driver's own limit"),
            "{n}"
        );
        assert!(note(PinKind::Resident, MIB, None, false).contains("RLIMIT_MEMLOCK"));
        assert!(note(PinKind::Resident, MIB, None, true).contains("minimum working set"));
        assert!(note(PinKind::Pageable, MIB, None, true).contains("memory available"));
    }
}
