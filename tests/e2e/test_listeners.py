"""Listeners: protected mode, the Unix socket (live, stale, a regular file, the shared default path and
FALLOW_SOCKET), and file descriptors (maxclients fitted to `ulimit -n`, surplus clients refused with an
error, out-of-descriptor accepts shed with an error, rate-limited warnings). Issue 16, findings 5 and 7."""
from __future__ import annotations

import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from helpers import REPO_ROOT, Err, RawConn, fallow_bin, free_port

sys.path.insert(0, str(REPO_ROOT / "python"))
import fallow  # noqa: E402

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

DENIED_PREFIX = ("DENIED fallow is running in protected mode because protected mode is enabled and no "
                 "password is set for the default user. In this mode connections are only accepted from "
                 "the loopback interface.")
TOO_MANY = b"-ERR max number of clients reached\r\n"


class Fallow:
    """A fallow process started with exactly the given flags (and environment, and limits)."""

    def __init__(self, tmp: Path, *flags, env=None, preexec_fn=None, bind_probe="127.0.0.1"):
        self.tmp = tmp
        self.port = free_port()
        self.log = tmp / f"fallow-{self.port}.log"
        argv = [str(fallow_bin()), "--port", str(self.port), "--log-level", "warn", *map(str, flags)]
        if "--memcache-port" not in flags:
            argv += ["--memcache-port", "0"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, preexec_fn=preexec_fn, cwd=tmp)
        self.host = bind_probe

    def wait_ready(self, timeout=10.0) -> "Fallow":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fallow exited with {self.proc.returncode}:\n{self.logtext()}")
            try:
                with RawConn(host=self.host, port=self.port, timeout=1) as c:
                    reply = c.cmd("PING")
                    if reply == "PONG" or (isinstance(reply, Err) and reply.startswith("NOAUTH")):
                        return self
            except (OSError, TimeoutError, ConnectionError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"fallow not ready:\n{self.logtext()}")

    def logtext(self) -> str:
        return self.log.read_text(errors="replace")

    def conn(self, **kw) -> RawConn:
        return RawConn(host=self.host, port=self.port, **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def tmp():
    path = Path(tempfile.mkdtemp(prefix="fallow-listeners-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def launch(tmp):
    started = []

    def make(*flags, ready=True, **kw) -> Fallow:
        f = Fallow(tmp, *flags, **kw)
        started.append(f)
        return f.wait_ready() if ready else f

    yield make
    for f in started:
        f.stop()


def info_field(conn: RawConn, section: str, name: str) -> str:
    text = conn.cmd("INFO", section).decode()
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1]
    raise AssertionError(f"INFO {section} has no {name}:\n{text}")


# --------------------------------------------------------------------------- protected mode
def non_loopback_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (traffic to it stays on this host)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True,
                             text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            address = fields[fields.index("inet") + 1].split("/")[0]
            if not address.startswith("127."):
                return address
    return None


@pytest.fixture
def remote_address():
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    return address


def exposed(launch, tmp, *flags):
    metrics_port = free_port()
    mc_port = free_port()
    f = launch("--bind", "0.0.0.0", "--memcache-port", mc_port, "--metrics-port", metrics_port,
               "--unixsocket", tmp / "s.sock", *flags)
    f.mc_port, f.metrics_port, f.unixsocket = mc_port, metrics_port, str(tmp / "s.sock")
    return f


def remote_resp(f: Fallow, address: str):
    """What a RESP client from `address` gets for PING: the reply, and whether the server then closed."""
    with RawConn(host=address, port=f.port, timeout=3) as c:
        c.send(b"PING\r\n")
        try:
            reply = c.read_reply(timeout=3)
        except ConnectionError:
            return None, True
        return reply, c.is_closed(timeout=0.5)


def scrape(address: str, port: int) -> bytes:
    with RawConn(host=address, port=port, timeout=3) as c:
        c.send(b"GET /metrics HTTP/1.1\r\nHost: fallow\r\n\r\n")
        return c.read_until_closed(timeout=3)


def test_protected_mode_refuses_remote_clients_on_every_listener(launch, tmp, remote_address):
    f = exposed(launch, tmp)
    reply, closed = remote_resp(f, remote_address)
    assert isinstance(reply, Err) and reply.startswith(DENIED_PREFIX), reply
    assert "'--protected-mode no'" in reply and "CONFIG SET protected-mode no" in reply
    assert closed, "a refused client is disconnected"
    with RawConn(host=remote_address, port=f.mc_port, timeout=3) as c:
        c.send(b"version\r\n")
        line = c.readline()
        assert line.startswith(b"SERVER_ERROR fallow is running in protected mode"), line
        assert c.is_closed(timeout=2)
    answer = scrape(remote_address, f.metrics_port)
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n"), answer[:200]
    assert b"protected mode" in answer
    # Loopback and the Unix socket are served.
    with f.conn() as local:
        assert local.cmd("PING") == "PONG"
        assert RawConn(path=f.unixsocket).cmd("PING") == "PONG"
        assert scrape("127.0.0.1", f.metrics_port).startswith(b"HTTP/1.1 200 OK")
        assert info_field(local, "stats", "protected_mode_rejections") == "3"
        assert local.cmd("CONFIG", "GET", "protected-mode") == [b"protected-mode", b"yes"]
    warnings = [l for l in f.logtext().splitlines() if "protected mode: bound to a non-loopback" in l]
    assert len(warnings) == 1, f.logtext()


def test_protected_mode_follows_config_and_acl_changes(launch, tmp, remote_address):
    f = exposed(launch, tmp)
    with f.conn() as local:
        assert str(local.cmd("CONFIG", "SET", "protected-mode", "maybe")).endswith(
            "argument must be 'yes' or 'no'")
        assert local.cmd("CONFIG", "SET", "protected-mode", "no") == "OK"
        assert remote_resp(f, remote_address)[0] == "PONG"
        assert local.cmd("CONFIG", "SET", "protected-mode", "yes") == "OK"
        assert str(remote_resp(f, remote_address)[0]).startswith("DENIED")
        # A password for the default user lifts it: remote clients are let in to authenticate.
        assert local.cmd("CONFIG", "SET", "requirepass", "s3cret") == "OK"
        assert str(remote_resp(f, remote_address)[0]).startswith("NOAUTH")
        assert local.cmd("CONFIG", "SET", "requirepass", "") == "OK"
        assert str(remote_resp(f, remote_address)[0]).startswith("DENIED")
        # So does one given through ACL SETUSER, and taking it away restores protection.
        assert local.cmd("ACL", "SETUSER", "default", ">pw2") == "OK"
        assert str(remote_resp(f, remote_address)[0]).startswith("NOAUTH")
        assert local.cmd("ACL", "SETUSER", "default", "nopass") == "OK"
        assert str(remote_resp(f, remote_address)[0]).startswith("DENIED")


def test_protected_mode_off_at_start_serves_remote_clients_and_warns(launch, tmp, remote_address):
    f = exposed(launch, tmp, "--protected-mode", "no")
    assert remote_resp(f, remote_address)[0] == "PONG"
    lines = [l for l in f.logtext().splitlines() if "protected mode off and no requirepass" in l]
    assert len(lines) == 1, f.logtext()


def test_loopback_bind_does_not_warn(launch, tmp):
    f = launch("--bind", "127.0.0.1", "--unixsocket", tmp / "s.sock")
    assert "non-loopback" not in f.logtext()


# --------------------------------------------------------------------------- Unix socket
def test_second_server_refuses_a_live_socket(launch, tmp):
    path = tmp / "s.sock"
    first = launch("--unixsocket", path)
    # Its own --dir: the data directory's lock would refuse it before the socket is tried.
    second = launch("--unixsocket", path, "--dir", tmp / "second-data", ready=False)
    assert second.proc.wait(10) != 0
    assert f"another server is listening on {path}; use --unixsocket to choose another path" in \
        second.logtext(), second.logtext()
    with RawConn(path=str(path)) as c:
        assert c.cmd("PING") == "PONG", "the first server keeps its socket and its clients"
    assert first.proc.poll() is None


def test_stale_socket_is_replaced(launch, tmp):
    path = tmp / "s.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays; nobody listens: connection refused
    assert path.is_socket()
    launch("--unixsocket", path)
    with RawConn(path=str(path)) as c:
        assert c.cmd("PING") == "PONG"


def test_a_regular_file_is_never_removed(launch, tmp):
    path = tmp / "s.sock"
    path.write_bytes(b"precious")
    f = launch("--unixsocket", path, ready=False)
    assert f.proc.wait(10) != 0
    assert "exists and is not a socket" in f.logtext(), f.logtext()
    assert path.read_bytes() == b"precious"


def test_default_socket_path_directory_and_permissions(launch, tmp):
    runtime = tmp / "runtime"
    runtime.mkdir(mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(runtime))
    env.pop("FALLOW_SOCKET", None)
    f = launch(env=env)
    expected = runtime / "fallow" / f"fallow-{f.port}.sock"
    assert fallow.default_socket_path(f.port, env=env) == str(expected)
    assert expected.is_socket()
    assert expected.parent.stat().st_mode & 0o777 == 0o700
    assert expected.stat().st_mode & 0o777 == 0o700, "unixsocketperm defaults to 700"
    with f.conn() as c:
        assert c.cmd("CONFIG", "GET", "unixsocket") == [b"unixsocket", str(expected).encode()]
        assert c.cmd("CONFIG", "GET", "unixsocketperm") == [b"unixsocketperm", b"700"]
    with RawConn(path=fallow.socket_path(f.port, env=env)) as c:
        assert c.cmd("PING") == "PONG"
    f.stop()
    assert not expected.exists(), "removed at shutdown"


def test_unixsocketperm_and_directory_for_a_group(launch, tmp):
    path = tmp / "shared" / "s.sock"
    launch("--unixsocket", path, "--unixsocketperm", "770")
    assert path.stat().st_mode & 0o777 == 0o770
    assert path.parent.stat().st_mode & 0o777 == 0o710, "the group may reach the socket, not list"
    bad = launch("--unixsocket", tmp / "t.sock", "--unixsocketperm", "800", ready=False)
    assert bad.proc.wait(10) != 0


ENVIRONMENTS = [
    {},
    {"XDG_RUNTIME_DIR": "/run/user/4242"},
    {"XDG_RUNTIME_DIR": ""},
    {"XDG_RUNTIME_DIR": "relative/dir", "TMPDIR": "/var/tmp"},
    {"TMPDIR": "/var/tmp"},
    {"FALLOW_SOCKET": "/srv/fallow/main.sock"},
    {"FALLOW_SOCKET": "", "XDG_RUNTIME_DIR": "/run/user/7"},
]


def socket_path_tool(env: dict, port: int, *extra, as_user: str | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TMPDIR", "FALLOW_SOCKET")}
    argv = [str(fallow_bin()), "socket-path", "--port", str(port), *extra]
    if as_user:
        argv = ["setpriv", f"--reuid={as_user}", f"--regid={as_user}", "--clear-groups", *argv]
    p = subprocess.run(argv, env={**base, **env}, capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


@pytest.mark.parametrize("env", ENVIRONMENTS, ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()) or "none")
def test_rust_and_python_resolvers_agree(env):
    for port in (6379, 7000):
        assert socket_path_tool(env, port) == fallow.socket_path(port, env=env)
        assert socket_path_tool(env, port, "--default") == fallow.default_socket_path(port, env=env)


def test_resolvers_agree_for_a_user_without_runtime_dir():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the tool as another user")
    if not os.access(fallow_bin(), os.X_OK) or not all(
            os.stat(p).st_mode & 0o001 for p in [*fallow_bin().parents][:-1] if p.exists()):
        pytest.skip("the fallow binary is not reachable by another user")
    for env in ({}, {"TMPDIR": "/var/tmp"}):
        got = socket_path_tool(env, 6380, as_user="65534")
        assert got == fallow.socket_path(6380, env=env, uid=65534) == \
            f"{env.get('TMPDIR', '/tmp')}/fallow-65534/fallow-6380.sock"


def test_fallow_socket_tells_tools_where_to_look(launch, tmp):
    path = tmp / "s.sock"
    f = launch("--unixsocket", path)
    with f.conn() as c:
        assert c.cmd("SET", "k1", "v1") == "OK"
    out = tmp / "dump.tsv"
    env = dict(os.environ, FALLOW_SOCKET=str(path))
    p = subprocess.run([str(fallow_bin()), "dump", str(out), "--server", "unix:", "--quiet"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr
    assert out.read_text() == "k1\tv1\n"
    assert fallow.socket_path(env=env) == str(path)


# --------------------------------------------------------------------------- file descriptors
def limit_files(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def open_clients(port: int, count: int) -> list[socket.socket]:
    clients = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        clients.append(s)
    return clients


def refused_within(clients: list[socket.socket], seconds: float) -> list[socket.socket]:
    """The clients that received the max-clients error (and were closed) within `seconds`; done early once
    nothing more arrives for half a second (the served clients receive nothing)."""
    got: dict[socket.socket, bytes] = {s: b"" for s in clients}
    deadline = time.monotonic() + seconds
    open_ = set(clients)
    while open_ and time.monotonic() < deadline:
        quiet = 0.5 if any(got.values()) else deadline - time.monotonic()
        ready, _, _ = select.select(list(open_), [], [], max(0.0, quiet))
        if not ready:
            break
        for s in ready:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                chunk = b""
            got[s] += chunk
            if not chunk:
                open_.discard(s)
    refused = [s for s, data in got.items() if data == TOO_MANY]
    assert all(data in (b"", TOO_MANY) for data in got.values()), set(got.values())
    return refused


def warn_lines(f: Fallow) -> list[str]:
    return [l for l in f.logtext().splitlines() if " WARN " in l]


def test_low_ulimit_lowers_maxclients_once_and_refuses_the_surplus(launch, tmp):
    f = launch("--unixsocket", "", preexec_fn=limit_files(64))
    lowered = [l for l in f.logtext().splitlines() if "You requested maxclients of 10000" in l]
    assert len(lowered) == 1 and "maxclients has been reduced to 32" in lowered[0], f.logtext()
    canary = f.conn()
    assert canary.cmd("SET", "canary", "alive") == "OK"
    assert canary.cmd("CONFIG", "GET", "maxclients") == [b"maxclients", b"32"]
    started = time.monotonic()
    clients = open_clients(f.port, 100)
    refused = refused_within(clients, 3.0)
    elapsed = time.monotonic() - started
    served = [s for s in clients if s not in refused]
    assert len(served) == 31, (len(served), len(refused))  # 32 with the canary
    assert elapsed < 3.5
    for s in served[:5]:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n"
    assert canary.cmd("GET", "canary") == b"alive"
    assert int(info_field(canary, "stats", "rejected_connections")) == 69
    # CONFIG SET cannot go past what the descriptors hold.
    reply = canary.cmd("CONFIG", "SET", "maxclients", "1000")
    assert reply == Err("ERR CONFIG SET failed (possibly related to argument 'maxclients') - The operating "
                        "system is not able to handle the specified number of clients, try with 32"), reply
    assert canary.cmd("CONFIG", "SET", "maxclients", "20") == "OK"
    for s in clients:
        s.close()
    assert len(warn_lines(f)) <= 3, warn_lines(f)


def test_out_of_descriptors_sheds_the_backlog_with_an_error(launch, tmp):
    f = launch("--unixsocket", "")
    canary = f.conn()
    assert canary.cmd("SET", "canary", "alive") == "OK"
    open_fds = len(os.listdir(f"/proc/{f.proc.pid}/fd"))
    headroom = 6
    # Lower the running server's limit under what maxclients assumed: accept now meets EMFILE.
    soft, hard = resource.prlimit(f.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(f.proc.pid, resource.RLIMIT_NOFILE, (open_fds + headroom, hard))
    cpu_before = cpu_seconds(f.proc.pid)
    clients = open_clients(f.port, 60)
    refused = refused_within(clients, 3.0)
    served = [s for s in clients if s not in refused]
    # A descriptor or two may have been in passing use when they were counted.
    assert len(served) <= headroom + 2 and len(refused) >= 60 - headroom - 2, (len(served), len(refused))
    for s in served:
        s.sendall(b"PING\r\n")
        assert s.recv(100) == b"+PONG\r\n", "the accepted ones are served, none left hanging"
    time.sleep(1.0)
    assert cpu_seconds(f.proc.pid) - cpu_before < 1.0, "the accept loop does not spin"
    assert canary.cmd("GET", "canary") == b"alive"
    assert int(info_field(canary, "stats", "rejected_connections")) >= len(refused)
    shed = [l for l in f.logtext().splitlines() if "out of file descriptors" in l]
    assert 1 <= len(shed) <= 2, f.logtext()
    assert len(warn_lines(f)) <= 5, warn_lines(f)
    for s in clients:
        s.close()
    # Descriptors back: new clients are served again.
    resource.prlimit(f.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    with f.conn() as again:
        assert again.cmd("PING") == "PONG"


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
