//! Gives the shared library its SONAME, so that programs linked with `-lpinstream` record
//! `libpinstream.so.0` (the file scripts/install-capi.sh installs), whatever cargo's file
//! name (`libpinstream_capi.so`).
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpinstream.so.0");
    }
}
