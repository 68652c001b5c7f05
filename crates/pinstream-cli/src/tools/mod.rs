//! One module per measuring tool, plus what they share.

pub mod bench;
pub mod bench_devices;
pub mod compare;
pub mod cpu;
pub mod demo;
pub mod doctor;
pub mod gather;
pub mod latency;
pub mod pin_search;
pub mod random;
pub mod soak;
pub mod twin;
