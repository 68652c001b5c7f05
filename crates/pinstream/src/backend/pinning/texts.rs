//! The library's error texts name no front: no CLI flag, no C function, no Python or Rust API.
//! Each front (the CLI's `advice`, the C library's `error`, Python's `errors`) adds its own
//! spelling of the fix from the variant's fields.

use super::*;
use crate::backend::error::{BackendError, ErrorKind};
use crate::backend::os;

/// Every variant that is made without a device, with fields as the library fills them.
fn every_error() -> Vec<HostError> {
    let os = || std::io::Error::from_raw_os_error(12);
    vec![
        HostError::ZeroSize,
        HostError::TooLarge {
            requested: 8 << 30,
            room: os::HostRoom {
                bytes: 1 << 30,
                cgroup: None,
            },
        },
        HostError::RegisterTooLarge {
            len: 3 << 30,
            absent: 3 << 30,
            room: os::HostRoom {
                bytes: 1 << 30,
                cgroup: Some(os::CgroupLimit {
                    file: "memory.max",
                    limit: 1 << 30,
                    in_use: 0,
                }),
            },
        },
        HostError::PastEndOfFile {
            start: 0x1000,
            end: 0x3000,
            from: 0x2000,
            file: "/data/x".into(),
            file_len: 4096,
        },
        HostError::Unsupported {
            pinning: "nv-host".into(),
            device: "0 (pthread-cpu)".into(),
            why: "needs the OpenCL extension cl_nv_create_buffer".into(),
        },
        HostError::Memlock {
            bytes: 1 << 30,
            limit: Some(8 << 20),
            source: os(),
        },
        HostError::Alloc {
            pinning: "register".into(),
            kind: PinKind::Driver,
            bytes: 4096,
            source: BackendError {
                api: "OpenCL",
                call: "",
                code: 0,
                message: os::map_failure(4096, &os()),
                kind: ErrorKind::OutOfMemory,
            },
        },
        HostError::AutoFailed {
            bytes: 4096,
            tried: vec!["register: out of memory".into()],
        },
        HostError::NullPointer,
        HostError::Unmapped {
            start: 0x1000,
            end: 0x2000,
        },
        HostError::NotPinnable {
            start: 0x1000,
            end: 0x2000,
            why: "a read-only mapping".into(),
            mapping: "r--s file /data/x".into(),
        },
        HostError::MappingUnknown {
            start: 0x1000,
            end: 0x2000,
            source: os(),
        },
        HostError::NotContiguous {
            pinning: "nv-host".into(),
            bytes: 1 << 30,
            chunk: 1 << 28,
        },
        HostError::Range {
            start: 0,
            end: 10,
            len: 5,
        },
    ]
}

/// True if `text` names a front's way of fixing things rather than the library's data.
fn names_a_front(text: &str) -> bool {
    // A word that starts with `--` and a letter (`r--s`, a mapping's permissions, is none).
    let flag = text
        .split(|c: char| c.is_whitespace() || "`(".contains(c))
        .any(|w| w.starts_with("--") && w[2..].starts_with(|c: char| c.is_ascii_lowercase()));
    let apis = [
        "psHost",
        "PS_",
        "HostRegion::",
        "PinOptions",
        "pinstream.",
        "pinstream devices",
    ];
    flag || apis.iter().any(|a| text.contains(a))
}

#[test]
fn host_errors_name_no_flag_nor_a_fronts_function() {
    for e in every_error() {
        let text = e.to_string();
        assert!(!names_a_front(&text), "{text}");
    }
}

#[test]
fn the_check_catches_what_the_texts_used_to_name() {
    for old in [
        "or use --strategy auto",
        "(HostRegion::new; psHostAlloc in C)",
        "run `pinstream devices`",
    ] {
        assert!(names_a_front(old), "{old}");
    }
}
