"""Shared-memory channels (SHM.OPEN) at the byte level: a raw client here maps the memfd itself, so it can
also misbehave as the issue lists (garbage, impossible indices, never reading, dying mid-message). The
polite clients (fallow-client, the Python package, the preload library) have tests of their own."""
import fcntl
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest
import redis

from helpers import ServerProc

pytestmark = pytest.mark.fallow_only

HEADER = 4096
REQ_TAIL, REQ_HEAD, REP_TAIL, REP_HEAD = 128, 192, 256, 320
SERVER_SLEEPING, CLIENT_SLEEPING, SERVER_CLOSED = 384, 448, 512


def resp(*args) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class RawChannel:
    """A channel client that follows the layout by hand (fallow-shm's layout.rs)."""

    def __init__(self, path, *before, open_args=()):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        payload = b"".join(resp(*cmd) for cmd in before) + resp("SHM.OPEN", *open_args)
        self.sock.sendall(payload)
        self.preamble = b""
        fds = []
        while True:
            msg, got, _, _ = socket.recv_fds(self.sock, 4096, 4)
            if not msg:
                raise ConnectionError("closed during SHM.OPEN")
            self.preamble += msg
            fds += got
            lines = self.preamble.split(b"\r\n")
            refused = len(lines) > len(before) + 1 and lines[len(before)].startswith(b"-")
            if fds or refused:
                break
        self.fds = fds
        if not fds:
            return
        self.memfd, self.server_bell, self.client_bell = fds
        self.map = mmap.mmap(self.memfd, os.fstat(self.memfd).st_size)
        self.req_bytes = self.u64(24)
        self.rep_bytes = self.u64(40)
        self.tail = self.u64(REQ_TAIL)
        self.head = self.u64(REP_HEAD)

    def u64(self, offset):
        return struct.unpack_from("<Q", self.map, offset)[0]

    def set_u64(self, offset, value):
        struct.pack_into("<Q", self.map, offset, value)

    def u32(self, offset):
        return struct.unpack_from("<I", self.map, offset)[0]

    def write(self, data: bytes, timeout=5.0):
        deadline = time.time() + timeout
        while data:
            free = self.req_bytes - (self.tail - self.u64(REQ_HEAD))
            if free == 0:
                if time.time() > deadline:
                    raise TimeoutError("request ring stays full")
                time.sleep(0.0005)
                continue
            n = min(free, len(data))
            for i in range(n):
                self.map[HEADER + (self.tail + i) % self.req_bytes] = data[i]
            self.tail += n
            self.set_u64(REQ_TAIL, self.tail)
            data = data[n:]
            if self.u32(SERVER_SLEEPING):
                struct.pack_into("<I", self.map, SERVER_SLEEPING, 0)
                os.write(self.server_bell, struct.pack("<Q", 1))

    def read_some(self, timeout=5.0) -> bytes:
        deadline = time.time() + timeout
        while True:
            tail = self.u64(REP_TAIL)
            if tail != self.head:
                base = HEADER + self.req_bytes
                out = bytes(self.map[base + i % self.rep_bytes] for i in range(self.head, tail))
                self.head = tail
                self.set_u64(REP_HEAD, self.head)
                return out
            if self.closed_by_server():
                return b""
            if time.time() > deadline:
                raise TimeoutError("no reply")
            time.sleep(0.0002)

    def read_until(self, count_lines, timeout=5.0) -> bytes:
        out = b""
        while out.count(b"\r\n") < count_lines:
            more = self.read_some(timeout)
            if not more:
                break
            out += more
        return out

    def call(self, *args) -> bytes:
        self.write(resp(*args))
        return self.read_some()

    def closed_by_server(self) -> bool:
        return self.u32(SERVER_CLOSED) == 1


@pytest.fixture
def server():
    s = ServerProc("fallow").start()
    yield s
    s.stop()


def tcp(server, **kw):
    return redis.Redis(host="127.0.0.1", port=server.port, **kw)


def info_shm(server):
    return tcp(server).info("shm")


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_the_session_moves_onto_the_channel_with_its_state(server):
    ch = RawChannel(server.unixsocket, ("SELECT", 3), ("CLIENT", "SETNAME", "mover"), ("CLIENT", "ID"))
    assert ch.preamble.startswith(b"+OK\r\n+OK\r\n:")
    client_id = int(ch.preamble.split(b"\r\n")[2][1:])
    assert b"fallow-shm-v1" in ch.preamble and b"request-ring-bytes" in ch.preamble
    # The memfd is sealed against resizing: a mapping of it cannot be cut short under the server.
    seals = fcntl.fcntl(ch.memfd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_SHRINK and seals & fcntl.F_SEAL_GROW
    assert ch.call("CLIENT", "ID") == b":%d\r\n" % client_id
    assert ch.call("CLIENT", "GETNAME") == b"$5\r\nmover\r\n"
    assert ch.call("SET", "k", "on-the-channel") == b"+OK\r\n"
    assert tcp(server, db=3).get("k") == b"on-the-channel"
    assert tcp(server, db=0).get("k") is None
    shm = info_shm(server)
    assert shm["shm_channels_opened"] == 1 and shm["shm_channels_active"] == 1
    assert shm["shm_ring_bytes"] == ch.req_bytes + ch.rep_bytes


def test_requests_pipelined_after_shm_open_run_on_the_channel(server):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(server.unixsocket)
    sock.sendall(resp("SHM.OPEN") + resp("SET", "p", "1") + resp("INCR", "p"))
    msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
    assert len(fds) == 3 and msg.startswith(b"*12\r\n")
    ch = RawChannel.__new__(RawChannel)
    ch.sock, ch.memfd, ch.server_bell, ch.client_bell = sock, *fds
    ch.map = mmap.mmap(ch.memfd, os.fstat(ch.memfd).st_size)
    ch.req_bytes, ch.rep_bytes = ch.u64(24), ch.u64(40)
    ch.tail, ch.head = ch.u64(REQ_TAIL), ch.u64(REP_HEAD)
    assert ch.read_until(2) == b"+OK\r\n:2\r\n"


def test_a_large_value_crosses_small_rings_both_ways(server):
    ch = RawChannel(server.unixsocket, open_args=("RING-BYTES", 4096))
    assert ch.req_bytes == ch.rep_bytes == 4096
    value = os.urandom(50_000)
    ch.write(resp("SET", "big", value))
    assert ch.read_some() == b"+OK\r\n"
    ch.write(resp("GET", "big"))
    expected = b"$%d\r\n" % len(value) + value + b"\r\n"
    got = b""
    while len(got) < len(expected):
        got += ch.read_some()
    assert got == expected


def test_bad_ring_sizes_and_transports_are_refused_and_the_socket_goes_on(server):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(server.unixsocket)
    sock.sendall(resp("SHM.OPEN", "RING-BYTES", 5000) + resp("SHM.OPEN", "PROTOCOL", "gopher") + resp("PING"))
    time.sleep(0.2)
    replies = sock.recv(4096)
    assert replies.startswith(b"-ERR RING-BYTES must be a power of two")
    assert b"-ERR PROTOCOL is resp or memcache\r\n+PONG\r\n" in replies
    with pytest.raises(redis.ResponseError, match="needs fallow's Unix socket"):
        tcp(server).execute_command("SHM.OPEN")
    tcp(server).config_set("shm-channels", "no")
    ch = RawChannel(server.unixsocket)
    assert ch.fds == [] and b"shared-memory channels are off" in ch.preamble
    ch.sock.sendall(resp("PING"))
    assert ch.sock.recv(100) == b"+PONG\r\n"


def test_a_channel_starts_unauthenticated_like_its_socket(server):
    r = tcp(server)
    r.config_set("requirepass", "s3cret")
    ch = RawChannel(server.unixsocket)
    assert ch.fds, ch.preamble
    assert ch.call("GET", "x").startswith(b"-NOAUTH")
    assert ch.call("AUTH", "wrong").startswith(b"-WRONGPASS")
    assert ch.call("AUTH", "s3cret") == b"+OK\r\n"
    assert ch.call("SET", "x", "1") == b"+OK\r\n"


def test_pub_sub_and_blocking_commands_work_on_a_channel(server):
    r = tcp(server)
    sub = RawChannel(server.unixsocket)
    sub.write(resp("SUBSCRIBE", "news"))
    assert sub.read_until(6).startswith(b"*3\r\n$9\r\nsubscribe\r\n")
    assert r.publish("news", "hello") == 1
    assert sub.read_until(6) == b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$5\r\nhello\r\n"
    blocked = RawChannel(server.unixsocket)
    blocked.write(resp("BLPOP", "queue", 5))
    time.sleep(0.2)
    r.lpush("queue", "job")
    assert blocked.read_until(5, timeout=5) == b"*2\r\n$5\r\nqueue\r\n$3\r\njob\r\n"
    # A timeout on a channel answers as on a socket.
    blocked.write(resp("BLPOP", "empty", "0.1"))
    assert blocked.read_some() == b"*-1\r\n"


def test_garbage_in_the_ring_gets_an_error_and_a_closed_channel(server):
    bystander = RawChannel(server.unixsocket)
    ch = RawChannel(server.unixsocket)
    ch.write(b"*3\r\n$3\r\nSET\r\n$x\r\n")
    reply = ch.read_until(1)
    assert reply.startswith(b"-ERR Protocol error"), reply
    assert wait_for(ch.closed_by_server)
    assert bystander.call("PING") == b"+PONG\r\n"


def test_impossible_indices_close_only_that_channel(server):
    bystander = RawChannel(server.unixsocket)
    ch = RawChannel(server.unixsocket)
    ch.set_u64(REQ_TAIL, ch.tail + (64 << 20))  # more than a ring ahead
    os.write(ch.server_bell, struct.pack("<Q", 1))
    assert wait_for(ch.closed_by_server)
    assert wait_for(lambda: info_shm(server)["shm_channels_closed_corrupt"] == 1)
    liar = RawChannel(server.unixsocket)
    liar.write(resp("GET", "k"))
    liar.read_some()
    liar.set_u64(REP_HEAD, liar.head + 12345)  # consumed what was never sent
    liar.write(resp("GET", "k"))
    assert wait_for(liar.closed_by_server)
    assert bystander.call("PING") == b"+PONG\r\n"
    assert tcp(server).ping()


def test_a_client_that_never_reads_is_cut_off_at_its_output_limit(server):
    r = tcp(server)
    r.config_set("client-output-buffer-limit", "normal 1mb 0 0")
    r.set("big", b"x" * 100_000)
    ch = RawChannel(server.unixsocket, open_args=("RING-BYTES", 4096))
    for _ in range(40):
        ch.write(resp("GET", "big"))
    assert wait_for(ch.closed_by_server, timeout=10)
    assert r.ping()
    assert wait_for(lambda: info_shm(server)["shm_channels_active"] == 0)


CHILD = r"""
import os, socket, sys, time
sock = socket.socket(socket.AF_UNIX); sock.connect(sys.argv[1])
sock.sendall(b"*1\r\n$8\r\nSHM.OPEN\r\n")
msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
import mmap, struct
m = mmap.mmap(fds[0], os.fstat(fds[0]).st_size)
half = b"*3\r\n$3\r\nSET\r\n$1\r\nk"
m[4096:4096 + len(half)] = half
struct.pack_into("<Q", m, 128, len(half))
print("ready", flush=True)
time.sleep(60)
"""


def test_a_client_that_dies_mid_message_frees_its_channel(server):
    child = subprocess.Popen([sys.executable, "-c", CHILD, server.unixsocket], stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"ready"
    assert info_shm(server)["shm_channels_active"] == 1
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert wait_for(lambda: info_shm(server)["shm_channels_active"] == 0)
    shm = info_shm(server)
    assert shm["shm_channels_closed_by_lifeline"] == 1 and shm["shm_ring_bytes"] == 0
    assert tcp(server).get("k") is None


def test_closing_the_lifeline_closes_a_blocked_channel(server):
    ch = RawChannel(server.unixsocket)
    ch.write(resp("BLPOP", "never", 0))
    time.sleep(0.1)
    assert tcp(server).client_list()[0]["cmd"] in ("blpop", "client|list")
    ch.sock.close()
    assert wait_for(lambda: info_shm(server)["shm_channels_active"] == 0)
    assert wait_for(lambda: len(tcp(server).client_list()) == 1)


def test_a_memcached_channel_speaks_memcached(server):
    ch = RawChannel(server.unixsocket, open_args=("PORT", server.mc_port))
    assert b"memcache" in ch.preamble
    ch.write(b"set k 0 0 5\r\nhello\r\n")
    assert ch.read_some() == b"STORED\r\n"
    ch.write(b"get k\r\n")
    assert ch.read_until(3) == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
    # The same item through the memcached TCP port: one store behind both.
    with socket.create_connection(("127.0.0.1", server.mc_port)) as mc:
        mc.sendall(b"get k\r\n")
        time.sleep(0.1)
        assert mc.recv(100) == b"VALUE k 0 5\r\nhello\r\nEND\r\n"


PEER = r"""
import os, socket, sys
os.setgid(65534); os.setuid(65534)
sock = socket.socket(socket.AF_UNIX); sock.connect(sys.argv[1])
sock.sendall(b"*1\r\n$8\r\nSHM.OPEN\r\n")
msg, fds, _, _ = socket.recv_fds(sock, 4096, 4)
print(len(fds), msg.split(b"\r\n")[0].decode())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a peer as another user")
def test_only_the_servers_user_root_or_listed_uids_get_a_channel(tmp_path):
    s = ServerProc("fallow", {"unixsocketperm": "777"})
    os.chmod(s.tmp, 0o755)
    s.start()
    try:
        refused = subprocess.run([sys.executable, "-c", PEER, s.unixsocket], capture_output=True, timeout=10)
        assert refused.stdout.decode().startswith("0 -ERR shared-memory channels are for the server's user; uid 65534")
        tcp(s).config_set("shm-allowed-uids", "65534")
        allowed = subprocess.run([sys.executable, "-c", PEER, s.unixsocket], capture_output=True, timeout=10)
        assert allowed.stdout.decode().startswith("3 *12"), allowed
        assert tcp(s).info("shm")["shm_channels_refused"] == 1
    finally:
        s.stop()
