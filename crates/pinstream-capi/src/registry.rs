//! The process-wide registry of what pinstream pinned for C callers, keyed by API and address
//! range: the OpenCL calls' ranges (`psHost*`) and the Vulkan calls' (`psVkHost*`) in one
//! registry, one API's ranges never overlapping (the same memory may be pinned for both).
//!
//! An adapter over the library's [`Registry`]: it maps refusals to `PS_ERROR_*` codes and
//! sentences, each naming the calls of the range's own API. A registration reserves its range
//! before the (slow) pinning, so that two threads registering overlapping memory cannot both
//! succeed; pinning and releasing run outside the registry's lock, so calls on other ranges
//! never wait for them.

use crate::error::{
    psError_t, Failure, PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
    PS_ERROR_HOST_MEMORY_NOT_REGISTERED, PS_ERROR_INTERNAL, PS_ERROR_INVALID_HOST_POINTER,
    PS_ERROR_INVALID_VALUE,
};
use pinstream::host::ranges::{Claim, Occupant, Pinning, Refusal, Registry};
use pinstream::host::HostRegion;
use std::ops::Range;

/// The API a range was pinned for: its calls' names, and the ranges it may not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Api {
    /// `psHostAlloc` / `psHostRegister`, in a `cl_context`.
    OpenCl,
    /// `psVkHostAlloc` / `psVkHostRegister`, in a `VkDevice`.
    #[cfg(feature = "vulkan")]
    Vulkan,
}

/// The names of an API's calls, as refusals and fixes give them.
struct Calls {
    alloc: &'static str,
    register: &'static str,
    free: &'static str,
    unregister: &'static str,
    allocated: &'static str,
    registered: &'static str,
    free_fix: &'static str,
    unregister_fix: &'static str,
}

impl Api {
    /// Every API of this build.
    const ALL: &[Api] = &[
        Api::OpenCl,
        #[cfg(feature = "vulkan")]
        Api::Vulkan,
    ];

    fn calls(self) -> &'static Calls {
        match self {
            Api::OpenCl => &Calls {
                alloc: "psHostAlloc",
                register: "psHostRegister",
                free: "psHostFree",
                unregister: "psHostUnregister",
                allocated: "allocated by psHostAlloc",
                registered: "registered by psHostRegister",
                free_fix: "psHostFree takes a pointer psHostAlloc returned, once",
                unregister_fix: "psHostUnregister takes the pointer given to psHostRegister, once",
            },
            #[cfg(feature = "vulkan")]
            Api::Vulkan => &Calls {
                alloc: "psVkHostAlloc",
                register: "psVkHostRegister",
                free: "psVkHostFree",
                unregister: "psVkHostUnregister",
                allocated: "allocated by psVkHostAlloc",
                registered: "registered by psVkHostRegister",
                free_fix: "psVkHostFree takes a pointer psVkHostAlloc returned, once",
                unregister_fix:
                    "psVkHostUnregister takes the pointer given to psVkHostRegister, once",
            },
        }
    }
}

/// How a range came to pinstream, whatever the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `psHostAlloc` (`psVkHostAlloc`): pinstream's memory.
    Allocated,
    /// `psHostRegister` (`psVkHostRegister`): the caller's memory.
    Registered,
}

/// How a range came, in the one registry: through which API's calls, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Came {
    pub api: Api,
    pub kind: Kind,
}

impl Pinning for Came {
    type Api = Api;
    fn api(self) -> Api {
        self.api
    }
}

impl Came {
    /// How it came, e.g. "allocated by psHostAlloc".
    fn describe(self) -> &'static str {
        let c = self.api.calls();
        match self.kind {
            Kind::Allocated => c.allocated,
            Kind::Registered => c.registered,
        }
    }

    /// The call that made it.
    fn made_by(self) -> &'static str {
        let c = self.api.calls();
        match self.kind {
            Kind::Allocated => c.alloc,
            Kind::Registered => c.register,
        }
    }

    /// The call that releases it.
    fn release_call(self) -> &'static str {
        let c = self.api.calls();
        match self.kind {
            Kind::Allocated => c.free,
            Kind::Registered => c.unregister,
        }
    }

    /// What that call takes, for a pointer in no range.
    fn fix(self) -> &'static str {
        let c = self.api.calls();
        match self.kind {
            Kind::Allocated => c.free_fix,
            Kind::Registered => c.unregister_fix,
        }
    }

    /// The code of a release refused.
    fn refused_code(self) -> psError_t {
        match self.kind {
            Kind::Allocated => PS_ERROR_INVALID_HOST_POINTER,
            Kind::Registered => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
        }
    }
}

/// A pinned range and what the caller may ask about it, of any API: `H` is the API's pinned
/// memory (OpenCL's [`HostRegion`], Vulkan's `VulkanHost`).
pub(crate) struct Block<H> {
    /// The block imported into devices of pinstream's own (a Vulkan stream's), dropped with
    /// the block or when their stream is destroyed. First: fields drop in order, and the
    /// imports of the memory go before `host` unmaps it (`psVkHostAlloc`'s).
    #[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
    pub guests: Guests,
    /// The pinned memory; for a Vulkan registration, over the whole pages the range touches.
    pub host: H,
    pub kind: Kind,
    /// The caller's bytes.
    pub range: Range<usize>,
    /// How it was pinned and why, as the caller asked for it.
    pub note: String,
    /// Devices of the context (Vulkan: the one device).
    pub devices: usize,
}

/// A block's imports into devices of pinstream's own ([`Guest`]), shared with the streams
/// that made them.
pub(crate) type Guests = std::sync::Arc<std::sync::Mutex<Vec<Guest>>>;

/// One import of a block into a device of pinstream's own: the stream (its handle) whose
/// device it is, and the import (`VulkanHost`), which a run holds too while it copies.
#[cfg_attr(not(feature = "vulkan"), allow(dead_code))]
pub(crate) struct Guest {
    pub owner: usize,
    pub host: std::sync::Arc<dyn std::any::Any + Send + Sync>,
}

/// What the registry holds for a ready range: the API's own block (each boxed: the two are
/// hundreds of bytes apart).
pub(crate) enum Held {
    /// A `psHost*` range.
    Cl(Box<Block<HostRegion>>),
    /// A `psVkHost*` range.
    #[cfg(feature = "vulkan")]
    Vk(Box<Block<pinstream::backend::vulkan::VulkanHost>>),
}

/// An API's pinned memory as the registry keeps it: which API, and its block in and out of
/// [`Held`].
pub(crate) trait Host: Sized {
    /// The API whose calls pin it.
    const API: Api;
    /// `block` as the registry holds it.
    fn held(block: Block<Self>) -> Held;
    /// The block, where `held` is this API's.
    fn block(held: Held) -> Option<Block<Self>>;
    /// The block, where `held` is this API's, mutable.
    fn block_mut(held: &mut Held) -> Option<&mut Block<Self>>;
}

impl Host for HostRegion {
    const API: Api = Api::OpenCl;
    fn held(block: Block<Self>) -> Held {
        Held::Cl(Box::new(block))
    }
    fn block(held: Held) -> Option<Block<Self>> {
        match held {
            Held::Cl(b) => Some(*b),
            #[cfg(feature = "vulkan")]
            Held::Vk(_) => None,
        }
    }
    fn block_mut(held: &mut Held) -> Option<&mut Block<Self>> {
        match held {
            Held::Cl(b) => Some(b),
            #[cfg(feature = "vulkan")]
            Held::Vk(_) => None,
        }
    }
}

#[cfg(feature = "vulkan")]
impl Host for pinstream::backend::vulkan::VulkanHost {
    const API: Api = Api::Vulkan;
    fn held(block: Block<Self>) -> Held {
        Held::Vk(Box::new(block))
    }
    fn block(held: Held) -> Option<Block<Self>> {
        match held {
            Held::Vk(b) => Some(*b),
            Held::Cl(_) => None,
        }
    }
    fn block_mut(held: &mut Held) -> Option<&mut Block<Self>> {
        match held {
            Held::Vk(b) => Some(b),
            Held::Cl(_) => None,
        }
    }
}

/// Every range the C library pinned, of either API.
static RANGES: Registry<Came, Held> = Registry::new();

/// A registration's range reserved while it is pinned: [`Reservation::complete`] turns it
/// into a ready block; dropped uncompleted (an error or a panic on the way), it gives the
/// range back.
pub(crate) struct Reservation<H>(Claim<'static, Came, Held>, std::marker::PhantomData<H>);

impl<H: Host> Reservation<H> {
    /// Stores the registration's block.
    pub(crate) fn complete(self, block: Block<H>) {
        self.0.complete(H::held(block));
    }
}

/// A value kept under another API's key: a bug in this library, never the caller's doing.
fn misfiled(addr: usize) -> Failure {
    Failure::new(
        PS_ERROR_INTERNAL,
        format!("{addr:#x}: the registry holds another API's block there"),
    )
}

/// The failure for a range refused by the registry.
pub(crate) fn refused(range: &Range<usize>, refusal: Refusal<Came>) -> Failure {
    let found = match refusal {
        Refusal::Empty => {
            return Failure::new(PS_ERROR_INVALID_VALUE, "0 bytes: pin at least one byte")
        }
        Refusal::Overlaps(found) => found,
    };
    Failure::new(
        PS_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
        format!(
            "{:#x}..{:#x} overlaps {:#x}..{:#x}, {}: unregister or free that range first, or register only memory pinstream does not already pin",
            range.start, range.end, found.range.start, found.range.end, found.kind.describe()
        ),
    )
}

/// Claims `range` as `came`, pending until completed.
fn claim(range: Range<usize>, came: Came) -> Result<Claim<'static, Came, Held>, Failure> {
    RANGES
        .reserve(range.clone(), came)
        .map_err(|r| refused(&range, r))
}

/// Reserves `range` for a registration through `H`'s API in progress.
pub(crate) fn reserve<H: Host>(range: Range<usize>) -> Result<Reservation<H>, Failure> {
    let came = Came {
        api: H::API,
        kind: Kind::Registered,
    };
    claim(range, came).map(|c| Reservation(c, std::marker::PhantomData))
}

/// Inserts a block pinstream allocated, returning its start; an overlap (a range the caller
/// registered, then freed without unregistering, that the new memory reuses) is refused and
/// the block dropped.
pub(crate) fn insert<H: Host>(block: Block<H>) -> Result<usize, Failure> {
    let range = block.range.clone();
    let came = Came {
        api: H::API,
        kind: block.kind,
    };
    RANGES
        .insert(range.clone(), came, H::held(block))
        .map_err(|r| {
            let fail = refused(&range, r);
            let detail = format!(
                "{} (a registration whose memory was freed without {})",
                fail.detail,
                H::API.calls().unregister
            );
            Failure::new(fail.code, detail)
        })?;
    Ok(range.start)
}

/// Why `addr` cannot be released as `kind` (one sentence and its fix), given the entry that
/// holds it, if any.
fn refusal(addr: usize, kind: Came, found: Option<Occupant<Came>>) -> String {
    let Some(found) = found else {
        let fix = kind.fix();
        return format!("{addr:#x} lies in no range pinstream pinned (never pinned, or released already): {fix}");
    };
    let Range { start, end } = found.range;
    if start == addr && found.kind == kind && found.pending {
        return format!("{addr:#x} is still being registered by another thread: release it once {} has returned", kind.made_by());
    }
    let at = match addr - start {
        0 => format!("{addr:#x} is the start of {start:#x}..{end:#x}"),
        n => format!("{addr:#x} points {n} bytes into {start:#x}..{end:#x}"),
    };
    format!(
        "{at}, {}: pass its start, as {}({start:#x})",
        found.kind.describe(),
        found.kind.release_call()
    )
}

/// Removes the value that starts at `addr` and was made as `came`; the caller drops it
/// (outside the lock: releasing may wait for the driver).
fn take(addr: usize, came: Came) -> Result<Held, Failure> {
    RANGES.take(addr, came).map_err(|found| {
        // A pointer in no range of this API's may be another API's: name the call it takes.
        let found = found.or_else(|| elsewhere(addr, came));
        Failure::new(came.refused_code(), refusal(addr, came, found))
    })
}

/// The entry of another API than `came`'s that holds `addr`, if any (a pointer given to the
/// wrong API's call).
fn elsewhere(addr: usize, came: Came) -> Option<Occupant<Came>> {
    let byte = addr..addr.saturating_add(1);
    let other = Api::ALL.iter().copied().filter(|&api| api != came.api);
    other
        .filter_map(|api| {
            let ready = |f: pinstream::host::ranges::Found<'_, Came, Held>| Occupant {
                range: f.range,
                kind: f.kind,
                pending: false,
            };
            RANGES
                .find(api, byte.clone(), ready)
                .map_or_else(|o| o, Some)
        })
        .next()
}

/// "; it lies in R, allocated by psVkHostAlloc (another API's range)" for a pointer another
/// API's range holds, else nothing.
fn other_api(addr: usize, came: Came) -> String {
    elsewhere(addr, came).map_or_else(String::new, |o| {
        let (start, end) = (o.range.start, o.range.end);
        let how = o.kind.describe();
        format!("; it lies in {start:#x}..{end:#x}, {how} (another API's range)")
    })
}

/// Removes the block of `H`'s API that starts at `addr` and was made as `kind`; the caller
/// drops it (outside the lock: releasing may wait for the driver).
pub(crate) fn remove<H: Host>(addr: usize, kind: Kind) -> Result<Block<H>, Failure> {
    H::block(take(addr, Came { api: H::API, kind })?).ok_or_else(|| misfiled(addr))
}

/// Refuses the first piece `(host pointer, length, device offset)` of a batched copy that
/// leaves or enters a block `psHostAlloc` made: one that starts inside the block and runs
/// past its end, or runs into it from before it, reads or writes memory that is no part of
/// the allocation. `name`: the pointers' array, as the detail names it. Ranges
/// `psHostRegister` pinned are the caller's memory, which may go on around them: not refused.
/// The pieces do not wrap around the address space (checked before).
pub(crate) fn check_pieces(pieces: &[(*mut u8, usize, usize)], name: &str) -> Result<(), Failure> {
    let ranges = pieces.iter().map(|&(p, n, _)| p as usize..p as usize + n);
    let allocated = |c| {
        c == Came {
            api: Api::OpenCl,
            kind: Kind::Allocated,
        }
    };
    let Some((i, found)) = RANGES.first_straddling(Api::OpenCl, ranges, allocated) else {
        return Ok(());
    };
    let (p, n, _) = pieces[i];
    let Range { start, end } = found.range;
    let how = match (p as usize) < start {
        true => format!("run into {start:#x}..{end:#x} from before it"),
        false => {
            let past = p as usize + n - end;
            let unit = if past == 1 { "byte" } else { "bytes" };
            format!("run {past} {unit} past the end of {start:#x}..{end:#x}")
        }
    };
    Err(Failure::new(
        PS_ERROR_INVALID_VALUE,
        format!(
            "{name}[{i}] ({p:p}): its {n} bytes {how}, {}: pass pieces that lie inside the block",
            found.kind.describe()
        ),
    ))
}

/// `f` of the block of `H`'s API containing `addr`, under that API's lock in the registry
/// (`f` must not call into the registry): a release of it on another thread waits for it, so
/// when that returns the block is released, never kept alive by a reader.
pub(crate) fn with_block<H: Host, R>(
    addr: usize,
    f: impl FnOnce(&Block<H>) -> R,
) -> Result<R, Failure> {
    with_block_mut(addr, |b| f(b))
}

/// As [`with_block`], with the block mutable (a zero-copy download writes its region).
pub(crate) fn with_block_mut<H: Host, R>(
    addr: usize,
    f: impl FnOnce(&mut Block<H>) -> R,
) -> Result<R, Failure> {
    let byte = addr..addr.saturating_add(1);
    let found = RANGES.find_mut(H::API, byte, |_, _, held| {
        H::block_mut(held).map(f).ok_or_else(|| misfiled(addr))
    });
    found.map_err(|around| {
        let detail = match around {
            Some(o) => format!(
                "{addr:#x} lies in {:#x}..{:#x}, which another thread is still registering",
                o.range.start, o.range.end
            ),
            None => {
                let (c, came) = (
                    H::API.calls(),
                    Came {
                        api: H::API,
                        kind: Kind::Allocated,
                    },
                );
                format!(
                    "{addr:#x} lies in no range {} or {} pinned{}",
                    c.alloc,
                    c.register,
                    other_api(addr, came)
                )
            }
        };
        Failure::new(PS_ERROR_HOST_MEMORY_NOT_REGISTERED, detail)
    })?
}

#[cfg(test)]
mod tests {
    use super::{Api, Came, Kind};

    #[test]
    fn each_api_names_its_own_calls() {
        let came = |api, kind| Came { api, kind };
        let a = came(Api::OpenCl, Kind::Allocated);
        assert_eq!(
            (a.made_by(), a.release_call()),
            ("psHostAlloc", "psHostFree")
        );
        assert_eq!(a.describe(), "allocated by psHostAlloc");
        let r = came(Api::OpenCl, Kind::Registered);
        assert_eq!(
            (r.made_by(), r.release_call()),
            ("psHostRegister", "psHostUnregister")
        );
        assert!(r.fix().starts_with("psHostUnregister takes"));
        #[cfg(feature = "vulkan")]
        {
            let a = came(Api::Vulkan, Kind::Allocated);
            assert_eq!(
                (a.made_by(), a.release_call()),
                ("psVkHostAlloc", "psVkHostFree")
            );
            let r = came(Api::Vulkan, Kind::Registered);
            assert_eq!(r.describe(), "registered by psVkHostRegister");
            assert!(r.fix().starts_with("psVkHostUnregister takes"));
            assert_ne!(a.refused_code(), r.refused_code());
        }
    }
}
