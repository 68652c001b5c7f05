//! The bounds guard: every buffer a kernel is bound to (each slot's input and output blocks,
//! the residents, and the host-resident buffers, [`super::Hosted`], whose memory the caller
//! makes with the zone) has a guard zone after its usable bytes, and the head of that zone
//! holds a canary. After each block's kernel the head is read back (a small read on the
//! compute queue, before the slot's next kernel: `Watch`) and compared with the canary when
//! the block completes: a kernel that wrote past the end of a buffer stops the run with
//! [`super::error::OverrunError`], naming the kernel, the argument, the block and how far it
//! wrote.
//!
//! On a CPU device (PoCL) the buffers are the process's own heap memory, and a host-resident
//! buffer is host memory on every device: without the zone, a write past a buffer lands in
//! the allocator's metadata or a neighbour and the process dies later (`free(): invalid next
//! size`). The zone is part of the same allocation, so such an overrun lands in it and the
//! process survives to report it: after a streamed block, as large as the block or as what a
//! kernel indexing by its count could write past it ([`guard_bytes`]); after a host-resident
//! buffer, which kernels index by data, as large as the buffer up to 1 MiB
//! ([`hosted_guard_bytes`]). Generic over [`crate::backend::api::Api`]: CUDA and Vulkan get
//! the same guard.

use super::error::{OverrunError, StreamError};
use super::ring::stage_error;
use crate::backend::api::Api;
use crate::backend::lanes::{HostView, Lanes, ReadBack};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// Bytes of the guard's head that hold the canary and are read back after each kernel.
pub const PROBE: usize = 4096;

/// Whether a run guards its buffers ([`super::StreamOptions::check_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BoundsCheck {
    /// Guard on CPU devices, where it is cheap and where an overrun corrupts the process;
    /// not on GPUs.
    #[default]
    Auto,
    /// Guard on every device (on a GPU: a small read per buffer per block, and the guard
    /// zones in the VRAM budget).
    On,
    /// No guard: a kernel that writes past its buffers corrupts memory unseen (on a CPU
    /// device, the process's own heap).
    Off,
}

impl BoundsCheck {
    /// Whether a device guards its buffers; `cpu`: the device is a CPU (its buffers are
    /// host memory).
    pub fn applies(self, cpu: bool) -> bool {
        match self {
            BoundsCheck::Auto => cpu,
            BoundsCheck::On => true,
            BoundsCheck::Off => false,
        }
    }
}

impl FromStr for BoundsCheck {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BoundsCheck::Auto),
            "on" => Ok(BoundsCheck::On),
            "off" => Ok(BoundsCheck::Off),
            _ => Err(format!("`{s}`: give on, off or auto")),
        }
    }
}

impl fmt::Display for BoundsCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BoundsCheck::Auto => "auto",
            BoundsCheck::On => "on",
            BoundsCheck::Off => "off",
        })
    }
}

/// Guard bytes after a buffer of `usable` bytes into which a kernel that indexes by its
/// element count could write `reach` bytes (an input: its own size; the output of a run of
/// `in_per_out` inputs per output written one element per input: `in_per_out` times its
/// size): as many as the buffer and enough for all of `reach`, rounded up to whole
/// [`PROBE`]s (at least one). So the common overruns (a shifted index, a bound by the input
/// count instead of the output count) stay inside the allocation.
pub fn guard_bytes(usable: usize, reach: usize) -> usize {
    let past = usable.max(reach.saturating_sub(usable));
    past.div_ceil(PROBE).max(1).saturating_mul(PROBE)
}

/// Bytes to allocate for a buffer of `usable` bytes (and `reach`, see [`guard_bytes`]),
/// guarded or not; `usize::MAX` (which no allocation gets) where the sum would not fit.
pub fn allocation(usable: usize, reach: usize, guarded: bool) -> usize {
    with_zone(usable, guarded.then(|| guard_bytes(usable, reach)))
}

/// The most guard bytes after a host-resident buffer ([`hosted_guard_bytes`]): 1 MiB.
pub const HOSTED_ZONE_MAX: usize = 1 << 20;

/// Guard bytes after a host-resident buffer ([`super::Hosted`], the CLI's `--host-table`) of
/// `len` bytes: as many as the buffer in whole [`PROBE`]s (at least one), but at most
/// [`HOSTED_ZONE_MAX`].
///
/// A streamed block's zone is as large as what a kernel bounded by the wrong count could
/// write ([`guard_bytes`]): kernels index blocks by the element count the run passes. A
/// host-resident table is indexed by data (row ids, hash slots), not by a count the run
/// passes, so its overruns are the ones of an index one entry or one row too far (an id
/// equal to the row count, a shifted index), a row at most; a zone as large as a
/// multi-gigabyte table guarded nothing more and doubled the pinned memory a table takes (or
/// refused one above half the largest buffer). 1 MiB holds a row of 256 Ki `float`s and
/// costs at most 1 MiB per table; a table below 1 MiB keeps a zone as large as itself.
pub fn hosted_guard_bytes(len: usize) -> usize {
    guard_bytes(len, len).min(HOSTED_ZONE_MAX)
}

/// Bytes to make the memory of a host-resident buffer of `len` bytes, with its zone
/// ([`hosted_guard_bytes`]) where `guarded`; `usize::MAX` where the sum would not fit.
pub fn hosted_allocation(len: usize, guarded: bool) -> usize {
    with_zone(len, guarded.then(|| hosted_guard_bytes(len)))
}

/// `usable` bytes and a zone of `guard` bytes, if any; `usize::MAX` past the address space.
fn with_zone(usable: usize, guard: Option<usize>) -> usize {
    usable.saturating_add(guard.unwrap_or(0))
}

/// The canary: [`PROBE`] bytes no kernel writes by chance (no zero, no 0xff, no repeat of
/// a 4-byte word; each 4-byte word is neither a small integer nor an ordinary float).
pub fn canary() -> Vec<u8> {
    (0..PROBE)
        .map(|i| {
            let mixed = crate::units::value(0x9e37_79b9, (i / 8) as u64);
            match mixed.to_le_bytes()[i % 8] {
                0 => 0x5a,
                0xff => 0xa5,
                b => b,
            }
        })
        .collect()
}

/// How far past the end a kernel wrote, as seen in the guard's head `seen` against the
/// `canary`: the offset just past the last byte that differs (so a write of 4 bytes right
/// after the end gives 4), or `None` when the head is intact.
pub fn overrun(seen: &[u8], canary: &[u8]) -> Option<usize> {
    seen.iter()
        .zip(canary)
        .rposition(|(s, c)| s != c)
        .map(|last| last + 1)
}

/// A buffer a kernel is bound to, with a guard zone after its `usable` bytes.
pub(crate) struct Guarded<'s, A: Api> {
    /// The device buffer (usable bytes, then the guard).
    pub(crate) buffer: &'s A::Buffer,
    /// Bytes the kernel may write.
    pub(crate) usable: usize,
    /// Bytes of the guard zone after them.
    pub(crate) guard: usize,
    /// The kernel parameter it is bound to.
    pub(crate) argument: String,
    /// What the run binds there: `input 0`, `the output block`, `resident 1`, `the
    /// host-resident buffer`.
    pub(crate) role: String,
    /// A host-resident buffer ([`super::Hosted`]).
    pub(crate) hosted: bool,
}

/// The guard heads of one block's buffers, read after its kernel.
pub(crate) struct Reads<'s, A: Api> {
    block: usize,
    slot: usize,
    /// The last block whose kernel ran before the read: a resident's guard first seen
    /// written in this read was written by that kernel.
    covers: usize,
    heads: Vec<ReadBack<'s, A>>,
}

/// The guards of one device's ring: each slot's buffers and the residents, and the read-backs
/// of the blocks in flight, oldest first.
///
/// A block's heads are read just before its slot's next kernel (or, for the last blocks of
/// the ring, when they complete), not right behind its own kernel: on a GPU the read into
/// host memory that is not pinned makes the host wait for the queue up to it, and there it
/// waits for kernels the device has long queued (the ring stays a slot ahead) instead of for
/// the kernel just launched. A slot's buffers are written by its own kernels only, so the
/// read still names the block exactly. The buffers every launch binds (residents,
/// host-resident buffers) are read with them, and the read names the last kernel before it:
/// exact, because a read comes before every kernel but the first and every read is checked,
/// in order. Before each of the first kernels on a slot, where no block of the slot is left
/// to read, those shared heads are read alone ([`Self::early`]).
pub(crate) struct Watch<'s, A: Api> {
    /// The [`canary`], which the run keeps for its length.
    canary: &'s [u8],
    kernel: String,
    in_per_out: usize,
    /// Blocks in the run: the watch names a run's steps by `pass * blocks + block` (the
    /// block itself in the first pass), its messages by the block.
    blocks: usize,
    /// Each slot's guarded buffers.
    slots: Vec<Vec<Guarded<'s, A>>>,
    /// The buffers bound in every slot's launch: the residents, then the host-resident
    /// buffers.
    residents: Vec<Guarded<'s, A>>,
    /// The guards' heads as read, by block, oldest first.
    pending: VecDeque<Reads<'s, A>>,
    /// The shared heads alone, as read before each of the first kernels on a slot, each with
    /// the block whose kernel ran last before the read, oldest first.
    early: VecDeque<(usize, Vec<ReadBack<'s, A>>)>,
    /// Per slot, the block whose kernel ran there last and whose heads are not read yet.
    unread: Vec<Option<usize>>,
    /// The last block whose kernel was launched, once one was.
    last: Option<usize>,
}

impl<'s, A: Api> Watch<'s, A> {
    /// The guards of `kernel`'s ring (`in_per_out` input elements per output element, over
    /// `blocks` blocks a pass): each slot's buffers and the buffers every launch binds
    /// (residents, host-resident buffers), checked against `canary`. Its methods take a
    /// step of the run as `pass * blocks + block`.
    pub(crate) fn new(
        canary: &'s [u8],
        (kernel, in_per_out, blocks): (String, usize, usize),
        slots: Vec<Vec<Guarded<'s, A>>>,
        residents: Vec<Guarded<'s, A>>,
    ) -> Self {
        Watch {
            canary,
            kernel,
            in_per_out,
            blocks: blocks.max(1),
            unread: vec![None; slots.len()],
            slots,
            residents,
            pending: VecDeque::new(),
            early: VecDeque::new(),
            last: None,
        }
    }

    /// Writes the canary into the head of every guard on `lane`, and waits for it.
    pub(crate) fn arm(&self, lanes: &Lanes<'s, A>, lane: usize) -> Result<(), A::Error> {
        let canary = HostView::reading(vec![self.canary]);
        let all = self.slots.iter().flatten().chain(&self.residents);
        for g in all {
            for e in lanes.upload(lane, g.buffer, g.usable, &canary, 0..PROBE, &[])? {
                lanes.wait(&e)?;
            }
        }
        Ok(())
    }

    /// Before block `block`'s kernel on `slot`, on the kernel's `lane`: reads the heads of
    /// the block that ran there before, or, on a slot not used yet, the shared heads alone
    /// (after the kernel launched last, if any).
    pub(crate) fn before_kernel(
        &mut self,
        lanes: &Lanes<'s, A>,
        lane: usize,
        (block, slot): (usize, usize),
    ) -> Result<(), StreamError> {
        match (self.unread[slot].take(), self.last) {
            (Some(prev), _) => self.read(lanes, lane, prev, slot)?,
            (None, Some(last)) if !self.residents.is_empty() => {
                let heads = self.heads(lanes, lane, &self.residents, block)?;
                self.early.push_back((last, heads));
            }
            (None, _) => {}
        }
        self.unread[slot] = Some(block);
        self.last = Some(block);
        Ok(())
    }

    /// Enqueues the reads of the heads of `guards` on `lane` (for block `block`'s messages).
    fn heads(
        &self,
        lanes: &Lanes<'s, A>,
        lane: usize,
        guards: &[Guarded<'s, A>],
        block: usize,
    ) -> Result<Vec<ReadBack<'s, A>>, StreamError> {
        (guards.iter())
            .map(|g| lanes.read_back(lane, g.buffer, g.usable, PROBE, &[]))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| stage_error(block % self.blocks, "bounds check", e))
    }

    /// Enqueues the read of block `block`'s heads on `slot` (after every kernel so far).
    fn read(
        &mut self,
        lanes: &Lanes<'s, A>,
        lane: usize,
        block: usize,
        slot: usize,
    ) -> Result<(), StreamError> {
        let mut heads = self.heads(lanes, lane, &self.slots[slot], block)?;
        heads.extend(self.heads(lanes, lane, &self.residents, block)?);
        let covers = self.last.unwrap_or(block);
        self.pending.push_back(Reads {
            block,
            slot,
            covers,
            heads,
        });
        Ok(())
    }

    /// Compares block `block`'s guard heads with the canary (reading them now if no later
    /// kernel ran on its slot), after the shared heads read alone before the first kernels.
    pub(crate) fn check(
        &mut self,
        lanes: &Lanes<'s, A>,
        lane: usize,
        block: usize,
    ) -> Result<(), StreamError> {
        // Read before any block's heads (before the first kernels): checked first, in order.
        while let Some((by, heads)) = self.early.pop_front() {
            let shared = self.residents.iter().map(|g| (g, by));
            self.compare(shared.zip(&heads), block)?;
        }
        if self.pending.front().is_none_or(|r| r.block != block) {
            let Some(slot) = self.unread.iter().position(|&b| b == Some(block)) else {
                return Ok(());
            };
            self.unread[slot] = None;
            self.read(lanes, lane, block, slot)?;
        }
        let Some(reads) = self.pending.pop_front() else {
            return Ok(());
        };
        let own = self.slots[reads.slot].iter().map(|g| (g, reads.block));
        let shared = self.residents.iter().map(|g| (g, reads.covers));
        self.compare(own.chain(shared).zip(&reads.heads), block)
    }

    /// Compares each guard's head as read (`by`: the block a write there is named by) with
    /// the canary: the first one written is the run's overrun.
    fn compare<'g>(
        &self,
        read: impl Iterator<Item = ((&'g Guarded<'s, A>, usize), &'g ReadBack<'s, A>)>,
        block: usize,
    ) -> Result<(), StreamError>
    where
        's: 'g,
    {
        for ((g, by), r) in read {
            let seen = r
                .bytes()
                .map_err(|e| stage_error(block % self.blocks, "bounds check", e))?;
            if let Some(past) = overrun(seen, self.canary) {
                return Err(self.violation(g, by, past).into());
            }
        }
        Ok(())
    }

    fn violation(&self, g: &Guarded<'s, A>, block: usize, past: usize) -> OverrunError {
        OverrunError {
            kernel: self.kernel.clone(),
            argument: g.argument.clone(),
            role: g.role.clone(),
            block: block % self.blocks,
            // The watch's key counts the blocks of every pass before (`pass * blocks + block`);
            // a caller's carried pass is renumbered by the ring.
            pass: u32::try_from(block / self.blocks).unwrap_or(u32::MAX),
            size: g.usable,
            guard: g.guard,
            past,
            at_least: past == PROBE,
            in_per_out: self.in_per_out,
            hosted: g.hosted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_intact_guard_passes_and_a_written_one_says_how_far() {
        let c = canary();
        assert_eq!(overrun(&c, &c), None);
        let mut seen = c.clone();
        seen[..4].copy_from_slice(&1.5f32.to_ne_bytes());
        assert_eq!(overrun(&seen, &c), Some(4));
        seen[100] ^= 1;
        assert_eq!(overrun(&seen, &c), Some(101));
        let zeros = vec![0u8; PROBE];
        assert_eq!(
            overrun(&zeros, &c),
            Some(PROBE),
            "every byte differs from 0"
        );
    }

    #[test]
    fn the_canary_has_no_zero_no_ff_and_no_repeated_word() {
        let c = canary();
        assert_eq!(c.len(), PROBE);
        assert!(c.iter().all(|&b| b != 0 && b != 0xff));
        let words: std::collections::HashSet<&[u8]> = c.chunks(4).collect();
        assert_eq!(words.len(), PROBE / 4);
    }

    #[test]
    fn the_guard_holds_the_buffer_or_its_reach_in_whole_probes() {
        assert_eq!(guard_bytes(0, 0), PROBE);
        assert_eq!(guard_bytes(1, 1), PROBE);
        assert_eq!(guard_bytes(PROBE + 1, PROBE + 1), 2 * PROBE);
        assert_eq!(allocation(1 << 20, 1 << 20, true), 2 << 20);
        assert_eq!(allocation(1 << 20, 1 << 20, false), 1 << 20);
        // An output of a --reduce 4 run written one element per input: three times past.
        assert_eq!(guard_bytes(1 << 20, 4 << 20), 3 << 20);
        assert_eq!(guard_bytes(1 << 20, 2 << 20), 1 << 20);
    }

    /// A host-resident buffer's zone is as large as the buffer up to 1 MiB: a table of
    /// gigabytes takes 1 MiB more, not twice its size (it took a zone as large as itself).
    #[test]
    fn a_host_resident_zone_is_at_least_a_probe_and_at_most_1_mib() {
        assert_eq!(hosted_guard_bytes(0), PROBE);
        assert_eq!(hosted_guard_bytes(64), PROBE);
        assert_eq!(hosted_guard_bytes(64_000), 16 * PROBE);
        assert_eq!(hosted_guard_bytes(HOSTED_ZONE_MAX), HOSTED_ZONE_MAX);
        assert_eq!(hosted_guard_bytes(4 << 30), HOSTED_ZONE_MAX);
        assert_eq!(hosted_allocation(4 << 30, true), (4 << 30) + (1 << 20));
        assert_eq!(hosted_allocation(4 << 30, false), 4 << 30);
        assert_eq!(hosted_allocation(usize::MAX - 1, true), usize::MAX);
    }

    #[test]
    fn auto_guards_cpus_only() {
        assert!(BoundsCheck::Auto.applies(true));
        assert!(!BoundsCheck::Auto.applies(false));
        assert!(BoundsCheck::On.applies(false));
        assert!(!BoundsCheck::Off.applies(true));
        assert_eq!("on".parse::<BoundsCheck>(), Ok(BoundsCheck::On));
        assert!("yes"
            .parse::<BoundsCheck>()
            .unwrap_err()
            .contains("on, off or auto"));
    }
}
