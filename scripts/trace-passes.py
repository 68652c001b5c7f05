#!/usr/bin/env python3
"""Where each pass's time goes, from a run's Perfetto trace (`demo --passes N --trace FILE`,
`run --trace FILE`): per pass, the span from the end of the pass before to its own last
command's end (as the report's `pass_seconds` counts it), each stage's busy time and bytes,
when its first upload started against the pass before's end, and the longest gap on the upload
queue (where the link stood idle inside the pass).

  trace-passes.py TRACE.json [PEAK_GBPS]

PEAK_GBPS (the one-way peak measured in the same run) adds each pass's upload floor and its
span over it."""
import collections
import json
import sys

trace = json.load(open(sys.argv[1]))
peak = float(sys.argv[2]) if len(sys.argv) > 2 else None
events = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace) if e.get("ph") == "X"]
by_pass = collections.defaultdict(list)
for e in events:
    by_pass[e.get("args", {}).get("pass", 1)].append(e)
head = "| pass | span ms | upload busy ms | GiB up | kernel busy ms | download busy ms | GiB down | first upload starts, ms after the pass before ended | longest upload gap ms |"
if peak:
    head += " upload floor ms | span / floor |"
print(head)
print("|" + "---|" * (head.count("|") - 1))
before = min(e["ts"] for e in events) if events else 0
for k in sorted(by_pass):
    es = by_pass[k]
    end = max(e["ts"] + e["dur"] for e in es)
    stage = lambda c: [e for e in es if e.get("cat") == c]
    busy = lambda c: sum(e["dur"] for e in stage(c)) / 1e3
    nbytes = lambda c: sum(e.get("args", {}).get("bytes", 0) for e in stage(c))
    ups = sorted(stage("upload"), key=lambda e: e["ts"])
    first = (ups[0]["ts"] - before) / 1e3 if ups else float("nan")
    gaps = [(b["ts"] - (a["ts"] + a["dur"])) / 1e3 for a, b in zip(ups, ups[1:])]
    span = (end - before) / 1e3
    row = (f"| {k} | {span:.2f} | {busy('upload'):.2f} | {nbytes('upload') / 2**30:.2f} | {busy('kernel'):.2f} "
           f"| {busy('download'):.2f} | {nbytes('download') / 2**30:.2f} | {first:+.2f} | {max(gaps, default=0):.2f} |")
    if peak:
        floor = nbytes("upload") / peak / 1e6
        row += f" {floor:.2f} | {span / floor if floor else float('nan'):.3f} |"
    print(row)
    before = max(before, end)
