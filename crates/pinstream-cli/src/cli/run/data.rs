//! The pinned data of a run ([`Data`]): the inputs pinned and filled (or pinned as the
//! stream goes), the residents read, the output pinned; and the engine's job over them.

use super::devices::Devices;
use super::plan::Plan;
use super::settings::{Settings, Source};
use crate::cli::progressive::Reader;
use crate::cli::Failure;
use pinstream::engine::io;
use pinstream::engine::storage::StagingPlan;
use pinstream::engine::{HostMemory, Job};
use pinstream::host::HostApi;
use std::time::Instant;

/// The pinned data of a run.
pub(super) struct Data<M> {
    /// The inputs.
    pub regions: Vec<M>,
    /// Each input's reader (the in-place one is read again after the baseline).
    pub readers: Vec<Reader>,
    /// The residents.
    pub residents: Vec<M>,
    /// The output, out of place.
    pub output: Option<M>,
    /// Seconds spent pinning.
    pub pin_s: f64,
    /// Seconds spent reading or drawing the inputs.
    pub read_s: f64,
    /// When pinning the inputs began.
    pub call: Instant,
}

impl<M: HostMemory> Data<M> {
    /// Pins and fills the inputs, reads the residents, pins the output (out of place).
    pub fn load<A: HostApi<HostMemory = M>>(
        devices: &Devices<A>,
        s: &Settings,
        plan: &Plan,
    ) -> Result<Self, Failure> {
        let mut d = Self::empty();
        for (i, source) in s.sources.iter().enumerate() {
            d.load_input(devices, s, plan, i, source)?;
        }
        d.load_residents(devices, s, plan)?;
        if !plan.in_place {
            let shares = plan.shares(devices.all().len(), true);
            d.output = Some(d.pin(devices.pin(s, plan.result_len.max(1), &shares)?));
        }
        Ok(d)
    }

    /// The staging of a run streamed from storage: the residents read, and pinned rings of
    /// `rings`' sizes for each input and, out of place, the output (left unfilled).
    pub fn staged<A: HostApi<HostMemory = M>>(
        devices: &Devices<A>,
        s: &Settings,
        plan: &Plan,
        rings: &StagingPlan,
    ) -> Result<Self, Failure> {
        let mut d = Self::empty();
        d.load_residents(devices, s, plan)?;
        for _ in &s.sources {
            let r = d.pin(devices.pin(s, rings.input_bytes, &[])?);
            d.regions.push(r);
        }
        if !plan.in_place {
            d.output = Some(d.pin(devices.pin(s, rings.output_bytes, &[])?));
        }
        Ok(d)
    }

    fn empty() -> Self {
        Data {
            regions: Vec::new(),
            readers: Vec::new(),
            residents: Vec::new(),
            output: None,
            pin_s: 0.0,
            read_s: 0.0,
            call: Instant::now(),
        }
    }

    /// Pins and reads the residents.
    fn load_residents<A: HostApi<HostMemory = M>>(
        &mut self,
        devices: &Devices<A>,
        s: &Settings,
        plan: &Plan,
    ) -> Result<(), Failure> {
        for (p, &n) in s.residents.iter().zip(&plan.residents) {
            let mut r = self.pin(devices.pin(s, n, &[])?);
            let read = io::open_regular(p, "read", super::plan::READ_WHOLE)
                .and_then(|f| io::read_file_into(&f, p, &mut r));
            read.map_err(Failure::usage)?;
            self.residents.push(r);
        }
        Ok(())
    }

    /// Pins input `i` (from `source`) and fills it, or has it filled as it is pinned.
    fn load_input<A: HostApi<HostMemory = M>>(
        &mut self,
        devices: &Devices<A>,
        s: &Settings,
        plan: &Plan,
        i: usize,
        source: &Source,
    ) -> Result<(), Failure> {
        let reader = match source {
            Source::File(p) => Reader::open(p)?,
            Source::Synthetic(_) => Reader::Drawn(s.seed.wrapping_add(i as u64)),
        };
        let shares = plan.shares(devices.all().len(), false);
        let as_pinned = reader.as_pinned().filter(|_| s.progressive);
        let block = plan.opts.block_bytes;
        let pinned = devices.pin_progressive(s, plan.len, &shares, block, as_pinned)?;
        let mut r = self.pin(pinned);
        if !r.is_pending() {
            let stated = s.elements.is_some().then_some("--elements");
            let t = Instant::now();
            reader.fill(&mut r, stated)?;
            self.read_s += t.elapsed().as_secs_f64();
        }
        self.regions.push(r);
        self.readers.push(reader);
        Ok(())
    }

    /// The memory of a pin, its seconds counted.
    fn pin(&mut self, (memory, took): (M, f64)) -> M {
        self.pin_s += took;
        memory
    }

    /// Bytes pinned in all.
    pub fn pinned_bytes(&self) -> u64 {
        self.regions
            .iter()
            .chain(&self.residents)
            .chain(&self.output)
            .map(|r| r.len() as u64)
            .sum()
    }

    /// The run's job: the first input in place (or all as inputs), residents, the output.
    pub fn job<'a>(&'a mut self, in_place: bool, args: &[(String, String)]) -> Job<'a> {
        let (first, rest) = self.regions.split_first_mut().expect("at least one input");
        let rest = rest.iter().map(|r| r as &dyn HostMemory);
        let (in_place, inputs): (Option<&mut dyn HostMemory>, Vec<&dyn HostMemory>) = if in_place {
            (Some(first), rest.collect())
        } else {
            (
                None,
                std::iter::once(&*first as &dyn HostMemory)
                    .chain(rest)
                    .collect(),
            )
        };
        Job {
            in_place,
            inputs,
            output: self.output.as_mut().map(|o| o as &mut dyn HostMemory),
            residents: self
                .residents
                .iter()
                .map(|r| r as &dyn HostMemory)
                .collect(),
            args: args.to_vec(),
        }
    }

    /// The result: the in-place region or the output.
    pub fn result(&self) -> &M {
        self.output.as_ref().unwrap_or(&self.regions[0])
    }
}
