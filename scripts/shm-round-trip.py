#!/usr/bin/env python3
"""Round trips of one connection over TCP, the Unix socket and a shared-memory channel (python/fallow/shm.py),
raw RESP `GET k` with sendall/recv: median and 99th percentile in µs.

    scripts/shm-round-trip.py --port 6379 --socket /path/to/s.sock [--count 20000] [--spin-us 50 0]
"""
import argparse
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from fallow import shm  # noqa: E402

REQUEST = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"


def measure(name, connection, count):
    samples = []
    for _ in range(count):
        started = time.perf_counter_ns()
        connection.sendall(REQUEST)
        connection.recv(100)
        samples.append(time.perf_counter_ns() - started)
    samples.sort()
    print(f"{name:14} GET median {samples[count // 2] / 1000:7.2f} µs  p99 {samples[count * 99 // 100] / 1000:7.2f} µs"
          f"  ({count} round trips)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--spin-us", type=int, nargs="+", default=[50, 0])
    args = parser.parse_args()
    tcp = socket.create_connection(("127.0.0.1", args.port))
    tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    unix = socket.socket(socket.AF_UNIX)
    unix.connect(args.socket)
    measure("tcp", tcp, args.count)
    measure("unix", unix, args.count)
    for spin_us in args.spin_us:
        with shm.open_channel(args.socket, protocol="resp", spin_us=spin_us) as channel:
            measure(f"shm spin {spin_us}", channel, args.count)


if __name__ == "__main__":
    main()
