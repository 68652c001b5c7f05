//! How to stream: the options of a run ([`StreamOptions`]), its kernel launch size
//! ([`WorkSize`]) and what stays in device memory across passes ([`Residency`]). A leaf below the stream, its layout, its devices and its checks, which all
//! read them.

use super::dtype::DType;
use super::guard::BoundsCheck;
use crate::units::{parse_size, Bytes};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// How many work items a block's kernel launch gets.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct WorkSize {
    /// Count output elements (true) or input elements (false).
    pub per_output: bool,
    /// Work items per counted element.
    pub items_per: usize,
    /// Work-group size; the global size is rounded up to a multiple of it.
    pub local: Option<usize>,
}

impl WorkSize {
    /// The global size of a launch over `count` counted elements: `count * items_per`
    /// rounded up to a multiple of `local`; `None` where that passes `usize::MAX` (a run
    /// refuses such sizes before anything is allocated: `LayoutError::LaunchTooLarge`).
    pub fn global(&self, count: usize) -> Option<usize> {
        let global = count.checked_mul(self.items_per.max(1))?;
        match self.local {
            Some(loc) if loc > 0 => global.checked_next_multiple_of(loc),
            _ => Some(global),
        }
    }
}

impl Default for WorkSize {
    fn default() -> Self {
        WorkSize {
            per_output: false,
            items_per: 1,
            local: None,
        }
    }
}

/// How to stream.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    /// Input element type.
    pub dtype: DType,
    /// Output element type (ignored in place).
    pub out_dtype: DType,
    /// Input bytes per block (a multiple of the element size and of `in_per_out` elements).
    pub block_bytes: usize,
    /// Input elements per output element (1: as many outputs as inputs; a block's output is
    /// `ceil(n / in_per_out)` elements).
    pub in_per_out: usize,
    /// Slots in each device's ring; `None`: as many as the budget holds, up to 4.
    pub slots: Option<usize>,
    /// Device memory each device's pool may use, slots and residents together.
    pub vram_budget: u64,
    /// Kernel launch size.
    pub work: WorkSize,
    /// One in-order queue for everything (the baseline).
    pub sequential: bool,
    /// When this becomes non-zero (a signal handler sets it, say), the stream stops after the
    /// blocks in flight and returns [`super::StreamError::Stopped`] with the value.
    pub stop: Option<Arc<AtomicUsize>>,
    /// The bounds guard ([`super::guard`]): a guard zone after every buffer the kernel is
    /// bound to, checked after each block's kernel; a kernel that wrote past a buffer stops
    /// the run with [`super::error::OverrunError`]. `Auto` (the default): on CPU devices.
    pub check_bounds: BoundsCheck,
    /// Passes over the job (at least 1): in place, pass `k + 1` reads what pass `k` wrote, so
    /// the result is that of `passes` runs in a row; inputs and residents stay as they are.
    pub passes: usize,
    /// How much of the budget the ring leaves holds whole blocks across passes
    /// ([`Residency`]; nothing with one pass).
    pub residency: Residency,
}

/// Whether blocks stay in device memory across the passes of a run: the budget the ring's
/// slots and the residents leave holds whole blocks (each as a slot holds it: its input
/// blocks and, out of place, its output block). A resident block is uploaded in the first
/// pass only; in place, its result is downloaded after the last pass only (out of place,
/// its output block is downloaded every pass, as the others'). With one pass nothing is
/// resident, whatever the policy. A run that stops or fails part way leaves in-place data
/// undefined, as a single pass does (some blocks done, some not), and more so here: its
/// resident blocks are not downloaded, so they keep what they held before the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Residency {
    /// As many blocks as the budget leaves room for (the default).
    #[default]
    Auto,
    /// None: every pass streams every block.
    Off,
    /// At most this many bytes of resident blocks per device (refused where the budget
    /// leaves less: [`super::BudgetError::ResidencyAbove`]).
    Bytes(u64),
}

impl FromStr for Residency {
    type Err = String;
    /// `auto`, `off`, or a size as [`crate::units::parse_size`] reads it (`3GiB`, `512M`).
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Residency::Auto),
            "off" => Ok(Residency::Off),
            size => parse_size(size)
                .map(Residency::Bytes)
                .map_err(|e| format!("not auto, off or a size: {e}")),
        }
    }
}

impl fmt::Display for Residency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Residency::Auto => f.write_str("auto"),
            Residency::Off => f.write_str("off"),
            Residency::Bytes(b) => write!(f, "{}", Bytes(*b)),
        }
    }
}
