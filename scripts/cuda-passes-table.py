#!/usr/bin/env python3
"""The `cuda-passes` part of scripts/gpu-validate.sh (issue 36), per run: pinstream's y = W·x
passes (`demo --json`'s gemv workload) and CUDA's own hand-written loop over the same blocks
(bench/ceiling/cuda_passes.cu), run in turn. For each: the later passes' median and slowest
time, slowest over median, and each over the floor of its bytes at the one-way peak CUDA's
program measured in the same run (the demo reports no peak of its own); for CUDA's loop also
its uploads below SLOW GB/s. If CUDA's loop has slow passes in the runs where pinstream has
them, the slowness is the machine's link, not the engine.

  cuda-passes-table.py DIR [--slow GBPS]   (default 40)"""
import glob
import json
import os
import statistics
import sys

args = sys.argv[1:]
slow = 40.0
if "--slow" in args:
    i = args.index("--slow")
    slow = float(args[i + 1])
    del args[i:i + 2]
d = args[0]


def later(ps):
    """The later passes (the first uploads the resident blocks too)."""
    return ps[1:]


def slowest(ps):
    """The slowest later pass: its time and its number (from 1)."""
    lp = later(ps)
    return max(lp), lp.index(max(lp)) + 2


print("| run | loop | later passes median s | slowest s (pass) | slowest / median | median / floor | slowest / floor | uploads < %g GB/s |" % slow)
print("|---|---|---|---|---|---|---|---|")
runs = sorted({os.path.basename(f).split("-")[0] for f in glob.glob(os.path.join(d, "r*-*.json"))},
              key=lambda r: int(r[1:]))
for r in runs:
    try:
        cuda = json.load(open(os.path.join(d, r + "-cuda.json")))
    except (OSError, ValueError) as e:
        cuda = None
        print(f"| {r} | CUDA | no report ({type(e).__name__}: see {r}-cuda.err) | | | | | |")
    peak = cuda["peak_gbps"] if cuda else None
    try:
        w = [w for w in json.load(open(os.path.join(d, r + "-demo.json")))["workloads"] if w["name"] == "gemv"][0]
        ps, pb = w["stream"]["pass_seconds"], w["stream"]["pass_bytes"]
        med, (top, at) = statistics.median(later(ps)), slowest(ps)
        floor = (pb[1]["h2d"] + pb[1]["d2h"]) / (peak * 1e9) if peak else None
        f = lambda x: "-" if floor is None else f"{x / floor:.3f}"
        print(f"| {r} | pinstream | {med:.4f} | {top:.4f} ({at}) | {top / med:.3f} | {f(med)} | {f(top)} | |")
    except (OSError, ValueError, KeyError, IndexError, statistics.StatisticsError) as e:
        print(f"| {r} | pinstream | no report ({type(e).__name__}: see {r}-demo.err) | | | | | |")
    if cuda and len(cuda["pass_seconds"]) < 2:
        print(f"| {r} | CUDA | one pass only: no later pass to table | | | | | |")
    elif cuda:
        ps = cuda["pass_seconds"]
        med, (top, at) = statistics.median(later(ps)), slowest(ps)
        floor = cuda["pass_floor_s"]
        gb = cuda["block_bytes"] / 1e9
        below = sum(1 for u in cuda["uploads"] if u[0] > 1 and gb / (u[3] * 1e-3) < slow)
        print(f"| {r} | CUDA (peak {peak:.1f} GB/s) | {med:.4f} | {top:.4f} ({at}) | {top / med:.3f} "
              f"| {med / floor:.3f} | {top / floor:.3f} | {below} of {len(cuda['uploads']) - cuda['blocks']} |")
        if cuda.get("checksums_wrong"):
            print(f"| {r} | CUDA | **{cuda['checksums_wrong']} passes' checksums wrong** | | | | | |")
