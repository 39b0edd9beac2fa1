"""Shared helpers for the fallow e2e suite: server processes, raw sockets, a tiny RESP client."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = os.environ.get("E2E_TARGET", "fallow").strip().lower()
assert TARGET in ("fallow", "redis", "memcached"), f"bad E2E_TARGET={TARGET!r}"

HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 5.0


def fallow_bin() -> Path:
    p = Path(os.environ.get("FALLOW_BIN", "target/release/fallow"))
    if not p.is_absolute():
        p = REPO_ROOT / p
    return p


def free_port() -> int:
    """Ask the kernel for a free TCP port (tiny race window; start() retries)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- RESP
class Err(str):
    """An error reply; str(err) is the full line without the leading '-'."""

    def __repr__(self) -> str:
        return f"Err({str.__repr__(self)})"


class Push(list):
    """RESP3 '>' push frame."""


class Attr(dict):
    pass


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        elif isinstance(a, (int, float)):
            a = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """A plain socket with bounded reads. Used for exact-error checks and protocol abuse."""

    def __init__(self, host=HOST, port=None, path=None, timeout=DEFAULT_TIMEOUT):
        if path:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(path)
        else:
            self.sock = socket.create_connection((host, port), timeout=timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""

    # -- raw byte level
    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"timed out; buffered={self.buf[:200]!r}")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise TimeoutError(f"timed out; buffered={self.buf[:200]!r}") from None
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read_until(self, expected: bytes, timeout: float | None = None) -> bytes:
        """Read until `expected` appears; returns everything up to and including it."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while expected not in self.buf:
            if not self._fill(deadline):
                raise ConnectionError(f"closed before {expected!r}; got {self.buf[:300]!r}")
        i = self.buf.index(expected) + len(expected)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n: int, timeout: float | None = None) -> bytes:
        deadline = time.monotonic() + (timeout or self.timeout)
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise ConnectionError(f"closed after {len(self.buf)}/{n} bytes")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def readline(self, timeout: float | None = None) -> bytes:
        return self.read_until(b"\r\n", timeout)[:-2]

    def read_until_closed(self, timeout: float | None = None) -> bytes:
        """Read everything until the peer closes. Raises TimeoutError if it never does."""
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            while self._fill(deadline):
                pass
        except (ConnectionResetError, BrokenPipeError):
            pass
        out, self.buf = self.buf, b""
        return out

    def is_closed(self, timeout: float = 2.0) -> bool:
        try:
            self.read_until_closed(timeout)
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- RESP level
    def read_reply(self, timeout: float | None = None):
        line = self.readline(timeout)
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return Err(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.read_exact(n + 2, timeout)
            return data[:-2]
        if t in (b"*", b"~", b">"):
            n = int(rest)
            if n < 0:
                return None
            items = [self.read_reply(timeout) for _ in range(n)]
            if t == b"~":
                return set(x if not isinstance(x, list) else tuple(x) for x in items)
            if t == b">":
                return Push(items)
            return items
        if t in (b"%", b"|"):
            n = int(rest)
            d = {}
            for _ in range(n):
                k = self.read_reply(timeout)
                d[k] = self.read_reply(timeout)
            if t == b"|":  # attribute: return the real reply that follows
                return self.read_reply(timeout)
            return d
        if t == b"_":
            return None
        if t == b",":
            return ("double", rest.decode())
        if t == b"#":
            return rest == b"t"
        if t == b"(":
            return int(rest)
        if t in (b"=", b"!"):
            data = self.read_exact(int(rest) + 2, timeout)[:-2]
            return Err(data.decode()) if t == b"!" else data
        raise AssertionError(f"bad RESP type byte in line {line!r}")

    def cmd(self, *args, timeout: float | None = None):
        self.send(encode(*args))
        return self.read_reply(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------- servers
class ServerProc:
    """One started server (fallow, redis-server or memcached) with clean teardown."""

    def __init__(self, kind: str, extra: dict | None = None):
        self.kind = kind
        self.extra = dict(extra or {})
        self.tmp = Path(tempfile.mkdtemp(prefix="fallow-test-"))
        self.unixsocket = str(self.tmp / "s.sock")
        self.port = None  # RESP port
        self.mc_port = None  # memcache port
        self.password = self.extra.get("requirepass")
        self.proc = None
        self.log = self.tmp / "server.log"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def argv(self):
        e = self.extra
        if self.kind == "fallow":
            b = fallow_bin()
            if not b.exists():
                raise RuntimeError(f"fallow binary not found at {b}; build it or set FALLOW_BIN")
            # DEBUG is refused unless enabled (Redis 7's enable-debug-command); tests use it.
            defaults = {"bind": HOST, "port": self.port, "memcache-port": self.mc_port,
                        "unixsocket": self.unixsocket, "log-level": "warn", "enable-debug-command": "yes"}
            a = [str(b)]
            # Every extra option is a fallow flag: server_factory(memcache_auth="yes") -> --memcache-auth yes;
            # one named like a default replaces it (clap refuses a flag given twice).
            for k, v in {**defaults, **e}.items():
                a += [f"--{k}", str(v)]
            return a
        if self.kind == "redis":
            a = ["redis-server", "--port", str(self.port), "--bind", HOST, "--save", "",
                 "--appendonly", "no", "--unixsocket", self.unixsocket, "--unixsocketperm", "700",
                 "--dir", str(self.tmp), "--loglevel", "warning", "--daemonize", "no",
                 "--enable-debug-command", e.get("enable-debug-command", "yes")]
            for k in ("requirepass", "maxmemory", "maxmemory-policy", "enable-protected-configs", "aclfile",
                      "enable-module-command"):
                if k in e:
                    a += [f"--{k}", str(e[k])]
            return a
        if self.kind == "memcached":
            a = ["memcached", "-p", str(self.mc_port), "-U", "0", "-l", HOST]
            if os.geteuid() == 0:
                a += ["-u", "root"]
            return a
        raise ValueError(self.kind)

    def start(self, attempts: int = 3) -> "ServerProc":
        last = None
        for _ in range(attempts):
            self.port, self.mc_port = free_port(), free_port()
            while self.mc_port == self.port:
                self.mc_port = free_port()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, cwd=self.tmp)
            try:
                self._wait_ready(10.0)
                return self
            except Exception as e:  # port race or slow start: retry with new ports
                last = e
                self.stop()
        raise RuntimeError(f"{self.kind} did not become ready: {last}\n--- log ---\n{self.logtext()}")

    def logtext(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"exited early with {self.proc.returncode}")
            try:
                if self.kind == "memcached":
                    with RawConn(port=self.mc_port, timeout=1) as c:
                        c.send(b"version\r\n")
                        if c.readline().startswith(b"VERSION"):
                            return
                else:
                    with RawConn(port=self.port, timeout=1) as c:
                        rep = c.cmd("PING")
                        # with requirepass PING answers NOAUTH: still means "up"
                        if rep == "PONG" or (isinstance(rep, Err) and rep.startswith("NOAUTH")):
                            return
            except (OSError, TimeoutError, ConnectionError):
                pass
            time.sleep(0.05)
        raise TimeoutError("not ready in time")

    def stop(self, sig=signal.SIGTERM, timeout: float = 10.0):
        """Stop the process; returns its exit code. Escalates to SIGKILL."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, timeout: float = 2.0, interval: float = 0.02):
    """Poll pred() until truthy or timeout; returns the last value."""
    deadline = time.monotonic() + timeout
    val = pred()
    while not val and time.monotonic() < deadline:
        time.sleep(interval)
        val = pred()
    return val
