#!/usr/bin/env python3
"""Where a server's time goes, next to the null server's: the gap between fallow and the ceiling, explained.

For each target (fallow, redis, the RESP null server) it runs one fallow-bench workload (default: GET of
32-byte values, pipeline 16, 50 connections, uniform keys) and reports per operation:

  - server CPU µs/op split into user and system time (from /proc/PID/stat utime and stime);
  - with perf (cpu-clock sampling, works without hardware counters): the share of samples by component
    (kernel, fallow-proto codec, fallow-store engine, fallow-server commands/connections, tokio runtime,
    allocator and libc, other) and the top symbols.

The null server's user time is the floor of parsing plus reply writing; its system time is the floor of the
socket work. What fallow spends above each is where its rate goes below the null server's.

  scripts/bench/where_time_goes.py [--duration 5] [--pipeline 16] [--value-size 32] [--op get] [--record]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

COMPONENTS = [  # (component, regex on the symbol or dso), first match wins
    ("kernel", re.compile(r"\[kernel|\[k\]")),
    ("fallow-proto (codec)", re.compile(r"fallow_proto")),
    ("fallow-store (engine)", re.compile(r"fallow_store|hashbrown|foldhash")),
    ("fallow-server (commands, connections)", re.compile(r"fallow_server")),
    ("tokio runtime", re.compile(r"tokio|mio::")),
    ("null server", re.compile(r"fallow_bench")),
    ("allocator, libc", re.compile(r"libc|malloc|free|memcpy|memmove|memset|\[\.\] _int_|cfree")),
]


def cpu_split(pid: int) -> tuple[float, float]:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def perf_breakdown(data: Path, top: int):
    out = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "dso,sym",
                          "--percent-limit", "0.05"], capture_output=True, text=True).stdout
    shares: dict[str, float] = {}
    symbols = []
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(\[[k.]\])\s+(.*)", line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        label = f"{dso} {kind} {sym}"
        component = next((c for c, rx in COMPONENTS if rx.search(label)), "other")
        shares[component] = shares.get(component, 0.0) + pct
        symbols.append((pct, component, sym[:90]))
    return shares, symbols[:top]


def profile(target, server, workload, duration, use_perf):
    """One run for the figures (ops/s, CPU split), then, with perf, a second run for the profile only: perf
    sampling with call graphs costs the profiled process CPU, which would inflate the CPU per operation."""
    user0, sys0 = cpu_split(server.pid)
    result = peers.bench(target, server, workload)
    user1, sys1 = cpu_split(server.pid)
    ops = result["requests"]
    result["user_us_op"] = (user1 - user0) * 1e6 / ops
    result["sys_us_op"] = (sys1 - sys0) * 1e6 / ops
    if not use_perf:
        return result
    data = Path(tempfile.mkdtemp(prefix="fallow-perf-")) / "perf.data"
    perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "1999", "-g", "-p", str(server.pid),
                             "-o", str(data), "--", "sleep", str(duration)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peers.bench(target, server, workload)
    perf.wait(duration + 30)
    if data.exists():
        result["shares"], result["symbols"] = perf_breakdown(data, 12)
    shutil.rmtree(data.parent, ignore_errors=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--value-size", type=int, default=32)
    ap.add_argument("--op", choices=["get", "set"], default="get")
    ap.add_argument("--targets", default="fallow,redis,null-resp")
    ap.add_argument("--record", action="store_true", help="append the result to docs/benchmarks.md")
    args = ap.parse_args()
    use_perf = shutil.which("perf") is not None
    if not use_perf:
        peers.log("# perf not found: CPU split only (apt-get install linux-perf for the breakdown)")
    targets = tuple(args.targets.split(","))
    peers.ensure_deps()
    servers = peers.start(targets, 1024)
    args.connections, args.duration_run = 50, args.duration
    workload = ["--ratio", "0:1" if args.op == "get" else "1:0", "--value-size", str(args.value_size),
                "--keys", "100000", "--distribution", "uniform", "--pipeline", str(args.pipeline),
                "--threads", "2", "--connections", "25", "--duration", f"{args.duration}s", "--warmup", "0s"]
    results = {}
    try:
        peers.prefill(servers, targets, args.value_size)
        for t in targets:
            peers.log(f"# profiling {t}")
            results[t] = profile(t, servers[t], workload, args.duration, use_perf)
    finally:
        for s in servers.values():
            s.cleanup()
    lines = ["| server | ops/s | of null | CPU µs/op | user µs/op | system µs/op |", "|---|---|---|---|---|---|"]
    null = results.get("null-resp")
    for t, r in results.items():
        of_null = f"{r['ops'] / null['ops']:.0%}" if null else ""
        lines.append(f"| {t} | {r['ops']:,.0f} | {of_null} | {r['cpu_us_op']:.2f} | {r['user_us_op']:.2f} | "
                     f"{r['sys_us_op']:.2f} |")
    for t, r in results.items():
        if "shares" not in r:
            continue
        lines += ["", f"{t}: share of CPU samples by component", "", "| component | share |", "|---|---|"]
        lines += [f"| {c} | {p:.1f}% |" for c, p in sorted(r["shares"].items(), key=lambda kv: -kv[1])]
        lines += ["", f"{t}: top symbols", "", "| share | component | symbol |", "|---|---|---|"]
        lines += [f"| {p:.1f}% | {c} | `{s}` |" for p, c, s in r["symbols"]]
    command = "scripts/bench/where_time_goes.py " + " ".join(sys.argv[1:])
    note = (f"fallow-bench {args.op.upper()} {args.value_size} B values, pipeline {args.pipeline}, 50 connections, "
            f"uniform over 100,000 prefilled keys, {args.duration:g} s per server; CPU from /proc/PID/stat; the perf "
            f"profile (cpu-clock sampling at 1999 Hz) comes from a second run of the same workload")
    text = "\n".join(lines)
    print(f"\n{note}\n{peers.environment()}\n\n{text}\n")
    if args.record:
        peers.record("where the time goes", command, note, text)

if __name__ == "__main__":
    main()
