"""Client output buffer limits, pub/sub queues bounded in bytes, and maxmemory-clients (issue 16, findings 2 and 3).

Each test starts its own server, so the peak RSS read from /proc belongs to that test alone. Clients that
"never read" shrink their socket receive buffer first, so the kernel holds little of what they are owed and
the server's own buffers are what is measured. Loops are bounded in count and time; loopback only.
"""
from __future__ import annotations

import socket
import time

import pytest

from helpers import HOST, Err, RawConn, encode, wait_for

pytestmark = [pytest.mark.fallow_only, pytest.mark.resp]

MIB = 1 << 20


def memory_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def info(conn: RawConn, section: str) -> dict[str, str]:
    text = conn.cmd("INFO", section)
    text = text.decode() if isinstance(text, bytes) else text
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def stat(conn: RawConn, name: str) -> int:
    return int(info(conn, "stats")[name])


def never_reader(port: int) -> socket.socket:
    """A client that will not read: a tiny receive buffer, so what it is owed stays in the server."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((HOST, port))
    s.settimeout(5)
    return s


def client_ids(conn: RawConn, kind: str = "normal") -> list[str]:
    listing = conn.cmd("CLIENT", "LIST", "TYPE", kind)
    listing = listing.decode() if isinstance(listing, bytes) else listing
    return [line.split()[0] for line in listing.splitlines() if line]


def closed_by_server(s: socket.socket, timeout: float = 5.0) -> bool:
    """Drains what the server sent; True once it closed the connection."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            if not s.recv(1 << 20):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    return False


def canary_p99_ms(conn: RawConn, rounds: int = 200) -> float:
    times = []
    for i in range(rounds):
        started = time.perf_counter()
        assert conn.cmd("GET", "canary") == b"alive"
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[int(len(times) * 0.99) - 1]


def test_huge_mget_never_read_is_refused_and_memory_stays_bounded(server_factory):
    """Finding 2: MGET of a 1 MiB key ×1000 from three clients that never read."""
    srv = server_factory()
    c = RawConn(port=srv.port)
    assert c.cmd("SET", "big", b"x" * MIB) == "OK"
    assert c.cmd("SET", "canary", "alive") == "OK"
    hogs = [never_reader(srv.port) for _ in range(3)]
    for hog in hogs:
        hog.sendall(encode("MGET", *(["big"] * 1000)))
    wait_for(lambda: stat(c, "client_output_buffer_limit_refusals") >= 3, timeout=5)
    assert stat(c, "client_output_buffer_limit_refusals") == 3
    p99 = canary_p99_ms(c)
    assert p99 < 100, f"canary p99 {p99:.1f} ms"
    peak = memory_mb(srv.pid, "VmHWM")
    assert peak < 400, f"peak RSS {peak:.0f} MB"
    for hog in hogs:
        reply = hog.recv(300)
        assert reply.startswith(b"-ERR reply of 1048592003 bytes would exceed the client output buffer hard limit (268435456 bytes)"), reply
        hog.close()
    assert c.cmd("GET", "canary") == b"alive"


def test_reply_of_one_value_is_never_refused_for_its_size(server_factory):
    srv = server_factory(client_output_buffer_limit="normal 1mb 0 0")
    with RawConn(port=srv.port) as c:
        value = b"v" * (3 * MIB)
        assert c.cmd("SET", "big", value) == "OK"
        assert c.cmd("GET", "big") == value, "one value passes the hard limit"
        c.send(encode("MGET", "big", "big"))
        reply = c.read_reply()
        assert isinstance(reply, Err) and "would exceed the client output buffer hard limit (1048576 bytes)" in reply
        assert c.cmd("RPUSH", "list", *([b"e" * 1000] * 2000)) == 2000
        reply = c.cmd("LRANGE", "list", "0", "-1")
        assert isinstance(reply, Err) and "would exceed" in reply
        assert c.cmd("LRANGE", "list", "0", "99") == [b"e" * 1000] * 100
        c.cmd("HSET", "hash", *sum(([f"f{i}", "h" * 1000] for i in range(2000)), []))
        assert "would exceed" in c.cmd("HGETALL", "hash")
        pairs = sum(([b"k" * 600 + str(i).encode(), b"1"] for i in range(2000)), [])
        assert c.cmd("MSET", *pairs) == "OK"  # 1.2 MB of key names
        assert "would exceed" in c.cmd("KEYS", "*")
        assert stat(c, "client_output_buffer_limit_refusals") == 4
        assert c.cmd("PING") == "PONG", "a refusal keeps the connection"


def test_pipelined_never_reader_over_hard_limit_is_disconnected(server_factory):
    srv = server_factory(client_output_buffer_limit="normal 4mb 0 0")
    c = RawConn(port=srv.port)
    assert c.cmd("SET", "v", b"x" * 100_000) == "OK"
    assert c.cmd("SET", "canary", "alive") == "OK"
    hog = never_reader(srv.port)
    hog.sendall(encode("GET", "v") * 500)  # 50 MB of replies, never read
    assert wait_for(lambda: stat(c, "client_output_buffer_limit_disconnections") == 1, timeout=5)
    assert wait_for(lambda: len(client_ids(c)) == 1, timeout=5), "only the canary's connection is left"
    assert closed_by_server(hog)
    assert memory_mb(srv.pid, "VmHWM") < 150
    assert c.cmd("GET", "canary") == b"alive"


def test_large_pipeline_of_a_reading_client_still_works(server_factory):
    """A client that writes its whole pipeline before reading is not deadlocked and not disconnected."""
    srv = server_factory()
    with RawConn(port=srv.port, timeout=20) as c:
        assert c.cmd("SET", "k", b"y" * 1000) == "OK"
        commands = 20_000  # ~20 MB of replies, far more than the socket buffers hold
        c.send(encode("GET", "k") * commands)
        for _ in range(commands):
            assert c.read_reply() == b"y" * 1000
        assert stat(c, "client_output_buffer_limit_disconnections") == 0


def test_never_reading_subscriber_is_dropped_at_pubsub_hard_limit(server_factory):
    """Finding 3: 1 MiB messages to a subscriber that never reads."""
    srv = server_factory()
    c = RawConn(port=srv.port)
    sub = never_reader(srv.port)
    sub.sendall(encode("SUBSCRIBE", "news"))
    assert wait_for(lambda: len(client_ids(c, "pubsub")) == 1, timeout=5)
    message = b"m" * MIB
    receivers = [c.cmd("PUBLISH", "news", message) for _ in range(100)]
    assert receivers[0] == 1 and receivers[-1] == 0, "dropped before 100 MB were queued"
    assert 20 <= receivers.count(1) <= 40, receivers.count(1)  # the 32mb hard limit, less the socket's share
    assert stat(c, "client_output_buffer_limit_disconnections") == 1
    assert memory_mb(srv.pid, "VmHWM") < 150
    assert closed_by_server(sub)
    assert wait_for(lambda: client_ids(c, "pubsub") == [], timeout=5)


def test_subscriber_over_soft_limit_for_its_seconds_is_dropped(server_factory):
    srv = server_factory()
    c = RawConn(port=srv.port)
    assert c.cmd("CONFIG", "SET", "client-output-buffer-limit", "pubsub 0 1mb 1") == "OK"
    sub = never_reader(srv.port)
    sub.sendall(encode("SUBSCRIBE", "news"))
    assert wait_for(lambda: len(client_ids(c, "pubsub")) == 1, timeout=5)
    started = time.monotonic()
    for _ in range(64):  # 16 MB (the kernel's socket buffers hold a few), then nothing more: the soft clock must close it
        assert c.cmd("PUBLISH", "news", b"s" * (256 << 10)) == 1
    assert wait_for(lambda: stat(c, "client_output_buffer_limit_disconnections") == 1, timeout=5)
    assert time.monotonic() - started >= 0.9, "closed only after its soft seconds"
    assert closed_by_server(sub)


def test_maxmemory_clients_evicts_the_largest_clients(server_factory):
    """Many clients each under their own limit cannot together pass maxmemory-clients."""
    srv = server_factory(maxmemory_clients="16mb")
    c = RawConn(port=srv.port)
    assert c.cmd("SET", "v", b"x" * MIB) == "OK"
    assert c.cmd("SET", "canary", "alive") == "OK"
    hogs = []
    for _ in range(50):  # 4 MB owed to each: 200 MB without the bound
        hog = never_reader(srv.port)
        hog.sendall(encode("GET", "v") * 4)
        hogs.append(hog)
    # 16 MB holds the replies of a dozen or so (the kernel's socket buffers hold part of each).
    assert wait_for(lambda: stat(c, "evicted_clients") >= 25, timeout=10), stat(c, "evicted_clients")
    assert wait_for(lambda: int(info(c, "memory")["mem_clients_normal"]) <= 16 * MIB, timeout=5)
    assert wait_for(lambda: len(client_ids(c)) == 51 - stat(c, "evicted_clients"), timeout=5)
    assert int(info(c, "memory")["maxmemory_clients"]) == 16 * MIB
    assert memory_mb(srv.pid, "VmHWM") < 150
    assert c.cmd("GET", "canary") == b"alive", "a small client is never evicted"
    for hog in hogs:
        hog.close()


def test_config_round_trip_and_bad_values(server_factory):
    srv = server_factory()
    with RawConn(port=srv.port) as c:
        assert c.cmd("CONFIG", "GET", "client-output-buffer-limit") == [
            b"client-output-buffer-limit",
            b"normal 268435456 67108864 60 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        ]
        assert c.cmd("CONFIG", "SET", "client-output-buffer-limit", "normal 128mb 32mb 30 pubsub 16mb 4mb 10") == "OK"
        assert c.cmd("CONFIG", "GET", "client-output-buffer-limit")[1] == (
            b"normal 134217728 33554432 30 slave 268435456 67108864 60 pubsub 16777216 4194304 10"
        )
        bad = {
            "normal 1mb 2mb": "Wrong number of arguments in buffer limit configuration.",
            "master 1 2 3": "Invalid client class specified in buffer limit configuration.",
            "normal x 2 3": "Error in hard, soft or soft_seconds setting in buffer limit configuration.",
            "normal 1 2 -3": "Error in hard, soft or soft_seconds setting in buffer limit configuration.",
        }
        for value, message in bad.items():
            reply = c.cmd("CONFIG", "SET", "client-output-buffer-limit", value)
            assert reply == Err(
                f"ERR CONFIG SET failed (possibly related to argument 'client-output-buffer-limit') - {message}"
            ), (value, reply)
        assert c.cmd("CONFIG", "GET", "maxmemory-clients") == [b"maxmemory-clients", b"1073741824"]
        assert c.cmd("CONFIG", "SET", "maxmemory-clients", "64mb") == "OK"
        assert c.cmd("CONFIG", "GET", "maxmemory-clients")[1] == b"67108864"
        assert int(info(c, "memory")["maxmemory_clients"]) == 64 * MIB
        assert c.cmd("CONFIG", "SET", "maxmemory-clients", "5%") == "OK"
        assert c.cmd("CONFIG", "GET", "maxmemory-clients")[1] == b"5%"
        for value in ("0%", "101%", "lots"):
            reply = c.cmd("CONFIG", "SET", "maxmemory-clients", value)
            assert isinstance(reply, Err) and "maxmemory-clients" in reply, (value, reply)
        assert c.cmd("CONFIG", "GET", "maxmemory-clients")[1] == b"5%", "a refused value changes nothing"


@pytest.mark.memcache
def test_memcached_multiget_over_hard_limit_is_refused(server_factory):
    srv = server_factory(client_output_buffer_limit="normal 4mb 0 0")
    with RawConn(port=srv.mc_port) as mc:
        value = b"w" * 900_000
        mc.send(b"set k 0 0 %d\r\n%s\r\n" % (len(value), value))
        assert mc.readline() == b"STORED"
        mc.send(b"get k k\r\n")
        for _ in range(2):
            assert mc.readline() == b"VALUE k 0 900000"
            assert mc.read_exact(900_002) == value + b"\r\n"
        assert mc.readline() == b"END"
        mc.send(b"get" + b" k" * 8 + b"\r\n")  # 7.2 MB: over the 4 MB hard limit
        assert mc.readline() == b"SERVER_ERROR out of memory writing get response"
        mc.send(b"version\r\n")
        assert mc.readline().startswith(b"VERSION"), "the connection is kept"
    with RawConn(port=srv.port) as c:
        assert stat(c, "client_output_buffer_limit_refusals") == 1
