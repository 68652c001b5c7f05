//! A property test of `run`'s argument handling against a real kernel on the default device
//! (PoCL in CI): arbitrary element types in and out (matching the kernel's or not), --reduce,
//! --work, --items, --local and --block. Every case must end, within a time limit, either
//! refused with exit code 2 (no output file left) or with the exact result the CPU computes:
//! no crash, no hang, no silent wrong result. 64 cases (about half of them valid runs), each
//! bounded to 60 s; the whole test takes about 15 s on PoCL.

mod common;

use common::{bin, stderr};
use proptest::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// y[o] = sum of the `r` inputs of output element o, in type U; any work layout.
const KERNEL: &str = r#"
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
__kernel void red(__global const T* x, __global U* y, ulong n, ulong block, ulong offset,
                  uint r, uint per_out, uint items) {
    size_t g = get_global_id(0);
    size_t outs = (n + r - 1) / r;
    size_t counted = per_out ? outs : n;
    if (g >= counted * items || g % items) return;
    size_t e = g / items;
    if (!per_out && e % r) return;
    size_t o = per_out ? e : e / r;
    U s = 0;
    for (size_t k = o * r; k < min((size_t)n, o * r + r); k++) s += (U)x[k];
    y[o] = s;
}
"#;

/// The kernel's possible element types: dtype name, OpenCL C name, bytes.
const TYPES: [(&str, &str, usize); 7] = [
    ("f32", "float", 4),
    ("f64", "double", 8),
    ("i32", "int", 4),
    ("u32", "uint", 4),
    ("u8", "uchar", 1),
    ("i16", "short", 2),
    ("i64", "long", 8),
];
/// Every dtype the run may be told.
const DTYPES: [&str; 11] = [
    "f32", "f16", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64",
];

fn size_of(dtype: &str) -> usize {
    match dtype {
        "i8" | "u8" => 1,
        "f16" | "i16" | "u16" => 2,
        "f32" | "i32" | "u32" => 4,
        _ => 8,
    }
}

/// `v` (a small whole number) as `dtype`'s little-endian bytes.
fn encode(dtype: &str, v: u64) -> Vec<u8> {
    match dtype {
        "f32" => (v as f32).to_le_bytes().to_vec(),
        "f64" => (v as f64).to_le_bytes().to_vec(),
        d => v.to_le_bytes()[..size_of(d)].to_vec(),
    }
}

#[derive(Debug, Clone)]
struct Case {
    kernel_in: usize,
    kernel_out: usize,
    dtype: Option<&'static str>,
    out_dtype: Option<&'static str>,
    elements: usize,
    reduce: usize,
    per_output: bool,
    items: usize,
    local: Option<usize>,
    block: Option<Block>,
}

/// `--block`: a multiple of the unit the run needs (element size × --reduce), or any bytes.
#[derive(Debug, Clone, Copy)]
enum Block {
    Units(usize),
    Bytes(usize),
}

fn case() -> impl Strategy<Value = Case> {
    let dtype = || prop::option::weighted(0.15, prop::sample::select(DTYPES.to_vec()));
    let block = prop_oneof![
        3 => Just(None),
        4 => (1usize..2000).prop_map(|k| Some(Block::Units(k))),
        1 => (0usize..70_000).prop_map(|b| Some(Block::Bytes(b))),
    ];
    let local = prop_oneof![
        4 => Just(None),
        4 => prop::sample::select(vec![1usize, 7, 64, 256]).prop_map(Some),
        1 => Just(Some(5000)),
    ];
    (
        (0..TYPES.len(), 0..TYPES.len(), dtype(), dtype()),
        (1usize..5000, 1usize..=8, any::<bool>()),
        (prop::sample::select(vec![1usize, 2, 3, 7]), local, block),
    )
        .prop_map(
            |(
                (kernel_in, kernel_out, dtype, out_dtype),
                (elements, reduce, per_output),
                (items, local, block),
            )| Case {
                kernel_in,
                kernel_out,
                dtype,
                out_dtype,
                elements,
                reduce,
                per_output,
                items,
                local,
                block,
            },
        )
}

impl Case {
    fn run_in(&self) -> &str {
        self.dtype.unwrap_or(TYPES[self.kernel_in].0)
    }
    /// The output type the run is told: the kernel's unless the case says otherwise (passed
    /// with --out-dtype only where it differs from the input's).
    fn run_out(&self) -> &str {
        self.out_dtype.unwrap_or(TYPES[self.kernel_out].0)
    }

    /// `--block` in bytes.
    fn block_bytes(&self) -> Option<usize> {
        let unit = size_of(self.run_in()) * self.reduce;
        self.block.map(|b| match b {
            Block::Units(k) => k * unit,
            Block::Bytes(n) => n,
        })
    }

    /// True when everything the run is told is consistent, so it must succeed.
    fn valid(&self) -> bool {
        let types =
            self.run_in() == TYPES[self.kernel_in].0 && self.run_out() == TYPES[self.kernel_out].0;
        let len = self.elements * size_of(self.run_in());
        let unit = size_of(self.run_in()) * self.reduce;
        let block = self
            .block_bytes()
            .is_none_or(|b| b > 0 && b % unit == 0 && (b >= 1024 || b >= len));
        types && block && self.local.is_none_or(|l| l <= 4096)
    }

    /// The bytes the CPU computes for this case's input.
    fn expected(&self) -> Vec<u8> {
        let outs = self.elements.div_ceil(self.reduce);
        (0..outs)
            .flat_map(|o| {
                let sum: u64 = (o * self.reduce
                    ..(o * self.reduce + self.reduce).min(self.elements))
                    .map(|k| (k % 7) as u64)
                    .sum();
                encode(TYPES[self.kernel_out].0, sum)
            })
            .collect()
    }

    fn args(&self, d: &Path) -> Vec<String> {
        let (k, input, out) = (d.join("red.cl"), d.join("in.bin"), d.join("out.bin"));
        let p = |p: PathBuf| p.to_str().unwrap().to_string();
        let mut a: Vec<String> = [
            "run",
            "--kernel",
            &p(k),
            "--entry",
            "red",
            "--input",
            &p(input),
            "--output",
            &p(out),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let opts = format!(
            "-DT={} -DU={}",
            TYPES[self.kernel_in].1, TYPES[self.kernel_out].1
        );
        a.extend(["--build-options".into(), opts]);
        a.extend(["--dtype".into(), self.run_in().into()]);
        if self.run_out() != self.run_in() {
            a.extend(["--out-dtype".into(), self.run_out().into()]);
        }
        a.extend(["--reduce".into(), self.reduce.to_string()]);
        a.extend([
            "--work".into(),
            if self.per_output { "output" } else { "input" }.into(),
        ]);
        a.extend(["--items".into(), self.items.to_string()]);
        for (k, v) in [
            ("r", self.reduce),
            ("per_out", self.per_output as usize),
            ("items", self.items),
        ] {
            a.extend(["--arg".into(), format!("{k}={v}")]);
        }
        if let Some(l) = self.local {
            a.extend(["--local".into(), l.to_string()]);
        }
        if let Some(b) = self.block_bytes() {
            a.extend(["--block".into(), b.to_string()]);
        }
        a
    }
}

/// Runs one case; Err says what went wrong.
fn check(c: &Case) -> Result<(), String> {
    let d = std::env::temp_dir().join(format!("pinstream-fuzz-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("red.cl"), KERNEL).unwrap();
    let kin = TYPES[c.kernel_in].0;
    let input: Vec<u8> = (0..c.elements)
        .flat_map(|i| encode(kin, (i % 7) as u64))
        .collect();
    std::fs::write(d.join("in.bin"), input).unwrap();
    let mut child = Command::new(bin())
        .args(c.args(&d))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            return Err("hung: still running after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    let out = std::fs::read(d.join("out.bin")).ok();
    let _ = std::fs::remove_dir_all(&d);
    if killed_by_signal(&o.status) || err.contains("panicked") {
        return Err(format!("crashed ({:?}): {err}", o.status));
    }
    match (c.valid(), o.status.code()) {
        (true, Some(0)) if out.as_deref() == Some(&c.expected()[..]) => Ok(()),
        (true, Some(0)) => Err("a silently wrong result".into()),
        (false, Some(2)) if out.is_none() => Ok(()),
        (false, Some(2)) => Err("refused, but an output was left".into()),
        (valid, code) => Err(format!("valid {valid}, exit {code:?}: {err}")),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn run_ends_refused_or_right(c in case()) {
        let r = check(&c);
        prop_assert!(r.is_ok(), "{c:?}: {}", r.unwrap_err());
    }
}

/// The process died by a signal (unix; Windows has no signals, only exit codes).
fn killed_by_signal(status: &std::process::ExitStatus) -> bool {
    #[cfg(unix)]
    return std::os::unix::process::ExitStatusExt::signal(status).is_some();
    #[cfg(not(unix))]
    return !status.success() && status.code().is_none();
}
