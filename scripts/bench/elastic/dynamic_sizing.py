#!/usr/bin/env python3
"""Dynamic cache sizing (issue 4 experiment 3, Mortar §6.5, Fig. 10-11): a cache that follows the host's free memory
against fixed-size caches, with a real memory hog replaying the host's trace beside them.

The host: one machine of the Alibaba 2018 trace (`--host`, from ../shared/data/memory-traces/), its free memory
free(t) = (100 - mem_util_percent)% of capacity, with the capacity scaled to --capacity (default 100% = 12 GiB) and
a window of --trace-days (default the first day of ~8; --trace-start-days moves it) compressed into --duration-s
(default 600 s: 144x); all are printed. A read-through cache refills only as fast as its misses bring records
(1000 req/s of 50 KB: at most ~50 MB/s), so a harder compression empties it faster than it can refill (Mortar
condensed a multi-week trace into six hours). The hog (hog.py) holds
used(t) = capacity - free(t), so the memory left for a cache is free(t).

How fallow elastic sees the scaled host on this (bigger) machine: it reads the real /proc/meminfo (plus the free
pages on per-CPU lists, which MemAvailable misses: INFO elastic host_available_bytes), and its target is
pool + available - reserve. Right after it starts (hog at used(0), clients spawned) we read
A0 = host_available_bytes + pool + hog RSS (what the machine has for the scaled host and the cache) and set
elastic-reserve = A0 - capacity, with --elastic-max capacity. Then, while the hog holds used(t),
available = A0 - used(t) - pool, so target = pool + A0 - used(t) - pool - (A0 - capacity) = free(t): the cache
may take exactly what the trace says is free (give or take what else changes on the machine meanwhile; the
per-CPU lists alone move by tens to hundreds of MiB).

Fixed-size fallow (--maxmemory, allkeys-lru) and memcached (-m) get the trace's minimum free memory (the largest
fixed size that fits over the whole trace, as Mortar's 1.2 GB memcached). Each runs the same trace and hog.

Clients: --workers processes at --rate requests/s in all; each request reads a record id (zipf 0.8 over the
records) through the cache; a miss reads the record from PostgreSQL (Debian's server, a private cluster: table of
--db-bytes of 50 KB records) and SETs it into the cache (read-through). --backend simulated replaces PostgreSQL by
a fixed miss penalty. Reported: hit rate, mean/p50/p99 response time, cache bytes and RSS over time, the ratio of
mean memory used (Mortar: 2.6x) and the change of the mean response time (Mortar: -35%).

  dynamic_sizing.py [--quick] [--host m_1934] [--capacity 12gb] [--duration-s 600] [--trace-days 1] [--db-bytes 4gb]
                    [--rate 1000] [--workers 4] [--targets elastic,fixed,memcached] [--backend postgres]
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

HOG = Path(__file__).resolve().parent / "hog.py"
LABELS = {"elastic": "fallow elastic", "fixed": "fallow fixed", "memcached": "memcached"}
COLORS = {"elastic": "#1f77b4", "fixed": "#2ca02c", "memcached": "#d62728"}


class Host:
    """The scaled, time-compressed trace of one host."""

    def __init__(self, args):
        raw = c.host_window(args.host, args)
        self.start_days = args.trace_start_days
        self.span_days = raw[-1][0] / 86400
        self.points = c.compress(raw, args.duration_s)
        self.capacity = args.capacity
        self.free = c.StepTrace([(t, f * args.capacity) for t, f in self.points])
        fractions = [f for _, f in self.points]
        self.free_min, self.free_max = min(fractions) * args.capacity, max(fractions) * args.capacity
        self.free_mean = self.free.mean(args.duration_s)
        self.compression = raw[-1][0] / args.duration_s

    def describe(self, host: str) -> str:
        return (f"host {host}: {self.span_days:.2f} days from day {self.start_days:g} compressed into "
                f"{self.points[-1][0]:.0f} s "
                f"({self.compression:.0f}x); capacity scaled to 100% = {c.fmt_bytes(self.capacity)}; free memory "
                f"min {c.fmt_bytes(self.free_min)}, mean {c.fmt_bytes(self.free_mean)}, "
                f"max {c.fmt_bytes(self.free_max)}")

    def write_hog_trace(self, path: Path) -> None:
        c.write_trace_file(path, [(t, self.capacity - f * self.capacity) for t, f in self.points], None,
                           "hog target = scaled capacity - free memory of the trace")


class HogProc:
    """hog.py following the trace; its JSON report lines are kept."""

    def __init__(self, trace: Path, step_mib: int):
        self.proc = subprocess.Popen([sys.executable, str(HOG), "--follow-trace", str(trace), "--start-signal",
                                      "--step-mib", str(step_mib), "--json-lines", "--report-interval-s", "1"],
                                     stdout=subprocess.PIPE, text=True)
        self.reports: list[dict] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            if line.strip() == "ready":
                self.ready.set()
            elif line.startswith("{"):
                self.reports.append(json.loads(line))

    def start_clock(self):
        self.proc.send_signal(signal.SIGUSR1)

    def rss(self) -> int:
        try:
            return c.vm_rss_bytes(self.proc.pid)
        except OSError:
            return 0

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            return self.proc.wait(30)


def start_cache(target: str, host: Host, args):
    """Starts the cache for one run; returns (server, protocol, port, flags text)."""
    if target == "memcached":
        s = c.start_memcached(args.fixed_bytes)
        return s, "memcache", s.mc_port, f"-m {args.fixed_bytes // c.MiB}"
    if target == "fixed":
        flags = ["--maxmemory", args.fixed_bytes, "--maxmemory-policy", "allkeys-lru"]
        s = c.start_fallow(flags, LABELS[target])
        return s, "resp", s.port, " ".join(map(str, flags))
    # elastic: started with a reserve of all the RAM (target 0), then the reserve is set from fallow's own view
    flags = ["--memory-mode", "elastic", "--elastic-reserve", c.meminfo()["MemTotal"], "--elastic-max",
             host.capacity, "--elastic-min", "0"]
    s = c.start_fallow(flags, LABELS[target])
    reserve = set_reserve(s, host, args)
    return s, "resp", s.port, " ".join(map(str, flags[:3] + [reserve] + flags[4:]))


def set_reserve(server, host: Host, args) -> int:
    """reserve = A0 - capacity, A0 = what fallow sees available (MemAvailable + per-CPU free pages: its
    host_available_bytes, median of 9 readings) + its pool + the hog's RSS."""
    admin = c.Admin(server.port)
    readings = []
    for _ in range(9):
        info = admin.elastic()
        readings.append(info["host_available_bytes"] + info["pool_resident_bytes"])
        time.sleep(0.1)
    avail0 = c.median(readings) + args.hog_rss_now
    reserve = int(avail0 - host.capacity)
    if reserve <= 0:
        raise SystemExit(f"--capacity {c.fmt_bytes(host.capacity)} is more than this machine has available "
                         f"({c.fmt_bytes(avail0)})")
    admin.config_set("elastic-reserve", reserve)
    admin.close()
    c.log(f"# elastic: A0 = host_available_bytes + pool + hog RSS = {c.fmt_bytes(avail0)} (MemAvailable says "
          f"{c.fmt_bytes(c.meminfo()['MemAvailable'] + args.hog_rss_now)}); reserve = A0 - capacity = "
          f"{c.fmt_bytes(reserve)}; elastic-max = capacity = {c.fmt_bytes(host.capacity)}")
    return reserve


def cache_sample(target: str, server, admin) -> dict:
    """The cache's bytes (memcached: its `bytes` stat; fallow: pool_resident_bytes) and, for fallow, the pool
    target and the host's available memory as the controller sees it."""
    if target == "memcached":
        return dict(cache=int(admin.stats()[b"bytes"]))
    info = admin.elastic()
    return dict(cache=int(info["pool_resident_bytes"]), target=int(info["pool_target_bytes"]),
                host_available=int(info["host_available_bytes"]))


def run_target(target: str, host: Host, args, backend: dict, hog_trace: Path) -> dict:
    c.log(f"# === {LABELS[target]} ===")
    hog = HogProc(hog_trace, args.hog_step_mib)
    if not hog.ready.wait(300):
        raise RuntimeError("the hog did not reach the trace's first target")
    servers_file = hog_trace.with_name(f"servers-{target}.json")
    spec = c.ClientSpec(servers=[], records=args.records, alpha=args.alpha, value_bytes=args.value_bytes,
                        rate_per_s=args.rate / args.workers, backend=backend, duration_s=args.duration_s,
                        seed=args.seed, servers_file=str(servers_file))
    server = None
    try:
        # the clients start first (they wait for start_at), so that the elastic reserve counts their memory
        clients = c.Clients(spec, args.workers, start_delay_s=8.0)
        time.sleep(4.0)
        args.hog_rss_now = hog.rss()
        server, protocol, port, flags = start_cache(target, host, args)
        servers_file.write_text(json.dumps([[protocol, port]]))
        admin = _stats_client(protocol, port)
        sampler = c.Sampler(lambda: dict(cache_sample(target, server, admin), rss=c.vm_rss_bytes(server.pid),
                                         hog=hog.rss(), avail=c.meminfo()["MemAvailable"]),
                            args.sample_s, t0=clients.start_monotonic)
        time.sleep(max(0.0, clients.start_monotonic - time.monotonic()))
        hog.start_clock()
        sampler.start()
        c.log(f"# running {args.duration_s:g} s: {args.rate:g} req/s, {args.workers} client processes")
        res = clients.results()
        sampler.stop()
        hog_rc = hog.finish()
        admin.close()
    finally:
        if hog.proc.poll() is None:
            hog.proc.terminate()
            hog.finish()
        if server:
            server.cleanup()
    samples = [(t, s) for t, s in sampler.samples if t >= 0]
    mean = lambda k: sum(s[k] for _, s in samples) / max(len(samples), 1)  # noqa: E731
    return dict(target=target, flags=flags, overall=c.overall(res), windows=c.windows(res, args.window_s,
                args.duration_s), samples=samples, mean_cache_bytes=mean("cache"), mean_rss_bytes=mean("rss"),
                hog_rc=hog_rc, hog_blocked_s=(hog.reports[-1].get("blocked_s") if hog.reports else None))


def _stats_client(protocol: str, port: int):
    if protocol == "resp":
        return c.Admin(port)
    from pymemcache.client.base import Client

    return Client(("127.0.0.1", port), connect_timeout=10, timeout=10)


def summarize(runs: list[dict], host: Host, args) -> tuple[str, list[str]]:
    rows = []
    for r in runs:
        o = r["overall"]
        rows.append([LABELS[r["target"]], r["flags"], f"{o['hit_rate']:.3f}", f"{o['mean_ms']:.2f}",
                     f"{o['p50_ms']:.2f}", f"{o['p99_ms']:.2f}", c.fmt_bytes(r["mean_cache_bytes"]),
                     c.fmt_bytes(r["mean_rss_bytes"]), f"{o['requests'] / args.duration_s:,.0f}",
                     o["set_errors"], r["hog_rc"]])
    text = c.table(["cache", "settings", "hit rate", "mean ms", "p50 ms", "p99 ms", "mean cache bytes",
                    "mean RSS", "req/s", "SET errors", "hog exit"], rows)
    lines = []
    by = {r["target"]: r for r in runs}
    if "elastic" in by:
        e = by["elastic"]
        for other in ("fixed", "memcached"):
            if other in by:
                o = by[other]
                mem = e["mean_cache_bytes"] / max(o["mean_cache_bytes"], 1)
                rt = e["overall"]["mean_ms"] / o["overall"]["mean_ms"] - 1
                lines.append(f"- elastic vs {LABELS[other]}: {mem:.1f}x the mean cache bytes "
                             f"({e['mean_rss_bytes'] / max(o['mean_rss_bytes'], 1):.1f}x the mean RSS; Mortar: "
                             f"2.6x), mean response time {rt:+.0%} (Mortar: -35%), hit rate "
                             f"{e['overall']['hit_rate']:.3f} vs {o['overall']['hit_rate']:.3f}")
        lines.append(f"- elastic mean cache bytes / mean free memory of the trace: "
                     f"{e['mean_cache_bytes'] / host.free_mean:.0%}")
    for r in runs:
        if r["hog_rc"] != 0:
            lines.append(f"- WARNING: the hog exited with {r['hog_rc']} in the {r['target']} run")
        if r["hog_blocked_s"]:
            lines.append(f"- the hog waited {r['hog_blocked_s']:.1f} s for memory in the {r['target']} run")
    return text, lines


def plot(runs: list[dict], host: Host, args, png: Path) -> None:
    xs = [i * args.duration_s / 2000 for i in range(2001)]
    mem = [("free memory of the trace (what a cache may use)", xs, [host.free(x) / c.GiB for x in xs],
            dict(color="grey", linewidth=1))]
    rt, hit = [], []
    for r in runs:
        t = r["target"]
        mem.append((f"{LABELS[t]}: cache bytes", [s[0] for s in r["samples"]],
                    [s[1]["cache"] / c.GiB for s in r["samples"]], dict(color=COLORS[t])))
        if t == "elastic":
            mem.append(("fallow elastic: pool target", [s[0] for s in r["samples"]],
                        [s[1]["target"] / c.GiB for s in r["samples"]], dict(color=COLORS[t], linestyle=":")))
        w = [x for x in r["windows"] if x["requests"]]
        mid = [x["t"] + args.window_s / 2 for x in w]
        rt.append((LABELS[t], mid, [x["mean_ms"] for x in w], dict(color=COLORS[t])))
        hit.append((LABELS[t], mid, [x["hit_rate"] for x in w], dict(color=COLORS[t])))
    c.plot_panels(png, f"Dynamic sizing: {host.describe(args.host)}", [
        dict(ylabel="GiB", xlabel="seconds (compressed trace time)", series=mem),
        dict(ylabel=f"mean response (ms, {args.window_s:g} s)", xlabel="seconds", series=rt),
        dict(ylabel="hit rate", xlabel="seconds", series=hit, ylim=(0, 1.02))], panel_height=3.2)


def setup_backend(args):
    if args.backend == "simulated":
        return {"kind": "simulated", "penalty_ms": args.miss_penalty_ms}, None
    pg = c.PgCluster(args.pg_dir).start()
    pg.load(args.records, args.value_bytes)
    return {"kind": "postgres", "dsn": pg.dsn, "extra_ms": args.miss_extra_ms}, pg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(c.TRACE_CSV))
    ap.add_argument("--host", default="m_1934")
    ap.add_argument("--capacity", default="12gb", help="the scaled host's memory (100%% of the trace)")
    ap.add_argument("--duration-s", type=float, default=600, help="the trace window is compressed into this")
    ap.add_argument("--trace-start-days", type=float, default=0.0, help="the window starts this far into the trace")
    ap.add_argument("--trace-days", type=float, default=1.0,
                    help="days of the trace replayed (0 = to its end; ~8 days). A cache refills only as fast as "
                         "its misses bring records, so the compression must leave it time to (Mortar: a "
                         "multi-week trace in six hours)")
    ap.add_argument("--db-bytes", default="4gb", help="records x value bytes in the database")
    ap.add_argument("--value-bytes", type=int, default=c.VALUE_BYTES_50KB)
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--rate", type=float, default=1000, help="requests per second, all clients")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--targets", default="elastic,fixed,memcached")
    ap.add_argument("--fixed-bytes", default=None, help="fixed cache size (default: the trace's minimum free)")
    ap.add_argument("--backend", choices=["postgres", "simulated"], default="postgres")
    ap.add_argument("--miss-extra-ms", type=float, default=0.0, help="postgres: extra delay per miss")
    ap.add_argument("--miss-penalty-ms", type=float, default=2.0, help="simulated backend: delay per miss")
    ap.add_argument("--pg-dir", default=None, help="keep the PostgreSQL cluster here (reused when it matches)")
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--sample-s", type=float, default=0.5)
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, capacity="2gb", duration_s=25, db_bytes="512mb", rate=600, workers=3, window_s=2.0)
    args.capacity, args.db_bytes = c.parse_size(args.capacity), c.parse_size(args.db_bytes)
    args.records = args.db_bytes // args.value_bytes
    host = Host(args)
    args.fixed_bytes = c.parse_size(args.fixed_bytes) if args.fixed_bytes else int(host.free_min)
    args.hog_step_mib = max(8, min(64, args.capacity // c.MiB // 128))
    c.ensure_bench_deps(postgres=args.backend == "postgres")
    json_path, png = c.out_paths(args, "dynamic-sizing")
    c.log(f"# {host.describe(args.host)}; fixed caches: {c.fmt_bytes(args.fixed_bytes)}; hog steps of "
          f"{args.hog_step_mib} MiB")
    backend, pg = setup_backend(args)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="fallow-dyn-") as tmp:
            hog_trace = Path(tmp) / "hog.trace"
            host.write_hog_trace(hog_trace)
            for target in args.targets.split(","):
                runs.append(run_target(target, host, args, backend, hog_trace))
                o = runs[-1]["overall"]
                c.log(f"# {LABELS[target]}: hit rate {o['hit_rate']:.3f}, mean {o['mean_ms']:.2f} ms, "
                      f"p99 {o['p99_ms']:.2f} ms, mean cache {c.fmt_bytes(runs[-1]['mean_cache_bytes'])}")
    finally:
        if pg:
            pg.stop()
    text, lines = summarize(runs, host, args)
    miss = (f"PostgreSQL {args.records:,} records of {args.value_bytes} B (bytea, STORAGE EXTERNAL)"
            + (f" + {args.miss_extra_ms:g} ms" if args.miss_extra_ms else "") if args.backend == "postgres"
            else f"a simulated miss penalty of {args.miss_penalty_ms:g} ms ({args.records:,} records)")
    note = (f"{host.describe(args.host)}; hog (hog.py, {args.hog_step_mib} MiB steps) holds capacity - free(t); "
            f"elastic: reserve = (fallow's host_available_bytes + hog RSS at start) - capacity, elastic-max = capacity, "
            f"so its target is free(t); fixed fallow (allkeys-lru) and memcached: {c.fmt_bytes(args.fixed_bytes)} (the trace's "
            f"minimum free); clients: {args.workers} processes, {args.rate:g} req/s, zipf {args.alpha}, read-through "
            f"to {miss}; caches start empty; windows of {args.window_s:g} s")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, runs=runs, verdicts=lines, options=vars(args),
                                 trace=dict(host=args.host, span_days=host.span_days, compression=host.compression,
                                            free_min=host.free_min, free_mean=host.free_mean,
                                            free_max=host.free_max)))
    plot(runs, host, args, png)


if __name__ == "__main__":
    main()
