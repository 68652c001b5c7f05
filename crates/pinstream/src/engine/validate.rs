//! Checks of a run made before anything is pinned, allocated or launched: the kernel's
//! pointer types against the run's element types, the counts it receives, block and chunk
//! sizes, the launch size against the device's limits, and the host memory of all regions
//! together.
//!
//! Everything here is a pure function of numbers and the kernel's argument list, so it is
//! unit- and property-tested without a device. The engine runs them once per job, on each
//! device's kernel before anything is allocated there (a library caller gets the same
//! protection as the CLI); the CLI calls [`check_run`] earlier,
//! before it pins anything, with the sizes it is about to use.
//!
//! What these checks cannot catch: a kernel that indexes past the end of its buffers. On a
//! CPU device (PoCL) the buffers are host memory, so such a kernel can corrupt the process
//! or crash it, as any native code can; on a GPU it faults on the device. pinstream passes
//! the block's element count precisely so that a kernel can guard its accesses (`if (i < n)`).

use super::bind::{argument, BindError, Binding};
pub use super::dtype::float_in_range;
use super::dtype::DType;
pub use super::error::ValidateError;
use super::error::{
    BindProblem, BlockProblem, ChunkProblem, ElementNote, ElementRole, LaunchProblem,
};
use super::job::JobViews;
use super::options::{StreamOptions, WorkSize};
use crate::backend::api::{ArgInfo, WorkGroupLimits};
use crate::units::Bytes;

/// The smallest block a multi-block run may use, in bytes: below it, the per-block records
/// and commands (about a kilobyte of host memory each) outweigh the data.
pub const MIN_BLOCK_BYTES: usize = 1 << 10;
/// The most blocks one run may have; a larger input needs larger blocks.
pub const MAX_BLOCKS: usize = 1 << 16;
/// The most chunks one pinned region may be made of (each is a driver object).
pub const MAX_CHUNKS: usize = 1 << 12;
/// The most work items one launch may have. Drivers count work-groups and work items in 32
/// bits in places (PoCL asserts past it); a block that needs more needs a smaller block or
/// fewer items per element.
pub const MAX_WORK_ITEMS: u64 = u32::MAX as u64;

/// What [`check_run`] found acceptable but could not verify, for the caller to show.
pub type Notes = Vec<ElementNote>;

/// [`check_run`] for a job the engine is about to stream on a device whose kernel `kernel`
/// has the arguments `args`, bound as `binding`, and the work-group limits `limits`.
pub(crate) fn check_job(
    kernel: &str,
    views: &JobViews,
    args: &[ArgInfo],
    binding: &Binding,
    o: &StreamOptions,
    limits: WorkGroupLimits,
    halves_in_words: bool,
) -> Result<Notes, ValidateError> {
    let run = RunShape {
        len: views.input_len(),
        in_place: views.in_place(),
        halves_in_words,
    };
    check_run(kernel, args, binding, o, run, limits)
}

/// The data of a run, as far as the checks need it.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// Bytes per input.
    pub len: usize,
    /// Each block's result replaces the block (no output buffer).
    pub in_place: bool,
    /// The API's kernels read f16 input as packed 32-bit words ([`crate::backend::api::Api::HALVES_IN_WORDS`]).
    pub halves_in_words: bool,
}

/// Every check of a run over inputs of `run.len` bytes with options `o`, against the kernel
/// `kernel` (its arguments `args`, bound as `binding`) and its work-group limits.
pub fn check_run(
    kernel: &str,
    args: &[ArgInfo],
    binding: &Binding,
    o: &StreamOptions,
    run: RunShape,
    limits: WorkGroupLimits,
) -> Result<Notes, ValidateError> {
    let unit = o.dtype.size() * o.in_per_out.max(1);
    block_size(run.len, o.block_bytes, unit)?;
    let elems = run.len / o.dtype.size();
    let block_elems = effective_block_elems(elems, o.block_bytes / o.dtype.size(), o.in_per_out);
    let blocks = elems.div_ceil(block_elems.max(1));
    counts_fit(kernel, args, binding, block_elems, blocks)?;
    let out = (!run.in_place).then_some(o.out_dtype);
    let notes = element_types(kernel, args, binding, o.dtype, out, run.halves_in_words)?;
    let per_launch = if o.work.per_output {
        block_elems.div_ceil(o.in_per_out.max(1))
    } else {
        block_elems
    };
    work_size(per_launch, &o.work, limits)?;
    Ok(notes)
}

/// Input elements of a full block: the block, or the whole input (rounded up to whole
/// `in_per_out` groups) where that is less.
fn effective_block_elems(elems: usize, block_elems: usize, in_per_out: usize) -> usize {
    let r = in_per_out.max(1);
    block_elems.min(elems.div_ceil(r).saturating_mul(r))
}

/// A block of `block` bytes over `len` bytes per input, in units of `unit` bytes (element
/// size times input elements per output element): a positive multiple of the unit, at least
/// [`MIN_BLOCK_BYTES`] when the run has several blocks, and at most [`MAX_BLOCKS`] blocks.
pub fn block_size(len: usize, block: usize, unit: usize) -> Result<(), ValidateError> {
    let unit = unit.max(1);
    let floor = smallest_block(len, unit);
    let err = |why: BlockProblem, suggested: usize, or_more| {
        Err(ValidateError::Block {
            why,
            suggested,
            or_more,
        })
    };
    if block == 0 || !block.is_multiple_of(unit) {
        let down = block / unit * unit;
        let suggested = if down >= floor { down } else { floor };
        return err(BlockProblem::NotMultiple { block, unit }, suggested, false);
    }
    if block < len && block < floor {
        let too_many = BlockProblem::TooMany {
            block,
            len,
            blocks: len.div_ceil(block),
            max_blocks: MAX_BLOCKS,
            min_block: MIN_BLOCK_BYTES,
        };
        return err(too_many, floor, true);
    }
    Ok(())
}

/// The smallest valid block for `len` bytes in units of `unit` (see [`block_size`]).
pub fn smallest_block(len: usize, unit: usize) -> usize {
    let unit = unit.max(1);
    let want = MIN_BLOCK_BYTES.max(len.div_ceil(MAX_BLOCKS));
    want.div_ceil(unit).saturating_mul(unit)
}

/// The count, block index and offset of every block fit the integer types the kernel
/// declared for them.
pub fn counts_fit(
    kernel: &str,
    args: &[ArgInfo],
    binding: &Binding,
    block_elems: usize,
    blocks: usize,
) -> Result<(), BindError> {
    let last = blocks.saturating_sub(1) as u64;
    let maxes = [
        block_elems as u64,
        last,
        last.saturating_mul(block_elems as u64),
    ];
    for ((idx, t), max) in binding.counts.iter().zip(maxes) {
        if t.encode_count(max).is_none() {
            return Err(BindError {
                kernel: kernel.to_string(),
                problem: Box::new(BindProblem::CountTooNarrow {
                    argument: argument(&args[*idx as usize]),
                    max,
                }),
            });
        }
    }
    Ok(())
}

/// What a pointer argument's type name says about its elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pointee {
    /// A scalar type pinstream knows, e.g. `float*`.
    Scalar(DType),
    /// A vector of one, e.g. `float4*`, with its width.
    Vector(DType, usize),
    /// `void*`: untyped.
    Void,
    /// A name the kernel defined (a typedef or a struct): pinstream cannot check it.
    Other(String),
}

/// Parses a kernel argument's type name, e.g. `const float*`, `uchar4 *`, `half*`.
pub fn pointee(type_name: &str) -> Pointee {
    let base: Vec<&str> = type_name
        .split(|c: char| c.is_whitespace() || c == '*')
        .filter(|w| {
            !w.is_empty()
                && !matches!(
                    *w,
                    "const"
                        | "volatile"
                        | "restrict"
                        | "__global"
                        | "global"
                        | "__constant"
                        | "constant"
                )
        })
        .collect();
    let base = base.join(" ");
    if base == "void" {
        return Pointee::Void;
    }
    if let Some(t) = DType::from_cl(&base) {
        return Pointee::Scalar(t);
    }
    let digits = base.trim_start_matches(|c: char| !c.is_ascii_digit());
    let scalar = &base[..base.len() - digits.len()];
    match (DType::from_cl(scalar), digits.parse::<usize>()) {
        (Some(t), Ok(n)) if [2, 3, 4, 8, 16].contains(&n) => Pointee::Vector(t, n),
        _ => Pointee::Other(base),
    }
}

/// Every streamed buffer argument's element type matches the run's: the inputs `dtype`, the
/// output `out` (none in place). Residents are bytes pinstream does not interpret. With
/// `halves_in_words` (the API's kernels read f16 as packed words), a `uint*` input may take f16.
pub fn element_types(
    kernel: &str,
    args: &[ArgInfo],
    binding: &Binding,
    dtype: DType,
    out: Option<DType>,
    halves_in_words: bool,
) -> Result<Notes, BindError> {
    let mut notes = Vec::new();
    let wanted = binding
        .inputs
        .iter()
        .map(|&i| (i, dtype, ElementRole::Input))
        .chain(
            binding
                .output
                .zip(out)
                .map(|(i, t)| (i, t, ElementRole::Output)),
        );
    for (i, want, role) in wanted {
        let a = &args[i as usize];
        if let Some(note) = element_type(kernel, a, want, role, halves_in_words)? {
            notes.push(note);
        }
    }
    Ok(notes)
}

/// True where f16 data may be declared as its raw bits `t`. CUDA C has no built-in 16-bit
/// float without cuda_fp16.h: its kernels (pinstream's own twin included) take f16 data as
/// its raw bits, `unsigned short*`. WGSL has no 16-bit storage without shaderFloat16: its
/// kernels (pinstream's own Vulkan twin included) read f16 input as packed words,
/// `array<u32>`, indexed by halves / 2 (`halves_in_words`). Nowhere else: an OpenCL or CUDA
/// kernel indexing `uint*` by the count of halves would run past the buffer (found by
/// tests/fuzz_run.rs), and so would any kernel writing f16 output as words.
fn raw_halves(t: DType, want: DType, role: ElementRole, halves_in_words: bool) -> bool {
    want == DType::F16
        && (t == DType::U16 || (t == DType::U32 && halves_in_words && role == ElementRole::Input))
}

/// One streamed argument `a` against the element type `want` that `role` gives it: a note
/// where it cannot be checked, a mismatch where it does not match.
fn element_type(
    kernel: &str,
    a: &ArgInfo,
    want: DType,
    role: ElementRole,
    halves_in_words: bool,
) -> Result<Option<ElementNote>, BindError> {
    let bad = |problem| BindError {
        kernel: kernel.to_string(),
        problem: Box::new(problem),
    };
    let names = |t: DType| (t.name(), t.cl_name());
    Ok(Some(match pointee(&a.type_name) {
        Pointee::Scalar(t) if t == want => return Ok(None),
        Pointee::Scalar(t) if raw_halves(t, want, role, halves_in_words) => ElementNote::RawBits {
            kernel: kernel.into(),
            argument: a.name.clone(),
            declared: a.type_name.clone(),
            role,
        },
        Pointee::Scalar(t) => {
            return Err(bad(BindProblem::ElementType {
                argument: argument(a),
                role,
                want: names(want),
                declared: t.name(),
            }))
        }
        Pointee::Vector(t, _) => {
            return Err(bad(BindProblem::VectorType {
                argument: argument(a),
                role,
                want: names(want),
                other: (t != want).then(|| names(t)),
            }))
        }
        Pointee::Void => ElementNote::Void {
            kernel: kernel.into(),
            argument: a.name.clone(),
            role,
            want: want.name(),
        },
        Pointee::Other(type_name) => ElementNote::Unknown {
            kernel: kernel.into(),
            argument: a.name.clone(),
            type_name,
            role,
            want: names(want),
        },
    }))
}

/// The work items of one launch of `count` counted elements: positive, within
/// [`MAX_WORK_ITEMS`], with a work-group size the kernel and device allow. Returns the global
/// size.
pub fn work_size(
    count: usize,
    work: &WorkSize,
    limits: WorkGroupLimits,
) -> Result<u64, ValidateError> {
    let launch = |p: LaunchProblem| Err(ValidateError::Launch(p));
    if work.items_per == 0 {
        return launch(LaunchProblem::NoItems);
    }
    if let Some(need) = limits.required {
        if work.local != Some(need) {
            return launch(LaunchProblem::RequiredLocal { need });
        }
    }
    let local = match work.local {
        Some(0) => return launch(LaunchProblem::ZeroLocal),
        Some(local) if local > limits.max() => {
            return launch(LaunchProblem::LocalAbove { local, limits })
        }
        l => l.unwrap_or(1) as u64,
    };
    let items = (count as u64)
        .checked_mul(work.items_per as u64)
        .and_then(|g| g.checked_next_multiple_of(local));
    match items {
        Some(g) if g <= MAX_WORK_ITEMS => Ok(g),
        _ => launch(LaunchProblem::TooManyItems {
            count,
            items_per: work.items_per,
            max: MAX_WORK_ITEMS,
        }),
    }
}

/// All regions of a run together (`parts`: a description and the bytes of each) fit in the
/// host memory available now.
/// (`room`: [`crate::backend::os::host_room`], which says what bounds it).
pub fn host_memory(
    parts: &[(String, u64)],
    room: Option<crate::backend::os::HostRoom>,
) -> Result<(), ValidateError> {
    let Some(room) = room else {
        return Ok(());
    };
    let total = parts
        .iter()
        .fold(0u64, |sum, (_, n)| sum.saturating_add(*n));
    if total <= room.bytes {
        return Ok(());
    }
    Err(ValidateError::HostMemory {
        total,
        room,
        parts: parts
            .iter()
            .map(|(what, n)| format!("{what} {}", Bytes(*n)))
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// A region of `size` bytes made of chunks of at most `chunk` bytes: at least a page each,
/// and at most [`MAX_CHUNKS`] of them.
pub fn chunk_size(size: usize, chunk: usize, page: usize) -> Result<(), ValidateError> {
    let smallest = page.max(size.div_ceil(MAX_CHUNKS)).div_ceil(page) * page;
    if chunk >= smallest {
        return Ok(());
    }
    Err(ValidateError::Chunk(ChunkProblem {
        chunk,
        size,
        chunks: size.div_ceil(chunk.max(1)),
        page,
        max_chunks: MAX_CHUNKS,
        smallest,
    }))
}

#[cfg(test)]
mod tests;
