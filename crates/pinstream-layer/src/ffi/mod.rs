//! Everything that touches OpenCL handles: the two ways in ([`layer`], [`preload`]), the calls
//! they share (`hooks`), the driver queries (`driver`), the downward calls (`next`) and
//! the process-wide state (`state`), the log and its
//! destination (`sink`) and the panic boundary at every entry (`guard`).

mod driver;
mod guard;
mod hooks;
pub mod layer;
mod next;
pub mod preload;
mod sink;
mod state;

#[cfg(test)]
mod tests;
