//! Every range of memory pinstream pins for this process: arrays it allocated
//! (`pinstream.empty`/`zeros`) and arrays the caller registered (`pinstream.register`).
//!
//! An adapter over the library's [`Registry`], whose lock is held only for table operations:
//! nothing under it waits for the GIL, drops a Python object or frees memory, so a thread
//! holding the GIL may always wait for it. Registration claims its range first, pins with the
//! GIL released, then completes the claim, so that two threads registering overlapping arrays
//! cannot both win.

use crate::export::Export;
use pinstream::host::ranges::{self, Occupant, Registry};
use pinstream::host::HostRegion;
use std::ops::Range;
use std::sync::{Arc, Weak};

/// A registered array: the region over its memory and the buffer export that keeps the array
/// alive (and unresizable) while it is registered.
pub struct Registration {
    // Field order is drop order: the registrations are released before the array may go.
    region: HostRegion,
    _export: Export,
}

impl Registration {
    /// Pairs a region with the export of the memory it covers.
    pub fn new(region: HostRegion, export: Export) -> Self {
        Self {
            region,
            _export: export,
        }
    }
}

/// Memory pinstream allocated, freed when its last holder lets go without waiting for
/// anything ([`HostRegion::release_when_idle`]): Python frees an array wherever its last
/// reference goes, with the GIL held, and a kernel still queued on it may wait for a user event
/// that this very thread sets next, or another thread that needs the GIL.
pub struct Allocation(Option<HostRegion>);

impl Allocation {
    /// Owns `region`.
    pub fn new(region: HostRegion) -> Self {
        Self(Some(region))
    }

    /// The region.
    pub fn region(&self) -> &HostRegion {
        self.0
            .as_ref()
            .expect("an allocation holds its region until it is dropped")
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if let Some(region) = self.0.take() {
            // Freed now, or by pinstream's freeing thread once its kernels have run: never
            // waited for here.
            drop(region.release_when_idle());
        }
    }
}

/// How a range came to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Memory pinstream allocated (`pinstream.empty`/`zeros`).
    Allocated,
    /// An array the caller registered (`pinstream.register`).
    Registered,
}

/// The package pins for OpenCL only: one API.
impl ranges::Pinning for Kind {
    type Api = ();
    fn api(self) {}
}

/// What the table holds for a ready range.
pub enum Pinned {
    /// Memory pinstream allocated; its `PinnedMemory` object owns it.
    Allocated(Weak<Allocation>),
    /// An array the caller registered.
    Registered(Arc<Registration>),
}

/// A region found in the table, kept alive while it is described.
pub enum Held {
    /// Memory pinstream allocated.
    Allocated(Arc<Allocation>),
    /// An array the caller registered.
    Registered(Arc<Registration>),
}

impl Held {
    /// The region.
    pub fn region(&self) -> &HostRegion {
        match self {
            Held::Allocated(a) => a.region(),
            Held::Registered(r) => &r.region,
        }
    }
}

/// Why a range could not be claimed, or an array was not found.
pub enum Refusal {
    /// The range has no bytes: nothing to pin.
    Empty,
    /// The range overlaps this one, which pinstream already pins.
    Overlaps(Range<usize>, &'static str),
    /// No range pinstream pins holds the array; the range around its start, if one does.
    NotFound(Option<(Range<usize>, &'static str)>),
    /// The range starts here, but holds memory pinstream allocated, not a registered array.
    Allocated(Range<usize>),
}

static PINNED: Registry<Kind, Pinned> = Registry::new();

fn describe(o: &Occupant<Kind>) -> &'static str {
    match (o.pending, o.kind) {
        (true, _) => "being registered by another thread",
        (false, Kind::Allocated) => "allocated by pinstream.empty/zeros",
        (false, Kind::Registered) => "registered with pinstream.register",
    }
}

/// The refusal for an array not found, given the entry around its start.
fn not_found(around: Option<Occupant<Kind>>) -> Refusal {
    Refusal::NotFound(around.map(|o| {
        let what = describe(&o);
        (o.range, what)
    }))
}

/// Records memory pinstream allocated.
pub fn add_allocated(range: Range<usize>, region: &Arc<Allocation>) {
    let added = PINNED.insert(
        range,
        Kind::Allocated,
        Pinned::Allocated(Arc::downgrade(region)),
    );
    // The memory was just mapped by this process: nothing else can hold its addresses.
    debug_assert!(added.is_ok(), "a fresh allocation overlaps a pinned range");
}

/// Forgets allocated memory that is about to be freed (nothing, if it was never recorded).
pub fn remove_allocated(start: usize) {
    drop(PINNED.take(start, Kind::Allocated));
}

/// A claimed range: completed with its registration, or given up when dropped (a failed or
/// panicking registration never leaves its range claimed).
pub struct Claim(ranges::Claim<'static, Kind, Pinned>);

impl Claim {
    /// Stores the registration in the claimed range.
    pub fn complete(self, reg: Registration) {
        self.0.complete(Pinned::Registered(Arc::new(reg)));
    }
}

/// Claims `range` for a registration.
pub fn reserve(range: Range<usize>) -> Result<Claim, Refusal> {
    match PINNED.reserve(range, Kind::Registered) {
        Ok(claim) => Ok(Claim(claim)),
        Err(ranges::Refusal::Empty) => Err(Refusal::Empty),
        Err(ranges::Refusal::Overlaps(o)) => {
            let what = describe(&o);
            Err(Refusal::Overlaps(o.range, what))
        }
    }
}

/// Takes out the registration that starts at `start` (the caller drops it, outside the lock).
pub fn take_registered(start: usize) -> Result<Pinned, Refusal> {
    PINNED
        .take(start, Kind::Registered)
        .map_err(|around| match around {
            Some(o) if o.range.start == start && o.kind == Kind::Allocated && !o.pending => {
                Refusal::Allocated(o.range)
            }
            around => not_found(around),
        })
}

/// The region holding every byte of `range`, with the whole range it pins.
pub fn find(range: Range<usize>) -> Result<(Held, Range<usize>), Refusal> {
    let found = PINNED.find((), range, |f| match f.value {
        Pinned::Allocated(w) => match w.upgrade() {
            Some(a) => Ok((Held::Allocated(a), f.range)),
            // Its `PinnedMemory` is being dropped: the memory is going.
            None => Err(Refusal::NotFound(Some((
                f.range,
                "allocated by pinstream.empty/zeros",
            )))),
        },
        Pinned::Registered(reg) => Ok((Held::Registered(reg.clone()), f.range)),
    });
    found.map_err(not_found)?
}

/// Live allocations, their bytes, and live registrations (for tests and diagnostics). An
/// allocation's range is its region's (`PinnedMemory::adopt`), so nothing is upgraded: a
/// reference taken under the lock could be the last, and free the memory there.
pub fn census() -> (usize, usize, usize) {
    PINNED.fold((0, 0, 0), |(allocated, bytes, registered), f| {
        match f.value {
            Pinned::Allocated(w) if w.strong_count() > 0 => {
                (allocated + 1, bytes + f.range.len(), registered)
            }
            Pinned::Allocated(_) => (allocated, bytes, registered),
            Pinned::Registered(_) => (allocated, bytes, registered + 1),
        }
    })
}
