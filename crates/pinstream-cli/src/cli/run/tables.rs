//! The host tables of a run (`--host-table NAME=FILE`): each file read into mapped pinned
//! memory, whose buffer the kernel argument NAME reads in place across the bus. Nothing of
//! a table is copied into VRAM or counted in the VRAM budget. Where the run guards its
//! buffers (`--check-bounds`), the memory holds a guard zone after the table (as large as the
//! table, at most 1 MiB: [`pinstream::engine::guard::hosted_guard_bytes`]), which the engine
//! checks after each kernel as it checks every buffer it binds.

use super::devices::Devices;
use super::settings::Settings;
use crate::cli::Failure;
use pinstream::backend::api::{Api, Device};
use pinstream::engine::guard::{hosted_allocation, hosted_guard_bytes};
use pinstream::engine::io;
use pinstream::engine::job::OutOfRange;
use pinstream::engine::{HostMemory, Hosted};
use pinstream::host::{HostApi, HostError, Pinned};
use serde::Serialize;
use std::ops::Range;
use std::time::Instant;

/// The host tables of a run, each with the buffer its kernel argument reads.
pub(super) struct Tables<A: HostApi> {
    /// Each table's argument name, buffer (declared first: dropped before the memory), its
    /// bytes and the bytes of its guard zone (0 where the run does not guard).
    buffers: Vec<(String, <A as Api>::Buffer, usize, usize)>,
    /// Each table's memory, as [`Self::buffers`].
    memory: Vec<A::HostMemory>,
    /// Each table's report line.
    reports: Vec<TableReport>,
}

/// A host table, as the report names it.
#[derive(Serialize, Clone)]
pub(super) struct TableReport {
    /// The kernel argument it is bound to.
    pub name: String,
    /// The file it holds.
    pub file: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// How kernels reach it in place (the zero-copy mechanism).
    pub mechanism: String,
    /// Seconds spent allocating and reading it.
    pub load_s: f64,
}

impl<A: HostApi> Tables<A> {
    /// Each `--host-table` of `lens` bytes against the run's devices, before anything is
    /// pinned: one device, and a table one buffer covers, with its guard zone where the run
    /// guards (kernels reach a table through one buffer: [`HostApi::one_buffer_covers`]).
    /// Whether the tables are guarded.
    pub fn check(devices: &Devices<A>, s: &Settings, lens: &[usize]) -> Result<bool, Failure> {
        if s.host_tables.is_empty() {
            return Ok(false);
        }
        let [device] = devices.all() else {
            return Err(Failure::usage("--host-table binds one buffer in one device's memory context: run on one device (pass --device N, not --devices)"));
        };
        let guarded = s.check_bounds.applies(device.is_cpu());
        for ((name, path), &bytes) in s.host_tables.iter().zip(lens) {
            let flag = format!("--host-table {name}={}", path.display());
            A::one_buffer_covers(device, bytes).map_err(|e| failure(&flag, &e))?;
            let whole = hosted_allocation(bytes, guarded);
            A::one_buffer_covers(device, whole).map_err(|e| {
                let zone = pinstream::units::Bytes(hosted_guard_bytes(bytes) as u64);
                Failure::usage(format!("{flag}: the table with its bounds guard zone ({zone}) does not fit one buffer: {}; or pass --check-bounds off to bind it unguarded (a write past its end then goes unseen)", pinstream_cli::advice::host_error(&e)))
            })?;
        }
        Ok(guarded)
    }

    /// Reads each `--host-table` file (of `lens` bytes) into mapped pinned memory on the
    /// run's one device (checked by [`Self::check`]), followed by a guard zone where
    /// `guarded`.
    pub fn load(
        devices: &Devices<A>,
        s: &Settings,
        (lens, guarded): (&[usize], bool),
    ) -> Result<Self, Failure> {
        let mut t = Tables {
            buffers: Vec::new(),
            memory: Vec::new(),
            reports: Vec::new(),
        };
        let (Some(device), false) = (devices.all().first(), s.host_tables.is_empty()) else {
            return Ok(t);
        };
        for ((name, path), &len) in s.host_tables.iter().zip(lens) {
            let flag = format!("--host-table {name}={}", path.display());
            let start = Instant::now();
            let whole = hosted_allocation(len, guarded);
            let mut memory = A::mapped(device, whole, false).map_err(|e| failure(&flag, &e))?;
            let read = io::open_regular(path, "read", super::plan::READ_WHOLE)
                .and_then(|f| io::read_file_into(&f, path, &mut Head(&mut memory, len)));
            read.map_err(|e| Failure::usage(format!("{flag}: {e}")))?;
            let buffer = A::device_buffer(&memory).map_err(|e| failure(&flag, &e))?;
            t.reports.push(TableReport {
                name: name.clone(),
                file: path.display().to_string(),
                bytes: len as u64,
                mechanism: memory.zero_copy().unwrap_or_default(),
                load_s: start.elapsed().as_secs_f64(),
            });
            t.memory.push(memory);
            t.buffers.push((name.clone(), buffer, len, whole - len));
        }
        Ok(t)
    }

    /// Each table's argument name, buffer and guard zone, for the run's target.
    pub fn hosted(&self) -> Vec<Hosted<'_, A>> {
        (self.buffers.iter())
            .map(|(name, buffer, len, guard)| Hosted {
                name: name.clone(),
                buffer,
                len: *len,
                guard: *guard,
            })
            .collect()
    }

    /// The tables, as the report names them.
    pub fn reports(&self) -> Vec<TableReport> {
        debug_assert_eq!(self.memory.len(), self.reports.len());
        self.reports.clone()
    }
}

/// The first `.1` bytes of host memory `.0`: what a table's file is read into, before its
/// guard zone.
struct Head<'m, M>(&'m mut M, usize);

impl<M: HostMemory> HostMemory for Head<'_, M> {
    fn len(&self) -> usize {
        self.1
    }
    fn slices(&self, range: Range<usize>) -> Result<Vec<&[u8]>, OutOfRange> {
        match range.end <= self.1 {
            true => self.0.slices(range),
            false => Err(OutOfRange { range, len: self.1 }),
        }
    }
    fn slices_mut(&mut self, range: Range<usize>) -> Result<Vec<&mut [u8]>, OutOfRange> {
        match range.end <= self.1 {
            true => self.0.slices_mut(range),
            false => Err(OutOfRange { range, len: self.1 }),
        }
    }
}

/// A refused or failed host table, the flag named: a failed driver call is a run that
/// failed (exit 1); a refusal (no mechanism, larger than one buffer) a usage error.
fn failure(flag: &str, e: &HostError) -> Failure {
    let text = format!("{flag}: {}", pinstream_cli::advice::host_error(e));
    match e {
        HostError::Backend(_) => Failure::run(text),
        _ => Failure::usage(text),
    }
}

#[cfg(test)]
mod tests {
    use super::failure;
    use pinstream::host::HostError;

    #[test]
    fn a_device_without_a_mechanism_is_refused_naming_the_flag_and_the_reason() {
        let e = HostError::NoZeroCopy {
            why: "Intel discrete GPU: ALLOC_HOST_PTR buffers live in VRAM".into(),
        };
        let f = failure("--host-table table=t.bin", &e);
        assert_eq!(f.code, 2);
        assert!(
            f.message
                .starts_with("--host-table table=t.bin: no zero-copy mechanism")
                && f.message.contains("Intel discrete GPU"),
            "{}",
            f.message
        );
    }
}
