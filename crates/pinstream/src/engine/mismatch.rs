//! What the kernel binding and the checks before a run found wrong, as data: each variant
//! carries the names and numbers, and its `Display` says what is wrong and what to change in
//! the library's terms ("the block size", "the work-group size"), never a front's spelling.
//! A front (the CLI's `advice`, the C library, Python) phrases the fix in its own terms from
//! the fields. A leaf module: it depends on the backend's API types and the units only.

use crate::backend::api::WorkGroupLimits;
use crate::units::Bytes;
use std::fmt;

/// Which setting of the run gives a streamed buffer its element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementRole {
    /// An input: the run's element type.
    Input,
    /// The output of an out-of-place run: the run's output element type.
    Output,
}

impl fmt::Display for ElementRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElementRole::Input => "the element type",
            ElementRole::Output => "the output element type",
        })
    }
}

/// A kernel argument as a mismatch names it: its name and its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    /// The parameter's name in the kernel.
    pub name: String,
    /// Its declared type, e.g. `float*`, `uint`.
    pub type_name: String,
}

/// What does not match between a run and its kernel's arguments
/// ([`super::bind::bind`], [`super::validate::element_types`], [`super::validate::counts_fit`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BindProblem {
    /// A `__local` pointer, which pinstream cannot size.
    LocalPointer {
        /// The argument's name.
        argument: String,
    },
    /// The kernel takes another number of buffers than the run binds.
    BufferCount {
        /// Buffers the kernel takes, described (`float* x, float* y`, or `none`).
        declared: String,
        /// How many it takes.
        takes: usize,
        /// Inputs the run binds.
        inputs: usize,
        /// The run binds a separate output.
        output: bool,
        /// Residents the run binds.
        residents: usize,
    },
    /// The first value after the buffers is not an integer, so it cannot take the count.
    CountNotInteger(Argument),
    /// No value argument after the buffers at all.
    NoCount,
    /// A user value given twice.
    GivenTwice {
        /// The name given twice.
        name: String,
    },
    /// A user value for an argument the kernel does not have.
    NoSuchArgument {
        /// The name given.
        name: String,
        /// The kernel's user arguments, described.
        declared: String,
    },
    /// A host-resident buffer named for an argument the kernel does not have.
    NoHostedArgument {
        /// The name given.
        name: String,
        /// The kernel's buffer arguments, described.
        declared: String,
    },
    /// A host-resident buffer named for an argument that is no buffer.
    HostedNotBuffer(Argument),
    /// A host-resident buffer named twice.
    HostedTwice {
        /// The name given twice.
        name: String,
    },
    /// A user argument whose type is not a scalar pinstream can encode.
    NotScalar(Argument),
    /// A user argument with no value given.
    NoValue(Argument),
    /// A user value that does not parse as the argument's type.
    BadValue {
        /// The argument's name.
        argument: String,
        /// The value given.
        value: String,
        /// Why it does not parse.
        why: String,
    },
    /// A count argument too narrow for a value the run passes it.
    CountTooNarrow {
        /// The argument.
        argument: Argument,
        /// The largest value the run passes.
        max: u64,
    },
    /// A pointer to another scalar type than the run streams through it.
    ElementType {
        /// The argument.
        argument: Argument,
        /// Which setting gives the element type.
        role: ElementRole,
        /// The run's element type (`f64`) and its kernel name (`double`).
        want: (&'static str, &'static str),
        /// The element type the argument declares (`f32`).
        declared: &'static str,
    },
    /// A pointer to a vector type.
    VectorType {
        /// The argument.
        argument: Argument,
        /// Which setting gives the element type.
        role: ElementRole,
        /// The run's element type and its kernel name.
        want: (&'static str, &'static str),
        /// The vector's scalar type and its kernel name, where it differs from the run's.
        other: Option<(&'static str, &'static str)>,
    },
}

impl fmt::Display for BindProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use BindProblem::*;
        match self {
            LocalPointer { argument } => write!(f, "argument `{argument}` is a __local pointer, which pinstream cannot size: allocate local memory inside the kernel"),
            BufferCount { declared, takes, inputs, output, residents } => write!(f,
                "it takes {takes} buffer argument(s) ({declared}) but this run binds {}: {inputs} input(s), {} output, {residents} resident(s), in that order",
                inputs + usize::from(*output) + residents, if *output { "1" } else { "no separate" }),
            CountNotInteger(a) => write!(f, "argument `{}` ({}) must be uint, int, ulong or long: the first value after the buffers receives the block's element count (then, optionally, the block index and the element offset)", a.name, a.type_name),
            NoCount => f.write_str("after its buffers it must take the block's element count as an integer (uint, int, ulong or long; then, optionally, the block index and the element offset), but it takes no value argument"),
            GivenTwice { name } => write!(f, "a value for argument `{name}` is given twice: give one"),
            NoSuchArgument { name, declared } => write!(f, "it has no user argument `{name}`; its user arguments are: {declared}"),
            NoHostedArgument { name, declared } => write!(f, "it has no buffer argument `{name}` for host-resident memory; its buffer arguments are: {declared}"),
            HostedNotBuffer(a) => write!(f, "argument `{}` ({}) is no pointer, so host-resident memory cannot be bound to it: name a __global pointer argument", a.name, a.type_name),
            HostedTwice { name } => write!(f, "host-resident memory is bound to argument `{name}` twice: bind it once"),
            NotScalar(a) => write!(f, "argument `{}` has type {}, which a user value cannot set (scalars only)", a.name, a.type_name),
            NoValue(a) => write!(f, "argument `{}` ({}) needs a value: give one for `{}`", a.name, a.type_name, a.name),
            BadValue { argument, value, why } => write!(f, "the value `{value}` of argument `{argument}`: {why}"),
            CountTooNarrow { argument: a, max } => write!(f, "argument `{}` ({}) cannot hold {max}, which this run passes it: declare it ulong", a.name, a.type_name),
            ElementType { .. } | VectorType { .. } => self.element_type(f),
        }
    }
}

impl BindProblem {
    fn element_type(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindProblem::ElementType { argument: a, role, want, declared } => write!(f,
                "argument `{}` is {}, but this run streams {} elements ({}, {role}) through it: set {role} to {declared} or declare it {}*",
                a.name, a.type_name, want.0, want.1, want.1),
            BindProblem::VectorType { argument: a, role, want, other } => {
                write!(f, "argument `{}` is {}, a vector type: pinstream counts elements of one {} value ({}), so declare it {}* and index it with the count it passes",
                    a.name, a.type_name, want.0, want.1, want.1)?;
                match other {
                    Some((name, cl)) => write!(f, " (or set {role} to {name} and declare it {cl}*)"),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }
}

/// What is wrong with a block size ([`super::validate::block_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockProblem {
    /// Not a positive multiple of the unit.
    NotMultiple {
        /// The block asked for, bytes.
        block: usize,
        /// The unit: the element size times the input elements per output element.
        unit: usize,
    },
    /// So small that the input makes too many blocks.
    TooMany {
        /// The block asked for, bytes.
        block: usize,
        /// Bytes per input.
        len: usize,
        /// Blocks it would make.
        blocks: usize,
        /// The most blocks a run may have.
        max_blocks: usize,
        /// The smallest block of a multi-block run.
        min_block: usize,
    },
}

impl fmt::Display for BlockProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BlockProblem::NotMultiple { block, unit } => write!(f,
                "a block of {block} bytes is not a positive multiple of {unit} bytes (the element size times the input elements per output element)"),
            BlockProblem::TooMany { block, len, blocks, max_blocks, min_block } => write!(f,
                "a block of {} cuts {} of data into {blocks} blocks; per-block records would outweigh the data (a run may have at most {max_blocks} blocks, of at least {})",
                Bytes(block as u64), Bytes(len as u64), Bytes(min_block as u64)),
        }
    }
}

/// What is wrong with the launch size ([`super::validate::work_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaunchProblem {
    /// Zero work items per counted element.
    NoItems,
    /// The kernel requires a work-group size the run does not ask for.
    RequiredLocal {
        /// The size the kernel declares (`reqd_work_group_size`).
        need: usize,
    },
    /// A work-group size of 0.
    ZeroLocal,
    /// A work-group size above what the kernel allows on this device.
    LocalAbove {
        /// The size asked for.
        local: usize,
        /// The kernel's and the device's limits.
        limits: WorkGroupLimits,
    },
    /// More work items in one launch than a launch may have.
    TooManyItems {
        /// Counted elements of one block.
        count: usize,
        /// Work items per counted element.
        items_per: usize,
        /// The most a launch may have.
        max: u64,
    },
}

impl fmt::Display for LaunchProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LaunchProblem::NoItems => f.write_str("0 work items per element would launch no work item: use 1 or more"),
            LaunchProblem::RequiredLocal { need } => write!(f, "the kernel declares reqd_work_group_size({need}): use a work-group size of {need}"),
            LaunchProblem::ZeroLocal => f.write_str("a work-group size of 0 is not valid: use 1 or more, or leave it to the driver"),
            LaunchProblem::LocalAbove { local, limits } => write!(f,
                "a work-group size of {local} is above the work-group size this kernel allows on this device, {}: use {} or less, or leave it to the driver",
                limits_text(&limits), limits.max()),
            LaunchProblem::TooManyItems { count, items_per, max } => write!(f,
                "a block of {count} counted elements with {items_per} work item(s) per element makes {} work items in one launch, more than the {max} (2^32 - 1) a launch may have: use a smaller block or fewer work items per element",
                (count as u128) * (items_per as u128)),
        }
    }
}

/// `256 (CL_KERNEL_WORK_GROUP_SIZE 256, CL_DEVICE_MAX_WORK_ITEM_SIZES[0] 1024)`.
pub fn limits_text(l: &WorkGroupLimits) -> String {
    format!(
        "{} ({} {}, {} {})",
        l.max(),
        l.names[0],
        l.kernel,
        l.names[1],
        l.device_dim0
    )
}

/// What is wrong with a chunk size ([`super::validate::chunk_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkProblem {
    /// The chunk size asked for, bytes.
    pub chunk: usize,
    /// The region's bytes.
    pub size: usize,
    /// Chunks it would make.
    pub chunks: usize,
    /// The page size.
    pub page: usize,
    /// The most chunks a region may have.
    pub max_chunks: usize,
    /// The smallest chunk size that works.
    pub smallest: usize,
}

impl ChunkProblem {
    /// What is wrong, without the fix.
    pub fn what(&self) -> String {
        format!(
            "a region of {} would be made of {} chunks, each a driver object; use chunks of at least a page ({}) and at most {} per region",
            Bytes(self.size as u64),
            self.chunks,
            Bytes(self.page as u64),
            self.max_chunks
        )
    }
}

impl fmt::Display for ChunkProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a chunk size of {}: {}: use a chunk size of {} or more, or leave it to the default",
            Bytes(self.chunk as u64),
            self.what(),
            Bytes(self.smallest as u64)
        )
    }
}

/// What the element-type check ([`super::validate::element_types`]) accepted but could not
/// verify, for the caller to show.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElementNote {
    /// A `ushort*` that receives f16 data as its raw bits (CUDA C has no built-in half).
    RawBits {
        /// The kernel.
        kernel: String,
        /// The argument's name.
        argument: String,
        /// Its declared type: `ushort*` (CUDA C), `uint*` (WGSL: two halves a word).
        declared: String,
        /// Which setting gives the element type.
        role: ElementRole,
    },
    /// A `void*`: untyped.
    Void {
        /// The kernel.
        kernel: String,
        /// The argument's name.
        argument: String,
        /// Which setting gives the element type.
        role: ElementRole,
        /// The run's element type.
        want: &'static str,
    },
    /// A type the kernel defined (a typedef or a struct).
    Unknown {
        /// The kernel.
        kernel: String,
        /// The argument's name.
        argument: String,
        /// The pointee's name.
        type_name: String,
        /// Which setting gives the element type.
        role: ElementRole,
        /// The run's element type and its kernel name.
        want: (&'static str, &'static str),
    },
}

impl ElementNote {
    /// Which setting gives the element type the note is about.
    pub fn role(&self) -> ElementRole {
        match self {
            Self::RawBits { role, .. } | Self::Void { role, .. } | Self::Unknown { role, .. } => {
                *role
            }
        }
    }

    /// The note, naming the setting as `setting` (a front passes its own spelling of
    /// [`Self::role`], e.g. a flag).
    pub fn describe(&self, setting: &str) -> String {
        match self {
            Self::RawBits { kernel, argument, declared, .. } => format!("kernel `{kernel}`: argument `{argument}` is {declared}: it receives the raw bits of the f16 elements ({setting} f16)"),
            Self::Void { kernel, argument, want, .. } => format!("kernel `{kernel}`: argument `{argument}` is void*, so its element type cannot be checked against {setting} {want}"),
            Self::Unknown { kernel, argument, type_name, want, .. } => format!("kernel `{kernel}`: argument `{argument}` has type {type_name}*, which pinstream cannot check against {setting} {}: make sure it is {}", want.0, want.1),
        }
    }
}

impl fmt::Display for ElementNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe(&self.role().to_string()))
    }
}
