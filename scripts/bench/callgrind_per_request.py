#!/usr/bin/env python3
"""Server instructions per request, counted by callgrind: repeatable where wall-clock time is not. Not a test.

  callgrind_per_request.py BINARY [BINARY ...] [--small 4000] [--large 12000]

For each binary and each of GET/SET of 32-byte values at pipeline 1 and 16, the server runs under
`valgrind --tool=callgrind` with one worker thread twice: once serving `--small` requests, once `--large`
(one redis-benchmark client, -r 1000; GET runs after the same SET preload both times). The difference of the
two totals divided by the difference of the request counts is the marginal cost of a request, without the
server's start-up and shutdown. Prints a markdown table, one column per binary, and the ratio of the last
to the first.
"""
from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PRELOAD_REQUESTS = 2000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, deadline_s: float = 60.0) -> None:
    started = time.monotonic()
    while time.monotonic() - started < deadline_s:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on port {port} did not start")


def bench(port: int, test: str, pipeline: int, requests: int) -> None:
    subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-t", test, "-n", str(requests),
                    "-r", "1000", "-c", "1", "-d", "32", "-P", str(pipeline), "-q"],
                   check=True, capture_output=True, timeout=600)


def instructions(binary: str, test: str, pipeline: int, requests: int) -> int:
    """Total instructions (Ir) of one server run that serves `requests` of `test`."""
    port = free_port()
    out = Path(tempfile.mkdtemp()) / "callgrind.out"
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary, "--threads", "1",
         "--port", str(port), "--memcache-port", "0", "--unixsocket", "", "--log-level", "warn",
         "--dir", str(out.parent / "data")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        if test == "get":
            bench(port, "set", 16, PRELOAD_REQUESTS)
        bench(port, test, pipeline, requests)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    totals = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    return int(totals.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--small", type=int, default=4000)
    parser.add_argument("--large", type=int, default=12000)
    args = parser.parse_args()
    print("| test | pipeline | " + " | ".join(args.binaries) + " | last/first |")
    print("|---|---|" + "---|" * (len(args.binaries) + 1))
    for test in ("get", "set"):
        for pipeline in (1, 16):
            per_request = []
            for binary in args.binaries:
                small = instructions(binary, test, pipeline, args.small)
                large = instructions(binary, test, pipeline, args.large)
                per_request.append((large - small) / (args.large - args.small))
            cells = " | ".join(f"{value:,.0f}" for value in per_request)
            print(f"| {test.upper()} | {pipeline} | {cells} | {per_request[-1] / per_request[0]:.3f} |",
                  flush=True)


if __name__ == "__main__":
    main()
