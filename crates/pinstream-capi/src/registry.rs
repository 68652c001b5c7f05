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
    PS_ERROR_HOST_MEMORY_NOT_REGISTERED, PS_ERROR_INVALID_HOST_POINTER, PS_ERROR_INVALID_VALUE,
};
#[cfg(feature = "vulkan")]
mod vulkan;
use pinstream::host::ranges::{Claim, Occupant, Pinning, Refusal, Registry};
use pinstream::host::HostRegion;
use std::ops::Range;
#[cfg(feature = "vulkan")]
use vulkan::misfiled;
#[cfg(feature = "vulkan")]
pub(crate) use vulkan::{insert_vk, remove_vk, reserve_vk, with_vk_block, VkBlock, VkKind};

/// The API a range was pinned for: its calls' names, and the ranges it may not overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Api {
    /// `psHostAlloc` / `psHostRegister`, in a `cl_context`.
    OpenCl,
    /// `psVkHostAlloc` / `psVkHostRegister`, in a `VkDevice`.
    #[cfg(feature = "vulkan")]
    Vulkan,
}

/// How a range came, in the one registry: through which API's calls, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Came {
    /// The OpenCL calls.
    Cl(Kind),
    /// The Vulkan calls.
    #[cfg(feature = "vulkan")]
    Vk(VkKind),
}

impl Pinning for Came {
    type Api = Api;
    fn api(self) -> Api {
        match self {
            Came::Cl(_) => Api::OpenCl,
            #[cfg(feature = "vulkan")]
            Came::Vk(_) => Api::Vulkan,
        }
    }
}

/// What the registry holds for a ready range: the API's own block.
pub(crate) enum Held {
    /// A `psHost*` range (each block boxed: the two are hundreds of bytes apart).
    Cl(Box<Block>),
    /// A `psVkHost*` range.
    #[cfg(feature = "vulkan")]
    Vk(Box<VkBlock>),
}

/// How a range came to pinstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `psHostAlloc`: pinstream's memory.
    Allocated,
    /// `psHostRegister`: the caller's memory.
    Registered,
}

/// How a range came, as refusals name it: implemented by [`Kind`] and by the Vulkan calls'
/// kind, and through them by [`Came`].
pub(crate) trait RangeKind: Copy + PartialEq {
    /// How it came, e.g. "allocated by psHostAlloc".
    fn describe(self) -> &'static str;
    /// The call that made it.
    fn made_by(self) -> &'static str;
    /// The call that releases it.
    fn release_call(self) -> &'static str;
    /// What that call takes, for a pointer in no range.
    fn fix(self) -> &'static str;
    /// The code of a release refused.
    fn refused_code(self) -> psError_t;
}

/// `$f` of the API's own kind.
macro_rules! by_api {
    ($came:expr, $f:ident) => {
        match $came {
            Came::Cl(k) => k.$f(),
            #[cfg(feature = "vulkan")]
            Came::Vk(k) => k.$f(),
        }
    };
}

impl RangeKind for Came {
    fn describe(self) -> &'static str {
        by_api!(self, describe)
    }
    fn made_by(self) -> &'static str {
        by_api!(self, made_by)
    }
    fn release_call(self) -> &'static str {
        by_api!(self, release_call)
    }
    fn fix(self) -> &'static str {
        by_api!(self, fix)
    }
    fn refused_code(self) -> psError_t {
        by_api!(self, refused_code)
    }
}

impl RangeKind for Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::Allocated => "allocated by psHostAlloc",
            Kind::Registered => "registered by psHostRegister",
        }
    }

    fn made_by(self) -> &'static str {
        match self {
            Kind::Allocated => "psHostAlloc",
            Kind::Registered => "psHostRegister",
        }
    }

    fn release_call(self) -> &'static str {
        match self {
            Kind::Allocated => "psHostFree",
            Kind::Registered => "psHostUnregister",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Kind::Allocated => "psHostFree takes a pointer psHostAlloc returned, once",
            Kind::Registered => "psHostUnregister takes the pointer given to psHostRegister, once",
        }
    }

    fn refused_code(self) -> psError_t {
        match self {
            Kind::Allocated => PS_ERROR_INVALID_HOST_POINTER,
            Kind::Registered => PS_ERROR_HOST_MEMORY_NOT_REGISTERED,
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

/// Every range the C library pinned, of either API.
static RANGES: Registry<Came, Held> = Registry::new();

/// A `psHostRegister` range reserved while it is pinned: [`Reservation::complete`] turns it
/// into a ready block; dropped uncompleted (an error or a panic on the way), it gives the
/// range back.
pub(crate) struct Reservation(Claim<'static, Came, Held>);

impl Reservation {
    /// Stores the `psHostRegister` block.
    pub(crate) fn complete(self, block: Block) {
        self.0.complete(Held::Cl(Box::new(block)));
    }
}

/// The failure for a range refused by the registry.
pub(crate) fn refused<K: RangeKind>(range: &Range<usize>, refusal: Refusal<K>) -> Failure {
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

/// Reserves `range` for a `psHostRegister` in progress.
pub(crate) fn reserve(range: Range<usize>) -> Result<Reservation, Failure> {
    claim(range, Came::Cl(Kind::Registered)).map(Reservation)
}

/// Inserts a block pinstream allocated; an overlap (a range the caller registered, then freed
/// without unregistering, that the new memory reuses) is refused and the block dropped.
pub(crate) fn insert(block: Block) -> Result<usize, Failure> {
    let start = block.region.as_ptr().map_or(0, |p| p as usize);
    let range = start..start + block.region.len();
    RANGES
        .insert(
            range.clone(),
            Came::Cl(block.kind),
            Held::Cl(Box::new(block)),
        )
        .map_err(|r| {
            let fail = refused(&range, r);
            let detail = format!(
                "{} (a registration whose memory was freed without psHostUnregister)",
                fail.detail
            );
            Failure::new(fail.code, detail)
        })?;
    Ok(start)
}

/// Why `addr` cannot be released as `kind` (one sentence and its fix), given the entry that
/// holds it, if any.
fn refusal<K: RangeKind>(addr: usize, kind: K, found: Option<Occupant<K>>) -> String {
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
    let apis = [
        Api::OpenCl,
        #[cfg(feature = "vulkan")]
        Api::Vulkan,
    ];
    let byte = addr..addr.saturating_add(1);
    let other = apis.into_iter().filter(|&api| api != came.api());
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

/// Removes the `psHost*` block that starts at `addr` and was made as `kind`; the caller drops
/// it (outside the lock: releasing may wait for the driver).
pub(crate) fn remove(addr: usize, kind: Kind) -> Result<Block, Failure> {
    match take(addr, Came::Cl(kind))? {
        Held::Cl(block) => Ok(*block),
        #[cfg(feature = "vulkan")]
        Held::Vk(_) => Err(misfiled(addr)),
    }
}

/// Refuses the first piece `(host pointer, length, device offset)` of a batched copy that
/// leaves or enters a block `psHostAlloc` made: one that starts inside the block and runs
/// past its end, or runs into it from before it, reads or writes memory that is no part of
/// the allocation. `name`: the pointers' array, as the detail names it. Ranges
/// `psHostRegister` pinned are the caller's memory, which may go on around them: not refused.
/// The pieces do not wrap around the address space (checked before).
pub(crate) fn check_pieces(pieces: &[(*mut u8, usize, usize)], name: &str) -> Result<(), Failure> {
    let ranges = pieces.iter().map(|&(p, n, _)| p as usize..p as usize + n);
    let allocated = |c| c == Came::Cl(Kind::Allocated);
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

/// `f` of the block containing `addr`, under OpenCL's lock in the registry (`f` must not call
/// into the registry): a `psHostFree` or `psHostUnregister` on another thread waits for it, so
/// when either returns the block is released, never kept alive by a reader.
pub(crate) fn with_block<R>(addr: usize, f: impl FnOnce(&Block) -> R) -> Result<R, Failure> {
    with_block_mut(addr, |b| f(b))
}

/// As [`with_block`], with the block mutable (a zero-copy download writes its region).
pub(crate) fn with_block_mut<R>(
    addr: usize,
    f: impl FnOnce(&mut Block) -> R,
) -> Result<R, Failure> {
    let byte = addr..addr.saturating_add(1);
    let found = RANGES.find_mut(Api::OpenCl, byte, |_, _, held| match held {
        Held::Cl(block) => Ok(f(block)),
        #[cfg(feature = "vulkan")]
        Held::Vk(_) => Err(misfiled(addr)),
    });
    found.map_err(|around| {
        let detail = match around {
            Some(o) => format!(
                "{addr:#x} lies in {:#x}..{:#x}, which another thread is still registering",
                o.range.start, o.range.end
            ),
            None => format!(
                "{addr:#x} lies in no range psHostAlloc or psHostRegister pinned{}",
                other_api(addr, Came::Cl(Kind::Allocated))
            ),
        };
        Failure::new(PS_ERROR_HOST_MEMORY_NOT_REGISTERED, detail)
    })?
}
