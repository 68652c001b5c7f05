//! A staging ring: pinned host memory smaller than the data that streams through it, so a
//! run over a file larger than host memory holds only the ring ([`crate::engine::storage`]).
//!
//! The ring holds `cap` bytes (a whole number of blocks); byte `i` of the data lies at
//! `i % cap`. Three parties share it, each through a counter of bytes, in order:
//! - the producer (a file's reader, for a source) fills a range once the device and the
//!   consumer are done with the turn before ([`Staging::fill`]);
//! - devices read a range once it is filled and write one (a sink) once its place is free,
//!   through the gated view [`Staging::view`]; the run says when they are done
//!   ([`Staging::complete`]);
//! - the consumer (a file's writer, for a sink or in place) reads a range once devices are
//!   done with it ([`Staging::drain`]).
//!
//! A failure of any party ([`Staging::fail`]) wakes the others with its message.

use super::api::HostSpan;
use super::lanes::{Gate, HostMemory, HostView};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What a staging ring stands between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A producer fills it, devices read it.
    Source,
    /// Devices write it, a consumer drains it.
    Sink,
    /// A producer fills it, devices read and write it back, a consumer drains it.
    InPlace,
}

impl Role {
    fn produced(self) -> bool {
        self != Role::Sink
    }
    fn consumed(self) -> bool {
        self != Role::Source
    }
}

#[derive(Default)]
struct Counters {
    /// Bytes `..filled` are filled (the producer's contiguous prefix).
    filled: usize,
    /// Ranges filled ahead of the prefix (several producer threads): start to end.
    ahead: BTreeMap<usize, usize>,
    /// Bytes `..done` are done on devices.
    done: usize,
    /// Bytes `..drained` are drained by the consumer.
    drained: usize,
    failed: Option<String>,
}

struct Shared {
    role: Role,
    cap: usize,
    len: usize,
    m: Mutex<Counters>,
    cv: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Counters> {
        crate::sync::lock(&self.m)
    }

    /// Waits until `ready(counters)`; the failure that stopped the ring otherwise. A range
    /// that is ready stays usable after a failure: the engine asks again for a range it
    /// already waited for (before each upload) and takes a refusal there for misuse, so a
    /// reader failing on a later block must not turn a filled range into an error.
    fn wait(&self, ready: impl Fn(&Counters) -> bool) -> Result<(), String> {
        let mut c = self.lock();
        loop {
            if ready(&c) {
                return Ok(());
            }
            if let Some(why) = &c.failed {
                return Err(why.clone());
            }
            c = self.cv.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Bytes whose place in the ring is free again: devices are done with them and, where a
    /// consumer drains the ring, it has drained them.
    fn free(&self, c: &Counters) -> usize {
        if self.role.consumed() {
            c.drained
        } else {
            c.done
        }
    }

    fn update(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.lock());
        self.cv.notify_all();
    }
}

/// What devices wait on: a source's range once filled, a sink's once its place is free.
struct RingGate(Arc<Shared>);

impl Gate for RingGate {
    fn wait_ready(&self, end: usize) -> Result<(), String> {
        let s = &self.0;
        if s.role.produced() {
            s.wait(|c| c.filled >= end)
        } else {
            s.wait(|c| s.free(c) >= end.saturating_sub(s.cap))
        }
    }
}

/// A staging ring over pinned memory, for data of `len` bytes.
pub struct Staging<'h> {
    pieces: Vec<HostSpan>,
    shared: Arc<Shared>,
    _borrow: PhantomData<&'h mut [u8]>,
}

// SAFETY: the pieces are touched only under the ring's protocol (each range by one party at
// a time, handed over through the mutex), whichever thread that party runs on.
unsafe impl Send for Staging<'_> {}
// SAFETY: as above; every method takes `&self` and hands ranges over through the mutex.
unsafe impl Sync for Staging<'_> {}

impl<'h> Staging<'h> {
    /// A ring over all of `memory` for `len` bytes of data in the role `role`. The memory is
    /// borrowed for the ring's life: nothing else touches it meanwhile.
    pub fn new(memory: &'h mut dyn HostMemory, len: usize, role: Role) -> Self {
        let cap = memory.len();
        let slices = memory.slices_mut(0..cap).unwrap_or_default();
        let pieces = slices
            .into_iter()
            .map(|s| HostSpan {
                ptr: s.as_mut_ptr(),
                len: s.len(),
            })
            .collect();
        let shared = Shared {
            role,
            cap,
            len,
            m: Mutex::new(Counters::default()),
            cv: Condvar::new(),
        };
        Staging {
            pieces,
            shared: Arc::new(shared),
            _borrow: PhantomData,
        }
    }

    /// Bytes the ring holds.
    pub fn capacity(&self) -> usize {
        self.shared.cap
    }

    /// The data as devices see it: `len` bytes, gated by the ring.
    pub fn view(&self) -> HostView<'_> {
        let s = &self.shared;
        let gate: Arc<dyn Gate> = Arc::new(RingGate(s.clone()));
        // SAFETY: devices reach a range only once the gate says so (filled, or free for a
        // sink); the producer and consumer touch a range only when `fill`/`drain` found
        // devices done with it (`complete`, which the run calls after a block's commands
        // all completed). The pieces are borrowed for 'h, which outlives the view.
        unsafe { HostView::ring(self.pieces.clone(), s.len, s.role.consumed(), gate) }
    }

    /// Waits until `range`'s place in the ring is free, lends it to `f` to fill, and marks it
    /// filled when `f` succeeds; `f`'s failure stops the ring. Several threads may fill
    /// different ranges at once. `range` must not cross the ring's end.
    pub fn fill<E: std::fmt::Display>(
        &self,
        range: Range<usize>,
        f: impl FnOnce(&mut [&mut [u8]]) -> Result<(), E>,
    ) -> Result<(), String> {
        let s = &self.shared;
        let need = range.end.saturating_sub(s.cap);
        s.wait(|c| s.free(c) >= need)?;
        let mut parts = self.parts(&range);
        let mut slices: Vec<&mut [u8]> = parts.iter_mut().map(|p| p.as_mut_slice()).collect();
        if let Err(e) = f(&mut slices) {
            let why = e.to_string();
            self.fail(&why);
            return Err(why);
        }
        s.update(|c| mark_filled(c, range));
        Ok(())
    }

    /// Waits until devices are done with `range`, lends it to `f`, and marks it drained when
    /// `f` succeeds (ranges in order, from one thread); `f`'s failure stops the ring.
    pub fn drain<E: std::fmt::Display>(
        &self,
        range: Range<usize>,
        f: impl FnOnce(&[&[u8]]) -> Result<(), E>,
    ) -> Result<(), String> {
        let s = &self.shared;
        s.wait(|c| c.done >= range.end)?;
        let parts = self.parts(&range);
        let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        if let Err(e) = f(&slices) {
            let why = e.to_string();
            self.fail(&why);
            return Err(why);
        }
        s.update(|c| c.drained = c.drained.max(range.end));
        Ok(())
    }

    /// Devices are done with bytes `..upto` (every command of their blocks completed).
    pub fn complete(&self, upto: usize) {
        let upto = upto.min(self.shared.len);
        self.shared.update(|c| c.done = c.done.max(upto));
    }

    /// Stops the ring: every wait, now and later, returns `why` (the first failure is kept).
    pub fn fail(&self, why: &str) {
        self.shared.update(|c| {
            c.failed.get_or_insert_with(|| why.to_string());
        });
    }

    /// The failure that stopped the ring, if any.
    pub fn failure(&self) -> Option<String> {
        self.shared.lock().failed.clone()
    }

    /// The pieces of `range`'s place in the ring.
    fn parts(&self, range: &Range<usize>) -> Vec<Part<'_>> {
        let cap = self.shared.cap;
        let start = range.start % cap.max(1);
        let end = start + range.len();
        assert!(
            end <= cap,
            "range {range:?} crosses the end of a ring of {cap} bytes"
        );
        let mut out = Vec::new();
        let mut at = 0;
        for p in &self.pieces {
            let (lo, hi) = (start.max(at), end.min(at + p.len));
            if lo < hi {
                out.push(Part {
                    ptr: p.ptr.wrapping_add(lo - at),
                    len: hi - lo,
                    _ring: PhantomData,
                });
            }
            at += p.len;
        }
        out
    }
}

/// Marks `range` filled, advancing the prefix over ranges filled ahead of it.
fn mark_filled(c: &mut Counters, range: Range<usize>) {
    c.ahead.insert(range.start, range.end);
    while let Some(end) = c.ahead.remove(&c.filled) {
        c.filled = end;
    }
}

/// Bytes of the ring lent to one party for one range.
struct Part<'r> {
    ptr: *mut u8,
    len: usize,
    _ring: PhantomData<&'r ()>,
}

impl Part<'_> {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the range was handed to this party by the ring's protocol (devices done
        // with it, nobody else lent it), inside the pieces borrowed for the ring's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: as above; devices only read it (or are done writing it).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem(Vec<u8>);
    impl HostMemory for Mem {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn slices(&self, r: Range<usize>) -> Result<Vec<&[u8]>, super::super::lanes::OutOfRange> {
            Ok(vec![&self.0[r]])
        }
        fn slices_mut(
            &mut self,
            r: Range<usize>,
        ) -> Result<Vec<&mut [u8]>, super::super::lanes::OutOfRange> {
            Ok(vec![&mut self.0[r]])
        }
    }

    fn put(s: &mut [&mut [u8]], v: u8) -> Result<(), String> {
        s[0].fill(v);
        Ok(())
    }

    #[test]
    fn a_range_is_filled_only_once_its_turn_before_is_done() {
        let mut m = Mem(vec![0; 8]);
        let ring = Staging::new(&mut m, 20, Role::Source);
        let gate = RingGate(ring.shared.clone());
        ring.fill(4..8, |s| put(s, 2)).unwrap();
        assert_eq!(ring.shared.lock().filled, 0, "filled ahead of the prefix");
        ring.fill(0..4, |s| put(s, 1)).unwrap();
        gate.wait_ready(8).unwrap();
        std::thread::scope(|t| {
            let filler = t.spawn(|| ring.fill(8..12, |s| put(s, 3)));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!filler.is_finished(), "bytes 0..4 are still the devices'");
            ring.complete(4);
            filler.join().unwrap().unwrap();
        });
        ring.fail("disk gone");
        // What was filled before the failure stays ready (the engine asks again for a range
        // it already waited for, before its upload); what was not is refused.
        gate.wait_ready(12).unwrap();
        assert_eq!(gate.wait_ready(16), Err("disk gone".to_string()));
    }

    #[test]
    fn a_sink_lends_a_place_to_devices_once_the_turn_before_is_drained() {
        let mut m = Mem(vec![7; 4]);
        let ring = Staging::new(&mut m, 10, Role::Sink);
        let gate = RingGate(ring.shared.clone());
        gate.wait_ready(4).unwrap();
        ring.complete(4);
        let mut seen = Vec::new();
        ring.drain(0..4, |s| {
            seen.extend_from_slice(s[0]);
            Ok::<_, String>(())
        })
        .unwrap();
        assert_eq!(seen, [7; 4]);
        gate.wait_ready(8).unwrap();
        ring.complete(8);
        assert_eq!(
            ring.drain(4..8, |_| Err("disk full")),
            Err("disk full".into())
        );
        assert_eq!(ring.failure().as_deref(), Some("disk full"));
    }
}
