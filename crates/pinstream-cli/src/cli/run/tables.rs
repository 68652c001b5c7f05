//! The host tables of a run (`--host-table NAME=FILE`): each file read into mapped pinned
//! memory, whose buffer the kernel argument NAME reads in place across the bus. Nothing of
//! a table is copied into VRAM or counted in the VRAM budget.

use super::devices::Devices;
use super::settings::Settings;
use crate::cli::Failure;
use pinstream::backend::api::Api;
use pinstream::engine::io;
use pinstream::host::{HostApi, HostError, Pinned};
use serde::Serialize;
use std::time::Instant;

/// The host tables of a run, each with the buffer its kernel argument reads.
pub(super) struct Tables<A: HostApi> {
    /// Each table's argument name and buffer (declared first: dropped before the memory).
    buffers: Vec<(String, <A as Api>::Buffer)>,
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
    /// pinned: one device, and a table one buffer covers (kernels reach a table through one
    /// buffer: [`HostApi::one_buffer_covers`]).
    pub fn check(devices: &Devices<A>, s: &Settings, lens: &[usize]) -> Result<(), Failure> {
        if s.host_tables.is_empty() {
            return Ok(());
        }
        let [device] = devices.all() else {
            return Err(Failure::usage("--host-table binds one buffer in one device's memory context: run on one device (pass --device N, not --devices)"));
        };
        for ((name, path), &bytes) in s.host_tables.iter().zip(lens) {
            A::one_buffer_covers(device, bytes)
                .map_err(|e| failure(&format!("--host-table {name}={}", path.display()), &e))?;
        }
        Ok(())
    }

    /// Reads each `--host-table` file (of `lens` bytes) into mapped pinned memory on the
    /// run's one device (checked by [`Self::check`]).
    pub fn load(devices: &Devices<A>, s: &Settings, lens: &[usize]) -> Result<Self, Failure> {
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
            let mut memory = A::mapped(device, len, false).map_err(|e| failure(&flag, &e))?;
            let read = io::open_regular(path, "read", super::plan::READ_WHOLE)
                .and_then(|f| io::read_file_into(&f, path, &mut memory));
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
            t.buffers.push((name.clone(), buffer));
        }
        Ok(t)
    }

    /// Each table's argument name and buffer, for the run's target.
    pub fn hosted(&self) -> Vec<(String, &<A as Api>::Buffer)> {
        self.buffers.iter().map(|(n, b)| (n.clone(), b)).collect()
    }

    /// The tables, as the report names them.
    pub fn reports(&self) -> Vec<TableReport> {
        debug_assert_eq!(self.memory.len(), self.reports.len());
        self.reports.clone()
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
