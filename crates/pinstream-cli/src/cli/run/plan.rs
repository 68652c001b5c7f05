//! What a run does, settled and checked before anything is pinned ([`Plan`]): the inputs'
//! and residents' sizes, in place or not, the block and the stream's options, checked against
//! the kernel, its device and the host memory.

use super::settings::{Settings, Source};
use super::storage;
use crate::cli::device_sets::byte_shares;
use crate::cli::{out, Failure};
use pinstream::backend::api::Kernel;
use pinstream::backend::os;
use pinstream::engine::bind::{bind_hosted, Shape};
use pinstream::engine::guard::hosted_allocation;
use pinstream::engine::io;
use pinstream::engine::validate::{self, RunShape};
use pinstream::engine::StreamOptions;
use pinstream::units::Bytes;
use pinstream_cli::advice;
use std::ops::Range;
use std::path::Path;

/// What the run does, settled before anything is pinned.
pub(super) struct Plan {
    /// Bytes per input.
    pub len: usize,
    /// Bytes of each resident.
    pub residents: Vec<usize>,
    /// Bytes of each host table.
    pub host_tables: Vec<usize>,
    /// The host tables have a guard zone each ([`super::tables::Tables::check`]).
    pub table_guard: bool,
    /// The first input is processed in place (the kernel has no output buffer).
    pub in_place: bool,
    /// Bytes of the result.
    pub result_len: usize,
    /// The stream's options.
    pub opts: StreamOptions,
    /// `Ok(why)`: the inputs stream from storage; `Err(why)`: they are made resident.
    pub storage: Result<String, String>,
}

impl Plan {
    /// The run's shape with `budget` bytes of VRAM per device, checked against `kernel` and
    /// the host memory (the host tables with their guard zones where `table_guard`).
    pub fn new<K: Kernel>(
        s: &Settings,
        kernel: &K,
        budget: u64,
        (devices, table_guard): (usize, bool),
    ) -> Result<Self, Failure> {
        storage::refuse_device_inputs(s)?;
        let len = input_len(s)?;
        let residents = resident_lens(s)?;
        let host_tables = host_table_lens(s)?;
        let in_place = runs_in_place(s, kernel)?;
        let result_len = if in_place {
            len
        } else {
            (len / s.dtype.size()).div_ceil(s.reduce) * s.out_dtype.size()
        };
        let resident_bytes: u64 = residents.iter().map(|&n| n as u64).sum();
        let room = budget.saturating_sub(resident_bytes);
        let mut plan = Plan {
            len,
            residents,
            host_tables,
            table_guard,
            in_place,
            result_len,
            opts: stream_options(s, budget, 0),
            storage: Err(String::new()),
        };
        let regions: u64 = plan.regions(s).iter().map(|r| r.1).sum();
        plan.storage = storage::choose(s, devices, regions, os::host_room())?;
        let block = s.block.unwrap_or_else(|| {
            let block = default_block(s, len, room, in_place);
            match plan.storage {
                Ok(_) => storage::block_for(s, os::host_room(), s.dtype.size() * s.reduce, block),
                Err(_) => block,
            }
        });
        plan.opts.block_bytes = block;
        plan.check(s, kernel)?;
        Ok(plan)
    }

    /// Why the inputs are made resident (empty when they stream from storage).
    pub fn storage_why(&self) -> String {
        self.storage.clone().err().unwrap_or_default()
    }

    /// The kernel's arguments, sizes and launch against the run, and all regions against
    /// the host memory, before any pinning.
    fn check<K: Kernel>(&self, s: &Settings, kernel: &K) -> Result<(), Failure> {
        self.check_twice_read(s)?;
        let args = kernel.params().map_err(Failure::run)?;
        let shape = Shape {
            inputs: s.sources.len(),
            output: !self.in_place,
            residents: self.residents.len(),
        };
        let hosted: Vec<String> = s.host_tables.iter().map(|t| t.0.clone()).collect();
        let binding = bind_hosted(&s.entry, &args, &shape, &s.args, &hosted)
            .map_err(|e| Failure::usage(advice::bind_error(&e)))?;
        let limits = kernel.work_group_limits().map_err(Failure::run)?;
        let run = RunShape {
            len: self.len,
            in_place: self.in_place,
            halves_in_words: <K::A as pinstream::backend::api::Api>::HALVES_IN_WORDS,
        };
        let notes = validate::check_run(&s.entry, &args, &binding, &self.opts, run, limits)
            .map_err(|e| Failure::usage(advice::validate_error(&e, advice::Flags::RUN)))?;
        notes
            .iter()
            .for_each(|n| out::warn(advice::element_note(n)));
        let regions = match self.storage {
            Ok(_) => self.staged_regions(s)?,
            Err(_) => self.regions(s),
        };
        validate::host_memory(&regions, os::host_room()).map_err(|e| match &self.storage {
            Err(why) if why.starts_with("does not fit") => Failure::usage(format!("{e} ({why})")),
            _ => Failure::usage(e),
        })
    }

    /// Every region a run streamed from storage pins: the rings, residents and tables.
    fn staged_regions(&self, s: &Settings) -> Result<Vec<(String, u64)>, Failure> {
        let rings = storage::plan_rings(self.len, self.in_place, &self.opts)?;
        let total = rings.total(s.sources.len());
        let mut parts = vec![("the staging rings of".to_string(), total)];
        parts.extend(
            self.regions(s)
                .into_iter()
                .skip(1)
                .filter(|p| p.0 != "an output of"),
        );
        Ok(parts)
    }

    /// `--compare-sequential` reads an in-place input twice: not a FIFO's or a device's.
    fn check_twice_read(&self, s: &Settings) -> Result<(), Failure> {
        if !(self.in_place && s.compare_sequential) {
            return Ok(());
        }
        match s.sources.first() {
            Some(Source::File(p)) if io::input_len(p).ok().flatten().is_none() => {
                Err(Failure::usage(format!(
                    "--compare-sequential reads the in-place input {} twice, which a FIFO or device cannot give: save it to a file",
                    p.display()
                )))
            }
            _ => Ok(()),
        }
    }

    /// Each of `devices` devices' byte range of an input (or, with `output`, of the output
    /// out of place), as the engine shares the blocks; none with one device.
    pub fn shares(&self, devices: usize, output: bool) -> Vec<Range<usize>> {
        if devices < 2 {
            return Vec::new();
        }
        let o = &self.opts;
        let block = o.block_bytes;
        if !output {
            return byte_shares(self.len, block, devices);
        }
        let out_block = (block / o.dtype.size()).div_ceil(o.in_per_out) * o.out_dtype.size();
        byte_shares(self.result_len, out_block, devices)
    }

    /// Every region the run pins, described.
    fn regions(&self, s: &Settings) -> Vec<(String, u64)> {
        let n = s.sources.len();
        let mut parts = vec![(
            format!("{n} input(s) of {}:", Bytes(self.len as u64)),
            (n * self.len) as u64,
        )];
        if !self.residents.is_empty() {
            let r: usize = self.residents.iter().sum();
            parts.push((format!("{} resident(s):", self.residents.len()), r as u64));
        }
        if !self.host_tables.is_empty() {
            let guarded = |&n: &usize| hosted_allocation(n, self.table_guard) as u64;
            let t: u64 = self.host_tables.iter().map(guarded).sum();
            let n = self.host_tables.len();
            let what = match self.table_guard {
                true => format!("{n} host table(s) and their guard zones:"),
                false => format!("{n} host table(s):"),
            };
            parts.push((what, t));
        }
        if !self.in_place {
            parts.push(("an output of".into(), self.result_len as u64));
        }
        parts
    }
}

/// Bytes one input `s` holds for the run: its length, or what `--elements` states (needed
/// for a FIFO or a device, which has no length of its own).
fn source_len(s: &Settings, source: &Source) -> Result<u64, Failure> {
    let dsize = s.dtype.size() as u64;
    let have = match source {
        Source::File(p) => io::input_len(p).map_err(Failure::usage)?,
        Source::Synthetic(n) => Some(*n),
    };
    match (s.elements, have) {
        (Some(e), have) => {
            let want = e
                .checked_mul(dsize)
                .ok_or_else(|| Failure::usage("--elements is too large"))?;
            if let Some(have) = have.filter(|&h| h < want) {
                return Err(Failure::usage(format!(
                    "{} holds {have} bytes, shorter than the {e} {} elements stated with --elements ({want} bytes)",
                    source.name(),
                    s.dtype
                )));
            }
            Ok(want)
        }
        (None, Some(have)) => Ok(have),
        (None, None) => Err(Failure::usage(format!(
            "{} is a FIFO or a device: it has no length of its own; pass --elements N to read N {} elements from it, or save it to a file",
            source.name(),
            s.dtype
        ))),
    }
}

/// Bytes per input, the same for every input.
fn input_len(s: &Settings) -> Result<usize, Failure> {
    let dsize = s.dtype.size() as u64;
    let mut len = None;
    for source in &s.sources {
        let want = source_len(s, source)?;
        if want == 0 || want % dsize != 0 {
            return Err(Failure::usage(format!(
                "an input of {want} bytes is not a positive multiple of the {} element size ({dsize} bytes): check --dtype, or pass --elements",
                s.dtype
            )));
        }
        if *len.get_or_insert(want) != want {
            return Err(Failure::usage("inputs differ in size: every input must hold the same number of elements (or pass --elements)"));
        }
    }
    len.map(|l| l as usize)
        .ok_or_else(|| Failure::usage("no input: pass --input FILE or --synthetic SIZE"))
}

/// Why a resident or a host table must be a regular file (checked by [`whole_len`] before
/// anything is pinned, and again, without waiting on a FIFO, when it is opened).
pub(super) const READ_WHOLE: &str = "it is read whole, so it needs a length";

/// Bytes of each resident file (regular files only: a resident is read whole).
fn resident_lens(s: &Settings) -> Result<Vec<usize>, Failure> {
    s.residents
        .iter()
        .map(|p| {
            whole_len(
                p,
                &format!("resident file {}", p.display()),
                "a resident",
                "",
            )
        })
        .collect()
}

/// Bytes of each `--host-table` file (regular files only: a table is read whole).
pub(super) fn host_table_lens(s: &Settings) -> Result<Vec<usize>, Failure> {
    s.host_tables
        .iter()
        .map(|(name, p)| {
            let flag = format!("--host-table {name}={}: ", p.display());
            let file = format!("{flag}{}", p.display());
            whole_len(p, &file, "a host table", &flag)
        })
        .collect()
}

/// Bytes of a file read whole (`name`: the file as messages name it; `role`: what it is;
/// `prefix`: put before the messages of a file that cannot be opened).
fn whole_len(p: &Path, name: &str, role: &str, prefix: &str) -> Result<usize, Failure> {
    let len = io::input_len(p).map_err(|e| Failure::usage(format!("{prefix}{e}")))?;
    match len {
        Some(0) => Err(Failure::usage(format!("{name} is empty"))),
        Some(n) => Ok(n as usize),
        None => Err(Failure::usage(format!(
            "{name} is a FIFO or a device: {role} is read whole, so it needs a length; save it to a file"
        ))),
    }
}

/// In place when the kernel takes no buffer for an output; then --reduce and --out-dtype
/// cannot apply.
fn runs_in_place<K: Kernel>(s: &Settings, kernel: &K) -> Result<bool, Failure> {
    let params = kernel.params().map_err(Failure::run)?;
    // Buffers bound by name to host tables are no streamed buffer.
    let hosted = |name: &str| s.host_tables.iter().any(|t| t.0 == name);
    let streamed = params.iter().filter(|x| x.is_buffer() && !hosted(&x.name));
    let in_place = streamed.count() == s.sources.len() + s.residents.len();
    if in_place && (s.reduce != 1 || s.out_dtype != s.dtype) {
        return Err(Failure::usage(format!(
            "kernel `{}` has no output buffer, so it runs in place and its result replaces the input: --reduce and --out-dtype need a kernel with one more buffer argument for the output",
            s.entry
        )));
    }
    Ok(in_place)
}

fn stream_options(s: &Settings, budget: u64, block: usize) -> StreamOptions {
    StreamOptions {
        dtype: s.dtype,
        out_dtype: s.out_dtype,
        block_bytes: block,
        in_per_out: s.reduce,
        slots: s.slots,
        vram_budget: budget,
        work: s.work,
        sequential: false,
        stop: Some(crate::cli::stop_flag()),
        check_bounds: s.check_bounds,
        passes: s.passes,
        residency: s.residency,
    }
}

/// 256 MiB, or the largest block of which four slots (each the input blocks plus, out of
/// place, the output block) fit in `room`; a whole number of `--reduce` groups.
fn default_block(s: &Settings, len: usize, room: u64, in_place: bool) -> usize {
    let unit = s.dtype.size() * s.reduce; // input bytes per output element
    let out_per_in = if in_place {
        0.0
    } else {
        s.out_dtype.size() as f64 / unit as f64
    };
    let slot_bytes_per_block_byte = s.sources.len() as f64 + out_per_in;
    let by_budget = (room as f64 / (4.0 * slot_bytes_per_block_byte)) as usize;
    // Never below the smallest block the run may use: a budget too small for it is then
    // reported as such, with the budget that works.
    let floor = validate::smallest_block(len, unit);
    (by_budget.min(256 << 20) / unit * unit).max(floor)
}
