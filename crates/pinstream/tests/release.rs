//! Release test, alone in its own binary so no other test moves the process's RSS.

use pinstream::backend::opencl::{default_device, devices, Context};
use pinstream::host::{HostRegion, PinOptions, Strategy, StrategyChoice};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
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
