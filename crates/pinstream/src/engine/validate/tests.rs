use super::*;
use crate::backend::opencl::AddressSpace;
use crate::backend::os::{CgroupLimit, HostRoom};
use crate::engine::bind;
use proptest::prelude::*;

fn arg(name: &str, t: &str, space: AddressSpace) -> ArgInfo {
    ArgInfo {
        name: name.into(),
        type_name: t.into(),
        space,
    }
}

/// `k(x: IN*, y: OUT*, ulong n)` bound out of place.
fn out_of_place(input: &str, output: &str) -> (Vec<ArgInfo>, Binding) {
    use AddressSpace::*;
    let args = vec![
        arg("x", input, Global),
        arg("y", output, Global),
        arg("n", "ulong", Private),
    ];
    let binding = Binding {
        inputs: vec![0],
        output: Some(1),
        residents: vec![],
        hosted: vec![],
        counts: vec![(2, DType::U64)],
        scalars: vec![],
    };
    (args, binding)
}

const LIMITS: WorkGroupLimits = WorkGroupLimits {
    kernel: 256,
    device_dim0: 1024,
    required: None,
    names: WorkGroupLimits::OPENCL_NAMES,
};

#[test]
fn pointee_names() {
    assert_eq!(pointee("float*"), Pointee::Scalar(DType::F32));
    assert_eq!(pointee("const uchar *"), Pointee::Scalar(DType::U8));
    assert_eq!(pointee("half*"), Pointee::Scalar(DType::F16));
    assert_eq!(pointee("unsigned int*"), Pointee::Scalar(DType::U32));
    assert_eq!(pointee("float4*"), Pointee::Vector(DType::F32, 4));
    assert_eq!(pointee("uchar16*"), Pointee::Vector(DType::U8, 16));
    assert_eq!(pointee("void*"), Pointee::Void);
    assert_eq!(pointee("real_t*"), Pointee::Other("real_t".into()));
    assert_eq!(
        pointee("struct point*"),
        Pointee::Other("struct point".into())
    );
    assert_eq!(pointee("float5*"), Pointee::Other("float5".into()));
}

#[test]
fn element_types_match_the_run() {
    let (args, b) = out_of_place("float*", "double*");
    assert!(
        element_types("k", &args, &b, DType::F32, Some(DType::F64), false)
            .unwrap()
            .is_empty()
    );
    let e = element_types("k", &args, &b, DType::F64, Some(DType::F64), false).unwrap_err();
    assert!(
        matches!(&*e.problem, BindProblem::ElementType { argument, role: ElementRole::Input, want: ("f64", "double"), declared: "f32" } if argument.name == "x"),
        "{e:?}"
    );
    assert!(e.to_string().contains("argument `x` is float*"), "{e}");
    let e = element_types("k", &args, &b, DType::F32, Some(DType::F32), false).unwrap_err();
    assert!(
        matches!(
            &*e.problem,
            BindProblem::ElementType {
                role: ElementRole::Output,
                declared: "f64",
                ..
            }
        ),
        "{e:?}"
    );
    // In place there is no output to check.
    let (args, mut b) = out_of_place("float*", "double*");
    b.output = None;
    assert!(element_types("k", &args, &b, DType::F32, None, false).is_ok());
}

#[test]
fn f16_data_may_come_as_raw_bits_and_nothing_else_narrower() {
    // CUDA kernels take f16 as unsigned short (no built-in half without cuda_fp16.h).
    let (args, b) = out_of_place("ushort*", "float*");
    let notes = element_types("k", &args, &b, DType::F16, Some(DType::F32), false).unwrap();
    assert!(
        matches!(&notes[..], [ElementNote::RawBits { argument, role: ElementRole::Input, .. }] if argument == "x"),
        "{notes:?}"
    );
    // WGSL kernels take f16 as packed u32 words (no 16-bit storage without shaderFloat16).
    let (wgsl, wb) = out_of_place("uint*", "float*");
    let notes = element_types("k", &wgsl, &wb, DType::F16, Some(DType::F32), true).unwrap();
    assert!(
        matches!(&notes[..], [ElementNote::RawBits { declared, .. }] if declared == "uint*"),
        "{notes:?}"
    );
    assert!(notes[0]
        .to_string()
        .contains("`x` is uint*: it receives the raw bits"));
    // Only there, and only for input: an OpenCL kernel would index the words by halves and
    // run past the buffer, and f16 output written as words would too (tests/fuzz_run.rs).
    assert!(element_types("k", &wgsl, &wb, DType::F16, Some(DType::F32), false).is_err());
    let (words_out, ob) = out_of_place("float*", "uint*");
    assert!(element_types("k", &words_out, &ob, DType::F32, Some(DType::F16), true).is_err());
    // ... but raw bits are not a licence for other mismatches.
    let e = element_types("k", &args, &b, DType::F32, Some(DType::F32), false).unwrap_err();
    assert!(
        matches!(
            *e.problem,
            BindProblem::ElementType {
                declared: "u16",
                ..
            }
        ),
        "{e:?}"
    );
    let (args, b) = out_of_place("short*", "float*");
    assert!(element_types("k", &args, &b, DType::F16, Some(DType::F32), false).is_err());
}

#[test]
fn vectors_are_refused_and_unknown_names_noted() {
    let (args, b) = out_of_place("float4*", "float*");
    let e = element_types("k", &args, &b, DType::F32, Some(DType::F32), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("vector type") && e.contains("declare it float*"),
        "{e}"
    );
    let (args, b) = out_of_place("real_t*", "void*");
    let notes = element_types("k", &args, &b, DType::F32, Some(DType::F32), false).unwrap();
    assert!(
        matches!(
            &notes[..],
            [ElementNote::Unknown { type_name, .. }, ElementNote::Void { role: ElementRole::Output, want: "f32", .. }] if type_name == "real_t"
        ),
        "{notes:?}"
    );
    assert!(
        notes[0].to_string().contains("cannot check"),
        "{}",
        notes[0]
    );
}

#[test]
fn block_sizes() {
    let mib = 1 << 20;
    assert!(block_size(4 * mib, mib, 4).is_ok());
    // One small block covering the whole input is fine.
    assert!(block_size(100, 100, 4).is_ok());
    let e = block_size(4 * mib, 0, 4).unwrap_err();
    assert_eq!(
        e,
        ValidateError::Block {
            why: BlockProblem::NotMultiple { block: 0, unit: 4 },
            suggested: 1024,
            or_more: false
        }
    );
    assert!(e.to_string().contains("not a positive multiple"), "{e}");
    let e = block_size(4 * mib, 1_000_001, 12).unwrap_err();
    assert!(
        matches!(
            e,
            ValidateError::Block {
                suggested: 999_996,
                ..
            }
        ),
        "{e}"
    );
    let e = block_size(4 * mib, 4, 4).unwrap_err();
    assert!(
        matches!(
            e,
            ValidateError::Block {
                why: BlockProblem::TooMany {
                    blocks: 1_048_576,
                    ..
                },
                suggested: 1024,
                or_more: true
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("1048576 blocks"), "{e}");
    // Past MAX_BLOCKS, the floor grows with the input.
    let e = block_size(64 << 30, 64 << 10, 4).unwrap_err();
    assert!(
        matches!(e, ValidateError::Block { suggested, .. } if suggested == 1 << 20),
        "{e}"
    );
}

#[test]
fn counts_must_fit_their_types() {
    use AddressSpace::*;
    let args = vec![
        arg("x", "uchar*", Global),
        arg("n", "int", Private),
        arg("block", "int", Private),
        arg("offset", "int", Private),
    ];
    let b = Binding {
        inputs: vec![0],
        output: None,
        residents: vec![],
        hosted: vec![],
        counts: vec![(1, DType::I32), (2, DType::I32), (3, DType::I32)],
        scalars: vec![],
    };
    assert!(counts_fit("inc", &args, &b, 64 << 20, 32).is_ok());
    let e = counts_fit("inc", &args, &b, 64 << 20, 33)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`offset` (int) cannot hold 2147483648"), "{e}");
}

#[test]
fn launch_sizes() {
    let w = |items_per, local| WorkSize {
        per_output: false,
        items_per,
        local,
    };
    assert_eq!(work_size(1000, &w(1, Some(64)), LIMITS).unwrap(), 1024);
    assert_eq!(work_size(1000, &w(3, None), LIMITS).unwrap(), 3000);
    let e = work_size(1000, &w(1, Some(512)), LIMITS).unwrap_err();
    assert_eq!(
        e,
        ValidateError::Launch(LaunchProblem::LocalAbove {
            local: 512,
            limits: LIMITS
        })
    );
    let e = e.to_string();
    assert!(
        e.contains("CL_KERNEL_WORK_GROUP_SIZE 256") && e.contains("use 256 or less"),
        "{e}"
    );
    // Through CUDA the limits carry CUDA's names.
    let cuda = WorkGroupLimits {
        names: WorkGroupLimits::CUDA_NAMES,
        ..LIMITS
    };
    let e = work_size(1000, &w(1, Some(512)), cuda)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 256")
            && e.contains("CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X 1024"),
        "{e}"
    );
    let e = work_size(1 << 20, &w(1 << 20, None), LIMITS).unwrap_err();
    assert!(
        matches!(
            e,
            ValidateError::Launch(LaunchProblem::TooManyItems {
                count: 1_048_576,
                items_per: 1_048_576,
                ..
            })
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("2^32 - 1"), "{e}");
    assert!(work_size(usize::MAX, &w(usize::MAX, Some(2)), LIMITS).is_err());
    let fixed = WorkGroupLimits {
        required: Some(64),
        ..LIMITS
    };
    let e = work_size(10, &w(1, None), fixed).unwrap_err();
    assert_eq!(
        e,
        ValidateError::Launch(LaunchProblem::RequiredLocal { need: 64 })
    );
    assert!(e.to_string().contains("reqd_work_group_size(64)"), "{e}");
    assert!(work_size(10, &w(1, Some(64)), fixed).is_ok());
}

#[test]
fn all_regions_together() {
    let gib = 1u64 << 30;
    let parts = vec![
        ("2 inputs of 20 GiB:".to_string(), 40 * gib),
        ("an output of".to_string(), 20 * gib),
    ];
    let mem = |n| HostRoom::smaller(Some(n), None);
    assert!(host_memory(&parts, mem(64 * gib)).is_ok());
    assert!(host_memory(&parts, None).is_ok());
    let e = host_memory(&parts, mem(50 * gib)).unwrap_err().to_string();
    assert!(
        e.contains("would pin 60 GiB")
            && e.contains("50 GiB of host memory available now (MemAvailable)"),
        "{e}"
    );
    // In a container, the cgroup's limit bounds it and the message says so.
    let limit = CgroupLimit {
        file: "memory.max",
        limit: 16 * gib,
        in_use: 2 * gib,
    };
    let e = host_memory(&parts, HostRoom::smaller(Some(50 * gib), Some(limit)))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("more than the 14 GiB left under the container's memory limit (cgroup memory.max 16 GiB, 2 GiB in use)"),
        "{e}"
    );
}

#[test]
fn chunk_sizes() {
    assert!(chunk_size(48 << 20, 32 << 20, 4096).is_ok());
    let smallest = |e| match e {
        ValidateError::Chunk(p) => p.smallest,
        e => panic!("{e:?}"),
    };
    assert_eq!(
        smallest(chunk_size(10 << 30, 0, 4096).unwrap_err()),
        5 << 19
    );
    assert_eq!(smallest(chunk_size(1 << 20, 1, 4096).unwrap_err()), 4096);
}

#[test]
fn floats_that_round_away() {
    let f32r = |t: &str| float_in_range(t, t.parse().unwrap(), f32::MAX as f64, 1e-45, "float");
    assert!(f32r("1e40").unwrap_err().contains("infinite"));
    assert!(f32r("-1e39").unwrap_err().contains("infinite"));
    assert!(f32r("1e-50").unwrap_err().contains("become 0"));
    for ok in [
        "0",
        "-0.0",
        "0e10",
        "inf",
        "-infinity",
        "NaN",
        "3.4e38",
        "1e-44",
        "2.5",
    ] {
        assert!(f32r(ok).is_ok(), "{ok}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever is asked, the check never panics; a refusal suggests a size that passes.
    #[test]
    fn a_refused_block_suggests_one_that_works(
        len in 1usize..(1 << 40),
        block in 0usize..(1 << 32),
        unit in prop::sample::select(vec![1usize, 2, 4, 8, 12, 24, 4000]),
    ) {
        match block_size(len, block, unit) {
            Ok(()) => {
                prop_assert!(block > 0 && block % unit == 0);
                prop_assert!(len.div_ceil(block) <= MAX_BLOCKS);
                prop_assert!(block >= MIN_BLOCK_BYTES || block >= len);
            }
            Err(ValidateError::Block { suggested, .. }) => {
                prop_assert!(block_size(len, suggested, unit).is_ok(), "{suggested}");
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }

    /// An accepted launch covers every counted element and fits the limits.
    #[test]
    fn accepted_launches_fit(
        count in 0usize..(1 << 34),
        items in 1usize..(1 << 20),
        local in prop::option::of(1usize..2048),
    ) {
        let w = WorkSize { per_output: false, items_per: items, local };
        if let Ok(g) = work_size(count, &w, LIMITS) {
            prop_assert!(g >= count as u64 * items as u64);
            prop_assert!(g <= MAX_WORK_ITEMS);
            prop_assert!(local.is_none_or(|l| l <= LIMITS.max() && g % l as u64 == 0));
        }
    }

    /// Type names never panic the parser.
    #[test]
    fn any_type_name(t in "\\PC{0,24}") {
        let _ = pointee(&t);
    }
}

/// True if `text` has a word that starts with `--` and a letter: a command-line flag.
fn names_a_flag(text: &str) -> bool {
    text.split(|c: char| c.is_whitespace() || "`(".contains(c))
        .any(|w| w.starts_with("--") && w[2..].starts_with(|c: char| c.is_ascii_lowercase()))
}

/// Each check that refuses a run, provoked once, with its text.
fn every_refusal() -> Vec<String> {
    let (args, b) = out_of_place("float*", "double*");
    let (vec_args, vb) = out_of_place("int4*", "double*");
    let w = |items_per, local| WorkSize {
        per_output: false,
        items_per,
        local,
    };
    let fixed = WorkGroupLimits {
        required: Some(64),
        ..LIMITS
    };
    let shape = bind::Shape {
        inputs: 1,
        output: true,
        residents: 0,
    };
    let user = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
    let mut k = args.clone();
    k.push(arg("n", "uint", AddressSpace::Private));
    k.push(arg("s", "float", AddressSpace::Private));
    let mut texts: Vec<String> = [
        element_types("k", &args, &b, DType::F64, Some(DType::F64), false).map(|_| ()),
        element_types("k", &vec_args, &vb, DType::F32, Some(DType::F64), false).map(|_| ()),
        bind::bind("k", &k, &shape, &[]).map(|_| ()),
        bind::bind("k", &k, &shape, &user("s", "x")).map(|_| ()),
        bind::bind("k", &k, &shape, &[user("s", "1"), user("s", "2")].concat()).map(|_| ()),
    ]
    .into_iter()
    .map(|r| r.unwrap_err().to_string())
    .collect();
    texts.extend(
        [
            block_size(1 << 20, 0, 4),
            block_size(1 << 30, 4, 4),
            chunk_size(10 << 30, 0, 4096),
            work_size(10, &w(0, None), LIMITS).map(|_| ()),
            work_size(10, &w(1, Some(0)), LIMITS).map(|_| ()),
            work_size(10, &w(1, Some(512)), LIMITS).map(|_| ()),
            work_size(10, &w(1, None), fixed).map(|_| ()),
            work_size(1 << 20, &w(1 << 20, None), LIMITS).map(|_| ()),
        ]
        .into_iter()
        .map(|r| r.unwrap_err().to_string()),
    );
    texts.push(bind::parse_arg("x").unwrap_err());
    texts
}

#[test]
fn refusals_name_the_setting_not_a_flag() {
    for text in every_refusal() {
        assert!(!names_a_flag(&text), "{text}");
    }
    assert!(names_a_flag("pass --block 1 KiB") && !names_a_flag("r--s file"));
}
