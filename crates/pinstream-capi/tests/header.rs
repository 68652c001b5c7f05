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

/// An asynchronous download's thread must not outlive the library or the driver: the header
/// (its list of what the caller owes, and the call's own text) and docs/c.md say to wait for
/// the event before exiting or unloading.
#[test]
fn the_caller_is_told_to_wait_for_a_download_before_exiting_or_unloading() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let header = std::fs::read_to_string(format!("{dir}/include/pinstream.h")).unwrap();
    let owed = header
        .split("What the caller owes")
        .nth(1)
        .unwrap_or_default();
    let owed = owed.split("*/").next().unwrap_or_default();
    let call = header
        .split("psMemcpyBatchDtoHAsync(cl_command_queue")
        .next()
        .unwrap();
    let call = call
        .rsplit("psMemcpyBatchHtoDAsync(cl_command_queue")
        .next()
        .unwrap();
    let guide = std::fs::read_to_string(format!("{dir}/../../docs/c.md")).unwrap();
    for (what, text) in [("owed", owed), ("the call", call), ("docs/c.md", &guide)] {
        let flat = text.replace(['\n', '*', '/'], " ");
        let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("Before exiting the program or unloading the library")
                && flat.contains("wait for")
                && flat.contains("returned event"),
            "{what} does not say to wait for a download before exiting or unloading"
        );
    }
}

/// The text of the header's comment just above `call`'s declaration, flattened to one line.
fn doc_of(header: &str, call: &str) -> String {
    let before = header
        .split(&format!("psError_t {call}("))
        .next()
        .unwrap_or_default();
    let doc: Vec<&str> = before
        .lines()
        .rev()
        .take_while(|l| l.starts_with("//"))
        .collect();
    let flat = doc.into_iter().rev().collect::<Vec<_>>().join(" ");
    flat.replace("//", " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The stream calls that can fail inside pinstream list PS_ERROR_INTERNAL, and the calls that
/// wait for the stream's thread say they must not be called from its event callbacks.
#[test]
fn the_stream_calls_list_their_errors_and_the_callback_rule() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let header = std::fs::read_to_string(format!("{dir}/include/pinstream.h")).unwrap();
    for call in ["psStreamCreate", "psStreamRun", "psStreamRunAsync"] {
        let doc = doc_of(&header, call);
        assert!(doc.contains("PS_ERROR_INTERNAL"), "{call}: {doc}");
    }
    for call in ["psStreamRun", "psStreamSynchronize", "psStreamDestroy"] {
        let doc = doc_of(&header, call);
        assert!(
            doc.contains("Must not be called from a callback of one of the stream's own events")
                && doc.contains("Refused on the stream's own thread with `PS_ERROR_INVALID_VALUE`"),
            "{call}: {doc}"
        );
    }
}
