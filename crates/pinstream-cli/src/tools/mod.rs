//! One module per measuring tool, plus what they share.

pub mod bench;
pub mod compare;
pub mod demo;
pub mod doctor;
pub mod random;
pub mod soak;
pub mod twin;
