//! Helpers shared by the tests that run the real binary.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The binary under test; `CARGO_BIN_EXE_pinstream` at run time lets the GPU script point
/// these tests at the binary it carried.
pub fn bin() -> String {
    std::env::var("CARGO_BIN_EXE_pinstream")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_pinstream").to_string())
}

/// Runs the binary with `args`.
pub fn pinstream(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("binary runs")
}

/// Its standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
