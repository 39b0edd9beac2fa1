#!/usr/bin/env python3
"""Rewarm after a mass eviction (issue 4 experiment 2, Mortar Fig. 14b): SCRA keeps the hot data, FCRA does not.

For each path (careful = SCRA, fast = FCRA, forced with `reclaim-fast-threshold` = 1 TiB or 0), a fresh fallow
(elastic, reserve 0, elastic-max = --pool, fast growth) is filled with records of 50 KB that make up
--data-fraction of the pool (the whole data set is cached: a hot pool). Read-through clients (zipf 0.8 over the
records, a miss fetches the record and SETs it back, a fixed request rate) run for --before-s; then
`CONFIG SET elastic-max` cuts the pool by --cut-fraction (more than half), we wait until the pool is under the cut,
and set elastic-max back at once. The clients run on for --after-s. The hit rate is measured in --window-s windows;
we report the hit rate before the cut, its lowest value after, and the time from the cut until it is back at 90%
(and 95%) of the pre-cut hit rate. The backend is simulated (a fixed miss penalty, --miss-penalty-ms): this
experiment is about what stays in the cache, not about the database.

  rewarm.py [--quick] [--pool 4gb] [--cut-fraction 0.55] [--rate 3000] [--workers 2] [--before-s 30] [--after-s 150]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common as c  # noqa: E402

PATHS = {"careful": 1 << 40, "fast": 0}  # reclaim-fast-threshold that forces each path
FIRST_REQUESTS = 300  # "right after the cut": the hit rate of this many requests (before read-through refills)


def record_key_value(value_bytes: int):
    return lambda key: c.record_value(int(key.rsplit(b":", 1)[1]), value_bytes)


def run_path(path: str, args, records: int) -> dict:
    server = c.start_fallow(["--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-min", "0",
                             "--elastic-max", args.pool, "--elastic-grow-bytes-per-sec", args.grow_rate,
                             "--reclaim-fast-threshold", PATHS[path]], f"fallow ({path})")
    admin = c.Admin(server.port)
    try:
        keys = [c.key_of(0, i) for i in range(records)]
        c.fill(server.port, keys, record_key_value(args.value_bytes), f"fill {path}")
        before = admin.elastic()
        spec = c.ClientSpec(servers=[("resp", server.port)], records=records, alpha=args.alpha,
                            value_bytes=args.value_bytes, rate_per_s=args.rate / args.workers,
                            backend={"kind": "simulated", "penalty_ms": args.miss_penalty_ms},
                            duration_s=args.before_s + args.after_s, seed=args.seed)
        clients = c.Clients(spec, args.workers)
        sampler_admin = c.Admin(server.port)
        sampler = c.Sampler(lambda: {k: sampler_admin.elastic().get(k) for k in
                                     ("pool_resident_bytes", "pool_target_bytes")}, 0.2, t0=clients.start_monotonic)
        sampler.start()
        events = cut_and_restore(admin, args, clients.start_monotonic)
        res = clients.results()
        sampler.stop()
        sampler_admin.close()
        after = admin.elastic()
    finally:
        admin.close()
        server.cleanup()
    wins = c.windows(res, args.window_s, args.before_s + args.after_s)
    first = res["hit"][res["t"] >= events["t_under_cut"]][:FIRST_REQUESTS]
    reclaims = {k: after.get(k, 0) - before.get(k, 0) for k in
                ("reclaim_careful_runs", "reclaim_careful_bytes", "reclaim_fast_runs", "reclaim_fast_bytes")}
    return dict(path=path, events=events, windows=wins, reclaims=reclaims, overall=c.overall(res),
                pool=[(t, s.get("pool_resident_bytes"), s.get("pool_target_bytes")) for t, s in sampler.samples],
                first_requests_hit_rate=float(first.mean()) if len(first) else None, **recovery(wins, events, args))


def cut_and_restore(admin, args, t0: float) -> dict:
    """At before_s: elastic-max = the cut; wait until the pool is under it; elastic-max back. Times since t0."""
    cut = int(args.pool * (1 - args.cut_fraction))
    time.sleep(max(0.0, t0 + args.before_s - time.monotonic()))
    t_cut = time.monotonic()
    c.log(f"# cut: elastic-max {c.fmt_bytes(args.pool)} -> {c.fmt_bytes(cut)}")
    admin.config_set("elastic-max", cut)
    deadline = t_cut + 30
    while admin.elastic()["pool_resident_bytes"] > cut and time.monotonic() < deadline:
        time.sleep(0.005)
    t_done = time.monotonic()
    admin.config_set("elastic-max", args.pool)
    t_restore = time.monotonic()
    c.log(f"# pool under the cut after {(t_done - t_cut) * 1e3:.0f} ms; elastic-max restored")
    return dict(cut_bytes=cut, t_cut=t_cut - t0, t_under_cut=t_done - t0, t_restore=t_restore - t0,
                shrink_ms=(t_done - t_cut) * 1e3, shrunk_in_time=t_done < deadline)


def recovery(wins: list[dict], events: dict, args) -> dict:
    pre_wins = [w for w in wins if events["t_cut"] - args.baseline_s <= w["t"] and w["t"] + args.window_s
                <= events["t_cut"] and w["hit_rate"] is not None]
    pre = sum(w["hit_rate"] * w["requests"] for w in pre_wins) / max(sum(w["requests"] for w in pre_wins), 1)
    post = [w for w in wins if w["t"] >= events["t_cut"] and w["hit_rate"] is not None]
    out = dict(pre_hit_rate=pre, min_hit_rate_after=min((w["hit_rate"] for w in post), default=None),
               first_window_after=post[0]["hit_rate"] if post else None)
    for level in (0.9, 0.95):
        back = next((w for w in post if w["hit_rate"] >= level * pre), None)
        out[f"recover_{int(level * 100)}_s"] = (back["t"] + args.window_s - events["t_cut"]) if back else None
    return out


def summarize(runs: list[dict], args) -> tuple[str, list[str]]:
    rows = []
    for r in runs:
        rate = r["overall"]["requests"] / (args.before_s + args.after_s)
        rows.append([r["path"], f"{r['pre_hit_rate']:.3f}", f"{r['first_requests_hit_rate']:.3f}",
                     f"{r['first_window_after']:.3f}",
                     f"{r['min_hit_rate_after']:.3f}", _s(r["recover_90_s"]), _s(r["recover_95_s"]),
                     f"{r['events']['shrink_ms']:.0f}", f"{rate:,.0f}",
                     f"{r['reclaims']['reclaim_careful_runs']}/{r['reclaims']['reclaim_fast_runs']}"])
    text = c.table(["path", "hit rate before", f"first {FIRST_REQUESTS} requests after cut", "first window after cut",
                    "lowest after", "back to 90% (s)",
                    "back to 95% (s)", "shrink ms", "req/s", "reclaims careful/fast"], rows)
    lines = []
    by = {r["path"]: r for r in runs}
    if "careful" in by and "fast" in by and by["careful"]["recover_90_s"] and by["fast"]["recover_90_s"]:
        gain = 1 - by["careful"]["recover_90_s"] / by["fast"]["recover_90_s"]
        lines.append(f"- SCRA reached 90% of the pre-cut hit rate {abs(gain):.0%} {'sooner' if gain >= 0 else 'later'} "
                     f"than FCRA "
                     f"({by['careful']['recover_90_s']:.1f} s vs {by['fast']['recover_90_s']:.1f} s; Mortar: 39%)")
    for r in runs:
        forced = r["reclaims"][f"reclaim_{r['path']}_runs"] > 0
        other = "fast" if r["path"] == "careful" else "careful"
        if not forced or r["reclaims"][f"reclaim_{other}_runs"]:
            lines.append(f"- WARNING: the {r['path']} run's reclaims were not all {r['path']}: {r['reclaims']}")
    return text, lines


def _s(v):
    return f"{v:.1f}" if v is not None else "never"


def plot(runs: list[dict], args, png: Path) -> None:
    colors = {"careful": "#1f77b4", "fast": "#ff7f0e"}
    hit, pool = [], []
    for r in runs:
        label = {"careful": "SCRA (careful)", "fast": "FCRA (fast)"}[r["path"]]
        w = [x for x in r["windows"] if x["hit_rate"] is not None]
        hit.append((label, [x["t"] + args.window_s / 2 for x in w], [x["hit_rate"] for x in w],
                    dict(color=colors[r["path"]])))
        pool.append((label, [p[0] for p in r["pool"]], [(p[1] or 0) / c.GiB for p in r["pool"]],
                     dict(color=colors[r["path"]])))
    ev = runs[0]["events"]
    vlines = [(ev["t_cut"], "cut"), (ev["t_restore"], "restored")]
    c.plot_panels(png, f"Rewarm after cutting a {c.fmt_bytes(args.pool)} pool by {args.cut_fraction:.0%}: zipf "
                  f"{args.alpha}, {args.rate:g} req/s read-through", [
                      dict(ylabel=f"hit rate ({args.window_s:g} s windows)", xlabel="seconds", series=hit,
                           vlines=vlines, ylim=(0, 1.02)),
                      dict(ylabel="pool resident (GiB)", xlabel="seconds", series=pool, vlines=vlines)])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool", default="4gb")
    ap.add_argument("--data-fraction", type=float, default=0.9, help="records x value bytes / pool")
    ap.add_argument("--cut-fraction", type=float, default=0.55, help="share of the pool the cut removes")
    ap.add_argument("--value-bytes", type=int, default=c.VALUE_BYTES_50KB)
    ap.add_argument("--alpha", type=float, default=0.8)
    ap.add_argument("--rate", type=float, default=3000, help="total requests per second")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--miss-penalty-ms", type=float, default=1.0)
    ap.add_argument("--before-s", type=float, default=30)
    ap.add_argument("--after-s", type=float, default=150)
    ap.add_argument("--baseline-s", type=float, default=10, help="pre-cut hit rate = mean over this long")
    ap.add_argument("--window-s", type=float, default=1.0)
    ap.add_argument("--grow-rate", default="64gb", help="elastic-grow-bytes-per-sec (restore at once)")
    ap.add_argument("--paths", default="careful,fast")
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, pool="256mb", rate=2000, before_s=10, after_s=30, baseline_s=5, window_s=0.5)
    args.pool, args.grow_rate = c.parse_size(args.pool), c.parse_size(args.grow_rate)
    c.ensure_bench_deps()
    json_path, png = c.out_paths(args, "rewarm")
    records = int(args.pool * args.data_fraction) // args.value_bytes
    zipf = c.Zipf(records, args.alpha, args.seed)
    survive = min(1.0, (1 - args.cut_fraction) / args.data_fraction)  # share of the records that fit after the cut
    ideal = zipf.hit_rate_of_top(survive)
    c.log(f"# {records:,} records of {args.value_bytes} B ({c.fmt_bytes(records * args.value_bytes)}), pool "
          f"{c.fmt_bytes(args.pool)}; a cache keeping exactly the hottest records that fit after the cut would hit "
          f"{ideal:.1%}, a random survivor set {survive:.1%}")
    runs = [run_path(p, args, records) for p in args.paths.split(",")]
    text, lines = summarize(runs, args)
    note = (f"{records:,} records x {args.value_bytes} B in a {c.fmt_bytes(args.pool)} pool (elastic, reserve 0, "
            f"elastic-max = pool, grow {c.fmt_bytes(args.grow_rate)}/s); read-through clients: {args.workers} "
            f"processes, {args.rate:g} req/s in all, zipf {args.alpha}, simulated miss penalty "
            f"{args.miss_penalty_ms:g} ms; at {args.before_s:g} s elastic-max is cut by {args.cut_fraction:.0%} "
            f"and restored once the pool is under the cut; path forced with reclaim-fast-threshold "
            f"(careful: 1 TiB, fast: 0); hit rate in {args.window_s:g} s windows, pre-cut = mean of the last "
            f"{args.baseline_s:g} s; ideal hottest-only survivor hit rate {ideal:.1%}")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, runs=runs, verdicts=lines, ideal_hit_rate_after_cut=ideal,
                                 options=vars(args)))
    plot(runs, args, png)


if __name__ == "__main__":
    main()
