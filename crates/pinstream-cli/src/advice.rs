//! The library's errors in the command line's terms: the structured fields of a budget, a
//! layout, a pool or a host-memory error become advice about flags (`--vram-budget`,
//! `--block`, `--slots`, `--local`, `--reduce`, `--strategy`). The library itself names no
//! flag: a C or Python caller has none.

use pinstream::engine::{BudgetError, LayoutError, PoolError, StreamError};
use pinstream::host::HostError;
use pinstream::units::Bytes;

/// `e` as the command line says it: with the flag that fixes it, where one does.
pub fn stream_error(e: &StreamError) -> String {
    match e {
        StreamError::Budget(b) => budget(b),
        StreamError::Pool(p) => pool(p),
        StreamError::Layout(l) => layout(l),
        StreamError::OnDevice { device, source } => {
            format!("device {device}: {}", stream_error(source))
        }
        e => e.to_string(),
    }
}

/// A host-memory error with the flag or command that fixes it, where one does.
pub fn host_error(e: &HostError) -> String {
    match e {
        HostError::Unsupported { .. } => format!(
            "{e}: run `pinstream devices` to see the strategies it offers, or pass --strategy auto"
        ),
        e => e.to_string(),
    }
}

/// A budget error with the flags that fix it.
pub fn budget(e: &BudgetError) -> String {
    match e {
        BudgetError::BlockAboveMaxAlloc { block, max_alloc } => format!(
            "a block of {} is above the device's max allocation {}: pass --block {} or less",
            Bytes(*block),
            Bytes(*max_alloc),
            Bytes(*max_alloc)
        ),
        BudgetError::OutputBlockAboveMaxAlloc { .. } => format!("{e}: lower --block"),
        BudgetError::TooSmall {
            budget,
            resident,
            slot,
            inputs,
            output,
            fit,
            need,
            need_bytes,
            ..
        } => format!(
            "the VRAM budget of {} holds {} of resident buffers and {fit} slot(s) of {} ({inputs} input block(s){}), but the run needs {need}: raise --vram-budget to at least {}, lower --block, or pass --slots 1",
            Bytes(*budget),
            Bytes(*resident),
            Bytes(*slot),
            if *output { " and an output block" } else { "" },
            Bytes(*need_bytes)
        ),
        e => e.to_string(),
    }
}

/// A pool error with the flags that fix it.
pub fn pool(e: &PoolError) -> String {
    match e {
        PoolError::OverBudget { .. } => format!("{e}: raise --vram-budget or lower --block"),
        e => e.to_string(),
    }
}

/// A layout error with the flags that fix it.
pub fn layout(e: &LayoutError) -> String {
    match e {
        LayoutError::InPlaceReduce { .. } => "in place, each block's result replaces the block, so one output element per input element: use a kernel with an output buffer for another output size (--reduce)".into(),
        LayoutError::ZeroLocal => format!("{e}: pass --local 1 or more, or leave it to the driver"),
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
        let e = StreamError::Budget(BudgetError::TooSmall {
            budget: (1 << 20) + 5,
            resident: 0,
            slot: 1 << 20,
            inputs: 1,
            output: false,
            fit: 1,
            need: 2,
            need_bytes: 2 << 20,
            largest_block: 512 << 10,
        });
        let msg = stream_error(&e);
        assert!(
            msg.contains("1 slot(s) of 1 MiB")
                && msg.contains("raise --vram-budget to at least 2 MiB"),
            "{msg}"
        );
        assert!(msg.ends_with("lower --block, or pass --slots 1"), "{msg}");
    }

    #[test]
    fn a_block_above_the_max_allocation_names_the_block_that_fits() {
        let e = BudgetError::BlockAboveMaxAlloc {
            block: 64 << 40,
            max_alloc: 2 << 30,
        };
        assert_eq!(
            budget(&e),
            "a block of 64 TiB is above the device's max allocation 2 GiB: pass --block 2 GiB or less"
        );
    }

    #[test]
    fn a_strategy_the_device_lacks_names_the_command_and_the_flag() {
        let e = HostError::Unsupported {
            strategy: pinstream::host::Strategy::NvHost,
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

    #[test]
    fn library_messages_name_no_flag() {
        let errors = [
            StreamError::Budget(BudgetError::BlockAboveMaxAlloc {
                block: 1,
                max_alloc: 0,
            }),
            StreamError::Layout(LayoutError::ZeroLocal),
            StreamError::Layout(LayoutError::InPlaceReduce { in_per_out: 2 }),
            StreamError::Pool(PoolError::OverBudget {
                what: "slot 0".into(),
                bytes: 2,
                used: 0,
                budget: 1,
            }),
        ];
        for e in &errors {
            assert!(!e.to_string().contains("--"), "{e}");
            assert!(stream_error(e).contains("--"), "{}", stream_error(e));
        }
    }
}
