//! Every range of memory pinstream pins for this process: arrays it allocated
//! (`pinstream.empty`/`zeros`) and arrays the caller registered (`pinstream.register`).
//!
//! One lock guards the table. It is held only for table operations: nothing under it waits
//! for the GIL or drops a Python object, so a thread holding the GIL may always wait for it.
//! Registration claims its range first (`Entry::Reserved`), pins with the GIL released, then
//! fills the entry in, so that two threads registering overlapping arrays cannot both win.

use crate::export::Export;
use crate::ranges::Ranges;
use pinstream::host::HostRegion;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

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

/// What the table holds for a range.
enum Entry {
    /// A registration in progress (pinning runs without the GIL).
    Reserved,
    /// Memory pinstream allocated; its `PinnedMemory` object owns it.
    Allocated(Weak<HostRegion>),
    /// An array the caller registered.
    Registered(Arc<Registration>),
}

/// A region found in the table, kept alive while it is described.
pub enum Held {
    /// Memory pinstream allocated.
    Allocated(Arc<HostRegion>),
    /// An array the caller registered.
    Registered(Arc<Registration>),
}

impl Held {
    /// The region.
    pub fn region(&self) -> &HostRegion {
        match self {
            Held::Allocated(r) => r,
            Held::Registered(r) => &r.region,
        }
    }
}

/// Why a range could not be claimed, or an array was not found.
pub enum Refusal {
    /// The range overlaps this one, which pinstream already pins.
    Overlaps(Range<usize>, &'static str),
    /// No range pinstream pins holds the array; the range around its start, if one does.
    NotFound(Option<(Range<usize>, &'static str)>),
    /// The range starts here, but holds memory pinstream allocated, not a registered array.
    Allocated(Range<usize>),
}

static PINNED: Mutex<Ranges<Entry>> = Mutex::new(Ranges::new());

fn table() -> MutexGuard<'static, Ranges<Entry>> {
    // A panic under the lock leaves the table itself consistent (each operation is one map
    // call), so a poisoned lock is taken over.
    PINNED.lock().unwrap_or_else(|p| p.into_inner())
}

fn kind(e: &Entry) -> &'static str {
    match e {
        Entry::Reserved => "being registered by another thread",
        Entry::Allocated(_) => "allocated by pinstream.empty/zeros",
        Entry::Registered(_) => "registered with pinstream.register",
    }
}

/// Records memory pinstream allocated.
pub fn add_allocated(range: Range<usize>, region: &Arc<HostRegion>) {
    let added = table().insert(range, Entry::Allocated(Arc::downgrade(region)));
    // The memory was just mapped by this process: nothing else can hold its addresses.
    debug_assert!(added.is_ok(), "a fresh allocation overlaps a pinned range");
}

/// Forgets allocated memory that is about to be freed.
pub fn remove_allocated(start: usize) {
    let mut t = table();
    if matches!(t.get(start), Some((_, Entry::Allocated(_)))) {
        t.remove(start);
    }
}

/// A claimed range: completed with its registration, or given up when dropped (a failed or
/// panicking registration never leaves its range claimed).
pub struct Claim {
    start: usize,
    done: bool,
}

impl Claim {
    /// Stores the registration in the claimed range.
    pub fn complete(mut self, reg: Registration) {
        if let Some(e) = table().get_mut(self.start) {
            *e = Entry::Registered(Arc::new(reg));
        }
        self.done = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut t = table();
        if matches!(t.get(self.start), Some((_, Entry::Reserved))) {
            t.remove(self.start);
        }
    }
}

/// Claims `range` for a registration.
pub fn reserve(range: Range<usize>) -> Result<Claim, Refusal> {
    let mut t = table();
    let start = range.start;
    t.insert(range, Entry::Reserved).map_err(|found| {
        let what = t
            .get(found.start)
            .map_or("pinned by pinstream", |(_, e)| kind(e));
        Refusal::Overlaps(found, what)
    })?;
    Ok(Claim { start, done: false })
}

/// Takes out the registration that starts at `start` (the caller drops it, outside the lock).
pub fn take_registered(start: usize) -> Result<Arc<Registration>, Refusal> {
    let mut t = table();
    match t.get(start) {
        Some((_, Entry::Registered(_))) => match t.remove(start) {
            Some((_, Entry::Registered(r))) => Ok(r),
            _ => unreachable!("the entry was just seen"),
        },
        Some((range, Entry::Allocated(_))) => Err(Refusal::Allocated(range)),
        _ => Err(Refusal::NotFound(
            t.containing(&(start..start + 1)).map(|(r, e)| (r, kind(e))),
        )),
    }
}

/// The region holding every byte of `range`, with the whole range it pins.
pub fn find(range: Range<usize>) -> Result<(Held, Range<usize>), Refusal> {
    let t = table();
    let found = t.containing(&range).and_then(|(r, e)| match e {
        Entry::Allocated(w) => w.upgrade().map(|a| (Held::Allocated(a), r)),
        Entry::Registered(reg) => Some((Held::Registered(reg.clone()), r)),
        Entry::Reserved => None,
    });
    found.ok_or_else(|| {
        Refusal::NotFound(
            t.containing(&(range.start..range.start + 1))
                .map(|(r, e)| (r, kind(e))),
        )
    })
}

/// Live allocations, their bytes, and live registrations (for tests and diagnostics).
pub fn census() -> (usize, usize, usize) {
    let t = table();
    let (mut allocated, mut bytes, mut registered) = (0, 0, 0);
    for e in t.values() {
        match e {
            Entry::Allocated(w) => {
                if let Some(r) = w.upgrade() {
                    allocated += 1;
                    bytes += r.len();
                }
            }
            Entry::Registered(_) => registered += 1,
            Entry::Reserved => {}
        }
    }
    (allocated, bytes, registered)
}
