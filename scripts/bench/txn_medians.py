#!/usr/bin/env python3
"""Medians over several `fallow-bench txn` runs (the machine is noisy: one run is not a result).

    python3 scripts/bench/txn_medians.py DIR1 DIR2 DIR3 [--workloads raw,rubis,retwis]

Each DIR holds the `<workload>.json` of one run. Per point and series (mode, or `redis nontxn`), the peak is
the best client count's throughput in that run; the table gives the median peak over the runs, the median
server CPU per transaction at those peaks, and ratios of the medians to rw and to nontxn, plus each run's
peaks so the spread is visible.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SERIES = ["nontxn", "rw", "boosting", "phasing", "combining", "redis nontxn"]


def series_name(cell: dict) -> str:
    return cell["mode"] if cell["target"] == "fallow" else f"{cell['target']} {cell['mode']}"


def peaks(run: dict) -> dict:
    """{point label: {series: (txn/s, server CPU us/txn, clients)}} at each series' best client count."""
    found: dict = {}
    for point in run["points"]:
        best: dict = {}
        for cell in point["cells"]:
            name = series_name(cell)
            if name not in best or cell["txn_per_s"] > best[name][0]:
                best[name] = (cell["txn_per_s"], cell["server_cpu_us_per_txn"], cell["clients"])
        found[point["label"]] = best
    return found


def table(workload: str, runs: list[dict]) -> str:
    per_run = [peaks(run) for run in runs]
    lines = [f"### {workload} (medians of {len(runs)} runs)", "",
             "| point | series | median peak txn/s | runs | vs rw | vs nontxn | server CPU us/txn |",
             "|---|---|---|---|---|---|---|"]
    for label in per_run[0]:
        medians = {}
        for name in SERIES:
            values = [run[label][name] for run in per_run if name in run.get(label, {})]
            if values:
                medians[name] = (statistics.median(v[0] for v in values),
                                 statistics.median(v[1] for v in values),
                                 [round(v[0]) for v in values])
        for name, (rate, cpu, each) in medians.items():
            ratio = lambda base: f"{rate / medians[base][0]:.2f}x" if base in medians else "-"
            lines.append(f"| {label} | {name} | {rate:,.0f} | {', '.join(f'{v:,}' for v in each)} | "
                         f"{ratio('rw')} | {ratio('nontxn')} | {cpu:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--workloads", default="raw,rubis,retwis")
    args = parser.parse_args()
    for workload in args.workloads.split(","):
        runs = [json.loads((d / f"{workload}.json").read_text()) for d in args.dirs
                if (d / f"{workload}.json").is_file()]
        if runs:
            print(table(workload, runs))


if __name__ == "__main__":
    main()
