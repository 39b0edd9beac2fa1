#!/usr/bin/env python3
"""fallow beside Redis and memcached, and all three beside the ceiling of this machine.

Starts redis-server, memcached, fallow and two null servers (fallow-bench null-server: a minimal epoll
server that answers every request with a fixed reply, once speaking RESP, once memcached) on free loopback
ports, and runs the same fallow-bench workload matrix on each:

  op GET / SET  x  value size  x  pipeline depth  x  key distribution (zipf 0.99, uniform)

with 50 connections (2 client threads x 25). Servers take turns run by run (the order rotates), each cell
is repeated (--repeats, at least 3) and the medians are reported with fallow/peer ratios, server CPU
microseconds per operation (from /proc/PID/stat) and efficiency against the ceilings:

  - null: the null server's rate measured in the same session with the same workload (the ceiling of any
    request/response server here: the client, the kernel and loopback cost the same for all);
  - model: `fallow model kv` on the calibration file (the bottleneck of null-server rate, loopback bandwidth
    and memory bandwidth for the workload's wire bytes), when a calibration file exists.

  scripts/bench/peers.py [--quick] [--repeats 3] [--values 32,1024,16384,65536] [--record] [--plot PNG]
"""
from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from helpers import RawConn, ServerProc, free_port  # noqa: E402

BIN = Path(os.environ.get("FALLOW_BIN_DIR", ROOT / "target" / "release"))
# Each data set should fit comfortably in every server at once (three servers on a 24 GiB host).
DATA_BYTES_PER_SERVER = 1 << 30
KEYS_MAX = 100_000
TARGETS = ("fallow", "redis", "null-resp", "fallow-mc", "memcached", "null-mc")
PEER = {"fallow": "redis", "fallow-mc": "memcached"}
NULL = {"fallow": "null-resp", "redis": "null-resp", "fallow-mc": "null-mc", "memcached": "null-mc"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


class NullServer:
    """A fallow-bench null server in a child process, with the same cpu_seconds() as ServerProc."""

    def __init__(self, protocol: str):
        self.protocol = protocol
        self.port = free_port()
        self.mc_port = self.port
        self.proc = subprocess.Popen(
            [str(BIN / "fallow-bench"), "null-server", "--port", str(self.port), "--protocol", protocol],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with RawConn(port=self.port, timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"null server ({protocol}) did not start")

    @property
    def pid(self):
        return self.proc.pid

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cleanup(self):
        self.proc.terminate()
        self.proc.wait(10)


def ensure_deps():
    if not all(shutil.which(t) for t in ("redis-server", "memcached")):
        log("# installing redis-server and memcached (scripts/install-test-deps.sh)")
        subprocess.run(["bash", str(ROOT / "scripts" / "install-test-deps.sh")], check=True)
    for exe in ("fallow", "fallow-bench"):
        if not (BIN / exe).exists():
            log(f"# building {exe} (cargo build --release)")
            subprocess.run(["cargo", "build", "--release", "-p", "fallow", "-p", "fallow-bench"],
                           cwd=ROOT, check=True)
            break


def start(targets, memcached_mb):
    servers = {}
    for t in targets:
        if t == "fallow":
            servers[t] = ServerProc("fallow").start()
        elif t == "fallow-mc":
            servers[t] = servers.get("fallow") or ServerProc("fallow").start()
        elif t == "redis":
            servers[t] = ServerProc("redis").start()
        elif t == "memcached":
            s = ServerProc("memcached")
            argv = s.argv

            def with_memory(argv=argv):
                return argv() + ["-m", str(memcached_mb)]

            s.argv = with_memory
            servers[t] = s.start()
        elif t.startswith("null-"):
            servers[t] = NullServer("resp" if t == "null-resp" else "memcache")
        log(f"# {t}: pid {servers[t].pid}")
    return servers


def address(target, server):
    mc = target in ("fallow-mc", "memcached", "null-mc")
    port = server.mc_port if mc else server.port
    return f"tcp://127.0.0.1:{port}", ("memcache-text" if mc else "resp2")


def bench(target, server, workload: list[str]) -> dict:
    url, protocol = address(target, server)
    argv = [str(BIN / "fallow-bench"), "run", "--server", url, "--protocol", protocol, "--quiet",
            "--json", "-", *workload]
    cpu0 = server.cpu_seconds()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    cpu1 = server.cpu_seconds()
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr[-2000:]}")
    record = json.loads(out.stdout)
    res = record["results"]
    requests = max(res["requests"], 1)
    return dict(ops=res["ops_per_sec"], p50=res["latency_us"]["p50"], p99=res["latency_us"]["p99"],
                p999=res["latency_us"]["p999"], hit=res.get("hit_ratio"), errors=res["errors"],
                cpu_us_op=(cpu1 - cpu0) * 1e6 / requests, requests=res["requests"],
                wire_bytes_op=(res["bytes_sent"] + res["bytes_received"]) / requests)


def keys_for(value_bytes: int) -> int:
    return max(1000, min(KEYS_MAX, DATA_BYTES_PER_SERVER // max(value_bytes, 1)))


def prefill(servers, targets, value_bytes):
    keys = keys_for(value_bytes)
    for t in targets:
        if t.startswith("null-"):
            continue
        log(f"# prefill {t}: {keys:,} keys x {value_bytes} B")
        r = bench(t, servers[t], ["--ratio", "1:0", "--distribution", "sequential", "--requests", str(keys),
                                  "--keys", str(keys), "--value-size", str(value_bytes), "--pipeline", "16",
                                  "--threads", "1", "--connections", "4"])
        if r["errors"]:
            raise RuntimeError(f"prefill of {t} had {r['errors']} errors")


def cell_workload(op, value_bytes, pipeline, dist, args):
    return ["--ratio", "0:1" if op == "get" else "1:0", "--value-size", str(value_bytes),
            "--keys", str(keys_for(value_bytes)), "--distribution", dist, "--pipeline", str(pipeline),
            "--threads", "2", "--connections", str(args.connections // 2),
            "--duration", f"{args.duration}s", "--warmup", "0s"]


def run_matrix(args, servers, targets):
    cells = list(itertools.product(args.ops, args.values, args.pipelines, args.dists))
    results = {}
    total = len(cells) * len(targets) * args.repeats
    done = 0
    t0 = time.monotonic()
    for value_bytes in args.values:
        prefill(servers, targets, value_bytes)
        for rep in range(args.repeats):
            for i, (op, vb, pipeline, dist) in enumerate(c for c in cells if c[1] == value_bytes):
                shift = (rep + i) % len(targets)  # rotate so no server always runs first or last
                for t in targets[shift:] + targets[:shift]:
                    r = bench(t, servers[t], cell_workload(op, vb, pipeline, dist, args))
                    results.setdefault((op, vb, pipeline, dist), {}).setdefault(t, []).append(r)
                    done += 1
                    eta = (time.monotonic() - t0) / done * (total - done)
                    log(f"# [{done}/{total}, eta {eta / 60:.1f} min] rep {rep + 1} {op} {vb}B P{pipeline} "
                        f"{dist} {t}: {r['ops']:,.0f} ops/s p99 {r['p99']:.0f} us cpu {r['cpu_us_op']:.2f} us/op")
    return results


def medians(runs):
    return {k: statistics.median(r[k] for r in runs) for k in ("ops", "p50", "p99", "p999", "cpu_us_op",
                                                                "wire_bytes_op")}


def model_ceiling(calibration, op, value_bytes, pipeline, connections, protocol, measured):
    if not calibration:
        return None
    argv = [str(BIN / "fallow"), "model", "kv", "--calibration", str(calibration), "--pipeline", str(pipeline),
            "--connections", str(connections), "--value-bytes", str(value_bytes), "--op", op,
            "--protocol", protocol, "--measured-ops-per-sec", str(measured), "--json"]
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        log(f"# fallow model kv failed: {out.stderr.strip()}")
        return None
    return json.loads(out.stdout)


def ceiling_of(cell, target, meds, calibration, args):
    """The ceiling for one cell and server: the smaller of the null server's rate measured in this session
    for the same cell and the model's byte bounds (loopback and memory bandwidth over the wire and copied
    bytes of one operation, from the calibration). The null server's fixed reply carries no value, so for
    large GETs the bytes, not the request rate, set the ceiling."""
    op, value_bytes, pipeline, _ = cell
    null = meds.get(NULL.get(target))
    best = (null["ops"], "null server") if null else (float("inf"), "-")
    protocol = "memcache" if target in ("fallow-mc", "memcached") else "resp"
    model = model_ceiling(calibration, op, value_bytes, pipeline, args.connections, protocol, meds[target]["ops"])
    for bound in (model or {}).get("ceiling", {}).get("bounds", []):
        if bound["resource"] != "null_server" and bound["ops_per_sec"] < best[0]:
            best = (bound["ops_per_sec"], bound["resource"])
    return best


def tables(results, args, calibration):
    rows = ["| op | value | P | keys | server | ops/s | p50 µs | p99 µs | CPU µs/op | vs peer ops/s | "
            "vs peer CPU/op | of null | ceiling (bottleneck) | of ceiling |",
            "|" + "---|" * 14]
    summary = {}
    for cell, by_target in sorted(results.items()):
        op, vb, pipeline, dist = cell
        meds = {t: medians(runs) for t, runs in by_target.items()}
        for t, m in meds.items():
            peer = PEER.get(t)
            vs_ops = vs_cpu = of_null = ceiling_text = of_ceiling = ""
            if peer in meds:
                vs_ops = f"{m['ops'] / meds[peer]['ops']:.2f}"
                vs_cpu = f"{m['cpu_us_op'] / meds[peer]['cpu_us_op']:.2f}"
            if NULL.get(t) in meds:
                of_null = f"{m['ops'] / meds[NULL[t]]['ops']:.0%}"
            if not t.startswith("null-"):
                ceiling, bottleneck = ceiling_of(cell, t, meds, calibration, args)
                if ceiling != float("inf"):
                    m["ceiling_ops"], m["bottleneck"] = ceiling, bottleneck
                    ceiling_text = f"{ceiling:,.0f} ({bottleneck})"
                    of_ceiling = f"{m['ops'] / ceiling:.0%}"
            summary[f"{op}|{vb}|{pipeline}|{dist}|{t}"] = m
            rows.append(f"| {op} | {vb} B | {pipeline} | {dist} | {t} | {m['ops']:,.0f} | {m['p50']:.0f} | "
                        f"{m['p99']:.0f} | {m['cpu_us_op']:.2f} | {vs_ops} | {vs_cpu} | {of_null} | {ceiling_text} | "
                        f"{of_ceiling} |")
    return rows, summary


def plot(summary, path):
    """One panel per pipeline depth: ops/s as a fraction of the ceiling (null server or bytes), per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"fallow": "#1f77b4", "redis": "#d62728", "fallow-mc": "#6baed6", "memcached": "#2ca02c"}
    cells_all = sorted({tuple(k.split("|")[:4]) for k in summary}, key=lambda c: (c[0], int(c[1]), c[3]))
    pipelines = sorted({int(c[2]) for c in cells_all})
    fig, axes = plt.subplots(len(pipelines), 1, figsize=(13, 4.2 * len(pipelines)), squeeze=False)
    for ax, pipeline in zip(axes[:, 0], pipelines):
        cells = [c for c in cells_all if int(c[2]) == pipeline]
        width = 0.2
        for j, cell in enumerate(cells):
            for i, t in enumerate(colors):
                m = summary.get("|".join(cell) + "|" + t)
                if not m or "ceiling_ops" not in m:
                    continue
                ax.bar(j + (i - 1.5) * width, m["ops"] / m["ceiling_ops"], width, color=colors[t],
                       label=t if j == 0 else None)
        ax.axhline(0.85, color="grey", linestyle="--", linewidth=1)
        ax.text(len(cells) - 0.5, 0.86, "85% goal", ha="right", fontsize=8, color="grey")
        ax.set_xticks(range(len(cells)))
        ax.set_xticklabels([f"{op} {vb}B\n{dist}" for op, vb, _, dist in cells], fontsize=7)
        ax.set_ylabel("ops/s ÷ ceiling")
        ax.set_title(f"pipeline {pipeline}, 50 connections: throughput as a fraction of this machine's ceiling "
                     f"(null server's rate, or loopback bytes for large values)")
        ax.legend(fontsize=8, ncol=4)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    log(f"# plot written to {path}")


def environment():
    rv = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    mv = subprocess.run(["memcached", "-V"], capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               "?")
    return (f"host {platform.node()} ({cpu}, {os.cpu_count()} vCPUs), kernel {platform.release()}; "
            f"{rv.removeprefix('v=').join(('redis ', ''))}, {mv}")


def load_runs(path: Path) -> dict:
    """The runs of a previous --json, keyed as run_matrix keys them."""
    runs = json.loads(path.read_text())["runs"]
    return {(op, int(vb), int(pipeline), dist): by_target
            for (op, vb, pipeline, dist), by_target in ((k.split("|"), v) for k, v in runs.items())}


def record(title: str, command: str, note: str, text: str):
    """Appends a dated result block (title, command, workload note, machine, table) to docs/benchmarks.md."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    with (ROOT / "docs" / "benchmarks.md").open("a") as f:
        f.write(f"\n## {dt.datetime.now().strftime('%Y-%m-%d %H:%M')} — {title} (commit {commit})\n\n"
                f"`{command}`\n\n{note}; {environment()}\n\n{text}\n")
    log("# recorded in docs/benchmarks.md")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per run")
    ap.add_argument("--values", default="32,1024,16384,65536", help="value sizes in bytes")
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--dists", default="zipf:0.99,uniform")
    ap.add_argument("--ops", default="get,set")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--calibration", default=str(ROOT / "docs" / "calibration.json"),
                    help="calibration file from `fallow model calibrate` (skipped when missing)")
    ap.add_argument("--quick", action="store_true", help="one small cell per op, 1 repeat: a smoke run")
    ap.add_argument("--record", action="store_true", help="append the table to docs/benchmarks.md")
    ap.add_argument("--plot", default=None, help="PNG of throughput as a fraction of the null server's")
    ap.add_argument("--json", default=None, help="write all runs here")
    ap.add_argument("--from-json", default=None,
                    help="no runs: rebuild the table and plot from the runs a previous --json wrote")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.duration, args.values, args.pipelines, args.dists = 1, 1.0, "32", "16", "uniform"
    if args.repeats < 3 and not args.quick:
        ap.error("--repeats must be at least 3 (medians)")
    args.values = [int(v) for v in args.values.split(",")]
    args.pipelines = [int(p) for p in args.pipelines.split(",")]
    args.dists = args.dists.split(",")
    args.ops = args.ops.split(",")
    targets = tuple(t for t in args.targets.split(",") if t)
    unknown = set(targets) - set(TARGETS)
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}; known: {TARGETS}")
    calibration = Path(args.calibration) if Path(args.calibration).exists() else None
    if not calibration:
        log(f"# no calibration at {args.calibration}: model columns left empty (run `fallow model calibrate`)")
    if args.from_json:
        results = load_runs(Path(args.from_json))
    else:
        ensure_deps()
        servers = start(targets, 2 * DATA_BYTES_PER_SERVER // 2**20)
        try:
            results = run_matrix(args, servers, targets)
        finally:
            for s in {id(s): s for s in servers.values()}.values():
                s.cleanup()
    rows, summary = tables(results, args, calibration)
    command = "scripts/bench/peers.py " + " ".join(sys.argv[1:])
    note = (f"fallow-bench, {args.connections} connections (2 threads), {args.duration:g} s per run, medians of "
            f"{args.repeats} runs, servers rotating run by run; keys: min(100000, 1 GiB / value size), prefilled; "
            f"server CPU from /proc; 'of null' = ops/s ÷ the null server's ops/s for the same cell; ceiling = the "
            f"smaller of that and the model's loopback/memory byte bounds (`fallow model kv`)")
    text = "\n".join(rows)
    print(f"\n{note}\n{environment()}\n\n{text}\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"note": note, "medians": summary,
                                               "runs": {"|".join(map(str, k)): v for k, v in results.items()}},
                                              indent=1))
    if args.plot:
        plot(summary, args.plot)
    if args.record:
        record("peers matrix", command, note, text)


if __name__ == "__main__":
    main()
