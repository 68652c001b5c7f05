//! The streams of a run ([`Streams`]): the three-queue stream, the one-queue baseline beside
//! it, with progress, the stop message and the kernel watchdog; and the report of the run.

use super::data::Data;
use super::devices::{pinning_of, Devices};
use super::output::RunReport;
use super::plan::Plan;
use super::settings::Settings;
use super::storage::StorageLine;
use super::tables::Tables;
use crate::cli::device_sets::Waiting;
use crate::cli::report::{blocks_bar, VramDuring};
use crate::cli::signals::{self, Mode};
use crate::cli::{stream_failure, Failure};
use pinstream::backend::api::{Device, KernelOf};
use pinstream::engine::{run_on_each, HostMemory, Progress, StreamOptions, StreamReport, Target};
use pinstream::host::HostApi;
use pinstream::units::Bytes;
use pinstream_cli::advice::Flags;

/// What every stream of a run shares.
pub(super) struct Streams<'r, A: HostApi> {
    /// The settings.
    pub s: &'r Settings,
    /// The devices.
    pub devices: &'r Devices<A>,
    /// The plan.
    pub plan: &'r Plan,
    /// The host tables, read in place by the kernel.
    pub tables: &'r Tables<A>,
}

impl<A: HostApi> Streams<'_, A> {
    /// The same work on one in-order queue; the in-place input is read (or drawn) again
    /// after.
    pub fn baseline(
        &self,
        kernels: &mut [KernelOf<A>],
        data: &mut Data<A::HostMemory>,
    ) -> Result<StreamReport, Failure> {
        let (rep, _) = self.once(kernels, data, true)?;
        if self.plan.in_place {
            signals::phase("while reading the in-place input again", Mode::Exit)?;
            let t = std::time::Instant::now();
            data.readers[0].fill(&mut data.regions[0], None)?;
            data.read_s += t.elapsed().as_secs_f64();
        }
        Ok(rep)
    }

    /// One stream over the data: the baseline on one queue (`sequential`) or the
    /// three-queue run, with progress, the stop message and the kernel watchdog; its report
    /// and the VRAM peak.
    pub fn once(
        &self,
        kernels: &mut [KernelOf<A>],
        data: &mut Data<A::HostMemory>,
        sequential: bool,
    ) -> Result<(StreamReport, Option<u64>), Failure> {
        let job = data.job(self.plan.in_place, &self.s.args);
        self.drive(kernels, sequential, |targets, o, progress| {
            run_on_each(targets, job, o, progress).map_err(|e| stream_failure(e, Flags::RUN))
        })
    }

    /// Runs `stream` on the run's targets with the run's options (`sequential`: on one
    /// queue), with progress, the stop message and the kernel watchdog; its result and the
    /// VRAM peak.
    pub fn drive<R>(
        &self,
        kernels: &mut [KernelOf<A>],
        sequential: bool,
        stream: impl FnOnce(
            &mut [Target<'_, A::Device>],
            &StreamOptions,
            &(dyn Fn(Progress) + Sync),
        ) -> Result<R, Failure>,
    ) -> Result<(R, Option<u64>), Failure> {
        let (s, plan) = (self.s, self.plan);
        let o = StreamOptions {
            sequential,
            ..plan.opts.clone()
        };
        let blocks = (plan.len as u64)
            .div_ceil(o.block_bytes.max(1) as u64)
            .saturating_mul(o.passes as u64);
        let name = if sequential { "sequential" } else { "stream" };
        let bar = blocks_bar(blocks, s.json, name);
        let names = self.devices.all().iter().map(|d| d.describe()).collect();
        let waiting = Waiting::new(names, blocks as usize);
        signals::phase(waiting.after(None), Mode::Orderly)?;
        if let Some(t) = s.kernel_timeout {
            signals::watchdog(t);
        }
        let mut targets: Vec<Target<'_, A::Device>> = self
            .devices
            .all()
            .iter()
            .zip(kernels.iter_mut())
            .map(|(d, k)| Target::new(d, k).with_hosted(self.tables.hosted()))
            .collect();
        let (r, peak) = self.devices.probe().peak_during(|| {
            stream(&mut targets, &o, &|p: Progress| {
                bar.set_position(p.blocks);
                bar.set_message(Bytes(p.bytes).to_string());
                signals::waiting_for(waiting.after(Some(&p)));
            })
        });
        bar.finish_and_clear();
        let rep = r?;
        signals::phase("after the stream", Mode::Exit)?;
        Ok((rep, peak))
    }

    /// The VRAM readings of the run: `before` it, and its `peak`.
    pub fn vram(&self, before: Option<u64>, peak: Option<u64>) -> VramDuring {
        VramDuring {
            source: self.devices.probe().source().describe(),
            before,
            peak,
            peak_over_before: before.zip(peak).map(|(b, p)| p as i64 - b as i64),
            budget: self.plan.opts.vram_budget,
        }
    }

    /// The report of the run: its data, the VRAM readings, the stream and the baseline, and
    /// the output where it was `written`.
    pub fn report(
        &self,
        data: &Data<A::HostMemory>,
        vram: VramDuring,
        stream: StreamReport,
        sequential: Option<StreamReport>,
        written: bool,
    ) -> RunReport {
        let s = self.s;
        let (strategy, strategy_reason) = pinning_of(&data.regions[0]);
        RunReport {
            device: self.devices.names(),
            numa: self.devices.numa(s, &data.regions[0]),
            kernel: format!("{} in {}", s.entry, s.kernel.display()),
            in_place: self.plan.in_place,
            strategy,
            strategy_reason,
            pinned_bytes: data.pinned_bytes(),
            pin_s: data.pin_s,
            read_s: data.read_s,
            progressive: data.regions.iter().any(|r| r.is_pending()),
            first_block_ms: sequential
                .as_ref()
                .and_then(|s| s.first_upload_at)
                .or(stream.first_upload_at)
                .map(|t| t.saturating_duration_since(data.call).as_secs_f64() * 1e3),
            host_tables: self.tables.reports(),
            vram,
            stream,
            sequential,
            storage: StorageLine::resident(self.plan.storage_why()),
            output: s
                .output
                .as_ref()
                .filter(|_| written)
                .map(|p| p.display().to_string()),
        }
    }
}
