//! The kernel argument convention, checked against the kernel's own argument list.
//!
//! A streamed kernel takes, in this order:
//! 1. one `__global` pointer per input: that input's block in a device slot;
//! 2. for out-of-place runs, one `__global` pointer for the output block;
//! 3. one `__global` (or `__constant`) pointer per resident buffer, uploaded once;
//! 4. one, two or three integer values (`uint`, `int`, `ulong` or `long`): the element count
//!    of this block's input; then, optionally, the block index; then, optionally, the element
//!    offset of the block in the input. A plain OpenCL kernel such as the SDK's
//!    `VectorAdd(__global const float* a, __global const float* b, __global float* c,
//!    int iNumElements)` takes only the count and runs unchanged;
//! 5. any user scalars, each set by name with `--arg NAME=VALUE` and typed by the kernel. An
//!    integer named with `--arg` is a user scalar, so it ends the counts: name it to keep it
//!    from being taken for the block index or offset.
//!
//! Host-resident buffers ([`bind_hosted`], `run --host-table NAME=FILE`) are bound by name,
//! wherever they stand in the list: they are left out of the order above.
//!
//! The kernel is launched once with an element count of 0 before the stream starts (drivers
//! that compile at the first launch do it then, outside the measurement): it must write
//! nothing when the count is 0, which the usual `if (i < n)` guard gives.
//!
//! ```c
//! // in place: x = x * scale
//! __kernel void scale(__global float* x, ulong n, ulong block, ulong offset, float scale) {
//!     size_t i = get_global_id(0);
//!     if (i < n) x[i] *= scale;
//! }
//! // y = W·x over blocks of rows: W streamed (f16), y out of place, x resident
//! __kernel void gemv(__global const half* w, __global float* y, __global const float* x,
//!                    ulong n, ulong block, ulong offset, uint cols) { ... }
//! ```

use super::dtype::DType;
pub use super::error::BindError;
use super::error::{Argument, BindProblem};
use crate::backend::api::{AddressSpace, ArgInfo};
use std::collections::BTreeMap;

/// What a run binds, to be matched with the kernel's arguments.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Number of streamed inputs.
    pub inputs: usize,
    /// True when the output is a separate buffer (out of place).
    pub output: bool,
    /// Number of resident buffers.
    pub residents: usize,
}

/// Argument indices and values, resolved once before the stream starts.
#[derive(Debug, Clone)]
pub struct Binding {
    /// Argument index of each input.
    pub inputs: Vec<u32>,
    /// Argument index of the output, when out of place.
    pub output: Option<u32>,
    /// Argument index of each resident buffer.
    pub residents: Vec<u32>,
    /// Argument index of each host-resident buffer, bound by name ([`bind_hosted`]), in the
    /// order of the names.
    pub hosted: Vec<u32>,
    /// Index and type of the element count, then (where the kernel takes them) the block
    /// index and the element offset: one to three entries, in that order.
    pub counts: Vec<(u32, DType)>,
    /// User scalars: index and encoded value.
    pub scalars: Vec<(u32, Vec<u8>)>,
}

fn describe(args: &[&ArgInfo]) -> String {
    let list: Vec<String> = args
        .iter()
        .map(|a| format!("{} {}", a.type_name, a.name))
        .collect();
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// Matches `shape` and the user's `NAME=VALUE` pairs with the kernel's arguments.
pub fn bind(
    kernel: &str,
    args: &[ArgInfo],
    shape: &Shape,
    user: &[(String, String)],
) -> Result<Binding, BindError> {
    bind_hosted(kernel, args, shape, user, &[])
}

/// As [`bind`], with the buffer arguments named in `hosted` bound by name to host-resident
/// buffers (memory kernels read in place) and left out of the positional order. Each name
/// must be a `__global` (or `__constant`) pointer argument of the kernel, named once.
pub fn bind_hosted(
    kernel: &str,
    args: &[ArgInfo],
    shape: &Shape,
    user: &[(String, String)],
    hosted: &[String],
) -> Result<Binding, BindError> {
    let err = |problem: BindProblem| BindError {
        kernel: kernel.to_string(),
        problem: Box::new(problem),
    };
    let all: Vec<(u32, &ArgInfo)> = args
        .iter()
        .enumerate()
        .map(|(i, a)| (i as u32, a))
        .collect();
    let hosted_at = find_hosted(&all, hosted).map_err(err)?;
    let indexed: Vec<(u32, &ArgInfo)> = all
        .into_iter()
        .filter(|(i, _)| !hosted_at.contains(i))
        .collect();
    if let Some((_, a)) = indexed.iter().find(|(_, a)| a.space == AddressSpace::Local) {
        return Err(err(BindProblem::LocalPointer {
            argument: a.name.clone(),
        }));
    }
    let buffers: Vec<(u32, &ArgInfo)> = indexed
        .iter()
        .filter(|(_, a)| a.is_buffer())
        .copied()
        .collect();
    let values: Vec<(u32, &ArgInfo)> = indexed
        .iter()
        .filter(|(_, a)| !a.is_buffer())
        .copied()
        .collect();
    let want = shape.inputs + usize::from(shape.output) + shape.residents;
    if buffers.len() != want {
        return Err(err(BindProblem::BufferCount {
            declared: describe(&buffers.iter().map(|b| b.1).collect::<Vec<_>>()),
            takes: buffers.len(),
            inputs: shape.inputs,
            output: shape.output,
            residents: shape.residents,
        }));
    }
    let counts = bind_counts(&values, user).map_err(err)?;
    let scalars = bind_scalars(&values[counts.len()..], user).map_err(err)?;
    let (ins, rest) = buffers.split_at(shape.inputs);
    let (out, res) = rest.split_at(usize::from(shape.output));
    Ok(Binding {
        inputs: ins.iter().map(|b| b.0).collect(),
        output: out.first().map(|b| b.0),
        residents: res.iter().map(|b| b.0).collect(),
        hosted: hosted_at,
        counts,
        scalars,
    })
}

/// The argument index of each name in `hosted`: a buffer argument of the kernel, named once.
fn find_hosted(all: &[(u32, &ArgInfo)], hosted: &[String]) -> Result<Vec<u32>, BindProblem> {
    let buffers = || {
        let list: Vec<&ArgInfo> = all
            .iter()
            .filter(|(_, a)| a.is_buffer())
            .map(|b| b.1)
            .collect();
        describe(&list)
    };
    hosted
        .iter()
        .enumerate()
        .map(|(k, name)| {
            if hosted[..k].contains(name) {
                return Err(BindProblem::HostedTwice { name: name.clone() });
            }
            match all.iter().find(|(_, a)| a.name == *name) {
                Some((i, a)) if a.is_buffer() => Ok(*i),
                Some((_, a)) => Err(BindProblem::HostedNotBuffer(argument(a))),
                None => Err(BindProblem::NoHostedArgument {
                    name: name.clone(),
                    declared: buffers(),
                }),
            }
        })
        .collect()
}

/// The count arguments: the leading integer values after the buffers, at most three, ending
/// at the first value the user gives a value for.
fn bind_counts(
    values: &[(u32, &ArgInfo)],
    user: &[(String, String)],
) -> Result<Vec<(u32, DType)>, BindProblem> {
    let named = |a: &ArgInfo| user.iter().any(|(k, _)| *k == a.name);
    let count_type = |a: &ArgInfo| {
        DType::from_cl(&a.type_name)
            .filter(|t| matches!(t, DType::U32 | DType::I32 | DType::U64 | DType::I64))
    };
    let counts: Vec<(u32, DType)> = values
        .iter()
        .take(3)
        .map_while(|(i, a)| count_type(a).filter(|_| !named(a)).map(|t| (*i, t)))
        .collect();
    if counts.is_empty() {
        return Err(match values.first() {
            Some((_, a)) => BindProblem::CountNotInteger(argument(a)),
            None => BindProblem::NoCount,
        });
    }
    Ok(counts)
}

fn bind_scalars(
    params: &[(u32, &ArgInfo)],
    user: &[(String, String)],
) -> Result<Vec<(u32, Vec<u8>)>, BindProblem> {
    let mut given: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in user {
        if given.insert(k.as_str(), v.as_str()).is_some() {
            return Err(BindProblem::GivenTwice { name: k.clone() });
        }
    }
    let list = || describe(&params.iter().map(|p| p.1).collect::<Vec<_>>());
    for k in given.keys() {
        if !params.iter().any(|(_, a)| a.name == *k) {
            return Err(BindProblem::NoSuchArgument {
                name: k.to_string(),
                declared: list(),
            });
        }
    }
    params
        .iter()
        .map(|(i, a)| {
            let t =
                DType::from_cl(&a.type_name).ok_or_else(|| BindProblem::NotScalar(argument(a)))?;
            let v = given
                .get(a.name.as_str())
                .ok_or_else(|| BindProblem::NoValue(argument(a)))?;
            t.encode(v)
                .map(|b| (*i, b))
                .map_err(|why| BindProblem::BadValue {
                    argument: a.name.clone(),
                    value: v.to_string(),
                    why,
                })
        })
        .collect()
}

/// An argument as a mismatch names it.
pub(crate) fn argument(a: &ArgInfo) -> Argument {
    Argument {
        name: a.name.clone(),
        type_name: a.type_name.clone(),
    }
}

/// Splits `NAME=VALUE`.
pub fn parse_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("`{s}` is not NAME=VALUE, e.g. scale=2.5")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a(name: &str, t: &str, space: AddressSpace) -> ArgInfo {
        ArgInfo {
            name: name.into(),
            type_name: t.into(),
            space,
        }
    }

    fn gemv() -> Vec<ArgInfo> {
        use AddressSpace::*;
        vec![
            a("w", "half*", Global),
            a("y", "float*", Global),
            a("x", "float*", Constant),
            a("n", "ulong", Private),
            a("block", "ulong", Private),
            a("offset", "ulong", Private),
            a("cols", "uint", Private),
        ]
    }

    #[test]
    fn hosted_buffers_are_bound_by_name_and_left_out_of_the_order() {
        let shape = Shape {
            inputs: 1,
            output: true,
            residents: 0,
        };
        let user = [("cols".to_string(), "4096".to_string())];
        // `x` (argument 2) is host-resident: the others bind as if it were not there.
        let b = bind_hosted("gemv", &gemv(), &shape, &user, &["x".into()]).unwrap();
        assert_eq!((b.inputs, b.output, b.hosted), (vec![0], Some(1), vec![2]));
        assert!(b.residents.is_empty());
        assert_eq!(b.counts.iter().map(|c| c.0).collect::<Vec<_>>(), [3, 4, 5]);
        let problem = |hosted: &[&str]| {
            let names: Vec<String> = hosted.iter().map(|h| h.to_string()).collect();
            *bind_hosted("gemv", &gemv(), &shape, &user, &names)
                .unwrap_err()
                .problem
        };
        let BindProblem::NoHostedArgument { name, declared } = problem(&["table"]) else {
            panic!("an unknown name is refused");
        };
        assert_eq!(
            (name.as_str(), declared.as_str()),
            ("table", "half* w, float* y, float* x")
        );
        assert!(matches!(problem(&["cols"]), BindProblem::HostedNotBuffer(a) if a.name == "cols"));
        assert!(matches!(problem(&["x", "x"]), BindProblem::HostedTwice { name } if name == "x"));
    }

    #[test]
    fn binds_the_convention() {
        let shape = Shape {
            inputs: 1,
            output: true,
            residents: 1,
        };
        let b = bind("gemv", &gemv(), &shape, &[("cols".into(), "4096".into())]).unwrap();
        assert_eq!(b.inputs, vec![0]);
        assert_eq!(b.output, Some(1));
        assert_eq!(b.residents, vec![2]);
        assert_eq!(b.counts.iter().map(|c| c.0).collect::<Vec<_>>(), [3, 4, 5]);
        assert_eq!(b.scalars, vec![(6, 4096u32.to_ne_bytes().to_vec())]);
    }

    #[test]
    fn mismatches_name_the_fix() {
        let shape = Shape {
            inputs: 1,
            output: false,
            residents: 1,
        };
        let e = bind("gemv", &gemv(), &shape, &[]).unwrap_err().to_string();
        assert!(
            e.contains("3 buffer argument(s)") && e.contains("binds 2"),
            "{e}"
        );
        let shape = Shape {
            inputs: 1,
            output: true,
            residents: 1,
        };
        let e = bind("gemv", &gemv(), &shape, &[]).unwrap_err();
        assert_eq!(
            *e.problem,
            BindProblem::NoValue(Argument {
                name: "cols".into(),
                type_name: "uint".into()
            })
        );
        assert!(e.to_string().contains("needs a value"), "{e}");
        let e = bind("gemv", &gemv(), &shape, &[("colz".into(), "1".into())])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no user argument `colz`") && e.contains("uint cols"),
            "{e}"
        );
        let e = bind("gemv", &gemv(), &shape, &[("cols".into(), "-1".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid uint"), "{e}");
        let mut bad = gemv();
        bad[3].type_name = "float".into();
        let e = bind("gemv", &bad, &shape, &[("cols".into(), "1".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("must be uint, int, ulong or long"), "{e}");
    }

    #[test]
    fn one_two_or_three_counts() {
        use AddressSpace::*;
        let shape = Shape {
            inputs: 2,
            output: true,
            residents: 0,
        };
        let buffers = || {
            vec![
                a("a", "float*", Global),
                a("b", "float*", Global),
                a("c", "float*", Global),
            ]
        };
        // The SDK's VectorAdd: the count only.
        let mut k = buffers();
        k.push(a("iNumElements", "int", Private));
        let b = bind("VectorAdd", &k, &shape, &[]).unwrap();
        assert_eq!(b.counts, vec![(3, DType::I32)]);
        assert!(b.scalars.is_empty());
        // Count and block index, then a user float.
        let mut k = buffers();
        k.push(a("n", "uint", Private));
        k.push(a("block", "uint", Private));
        k.push(a("scale", "float", Private));
        let b = bind("k", &k, &shape, &[("scale".into(), "2".into())]).unwrap();
        assert_eq!(b.counts, vec![(3, DType::U32), (4, DType::U32)]);
        assert_eq!(b.scalars, vec![(5, 2f32.to_ne_bytes().to_vec())]);
        // An integer named with --arg is a user scalar: it ends the counts.
        let mut k = buffers();
        k.push(a("n", "ulong", Private));
        k.push(a("iters", "uint", Private));
        let b = bind("k", &k, &shape, &[("iters".into(), "7".into())]).unwrap();
        assert_eq!(b.counts, vec![(3, DType::U64)]);
        assert_eq!(b.scalars, vec![(4, 7u32.to_ne_bytes().to_vec())]);
        // No count at all.
        let e = bind("k", &buffers(), &shape, &[]).unwrap_err().to_string();
        assert!(e.contains("element count as an integer"), "{e}");
    }

    #[test]
    fn arg_syntax() {
        assert_eq!(parse_arg("a=1").unwrap(), ("a".into(), "1".into()));
        assert!(parse_arg("a").is_err());
        assert!(parse_arg("=1").is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn arg_specs_never_panic(s in "\\PC{0,20}", v in "\\PC{0,12}") {
            let _ = parse_arg(&s);
            let shape = Shape { inputs: 1, output: true, residents: 1 };
            let _ = bind("gemv", &gemv(), &shape, &[(s.clone(), v)]);
        }
    }
}
