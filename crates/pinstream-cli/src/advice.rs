//! The library's errors in the command line's terms: the structured fields of a budget, a
//! layout or a pool error become advice about flags (`--vram-budget`, `--block`, `--slots`,
//! `--local`, `--reduce`). The library itself names no flag: a C or Python caller has none.

use pinstream::engine::error::GUARDED;
use pinstream::engine::{BudgetError, LayoutError, OverrunError, PoolError, StreamError};
use pinstream::units::Bytes;

/// `e` as the command line says it: with the flag that fixes it, where one does.
pub fn stream_error(e: &StreamError) -> String {
    match e {
        StreamError::Budget(b) => budget(b),
        StreamError::Pool(p) => pool(p),
        StreamError::Layout(l) => layout(l),
        StreamError::Overrun(o) => overrun(o),
        StreamError::OnDevice { device, source } => {
            format!("device {device}: {}", stream_error(source))
        }
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
            guarded,
            ..
        } => format!(
            "the VRAM budget of {} holds {} of resident buffers and {fit} slot(s) of {} ({inputs} input block(s){}{}), but the run needs {need}: raise --vram-budget to at least {}, lower --block, or pass --slots 1{}",
            Bytes(*budget),
            Bytes(*resident),
            Bytes(*slot),
            if *output { " and an output block" } else { "" },
            if *guarded { GUARDED } else { "" },
            Bytes(*need_bytes),
            if *guarded { " (--check-bounds off drops the guard zones, and the protection)" } else { "" }
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

/// A kernel that wrote past a buffer (the bounds guard, `--check-bounds`): what to check in
/// the kernel, with `--reduce` where the run has one.
pub fn overrun(e: &OverrunError) -> String {
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
        let msg = stream_error(&e(false));
        assert!(
            msg.contains("1 slot(s) of 1 MiB")
                && msg.contains("raise --vram-budget to at least 2 MiB"),
            "{msg}"
        );
        assert!(msg.ends_with("lower --block, or pass --slots 1"), "{msg}");
        // With the bounds guard, the sizes say they count it, and how to drop it.
        let msg = stream_error(&e(true));
        assert!(
            msg.contains(
                "(1 input block(s), each buffer followed by a bounds guard at least as large as itself)"
            ),
            "{msg}"
        );
        assert!(
            msg.ends_with(
                "pass --slots 1 (--check-bounds off drops the guard zones, and the protection)"
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
            budget(&e),
            "a block of 64 TiB is above the device's max allocation 2 GiB: pass --block 2 GiB or less"
        );
    }

    #[test]
    fn an_overrun_names_the_kernel_the_argument_the_block_and_reduce() {
        let mut e = OverrunError {
            kernel: "over".into(),
            argument: "y".into(),
            role: "the output block".into(),
            block: 5,
            size: 1 << 20,
            guard: 1 << 20,
            past: 4096,
            at_least: true,
            in_per_out: 2,
        };
        let msg = overrun(&e);
        assert!(msg.starts_with("kernel `over` wrote at least 4096 bytes past the end of its buffer `y` (the output block, 1048576 bytes) in block 5"), "{msg}");
        assert!(
            msg.contains("with --reduce 2, a block's output holds count / 2 elements"),
            "{msg}"
        );
        e.in_per_out = 1;
        assert!(!overrun(&e).contains("--reduce"), "{}", overrun(&e));
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
                size: 4096,
                guard: 4096,
                past: 4,
                at_least: false,
                in_per_out: 2,
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
            assert!(stream_error(e).contains("--"), "{}", stream_error(e));
        }
    }
}
