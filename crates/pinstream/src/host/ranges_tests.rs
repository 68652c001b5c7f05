use super::*;
use std::sync::{Arc, Barrier};
use std::thread;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    A,
    B,
}

impl Pinning for Kind {
    type Api = ();
    fn api(self) {}
}

fn set() -> Registry<Kind, &'static str> {
    let r = Registry::new();
    r.insert(100..200, Kind::A, "a").unwrap();
    r.insert(300..400, Kind::B, "b").unwrap();
    r
}

fn seen(
    r: &Registry<Kind, &'static str>,
    range: Range<usize>,
) -> Option<(Range<usize>, &'static str)> {
    r.find((), range, |f| (f.range, *f.value)).ok()
}

fn overlap(range: Range<usize>, kind: Kind) -> Refusal<Kind> {
    Refusal::Overlaps(Occupant {
        range,
        kind,
        pending: false,
    })
}

#[test]
fn overlaps_are_refused_naming_the_entry_they_hit() {
    let r = set();
    assert_eq!(
        r.insert(150..160, Kind::A, "x"),
        Err(overlap(100..200, Kind::A))
    );
    assert_eq!(
        r.insert(50..101, Kind::A, "x"),
        Err(overlap(100..200, Kind::A))
    );
    // Overlapping both: the later one is named.
    assert_eq!(
        r.insert(199..301, Kind::A, "x"),
        Err(overlap(300..400, Kind::B))
    );
    assert_eq!(
        r.insert(0..1000, Kind::A, "x"),
        Err(overlap(300..400, Kind::B))
    );
    assert_eq!(
        r.insert(100..200, Kind::B, "x"),
        Err(overlap(100..200, Kind::A))
    );
    assert_eq!(
        r.reserve(399..500, Kind::A).err(),
        Some(overlap(300..400, Kind::B))
    );
    assert_eq!(r.fold(0, |n, _| n + 1), 2, "refusals added nothing");
}

#[test]
fn touching_ranges_do_not_overlap() {
    let r = set();
    r.insert(200..300, Kind::A, "c").unwrap();
    r.insert(0..100, Kind::A, "d").unwrap();
    r.insert(400..401, Kind::A, "e").unwrap();
    let order = r.fold(String::new(), |s, f| s + f.value);
    assert_eq!(order, "dacbe", "fold runs in address order");
}

#[test]
fn empty_ranges_are_refused_and_change_nothing() {
    let r = set();
    // An empty range at an entry's start must not replace the entry.
    assert_eq!(r.insert(100..100, Kind::A, "x"), Err(Refusal::Empty));
    assert_eq!(r.reserve(250..250, Kind::A).err(), Some(Refusal::Empty));
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 260..250;
    assert_eq!(r.insert(backwards, Kind::A, "x"), Err(Refusal::Empty));
    assert_eq!(seen(&r, 100..101), Some((100..200, "a")));
    assert!(
        seen(&r, 150..150).is_none(),
        "an empty range is found nowhere"
    );
}

#[test]
fn find_takes_interior_addresses_and_needs_every_byte_inside() {
    let r = set();
    assert_eq!(seen(&r, 100..200), Some((100..200, "a")));
    assert_eq!(seen(&r, 150..151), Some((100..200, "a")));
    assert_eq!(seen(&r, 199..200), Some((100..200, "a")), "the last byte");
    assert!(seen(&r, 200..201).is_none(), "the end is outside");
    assert!(seen(&r, 99..100).is_none());
    assert!(seen(&r, 250..251).is_none());
    let past_end = r.find((), 150..201, |_| ()).unwrap_err();
    assert_eq!(
        past_end.map(|o| o.range),
        Some(100..200),
        "the entry around the start"
    );
    assert_eq!(r.find((), 99..150, |_| ()).unwrap_err(), None);
    assert_eq!(
        r.find((), 150..150, |_| ()).unwrap_err().map(|o| o.kind),
        Some(Kind::A)
    );
}

#[test]
fn the_top_of_the_address_space_is_usable() {
    let r = Registry::<Kind, u8>::new();
    let top = usize::MAX - 16..usize::MAX;
    r.insert(top.clone(), Kind::A, 7).unwrap();
    assert_eq!(r.find((), usize::MAX - 1..usize::MAX, |f| *f.value), Ok(7));
    assert!(r.insert(usize::MAX - 1..usize::MAX, Kind::A, 8).is_err());
    // No entry can hold the last address (an end past it would wrap).
    assert_eq!(
        r.find((), usize::MAX..usize::MAX, |_| ()).unwrap_err(),
        None
    );
    r.insert(0..1, Kind::B, 9).unwrap();
    assert_eq!(r.take(usize::MAX - 16, Kind::A), Ok(7));
    assert_eq!(r.take(0, Kind::B), Ok(9));
}

#[test]
fn take_needs_the_start_and_the_kind() {
    let r = set();
    let inside = r.take(150, Kind::A).unwrap_err().unwrap();
    assert_eq!((inside.range, inside.pending), (100..200, false));
    assert_eq!(
        r.take(100, Kind::B).unwrap_err().map(|o| o.kind),
        Some(Kind::A)
    );
    assert_eq!(r.take(250, Kind::A), Err(None));
    assert_eq!(r.take(100, Kind::A), Ok("a"));
    assert_eq!(r.take(100, Kind::A), Err(None), "taken once only");
    r.insert(120..130, Kind::B, "c").unwrap();
    assert_eq!(
        seen(&r, 125..126),
        Some((120..130, "c")),
        "the range is free again"
    );
}

#[test]
fn a_claim_is_pending_until_completed() {
    let r = Registry::<Kind, &str>::new();
    let claim = r.reserve(100..200, Kind::B).unwrap();
    let pending = Occupant {
        range: 100..200,
        kind: Kind::B,
        pending: true,
    };
    assert_eq!(r.find((), 150..151, |_| ()), Err(Some(pending.clone())));
    assert_eq!(
        r.take(100, Kind::B),
        Err(Some(pending.clone())),
        "not taken while pending"
    );
    assert_eq!(
        r.insert(150..250, Kind::A, "x"),
        Err(Refusal::Overlaps(pending))
    );
    assert_eq!(r.fold(0, |n, _| n + 1), 0, "fold sees ready entries only");
    claim.complete("done");
    assert_eq!(seen(&r, 100..101), Some((100..200, "done")));
    assert_eq!(r.take(100, Kind::B), Ok("done"));
}

#[test]
fn an_abandoned_claim_gives_its_range_back() {
    let r = Registry::<Kind, &str>::new();
    drop(r.reserve(100..200, Kind::A).unwrap());
    assert_eq!(r.find((), 150..151, |_| ()), Err(None));
    // Abandoned by a panic on the way.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _claim = r.reserve(100..200, Kind::A).unwrap();
        panic!("pinning failed");
    }));
    assert!(unwound.is_err());
    r.reserve(100..200, Kind::A).unwrap().complete("again");
    assert_eq!(seen(&r, 100..200), Some((100..200, "again")));
}

#[test]
fn a_panic_under_the_lock_leaves_the_registry_usable() {
    let r = set();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        r.find((), 100..101, |_| panic!("a reader panics"))
    }));
    assert!(unwound.is_err());
    assert_eq!(r.take(100, Kind::A), Ok("a"));
}

#[test]
fn concurrent_overlapping_reserves_have_one_winner() {
    const THREADS: usize = 8;
    let r = Arc::new(Registry::<Kind, usize>::new());
    let gate = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (r, gate) = (Arc::clone(&r), Arc::clone(&gate));
            thread::spawn(move || {
                // Every range overlaps every other: all contain 1000.
                let range = 1000 - i..1001 + i;
                gate.wait();
                let claim = r.reserve(range, Kind::A);
                let won = claim.is_ok();
                // Hold the claim until every thread has tried.
                gate.wait();
                if let Ok(claim) = claim {
                    claim.complete(i);
                }
                won
            })
        })
        .collect();
    let winners = handles.into_iter().map(|h| h.join().unwrap());
    assert_eq!(winners.filter(|&won| won).count(), 1);
    assert_eq!(r.fold(0, |n, _| n + 1), 1);
}

#[test]
fn concurrent_disjoint_reserves_all_win() {
    let r = Arc::new(Registry::<Kind, usize>::new());
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let r = Arc::clone(&r);
            thread::spawn(move || {
                for j in 0..100 {
                    let start = (i * 100 + j) * 10;
                    r.reserve(start..start + 10, Kind::A)
                        .unwrap()
                        .complete(start);
                    assert_eq!(r.find((), start + 9..start + 10, |f| *f.value), Ok(start));
                }
            })
        })
        .collect();
    handles.into_iter().for_each(|h| h.join().unwrap());
    assert_eq!(r.fold(0, |n, _| n + 1), 800);
}

#[test]
fn ranges_that_leave_or_enter_an_entry_of_the_kind_asked_are_found() {
    let r = set();
    let one = |range: Range<usize>| std::iter::once(range).collect::<Vec<_>>();
    let a = |k: Kind| k == Kind::A;
    let hit =
        |ranges: Vec<Range<usize>>| r.first_straddling((), ranges, a).map(|(i, o)| (i, o.range));
    // Inside, around nothing, empty, or straddling only a B: not found.
    assert_eq!(
        hit(vec![100..200, 150..151, 0..50, 150..150, 250..350]),
        None
    );
    assert_eq!(
        hit(one(100..201)),
        Some((0, 100..200)),
        "one byte past the end"
    );
    assert_eq!(hit(vec![120..130, 199..usize::MAX]), Some((1, 100..200)));
    assert_eq!(
        hit(vec![99..100, 99..101]),
        Some((1, 100..200)),
        "into it from before"
    );
    // Over an A whole, and past a B after it: the A is found.
    assert_eq!(hit(one(50..350)), Some((0, 100..200)));
    assert_eq!(hit(one(0..usize::MAX)), Some((0, 100..200)));
    // A registry with no entry of the kind answers at once.
    let only_b = |k: Kind| k == Kind::B;
    assert!(r.first_straddling((), one(150..250), only_b).is_none());
    assert_eq!(
        r.first_straddling((), one(350..450), only_b)
            .map(|(i, o)| (i, o.range)),
        Some((0, 300..400))
    );
}

/// Ranges of two APIs: `Cl(how)` and `Vk(how)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Two {
    Cl(u8),
    Vk(u8),
}

impl Pinning for Two {
    type Api = u8;
    fn api(self) -> u8 {
        match self {
            Two::Cl(_) => 0,
            Two::Vk(_) => 1,
        }
    }
}

#[test]
fn one_apis_ranges_never_overlap_and_two_apis_may_share_memory() {
    let r = Registry::<Two, &str>::new();
    r.insert(100..200, Two::Cl(0), "cl").unwrap();
    // The same memory pinned for the other API: kept apart.
    r.insert(150..250, Two::Vk(0), "vk").unwrap();
    let refused = r.insert(199..300, Two::Vk(1), "vk2").unwrap_err();
    assert!(matches!(refused, Refusal::Overlaps(o) if o.range == (150..250)));
    assert!(matches!(
        r.reserve(120..130, Two::Cl(1)),
        Err(Refusal::Overlaps(_))
    ));
    // Each API finds its own range at an address both hold.
    assert_eq!(r.find(0, 160..161, |f| *f.value), Ok("cl"));
    assert_eq!(r.find(1, 160..161, |f| *f.value), Ok("vk"));
    assert_eq!(
        r.find(1, 120..121, |_| ()),
        Err(None),
        "only the OpenCL range holds 120"
    );
    // A piece straddling the end of the OpenCL range lies inside the Vulkan one.
    let piece = std::iter::once(190..210);
    assert_eq!(
        r.first_straddling(0, piece.clone(), |_| true)
            .map(|(i, _)| i),
        Some(0)
    );
    assert_eq!(r.first_straddling(1, piece, |_| true), None);
    // Taking one API's range leaves the other's.
    assert_eq!(
        r.take(150, Two::Cl(0)).unwrap_err(),
        Some(Occupant {
            range: 100..200,
            kind: Two::Cl(0),
            pending: false
        })
    );
    assert_eq!(r.take(150, Two::Vk(0)), Ok("vk"));
    assert_eq!(r.find(0, 150..151, |f| *f.value), Ok("cl"));
    assert_eq!(r.fold(0, |n, _| n + 1), 1);
}

#[test]
fn one_apis_calls_never_wait_for_anothers() {
    use std::sync::mpsc;
    use std::time::Duration;
    let r = Arc::new(Registry::<Two, &str>::new());
    r.insert(100..200, Two::Cl(0), "cl").unwrap();
    let (held, release) = (mpsc::channel::<()>(), mpsc::channel::<()>());
    let holder = {
        let r = Arc::clone(&r);
        let (tell, wait) = (held.0, release.1);
        // Holds OpenCL's lock (a reader's closure runs under it) until told to let go.
        thread::spawn(move || {
            r.find(0, 150..151, |_| {
                tell.send(()).unwrap();
                wait.recv().unwrap();
            })
            .unwrap();
        })
    };
    held.1.recv().unwrap();
    let (done, finished) = mpsc::channel();
    let other = {
        let r = Arc::clone(&r);
        thread::spawn(move || {
            r.insert(100..200, Two::Vk(0), "vk").unwrap();
            let found = r.find(1, 150..151, |f| *f.value);
            done.send(found).unwrap();
        })
    };
    let vk = finished.recv_timeout(Duration::from_secs(10));
    release.0.send(()).unwrap();
    holder.join().unwrap();
    other.join().unwrap();
    assert_eq!(vk, Ok(Ok("vk")), "Vulkan's calls waited for OpenCL's lock");
}
