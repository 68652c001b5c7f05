//! What `pinstream --version` prints: the version, the commit it was built from, and the
//! backends built in (`-V` prints the version alone).
use std::sync::LazyLock;

/// The CUDA API version each `cuda-*` feature builds against.
const CUDA_APIS: [(bool, &str); 7] = [
    (cfg!(feature = "cuda-13000"), "13.0"),
    (cfg!(feature = "cuda-12080"), "12.8"),
    (cfg!(feature = "cuda-12060"), "12.6"),
    (cfg!(feature = "cuda-12040"), "12.4"),
    (cfg!(feature = "cuda-12020"), "12.2"),
    (cfg!(feature = "cuda-12000"), "12.0"),
    (cfg!(feature = "cuda-11080"), "11.8"),
];

/// The text after `pinstream ` for `--version`.
pub fn long() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{}\ncommit: {}\nbackends: {}",
            env!("CARGO_PKG_VERSION"),
            env!("PINSTREAM_COMMIT"),
            backends().join(", ")
        )
    });
    &TEXT
}

/// Each backend: built in (with its API version) or how to get it.
fn backends() -> Vec<String> {
    let mut out = vec!["opencl".to_string()];
    out.push(match CUDA_APIS.iter().find(|(on, _)| *on) {
        Some((_, api)) if cfg!(feature = "cuda") => format!("cuda (CUDA API {api})"),
        _ => "cuda not built (--features cuda)".to_string(),
    });
    out.push(match cfg!(feature = "vulkan") {
        true => "vulkan".to_string(),
        false => "vulkan not built (--features vulkan)".to_string(),
    });
    out
}
