#!/usr/bin/env python3
"""Checks that the README quotes the same runs as BENCHMARKS.md (issue 35, part 5).

Every figure in the README (a number with a decimal point, outside code) that stands in a
table row, bullet or paragraph linking raw results (`bench/results/...`) must:
  - be found in one of those raw files, and
  - be found in BENCHMARKS.md,
either as written or as the rounding of a longer figure (11.885 is quoted as 11.9). A table
row without links of its own takes the links of the paragraph above its table, and its figures
must stand together on one line of BENCHMARKS.md (one run's row, not figures from several). Figures in
units without any raw link are not checked (versions such as CPython 3.11). Every linked raw
path must exist.

usage: check-readme-figures.py [README.md BENCHMARKS.md]   (run from the repository root)
       check-readme-figures.py --self-test
"""
import os
import re
import sys
import tempfile
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal

FIGURE = re.compile(r"(?<![\w.\-/])(\d+\.\d+)(?![\w.])")
ANY_DECIMAL = re.compile(r"\d+\.\d+")
RAW_LINK = re.compile(r"\]\((bench/results/[^)\s]+)\)")


def rounds_to(figure, pool):
    """True when some number of `pool` is `figure` or rounds to it."""
    want = Decimal(figure)
    places = want.as_tuple().exponent
    step = Decimal(1).scaleb(places)
    for text in pool:
        have = Decimal(text)
        if have.as_tuple().exponent > places:
            continue  # less precise than the quote: it cannot be its source
        if any(have.quantize(step, rounding=r) == want for r in (ROUND_HALF_UP, ROUND_HALF_EVEN)):
            return True
    return False


def units(readme):
    """(line number, text, links) for each table row, bullet and paragraph outside code."""
    out, bullet, context, in_code = [], None, [], False
    for number, line in enumerate(readme.splitlines(), 1):
        if line.startswith("```"):
            in_code, bullet = not in_code, None
            continue
        if in_code or not line.strip() or line.startswith("#"):
            bullet = None
            if line.startswith("#"):
                context = []
            continue
        if line.startswith("|"):
            links = RAW_LINK.findall(line)
            out.append([number, line, links or context])
            bullet = None
        elif line.startswith("- "):
            bullet = [number, line, None]
            out.append(bullet)
        elif bullet is not None:
            bullet[1] += " " + line.strip()  # a bullet's or a paragraph's next line
        else:
            bullet = [number, line, None]
            out.append(bullet)
    for unit in out:
        if unit[2] is None:
            unit[2] = RAW_LINK.findall(unit[1])
    # A paragraph's links are the context of the table rows after it.
    with_context, context = [], []
    for number, text, links in out:
        if not text.startswith("|"):
            context = links
        elif not RAW_LINK.findall(text):
            links = links or context
        with_context.append((number, text, links))
    return with_context


def numbers_in(path):
    if os.path.isdir(path):
        found = set()
        for folder, _, files in os.walk(path):
            for name in files:
                found |= numbers_in(os.path.join(folder, name))
        return found
    with open(path, errors="replace") as f:
        return set(ANY_DECIMAL.findall(f.read()))


def check(readme_path, bench_path):
    with open(readme_path) as f:
        readme = f.read()
    with open(bench_path) as f:
        bench_lines = [set(ANY_DECIMAL.findall(line)) for line in f]
    bench_pool = set().union(*bench_lines)
    base = os.path.dirname(os.path.abspath(readme_path))
    problems = []
    for number, text, links in units(readme):
        if not links:
            continue
        raw = set()
        for link in links:
            path = os.path.join(base, link)
            if not os.path.exists(path):
                problems.append(f"{readme_path}:{number}: raw results {link} do not exist")
                continue
            raw |= numbers_in(path)
        plain = re.sub(r"\]\([^)]*\)", "]", text)
        plain = re.sub(r"`[^`]*`", "", plain)
        figures = FIGURE.findall(plain)
        if text.startswith("|") and not RAW_LINK.findall(text) and figures:
            # A row of a table quoted from one run: its figures stand on one line there.
            if not any(all(rounds_to(f, line) for f in figures) for line in bench_lines):
                problems.append(
                    f"{readme_path}:{number}: no line of BENCHMARKS.md has this row's figures "
                    f"({', '.join(figures)}) together: quote one run everywhere"
                )
        for figure in figures:
            missing = [
                name
                for name, pool in (("BENCHMARKS.md", bench_pool), ("its raw results", raw))
                if not rounds_to(figure, pool)
            ]
            if missing:
                problems.append(
                    f"{readme_path}:{number}: {figure} is not in {' nor in '.join(missing)} "
                    f"({', '.join(links)}): quote one run everywhere"
                )
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as top:
        os.makedirs(os.path.join(top, "bench/results/x"))
        with open(os.path.join(top, "bench/results/x/raw.txt"), "w") as f:
            f.write("ratio 11.885 and 55.2 GB/s\n")
        with open(os.path.join(top, "BENCHMARKS.md"), "w") as f:
            f.write("| ratio | 11.885 |\n| bw | 55.2 |\n")
        readme = os.path.join(top, "README.md")
        bench = os.path.join(top, "BENCHMARKS.md")

        def run(text):
            with open(readme, "w") as f:
                f.write(text)
            return check(readme, bench)

        ok = "CPython 3.11.\n\n- 11.9× and 55.2 GB/s\n  ([raw](bench/results/x/raw.txt))\n"
        assert run(ok) == [], run(ok)
        table = "Run ([raw](bench/results/x/raw.txt)):\n\n| a | b |\n|---|---|\n| x | 55.2 |\n"
        assert run(table) == [], run(table)
        stale = run("- 11.8× ([raw](bench/results/x/raw.txt))\n")
        assert len(stale) == 1 and "11.8 is not in BENCHMARKS.md nor in its raw" in stale[0], stale
        stale_row = run(table.replace("55.2", "55.4"))
        assert len(stale_row) == 2 and "55.4" in stale_row[1], stale_row
        mixed = run(table.replace("| 55.2 |", "| 55.2 | 11.9 |"))
        assert len(mixed) == 1 and "together" in mixed[0], mixed
        gone = run("- 55.2 ([raw](bench/results/x/none.txt))\n")
        assert any("do not exist" in p for p in gone), gone
        precise = run("- 11.8851 ([raw](bench/results/x/raw.txt))\n")
        assert len(precise) == 1, precise  # a quote cannot be more precise than its source
    print("check-readme-figures self-test: ok")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    readme, bench = (sys.argv[1:] + ["README.md", "BENCHMARKS.md"][len(sys.argv[1:]):])[:2]
    problems = check(readme, bench)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} README figure(s) differ from BENCHMARKS.md or their raw results",
              file=sys.stderr)
        return 1
    print(f"README figures: each found in BENCHMARKS.md and its raw results ({readme})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
