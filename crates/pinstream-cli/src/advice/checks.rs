//! The refusals of the kernel binding and of the checks before a run
//! ([`BindError`], [`ValidateError`]) in the command line's terms: the setting the library
//! names becomes the flag that sets it (`--block`, `--local`, `--items`, `--max-chunk`,
//! `--arg`, `--dtype`, `--out-dtype`, `--reduce`).

use pinstream::engine::error::{
    limits_text, BindProblem, BlockProblem, ChunkProblem, ElementNote, ElementRole, LaunchProblem,
};
use pinstream::engine::validate::ValidateError;
use pinstream::engine::BindError;
use pinstream::units::Bytes;

use super::Flags;

/// A kernel binding refusal with the flag that fixes it.
pub fn bind_error(e: &BindError) -> String {
    format!("kernel `{}`: {}", e.kernel, bind_problem(&e.problem))
}

fn bind_problem(p: &BindProblem) -> String {
    match p {
        BindProblem::GivenTwice { name } => format!("--arg {name} is given twice"),
        BindProblem::NotScalar(a) => format!(
            "argument `{}` has type {}, which --arg cannot set (scalars only)",
            a.name, a.type_name
        ),
        BindProblem::NoValue(a) => format!(
            "argument `{}` ({}) needs a value: pass --arg {}=VALUE",
            a.name, a.type_name, a.name
        ),
        BindProblem::BadValue {
            argument,
            value,
            why,
        } => format!("--arg {argument}={value}: {why}"),
        BindProblem::ElementType { .. } | BindProblem::VectorType { .. } => element_type(p),
        p => p.to_string(),
    }
}

/// The flag that sets the element type of `role`.
fn dtype_flag(role: &ElementRole) -> &'static str {
    match role {
        ElementRole::Input => "--dtype",
        ElementRole::Output => "--out-dtype",
    }
}

fn element_type(p: &BindProblem) -> String {
    match p {
        BindProblem::ElementType { argument: a, role, want, declared } => format!(
            "argument `{}` is {}, but this run streams {} elements ({}, from {flag}) through it: pass {flag} {declared} or declare it {}*",
            a.name, a.type_name, want.0, want.1, want.1, flag = dtype_flag(role)
        ),
        BindProblem::VectorType { argument: a, role, want, other } => format!(
            "argument `{}` is {}, a vector type: pinstream counts elements of one {} value ({}), so declare it {}* and index it with the count it passes{}",
            a.name, a.type_name, want.0, want.1, want.1,
            other.map_or(String::new(), |(name, cl)| format!(" (or pass {} {name} and declare it {cl}*)", dtype_flag(role)))
        ),
        p => p.to_string(),
    }
}

/// A note of the element-type check, naming the flag that sets the element type.
pub fn element_note(n: &ElementNote) -> String {
    n.describe(dtype_flag(&n.role()))
}

/// A refusal of the checks before a run with the flag that fixes it, naming only the flags
/// of the command at hand (`flags`: `--reduce` is `run`'s alone).
pub fn validate_error(e: &ValidateError, flags: Flags) -> String {
    match e {
        ValidateError::Kernel(b) => bind_error(b),
        ValidateError::Block {
            why,
            suggested,
            or_more,
        } => format!(
            "{}: pass --block {} ({suggested} bytes){}",
            block_problem(why, flags),
            Bytes(*suggested as u64),
            if *or_more { " or more" } else { "" }
        ),
        ValidateError::Launch(p) => launch(p),
        ValidateError::Chunk(c) if flags.has("--max-chunk") => chunk(c),
        e => e.to_string(),
    }
}

fn block_problem(p: &BlockProblem, flags: Flags) -> String {
    let unit_is = match flags.has("--reduce") {
        true => "the element size times --reduce",
        false => "the element size",
    };
    match p {
        BlockProblem::NotMultiple { block, unit } => format!(
            "a block of {block} bytes is not a positive multiple of {unit} bytes ({unit_is})"
        ),
        p => p.to_string(),
    }
}

fn launch(p: &LaunchProblem) -> String {
    match *p {
        LaunchProblem::NoItems => "--items 0 would launch no work item: pass --items 1 or more".into(),
        LaunchProblem::RequiredLocal { need } => format!("the kernel declares reqd_work_group_size({need}): pass --local {need}"),
        LaunchProblem::ZeroLocal => "a work-group size of 0 is not valid: pass --local 1 or more, or leave it to the driver".into(),
        LaunchProblem::LocalAbove { local, limits } => format!(
            "--local {local} is above the work-group size this kernel allows on this device, {}: pass --local {} or less, or leave it out",
            limits_text(&limits), limits.max()
        ),
        LaunchProblem::TooManyItems { count, items_per, max } => format!(
            "a block of {count} counted elements with --items {items_per} makes {} work items in one launch, more than the {max} (2^32 - 1) a launch may have: lower --block or --items",
            (count as u128) * (items_per as u128)
        ),
        ref p => p.to_string(),
    }
}

fn chunk(c: &ChunkProblem) -> String {
    format!(
        "--max-chunk {}: {}: pass --max-chunk {} or more, or leave it out",
        Bytes(c.chunk as u64),
        c.what(),
        Bytes(c.smallest as u64)
    )
}

/// `--arg NAME=VALUE`, split, with the flag in the message when it is not that.
pub fn user_arg(s: &str) -> Result<(String, String), String> {
    pinstream::engine::bind::parse_arg(s)
        .map_err(|_| format!("`{s}` is not NAME=VALUE: write e.g. --arg scale=2.5"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinstream::backend::api::WorkGroupLimits;
    use pinstream::engine::validate::{block_size, chunk_size};

    #[test]
    fn block_and_chunk_refusals_name_their_flags() {
        let e = validate_error(&block_size(4 << 20, 4, 4).unwrap_err(), Flags::RUN);
        assert!(
            e.contains("1048576 blocks")
                && e.ends_with(": pass --block 1 KiB (1024 bytes) or more"),
            "{e}"
        );
        let e = validate_error(&block_size(4 << 20, 0, 4).unwrap_err(), Flags::RUN);
        assert!(e.contains("(the element size times --reduce)"), "{e}");
        let e = validate_error(&block_size(4 << 20, 0, 4).unwrap_err(), Flags::DEMO);
        assert!(
            e.contains("(the element size)") && !e.contains("--reduce"),
            "{e}"
        );
        let e = validate_error(&chunk_size(10 << 30, 0, 4096).unwrap_err(), Flags::DOCTOR);
        assert!(
            e.starts_with("--max-chunk 0 B: ")
                && e.ends_with("pass --max-chunk 2.5 MiB or more, or leave it out"),
            "{e}"
        );
    }

    #[test]
    fn launch_refusals_name_local_and_items() {
        let limits = WorkGroupLimits {
            kernel: 256,
            device_dim0: 1024,
            required: None,
            names: WorkGroupLimits::OPENCL_NAMES,
        };
        let e = launch(&LaunchProblem::LocalAbove { local: 512, limits });
        assert!(
            e.starts_with("--local 512 is above")
                && e.contains("CL_KERNEL_WORK_GROUP_SIZE 256")
                && e.ends_with("pass --local 256 or less, or leave it out"),
            "{e}"
        );
        assert!(launch(&LaunchProblem::RequiredLocal { need: 64 }).ends_with("pass --local 64"));
        let e = launch(&LaunchProblem::TooManyItems {
            count: 1 << 20,
            items_per: 1 << 20,
            max: u32::MAX as u64,
        });
        assert!(e.ends_with("lower --block or --items"), "{e}");
    }

    #[test]
    fn element_type_refusals_name_dtype_or_out_dtype() {
        use pinstream::engine::error::Argument;
        let a = Argument {
            name: "x".into(),
            type_name: "float*".into(),
        };
        let p = |role| BindProblem::ElementType {
            argument: a.clone(),
            role,
            want: ("f64", "double"),
            declared: "f32",
        };
        assert!(bind_problem(&p(ElementRole::Input))
            .ends_with("pass --dtype f32 or declare it double*"));
        assert!(bind_problem(&p(ElementRole::Output)).contains("from --out-dtype"));
        let e = bind_problem(&BindProblem::NoValue(Argument {
            name: "factor".into(),
            type_name: "float".into(),
        }));
        assert!(e.ends_with("pass --arg factor=VALUE"), "{e}");
        assert!(user_arg("x").unwrap_err().contains("--arg scale=2.5"));
        let note = ElementNote::RawBits {
            kernel: "k".into(),
            argument: "w".into(),
            declared: "ushort*".into(),
            role: ElementRole::Input,
        };
        assert!(element_note(&note).ends_with("raw bits of the f16 elements (--dtype f16)"));
        assert!(
            note.to_string().ends_with("(the element type f16)"),
            "{note}"
        );
    }
}
