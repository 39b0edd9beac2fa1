"""The AF_VSOCK listener (`vsock-port`) as far as a machine without a virtual machine on it can test: the port is
bound at start and reported by CONFIG GET, CONFIG SET refuses it, and a port already taken stops the start with
an error naming it. Connections over vsock need a guest (vsock loopback does not work here): docs/shm.md, "vsock"."""
from __future__ import annotations

import random
import socket

import pytest
import redis

from helpers import HOST, ServerProc

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]


def _vsock_listener(port: int):
    """A vsock socket listening on `port`, or None when the port is taken or the kernel has no vsock."""
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    except (AttributeError, OSError):
        return None
    try:
        s.bind((socket.VMADDR_CID_ANY, port))
        s.listen()
        return s
    except OSError:
        s.close()
        return None


def _free_vsock_port() -> int:
    for _ in range(50):
        port = random.randrange(20_000, 60_000)
        s = _vsock_listener(port)
        if s is not None:
            s.close()
            return port
    pytest.skip("no vsock on this machine (or no free vsock port)")


def test_the_vsock_port_is_bound_and_reported(server_factory):
    port = _free_vsock_port()
    s = server_factory(vsock_port=port)
    r = redis.Redis(host=HOST, port=s.port, decode_responses=True)
    try:
        assert r.config_get("vsock-port") == {"vsock-port": str(port)}
        with pytest.raises(redis.ResponseError, match="immutable"):
            r.config_set("vsock-port", port + 1)
        assert _vsock_listener(port) is None, "the server holds the port"
    finally:
        r.close()


def test_vsock_is_off_by_default(server, r):
    assert r.config_get("vsock-port") == {"vsock-port": "0"}


def test_a_taken_vsock_port_stops_the_start():
    port = _free_vsock_port()
    holder = _vsock_listener(port)
    assert holder is not None
    proc = ServerProc("fallow", {"vsock-port": port})
    try:
        with pytest.raises(RuntimeError, match=f"cannot listen on vsock port {port}"):
            proc.start(attempts=1)
    finally:
        proc.cleanup()
        holder.close()
