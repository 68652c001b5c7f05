//! The figures of each half, and the ratios of one half's over the other's.

use super::points::{HalfPasses, PassRates};
use super::runs::RunFigures;
use super::stream::StreamRuns;
use super::{ApiFigures, BenchMedians, Ratio, MARK_BELOW};
use pinstream::units::{median, Bytes};

impl ApiFigures {
    /// A half's figures: its bench passes at `sizes` and its streaming runs.
    pub(super) fn new(
        memory: String,
        passes: HalfPasses,
        runs: &StreamRuns,
        sizes: &[usize],
    ) -> Self {
        let bench = sizes
            .iter()
            .zip(&passes)
            .map(|(&size, p)| BenchMedians {
                size,
                rates: medians(p),
            })
            .collect();
        let (in_place, gemv) = (&runs.in_place, &runs.gemv);
        ApiFigures {
            memory,
            copies: None,
            bench,
            bench_passes: passes,
            in_place: each(in_place, |f| f.gbps),
            gemv: each(gemv, |f| f.gbps),
            in_place_overlap: each(in_place, |f| f.overlap),
            in_place_cpu_s_per_gib: each(in_place, |f| f.cpu_s_per_gib),
            gemv_cpu_s_per_gib: each(gemv, |f| f.cpu_s_per_gib),
            in_place_devices: per_device(in_place),
            gemv_devices: per_device(gemv),
        }
    }
}

/// One figure of each run.
fn each(runs: &[RunFigures], f: impl Fn(&RunFigures) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

/// Each run's per-device GB/s; empty with one device.
fn per_device(runs: &[RunFigures]) -> Vec<Vec<f64>> {
    match runs.iter().all(|r| r.per_device_gbps.is_empty()) {
        true => Vec::new(),
        false => runs.iter().map(|r| r.per_device_gbps.clone()).collect(),
    }
}

/// The median of each direction over `passes`.
fn medians(passes: &[PassRates]) -> PassRates {
    let med = |f: fn(&PassRates) -> f64| median(&passes.iter().map(f).collect::<Vec<_>>());
    PassRates {
        h2d: med(|p| p.h2d),
        d2h: med(|p| p.d2h),
        both: med(|p| p.both),
    }
}

/// Device `d`'s figure of each repeat.
fn of_device(repeats: &[Vec<f64>], d: usize) -> Vec<f64> {
    repeats.iter().filter_map(|r| r.get(d).copied()).collect()
}

/// One figure through both halves, `api`'s (`a`) over `against`'s (`b`): the ratio of the
/// medians and the median of the per-pair ratios.
fn ratio(
    figure: String,
    (api, a): (&'static str, &[f64]),
    (against, b): (&'static str, &[f64]),
) -> Ratio {
    let (ma, mb) = (median(a), median(b));
    let ratio = if mb > 0.0 { ma / mb } else { 0.0 };
    let pairs: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(_, &y)| y > 0.0)
        .map(|(x, y)| x / y)
        .collect();
    Ratio {
        figure,
        api,
        value: ma,
        against,
        other: mb,
        ratio,
        paired: median(&pairs),
        marked: ratio < MARK_BELOW,
    }
}

/// Every figure of one API's (`api`, `cl`) over the same of another's (`against`, `cu`):
/// bench points, streams, and per device.
pub(super) fn ratios(
    (api, cl): (&'static str, &ApiFigures),
    (against, cu): (&'static str, &ApiFigures),
) -> Vec<Ratio> {
    let ratio = |figure, a: &[f64], b: &[f64]| ratio(figure, (api, a), (against, b));
    let mut out = Vec::new();
    for ((m, a), b) in cl.bench.iter().zip(&cl.bench_passes).zip(&cu.bench_passes) {
        let size = Bytes(m.size as u64);
        for d in 0..3 {
            let col = |v: &[PassRates]| v.iter().map(|p| p.each()[d].1).collect::<Vec<_>>();
            let what = PassRates::default().each()[d].0;
            out.push(ratio(format!("{what}, {size} blocks"), &col(a), &col(b)));
        }
    }
    let in_place = "in-place stream, up + down";
    out.push(ratio(in_place.into(), &cl.in_place, &cu.in_place));
    out.push(ratio("y = W·x, weights".into(), &cl.gemv, &cu.gemv));
    let devices = cl.in_place_devices.first().map_or(0, Vec::len);
    for d in 0..devices {
        let (a, b) = (&cl.in_place_devices, &cu.in_place_devices);
        let figure = format!("{in_place}, device {d}");
        out.push(ratio(figure, &of_device(a, d), &of_device(b, d)));
        let (a, b) = (&cl.gemv_devices, &cu.gemv_devices);
        let figure = format!("y = W·x, weights, device {d}");
        out.push(ratio(figure, &of_device(a, d), &of_device(b, d)));
    }
    out
}

/// The scattered pieces of one shape against CUDA, each direction: pinstream's staged gather
/// against CUDA's per-piece loop and batch call, and its zero-copy gather, checked and
/// vouched, against CUDA's zero-copy kernel on `cudaHostAllocMapped` memory.
pub(super) fn gather_ratios(g: &crate::tools::gather::GatherReport) -> Vec<Ratio> {
    use crate::tools::gather::Way;
    let find = |dir: &str, api: &str, way: Way| {
        g.rows
            .iter()
            .find(|r| r.direction == dir && r.api == api && r.way == way)
    };
    let pairs = [
        (Way::Gather, Way::PerPiece, "gather / CUDA per-piece loop"),
        (Way::Gather, Way::Batch, "gather / CUDA cuMemcpyBatchAsync"),
        (
            Way::ZeroCopy,
            Way::ZeroCopy,
            "zero-copy gather / CUDA zero-copy kernel",
        ),
        (
            Way::ZeroCopyVouched,
            Way::ZeroCopy,
            "zero-copy gather, vouched / CUDA zero-copy kernel",
        ),
    ];
    let shape = g.shape.label();
    let mut out = Vec::new();
    for (dir, name) in [("h2d", "H2D"), ("d2h", "D2H")] {
        for (ours, theirs, label) in pairs {
            if let Some((o, c)) = find(dir, "pinstream", ours).zip(find(dir, "cuda", theirs)) {
                let figure = format!("{shape} scattered {name}: {label}");
                let (ours, theirs) = (("OpenCL", &[o.gbps][..]), ("CUDA", &[c.gbps][..]));
                out.push(ratio(figure, ours, theirs));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_name_the_shape_of_their_pieces() {
        let shape = |pieces, piece_size| crate::tools::gather::Shape {
            pieces,
            piece_size,
            seed: 1,
            repeat: 1,
        };
        assert_eq!(shape(4096, 4096).label(), "4096 x 4 KiB");
        assert_eq!(shape(65536, 256).label(), "65536 x 256 B");
        assert_eq!(shape(1024, 65536).label(), "1024 x 64 KiB");
    }

    fn runs(gbps: f64, per_device: Vec<f64>) -> RunFigures {
        RunFigures {
            gbps,
            overlap: 0.9,
            cpu_s_per_gib: 0.1,
            per_device_gbps: per_device,
        }
    }

    #[test]
    fn several_devices_get_a_ratio_each_and_in_total() {
        let figures = |scale: f64| {
            let runs = StreamRuns {
                in_place: vec![runs(10.0 * scale, vec![4.0 * scale, 6.0 * scale])],
                gemv: vec![runs(5.0 * scale, vec![2.0 * scale, 3.0])],
            };
            ApiFigures::new("m".into(), Vec::new(), &runs, &[])
        };
        let (cl, cu) = (figures(0.5), figures(1.0));
        let r = ratios(("A", &cl), ("B", &cu));
        let get = |name: &str| r.iter().find(|x| x.figure == name).unwrap().ratio;
        assert_eq!(get("in-place stream, up + down"), 0.5);
        assert_eq!(get("in-place stream, up + down, device 0"), 0.5);
        assert_eq!(get("in-place stream, up + down, device 1"), 0.5);
        assert_eq!(get("y = W·x, weights, device 0"), 0.5);
        assert_eq!(get("y = W·x, weights, device 1"), 1.0);
        // One device: no per-device figures.
        let one = StreamRuns {
            in_place: vec![runs(1.0, vec![])],
            gemv: vec![runs(1.0, vec![])],
        };
        let one = ApiFigures::new("m".into(), Vec::new(), &one, &[]);
        assert!(one.in_place_devices.is_empty() && one.gemv_devices.is_empty());
        assert_eq!(ratios(("A", &one), ("A", &one)).len(), 2);
    }

    #[test]
    fn bench_figures_keep_their_json_shape() {
        let pass = |x: f64| PassRates {
            h2d: x,
            d2h: 2.0 * x,
            both: 3.0 * x,
        };
        let passes = vec![vec![pass(1.0), pass(3.0), pass(2.0)]];
        let f = ApiFigures::new("m".into(), passes, &StreamRuns::default(), &[4096]);
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["bench"], serde_json::json!([[4096, 2.0, 4.0, 6.0]]));
        assert_eq!(v["bench_passes"][0][1], serde_json::json!([3.0, 6.0, 9.0]));
    }

    #[test]
    fn bench_ratios_pair_each_direction() {
        let pass = |x: f64| PassRates {
            h2d: x,
            d2h: x,
            both: 4.0,
        };
        let cl = ApiFigures::new(
            "a".into(),
            vec![vec![pass(1.0)]],
            &StreamRuns::default(),
            &[1 << 20],
        );
        let cu = ApiFigures::new(
            "b".into(),
            vec![vec![pass(2.0)]],
            &StreamRuns::default(),
            &[1 << 20],
        );
        let r = ratios(("A", &cl), ("B", &cu));
        let names: Vec<&str> = r.iter().take(3).map(|x| x.figure.as_str()).collect();
        assert_eq!(
            names,
            [
                "H2D, 1 MiB blocks",
                "D2H, 1 MiB blocks",
                "both ways, 1 MiB blocks"
            ]
        );
        assert_eq!((r[0].ratio, r[2].ratio), (0.5, 1.0));
    }

    /// Every ratio has one shape (`api`, `value`, `against`, `other`) whichever APIs it is
    /// of, and keeps for one release the keys the reports had: the figures under their APIs'
    /// names (`opencl` and `cuda`; `vulkan`).
    #[test]
    fn a_ratio_has_one_shape_and_keeps_its_old_keys() {
        let one = |api| ApiFigures::new(api, Vec::new(), &StreamRuns::default(), &[]);
        let mut vk = one("v".into());
        vk.in_place = vec![3.0];
        let mut cu = one("c".into());
        cu.in_place = vec![4.0];
        let r = ratios(("Vulkan", &vk), ("CUDA", &cu));
        let v = serde_json::to_value(&r[0]).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let want = [
            "against", "api", "cuda", "figure", "marked", "other", "paired", "ratio", "value",
            "vulkan",
        ];
        assert_eq!(keys, want);
        assert_eq!(
            (&v["api"], &v["against"]),
            (&"Vulkan".into(), &"CUDA".into())
        );
        assert_eq!(
            (v["value"].as_f64(), v["vulkan"].as_f64()),
            (Some(3.0), Some(3.0))
        );
        assert_eq!(
            (v["other"].as_f64(), v["cuda"].as_f64()),
            (Some(4.0), Some(4.0))
        );
        assert_eq!(v["ratio"].as_f64(), Some(0.75));
    }
}
