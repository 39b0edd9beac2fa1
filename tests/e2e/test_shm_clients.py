"""The Python shared-memory channel client (python/fallow/shm.py) against fallow: commands, large values and
pipelines across the rings, RESP3, pub/sub, blocking commands with timeouts, authentication, the fallback to
the Unix socket when the server refuses, and a server that goes away."""
from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import redis

from helpers import HOST, REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "python"))
import fallow  # noqa: E402

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]


def _shm(server, **kw) -> redis.Redis:
    kw.setdefault("socket_timeout", 10)
    return fallow.shm_redis(path=server.unixsocket, **kw)


def _connection(client: redis.Redis):
    """The pool's one idle connection (connected), to look at its transport."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.connect()
        return connection, pool
    except Exception:
        pool.release(connection)
        raise


@pytest.fixture
def shm(server):
    c = _shm(server, decode_responses=True)
    yield c
    c.close()


def test_commands_large_values_and_pipelines_cross_the_channel(server, shm, r):
    connection, pool = _connection(shm)
    assert connection.is_shm, connection.shm_refusal
    pool.release(connection)
    assert shm.set("k", "v") is True
    assert r.get("k") == "v", "the TCP client sees what the channel wrote"
    # Larger than the rings: it crosses in pieces while the server drains and fills them.
    big = "".join(chr(ord("a") + i % 26) for i in range(3 << 20))
    assert shm.set("big", big) is True
    assert shm.get("big") == big
    assert r.strlen("big") == len(big)
    pipe = shm.pipeline(transaction=False)
    for _ in range(5000):
        pipe.incr("n")
    assert pipe.execute() == list(range(1, 5001))
    with shm.pipeline() as multi:  # MULTI/EXEC
        multi.incr("n").get("n")
        assert multi.execute() == [5001, "5001"]


def test_resp3_and_select_run_on_the_channel(server):
    c = _shm(server, protocol=3, db=3, decode_responses=True)
    try:
        connection, pool = _connection(c)
        assert connection.is_shm, connection.shm_refusal
        pool.release(connection)
        c.hset("h", mapping={"a": "1", "b": "2"})
        assert c.hgetall("h") == {"a": "1", "b": "2"}
        assert int(c.client_info()["db"]) == 3
        plain = redis.Redis(host=HOST, port=server.port, db=3, decode_responses=True)
        assert plain.hget("h", "b") == "2"
        plain.close()
    finally:
        c.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_pubsub_messages_arrive_while_the_subscriber_sleeps(server, r, protocol):
    shm = _shm(server, protocol=protocol, decode_responses=True)
    p = shm.pubsub()
    p.subscribe("news")
    first = p.get_message(timeout=5)
    assert first["type"] == "subscribe" and first["channel"] == "news"
    assert p.connection.is_shm, p.connection.shm_refusal
    for n in range(3):
        # Long past the spin budget: the subscriber sleeps on its doorbell and the server must ring it.
        time.sleep(0.2)
        assert r.publish("news", f"m{n}") == 1
        message = p.get_message(timeout=5)
        assert message is not None and message["data"] == f"m{n}"
    assert p.get_message(timeout=0.1) is None, "nothing else was published"
    p.close()
    shm.close()


def test_blpop_times_out_and_wakes_on_a_push(shm, r):
    started = time.monotonic()
    assert shm.blpop("q", timeout=1) is None
    waited = time.monotonic() - started
    assert 0.9 <= waited < 5, waited

    def push_later():
        time.sleep(0.3)
        r.rpush("q", "x")

    pusher = threading.Thread(target=push_later)
    pusher.start()
    started = time.monotonic()
    assert shm.blpop("q", timeout=10) == ("q", "x")
    waited = time.monotonic() - started
    pusher.join()
    assert 0.25 <= waited < 5, waited


def test_connection_class_finds_the_socket_by_port(server, monkeypatch):
    # socket_path(port) prefers $FALLOW_SOCKET: the test server's socket is not at the default path.
    monkeypatch.setenv("FALLOW_SOCKET", server.unixsocket)
    pool = redis.ConnectionPool(connection_class=fallow.ShmConnection, port=server.port,
                                decode_responses=True, socket_timeout=10)
    c = redis.Redis(connection_pool=pool)
    try:
        assert c.ping() is True
        assert c.incr("by-port") == 1
        connection, pool = _connection(c)
        assert connection.path == server.unixsocket
        assert connection.is_shm, connection.shm_refusal
        pool.release(connection)
    finally:
        c.close()


def test_socket_like_channel(server):
    with fallow.open_channel(server.unixsocket) as channel:
        assert channel.protocol == "resp"
        channel.settimeout(10)
        channel.sendall(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nhi\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
        got = b""
        while len(got) < len(b"+OK\r\n$2\r\nhi\r\n"):
            got += channel.recv(100)
        assert got == b"+OK\r\n$2\r\nhi\r\n"
        channel.settimeout(0.2)
        with pytest.raises(TimeoutError):
            channel.recv(100)


def test_memcache_protocol_channel(server):
    with fallow.open_channel(server.unixsocket, protocol="memcache") as channel:
        assert channel.protocol == "memcache"
        channel.settimeout(10)
        channel.sendall(b"set mk 0 0 5\r\nhello\r\nget mk\r\n")
        expected = b"STORED\r\nVALUE mk 0 5\r\nhello\r\nEND\r\n"
        got = b""
        while len(got) < len(expected):
            got += channel.recv(100)
        assert got == expected


def test_no_spin_still_wakes(server, monkeypatch):
    monkeypatch.setenv("FALLOW_SHM_SPIN_US", "0")
    c = _shm(server, decode_responses=True)
    try:
        for n in range(200):
            assert c.incr("nospin") == n + 1
    finally:
        c.close()


def test_password_is_sent_before_the_channel_opens(server_factory):
    s = server_factory(requirepass="pw")
    c = fallow.shm_redis(path=s.unixsocket, password="pw", decode_responses=True, socket_timeout=10)
    try:
        assert c.set("a", "1") is True
        connection, pool = _connection(c)
        assert connection.is_shm, connection.shm_refusal
        pool.release(connection)
    finally:
        c.close()
    anonymous = fallow.shm_redis(path=s.unixsocket, decode_responses=True, socket_timeout=10)
    try:
        with pytest.raises(redis.AuthenticationError):
            anonymous.get("a")
    finally:
        anonymous.close()


def test_a_refusing_server_is_used_over_the_socket(server_factory):
    s = server_factory(shm_channels="no")
    c = fallow.shm_redis(path=s.unixsocket, decode_responses=True, socket_timeout=10)
    try:
        assert c.set("k", "v") is True and c.get("k") == "v"
        connection, pool = _connection(c)
        assert not connection.is_shm
        assert connection.shm_refusal, "the refusal is kept"
        pool.release(connection)
        p = c.pubsub()
        p.subscribe("ch")
        assert p.get_message(timeout=5)["type"] == "subscribe"
        c.publish("ch", "over-the-socket")
        assert p.get_message(timeout=5)["data"] == "over-the-socket"
        p.close()
    finally:
        c.close()
    with pytest.raises(fallow.ShmRefused) as refused:
        fallow.open_channel(s.unixsocket)
    assert refused.value.sock is not None, "the socket is handed back"
    refused.value.sock.close()


def test_a_server_that_dies_ends_the_channel(server_factory):
    s = server_factory()
    channel = fallow.open_channel(s.unixsocket)
    channel.settimeout(30)
    channel.sendall(b"*1\r\n$4\r\nPING\r\n")
    assert channel.recv(100) == b"+PONG\r\n"
    s.proc.kill()
    s.proc.wait()
    started = time.monotonic()
    # The lifeline's end wakes the sleeping reader: end of stream, long before the 30 s timeout.
    assert channel.recv(100) == b""
    assert time.monotonic() - started < 10
    with pytest.raises(OSError):
        channel.sendall(b"*1\r\n$4\r\nPING\r\n")
    channel.close()


def test_closing_the_channel_frees_the_server_connection(server, r):
    before = len(r.client_list())
    channels = [fallow.open_channel(server.unixsocket) for _ in range(5)]
    assert len(r.client_list()) == before + 5
    for channel in channels:
        channel.close()
    deadline = time.monotonic() + 5
    while len(r.client_list()) != before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(r.client_list()) == before
    assert os.path.exists(server.unixsocket)


@pytest.mark.parametrize("spin_us", [0, 50])
def test_channels_in_threads_lose_no_wake_ups(server, r, spin_us):
    """Eight channels at once, each waiting for every reply: with no spin every wait sleeps on the doorbell, so
    a lost wake-up would show as a read timing out (socket_timeout 5 s) rather than as a slow test."""
    threads, increments = 8, 300
    errors = []

    def work():
        c = _shm(server, socket_timeout=5, shm_spin_us=spin_us)
        try:
            for _ in range(increments):
                c.incr("counter")
        except Exception as error:  # reported below with the others
            errors.append(error)
        finally:
            c.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    assert int(r.get("counter")) == threads * increments


def test_pymemcache_on_a_memcached_channel(server, mc):
    c = fallow.shm_memcache(port=server.mc_port, path=server.unixsocket, connect_timeout=5, timeout=10)
    try:
        assert c.set("mk", b"v") is True
        assert c.get("mk") == b"v"
        assert isinstance(c.sock._inner, fallow.ShmChannel), c.socket_module.shm_refusal
        assert c.sock._inner.protocol == "memcache"
        value = bytes(range(256)) * 2000  # 512 KB: larger than the rings
        assert c.set("big", value) is True
        assert c.get_many(["mk", "big"]) == {"mk": b"v", "big": value}
        assert mc.get("big") == value, "the memcached TCP port sees what the channel stored"
        assert c.incr("n", 1) is None and c.add("n", b"5") is True and c.incr("n", 2) == 7
    finally:
        c.close()


def test_pymemcache_falls_back_to_the_memcached_port(server_factory):
    s = server_factory(shm_channels="no")
    c = fallow.shm_memcache(port=s.mc_port, path=s.unixsocket, connect_timeout=5, timeout=10)
    try:
        assert c.set("k", b"over-tcp") is True
        assert c.get("k") == b"over-tcp"
        assert not isinstance(c.sock._inner, fallow.ShmChannel)
        assert "shm-channels no" in c.socket_module.shm_refusal
    finally:
        c.close()


def test_the_spin_budget_halves_on_misses_and_comes_back_on_a_hit():
    from fallow.shm import _AdaptiveSpin

    spin = _AdaptiveSpin(8e-6)
    assert spin.budget_s() == 8e-6
    spin.miss()
    assert spin.budget_s() == 4e-6
    for _ in range(3):
        spin.miss()
    assert spin.budget_s() == 0.0, "below a microsecond: no spin"
    budgets = [spin.budget_s() for _ in range(_AdaptiveSpin.PROBE_INTERVAL)]
    assert budgets.count(8e-6) == 1 and budgets.count(0.0) == _AdaptiveSpin.PROBE_INTERVAL - 1, \
        "one full-budget probe per interval"
    spin.hit()
    assert spin.budget_s() == 8e-6
    assert _AdaptiveSpin(0).budget_s() == 0.0
