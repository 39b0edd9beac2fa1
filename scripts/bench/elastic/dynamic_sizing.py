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

Targets (--targets, comma-separated; fallow's tier 2 is on by default, so the RAM-only ones turn it off):
  elastic             fallow elastic as above, RAM only (--tier2-size 0): the issue-4 figures
  fixed               fallow --maxmemory <minimum free> allkeys-lru, RAM only (--tier2-size 0)
  memcached           memcached -m <minimum free>
  elastic-tier2       fallow elastic as above with tier 2 (issue 18 benchmark 3): --dir <its own directory under
                      --flash-dir> --tier2-size <--tier2-bytes, default 2 x capacity>
  memcached-extstore  memcached -m <minimum free> -o ext_path=<file under --flash-dir>:<--tier2-bytes> (extstore
                      defaults otherwise). extstore writes and reads through the page cache, which on this
                      machine (far more RAM than the scaled host) would keep all of the file in RAM; with
                      --extstore-page-cache drop (the default) the script calls posix_fadvise(DONTNEED) on the
                      file every second, so that its reads go to the disk as fallow's O_DIRECT tier 2 does
                      (`keep` leaves the page cache alone). Each run reports the file's pages in the page cache
                      at its end (fincore).
--flash-dir must be on a real disk (tmpfs is refused). For the tier-2 targets the table adds the share of
requests served from RAM and from flash (fallow: INFO tier2 ram_hits/tier2_hits; memcached: stats
get_extstore less its misses), the flash bytes in use and written. memcached's cache bytes are its `bytes` stat, less extstore_bytes_used with extstore (`bytes` counts the values
on flash too). The output stem is elastic-dynamic-sizing
(elastic-dynamic-sizing-tier2 when a tier-2 target runs; --name sets it). --fallow-bin (or $FALLOW_BIN) runs
a copy of the binary, so that a rebuild of target/release during the run does not change it.

Clients: --workers processes at --rate requests/s in all; each request reads a record id (zipf 0.8 over the
records) through the cache; a miss reads the record from PostgreSQL (Debian's server, a private cluster: table of
--db-bytes of 50 KB records) and SETs it into the cache (read-through). --backend simulated replaces PostgreSQL by
a fixed miss penalty. Reported: hit rate, mean/p50/p99 response time, cache bytes and RSS over time, the ratio of
mean memory used (Mortar: 2.6x) and the change of the mean response time (Mortar: -35%).

  dynamic_sizing.py [--quick] [--host m_1934] [--capacity 12gb] [--duration-s 600] [--trace-days 1] [--db-bytes 4gb]
                    [--rate 1000] [--workers 4] [--targets elastic,fixed,memcached] [--backend postgres]
                    [--fallow-bin PATH] [--tier2-bytes 2xcapacity] [--flash-dir /tmp] [--name STEM]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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
LABELS = {"elastic": "fallow elastic", "fixed": "fallow fixed", "memcached": "memcached",
          "elastic-tier2": "fallow elastic + tier 2", "memcached-extstore": "memcached + extstore"}
COLORS = {"elastic": "#1f77b4", "fixed": "#2ca02c", "memcached": "#d62728", "elastic-tier2": "#9467bd",
          "memcached-extstore": "#ff7f0e"}
TIER2_TARGETS = ("elastic-tier2", "memcached-extstore")  # the targets with a flash tier
FALLOW_TARGETS = ("elastic", "fixed", "elastic-tier2")


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


def flash_file(target: str, args) -> Path | None:
    """The flash file of a tier-2 target (fallow: <its --dir>/tier2.dat)."""
    if target == "elastic-tier2":
        return Path(args.flash_root) / target / "tier2.dat"
    if target == "memcached-extstore":
        return Path(args.flash_root) / target / "extstore.dat"
    return None


def start_cache(target: str, host: Host, args):
    """Starts the cache for one run; returns (server, protocol, port, flags text)."""
    if target in ("memcached", "memcached-extstore"):
        extra = []
        if target == "memcached-extstore":
            path = flash_file(target, args)
            path.parent.mkdir(parents=True, exist_ok=True)
            extra = ["-o", f"ext_path={path}:{args.tier2_bytes // c.MiB}m"]
        s = c.start_memcached(args.fixed_bytes, extra)
        return s, "memcache", s.mc_port, " ".join([f"-m {args.fixed_bytes // c.MiB}"] + extra)
    if target == "fixed":
        flags = ["--maxmemory", args.fixed_bytes, "--maxmemory-policy", "allkeys-lru", "--tier2-size", 0]
        s = c.start_fallow(flags, LABELS[target])
        return s, "resp", s.port, " ".join(map(str, flags))
    # elastic: started with a reserve of all the RAM (target 0), then the reserve is set from fallow's own view
    flags = ["--memory-mode", "elastic", "--elastic-reserve", c.meminfo()["MemTotal"], "--elastic-max",
             host.capacity, "--elastic-min", "0"]
    if target == "elastic-tier2":
        tier2_dir = flash_file(target, args).parent
        tier2_dir.mkdir(parents=True, exist_ok=True)
        flags += ["--dir", tier2_dir, "--tier2-size", args.tier2_bytes]
    else:
        flags += ["--tier2-size", 0]
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


def _mc_stats(admin) -> dict:
    """memcached `stats` as {name: int or str}."""
    out = {}
    for k, v in admin.stats().items():
        k = k.decode() if isinstance(k, bytes) else str(k)
        v = v.decode() if isinstance(v, bytes) else v
        try:
            out[k] = int(v)
        except (TypeError, ValueError):
            try:
                out[k] = float(v)
            except (TypeError, ValueError):
                out[k] = v
    return out


def mc_flash_hits(stats: dict) -> int:
    """GETs answered from extstore: get_extstore less those that found nothing valid there."""
    return int(stats.get("get_extstore", 0)) - sum(int(stats.get(k, 0)) for k in (
        "miss_from_extstore", "badcrc_from_extstore", "get_aborted_extstore", "get_oom_extstore"))


def cache_sample(target: str, server, admin) -> dict:
    """The cache's bytes (memcached: its `bytes` stat; fallow: pool_resident_bytes) and, for fallow, the pool
    target and the host's available memory as the controller sees it. The tier-2 targets add the flash bytes in
    use and the server's cumulative GETs and flash hits."""
    if target in ("memcached", "memcached-extstore"):
        st = _mc_stats(admin)
        out = dict(cache=int(st["bytes"]))
        if target == "memcached-extstore":
            # `bytes` also counts the values of items whose data went to extstore: RAM is bytes less those
            flash_used = int(st.get("extstore_bytes_used", 0))
            out.update(cache=max(0, int(st["bytes"]) - flash_used), bytes_stat=int(st["bytes"]),
                       flash_used=flash_used, flash_hits=mc_flash_hits(st), gets=int(st["cmd_get"]))
        return out
    info = admin.elastic()
    out = dict(cache=int(info["pool_resident_bytes"]), target=int(info["pool_target_bytes"]),
               host_available=int(info["host_available_bytes"]))
    if target == "elastic-tier2":
        t2, stats = admin.info("tier2"), admin.info("stats")
        out.update(flash_used=int(t2["tier2_used_bytes"]), flash_hits=int(t2["tier2_hits"]),
                   gets=int(stats["keyspace_hits"]) + int(stats["keyspace_misses"]))
    return out


def final_stats(target: str, admin) -> dict:
    """The server's counters at the end of the run (fallow: INFO stats, elastic and tier2; memcached: stats)."""
    if target in ("memcached", "memcached-extstore"):
        return dict(stats=_mc_stats(admin))
    return {section: admin.info(section) for section in ("stats", "elastic", "tier2")}


def flash_summary(target: str, final: dict, requests: int) -> dict | None:
    """Flash hits, RAM hits (server-side), flash bytes used and written of a tier-2 target."""
    if target == "elastic-tier2":
        t2 = final["tier2"]
        return dict(flash_hits=int(t2["tier2_hits"]), ram_hits=int(t2["ram_hits"]),
                    flash_hit_share=int(t2["tier2_hits"]) / max(requests, 1),
                    flash_used_bytes=int(t2["tier2_used_bytes"]),
                    flash_bytes_written=int(t2["tier2_device_bytes_written"]),
                    flash_record_bytes_written=int(t2["tier2_record_bytes_written"]),
                    flash_reads=int(t2["tier2_reads"]), direct_io=t2.get("tier2_direct_io"),
                    demotions=int(t2["tier2_demotions"]), promotions=int(t2["tier2_promotions"]),
                    admissions_refused=int(t2["tier2_admissions_refused"]),
                    read_errors=int(t2["tier2_read_errors"]), write_errors=int(t2["tier2_write_errors"]),
                    lost_keys=int(t2["tier2_lost_keys"]), status=t2.get("tier2_status"))
    if target == "memcached-extstore":
        st = final["stats"]
        flash = mc_flash_hits(st)
        return dict(flash_hits=flash, ram_hits=int(st["get_hits"]) - flash,
                    flash_hit_share=flash / max(requests, 1),
                    flash_used_bytes=int(st.get("extstore_bytes_used", 0)),
                    flash_bytes_written=int(st.get("extstore_bytes_written", 0)),
                    flash_reads=int(st.get("extstore_objects_read", 0)))
    return None


class PageCacheDropper(threading.Thread):
    """posix_fadvise(DONTNEED) on a file every interval_s: its clean pages leave the page cache (and writeback
    of the dirty ones starts, so the next call drops them), so reads of it go to the disk."""

    def __init__(self, path: Path, interval_s: float = 1.0):
        super().__init__(daemon=True)
        self.path, self.interval_s = path, interval_s
        self._halt = threading.Event()
        self.calls = 0

    def run(self):
        fd = None
        while not self._halt.is_set():
            try:
                if fd is None and self.path.exists():
                    fd = os.open(self.path, os.O_RDONLY)
                if fd is not None:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    self.calls += 1
            except OSError as e:
                c.log(f"# page-cache dropper: {e}")
            self._halt.wait(self.interval_s)
        if fd is not None:
            os.close(fd)

    def stop(self):
        self._halt.set()
        self.join(10)


def page_cache_bytes(path: Path | None) -> int | None:
    """Bytes of the file in the page cache (util-linux fincore), None when unknown."""
    if not path or not path.exists() or not shutil.which("fincore"):
        return None
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                       capture_output=True, text=True)
    try:
        return int(r.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def run_target(target: str, host: Host, args, backend: dict, hog_trace: Path) -> dict:
    c.log(f"# === {LABELS[target]} ===")
    hog = HogProc(hog_trace, args.hog_step_mib)
    if not hog.ready.wait(300):
        raise RuntimeError("the hog did not reach the trace's first target")
    servers_file = hog_trace.with_name(f"servers-{target}.json")
    spec = c.ClientSpec(servers=[], records=args.records, alpha=args.alpha, value_bytes=args.value_bytes,
                        rate_per_s=args.rate / args.workers, backend=backend, duration_s=args.duration_s,
                        seed=args.seed, servers_file=str(servers_file))
    server, dropper, final, cached = None, None, {}, None
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
        if target == "memcached-extstore" and args.extstore_page_cache == "drop":
            dropper = PageCacheDropper(flash_file(target, args))
            dropper.start()
        c.log(f"# running {args.duration_s:g} s: {args.rate:g} req/s, {args.workers} client processes")
        res = clients.results()
        sampler.stop()
        if dropper:
            dropper.stop()
        hog_rc = hog.finish()
        final = final_stats(target, admin)
        cached = page_cache_bytes(flash_file(target, args))
        admin.close()
    finally:
        if dropper and dropper.is_alive():
            dropper.stop()
        if hog.proc.poll() is None:
            hog.proc.terminate()
            hog.finish()
        if server:
            log_tail = server.logtext().strip()
            if log_tail:
                c.log(f"# {LABELS[target]} log (last lines):\n{log_tail[-2000:]}")
            server.cleanup()
        if flash_file(target, args):
            shutil.rmtree(flash_file(target, args).parent, ignore_errors=True)
    samples = [(t, s) for t, s in sampler.samples if t >= 0]
    mean = lambda k: sum(s[k] for _, s in samples) / max(len(samples), 1)  # noqa: E731
    o = c.overall(res)
    out = dict(target=target, flags=flags, overall=o, windows=c.windows(res, args.window_s, args.duration_s),
               samples=samples, mean_cache_bytes=mean("cache"), mean_rss_bytes=mean("rss"), hog_rc=hog_rc,
               hog_blocked_s=(hog.reports[-1].get("blocked_s") if hog.reports else None), server_final=final,
               flash=flash_summary(target, final, o.get("requests", 0)) if final else None)
    if out["flash"] is not None:
        out["flash"].update(mean_flash_used_bytes=mean("flash_used"), page_cache_bytes_at_end=cached,
                            page_cache=(args.extstore_page_cache if target == "memcached-extstore" else "O_DIRECT"),
                            fadvise_calls=dropper.calls if dropper else None)
    return out


def _stats_client(protocol: str, port: int):
    if protocol == "resp":
        return c.Admin(port)
    from pymemcache.client.base import Client

    return Client(("127.0.0.1", port), connect_timeout=10, timeout=10)


def summarize(runs: list[dict], host: Host, args) -> tuple[str, list[str]]:
    rows = []
    any_flash = any(r.get("flash") for r in runs)
    for r in runs:
        o = r["overall"]
        row = [LABELS[r["target"]], r["flags"], f"{o['hit_rate']:.3f}"]
        if any_flash:
            f = r.get("flash")
            row.append(f"{o['hit_rate'] - f['flash_hit_share']:.3f} / {f['flash_hit_share']:.3f}" if f else
                       f"{o['hit_rate']:.3f} / -")
        row += [f"{o['mean_ms']:.2f}", f"{o['p50_ms']:.2f}", f"{o['p99_ms']:.2f}",
                c.fmt_bytes(r["mean_cache_bytes"]), c.fmt_bytes(r["mean_rss_bytes"])]
        if any_flash:
            f = r.get("flash")
            row += ([c.fmt_bytes(f["mean_flash_used_bytes"]), c.fmt_bytes(f["flash_bytes_written"])] if f else
                    ["-", "-"])
        row += [f"{o['requests'] / args.duration_s:,.0f}", o["set_errors"], r["hog_rc"]]
        rows.append(row)
    headers = ["cache", "settings", "hit rate"] + (["RAM / flash hits"] if any_flash else []) + [
        "mean ms", "p50 ms", "p99 ms", "mean cache bytes", "mean RSS"] + (
        ["mean flash used", "flash written"] if any_flash else []) + ["req/s", "SET errors", "hog exit"]
    text = c.table(headers, rows)
    lines = []
    by = {r["target"]: r for r in runs}
    if "elastic-tier2" in by:
        e = by["elastic-tier2"]
        for other in ("elastic", "memcached-extstore", "memcached", "fixed"):
            if other in by:
                o = by[other]
                rt = e["overall"]["mean_ms"] / o["overall"]["mean_ms"] - 1
                lines.append(f"- elastic + tier 2 vs {LABELS[other]}: hit rate {e['overall']['hit_rate']:.3f} vs "
                             f"{o['overall']['hit_rate']:.3f}, mean response time {rt:+.0%} "
                             f"({e['overall']['mean_ms']:.2f} vs {o['overall']['mean_ms']:.2f} ms), p99 "
                             f"{e['overall']['p99_ms']:.2f} vs {o['overall']['p99_ms']:.2f} ms, mean RAM "
                             f"{e['mean_cache_bytes'] / max(o['mean_cache_bytes'], 1):.1f}x")
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
        f = r.get("flash")
        if f and f.get("page_cache_bytes_at_end") is not None:
            lines.append(f"- {LABELS[r['target']]}: flash file pages in the page cache at the end "
                         f"{c.fmt_bytes(f['page_cache_bytes_at_end'])} ({f['page_cache']})")
        if r["hog_rc"] != 0:
            lines.append(f"- WARNING: the hog exited with {r['hog_rc']} in the {r['target']} run")
        if r["hog_blocked_s"]:
            lines.append(f"- the hog waited {r['hog_blocked_s']:.1f} s for memory in the {r['target']} run")
    return text, lines


def plot(runs: list[dict], host: Host, args, png: Path) -> None:
    xs = [i * args.duration_s / 2000 for i in range(2001)]
    mem = [("free memory of the trace (what a cache may use)", xs, [host.free(x) / c.GiB for x in xs],
            dict(color="grey", linewidth=1))]
    rt, hit, flash = [], [], []
    for r in runs:
        t = r["target"]
        mem.append((f"{LABELS[t]}: cache bytes", [s[0] for s in r["samples"]],
                    [s[1]["cache"] / c.GiB for s in r["samples"]], dict(color=COLORS[t])))
        if t in ("elastic", "elastic-tier2"):
            mem.append((f"{LABELS[t]}: pool target", [s[0] for s in r["samples"]],
                        [s[1]["target"] / c.GiB for s in r["samples"]], dict(color=COLORS[t], linestyle=":")))
        if t in TIER2_TARGETS:
            mem.append((f"{LABELS[t]}: flash used", [s[0] for s in r["samples"]],
                        [s[1].get("flash_used", 0) / c.GiB for s in r["samples"]],
                        dict(color=COLORS[t], linestyle="--")))
            xs_f, ys_f = _flash_share(r["samples"], args.window_s)
            flash.append((LABELS[t], xs_f, ys_f, dict(color=COLORS[t])))
        w = [x for x in r["windows"] if x["requests"]]
        mid = [x["t"] + args.window_s / 2 for x in w]
        rt.append((LABELS[t], mid, [x["mean_ms"] for x in w], dict(color=COLORS[t])))
        hit.append((LABELS[t], mid, [x["hit_rate"] for x in w], dict(color=COLORS[t])))
    panels = [dict(ylabel="GiB", xlabel="seconds (compressed trace time)", series=mem),
              dict(ylabel=f"mean response (ms, {args.window_s:g} s)", xlabel="seconds", series=rt),
              dict(ylabel="hit rate", xlabel="seconds", series=hit, ylim=(0, 1.02))]
    if flash:
        panels.append(dict(ylabel=f"GETs served from flash ({args.window_s:g} s)", xlabel="seconds", series=flash,
                           ylim=(0, 1.02)))
    c.plot_panels(png, f"Dynamic sizing: {host.describe(args.host)}", panels, panel_height=3.2)


def _flash_share(samples: list, window_s: float) -> tuple[list, list]:
    """The share of the server's GETs served from flash per window, from the cumulative counters sampled."""
    pts = [(t, s["flash_hits"], s["gets"]) for t, s in samples if "gets" in s]
    xs, ys, last = [], [], None
    for t, fh, g in pts:
        if last is None:
            last = (t, fh, g)
            continue
        if t - last[0] >= window_s:
            if g > last[2]:
                xs.append((t + last[0]) / 2)
                ys.append((fh - last[1]) / (g - last[2]))
            last = (t, fh, g)
    return xs, ys


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
    ap.add_argument("--fallow-bin", default=os.environ.get("FALLOW_BIN"),
                    help="the fallow binary to run (default $FALLOW_BIN, else target/release/fallow); a copy keeps "
                         "a rebuild during the run from changing it")
    ap.add_argument("--tier2-bytes", default=None,
                    help="size of fallow's tier 2 (--tier2-size) and of memcached's extstore file (default 2 x "
                         "capacity, as fallow's `auto` for --elastic-max capacity)")
    ap.add_argument("--flash-dir", default=tempfile.gettempdir(),
                    help="directory for the tier-2 / extstore files (a temporary directory is made in it; must be "
                         "a real disk, not tmpfs)")
    ap.add_argument("--extstore-page-cache", choices=["drop", "keep"], default="drop",
                    help="drop: posix_fadvise(DONTNEED) the extstore file every second so its reads go to the "
                         "disk (fallow's tier 2 is O_DIRECT); keep: leave the page cache alone")
    ap.add_argument("--name", default=None, help="output stem: elastic-<name>.json/.png (default dynamic-sizing, "
                    "dynamic-sizing-tier2 when a tier-2 target runs)")
    c.add_common_args(ap)
    args = ap.parse_args()
    c.apply_quick(ap, args, capacity="2gb", duration_s=25, db_bytes="512mb", rate=600, workers=3, window_s=2.0)
    args.capacity, args.db_bytes = c.parse_size(args.capacity), c.parse_size(args.db_bytes)
    args.records = args.db_bytes // args.value_bytes
    host = Host(args)
    args.fixed_bytes = c.parse_size(args.fixed_bytes) if args.fixed_bytes else int(host.free_min)
    args.hog_step_mib = max(8, min(64, args.capacity // c.MiB // 128))
    args.tier2_bytes = c.parse_size(args.tier2_bytes) if args.tier2_bytes else 2 * args.capacity
    targets = args.targets.split(",")
    unknown = [t for t in targets if t not in LABELS]
    if unknown:
        raise SystemExit(f"unknown targets {unknown}; known: {', '.join(LABELS)}")
    if args.fallow_bin:
        os.environ["FALLOW_BIN"] = str(Path(args.fallow_bin).resolve())  # read by helpers.fallow_bin()
        if not Path(os.environ["FALLOW_BIN"]).exists():
            raise SystemExit(f"--fallow-bin {args.fallow_bin} does not exist")
    c.ensure_bench_deps(postgres=args.backend == "postgres")
    flash_targets = [t for t in targets if t in TIER2_TARGETS]
    if flash_targets:
        fstype = _fs_type(Path(args.flash_dir))
        if fstype in ("tmpfs", "ramfs"):
            raise SystemExit(f"--flash-dir {args.flash_dir} is on {fstype}: the tier-2 files must be on a disk")
        free = shutil.disk_usage(args.flash_dir).free
        if free < args.tier2_bytes * 2.2:
            c.log(f"# WARNING: {args.flash_dir} has {c.fmt_bytes(free)} free for --tier2-bytes "
                  f"{c.fmt_bytes(args.tier2_bytes)}: fallow's file may be capped by half the free space")
        c.log(f"# flash files in {args.flash_dir} ({fstype}, {c.fmt_bytes(free)} free), {c.fmt_bytes(args.tier2_bytes)} "
              f"each")
    if any(t in FALLOW_TARGETS for t in targets):
        from helpers import fallow_bin

        c.log(f"# fallow binary: {fallow_bin()}")
    name = args.name or ("dynamic-sizing-tier2" if flash_targets else "dynamic-sizing")
    json_path, png = c.out_paths(args, name)
    c.log(f"# {host.describe(args.host)}; fixed caches: {c.fmt_bytes(args.fixed_bytes)}; hog steps of "
          f"{args.hog_step_mib} MiB")
    backend, pg = setup_backend(args)
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="fallow-dyn-") as tmp, \
                tempfile.TemporaryDirectory(prefix="fallow-dyn-flash-", dir=args.flash_dir) as flash_root:
            args.flash_root = flash_root
            hog_trace = Path(tmp) / "hog.trace"
            host.write_hog_trace(hog_trace)
            for target in targets:
                runs.append(run_target(target, host, args, backend, hog_trace))
                o = runs[-1]["overall"]
                f = runs[-1].get("flash")
                c.log(f"# {LABELS[target]}: hit rate {o['hit_rate']:.3f}, mean {o['mean_ms']:.2f} ms, "
                      f"p99 {o['p99_ms']:.2f} ms, mean cache {c.fmt_bytes(runs[-1]['mean_cache_bytes'])}, "
                      f"SET errors {o['set_errors']}" + (
                          f", flash hits {f['flash_hit_share']:.3f} of requests, flash written "
                          f"{c.fmt_bytes(f['flash_bytes_written'])}" if f else ""))
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
            f"minimum free); elastic and fixed fallow RAM only (--tier2-size 0)"
            + (f"; tier 2 / extstore files of {c.fmt_bytes(args.tier2_bytes)} on {_fs_type(Path(args.flash_dir))} "
               f"({args.flash_dir}), extstore page cache: {args.extstore_page_cache}" if flash_targets else "")
            + f"; clients: {args.workers} processes, {args.rate:g} req/s, zipf {args.alpha}, read-through "
            f"to {miss}; caches start empty; windows of {args.window_s:g} s")
    print(f"\n{note}\n{c.environment()}\n\n{text}\n\n" + "\n".join(lines) + "\n")
    c.write_json(json_path, dict(note=note, runs=runs, verdicts=lines, options=vars(args),
                                 trace=dict(host=args.host, span_days=host.span_days, compression=host.compression,
                                            free_min=host.free_min, free_mean=host.free_mean,
                                            free_max=host.free_max)))
    plot(runs, host, args, png)


def _fs_type(path: Path) -> str:
    """The file system type of the mount holding path (/proc/mounts, longest prefix)."""
    path, best = path.resolve(), ("", "?")
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1].replace("\\040", " ")
            if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best[0]):
                best = (mnt, parts[2])
    return best[1]


if __name__ == "__main__":
    main()
