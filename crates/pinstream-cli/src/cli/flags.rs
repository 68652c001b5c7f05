//! Flags that several commands take, defined once: typed values ([`Wait`], [`OnOff`]) and groups of flags a command flattens into its own (`#[command(flatten)]`:
//! [`DeviceFlags`], [`WaitFlag`], [`BudgetFlags`]). A command whose help says more of a flag
//! (its default, what it does there) replaces the help with `#[command(mut_arg(...))]`.

use super::device_sets::{parse_devices, DeviceSet};
use super::dispatch::{ApiOptions, VkCopyName};
use super::{files, size_arg, Failure};
use pinstream::backend::api::WaitMode;
use pinstream::engine::io::Output;
use pinstream::host::{HostApi, StrategyChoice};
use std::path::PathBuf;

/// `--device` and `--devices`: the device, or the devices, a command runs on.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceFlags {
    /// Device index from `pinstream devices`.
    #[arg(long)]
    pub device: Option<usize>,
    /// Several devices at once: indices (`0,1`) or `all` (every device of the default
    /// device's platform and type).
    #[arg(long, value_parser = parse_devices)]
    pub devices: Option<DeviceSet>,
}

/// `--vk-copy` and `--vk-huge-pages`: how `--api vulkan`'s instance copies between host
/// memory and the device and pins host memory ([`ApiOptions`]).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct VkFlags {
    /// With --api vulkan: how copies run. transfer: vkCmdCopyBuffer on the transfer-only queue
    /// family (NVIDIA's copy engines), uploads and downloads on queues of their own beside kernels;
    /// universal: on the compute family (on NVIDIA the universal one); shader: a compute shader
    /// copying 16-byte words of the imported host memory; split: each copy in halves on two
    /// transfer queues at once; mixed: uploads as transfer, downloads as shader; auto (the
    /// default): each copy as universal while the other direction has no copy in flight, else as
    /// transfer; crossed: uploads by the shader (512 workgroups), downloads by vkCmdCopyBuffer on
    /// the compute-only family. The report's `copies:` line names the queue families they ran on.
    #[arg(long, value_enum)]
    pub vk_copy: Option<VkCopyName>,
    /// With --api vulkan: whether imported host memory asks for 2 MiB pages (on, the
    /// default) or stays on the system's 4 KiB pages (off).
    #[arg(long, value_enum)]
    pub vk_huge_pages: Option<OnOff>,
}

impl VkFlags {
    /// The instance options these flags ask for.
    pub fn options(&self) -> ApiOptions {
        ApiOptions {
            vk_copy: self.vk_copy,
            vk_huge_pages: self.vk_huge_pages.map(OnOff::on),
            asked: None,
        }
    }
}

/// `--wait`: how OpenCL waits for commands.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct WaitFlag {
    /// How OpenCL waits for commands: auto (the stream's waits spin 100 µs, then sleep;
    /// measured on the H200 at equal throughput for a fifth of the CPU), driver
    /// (clWaitForEvents, which spins a core on NVIDIA) or sleep (looks at the command's
    /// status, sleeping ~50 µs between looks).
    #[arg(long, value_enum, default_value = "auto")]
    pub wait: Wait,
}

/// `--vram-budget` and `--block`: the device memory a stream may use and its blocks' size.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct BudgetFlags {
    /// Device memory the stream may use.
    #[arg(long, value_parser = size_arg)]
    pub vram_budget: Option<u64>,
    /// Input bytes per block.
    #[arg(long, value_parser = size_arg)]
    pub block: Option<u64>,
}

/// `--wait`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wait {
    /// The stream's waits spin 100 µs, then sleep.
    Auto,
    /// clWaitForEvents (which spins a core on NVIDIA).
    Driver,
    /// Sleep between looks at the command's status.
    Sleep,
}

impl From<Wait> for WaitMode {
    fn from(w: Wait) -> Self {
        match w {
            Wait::Auto => WaitMode::Auto,
            Wait::Driver => WaitMode::Driver,
            Wait::Sleep => WaitMode::Sleep,
        }
    }
}

/// A flag that is on or off (`--progressive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

impl OnOff {
    /// True for `on`.
    pub fn on(self) -> bool {
        self == OnOff::On
    }
}

/// `--save` and `--json`: where a measurement's JSON report goes.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportFlags {
    /// Also write the JSON report here.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ReportFlags {
    /// `--save` checked and prepared, before any work.
    pub fn prepare(&self) -> Result<Vec<Output>, Failure> {
        files::prepare(&files::given(&[("--save", &self.save)]), &[], None)
    }

    /// Prints `report` (as JSON with `--json`, else `text`), then saves it to `outputs`.
    pub fn show<R: serde::Serialize>(
        &self,
        outputs: &[Output],
        report: &R,
        text: impl FnOnce(&R) -> String,
    ) -> Result<(), Failure> {
        let json = serde_json::to_string_pretty(report).map_err(Failure::run)?;
        let named = files::given(&[("--save", &self.save)]);
        let saves = files::contents(&named, outputs, &json, &[]);
        files::report_and_save(self.json, &json, || text(report), &saves)
    }
}

/// `--strategy` where one strategy is measured: a name, or `auto` (auto's first); `all` is
/// refused with what to do.
pub fn one_strategy(s: &str) -> Result<String, String> {
    match s {
        "all" => Err(
            "this measures one strategy: name it, or leave --strategy out for auto's first".into(),
        ),
        s => Ok(s.to_string()),
    }
}

/// `--sizes` parsed (`default` where it is not given).
pub fn sizes(given: Option<&str>, default: &str) -> Result<Vec<usize>, Failure> {
    pinstream_lab::tools::bench::parse_sizes(given.unwrap_or(default))
        .map_err(|e| Failure::usage(format!("invalid --sizes {e}")))
}

/// The pinnings `strategy` names on `device`: every one offered (`None`), the first of auto's
/// order, or the one forced (why it is not offered, where it is not).
pub fn pinnings<A: HostApi>(
    device: &A::Device,
    strategy: Option<StrategyChoice>,
) -> Result<Vec<A::Pinning>, Failure> {
    let name = match strategy {
        None => return Ok(A::pinnings(device)),
        Some(StrategyChoice::Auto) => {
            return Ok(A::default_pinning(device).0.into_iter().collect())
        }
        Some(StrategyChoice::Forced(s)) => s.to_string(),
    };
    let named = |p: &A::Pinning| p.to_string() == name;
    if let Some(p) = A::pinnings(device).into_iter().find(named) {
        return Ok(vec![p]);
    }
    let why = A::lacking(device).into_iter().find(|(p, _)| named(p));
    let why = why.map_or_else(
        || format!("{} has no such pinning", A::NAME),
        |(_, why)| why,
    );
    Err(Failure::usage(format!(
        "strategy `{name}` is not available on this device: {why}; run `pinstream devices`"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// Every `--wait` value is the wait mode of the same name, as the library spells it.
    #[test]
    fn each_wait_value_is_the_mode_of_its_name() {
        for w in Wait::value_variants() {
            let name = w.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(WaitMode::from(*w), name.parse::<WaitMode>().unwrap());
            assert_eq!(WaitMode::from(*w).to_string(), name);
        }
    }
}
