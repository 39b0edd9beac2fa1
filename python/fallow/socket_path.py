"""Where a fallow server's Unix socket is: the same rule as the Rust `fallow_proto::socket_path` (the server
binds there by default; `fallow socket-path --port N` prints it), kept in step by tests/e2e/test_listeners.py.

    import redis, fallow
    r = redis.Redis(unix_socket_path=fallow.socket_path(6379))

Default path for RESP port P:
- ``$XDG_RUNTIME_DIR/fallow/fallow-P.sock`` when ``XDG_RUNTIME_DIR`` is set (an absolute path);
- ``/run/fallow/fallow-P.sock`` for root without it;
- ``${TMPDIR:-/tmp}/fallow-UID/fallow-P.sock`` for any other user without it.
``socket_path`` prefers ``$FALLOW_SOCKET`` when it is set and not empty.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

SOCKET_ENV = "FALLOW_SOCKET"


def _absolute_dir(value: Optional[str]) -> Optional[str]:
    # Empty or relative values are ignored, as the XDG base directory specification asks.
    return value if value and os.path.isabs(value) else None


def default_socket_path(port: int = 6379, env: Optional[Mapping[str, str]] = None,
                        uid: Optional[int] = None) -> str:
    """The path the server on `port` binds when no --unixsocket is given (ignores FALLOW_SOCKET)."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    name = f"fallow-{port}.sock"
    runtime = _absolute_dir(env.get("XDG_RUNTIME_DIR"))
    if runtime:
        return os.path.join(runtime, "fallow", name)
    if uid == 0:
        return os.path.join("/run/fallow", name)
    temporary = _absolute_dir(env.get("TMPDIR")) or "/tmp"
    return os.path.join(temporary, f"fallow-{uid}", name)


def socket_path(port: int = 6379, env: Optional[Mapping[str, str]] = None,
                uid: Optional[int] = None) -> str:
    """Where a client looks for the server on `port`: $FALLOW_SOCKET when set, else the default."""
    env = os.environ if env is None else env
    explicit = env.get(SOCKET_ENV)
    return explicit if explicit else default_socket_path(port, env, uid)
