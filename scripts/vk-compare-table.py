#!/usr/bin/env python3
"""Tables `gpu-validate.sh vk-compare`'s reports: per --vk-copy way and round, Vulkan's five
figures over CUDA's in the same process (paired ratio: the median of the per-pair ratios), and
per figure the median over the rounds of each way, with auto over transfer.

    scripts/vk-compare-table.py DIR    (DIR/WAY-ROUND.json, as vk-compare writes them)
"""
import json
import pathlib
import statistics
import sys


def main(folder: pathlib.Path) -> None:
    runs = {}
    for f in sorted(folder.glob("*-*.json")):
        way, _, rnd = f.stem.rpartition("-")
        try:
            j = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            print(f"{f.name}: unreadable ({e})")
            continue
        ratios = j.get("vulkan_ratios") or []
        copies = ((j.get("vulkan") or {}).get("half") or {}).get("copies", "?")
        runs.setdefault(way, []).append((rnd, copies, {r["figure"]: r for r in ratios}))
    if not runs:
        sys.exit(f"no WAY-ROUND.json reports in {folder}")
    figures = []
    for way in runs.values():
        for _, _, rs in way:
            figures += [f for f in rs if f not in figures]
    print("Vulkan / CUDA, paired (Vulkan GB/s in brackets), per way and round:\n")
    print("| way | round | " + " | ".join(figures) + " |")
    print("|---|---|" + "---|" * len(figures))
    for way, rounds in runs.items():
        for rnd, _, rs in rounds:
            cells = [
                f"{rs[f]['paired']:.3f} ({rs[f]['vulkan']:.1f})" if f in rs else "-"
                for f in figures
            ]
            print(f"| {way} | {rnd} | " + " | ".join(cells) + " |")
    med = {
        way: {
            f: statistics.median(rs[f]["paired"] for _, _, rs in rounds if f in rs)
            for f in figures
            if any(f in rs for _, _, rs in rounds)
        }
        for way, rounds in runs.items()
    }
    print("\nMedian over the rounds:\n")
    print("| way | " + " | ".join(figures) + " |")
    print("|---|" + "---|" * len(figures))
    for way, m in med.items():
        print(f"| {way} | " + " | ".join(f"{m[f]:.3f}" if f in m else "-" for f in figures) + " |")
    if "auto" in med and "transfer" in med:
        a, t = med["auto"], med["transfer"]
        cells = [f"{a[f] / t[f]:.3f}" if f in a and f in t else "-" for f in figures]
        print("| auto / transfer | " + " | ".join(cells) + " |")
    print("\nCopies, as each report names them:")
    for way, rounds in runs.items():
        print(f"- {way}: {rounds[0][1]}")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "."))
