//! The doctor's verdicts: each way to pin judged (pinned by the driver, its VRAM cost, data
//! intact), and the one to recommend.

use super::StrategyReport;
use pinstream::host::PinKind;
use pinstream::units::Bytes;

/// Fills in `r`'s verdict and whether it is good.
pub(super) fn judge(r: &mut StrategyReport, size: usize, cpu: bool, pageable_h2d: Option<f64>) {
    let cheap = r.vram_cost.map(|c| (c as f64) < 0.01 * size as f64);
    r.verdict = if let Some(e) = &r.error {
        format!("failed: {e}")
    } else if r.mismatched_bytes > 0 {
        format!(
            "DATA MISMATCH: {} of {} bytes came back different",
            r.mismatched_bytes, r.verified_bytes
        )
    } else if cpu {
        "works; CPU device: host memory is device memory, nothing needs pinning".into()
    } else {
        pinned_verdict(r, cheap, pageable_h2d)
    };
    r.good = r.error.is_none()
        && r.mismatched_bytes == 0
        && r.kind == PinKind::Driver
        && cheap != Some(false);
}

/// The verdict on memory that moved intact to a GPU, by how it was pinned.
fn pinned_verdict(r: &StrategyReport, cheap: Option<bool>, pageable_h2d: Option<f64>) -> String {
    let s = &r.strategy;
    match (r.kind, cheap, r.vram_cost) {
        (PinKind::Resident, ..) => {
            let speed = match (pageable_h2d, &r.h2d) {
                (Some(p), Some(h)) => format!(" (H2D {:.1} GB/s; pageable {:.1})", h.wall_gbps, p),
                _ => String::new(),
            };
            format!("not pinned for DMA: {s} keeps pages resident but the driver does not know them{speed}")
        }
        (PinKind::Pageable, ..) => "not pinned: plain pageable memory, the baseline".into(),
        (PinKind::Driver, Some(true), _) => "pinned, VRAM cost < 1% of size".into(),
        (PinKind::Driver, Some(false), Some(c)) => format!(
            "{s}: costs {} of VRAM on this driver",
            Bytes(c.max(0) as u64)
        ),
        _ => "pinned by the driver; VRAM cost unknown: this driver has no counter".into(),
    }
}

/// The way to recommend among `reports` (`auto`'s where it passed), and why.
pub(super) fn recommend(
    auto: Option<&str>,
    reports: &[StrategyReport],
) -> (Option<String>, String) {
    let good = |s: &str| reports.iter().find(|r| r.strategy == s && r.good);
    if let Some(r) = auto.and_then(good) {
        return (
            Some(r.strategy.clone()),
            format!("auto's choice, measured here: {}", why(r)),
        );
    }
    let best = reports
        .iter()
        .filter(|r| r.good)
        .max_by(|a, b| speed(a).total_cmp(&speed(b)));
    match best {
        Some(r) => (
            Some(r.strategy.clone()),
            format!(
                "auto's choice did not pass here; this is the fastest that did: {}",
                why(r)
            ),
        ),
        None => (
            None,
            "no strategy was pinned by the driver at low VRAM cost with intact data".into(),
        ),
    }
}

fn why(r: &StrategyReport) -> String {
    let cost = match r.vram_cost {
        Some(c) => format!(
            "VRAM cost {}",
            if c <= 0 {
                "0".into()
            } else {
                Bytes(c as u64).to_string()
            }
        ),
        None => "VRAM cost not measurable on this driver".into(),
    };
    format!("pinned through the driver, data intact, {cost}")
}

fn speed(r: &StrategyReport) -> f64 {
    r.h2d.as_ref().map_or(0.0, |b| b.wall_gbps) + r.d2h.as_ref().map_or(0.0, |b| b.wall_gbps)
}
