#!/usr/bin/env python3
"""Overhead of elastic mode (issue 4 experiment 5): the side-by-side KV benchmark against two fallow servers,
one in elastic mode (the default: controller polling the host, pool limit = its target) and one in fixed mode
(--maxmemory, allkeys-lru), with the same data. Target: <= 3% throughput difference.

Uses peers.py's fallow-bench driver (same workload cells, 50 connections, prefilled keys, server CPU from /proc):
GET and SET of small values at pipeline 1 and 16, the two servers alternating run by run (the first one
alternates too), --repeats runs each (medians, at least 3). Reports ops/s, p99, server CPU µs per operation and
the elastic/fixed ratios as the median (and quartiles) of the ratios of back-to-back pairs of runs, which cancels
most of a shared machine's drift.

  overhead.py [--quick] [--repeats 5] [--duration 3] [--values 32] [--pipelines 1,16]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

peers = c.peers
MODES = {"elastic": ["--memory-mode", "elastic"],
         "fixed": ["--memory-mode", "fixed", "--maxmemory", 8 * c.GiB, "--maxmemory-policy", "allkeys-lru"]}


def run(args) -> dict:
    servers = {m: c.start_fallow(flags, f"fallow {m}") for m, flags in MODES.items()}
    results: dict = {}
    try:
        cells = list(itertools.product(args.ops, args.values, args.pipelines))
        total, done = len(cells) * len(MODES) * args.repeats, 0
        for value_bytes in args.values:
            peers.prefill(servers, list(MODES), value_bytes)
            for rep in range(args.repeats):
                for i, (op, vb, pipeline) in enumerate(x for x in cells if x[1] == value_bytes):
                    order = list(MODES) if (rep + i) % 2 == 0 else list(MODES)[::-1]
                    for mode in order:
                        workload = peers.cell_workload(op, vb, pipeline, args.dist, args)
                        r = peers.bench(mode, servers[mode], workload)
                        results.setdefault((op, vb, pipeline), {}).setdefault(mode, []).append(r)
                        done += 1
                        c.log(f"# [{done}/{total}] rep {rep + 1} {op} {vb} B P{pipeline} {mode}: "
                              f"{r['ops']:,.0f} ops/s, p99 {r['p99']:.0f} µs, cpu {r['cpu_us_op']:.2f} µs/op")
        for mode, s in servers.items():
            with c.RawConn(port=s.port) as conn:
                info = conn.cmd("INFO", "elastic")
                results.setdefault("info", {})[mode] = info.decode() if isinstance(info, bytes) else str(info)
    finally:
        for s in servers.values():
            s.cleanup()
    return results


def summarize(results: dict) -> tuple[str, dict, list[str]]:
    rows, summary, worst = [], {}, 0.0
    for (op, vb, pipeline), by_mode in sorted((k, v) for k, v in results.items() if k != "info"):
        med = {m: {k: statistics.median(r[k] for r in runs) for k in ("ops", "p99", "cpu_us_op")}
               for m, runs in by_mode.items()}
        # Paired ratios: run i of each mode ran back to back, so their ratio cancels the machine's drift.
        ratios = paired(by_mode, "ops")
        cpu_ratios = paired(by_mode, "cpu_us_op")
        ratio, cpu = statistics.median(ratios), statistics.median(cpu_ratios)
        worst = max(worst, 1 - ratio)
        summary[f"{op}|{vb}|{pipeline}"] = dict(med, ops_ratio=ratio, cpu_ratio=cpu, ops_ratios=ratios,
                                                 cpu_ratios=cpu_ratios,
                                                 runs={m: [r["ops"] for r in runs] for m, runs in by_mode.items()})
        rows.append([op, f"{vb} B", pipeline, f"{med['elastic']['ops']:,.0f}", f"{med['fixed']['ops']:,.0f}",
                     f"{ratio:.3f} ({quartiles(ratios)})", f"{med['elastic']['p99']:.0f}",
                     f"{med['fixed']['p99']:.0f}", f"{med['elastic']['cpu_us_op']:.2f}",
                     f"{med['fixed']['cpu_us_op']:.2f}", f"{cpu:.3f} ({quartiles(cpu_ratios)})",
                     *(" / ".join(f"{x / 1e3:.0f}k" for x in summary[f"{op}|{vb}|{pipeline}"]["runs"][m])
                       for m in MODES)])
    text = c.table(["op", "value", "P", "elastic ops/s", "fixed ops/s", "elastic/fixed (quartiles)",
                    "elastic p99 µs", "fixed p99 µs", "elastic CPU µs/op", "fixed CPU µs/op",
                    "CPU ratio (quartiles)", "elastic runs", "fixed runs"], rows)
    lines = [f"- largest throughput loss of elastic against fixed (median of paired ratios): {worst:.1%} "
             f"(target <= 3%) -> {'met' if worst <= 0.03 else 'MISSED (or noise: see the quartiles)'}"]
    return text, summary, lines


def paired(by_mode: dict, field: str) -> list[float]:
    """elastic/fixed of `field` for each pair of back-to-back runs."""
    return [e[field] / f[field] for e, f in zip(by_mode["elastic"], by_mode["fixed"])]


def quartiles(values: list[float]) -> str:
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return f"{q1:.3f}-{q3:.3f}"


def plot(summary: dict, png: Path) -> None:
    keys = sorted(summary)
    c.plot_panels(png, "Elastic vs fixed mode: throughput ratio per cell (1.0 = no overhead)", [
        dict(ylabel="elastic / fixed ops/s", xlabel="cell", series=[
            ("ops/s ratio", list(range(len(keys))), [summary[k]["ops_ratio"] for k in keys], dict(marker="o")),
            ("CPU µs/op ratio", list(range(len(keys))), [summary[k]["cpu_ratio"] for k in keys],
             dict(marker="s")),
            ("-3%", [0, len(keys) - 1], [0.97, 0.97], dict(color="grey", linestyle="--"))],
             title="cells: " + ", ".join(f"{i}={k.replace('|', ' ')}" for i, k in enumerate(keys)))])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per run")
    ap.add_argument("--values", default="32")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--ops", default="get,set")
    ap.add_argument("--dist", default="uniform")
    ap.add_argument("--connections", type=int, default=50)
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, repeats=3, duration=1.0)
    if args.repeats < 3:
        ap.error("--repeats must be at least 3 (medians)")
    args.values = [int(v) for v in args.values.split(",")]
    args.pipelines = [int(p) for p in args.pipelines.split(",")]
    args.ops = args.ops.split(",")
    c.ensure_binaries("fallow", "fallow-bench")
    json_path, png = c.out_paths(args, "overhead")
    results = run(args)
    text, summary, lines = summarize(results)
    note = (f"fallow elastic (default settings) vs fallow fixed (--maxmemory 8 GiB, allkeys-lru); fallow-bench "
            f"via peers.py: {args.connections} connections (2 threads), {args.duration:g} s per run, {args.dist} keys "
            f"(prefilled), {args.repeats} runs each, the two servers alternating; ratios: median (quartiles) of "
            f"back-to-back pairs; server CPU from /proc")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, summary=summary, verdicts=lines, info=results.get("info"),
                                 options=vars(args)))
    plot(summary, png)


if __name__ == "__main__":
    main()
