#!/usr/bin/env python3
"""SET latency past maxmemory with tier 2: the write path's tail (issue 18, docs/benchmarks.md).

One client SETs values of --value-bytes one at a time over the memcached text protocol into a server whose
RAM is --ram-mb: first --fill SETs (RAM fills, the server starts demoting to its tier-2 file), then
--measured SETs, each timed. Every 50 SETs the client pauses 0.5 ms, as a real writer would. Runs benchmark
2's servers (tier2_server.py): fallow-all (fixed mode, allkeys-lru, --tier2-admission all, so every value
leaving RAM is written) and memcached with extstore on the same sizes, one after the other, and prints the SET latency percentiles, the SETs slower
than 1 ms, and fallow's segment counters (a fresh segment means page faults under the shard lock).

  python3 scripts/bench/set_tail.py [--rounds 2] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tier2_common as C  # noqa: E402
from tier2_client import _Conn  # noqa: E402
from tier2_server import FALLOW_POLICY, MC_EXT_OPTS, Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: benchmark 2's servers: fallow with `--tier2-admission all` (every value leaving RAM is written), and
#: memcached with extstore.
SERVERS = ("fallow-all", "memcached")


def segments(server: Server) -> dict:
    """fallow's segment counters (INFO fallow)."""
    raw = C.info(server.rport, "fallow")
    return {k: v for k, v in raw.items() if k.startswith("segments_")}


def run(kind: str, args, tmp: Path) -> dict:
    bins = {"fallow": {"path": str(ROOT / "target/release/fallow")}}
    server = Server(kind, args, tmp, bins, kind)
    try:
        conn = _Conn(server.mport)
        value = b"x" * args.value_bytes
        header = b" 0 0 %d\r\n" % args.value_bytes

        def set_key(k: int) -> None:
            conn.sock.sendall(b"set k%d" % k + header + value + b"\r\n")
            reply = conn._line()
            if reply != b"STORED":
                raise RuntimeError(f"{kind}: SET k{k}: {reply!r}")

        for k in range(args.fill):
            set_key(k)
        before = segments(server) if server.rport else {}
        latencies = []
        for k in range(args.fill, args.fill + args.measured):
            started = time.perf_counter_ns()
            set_key(k)
            latencies.append((time.perf_counter_ns() - started) / 1e3)
            if k % 50 == 0:
                time.sleep(0.0005)
        after = segments(server) if server.rport else {}
        lat = np.array(latencies)
        out = {"server": kind, "sets": len(lat), "mean_us": float(lat.mean()),
               **{f"p{q}_us": float(np.percentile(lat, q)) for q in (50, 99, 99.9)},
               "over_1ms": int((lat > 1000).sum()), "rss_bytes": C.rss_bytes(server.pid)}
        if before:
            out["segments_mapped"] = after["segments_mapped_total"] - before["segments_mapped_total"]
            out["segments_reused"] = after["segments_reused_total"] - before["segments_reused_total"]
        return out
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ram-mb", type=int, default=256)
    ap.add_argument("--file-mb", type=int, default=2048)
    ap.add_argument("--value-bytes", type=int, default=40960)
    ap.add_argument("--fill", type=int, default=7000, help="SETs before the measured ones (past RAM)")
    ap.add_argument("--measured", type=int, default=8000)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    # What tier2_server.Server reads besides the sizes: benchmark 2's settings.
    args.fallow_policy, args.mc_ext_opts = FALLOW_POLICY, MC_EXT_OPTS
    C.install_guards(1800)  # children stopped and files removed on exit
    tmp = Path(tempfile.mkdtemp(prefix="set-tail-", dir=args.tmp))
    C.on_exit(lambda: shutil.rmtree(tmp, ignore_errors=True))
    results = []
    for rnd in range(args.rounds):
        for kind in (SERVERS if rnd % 2 == 0 else SERVERS[::-1]):
            row = {**run(kind, args, tmp), "round": rnd}
            results.append(row)
            extra = (f"  fresh segments {row['segments_mapped']}, reused {row['segments_reused']}"
                     if "segments_mapped" in row else "")
            print(f"round {rnd} {kind:<9} SET mean {row['mean_us']:6.1f} us  p50 {row['p50_us']:6.1f}  "
                  f"p99 {row['p99_us']:7.1f}  p99.9 {row['p99.9_us']:7.1f}  >1 ms {row['over_1ms']:3d}  "
                  f"RSS {row['rss_bytes'] / 2**20:.0f} MiB{extra}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": "python3 scripts/bench/set_tail.py " + " ".join(sys.argv[1:]),
                                         "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                         "results": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
