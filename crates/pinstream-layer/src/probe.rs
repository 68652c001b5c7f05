//! Is the layer active in this environment, and which way in works on this machine? For
//! `pinstream devices`. It reads the environment and looks at the OpenCL loader this process
//! resolves (`libOpenCL.so.1`): a loader honours `OPENCL_LAYERS` when it carries that name and
//! `clInitLayer` (ocl-icd 2.3.0 on and the Khronos loader do; the CUDA toolkit's
//! `libOpenCL.so.1` has neither). `LD_PRELOAD` works with any loader for programs linked
//! against `libOpenCL`.

use crate::ffi::layer::LAYER_NAME;
use crate::settings::{human, Settings};
use serde::Serialize;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

/// The file name cargo gives the layer.
pub const LAYER_FILE: &str = "libpinstream_layer.so";

/// The OpenCL loader a program gets for `libOpenCL.so.1`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Loader {
    /// Its file, links resolved.
    pub path: String,
    /// Whether it contains `OPENCL_LAYERS` and `clInitLayer` (layer support).
    pub honours_layers: bool,
}

/// What `pinstream devices` says about the layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayerReport {
    /// The ways the layer is active in this environment: `OPENCL_LAYERS`, `LD_PRELOAD`.
    pub active: Vec<&'static str>,
    /// The pinstream layer `OPENCL_LAYERS` names, if any.
    pub opencl_layers: Option<String>,
    /// The pinstream layer `LD_PRELOAD` names, if any.
    pub ld_preload: Option<String>,
    /// The loader `libOpenCL.so.1` resolves to here.
    pub loader: Option<Loader>,
    /// A layer library to use: the one named in the environment, else one beside this program.
    pub layer_file: Option<String>,
    /// The layer's settings from this environment.
    pub settings: Settings,
    /// What is wrong with them.
    pub problems: Vec<String>,
}

/// The report for this process's environment and machine.
pub fn report() -> LayerReport {
    let named = |var: &str, sep: char| {
        std::env::var(var)
            .ok()
            .and_then(|v| pinstream_entry(&v, sep))
    };
    let opencl_layers = named("OPENCL_LAYERS", ':');
    let ld_preload = named("LD_PRELOAD", ' ').or_else(|| named("LD_PRELOAD", ':'));
    let loader = resolve_loader();
    let mut active = Vec::new();
    if opencl_layers.is_some() && loader.as_ref().is_some_and(|l| l.honours_layers) {
        active.push("OPENCL_LAYERS");
    }
    if ld_preload.is_some() {
        active.push("LD_PRELOAD");
    }
    let beside_us = std::env::current_exe()
        .ok()
        .and_then(|e| Some(e.parent()?.join(LAYER_FILE)))
        .filter(|p| is_layer(p));
    let layer_file = ld_preload
        .clone()
        .or(opencl_layers.clone())
        .or_else(|| beside_us.map(|p| p.display().to_string()));
    let (settings, problems) = Settings::from_env();
    LayerReport {
        active,
        opencl_layers,
        ld_preload,
        loader,
        layer_file,
        settings,
        problems,
    }
}

impl LayerReport {
    /// The report as text lines.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![match self.active.as_slice() {
            [] => {
                "OpenCL layer (libpinstream_layer.so): not active in this environment".to_string()
            }
            ways => format!(
                "OpenCL layer (libpinstream_layer.so): active through {}",
                ways.join(" and ")
            ),
        }];
        if let (Some(path), Some(l)) = (&self.opencl_layers, &self.loader) {
            if !l.honours_layers {
                out.push(format!("  OPENCL_LAYERS names {path}, but this machine's loader ignores OPENCL_LAYERS: use LD_PRELOAD"));
            }
        }
        out.push(match &self.loader {
            Some(l) => format!(
                "  loader: {} ({})",
                l.path,
                if l.honours_layers {
                    "honours OPENCL_LAYERS"
                } else {
                    "no layer support: OPENCL_LAYERS has no effect"
                }
            ),
            None => "  loader: libOpenCL.so.1 not found".to_string(),
        });
        let file = self
            .layer_file
            .clone()
            .unwrap_or_else(|| format!("/path/to/{LAYER_FILE}"));
        let mut ways = Vec::new();
        if self.loader.as_ref().is_some_and(|l| l.honours_layers) {
            ways.push(format!("OPENCL_LAYERS={file}"));
        }
        ways.push(format!(
            "LD_PRELOAD={file} (programs linked against libOpenCL)"
        ));
        out.push(format!("  ways in here: {}", ways.join("; ")));
        if self.layer_file.is_none() {
            out.push(format!("  {LAYER_FILE} not found beside this program: cargo build --release -p pinstream-layer"));
        }
        let s = &self.settings;
        out.push(format!(
            "  policy {}, minimum size {} (PINSTREAM_LAYER_POLICY, PINSTREAM_LAYER_MIN_SIZE)",
            s.policy,
            human(s.min_size)
        ));
        out.extend(self.problems.iter().map(|p| format!("  problem: {p}")));
        out
    }
}

/// `pinstream doctor`'s note: where the classic recipe (`alloc-host-ptr`) cost VRAM on a device
/// whose driver has `cl_nv_create_buffer`, programs that use it can run unchanged under the
/// layer. `vram_cost` is what the recipe cost for `size` bytes (`None`: not measurable).
pub fn doctor_note(vram_cost: Option<i64>, size: u64, device_has_nv: bool) -> Option<String> {
    let costly = vram_cost.is_some_and(|c| c as f64 >= 0.01 * size as f64);
    (costly && device_has_nv).then(|| {
        let file = report().layer_file.unwrap_or_else(|| format!("/path/to/{LAYER_FILE}"));
        format!(
            "note: programs that pin memory the classic way (alloc-host-ptr: ALLOC_HOST_PTR buffers, mapped) pay that VRAM here; \
             run them unchanged under pinstream's OpenCL layer and they pay none: LD_PRELOAD={file} PROGRAM \
             (`pinstream devices` says which way in works; docs/layer.md: \"Fix an existing program without touching it\")"
        )
    })
}

/// The entry of a `sep`-separated list that names an existing pinstream layer.
fn pinstream_entry(list: &str, sep: char) -> Option<String> {
    list.split(sep)
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .find(|e| is_layer(Path::new(e)))
        .map(str::to_string)
}

/// True for a file that is this layer (it carries the layer's name string).
pub fn is_layer(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|bytes| contains(&bytes, LAYER_NAME.as_bytes()))
}

/// True when a loader's bytes show layer support.
pub fn honours_layers(loader_bytes: &[u8]) -> bool {
    contains(loader_bytes, b"OPENCL_LAYERS") && contains(loader_bytes, b"clInitLayer")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The file `libOpenCL.so.1` resolves to for this process.
fn resolve_loader() -> Option<Loader> {
    let path = loader_path()?;
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let honours = std::fs::read(&path).is_ok_and(|b| honours_layers(&b));
    Some(Loader {
        path: path.display().to_string(),
        honours_layers: honours,
    })
}

fn loader_path() -> Option<PathBuf> {
    // SAFETY: dlopen of the OpenCL loader (which has no constructors that need arguments),
    // dlsym and dladdr on it, then dlclose of this reference. Strings are NUL-terminated and
    // `info.dli_fname` is read before the handle is closed.
    unsafe {
        let handle = libc::dlopen(
            c"libOpenCL.so.1".as_ptr(),
            libc::RTLD_LAZY | libc::RTLD_LOCAL,
        );
        if handle.is_null() {
            return None;
        }
        let sym: *mut c_void = libc::dlsym(handle, c"clGetPlatformIDs".as_ptr());
        let mut info: libc::Dl_info = std::mem::zeroed();
        let path =
            (!sym.is_null() && libc::dladdr(sym, &mut info) != 0 && !info.dli_fname.is_null())
                .then(|| {
                    PathBuf::from(
                        CStr::from_ptr(info.dli_fname)
                            .to_string_lossy()
                            .into_owned(),
                    )
                });
        libc::dlclose(handle);
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_support_needs_both_names() {
        assert!(honours_layers(b"...OPENCL_LAYERS\0...clInitLayer\0"));
        assert!(!honours_layers(b"...OPENCL_LAYERS\0"));
        assert!(!honours_layers(b"clGetPlatformIDs clInitLayer"));
    }

    #[test]
    fn only_files_that_are_the_layer_count() {
        let dir =
            std::env::temp_dir().join(format!("pinstream-layer-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let real = dir.join(LAYER_FILE);
        let other = dir.join("libother.so");
        std::fs::write(&real, format!("ELF...{LAYER_NAME}...")).unwrap();
        std::fs::write(&other, "ELF...").unwrap();
        let (r, o) = (real.display().to_string(), other.display().to_string());
        assert_eq!(pinstream_entry(&format!("{o}:{r}"), ':'), Some(r.clone()));
        assert_eq!(
            pinstream_entry(&format!(" {o}  {r} "), ' '),
            Some(r.clone())
        );
        assert_eq!(pinstream_entry(&o, ':'), None);
        assert_eq!(
            pinstream_entry("/nonexistent/libpinstream_layer.so", ':'),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn sample(active: Vec<&'static str>, honours: bool) -> LayerReport {
        LayerReport {
            active,
            opencl_layers: Some("/x/libpinstream_layer.so".into()),
            ld_preload: None,
            loader: Some(Loader {
                path: "/usr/local/cuda/lib64/libOpenCL.so.1".into(),
                honours_layers: honours,
            }),
            layer_file: Some("/x/libpinstream_layer.so".into()),
            settings: Settings::default(),
            problems: vec![],
        }
    }

    #[test]
    fn a_loader_without_layer_support_points_to_ld_preload() {
        let text = sample(vec![], false).lines().join("\n");
        assert!(text.contains("not active in this environment"), "{text}");
        assert!(
            text.contains("ignores OPENCL_LAYERS: use LD_PRELOAD"),
            "{text}"
        );
        assert!(
            text.contains("ways in here: LD_PRELOAD=/x/libpinstream_layer.so"),
            "{text}"
        );
        assert!(!text.contains("OPENCL_LAYERS=/x"), "{text}");
    }

    #[test]
    fn an_active_layer_says_how() {
        let text = sample(vec!["OPENCL_LAYERS"], true).lines().join("\n");
        assert!(text.contains("active through OPENCL_LAYERS"), "{text}");
        assert!(
            text.contains("ways in here: OPENCL_LAYERS=/x/libpinstream_layer.so; LD_PRELOAD="),
            "{text}"
        );
        assert!(
            text.contains("policy rewrite, minimum size 1.00 MiB"),
            "{text}"
        );
    }

    #[test]
    fn doctor_mentions_the_layer_only_where_the_classic_recipe_costs_vram_and_it_can_help() {
        let gib = 1i64 << 30;
        let note = doctor_note(Some(10 * gib), 10 << 30, true).expect("costly, NV driver");
        assert!(
            note.contains("LD_PRELOAD=") && note.contains("alloc-host-ptr"),
            "{note}"
        );
        assert_eq!(
            doctor_note(Some(20 << 20), 10 << 30, true),
            None,
            "0.2% is no cost"
        );
        assert_eq!(
            doctor_note(Some(10 * gib), 10 << 30, false),
            None,
            "no cl_nv_create_buffer: the layer cannot help"
        );
        assert_eq!(doctor_note(None, 10 << 30, true), None, "cost unknown");
    }

    #[test]
    fn this_machine_s_loader_is_found() {
        // Any machine with a loader: CI's ocl-icd honours OPENCL_LAYERS, the H200 machine's
        // CUDA libOpenCL.so.1 does not; the report offers OPENCL_LAYERS only where it works.
        let r = report();
        let loader = r
            .loader
            .as_ref()
            .expect("libOpenCL.so.1 resolves here (ocl-icd-libopencl1 is installed)");
        assert!(loader.path.contains("libOpenCL"), "{loader:?}");
        let text = r.lines().join("\n");
        let ways = text.lines().find(|l| l.contains("ways in here")).unwrap();
        assert_eq!(
            ways.contains("OPENCL_LAYERS="),
            loader.honours_layers,
            "{text}"
        );
        assert!(ways.contains("LD_PRELOAD="), "{text}");
    }
}
