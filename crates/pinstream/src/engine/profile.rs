//! Stage totals, bandwidth and overlap from event profiling, and Chrome/Perfetto traces.

use crate::backend::opencl::Profile;
use crate::units::gb_per_s;
use serde::Serialize;
use serde_json::json;

/// The three stages of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// Host to device.
    Upload,
    /// The kernel.
    Kernel,
    /// Device to host.
    Download,
}

impl Stage {
    /// The stage's name.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Upload => "upload",
            Stage::Kernel => "kernel",
            Stage::Download => "download",
        }
    }
}

/// One profiled command.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Its stage.
    pub stage: Stage,
    /// Block index.
    pub block: usize,
    /// Bytes moved (0 for kernels).
    pub bytes: u64,
    /// Device times.
    pub profile: Profile,
}

/// Totals of one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageStats {
    /// Sum of the commands' busy time (start to end).
    pub busy_s: f64,
    /// Bytes moved.
    pub bytes: u64,
    /// Bytes over the stream's wall time, GB/s.
    pub gbps: f64,
    /// Bytes over the stage's own busy time, GB/s.
    pub busy_gbps: f64,
    /// Commands.
    pub commands: usize,
}

/// Totals of a stream from its records.
#[derive(Debug, Clone, Serialize)]
pub struct Totals {
    /// From the first command's start to the last one's end, by the device clock.
    pub device_wall_s: f64,
    /// Upload stage.
    pub upload: StageStats,
    /// Kernel stage.
    pub kernel: StageStats,
    /// Download stage.
    pub download: StageStats,
    /// Uploaded plus downloaded bytes over the wall time, GB/s.
    pub combined_gbps: f64,
    /// Largest stage busy time over the wall time: 1.0 means the stream runs as fast as its
    /// slowest stage allows.
    pub overlap: f64,
}

/// Sums `records`.
pub fn totals(records: &[Record]) -> Totals {
    let start = records.iter().map(|r| r.profile.start).min().unwrap_or(0);
    let end = records.iter().map(|r| r.profile.end).max().unwrap_or(0);
    let wall = end.saturating_sub(start) as f64 / 1e9;
    let stage = |s: Stage| {
        let rs: Vec<&Record> = records.iter().filter(|r| r.stage == s).collect();
        let busy = rs.iter().map(|r| r.profile.duration_ns()).sum::<u64>() as f64 / 1e9;
        let bytes = rs.iter().map(|r| r.bytes).sum();
        StageStats {
            busy_s: busy,
            bytes,
            gbps: gb_per_s(bytes, wall),
            busy_gbps: gb_per_s(bytes, busy),
            commands: rs.len(),
        }
    };
    let (upload, kernel, download) = (
        stage(Stage::Upload),
        stage(Stage::Kernel),
        stage(Stage::Download),
    );
    let max_busy = upload.busy_s.max(kernel.busy_s).max(download.busy_s);
    Totals {
        device_wall_s: wall,
        combined_gbps: gb_per_s(upload.bytes + download.bytes, wall),
        overlap: if wall > 0.0 { max_busy / wall } else { 0.0 },
        upload,
        kernel,
        download,
    }
}

/// Chrome trace JSON (opens in Perfetto and chrome://tracing): one track per queue, one slice
/// per command, times in microseconds from the first command's start.
pub fn chrome_trace(records: &[Record], title: &str, one_queue: bool) -> serde_json::Value {
    chrome_trace_runs(&[(title, records, one_queue)])
}

/// Several runs in one trace, one process each (e.g. the stream and its sequential baseline),
/// each on its own time axis starting at 0.
pub fn chrome_trace_runs(runs: &[(&str, &[Record], bool)]) -> serde_json::Value {
    let mut events = Vec::new();
    for (pid, (title, records, one_queue)) in runs.iter().enumerate() {
        push_run(&mut events, pid as u32 + 1, title, records, *one_queue);
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

fn push_run(
    events: &mut Vec<serde_json::Value>,
    pid: u32,
    title: &str,
    records: &[Record],
    one_queue: bool,
) {
    let t0 = records.iter().map(|r| r.profile.start).min().unwrap_or(0);
    let tid = |s: Stage| if one_queue { 1 } else { 1 + s as u32 };
    events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": title}}));
    let queues: &[(u32, &str)] = if one_queue {
        &[(1, "in-order queue")]
    } else {
        &[
            (1, "upload queue"),
            (2, "compute queue"),
            (3, "download queue"),
        ]
    };
    for (t, name) in queues {
        events.push(
            json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": name}}),
        );
    }
    for r in records {
        events.push(json!({
            "name": format!("{} {}", r.stage.name(), r.block),
            "cat": r.stage.name(),
            "ph": "X",
            "pid": pid,
            "tid": tid(r.stage),
            "ts": r.profile.start.saturating_sub(t0) as f64 / 1e3,
            "dur": r.profile.duration_ns() as f64 / 1e3,
            "args": {"block": r.block, "bytes": r.bytes},
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(stage: Stage, block: usize, start: u64, end: u64) -> Record {
        Record {
            stage,
            block,
            bytes: 100,
            profile: Profile {
                queued: 0,
                submit: 0,
                start,
                end,
            },
        }
    }

    #[test]
    fn overlap_of_a_perfect_pipeline() {
        let rs = vec![
            rec(Stage::Upload, 0, 0, 10),
            rec(Stage::Upload, 1, 10, 20),
            rec(Stage::Kernel, 0, 10, 12),
            rec(Stage::Download, 0, 12, 22),
            rec(Stage::Kernel, 1, 20, 22),
            rec(Stage::Download, 1, 22, 32),
        ];
        let t = totals(&rs);
        assert!((t.device_wall_s - 32e-9).abs() < 1e-15);
        assert!((t.overlap - 20.0 / 32.0).abs() < 1e-9);
        assert_eq!(t.upload.bytes, 200);
        let trace = chrome_trace(&rs, "t", false);
        let ev = trace["traceEvents"].as_array().unwrap();
        assert_eq!(ev.iter().filter(|e| e["ph"] == "X").count(), 6);
        assert_eq!(ev.iter().filter(|e| e["name"] == "thread_name").count(), 3);
    }
}
