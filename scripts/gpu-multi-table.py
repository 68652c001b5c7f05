#!/usr/bin/env python3
"""The table of scripts/gpu-multi.sh: reads RAW_DIR/*.json (`pinstream run --json`) and prints
per figure the median over repeats, per device and in total, the two-GPU/one-GPU ratios and
the OpenCL/CUDA ratios, each against its goal.

    scripts/gpu-multi-table.py RAW_DIR
"""
import glob
import json
import os
import re
import statistics
import sys


def load(raw):
    runs = {}
    for path in sorted(glob.glob(os.path.join(raw, "*.json"))):
        name = re.sub(r"-r\d+$", "", os.path.basename(path)[:-5])
        try:
            with open(path) as f:
                rep = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{os.path.basename(path)}: no report ({e})")
            continue
        if "stream" not in rep:
            continue  # not a `run` report (bench --devices, compare)
        runs.setdefault(name, []).append(rep)
    return runs


def figure(workload, totals):
    """In place: upload + download over the wall; y = W·x: the weights' upload rate."""
    return totals["combined_gbps"] if workload == "inplace" else totals["upload"]["gbps"]


def medians(workload, reps):
    """(total, [per device]) medians over the repeats."""
    total = statistics.median(figure(workload, r["stream"]["totals"]) for r in reps)
    n = len(reps[0]["stream"].get("devices", []))
    per = [
        statistics.median(figure(workload, r["stream"]["devices"][d]["totals"]) for r in reps)
        for d in range(n)
    ]
    return total, per


def verdict(x, goal):
    return "ok" if x >= goal else "MISSED"


def main():
    runs = load(sys.argv[1])
    if not runs:
        print("no runs")
        return 1
    rows = {}
    print(f"{'run':32} {'total GB/s':>10}  per device GB/s")
    for name in sorted(runs):
        workload = name.split("-")[0]
        total, per = medians(workload, runs[name])
        rows[name] = (total, per)
        what = "weights" if workload == "gemv" else "up+down"
        print(f"{name:32} {total:10.1f}  {' '.join(f'{p:.1f}' for p in per) or '-'}  ({what}, median of {len(runs[name])})")
    print()
    for w in ("inplace", "gemv"):
        for api in ("opencl", "cuda"):
            one, two = rows.get(f"{w}-{api}-1gpu"), rows.get(f"{w}-{api}-2gpu")
            if one and two:
                x = two[0] / one[0]
                print(f"{w} {api}: 2 GPUs / 1 GPU = {x:.2f}x (goal >= 1.9: {verdict(x, 1.9)})")
        for gpus in ("1gpu", "2gpu"):
            cl, cu = rows.get(f"{w}-opencl-{gpus}"), rows.get(f"{w}-cuda-{gpus}")
            if cl and cu:
                x = cl[0] / cu[0]
                per = " ".join(f"device {d}: {a / b:.3f}" for d, (a, b) in enumerate(zip(cl[1], cu[1])))
                print(f"{w} {gpus} OpenCL/CUDA: total {x:.3f} (goal >= 0.97: {verdict(x, 0.97)}){'; ' + per if per else ''}")
    on, off = rows.get("inplace-opencl-2gpu-numa-on"), rows.get("inplace-opencl-2gpu-numa-off")
    if on and off:
        print(f"NUMA placement: on {on[0]:.1f} GB/s, off {off[0]:.1f} GB/s, on/off {on[0] / off[0]:.3f}")
    else:
        print("NUMA placement: not measured (one node, or runs missing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
