//! The run's devices through any API ([`Devices`]): opened as `--device`/`--devices` ask,
//! the host memory pinned for them (NUMA placement, progressive pins), and what the report
//! says of them.

use super::settings::Settings;
use crate::cli::device_sets::{device_nodes, placement};
use crate::cli::dispatch::{open_asked, Opened};
use crate::cli::{out, Failure};
use pinstream::backend::api::DeviceOf;
use pinstream::engine::pool::default_budget;
use pinstream::host::{
    Fill, HostApi, HostError, PinRequest, Pinned, Progressive, Strategy, StrategyChoice,
};
use pinstream::vram::VramProbe;
use std::ops::Range;
use std::time::Instant;

/// The devices of a run, opened through `A`.
pub(super) struct Devices<A: HostApi> {
    opened: Opened<A>,
    /// Each device's NUMA node, where known.
    nodes: Vec<Option<u32>>,
}

impl<A: HostApi> Devices<A> {
    /// Opens the devices `s` names (default: the first GPU, else the first device).
    pub fn open(instance: &A::Instance, s: &Settings) -> Result<Self, Failure> {
        let ask = &s.devices;
        let opened = open_asked::<A>(instance, s.api, ask.one, ask.set.as_ref(), s.wait.into())?;
        let nodes = device_nodes(&opened.adapters);
        Ok(Devices { opened, nodes })
    }

    /// The devices, in the order chosen.
    pub fn all(&self) -> &[DeviceOf<A>] {
        &self.opened.devices
    }

    /// The devices as the report names them.
    pub fn names(&self) -> String {
        self.opened.names()
    }

    /// The VRAM counter (of the first device).
    pub fn probe(&self) -> &VramProbe {
        &self.opened.probe
    }

    /// The default VRAM budget, per device (the smallest device's).
    pub fn default_budget(&self) -> u64 {
        let smallest = self.opened.adapters.iter().map(|d| d.memory).min();
        default_budget(smallest.unwrap_or(0), self.probe()).0
    }

    /// What NUMA placement does for these devices, where `memory` shows how they pin.
    pub fn numa(&self, s: &Settings, memory: &A::HostMemory) -> String {
        if !memory.places_pages() {
            let api = A::NAME.to_lowercase();
            return format!("--api {api}: no NUMA placement (the OpenCL path has --numa)");
        }
        let shares = vec![0..1; self.nodes.len()];
        placement(s.devices.numa, &shares, &self.nodes).1
    }

    /// Pins `bytes` as `s` asks, usable by every device; `shares`: each device's byte range
    /// of it (for NUMA placement; empty: no placement). The memory and the seconds it took.
    pub fn pin(
        &self,
        s: &Settings,
        bytes: usize,
        shares: &[Range<usize>],
    ) -> Result<(A::HostMemory, f64), Failure> {
        let placement = placement(s.devices.numa, shares, &self.nodes).0;
        self.pin_with(s, bytes, placement, None)
    }

    /// As [`Self::pin`], pinned as the stream goes where `A` and `s` allow it (one device,
    /// no NUMA placement, a pinning that goes chunk by chunk), each chunk of
    /// `block_bytes`-blocks written by `fill` as it is made resident; otherwise exactly
    /// [`Self::pin`] (`fill` is then not called: the caller fills the memory).
    pub fn pin_progressive(
        &self,
        s: &Settings,
        bytes: usize,
        shares: &[Range<usize>],
        block_bytes: usize,
        fill: Option<Fill>,
    ) -> Result<(A::HostMemory, f64), Failure> {
        let placement = placement(s.devices.numa, shares, &self.nodes).0;
        // `fill` is there only with --progressive on (and an input it can read chunk by
        // chunk); where the pin cannot go chunk by chunk, say why it goes up front.
        let up_front = match (&fill, self.all().len() > 1, !placement.is_empty()) {
            (_, true, _) => Some("over several devices (every device registers every chunk): run one device".to_string()),
            (_, _, true) => Some("with NUMA placement (--numa on binds the pages before they are made): use --numa off".to_string()),
            (None, ..) => Some("for an input that is not a regular file (a FIFO or a device is read in order)".to_string()),
            _ => self.up_front(s.strategy),
        };
        let (Some(fill), None) = (fill, &up_front) else {
            if let (true, Some(why)) = (s.progressive, up_front) {
                out::note(format!("--progressive on pins up front {why}"));
            }
            return self.pin_with(s, bytes, placement, None);
        };
        let progressive = Progressive {
            block_bytes,
            fill: Some(fill),
        };
        self.pin_with(s, bytes, placement, Some(progressive))
    }

    /// Why `A` pins up front with `choice`, with the fix where `--strategy` has one.
    fn up_front(&self, choice: StrategyChoice) -> Option<String> {
        let why = A::up_front(&self.all()[0], pinning::<A>(choice))?;
        let register = pinning::<A>(StrategyChoice::Forced(Strategy::Register));
        Some(match register {
            Some(_) => format!("{why}: use --strategy register"),
            None => why,
        })
    }

    /// Pins `bytes` on the first device, shared with the others.
    fn pin_with(
        &self,
        s: &Settings,
        bytes: usize,
        placement: Vec<(Range<usize>, u32)>,
        progressive: Option<Progressive>,
    ) -> Result<(A::HostMemory, f64), Failure> {
        let (first, others) = self.all().split_first().expect("one device at least");
        let others: Vec<&A::Device> = others.iter().collect();
        let request = PinRequest {
            pinning: pinning::<A>(s.strategy),
            shared_with: &others,
            placement,
            progressive,
            measure_shared: false,
            ..PinRequest::default()
        };
        let start = Instant::now();
        let memory = A::pin(first, bytes, request).map_err(host_failure)?;
        Ok((memory, start.elapsed().as_secs_f64()))
    }
}

/// The pinning `--strategy` asks of `A`: `--strategy` names OpenCL strategies, so an API that
/// pins another way gets its own default (`applies` refuses `--strategy` beside it).
fn pinning<A: HostApi>(choice: StrategyChoice) -> Option<A::Pinning> {
    let StrategyChoice::Forced(strategy) = choice else {
        return None;
    };
    (&strategy as &dyn std::any::Any)
        .downcast_ref::<A::Pinning>()
        .copied()
}

/// A pinning failure as a usage error, with the flag that fixes it where one does.
fn host_failure(e: HostError) -> Failure {
    let text = pinstream_cli::advice::host_error(&e);
    match e {
        // CUDA's failed pin is a run that failed (exit 1), as `run --api cuda` said before
        // the fronts were written once; OpenCL's pin failures stay usage errors (exit 2).
        HostError::Backend(_) => Failure::run(text),
        _ => Failure::usage(text),
    }
}

/// Pinned memory's report lines: how it was pinned, and why.
pub(super) fn pinning_of<M: Pinned>(memory: &M) -> (String, String) {
    (memory.pinning_name(), memory.reason())
}

#[cfg(test)]
mod tests {
    use super::pinning;
    use pinstream::backend::opencl::OpenCl;
    use pinstream::host::{Strategy, StrategyChoice};

    #[test]
    fn strategy_is_opencls_pinning_and_auto_is_the_apis_own_choice() {
        let forced = StrategyChoice::Forced(Strategy::Mlock);
        assert_eq!(pinning::<OpenCl>(forced), Some(Strategy::Mlock));
        assert_eq!(pinning::<OpenCl>(StrategyChoice::Auto), None);
    }
}
