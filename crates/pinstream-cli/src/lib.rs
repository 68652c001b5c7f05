#![warn(missing_docs)]
//! The measuring tools behind the `pinstream` command: `doctor`, `bench`, `compare`, `demo`
//! and `soak`, over the [`pinstream`] library. The binary (`src/main.rs`) parses arguments
//! and prints; everything it measures lives here, so tests can call it directly, and so does
//! the advice ([`advice`]) that turns the library's structured errors into flags to pass.

pub mod advice;
pub mod tools;
