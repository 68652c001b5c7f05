//! Non-overlapping address ranges with a value each: the bookkeeping behind "registering
//! twice / overlapping ranges are errors" and "which pinned memory is this array in". Pure
//! Rust, no Python, unit-tested here.

use std::collections::BTreeMap;
use std::ops::Range;

/// Address ranges that never overlap, keyed by start.
#[derive(Debug)]
pub struct Ranges<T> {
    map: BTreeMap<usize, (usize, T)>,
}

impl<T> Default for Ranges<T> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
        }
    }
}

impl<T> Ranges<T> {
    /// An empty set (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            map: BTreeMap::new(),
        }
    }

    /// The entry that shares at least one byte with `r`, if any.
    pub fn overlapping(&self, r: &Range<usize>) -> Option<(Range<usize>, &T)> {
        // Entries never overlap, so only the last one starting before `r.end` can reach `r`.
        let (&start, (end, v)) = self.map.range(..r.end).next_back()?;
        (*end > r.start && r.start < r.end).then_some((start..*end, v))
    }

    /// The entry holding every byte of `r` (a non-empty range), if any.
    pub fn containing(&self, r: &Range<usize>) -> Option<(Range<usize>, &T)> {
        let (&start, (end, v)) = self.map.range(..=r.start).next_back()?;
        (r.start < r.end && r.end <= *end).then_some((start..*end, v))
    }

    /// Adds `r` (non-empty) with `v`; an overlap is refused with the entry it overlaps.
    pub fn insert(&mut self, r: Range<usize>, v: T) -> Result<(), Range<usize>> {
        if let Some((found, _)) = self.overlapping(&r) {
            return Err(found);
        }
        self.map.insert(r.start, (r.end, v));
        Ok(())
    }

    /// The value of the entry starting at `start`, mutable.
    pub fn get_mut(&mut self, start: usize) -> Option<&mut T> {
        self.map.get_mut(&start).map(|(_, v)| v)
    }

    /// The entry starting at `start`, if any.
    pub fn get(&self, start: usize) -> Option<(Range<usize>, &T)> {
        self.map.get(&start).map(|(end, v)| (start..*end, v))
    }

    /// Removes the entry starting at `start`.
    pub fn remove(&mut self, start: usize) -> Option<(Range<usize>, T)> {
        self.map.remove(&start).map(|(end, v)| (start..end, v))
    }

    /// Every value.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.map.values().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> Ranges<&'static str> {
        let mut r = Ranges::new();
        r.insert(100..200, "a").unwrap();
        r.insert(300..400, "b").unwrap();
        r
    }

    #[test]
    fn overlaps_are_refused_with_the_range_they_hit() {
        let mut r = set();
        assert_eq!(r.insert(150..160, "x"), Err(100..200));
        assert_eq!(r.insert(50..101, "x"), Err(100..200));
        assert_eq!(r.insert(199..301, "x"), Err(300..400)); // overlaps both: the later one is named
        assert_eq!(r.insert(250..350, "x"), Err(300..400));
        assert_eq!(r.insert(0..1000, "x"), Err(300..400));
        assert_eq!(r.insert(100..200, "x"), Err(100..200));
    }

    #[test]
    fn touching_ranges_do_not_overlap() {
        let mut r = set();
        r.insert(200..300, "c").unwrap();
        r.insert(0..100, "d").unwrap();
        r.insert(400..401, "e").unwrap();
        assert_eq!(r.values().count(), 5);
    }

    #[test]
    fn containing_needs_every_byte_inside_one_entry() {
        let r = set();
        assert_eq!(
            r.containing(&(100..200)).map(|(x, v)| (x, *v)),
            Some((100..200, "a"))
        );
        assert_eq!(r.containing(&(150..151)).map(|(_, v)| *v), Some("a"));
        assert_eq!(r.containing(&(399..400)).map(|(_, v)| *v), Some("b"));
        assert!(r.containing(&(150..201)).is_none());
        assert!(r.containing(&(99..150)).is_none());
        assert!(r.containing(&(200..300)).is_none());
        assert!(r.containing(&(150..150)).is_none());
    }

    #[test]
    fn removal_frees_the_range() {
        let mut r = set();
        assert_eq!(r.get(100).map(|(x, _)| x), Some(100..200));
        assert!(r.get(150).is_none());
        assert_eq!(r.remove(100), Some((100..200, "a")));
        assert!(r.remove(100).is_none());
        r.insert(120..130, "c").unwrap();
        *r.get_mut(120).unwrap() = "d";
        assert_eq!(r.get(120).map(|(_, v)| *v), Some("d"));
    }
}
