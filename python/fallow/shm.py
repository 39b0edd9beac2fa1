"""Shared-memory channels to a co-located fallow server, in pure Python (docs/shm.md, "Python client").

    import fallow
    r = fallow.shm_redis(port=6379)             # a redis.Redis whose connections are channels
    r = redis.Redis(connection_pool=redis.ConnectionPool(connection_class=fallow.ShmConnection, port=6379))
    s = fallow.open_channel(fallow.socket_path(6379))                   # a socket-like object
    mc = fallow.shm_memcache(port=11211)        # a pymemcache Client on a memcached channel

A client on the server's Unix socket sends ``SHM.OPEN``; the reply comes with three descriptors (the memfd
holding two byte rings, the server's doorbell eventfd, the client's doorbell eventfd). From then on the same
connection's requests go on the request ring and its replies come on the reply ring, as the plain RESP bytes
they would be on the socket; the socket stays open only as the channel's lifeline. When the server refuses
(``shm-channels no``, an old server, a peer it does not allow) the connection goes on over the socket.

The layout is `crates/fallow-shm/src/layout.rs` (version 1); the indices are free-running byte counts, and
every index the server writes is checked before use, so a broken server cannot make this side read or
write outside the mapping.

Memory ordering. Each shared word is read and written through a ctypes view of the mapping (an aligned
8- or 4-byte load or store, which both x86-64 and aarch64 perform as one access):
- x86-64 (TSO) keeps stores in order with stores and loads with loads, so "copy the bytes, then store the
  tail" publishes and "load the tail, then copy" consumes correctly with plain accesses. It does reorder a
  store with a later load, which the sleep handshake (store "I sleep", then re-check the ring; the peer
  stores the index, then loads "sleeps?") must forbid: `_full_fence` does, with a locked instruction.
- aarch64 orders none of these by itself: every publish and consume goes through `_full_fence` too.
Python has no fence of its own; `_full_fence` releases and re-acquires a private lock, which on Linux is
an atomic read-modify-write with release then acquire semantics (a `lock`-prefixed instruction on x86-64;
release-then-acquire on aarch64, which the architecture keeps in order): a full barrier on both.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import select
import socket
import threading
import time
from typing import List, Optional, Tuple

from .socket_path import socket_path

__all__ = ["ShmChannel", "ShmConnection", "ShmError", "ShmRefused", "open_channel", "shm_memcache", "shm_redis"]

SPIN_ENV = "FALLOW_SHM_SPIN_US"
SPIN_US_DEFAULT = 50
SPIN_US_MAX = 1_000_000

# layout.rs, version 1
MAGIC = int.from_bytes(b"FALWSHM1", "little")
VERSION = 1
HEADER_BYTES = 4096
RING_BYTES_MIN = 4 << 10
RING_BYTES_MAX = 64 << 20
_OFFSET_MAGIC = 0
_OFFSET_VERSION = 8
_OFFSET_PROTOCOL = 12
_OFFSET_REQUEST_RING = 16
_OFFSET_REQUEST_BYTES = 24
_OFFSET_REPLY_RING = 32
_OFFSET_REPLY_BYTES = 40
_OFFSET_REQUEST_TAIL = 128
_OFFSET_REQUEST_HEAD = 192
_OFFSET_REPLY_TAIL = 256
_OFFSET_REPLY_HEAD = 320
_OFFSET_SERVER_SLEEPING = 384
_OFFSET_CLIENT_SLEEPING = 448
_OFFSET_SERVER_CLOSED = 512
_OFFSET_CLIENT_CLOSED = 576
PROTOCOLS = {0: "resp", 1: "memcache"}

_U64 = (1 << 64) - 1
# The handshake reply (a refusal's message included) is small; more is a broken server.
_OPEN_REPLY_BYTES_MAX = 4096
_OPEN_TIMEOUT_S = 5.0
# Bytes a single recv copies out of the reply ring at most when the caller asks for more.
_RECV_BYTES_MAX = 1 << 20

_X86_64 = platform.machine().lower() in ("x86_64", "amd64")
_fence_lock = threading.Lock()
_fence_lock.acquire()


def _full_fence() -> None:
    """A full memory barrier (see the module's notes): release then re-acquire a private held lock."""
    _fence_lock.release()
    _fence_lock.acquire()


def _publish_fence() -> None:
    """Orders this side's ring accesses before the index store that follows (a no-op under x86-64 TSO)."""
    if not _X86_64:
        _full_fence()


def spin_us_from_env() -> int:
    """`$FALLOW_SHM_SPIN_US` when it is a number (capped at one second), else 50 µs, as the Rust clients."""
    try:
        return max(0, min(int(os.environ.get(SPIN_ENV, "").strip()), SPIN_US_MAX))
    except ValueError:
        return SPIN_US_DEFAULT


class ShmError(ConnectionError):
    """The channel cannot be used: a broken reply, bad descriptors, or a ring index that cannot be right."""


class ShmRefused(ShmError):
    """The server answered SHM.OPEN with an error. `sock` is the still-usable Unix socket (or None)."""

    def __init__(self, message: str, sock: Optional[socket.socket] = None):
        super().__init__(message)
        self.sock = sock


# --------------------------------------------------------------------------- handshake
def _encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        if isinstance(arg, str):
            arg = arg.encode()
        elif isinstance(arg, int):
            arg = str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def _line(buf: bytes, at: int) -> Optional[Tuple[int, bytes, int]]:
    end = buf.find(b"\r\n", at)
    if end < 0 or end == at:
        return None
    return buf[at], buf[at + 1:end], end + 2


def _parse_reply(buf: bytes):
    """One handshake reply: None while incomplete, else (values, bytes used); an error reply raises."""
    head = _line(buf, 0)
    if head is None:
        return None
    kind, text, at = head
    if kind == ord("-"):
        raise ShmRefused(text.decode(errors="replace"))
    if kind == ord("+"):
        return [text.decode(errors="replace")], at
    if kind not in (ord("*"), ord("%")):
        raise ShmError(f"unexpected SHM.OPEN reply {buf[:at]!r}")
    try:
        count = int(text)
    except ValueError:
        raise ShmError("bad count in the SHM.OPEN reply") from None
    if not 0 <= count <= 64:
        raise ShmError("SHM.OPEN reply too long")
    values: List[str] = []
    for _ in range(count * (2 if kind == ord("%") else 1)):
        item = _line(buf, at)
        if item is None:
            return None
        kind, text, at = item
        if kind in (ord(":"), ord("+")):
            values.append(text.decode(errors="replace"))
        elif kind == ord("$"):
            length = int(text)
            if len(buf) < at + length + 2:
                return None
            values.append(buf[at:at + length].decode(errors="replace"))
            at += length + 2
        else:
            raise ShmError("unexpected item in the SHM.OPEN reply")
    return values, at


def _read_reply(sock: socket.socket, fds: List[int]):
    """Reads one reply, keeping the descriptors that come with it in `fds` (the caller closes them)."""
    buf = b""
    while True:
        parsed = _parse_reply(buf)
        if parsed is not None:
            values, used = parsed
            if used != len(buf):
                raise ShmError("bytes after the SHM.OPEN reply")
            return values
        if len(buf) >= _OPEN_REPLY_BYTES_MAX:
            raise ShmError("SHM.OPEN reply too long")
        data, received, flags, _ = socket.recv_fds(sock, 1024, 3)
        fds.extend(received)
        if flags & socket.MSG_CTRUNC:
            raise ShmError("more descriptors than the 3 a channel has")
        if not data:
            raise ShmError("the server closed the socket during SHM.OPEN")
        buf += data


def _handshake(sock: socket.socket, protocol: Optional[str], ring_bytes: Optional[int],
               username: Optional[str], password: Optional[str]) -> List[int]:
    """AUTH (when given) and SHM.OPEN on `sock`; returns the three descriptors."""
    fds: List[int] = []
    try:
        if password is not None:
            auth = ("AUTH", username, password) if username else ("AUTH", password)
            sock.sendall(_encode(*auth))
            _read_reply(sock, fds)
        args: list = ["SHM.OPEN"]
        if protocol:
            args += ["PROTOCOL", protocol]
        if ring_bytes:
            args += ["RING-BYTES", int(ring_bytes)]
        sock.sendall(_encode(*args))
        _read_reply(sock, fds)
        if len(fds) != 3:
            raise ShmError(f"{len(fds)} descriptors passed with SHM.OPEN's reply, 3 expected")
        return fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _map_memfd(memfd: int) -> mmap.mmap:
    seals = fcntl.fcntl(memfd, fcntl.F_GET_SEALS)
    # A memfd the server could shrink would fault this process on access (SIGBUS).
    if seals & (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) != (fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW):
        raise ShmError("memfd not sealed against resizing")
    size = os.fstat(memfd).st_size
    if not HEADER_BYTES + 2 * RING_BYTES_MIN <= size <= HEADER_BYTES + 2 * RING_BYTES_MAX:
        raise ShmError(f"memfd of {size} bytes does not hold a channel")
    return mmap.mmap(memfd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)


# --------------------------------------------------------------------------- the channel
class _Header:
    """ctypes views of the header's words (they must be deleted before the mapping is closed)."""

    def __init__(self, mm: mmap.mmap):
        u64 = lambda offset: ctypes.c_uint64.from_buffer(mm, offset)  # noqa: E731
        u32 = lambda offset: ctypes.c_uint32.from_buffer(mm, offset)  # noqa: E731
        if u64(_OFFSET_MAGIC).value != MAGIC:
            raise ShmError("not a fallow channel (bad magic)")
        version = u32(_OFFSET_VERSION).value
        if version != VERSION:
            raise ShmError(f"channel layout version {version}, this client knows {VERSION}")
        self.protocol = PROTOCOLS.get(u32(_OFFSET_PROTOCOL).value)
        if self.protocol is None:
            raise ShmError("unknown channel protocol")
        self.request_bytes = u64(_OFFSET_REQUEST_BYTES).value
        self.reply_bytes = u64(_OFFSET_REPLY_BYTES).value
        for name, n in (("request", self.request_bytes), ("reply", self.reply_bytes)):
            if n & (n - 1) or not RING_BYTES_MIN <= n <= RING_BYTES_MAX:
                raise ShmError(f"{name} ring of {n} bytes is not a power of two in range")
        self.request_offset = HEADER_BYTES
        self.reply_offset = HEADER_BYTES + self.request_bytes
        if (u64(_OFFSET_REQUEST_RING).value != self.request_offset
                or u64(_OFFSET_REPLY_RING).value != self.reply_offset
                or self.reply_offset + self.reply_bytes > len(mm)):
            raise ShmError("channel header does not match its size")
        self.request_tail = u64(_OFFSET_REQUEST_TAIL)
        self.request_head = u64(_OFFSET_REQUEST_HEAD)
        self.reply_tail = u64(_OFFSET_REPLY_TAIL)
        self.reply_head = u64(_OFFSET_REPLY_HEAD)
        self.server_sleeping = u32(_OFFSET_SERVER_SLEEPING)
        self.client_sleeping = u32(_OFFSET_CLIENT_SLEEPING)
        self.server_closed = u32(_OFFSET_SERVER_CLOSED)
        self.client_closed = u32(_OFFSET_CLIENT_CLOSED)


class ShmChannel:
    """The client's end of a channel, with the blocking-socket calls redis-py and most code use
    (`sendall`, `send`, `recv`, `recv_into`, `settimeout`, `close`). Not thread-safe, like a socket shared
    without a lock. `recv` returns b"" once the server has closed and its last replies were read."""

    def __init__(self, lifeline: socket.socket, fds: List[int], spin_us: Optional[int] = None):
        memfd, server_bell, client_bell = fds
        self._mm: Optional[mmap.mmap] = None
        self._h: Optional[_Header] = None
        try:
            self._mm = _map_memfd(memfd)
            self._h = _Header(self._mm)
        except BaseException:
            self._h = None
            if self._mm is not None:
                self._mm.close()
            for fd in fds:
                os.close(fd)
            raise
        os.close(memfd)
        self._lifeline = lifeline
        self._lifeline.setblocking(False)
        self._server_bell = server_bell
        self._client_bell = client_bell
        self.protocol = self._h.protocol
        # This side's own copies of the indices it owns; the shared words are only ever written from these.
        self._request_tail = self._h.request_tail.value
        self._request_head_seen = self._h.request_head.value
        self._reply_head = self._h.reply_head.value
        self._spin = _AdaptiveSpin((spin_us_from_env() if spin_us is None else spin_us) / 1e6)
        self._timeout: Optional[float] = None
        self._lifeline_lost = False

    # ------------------------------------------------------------------ rings
    def _check_open(self) -> _Header:
        if self._h is None:
            raise OSError(errno.EBADF, "shared-memory channel is closed")
        return self._h

    def _request_free_bytes(self) -> int:
        h = self._check_open()
        head = h.request_head.value
        # The server's head may only move forward, and not past what was written.
        if (head - self._request_head_seen) & _U64 > (self._request_tail - self._request_head_seen) & _U64:
            raise ShmError("shared-memory channel corrupt: request head ahead of the data or moved back")
        self._request_head_seen = head
        return h.request_bytes - ((self._request_tail - head) & _U64)

    def _reply_available_bytes(self) -> int:
        h = self._check_open()
        available = (h.reply_tail.value - self._reply_head) & _U64
        if available > h.reply_bytes:
            raise ShmError("shared-memory channel corrupt: reply tail more than a ring ahead, or moved back")
        return available

    def _server_closed(self) -> bool:
        return self._check_open().server_closed.value != 0 or self._lifeline_lost

    def _wake_server_if_sleeping(self) -> None:
        h = self._h
        _full_fence()
        if h.server_sleeping.value:
            # A plain store, not the Rust side's swap (Python has no atomic exchange on shared memory): if
            # the server woke and marked a new sleep between the load and this store, the ring below still
            # wakes that sleep, so a wake-up is never lost; at worst one is spurious. Store first, then ring.
            h.server_sleeping.value = 0
            _full_fence()
            _ring(self._server_bell)

    def _write_some(self, data) -> int:
        h = self._check_open()
        if self._server_closed():
            raise BrokenPipeError(errno.EPIPE, "the server closed the shared-memory channel")
        n = min(len(data), self._request_free_bytes())
        if n == 0:
            return 0
        capacity = h.request_bytes
        start = self._request_tail & (capacity - 1)
        first = min(n, capacity - start)
        base = h.request_offset
        view = memoryview(data)
        self._mm[base + start:base + start + first] = view[:first]
        if n > first:
            self._mm[base:base + n - first] = view[first:n]
        _publish_fence()
        self._request_tail = (self._request_tail + n) & _U64
        h.request_tail.value = self._request_tail
        self._wake_server_if_sleeping()
        return n

    def _read_some(self, limit: int) -> bytes:
        h = self._check_open()
        n = min(limit, self._reply_available_bytes())
        if n == 0:
            return b""
        _publish_fence()  # the tail's load before the bytes' loads
        capacity = h.reply_bytes
        start = self._reply_head & (capacity - 1)
        first = min(n, capacity - start)
        base = h.reply_offset
        data = self._mm[base + start:base + start + first]
        if n > first:
            data += self._mm[base:base + n - first]
        _publish_fence()  # the bytes' loads before the head's store frees their room
        self._reply_head = (self._reply_head + n) & _U64
        h.reply_head.value = self._reply_head
        self._wake_server_if_sleeping()
        return data

    # ------------------------------------------------------------------ waiting
    def _wait(self, ready, deadline: Optional[float]) -> bool:
        """Spins for the spin budget, then sleeps on the client doorbell (and the lifeline, whose end means
        the server is gone) until `ready()` or `deadline`; False on timeout."""
        if ready():
            return True
        started = time.monotonic()
        spin_until = started + self._spin.budget_s()
        spun = spin_until > started
        while True:
            now = time.monotonic()
            if ready():
                if spun and now < spin_until:
                    self._spin.hit()
                return True
            if deadline is not None and now >= deadline:
                return False
            if now < spin_until:
                # No sched_yield here: on a shared core it lets the answer arrive within the budget, but
                # only after the server's own spin, so the spin looks useful and stays (117 µs round trips
                # against 16 µs with the spin given up; docs/shm.md).
                continue
            if spun:
                self._spin.miss()
                spun = False
            h = self._h
            h.client_sleeping.value = 1
            _full_fence()
            if ready():
                h.client_sleeping.value = 0
                return True
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self._client_bell, self._lifeline], [], [], timeout)
            _drain(self._client_bell)
            h.client_sleeping.value = 0
            if self._lifeline in readable:
                self._check_lifeline()

    def _check_lifeline(self) -> None:
        """The lifeline became readable: the server closed it (or broke the protocol by writing on it)."""
        try:
            data = self._lifeline.recv(1)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            raise ShmError("the server wrote on the channel's socket")
        self._lifeline_lost = True

    def _deadline(self) -> Optional[float]:
        return None if self._timeout is None else time.monotonic() + self._timeout

    # ------------------------------------------------------------------ socket-like calls
    def settimeout(self, timeout: Optional[float]) -> None:
        self._timeout = None if timeout is None else max(0.0, float(timeout))

    def gettimeout(self) -> Optional[float]:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self.settimeout(None if flag else 0.0)

    def setsockopt(self, *args) -> None:
        """Socket options (TCP_NODELAY, keepalive) mean nothing on a channel."""

    def getsockname(self):
        return self._lifeline.getsockname()

    # No fileno(): no descriptor becomes readable when replies arrive (the server rings the doorbell only
    # while this side is marked sleeping), so a caller's select() on one would hang. Code that needs it fails
    # at once with AttributeError instead.

    def sendall(self, data) -> None:
        data = memoryview(data).cast("B")
        deadline = self._deadline()
        while len(data):
            n = self._write_some(data)
            data = data[n:]
            if len(data) and not self._wait(self._writable, deadline):
                raise socket.timeout("timed out writing to the shared-memory channel")

    def send(self, data) -> int:
        data = memoryview(data).cast("B")
        if not self._wait(self._writable, self._deadline()):
            raise socket.timeout("timed out writing to the shared-memory channel")
        return self._write_some(data)

    def _writable(self) -> bool:
        return self._server_closed() or self._request_free_bytes() > 0

    def _readable(self) -> bool:
        return self._reply_available_bytes() > 0 or self._server_closed()

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if flags:
            raise ValueError("recv flags are not supported on a shared-memory channel")
        if bufsize <= 0:
            return b""
        if not self._wait(self._readable, self._deadline()):
            raise socket.timeout("timed out reading from the shared-memory channel")
        # Replies published before a close are read first; b"" only once they are all read.
        return self._read_some(min(bufsize, _RECV_BYTES_MAX))

    def recv_into(self, buffer, nbytes: int = 0, flags: int = 0) -> int:
        view = memoryview(buffer).cast("B")
        data = self.recv(nbytes or len(view), flags)
        view[:len(data)] = data
        return len(data)

    def shutdown(self, how: int) -> None:
        """A no-op: `close` ends the channel."""

    def close(self) -> None:
        h, self._h = self._h, None
        if h is None:
            return
        h.client_closed.value = 1
        _full_fence()
        _ring(self._server_bell)
        # The ctypes views export the mapping's buffer: drop them before unmapping. A view still referenced
        # elsewhere (a traceback's frame) keeps the mapping alive until it goes; the memory is freed then.
        del h
        try:
            self._mm.close()
        except BufferError:
            pass
        for fd in (self._server_bell, self._client_bell):
            os.close(fd)
        self._lifeline.close()

    def __enter__(self) -> "ShmChannel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _AdaptiveSpin:
    """How long a wait spins before it sleeps, adapted to what spinning achieves (as fallow-client's). A spin
    pays off when the server's poller has a core of its own (a reply in microseconds); where the two share a
    core each spinner holds the core the other needs, and a round trip costs the whole budget and more
    (measured: 110 µs against 13 µs without spinning, docs/shm.md). A spin that sees the answer restores the
    full budget, one that runs out halves it, and every PROBE_INTERVAL-th wait spins the full budget again."""

    PROBE_INTERVAL = 64
    BUDGET_S_MIN = 1e-6

    def __init__(self, max_s: float):
        self.max_s = max(0.0, max_s)
        self.current_s = self.max_s
        self.waits = 0

    def budget_s(self) -> float:
        self.waits += 1
        return self.max_s if self.waits % self.PROBE_INTERVAL == 0 else self.current_s

    def hit(self) -> None:
        self.current_s = self.max_s

    def miss(self) -> None:
        self.current_s /= 2
        if self.current_s < self.BUDGET_S_MIN:
            self.current_s = 0.0


def _ring(fd: int) -> None:
    try:
        os.write(fd, (1).to_bytes(8, "little"))
    except BlockingIOError:
        pass  # the counter is full: the sleeper is woken anyway


def _drain(fd: int) -> None:
    try:
        os.read(fd, 8)
    except BlockingIOError:
        pass


def open_channel(path: Optional[str] = None, *, port: int = 6379, protocol: Optional[str] = None,
                 ring_bytes: Optional[int] = None, username: Optional[str] = None,
                 password: Optional[str] = None, spin_us: Optional[int] = None,
                 connect_timeout: float = _OPEN_TIMEOUT_S) -> ShmChannel:
    """Connects to the server's Unix socket (`path`, else `socket_path(port)`) and opens a channel.
    Raises ShmRefused (with the still-usable socket in `.sock`) when the server refuses, ShmError when the
    reply does not make a channel, OSError when the socket cannot be reached."""
    if not hasattr(socket, "recv_fds"):
        raise ShmError("shared-memory channels need Python 3.9+ (socket.recv_fds)")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(connect_timeout)
        sock.connect(path or socket_path(port))
        fds = _handshake(sock, protocol, ring_bytes, username, password)
        return ShmChannel(sock, fds, spin_us)
    except ShmRefused as refused:
        refused.sock = sock
        raise
    except BaseException:
        sock.close()
        raise


# --------------------------------------------------------------------------- redis-py
try:
    import redis
    from redis.connection import UnixDomainSocketConnection as _UnixConnection
except ImportError:  # redis-py is optional for the channel itself
    redis = None
    _UnixConnection = object


class ShmConnection(_UnixConnection):
    """A redis-py connection over a shared-memory channel, falling back to the Unix socket when the server
    refuses. `path` is the server's Unix socket; without it, `socket_path(port)` (so
    `redis.ConnectionPool(connection_class=fallow.ShmConnection, port=P)` works). `shm_refusal` says why the last
    connect fell back (None when it got a channel)."""

    def __init__(self, path: str = "", port: int = 6379, host=None, socket_keepalive=None,
                 socket_keepalive_options=None, socket_type=0, shm_ring_bytes: Optional[int] = None,
                 shm_spin_us: Optional[int] = None, **kwargs):
        kwargs.pop("maint_notifications_config", None)
        super().__init__(path=path or socket_path(port), **kwargs)
        self.shm_ring_bytes = shm_ring_bytes
        self.shm_spin_us = shm_spin_us
        self.shm_refusal: Optional[str] = None

    def _connect(self):
        password = self.password
        username = self.username
        if self.credential_provider is not None:
            credentials = self.credential_provider.get_credentials()
            username, password = (None, credentials[0]) if len(credentials) == 1 else credentials
        try:
            # PROTOCOL resp: redis-py speaks RESP even on the memcached port's control socket.
            channel = open_channel(self.path, protocol="resp", ring_bytes=self.shm_ring_bytes,
                                   username=username, password=password, spin_us=self.shm_spin_us,
                                   connect_timeout=self.socket_connect_timeout or _OPEN_TIMEOUT_S)
        except ShmRefused as refused:
            # The socket is still the connection it was: go on over it.
            self.shm_refusal = str(refused)
            refused.sock.settimeout(self.socket_timeout)
            return refused.sock
        except ShmError as error:
            self.shm_refusal = str(error)
            return super()._connect()
        self.shm_refusal = None
        channel.settimeout(self.socket_timeout)
        return channel

    @property
    def is_shm(self) -> bool:
        return isinstance(self._sock, ShmChannel)


def shm_redis(port: int = 6379, path: Optional[str] = None, **kwargs) -> "redis.Redis":
    """A redis.Redis whose connections are shared-memory channels to the server on `path` (its Unix
    socket; default `socket_path(port)`), each falling back to the socket when the server refuses.
    Other keyword arguments are redis-py's (decode_responses, protocol, password, socket_timeout...) or
    `shm_ring_bytes` / `shm_spin_us`."""
    if redis is None:
        raise ImportError("shm_redis needs redis-py")
    pool_kwargs = {k: kwargs.pop(k) for k in ("max_connections",) if k in kwargs}
    pool = redis.ConnectionPool(connection_class=ShmConnection, path=path or socket_path(port),
                                **kwargs, **pool_kwargs)
    return redis.Redis(connection_pool=pool)


# --------------------------------------------------------------------------- pymemcache
class _MemcacheSocket:
    """What `_ShmSocketModule.socket()` returns: on `connect(path)` a memcached channel on that Unix socket,
    or, when the server refuses, a TCP connection to the memcached port (the Unix socket speaks RESP, so it
    is no fallback for memcached traffic). Every other call goes to whichever was opened."""

    def __init__(self, module: "_ShmSocketModule"):
        self._module = module
        self._timeout: Optional[float] = None
        self._inner = None

    def settimeout(self, timeout: Optional[float]) -> None:
        self._timeout = timeout
        if self._inner is not None:
            self._inner.settimeout(timeout)

    def setsockopt(self, *args) -> None:
        if self._inner is not None and not isinstance(self._inner, ShmChannel):
            self._inner.setsockopt(*args)

    def connect(self, path: str) -> None:
        module = self._module
        try:
            self._inner = open_channel(path, protocol="memcache", ring_bytes=module.ring_bytes,
                                       spin_us=module.spin_us,
                                       connect_timeout=self._timeout or _OPEN_TIMEOUT_S)
            module.shm_refusal = None
        except (ShmRefused, ShmError) as error:
            if isinstance(error, ShmRefused) and error.sock is not None:
                error.sock.close()
            module.shm_refusal = str(error)
            self._inner = socket.create_connection(module.fallback_address, timeout=self._timeout)
            self._inner.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._inner.settimeout(self._timeout)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def __getattr__(self, name):
        if self._inner is None:
            raise OSError(errno.ENOTCONN, "not connected")
        return getattr(self._inner, name)


class _ShmSocketModule:
    """A stand-in for the `socket` module, as pymemcache's `socket_module` argument takes."""

    AF_UNIX = socket.AF_UNIX
    SOCK_STREAM = socket.SOCK_STREAM
    IPPROTO_TCP = socket.IPPROTO_TCP
    TCP_NODELAY = socket.TCP_NODELAY
    SOL_SOCKET = socket.SOL_SOCKET
    error = OSError
    timeout = socket.timeout

    def __init__(self, fallback_address, ring_bytes: Optional[int], spin_us: Optional[int]):
        self.fallback_address = fallback_address
        self.ring_bytes = ring_bytes
        self.spin_us = spin_us
        # Why the last connect fell back to TCP (None when it got a channel).
        self.shm_refusal: Optional[str] = None

    def socket(self, family=socket.AF_UNIX, type=socket.SOCK_STREAM, proto=0) -> _MemcacheSocket:
        if family != socket.AF_UNIX:
            raise ValueError("shm_memcache clients connect to a Unix socket path")
        return _MemcacheSocket(self)


def shm_memcache(port: int = 11211, path: Optional[str] = None, host: str = "127.0.0.1",
                 ring_bytes: Optional[int] = None, spin_us: Optional[int] = None, **kwargs):
    """A pymemcache `Client` on a memcached channel (SHM.OPEN PROTOCOL memcache) opened on `path` (default
    `socket_path(port)`, the memcached port's control socket), reconnecting the same way when needed; when
    the server refuses, the client talks to the memcached port over TCP (`host`, `port`). Other keyword
    arguments are pymemcache's (timeout, connect_timeout, serde...). `client.socket_module.shm_refusal`
    says why the last connect fell back."""
    from pymemcache.client.base import Client

    module = _ShmSocketModule((host, port), ring_bytes, spin_us)
    return Client(path or socket_path(port), socket_module=module, **kwargs)
