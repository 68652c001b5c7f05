//! The library's errors in the command line's terms: the structured fields of a budget, a
//! layout, a pool or a host-memory error become advice about flags (`--vram-budget`,
//! `--block`, `--slots`, `--local`, `--reduce`, `--strategy`), only those the command at hand
//! takes ([`Flags`]). The library itself names no flag: a C or Python caller has none. The
//! kernel binding's and the run checks' refusals are phrased in `advice/checks.rs`
//! ([`bind_error`], [`validate_error`]).

mod checks;

pub use checks::{bind_error, element_note, user_arg, validate_error};

use pinstream::engine::error::GUARDED;
use pinstream::engine::io::IoError;
use pinstream::engine::{BudgetError, LayoutError, OverrunError, PoolError, StreamError};
use pinstream::gather::GatherError;
use pinstream::host::HostError;
use pinstream::units::Bytes;

/// The flags of one command that advice may name (`cli::applies`' tests check each list
/// against the command's arguments).
#[derive(Clone, Copy, Debug)]
pub struct Flags(pub &'static [&'static str]);

impl Flags {
    /// `pinstream run`.
    pub const RUN: Flags = Flags(&[
        "--vram-budget",
        "--block",
        "--slots",
        "--local",
        "--reduce",
        "--check-bounds",
        "--residency",
        "--from-storage",
    ]);
    /// `pinstream demo`.
    pub const DEMO: Flags = Flags(&["--vram-budget", "--block", "--residency"]);
    /// `pinstream compare`.
    pub const COMPARE: Flags = Flags(&["--vram-budget"]);
    /// `pinstream bench gather`.
    pub const BENCH: Flags = Flags(&["--staging"]);
    /// `pinstream soak`.
    pub const SOAK: Flags = Flags(&["--block"]);
    /// `pinstream doctor`.
    pub const DOCTOR: Flags = Flags(&["--block", "--max-chunk"]);

    fn has(self, flag: &str) -> bool {
        self.0.contains(&flag)
    }

    /// `what` followed by the fixes whose flag this command takes (`a, b, or c`); `what`
    /// alone where it takes none of them.
    fn advise(self, what: String, fixes: &[(&str, String)]) -> String {
        let fixes: Vec<&str> = fixes
            .iter()
            .filter(|(f, fix)| self.has(f) && !fix.is_empty())
            .map(|(_, fix)| fix.as_str())
            .collect();
        match fixes.as_slice() {
            [] => what,
            [one] => format!("{what}: {one}"),
            [init @ .., last] => format!("{what}: {}, or {last}", init.join(", ")),
        }
    }
}

/// `e` as the command line says it: with the flag that fixes it, where `flags` has one.
pub fn stream_error(e: &StreamError, flags: Flags) -> String {
    match e {
        StreamError::Budget(b) => budget(b, flags),
        StreamError::Pool(p) => pool(p, flags),
        StreamError::Layout(l) => layout(l, flags),
        StreamError::Overrun(o) => overrun(o),
        StreamError::Bind(b) => bind_error(b),
        StreamError::Check(c) => validate_error(c, flags),
        StreamError::OnDevice { device, source } => {
            format!("device {device}: {}", stream_error(source, flags))
        }
        e => e.to_string(),
    }
}

/// A file error, with the flag that stated the size where one did (`stated`, e.g.
/// `--elements`): a file shorter than that.
pub fn io_error(e: &IoError, stated: Option<&str>) -> String {
    match (e, stated) {
        (IoError::Short { path, have, want }, Some(flag)) => format!(
            "{} holds {} ({have} bytes), shorter than the {want} bytes stated with {flag}",
            path.display(),
            Bytes(*have)
        ),
        (e, _) => e.to_string(),
    }
}

/// A host-memory error with the flag or command that fixes it, where one does.
pub fn host_error(e: &HostError) -> String {
    match e {
        HostError::Unsupported { .. } => format!(
            "{e}: run `pinstream devices` to see the strategies it offers, or pass --strategy auto"
        ),
        HostError::OneDevice { api } => format!(
            "{e}: pass one device to --device with --api {}",
            api.to_lowercase()
        ),
        e => e.to_string(),
    }
}

/// A budget error with the flags that fix it.
pub fn budget(e: &BudgetError, flags: Flags) -> String {
    match e {
        BudgetError::BlockAboveMaxAlloc { block, max_alloc } => flags.advise(
            format!(
                "a block of {} is above the device's max allocation {}",
                Bytes(*block),
                Bytes(*max_alloc)
            ),
            &[("--block", format!("pass --block {} or less", Bytes(*max_alloc)))],
        ),
        BudgetError::OutputBlockAboveMaxAlloc { .. } => {
            flags.advise(e.to_string(), &[("--block", "lower --block".into())])
        }
        BudgetError::TooSmall {
            budget,
            resident,
            slot,
            inputs,
            output,
            fit,
            need,
            need_bytes,
            guarded,
            ..
        } => flags.advise(
            format!(
                "the VRAM budget of {} holds {} of resident buffers and {fit} slot(s) of {} ({inputs} input block(s){}{}), but the run needs {need}",
                Bytes(*budget),
                Bytes(*resident),
                Bytes(*slot),
                if *output { " and an output block" } else { "" },
                if *guarded { GUARDED } else { "" },
            ),
            &[
                ("--vram-budget", format!("raise --vram-budget to at least {}", Bytes(*need_bytes))),
                ("--block", "lower --block".into()),
                ("--slots", "pass --slots 1".into()),
                (
                    "--check-bounds",
                    if *guarded {
                        "pass --check-bounds off (which drops the guard zones, and the protection)".into()
                    } else {
                        String::new()
                    },
                ),
            ],
        ),
        BudgetError::ResidencyAbove { asked, left, budget, .. } => flags.advise(
            e.to_string(),
            &[
                ("--residency", format!("pass --residency {} or less (or auto)", Bytes(*left))),
                (
                    "--vram-budget",
                    format!("raise --vram-budget to at least {}", Bytes(budget.saturating_sub(*left).saturating_add(*asked))),
                ),
            ],
        ),
        e => e.to_string(),
    }
}

/// A pool error with the flags that fix it.
pub fn pool(e: &PoolError, flags: Flags) -> String {
    match e {
        PoolError::OverBudget { .. } => flags.advise(
            e.to_string(),
            &[
                ("--vram-budget", "raise --vram-budget".into()),
                ("--block", "lower --block".into()),
            ],
        ),
        e => e.to_string(),
    }
}

/// A kernel that wrote past a buffer (the bounds guard, `--check-bounds`): what to check in
/// the kernel, with `--reduce` where the run has one.
pub fn overrun(e: &OverrunError) -> String {
    if e.hosted {
        return format!(
            "{}: check the indices the kernel writes into --host-table {} against the table's size; the run stopped and wrote no output",
            e.what(),
            e.argument
        );
    }
    let reduce = if e.in_per_out > 1 {
        format!(
            " and --reduce: with --reduce {}, a block's output holds count / {} elements",
            e.in_per_out, e.in_per_out
        )
    } else {
        String::new()
    };
    format!(
        "{}: check the kernel's index bounds against its count argument{reduce}; the run stopped and wrote no output",
        e.what()
    )
}

/// A layout error with the flags that fix it.
pub fn layout(e: &LayoutError, flags: Flags) -> String {
    match e {
        LayoutError::InPlaceReduce { .. } => flags.advise(
            "in place, each block's result replaces the block, so one output element per input element".into(),
            &[("--reduce", "use a kernel with an output buffer for another output size (--reduce)".into())],
        ),
        LayoutError::ZeroLocal => flags.advise(
            e.to_string(),
            &[("--local", "pass --local 1 or more, or leave it to the driver".into())],
        ),
        e => e.to_string(),
    }
}

/// A gather error with the flag that fixes it: a staging below the least the gather takes
/// names `--staging` and that least.
pub fn gather(e: &GatherError, flags: Flags) -> String {
    match e {
        GatherError::Capacity { bytes, min, .. } if bytes < min => flags.advise(
            format!(
                "a gather staging of {} is below the least the gather takes, {}",
                Bytes(*bytes as u64),
                Bytes(*min as u64)
            ),
            &[("--staging", format!("pass --staging {min} or more"))],
        ),
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_too_small_names_the_flags_and_the_budget_that_fits() {
        // The fields `crates/pinstream/tests/stream.rs` provokes: two slots of 1 MiB needed,
        // one fits a budget of 1 MiB + 5 bytes.
        let e = |guarded| {
            StreamError::Budget(BudgetError::TooSmall {
                budget: (1 << 20) + 5,
                resident: 0,
                slot: 1 << 20,
                inputs: 1,
                output: false,
                fit: 1,
                need: 2,
                need_bytes: 2 << 20,
                largest_block: 512 << 10,
                guarded,
            })
        };
        let msg = stream_error(&e(false), Flags::RUN);
        assert!(
            msg.contains("1 slot(s) of 1 MiB")
                && msg.contains("raise --vram-budget to at least 2 MiB"),
            "{msg}"
        );
        assert!(msg.ends_with("lower --block, or pass --slots 1"), "{msg}");
        // With the bounds guard, the sizes say they count it, and how to drop it.
        let msg = stream_error(&e(true), Flags::RUN);
        assert!(
            msg.contains(
                "(1 input block(s), each buffer followed by a bounds guard at least as large as itself)"
            ),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "pass --slots 1, or pass --check-bounds off (which drops the guard zones, and the protection)"
            ),
            "{msg}"
        );
    }

    #[test]
    fn a_block_above_the_max_allocation_names_the_block_that_fits() {
        let e = BudgetError::BlockAboveMaxAlloc {
            block: 64 << 40,
            max_alloc: 2 << 30,
        };
        assert_eq!(
            budget(&e, Flags::RUN),
            "a block of 64 TiB is above the device's max allocation 2 GiB: pass --block 2 GiB or less"
        );
    }

    #[test]
    fn a_strategy_the_device_lacks_names_the_command_and_the_flag() {
        let e = HostError::Unsupported {
            pinning: "nv-host".into(),
            device: "0 (cpu)".into(),
            why: "needs cl_nv_create_buffer".into(),
        };
        assert!(!e.to_string().contains("--"), "{e}");
        let msg = host_error(&e);
        assert!(
            msg.starts_with(
                "strategy `nv-host` is not available on device 0 (cpu): needs cl_nv_create_buffer"
            ) && msg.ends_with(
                "run `pinstream devices` to see the strategies it offers, or pass --strategy auto"
            ),
            "{msg}"
        );
    }

    /// Vulkan memory shared with other devices: the library's words name no flag (C and
    /// Python callers have none), the command line's name `--device` and `--api vulkan`.
    #[test]
    fn memory_pinned_for_one_device_names_the_device_flag() {
        let e = HostError::OneDevice { api: "Vulkan" };
        assert!(!e.to_string().contains("--"), "{e}");
        let msg = host_error(&e);
        assert!(
            msg.starts_with("Vulkan memory is pinned for one device")
                && msg.ends_with("pass one device to --device with --api vulkan"),
            "{msg}"
        );
    }

    #[test]
    fn an_overrun_names_the_kernel_the_argument_the_block_and_reduce() {
        let mut e = OverrunError {
            kernel: "over".into(),
            argument: "y".into(),
            role: "the output block".into(),
            block: 5,
            pass: 0,
            size: 1 << 20,
            guard: 1 << 20,
            past: 4096,
            at_least: true,
            in_per_out: 2,
            hosted: false,
        };
        let msg = overrun(&e);
        assert!(msg.starts_with("kernel `over` wrote at least 4096 bytes past the end of its buffer `y` (the output block, 1048576 bytes) in block 5"), "{msg}");
        assert!(
            msg.contains("with --reduce 2, a block's output holds count / 2 elements"),
            "{msg}"
        );
        e.in_per_out = 1;
        assert!(!overrun(&e).contains("--reduce"), "{}", overrun(&e));
        // A host table: its bound is its size, named by the flag that binds it.
        (e.hosted, e.argument, e.in_per_out) = (true, "table".into(), 2);
        let msg = overrun(&e);
        assert!(
            msg.contains("into --host-table table against the table's size")
                && msg.ends_with("wrote no output")
                && !msg.contains("--reduce"),
            "{msg}"
        );
    }

    #[test]
    fn a_short_file_names_the_flag_that_stated_the_size() {
        let e = IoError::Short {
            path: "in.bin".into(),
            have: 1024,
            want: 4096,
        };
        assert!(!e.to_string().contains("--"), "{e}");
        assert_eq!(
            io_error(&e, Some("--elements")),
            "in.bin holds 1 KiB (1024 bytes), shorter than the 4096 bytes stated with --elements"
        );
        assert_eq!(io_error(&e, None), e.to_string());
    }

    #[test]
    fn library_messages_name_no_flag() {
        let errors = [
            StreamError::Budget(BudgetError::BlockAboveMaxAlloc {
                block: 1,
                max_alloc: 0,
            }),
            StreamError::Layout(LayoutError::ZeroLocal),
            StreamError::Layout(LayoutError::InPlaceReduce { in_per_out: 2 }),
            StreamError::from(OverrunError {
                kernel: "k".into(),
                argument: "y".into(),
                role: "the output block".into(),
                block: 3,
                pass: 0,
                size: 4096,
                guard: 4096,
                past: 4,
                at_least: false,
                in_per_out: 2,
                hosted: false,
            }),
            StreamError::Pool(PoolError::OverBudget {
                what: "slot 0".into(),
                bytes: 2,
                used: 0,
                budget: 1,
            }),
        ];
        for e in &errors {
            assert!(!e.to_string().contains("--"), "{e}");
            let advice = stream_error(e, Flags::RUN);
            assert!(advice.contains("--"), "{advice}");
        }
    }

    #[test]
    fn advice_names_only_the_flags_the_command_takes() {
        let e = StreamError::Budget(BudgetError::TooSmall {
            budget: 1 << 20,
            resident: 0,
            slot: 1 << 20,
            inputs: 1,
            output: false,
            fit: 0,
            need: 1,
            need_bytes: 2 << 20,
            largest_block: 1 << 20,
            guarded: true,
        });
        let demo = stream_error(&e, Flags::DEMO);
        assert!(!demo.contains("--slots"), "{demo}");
        assert!(
            demo.ends_with("raise --vram-budget to at least 2 MiB, or lower --block"),
            "{demo}"
        );
        let compare = stream_error(&e, Flags::COMPARE);
        assert!(
            compare.ends_with("but the run needs 1: raise --vram-budget to at least 2 MiB"),
            "{compare}"
        );
        let none = stream_error(&e, Flags(&[]));
        assert!(!none.contains("--") && none.ends_with("needs 1"), "{none}");
    }
}
