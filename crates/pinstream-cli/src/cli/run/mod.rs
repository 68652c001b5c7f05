//! `pinstream run`: a user's kernel (OpenCL C, or CUDA C with `--api cuda`) over files or
//! synthetic data larger than VRAM, written once over any [`HostApi`].
//!
//! The flags become [`settings::Settings`] first. Everything that can be checked is checked
//! before any memory is pinned ([`plan::Plan`]): the inputs and outputs, the kernel's
//! arguments, the sizes and the launch against the kernel's limits on its device, and all
//! regions against the host memory. Signals are honoured in every phase
//! (`super::signals`); outputs are written whole or not at all.

mod build;
mod data;
mod devices;
mod output;
mod plan;
mod settings;
mod storage;
mod stored;
mod stream;
mod tables;
mod tiers;

pub use settings::Args;

use super::dispatch::{with_api, Front};
use super::signals::{self, Mode};
use super::Failure;
use data::Data;
use devices::Devices;
use output::{trace_json, write_results};
use pinstream::engine::io::Output;
use pinstream::host::HostApi;
use plan::Plan;
use settings::Settings;
use stream::Streams;
use tables::Tables;

/// Runs `run` as `a` asks.
pub fn run(a: Args) -> Result<(), Failure> {
    let s = Settings::new(a);
    let outputs = output::prepare(&s)?;
    signals::phase("while opening the device", Mode::Exit)?;
    with_api(
        s.api,
        RunFront {
            s: &s,
            outputs: &outputs,
        },
    )
}

/// `run` over one API.
struct RunFront<'a> {
    s: &'a Settings,
    outputs: &'a [Output],
}

impl Front for RunFront<'_> {
    type Output = ();

    fn run<A: HostApi>(self, instance: A::Instance) -> Result<(), Failure> {
        let devices = Devices::<A>::open(&instance, self.s)?;
        run_with(&devices, self.s, self.outputs)
    }
}

/// The run on `devices`: build, plan and check, pin and fill, stream (after the baseline
/// where asked), write, report.
fn run_with<A: HostApi>(
    devices: &Devices<A>,
    s: &Settings,
    outputs: &[Output],
) -> Result<(), Failure> {
    signals::phase(
        format!("while reading and building {}", s.kernel.display()),
        Mode::Exit,
    )?;
    let table_guard = Tables::check(devices, s, &plan::host_table_lens(s)?)?;
    let mut kernels = build::kernels(devices.all(), s)?;
    let budget = s.vram_budget.unwrap_or_else(|| devices.default_budget());
    let plan = Plan::new(s, &kernels[0], budget, (devices.all().len(), table_guard))?;
    signals::phase("while reading the host tables", Mode::Exit)?;
    let tables = Tables::load(devices, s, (&plan.host_tables, plan.table_guard))?;
    if let Ok(why) = &plan.storage {
        let streams = Streams {
            s,
            devices,
            plan: &plan,
            tables: &tables,
        };
        return stored::run_stored(&streams, &mut kernels, outputs, why.clone());
    }
    signals::phase("while pinning and reading the inputs", Mode::Exit)?;
    let mut data = Data::load(devices, s, &plan)?;
    let streams = Streams {
        s,
        devices,
        plan: &plan,
        tables: &tables,
    };
    let vram_before = devices.probe().used();
    let sequential = match s.compare_sequential {
        true => Some(streams.baseline(&mut kernels, &mut data)?),
        false => None,
    };
    let (rep, peak) = streams.once(&mut kernels, &mut data, false)?;
    let trace = trace_json(&rep, sequential.as_ref())?;
    let written = write_results(s, outputs, data.result(), plan.result_len, &trace);
    let vram = streams.vram(vram_before, peak);
    let report = streams.report(&data, vram, rep, sequential, written.is_ok());
    let printed = stored::print(s, &report);
    written.and(printed)
}
