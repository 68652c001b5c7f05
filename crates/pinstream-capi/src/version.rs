//! The library's version, for programs that check at run time which libpinstream they got.

use std::ffi::c_char;

/// The crate's version with the C string's terminating NUL.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version, e.g. `"0.1.0"` (semantic versioning: a program built against
/// MAJOR.MINOR runs with any later MINOR of the same MAJOR; `pkg-config --modversion pinstream`
/// and CMake's `pinstream_VERSION` give the installed one). Never NULL; the string is static.
#[no_mangle]
pub extern "C" fn psGetVersion() -> *const c_char {
    // Nothing here can panic: no boundary needed.
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn the_version_is_the_crates_as_a_c_string() {
        // SAFETY: psGetVersion returns a static NUL-terminated string.
        let got = unsafe { CStr::from_ptr(psGetVersion()) };
        assert_eq!(got.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
