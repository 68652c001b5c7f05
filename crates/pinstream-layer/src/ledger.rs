//! The layer's books: which live buffers it rewrote (or, under `audit`, would have), how the
//! program uses them, and the summary printed at exit. Pure: buffers are keyed by their
//! handle's address, and the FFI side tells the ledger when one is created or destroyed.

use crate::decide::Skip;
use crate::settings::{human, Policy};
use std::collections::{BTreeMap, HashMap, HashSet};

/// At most this many distinct kernels are remembered per buffer for "first binding" notices;
/// later bindings are still counted.
const KERNELS_REMEMBERED: usize = 64;

/// How a tracked buffer came to be tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Created by `clCreateBufferNV` in place of the program's `clCreateBuffer`.
    Rewritten,
    /// Created as asked under `audit`; the rewrite policy would have rewritten it.
    WouldRewrite,
}

/// A use of a tracked buffer that moves its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// Bound to a kernel argument (`clSetKernelArg`); the kernel's address.
    KernelArg(usize),
    /// The device side of `clEnqueueReadBuffer`.
    Read,
    /// The device side of `clEnqueueWriteBuffer`.
    Write,
    /// A source or destination of `clEnqueueCopyBuffer`.
    Copy,
}

/// A use worth a line in the log: the first binding of a buffer to a kernel, or the first time
/// it is the device side of a read or write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The buffer's number in creation order (sub-buffers carry their parent's).
    pub buffer_no: u64,
    /// Its size.
    pub size: u64,
    /// Rewritten or would-be.
    pub kind: Kind,
    /// The use.
    pub what: Use,
}

impl Notice {
    /// The log line (without the `pinstream-layer:` prefix).
    pub fn line(&self) -> String {
        let rewritten = self.kind == Kind::Rewritten;
        let subject = if rewritten {
            "rewritten buffer"
        } else {
            "buffer the rewrite would take"
        };
        let what = match self.what {
            Use::KernelArg(_) if rewritten => "bound to a kernel: the kernel now reads or writes pinned host memory over PCIe (zero-copy, ~12x slower than VRAM on the H200)".to_string(),
            Use::KernelArg(_) => "bound to a kernel: under the rewrite the kernel would read or write host memory over PCIe (~12x slower than VRAM on the H200)".to_string(),
            Use::Read | Use::Write => format!(
                "the device side of clEnqueue{}Buffer: that transfer {} host to host",
                if self.what == Use::Read { "Read" } else { "Write" },
                if rewritten { "now copies" } else { "would then copy" }
            ),
            Use::Copy => "in clEnqueueCopyBuffer".to_string(),
        };
        let hint = if rewritten {
            "; PINSTREAM_LAYER_POLICY=off keeps such buffers in VRAM"
        } else {
            ""
        };
        format!(
            "{subject} #{} ({}) {what}{hint}",
            self.buffer_no,
            human(self.size)
        )
    }
}

#[derive(Debug, Clone)]
struct Tracked {
    id: u64,
    buffer_no: u64,
    size: u64,
    kind: Kind,
    sub: bool,
    kernels: Vec<usize>,
    transfer_noticed: bool,
}

/// Counts of one kind of buffer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Buffers.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes alive now.
    pub live: u64,
    /// Most bytes alive at once.
    pub peak: u64,
}

/// Everything the summary reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    /// Buffers rewritten.
    pub rewritten: Tally,
    /// Buffers the rewrite would have taken (audit).
    pub would_rewrite: Tally,
    /// Buffers left as asked, by reason: (count, bytes). Only buffers the driver made.
    pub kept: BTreeMap<&'static str, (u64, u64)>,
    /// Creations left as asked that the driver refused (the program got its error back):
    /// counted apart, with no bytes, since nothing was made.
    pub refused: u64,
    /// `clSetKernelArg` calls binding a tracked buffer.
    pub kernel_binds: u64,
    /// Distinct tracked buffers bound to a kernel at least once.
    pub bound_buffers: u64,
    /// Reads and writes whose device side was a tracked buffer.
    pub transfers: u64,
    /// Copies from or to a tracked buffer.
    pub copies: u64,
}

/// The books.
#[derive(Debug, Default)]
pub struct Ledger {
    live: HashMap<usize, Tracked>,
    next_id: u64,
    buffers: u64,
    bound: HashSet<u64>,
    totals: Totals,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Ledger::default()
    }

    /// What the ledger has counted so far.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Tracked buffers alive now (sub-buffers included).
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    fn tally(&mut self, kind: Kind) -> &mut Tally {
        match kind {
            Kind::Rewritten => &mut self.totals.rewritten,
            Kind::WouldRewrite => &mut self.totals.would_rewrite,
        }
    }

    /// A new buffer at `mem`; returns (its id for the release callback, its number for logs).
    pub fn track(&mut self, mem: usize, size: u64, kind: Kind) -> (u64, u64) {
        self.next_id += 1;
        self.buffers += 1;
        let (id, buffer_no) = (self.next_id, self.buffers);
        let t = self.tally(kind);
        t.count += 1;
        t.bytes += size;
        t.live += size;
        t.peak = t.peak.max(t.live);
        self.insert(
            mem,
            Tracked {
                id,
                buffer_no,
                size,
                kind,
                sub: false,
                kernels: Vec::new(),
                transfer_noticed: false,
            },
        );
        (id, buffer_no)
    }

    /// A sub-buffer at `sub` of the buffer at `parent`: tracked (it is the same storage) when
    /// the parent is. Returns its id for the release callback.
    pub fn track_sub(&mut self, sub: usize, parent: usize, size: u64) -> Option<u64> {
        let p = self.live.get(&parent)?.clone();
        self.next_id += 1;
        let id = self.next_id;
        self.insert(
            sub,
            Tracked {
                id,
                size,
                sub: true,
                kernels: Vec::new(),
                transfer_noticed: false,
                ..p
            },
        );
        Some(id)
    }

    fn insert(&mut self, mem: usize, t: Tracked) {
        // A handle the driver reuses before the old object's callback ran: forget the old one.
        if let Some(old) = self.live.insert(mem, t) {
            self.forget(&old);
        }
    }

    /// The object at `mem` with id `id` was destroyed (its destructor callback ran).
    pub fn release(&mut self, mem: usize, id: u64) {
        if self.live.get(&mem).is_some_and(|t| t.id == id) {
            if let Some(t) = self.live.remove(&mem) {
                self.forget(&t);
            }
        }
    }

    fn forget(&mut self, t: &Tracked) {
        if !t.sub {
            let tally = self.tally(t.kind);
            tally.live = tally.live.saturating_sub(t.size);
        }
    }

    /// A creation left as the program asked, and why; `mem` is what the driver returned (0 when
    /// it refused: counted in [`Totals::refused`], adding no bytes).
    pub fn kept(&mut self, why: &Skip, size: u64, mem: usize) {
        if mem == 0 {
            self.totals.refused += 1;
            return;
        }
        let e = self.totals.kept.entry(why.key()).or_default();
        e.0 += 1;
        e.1 += size;
    }

    /// The program used the object at `mem`; a notice when the use deserves a log line.
    pub fn used(&mut self, mem: usize, what: Use) -> Option<Notice> {
        let t = self.live.get_mut(&mem)?;
        let first = match what {
            Use::KernelArg(kernel) => {
                self.totals.kernel_binds += 1;
                let new = !t.kernels.contains(&kernel) && t.kernels.len() < KERNELS_REMEMBERED;
                if new {
                    t.kernels.push(kernel);
                }
                if self.bound.insert(t.buffer_no) {
                    self.totals.bound_buffers += 1;
                }
                new
            }
            Use::Read | Use::Write => {
                self.totals.transfers += 1;
                !std::mem::replace(&mut t.transfer_noticed, true)
            }
            Use::Copy => {
                self.totals.copies += 1;
                false
            }
        };
        first.then_some(Notice {
            buffer_no: t.buffer_no,
            size: t.size,
            kind: t.kind,
            what,
        })
    }

    /// The summary printed at exit (`PINSTREAM_LAYER_LOG=1`, or the audit policy).
    pub fn summary(&self, policy: Policy, way_in: &str) -> Vec<String> {
        let t = &self.totals;
        let mut out = vec![format!(
            "summary (policy {policy}, entered through {way_in}):"
        )];
        let (label, tally) = match policy {
            Policy::Audit => ("would be rewritten (audit: nothing was)", &t.would_rewrite),
            _ => ("rewritten to pinned host memory", &t.rewritten),
        };
        out.push(format!(
            "  {label}: {} buffers, {} in all, at most {} at once: the VRAM the classic recipe takes for them on NVIDIA",
            tally.count, human(tally.bytes), human(tally.peak)
        ));
        let kept: Vec<String> = t
            .kept
            .iter()
            .map(|(why, (n, bytes))| format!("{n} {why} ({})", human(*bytes)))
            .collect();
        out.push(format!(
            "  left as asked: {}",
            if kept.is_empty() {
                "none".into()
            } else {
                kept.join(", ")
            }
        ));
        if t.refused > 0 {
            out.push(format!(
                "  refused by the driver (its error went back to the program; nothing made): {}",
                t.refused
            ));
        }
        out.push(format!(
            "  kernel bindings of those buffers: {} ({} buffers): such kernels read host memory over PCIe",
            t.kernel_binds, t.bound_buffers
        ));
        out.push(format!(
            "  reads/writes with one as the device side: {} (host-to-host copies); copies from or to one: {}",
            t.transfers, t.copies
        ));
        out.push(format!(
            "  still alive at exit: {} (released: {})",
            human(tally.live),
            human(tally.bytes - tally.live)
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::Support;

    const GIB: u64 = 1 << 30;

    #[test]
    fn rewritten_bytes_peak_and_release() {
        let mut l = Ledger::new();
        let (a, no_a) = l.track(0x10, GIB, Kind::Rewritten);
        let (_, no_b) = l.track(0x20, 2 * GIB, Kind::Rewritten);
        assert_eq!((no_a, no_b), (1, 2));
        l.release(0x10, a);
        l.track(0x30, GIB, Kind::Rewritten);
        let t = l.totals().rewritten;
        assert_eq!(
            t,
            Tally {
                count: 3,
                bytes: 4 * GIB,
                live: 3 * GIB,
                peak: 3 * GIB
            }
        );
        assert_eq!(l.live_count(), 2);
    }

    #[test]
    fn a_stale_release_of_a_reused_handle_keeps_the_new_buffer() {
        let mut l = Ledger::new();
        let (old, _) = l.track(0x10, GIB, Kind::Rewritten);
        let (new, _) = l.track(0x10, GIB, Kind::Rewritten);
        assert_eq!(
            l.totals().rewritten.live,
            GIB,
            "the replaced entry is forgotten"
        );
        l.release(0x10, old);
        assert_eq!(l.live_count(), 1);
        l.release(0x10, new);
        assert_eq!(l.live_count(), 0);
        assert_eq!(l.totals().rewritten.live, 0);
    }

    #[test]
    fn the_first_binding_per_kernel_is_noticed_and_every_one_counted() {
        let mut l = Ledger::new();
        l.track(0x10, GIB, Kind::Rewritten);
        let n = l.used(0x10, Use::KernelArg(0xA)).expect("first binding");
        assert_eq!((n.buffer_no, n.kind), (1, Kind::Rewritten));
        assert!(n.line().contains("bound to a kernel"), "{}", n.line());
        assert_eq!(l.used(0x10, Use::KernelArg(0xA)), None);
        assert!(l.used(0x10, Use::KernelArg(0xB)).is_some());
        assert_eq!(
            l.used(0x99, Use::KernelArg(0xA)),
            None,
            "untracked handles are ignored"
        );
        assert_eq!((l.totals().kernel_binds, l.totals().bound_buffers), (3, 1));
    }

    #[test]
    fn transfers_are_noticed_once_and_copies_only_counted() {
        let mut l = Ledger::new();
        l.track(0x10, GIB, Kind::WouldRewrite);
        let n = l.used(0x10, Use::Write).expect("first write");
        assert!(
            n.line()
                .contains("WriteBuffer: that transfer would then copy host to host"),
            "{}",
            n.line()
        );
        assert_eq!(l.used(0x10, Use::Read), None);
        assert_eq!(l.used(0x10, Use::Copy), None);
        assert_eq!((l.totals().transfers, l.totals().copies), (2, 1));
    }

    #[test]
    fn sub_buffers_of_tracked_buffers_are_tracked_without_double_counting() {
        let mut l = Ledger::new();
        l.track(0x10, GIB, Kind::Rewritten);
        let sub = l.track_sub(0x11, 0x10, GIB / 2).expect("parent tracked");
        assert_eq!(l.track_sub(0x21, 0x20, 1), None, "untracked parent");
        let n = l.used(0x11, Use::KernelArg(0xA)).expect("sub-buffer bound");
        assert_eq!((n.buffer_no, n.size), (1, GIB / 2));
        l.release(0x11, sub);
        assert_eq!(l.totals().rewritten.live, GIB);
    }

    #[test]
    fn the_summary_names_counts_bytes_and_reasons() {
        let mut l = Ledger::new();
        for i in 0..10 {
            l.track(0x100 + i, GIB, Kind::Rewritten);
        }
        l.kept(&Skip::Small { min_size: 1 << 20 }, 4096, 0x200);
        l.kept(
            &Skip::Unsupported(Support::Missing {
                device: "cpu".into(),
            }),
            2 * GIB,
            0x201,
        );
        l.used(0x100, Use::KernelArg(1));
        let s = l.summary(Policy::Rewrite, "LD_PRELOAD").join("\n");
        assert!(
            s.contains("10 buffers, 10.00 GiB in all, at most 10.00 GiB at once"),
            "{s}"
        );
        assert!(s.contains("1 below the minimum size (4.00 KiB)"), "{s}");
        assert!(
            s.contains("1 device without cl_nv_create_buffer (2.00 GiB)"),
            "{s}"
        );
        assert!(
            s.contains("kernel bindings of those buffers: 1 (1 buffers)"),
            "{s}"
        );
        let audit = Ledger::new()
            .summary(Policy::Audit, "OPENCL_LAYERS")
            .join("\n");
        assert!(
            audit.contains("would be rewritten (audit: nothing was): 0 buffers"),
            "{audit}"
        );
        assert!(audit.contains("left as asked: none"), "{audit}");
        assert!(
            s.contains("still alive at exit: 10.00 GiB (released: 0 B)"),
            "{s}"
        );
    }

    /// Issue 21 class 9: a creation the driver refused (a size it cannot make, say) is not a
    /// buffer left as asked; it adds no bytes, and is counted apart.
    #[test]
    fn refused_creations_add_no_bytes_and_are_counted_apart() {
        let mut l = Ledger::new();
        l.kept(&Skip::NotAllocHostPtr, u64::MAX - 7, 0);
        l.kept(&Skip::Small { min_size: 1 << 20 }, 4096, 0);
        l.kept(&Skip::NotAllocHostPtr, 4096, 0x10);
        assert_eq!(l.totals().refused, 2);
        assert_eq!(
            l.totals().kept.get("no ALLOC_HOST_PTR"),
            Some(&(1, 4096)),
            "only the buffer made is kept"
        );
        assert_eq!(l.totals().kept.get("below the minimum size"), None);
        let s = l.summary(Policy::Rewrite, "LD_PRELOAD").join("\n");
        assert!(
            s.contains("left as asked: 1 no ALLOC_HOST_PTR (4.00 KiB)"),
            "{s}"
        );
        assert!(s.contains("refused by the driver"), "{s}");
        assert!(!s.contains("GiB"), "no refused bytes anywhere:\n{s}");
    }
}
