#![warn(missing_docs)]
//! The `pinstream` command's library: the advice ([`advice`]) that turns the library's
//! structured errors into flags to pass. The binary (`src/main.rs`) parses arguments, runs the
//! measuring tools of `pinstream-lab` (`pinstream_lab::tools`) and the library's engine, and
//! prints.

pub mod advice;
