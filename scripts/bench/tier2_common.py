"""Shared helpers of the tier-2 benchmarks (scripts/bench/tier2_server.py, scripts/bench/tier2_recovery.py).

Servers are started as children of the driver and tracked here; `stop_all()` runs on exit, on SIGINT/SIGTERM
and on a watchdog alarm, so no server outlives its driver. CPU per operation comes from /proc/PID/stat
(utime + stime of all the server's threads), device traffic from /proc/PID/io.
"""
from __future__ import annotations

import atexit
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "bench-results"
CLK_TCK = os.sysconf("SC_CLK_TCK")

_CHILDREN: list[subprocess.Popen] = []
_CLEANUPS: list = []


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------ processes


def spawn(argv: list[str], logfile: Path | None = None, **kw) -> subprocess.Popen:
    out = open(logfile, "ab") if logfile else subprocess.DEVNULL
    proc = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, **kw)
    if logfile:
        out.close()
    _CHILDREN.append(proc)
    return proc


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
    """Stops one child (by its pid) and reaps it; SIGKILL if it does not exit within `timeout`."""
    if proc is None:
        return None
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    if proc in _CHILDREN:
        _CHILDREN.remove(proc)
    return proc.returncode


def stop_all() -> None:
    for proc in list(_CHILDREN):
        try:
            stop(proc, signal.SIGKILL, timeout=5)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
    for fn in list(_CLEANUPS):
        try:
            fn()
        except Exception:  # noqa: BLE001
            pass
    _CLEANUPS.clear()


def on_exit(fn) -> None:
    _CLEANUPS.append(fn)


class Watchdog(Exception):
    pass


def install_guards(hard_limit_s: float) -> None:
    """Stop every child on exit and on SIGINT/SIGTERM; raise Watchdog after `hard_limit_s` seconds."""
    atexit.register(stop_all)

    def handler(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)

    def alarm(_signum, _frame):
        raise Watchdog(f"hard time limit of {hard_limit_s:.0f} s reached")

    signal.signal(signal.SIGALRM, alarm)
    signal.alarm(int(hard_limit_s))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.005)
    raise RuntimeError(f"port {port} did not open within {timeout} s")


# ------------------------------------------------------------------------------------------ /proc


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def proc_io(pid: int) -> dict:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            k, v = line.split(":")
            out[k.strip()] = int(v)
    except OSError:
        pass
    return out


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def machine() -> dict:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) * 1024
    return {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
            "cpu_model": model, "mem_total_bytes": mem,
            "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def tool_version(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip().splitlines()[0]
    except Exception:  # noqa: BLE001
        return "?"


# ------------------------------------------------------------------------------------------ binaries


def snapshot_binaries(tmp: Path, names=("fallow", "fallow-bench"), build: bool = False) -> dict:
    """Copies the release binaries into `tmp` so that a concurrent `cargo build` cannot swap them mid-run."""
    if build:
        log("cargo build --release -p fallow -p fallow-bench")
        subprocess.run(["cargo", "build", "--release", "-p", "fallow", "-p", "fallow-bench"], cwd=ROOT,
                       check=True)
    out = {}
    for name in names:
        src = ROOT / "target" / "release" / name
        if not src.exists():
            raise SystemExit(f"{src} is missing: cargo build --release -p fallow -p fallow-bench (or --build)")
        dst = tmp / name
        shutil.copy2(src, dst)
        digest = hashlib.sha256(dst.read_bytes()).hexdigest()[:16]
        mtime = dt.datetime.fromtimestamp(src.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out[name] = {"path": str(dst), "sha256_16": digest, "built_utc": mtime}
    return out


# ------------------------------------------------------------------------------------------ protocols


def _recv_until(sock: socket.socket, marker: bytes, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    buf = b""
    while not buf.endswith(marker):
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    return buf


def memcached_stats(port: int) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"stats\r\n")
        data = _recv_until(s, b"END\r\n").decode(errors="replace")
    out = {}
    for line in data.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "STAT":
            try:
                out[parts[1]] = int(parts[2])
            except ValueError:
                try:
                    out[parts[1]] = float(parts[2])
                except ValueError:
                    out[parts[1]] = parts[2]
    return out


def resp(port: int, *args, user: str | None = None, password: str | None = None, timeout: float = 30.0):
    """One RESP command on a fresh connection; returns the decoded reply (bulk strings as str)."""
    import redis  # redis-py

    r = redis.Redis(host="127.0.0.1", port=port, username=user, password=password, socket_timeout=timeout,
                    decode_responses=True)
    try:
        return r.execute_command(*args)
    finally:
        r.close()


def info(port: int, section: str, **kw) -> dict:
    text = resp(port, "INFO", section, **kw)
    if isinstance(text, dict):  # redis-py parsed it
        return text
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


# ------------------------------------------------------------------------------------------ tools


def fallow_bench(bench: str, args: list[str], json_path: Path, timeout: float = 300.0) -> dict:
    argv = [bench, "run", *map(str, args), "--quiet", "--json", str(json_path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"fallow-bench failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-2000:]}")
    return json.loads(json_path.read_text())["results"]


def fio_randread(path: Path, bs: str = "4k", runtime: int = 10, size: str = "1G") -> dict:
    """The brief's fio job (O_DIRECT random reads, one in flight, io_uring); latencies in µs. `lat` is a
    read's whole latency (submission + completion: what a program waiting for the read sees); fio's `clat`
    leaves out the submission, which with io_uring at depth 1 issues the read inline (~13 µs here)."""
    argv = ["fio", "--name=rr", f"--filename={path}", f"--size={size}", "--direct=1", "--rw=randread",
            f"--bs={bs}", "--iodepth=1", "--ioengine=io_uring", f"--runtime={runtime}", "--time_based",
            "--lat_percentiles=1", "--output-format=json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=runtime + 300)
    if proc.returncode != 0:
        raise RuntimeError(f"fio failed: {proc.stderr[-2000:]}")
    text = proc.stdout[proc.stdout.index("{"):]
    read = json.loads(text)["jobs"][0]["read"]
    pct = read["clat_ns"].get("percentile") or {}
    lat_pct = read["lat_ns"]["percentile"]
    return {"command": " ".join(argv[:-1]), "bs": bs, "iops": read["iops"],
            "lat_mean_us": read["lat_ns"]["mean"] / 1e3, "clat_mean_us": read["clat_ns"]["mean"] / 1e3,
            "lat_p50_us": lat_pct["50.000000"] / 1e3, "lat_p99_us": lat_pct["99.000000"] / 1e3,
            "clat_p50_us": pct.get("50.000000", float("nan")) / 1e3,
            "clat_p99_us": pct.get("99.000000", float("nan")) / 1e3,
            "bw_mib_s": read["bw_bytes"] / 2**20}


def fio_seqread(path: Path, size: str = "1G", bs: str = "4m") -> dict:
    """Sequential O_DIRECT read of the whole file once (the floor of a recovery that reads the file once)."""
    argv = ["fio", "--name=seq", f"--filename={path}", f"--size={size}", "--direct=1", "--rw=read",
            f"--bs={bs}", "--iodepth=4", "--ioengine=io_uring", "--output-format=json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"fio failed: {proc.stderr[-2000:]}")
    read = json.loads(proc.stdout[proc.stdout.index("{"):])["jobs"][0]["read"]
    return {"command": " ".join(argv[:-1]), "bw_mib_s": read["bw_bytes"] / 2**20,
            "ms_per_gib": 1024.0 / (read["bw_bytes"] / 2**20) * 1000.0}


def drop_file_cache(path: Path) -> None:
    """Evicts `path`'s clean pages from the page cache (starting writeback of dirty ones first)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached_bytes(path: Path) -> int | None:
    """Bytes of `path` resident in the page cache (util-linux fincore), None if unknown."""
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return int(out[0]) if out else None
    except Exception:  # noqa: BLE001
        return None


class CacheDropper(threading.Thread):
    """Every `interval` s, evicts the given files' pages from the page cache, so that a server whose
    tier-2 file is read through the page cache (memcached's extstore: buffered pread) does not get more RAM
    than the one that reads with O_DIRECT (fallow). Applied to every server alike."""

    def __init__(self, interval: float = 0.05):
        super().__init__(daemon=True)
        self.interval = interval
        self.paths: list[Path] = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.drops = 0

    def set_paths(self, paths: list[Path]) -> None:
        with self.lock:
            self.paths = list(paths)

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            with self.lock:
                paths = list(self.paths)
            for p in paths:
                drop_file_cache(p)
            self.drops += 1


# ------------------------------------------------------------------------------------------ statistics


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def pct(values, q: float):
    import numpy as np

    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values), q))


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    log(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)

