#!/usr/bin/env python3
"""Tier 2 after a restart (issue 18, benchmark 4): restart time per GiB, and warm against cold restarts.

(1) Restart time. fallow --memory-mode fixed --maxmemory 256mb --tier2-size 4gb --dir D; a persistent tenant
    (`TENANT SET keep weight 100 kind persistent`, `ACL SETUSER keep on >pw ~* +@all`) is filled by writers
    authenticated as `keep` (redis-py, pipelines of 32 SETs, 2 processes) with --fill-gib GiB of 16 KiB values
    (each size on a fresh --dir: default 1 and 2 GiB). Then: 2 s for the everysec fsync, SIGKILL, the file's page
    cache dropped (a cold start), restart on the same --dir; the time from exec to the port answering PING
    (recovery runs before any listener opens) and INFO tier2 `tier2_recovery_ms` are measured --restarts times
    (SIGKILL again after each), and --verify random keys are read back as `keep` and compared byte for byte.
    fio's sequential O_DIRECT read of 1 GiB on the same filesystem gives the floor (reading the file once).

(2) Warm restart. An ephemeral workload (the default tenant, --maxmemory-policy allkeys-lru, the default
    tier2-admission frequency: values leaving RAM are written while tier 2 has room, then those read often) over 2x RAM of 4 KiB values: a
    read-through client (tier2_client.py: GET, SET on a miss, zipf 0.9, 4 processes, memcached text) runs
    --warmup-s, then 10 s measured before the stop; the server is stopped either cleanly (SIGTERM: the manifest
    of clean records is written and they are replayed at start) or killed (SIGKILL: clean records are not
    replayed), restarted on the same --dir, and the first 10 s after are measured (hit ratio per second).
    Warm and cold trials alternate, --trials each.

  python3 scripts/bench/tier2_recovery.py [--fill-gib 1,2] [--restarts 3] [--trials 3] [--quick]

Runtime: about 7 minutes with the defaults (395 s on the 2-vCPU VM); --time-limit (default 1500 s) skips what would not finish, a watchdog
kills everything at time-limit + 600 s. Temporary files go to --tmp and are removed.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tier2_common as C  # noqa: E402

VALUE_BYTES = 16 * 1024
USER, PASSWORD = "keep", "pw"


def value_of(n: int, base: bytes) -> bytes:
    return b"%016d" % n + base[16:]


def _fill_worker(port: int, start: int, stop: int, base: bytes, queue) -> None:
    import redis

    try:
        r = redis.Redis(host="127.0.0.1", port=port, username=USER, password=PASSWORD, socket_timeout=60)
        pipe = r.pipeline(transaction=False)
        for n in range(start, stop):
            pipe.set(b"p:%d" % n, value_of(n, base))
            if (n - start) % 32 == 31:
                pipe.execute()
        pipe.execute()
        queue.put(None)
    except BaseException as e:  # noqa: BLE001
        queue.put(f"{type(e).__name__}: {e}")


def fill(port: int, start: int, stop: int, base: bytes, procs: int = 2) -> float:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    bounds = [start + (stop - start) * i // procs for i in range(procs + 1)]
    workers = [ctx.Process(target=_fill_worker, args=(port, bounds[i], bounds[i + 1], base, queue), daemon=True)
               for i in range(procs)]
    t = time.monotonic()
    for w in workers:
        w.start()
    errors = [queue.get(timeout=900) for _ in workers]
    for w in workers:
        w.join(timeout=10)
    if any(errors):
        raise RuntimeError(f"fill failed: {[e for e in errors if e]}")
    return time.monotonic() - t


def ping_wait(port: int, proc, t0: float, timeout: float = 600.0) -> float:
    """Seconds from `t0` until a fresh connection gets +PONG (polled every 2 ms)."""
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"fallow exited with {proc.returncode} during recovery")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                s.settimeout(30)
                if s.recv(64).startswith(b"+PONG"):
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.002)
    raise RuntimeError("no PONG within the timeout")


class Fallow:
    def __init__(self, bins, d: Path, port: int, mport: int, extra: list[str], log: Path):
        self.argv = [bins["fallow"]["path"], "--bind", "127.0.0.1", "--port", port, "--memcache-port", mport,
                     "--unixsocket", "", "--memory-mode", "fixed", "--dir", d, *extra]
        self.port, self.mport, self.log, self.dir = port, mport, log, d
        self.proc = None

    def start(self) -> float:
        t0 = time.monotonic()
        self.proc = C.spawn(self.argv, self.log)
        ready = ping_wait(self.port, self.proc, t0)
        if self.mport:
            C.wait_port(self.mport, self.proc)
        return ready

    def stop(self, sig=signal.SIGTERM) -> float:
        t0 = time.monotonic()
        C.stop(self.proc, sig, timeout=120)
        return time.monotonic() - t0


# ------------------------------------------------------------------------------------------ (1)


def restart_time(args, bins, tmp: Path) -> dict:
    """Each size on a fresh --dir (filled from empty, then killed and restarted --restarts times): writing more
    after a restart is not measured, as fallow then refuses persistent writes at maxmemory (see the notes)."""
    out = {"steps": []}
    base = os.urandom(VALUE_BYTES)
    for gib in args.fill_gib:
        d = tmp / f"persist-{gib}"
        d.mkdir()
        port = C.free_port()
        server = Fallow(bins, d, port, 0, ["--maxmemory", "256mb", "--tier2-size", args.tier2_size_persist,
                                           "--tier2-fsync", "everysec"], tmp / f"persist-{gib}.log")
        out["argv"] = [str(a) for a in server.argv]
        server.start()
        C.resp(port, "TENANT", "SET", USER, "weight", "100", "kind", "persistent")
        C.resp(port, "ACL", "SETUSER", USER, "on", f">{PASSWORD}", "~*", "+@all")
        written = int(gib * 2**30 / VALUE_BYTES)
        C.log(f"(1) fill {written} keys ({gib} GiB of {VALUE_BYTES // 1024} KiB values) as {USER} on a fresh --dir")
        a = C.cpu_seconds(server.proc.pid)
        secs = fill(port, 0, written, base)
        cpu = C.cpu_seconds(server.proc.pid) - a
        new_keys = written
        C.log(f"    {new_keys} SETs in {secs:.1f} s: {new_keys / secs:.0f}/s, "
              f"{new_keys * VALUE_BYTES / secs / 2**20:.0f} MiB/s, server CPU {cpu / new_keys * 1e6:.1f} us/SET")
        time.sleep(2.0)  # everysec: the last second's records reach the device
        before = C.info(port, "tier2")
        step = {"gib": gib, "keys": written, "fill_s": secs, "fill_sets_per_s": new_keys / secs,
                "fill_mib_per_s": new_keys * VALUE_BYTES / secs / 2**20,
                "fill_server_cpu_us_per_set": cpu / new_keys * 1e6, "tier2_before_kill": {k: before.get(k) for k in (
                    "tier2_used_bytes", "tier2_file_bytes", "tier2_persistent_records",
                    "tier2_record_bytes_written", "tier2_device_bytes_written", "tier2_durable_lsn")},
                "restarts": []}
        for i in range(args.restarts):
            server.stop(signal.SIGKILL)
            C.drop_file_cache(d / "tier2.dat")
            ready_s = server.start()
            t2 = C.info(port, "tier2")
            rec = {"ready_s": ready_s, "tier2_recovery_ms": t2.get("tier2_recovery_ms"),
                   "recovery_records": t2.get("tier2_recovery_records"), "recovery_keys": t2.get("tier2_recovery_keys"),
                   "recovery_bytes_read": t2.get("tier2_recovery_bytes_read"),
                   "recovery_corrupt_records": t2.get("tier2_recovery_corrupt_records"),
                   "rss_bytes": C.rss_bytes(server.proc.pid)}
            # read back a sample as the tenant's user
            import redis

            r = redis.Redis(host="127.0.0.1", port=port, username=USER, password=PASSWORD, socket_timeout=60)
            sample = random.Random(i).sample(range(written), min(args.verify, written))
            bad = missing = 0
            for n in sample:
                v = r.get(b"p:%d" % n)
                if v is None:
                    missing += 1
                elif v != value_of(n, base):
                    bad += 1
            r.close()
            rec.update({"verified": len(sample), "missing": missing, "wrong": bad})
            step["restarts"].append(rec)
            gib_read = (rec["recovery_bytes_read"] or 0) / 2**30
            C.log(f"    restart {i + 1}: PONG after {ready_s * 1e3:.0f} ms, tier2_recovery_ms {rec['tier2_recovery_ms']}, "
                  f"{rec['recovery_keys']} keys, {gib_read:.2f} GiB read; {len(sample)} read back: "
                  f"{missing} missing, {bad} wrong")
        server.stop(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)
        rs = step["restarts"]
        used_gib = (step["tier2_before_kill"]["tier2_used_bytes"] or 0) / 2**30
        step["ready_ms_median"] = C.median([x["ready_s"] * 1e3 for x in rs])
        step["recovery_ms_median"] = C.median([x["tier2_recovery_ms"] for x in rs])
        step["tier2_used_gib"] = used_gib
        step["ready_ms_per_gib"] = step["ready_ms_median"] / used_gib if used_gib else None
        step["recovery_ms_per_gib"] = step["recovery_ms_median"] / used_gib if used_gib else None
        out["steps"].append(step)
    if len(out["steps"]) >= 2:
        a, b = out["steps"][0], out["steps"][-1]
        dg = b["tier2_used_gib"] - a["tier2_used_gib"]
        out["marginal_ready_ms_per_gib"] = (b["ready_ms_median"] - a["ready_ms_median"]) / dg if dg else None
        out["marginal_recovery_ms_per_gib"] = (b["recovery_ms_median"] - a["recovery_ms_median"]) / dg if dg else None
    return out


# ------------------------------------------------------------------------------------------ (2)


def warm_trial(kind: str, n: int, args, bins, tmp: Path) -> dict:
    import tier2_client

    d = tmp / f"warm-{kind}-{n}"
    d.mkdir()
    port, mport = C.free_port(), C.free_port()
    server = Fallow(bins, d, port, mport, ["--maxmemory", f"{args.ram_mb}mb", "--tier2-size", f"{args.file_mb}mb",
                                           "--maxmemory-policy", "allkeys-lru"],
                    tmp / f"warm-{kind}-{n}.log")
    keys_n = int(args.data_factor * args.ram_mb * 2**20 / args.value_bytes)
    out = {"kind": kind, "trial": n, "argv": [str(a) for a in server.argv], "keys": keys_n,
           "value_bytes": args.value_bytes}
    try:
        server.start()
        seq = tier2_client.zipf_keys(keys_n, args.zipf, 4_000_000, seed=100 + n)
        C.log(f"(2) {kind} trial {n + 1}: warm-up {args.warmup_s} s (read-through, zipf {args.zipf} over {keys_n} keys)")
        w = tier2_client.read_through(mport, seq, "w:", args.value_bytes, procs=args.procs,
                                      duration_s=args.warmup_s, record_latency=False)
        out["warmup"] = {k: w[k] for k in ("hit_ratio", "ops_per_sec", "requests", "connection_errors")}
        before_stats = C.info(port, "tier2")
        b = tier2_client.read_through(mport, seq[::-1].copy(), "w:", args.value_bytes, procs=args.procs,
                                      duration_s=args.window_s, record_latency=False)
        t2 = C.info(port, "tier2")
        out["before"] = {"hit_ratio": b["hit_ratio"], "ops_per_sec": b["ops_per_sec"], "timeline": b["timeline"],
                         "connection_errors": b["connection_errors"],
                         "tier2_hits": t2["tier2_hits"] - before_stats["tier2_hits"],
                         "ram_hits": t2["ram_hits"] - before_stats["ram_hits"]}
        out["state_before_stop"] = {k: t2.get(k) for k in ("tier2_used_bytes", "tier2_demotions",
                                                            "tier2_record_bytes_written", "tier2_device_bytes_written")}
        keyspace = C.resp(port, "DBSIZE")
        out["dbsize_before_stop"] = keyspace
        sig = signal.SIGTERM if kind == "warm" else signal.SIGKILL
        out["stop_s"] = server.stop(sig)
        C.drop_file_cache(d / "tier2.dat")
        out["manifest_present"] = (d / "tier2.clean").exists()
        out["ready_s"] = server.start()
        t2a = C.info(port, "tier2")
        out["recovery"] = {k: t2a.get(k) for k in ("tier2_recovery_ms", "tier2_recovery_records", "tier2_recovery_keys",
                                                    "tier2_recovery_bytes_read", "tier2_recovery_corrupt_records")}
        out["dbsize_after_start"] = C.resp(port, "DBSIZE")
        a = tier2_client.read_through(mport, seq[::-1].copy(), "w:", args.value_bytes, procs=args.procs,
                                      duration_s=args.window_s, record_latency=False)
        t2b = C.info(port, "tier2")
        out["after"] = {"hit_ratio": a["hit_ratio"], "ops_per_sec": a["ops_per_sec"], "timeline": a["timeline"],
                        "connection_errors": a["connection_errors"],
                        "tier2_hits": t2b["tier2_hits"] - t2a["tier2_hits"], "ram_hits": t2b["ram_hits"] - t2a["ram_hits"]}
        C.log(f"    before {out['before']['hit_ratio']:.3f} ({out['before']['ops_per_sec']:.0f} ops/s), stop "
              f"{out['stop_s']:.2f} s, ready after {out['ready_s'] * 1e3:.0f} ms, {out['recovery']['tier2_recovery_keys']} keys "
              f"recovered (dbsize {out['dbsize_before_stop']} -> {out['dbsize_after_start']}), after "
              f"{out['after']['hit_ratio']:.3f} (first s {a['timeline'][0]['hit_ratio'] if a['timeline'] else float('nan'):.3f})")
    finally:
        server.stop(signal.SIGTERM)
        shutil.rmtree(d, ignore_errors=True)
    return out


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    ax = axes[0]
    rt = data.get("restart")
    if rt:
        for step in rt["steps"]:
            xs = [step["tier2_used_gib"]] * len(step["restarts"])
            ax.plot(xs, [r["ready_s"] * 1e3 for r in step["restarts"]], "o", color="tab:blue",
                    label="exec to PONG" if step is rt["steps"][0] else None)
            ax.plot(xs, [r["tier2_recovery_ms"] for r in step["restarts"]], "x", color="tab:orange",
                    label="tier2_recovery_ms" if step is rt["steps"][0] else None)
        fio = data.get("fio_seq")
        if fio:
            top = max(s["tier2_used_gib"] for s in rt["steps"])
            ax.plot([0, top], [0, top * fio["ms_per_gib"]], "k--", lw=1,
                    label=f"fio sequential read: {fio['ms_per_gib']:.0f} ms/GiB")
        ax.set_xlabel("tier 2 in use (GiB)")
        ax.set_ylabel("ms")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.set_title("restart after kill -9: persistent tenant, 16 KiB values")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[1]
    colors = {"warm": "tab:green", "cold": "tab:red"}
    for trial in data.get("warm", []):
        if "after" not in trial:
            continue
        tb = trial["before"]["timeline"]
        ta = trial["after"]["timeline"]
        ax.plot([p["t_s"] - len(tb) + 0.5 for p in tb], [p["hit_ratio"] for p in tb], color=colors[trial["kind"]],
                alpha=0.6, marker=".")
        ax.plot([p["t_s"] + 0.5 for p in ta], [p["hit_ratio"] for p in ta], color=colors[trial["kind"]], alpha=0.6,
                marker=".", label=f"{trial['kind']} (trial {trial['trial'] + 1})")
    ax.axvline(0, color="k", lw=1)
    ax.set_xlabel("s (0 = restart; before: the 10 s before the stop)")
    ax.set_ylabel("hit ratio per second")
    ax.set_ylim(0, 1)
    ax.set_title("warm (SIGTERM) vs cold (SIGKILL) restart, zipf 0.9, data 2x RAM")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(f"fallow tier-2 recovery, {data['machine']['cpus']} vCPUs, {data['machine']['date_utc'][:10]}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    C.log(f"wrote {C.rel(path)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fill-gib", default="1,2", help="cumulative GiB of persistent data at each step")
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--verify", type=int, default=300)
    ap.add_argument("--tier2-size-persist", default="4gb")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--ram-mb", type=int, default=256)
    ap.add_argument("--file-mb", type=int, default=2048)
    ap.add_argument("--data-factor", type=float, default=2.0)
    ap.add_argument("--value-bytes", type=int, default=4096)
    ap.add_argument("--zipf", type=float, default=0.9)
    ap.add_argument("--warmup-s", type=float, default=40)
    ap.add_argument("--window-s", type=float, default=10)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--skip-restart", action="store_true")
    ap.add_argument("--skip-warm", action="store_true")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--time-limit", type=float, default=1500)
    ap.add_argument("--quick", action="store_true", help="0.25 GiB step, 1 restart, 1 trial each, RAM 64 MiB")
    ap.add_argument("--build", action="store_true")
    ap.add_argument("--json", default=str(C.RESULTS / "tier2-recovery.json"))
    ap.add_argument("--plot", default=str(C.RESULTS / "tier2-recovery.png"))
    args = ap.parse_args()
    if args.quick:
        args.fill_gib, args.restarts, args.trials, args.verify = "0.25", 1, 1, 50
        args.ram_mb, args.file_mb, args.warmup_s, args.window_s = 64, 512, 10, 5
    args.fill_gib = [float(x) for x in str(args.fill_gib).split(",")]
    C.install_guards(args.time_limit + 600)
    t_begin = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="tier2-recovery-", dir=args.tmp))
    C.on_exit(lambda: shutil.rmtree(tmp, ignore_errors=True))
    data = {"benchmark": "tier2-recovery (issue 18, benchmark 4)", "machine": C.machine(),
            "command": " ".join(["python3", "scripts/bench/tier2_recovery.py", *sys.argv[1:]]),
            "params": {k: v for k, v in vars(args).items() if k not in ("json", "plot")},
            "versions": {"fio": C.tool_version(["fio", "--version"])}, "warm": [], "complete": False,
            "notes": ["each restart-time size is filled on a fresh --dir: after a restart (kill -9 or SIGTERM) that "
                      "recovers a persistent tenant's stubs, that tenant's writes get -OOM once RAM reaches maxmemory "
                      "(demotion slices over segments of recovered stubs re-append them and count no progress)"]}
    status = 0
    try:
        data["binaries"] = C.snapshot_binaries(tmp, names=("fallow",), build=args.build)
        f = C.fio_seqread(tmp / "fio-seq.dat", size="1G")
        data["fio_seq"] = f
        C.log(f"fio sequential O_DIRECT read: {f['bw_mib_s']:.0f} MiB/s = {f['ms_per_gib']:.0f} ms/GiB")
        (tmp / "fio-seq.dat").unlink(missing_ok=True)
        if not args.skip_restart:
            data["restart"] = restart_time(args, data["binaries"], tmp)
            C.write_json(Path(args.json), data)
        if not args.skip_warm:
            per_trial = None
            for n in range(args.trials):
                for kind in (("warm", "cold") if n % 2 == 0 else ("cold", "warm")):
                    elapsed = time.monotonic() - t_begin
                    if per_trial and elapsed + per_trial > args.time_limit:
                        data["truncated"] = f"stopped at trial {n + 1} ({kind}): time limit"
                        raise StopIteration
                    t = time.monotonic()
                    data["warm"].append(warm_trial(kind, n, args, data["binaries"], tmp))
                    per_trial = time.monotonic() - t
                    C.write_json(Path(args.json), data)
        data["complete"] = True
    except StopIteration:
        C.log(data["truncated"])
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        data["error"] = f"{type(e).__name__}: {e}"
        status = 1
    finally:
        C.stop_all()
        data["wall_s"] = time.monotonic() - t_begin
        summarize(data)
        C.write_json(Path(args.json), data)
        try:
            plot(data, Path(args.plot))
        except Exception as e:  # noqa: BLE001
            C.log(f"plot failed: {e}")
        shutil.rmtree(tmp, ignore_errors=True)
    print_summary(data)
    return status


def summarize(data: dict) -> None:
    s = {}
    for kind in ("warm", "cold"):
        trials = [t for t in data.get("warm", []) if t["kind"] == kind and "after" in t]
        if not trials:
            continue
        s[kind] = {"trials": len(trials),
                   "before_hit_ratio": C.median([t["before"]["hit_ratio"] for t in trials]),
                   "after_hit_ratio": C.median([t["after"]["hit_ratio"] for t in trials]),
                   "after_first_s_hit_ratio": C.median([t["after"]["timeline"][0]["hit_ratio"] for t in trials
                                                        if t["after"]["timeline"]]),
                   "ready_ms": C.median([t["ready_s"] * 1e3 for t in trials]),
                   "recovery_ms": C.median([t["recovery"]["tier2_recovery_ms"] for t in trials]),
                   "recovered_keys": C.median([t["recovery"]["tier2_recovery_keys"] for t in trials]),
                   "dbsize_before_stop": C.median([t["dbsize_before_stop"] for t in trials]),
                   "dbsize_after_start": C.median([t["dbsize_after_start"] for t in trials]),
                   "before_ops": C.median([t["before"]["ops_per_sec"] for t in trials]),
                   "after_ops": C.median([t["after"]["ops_per_sec"] for t in trials]),
                   "connection_errors": sum(t["before"]["connection_errors"] + t["after"]["connection_errors"]
                                            for t in trials)}
        s[kind]["retained"] = (s[kind]["after_hit_ratio"] / s[kind]["before_hit_ratio"]
                               if s[kind]["before_hit_ratio"] else None)
    data["summary_warm"] = s


def print_summary(data: dict) -> None:
    print(f"\nwall time {data['wall_s']:.0f} s")
    rt = data.get("restart")
    if rt:
        for step in rt["steps"]:
            print(f"{step['tier2_used_gib']:.2f} GiB in tier 2 ({step['keys']} keys): PONG after "
                  f"{step['ready_ms_median']:.0f} ms ({step['ready_ms_per_gib']:.0f} ms/GiB), tier2_recovery_ms "
                  f"{step['recovery_ms_median']} ({step['recovery_ms_per_gib']:.0f} ms/GiB)")
        if "marginal_ready_ms_per_gib" in rt:
            print(f"marginal: {rt['marginal_ready_ms_per_gib']:.0f} ms/GiB to PONG, "
                  f"{rt['marginal_recovery_ms_per_gib']:.0f} ms/GiB recovery")
    if data.get("fio_seq"):
        print(f"fio sequential read floor: {data['fio_seq']['ms_per_gib']:.0f} ms/GiB")
    for kind, r in data.get("summary_warm", {}).items():
        print(f"{kind}: hit ratio before {r['before_hit_ratio']:.3f} -> after {r['after_hit_ratio']:.3f} (first s "
              f"{r['after_first_s_hit_ratio']:.3f}), ready {r['ready_ms']:.0f} ms, {r['recovered_keys']} keys recovered")


if __name__ == "__main__":
    sys.exit(main())
