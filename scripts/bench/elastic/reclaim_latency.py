#!/usr/bin/env python3
"""Reclaim latency (issue 4 experiment 1, Mortar Fig. 14a): how fast does memory really go back to the OS?

fallow (elastic mode, target pinned with --elastic-min = --elastic-max = fill + headroom and --elastic-reserve 0,
so the controller itself never shrinks) is filled with --fill bytes of 50 KB values (pipelined SETs). Then for
each release size and path (CAREFUL = SCRA, FAST = FCRA), `ELASTIC RECLAIM <bytes> <path>` is sent on one
connection while
  - a thread polls the server's VmRSS in /proc/<pid>/status every --poll-ms (1 ms), and
  - a probe process sends GETs (zipf 0.99 over the filled keys, one connection, closed loop) and records each
    request's start and latency,
and we report the time from sending the command until RSS has fallen by >= 90% of the requested bytes, the
server-reported duration, and the GET p99 of the requests that overlapped the reclaim. The missing keys are
written back between releases (the pool is full again before each one).

Redis 7 (Debian's redis-server, jemalloc) is filled the same way; for each size X we `CONFIG SET maxmemory
<used_memory - X>` with allkeys-lru and poll its RSS for up to --redis-wait-s: the time until RSS falls by 90%
of X, or "never"; and the time until used_memory is under the new limit (its eviction itself).

  reclaim_latency.py [--quick] [--fill 8gb] [--sizes 512mb,1gb,2gb,4gb,8gb] [--repeats 3] [--targets fallow,redis]
Targets (issue 4): FCRA 8 GiB <= 100 ms, SCRA 1 GiB <= 1 s, GET p99 during a reclaim <= 2 ms.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

PREFIX = "obj:"
SETTLE_S = 3.0  # after the reply, how long we keep polling for RSS to come down (fallow)


def probe_worker(port: int, keys: int, alpha: float, seed: int, ready, stop, queue) -> None:
    """Closed-loop GETs on one connection until stop is set; puts (start times, latencies, hits) on queue.
    Sets ready once the first batch of GETs is done (imports and connecting take a while in a new process)."""
    import numpy as np

    zipf = c.Zipf(keys, alpha, seed)
    rng = np.random.default_rng(seed)
    starts, lats, hits = [], [], 0
    with c.RawConn(port=port, timeout=60) as conn:
        while not stop.is_set():
            for record_id in zipf.sample(rng, 1024):
                t0 = time.monotonic()
                reply = conn.cmd("GET", b"%s%d" % (PREFIX.encode(), record_id))
                lats.append(time.monotonic() - t0)
                starts.append(t0)
                hits += reply is not None
                if stop.is_set():
                    break
            ready.set()
    queue.put((np.array(starts), np.array(lats), hits))


class Probe:
    def __init__(self, port: int, keys: int, seed: int):
        ctx = mp.get_context("spawn")
        self.stop_event, self.ready, self.queue = ctx.Event(), ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=probe_worker,
                                args=(port, keys, 0.99, seed, self.ready, self.stop_event, self.queue), daemon=True)
        self.proc.start()
        if not self.ready.wait(60):
            raise RuntimeError("the GET probe did not start")

    def finish(self):
        self.stop_event.set()
        starts, lats, hits = self.queue.get(timeout=60)
        self.proc.join(10)
        return starts, lats, hits


def latency_stats(starts, lats, t_from: float, t_to: float) -> dict:
    """p99/max (µs) of the GETs whose [start, start+latency] overlaps [t_from, t_to]."""
    import numpy as np

    mask = (starts <= t_to) & (starts + lats >= t_from)
    sel = lats[mask]
    if not len(sel):
        return dict(n=0, p99_us=None, max_us=None)
    return dict(n=int(len(sel)), p99_us=float(np.percentile(sel, 99) * 1e6), max_us=float(sel.max() * 1e6))


def measure_fallow(server, admin, size: int, path: str, keys: int, seed: int, poll_s: float) -> dict:
    probe = Probe(server.port, keys, seed)
    poller = c.RssPoller(server.pid, poll_s)
    poller.start()
    time.sleep(0.4)  # the probe runs for a while before the release (its "before" p99)
    resident_before = admin.elastic().get("pool_resident_bytes")
    t_send = time.monotonic()
    reply = admin.reclaim(size, path)
    t_reply = time.monotonic()
    rss_before = poller.last_before(t_send)
    level = rss_before - 0.9 * size
    deadline = t_reply + SETTLE_S
    while time.monotonic() < deadline and poller.first_at_or_below(level, t_send) is None:
        time.sleep(0.01)
    time.sleep(0.3)
    poller.stop()
    starts, lats, hits = probe.finish()
    t_down = poller.first_at_or_below(level, t_send)
    rss_min = min(rss for ts, rss in poller.samples if ts >= t_send)
    return dict(size=size, **reply, rss_before=rss_before, rss_after=rss_min,
                rss_fall=rss_before - rss_min, resident_before=resident_before,
                rss_down_ms=(t_down - t_send) * 1e3 if t_down else None, reply_ms=(t_reply - t_send) * 1e3,
                get_during=latency_stats(starts, lats, t_send, t_reply),
                get_before=latency_stats(starts, lats, t_send - 0.4, t_send - 1e-6),
                get_hit_rate=hits / max(len(lats), 1))


def measure_redis(server, admin, size: int, keys: int, seed: int, poll_s: float, wait_s: float) -> dict:
    used = admin.info("memory")["used_memory"]
    limit = max(used - size, c.MiB)
    admin.config_set("maxmemory-policy", "allkeys-lru")
    probe = Probe(server.port, keys, seed)
    poller = c.RssPoller(server.pid, poll_s)
    poller.start()
    time.sleep(0.4)
    sampler_admin = c.Admin(server.port)
    t_send = time.monotonic()
    used_samples = c.Sampler(lambda: sampler_admin.info("memory")["used_memory"], 0.02, t0=t_send)
    used_samples.start()
    admin.config_set("maxmemory", limit)
    t_reply = time.monotonic()
    rss_before = poller.last_before(t_send)
    level = rss_before - 0.9 * size
    deadline = t_send + wait_s
    while time.monotonic() < deadline and poller.first_at_or_below(level, t_send) is None:
        time.sleep(0.05)
    used_samples.stop()
    poller.stop()
    starts, lats, hits = probe.finish()
    sampler_admin.close()
    t_used = next((t for t, u in used_samples.samples if u <= limit), None)
    t_down = poller.first_at_or_below(level, t_send)
    rss_min = min(rss for ts, rss in poller.samples if ts >= t_send)
    evict_end = t_send + (t_used if t_used is not None else wait_s)
    admin.config_set("maxmemory", 0)
    return dict(size=size, path="redis", used_before=used, limit=limit, used_after=used_samples.samples[-1][1],
                used_down_ms=t_used * 1e3 if t_used is not None else None, reply_ms=(t_reply - t_send) * 1e3,
                rss_before=rss_before, rss_after=rss_min, rss_fall=rss_before - rss_min,
                rss_down_ms=(t_down - t_send) * 1e3 if t_down else None, waited_s=wait_s,
                get_during=latency_stats(starts, lats, t_send, evict_end),
                get_before=latency_stats(starts, lats, t_send - 0.4, t_send - 1e-6),
                get_hit_rate=hits / max(len(lats), 1))


def run_fallow(args, keys: list[bytes], value: bytes) -> list[dict]:
    pinned = args.fill + max(args.fill // 8, 256 * c.MiB)
    server = c.start_fallow(["--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-min", pinned,
                             "--elastic-max", pinned, "--elastic-grow-bytes-per-sec", 64 * c.GiB], "fallow elastic")
    admin = c.Admin(server.port)
    out = []
    try:
        c.log(f"# fallow: fill {c.fmt_bytes(args.fill)} = {len(keys):,} values of {len(value)} B "
              f"(pool pinned at {c.fmt_bytes(pinned)})")
        c.fill(server.port, keys, lambda k: value, "fill")
        for rep in range(args.repeats):
            for size in args.sizes:
                for path in args.paths:
                    r = measure_fallow(server, admin, size, path, len(keys), args.seed + rep, args.poll_ms / 1e3)
                    out.append(dict(r, rep=rep))
                    c.log(f"# [rep {rep + 1}] fallow {path} {c.fmt_bytes(size)}: released "
                          f"{c.fmt_bytes(r['released_bytes'])} ({r['objects']:,} objects) in "
                          f"{r['duration_us'] / 1e3:.1f} ms (server); RSS -90% after "
                          f"{_ms(r['rss_down_ms'])}; RSS fell {c.fmt_bytes(r['rss_fall'])}; GET p99 during "
                          f"{_us(r['get_during']['p99_us'])} ({r['get_during']['n']} GETs)")
                    c.fill(server.port, keys, lambda k: value, "refill", only_missing=True)
    finally:
        admin.close()
        server.cleanup()
    return out


def run_redis(args, keys: list[bytes], value: bytes) -> list[dict]:
    server = c.start_redis()
    admin = c.Admin(server.port)
    out = []
    try:
        c.log(f"# redis: fill {c.fmt_bytes(args.fill)}")
        c.fill(server.port, keys, lambda k: value, "fill")
        for size in args.sizes:
            r = measure_redis(server, admin, size, len(keys), args.seed, args.poll_ms / 1e3, args.redis_wait_s)
            out.append(dict(r, rep=0))
            c.log(f"# redis {c.fmt_bytes(size)}: used_memory under the limit after {_ms(r['used_down_ms'])}; "
                  f"RSS -90% after {_ms(r['rss_down_ms'], never=f'never in {args.redis_wait_s:g} s')}; RSS fell "
                  f"{c.fmt_bytes(r['rss_fall'])}; GET p99 during eviction {_us(r['get_during']['p99_us'])}")
            c.fill(server.port, keys, lambda k: value, "refill", only_missing=True)
    finally:
        admin.close()
        server.cleanup()
    return out


def _ms(v, never="never"):
    return f"{v:.1f} ms" if v is not None else never


def _us(v):
    return f"{v:.0f} µs" if v is not None else "-"


def summarize(runs: list[dict], args) -> tuple[str, dict]:
    rows, summary = [], {}
    fallow_paths = args.paths if "fallow" in args.targets else []
    for path in [*fallow_paths, *(["redis"] if "redis" in args.targets else [])]:
        for size in args.sizes:
            group = [r for r in runs if r["path"] == path.lower() and r["size"] == size]
            if not group:
                continue
            never = sum(r["rss_down_ms"] is None for r in group)
            m = dict(rss_down_ms=c.median([r["rss_down_ms"] for r in group]) if not never else None,
                     server_ms=c.median([r.get("duration_us", 0) / 1e3 for r in group]) if path != "redis" else None,
                     used_down_ms=c.median([r.get("used_down_ms") for r in group]),
                     rss_fall=c.median([r["rss_fall"] for r in group]),
                     released=c.median([r.get("released_bytes") for r in group]),
                     objects=c.median([r.get("objects") for r in group]),
                     get_p99_during_us=c.median([r["get_during"]["p99_us"] for r in group]),
                     get_p99_before_us=c.median([r["get_before"]["p99_us"] for r in group]),
                     gets_during=c.median([r["get_during"]["n"] for r in group]), runs=len(group), never=never)
            summary[f"{path.lower()}|{size}"] = m
            wait = f"never in {args.redis_wait_s:g} s"
            rows.append([c.fmt_bytes(size), path.lower(), c.fmt_bytes(m["released"]) if m["released"] else "-",
                         f"{m['objects']:,.0f}" if m["objects"] else "-",
                         f"{m['server_ms']:.1f}" if m["server_ms"] is not None else
                         (f"evicted in {_ms(m['used_down_ms'])}" if path == "redis" else "-"),
                         _ms(m["rss_down_ms"], never=wait if never else "-"), c.fmt_bytes(m["rss_fall"]),
                         _us(m["get_p99_during_us"]), f"{m['gets_during']:.0f}", _us(m["get_p99_before_us"]),
                         len(group)])
    headers = ["release", "path", "released", "objects", "server ms", "RSS -90% (median)", "RSS fell",
               "GET p99 during", "GETs during", "GET p99 before", "runs"]
    return c.table(headers, rows), summary


def verdicts(summary: dict, args) -> list[str]:
    lines = []

    def check(name, key, field, limit, unit):
        m = summary.get(key)
        if not m or m.get(field) is None:
            lines.append(f"- {name}: not measured (or RSS never fell)")
            return
        ok = m[field] <= limit
        lines.append(f"- {name}: {m[field]:.1f} {unit} (target <= {limit:g} {unit}) -> {'met' if ok else 'MISSED'}")

    biggest = max(args.sizes)
    gib = min(args.sizes, key=lambda s: abs(s - c.GiB))
    check(f"FCRA {c.fmt_bytes(biggest)} RSS down", f"fast|{biggest}", "rss_down_ms", 100, "ms")
    check(f"SCRA {c.fmt_bytes(gib)} RSS down", f"careful|{gib}", "rss_down_ms", 1000, "ms")
    measured = [(m["get_p99_during_us"], m["gets_during"], k) for k, m in summary.items()
                if not k.startswith("redis") and m["get_p99_during_us"] is not None]
    if measured:
        worst, gets, key = max(measured)
        few = " (under 100 GETs: the p99 is their maximum)" if gets < 100 else ""
        lines.append(f"- GET p99 during a reclaim, worst median over sizes/paths: {worst / 1e3:.2f} ms at "
                     f"{key.split('|')[0]} {c.fmt_bytes(int(key.split('|')[1]))}, from {gets:.0f} GETs{few} "
                     f"(target <= 2 ms) -> {'met' if worst <= 2000 else 'MISSED'}")
    return lines


def plot(runs: list[dict], summary: dict, args, png: Path) -> None:
    series_t, series_p = [], []
    styles = {"careful": dict(marker="o", color="#1f77b4"), "fast": dict(marker="s", color="#ff7f0e"),
              "redis": dict(marker="^", color="#d62728")}
    fallow_paths = [p.lower() for p in args.paths] if "fallow" in args.targets else []
    for path in [*fallow_paths, *(["redis"] if "redis" in args.targets else [])]:
        xs = [s / c.GiB for s in args.sizes if f"{path}|{s}" in summary]
        cap = args.redis_wait_s * 1e3
        ys = [summary[f"{path}|{s}"]["rss_down_ms"] or cap for s in args.sizes if f"{path}|{s}" in summary]
        label = {"careful": "fallow SCRA (careful)", "fast": "fallow FCRA (fast)",
                 "redis": "Redis 7 CONFIG SET maxmemory"}[path]
        never = f" (drawn at {cap / 1e3:g} s: never)" if path == "redis" else ""
        series_t.append((f"{label}: RSS -90%{never}", xs, ys, styles[path]))
        if path != "redis":
            series_t.append((f"{label}: server-reported", xs,
                             [summary[f"{path}|{s}"]["server_ms"] for s in args.sizes if f"{path}|{s}" in summary],
                             dict(styles[path], linestyle="--", alpha=0.6)))
        during = " (during its eviction)" if path == "redis" else ""
        series_p.append((label + during, xs, [(summary[f"{path}|{s}"]["get_p99_during_us"] or 0) / 1e3
                                     for s in args.sizes if f"{path}|{s}" in summary], styles[path]))
    c.plot_panels(png, f"Reclaim latency: fill {c.fmt_bytes(args.fill)} of {args.value_bytes} B values "
                  f"({c.environment()})",
                  [dict(ylabel="time until RSS fell by 90% (ms)", xlabel="release size (GiB)", logy=True,
                        series=series_t),
                   dict(ylabel="GET p99 during (ms)", xlabel="release size (GiB)", series=series_p)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fill", default="8gb")
    ap.add_argument("--sizes", default="512mb,1gb,2gb,4gb,8gb", help="release sizes")
    ap.add_argument("--paths", default="CAREFUL,FAST")
    ap.add_argument("--value-bytes", type=int, default=c.VALUE_BYTES_50KB)
    ap.add_argument("--repeats", type=int, default=3, help="fallow measurements per size and path (median)")
    ap.add_argument("--poll-ms", type=float, default=1.0)
    ap.add_argument("--redis-wait-s", type=float, default=30.0)
    ap.add_argument("--targets", default="fallow,redis", help="fallow, redis or both")
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, fill="256mb", sizes="32mb,64mb,128mb,256mb", repeats=1, redis_wait_s=8.0)
    args.fill = c.parse_size(args.fill)
    args.sizes = c.sizes_arg(args.sizes)
    args.paths = [p.upper() for p in args.paths.split(",")]
    args.targets = args.targets.split(",")
    if max(args.sizes) > args.fill:
        ap.error("a release size is larger than --fill")
    c.ensure_bench_deps()
    json_path, png = c.out_paths(args, "reclaim-latency")
    value = c.record_value(0, args.value_bytes)
    keys = c.key_names(PREFIX, args.fill // args.value_bytes)
    runs = run_fallow(args, keys, value) if "fallow" in args.targets else []
    if "redis" in args.targets:
        runs += run_redis(args, keys, value)
    text, summary = summarize(runs, args)
    lines = verdicts(summary, args)
    note = (f"fill {c.fmt_bytes(args.fill)} = {len(keys):,} values of {args.value_bytes} B; fallow elastic with the "
            f"target pinned (reserve 0, min = max = fill + headroom); ELASTIC RECLAIM <bytes> <path>; VmRSS polled "
            f"every {args.poll_ms:g} ms; 'RSS -90%' = time from sending the command until RSS fell by 90% of the "
            f"requested bytes; GET probe: one connection, closed loop, zipf 0.99 over the filled keys, p99 of the "
            f"GETs overlapping the reclaim (Redis: overlapping its eviction); medians of {args.repeats} (fallow); "
            f"Redis: CONFIG SET maxmemory used_memory - X, allkeys-lru, watched for {args.redis_wait_s:g} s")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, summary=summary, verdicts=lines, runs=runs,
                                 options=dict(vars(args))))
    plot(runs, summary, args, png)


if __name__ == "__main__":
    main()
