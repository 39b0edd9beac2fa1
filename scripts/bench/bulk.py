#!/usr/bin/env python3
"""Bulk load and sorted export against the model's optimum (the Parallel DataSeries role of Krevat et al.).

For each size: writes sort-benchmark records with `fallow-bench gensort` (once; reused), starts a fresh fallow,
times `fallow load FILE` and `fallow dump --sorted OUT`, records server CPU seconds from /proc, checks the
dump (same size as the input, keys in order), and asks `fallow model bulk` for the optimum on this machine
(calibration file) and the efficiency = optimum / measured.

  scripts/bench/bulk.py [--sizes 1GB,4GB] [--repeats 3] [--transport tcp|unix] [--record]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402
from helpers import ServerProc  # noqa: E402

RECORD_BYTES = 100
UNITS = {"MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> int:
    for suffix, scale in UNITS.items():
        if text.upper().endswith(suffix):
            return int(float(text[: -len(suffix)]) * scale)
    return int(text)


def input_file(work: Path, size_bytes: int) -> Path:
    path = work / f"input-{size_bytes // 10**6}MB.sort"
    if not path.exists() or path.stat().st_size != size_bytes:
        peers.log(f"# gensort {size_bytes // RECORD_BYTES:,} records -> {path}")
        subprocess.run([str(peers.BIN / "fallow-bench"), "gensort", str(size_bytes // RECORD_BYTES), "--out",
                        str(path), "--quiet"], check=True)
    return path


def timed(argv, server) -> tuple[float, float]:
    cpu0 = server.cpu_seconds()
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr[-2000:]}")
    return seconds, server.cpu_seconds() - cpu0


def check_dump(path: Path, size_bytes: int):
    """Size equal to the input, and keys (first 10 bytes of each record) in non-decreasing order."""
    if path.stat().st_size != size_bytes:
        raise RuntimeError(f"dump has {path.stat().st_size} bytes, input {size_bytes}")
    previous = b""
    with path.open("rb") as f:
        while chunk := f.read(RECORD_BYTES * 100_000):
            for start in range(0, len(chunk), RECORD_BYTES):
                key = chunk[start:start + 10]
                if key < previous:
                    raise RuntimeError(f"dump out of order at byte {f.tell() - len(chunk) + start}")
                previous = key


def optimum(calibration, direction, size_bytes, transport, measured_s):
    out = subprocess.run([str(peers.BIN / "fallow"), "model", "bulk", "--calibration", str(calibration),
                          "--direction", direction, "--bytes", str(size_bytes), "--records",
                          str(size_bytes // RECORD_BYTES), "--transport", transport, "--measured-s",
                          str(measured_s), "--json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def one_run(path: Path, size_bytes: int, transport: str, check: bool):
    server = ServerProc("fallow").start()
    try:
        url = f"unix:{server.unixsocket}" if transport == "unix" else f"tcp://127.0.0.1:{server.port}"
        load_s, load_cpu = timed([str(peers.BIN / "fallow"), "load", str(path), "--server", url], server)
        out = path.with_name("dump.sort")
        dump_s, dump_cpu = timed([str(peers.BIN / "fallow"), "dump", str(out), "--sorted", "--server", url], server)
        if check:
            check_dump(out, size_bytes)
        out.unlink()
    finally:
        server.cleanup()
    return {"load": (load_s, load_cpu), "dump": (dump_s, dump_cpu)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1GB,4GB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", choices=["tcp", "unix"], default="tcp")
    ap.add_argument("--work", default=str(peers.ROOT / "target" / "bench-bulk"), help="where record files go")
    ap.add_argument("--calibration", default=str(peers.ROOT / "docs" / "calibration.json"))
    ap.add_argument("--record", action="store_true")
    args = ap.parse_args()
    peers.ensure_deps()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = ["| job | size | records | measured s (median) | MB/s | server CPU s | optimum s (bottleneck) | "
            "efficiency |", "|---|---|---|---|---|---|---|---|"]
    for size_text in args.sizes.split(","):
        size_bytes = parse_size(size_text)
        path = input_file(work, size_bytes)
        runs = []
        for rep in range(args.repeats):
            peers.log(f"# {size_text} run {rep + 1}/{args.repeats}")
            runs.append(one_run(path, size_bytes, args.transport, check=rep == 0))
            peers.log(f"#   load {runs[-1]['load'][0]:.2f} s, dump --sorted {runs[-1]['dump'][0]:.2f} s")
        for direction in ("load", "dump"):
            seconds = statistics.median(r[direction][0] for r in runs)
            cpu = statistics.median(r[direction][1] for r in runs)
            model = optimum(args.calibration, direction, size_bytes, args.transport, seconds)
            name = "fallow load" if direction == "load" else "fallow dump --sorted"
            rows.append(f"| {name} | {size_text} | {size_bytes // RECORD_BYTES:,} | {seconds:.2f} "
                        f"({', '.join(f'{r[direction][0]:.1f}' for r in runs)}) | {size_bytes / seconds / 1e6:.0f} "
                        f"| {cpu:.1f} | {model['optimum']['optimum_s']:.2f} ({model['optimum']['bottleneck']}) | "
                        f"{model['efficiency']:.0%} |")
    command = "scripts/bench/bulk.py " + " ".join(sys.argv[1:])
    note = (f"sort-benchmark records (100 B: 10-byte key, 90-byte value) from fallow-bench gensort; a fresh fallow "
            f"per run; {args.transport}; load and dump with their default connections/pipeline/batch; medians of "
            f"{args.repeats}; the first dump of each size checked (size, key order); optimum from "
            f"`fallow model bulk` on {Path(args.calibration).name}")
    text = "\n".join(rows)
    print(f"\n{note}\n{peers.environment()}\n\n{text}\n")
    if args.record:
        peers.record("bulk load and sorted export", command, note, text)


if __name__ == "__main__":
    main()
