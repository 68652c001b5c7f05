//! Everything that touches OpenCL handles: the two ways in ([`layer`], [`preload`]), the calls
//! they share (`hooks`), the driver queries (`driver`), the downward calls (`next`) and
//! the process-wide state (`state`).

mod driver;
mod hooks;
pub mod layer;
mod next;
pub mod preload;
mod state;

#[cfg(test)]
mod tests;
