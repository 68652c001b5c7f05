#!/usr/bin/env python3
"""Every `passes-trace` run of a folder at once (scripts/gpu-validate.sh passes-trace with
TRACE_RUNS): per run and workload, the later passes' median and slowest time (`demo --json`'s
`stream.pass_seconds`), then, from each run's trace (the in-place workload), every later pass
with a 64 MiB upload below SLOW_GBPS: how many, the slowest, and when they ran. A slow pass
whose slow copies come in one window of time, on whichever blocks ran then, is the link's
rate dropping, not the schedule (which would show as gaps between copies). Last, where
gpu-validate.sh sampled the GPU beside the runs (BUDGET-rK-gpu.csv), the P-states and PCIe
links each run saw: a link that drops a generation in the runs with slow windows, and not in
the others, would name the cause.

  passes-trace-summary.py DIR... [--slow GBPS]   (default 40)"""
import glob
import json
import os
import statistics
import sys

args = sys.argv[1:]
slow_gbps = 40.0
if "--slow" in args:
    i = args.index("--slow")
    slow_gbps = float(args[i + 1])
    del args[i:i + 2]
print("| run | workload | resident | later passes median s | slowest s (pass) | slowest / median | checked off |")
print("|---|---|---|---|---|---|---|")
traces = []
for d in args:
    for f in sorted(glob.glob(os.path.join(d, "*-demo.json"))):
        name = os.path.relpath(f, os.path.dirname(os.path.dirname(os.path.normpath(d))))[: -len("-demo.json")].replace("/passes-trace/", "/")
        try:
            workloads = json.load(open(f))["workloads"]
        except (ValueError, KeyError) as e:  # a run that failed or timed out
            print(f"| {name} | no report ({type(e).__name__}: see its -demo.err) | | | | | |")
            continue
        for w in workloads:
            ps = w["stream"]["pass_seconds"]
            # In place, the last pass also downloads the resident blocks: not a like pass.
            later = ps[1:] if w["name"] != "in-place" else ps[1:-1]
            med, top = statistics.median(later), max(later)
            res = w["stream"]["residency"]
            print(f"| {name} | {w['name']} | {res['blocks']} of {res['of']} | {med:.4f} | {top:.4f} ({ps.index(top) + 1}) "
                  f"| {top / med:.3f} | {w['mismatches']} |")
        traces.append((name, f[: -len("-demo.json")] + "-trace.json"))
print()
print(f"Uploads below {slow_gbps:g} GB/s in the traces (in place; ms from the run's first command):")
print()
print("| run | pass | uploads | below | slowest GB/s | window ms | blocks |")
print("|---|---|---|---|---|---|---|")
for name, path in traces:
    if not os.path.exists(path):
        continue
    try:
        ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X" and e["cat"] == "upload"]
    except (ValueError, KeyError, TypeError):
        continue
    if not ev:
        continue
    t0 = min(e["ts"] for e in ev)
    by = {}
    for e in ev:
        by.setdefault(e["args"].get("pass", 1), []).append(e)
    for p in sorted(by):
        if p == 1:
            continue
        rate = lambda e: e["args"]["bytes"] / e["dur"] / 1e3
        slow = sorted((e for e in by[p] if rate(e) < slow_gbps), key=lambda e: e["ts"])
        if not slow:
            continue
        win = f"{(slow[0]['ts'] - t0) / 1e3:.0f}-{(slow[-1]['ts'] + slow[-1]['dur'] - t0) / 1e3:.0f}"
        blocks = [e["args"]["block"] for e in slow]
        print(f"| {name} | {p} | {len(by[p])} | {len(slow)} | {min(map(rate, slow)):.1f} | {win} | {min(blocks)}-{max(blocks)} |")

# What the GPU reported beside each run (gpu-validate.sh's sampler, where it ran): each
# distinct P-state and PCIe link (generation x width) with how many 20 ms samples saw it.
samples = []
for d in args:
    for f in sorted(glob.glob(os.path.join(d, "*-gpu.csv"))):
        name = os.path.relpath(f, os.path.dirname(os.path.dirname(os.path.normpath(d))))[: -len("-gpu.csv")]
        seen = {}
        for line in open(f):
            cells = [c.strip() for c in line.split(",")]
            if len(cells) >= 4:
                key = f"{cells[1]} gen {cells[2]} x{cells[3]}"
                seen[key] = seen.get(key, 0) + 1
        samples.append((name.replace("/passes-trace/", "/"), seen))
if samples:
    print()
    print("What the GPU reported every 20 ms beside each run (P-state, PCIe link):")
    print()
    print("| run | samples by state |")
    print("|---|---|")
    for name, seen in samples:
        print(f"| {name} | {'; '.join(f'{k}: {n}' for k, n in sorted(seen.items()))} |")
