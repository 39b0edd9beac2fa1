#!/usr/bin/env python3
"""A real memory hog: allocates anonymous memory in chunks (mmap, every page written, so it is resident) and
holds a target that is either fixed (--target-bytes) or follows a trace over time (--follow-trace FILE).

  hog.py --target-bytes 1gb [--hold-s 10]          reach 1 GiB, hold it 10 s (or until SIGTERM), exit 0
  hog.py --follow-trace hog.trace [--start-signal] follow the trace's targets, exit after its last line

Trace file: the `--host-memory-trace` format of fallow (issue 4): `#` comments, an optional `total <size>` line
(ignored here), then `<seconds> <size>` lines: from that second on (since the hog's clock started) the hog holds
<size> bytes, until the next line. Sizes: plain bytes or 512mb/2gb (binary units).

It grows one --step-mib chunk at a time and shrinks by unmapping whole chunks, so what it holds is the target
rounded to a chunk. Safety: it never allocates a chunk when MemAvailable would fall below --min-available
(default 512 MiB) and says so ("blocked"), so it cannot push a shared machine into the OOM killer by itself.

With --start-signal it first allocates the trace's first target, prints a line `ready`, and starts the trace's
clock only on SIGUSR1 (so a driver can line the trace up with its own clock). SIGTERM or SIGINT: it unmaps
everything, prints its summary and exits 0. Progress lines (`hog: t=.. target=.. held=.. rss=..`) go to
stdout every --report-interval-s; --json-lines prints them as JSON objects instead.
"""
from __future__ import annotations

import argparse
import bisect
import json
import mmap
import signal
import sys
import time

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB, "g": GiB, "gb": GiB,
         "gib": GiB}
TICK_S = 0.005


def parse_size(text: str) -> int:
    t = text.strip().lower()
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    return int(float(t[:i]) * UNITS[t[i:].strip()])


def read_trace(path: str) -> list[tuple[float, int]]:
    points = []
    for raw in open(path):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("total"):
            continue
        seconds, size = line.split()
        points.append((float(seconds), parse_size(size)))
    if not points:
        raise SystemExit(f"hog: no points in {path}")
    return sorted(points)


def proc_kib(path: str, name: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0


def rss_bytes() -> int:
    return proc_kib("/proc/self/status", "VmRSS") * KiB


def mem_available_bytes() -> int:
    return proc_kib("/proc/meminfo", "MemAvailable") * KiB


class Hog:
    """Holds a list of written anonymous mappings of step bytes each."""

    def __init__(self, step_bytes: int, min_available: int):
        self.step = step_bytes
        self.min_available = min_available
        self.pattern = b"\xa5" * min(step_bytes, MiB)  # written all over each chunk: every page becomes resident
        self.chunks: list[mmap.mmap] = []
        self.blocked_s = 0.0
        self.max_held = 0

    @property
    def held(self) -> int:
        return len(self.chunks) * self.step

    def adjust(self, target: int) -> bool:
        """One step toward target (allocate or free one chunk); returns False when already there or blocked."""
        want = (target + self.step // 2) // self.step
        if len(self.chunks) < want:
            if mem_available_bytes() - self.step < self.min_available:
                return False
            chunk = mmap.mmap(-1, self.step, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            for _ in range(self.step // len(self.pattern)):
                chunk.write(self.pattern)
            self.chunks.append(chunk)
            self.max_held = max(self.max_held, self.held)
            return True
        if len(self.chunks) > want:
            self.chunks.pop().close()
            return True
        return False

    def release_all(self) -> None:
        while self.chunks:
            self.chunks.pop().close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--target-bytes", help="hold this much (e.g. 1gb)")
    what.add_argument("--follow-trace", help="follow the targets of this trace file")
    ap.add_argument("--step-mib", type=int, default=64, help="chunk size in MiB (default 64)")
    ap.add_argument("--hold-s", type=float, default=None,
                    help="after reaching --target-bytes (or the trace's last line), hold this long and exit 0 "
                         "(default: until SIGTERM for --target-bytes, 0 for a trace)")
    ap.add_argument("--start-signal", action="store_true",
                    help="allocate the first target, print 'ready', start the clock on SIGUSR1")
    ap.add_argument("--min-available", default="512mb", help="never allocate below this MemAvailable")
    ap.add_argument("--report-interval-s", type=float, default=1.0)
    ap.add_argument("--json-lines", action="store_true")
    args = ap.parse_args()

    stop = {"now": False, "started": not args.start_signal}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGINT, lambda *_: stop.update(now=True))
    signal.signal(signal.SIGUSR1, lambda *_: stop.update(started=True))

    points = read_trace(args.follow_trace) if args.follow_trace else [(0.0, parse_size(args.target_bytes))]
    times = [p[0] for p in points]
    hold_s = args.hold_s if args.hold_s is not None else (0.0 if args.follow_trace else float("inf"))
    end_s = points[-1][0] + hold_s
    hog = Hog(args.step_mib * MiB, parse_size(args.min_available))

    def report(t: float, target: int, event: str | None = None):
        rec = dict(t=round(t, 3), target=target, held=hog.held, rss=rss_bytes(), blocked_s=round(hog.blocked_s, 3))
        if event:
            rec["event"] = event
        if args.json_lines:
            print(json.dumps(rec), flush=True)
        else:
            print(f"hog: t={rec['t']:.1f}s target={target / MiB:.0f}MiB held={hog.held / MiB:.0f}MiB "
                  f"rss={rec['rss'] / MiB:.0f}MiB blocked={hog.blocked_s:.1f}s" + (f" {event}" if event else ""),
                  flush=True)

    # before the clock starts: reach the first target, then wait for SIGUSR1 when asked to
    while not stop["now"] and hog.adjust(points[0][1]):
        pass
    if args.start_signal:
        print("ready", flush=True)
        while not stop["started"] and not stop["now"]:
            time.sleep(0.01)
    t0 = time.monotonic()
    next_report = 0.0
    reached_at = None
    while not stop["now"]:
        t = time.monotonic() - t0
        target = points[max(bisect.bisect_right(times, t) - 1, 0)][1]
        tick_start = time.monotonic()
        moved = hog.adjust(target)
        want = (target + hog.step // 2) // hog.step * hog.step
        if not moved and hog.held < want:
            time.sleep(TICK_S)
            hog.blocked_s += time.monotonic() - tick_start
        elif not moved:
            time.sleep(TICK_S)
        if hog.held == want and t >= points[-1][0] and reached_at is None:
            reached_at = t
            report(t, target, "reached")
        if reached_at is not None and t - reached_at >= hold_s and t >= end_s:
            break
        if t >= next_report:
            report(t, target)
            next_report = t + args.report_interval_s
    t = time.monotonic() - t0
    report(t, hog.held, "stopping")
    hog.release_all()
    summary = dict(event="done", seconds=round(t, 3), max_held=hog.max_held, blocked_s=round(hog.blocked_s, 3),
                   rss_after=rss_bytes())
    print(json.dumps(summary) if args.json_lines else
          f"hog: done after {t:.1f}s, max held {hog.max_held / MiB:.0f}MiB, blocked {hog.blocked_s:.1f}s, "
          f"rss now {summary['rss_after'] / MiB:.0f}MiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
