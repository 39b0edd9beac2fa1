#!/usr/bin/env python3
"""Multi-host caching (issue 4 experiment 4, Mortar §6.6, Fig. 12): spreading the cache over five hosts whose free
memory varies at different times makes response times less variable than one host.

Each "host" is a fallow process (elastic, --elastic-reserve 0, --elastic-max = capacity) that follows its own
host's free memory from the Alibaba 2018 trace through `--host-memory-trace` (a file we write: `total <capacity>`
then `<seconds> <free bytes>`; free = (100 - mem_util_percent)% of --capacity, the ~8 days compressed into
--duration-s, shifted by a lead-in while the servers and clients start). A hog per host would need the memory of
five hosts, so the hosts' memory is simulated by the trace file; the caches' memory is real.

Two runs, as in Mortar:
  single: one fallow following the host with the most free memory on average; --apps-per-host applications.
  multi:  five fallows, each following its own host; 5 x --apps-per-host applications, keys spread by crc32.
Each application reads its own --records-per-app records (zipf 0.8) at --rate-per-app through the cache; a miss
costs a simulated penalty (--miss-penalty-ms, default 5 ms; say --backend postgres for PostgreSQL: the apps then
read the same table, each caching under its own keys) and is written back. Reported per run: hit rate, mean, p99
and standard deviation of the response time (per request and over windows), and the per-host cache bytes.

  multihost.py [--quick] [--hosts m_1934,m_1939,m_1941,m_1943,m_1936] [--capacity 4gb] [--duration-s 300]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

LEAD_S = 12.0  # seconds of the trace's first value before its clock starts (servers and clients start meanwhile)


def host_traces(args) -> dict[str, c.StepTrace]:
    out = {}
    for host in args.hosts:
        points = c.compress(c.load_host_trace(host, Path(args.trace)), args.duration_s)
        out[host] = c.StepTrace([(t, f * args.capacity) for t, f in points])
    return out


def write_trace(path: Path, host: str, trace: c.StepTrace, capacity: int) -> None:
    points = [(0.0, trace.values[0])] + [(LEAD_S + t, v) for t, v in zip(trace.times, trace.values)]
    c.write_trace_file(path, points, capacity, f"host {host}: free memory (scaled, time-compressed), "
                       f"{LEAD_S:g} s lead-in")


def run_case(name: str, hosts: list[str], traces: dict, args, backend: dict, tmp: Path) -> dict:
    c.log(f"# === {name}: {len(hosts)} host(s) {','.join(hosts)}, {len(hosts) * args.apps_per_host} apps ===")
    servers = []
    try:
        t_first = time.monotonic()
        for host in hosts:
            trace_file = tmp / f"{name}-{host}.trace"
            write_trace(trace_file, host, traces[host], args.capacity)
            servers.append(c.start_fallow(["--memory-mode", "elastic", "--host-memory-trace", trace_file,
                                           "--elastic-reserve", "0", "--elastic-min", "0", "--elastic-max",
                                           args.capacity], f"fallow {host}"))
        apps = len(hosts) * args.apps_per_host
        spec = c.ClientSpec(servers=[("resp", s.port) for s in servers], records=args.records_per_app,
                            alpha=args.alpha, apps=apps, value_bytes=args.value_bytes,
                            rate_per_s=args.rate_per_app * apps / args.workers, backend=backend,
                            duration_s=args.duration_s, seed=args.seed)
        delay = t_first + LEAD_S - time.monotonic()
        c.log(f"# servers started within {time.monotonic() - t_first:.1f} s; clients start in {delay:.1f} s")
        clients = c.Clients(spec, args.workers, start_delay_s=delay)
        admins = [c.Admin(s.port) for s in servers]
        sampler = c.Sampler(lambda: [a.elastic().get("pool_resident_bytes", 0) for a in admins], args.sample_s,
                            t0=clients.start_monotonic)
        sampler.start()
        res = clients.results()
        sampler.stop()
        for a in admins:
            a.close()
    finally:
        for s in servers:
            s.cleanup()
    wins = c.windows(res, args.window_s, args.duration_s)
    means = [w["mean_ms"] for w in wins if w["requests"]]
    import numpy as np

    return dict(case=name, hosts=hosts, apps=apps, overall=c.overall(res), windows=wins,
                window_mean_stddev_ms=float(np.std(means)) if means else None,
                cdf_ms=np.percentile(res["lat"] * 1e3, np.arange(0, 100.5, 0.5)).tolist() if len(res["lat"]) else [],
                per_server_hit_rate=[float(res["hit"][res["server"] == i].mean()) if (res["server"] == i).any()
                                     else None for i in range(len(hosts))],
                samples=[(t, s) for t, s in sampler.samples if t >= 0])


def summarize(runs: list[dict], args) -> tuple[str, list[str]]:
    rows = []
    for r in runs:
        o = r["overall"]
        mean_cache = sum(sum(s) for _, s in r["samples"]) / max(len(r["samples"]), 1)
        rows.append([r["case"], len(r["hosts"]), r["apps"], f"{o['hit_rate']:.3f}", f"{o['mean_ms']:.2f}",
                     f"{o['p50_ms']:.2f}", f"{o['p99_ms']:.2f}", f"{o['stddev_ms']:.2f}",
                     f"{r['window_mean_stddev_ms']:.2f}", c.fmt_bytes(mean_cache),
                     f"{o['requests'] / args.duration_s:,.0f}"])
    text = c.table(["case", "hosts", "apps", "hit rate", "mean ms", "p50 ms", "p99 ms", "stddev ms",
                    "stddev of window means ms", "mean cache bytes (all hosts)", "req/s"], rows)
    lines = []
    by = {r["case"]: r for r in runs}
    if "single" in by and "multi" in by:
        s, m = by["single"]["overall"], by["multi"]["overall"]
        window_sd = by["multi"]["window_mean_stddev_ms"] / max(by["single"]["window_mean_stddev_ms"], 1e-9) - 1
        lines.append(f"- multi vs single: mean response {m['mean_ms'] - s['mean_ms']:+.2f} ms "
                     f"({m['mean_ms'] / s['mean_ms'] - 1:+.0%}), hit rate {m['hit_rate'] - s['hit_rate']:+.3f}, "
                     f"stddev {m['stddev_ms'] / s['stddev_ms'] - 1:+.0%}, stddev of window means "
                     f"{window_sd:+.0%}"
                     f" (Mortar: 20 ms better response, 20% better hit rate, lower stddev)")
    return text, lines


def plot(runs: list[dict], traces: dict, args, png: Path) -> None:
    xs = [i * args.duration_s / 1000 for i in range(1001)]
    mem = [(h, xs, [tr(x) / c.GiB for x in xs], dict(linewidth=1)) for h, tr in traces.items()]
    colors = {"single": "#d62728", "multi": "#1f77b4"}
    rt, hit, cdf = [], [], []
    for r in runs:
        w = [x for x in r["windows"] if x["requests"]]
        mid = [x["t"] + args.window_s / 2 for x in w]
        label = f"{r['case']} ({len(r['hosts'])} host{'s' if len(r['hosts']) > 1 else ''}, {r['apps']} apps)"
        rt.append((label, mid, [x["mean_ms"] for x in w], dict(color=colors[r["case"]])))
        hit.append((label, mid, [x["hit_rate"] for x in w], dict(color=colors[r["case"]])))
        cdf.append((label, r["cdf_ms"], [i * 0.005 for i in range(len(r["cdf_ms"]))],  # percentiles 0, 0.5 .. 100
                    dict(color=colors[r["case"]])))
    c.plot_panels(png, f"Multi-host caching: {len(traces)} hosts' free memory (capacity {c.fmt_bytes(args.capacity)} "
                  f"each, ~8 days in {args.duration_s:g} s)", [
                      dict(ylabel="free memory (GiB)", xlabel="seconds", series=mem),
                      dict(ylabel=f"mean response (ms, {args.window_s:g} s)", xlabel="seconds", series=rt),
                      dict(ylabel="hit rate", xlabel="seconds", series=hit, ylim=(0, 1.02)),
                      dict(ylabel="CDF", xlabel="response time (ms)", series=cdf, logx=True)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=str(c.TRACE_CSV))
    ap.add_argument("--hosts", default="m_1934,m_1939,m_1941,m_1943,m_1936")
    ap.add_argument("--single-host", default=None, help="default: the host with the most free memory on average")
    ap.add_argument("--capacity", default="4gb", help="each host's memory (100%% of its trace)")
    ap.add_argument("--duration-s", type=float, default=300)
    ap.add_argument("--apps-per-host", type=int, default=2)
    ap.add_argument("--records-per-app", type=int, default=20000)
    ap.add_argument("--rate-per-app", type=float, default=150)
    ap.add_argument("--value-bytes", type=int, default=c.VALUE_BYTES_50KB)
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backend", choices=["simulated", "postgres"], default="simulated")
    ap.add_argument("--miss-penalty-ms", type=float, default=5.0)
    ap.add_argument("--pg-dir", default=None)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--sample-s", type=float, default=1.0)
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, capacity="1gb", duration_s=30, apps_per_host=1, records_per_app=2000, rate_per_app=120,
                  workers=2, window_s=2.0)
    args.capacity = c.parse_size(args.capacity)
    args.hosts = args.hosts.split(",")
    traces = host_traces(args)
    single = args.single_host or max(args.hosts, key=lambda h: traces[h].mean(args.duration_s))
    if single not in traces:
        traces[single] = host_traces(argparse.Namespace(**dict(vars(args), hosts=[single])))[single]
    c.ensure_bench_deps(postgres=args.backend == "postgres")
    json_path, png = c.out_paths(args, "multihost")
    for h in args.hosts:
        c.log(f"# {h}: mean free {c.fmt_bytes(traces[h].mean(args.duration_s))}")
    pg = None
    if args.backend == "postgres":
        pg = c.PgCluster(args.pg_dir).start()
        pg.load(args.records_per_app, args.value_bytes)
        backend = {"kind": "postgres", "dsn": pg.dsn}
    else:
        backend = {"kind": "simulated", "penalty_ms": args.miss_penalty_ms}
    try:
        with tempfile.TemporaryDirectory(prefix="fallow-multi-") as tmp:
            runs = [run_case("single", [single], traces, args, backend, Path(tmp)),
                    run_case("multi", args.hosts, traces, args, backend, Path(tmp))]
    finally:
        if pg:
            pg.stop()
    text, lines = summarize(runs, args)
    miss = (f"PostgreSQL ({args.records_per_app:,} records, shared by the apps)" if args.backend == "postgres"
            else f"a simulated miss penalty of {args.miss_penalty_ms:g} ms")
    note = (f"hosts {','.join(args.hosts)} (single: {single}, the most free memory on average), capacity "
            f"{c.fmt_bytes(args.capacity)} each, ~8 days compressed into {args.duration_s:g} s; each fallow follows "
            f"its host's free memory via --host-memory-trace (reserve 0, elastic-max = capacity); "
            f"{args.apps_per_host} apps per host, {args.records_per_app:,} records x {args.value_bytes} B each, "
            f"zipf {args.alpha}, {args.rate_per_app:g} req/s per app, read-through with {miss}; keys spread over "
            f"the hosts by crc32; windows of {args.window_s:g} s")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, runs=runs, verdicts=lines, options=vars(args)))
    plot(runs, {h: traces[h] for h in dict.fromkeys([*args.hosts, single])}, args, png)


if __name__ == "__main__":
    main()
