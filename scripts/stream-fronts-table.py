#!/usr/bin/env python3
"""The table of scripts/gpu-stream-fronts.sh's run: per front, the median pass's combined GB/s
(up + down bytes over the pass's time) by two clocks, their medians over the rounds, and
issue 37's goals: the C call and the Python call each >= 0.99 of the CLI's `run` and of
CUDA's hand-written loop, every check passing.

  device  the commands' own span: the CLI's `stream.totals` (device wall over its passes),
          seed_stream's / seed_port's / seed_port.cu's `events span`, Python's report.gbps
  wall    the host's clock around the call or loop (none for the CLI, whose process also
          draws its synthetic data): `combined X GB/s` of the C programs, Python's `wall`
The goals are judged on the device clock, the one every front reports; the wall clock adds
what each call costs around its commands (a psStreamRun makes its ring each call). Beside the
ratio of the medians, each goal's paired ratio: the median over the rounds of that round's
ratio (the two fronts ran minutes apart, not hours), which drift between rounds moves less.
A front that did not run (gpu-stream-fronts.sh's FRONTS) is said to be not run, and its goals
are not judged. Where the C call and Python streamed several passes in one call (OUT_DIR's
front-passes, gpu-stream-fronts.sh's FRONT_PASSES), every front's figure is its whole run's
(the CLI's `stream.totals`, not a pass inside its pipeline), and the goals against CUDA's
loop, which streams one pass a run, are not judged.
Usage: stream-fronts-table.py OUT_DIR"""
import json
import pathlib
import re
import statistics
import sys

out = pathlib.Path(sys.argv[1])
# Passes per call of the C and Python fronts (1 where the file is absent: older runs).
front_passes = int((out / "front-passes").read_text()) if (out / "front-passes").exists() else 1


def cli(text):
    # One pass: the run's own figure. Several (CLI_PASSES): each pass's bytes over its device
    # seconds (`pass_seconds`, from one pass's end to the next), as the C and Python fronts
    # give one figure per pass.
    start, end = text.find("{"), text.rfind("}")
    stream = json.loads(text[start:end + 1])["stream"]
    secs, moved = stream.get("pass_seconds") or [], stream.get("pass_bytes") or []
    if front_passes == 1 and len(secs) > 1 and len(moved) == len(secs):
        return [(b["h2d"] + b["d2h"]) / s / 1e9 for b, s in zip(moved, secs) if s > 0], []
    return [stream["totals"]["combined_gbps"]], []


def c_program(text):
    spans = re.findall(r"events span ([\d.]+) ms; wall ([\d.]+) ms", text)
    wall = [float(x) for x in re.findall(r"combined ([\d.]+) GB/s", text)]
    device = [w * float(b) / float(a) for w, (a, b) in zip(wall, spans) if float(a) > 0]
    return device, wall


def python(text):
    runs = re.findall(r"^run \d+: ([\d.]+) GB/s.*?wall ([\d.]+) GB/s", text, re.M)
    return [float(d) for d, _ in runs], [float(w) for _, w in runs]


FRONTS = {"cli": cli, "c-call": c_program, "c-loop": c_program, "cuda-loop": c_program, "python": python}
# Other slot counts (CLI_SLOTS, LOOP_SLOTS): FRONT_sN-ROUND.txt.
for name in sorted({m.group(1) for p in out.glob("*_s*-*.txt") if (m := re.match(r"([a-z-]+_s\d+)-", p.name))}):
    FRONTS[name] = FRONTS[name.rsplit("_s", 1)[0]]
rows, med, ok, per_round = [], {}, {}, {}
fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs) or "-"
for front, parse in FRONTS.items():
    device, wall, passed = [], [], True
    files = sorted(out.glob(f"{front}-*.txt"))
    if not files:
        med[front], ok[front] = None, False
        rows.append(f"| {front} | not run | | | | |")
        continue
    for p in files:
        text = p.read_text()
        passed &= "rc=0" in text and "FAIL" not in text and "MISMATCH" not in text
        try:
            d, w = parse(text)
        except (ValueError, KeyError, json.JSONDecodeError):
            d, w = [], []
        device += [statistics.median(d)] if d else []
        if d:
            per_round.setdefault(front, {})[p.stem.rsplit("-", 1)[1]] = statistics.median(d)
        wall += [statistics.median(w)] if w else []
    ok[front] = passed and bool(device)
    med[front] = statistics.median(device) if device else None
    mw = f"{statistics.median(wall):.2f}" if wall else "-"
    rows.append(f"| {front} | {fmt(device)} | {med[front] or 0:.2f} | {fmt(wall)} | {mw} | {'PASS' if ok[front] else 'FAIL'} |")
unit = "median pass" if front_passes == 1 else f"median run of {front_passes} passes"
print(f"| front | device clock, {unit} per round, GB/s | median | wall clock, per round | median | checks |")
print("|---|---|---|---|---|---|")
print("\n".join(rows))
def paired(a, b):
    """The median over the rounds both ran of a's figure over b's, and each round's."""
    ra, rb = per_round.get(a, {}), per_round.get(b, {})
    each = [ra[k] / rb[k] for k in sorted(ra, key=int) if k in rb and rb[k] > 0]
    return (statistics.median(each) if each else None), each


print("\n| goal (device clock) | ratio of medians | paired (per round) | met |\n|---|---|---|---|")
all_met = True
for a in ("c-call", "python"):
    for b, goal in (("cli", 0.99), ("cuda-loop", 0.99)):
        if not list(out.glob(f"{a}-*.txt")) or not list(out.glob(f"{b}-*.txt")):
            print(f"| {a} / {b} >= {goal} | not run | | |")
            continue
        if b != "cli" and front_passes > 1:
            print(f"| {a} / {b} >= {goal} | not judged: runs of {front_passes} passes against one-pass loops | | |")
            continue
        r = med[a] / med[b] if med[a] and med[b] else None
        pr, each = paired(a, b)
        met = r is not None and r >= goal and ok[a] and ok[b]
        all_met &= met
        rounds = ", ".join(f"{x:.3f}" for x in each)
        print(f"| {a} / {b} >= {goal} | {f'{r:.3f}' if r else 'n/a'} | "
              f"{f'{pr:.3f}' if pr else 'n/a'} ({rounds}) | {'yes' if met else '**NO**'} |")
# The CLI's slot variants are whole runs of FRONT_PASSES passes there: not against one-pass loops.
for a in ["c-loop"] + [f for f in FRONTS if "_s" in f and not (f.startswith("cli") and front_passes > 1)]:
    r = med[a] / med["cuda-loop"] if med.get(a) and med.get("cuda-loop") else None
    print(f"| ({a} / cuda-loop, for reference) | {f'{r:.3f}' if r else 'n/a'} | |")
sys.exit(0 if all_met else 1)
