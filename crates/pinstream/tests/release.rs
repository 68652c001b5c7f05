//! Release test, alone in its own binary so no other test moves the process's RSS.

use pinstream::backend::opencl::{default_device, devices, Context};
use pinstream::host::{HostRegion, PinOptions, Strategy, StrategyChoice};

fn rss_bytes() -> u64 {
    // VmRSS on Linux, the working set (GetProcessMemoryInfo) on Windows: never /proc there,
    // which under Wine would be the Linux host's.
    pinstream::backend::os::resident_bytes()
}

#[test]
fn dropping_a_region_releases_its_memory() {
    let all = devices().expect("an OpenCL platform is needed: apt-get install pocl-opencl-icd");
    let ctx = Context::new(default_device(&all).unwrap()).unwrap();
    let size = 256 << 20;
    let before = rss_bytes();
    let region = HostRegion::new(
        &ctx,
        size,
        &PinOptions {
            strategy: StrategyChoice::Forced(Strategy::Register),
            ..Default::default()
        },
    )
    .unwrap();
    let during = rss_bytes();
    assert!(
        during > before + size as u64 * 3 / 4,
        "pages made resident: {before} -> {during}"
    );
    drop(region);
    let after = rss_bytes();
    assert!(
        after < before + (32 << 20),
        "released: {before} -> {during} -> {after}"
    );
}
