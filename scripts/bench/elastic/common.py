"""Shared pieces of the elastic-memory experiments (issue 4, Mortar §6): sizes, /proc readers, an RSS poller,
servers with extra flags, the admin interface (INFO elastic / INFO tenants / ELASTIC / CONFIG SET), pipelined
fills, the zipf key chooser, read-through clients (cache in front of PostgreSQL or of a simulated backend) in
worker processes, a private PostgreSQL cluster, memory-trace loading and scaling, and the JSON/PNG/table output.

The experiment scripts beside this file (reclaim_latency, rewarm, dynamic_sizing, multihost, overhead) import it;
hog.py does not (it must stay a small standalone process).
"""
from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # scripts/bench: peers.py
import peers  # noqa: E402  (also puts tests/e2e on sys.path)
from helpers import Err, RawConn, ServerProc, free_port  # noqa: E402

ROOT = peers.ROOT
BIN = peers.BIN
log = peers.log
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
VALUE_BYTES_50KB = 50 * KiB  # Mortar's 50 KB objects: 8 GiB / 51,200 B = 167,772 objects ("about 168 thousand")
TRACE_CSV = ROOT.parent / "shared" / "data" / "memory-traces" / "alibaba2018-machine_usage-16hosts.csv"
if not TRACE_CSV.exists():
    TRACE_CSV = Path("/work/shared/data/memory-traces/alibaba2018-machine_usage-16hosts.csv")
_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB, "g": GiB, "gb": GiB,
          "gib": GiB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


# --------------------------------------------------------------------------- sizes
def parse_size(text: str | int | float) -> int:
    """'512mb', '1.5gb', '8GiB', '123' -> bytes (binary units: k = 1024). Servers are always given plain bytes."""
    if isinstance(text, (int, float)):
        return int(text)
    t = text.strip().lower()
    i = len(t)
    while i and not (t[i - 1].isdigit() or t[i - 1] == "."):
        i -= 1
    return int(float(t[:i]) * _UNITS[t[i:].strip()])


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def sizes_arg(text: str) -> list[int]:
    return [parse_size(s) for s in text.split(",") if s.strip()]


# --------------------------------------------------------------------------- /proc
def vm_rss_bytes(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KiB
    return 0


def meminfo() -> dict[str, int]:
    """/proc/meminfo in bytes."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, rest = line.split(":", 1)
            parts = rest.split()
            out[name] = int(parts[0]) * (KiB if len(parts) > 1 else 1)
    return out


class RssPoller(threading.Thread):
    """Samples a process's VmRSS every interval_s into self.samples [(monotonic s, bytes)]. Reads the status
    file with one pread each time (about 20-50 µs), so 1 ms polling is cheap."""

    def __init__(self, pid: int, interval_s: float = 0.001):
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()

    def run(self):
        fd = os.open(f"/proc/{self.pid}/status", os.O_RDONLY)
        try:
            while not self._halt.is_set():
                data = os.pread(fd, 4096, 0)
                i = data.find(b"VmRSS:")
                if i >= 0:
                    self.samples.append((time.monotonic(), int(data[i + 6:data.index(b"kB", i)]) * KiB))
                time.sleep(self.interval_s)
        except (OSError, ValueError):
            pass  # the process went away
        finally:
            os.close(fd)

    def stop(self):
        self._halt.set()
        self.join(5)

    def last_before(self, t: float) -> int:
        before = [rss for ts, rss in self.samples if ts <= t]
        return before[-1] if before else self.samples[0][1]

    def first_at_or_below(self, level: int, after: float) -> float | None:
        return next((ts for ts, rss in self.samples if ts >= after and rss <= level), None)


# --------------------------------------------------------------------------- servers
class Fallow(ServerProc):
    """A fallow server with extra command-line flags (helpers.ServerProc passes only a few of its own)."""

    def __init__(self, flags: list[str] | None = None, label: str = "fallow"):
        super().__init__("fallow")
        self.flags = [str(f) for f in (flags or [])]
        self.label = label

    def argv(self):
        return super().argv() + self.flags


def start_fallow(flags: list[str], label: str = "fallow") -> Fallow:
    s = Fallow(flags, label).start()
    log(f"# {label}: pid {s.pid}, port {s.port}, flags {' '.join(s.flags) or '(defaults)'}")
    return s


def start_redis(extra: dict | None = None) -> ServerProc:
    s = ServerProc("redis", extra).start()
    log(f"# redis-server: pid {s.pid}, port {s.port}")
    return s


def start_memcached(memory_bytes: int, extra: list[str] | None = None) -> ServerProc:
    """memcached -m memory_bytes (in MiB) -t 2 -c 4096, then `extra` arguments (e.g. ["-o",
    "ext_path=FILE:16384m"] for extstore)."""
    s = ServerProc("memcached")
    base = s.argv
    extra = [str(a) for a in (extra or [])]

    def argv(base=base):
        return base() + ["-m", str(max(1, memory_bytes // MiB)), "-t", "2", "-c", "4096"] + extra

    s.argv = argv
    s.start()
    log(f"# memcached: pid {s.pid}, port {s.mc_port}, -m {memory_bytes // MiB}" + (f" {' '.join(extra)}" if extra
                                                                                    else ""))
    return s


# --------------------------------------------------------------------------- admin interface
def _number(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


class Admin:
    """One RESP connection for the admin interface of the brief (INFO elastic/tenants, ELASTIC, TENANT, CONFIG)."""

    def __init__(self, port: int, timeout: float = 60.0):
        self.conn = RawConn(port=port, timeout=timeout)

    def cmd(self, *args, timeout: float | None = None):
        reply = self.conn.cmd(*args, timeout=timeout)
        if isinstance(reply, Err):
            raise RuntimeError(f"{' '.join(map(str, args))}: -{reply}")
        return reply

    def info(self, section: str) -> dict:
        text = self.cmd("INFO", section)
        text = text.decode() if isinstance(text, bytes) else text
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = _number(v.strip())
        return out

    def elastic(self) -> dict:
        return self.info("elastic")

    def tenants(self) -> dict[str, dict]:
        """INFO tenants: {name: {id, weight, kind, shared, resident_bytes, share, fairness, hits, ...}}."""
        out = {}
        for k, v in self.info("tenants").items():
            if k.startswith("tenant_"):
                out[k[len("tenant_"):]] = {f: _number(x) for f, x in (p.split("=", 1) for p in str(v).split(","))}
        return out

    def config_set(self, name: str, value) -> None:
        self.cmd("CONFIG", "SET", name, str(value))

    def config_get(self, name: str):
        reply = self.cmd("CONFIG", "GET", name)
        return reply[1].decode() if len(reply) >= 2 else None

    def reclaim(self, nbytes: int, path: str = "AUTO", timeout: float = 120) -> dict:
        released, objects, duration_us, used = self.cmd("ELASTIC", "RECLAIM", str(nbytes), path.upper(),
                                                        timeout=timeout)
        return dict(released_bytes=int(released), objects=int(objects), duration_us=int(duration_us),
                    path=used.decode() if isinstance(used, bytes) else str(used))

    def close(self):
        self.conn.close()


# --------------------------------------------------------------------------- fills
def _set_cmd(key: bytes, value: bytes) -> bytes:
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(key), key, len(value), value)


def pipelined_set(conn: RawConn, keys: list[bytes], value_of, batch_bytes: int = 8 * MiB) -> int:
    """SETs keys[i] = value_of(key) with batches of about batch_bytes in flight; returns the number of errors."""
    errors, i = 0, 0
    while i < len(keys):
        chunk, size = [], 0
        while i < len(keys) and (size < batch_bytes or not chunk):
            cmd = _set_cmd(keys[i], value_of(keys[i]))
            chunk.append(cmd)
            size += len(cmd)
            i += 1
        conn.send(b"".join(chunk))
        errors += sum(isinstance(conn.read_reply(timeout=60), Err) for _ in chunk)
    return errors


def missing(conn: RawConn, keys: list[bytes], batch: int = 2000) -> list[bytes]:
    """The keys of `keys` that do not exist (pipelined EXISTS)."""
    out = []
    for start in range(0, len(keys), batch):
        part = keys[start:start + batch]
        conn.send(b"".join(b"*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n" % (len(k), k) for k in part))
        out += [k for k in part if conn.read_reply(timeout=60) == 0]
    return out


def fill(port: int, keys: list[bytes], value_of, label: str, only_missing: bool = False) -> int:
    """Writes the keys (or only those missing) with a progress line every ~10%; returns the keys written."""
    with RawConn(port=port, timeout=120) as conn:
        todo = missing(conn, keys) if only_missing else keys
        step = max(1, len(todo) // 10)
        t0, errors = time.monotonic(), 0
        for start in range(0, len(todo), step):
            errors += pipelined_set(conn, todo[start:start + step], value_of)
            done = min(len(todo), start + step)
            rate = done / max(time.monotonic() - t0, 1e-9)
            log(f"#   {label}: {done:,}/{len(todo):,} keys ({done / len(todo):.0%}), {rate:,.0f} keys/s")
        if errors:
            raise RuntimeError(f"{label}: {errors} SETs failed")
    return len(todo)


def key_names(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


_PAD = bytes((i * 131 + 17) % 251 for i in range(1 << 20))


def record_value(record_id: int, value_bytes: int) -> bytes:
    """The deterministic value of a record: a header naming the record, then filler."""
    head = b"record %d|" % record_id
    return head + _PAD[: value_bytes - len(head)] if value_bytes <= len(_PAD) else head.ljust(value_bytes, b"x")


# --------------------------------------------------------------------------- key choice
class Zipf:
    """Zipf(alpha) over n records: record ids of rank 1..n are a fixed random permutation of 0..n-1 (so the
    popular records are not neighbours). alpha 0 = uniform."""

    def __init__(self, n: int, alpha: float, seed: int = 1):
        import numpy as np

        weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** alpha
        self.cdf = np.cumsum(weights) / weights.sum()
        self.perm = np.random.default_rng(seed).permutation(n)

    def sample(self, rng, k: int):
        import numpy as np

        ranks = np.minimum(np.searchsorted(self.cdf, rng.random(k)), len(self.cdf) - 1)
        return self.perm[ranks]

    def hit_rate_of_top(self, fraction: float) -> float:
        """The hit rate of a cache that holds exactly the most popular `fraction` of the records."""
        m = int(fraction * len(self.cdf))
        return float(self.cdf[m - 1]) if m > 0 else 0.0


# --------------------------------------------------------------------------- backends
class SimulatedBackend:
    """A miss costs a fixed sleep (the stated miss penalty) and returns the deterministic record value."""

    def __init__(self, penalty_ms: float, value_bytes: int):
        self.penalty_s, self.value_bytes = penalty_ms / 1000, value_bytes

    def fetch(self, record_id: int) -> bytes:
        time.sleep(self.penalty_s)
        return record_value(record_id, self.value_bytes)


class PostgresBackend:
    """SELECT v FROM rec WHERE id = %s on one connection of this process (+ an optional extra delay)."""

    def __init__(self, dsn: str, extra_ms: float = 0.0):
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.extra_s = extra_ms / 1000

    def fetch(self, record_id: int) -> bytes:
        if self.extra_s:
            time.sleep(self.extra_s)
        row = self.conn.execute("SELECT v FROM rec WHERE id = %s", (int(record_id),)).fetchone()
        return bytes(row[0])


def make_backend(spec: dict, value_bytes: int):
    if spec["kind"] == "postgres":
        return PostgresBackend(spec["dsn"], spec.get("extra_ms", 0.0))
    return SimulatedBackend(spec.get("penalty_ms", 1.0), value_bytes)


class PgCluster:
    """A private PostgreSQL cluster (Debian's postgresql) in a temporary directory, on a Unix socket only, run
    as the `postgres` user when we are root (initdb refuses root). fsync off: it is a read-mostly benchmark
    backend, rebuilt at will. Table rec(id int primary key, v bytea STORAGE EXTERNAL: stored out of line and
    uncompressed, so a read really moves the 50 KB)."""

    def __init__(self, workdir: str | None = None, shared_buffers: str = "128MB"):
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="fallow-pg-"))
        self.keep = workdir is not None
        self.data, self.sock = self.dir / "data", self.dir / "sock"
        self.port = free_port()
        self.shared_buffers = shared_buffers
        self.bin = self._bindir()
        self.user = "postgres" if os.geteuid() == 0 else None

    @staticmethod
    def _bindir() -> Path:
        found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
        if found:
            return found[-1].parent
        which = shutil.which("pg_ctl")
        if not which:
            raise RuntimeError("PostgreSQL not found: scripts/install-test-deps.sh --bench installs it")
        return Path(which).resolve().parent

    def _run(self, *argv: str):
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    @property
    def dsn(self) -> str:
        return f"host={self.sock} port={self.port} user=postgres dbname=postgres"

    def start(self) -> "PgCluster":
        self.sock.mkdir(parents=True, exist_ok=True)
        if self.user:
            shutil.chown(self.dir, self.user)
            shutil.chown(self.sock, self.user)
        if not (self.data / "PG_VERSION").exists():
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        opts = (f"-p {self.port} -k {self.sock} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
                f"-c full_page_writes=off -c shared_buffers={self.shared_buffers} -c max_connections=200")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "pg.log"), "-w", "start")
        log(f"# postgresql: {self.data} on socket {self.sock} port {self.port}")
        return self

    def load(self, records: int, value_bytes: int) -> None:
        """Creates rec with `records` rows of value_bytes (skipped when it already holds exactly that)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS rec_meta (records bigint, value_bytes int)")
            row = conn.execute("SELECT records, value_bytes FROM rec_meta").fetchone()
            if row == (records, value_bytes):
                log(f"# postgresql: rec already holds {records:,} records of {value_bytes} B")
                return
            conn.execute("DROP TABLE IF EXISTS rec")
            conn.execute("CREATE TABLE rec (id integer PRIMARY KEY, v bytea NOT NULL)")
            conn.execute("ALTER TABLE rec ALTER COLUMN v SET STORAGE EXTERNAL")
            t0 = time.monotonic()
            step = max(1, records // 10)
            with conn.cursor() as cur:
                for start in range(0, records, step):
                    with cur.copy("COPY rec (id, v) FROM STDIN") as copy:
                        for i in range(start, min(records, start + step)):
                            copy.write_row((i, record_value(i, value_bytes)))
                    done = min(records, start + step)
                    log(f"#   postgresql load: {done:,}/{records:,} records ({fmt_bytes(done * value_bytes)}, "
                        f"{done * value_bytes / MiB / (time.monotonic() - t0):.0f} MiB/s)")
            conn.execute("DELETE FROM rec_meta")
            conn.execute("INSERT INTO rec_meta VALUES (%s, %s)", (records, value_bytes))
            conn.execute("VACUUM ANALYZE rec")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        except subprocess.CalledProcessError as e:
            log(f"# postgresql stop failed: {e.stderr.decode(errors='replace')[-500:]}")
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- read-through clients
@dataclass
class ClientSpec:
    """What one client process does. Each request picks an app (uniformly) and a record of that app (zipf),
    asks the cache that owns the key (crc32 of the key over `servers`), and on a miss fetches the record from
    the backend and SETs it back (read-through). rate_per_s = 0: closed loop; else a fixed schedule
    (latency from the actual send, the schedule does not accumulate a backlog)."""

    servers: list[tuple[str, int]]  # (protocol "resp" | "memcache", port)
    records: int
    alpha: float = 0.8
    apps: int = 1
    value_bytes: int = VALUE_BYTES_50KB
    rate_per_s: float = 0.0
    backend: dict = field(default_factory=lambda: {"kind": "simulated", "penalty_ms": 1.0})
    read_through: bool = True
    start_at: float = 0.0  # time.time() at which to start (so that all processes start together)
    duration_s: float = 10.0
    seed: int = 1
    servers_file: str | None = None  # JSON [[protocol, port], ...] read at start_at (servers started later)


def key_of(app: int, record_id: int) -> bytes:
    return b"a%d:rec:%d" % (app, record_id)


class _Cache:
    """GET/SET on one server, RESP (raw socket) or memcached text (pymemcache)."""

    def __init__(self, protocol: str, port: int):
        self.protocol = protocol
        if protocol == "resp":
            self.conn = RawConn(port=port, timeout=30)
        else:
            from pymemcache.client.base import Client

            self.conn = Client(("127.0.0.1", port), connect_timeout=10, timeout=30, no_delay=True)

    def get(self, key: bytes):
        if self.protocol == "resp":
            reply = self.conn.cmd("GET", key)
            if isinstance(reply, Err):
                raise RuntimeError(f"GET: -{reply}")
            return reply
        return self.conn.get(key)

    def set(self, key: bytes, value: bytes) -> bool:
        if self.protocol == "resp":
            return not isinstance(self.conn.cmd("SET", key, value), Err)  # an OOM is counted, not fatal
        return bool(self.conn.set(key, value, noreply=False))


def client_worker(spec: ClientSpec, index: int, queue) -> None:
    """Runs in a child process; puts {t, lat, hit, server, set_errors} (numpy arrays) on the queue."""
    import numpy as np

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rng = np.random.default_rng(spec.seed * 1000 + index)
    zipf = Zipf(spec.records, spec.alpha, seed=spec.seed)
    backend = make_backend(spec.backend, spec.value_bytes)
    ts, lats, hits, owners = [], [], [], []
    set_errors = 0
    while time.time() < spec.start_at:
        time.sleep(0.001)
    servers = json.loads(Path(spec.servers_file).read_text()) if spec.servers_file else spec.servers
    caches = [_Cache(p, port) for p, port in servers]
    t_origin = time.monotonic() - (time.time() - spec.start_at)
    t_end = t_origin + spec.duration_s
    interval = 1.0 / spec.rate_per_s if spec.rate_per_s else 0.0
    next_at = time.monotonic()
    batch_ids, batch_apps, j = [], [], 0
    while True:
        now = time.monotonic()
        if now >= t_end:
            break
        if interval:
            if now < next_at:
                time.sleep(next_at - now)
            next_at = max(next_at + interval, time.monotonic() - interval)
        if j == len(batch_ids):
            batch_ids, batch_apps, j = zipf.sample(rng, 4096), rng.integers(0, spec.apps, 4096), 0
        record_id, app = int(batch_ids[j]), int(batch_apps[j])
        j += 1
        key = key_of(app, record_id)
        owner = zlib.crc32(key) % len(caches) if len(caches) > 1 else 0
        t0 = time.monotonic()
        value = caches[owner].get(key)
        hit = value is not None
        if not hit and spec.read_through:
            if not caches[owner].set(key, backend.fetch(record_id)):
                set_errors += 1
        t1 = time.monotonic()
        ts.append(t0 - t_origin)
        lats.append(t1 - t0)
        hits.append(hit)
        owners.append(owner)
    queue.put(dict(index=index, t=np.array(ts, dtype=np.float64), lat=np.array(lats, dtype=np.float64),
                   hit=np.array(hits, dtype=bool), server=np.array(owners, dtype=np.int16), set_errors=set_errors))


class Clients:
    """`workers` client processes with the same spec (own seeds), started together at start_at."""

    def __init__(self, spec: ClientSpec, workers: int, start_delay_s: float = 1.0):
        ctx = mp.get_context("spawn")
        self.queue = ctx.Queue()
        spec.start_at = time.time() + start_delay_s
        self.spec = spec
        self.start_monotonic = time.monotonic() + start_delay_s
        self.procs = [ctx.Process(target=client_worker, args=(spec, i, self.queue), daemon=True)
                      for i in range(workers)]
        for p in self.procs:
            p.start()

    def results(self) -> dict:
        """Waits for all workers; returns the merged arrays sorted by time (t relative to start_at)."""
        import numpy as np

        import queue as queue_module

        parts = []
        deadline = self.start_monotonic + self.spec.duration_s + 120
        while len(parts) < len(self.procs):
            try:
                parts.append(self.queue.get(timeout=1.0))
            except queue_module.Empty:
                failed = [p.exitcode for p in self.procs if p.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"client processes failed (exit codes {failed}) or did not finish")
        for p in self.procs:
            p.join(10)
        merged = {k: np.concatenate([p[k] for p in parts]) for k in ("t", "lat", "hit", "server")}
        order = np.argsort(merged["t"], kind="stable")
        merged = {k: v[order] for k, v in merged.items()}
        merged["set_errors"] = sum(p["set_errors"] for p in parts)
        return merged

    def stop(self):
        for p in self.procs:
            if p.is_alive():
                p.terminate()


def windows(res: dict, window_s: float, duration_s: float) -> list[dict]:
    """Per window: start time, requests, hit rate, mean and p99 response time (ms)."""
    import numpy as np

    out = []
    edges = np.arange(0.0, duration_s + 1e-9, window_s)
    idx = np.searchsorted(res["t"], edges)
    for start, lo, hi in zip(edges[:-1], idx[:-1], idx[1:]):
        lat, hit = res["lat"][lo:hi], res["hit"][lo:hi]
        n = int(hi - lo)
        out.append(dict(t=float(start), requests=n, hit_rate=float(hit.mean()) if n else None,
                        mean_ms=float(lat.mean() * 1e3) if n else None,
                        p99_ms=float(np.percentile(lat, 99) * 1e3) if n else None))
    return out


def overall(res: dict) -> dict:
    import numpy as np

    lat = res["lat"]
    if not len(lat):
        return dict(requests=0)
    return dict(requests=int(len(lat)), hit_rate=float(res["hit"].mean()), mean_ms=float(lat.mean() * 1e3),
                p50_ms=float(np.percentile(lat, 50) * 1e3), p99_ms=float(np.percentile(lat, 99) * 1e3),
                stddev_ms=float(lat.std() * 1e3), set_errors=int(res.get("set_errors", 0)))


class Sampler(threading.Thread):
    """Calls fn() every interval_s and keeps (seconds since t0, fn()) in self.samples."""

    def __init__(self, fn, interval_s: float, t0: float | None = None):
        super().__init__(daemon=True)
        self.fn, self.interval_s = fn, interval_s
        self.t0 = t0 if t0 is not None else time.monotonic()
        self.samples: list[tuple[float, dict]] = []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            try:
                self.samples.append((time.monotonic() - self.t0, self.fn()))
            except Exception as e:  # a sample that fails (server busy) is skipped, not fatal
                log(f"# sampler: {e}")
            self._halt.wait(self.interval_s)

    def stop(self):
        self._halt.set()
        self.join(10)


# --------------------------------------------------------------------------- memory traces
def load_host_trace(host: str, csv_path: Path = TRACE_CSV) -> list[tuple[float, float]]:
    """[(seconds since the host's first sample, free fraction 0..1)] of one Alibaba 2018 host, time-sorted;
    free = (100 - mem_util_percent) / 100 (the data README's definition)."""
    points = []
    with open(csv_path) as f:
        for row in csv.reader(f):
            if row[0] == host and row[3]:
                points.append((float(row[1]), (100.0 - float(row[3])) / 100.0))
    if not points:
        raise SystemExit(f"host {host} not in {csv_path}")
    points.sort()
    t0 = points[0][0]
    return [(t - t0, free) for t, free in points]


def window(points: list[tuple[float, float]], start_s: float, span_s: float | None) -> list[tuple[float, float]]:
    """The points in [start_s, start_s + span_s) (to the end when span_s is None), re-based to start at 0; the
    value in force at start_s opens the window."""
    end = float("inf") if span_s is None else start_s + span_s
    opening = [p for p in points if p[0] <= start_s][-1:] or points[:1]
    inside = [p for p in points if start_s < p[0] < end]
    return [(0.0, opening[0][1])] + [(t - start_s, v) for t, v in inside]


def host_window(host: str, args) -> list[tuple[float, float]]:
    """The host's free fractions over the window the options --trace, --trace-start-days and --trace-days
    choose (--trace-days 0 = to the trace's end)."""
    return window(load_host_trace(host, Path(args.trace)), args.trace_start_days * 86400,
                  args.trace_days * 86400 if args.trace_days else None)


def compress(points: list[tuple[float, float]], duration_s: float) -> list[tuple[float, float]]:
    """Maps the trace's time span onto [0, duration_s]."""
    span = points[-1][0] or 1.0
    return [(t * duration_s / span, v) for t, v in points]


class StepTrace:
    """A step function over [(seconds, value)]: the value of the last point at or before t (the first point's
    value before the trace starts)."""

    def __init__(self, points: list[tuple[float, float]]):
        self.times = [p[0] for p in points]
        self.values = [p[1] for p in points]

    def __call__(self, t: float) -> float:
        import bisect

        return self.values[max(bisect.bisect_right(self.times, t) - 1, 0)]

    def mean(self, t_end: float) -> float:
        """Time-weighted mean over [0, t_end]."""
        total, edges = 0.0, self.times[1:] + [t_end]
        for t0, t1, v in zip(self.times, edges, self.values):
            total += max(0.0, min(t1, t_end) - max(t0, 0.0)) * v
        return total / t_end


def write_trace_file(path: Path, points: list[tuple[float, int]], total: int | None, comment: str) -> None:
    """The `--host-memory-trace` format of the brief (also read by hog.py): `total <bytes>` then
    `<seconds> <bytes>` lines."""
    lines = [f"# {line}" for line in comment.splitlines()]
    if total:
        lines.append(f"total {total}")
    lines += [f"{t:.3f} {int(v)}" for t, v in points]
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- output
def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true", help="small scale (< 2 min): a smoke run of the experiment")
    ap.add_argument("--out", default=None, help="directory for the JSON and PNG (default docs/bench-results; "
                    "target/bench-elastic with --quick)")
    ap.add_argument("--seed", type=int, default=1)


def apply_quick(ap: argparse.ArgumentParser, args, **small) -> None:
    """With --quick, sets the small-scale values of the options the command line left at their defaults."""
    if args.quick:
        for name, value in small.items():
            if getattr(args, name) == ap.get_default(name):
                setattr(args, name, value)


def out_paths(args, name: str) -> tuple[Path, Path]:
    base = Path(args.out) if args.out else (ROOT / "target" / "bench-elastic" if args.quick
                                            else ROOT / "docs" / "bench-results")
    base.mkdir(parents=True, exist_ok=True)
    stem = f"elastic-{name}" + ("-quick" if args.quick else "")
    return base / f"{stem}.json", base / f"{stem}.png"


def write_json(path: Path, obj: dict) -> None:
    obj = dict(obj, machine=environment(), command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
               date=time.strftime("%Y-%m-%d %H:%M:%S"))
    path.write_text(json.dumps(obj, indent=1, default=_jsonable))
    log(f"# results written to {path}")


def _jsonable(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    return str(o)


def environment() -> str:
    try:
        return peers.environment()
    except (OSError, IndexError):
        return f"{os.cpu_count()} vCPUs"


def table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def plot_panels(path: Path, title: str, panels: list[dict], width: float = 11, panel_height: float = 3.0):
    """panels: [{ylabel, xlabel?, logy?, logx?, ylim?, title?, vlines?: [(x, label)],
                 series: [(label, xs, ys, {matplotlib kwargs})]}]"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 1, figsize=(width, panel_height * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        for label, xs, ys, style in panel["series"]:
            ax.plot(xs, ys, label=label, **(style or {}))
        for x, label in panel.get("vlines", []):
            ax.axvline(x, color="grey", linestyle=":", linewidth=1)
            ax.text(x, 1.0, f" {label}", transform=ax.get_xaxis_transform(), fontsize=7, color="grey",
                    va="top")
        if panel.get("logy"):
            ax.set_yscale("log")
        if panel.get("logx"):
            ax.set_xscale("log")
        if panel.get("ylim"):
            ax.set_ylim(*panel["ylim"])
        ax.set_ylabel(panel["ylabel"])
        ax.set_xlabel(panel.get("xlabel", ""))
        if panel.get("title"):
            ax.set_title(panel["title"], fontsize=9)
        ax.grid(alpha=0.3)
        if any(s[0] for s in panel["series"]):
            ax.legend(fontsize=7)
    import textwrap

    fig.suptitle("\n".join(textwrap.wrap(title, 150)), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    log(f"# plot written to {path}")


def ensure_binaries(*names: str) -> None:
    missing_bins = [n for n in names if not (BIN / n).exists()]
    if missing_bins:
        log(f"# building {', '.join(missing_bins)} (cargo build --release)")
        subprocess.run(["cargo", "build", "--release", "-p", "fallow", "-p", "fallow-bench"], cwd=ROOT,
                       check=True)


def ensure_bench_deps(postgres: bool = False) -> None:
    """redis/memcached (install-test-deps.sh), and with postgres=True PostgreSQL + psycopg (--bench)."""
    need = not all(shutil.which(t) for t in ("redis-server", "memcached"))
    if postgres:
        import importlib.util

        try:
            PgCluster._bindir()
            need = need or importlib.util.find_spec("psycopg") is None
        except RuntimeError:
            need = True
    if need:
        argv = ["bash", str(ROOT / "scripts" / "install-test-deps.sh")] + (["--bench"] if postgres else [])
        log(f"# installing dependencies: {' '.join(argv)}")
        subprocess.run(argv, check=True)
    ensure_binaries("fallow")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
