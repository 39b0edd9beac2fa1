"""A read-through cache client for the tier-2 benchmarks: GET a key over the memcached text protocol; on a
miss, SET it (the value is "fetched from the backing store"). Multi-process (one connection per process,
one request in flight), keys partitioned over the processes by `key % processes` so each key's requests keep
their order. fallow-bench cannot do SET-on-miss, hence this client.

Latency is the client-side time of each GET (send to the last byte of the reply), Python included
(about 20-40 µs per request on the development machine), so it is comparable between servers, not with
fallow-bench's figures.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
from array import array

import numpy as np

_KEYS = None  # set before fork: numpy int64 array of the whole sequence


class _Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 2]
                return line
            self._fill()

    def get(self, key: bytes) -> bool:
        self.sock.sendall(b"get " + key + b"\r\n")
        line = self._line()
        if line == b"END":
            return False
        if not line.startswith(b"VALUE "):
            raise RuntimeError(f"unexpected reply to get: {line[:80]!r}")
        n = int(line.split()[3])
        while len(self.buf) < n + 7:
            self._fill()
        if bytes(self.buf[n: n + 7]) != b"\r\nEND\r\n":
            raise RuntimeError("malformed VALUE reply")
        del self.buf[: n + 7]
        return True

    def resp_get(self, key: bytes) -> bool:
        self.sock.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n" % len(key) + key + b"\r\n")
        line = self._line()
        if line == b"$-1" or line == b"_":
            return False
        if not line.startswith(b"$"):
            raise RuntimeError(f"unexpected reply to GET: {line[:80]!r}")
        n = int(line[1:])
        while len(self.buf) < n + 2:
            self._fill()
        del self.buf[: n + 2]
        return True

    def set(self, key: bytes, value: bytes) -> bool:
        self.sock.sendall(b"set " + key + b" 0 0 %d\r\n" % len(value) + value + b"\r\n")
        return self._line() == b"STORED"


def _worker(index: int, procs: int, port: int, prefix: bytes, value_size: int, duration_s: float,
            start, queue, record_latency: bool, opts: dict) -> None:
    try:
        _work(index, procs, port, prefix, value_size, duration_s, start, queue, record_latency, opts)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        queue.put({"index": index, "error": f"{type(e).__name__}: {e}"})


def _work(index: int, procs: int, port: int, prefix: bytes, value_size: int, duration_s: float,
          start, queue, record_latency: bool, opts: dict) -> None:
    keys = _KEYS
    if procs == 1:
        mine = keys
    elif opts["partition"] == "key":
        mine = keys[keys % procs == index]
    else:
        mine = keys[index::procs]
    value = os.urandom(max(1, value_size))
    set_on_miss = opts["set_on_miss"]
    prefixes = [p.encode() for p in opts.get("prefixes") or []]
    by_prefix = [array("q") for _ in prefixes]
    conn = _Conn(port)
    get = conn.resp_get if opts["protocol"] == "resp" else conn.get
    drop_fd = os.open(opts["drop_path"], os.O_RDONLY) if opts["drop_path"] else None
    lat_hit = array("q")
    lat_miss = array("q")
    buckets: dict[int, list[int]] = {}
    hits = misses = sets = set_errors = conn_errors = 0
    first_error = None
    clock = time.perf_counter_ns
    start.wait()
    begin = time.monotonic()
    deadline = begin + duration_s if duration_s > 0 else None
    n = len(mine)
    i = 0
    while True:
        if deadline is None:
            if i >= n:
                break
        elif (i & 63) == 0 and time.monotonic() >= deadline:
            break
        k = int(mine[i % n])
        if prefixes:  # interleaved key sets: k encodes (number, prefix index)
            which = k % len(prefixes)
            key = prefixes[which] + b"%d" % (k // len(prefixes))
        else:
            key = prefix + b"%d" % k
        i += 1
        if drop_fd is not None:  # the page cache holds none of the tier-2 file (not timed)
            os.posix_fadvise(drop_fd, 0, 0, os.POSIX_FADV_DONTNEED)
        a = clock()
        try:
            hit = get(key)
        except (ConnectionError, OSError) as e:  # the server closed it: count, reconnect, go on
            conn_errors += 1
            if first_error is None:
                first_error = f"{type(e).__name__}: {e}"
            if conn_errors > 1000:
                raise
            time.sleep(0.01)
            conn = _Conn(port)
            get = conn.resp_get if opts["protocol"] == "resp" else conn.get
            continue
        b = clock()
        second = int(time.monotonic() - begin)
        bucket = buckets.get(second)
        if bucket is None:
            bucket = buckets[second] = [0, 0]
        if prefixes:
            by_prefix[which].append(b - a if hit else -(b - a))
        if hit:
            hits += 1
            bucket[0] += 1
            if record_latency:
                lat_hit.append(b - a)
        else:
            misses += 1
            bucket[1] += 1
            if record_latency:
                lat_miss.append(b - a)
            if set_on_miss:
                sets += 1
                try:
                    if not conn.set(key, value):
                        set_errors += 1
                except (ConnectionError, OSError) as e:
                    conn_errors += 1
                    if first_error is None:
                        first_error = f"{type(e).__name__}: {e}"
                    time.sleep(0.01)
                    conn = _Conn(port)
                    get = conn.resp_get if opts["protocol"] == "resp" else conn.get
    end = time.monotonic()
    queue.put({"index": index, "hits": hits, "misses": misses, "sets": sets, "set_errors": set_errors,
               "conn_errors": conn_errors, "first_error": first_error,
               "by_prefix": [a.tobytes() for a in by_prefix],
               "begin": begin, "end": end, "buckets": buckets,
               "lat_hit": lat_hit.tobytes(), "lat_miss": lat_miss.tobytes()})


def read_through(port: int, keys: np.ndarray, prefix: str, value_size: int, procs: int = 4,
                 duration_s: float = 0.0, record_latency: bool = True, timeout_s: float = 900.0,
                 set_on_miss: bool = True, protocol: str = "memcache", partition: str = "key",
                 drop_path: str | None = None, prefixes: list[str] | None = None) -> dict:
    """Replays `keys` (each process its share once, or cyclically for `duration_s` seconds when > 0).

    partition "key": process i gets the keys with key % procs == i (each key's order kept); "index": every
    procs-th request. protocol "memcache" (text) or "resp" (GET only: set_on_miss must be False).
    drop_path: a file whose page cache is dropped before every GET (outside the timed part).
    prefixes: interleave several key sets in one run: key k means number k // len(prefixes) with prefix
    prefixes[k % len(prefixes)]; latencies are then also reported per prefix ("by_prefix")."""
    opts = {"set_on_miss": set_on_miss, "protocol": protocol, "partition": partition, "drop_path": drop_path,
            "prefixes": prefixes}
    global _KEYS
    _KEYS = np.asarray(keys, dtype=np.int64)
    ctx = mp.get_context("fork")
    start = ctx.Event()
    queue = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(i, procs, port, prefix.encode(), value_size, duration_s,
                                                start, queue, record_latency, opts), daemon=True)
               for i in range(procs)]
    for w in workers:
        w.start()
    time.sleep(0.2)  # every worker connected and waiting: they start together
    start.set()
    results = []
    try:
        for _ in workers:
            results.append(queue.get(timeout=timeout_s))
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
                w.join()
    _KEYS = None
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"client process failed: {errors[0]}")
    begin = min(r["begin"] for r in results)
    end = max(r["end"] for r in results)
    hits = sum(r["hits"] for r in results)
    misses = sum(r["misses"] for r in results)
    sets = sum(r["sets"] for r in results)
    lat_hit = np.concatenate([np.frombuffer(r["lat_hit"], dtype=np.int64) for r in results]) / 1e3
    lat_miss = np.concatenate([np.frombuffer(r["lat_miss"], dtype=np.int64) for r in results]) / 1e3
    lat_all = np.concatenate([lat_hit, lat_miss])
    timeline: dict[int, list[int]] = {}
    for r in results:
        for second, (h, m) in r["buckets"].items():
            t = timeline.setdefault(int(second), [0, 0])
            t[0] += h
            t[1] += m
    wall = end - begin

    def p(a, q):
        return float(np.percentile(a, q)) if len(a) else None

    by_prefix = {}
    for j, name in enumerate(prefixes or []):
        a = np.concatenate([np.frombuffer(r["by_prefix"][j], dtype=np.int64) for r in results])
        lat = np.abs(a) / 1e3
        hits_j = int((a > 0).sum())
        hit_lat = a[a > 0] / 1e3
        by_prefix[name] = {"gets": int(len(a)), "hits": hits_j, "hit_ratio": hits_j / max(1, len(a)),
                           "p50": float(np.percentile(lat, 50)) if len(a) else None,
                           "p99": float(np.percentile(lat, 99)) if len(a) else None,
                           "mean": float(lat.mean()) if len(a) else None,
                           "hit_p50": float(np.percentile(hit_lat, 50)) if len(hit_lat) else None,
                           "hit_p99": float(np.percentile(hit_lat, 99)) if len(hit_lat) else None}
    if duration_s > 0:  # the last bucket is a sliver past the deadline
        timeline = {t: v for t, v in timeline.items() if t < int(duration_s)}
    return {"processes": procs, "requests": hits + misses + sets, "gets": hits + misses, "sets": sets,
            "set_errors": sum(r["set_errors"] for r in results),
            "connection_errors": sum(r["conn_errors"] for r in results),
            "first_connection_error": next((r["first_error"] for r in results if r["first_error"]), None),
            "hits": hits, "misses": misses,
            "hit_ratio": hits / max(1, hits + misses), "wall_s": wall,
            "ops_per_sec": (hits + misses + sets) / wall if wall > 0 else None,
            "gets_per_sec": (hits + misses) / wall if wall > 0 else None,
            "get_latency_us": {"p50": p(lat_all, 50), "p99": p(lat_all, 99), "mean": float(lat_all.mean())
                               if len(lat_all) else None},
            "get_hit_latency_us": {"p50": p(lat_hit, 50), "p99": p(lat_hit, 99)}, "by_prefix": by_prefix,
            "get_miss_latency_us": {"p50": p(lat_miss, 50), "p99": p(lat_miss, 99)},
            "timeline": [{"t_s": s, "hits": h, "misses": m, "hit_ratio": h / max(1, h + m)}
                         for s, (h, m) in sorted(timeline.items())]}


def zipf_keys(n_keys: int, alpha: float, count: int, seed: int = 1) -> np.ndarray:
    """`count` draws of key ranks 0..n_keys-1 with P(rank r) ∝ 1/(r+1)^alpha (rank 0 the most popular)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.power(np.arange(1, n_keys + 1, dtype=np.float64), alpha)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    return np.searchsorted(cdf, rng.random(count)).astype(np.int64)
