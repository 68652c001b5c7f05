//! OpenCL's pinned host memory: its strategies and `auto`'s rule ([`Strategy`], [`auto_order`],
//! with why one was chosen, [`StrategyReason`]), whether and at what VRAM cost the driver pins
//! ([`PinState`], [`VramCost`]), its zero-copy mechanisms ([`ZeroCopy`]), and how its failures
//! become the neutral [`HostError`](crate::backend::pinning::HostError).

mod error;
pub(crate) mod pin;
mod reason;
pub(crate) mod strategy;
mod zero_copy;

pub(crate) use error::{alloc_error, alloc_failed};
pub use pin::{PinState, VramCost};
pub use reason::{Chosen, StrategyReason};
pub use strategy::{
    auto_order, auto_order_for, AutoRule, FirstChoice, Strategy, StrategyChoice, UnknownStrategy,
};
pub use zero_copy::ZeroCopy;
