//! Whether CUDA can be used here: the driver and NVRTC libraries, the driver's version against
//! the one this build was made for, and a device.

use super::CudaError;
use cudarc::driver::{sys, CudaContext};

/// Says why CUDA cannot be used here, or `None` when the driver, NVRTC and a device exist.
/// Never panics (cudarc panics when a library it loads is missing, so this checks first).
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: loading a shared library runs its initialisers; the CUDA driver's and NVRTC's
    // are meant to be loaded by any process.
    if !unsafe { sys::is_culib_present() } {
        return Some(if cfg!(windows) {
            "no CUDA driver: nvcuda.dll was not found (it comes with the NVIDIA display driver, in System32: install or repair the driver)".into()
        } else {
            "no CUDA driver: libcuda.so.1 was not found by the dynamic loader (install the NVIDIA driver, or add the directory holding libcuda.so.1 to LD_LIBRARY_PATH)".into()
        });
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Some(if cfg!(windows) {
            // cudarc looks for nvrtc64_<major><minor>_0.dll and its variants (nvrtc64_130_0.dll
            // for CUDA 13.0) on the DLL search path.
            format!("no NVRTC: nvrtc64_{CUDA_MAJOR}0_0.dll (or another nvrtc64_{CUDA_MAJOR}*.dll) was not found, so the built-in kernels cannot be compiled through CUDA (install NVRTC from the CUDA toolkit and add its bin folder to PATH; for another CUDA version, build with its cuda-NNNNN feature, see docs/cli.md, CUDA)")
        } else {
            format!("no NVRTC: libnvrtc.so.{CUDA_MAJOR} was not found by the dynamic loader, so the built-in kernels cannot be compiled through CUDA (install NVRTC from the CUDA toolkit, or add its directory to LD_LIBRARY_PATH; for another CUDA version, build with its cuda-NNNNN feature, see docs/cli.md, CUDA)")
        });
    }
    let mut driver = 0;
    // SAFETY: `driver` is a valid out-pointer; cuDriverGetVersion needs no cuInit.
    if unsafe { sys::cuDriverGetVersion(&mut driver) }
        .result()
        .is_ok()
        && driver < BUILT_FOR
    {
        let fix = match BUILDS.iter().find(|&&b| b <= driver) {
            Some(b) => format!("rebuild with `cargo build --release --no-default-features --features cuda,cuda-{b}`"),
            None => "no build of pinstream supports a driver older than CUDA 11.8".into(),
        };
        return Some(format!(
            "the CUDA driver supports CUDA {} but this pinstream was built for CUDA {}: update the NVIDIA driver, or {fix}",
            version(driver),
            version(BUILT_FOR),
        ));
    }
    match CudaContext::device_count() {
        Ok(0) => Some("the CUDA driver lists no device".into()),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the CUDA driver did not start: {} (is the NVIDIA kernel module loaded and the GPU visible? `nvidia-smi` should list it)",
            CudaError::driver("cuInit")(e)
        )),
    }
}

/// The CUDA API version the backend was built against (the `cuda-NNNNN` cargo feature): the
/// driver must be at least this version, or calls the bindings make (e.g.
/// `cuEventElapsedTime_v2` in 13.0) are missing from it.
const BUILT_FOR: i32 = if cfg!(feature = "cuda-13000") {
    13000
} else if cfg!(feature = "cuda-12080") {
    12080
} else if cfg!(feature = "cuda-12060") {
    12060
} else if cfg!(feature = "cuda-12040") {
    12040
} else if cfg!(feature = "cuda-12020") {
    12020
} else if cfg!(feature = "cuda-12000") {
    12000
} else {
    11080
};

/// The `cuda-NNNNN` features in Cargo.toml, newest first.
const BUILDS: [i32; 7] = [13000, 12080, 12060, 12040, 12020, 12000, 11080];

#[cfg(target_endian = "big")]
compile_error!("the CUDA backend passes 32-bit kernel arguments in 64-bit slots, which needs a little-endian target");

/// NVRTC's major version as the loader names it for this build.
const CUDA_MAJOR: i32 = BUILT_FOR / 1000;

pub(super) fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}
