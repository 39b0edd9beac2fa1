"""Fixtures for the fallow e2e suite.

E2E_TARGET=fallow (default) starts $FALLOW_BIN (RESP + memcache port + unix socket).
E2E_TARGET=redis starts redis-server; memcache-protocol tests are skipped.
E2E_TARGET=memcached starts memcached; RESP tests are skipped.
"""
from __future__ import annotations

import signal

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient

from helpers import HOST, TARGET, RawConn, ServerProc

PER_TEST_TIMEOUT = 60  # seconds; hard watchdog so nothing can hang CI


def _kind_for(need: str) -> str:
    if TARGET == "fallow":
        return "fallow"
    return TARGET


def pytest_report_header(config):
    return f"E2E_TARGET={TARGET}"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "resp" in item.keywords and TARGET == "memcached":
            item.add_marker(pytest.mark.skip(reason="RESP test; target is memcached"))
        if "memcache" in item.keywords and TARGET == "redis":
            item.add_marker(pytest.mark.skip(reason="memcache test; target is redis"))
        if "fallow_only" in item.keywords and TARGET != "fallow":
            item.add_marker(pytest.mark.skip(reason="fallow-only behaviour"))
        if "redis_only" in item.keywords and TARGET != "redis":
            item.add_marker(pytest.mark.skip(reason="asserted only against real redis"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    def _alarm(signum, frame):
        raise TimeoutError(f"test exceeded {PER_TEST_TIMEOUT}s watchdog")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------- servers
_started: list[ServerProc] = []


@pytest.fixture(scope="session")
def server():
    """The shared server for the whole session (fallow, redis-server or memcached)."""
    # memcache-auth yes: ACL tests add users to this shared server, which would otherwise close its memcached
    # listener (docs/memcached.md, Authentication); `default` has no password, so memcached tests need no login.
    s = ServerProc(TARGET, {"memcache-auth": "yes"} if TARGET == "fallow" else None)
    _started.append(s)
    try:
        s.start()
        yield s
    finally:
        s.cleanup()


@pytest.fixture
def server_factory():
    """Start extra, private servers with options: server_factory(requirepass='pw')."""
    mine: list[ServerProc] = []

    def make(**extra) -> ServerProc:
        extra = {k.replace("_", "-"): v for k, v in extra.items()}
        s = ServerProc(TARGET, extra)
        mine.append(s)
        return s.start()

    yield make
    for s in mine:
        s.cleanup()


@pytest.fixture(autouse=True)
def _flush(request):
    """Per-test clean slate on the shared server (only when the test uses it)."""
    if "server" not in request.fixturenames:
        yield
        return
    s = request.getfixturevalue("server")
    if not s.alive():
        pytest.fail(f"server died before this test:\n{s.logtext()}")
    if TARGET in ("fallow", "redis"):
        with RawConn(port=s.port) as c:
            assert c.cmd("FLUSHALL") == "OK"
    if TARGET in ("fallow", "memcached") and "memcache" in request.keywords:
        with RawConn(port=s.mc_port) as c:
            c.send(b"flush_all\r\n")
            assert c.readline() == b"OK"
    yield
    assert s.alive(), f"server died during the test:\n{s.logtext()}"


# --------------------------------------------------------------------------- clients
def _redis(s: ServerProc, protocol: int, **kw) -> redis.Redis:
    return redis.Redis(host=HOST, port=s.port, protocol=protocol, decode_responses=True,
                       socket_timeout=5, socket_connect_timeout=5, **kw)


@pytest.fixture
def r(server):
    """redis-py, RESP2."""
    c = _redis(server, 2)
    yield c
    c.close()


@pytest.fixture
def r3(server):
    """redis-py, RESP3."""
    c = _redis(server, 3)
    yield c
    c.close()


@pytest.fixture
def rb(server):
    """redis-py, RESP2, bytes responses."""
    c = redis.Redis(host=HOST, port=server.port, protocol=2, socket_timeout=5)
    yield c
    c.close()


@pytest.fixture
def redis_client_factory(server):
    made = []

    def make(protocol=2, **kw):
        c = _redis(server, protocol, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def raw(server):
    """Factory for raw sockets to the RESP port: raw() -> RawConn."""
    conns = []

    def make(port=None, timeout=5.0):
        c = RawConn(port=port or server.port, timeout=timeout)
        conns.append(c)
        return c

    yield make
    for c in conns:
        c.close()


@pytest.fixture
def c(raw):
    """One raw RESP connection (exact error strings)."""
    return raw()


@pytest.fixture
def mcraw(server):
    conns = []

    def make(timeout=5.0):
        c = RawConn(port=server.mc_port, timeout=timeout)
        conns.append(c)
        return c

    yield make
    for c in conns:
        c.close()


@pytest.fixture
def mc(server):
    c = MemcacheClient((HOST, server.mc_port), connect_timeout=5, timeout=5, default_noreply=False)
    yield c
    c.close()
