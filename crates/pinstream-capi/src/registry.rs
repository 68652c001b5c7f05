//! The process-wide registry of what pinstream pinned for C callers, keyed by address range.
//!
//! One mutex guards a map from start address to range. A registration reserves its range
//! under the lock before the (slow) pinning, so that two threads registering overlapping
//! memory cannot both succeed; pinning and releasing run outside the lock, so calls on other
//! ranges never wait for them.

use crate::error::{
    Failure, PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED, PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
    PS_ERROR_INVALID_HOST_POINTER,
};
use pinstream::host::HostRegion;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard};

/// How a range came to pinstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `psHostAlloc`: pinstream's memory.
    Allocated,
    /// `psHostRegister`: the caller's memory.
    Registered,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Allocated => "allocated by psHostAlloc",
            Kind::Registered => "registered by psHostRegister",
        }
    }
}

/// A pinned range and what the caller may ask about it.
pub(crate) struct Block {
    pub region: HostRegion,
    pub kind: Kind,
    /// Why this strategy, as the caller asked for it.
    pub reason: String,
    /// Devices of the context.
    pub devices: usize,
}

enum Slot {
    /// A registration in progress on some thread.
    Reserved(Kind),
    Ready(Arc<Block>),
}

struct Entry {
    end: usize,
    slot: Slot,
}

impl Entry {
    fn kind(&self) -> Kind {
        match &self.slot {
            Slot::Reserved(kind) => *kind,
            Slot::Ready(b) => b.kind,
        }
    }
}

static RANGES: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());

fn ranges() -> MutexGuard<'static, BTreeMap<usize, Entry>> {
    // A panic elsewhere cannot leave the map half-changed: every change is one insert/remove.
    RANGES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The entry that overlaps `range`, if any.
fn overlapping(map: &BTreeMap<usize, Entry>, range: &Range<usize>) -> Option<(usize, usize, Kind)> {
    map.range(..range.end)
        .next_back()
        .filter(|(_, e)| e.end > range.start)
        .map(|(&start, e)| (start, e.end, e.kind()))
}

/// The entry that contains `addr`, if any.
fn containing(map: &BTreeMap<usize, Entry>, addr: usize) -> Option<(usize, &Entry)> {
    map.range(..=addr)
        .next_back()
        .filter(|(_, e)| e.end > addr)
        .map(|(&start, e)| (start, e))
}

fn conflict(range: &Range<usize>, found: (usize, usize, Kind)) -> Failure {
    let (start, end, kind) = found;
    Failure::new(
        PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        format!(
            "{:#x}..{:#x} overlaps {start:#x}..{end:#x}, {}: unregister or free that range first, or register only memory pinstream does not already pin",
            range.start, range.end, kind.describe()
        ),
    )
}

/// A range reserved for a registration in progress: [`Reservation::finish`] turns it into a
/// ready block; dropped unfinished (an error or a panic on the way), it gives the range back.
pub(crate) struct Reservation {
    start: usize,
    finished: bool,
}

/// Reserves `range` for a registration in progress.
pub(crate) fn reserve(range: Range<usize>, kind: Kind) -> Result<Reservation, Failure> {
    let mut map = ranges();
    if let Some(found) = overlapping(&map, &range) {
        return Err(conflict(&range, found));
    }
    map.insert(
        range.start,
        Entry {
            end: range.end,
            slot: Slot::Reserved(kind),
        },
    );
    Ok(Reservation {
        start: range.start,
        finished: false,
    })
}

impl Reservation {
    /// Turns the reservation into a ready block.
    pub(crate) fn finish(mut self, block: Block) {
        if let Some(e) = ranges().get_mut(&self.start) {
            e.slot = Slot::Ready(Arc::new(block));
        }
        self.finished = true;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.finished {
            ranges().remove(&self.start);
        }
    }
}

/// Inserts a block pinstream allocated; an overlap (a range the caller registered, then freed
/// without unregistering, that the new memory reuses) is refused and the block dropped.
pub(crate) fn insert(block: Block) -> Result<usize, Failure> {
    let start = block.region.as_ptr().map_or(0, |p| p as usize);
    let range = start..start + block.region.len();
    let mut map = ranges();
    if let Some(found) = overlapping(&map, &range) {
        drop(map);
        let fail = conflict(&range, found);
        drop(block);
        return Err(Failure::new(
            fail.code,
            format!(
                "{} (a registration whose memory was freed without psHostUnregister)",
                fail.detail
            ),
        ));
    }
    map.insert(
        start,
        Entry {
            end: range.end,
            slot: Slot::Ready(Arc::new(block)),
        },
    );
    Ok(start)
}

/// What is known at `addr`, for messages about a pointer that is not a range's start.
fn describe_at(map: &BTreeMap<usize, Entry>, addr: usize) -> String {
    match containing(map, addr) {
        Some((start, e)) => format!(
            "it points {} bytes into {start:#x}..{:#x}, {}: pass the range's start",
            addr - start,
            e.end,
            e.kind().describe()
        ),
        None => "pinstream knows no range there".into(),
    }
}

/// Removes the block that starts at `addr` and was made as `kind`; the caller drops it
/// (outside the lock: releasing may wait for the driver).
pub(crate) fn remove(addr: usize, kind: Kind) -> Result<Arc<Block>, Failure> {
    let mut map = ranges();
    let (code, fix) = match kind {
        Kind::Allocated => (
            PS_ERROR_INVALID_HOST_POINTER,
            "psHostFree takes a pointer psHostAlloc returned, once",
        ),
        Kind::Registered => (
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            "psHostUnregister takes the pointer given to psHostRegister, once",
        ),
    };
    let found = match map.get(&addr) {
        Some(Entry { slot: Slot::Ready(b), .. }) if b.kind == kind => None,
        Some(Entry { slot: Slot::Ready(b), .. }) => Some(format!(
            "{addr:#x} was {}: release it with {}",
            b.kind.describe(),
            if b.kind == Kind::Allocated { "psHostFree" } else { "psHostUnregister" }
        )),
        Some(Entry { slot: Slot::Reserved(_), .. }) => {
            Some(format!("{addr:#x} is still being registered by another thread"))
        }
        None => Some(format!(
            "{addr:#x} is not a range's start ({}); freed or unregistered twice, or never pinned by pinstream",
            describe_at(&map, addr)
        )),
    };
    if let Some(why) = found {
        return Err(Failure::new(code, format!("{why}. {fix}")));
    }
    match map.remove(&addr) {
        Some(Entry {
            slot: Slot::Ready(b),
            ..
        }) => Ok(b),
        _ => unreachable!("checked above under the same lock"),
    }
}

/// `f` of the block containing `addr`, under the registry's lock: a `psHostFree` or
/// `psHostUnregister` on another thread waits for it, so when either returns the block is
/// released, never kept alive by a reader.
pub(crate) fn with_block<R>(addr: usize, f: impl FnOnce(&Block) -> R) -> Result<R, Failure> {
    let map = ranges();
    match containing(&map, addr) {
        Some((
            _,
            Entry {
                slot: Slot::Ready(b),
                ..
            },
        )) => Ok(f(b)),
        Some((
            start,
            Entry {
                slot: Slot::Reserved(_),
                ..
            },
        )) => Err(Failure::new(
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            format!("{addr:#x} lies in {start:#x}.., which another thread is still registering"),
        )),
        None => Err(Failure::new(
            PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
            format!("{addr:#x} lies in no range psHostAlloc or psHostRegister pinned"),
        )),
    }
}
