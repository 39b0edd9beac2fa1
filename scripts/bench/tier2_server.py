#!/usr/bin/env python3
"""fallow's tier 2 against memcached + extstore, same RAM, same flash file, same run (issue 18, benchmark 2).

Servers (each started fresh for each sequence, on free loopback ports, files under --tmp):
  fallow      fallow --memory-mode fixed --maxmemory RAM --tier2-size FILE (the default --tier2-admission
              frequency: everything while tier 2 has room, then values read often, docs/tier2.md)
  fallow-all  the same with --tier2-admission all (every value leaving RAM is written, as extstore does)
  fallow-hits1  --tier2-admission hits --tier2-admit-hits 1 (only values read in RAM; the earlier default)
  fallow-threads  --tier2-reads threads (tier-2 reads on a pool of blocking threads instead of io_uring)
  memcached   memcached -t 2 -m RAM -o ext_path=FILE:SIZE,ext_threads=4 (extstore's other settings default:
              items go to flash only when RAM runs short, as fallow's)
Both are driven over the memcached text protocol by `fallow-bench run --protocol memcache-text` (2 threads x 25
connections unless stated), the traces by tier2_client.py (GET, SET on a miss).

One sequence per server and value size (V = 4 KiB and 50 KiB), main data 3x RAM:
  setup      SET four "cold" key sets c1..c4 (c1, c3: min(--lat-keys, 5% of RAM); c2, c4: 10% of RAM), then GET
             each key once (so every admission rule admits them when they leave RAM)
  load       SET every main key once (k:0 .. k:N-1, N = 3 x RAM / V), sequential, open loop at --load-mibps
             (80 MiB/s: memcached evicts instead of flushing when written faster, see the JSON's notes)
  ram        SET a fresh hot set h: (5% of RAM), GET it uniformly, fallow-bench on 1 connection
  ram-py/t2  one Python client (1 process) alternating a GET of a random h: key (RAM) and a GET of the next c1:
             key (each once, random order; tier 2), the page cache of the tier-2 file dropped before every GET:
             RAM and tier-2 GET latency, unloaded, under the same machine conditions
  t2-par     GET each c2 key once, --cold-procs processes, random order: tier-2 read throughput
  t2-resp, t2-resp-par (fallow only): the same over RESP on c3/c4 (both protocols read tier 2 ahead, off the
             worker thread: INFO tier2_async_reads; a first read is served without promotion)
  mixed      zipf 0.9 over the N keys, 10% SET / 90% GET, --mixed-requests (the same requests for every
             server, so tier-2 writes compare like for like; 0: 2 s warm-up then --mixed-s): ops/s, CPU/op,
             hit ratio
  get        zipf 0.9, GET only, --get-s: GET p50/p99 overall (50 connections, closed loop)
fallow runs with --maxmemory-policy allkeys-lru (a cache, as memcached: under the default noeviction
the admission rule is ignored and everything leaving RAM is written). INFO tier2 (ram_hits, tier2_hits) and
memcached's stats (get_hits, get_extstore) before and after each phase say which tier served it. The page
cache of both tier-2 files is dropped every 50 ms (memcached's extstore reads and writes through the page cache,
fallow uses O_DIRECT; without it memcached would get the host's spare RAM as a third tier).

fio (the brief's 4 KiB random-read job, and the same at 56 KiB) runs once per round on the same filesystem.
Rounds rotate the server order; ratios are per round (paired), then the median over rounds.

  python3 scripts/bench/tier2_server.py [--rounds 3] [--quick] [--time-limit 2700]

Runtime: about 6 minutes per round with the defaults (3 rounds: 18 min on the 2-vCPU VM); --time-limit (default 2700 s) skips the
rounds that would not finish in time, a watchdog kills everything at time-limit + 600 s.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402

import tier2_common as C  # noqa: E402

FALLOW_KEYS = ["ram_hits", "tier2_hits", "tier2_sync_reads", "tier2_async_reads", "tier2_promotions",
               "tier2_promotions_declined", "tier2_served_without_promotion",
               "tier2_demotions", "tier2_demotion_writes", "tier2_demoted_bytes", "tier2_admissions_refused",
               "tier2_clean_ahead_bytes", "tier2_records_written", "tier2_record_bytes_written",
               "tier2_device_bytes_written", "tier2_device_writes", "tier2_reads", "tier2_read_bytes",
               "tier2_regions_cleaned", "tier2_cleaned_bytes", "tier2_clean_discarded", "tier2_lost_keys",
               "tier2_read_errors", "tier2_corrupt_records", "tier2_doorkeeper_switched_off",
               "tier2_doorkeeper_passed_while_off", "tier2_dead_probes", "keyspace_hits", "keyspace_misses", "evicted_keys"]
MC_KEYS = ["cmd_get", "cmd_set", "get_hits", "get_misses", "get_extstore", "get_aborted_extstore",
           "get_oom_extstore", "recache_from_extstore", "miss_from_extstore", "badcrc_from_extstore",
           "evictions", "extstore_objects_written", "extstore_bytes_written", "extstore_objects_read",
           "extstore_bytes_read", "extstore_objects_evicted", "extstore_bytes_evicted", "extstore_page_evictions",
           "extstore_compact_rescues", "extstore_compact_lost"]


#: Benchmark 2's defaults for `--fallow-policy` and `--mc-ext-opts` (set_tail.py starts its servers so too).
FALLOW_POLICY = "allkeys-lru"
MC_EXT_OPTS = "ext_threads=4,slab_automove_window=3"

#: fallow's flags per server name (admission rule, read path).
FALLOW_FLAGS = {
    "fallow": [],
    "fallow-all": ["--tier2-admission", "all"],
    "fallow-hits1": ["--tier2-admission", "hits", "--tier2-admit-hits", "1"],
    "fallow-threads": ["--tier2-reads", "threads"],
}


class Server:
    def __init__(self, kind: str, args, tmp: Path, bins: dict, tag: str):
        self.kind = kind
        self.dir = tmp / tag
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.mport = C.free_port()
        self.rport = None
        ram, file_mb = args.ram_mb, args.file_mb
        if kind.startswith("fallow"):
            self.rport = C.free_port()
            flags = FALLOW_FLAGS[kind]
            self.tier_file = self.dir / "tier2.dat"
            self.argv = [bins["fallow"]["path"], "--bind", "127.0.0.1", "--port", self.rport,
                         "--memcache-port", self.mport, "--unixsocket", "", "--memory-mode", "fixed",
                         "--maxmemory", f"{ram}mb", "--tier2-size", f"{file_mb}mb", "--dir", self.dir,
                         "--maxmemory-policy", args.fallow_policy, *flags]
        else:
            self.tier_file = self.dir / "extstore.dat"
            self.argv = ["memcached", "-u", "root", "-l", "127.0.0.1", "-p", self.mport, "-U", "0", "-t", "2",
                         "-c", "4096", "-m", str(ram),
                         "-o", f"ext_path={self.tier_file}:{file_mb}m,{args.mc_ext_opts}"]
        self.proc = C.spawn(self.argv, self.dir.parent / f"{tag}.log")
        C.wait_port(self.mport, self.proc)
        if self.rport:
            C.wait_port(self.rport, self.proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stats(self) -> dict:
        if self.rport:
            raw = C.info(self.rport, "tier2")
            hist = raw.get("tier2_read_latency_usec")
            raw.update(C.info(self.rport, "stats"))
            out = {k: raw.get(k, 0) for k in FALLOW_KEYS}
            if isinstance(hist, dict):  # device read latency histogram: reads under 2^i µs
                out.update({f"tier2_read_lat_{k}": v for k, v in hist.items()})
            return out
        else:
            raw = C.memcached_stats(self.mport)
            keys = MC_KEYS
        return {k: raw.get(k, 0) for k in keys}

    def sample(self) -> dict:
        io = C.proc_io(self.pid)
        return {"t": time.monotonic(), "cpu_s": C.cpu_seconds(self.pid), "stats": self.stats(),
                "io_read_bytes": io.get("read_bytes", 0), "io_write_bytes": io.get("write_bytes", 0)}

    def stop(self) -> None:
        C.stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def delta(a: dict, b: dict) -> dict:
    return {"wall_s": b["t"] - a["t"], "cpu_s": b["cpu_s"] - a["cpu_s"],
            "io_read_bytes": b["io_read_bytes"] - a["io_read_bytes"],
            "io_write_bytes": b["io_write_bytes"] - a["io_write_bytes"],
            "stats": {k: b["stats"][k] - a["stats"].get(k, 0) for k in b["stats"]
                      if isinstance(b["stats"][k], (int, float))}}


def hist_p50(hist: dict | None):
    """The upper bound (µs) of the histogram bucket holding the median read (buckets le_N: reads under N µs)."""
    if not hist:
        return None
    items = sorted((int(k[3:]), v) for k, v in hist.items() if k.startswith("le_"))
    total = sum(v for _, v in items)
    seen = 0
    for bound, v in items:
        seen += v
        if seen * 2 >= total:
            return bound
    return None


def fio_lat(fio: dict) -> float:
    """A fio job's p50 read latency, submission included (older results had only clat)."""
    return fio.get("lat_p50_us", fio["clat_p50_us"])


def tier_split(kind: str, d: dict) -> dict:
    """Which tier served a phase's GET hits, from the server's own counters."""
    s = d["stats"]
    if kind.startswith("fallow"):
        t2 = s.get("tier2_hits", 0)
        ram = s.get("ram_hits", 0)
    else:
        t2 = s.get("get_extstore", 0)
        ram = s.get("get_hits", 0) - t2
    return {"ram_hits": ram, "tier2_hits": t2, "tier2_fraction": t2 / max(1, ram + t2)}


def run_sequence(kind: str, value: int, rnd: int, args, tmp: Path, bins: dict, dropper) -> dict:
    tag = f"{kind}-{value}-r{rnd}"
    C.log(f"  {tag}: start")
    server = Server(kind, args, tmp, bins, tag)
    dropper.set_paths([server.tier_file])
    bench = bins["fallow-bench"]["path"]
    ram = args.ram_mb * 2**20
    conns = ["--threads", "2", "--connections", "25"]
    one = ["--threads", "1", "--connections", "1"]

    def r50(n):
        return max(50, int(n) // 50 * 50)

    n_main = r50(args.data_factor * ram / value)
    n_lat = min(args.lat_keys, r50(0.05 * ram / value))
    n_thr = r50(0.10 * ram / value)
    n_hot = r50(0.05 * ram / value)
    out = {"server": kind, "value_bytes": value, "round": rnd, "argv": [str(a) for a in server.argv],
           "keys": {"main": n_main, "c1_c3": n_lat, "c2_c4": n_thr, "hot": n_hot}, "phases": {}}
    start = server.sample()
    cumulative = {}
    try:
        def phase(name, bargs, protocol="memcache-text", quiet_log=False):
            port = server.rport if protocol.startswith("resp") else server.mport
            a = server.sample()
            la = C.loadavg()
            res = C.fallow_bench(bench, ["--server", f"tcp://127.0.0.1:{port}", "--protocol", protocol,
                                         *map(str, bargs)], tmp / f"{tag}-{name}.json",
                                 timeout=args.phase_timeout)
            b = server.sample()
            d = delta(a, b)
            requests = max(1, res["requests"])
            rec = {"args": [str(x) for x in bargs], "protocol": protocol, "ops_per_sec": res["ops_per_sec"],
                   "requests": res["requests"], "gets": res["gets"], "sets": res["sets"],
                   "hit_ratio": res["hit_ratio"], "errors": res["errors"], "latency_us": res["latency_us"],
                   "connections_dropped": res.get("connections_dropped"), "drop_reason": res.get("drop_reason"),
                   "duration_s": res["duration_s"], "cpu_us_per_op": d["cpu_s"] / requests * 1e6,
                   "server": d, "tiers": tier_split(kind, d), "loadavg": [la, C.loadavg()]}
            out["phases"][name] = rec
            cumulative[name] = delta(start, b)
            if not quiet_log:
                C.log(f"    {name:10s} {res['ops_per_sec']:9.0f} ops/s  hit {res['hit_ratio']:.3f}  "
                      f"p50 {res['latency_us']['p50']:7.1f} p99 {res['latency_us']['p99']:8.1f} us  "
                      f"cpu {rec['cpu_us_per_op']:6.2f} us/op  tier2 {rec['tiers']['tier2_fraction']:.2f} "
                      f"err {res['errors']}" + (f" ({res.get('drop_reason')})" if res["errors"] else ""))
            return rec

        def pyphase(name, keys, prefix, procs, drop=False, protocol="memcache"):
            import tier2_client

            port = server.rport if protocol == "resp" else server.mport
            a = server.sample()
            la = C.loadavg()
            res = tier2_client.read_through(port, keys, prefix, 0, procs=procs, set_on_miss=False,
                                            protocol=protocol, partition="index",
                                            drop_path=str(server.tier_file) if drop else None,
                                            timeout_s=args.phase_timeout)
            b = server.sample()
            d = delta(a, b)
            requests = max(1, res["requests"])
            res.pop("timeline", None)
            hist = {k[len("tier2_read_lat_"):]: v for k, v in d["stats"].items() if k.startswith("tier2_read_lat_") and v}
            rec = {"client": f"tier2_client.py, {procs} process(es), random order"
                             + (", page cache dropped before each GET" if drop else ""),
                   "protocol": protocol, "ops_per_sec": res["ops_per_sec"], "requests": res["requests"],
                   "gets": res["gets"], "sets": 0, "hit_ratio": res["hit_ratio"],
                   "errors": res["connection_errors"], "drop_reason": res["first_connection_error"],
                   "latency_us": res["get_latency_us"], "hit_latency_us": res["get_hit_latency_us"],
                   "duration_s": res["wall_s"], "cpu_us_per_op": d["cpu_s"] / requests * 1e6,
                   "server": d, "tiers": tier_split(kind, d), "loadavg": [la, C.loadavg()],
                   "device_read_latency_hist": hist or None,
                   "device_read_latency_p50_bound_us": hist_p50(hist)}
            out["phases"][name] = rec
            cumulative[name] = delta(start, b)
            C.log(f"    {name:10s} {res['ops_per_sec']:9.0f} ops/s  hit {res['hit_ratio']:.3f}  "
                  f"p50 {rec['latency_us']['p50']:7.1f} p99 {rec['latency_us']['p99']:8.1f} us  "
                  f"cpu {rec['cpu_us_per_op']:6.2f} us/op  tier2 {rec['tiers']['tier2_fraction']:.2f}  (py)")
            return rec

        def latphase(rng, n_hot, n_cold):
            """RAM and tier-2 GET latency in one run, requests alternating between a random hot key (h:,
            resident) and the next cold key (c1:, each once, random order), so that both see the same machine
            (this VM's latency is bimodal, ~15 or ~45 µs for a RAM GET, and changes between phases)."""
            import tier2_client

            seq = np.empty(2 * n_cold, dtype=np.int64)
            seq[0::2] = rng.permutation(n_cold) * 2 + 1
            seq[1::2] = rng.integers(0, n_hot, size=n_cold) * 2
            a = server.sample()
            la = C.loadavg()
            res = tier2_client.read_through(server.mport, seq, "", 0, procs=1, set_on_miss=False,
                                            protocol="memcache", partition="index",
                                            drop_path=str(server.tier_file), prefixes=["h:", "c1:"],
                                            timeout_s=args.phase_timeout)
            b = server.sample()
            d = delta(a, b)
            cumulative["lat"] = delta(start, b)
            hist = {k[len("tier2_read_lat_"):]: v for k, v in d["stats"].items()
                    if k.startswith("tier2_read_lat_") and v}
            split = tier_split(kind, d)
            hot, cold = res["by_prefix"]["h:"], res["by_prefix"]["c1:"]
            common = {"client": "tier2_client.py, 1 process, hot (h:) and cold (c1:) GETs alternating, cold keys "
                                "once each in random order, page cache of the tier-2 file dropped before every GET",
                      "protocol": "memcache", "sets": 0, "errors": res["connection_errors"],
                      "drop_reason": res["first_connection_error"], "duration_s": res["wall_s"],
                      "ops_per_sec": res["ops_per_sec"],
                      "cpu_us_per_op": d["cpu_s"] / max(1, res["requests"]) * 1e6, "server": d,
                      "loadavg": [la, C.loadavg()], "device_read_latency_hist": hist or None,
                      "device_read_latency_p50_bound_us": hist_p50(hist)}
            t2_served = min(split["tier2_hits"], cold["hits"])
            for name, part, tiers in (
                    ("ram-py", hot, {"tier2_hits": split["tier2_hits"] - t2_served,
                                     "tier2_fraction": (split["tier2_hits"] - t2_served) / max(1, hot["hits"])}),
                    ("t2", cold, {"tier2_hits": t2_served, "tier2_fraction": t2_served / max(1, cold["hits"])})):
                out["phases"][name] = {**common, "requests": part["gets"], "gets": part["gets"],
                                       "hit_ratio": part["hit_ratio"],
                                       "latency_us": {"p50": part["p50"], "p99": part["p99"], "mean": part["mean"]},
                                       "hit_latency_us": {"p50": part.get("hit_p50", part["p50"]),
                                                          "p99": part.get("hit_p99", part["p99"])},
                                       "tiers": tiers}
                C.log(f"    {name:10s} {part['gets']:6d} GETs  hit {part['hit_ratio']:.3f}  p50 {part['p50']:7.1f} "
                      f"p99 {part['p99']:8.1f} us  tier2 {tiers['tier2_fraction']:.2f}  (py, interleaved)")
            C.log(f"    (lat phase: server CPU {common['cpu_us_per_op']:.1f} us per GET, device read p50 under "
                  f"{common['device_read_latency_p50_bound_us']} us)")

        # setup: the cold sets, each read once
        for prefix, n in (("c1:", n_lat), ("c2:", n_thr), ("c3:", n_lat), ("c4:", n_thr)):
            phase(f"setup-set-{prefix[:2]}", [*conns, "--ratio", "1:0", "--distribution", "sequential",
                                              "--keys", n, "--requests", n, "--value-size", value,
                                              "--key-prefix", prefix], quiet_log=True)
        for prefix, n in (("c1:", n_lat), ("c2:", n_thr), ("c3:", n_lat), ("c4:", n_thr)):
            phase(f"setup-get-{prefix[:2]}", [*conns, "--ratio", "0:1", "--distribution", "sequential",
                                              "--keys", n, "--requests", n, "--key-prefix", prefix],
                  quiet_log=True)
        load_rate = int(args.load_mibps * 2**20 / value) if args.load_mibps > 0 else 0
        phase("load", [*conns, "--ratio", "1:0", "--distribution", "sequential", "--keys", n_main,
                       "--requests", n_main, "--value-size", value, "--key-prefix", "k:", "--rate", load_rate])
        # latency of RAM hits and of tier-2 hits, unloaded (1 connection), then cold reads at 50 connections
        phase("hot-set", [*conns, "--ratio", "1:0", "--distribution", "sequential", "--keys", n_hot,
                          "--requests", n_hot, "--value-size", value, "--key-prefix", "h:"], quiet_log=True)
        phase("ram", [*one, "--ratio", "0:1", "--distribution", "uniform", "--keys", n_hot, "--key-prefix", "h:",
                      "--warmup", "500ms", "--duration", f"{args.hot_s}s"])
        # ... and with the Python client: random order (so the kernel's readahead of a buffered reader
        # cannot turn the walk into sequential reads), the page cache dropped before every GET (1 process)
        rng = np.random.default_rng(1000 + rnd)
        latphase(rng, n_hot, n_lat)
        C.drop_file_cache(server.tier_file)
        pyphase("t2-par", rng.permutation(n_thr), "c2:", args.cold_procs)
        if kind.startswith("fallow"):
            pyphase("t2-resp", rng.permutation(n_lat), "c3:", 1, drop=True, protocol="resp")
            pyphase("t2-resp-par", rng.permutation(n_thr), "c4:", args.cold_procs, protocol="resp")
        zipf = ["--distribution", f"zipf:{args.zipf}", "--keys", n_main, "--key-prefix", "k:",
                "--distinct-client-seed", "--seed", rnd + 1]
        # The same requests for every server (no warm-up): a server that is faster in a timed phase
        # would also do more SETs, and so more tier-2 writes, than the one it is compared with.
        span = (["--requests", args.mixed_requests] if args.mixed_requests
                else ["--warmup", "2s", "--duration", f"{args.mixed_s}s"])
        phase("mixed", [*conns, *zipf, "--ratio", "1:9", "--value-size", value, *span])
        phase("get", [*conns, *zipf, "--ratio", "0:1", "--duration", f"{args.get_s}s"])
        out["cumulative"] = {k: v for k, v in cumulative.items() if k in ("load", "mixed", "get")}
        out["rss_bytes_end"] = C.rss_bytes(server.pid)
        out["tier_file_bytes"] = server.tier_file.stat().st_size if server.tier_file.exists() else 0
        out["tier_file_cached_bytes_end"] = C.cached_bytes(server.tier_file)
        # tier-2 writes through the end of the mixed phase (setup + load + mixed), by the server's counters
        c = cumulative["mixed"]
        if kind.startswith("fallow"):
            out["tier2_writes_bytes"] = c["stats"]["tier2_device_bytes_written"]
            out["tier2_record_bytes"] = c["stats"]["tier2_record_bytes_written"]
        else:
            out["tier2_writes_bytes"] = c["stats"]["extstore_bytes_written"]
            out["tier2_record_bytes"] = c["stats"]["extstore_bytes_written"]
        out["io_write_bytes_to_mixed"] = c["io_write_bytes"]
    finally:
        server.stop()
        dropper.set_paths([])
    return out


def run_trace(kind: str, trace: dict, rnd: int, args, tmp: Path, bins: dict, dropper) -> dict:
    import tier2_client

    tag = f"{kind}-{trace['name']}-r{rnd}"
    C.log(f"  {tag}: replay {len(trace['keys'])} requests, {trace['object_bytes']} B objects")
    server = Server(kind, args, tmp, bins, tag)
    dropper.set_paths([server.tier_file])
    try:
        a = server.sample()
        res = tier2_client.read_through(server.mport, trace["keys"], "t:", trace["object_bytes"],
                                        procs=args.trace_procs, timeout_s=args.phase_timeout)
        b = server.sample()
        d = delta(a, b)
        res.pop("timeline", None)
        res["cpu_us_per_op"] = d["cpu_s"] / max(1, res["requests"]) * 1e6
        res["server_delta"] = d
        res["tiers"] = tier_split(kind, d)
        s = d["stats"]
        res["tier2_writes_bytes"] = s.get("tier2_device_bytes_written", s.get("extstore_bytes_written", 0))
        res["loadavg"] = C.loadavg()
        C.log(f"    {res['ops_per_sec']:9.0f} ops/s  hit {res['hit_ratio']:.3f}  GET p50 "
              f"{res['get_latency_us']['p50']:.1f} p99 {res['get_latency_us']['p99']:.1f} us  cpu "
              f"{res['cpu_us_per_op']:.2f} us/op  tier2 share of hits {res['tiers']['tier2_fraction']:.2f}  "
              f"writes {res['tier2_writes_bytes'] / 2**20:.0f} MiB")
        return {**res, "server": kind, "trace": trace["name"], "round": rnd}
    finally:
        server.stop()
        dropper.set_paths([])


def load_traces(args) -> list[dict]:
    import numpy as np
    import tier_sim

    out = []
    for spec in args.traces.split(","):
        if not spec:
            continue
        name, limit, size = spec.split(":")
        path = next(p for p in sorted(C.ROOT.parent.joinpath("shared/data/cache-traces").iterdir())
                    if tier_sim.trace_name(p) == name)
        keys = np.frombuffer(tier_sim.read_keys(path, int(limit)), dtype=np.int64).copy()
        footprint = len(np.unique(keys))
        out.append({"name": name, "file": path.name, "keys": keys, "limit": int(limit),
                    "object_bytes": int(size), "footprint": footprint,
                    "footprint_over_ram": footprint * int(size) / (args.ram_mb * 2**20)})
        C.log(f"trace {name}: {len(keys)} requests, {footprint} distinct keys, {size} B objects: "
              f"{out[-1]['footprint_over_ram']:.2f}x RAM")
    return out


# ------------------------------------------------------------------------------------------ summary


def summarize(data: dict) -> dict:
    med = C.median
    seqs = data["sequences"]
    summary = {"by_size": {}, "targets": {}, "traces": {}}
    for value in data["params"]["sizes"]:
        rows = {}
        for kind in data["params"]["servers"]:
            mine = [s for s in seqs if s["server"] == kind and s["value_bytes"] == value]
            if not mine:
                continue

            def m(fn):
                vals = []
                for s in mine:
                    try:
                        vals.append(fn(s))
                    except KeyError:
                        pass
                return med(vals)

            ph = lambda name, key: (lambda s: s["phases"][name][key])  # noqa: E731
            rows[kind] = {
                "runs": len(mine),
                "load_ops": m(ph("load", "ops_per_sec")),
                "load_cpu_us": m(ph("load", "cpu_us_per_op")),
                "mixed_ops": m(ph("mixed", "ops_per_sec")),
                "mixed_cpu_us": m(ph("mixed", "cpu_us_per_op")),
                "mixed_hit_ratio": m(ph("mixed", "hit_ratio")),
                "errors_total": sum(sum(p.get("errors") or 0 for p in s["phases"].values()) for s in mine),
                "mixed_errors": sum(s["phases"]["mixed"].get("errors") or 0 for s in mine),
                "mixed_tier2_share": m(lambda s: s["phases"]["mixed"]["tiers"]["tier2_fraction"]),
                "get_ops": m(ph("get", "ops_per_sec")),
                "get_hit_ratio": m(ph("get", "hit_ratio")),
                "get_p50": m(lambda s: s["phases"]["get"]["latency_us"]["p50"]),
                "get_p99": m(lambda s: s["phases"]["get"]["latency_us"]["p99"]),
                "get_tier2_share": m(lambda s: s["phases"]["get"]["tiers"]["tier2_fraction"]),
                "ram_p50": m(lambda s: s["phases"]["ram"]["latency_us"]["p50"]),
                "ram_p99": m(lambda s: s["phases"]["ram"]["latency_us"]["p99"]),
                "ram_tier2_share": m(lambda s: s["phases"]["ram"]["tiers"]["tier2_fraction"]),
                "ram_py_p50": m(lambda s: s["phases"]["ram-py"]["latency_us"]["p50"]),
                "ram_py_p99": m(lambda s: s["phases"]["ram-py"]["latency_us"]["p99"]),
                "ram_py_tier2_share": m(lambda s: s["phases"]["ram-py"]["tiers"]["tier2_fraction"]),
                "t2_hit_p50": m(lambda s: s["phases"]["t2"]["hit_latency_us"]["p50"]),
                "t2_p50": m(lambda s: s["phases"]["t2"]["latency_us"]["p50"]),
                "t2_p99": m(lambda s: s["phases"]["t2"]["latency_us"]["p99"]),
                "t2_hit_ratio": m(ph("t2", "hit_ratio")),
                "t2_tier2_share": m(lambda s: s["phases"]["t2"]["tiers"]["tier2_fraction"]),
                "t2_cpu_us": m(ph("t2", "cpu_us_per_op")),
                "t2_par_ops": m(ph("t2-par", "ops_per_sec")),
                "t2_par_p50": m(lambda s: s["phases"]["t2-par"]["latency_us"]["p50"]),
                "t2_par_p99": m(lambda s: s["phases"]["t2-par"]["latency_us"]["p99"]),
                "t2_par_tier2_share": m(lambda s: s["phases"]["t2-par"]["tiers"]["tier2_fraction"]),
                "t2_par_cpu_us": m(ph("t2-par", "cpu_us_per_op")),
                "t2_resp_p50": m(lambda s: s["phases"]["t2-resp"]["latency_us"]["p50"]),
                "t2_resp_par_ops": m(ph("t2-resp-par", "ops_per_sec")),
                "t2_resp_par_p50": m(lambda s: s["phases"]["t2-resp-par"]["latency_us"]["p50"]),
                "writes_mib": m(lambda s: s["tier2_writes_bytes"] / 2**20),
                "record_mib": m(lambda s: s["tier2_record_bytes"] / 2**20),
                "io_write_mib": m(lambda s: s["io_write_bytes_to_mixed"] / 2**20),
                "rss_mib": m(lambda s: s["rss_bytes_end"] / 2**20),
            }
        summary["by_size"][str(value)] = rows
        # targets, paired per round
        for kind in [k for k in data["params"]["servers"] if k.startswith("fallow")]:
            per_round = []
            for rnd in sorted({s["round"] for s in seqs}):
                f = next((s for s in seqs if s["server"] == kind and s["value_bytes"] == value
                          and s["round"] == rnd), None)
                mc = next((s for s in seqs if s["server"] == "memcached" and s["value_bytes"] == value
                           and s["round"] == rnd), None)
                fio = next((x for x in data["fio"] if x["round"] == rnd and x["bs"] == "4k"), None)
                fio56 = next((x for x in data["fio"] if x["round"] == rnd and x["bs"] == "56k"), None)
                if not (f and mc and fio):
                    continue
                ram_p50 = f["phases"]["ram-py"]["latency_us"]["p50"]
                t2 = f["phases"]["t2"]["latency_us"]["p50"]
                # fio's whole read latency (submission included), as the server's reads are timed.
                bound = 1.5 * fio_lat(fio) + ram_p50
                per_round.append({
                    "round": rnd, "t2_p50": t2, "ram_p50": ram_p50, "fio_p50": fio_lat(fio),
                    "fio_clat_p50": fio["clat_p50_us"],
                    "bound_us": bound, "t2_over_bound": t2 / bound,
                    "t2_over_bound_clat": t2 / (1.5 * fio["clat_p50_us"] + ram_p50),
                    "fio56_p50": fio_lat(fio56) if fio56 else None,
                    "bound56_us": 1.5 * fio_lat(fio56) + ram_p50 if fio56 else None,
                    "t2_over_bound56": t2 / (1.5 * fio_lat(fio56) + ram_p50) if fio56 else None,
                    "device_read_p50_bound_us": f["phases"]["t2"].get("device_read_latency_p50_bound_us"),
                    "ops_ratio": f["phases"]["mixed"]["ops_per_sec"] / mc["phases"]["mixed"]["ops_per_sec"],
                    "cpu_ratio": f["phases"]["mixed"]["cpu_us_per_op"] / mc["phases"]["mixed"]["cpu_us_per_op"],
                    "writes_ratio": f["tier2_writes_bytes"] / max(1, mc["tier2_writes_bytes"]),
                    "hit_ratio_diff": f["phases"]["mixed"]["hit_ratio"] - mc["phases"]["mixed"]["hit_ratio"],
                    "t2_par_ops_ratio": f["phases"]["t2-par"]["ops_per_sec"] / mc["phases"]["t2-par"]["ops_per_sec"],
                })
            if not per_round:
                continue
            t = {k: med([r[k] for r in per_round]) for k in per_round[0] if k != "round"}
            t["t2_over_bound"] = med([r["t2_over_bound"] for r in per_round])
            t["rounds"] = per_round
            t["latency_target_met"] = t["t2_over_bound"] <= 1.0
            t["throughput_target_met"] = t["ops_ratio"] >= 1.0 and t["writes_ratio"] <= 1.0
            summary["targets"][f"{kind}/{value}"] = t
    for trace in data.get("trace_info", []):
        rows = {}
        for kind in data["params"]["servers"]:
            mine = [r for r in data["traces"] if r["server"] == kind and r["trace"] == trace["name"]]
            if not mine:
                continue
            rows[kind] = {"runs": len(mine), "ops": med([r["ops_per_sec"] for r in mine]),
                          "cpu_us": med([r["cpu_us_per_op"] for r in mine]),
                          "hit_ratio": med([r["hit_ratio"] for r in mine]),
                          "get_p50": med([r["get_latency_us"]["p50"] for r in mine]),
                          "get_p99": med([r["get_latency_us"]["p99"] for r in mine]),
                          "tier2_share": med([r["tiers"]["tier2_fraction"] for r in mine]),
                          "writes_mib": med([r["tier2_writes_bytes"] / 2**20 for r in mine]),
                          "connection_errors": sum(r.get("connection_errors") or 0 for r in mine)}
        summary["traces"][trace["name"]] = rows
    return summary


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = data["summary"]
    servers = data["params"]["servers"]
    sizes = [str(v) for v in data["params"]["sizes"]]
    colors = {"fallow": "tab:blue", "fallow-all": "tab:cyan", "fallow-hits1": "tab:green",
              "fallow-threads": "tab:olive", "memcached": "tab:orange"}
    fig, axes = plt.subplots(2, 3, figsize=(17, 9))
    width = 0.8 / max(1, len(servers))

    def bars(ax, key, title, ylabel, per_round=None):
        for i, kind in enumerate(servers):
            xs, ys = [], []
            for j, v in enumerate(sizes):
                row = summ["by_size"].get(v, {}).get(kind)
                if row and row.get(key) is not None:
                    xs.append(j + (i - (len(servers) - 1) / 2) * width)
                    ys.append(row[key])
            ax.bar(xs, ys, width, label=kind, color=colors.get(kind))
            if per_round:
                for j, v in enumerate(sizes):
                    pts = [per_round(s) for s in data["sequences"] if s["server"] == kind
                           and str(s["value_bytes"]) == v]
                    ax.plot([j + (i - (len(servers) - 1) / 2) * width] * len(pts), pts, "k.", ms=4)
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"{int(v) // 1024} KiB values" for v in sizes])
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)

    bars(axes[0][0], "mixed_ops", "zipf 0.9, 90% GET: ops/s (median, dots: rounds)", "ops/s",
         lambda s: s["phases"]["mixed"]["ops_per_sec"])
    for i, kind in enumerate(servers):  # flag cells whose connections were closed by the server
        for j, v in enumerate(sizes):
            row = summ["by_size"].get(v, {}).get(kind)
            if row and row.get("mixed_errors"):
                axes[0][0].annotate(f"{row['mixed_errors']} conns\nclosed", (j + (i - (len(servers) - 1) / 2) * width,
                                    row["mixed_ops"]), ha="center", va="bottom", fontsize=7, color="red")
    bars(axes[0][1], "mixed_cpu_us", "server CPU per op (mixed)", "µs/op",
         lambda s: s["phases"]["mixed"]["cpu_us_per_op"])
    bars(axes[0][2], "writes_mib", "tier-2 writes through the mixed phase", "MiB",
         lambda s: s["tier2_writes_bytes"] / 2**20)
    ax = axes[1][0]
    for i, kind in enumerate(servers):
        for j, v in enumerate(sizes):
            row = summ["by_size"].get(v, {}).get(kind)
            if not row:
                continue
            x = j + (i - (len(servers) - 1) / 2) * width
            ax.bar(x, row["t2_p50"], width, color=colors.get(kind), label=kind if j == 0 else None)
            ax.bar(x, row["ram_py_p50"], width * 0.5, color="lightgray", edgecolor="k",
                   label="RAM GET p50" if (i == 0 and j == 0) else None)
    fio4 = C.median([fio_lat(f) for f in data["fio"] if f["bs"] == "4k"])
    if fio4:
        ax.axhline(fio4, color="k", ls="--", lw=1, label=f"fio 4 KiB p50 {fio4:.0f} µs")
    fio56 = C.median([fio_lat(f) for f in data["fio"] if f["bs"] == "56k"])
    if fio56:
        ax.axhline(fio56, color="gray", ls=":", lw=1, label=f"fio 56 KiB p50 {fio56:.0f} µs")
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([f"{int(v) // 1024} KiB values" for v in sizes])
    ax.set_title("GET p50, 1 client (Python), page cache dropped: tier-2 (bar), RAM (gray)")
    ax.set_ylabel("µs")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    bars(axes[1][1], "t2_par_ops", f"cold (tier-2) GETs, {data['params']['cold_procs']} client processes: ops/s", "ops/s",
         lambda s: s["phases"]["t2-par"]["ops_per_sec"])
    ax = axes[1][2]
    traces = list(summ["traces"])
    for i, kind in enumerate(servers):
        xs, ys = [], []
        for j, t in enumerate(traces):
            row = summ["traces"][t].get(kind)
            if row:
                xs.append(j + (i - (len(servers) - 1) / 2) * width)
                ys.append(row["hit_ratio"])
        ax.bar(xs, ys, width, color=colors.get(kind), label=kind)
    ax.set_xticks(range(len(traces)))
    ax.set_xticklabels(traces)
    ax.set_title("trace replay (GET, SET on miss): hit ratio")
    ax.set_ylim(0, 1)
    ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    p = data["params"]
    fig.suptitle(f"tier 2: fallow vs memcached+extstore, RAM {p['ram_mb']} MiB, file {p['file_mb']} MiB, "
                 f"data {p['data_factor']}x RAM, {data['machine']['cpus']} vCPUs, {data['machine']['date_utc'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    C.log(f"wrote {C.rel(path)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ram-mb", type=int, default=256)
    ap.add_argument("--file-mb", type=int, default=2048)
    ap.add_argument("--data-factor", type=float, default=3.0)
    ap.add_argument("--sizes", default="4096,51200")
    ap.add_argument("--zipf", type=float, default=0.9)
    ap.add_argument("--mixed-requests", type=int, default=1_200_000,
                    help="requests of the mixed phase, the same for every server (0: --mixed-s seconds "
                         "after a 2 s warm-up, as runs before 2026-11-26 03:30 UTC did)")
    ap.add_argument("--mixed-s", type=int, default=20)
    ap.add_argument("--get-s", type=int, default=10)
    ap.add_argument("--hot-s", type=int, default=3)
    ap.add_argument("--lat-keys", type=int, default=3000)
    ap.add_argument("--servers", default="fallow,fallow-all,memcached")
    ap.add_argument("--fallow-policy", default=FALLOW_POLICY,
                    help="fallow's maxmemory-policy (under the default noeviction the admission rule is ignored)")
    ap.add_argument("--mc-ext-opts", default=MC_EXT_OPTS,
                    help="memcached -o options besides ext_path")
    ap.add_argument("--load-mibps", type=float, default=80.0,
                    help="open-loop rate of the load phase in MiB/s (0: closed loop, as fast as the server goes)")
    ap.add_argument("--traces", default="cache2k-web07:0:40960,arc-P6:500000:4096",
                    help="NAME:REQUESTS(0=all):OBJECT_BYTES,...")
    ap.add_argument("--trace-procs", type=int, default=4)
    ap.add_argument("--cold-procs", type=int, default=8,
                    help="client processes of the parallel cold-read phase (t2-par)")
    ap.add_argument("--fio-runtime", type=int, default=10)
    ap.add_argument("--drop-interval", type=float, default=0.05,
                    help="seconds between page-cache drops of the tier-2 files (0: never)")
    ap.add_argument("--tmp", default="/tmp", help="where the tier-2 files and fio's file go (one filesystem)")
    ap.add_argument("--time-limit", type=float, default=2700)
    ap.add_argument("--phase-timeout", type=float, default=300)
    ap.add_argument("--quick", action="store_true", help="1 round, RAM 64 MiB, short phases, one trace")
    ap.add_argument("--build", action="store_true", help="cargo build --release first")
    ap.add_argument("--json", default=str(C.RESULTS / "tier2-server.json"))
    ap.add_argument("--plot", default=str(C.RESULTS / "tier2-server.png"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.ram_mb, args.file_mb = 1, 64, 512
        args.mixed_s, args.get_s, args.hot_s, args.fio_runtime = 5, 3, 1, 3
        args.mixed_requests = 200_000
        args.traces = "cache2k-web07:0:10240"
    C.install_guards(args.time_limit + 600)
    t_begin = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="tier2-server-", dir=args.tmp))
    C.on_exit(lambda: shutil.rmtree(tmp, ignore_errors=True))
    dropper = C.CacheDropper(args.drop_interval)
    if args.drop_interval > 0:
        dropper.start()
    sizes = [int(v) for v in args.sizes.split(",")]
    servers = args.servers.split(",")
    data = {"benchmark": "tier2-server (issue 18, benchmark 2)", "machine": C.machine(),
            "command": " ".join(["python3", "scripts/bench/tier2_server.py", *sys.argv[1:]]),
            "params": {**{k: v for k, v in vars(args).items() if k not in ("json", "plot")}, "sizes": sizes,
                       "servers": servers},
            "versions": {"memcached": C.tool_version(["memcached", "-V"]),
                         "fio": C.tool_version(["fio", "--version"])},
            "page_cache_drops": "every %.0f ms on both servers' tier-2 files" % (args.drop_interval * 1e3)
            if args.drop_interval > 0 else "off",
            "notes": [
                "memcached 1.6.18 extstore reads and writes its file through the page cache (open without O_DIRECT); "
                "the harness evicts both servers' tier-2 files from the page cache every --drop-interval s, and "
                "before every GET of the t2/ram-py phases",
                "memcached evicts (loses) items when it is written faster than it flushes and when its item-header "
                "slab class runs out of pages: on this machine a closed-loop load of 768 MiB of 4 KiB values "
                "(~65k SET/s) left 117k of 196k keys evicted; at 20k SET/s with slab_automove_window=3 none "
                "(hence the paced load and that option)",
                "fallow runs with --maxmemory-policy allkeys-lru; under the default noeviction, the admission rule "
                "is ignored (everything leaving RAM is written)",
            ],
            "sequences": [], "traces": [], "fio": [], "complete": False}
    status = 0
    try:
        data["binaries"] = C.snapshot_binaries(tmp, build=args.build)
        traces = load_traces(args)
        data["trace_info"] = [{k: v for k, v in t.items() if k != "keys"} for t in traces]
        fio_file = tmp / "fio.dat"
        per_round_est = None
        for rnd in range(args.rounds):
            t_round = time.monotonic()
            elapsed = t_round - t_begin
            if per_round_est and elapsed + per_round_est > args.time_limit:
                C.log(f"stopping before round {rnd + 1}: {elapsed:.0f} s elapsed, a round takes ~{per_round_est:.0f} s, "
                      f"limit {args.time_limit:.0f} s")
                data["truncated"] = f"{rnd} of {args.rounds} rounds"
                break
            C.log(f"round {rnd + 1}/{args.rounds} (load {C.loadavg():.2f})")
            for bs in ("4k", "56k"):
                f = C.fio_randread(fio_file, bs=bs, runtime=args.fio_runtime)
                f["round"] = rnd
                data["fio"].append(f)
                C.log(f"  fio randread {bs}: p50 {fio_lat(f):.1f} us (clat {f['clat_p50_us']:.1f}), "
                      f"mean {f['lat_mean_us']:.1f} us, "
                      f"p99 {f['lat_p99_us']:.1f} us, {f['iops']:.0f} IOPS")
            order = servers[rnd % len(servers):] + servers[: rnd % len(servers)]
            size_order = sizes if rnd % 2 == 0 else sizes[::-1]
            for value in size_order:
                for kind in order:
                    data["sequences"].append(run_sequence(kind, value, rnd, args, tmp, bins=data["binaries"],
                                                          dropper=dropper))
            for trace in traces:
                for kind in order:
                    data["traces"].append(run_trace(kind, trace, rnd, args, tmp, data["binaries"], dropper))
            per_round_est = time.monotonic() - t_round
            data["summary"] = summarize(data)
            C.write_json(Path(args.json), data)
        data["complete"] = "truncated" not in data
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - record what ran, then clean up
        import traceback

        traceback.print_exc()
        data["error"] = f"{type(e).__name__}: {e}"
        status = 1
    finally:
        dropper.halt.set()
        C.stop_all()
        data["wall_s"] = time.monotonic() - t_begin
        if data["sequences"] or data["traces"]:
            data["summary"] = summarize(data)
            C.write_json(Path(args.json), data)
            try:
                plot(data, Path(args.plot))
            except Exception as e:  # noqa: BLE001
                C.log(f"plot failed: {e}")
        shutil.rmtree(tmp, ignore_errors=True)
    print_summary(data)
    return status


def fmt(x, spec=".0f"):
    return "—" if x is None else format(x, spec)


def print_summary(data: dict) -> None:
    summ = data.get("summary")
    if not summ:
        return
    print(f"\nwall time {data['wall_s']:.0f} s; fio 4k p50 "
          f"{fmt(C.median([fio_lat(f) for f in data['fio'] if f['bs'] == '4k']), '.1f')} us, 56k p50 "
          f"{fmt(C.median([fio_lat(f) for f in data['fio'] if f['bs'] == '56k']), '.1f')} us")
    for value, rows in summ["by_size"].items():
        print(f"\n{int(value) // 1024} KiB values")
        print("server      mixed ops/s  cpu us/op  hit   GET p50  p99    RAMpy p50  p99 T2py p50  p99    "
              "T2par ops/s  writes MiB")
        for kind, r in rows.items():
            print(f"{kind:11s} {fmt(r['mixed_ops']):>11s} {fmt(r['mixed_cpu_us'], '.2f'):>9s} "
                  f"{fmt(r['mixed_hit_ratio'], '.3f'):>5s} {fmt(r['get_p50'], '.0f'):>7s} {fmt(r['get_p99'], '.0f'):>5s} "
                  f"{fmt(r['ram_py_p50'], '.1f'):>8s} {fmt(r['ram_py_p99'], '.0f'):>5s} {fmt(r['t2_p50'], '.1f'):>7s} "
                  f"{fmt(r['t2_p99'], '.0f'):>5s} {fmt(r['t2_par_ops']):>12s} {fmt(r['writes_mib']):>10s}"
                  f"  errors {r['errors_total']}")
    for key, t in summ["targets"].items():
        print(f"{key}: T2 p50 {t['t2_p50']:.1f} us vs bound {t['bound_us']:.1f} us "
              f"({'met' if t['latency_target_met'] else 'NOT met'}, x{t['t2_over_bound']:.2f}); ops ratio "
              f"{t['ops_ratio']:.2f}, writes ratio {t['writes_ratio']:.2f} "
              f"({'met' if t['throughput_target_met'] else 'NOT met'})")
    for name, rows in summ["traces"].items():
        for kind, r in rows.items():
            print(f"trace {name} {kind}: {r['ops']:.0f} ops/s hit {r['hit_ratio']:.3f} p50 {r['get_p50']:.1f} "
                  f"p99 {r['get_p99']:.1f} cpu {r['cpu_us']:.2f} tier2 {r['tier2_share']:.2f} writes "
                  f"{r['writes_mib']:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())
