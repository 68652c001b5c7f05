#!/usr/bin/env python3
"""The table of scripts/gpu-stream-fronts.sh's run: per front, the median pass's combined
GB/s (up + down bytes over the pass's time) in each round, their median over the rounds, and
issue 37's goals: the C call and the Python call each >= 0.99 of the CLI's `run` and of
CUDA's hand-written loop, every check passing.

How each front times a pass:
  cli        stream.pass_seconds (device time, from the end of the pass before), passes 2-5
  c-call     seed_stream's `pass N: ... combined X GB/s` (wall clock around psStreamRun)
  c-loop     seed_port's line of the same form (wall clock around its loop)
  cuda-loop  seed_port.cu's line of the same form (wall clock around its loop)
  python     the example's `run N: ... wall X GB/s` (wall clock around pinstream.stream)
Usage: stream-fronts-table.py OUT_DIR"""
import json
import pathlib
import re
import statistics
import sys

out = pathlib.Path(sys.argv[1])


def cli(text):
    start, end = text.find("{"), text.rfind("}")
    s = json.loads(text[start:end + 1])["stream"]
    rates = [(b["h2d"] + b["d2h"]) / t / 1e9 for b, t in zip(s["pass_bytes"], s["pass_seconds"]) if t > 0]
    return rates[1:] or rates


def combined(text):
    return [float(x) for x in re.findall(r"combined ([\d.]+) GB/s", text)]


def python(text):
    return [float(x) for x in re.findall(r"^run \d+: .*?wall ([\d.]+) GB/s", text, re.M)]


FRONTS = {"cli": cli, "c-call": combined, "c-loop": combined, "cuda-loop": combined, "python": python}
rows, med, ok = [], {}, {}
for front, parse in FRONTS.items():
    per_round, passed = [], True
    for p in sorted(out.glob(f"{front}-*.txt")):
        text = p.read_text()
        passed &= "rc=0" in text and "FAIL" not in text and "MISMATCH" not in text
        try:
            rates = parse(text)
        except (ValueError, KeyError, json.JSONDecodeError):
            rates = []
        if rates:
            per_round.append(statistics.median(rates))
    ok[front] = passed and bool(per_round)
    med[front] = statistics.median(per_round) if per_round else None
    rounds = ", ".join(f"{x:.2f}" for x in per_round) or "-"
    figure = f"{med[front]:.2f}" if med[front] else "-"
    rows.append(f"| {front} | {rounds} | {figure} | {'PASS' if ok[front] else 'FAIL'} |")
print("| front | median pass, combined GB/s, each round | median | checks |")
print("|---|---|---|---|")
print("\n".join(rows))
print("\n| goal | ratio | met |\n|---|---|---|")
all_met = True
for a in ("c-call", "python"):
    for b, goal in (("cli", 0.99), ("cuda-loop", 0.99)):
        r = med[a] / med[b] if med[a] and med[b] else None
        met = r is not None and r >= goal and ok[a] and ok[b]
        all_met &= met
        print(f"| {a} / {b} >= {goal} | {f'{r:.3f}' if r else 'n/a'} | {'yes' if met else '**NO**'} |")
r = med["c-loop"] / med["cuda-loop"] if med["c-loop"] and med["cuda-loop"] else None
print(f"| (c-loop / cuda-loop, for reference) | {f'{r:.3f}' if r else 'n/a'} | |")
sys.exit(0 if all_met else 1)
