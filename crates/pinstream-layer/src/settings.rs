//! The layer's settings, read once from the environment. Pure: [`Settings::parse`] takes a
//! lookup function, so the tests need no process environment.

use pinstream::units::parse_size;
use serde::Serialize;
use std::fmt;
use std::sync::OnceLock;

/// `PINSTREAM_LAYER_POLICY`: what the layer does with a buffer it could rewrite.
pub const ENV_POLICY: &str = "PINSTREAM_LAYER_POLICY";
/// `PINSTREAM_LAYER_MIN_SIZE`: the smallest buffer rewritten, in the size grammar of the CLI
/// and the C library (`pinstream::units::parse_size`: `4096`, `256MiB`, `1G` in powers of
/// 1024; `2GB` is 2×10⁹ bytes).
pub const ENV_MIN_SIZE: &str = "PINSTREAM_LAYER_MIN_SIZE";
/// `PINSTREAM_LAYER_LOG`: `0` silent, unset warnings only, `1` one line per buffer and a summary.
pub const ENV_LOG: &str = "PINSTREAM_LAYER_LOG";
/// `PINSTREAM_LAYER_LOG_FILE=/path`: write the log to this file (created if missing, appended
/// to, opened close-on-exec and non-blocking) instead of stderr.
pub const ENV_LOG_FILE: &str = "PINSTREAM_LAYER_LOG_FILE";
/// `PINSTREAM_LAYER_TEST_PANIC`: TEST HOOK, see [`Settings::test_panic`].
pub const ENV_TEST_PANIC: &str = "PINSTREAM_LAYER_TEST_PANIC";
/// `PINSTREAM_LAYER_TEST_FAKE_NV`: TEST HOOK, see [`Settings::fake_nv`].
pub const ENV_TEST_FAKE_NV: &str = "PINSTREAM_LAYER_TEST_FAKE_NV";

/// The default of [`Settings::min_size`]: 1 MiB.
pub const DEFAULT_MIN_SIZE: u64 = 1 << 20;

/// What the layer does with a `CL_MEM_ALLOC_HOST_PTR` buffer it could rewrite.
///
/// The rewrite moves the buffer's storage from VRAM to pinned host memory. Staging use (map,
/// fill, use the mapped pointer or the buffer as a copy source) keeps its speed and stops
/// costing VRAM; a kernel that reads the buffer, or a transfer whose device side is the buffer,
/// now crosses PCIe or copies host to host (a kernel read ~12x slower on the H200). Which use a
/// buffer will get is not known when it is created, so the policy is chosen by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Rewrite every eligible buffer (the default). The first binding of a rewritten buffer to
    /// each kernel, and the first time one is the device side of a read or write, are logged
    /// (warnings level); the summary counts every such use.
    Rewrite,
    /// Rewrite nothing; log every buffer that would be rewritten and how the program then uses
    /// it, so that the choice between `rewrite` and `off` rests on what this program does.
    Audit,
    /// Forward everything untouched and say nothing.
    Off,
}

impl Policy {
    /// The name `PINSTREAM_LAYER_POLICY` takes.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Rewrite => "rewrite",
            Policy::Audit => "audit",
            Policy::Off => "off",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How much the layer writes to its log (stderr, or [`ENV_LOG_FILE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogLevel {
    /// `PINSTREAM_LAYER_LOG=0`: nothing.
    Quiet,
    /// Unset: warnings only (a rewritten buffer bound to a kernel, a failed rewrite, bad settings).
    Warnings,
    /// `PINSTREAM_LAYER_LOG=1`: also one line per buffer considered and a summary at exit.
    Verbose,
}

/// Everything the environment decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// What to do with eligible buffers.
    pub policy: Policy,
    /// Buffers smaller than this are never rewritten.
    pub min_size: u64,
    /// How much to log.
    pub log: LogLevel,
    /// TEST HOOK (`PINSTREAM_LAYER_TEST_FAKE_NV=1`): treat every device as having
    /// `cl_nv_create_buffer` and stand in for `clCreateBufferNV` with the next layer's
    /// `clCreateBuffer` called with the same flags (the NV location flags dropped). It runs the
    /// layer's real rewrite path (decision, driver queries, the call, tracking, release
    /// callbacks, kernel-binding logs, summary) on a driver without the extension; it proves
    /// nothing about NVIDIA's `clCreateBufferNV` itself. Never set it outside tests.
    pub fake_nv: bool,
    /// Where the log goes: `None` for stderr, else the file [`ENV_LOG_FILE`] names.
    pub log_file: Option<String>,
    /// TEST HOOK (`PINSTREAM_LAYER_TEST_PANIC=clCreateBuffer`, an entry point's name, or `all`,
    /// comma-separated): the named entry points panic inside the layer, to prove that a panic
    /// never reaches the program: the call is passed straight on to the next layer or driver.
    /// `NAME@forwarded` panics once the call was made instead: its result is returned, the
    /// call is not made twice. Never set it outside tests.
    pub test_panic: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: Policy::Rewrite,
            min_size: DEFAULT_MIN_SIZE,
            log: LogLevel::Warnings,
            fake_nv: false,
            log_file: None,
            test_panic: None,
        }
    }
}

static CURRENT: OnceLock<Settings> = OnceLock::new();

impl Settings {
    /// This process's settings, read from its environment on the first call and kept (the
    /// layer reads its environment once); what was wrong with it is [`Settings::from_env`]'s.
    pub fn current() -> &'static Settings {
        CURRENT.get_or_init(|| Settings::from_env().0)
    }

    /// The settings of this process's environment, and what was wrong with it.
    pub fn from_env() -> (Settings, Vec<String>) {
        Settings::parse(|name| std::env::var(name).ok())
    }

    /// The settings `get` describes. A bad value falls back to the safe choice (`off` for an
    /// unknown policy, the default size, warnings) and adds a message naming the fix.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> (Settings, Vec<String>) {
        let mut problems = Vec::new();
        let mut s = Settings::default();
        if let Some(v) = get(ENV_POLICY).filter(|v| !v.trim().is_empty()) {
            s.policy = parse_policy(&v).unwrap_or_else(|| {
                problems.push(format!(
                    "{ENV_POLICY}={v:?} is not a policy: use rewrite, audit or off; the layer is off until then"
                ));
                Policy::Off
            });
        }
        if let Some(v) = get(ENV_MIN_SIZE).filter(|v| !v.trim().is_empty()) {
            match parse_size(&v) {
                Ok(n) => s.min_size = n,
                Err(e) => problems.push(format!("{ENV_MIN_SIZE}: {e}; using 1 MiB")),
            }
        }
        if let Some(v) = get(ENV_LOG) {
            s.log = match v.trim() {
                "0" => LogLevel::Quiet,
                "" => LogLevel::Warnings,
                "1" => LogLevel::Verbose,
                other => {
                    problems.push(format!(
                        "{ENV_LOG}={other:?} is not 0 or 1; logging warnings only"
                    ));
                    LogLevel::Warnings
                }
            };
        }
        s.fake_nv = get(ENV_TEST_FAKE_NV).is_some_and(|v| v.trim() == "1");
        s.log_file = get(ENV_LOG_FILE).filter(|v| !v.trim().is_empty());
        s.test_panic = get(ENV_TEST_PANIC).filter(|v| !v.trim().is_empty());
        (s, problems)
    }
}

fn parse_policy(v: &str) -> Option<Policy> {
    match v.trim().to_ascii_lowercase().as_str() {
        "rewrite" => Some(Policy::Rewrite),
        "audit" => Some(Policy::Audit),
        "off" => Some(Policy::Off),
        _ => None,
    }
}

/// `bytes` as a short human figure (`1.00 GiB`, `2.0 MiB`, `512 B`).
pub fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            return format!("{:.2} {name}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Settings, Vec<String>) {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::parse(|k| env.get(k).cloned())
    }

    #[test]
    fn defaults_rewrite_from_one_mib_with_warnings() {
        let (s, problems) = parse(&[]);
        assert_eq!(s, Settings::default());
        assert_eq!(s.policy, Policy::Rewrite);
        assert_eq!(s.min_size, 1 << 20);
        assert_eq!(s.log, LogLevel::Warnings);
        assert!(!s.fake_nv);
        assert!(problems.is_empty());
    }

    #[test]
    fn every_setting_is_read() {
        let (s, problems) = parse(&[
            (ENV_POLICY, "Audit"),
            (ENV_MIN_SIZE, "64KiB"),
            (ENV_LOG, "1"),
            (ENV_TEST_FAKE_NV, "1"),
        ]);
        assert_eq!(s.policy, Policy::Audit);
        assert_eq!(s.min_size, 64 << 10);
        assert_eq!(s.log, LogLevel::Verbose);
        assert!(s.fake_nv);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(parse(&[(ENV_LOG, "0")]).0.log, LogLevel::Quiet);
        assert_eq!(parse(&[(ENV_POLICY, "off")]).0.policy, Policy::Off);
    }

    #[test]
    fn a_bad_policy_turns_the_layer_off_and_says_how_to_fix_it() {
        let (s, problems) = parse(&[(ENV_POLICY, "rewite")]);
        assert_eq!(s.policy, Policy::Off);
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].contains("rewrite, audit or off"),
            "{problems:?}"
        );
    }

    #[test]
    fn a_bad_size_keeps_the_default_and_says_so() {
        let (s, problems) = parse(&[(ENV_MIN_SIZE, "lots"), (ENV_LOG, "yes")]);
        assert_eq!(s.min_size, DEFAULT_MIN_SIZE);
        assert_eq!(s.log, LogLevel::Warnings);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("e.g. 4096, 256MiB"), "{problems:?}");
    }

    #[test]
    fn the_fake_nv_hook_needs_exactly_one() {
        assert!(!parse(&[(ENV_TEST_FAKE_NV, "yes")]).0.fake_nv);
        assert!(!parse(&[(ENV_TEST_FAKE_NV, "0")]).0.fake_nv);
    }

    /// Issue 21 class 11: one size grammar. The layer reads a size exactly as the library
    /// (and so the CLI and the C library) does: `2GB` is 2×10⁹ bytes everywhere, `2GiB` 2³¹.
    #[test]
    fn sizes_mean_what_they_mean_in_the_library() {
        for text in ["2GB", "2GiB", "2G", "1.5MiB", "4096", "64 kib", "3KB"] {
            let (s, problems) = parse(&[(ENV_MIN_SIZE, text)]);
            assert!(problems.is_empty(), "{text}: {problems:?}");
            assert_eq!(Ok(s.min_size), parse_size(text), "{text}");
        }
        assert_eq!(parse(&[(ENV_MIN_SIZE, "2GB")]).0.min_size, 2_000_000_000);
        assert_eq!(parse(&[(ENV_MIN_SIZE, "2GiB")]).0.min_size, 2 << 30);
    }

    #[test]
    fn the_log_file_and_the_panic_hook_are_read() {
        let (s, problems) = parse(&[(ENV_LOG_FILE, "/tmp/layer.log"), (ENV_TEST_PANIC, "all")]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(s.log_file.as_deref(), Some("/tmp/layer.log"));
        assert_eq!(s.test_panic.as_deref(), Some("all"));
        assert_eq!(parse(&[(ENV_LOG_FILE, " ")]).0.log_file, None);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(10 << 30), "10.00 GiB");
        assert_eq!(human(3 << 19), "1.50 MiB");
        assert_eq!(human(512), "512 B");
    }
}
