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

/// The call that releases `kind`.
fn release_call(kind: Kind) -> &'static str {
    match kind {
        Kind::Allocated => "psHostFree",
        Kind::Registered => "psHostUnregister",
    }
}

/// Why `addr` cannot be released as `kind` (one sentence and its fix), or `None` when it
/// is the start of a ready block of that kind.
fn refusal(map: &BTreeMap<usize, Entry>, addr: usize, kind: Kind) -> Option<String> {
    let (start, e) = match containing(map, addr) {
        Some((start, e)) if start == addr && e.kind() == kind => match e.slot {
            Slot::Ready(_) => return None,
            Slot::Reserved(_) => {
                return Some(format!("{addr:#x} is still being registered by another thread: release it once psHostRegister has returned"))
            }
        },
        Some(found) => found,
        None => {
            let fix = match kind {
                Kind::Allocated => "psHostFree takes a pointer psHostAlloc returned, once",
                Kind::Registered => "psHostUnregister takes the pointer given to psHostRegister, once",
            };
            return Some(format!("{addr:#x} lies in no range pinstream pinned (never pinned, or released already): {fix}"));
        }
    };
    let at = match addr - start {
        0 => format!("{addr:#x} is the start of {start:#x}..{:#x}", e.end),
        n => format!("{addr:#x} points {n} bytes into {start:#x}..{:#x}", e.end),
    };
    Some(format!(
        "{at}, {}: pass its start, as {}({start:#x})",
        e.kind().describe(),
        release_call(e.kind())
    ))
}

/// Removes the block that starts at `addr` and was made as `kind`; the caller drops it
/// (outside the lock: releasing may wait for the driver).
pub(crate) fn remove(addr: usize, kind: Kind) -> Result<Arc<Block>, Failure> {
    let mut map = ranges();
    if let Some(why) = refusal(&map, addr, kind) {
        let code = match kind {
            Kind::Allocated => PS_ERROR_INVALID_HOST_POINTER,
            Kind::Registered => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
        };
        return Err(Failure::new(code, why));
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
