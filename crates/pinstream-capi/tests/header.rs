//! The committed header is what cbindgen makes from the sources now.

#[test]
fn committed_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).unwrap();
    let mut fresh = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not read the C API")
        .write(&mut fresh);
    let path = format!("{dir}/include/pinstream.h");
    if std::env::var_os("PINSTREAM_BLESS").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        eprintln!("wrote {path}");
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{path} is stale: refresh it with `PINSTREAM_BLESS=1 cargo test -p pinstream-capi --test header` and commit it"
    );
}
