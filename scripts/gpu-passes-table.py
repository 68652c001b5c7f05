#!/usr/bin/env python3
"""The table of scripts/gpu-passes.sh: per API, budget and workload, what passes 2-10 moved
and how close their device time came to the floor those bytes imply over the link's peak of
the same run (bench.json, 256 MiB, event-profiled), and passes per second with residency
against without (the same API, budget and workload).

usage: gpu-passes-table.py OUT_DIR
"""
import glob
import json
import os
import statistics
import sys

GIB = 1 << 30


def peaks(out):
    """{api: (h2d GB/s, d2h GB/s)}: the best strategy's 256 MiB point of each API."""
    best = {}
    try:
        bench = json.load(open(os.path.join(out, "bench.json")))
    except (OSError, ValueError) as e:
        print(f"no bench.json ({e}): no floor")
        return best
    for s in bench.get("strategies", []):
        for p in s.get("points") or []:
            if p.get("size") != 256 << 20:
                continue
            h, d = p["h2d"]["events_gbps"], p["d2h"]["events_gbps"]
            old = best.get(s["api"], (0.0, 0.0))
            best[s["api"]] = (max(old[0], h), max(old[1], d))
    return best


def floor_s(pb, peak):
    h, d = peak
    return max(pb["h2d"] / (h * 1e9) if pb["h2d"] else 0.0, pb["d2h"] / (d * 1e9) if pb["d2h"] else 0.0)


def main(out):
    peak = peaks(out)
    for api, (h, d) in sorted(peak.items()):
        print(f"- {api} peak, 256 MiB, event-profiled: H2D {h:.2f} GB/s, D2H {d:.2f} GB/s")
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "demo-*.json"))):
        _, api, budget, res = os.path.basename(path)[:-5].split("-")
        try:
            demo = json.load(open(path))
        except (OSError, ValueError) as e:
            print(f"- {os.path.basename(path)}: no report ({e})")
            continue
        for w in demo["workloads"]:
            runs[(api, budget, w["name"], res)] = w
    print()
    print("| API | budget | workload | residency | resident blocks | checked | passes 2-10 move, GiB each (H2D + D2H) | their time / floor, median (max) | passes/s | / off | CPU s per pass |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (api, budget, name, res), w in sorted(runs.items()):
        s = w["stream"]
        later = list(zip(s["pass_bytes"], s["pass_seconds"]))[1:]
        moved = statistics.median((pb["h2d"] + pb["d2h"]) / GIB for pb, _ in later) if later else 0
        ratio = "-"
        if api in peak and later:
            r = [sec / floor_s(pb, peak[api]) for pb, sec in later if floor_s(pb, peak[api]) > 0]
            if r:
                ratio = f"{statistics.median(r):.3f} ({max(r):.3f})"
        rate = s["passes"] / s["totals"]["device_wall_s"]
        off = runs.get((api, budget, name, "off"))
        gain = f"{rate / (off['stream']['passes'] / off['stream']['totals']['device_wall_s']):.2f}" if off else "-"
        rs = s["residency"]
        ok = f"{w.get('checked')} ({w.get('mismatches')} off)"
        print(f"| {api} | {budget} | {name} | {res} | {rs['blocks']} of {rs['of']} | {ok} | {moved:.2f} | {ratio} | {rate:.2f} | {gain} | {w['cpu_s'] / s['passes']:.4f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
