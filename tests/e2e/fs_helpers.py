"""Helpers for the `fallow fs` tests (tests/e2e/test_fs.py): a mounted filesystem process with a teardown that
never leaves a mount behind, a hang watchdog, and the server settings the fs tests use."""
from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from helpers import RawConn, ServerProc, fallow_bin

MOUNT_TIMEOUT_S = 15.0  # how long `fallow fs` may take to mount
STOP_TIMEOUT_S = 10.0  # how long it may take to unmount and exit on SIGTERM/SIGINT
CMD_TIMEOUT_S = 15.0  # any helper subprocess (mountpoint, fusermount3, fallow fs --stats)
STATS_FRESH_TIMEOUT_S = 5.0  # how long a stats snapshot newer than the request may take to appear

# The server the fs tests talk to: a small elastic pool (so "shrink it" means something), no tier 2.
FS_SERVER_OPTS = {"threads": 2, "shards": 4, "memory-mode": "elastic", "elastic-reserve": "0",
                  "elastic-max": "512mb", "tier2-size": "0"}
PR_SET_PDEATHSIG = 1  # prctl(2)


def _term_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, so even a killed pytest leaves no mount
    behind (`fallow fs` unmounts on SIGTERM)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def fuse_skip_reason() -> str | None:
    """Why FUSE tests cannot run here, or None. Only a missing /dev/fuse skips: everything else is installed by
    scripts/install-test-deps.sh, and its absence is a failure, not a skip."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container): `fallow fs` cannot mount"
    return None


def is_mounted(path: Path) -> bool:
    """True when `path` is a mount point, dead ones (ENOTCONN) included: /proc/self/mounts lists those too."""
    target = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            # octal escapes for spaces etc.: our paths have none
            if len(fields) > 1 and fields[1] == target:
                return True
    return False


def mountpoint_q(path: Path) -> bool:
    """`mountpoint -q`: the path is a mount point. A dead FUSE mount may pass too (the kernel answers its
    root's stat from cached attributes), so waiting for a mount uses live_mount()."""
    return subprocess.run(["mountpoint", "-q", str(path)], timeout=CMD_TIMEOUT_S).returncode == 0


FUSE_SUPER_MAGIC = "65735546"  # statfs f_type of a FUSE filesystem, as `stat -f -c %t` prints it


def live_mount(path: Path) -> bool:
    """A live FUSE mount on `path`: `mountpoint -q`, and a statfs that a FUSE filesystem answers (statfs always
    goes to the filesystem, so a dead mount fails it with ENOTCONN; the type tells a live FUSE mount from the
    bare directory a `fallow fs` leaves between detaching a dead mount and mounting). In a child process with a
    timeout, so a filesystem that does not answer cannot hang the test."""
    if not mountpoint_q(path):
        return False
    out = subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, timeout=CMD_TIMEOUT_S)
    return out.returncode == 0 and out.stdout.strip().decode() == FUSE_SUPER_MAGIC


def force_unmount(path: Path) -> None:
    """Last resort in teardown: detach whatever is mounted on `path` (live or dead)."""
    for cmd in (["fusermount3", "-u", "-z", str(path)], ["umount", "-l", str(path)]):
        if not is_mounted(path):
            return
        subprocess.run(cmd, timeout=CMD_TIMEOUT_S, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class FsMount:
    """One `fallow fs MOUNT --backing DIR ...` process. `stop()` (SIGTERM) and `cleanup()` always leave the
    mount point unmounted; `cleanup()` also kills the process if it is still there."""

    def __init__(self, server: ServerProc | None, root: Path, *args: str, backing: Path | None = None,
                 mountpoint: Path | None = None):
        self.server, self.args = server, [str(a) for a in args]
        self.root = root
        self.backing = backing or root / "backing"
        self.mnt = mountpoint or root / "mnt"
        self.backing.mkdir(parents=True, exist_ok=True)
        if not is_mounted(self.mnt):  # a dead mount left there answers ENOTCONN even to mkdir's stat
            self.mnt.mkdir(parents=True, exist_ok=True)
        self.log = root / f"fs-{id(self)}.log"
        self.proc: subprocess.Popen | None = None

    def argv(self) -> list[str]:
        a = [str(fallow_bin()), "fs", str(self.mnt), "--backing", str(self.backing)]
        if self.server is not None:
            a += ["--server", f"unix:{self.server.unixsocket}"]
        return a + self.args

    def start(self) -> "FsMount":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=_term_with_parent)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fallow fs exited with {self.proc.returncode} before mounting:\n"
                                   f"{self.logtext()}")
            if live_mount(self.mnt):
                return self
            time.sleep(0.05)
        self.cleanup()
        raise TimeoutError(f"fallow fs did not mount {self.mnt} in {MOUNT_TIMEOUT_S}s:\n{self.logtext()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def logtext(self, tail_bytes: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-tail_bytes:]
        except OSError:
            return ""

    def stats_raw(self) -> dict:
        """`fallow fs --stats MOUNT` as printed (JSON). Right after the mount the fs may not have written its
        first stats file yet (it writes one a second): that answer is retried for STATS_FRESH_TIMEOUT_S."""
        deadline = time.monotonic() + STATS_FRESH_TIMEOUT_S
        while True:
            out = subprocess.run([str(fallow_bin()), "fs", "--stats", str(self.mnt)], capture_output=True,
                                 timeout=CMD_TIMEOUT_S)
            if out.returncode == 0 or time.monotonic() > deadline or not self.alive():
                break
            time.sleep(0.05)
        assert out.returncode == 0, f"fallow fs --stats failed ({out.returncode}): {out.stderr.decode()}"
        return json.loads(out.stdout)

    def stats(self) -> dict:
        """The counters, as of now: the running fs writes them to a stats file now and then, so this waits for
        a snapshot taken after the call began (`unix_time_ms`). Counters nested under "counters" are lifted to
        the top level next to the other fields."""
        asked_ms = time.time() * 1000
        deadline = time.monotonic() + STATS_FRESH_TIMEOUT_S
        while True:
            raw = self.stats_raw()
            taken_ms = raw.get("unix_time_ms")
            if taken_ms is None or taken_ms > asked_ms or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert taken_ms is None or taken_ms > asked_ms, \
            f"fallow fs --stats: no snapshot newer than the request after {STATS_FRESH_TIMEOUT_S}s: {raw}"
        return {**{k: v for k, v in raw.items() if k != "counters"}, **raw.get("counters", {})}

    def signal(self, sig: int, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """Send `sig`; wait for the exit; returns the exit code (None if it did not exit in time)."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill9(self) -> None:
        """A crash: the mount is left dead (ENOTCONN) until someone unmounts it."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)

    def cleanup(self) -> None:
        if self.alive():
            if self.signal(signal.SIGTERM) is None:
                self.kill9()
        force_unmount(self.mnt)


class HangGuard:
    """A watchdog for FUSE calls: the test calls `beat(what)` before each operation; when one takes longer than
    `timeout_s`, the guard kills `fallow fs` (every pending request then fails with ENOTCONN, so the test thread
    gets an error instead of hanging in the kernel) and remembers what hung. Use as a context manager: leaving
    it raises AssertionError naming the operation that hung."""

    def __init__(self, fs: FsMount, timeout_s: float = 10.0):
        self.fs, self.timeout_s = fs, timeout_s
        self.what, self.last = "start", time.monotonic()
        self.hung: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="fs-hang-guard")

    def beat(self, what: str) -> None:
        self.what, self.last = what, time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if time.monotonic() - self.last > self.timeout_s:
                self.hung = self.what
                self.fs.kill9()
                return

    def __enter__(self) -> "HangGuard":
        self.beat("start")
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        self._thread.join()
        if self.hung is not None:
            raise AssertionError(f"a filesystem operation hung for more than {self.timeout_s}s: {self.hung}\n"
                                 f"--- fallow fs log ---\n{self.fs.logtext()}") from exc
        return False


class FsWorld:
    """A test's temporary directory with its mounts; `cleanup()` unmounts every mount made here, then removes the
    directory (never while anything is still mounted in it: that would delete through the mount)."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="fallow-fs-test-"))
        self.mounts: list[FsMount] = []
        _live_worlds.add(self)

    def mount(self, server: ServerProc | None, *args, **kw) -> FsMount:
        name = kw.pop("name", f"m{len(self.mounts)}")
        sub = self.root / name
        sub.mkdir(exist_ok=True)
        fs = FsMount(server, sub, *args, **kw)
        self.mounts.append(fs)
        return fs.start()

    def cleanup(self) -> list[str]:
        problems = []
        for fs in self.mounts:
            fs.cleanup()
            if is_mounted(fs.mnt):
                problems.append(f"{fs.mnt} is still mounted after cleanup")
        if not problems:
            shutil.rmtree(self.root, ignore_errors=True)
        _live_worlds.discard(self)
        return problems


_live_worlds: set[FsWorld] = set()


@atexit.register
def _cleanup_leftovers() -> None:
    """A test run that ends without its fixtures' teardown (an internal error) still unmounts what it mounted."""
    for world in list(_live_worlds):
        world.cleanup()


def set_config(server: ServerProc, key: str, value) -> None:
    with RawConn(path=server.unixsocket, timeout=10) as c:
        reply = c.cmd("CONFIG", "SET", key, str(value))
        assert reply == "OK", f"CONFIG SET {key} {value}: {reply!r}"


def server_cmd(server: ServerProc, *args):
    with RawConn(path=server.unixsocket, timeout=10) as c:
        return c.cmd(*args)
