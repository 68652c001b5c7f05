//! pinstream's lab: what measuring pinstream needs and a program that streams does not link.
//! The library (`pinstream`) keeps what a user's program links; the measuring tools behind the
//! `pinstream` command (`doctor`, `bench`, `compare`, `demo`, `soak`, ...) live here, over the
//! library, so the CLI only parses, prints and phrases, and tests call the tools directly.
//! The tools' own refusals are phrased for the CLI's commands (they name its flags, and the
//! CLI's messages sweep checks each against the commands that show it); the library's errors
//! they meet (pinning, streaming) come back as data, and the CLI adds the flags that fix them.
//!
//! | module | what |
//! |---|---|
//! | [`kernels`] | the built-in kernels in OpenCL C, CUDA C and WGSL, chosen by an API's [`pinstream::backend::api::Api::LANGUAGE`], and their CPU references |
//! | [`tools`] | the measurements, each written once over the library's `Api` |
#![warn(missing_docs)]

pub mod kernels;
pub mod tools;
