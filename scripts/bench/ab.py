#!/usr/bin/env python3
"""A/B of two fallow binaries, with an A/A control, on GET/SET of 32-byte values. Not a test.

  ab.py --before /path/to/old/fallow [--after target/release/fallow] [--pairs 5] [-n 200000]

Three servers run side by side: `before`, `after`, and a second `after` (the control). Each pair of runs
measures before and after back to back in alternating order (so neither always runs first), then the
control pair after against after the same way. redis-benchmark (-c 50 -r 100000 -d 32) drives each
server at pipeline 1 and 16. Reported per (test, pipeline): the median of the pairs' ratios after/before
for ops/s and for server CPU µs per request (from /proc), and the same two medians for the control, whose
spread is what this machine's noise alone produces.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from helpers import ServerProc  # noqa: E402


def start(binary: str) -> ServerProc:
    import os

    os.environ["FALLOW_BIN"] = str(Path(binary).resolve())
    server = ServerProc("fallow", {"memcache-port": 0})
    return server.start()


def run_once(server: ServerProc, test: str, pipeline: int, requests: int) -> tuple[float, float]:
    """ops/s and server CPU µs per request of one redis-benchmark run."""
    cpu_before = server.cpu_seconds()
    out = subprocess.run(
        ["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), "-t", test, "-n", str(requests),
         "-r", "100000", "-c", "50", "-d", "32", "-P", str(pipeline), "--csv"],
        capture_output=True, text=True, timeout=300, check=True).stdout
    cpu_us = (server.cpu_seconds() - cpu_before) * 1e6 / requests
    row = [line for line in out.splitlines() if line.startswith(f'"{test.upper()}"')][0]
    return float(row.split(",")[1].strip('"')), cpu_us


def pair(first: ServerProc, second: ServerProc, test: str, pipeline: int, requests: int, flip: bool):
    order = [(0, first), (1, second)]
    if flip:
        order.reverse()
    results = {}
    for index, server in order:
        results[index] = run_once(server, test, pipeline, requests)
    (ops_a, cpu_a), (ops_b, cpu_b) = results[0], results[1]
    return ops_b / ops_a, cpu_b / cpu_a, (ops_a, cpu_a, ops_b, cpu_b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default=str(ROOT / "target/release/fallow"))
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("-n", "--requests", type=int, default=200_000)
    args = parser.parse_args()
    before, after, control = start(args.before), start(args.after), start(args.after)
    try:
        print("| test | pipeline | after/before ops/s | after/before CPU/op | A/A ops/s (spread) "
              "| A/A CPU/op (spread) | before µs/op | after µs/op |")
        print("|---|---|---|---|---|---|---|---|")
        for pipeline in (1, 16):
            for test in ("get", "set"):
                ab, aa = [], []
                for index in range(args.pairs):
                    flip = index % 2 == 1
                    ab.append(pair(before, after, test, pipeline, args.requests, flip))
                    aa.append(pair(after, control, test, pipeline, args.requests, flip))
                    print(f"# {test} P{pipeline} pair {index}: ab {ab[-1][2]} aa {aa[-1][2]}",
                          file=sys.stderr, flush=True)
                spread = lambda values: f"{min(values):.3f}–{max(values):.3f}"  # noqa: E731
                print(f"| {test.upper()} | {pipeline} "
                      f"| {statistics.median(r[0] for r in ab):.3f} "
                      f"| {statistics.median(r[1] for r in ab):.3f} "
                      f"| {statistics.median(r[0] for r in aa):.3f} ({spread([r[0] for r in aa])}) "
                      f"| {statistics.median(r[1] for r in aa):.3f} ({spread([r[1] for r in aa])}) "
                      f"| {statistics.median(r[2][1] for r in ab):.2f} "
                      f"| {statistics.median(r[2][3] for r in ab):.2f} |", flush=True)
    finally:
        for server in (before, after, control):
            server.cleanup()


if __name__ == "__main__":
    main()
