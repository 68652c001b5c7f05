//! pinstream's lab: what measuring pinstream needs and a program that streams does not link.
//! The library (`pinstream`) keeps what a user's program links; the CLI's measuring tools
//! (`demo`, `doctor`, `bench`, `compare`) and the tests take their built-in kernels from here.
//!
//! | module | what |
//! |---|---|
//! | [`kernels`] | the built-in kernels in OpenCL C, CUDA C and WGSL, chosen by an API's [`pinstream::backend::api::Api::LANGUAGE`], and their CPU references |
#![warn(missing_docs)]

pub mod kernels;
