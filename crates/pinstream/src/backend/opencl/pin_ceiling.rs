//! A test hook that makes every pin pinstream allocates (not a registration of the caller's
//! memory) fail above a ceiling, as the OS or the driver fails a pin too large, so that `pinstream doctor`'s search for the largest size that pins can be
//! driven on machines whose pins never fail (PoCL, Wine, a machine with RAM to spare).
//!
//! `PINSTREAM_INJECT_FAULT=pin:BYTES` (the stage `pin` of the fault hook, whose parser is
//! [`crate::backend::check_injected_fault`]'s and whose device stages are
//! [`crate::backend::fault`]'s): a pin of more than BYTES fails. `mlock` fails with the
//! error locking pages beyond the limit gives (`ENOMEM` on unix, `ERROR_WORKING_SET_QUOTA` on
//! Windows), so the real message names the limit; the driver strategies fail their allocation
//! call with `CL_OUT_OF_RESOURCES`. `pageable` pins nothing and is not affected. Unset, it
//! costs one read of a cached value per allocation.

use super::error::ClError;
use std::io;

/// The ceiling in bytes, from `PINSTREAM_INJECT_FAULT=pin:BYTES`.
fn ceiling() -> Option<usize> {
    pin_stage(crate::backend::injected_fault())
}

/// The ceiling a parsed hook sets: its index, when its stage is `pin`.
fn pin_stage(spec: Option<(&str, usize)>) -> Option<usize> {
    spec.filter(|(s, _)| *s == "pin").map(|(_, n)| n)
}

#[cfg(test)]
fn parse(spec: &str) -> Option<usize> {
    pin_stage(crate::backend::parse_fault(spec).ok())
}

fn over(len: usize) -> bool {
    ceiling().is_some_and(|c| len > c)
}

/// Fails a driver pin of `len` bytes made through `call` when it is over the ceiling.
pub(crate) fn check_driver(len: usize, call: &'static str) -> Result<(), ClError> {
    if over(len) {
        tracing::warn!("PINSTREAM_INJECT_FAULT: failing a {len}-byte pin on purpose");
        return Err(ClError::new(call, cl3::error_codes::CL_OUT_OF_RESOURCES));
    }
    Ok(())
}

/// Fails a page lock of `len` bytes when it is over the ceiling, with the OS's error for a
/// lock beyond the limit.
pub(crate) fn check_lock(len: usize) -> io::Result<()> {
    if over(len) {
        tracing::warn!("PINSTREAM_INJECT_FAULT: failing a {len}-byte lock on purpose");
        #[cfg(windows)]
        let code = crate::backend::os::winerr::ERROR_WORKING_SET_QUOTA;
        #[cfg(not(windows))]
        let code = libc::ENOMEM;
        return Err(io::Error::from_raw_os_error(code));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn only_the_pin_stage_sets_a_ceiling() {
        assert_eq!(parse("pin:1048576"), Some(1 << 20));
        assert_eq!(parse("upload:3"), None);
        assert_eq!(parse("pin:1MiB"), None);
        assert_eq!(parse("pin"), None);
    }
}
