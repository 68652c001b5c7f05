//! A registry of pinned address ranges, keyed by API and range: the bookkeeping behind "which
//! pinned memory is this pointer in" and "registering overlapping memory twice is refused",
//! shared by the C library (its OpenCL and Vulkan calls in one registry) and the Python
//! package (each maps the refusals to its own codes). One API's ranges never overlap; the same
//! memory may be pinned for two APIs (a program that uses both).
//!
//! Life cycle of a range: [`Registry::reserve`] claims it (pending) before the slow pinning,
//! so that two threads registering overlapping memory cannot both win; [`Claim::complete`]
//! stores the value; a claim dropped uncompleted (an error or a panic on the way) gives the
//! range back. [`Registry::insert`] adds a ready value in one step. [`Registry::find`] reads
//! the value holding an address or a range, interior pointers included, and
//! [`Registry::take`] removes and returns it.
//!
//! Each API's map has a mutex of its own, held for map operations and while a reader's closure
//! runs ([`Registry::find`], [`Registry::find_mut`], [`Registry::fold`]), which must not call
//! into the registry; a short outer lock finds an API's map. The values a registry gives back
//! or refuses are dropped by the caller, outside the locks (releasing pinned memory may wait
//! for the driver).

use std::collections::{btree_map, BTreeMap};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// How a range came to a [`Registry`]: through which API (the ranges of one never overlap),
/// and how (allocated, registered, as the front names it).
pub trait Pinning: Copy + PartialEq {
    /// The APIs a front pins for (`()` for a front of one API).
    type Api: Ord + Copy + std::fmt::Debug;
    /// The API this range was pinned for.
    fn api(self) -> Self::Api;
}

/// Address ranges, each with a kind `K` (its API and how it came) and, once ready, a value
/// `T`; the ranges of one API never overlap.
#[derive(Debug)]
pub struct Registry<K: Pinning, T> {
    /// Each API's ranges, behind a lock of their own (so one API's calls never wait while
    /// another's is held), made as an API's first range is added; this lock only finds them.
    apis: Mutex<Apis<K, T>>,
}

/// Each API with its map, in the APIs' order.
type Apis<K, T> = Vec<(<K as Pinning>::Api, Shared<K, T>)>;

/// One API's entries by start address, behind their lock.
type Shared<K, T> = Arc<Mutex<Map<K, T>>>;

/// One API's entries by start address.
type Map<K, T> = BTreeMap<usize, Entry<K, T>>;

#[derive(Debug)]
struct Entry<K, T> {
    end: usize,
    kind: K,
    /// `None` while a claim on the range is pending.
    value: Option<T>,
}

/// An entry as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Occupant<K> {
    /// The entry's whole range.
    pub range: Range<usize>,
    /// How the entry came.
    pub kind: K,
    /// Whether a claim on it is still pending (another thread is registering it).
    pub pending: bool,
}

/// Why [`Registry::reserve`] or [`Registry::insert`] refused a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal<K> {
    /// The range has no bytes.
    Empty,
    /// The range shares bytes with this entry (the one starting last, if several).
    Overlaps(Occupant<K>),
}

/// A ready entry, as [`Registry::find`] and [`Registry::fold`] show it.
#[derive(Debug)]
pub struct Found<'a, K, T> {
    /// The entry's whole range.
    pub range: Range<usize>,
    /// How the entry came.
    pub kind: K,
    /// Its value.
    pub value: &'a T,
}

/// A range reserved by [`Registry::reserve`]: [`Claim::complete`] stores its value; dropped
/// uncompleted, it gives the range back.
#[derive(Debug)]
#[must_use = "a claim dropped uncompleted gives its range back"]
pub struct Claim<'r, K: Pinning, T> {
    registry: &'r Registry<K, T>,
    api: K::Api,
    start: usize,
    done: bool,
}

impl<K: Pinning, T> Registry<K, T> {
    /// An empty registry (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            apis: Mutex::new(Vec::new()),
        }
    }

    /// `api`'s map, made empty if it has none yet. Every change to a map is one map call, so a
    /// panic elsewhere cannot leave it half-changed: a poisoned lock is taken over (as by
    /// `crate::sync::lock` wherever a map is locked).
    fn map(&self, api: K::Api) -> Shared<K, T> {
        let mut apis = crate::sync::lock(&self.apis);
        if let Some((_, map)) = apis.iter().find(|(a, _)| *a == api) {
            return Arc::clone(map);
        }
        let map = Shared::default();
        apis.push((api, Arc::clone(&map)));
        apis.sort_by_key(|(a, _)| *a);
        map
    }

    /// `api`'s map, if a range of it was ever added (reading never makes one).
    fn existing(&self, api: K::Api) -> Option<Shared<K, T>> {
        let apis = crate::sync::lock(&self.apis);
        apis.iter()
            .find(|(a, _)| *a == api)
            .map(|(_, map)| Arc::clone(map))
    }

    /// Reserves `range` as `kind`, pending until the claim is completed.
    pub fn reserve(&self, range: Range<usize>, kind: K) -> Result<Claim<'_, K, T>, Refusal<K>> {
        let start = range.start;
        self.add(range, kind, None)
            .map_err(|(refusal, _)| refusal)?;
        Ok(Claim {
            registry: self,
            api: kind.api(),
            start,
            done: false,
        })
    }

    /// Adds `range` as `kind` with its value, ready at once. On a refusal the value is dropped
    /// (outside the lock).
    pub fn insert(&self, range: Range<usize>, kind: K, value: T) -> Result<(), Refusal<K>> {
        self.add(range, kind, Some(value))
            .map_err(|(refusal, _value)| refusal)
    }

    /// Adds the entry unless `range` is empty or overlaps one of its API; a refused value
    /// comes back.
    fn add(
        &self,
        range: Range<usize>,
        kind: K,
        value: Option<T>,
    ) -> Result<(), (Refusal<K>, Option<T>)> {
        if range.is_empty() {
            return Err((Refusal::Empty, value));
        }
        let shared = self.map(kind.api());
        let mut map = crate::sync::lock(&shared);
        if let Some(found) = overlapping(&map, &range) {
            return Err((Refusal::Overlaps(found), value));
        }
        let end = range.end;
        map.insert(range.start, Entry { end, kind, value });
        Ok(())
    }

    /// `f` of the ready entry of `api` holding every byte of `range` (one address `a`:
    /// `a..a + 1`), under `api`'s lock: a [`Registry::take`] on another thread waits for it,
    /// and `f` must not call into the registry. Refused (an empty range, no such entry, or a
    /// pending one) with the entry holding `range.start`, if any.
    pub fn find<R>(
        &self,
        api: K::Api,
        range: Range<usize>,
        f: impl FnOnce(Found<'_, K, T>) -> R,
    ) -> Result<R, Option<Occupant<K>>> {
        self.find_mut(api, range, |range, kind, value| {
            f(Found {
                range,
                kind,
                value: &*value,
            })
        })
    }

    /// As [`Registry::find`], with the value mutable: `f(whole range, kind, value)`.
    pub fn find_mut<R>(
        &self,
        api: K::Api,
        range: Range<usize>,
        f: impl FnOnce(Range<usize>, K, &mut T) -> R,
    ) -> Result<R, Option<Occupant<K>>> {
        let shared = self.existing(api).ok_or(None)?;
        let mut map = crate::sync::lock(&shared);
        let around = containing(&map, range.start).map(|(start, e)| occupant(start, e));
        let Some(found) = around else {
            return Err(None);
        };
        let whole = found.range.clone();
        match map.get_mut(&whole.start).and_then(|e| e.value.as_mut()) {
            Some(value) if !range.is_empty() && range.end <= whole.end => {
                Ok(f(whole, found.kind, value))
            }
            _ => Err(Some(found)),
        }
    }

    /// Removes and returns the ready value of the entry that starts at `start` and came as
    /// `kind`; the caller drops it, outside the lock. Refused with the entry of `kind`'s API
    /// holding `start`, if any (an interior address, another kind, or a pending claim).
    pub fn take(&self, start: usize, kind: K) -> Result<T, Option<Occupant<K>>> {
        let shared = self.existing(kind.api()).ok_or(None)?;
        let mut map = crate::sync::lock(&shared);
        if let btree_map::Entry::Occupied(mut o) = map.entry(start) {
            // A pending entry has no value to take: it stays.
            let value = (o.get().kind == kind).then(|| o.get_mut().value.take());
            if let Some(Some(value)) = value {
                o.remove();
                return Ok(value);
            }
        }
        Err(containing(&map, start).map(|(s, e)| occupant(s, e)))
    }

    /// The first of `ranges` that shares bytes with an entry of `api` of a kind `which`
    /// picks without lying inside it (it starts inside the entry and runs past its end, or
    /// runs into it from before it), with its index and that entry; empty ranges share no
    /// bytes. One lock for them all; pending entries count, as they do for
    /// [`Registry::reserve`].
    pub fn first_straddling(
        &self,
        api: K::Api,
        ranges: impl IntoIterator<Item = Range<usize>>,
        which: impl Fn(K) -> bool,
    ) -> Option<(usize, Occupant<K>)> {
        let shared = self.existing(api)?;
        let map = crate::sync::lock(&shared);
        if !map.values().any(|e| which(e.kind)) {
            return None;
        }
        ranges.into_iter().enumerate().find_map(|(i, r)| {
            if r.is_empty() {
                return None;
            }
            if let Some((start, e)) = containing(&map, r.start) {
                if which(e.kind) && r.end > e.end {
                    return Some((i, occupant(start, e)));
                }
            }
            // `r.start < r.end`, so `r.start + 1` neither overflows nor passes `r.end`.
            let inside = map.range(r.start + 1..r.end);
            let (&start, e) = inside.into_iter().find(|(_, e)| which(e.kind))?;
            Some((i, occupant(start, e)))
        })
    }

    /// `f` folded over every ready entry, by API then address, each API's under its lock (`f`
    /// must not call into the registry).
    pub fn fold<A>(&self, init: A, mut f: impl FnMut(A, Found<'_, K, T>) -> A) -> A {
        let apis: Vec<Shared<K, T>> = (crate::sync::lock(&self.apis).iter())
            .map(|(_, map)| Arc::clone(map))
            .collect();
        apis.iter().fold(init, |acc, shared| {
            let map = crate::sync::lock(shared);
            map.iter().fold(acc, |acc, (&start, e)| match &e.value {
                Some(value) => f(
                    acc,
                    Found {
                        range: start..e.end,
                        kind: e.kind,
                        value,
                    },
                ),
                None => acc,
            })
        })
    }
}

impl<K: Pinning, T> Default for Registry<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Pinning, T> Claim<'_, K, T> {
    /// Stores `value` in the claimed range, which becomes ready.
    pub fn complete(mut self, value: T) {
        let shared = self.registry.map(self.api);
        let mut map = crate::sync::lock(&shared);
        // Nothing removes a pending entry but its claim, so the entry is there.
        if let Some(e) = map.get_mut(&self.start) {
            e.value = Some(value);
        }
        self.done = true;
    }
}

impl<K: Pinning, T> Drop for Claim<'_, K, T> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let shared = self.registry.map(self.api);
        let mut map = crate::sync::lock(&shared);
        if map.get(&self.start).is_some_and(|e| e.value.is_none()) {
            map.remove(&self.start);
        }
    }
}

fn occupant<K: Copy, T>(start: usize, e: &Entry<K, T>) -> Occupant<K> {
    Occupant {
        range: start..e.end,
        kind: e.kind,
        pending: e.value.is_none(),
    }
}

/// The entry sharing a byte with the non-empty `range`: an API's entries never overlap, so
/// only the last one starting before `range.end` can reach it.
fn overlapping<K: Copy, T>(map: &Map<K, T>, range: &Range<usize>) -> Option<Occupant<K>> {
    let (&start, e) = map.range(..range.end).next_back()?;
    (e.end > range.start).then(|| occupant(start, e))
}

/// The entry holding the byte at `addr`.
fn containing<K, T>(map: &Map<K, T>, addr: usize) -> Option<(usize, &Entry<K, T>)> {
    let (&start, e) = map.range(..=addr).next_back()?;
    (e.end > addr).then_some((start, e))
}

#[cfg(test)]
#[path = "ranges_tests.rs"]
mod tests;
