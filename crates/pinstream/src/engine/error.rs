//! The engine layer's errors, in one leaf module (it depends on the backend's error and the
//! units and the leaf [`super::mismatch`], nothing else of the engine). They carry structured
//! fields (budgets, sizes, what a run needs) and say what does not fit, in the library's terms
//! (the setting, never a front's flag or function); a front (the CLI, the C library) turns the
//! fields into advice in its own terms (flags, parameters). File errors
//! ([`super::io::IoError`]) live with the file code.

use crate::backend::error::BackendError;
use crate::units::Bytes;

/// Why a stream could not run or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Sizes that do not fit together.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// `PINSTREAM_INJECT_FAULT` (a test hook) is set to a value it does not know.
    #[error(transparent)]
    FaultHook(#[from] crate::backend::FaultSpecError),
    /// The kernel's arguments do not match the run.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// A size or launch the checks made before the run refused ([`super::validate`]).
    #[error(transparent)]
    Check(ValidateError),
    /// The VRAM budget or the device's allocation limit cannot hold what the run needs.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// Slot or resident allocation failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A command failed: which block, which stage, which pass.
    #[error("block {block}{} ({stage}): {source}", in_pass(*pass))]
    Stage {
        /// Block index in the run.
        block: usize,
        /// The pass it was part of (0: the first; see [`super::StreamOptions::passes`]; a
        /// run counts its block-passes in `u32`).
        pass: u32,
        /// Stage name: `upload`, `kernel`, `download`, `resident upload`.
        stage: &'static str,
        /// The failure.
        source: BackendError,
    },
    /// Host memory pinned progressively could not be made ready for a block: its background
    /// pin failed (the message names the chunk).
    #[error("block {block}: its host memory was never pinned: {why}")]
    NotPinned {
        /// Block index in the run.
        block: usize,
        /// The background failure.
        why: String,
    },
    /// A setup call failed (queues, events, kernel introspection).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// One device of a run of several failed (the others were stopped after their blocks in
    /// flight): which device, and its failure (which names the block).
    #[error("device {device}: {source}")]
    OnDevice {
        /// The device, as the backend describes it.
        device: String,
        /// Its failure.
        source: Box<StreamError>,
    },
    /// A kernel wrote past the end of one of its buffers (the bounds guard saw it; boxed:
    /// the error stays small on every other path).
    #[error(transparent)]
    Overrun(Box<OverrunError>),
    /// Stopped on request after the blocks in flight completed (with several passes, `done`
    /// and `blocks` count block-passes). In-place data is then part done; resident blocks
    /// ([`super::Residency`]) keep what they held before the run.
    #[error("stopped on request after {done} of {blocks} blocks")]
    Stopped {
        /// The value the stop flag was set to (the signal number in the CLI).
        code: usize,
        /// Blocks completed (each pass's counted: a block streamed twice counts twice).
        done: usize,
        /// Blocks in the run, times its passes.
        blocks: usize,
    },
    /// An invariant of the engine broke: a bug in pinstream, not the caller's doing (what
    /// broke, in words). The run stopped before it could use wrong data.
    #[error("internal error: {0}; please report it")]
    Internal(String),
}

/// A kernel that wrote past the end of a buffer, as the bounds guard saw it after the block
/// ([`super::guard`]). An overrun of up to the guard zone's size lands in it, not in other
/// memory, so the process is intact; the run stops, and its results are not to be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrunError {
    /// The kernel.
    pub kernel: String,
    /// The buffer's parameter name in the kernel.
    pub argument: String,
    /// What the run binds there: `input 0`, `the output block`, `resident 1`.
    pub role: String,
    /// The block whose kernel wrote it.
    pub block: usize,
    /// The pass that block was part of (0: the first; named in the message from the second).
    pub pass: u32,
    /// The buffer's usable bytes (what the kernel may write).
    pub size: usize,
    /// Bytes of the guard zone after the buffer.
    pub guard: usize,
    /// Bytes past the end, counted to the farthest byte written in the probed head.
    pub past: usize,
    /// The whole probed head was written: the overrun went at least `past` bytes.
    pub at_least: bool,
    /// Input elements per output element of the run.
    pub in_per_out: usize,
    /// The buffer is host-resident ([`super::Hosted`]): the kernel indexes it by what it
    /// reads, not by the count it is given.
    pub hosted: bool,
}

impl OverrunError {
    /// How far it wrote, in words: `4 bytes`, `at least 4096 bytes`.
    pub fn how_far(&self) -> String {
        let least = if self.at_least { "at least " } else { "" };
        format!("{least}{} bytes", self.past)
    }

    /// What happened, without the fix: the front that reports it adds its own.
    pub fn what(&self) -> String {
        format!(
            "kernel `{}` wrote {} past the end of its buffer `{}` ({}, {} bytes) in block {}{}",
            self.kernel,
            self.how_far(),
            self.argument,
            self.role,
            self.size,
            self.block,
            in_pass(self.pass)
        )
    }
}

impl std::fmt::Display for OverrunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.hosted {
            write!(
                f,
                "{}: bound every index the kernel writes into it by its size",
                self.what()
            )?;
        } else {
            write!(
                f,
                "{}: bound every index the kernel writes by the element count it is given",
                self.what()
            )?;
        }
        if self.in_per_out > 1 && !self.hosted {
            write!(
                f,
                " (a block's output holds count / {} elements)",
                self.in_per_out
            )?;
        }
        if self.at_least {
            write!(f, "; the guard zone after the buffer holds {} bytes: a write farther than that would have reached other memory", self.guard)
        } else {
            f.write_str("; the write landed in the guard zone after the buffer, so no other memory was touched")
        }
    }
}

impl std::error::Error for OverrunError {}

impl From<OverrunError> for StreamError {
    fn from(e: OverrunError) -> Self {
        StreamError::Overrun(Box::new(e))
    }
}

/// Sizes of a run that do not fit together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A run on no device.
    #[error("the run has no device: give at least one")]
    NoDevice,
    /// Neither an in-place region nor an input.
    #[error("the run has no input: give an input region")]
    NoInput,
    /// Both an in-place region and an output, or neither.
    #[error("a run is either in place or has an output region, not both or neither")]
    InPlaceAndOutput,
    /// Inputs of different lengths.
    #[error("inputs differ in size ({} and {}): every input must have the same length", Bytes(*.first as u64), Bytes(*.other as u64))]
    InputsDiffer {
        /// The first input's bytes.
        first: usize,
        /// Another input's bytes.
        other: usize,
    },
    /// An input that is not a whole number of elements.
    #[error(
        "the input is {len} bytes, not a multiple of the {dtype} element size ({element} bytes)"
    )]
    PartialElement {
        /// Input bytes.
        len: usize,
        /// The element type's name.
        dtype: String,
        /// Its size.
        element: usize,
    },
    /// In place with several input elements per output element.
    #[error("in place, each block's result replaces the block, so there is one output element per input element (in_per_out {in_per_out})")]
    InPlaceReduce {
        /// The requested input elements per output element.
        in_per_out: usize,
    },
    /// A work-group size of 0.
    #[error("a work-group size of 0 is not valid")]
    ZeroLocal,
    /// A run of 0 passes.
    #[error("a run makes at least one pass over its data")]
    ZeroPasses,
    /// More passes than a run counts: its blocks times its passes pass `u32::MAX` steps (each
    /// step's record names its pass in 32 bits).
    #[error("{passes} passes over {blocks} blocks is more steps than one run counts (at most {max} passes over these blocks)")]
    TooManyPasses {
        /// The passes asked for.
        passes: usize,
        /// The run's blocks.
        blocks: usize,
        /// The most passes over these blocks.
        max: usize,
    },
    /// A size past what this machine addresses (`usize`), found by a checked sum: a file or
    /// a ring larger than any memory.
    #[error("{what} is past the largest size this machine addresses")]
    TooLarge {
        /// What, with its size.
        what: String,
    },
    /// A block that is not a positive multiple of the unit.
    #[error("block of {block} bytes must be a positive multiple of {unit} bytes ({in_per_out} {dtype} elements per output element)")]
    Block {
        /// The block, bytes.
        block: usize,
        /// Bytes of one output element's inputs.
        unit: usize,
        /// Input elements per output element.
        in_per_out: usize,
        /// The element type's name.
        dtype: String,
    },
    /// A hosted buffer ([`super::Hosted`]) with no guard zone in a run that guards every
    /// buffer its kernel is bound to.
    #[error("the host-resident buffer `{name}` has no guard zone, and this run guards every buffer its kernel is bound to: make its memory guard::hosted_allocation(len, true) bytes and give guard::hosted_guard_bytes(len) as its `guard`, or run with check_bounds Off")]
    HostedUnguarded {
        /// The kernel argument it is bound to.
        name: String,
    },
    /// A hosted buffer ([`super::Hosted`]) that holds fewer bytes than its `len` and
    /// `guard` say.
    #[error("the host-resident buffer `{name}` holds {has} bytes, fewer than the {len} bytes given to the kernel and the {guard}-byte guard zone after them: make its memory guard::hosted_allocation(len, true) bytes (guard::hosted_guard_bytes(len) of zone), or give the `len` and `guard` it holds")]
    HostedShort {
        /// The kernel argument it is bound to.
        name: String,
        /// Bytes the buffer holds.
        has: usize,
        /// Bytes given to the kernel ([`super::Hosted::len`]).
        len: usize,
        /// Bytes of guard zone said to follow them ([`super::Hosted::guard`]).
        guard: usize,
    },
    /// A block's launch size past `usize::MAX`: its counted elements times the work items
    /// per element, rounded up to the work-group size.
    #[error("a block's kernel launch of {count} elements x {items_per} work items{} passes the largest launch size: ask for fewer work items per element, or a smaller work-group size", local.map(|l| format!(" in work-groups of {l}")).unwrap_or_default())]
    LaunchTooLarge {
        /// Elements counted in a full block.
        count: usize,
        /// Work items per counted element.
        items_per: usize,
        /// Work-group size, if set.
        local: Option<usize>,
    },
    /// An output region shorter than the run's result.
    #[error("the output region holds {} but the run writes {}", Bytes(*.have as u64), Bytes(*.need as u64))]
    OutputTooSmall {
        /// Output bytes.
        have: usize,
        /// Result bytes.
        need: usize,
    },
}

/// What the VRAM budget or the device cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// An input block above the device's largest allocation.
    #[error("a block of {} is above the device's max allocation {}", Bytes(*.block), Bytes(*.max_alloc))]
    BlockAboveMaxAlloc {
        /// Input bytes per block.
        block: u64,
        /// The device's largest allocation (also the largest block that fits it).
        max_alloc: u64,
    },
    /// An output block above the device's largest allocation.
    #[error("an output block of {} is above the device's max allocation {}", Bytes(*.out_block), Bytes(*.max_alloc))]
    OutputBlockAboveMaxAlloc {
        /// Output bytes per block.
        out_block: u64,
        /// The device's largest allocation.
        max_alloc: u64,
    },
    /// Fewer slots fit than the run needs.
    #[error("the VRAM budget of {} holds {} of resident buffers and {fit} slot(s) of {} ({inputs} input block(s){}{}), but the run needs {need} slot(s): {} in all", Bytes(*.budget), Bytes(*.resident), Bytes(*.slot), if *.output { " and an output block" } else { "" }, if *.guarded { GUARDED } else { "" }, Bytes(*.need_bytes))]
    TooSmall {
        /// The budget.
        budget: u64,
        /// Resident bytes (uploaded once).
        resident: u64,
        /// Bytes of one slot.
        slot: u64,
        /// Input blocks per slot.
        inputs: usize,
        /// Slots have an output block.
        output: bool,
        /// Slots that fit.
        fit: usize,
        /// Slots the run needs.
        need: usize,
        /// The budget the run needs: residents plus `need` slots.
        need_bytes: u64,
        /// The largest input block with which `need` slots fit the budget (0: none, the
        /// residents alone fill it).
        largest_block: u64,
        /// Each buffer is followed by a bounds guard zone at least as large as itself
        /// ([`super::guard`]), counted in `resident`, `slot` and `need_bytes`.
        guarded: bool,
    },
    /// More resident blocks asked for ([`super::options::Residency::Bytes`]) than the budget
    /// leaves after the slots and the residents.
    #[error("{} of resident blocks asked for, but the VRAM budget of {} leaves {} after {slots} slot(s) of {} and the residents", Bytes(*.asked), Bytes(*.budget), Bytes(*.left), Bytes(*.slot))]
    ResidencyAbove {
        /// Bytes of resident blocks asked for.
        asked: u64,
        /// Bytes the budget leaves.
        left: u64,
        /// The budget.
        budget: u64,
        /// Slots in the ring.
        slots: usize,
        /// Bytes of one slot (one resident block takes as much).
        slot: u64,
    },
}

/// How [`BudgetError::TooSmall`] says that the sizes count the bounds guard.
pub const GUARDED: &str = ", each buffer followed by a bounds guard at least as large as itself";

/// Why the pool could not give a buffer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The budget cannot hold the buffer.
    #[error("the VRAM budget of {} cannot hold {what} of {} ({} already allocated)", Bytes(*.budget), Bytes(*.bytes as u64), Bytes(*.used))]
    OverBudget {
        /// What was asked for.
        what: String,
        /// Its size.
        bytes: usize,
        /// Bytes already allocated.
        used: u64,
        /// The budget.
        budget: u64,
    },
    /// The driver refused (e.g. `CL_MEM_OBJECT_ALLOCATION_FAILURE`, `CUDA_ERROR_OUT_OF_MEMORY`).
    #[error("allocating {what} of {} on the device failed: {source}", Bytes(*.bytes as u64))]
    Device {
        /// What was asked for.
        what: String,
        /// Its size.
        bytes: usize,
        /// The driver's error.
        source: BackendError,
    },
}

pub use super::mismatch::{
    limits_text, Argument, BindProblem, BlockProblem, ChunkProblem, ElementNote, ElementRole,
    LaunchProblem,
};

/// A mismatch between the run and the kernel, with the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}`: {problem}")]
pub struct BindError {
    /// Kernel name.
    pub kernel: String,
    /// What does not match, with its names and numbers (boxed: the error stays small).
    pub problem: Box<BindProblem>,
}

/// A run that cannot work as asked, found before any work by [`super::validate`]; each
/// message names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidateError {
    /// The kernel does not fit the run (types, counts).
    #[error(transparent)]
    Kernel(#[from] BindError),
    /// A block size that cannot work, with one that does.
    #[error("{why}: use a block size of {} ({} bytes){}", Bytes(*.suggested as u64), .suggested, if *.or_more { " or more" } else { "" })]
    Block {
        /// What is wrong with the block size asked for.
        why: BlockProblem,
        /// A block size that works.
        suggested: usize,
        /// True when any larger multiple works too.
        or_more: bool,
    },
    /// The launch size does not fit the device.
    #[error("{0}")]
    Launch(LaunchProblem),
    /// The regions of the run do not fit in host memory together.
    #[error("the run would pin {} at once ({parts}), more than {room}: use smaller or fewer inputs", Bytes(*.total))]
    HostMemory {
        /// Bytes of all regions together.
        total: u64,
        /// The memory the process may still take, and what bounds it.
        room: crate::backend::os::HostRoom,
        /// What the regions are, e.g. `2 inputs of 20 GiB, an output of 20 GiB`.
        parts: String,
    },
    /// A chunk size that cannot work, with the range that does.
    #[error("{0}")]
    Chunk(ChunkProblem),
}

/// A kernel mismatch stays a [`StreamError::Bind`]; the rest is a [`StreamError::Check`].
impl From<ValidateError> for StreamError {
    fn from(e: ValidateError) -> Self {
        match e {
            ValidateError::Kernel(b) => StreamError::Bind(b),
            e => StreamError::Check(e),
        }
    }
}

/// " in pass N" for a command of a later pass (passes count from 1 in messages); nothing for
/// the first, so a one-pass run reads as before.
fn in_pass(pass: u32) -> String {
    match pass {
        0 => String::new(),
        p => format!(" in pass {}", p + 1),
    }
}

impl StreamError {
    /// An overrun seen in a run that is pass `before` (0-based) of a caller's: the guard
    /// counted the run's own passes (from the kernel it names, which for a buffer shared by
    /// the blocks may be a later step than the one being checked), so the caller's passes
    /// before it are added.
    pub(crate) fn after_passes(self, before: usize) -> Self {
        match self {
            StreamError::Overrun(mut e) => {
                let before = u32::try_from(before).unwrap_or(u32::MAX);
                e.pass = e.pass.saturating_add(before);
                StreamError::Overrun(e)
            }
            e => e,
        }
    }

    /// The error of a command of pass `pass` (0-based): a failed command names its pass.
    pub(crate) fn in_pass(self, pass: usize) -> Self {
        let pass = u32::try_from(pass).unwrap_or(u32::MAX);
        match self {
            StreamError::Stage {
                block,
                stage,
                source,
                ..
            } => StreamError::Stage {
                block,
                pass,
                stage,
                source,
            },
            e => e,
        }
    }
}
