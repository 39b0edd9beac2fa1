#!/usr/bin/env python3
"""Benchmarks of fallow vs its peers (redis-server 7.0, memcached 1.6). Not tests.

  bench.py peers  [-n N] [--repeats R] [--record]
  bench.py memory [-n KEYS] [--record]

Servers are started side by side on free ports and are NOT pinned to CPUs (no taskset);
load generators run on the same machine, so absolute numbers are only comparable run-to-run.
fallow is skipped gracefully when $FALLOW_BIN does not exist.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from helpers import RawConn, ServerProc, fallow_bin  # noqa: E402

MEMASLAP = next((t for t in ("memcaslap", "memaslap") if shutil.which(t)), None)


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def start_servers(kinds):
    servers = {}
    for k in kinds:
        if k == "fallow" and not fallow_bin().exists():
            log(f"# fallow: {fallow_bin()} not found -> skipping fallow")
            continue
        servers[k] = ServerProc(k).start()
        log(f"# started {k} pid={servers[k].pid} port={servers[k].port} mc_port={servers[k].mc_port}")
    return servers


def redis_bench(port, n, pipeline, clients=50, keyspace=100000):
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", "set,get", "-n", str(n),
           "-r", str(keyspace), "-c", str(clients), "-P", str(pipeline), "--csv"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {p.stderr}")
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    out = {}
    for row in rows:
        out[row["test"]] = dict(rps=float(row["rps"]), p50=float(row["p50_latency_ms"]),
                                p99=float(row["p99_latency_ms"]))
    if set(out) != {"SET", "GET"}:
        raise RuntimeError(f"unexpected redis-benchmark output: {p.stdout!r} {p.stderr!r}")
    return out


def mem_bench(port, n, concurrency=50):
    cmd = [MEMASLAP, "-s", f"127.0.0.1:{port}", "-x", str(n), "-T", "2", "-c", str(concurrency),
           "-X", "32"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    m = re.search(r"Run time: ([\d.]+)s Ops: (\d+) TPS: (\d+)", p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"{MEMASLAP} failed: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    return {"mixed 9:1 get:set": dict(rps=float(m.group(3)), p50=None, p99=None, ops=int(m.group(2)))}


def timed(server, fn, ops):
    c0 = server.cpu_seconds()
    res = fn()
    c1 = server.cpu_seconds()
    total_ops = sum(v.get("ops", ops) for v in res.values())
    for v in res.values():
        v["cpu_us_op"] = (c1 - c0) * 1e6 / total_ops
    return res


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def peers(args):
    kinds = ["redis", "memcached", "fallow"]
    if not MEMASLAP:
        log("# no memaslap/memcaslap found: memcache benchmarks skipped")
    servers = start_servers(kinds)
    results = {}  # (suite, test, server) -> list of runs
    try:
        resp = [k for k in ("redis", "fallow") if k in servers]
        mcs = [k for k in ("memcached", "fallow") if k in servers]
        for rep in range(args.repeats):
            for pipeline in (1, 16):
                order = resp if rep % 2 == 0 else resp[::-1]  # alternate who runs first
                for k in order:
                    s = servers[k]
                    log(f"# run {rep + 1}/{args.repeats} redis-benchmark -P {pipeline} -> {k}")
                    res = timed(s, lambda: redis_bench(s.port, args.n, pipeline), args.n)
                    for test, v in res.items():
                        results.setdefault((f"resp -P{pipeline}", test, k), []).append(v)
            if MEMASLAP:
                order = mcs if rep % 2 == 0 else mcs[::-1]
                for k in order:
                    s = servers[k]
                    log(f"# run {rep + 1}/{args.repeats} {MEMASLAP} -> {k}")
                    res = timed(s, lambda: mem_bench(s.mc_port, args.n), args.n)
                    for test, v in res.items():
                        results.setdefault(("memcache", test, k), []).append(v)
    finally:
        for s in servers.values():
            s.cleanup()

    if args.plot:
        plot_peers(results, args.plot)
        raw = {f"{suite}|{test}|{kind}": runs for (suite, test, kind), runs in results.items()}
        Path(args.plot).with_suffix(".json").write_text(json.dumps(raw, indent=1))
    lines = []
    hdr = f"| suite | test | server | ops/s | p50 ms | p99 ms | server CPU µs/op | fallow/peer ops/s | fallow/peer CPU/op |"
    lines += [hdr, "|" + "---|" * 9]
    suites = sorted({(s, t) for (s, t, _) in results})
    for suite, test in suites:
        meds = {}
        for k in ("redis", "memcached", "fallow"):
            runs = results.get((suite, test, k))
            if runs:
                meds[k] = {f: med([r[f] for r in runs]) for f in ("rps", "p50", "p99", "cpu_us_op")}
        peer = next((k for k in ("redis", "memcached") if k in meds), None)
        for k, m in meds.items():
            ratio = cpu_ratio = ""
            if k == "fallow" and peer:
                ratio = f"{m['rps'] / meds[peer]['rps']:.2f}"
                cpu_ratio = f"{m['cpu_us_op'] / meds[peer]['cpu_us_op']:.2f}" if meds[peer]["cpu_us_op"] else "-"
            lines.append(f"| {suite} | {test} | {k} | {fmt(m['rps'], ',.0f')} | {fmt(m['p50'], '.3f')} | "
                         f"{fmt(m['p99'], '.3f')} | {fmt(m['cpu_us_op'], '.2f')} | {ratio} | {cpu_ratio} |")
    note = (f"medians of {args.repeats} runs, -n {args.n}; redis-benchmark -t set,get -r 100000 -c 50 "
            f"(-P 1 and -P 16); {MEMASLAP or 'memaslap n/a'} -T 2 -c 50 -X 32 (9:1 get:set, no latency "
            f"percentiles); servers not CPU-pinned, clients on the same host")
    return lines, note


def plot_peers(results, path):
    """Bar chart of median ops/s per (suite, test) and server, with the fallow/peer ratio on top."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(s, t) for (s, t, _) in results})
    kinds = ["redis", "memcached", "fallow"]
    colors = {"redis": "#d62728", "memcached": "#2ca02c", "fallow": "#1f77b4"}
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(cells)), 4.5))
    width = 0.36
    labelled = set()
    for j, cell in enumerate(cells):
        present = [k for k in kinds if results.get((cell[0], cell[1], k))]
        for i, kind in enumerate(present):
            x = j + (i - (len(present) - 1) / 2) * width
            y = med([r["rps"] for r in results[(cell[0], cell[1], kind)]])
            ax.bar(x, y, width, color=colors[kind], label=None if kind in labelled else kind)
            labelled.add(kind)
    for j, cell in enumerate(cells):
        fallow = results.get((cell[0], cell[1], "fallow"))
        peer = next((results.get((cell[0], cell[1], k)) for k in ("redis", "memcached")
                     if results.get((cell[0], cell[1], k))), None)
        if fallow and peer:
            ratio = med([r["rps"] for r in fallow]) / med([r["rps"] for r in peer])
            top = max(med([r["rps"] for r in fallow]), med([r["rps"] for r in peer]))
            ax.text(j, top * 1.02, f"{ratio:.2f}x", ha="center", fontsize=9)
    ax.set_xticks(range(len(cells)))
    ax.set_xticklabels([f"{s}\n{t}" for s, t in cells], fontsize=8)
    ax.set_ylabel("median ops/s")
    ax.set_title("fallow vs peers (same host, same run); label = fallow/peer")
    ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    log(f"# plot written to {path}")


def memory(args):
    servers = start_servers(["redis", "fallow"])
    lines = ["| server | keys | DBSIZE | used_memory | VmRSS | bytes/key (RSS) |", "|---|---|---|---|---|---|"]
    rows = {}
    try:
        for k, s in servers.items():
            log(f"# loading {args.n} keys into {k}")
            p = subprocess.Popen(["redis-cli", "-h", "127.0.0.1", "-p", str(s.port), "--pipe"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            val = b"v" * 32
            chunk = []
            for i in range(args.n):
                key = b"key:%010d" % i
                chunk.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$32\r\n%s\r\n" % (len(key), key, val))
                if len(chunk) == 10000:
                    p.stdin.write(b"".join(chunk))
                    chunk = []
            p.stdin.write(b"".join(chunk))
            p.stdin.close()
            out = p.stdout.read().decode()
            p.wait(600)
            if p.returncode != 0 or "errors: 0" not in out:
                raise RuntimeError(f"redis-cli --pipe failed for {k}: {out} {p.stderr.read()!r}")
            with RawConn(port=s.port, timeout=30) as c:
                dbsize = c.cmd("DBSIZE")
                mem = c.cmd("INFO", "memory").decode()
            used = int(re.search(r"used_memory:(\d+)", mem).group(1))
            rss_kb = int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{s.pid}/status").read_text()).group(1))
            rows[k] = (dbsize, used, rss_kb * 1024)
            lines.append(f"| {k} | {args.n:,} | {dbsize:,} | {used / 2**20:,.1f} MiB | {rss_kb / 1024:,.1f} MiB "
                         f"| {rss_kb * 1024 / max(dbsize, 1):.1f} |")
    finally:
        for s in servers.values():
            s.cleanup()
    if "fallow" in rows and "redis" in rows:
        lines.append(f"\nfallow/redis: used_memory {rows['fallow'][1] / rows['redis'][1]:.2f}, "
                     f"VmRSS {rows['fallow'][2] / rows['redis'][2]:.2f}")
    note = f"{args.n:,} distinct keys (key:%010d), 32-byte values, loaded with redis-cli --pipe"
    return lines, note


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["peers", "memory"])
    ap.add_argument("-n", type=int, default=None, help="requests per run (peers) / keys (memory)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--record", action="store_true", help="append a dated block to docs/benchmarks.md")
    ap.add_argument("--plot", default=None, help="write a PNG bar chart (peers mode; needs matplotlib)")
    args = ap.parse_args()
    if args.n is None:
        args.n = 1_000_000
    lines, note = peers(args) if args.mode == "peers" else memory(args)
    rv = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    mv = subprocess.run(["memcached", "-V"], capture_output=True, text=True).stdout.strip()
    fb = fallow_bin()
    env = (f"host {platform.node()}, {os.cpu_count()} cpus, kernel {platform.release()}; "
           f"redis {rv.removeprefix('v=')}, {mv}; fallow {'present' if fb.exists() else 'absent'} ({fb})")
    text = "\n".join(lines)
    print(f"\n{note}\n{env}\n\n{text}\n")
    if args.record:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        doc = ROOT / "docs" / "benchmarks.md"
        doc.parent.mkdir(exist_ok=True)
        new = not doc.exists()
        with doc.open("a") as f:
            if new:
                f.write("# Benchmarks\n\nAppended by `scripts/bench-peers.sh --record` and "
                        "`scripts/bench-memory.sh --record`.\n")
            f.write(f"\n## {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} — {args.mode} (commit {commit})\n\n"
                    f"{note}; {env}\n\n{text}\n")
        log(f"# recorded in {doc}")


if __name__ == "__main__":
    main()
