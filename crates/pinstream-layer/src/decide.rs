//! Which buffer creations are rewritten, with which flags, and why not. Pure: no driver, no
//! process state; the FFI side gathers [`Facts`] and acts on the [`Decision`].
//!
//! The rewrite turns `clCreateBuffer(ctx, flags, size, host_ptr)` with `CL_MEM_ALLOC_HOST_PTR`
//! into `clCreateBufferNV(ctx, flags, CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV, size,
//! host_ptr)`: the program's flags and host pointer are passed on unchanged, only the storage
//! moves to pinned host memory. Whatever the layer cannot prove to keep the program's meaning
//! is left alone, and so is every `CL_MEM_COPY_HOST_PTR` buffer: the check that NVIDIA's
//! `clCreateBufferNV` copies the host data crashed programs under NVIDIA's driver on the H200
//! (see [`Skip::CopyHostPtr`]).

use crate::settings::{human, Policy, Settings};
use opencl_sys::{
    cl_mem_flags, CL_MEM_ALLOC_HOST_PTR, CL_MEM_COPY_HOST_PTR, CL_MEM_HOST_NO_ACCESS,
    CL_MEM_HOST_READ_ONLY, CL_MEM_HOST_WRITE_ONLY, CL_MEM_KERNEL_READ_AND_WRITE, CL_MEM_READ_ONLY,
    CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR, CL_MEM_WRITE_ONLY,
};
use std::fmt;

/// `CL_MEM_LOCATION_HOST_NV` (`cl_nv_create_buffer`; not in the Khronos headers of Debian 12
/// nor in opencl-sys, value from NVIDIA's extension and measured in gpu-facts.md).
pub const CL_MEM_LOCATION_HOST_NV: u64 = 1 << 0;
/// `CL_MEM_PINNED_NV` (`cl_nv_create_buffer`).
pub const CL_MEM_PINNED_NV: u64 = 1 << 1;
/// The NV flags every rewritten buffer gets: host-located and pinned.
pub const NV_HOST_PINNED: u64 = CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV;
/// The extension that offers `clCreateBufferNV`.
pub const NV_EXTENSION: &str = "cl_nv_create_buffer";

/// Every `cl_mem_flags` bit the layer knows the meaning of for `clCreateBuffer`.
const KNOWN_FLAGS: cl_mem_flags = CL_MEM_READ_WRITE
    | CL_MEM_WRITE_ONLY
    | CL_MEM_READ_ONLY
    | CL_MEM_USE_HOST_PTR
    | CL_MEM_ALLOC_HOST_PTR
    | CL_MEM_COPY_HOST_PTR
    | CL_MEM_HOST_WRITE_ONLY
    | CL_MEM_HOST_READ_ONLY
    | CL_MEM_HOST_NO_ACCESS
    | CL_MEM_KERNEL_READ_AND_WRITE;

const FLAG_NAMES: [(cl_mem_flags, &str); 10] = [
    (CL_MEM_READ_WRITE, "READ_WRITE"),
    (CL_MEM_WRITE_ONLY, "WRITE_ONLY"),
    (CL_MEM_READ_ONLY, "READ_ONLY"),
    (CL_MEM_USE_HOST_PTR, "USE_HOST_PTR"),
    (CL_MEM_ALLOC_HOST_PTR, "ALLOC_HOST_PTR"),
    (CL_MEM_COPY_HOST_PTR, "COPY_HOST_PTR"),
    (CL_MEM_HOST_WRITE_ONLY, "HOST_WRITE_ONLY"),
    (CL_MEM_HOST_READ_ONLY, "HOST_READ_ONLY"),
    (CL_MEM_HOST_NO_ACCESS, "HOST_NO_ACCESS"),
    (CL_MEM_KERNEL_READ_AND_WRITE, "KERNEL_READ_AND_WRITE"),
];

/// One buffer creation as the program asked for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The program's `cl_mem_flags`.
    pub flags: cl_mem_flags,
    /// Bytes.
    pub size: u64,
    /// A host pointer was passed.
    pub host_ptr: bool,
    /// `clCreateBufferWithProperties` with a non-empty property list (`clCreateBufferNV` has
    /// no place for properties).
    pub properties: bool,
}

/// Whether the context's devices offer `clCreateBufferNV`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Every device of the context has `cl_nv_create_buffer`, and the function was found.
    AllDevices,
    /// No device has the extension (e.g. PoCL, AMD, Intel).
    Missing {
        /// The first device's name.
        device: String,
    },
    /// Some devices have it, some do not: a buffer lives on all of them, so it stays as asked.
    Mixed {
        /// Devices with the extension.
        with: usize,
        /// Devices without.
        without: usize,
    },
    /// The extension is listed but the platform returned no `clCreateBufferNV`.
    NoFunction,
    /// A query the decision needs failed.
    QueryFailed {
        /// The call that failed.
        call: &'static str,
        /// Its error code.
        code: i32,
    },
}

/// What the driver-side queries found for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Extension support across the context's devices.
    pub support: Support,
}

/// Why a buffer stays as the program asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// `PINSTREAM_LAYER_POLICY=off`.
    PolicyOff,
    /// No `CL_MEM_ALLOC_HOST_PTR`: not the classic recipe.
    NotAllocHostPtr,
    /// Below `PINSTREAM_LAYER_MIN_SIZE`.
    Small {
        /// The threshold.
        min_size: u64,
    },
    /// `USE_HOST_PTR` with `ALLOC_HOST_PTR` is invalid; the driver answers it.
    UseHostPtr,
    /// A host pointer without `COPY_HOST_PTR` is invalid; the driver answers it.
    HostPtrWithoutCopy,
    /// `COPY_HOST_PTR`: never rewritten. The layer's check that `clCreateBufferNV` copies the
    /// host data (a 4 KiB buffer made through it, then read back) killed the process with
    /// SIGSEGV under NVIDIA's driver 580.159.04 on the H200 (bench/results/h200/layer, run of
    /// 2026-11-30; whether the creation or the read-back crashed is not known), and without
    /// that check the layer cannot show the data arrives. Such buffers keep their VRAM.
    CopyHostPtr,
    /// `CL_MEM_HOST_NO_ACCESS`: the host never maps it, so it is device storage by intent.
    HostNoAccess,
    /// Flags the layer does not know (vendor or SVM bits).
    UnknownFlags(cl_mem_flags),
    /// A non-empty property list.
    Properties,
    /// The devices do not all offer `clCreateBufferNV`.
    Unsupported(Support),
    /// `clCreateBufferNV` failed; the buffer was created as asked instead.
    NvFailed(i32),
}

impl Skip {
    /// True for buffers that are not candidates at all: not logged one by one, only counted.
    pub fn is_routine(&self) -> bool {
        matches!(
            self,
            Skip::PolicyOff | Skip::NotAllocHostPtr | Skip::Small { .. }
        )
    }

    /// A short stable name for the summary's counts.
    pub fn key(&self) -> &'static str {
        match self {
            Skip::PolicyOff => "policy off",
            Skip::NotAllocHostPtr => "no ALLOC_HOST_PTR",
            Skip::Small { .. } => "below the minimum size",
            Skip::UseHostPtr => "with USE_HOST_PTR",
            Skip::HostPtrWithoutCopy => "host pointer without COPY_HOST_PTR",
            Skip::HostNoAccess => "HOST_NO_ACCESS",
            Skip::UnknownFlags(_) => "unknown flags",
            Skip::Properties => "with properties",
            Skip::Unsupported(Support::Missing { .. }) => "device without cl_nv_create_buffer",
            Skip::Unsupported(Support::Mixed { .. }) => "devices that disagree",
            Skip::Unsupported(_) => "driver query failed",
            Skip::CopyHostPtr => "with COPY_HOST_PTR",
            Skip::NvFailed(_) => "clCreateBufferNV failed",
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::PolicyOff => write!(f, "the policy is off"),
            Skip::NotAllocHostPtr => write!(f, "no CL_MEM_ALLOC_HOST_PTR"),
            Skip::Small { min_size } => write!(f, "smaller than PINSTREAM_LAYER_MIN_SIZE ({})", human(*min_size)),
            Skip::UseHostPtr => write!(f, "USE_HOST_PTR with ALLOC_HOST_PTR is invalid; the driver answers it"),
            Skip::HostPtrWithoutCopy => write!(f, "a host pointer without COPY_HOST_PTR is invalid; the driver answers it"),
            Skip::CopyHostPtr => write!(f, "COPY_HOST_PTR: not rewritten; the copy probe through clCreateBufferNV crashed NVIDIA's driver 580.159.04 on the H200 (2026-11-30), so such buffers keep their VRAM"),
            Skip::HostNoAccess => write!(f, "HOST_NO_ACCESS: the host never maps it, so it is device storage"),
            Skip::UnknownFlags(bits) => write!(f, "flags 0x{bits:x} that the layer does not know"),
            Skip::Properties => write!(f, "a property list, which clCreateBufferNV cannot take"),
            Skip::Unsupported(Support::Missing { device }) => write!(f, "device {device:?} lacks {NV_EXTENSION}"),
            Skip::Unsupported(Support::Mixed { with, without }) => write!(f, "the context's devices disagree: {with} with {NV_EXTENSION}, {without} without"),
            Skip::Unsupported(Support::NoFunction) => write!(f, "the platform lists {NV_EXTENSION} but returned no clCreateBufferNV"),
            Skip::Unsupported(Support::QueryFailed { call, code }) => write!(f, "{call} failed ({code})"),
            Skip::Unsupported(Support::AllDevices) => write!(f, "(supported)"),
            Skip::NvFailed(code) => write!(f, "clCreateBufferNV failed ({code}); created as asked instead"),
        }
    }
}

/// What to do with one buffer creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Call `clCreateBufferNV(ctx, flags, nv_flags, size, host_ptr)`.
    Rewrite {
        /// Passed on unchanged from the program.
        flags: cl_mem_flags,
        /// [`NV_HOST_PINNED`].
        nv_flags: u64,
    },
    /// Audit policy: create as asked, and track it as a buffer the rewrite would have taken.
    WouldRewrite,
    /// Create as asked.
    Keep(Skip),
}

/// The checks that need no driver, in order. `Ok` means "a candidate: ask the driver".
pub fn screen(req: &Request, settings: &Settings) -> Result<(), Skip> {
    let f = req.flags;
    if settings.policy == Policy::Off {
        Err(Skip::PolicyOff)
    } else if f & CL_MEM_ALLOC_HOST_PTR == 0 {
        Err(Skip::NotAllocHostPtr)
    } else if req.size < settings.min_size {
        Err(Skip::Small {
            min_size: settings.min_size,
        })
    } else if f & !KNOWN_FLAGS != 0 {
        Err(Skip::UnknownFlags(f & !KNOWN_FLAGS))
    } else if f & CL_MEM_USE_HOST_PTR != 0 {
        Err(Skip::UseHostPtr)
    } else if req.host_ptr && f & CL_MEM_COPY_HOST_PTR == 0 {
        Err(Skip::HostPtrWithoutCopy)
    } else if f & CL_MEM_COPY_HOST_PTR != 0 {
        Err(Skip::CopyHostPtr)
    } else if f & CL_MEM_HOST_NO_ACCESS != 0 {
        Err(Skip::HostNoAccess)
    } else if req.properties {
        Err(Skip::Properties)
    } else {
        Ok(())
    }
}

/// The whole decision for one request, given what the driver said.
pub fn decide(req: &Request, settings: &Settings, facts: &Facts) -> Decision {
    if let Err(skip) = screen(req, settings) {
        return Decision::Keep(skip);
    }
    if facts.support != Support::AllDevices {
        return Decision::Keep(Skip::Unsupported(facts.support.clone()));
    }
    if settings.policy == Policy::Audit {
        return Decision::WouldRewrite;
    }
    Decision::Rewrite {
        flags: req.flags,
        nv_flags: NV_HOST_PINNED,
    }
}

/// `flags` as `READ_WRITE|ALLOC_HOST_PTR` (unknown bits in hex).
pub fn flag_names(flags: cl_mem_flags) -> String {
    let mut names: Vec<String> = FLAG_NAMES
        .iter()
        .filter(|(bit, _)| flags & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect();
    if flags & !KNOWN_FLAGS != 0 {
        names.push(format!("0x{:x}", flags & !KNOWN_FLAGS));
    }
    if names.is_empty() {
        "0 (READ_WRITE)".into()
    } else {
        names.join("|")
    }
}

/// Support across a context's devices, from each device's extension string.
pub fn support_of<'a>(
    device_names_and_extensions: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Support {
    let (mut with, mut without, mut first) = (0, 0, None);
    for (name, extensions) in device_names_and_extensions {
        first.get_or_insert(name);
        if extensions.split_whitespace().any(|e| e == NV_EXTENSION) {
            with += 1;
        } else {
            without += 1;
        }
    }
    match (with, without) {
        (0, 0) => Support::QueryFailed {
            call: "clGetContextInfo(CL_CONTEXT_DEVICES) (no devices)",
            code: 0,
        },
        (_, 0) => Support::AllDevices,
        (0, _) => Support::Missing {
            device: first.unwrap_or_default().to_string(),
        },
        _ => Support::Mixed { with, without },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::LogLevel;

    const MIB: u64 = 1 << 20;
    const CLASSIC: cl_mem_flags = CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR;

    fn req(flags: cl_mem_flags, size: u64) -> Request {
        Request {
            flags,
            size,
            host_ptr: flags & (CL_MEM_COPY_HOST_PTR | CL_MEM_USE_HOST_PTR) != 0,
            properties: false,
        }
    }

    fn settings(policy: Policy) -> Settings {
        Settings {
            policy,
            min_size: MIB,
            log: LogLevel::Quiet,
            ..Settings::default()
        }
    }

    const NV: Facts = Facts {
        support: Support::AllDevices,
    };

    fn decide_rewrite(r: &Request) -> Decision {
        decide(r, &settings(Policy::Rewrite), &NV)
    }

    #[test]
    fn the_classic_recipe_is_rewritten_with_its_own_flags_and_host_pinned() {
        for flags in [
            CLASSIC,
            CL_MEM_ALLOC_HOST_PTR,
            CL_MEM_READ_ONLY | CL_MEM_ALLOC_HOST_PTR,
            CL_MEM_WRITE_ONLY | CL_MEM_ALLOC_HOST_PTR | CL_MEM_HOST_READ_ONLY,
            CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR | CL_MEM_KERNEL_READ_AND_WRITE,
        ] {
            assert_eq!(
                decide_rewrite(&req(flags, MIB)),
                Decision::Rewrite {
                    flags,
                    nv_flags: CL_MEM_LOCATION_HOST_NV | CL_MEM_PINNED_NV
                },
                "{}",
                flag_names(flags)
            );
        }
        assert_eq!(NV_HOST_PINNED, 0b11);
    }

    #[test]
    fn everything_else_is_left_alone_with_a_reason() {
        let cases = [
            (req(CL_MEM_READ_WRITE, 64 * MIB), Skip::NotAllocHostPtr),
            (
                req(CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, 64 * MIB),
                Skip::NotAllocHostPtr,
            ),
            (req(CLASSIC, MIB - 1), Skip::Small { min_size: MIB }),
            (req(CLASSIC | CL_MEM_USE_HOST_PTR, MIB), Skip::UseHostPtr),
            (
                req(CLASSIC | CL_MEM_HOST_NO_ACCESS, MIB),
                Skip::HostNoAccess,
            ),
            (req(CLASSIC | (1 << 20), MIB), Skip::UnknownFlags(1 << 20)),
            (req(CLASSIC | (1 << 10), MIB), Skip::UnknownFlags(1 << 10)),
        ];
        for (r, why) in cases {
            assert_eq!(decide_rewrite(&r), Decision::Keep(why));
        }
        let stray_ptr = Request {
            host_ptr: true,
            ..req(CLASSIC, MIB)
        };
        assert_eq!(
            decide_rewrite(&stray_ptr),
            Decision::Keep(Skip::HostPtrWithoutCopy)
        );
        let with_props = Request {
            properties: true,
            ..req(CLASSIC, MIB)
        };
        assert_eq!(
            decide_rewrite(&with_props),
            Decision::Keep(Skip::Properties)
        );
    }

    #[test]
    fn the_size_threshold_is_inclusive_and_set_by_the_user() {
        let mut s = settings(Policy::Rewrite);
        assert!(screen(&req(CLASSIC, MIB), &s).is_ok());
        s.min_size = 0;
        assert!(screen(&req(CLASSIC, 0), &s).is_ok());
        s.min_size = 4 * MIB;
        assert_eq!(
            screen(&req(CLASSIC, 3 * MIB), &s),
            Err(Skip::Small { min_size: 4 * MIB })
        );
    }

    #[test]
    fn devices_without_the_extension_or_disagreeing_keep_their_buffers() {
        let r = req(CLASSIC, 8 * MIB);
        for support in [
            Support::Missing {
                device: "cpu".into(),
            },
            Support::Mixed {
                with: 1,
                without: 1,
            },
            Support::NoFunction,
            Support::QueryFailed {
                call: "clGetDeviceInfo",
                code: -33,
            },
        ] {
            let facts = Facts {
                support: support.clone(),
            };
            assert_eq!(
                decide(&r, &settings(Policy::Rewrite), &facts),
                Decision::Keep(Skip::Unsupported(support))
            );
        }
    }

    #[test]
    fn copy_host_ptr_is_never_rewritten_and_says_why() {
        for flags in [
            CLASSIC | CL_MEM_COPY_HOST_PTR,
            CL_MEM_READ_ONLY | CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR,
        ] {
            let r = req(flags, 8 * MIB);
            assert_eq!(
                screen(&r, &settings(Policy::Rewrite)),
                Err(Skip::CopyHostPtr)
            );
            assert_eq!(decide_rewrite(&r), Decision::Keep(Skip::CopyHostPtr));
        }
        let why = Skip::CopyHostPtr.to_string();
        assert!(why.starts_with("COPY_HOST_PTR: not rewritten"), "{why}");
        assert!(why.contains("crashed NVIDIA's driver 580.159.04"), "{why}");
        assert!(why.ends_with("keep their VRAM"), "{why}");
        assert_eq!(Skip::CopyHostPtr.key(), "with COPY_HOST_PTR");
    }

    #[test]
    fn audit_rewrites_nothing_and_off_considers_nothing() {
        let r = req(CLASSIC, 8 * MIB);
        assert_eq!(
            decide(&r, &settings(Policy::Audit), &NV),
            Decision::WouldRewrite
        );
        assert_eq!(
            decide(
                &req(CLASSIC | CL_MEM_COPY_HOST_PTR, 8 * MIB),
                &settings(Policy::Audit),
                &NV
            ),
            Decision::Keep(Skip::CopyHostPtr),
            "audit reports COPY_HOST_PTR as not rewritable"
        );
        assert_eq!(
            decide(
                &r,
                &settings(Policy::Audit),
                &Facts {
                    support: Support::NoFunction,
                }
            ),
            Decision::Keep(Skip::Unsupported(Support::NoFunction))
        );
        assert_eq!(
            decide(&r, &settings(Policy::Off), &NV),
            Decision::Keep(Skip::PolicyOff)
        );
    }

    #[test]
    fn routine_skips_are_only_counted() {
        assert!(Skip::Small { min_size: 1 }.is_routine());
        assert!(Skip::NotAllocHostPtr.is_routine());
        assert!(
            !Skip::CopyHostPtr.is_routine(),
            "a candidate that keeps its VRAM is logged, with the reason"
        );
        assert!(!Skip::Unsupported(Support::NoFunction).is_routine());
    }

    #[test]
    fn support_needs_every_device() {
        let nv = "cl_khr_icd cl_nv_create_buffer cl_khr_fp64";
        assert_eq!(support_of([("h200", nv)]), Support::AllDevices);
        assert_eq!(support_of([("a", nv), ("b", nv)]), Support::AllDevices);
        assert_eq!(
            support_of([("pocl", "cl_khr_icd cl_nv_create_buffer_x")]),
            Support::Missing {
                device: "pocl".into()
            }
        );
        assert_eq!(
            support_of([("a", nv), ("b", "cl_khr_icd")]),
            Support::Mixed {
                with: 1,
                without: 1
            }
        );
        assert!(matches!(support_of([]), Support::QueryFailed { .. }));
    }

    #[test]
    fn flags_are_named_for_the_log() {
        assert_eq!(flag_names(CLASSIC), "READ_WRITE|ALLOC_HOST_PTR");
        assert_eq!(
            flag_names(CL_MEM_ALLOC_HOST_PTR | (1 << 20)),
            "ALLOC_HOST_PTR|0x100000"
        );
        assert_eq!(flag_names(0), "0 (READ_WRITE)");
    }

    #[test]
    fn every_reason_reads_as_a_sentence() {
        let all = [
            Skip::PolicyOff,
            Skip::NotAllocHostPtr,
            Skip::Small { min_size: MIB },
            Skip::UseHostPtr,
            Skip::HostPtrWithoutCopy,
            Skip::HostNoAccess,
            Skip::UnknownFlags(1 << 20),
            Skip::Properties,
            Skip::Unsupported(Support::Missing { device: "d".into() }),
            Skip::Unsupported(Support::Mixed {
                with: 1,
                without: 2,
            }),
            Skip::Unsupported(Support::NoFunction),
            Skip::Unsupported(Support::QueryFailed {
                call: "clGetDeviceInfo",
                code: -30,
            }),
            Skip::CopyHostPtr,
            Skip::NvFailed(-4),
        ];
        for s in all {
            assert!(s.to_string().len() > 8, "{s:?}");
            assert!(!s.key().is_empty());
        }
    }
}
