//! Stage totals, bandwidth and overlap from event profiling, and Chrome/Perfetto traces.

use crate::backend::api::Profile;
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

/// One profiled command, kept compact (40 bytes): a run keeps one per command until it
/// returns, and a run of a million blocks makes three million.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Record {
    /// Its stage.
    pub stage: Stage,
    /// Index of its device in the run (0 with one device).
    pub device: u16,
    /// The pass it was part of (0: the first; see [`super::StreamOptions::passes`]).
    pub pass: u32,
    /// Block index in the run.
    pub block: usize,
    /// Bytes moved (0 for kernels).
    pub bytes: u64,
    /// Start on the device, ns of the device's clock (see [`Profile`]).
    pub start: u64,
    /// End on the device, ns.
    pub end: u64,
}

impl Record {
    /// The record of a command of `stage` on `device` in pass `pass`, with device times `p`.
    pub fn new(
        stage: Stage,
        (device, pass): (u16, u32),
        block: usize,
        bytes: u64,
        p: &Profile,
    ) -> Self {
        Record {
            stage,
            device,
            pass,
            block,
            bytes,
            start: p.start,
            end: p.end,
        }
    }

    /// Busy time in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
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

impl StageStats {
    /// A stage that was busy `busy_s` seconds moving `bytes` in `commands` commands, in a
    /// stream of `wall_s` seconds.
    fn new(busy_s: f64, bytes: u64, wall_s: f64, commands: usize) -> Self {
        StageStats {
            busy_s,
            bytes,
            gbps: gb_per_s(bytes, wall_s),
            busy_gbps: gb_per_s(bytes, busy_s),
            commands,
        }
    }
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

/// Sums the records of one device (times on one clock).
pub fn totals(records: &[Record]) -> Totals {
    let start = records.iter().map(|r| r.start).min().unwrap_or(0);
    let end = records.iter().map(|r| r.end).max().unwrap_or(0);
    let wall = end.saturating_sub(start) as f64 / 1e9;
    let stage = |s: Stage| {
        let rs: Vec<&Record> = records.iter().filter(|r| r.stage == s).collect();
        let busy = rs.iter().map(|r| r.duration_ns()).sum::<u64>() as f64 / 1e9;
        StageStats::new(busy, rs.iter().map(|r| r.bytes).sum(), wall, rs.len())
    };
    let (upload, kernel, download) = (
        stage(Stage::Upload),
        stage(Stage::Kernel),
        stage(Stage::Download),
    );
    let max_busy = upload.busy_s.max(kernel.busy_s).max(download.busy_s);
    let overlap = if wall > 0.0 { max_busy / wall } else { 0.0 };
    Totals::new(wall, [upload, kernel, download], overlap)
}

impl Totals {
    fn new(wall_s: f64, [upload, kernel, download]: [StageStats; 3], overlap: f64) -> Self {
        Totals {
            device_wall_s: wall_s,
            combined_gbps: gb_per_s(upload.bytes + download.bytes, wall_s),
            overlap,
            upload,
            kernel,
            download,
        }
    }
}

/// The totals of several devices that ran at once, each timed on its own clock: the wall
/// time is the longest device's, busy times and bytes add up, and the overlap is the summed
/// busiest-stage time over the devices' summed wall times.
pub fn combine(per_device: &[Totals]) -> Totals {
    if let [one] = per_device {
        return one.clone();
    }
    let wall = per_device
        .iter()
        .map(|t| t.device_wall_s)
        .fold(0.0, f64::max);
    let stage = |f: fn(&Totals) -> &StageStats| {
        let busy: f64 = per_device.iter().map(|t| f(t).busy_s).sum();
        let bytes: u64 = per_device.iter().map(|t| f(t).bytes).sum();
        let commands = per_device.iter().map(|t| f(t).commands).sum();
        StageStats::new(busy, bytes, wall, commands)
    };
    let (upload, kernel, download) = (
        stage(|t| &t.upload),
        stage(|t| &t.kernel),
        stage(|t| &t.download),
    );
    let busiest: f64 = per_device.iter().map(|t| t.overlap * t.device_wall_s).sum();
    let walls: f64 = per_device.iter().map(|t| t.device_wall_s).sum();
    let overlap = if walls > 0.0 { busiest / walls } else { 0.0 };
    Totals::new(wall, [upload, kernel, download], overlap)
}

/// Chrome trace JSON (opens in Perfetto and chrome://tracing): one track per queue (per
/// device, with several), one slice per command, times in microseconds from the first
/// command's start on each device.
pub fn chrome_trace(records: &[Record], title: &str, one_queue: bool) -> serde_json::Value {
    chrome_trace_runs(&[(title, records, one_queue)])
}

/// Several runs in one trace, one process each (e.g. the stream and its sequential baseline),
/// each on its own time axis starting at 0.
pub fn chrome_trace_runs(runs: &[(&str, &[Record], bool)]) -> serde_json::Value {
    let mut events = Vec::new();
    for (pid, (title, records, one_queue)) in runs.iter().enumerate() {
        push_run(&mut events, pid as u32 + 1, title, records, *one_queue, 0.0);
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

/// Host work shown beside a run's commands in a trace (a progressive pin's chunks): seconds
/// from the host's call.
#[derive(Debug, Clone)]
pub struct HostSlice {
    /// The slice's name.
    pub name: String,
    /// Start, seconds after the call.
    pub start_s: f64,
    /// Duration in seconds.
    pub dur_s: f64,
}

/// One run's trace on the time axis of the host's call (0: the call), with `host` slices on
/// a track named `track` and a `first block on the device` marker at `first_upload_s` (when
/// the host saw the first block's upload complete). The device commands are placed so that
/// the first upload ends there: device and host clocks differ, and the host sees the end a
/// little after the device, so the commands may sit up to that much late.
pub fn chrome_trace_with_host(
    title: &str,
    records: &[Record],
    track: &str,
    host: &[HostSlice],
    first_upload_s: f64,
) -> serde_json::Value {
    let t0 = records.iter().map(|r| r.start).min().unwrap_or(0);
    let first = records.iter().filter(|r| r.stage == Stage::Upload);
    let up_end = first.min_by_key(|r| (r.block, r.end)).map_or(t0, |r| r.end);
    let shift_us = (first_upload_s * 1e6 - up_end.saturating_sub(t0) as f64 / 1e3).max(0.0);
    let mut events = Vec::new();
    push_run(&mut events, 1, title, records, false, shift_us);
    let tid = 100;
    events.push(
        json!({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": track}}),
    );
    for h in host {
        events.push(
            json!({"name": h.name, "cat": "host", "ph": "X", "pid": 1, "tid": tid,
            "ts": h.start_s * 1e6, "dur": h.dur_s * 1e6}),
        );
    }
    events.push(
        json!({"name": "first block on the device", "ph": "i", "s": "p", "pid": 1,
        "tid": tid, "ts": first_upload_s * 1e6}),
    );
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

fn push_run(
    events: &mut Vec<serde_json::Value>,
    pid: u32,
    title: &str,
    records: &[Record],
    one_queue: bool,
    shift_us: f64,
) {
    let devices = records.iter().map(|r| r.device).max().map_or(1, |d| d + 1);
    let t0 = |d: u16| {
        let mine = records.iter().filter(|r| r.device == d);
        mine.map(|r| r.start).min().unwrap_or(0)
    };
    let t0: Vec<u64> = (0..devices).map(t0).collect();
    let lanes: u32 = if one_queue { 1 } else { 3 };
    let tid =
        |r: &Record| u32::from(r.device) * lanes + if one_queue { 1 } else { 1 + r.stage as u32 };
    events.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": title}}));
    let queues: &[&str] = if one_queue {
        &["in-order queue"]
    } else {
        &["upload queue", "compute queue", "download queue"]
    };
    for d in 0..devices {
        for (k, name) in (1..).zip(queues) {
            let name = match devices {
                1 => name.to_string(),
                _ => format!("device {d} {name}"),
            };
            let t = u32::from(d) * lanes + k;
            events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": t, "args": {"name": name}}));
        }
    }
    for r in records {
        let mut args = json!({"block": r.block, "bytes": r.bytes});
        let name = match r.pass {
            0 => format!("{} {}", r.stage.name(), r.block),
            p => {
                args["pass"] = json!(p + 1);
                format!("{} {} pass {}", r.stage.name(), r.block, p + 1)
            }
        };
        events.push(json!({
            "name": name,
            "cat": r.stage.name(),
            "ph": "X",
            "pid": pid,
            "tid": tid(r),
            "ts": shift_us + r.start.saturating_sub(t0[usize::from(r.device)]) as f64 / 1e3,
            "dur": r.duration_ns() as f64 / 1e3,
            "args": args,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_slices_share_the_call_axis_with_the_commands() {
        let rs = vec![
            rec(Stage::Upload, 0, 1000, 5000),
            rec(Stage::Kernel, 0, 5000, 6000),
        ];
        let pins = [HostSlice {
            name: "pin chunk 1".into(),
            start_s: 0.002,
            dur_s: 0.003,
        }];
        // The host saw the first upload end 10 ms after the call: it ended 4 µs after its
        // start on the device, so the commands start at 10 ms - 4 µs.
        let t = chrome_trace_with_host("run", &rs, "pinning", &pins, 0.010);
        let ev = t["traceEvents"].as_array().unwrap();
        let named = |n: &str| ev.iter().find(|e| e["name"] == n).unwrap().clone();
        assert!((named("upload 0")["ts"].as_f64().unwrap() - 9996.0).abs() < 1e-6);
        assert!((named("pin chunk 1")["ts"].as_f64().unwrap() - 2000.0).abs() < 1e-6);
        assert!((named("pin chunk 1")["dur"].as_f64().unwrap() - 3000.0).abs() < 1e-6);
        assert_eq!(named("first block on the device")["ts"], 10000.0);
    }

    fn rec(stage: Stage, block: usize, start: u64, end: u64) -> Record {
        let p = Profile {
            queued: None,
            submit: None,
            start,
            end,
        };
        Record::new(stage, (0, 0), block, 100, &p)
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
        assert_eq!(std::mem::size_of::<Record>(), 40);
    }

    #[test]
    fn several_devices_add_up_on_their_own_clocks() {
        let a = vec![
            rec(Stage::Upload, 0, 0, 10),
            rec(Stage::Download, 0, 10, 20),
        ];
        // The second device's clock is far from the first's: each is taken on its own.
        let mut b = vec![
            rec(Stage::Upload, 1, 5000, 5010),
            rec(Stage::Download, 1, 5010, 5030),
        ];
        b.iter_mut().for_each(|r| r.device = 1);
        let t = combine(&[totals(&a), totals(&b)]);
        assert!((t.device_wall_s - 30e-9).abs() < 1e-15);
        assert_eq!(t.upload.bytes + t.download.bytes, 400);
        let all: Vec<Record> = a.into_iter().chain(b).collect();
        let trace = chrome_trace(&all, "t", false);
        let ev = trace["traceEvents"].as_array().unwrap();
        assert_eq!(ev.iter().filter(|e| e["name"] == "thread_name").count(), 6);
        assert!(ev
            .iter()
            .filter(|e| e["ph"] == "X")
            .all(|e| e["ts"].as_f64().unwrap() < 0.1));
    }
}
