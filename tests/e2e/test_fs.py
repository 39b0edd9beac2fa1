"""`fallow fs`: the FUSE file cache over a backing directory (issue 21, docs/fs.md).

Every test starts its own fallow server (helpers.ServerProc) and `fallow fs MOUNT --backing DIR` on it, waits for
`mountpoint -q`, and always unmounts and stops it in teardown (fs_helpers.FsWorld), also when the test fails.
Filesystem calls run under a watchdog (fs_helpers.HangGuard): one that takes longer than its timeout kills
`fallow fs`, so a hang becomes a failure naming the call, never a stuck CI job.

Groups: the fsx-style randomized model test (tests/e2e/fsx.py); stale data (writes, truncates and renames behind
the mount); faults (fallow killed mid-read, the pool shrunk to zero, a backing file removed while open);
passthrough of metadata operations; the counters of `fallow fs --stats`; lifecycle (signals, a dead mount).
Only a missing /dev/fuse skips them.

FS_MODEL_OPS (default 100000) is the total number of fsx operations over the model tests.
"""
from __future__ import annotations

import errno
import mmap
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fs_helpers import (FS_SERVER_OPTS, FsWorld, HangGuard, fuse_skip_reason, is_mounted, mountpoint_q,
                        server_cmd, set_config)
from fsx import Fsx, FsxConfig
from helpers import TARGET, ServerProc, fallow_bin, wait_for

_skip = fuse_skip_reason()
pytestmark = [
    pytest.mark.fallow_only,
    pytest.mark.skipif(_skip is not None, reason=_skip or ""),
]

BLOCK = 131072  # the default --block-bytes
MODEL_OPS_TOTAL = int(os.environ.get("FS_MODEL_OPS", "100000"))
OP_TIMEOUT_S = 10.0  # the HangGuard's limit for one filesystem call
# The model runs take 5-30 s each on an idle 2-core machine and up to 3x that while other builds and benchmarks
# share it: they get this much instead of conftest's 60 s watchdog (a hang is caught by the HangGuard anyway).
MODEL_TEST_TIMEOUT_S = 150


def _longer_watchdog() -> None:
    """Re-arms conftest's SIGALRM watchdog (its hook disarms it after the test)."""
    signal.alarm(MODEL_TEST_TIMEOUT_S)


# ------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def world():
    w = FsWorld()
    yield w
    for fs in w.mounts:  # shown by pytest when the test failed
        print(f"--- fallow fs log ({fs.mnt}) ---\n{fs.logtext()}")
    panics = [fs.mnt for fs in w.mounts if "panicked" in fs.logtext(1 << 20)]
    problems = w.cleanup()
    assert not problems, problems
    assert not panics, f"fallow fs panicked on {panics}"


@pytest.fixture
def fs_server():
    """A private fallow for one test: small elastic pool, fast regrowth after a shrink, no tier 2."""
    if TARGET != "fallow":
        pytest.skip("fallow-only")
    s = ServerProc("fallow", {**FS_SERVER_OPTS, "elastic-grow-bytes-per-sec": "8gb"})
    s.start()
    yield s
    s.cleanup()


def stats_delta(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after
            if isinstance(after.get(k), (int, float)) and isinstance(before.get(k), (int, float))}


def other_process_write(path: Path, offset: int, data: bytes) -> None:
    """A write by another process straight into the backing file (behind the mount)."""
    code = ("import os,sys; d=sys.stdin.buffer.read(); fd=os.open(sys.argv[1], os.O_WRONLY); "
            "os.pwrite(fd, d, int(sys.argv[2])); os.close(fd)")
    subprocess.run([sys.executable, "-c", code, str(path), str(offset)], input=data, check=True, timeout=15)


def other_process(code: str, *args, stdin: bytes = b"") -> None:
    """Run `code` in another Python process (os and sys imported; sys.argv[1:] = args)."""
    subprocess.run([sys.executable, "-c", "import os,sys\n" + code, *map(str, args)], input=stdin, check=True,
                   timeout=15)


def read_file(path: Path, chunk: int = BLOCK) -> bytes:
    """The whole file through one fd, `chunk` bytes per read() (block-aligned reads by default)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while True:
            b = os.read(fd, chunk)
            if not b:
                return b"".join(parts)
            parts.append(b)
    finally:
        os.close(fd)


def read_blocks(path: Path, size: int, block: int = BLOCK) -> bytes:
    """`size` bytes from the start, one pread per block and none at the end of the file (a read at EOF goes
    to the backing file, and the counter tests count backing reads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return b"".join(os.pread(fd, min(block, size - off), off) for off in range(0, size, block))
    finally:
        os.close(fd)


def pread_full(fd: int, n: int, off: int = 0) -> bytes:
    out = b""
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return out


def blocks_of(size: int, block: int = BLOCK) -> int:
    return (size + block - 1) // block


# ------------------------------------------------------------------------------------------------- 1. model
def _pressure_hook(server: ServerProc):
    """Cache pressure for the model test: drop every fs block, drop some, move the pool between full, small
    and (nearly) zero, or close the fs's connections to fallow (it reconnects; a write whose invalidation is
    lost that way must not leave stale blocks). Returns what it did, for the op history."""
    def hook(op_no: int, rng: random.Random) -> str:
        action = rng.choice(["reclaim-all", "reclaim-some", "pool-small", "pool-zero", "pool-full", "pool-full",
                             "client-kill"])
        if action == "client-kill":
            return f"{action} killed={server_cmd(server, 'CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes')!r}"
        if action == "reclaim-all":
            reply = server_cmd(server, "ELASTIC", "RECLAIM", "1gb", "FAST")
            return f"{action} released={reply[0] if isinstance(reply, list) else reply!r}"
        if action == "reclaim-some":
            reply = server_cmd(server, "ELASTIC", "RECLAIM", "3mb", "CAREFUL")
            return f"{action} released={reply[0] if isinstance(reply, list) else reply!r}"
        size = {"pool-small": "6mb", "pool-zero": "1", "pool-full": FS_SERVER_OPTS["elastic-max"]}[action]
        set_config(server, "elastic-max", size)
        return f"{action} elastic-max={size}"
    return hook


MODEL_CASES = {
    # name: (share of FS_MODEL_OPS, fallow fs flags, block bytes, mmap reads, max file bytes, truncates behind)
    "128k-direct": (0.4, ["--direct-io"], BLOCK, False, 12 * BLOCK, True),
    "4k-direct": (0.3, ["--direct-io", "--block-bytes", "4096"], 4096, False, 96 * 4096, True),
    "128k-pagecache-mmap": (0.3, [], BLOCK, True, 12 * BLOCK, True),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_model_random_ops(fs_server, world, case):
    _longer_watchdog()
    share, flags, block, use_mmap, max_file, truncates_behind = MODEL_CASES[case]
    seed = int(os.environ.get("FS_MODEL_SEED", random.randrange(1 << 32)))
    ops = max(1000, int(MODEL_OPS_TOTAL * share))
    print(f"fsx case={case} seed={seed} ops={ops} (rerun: FS_MODEL_SEED={seed})")
    fs = world.mount(fs_server, *flags, "--revalidate-ms", "200")
    cfg = FsxConfig(ops=ops, seed=seed, block_bytes=block, files=10, max_file_bytes=max_file,
                    mmap_reads=use_mmap, behind_truncates=truncates_behind,
                    hook_every_ops=max(200, ops // 60), check_every_ops=max(500, ops // 10))
    with HangGuard(fs, OP_TIMEOUT_S) as guard:
        fsx = Fsx(fs.mnt, fs.backing, cfg, hook=_pressure_hook(fs_server), progress=guard.beat)
        try:
            fsx.setup()
            result = fsx.run()
        finally:
            fsx.close_all()
        st = fs.stats()
    print(f"fsx result {result}")
    print(f"fs stats {st}")
    assert result["counts"]["read"] > ops // 5 and result["counts"]["write"] > ops // 8
    assert st["reads"] > 0 and st["writes"] > 0
    # the pressure hook ran: the cache had to go to the backing again after drops
    assert st["cache_misses"] > 0 and st["backing_reads"] > 0
    assert fs.alive(), fs.logtext()


# ------------------------------------------------------------------------------------------------- 2. stale data
MODES = {"direct-io": ["--direct-io"], "pagecache": []}


@pytest.mark.parametrize("mode", list(MODES))
def test_stale_write_behind_close_to_open(fs_server, world, mode):
    fs = world.mount(fs_server, *MODES[mode])
    data = random.randbytes(3 * BLOCK + 100)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for i in range(2):  # the second read is served from the cache
            g.beat(f"read {i}")
            assert read_file(fs.mnt / "f") == data
        # same size, so only mtime (or the generation) can tell: one byte, then a range across a block boundary
        for off, new in [(7, b"\xff" if data[7] != 0xff else b"\x00"), (BLOCK - 50, random.randbytes(4000))]:
            other_process_write(fs.backing / "f", off, new)
            data = data[:off] + new + data[off + len(new):]
            g.beat(f"reopen after write behind at {off}")
            assert read_file(fs.mnt / "f") == data, f"stale data after close/reopen (write behind at {off})"


@pytest.mark.parametrize("mode", list(MODES))
def test_stale_write_behind_while_open(fs_server, world, mode):
    revalidate_ms = 200
    fs = world.mount(fs_server, *MODES[mode], "--revalidate-ms", revalidate_ms)
    data = random.randbytes(2 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        fd = os.open(fs.mnt / "f", os.O_RDONLY)
        try:
            g.beat("first reads")
            assert pread_full(fd, len(data)) == data
            assert pread_full(fd, len(data)) == data
            new = bytes(b ^ 0x5A for b in data[BLOCK - 10:BLOCK + 10])
            other_process_write(fs.backing / "f", BLOCK - 10, new)
            fresh = data[:BLOCK - 10] + new + data[BLOCK + 10:]
            t0 = time.monotonic()
            limit_s = revalidate_ms / 1000 + 1.0  # the period plus slack for a loaded machine
            got = None
            while time.monotonic() - t0 < limit_s:
                g.beat("read while open")
                got = pread_full(fd, len(data))
                if got == fresh:
                    break
                assert got == data, "a read while open returned neither the old nor the new bytes"
                time.sleep(0.02)
            took = time.monotonic() - t0
            assert got == fresh, f"still stale {took:.2f}s after a write behind (revalidate {revalidate_ms} ms)"
            print(f"fresh after {took * 1000:.0f} ms (revalidate-ms {revalidate_ms})")
        finally:
            os.close(fd)


@pytest.mark.parametrize("mode", list(MODES))
def test_stale_truncate_behind_close_to_open(fs_server, world, mode):
    fs = world.mount(fs_server, *MODES[mode], "--revalidate-ms", 200)
    data = random.randbytes(3 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("read")
        assert read_file(fs.mnt / "f") == data
        assert read_file(fs.mnt / "f") == data
        other_process("os.truncate(sys.argv[1], int(sys.argv[2]))", fs.backing / "f", BLOCK + BLOCK // 2)
        g.beat("read after truncate behind")
        got = read_file(fs.mnt / "f")
        assert got == data[:BLOCK + BLOCK // 2], \
            f"after a truncate behind to {BLOCK + BLOCK // 2} bytes a fresh open read {len(got)} bytes"
        # back to the old size with other bytes: the size alone cannot tell this apart from the cached file
        tail = random.randbytes(BLOCK + BLOCK // 2)
        other_process("open(sys.argv[1], 'ab').write(sys.stdin.buffer.read())", fs.backing / "f", stdin=tail)
        g.beat("read after regrow behind")
        assert read_file(fs.mnt / "f") == data[:BLOCK + BLOCK // 2] + tail


@pytest.mark.parametrize("mode", list(MODES))
def test_stale_truncate_behind_while_open(fs_server, world, mode):
    """An fd open through the mount sees a truncate behind it within the revalidation period; meanwhile it
    reads the old bytes or the new ones, never anything else."""
    revalidate_ms = 200
    fs = world.mount(fs_server, *MODES[mode], "--revalidate-ms", revalidate_ms)
    data = random.randbytes(3 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        fd = os.open(fs.mnt / "f", os.O_RDONLY)
        try:
            g.beat("read")
            assert pread_full(fd, len(data)) == data
            other_process("os.truncate(sys.argv[1], 1000)", fs.backing / "f")
            took = _fresh_within(g, lambda: pread_full(fd, len(data)), data[:1000], data,
                                 revalidate_ms / 1000 + 1.0, "an open fd after a truncate behind")
            print(f"fresh after {took * 1000:.0f} ms (revalidate-ms {revalidate_ms})")
        finally:
            os.close(fd)


def test_stale_rename_over_cached_file_behind(fs_server, world):
    revalidate_ms = 200
    fs = world.mount(fs_server, "--direct-io", "--revalidate-ms", revalidate_ms)
    a, b = random.randbytes(2 * BLOCK + 5), random.randbytes(2 * BLOCK + 5)  # same size
    (fs.backing / "a").write_bytes(a)
    (fs.backing / "b").write_bytes(b)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for _ in range(2):
            g.beat("read a and b")
            assert read_file(fs.mnt / "a") == a and read_file(fs.mnt / "b") == b
        # The kernel keeps the name -> inode binding for the entry timeout (--revalidate-ms, docs/fs.md
        # "Consistency"): within it an open of `a` may still reach the old file; after it, never.
        limit_s = revalidate_ms / 1000 + 1.0
        other_process("os.rename(sys.argv[1], sys.argv[2])", fs.backing / "b", fs.backing / "a")
        took = _fresh_within(g, lambda: read_file(fs.mnt / "a"), b, a, limit_s, "a after b was renamed over it")
        assert wait_for(lambda: not (fs.mnt / "b").exists(), timeout=limit_s), "b still visible through the mount"
        # the way editors save: a new file renamed over the old one
        c = random.randbytes(len(a))
        (fs.backing / "a.tmp").write_bytes(c)
        os.rename(fs.backing / "a.tmp", fs.backing / "a")
        took2 = _fresh_within(g, lambda: read_file(fs.mnt / "a"), c, b, limit_s, "a after an editor-style save")
        print(f"fresh after {took * 1000:.0f} ms and {took2 * 1000:.0f} ms (revalidate-ms {revalidate_ms})")


def _fresh_within(g: HangGuard, read, fresh: bytes, old: bytes, limit_s: float, what: str) -> float:
    """Polls read() until it returns `fresh` (anything but `old` or `fresh` fails at once); returns the time."""
    t0 = time.monotonic()
    while True:
        g.beat(f"read {what}")
        got = read()
        took = time.monotonic() - t0
        if got == fresh:
            return took
        assert got == old, f"{what}: neither the old nor the new bytes ({len(got)} bytes)"
        assert took < limit_s, f"{what}: still the old bytes after {took:.2f}s"
        time.sleep(0.01)


def test_stale_rename_over_cached_file_through_mount(fs_server, world):
    fs = world.mount(fs_server, "--direct-io")
    a, b = random.randbytes(2 * BLOCK + 5), random.randbytes(2 * BLOCK + 5)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("write a and b")
        (fs.mnt / "a").write_bytes(a)
        (fs.mnt / "b").write_bytes(b)
        for _ in range(2):
            assert read_file(fs.mnt / "a") == a and read_file(fs.mnt / "b") == b
        fd_a = os.open(fs.mnt / "a", os.O_RDONLY)  # the old a stays readable through an fd opened before
        try:
            g.beat("rename b over a")
            os.rename(fs.mnt / "b", fs.mnt / "a")
            assert read_file(fs.mnt / "a") == b
            assert not (fs.mnt / "b").exists()
            assert (fs.backing / "a").read_bytes() == b and not (fs.backing / "b").exists()
            g.beat("read the replaced a through its old fd")
            assert pread_full(fd_a, len(a)) == a
        finally:
            os.close(fd_a)
        # a write through the mount after the rename updates what the next reader sees
        g.beat("overwrite a")
        with open(fs.mnt / "a", "r+b") as f:
            f.seek(BLOCK - 3)
            f.write(b"xyzxyz")
        want = b[:BLOCK - 3] + b"xyzxyz" + b[BLOCK + 3:]
        assert read_file(fs.mnt / "a") == want and (fs.backing / "a").read_bytes() == want


@pytest.mark.parametrize("mode", list(MODES))
def test_mmap_reads(fs_server, world, mode):
    """Reads through a shared read-only mapping see the file's bytes, and fresh bytes after a write behind the
    mount once the file is opened and mapped again."""
    fs = world.mount(fs_server, *MODES[mode])
    data = random.randbytes(3 * BLOCK + 123)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for i in range(2):
            g.beat(f"mmap read {i}")
            assert _mapped(fs.mnt / "f") == data
        other_process_write(fs.backing / "f", BLOCK - 2, b"behind!")
        data = data[:BLOCK - 2] + b"behind!" + data[BLOCK + 5:]
        g.beat("mmap read after a write behind")
        assert _mapped(fs.mnt / "f") == data


def _mapped(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        with mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ) as m:
            return m[:]
    finally:
        os.close(fd)


def test_restart_reuses_unchanged_blocks_only(fs_server, world):
    """A second `fallow fs` on the same backing and server reuses the blocks of a file unchanged since (cache
    hits on its first read), and never those of a file changed while no fs ran, nor of one written through the
    first fs just before it was killed."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off")
    same, changed, written = (random.randbytes(3 * BLOCK) for _ in range(3))
    for name, data in (("same", same), ("changed", changed), ("written", written)):
        (fs.backing / name).write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for name, data in (("same", same), ("changed", changed), ("written", written)):
            g.beat(f"warm {name}")
            assert read_blocks(fs.mnt / name, len(data)) == data
    assert fs.signal(signal.SIGTERM) == 0
    other_process_write(fs.backing / "changed", BLOCK + 7, b"changed while unmounted")
    changed = changed[:BLOCK + 7] + b"changed while unmounted" + changed[BLOCK + 30:]

    second = world.mount(fs_server, "--direct-io", "--prefetch", "off", backing=fs.backing, name="second")
    with HangGuard(second, OP_TIMEOUT_S) as g:
        g.beat("write through, then kill -9")
        fd = os.open(second.mnt / "written", os.O_WRONLY)
        os.pwrite(fd, b"written through", 2 * BLOCK - 3)
        os.close(fd)
        written = written[:2 * BLOCK - 3] + b"written through" + written[2 * BLOCK + 12:]
    second.kill9()

    third = world.mount(fs_server, "--direct-io", "--prefetch", "off", backing=fs.backing,
                        mountpoint=second.mnt, name="third")
    with HangGuard(third, OP_TIMEOUT_S) as g:
        s0 = third.stats()
        g.beat("read same")
        assert read_blocks(third.mnt / "same", len(same)) == same
        d = stats_delta(s0, third.stats())
        g.beat("read changed and written")
        assert read_blocks(third.mnt / "changed", len(changed)) == changed, "blocks from before the change"
        assert read_blocks(third.mnt / "written", len(written)) == written, "blocks from before the write"
    assert d["cache_hits"] == 3, f"an unchanged file's blocks were not reused after a restart: {d}"


def test_hard_links_see_each_others_writes(fs_server, world):
    """Two names of one file, both open and cached: a write through one is read at once through the other."""
    fs = world.mount(fs_server, "--direct-io")
    data = random.randbytes(2 * BLOCK)
    (fs.backing / "one").write_bytes(data)
    os.link(fs.backing / "one", fs.backing / "two")
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        fd1 = os.open(fs.mnt / "one", os.O_RDWR)
        fd2 = os.open(fs.mnt / "two", os.O_RDONLY)
        try:
            g.beat("read both names")
            for _ in range(2):
                assert pread_full(fd1, len(data)) == data and pread_full(fd2, len(data)) == data
            os.pwrite(fd1, b"via one", BLOCK - 3)
            data = data[:BLOCK - 3] + b"via one" + data[BLOCK + 4:]
            g.beat("read the other name")
            assert pread_full(fd2, len(data)) == data, "the other name's open fd read the old bytes"
            assert read_file(fs.mnt / "two") == data
            os.ftruncate(fd1, 100)
            assert pread_full(fd2, len(data)) == data[:100]
        finally:
            os.close(fd1)
            os.close(fd2)


@pytest.mark.parametrize("policy", ["feedback", "fixed:8"])
def test_writes_racing_read_ahead_leave_no_stale_block(fs_server, world, policy):
    """A writer changes random ranges while sequential readers stream the file (read-ahead in flight all the
    time); once both stop, every block read through the mount, from fallow or not, equals the backing file."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", policy)
    size = 24 * BLOCK
    (fs.backing / "f").write_bytes(random.randbytes(size))
    stop, errors = threading.Event(), []
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        def writer():
            rng = random.Random(1)
            fd = os.open(fs.mnt / "f", os.O_WRONLY)
            try:
                while not stop.is_set():
                    off = rng.randrange(size - 1)
                    os.pwrite(fd, rng.randbytes(min(rng.randint(1, 2 * BLOCK), size - off)), off)
            except OSError as e:
                errors.append(repr(e))
            finally:
                os.close(fd)

        def reader():
            try:
                while not stop.is_set():
                    g.beat("sequential read under writes")
                    got = read_file(fs.mnt / "f", chunk=64 * 1024)
                    if len(got) != size:
                        errors.append(f"read {len(got)} bytes of {size}")
            except OSError as e:
                errors.append(repr(e))

        threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(OP_TIMEOUT_S * 2)
        assert not errors, errors
        time.sleep(0.3)  # read-ahead still queued finishes (and must not store what the writes replaced)
        want = (fs.backing / "f").read_bytes()
        for i in range(3):
            g.beat(f"final read {i}")
            got = read_blocks(fs.mnt / "f", size)
            bad = [b for b in range(size // BLOCK)
                   if got[b * BLOCK:(b + 1) * BLOCK] != want[b * BLOCK:(b + 1) * BLOCK]]
            assert not bad, f"pass {i}: blocks {bad} differ from the backing file (stale cache)"


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10


@pytest.mark.parametrize("mode", list(MODES))
def test_fallocate_over_cached_blocks(fs_server, world, mode):
    """Punching a hole or zeroing a range through the mount (util-linux `fallocate`) is read back as zeros;
    growing with posix_fallocate is read as zeros past the old end."""
    fs = world.mount(fs_server, *MODES[mode])
    data = bytearray(random.randbytes(4 * BLOCK))
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for _ in range(2):
            g.beat("warm")
            assert read_file(fs.mnt / "f") == data
        g.beat("punch a hole")
        subprocess.run(["fallocate", "--punch-hole", "--offset", str(BLOCK - 4096), "--length", str(2 * 4096),
                        str(fs.mnt / "f")], check=True, timeout=15)
        data[BLOCK - 4096:BLOCK + 4096] = bytes(2 * 4096)
        assert read_file(fs.mnt / "f") == data, "a punched hole still reads the old bytes"
        g.beat("zero a range")
        subprocess.run(["fallocate", "--zero-range", "--offset", str(2 * BLOCK + 8192), "--length", "4096",
                        str(fs.mnt / "f")], check=True, timeout=15)
        data[2 * BLOCK + 8192:2 * BLOCK + 12288] = bytes(4096)
        assert read_file(fs.mnt / "f") == data, "a zeroed range still reads the old bytes"
        g.beat("posix_fallocate past the end")
        fd = os.open(fs.mnt / "f", os.O_RDWR)
        try:
            os.posix_fallocate(fd, len(data), BLOCK + 5)
        finally:
            os.close(fd)
        data += bytes(BLOCK + 5)
        assert read_file(fs.mnt / "f") == data
    assert (fs.backing / "f").read_bytes() == data


def test_copy_file_range_over_a_cached_file(fs_server, world):
    """copy_file_range(2) into a cached file through the mount: the destination reads the copied bytes (the
    kernel copies through the fs's read and write when the fs has no copy_file_range of its own)."""
    fs = world.mount(fs_server, "--direct-io")
    src, dst = random.randbytes(3 * BLOCK), random.randbytes(3 * BLOCK)
    (fs.backing / "src").write_bytes(src)
    (fs.backing / "dst").write_bytes(dst)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for _ in range(2):
            g.beat("warm")
            assert read_file(fs.mnt / "dst") == dst
        fi, fo = os.open(fs.mnt / "src", os.O_RDONLY), os.open(fs.mnt / "dst", os.O_WRONLY)
        try:
            g.beat("copy_file_range")
            done = 0
            while done < BLOCK + 100:
                try:
                    n = os.copy_file_range(fi, fo, BLOCK + 100 - done, 10 + done, BLOCK // 2 + done)
                except OSError as e:  # no in-kernel copy here: copy as cp(1) would
                    assert e.errno in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL), e
                    n = os.pwrite(fo, os.pread(fi, BLOCK + 100 - done, 10 + done), BLOCK // 2 + done)
                assert n > 0
                done += n
        finally:
            os.close(fi)
            os.close(fo)
        want = dst[:BLOCK // 2] + src[10:10 + BLOCK + 100] + dst[BLOCK // 2 + BLOCK + 100:]
        g.beat("read the destination")
        assert read_file(fs.mnt / "dst") == want
    assert (fs.backing / "dst").read_bytes() == want


@pytest.mark.slow
def test_model_concurrent_files(fs_server, world):
    """Three fsx runs at once on their own files through one mount (the fs serves FUSE requests on many
    threads), with the cache shrunk underneath; each compares with its own model."""
    _longer_watchdog()
    seed = int(os.environ.get("FS_MODEL_SEED", random.randrange(1 << 32)))
    print(f"fsx concurrent seed={seed} (rerun: FS_MODEL_SEED={seed})")
    fs = world.mount(fs_server, "--direct-io", "--revalidate-ms", "200")
    errors, results = [], []
    with HangGuard(fs, OP_TIMEOUT_S) as guard:
        def run(i: int):
            cfg = FsxConfig(ops=4000, seed=seed + i, files=3, prefix=f"t{i}-", max_file_bytes=8 * BLOCK,
                            hook_every_ops=500 if i == 0 else 0, check_every_ops=1000)
            fsx = Fsx(fs.mnt, fs.backing, cfg, hook=_pressure_hook(fs_server), progress=guard.beat)
            try:
                fsx.setup()
                results.append(fsx.run())
            except BaseException as e:  # reported by the main thread
                errors.append(e)
            finally:
                fsx.close_all()

        threads = [threading.Thread(target=run, args=(i,), name=f"fsx-{i}") for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(MODEL_TEST_TIMEOUT_S - 10)
    if errors:
        raise errors[0]
    assert len(results) == 3 and all(r["ops"] == 4000 for r in results)


# ------------------------------------------------------------------------------------------------- 3. faults
def test_fallow_killed_mid_read(fs_server, world):
    """kill -9 fallow while a reader loops: every read stays correct (from the backing); the fs says so in its log
    a bounded number of times, not per read, and uses fallow again once it is back (same Unix socket)."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off")
    data = random.randbytes(16 * BLOCK + 77)
    (fs.backing / "f").write_bytes(data)
    passes, errors, stop = [0], [], threading.Event()

    with HangGuard(fs, OP_TIMEOUT_S) as g:
        def reader():
            while not stop.is_set():
                g.beat(f"reader pass {passes[0]}")
                try:
                    got = read_file(fs.mnt / "f")
                except OSError as e:
                    errors.append(repr(e))
                    return
                if got != data:
                    errors.append(f"pass {passes[0]}: wrong bytes")
                    return
                passes[0] += 1

        t = threading.Thread(target=reader, name="fs-reader")
        t.start()
        try:
            assert wait_for(lambda: passes[0] >= 3 or errors, timeout=10)
            assert fs.stats()["fallow_connected"] == 1
            log_before = fs.logtext(1 << 20).count("\n")
            fs_server.stop(signal.SIGKILL)
            before = passes[0]
            assert wait_for(lambda: passes[0] >= before + 5 or errors, timeout=10), "reads stalled without fallow"
            assert wait_for(lambda: fs.stats()["fallow_connected"] == 0, timeout=5), "fs did not notice"
            down = fs.stats()
            time.sleep(0.5)
            log_lines_while_down = fs.logtext(1 << 20).count("\n") - log_before
            fs_server.start()  # same Unix socket path
            assert wait_for(lambda: fs.stats()["fallow_connected"] == 1, timeout=15), \
                f"fs did not reconnect:\n{fs.logtext()}"
            mark = passes[0]
            assert wait_for(lambda: passes[0] >= mark + 3 or errors, timeout=10)
        finally:
            stop.set()
            t.join(OP_TIMEOUT_S * 2)
        assert not errors, errors
        assert down["fallow_errors"] > 0
        print(f"passes={passes[0]} log lines while fallow was down: {log_lines_while_down}")
        # logged once (a few lines), not once per read: the reader made many block reads meanwhile
        assert log_lines_while_down <= 5, fs.logtext()
        # back in use: a pass over the file after the restart is served from the (new) fallow
        g.beat("cache hits after reconnect")
        s0 = fs.stats()
        read_file(fs.mnt / "f")
        d = stats_delta(s0, fs.stats())
        assert d["cache_hits"] == blocks_of(len(data)), d
    assert fs.alive()


@pytest.mark.slow
def test_fallow_hung(fs_server, world):
    """fallow stopped (SIGSTOP) with connections open: the first request waits for fallow's I/O timeout (10 s,
    docs/fs.md "Faults"), after which reads and writes go to the backing at once and stay correct; after
    SIGCONT the cache is used again, without stale blocks from before the writes."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off")
    data = random.randbytes(8 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    n = blocks_of(len(data))
    timings = []
    with HangGuard(fs, 20.0) as g:
        for _ in range(2):
            g.beat("warm")
            assert read_blocks(fs.mnt / "f", len(data)) == data
        os.kill(fs_server.pid, signal.SIGSTOP)
        try:
            for i in range(4):
                g.beat(f"read {i} while fallow is stopped")
                t0 = time.monotonic()
                assert read_blocks(fs.mnt / "f", len(data)) == data
                timings.append(round(time.monotonic() - t0, 2))
            g.beat("write while fallow is stopped")
            t0 = time.monotonic()
            fd = os.open(fs.mnt / "f", os.O_WRONLY)
            try:
                os.pwrite(fd, b"written while fallow was stopped", BLOCK + 1)
            finally:
                os.close(fd)
            timings.append(round(time.monotonic() - t0, 2))
            data = data[:BLOCK + 1] + b"written while fallow was stopped" + data[BLOCK + 33:]
            assert read_blocks(fs.mnt / "f", len(data)) == data
        finally:
            os.kill(fs_server.pid, signal.SIGCONT)
        print(f"seconds per step while fallow was stopped: {timings}")
        assert timings[0] < 15, "the first read waited longer than fallow's I/O timeout"
        assert max(timings[1:]) < 2, "requests kept waiting for a fallow that does not answer"
        assert wait_for(lambda: fs.stats()["fallow_connected"] == 1, timeout=10), "no reconnect after SIGCONT"

        def hits_again():
            g.beat("read after SIGCONT")
            s0 = fs.stats()
            assert read_blocks(fs.mnt / "f", len(data)) == data, "stale bytes after fallow came back"
            return stats_delta(s0, fs.stats())["cache_hits"] == n

        assert wait_for(hits_again, timeout=10, interval=0.1), "the cache was not used again after SIGCONT"


def test_pool_shrunk_to_zero(fs_server, world):
    fs = world.mount(fs_server, "--direct-io")
    data = random.randbytes(24 * BLOCK + 1)
    (fs.backing / "f").write_bytes(data)
    nblocks = blocks_of(len(data))
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        for _ in range(2):
            g.beat("warm")
            assert read_file(fs.mnt / "f") == data
        set_config(fs_server, "elastic-max", "1")
        for i in range(4):
            g.beat(f"read with the pool at zero {i}")
            assert read_file(fs.mnt / "f") == data
            assert read_file(fs.mnt / "f", chunk=5000) == data
        zero = fs.stats()
        set_config(fs_server, "elastic-max", FS_SERVER_OPTS["elastic-max"])

        def full_pass_hits():
            g.beat("read after the pool grew back")
            s0 = fs.stats()
            assert read_file(fs.mnt / "f") == data
            return stats_delta(s0, fs.stats())["cache_hits"] >= nblocks

        assert wait_for(full_pass_hits, timeout=10, interval=0.2), "the cache did not come back after the pool did"
    print(f"stats with the pool at zero: {zero}")
    assert fs.alive()


def test_backing_file_removed_while_open(fs_server, world):
    """Errors as the backing gives them: an fd opened before the unlink keeps reading and writing the file (as on
    the backing filesystem); a new open fails with ENOENT, as on the backing."""
    fs = world.mount(fs_server, "--direct-io", "--revalidate-ms", "100")
    data = random.randbytes(4 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("open")
        fd_m = os.open(fs.mnt / "f", os.O_RDWR)
        fd_b = os.open(fs.backing / "f", os.O_RDWR)
        try:
            assert pread_full(fd_m, len(data)) == data
            os.unlink(fs.backing / "f")
            time.sleep(0.3)  # past the revalidation period
            for off, n in [(0, len(data)), (BLOCK - 1, 2), (3 * BLOCK, BLOCK)]:
                g.beat(f"pread after unlink {off}")
                assert _outcome(lambda: pread_full(fd_m, n, off)) == _outcome(lambda: pread_full(fd_b, n, off))
            g.beat("pwrite after unlink")
            assert os.pwrite(fd_m, b"hello", 10) == 5
            assert pread_full(fd_m, 20, 5) == pread_full(fd_b, 20, 5)
            g.beat("open after unlink")
            assert _errno(lambda: os.open(fs.mnt / "f", os.O_RDONLY)) == errno.ENOENT
            assert _errno(lambda: os.stat(fs.mnt / "f")) == errno.ENOENT
        finally:
            os.close(fd_m)
            os.close(fd_b)
        assert os.listdir(fs.mnt) == []
    assert fs.alive()


def _outcome(fn):
    """("ok", fn()) or ("errno", the errno it raised)."""
    try:
        return ("ok", fn())
    except OSError as e:
        return ("errno", e.errno)


def _errno(fn) -> int | None:
    """The errno fn() raised, or None when it succeeded (a file descriptor it returned is closed)."""
    try:
        result = fn()
    except OSError as e:
        return e.errno
    if isinstance(result, int):
        os.close(result)
    return None


# ------------------------------------------------------------------------------------------------- 4. passthrough
@pytest.fixture
def pfs(fs_server, world):
    fs = world.mount(fs_server)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        yield fs, g


def test_create_rename_unlink(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    g.beat("create")
    fd = os.open(m / "new", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    os.write(fd, b"abc")
    os.close(fd)
    assert (bk / "new").read_bytes() == b"abc"
    assert os.stat(bk / "new").st_mode & 0o777 == 0o640
    assert _errno(lambda: os.open(m / "new", os.O_CREAT | os.O_EXCL | os.O_WRONLY)) == errno.EEXIST
    g.beat("rename")
    os.rename(m / "new", m / "renamed")
    assert not (bk / "new").exists() and (bk / "renamed").read_bytes() == b"abc"
    os.mkdir(m / "d")
    os.rename(m / "renamed", m / "d" / "inside")
    assert (bk / "d" / "inside").read_bytes() == b"abc"
    g.beat("unlink")
    os.unlink(m / "d" / "inside")
    assert not (bk / "d" / "inside").exists() and os.listdir(m / "d") == []
    # names are bytes: not UTF-8, spaces, newlines, the longest the backing allows
    for name in (b"\xff\xfe-not-utf8", b"with space\nand newline", b"x" * os.statvfs(bk).f_namemax):
        g.beat(f"odd name {name[:20]!r}")
        with open(os.path.join(bytes(m), name), "wb") as f:
            f.write(name)
        assert open(os.path.join(bytes(bk), name), "rb").read() == name
        assert name in os.listdir(bytes(m))
        os.unlink(os.path.join(bytes(m), name))
    assert _errno(lambda: open(os.path.join(bytes(m), b"y" * 256), "wb")) == errno.ENAMETOOLONG


@pytest.mark.parametrize("mode", list(MODES))
def test_large_single_writes_and_reads(fs_server, world, mode):
    """One write(2) and one read(2) of 5 MiB + 3 at an odd offset (the kernel splits them into requests of
    at most max_write / max_read)."""
    fs = world.mount(fs_server, *MODES[mode])
    data = random.randbytes(5 * (1 << 20) + 3)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        fd = os.open(fs.mnt / "big", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            g.beat("big pwrite")
            assert os.pwrite(fd, data, 12345) == len(data)
            g.beat("big pread")
            for _ in range(2):
                assert pread_full(fd, len(data) + 100, 12345) == data
        finally:
            os.close(fd)
    assert (fs.backing / "big").read_bytes() == bytes(12345) + data


def test_mkdir_rmdir_and_readdir_many(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    g.beat("mkdir")
    os.makedirs(m / "a" / "b" / "c")
    assert (bk / "a" / "b" / "c").is_dir()
    os.rmdir(m / "a" / "b" / "c")
    assert not (bk / "a" / "b" / "c").exists()
    # many entries: half made through the mount, half behind it
    os.mkdir(m / "many")
    names = {f"entry-{i:05d}-{'x' * (i % 40)}" for i in range(3000)}
    for i, n in enumerate(sorted(names)):
        if i % 2:
            g.beat(f"create {n}")
            (m / "many" / n).write_bytes(b"")
        else:
            (bk / "many" / n).write_bytes(b"")
    os.mkdir(m / "many" / "sub")
    g.beat("listdir")
    listed = os.listdir(m / "many")
    assert len(listed) == len(names) + 1 and set(listed) == names | {"sub"}
    kinds = {e.name: e.is_dir() for e in os.scandir(m / "many")}
    assert kinds["sub"] and not any(v for k, v in kinds.items() if k != "sub")
    assert sorted(listed) == sorted(os.listdir(bk / "many"))


def test_symlinks_and_hard_links(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    (m / "target").write_bytes(b"payload")
    g.beat("symlink")
    os.symlink("target", m / "sym")
    assert os.readlink(m / "sym") == "target" and os.readlink(bk / "sym") == "target"
    assert (m / "sym").read_bytes() == b"payload"
    os.symlink("/nonexistent/elsewhere", bk / "dangling")
    assert os.readlink(m / "dangling") == "/nonexistent/elsewhere"
    assert os.lstat(m / "dangling").st_size == len("/nonexistent/elsewhere")
    g.beat("hard link")
    os.link(m / "target", m / "hard")
    assert os.stat(m / "target").st_nlink == 2 and os.stat(bk / "target").st_nlink == 2
    with open(m / "hard", "r+b") as f:
        f.write(b"PAY")
    assert (m / "target").read_bytes() == b"PAYload" and (bk / "target").read_bytes() == b"PAYload"
    os.unlink(m / "target")
    assert os.stat(m / "hard").st_nlink == 1 and (m / "hard").read_bytes() == b"PAYload"


def test_chmod_utime_truncate_fsync(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    (m / "f").write_bytes(random.randbytes(BLOCK + 10))
    g.beat("chmod")
    os.chmod(m / "f", 0o604)
    assert os.stat(bk / "f").st_mode & 0o7777 == 0o604 and os.stat(m / "f").st_mode & 0o7777 == 0o604
    g.beat("utime")
    os.utime(m / "f", ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
    assert os.stat(bk / "f").st_mtime_ns == 1_500_000_000_987_654_321
    assert os.stat(m / "f").st_mtime_ns == 1_500_000_000_987_654_321
    g.beat("truncate")
    os.truncate(m / "f", 100)
    assert os.stat(bk / "f").st_size == 100 and os.stat(m / "f").st_size == 100
    os.truncate(m / "f", 3 * BLOCK)
    got = (m / "f").read_bytes()
    assert len(got) == 3 * BLOCK and got[100:] == bytes(3 * BLOCK - 100)
    g.beat("fsync")
    fd = os.open(m / "f", os.O_RDWR)
    try:
        os.pwrite(fd, b"synced", 0)
        os.fsync(fd)
        os.fdatasync(fd)
    finally:
        os.close(fd)
    assert (bk / "f").read_bytes()[:6] == b"synced"


def test_xattrs(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    (bk / "f").write_bytes(b"x")
    os.setxattr(bk / "f", "user.behind", b"set on the backing")
    g.beat("getxattr")
    assert os.getxattr(m / "f", "user.behind") == b"set on the backing"
    os.setxattr(m / "f", "user.through", b"\x00binary\xff" * 100)
    assert os.getxattr(bk / "f", "user.through") == b"\x00binary\xff" * 100
    assert set(os.listxattr(m / "f")) >= {"user.behind", "user.through"}
    assert set(os.listxattr(m / "f")) == set(os.listxattr(bk / "f"))
    g.beat("setxattr flags")
    assert _errno(lambda: os.setxattr(m / "f", "user.behind", b"v", os.XATTR_CREATE)) == errno.EEXIST
    assert _errno(lambda: os.setxattr(m / "f", "user.none", b"v", os.XATTR_REPLACE)) == errno.ENODATA
    os.removexattr(m / "f", "user.through")
    assert "user.through" not in os.listxattr(bk / "f")
    assert _errno(lambda: os.getxattr(m / "f", "user.through")) == errno.ENODATA


def test_large_sparse_file(pfs):
    fs, g = pfs
    m, bk = fs.mnt, fs.backing
    far = 5 * (1 << 30) + 4095  # past 4 GiB, not block-aligned
    g.beat("pwrite past 4 GiB")
    fd = os.open(m / "sparse", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        assert os.pwrite(fd, b"far away", far) == 8
        assert os.fstat(fd).st_size == far + 8
        assert pread_full(fd, 8, far) == b"far away"
        g.beat("read holes")
        assert pread_full(fd, 3 * BLOCK, far - 2 * BLOCK) == bytes(2 * BLOCK) + b"far away"
        assert pread_full(fd, 4096, 1 << 32) == bytes(4096)
        assert pread_full(fd, 100, far + 8) == b""
        os.ftruncate(fd, 6 << 30)
        assert pread_full(fd, 16, far) == b"far away" + bytes(8)
    finally:
        os.close(fd)
    st = os.stat(bk / "sparse")
    assert st.st_size == 6 << 30 and st.st_blocks * 512 < (1 << 20), "the backing file is not sparse"
    with open(bk / "sparse", "rb") as f:
        f.seek(far)
        assert f.read(8) == b"far away"


def test_statfs(pfs):
    fs, g = pfs
    g.beat("statvfs")
    a, b = os.statvfs(fs.mnt), os.statvfs(fs.backing)
    assert a.f_blocks * a.f_frsize == b.f_blocks * b.f_frsize
    assert a.f_files == b.f_files and a.f_namemax == b.f_namemax
    # free space moves with other writers on the machine: within 1 GiB
    assert abs(a.f_bavail * a.f_frsize - b.f_bavail * b.f_frsize) < (1 << 30)


def test_errors_as_the_backing_gives_them(pfs):
    """The same failing calls on the mount and on the backing directory give the same errno."""
    fs, g = pfs
    os.makedirs(fs.backing / "dir" / "child")
    (fs.backing / "file").write_bytes(b"data")

    cases = {
        "open missing": lambda r: os.open(r / "missing", os.O_RDONLY),
        "open dir for writing": lambda r: os.open(r / "dir", os.O_WRONLY),
        "open O_EXCL existing": lambda r: os.open(r / "file", os.O_CREAT | os.O_EXCL | os.O_WRONLY),
        "open through a file": lambda r: os.open(r / "file" / "x", os.O_RDONLY),
        "mkdir existing": lambda r: os.mkdir(r / "dir"),
        "rmdir non-empty": lambda r: os.rmdir(r / "dir"),
        "rmdir a file": lambda r: os.rmdir(r / "file"),
        "unlink a dir": lambda r: os.unlink(r / "dir"),
        "readlink a file": lambda r: os.readlink(r / "file"),
        "rename dir over non-empty dir": lambda r: os.rename(r / "dir" / "child", r / "dir"),
        "rename dir over file": lambda r: os.rename(r / "dir", r / "file"),
        "link a directory": lambda r: os.link(r / "dir", r / "dirlink"),
        "truncate a dir": lambda r: os.truncate(r / "dir", 0),
        "getxattr missing": lambda r: os.getxattr(r / "file", "user.none"),
        "listdir a file": lambda r: os.listdir(r / "file"),
    }
    mismatches = {}
    for name, fn in cases.items():
        g.beat(name)
        want = _errno(lambda: fn(fs.backing))
        assert want is not None, f"{name} succeeded on the backing: the case is wrong"
        got = _errno(lambda: fn(fs.mnt))
        if got != want:
            mismatches[name] = {"backing": errno.errorcode[want],
                                "mount": errno.errorcode.get(got, "success") if got else "success"}
    assert not mismatches, mismatches


# ------------------------------------------------------------------------------------------------- 5. counters
def test_counters_two_passes_without_prefetch(fs_server, world):
    """Reading a file twice through --direct-io (no read-ahead): the first pass misses every block, the second
    hits every block and reads nothing from the backing."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off")
    data = random.randbytes(6 * BLOCK + 1000)
    n = blocks_of(len(data))
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        s0 = fs.stats()
        assert s0["fallow_connected"] == 1
        g.beat("first pass")
        assert read_blocks(fs.mnt / "f", len(data)) == data
        s1 = fs.stats()
        g.beat("second pass")
        assert read_blocks(fs.mnt / "f", len(data)) == data
        s2 = fs.stats()
    d1, d2 = stats_delta(s0, s1), stats_delta(s1, s2)
    print(f"first pass {d1}\nsecond pass {d2}")
    for d in (d1, d2):
        assert d["read_bytes"] == len(data)
        assert d["reads"] == n
        assert d["prefetch_issued"] == 0 and d["prefetch_used"] == 0
    assert (d1["cache_misses"], d1["cache_hits"]) == (n, 0)
    assert d1["backing_read_bytes"] >= len(data) and d1["backing_reads"] >= n
    assert (d2["cache_hits"], d2["cache_misses"]) == (n, 0)
    assert d2["cache_hit_bytes"] == len(data)
    assert d2["backing_reads"] == 0 and d2["backing_read_bytes"] == 0


# Random reads: 8 blocks 8 MiB apart, read in an order where each read jumps further than the stream detector
# takes for a reordered or continued stream (4 MiB back, 1 MiB on).
PROBE_ORDER = [5, 2, 7, 0, 3, 6, 1, 4]
PROBE_STRIDE = 64 * BLOCK


def write_probe(path: Path, blocks: list[bytes]) -> None:
    with open(path, "wb") as f:
        for index, data in enumerate(blocks):
            f.seek(index * PROBE_STRIDE)
            f.write(data)


def read_probe(path: Path) -> list[bytes]:
    """The probe's blocks, one pread each in PROBE_ORDER, returned in file order."""
    fd = os.open(path, os.O_RDONLY)
    try:
        got = {index: os.pread(fd, BLOCK, index * PROBE_STRIDE) for index in PROBE_ORDER}
    finally:
        os.close(fd)
    return [got[index] for index in sorted(got)]


@pytest.mark.parametrize("admission", ["doorkeeper", "admit all"])
def test_a_full_pool_stores_a_block_read_for_a_reader_at_its_second_miss(fs_server, world, admission):
    """Once the pool is full, a block read for a random reader is stored only at its second miss within the last
    pool's worth of misses (TinyLFU's doorkeeper, docs/fs.md "Admission"); with --no-admission at its first.
    A sequential stream's blocks are stored past it (the filler: read ahead or not, streams are feedback's)."""
    extra = ["--no-admission"] if admission == "admit all" else []
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off", *extra)
    set_config(fs_server, "elastic-max", str(16 << 20))
    filler = random.randbytes(192 * BLOCK)  # 24 MiB: more than the pool
    probe = [random.randbytes(BLOCK) for _ in PROBE_ORDER]
    (fs.backing / "filler").write_bytes(filler)
    write_probe(fs.backing / "probe", probe)
    # The watcher's first pool readings (every 0.5 s) come before the pool evicts: evictions are counted from
    # them.
    time.sleep(1.0)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("fill the pool")
        before = fs.stats()
        assert read_blocks(fs.mnt / "filler", len(filler)) == filler
        filled = stats_delta(before, fs.stats())
        # A stream, so every block is stored (the pool was not seen full yet for the first ones anyway).
        assert filled["blocks_stored"] == 192 and filled["admission_skipped"] == 0, filled
        if admission == "doorkeeper":
            assert wait_for(lambda: fs.stats()["admission_pool_full"] == 1, timeout=10, interval=0.1), fs.stats()
        else:
            time.sleep(1.5)  # the watcher's pool reading (every 0.5 s) would have come
            assert fs.stats()["admission_pool_full"] == 0
        passes = []
        for index in range(3):
            g.beat(f"probe pass {index}")
            before = fs.stats()
            assert read_probe(fs.mnt / "probe") == probe
            passes.append(stats_delta(before, fs.stats()))
    print(passes)
    hits = [p["cache_hits"] for p in passes]
    if admission == "doorkeeper":
        # First miss: remembered, not stored. Second miss: stored. Then hits.
        assert hits == [0, 0, 8], passes
        assert (passes[0]["admission_skipped"], passes[0]["blocks_stored"]) == (8, 0), passes[0]
        assert (passes[1]["admitted_seen_before"], passes[1]["blocks_stored"]) == (8, 8), passes[1]
    else:
        assert hits == [0, 8, 8], passes
        assert passes[0]["blocks_stored"] == 8 and passes[0]["admission_skipped"] == 0, passes[0]


@pytest.mark.parametrize("policy", ["feedback", "fixed:4"])
def test_counters_sequential_read_with_prefetch(fs_server, world, policy):
    fs = world.mount(fs_server, "--direct-io", "--prefetch", policy)
    data = random.randbytes(40 * BLOCK)
    n = blocks_of(len(data))
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        s0 = fs.stats()
        g.beat("sequential read")
        fd = os.open(fs.mnt / "f", os.O_RDONLY)
        try:
            assert b"".join(os.pread(fd, BLOCK, off) for off in range(0, len(data), BLOCK)) == data
            open_stats = fs.stats()  # the stream is still open: its depth counts
        finally:
            os.close(fd)
        s1 = fs.stats()
    d = stats_delta(s0, s1)
    print(f"sequential pass {d}\nwhile open {open_stats}")
    assert open_stats["streams_active"] == 1 and open_stats["prefetch_depth_mean"] > 0
    if policy == "fixed:4":
        assert open_stats["prefetch_depth_mean"] == 4
    else:
        assert open_stats["prefetch_depth_mean"] <= 64  # --prefetch-depth-max's default
    assert s1["streams_active"] == 0
    assert d["reads"] == n and d["read_bytes"] == len(data)
    assert d["cache_hits"] + d["cache_misses"] == n, "every block is read exactly once: a hit or a miss"
    assert d["prefetch_issued"] > 0, "a sequential stream started no read-ahead"
    assert 0 < d["prefetch_used"] <= d["prefetch_issued"]
    assert d["cache_misses"] < n, "read-ahead never got ahead of the reader"
    assert d["backing_read_bytes"] >= len(data)
    assert 0.0 <= s1["prefetch_accuracy"] <= 1.0
    assert s1["prefetch_wasted_bytes"] >= 0 and s1["prefetch_wasted"] <= s1["prefetch_issued"]


def test_feedback_pauses_read_ahead_over_a_cached_file(fs_server, world):
    """A second pass over a file fallow holds whole: feedback read-ahead finds its blocks there already and
    pauses (a fixed depth would ask for every block again); every byte still comes back right."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "feedback")
    data = random.randbytes(160 * BLOCK)
    n = blocks_of(len(data))
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("first pass")
        assert read_file(fs.mnt / "f") == data
        s0 = fs.stats()
        g.beat("second pass")
        assert read_file(fs.mnt / "f") == data
        s1 = fs.stats()
    d = stats_delta(s0, s1)
    print(f"second pass {d}")
    assert d["cache_misses"] == 0, "the pool holds the file"
    assert d["prefetch_already_cached"] > 0
    assert d["prefetch_issued"] < n // 2, f"read-ahead kept asking for cached blocks: {d['prefetch_issued']} of {n}"


def test_counters_writes_and_stale_detection(fs_server, world):
    fs = world.mount(fs_server, "--direct-io")
    data = random.randbytes(2 * BLOCK)
    (fs.backing / "f").write_bytes(data)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("warm")
        assert read_file(fs.mnt / "f") == data
        s0 = fs.stats()
        fd = os.open(fs.mnt / "f", os.O_WRONLY)
        try:
            g.beat("writes")
            assert os.pwrite(fd, b"a" * 1000, 10) == 1000
            assert os.pwrite(fd, b"b" * 3000, BLOCK - 1500) == 3000
        finally:
            os.close(fd)
        s1 = fs.stats()
        other_process_write(fs.backing / "f", 0, b"behind")
        g.beat("reopen after a write behind")
        assert read_file(fs.mnt / "f")[:6] == b"behind"
        s2 = fs.stats()
    d1, d2 = stats_delta(s0, s1), stats_delta(s1, s2)
    assert d1["writes"] == 2 and d1["write_bytes"] == 4000
    assert d1["invalidations"] >= 1, "writes over cached blocks invalidated nothing"
    assert d2["stale_detected"] >= 1, "a write behind the mount was not counted as stale"


def test_concurrent_readers_share_one_backing_read(fs_server, world):
    """Readers of the same blocks at the same time wait for one backing read of each block."""
    fs = world.mount(fs_server, "--direct-io", "--prefetch", "off")
    data = random.randbytes(8 * BLOCK)
    n = blocks_of(len(data))
    (fs.backing / "f").write_bytes(data)
    results, barrier = [], threading.Barrier(8)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        s0 = fs.stats()

        def reader():
            barrier.wait(10)
            g.beat("concurrent read")
            results.append(read_blocks(fs.mnt / "f", len(data)) == data)

        threads = [threading.Thread(target=reader) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(OP_TIMEOUT_S * 2)
        d = stats_delta(s0, fs.stats())
    assert results == [True] * 8
    assert d["cache_hits"] + d["cache_misses"] == 8 * n
    # each block is read from the backing once (consecutive blocks may be coalesced into one backing read)
    assert d["backing_read_bytes"] == len(data) and 1 <= d["backing_reads"] <= n, \
        f"{d['backing_reads']} backing reads of {d['backing_read_bytes']} bytes for {n} blocks read by 8 readers"


def test_null_filesystem(world):
    fs = world.mount(None, "--null-bytes", 3 * BLOCK + 5)
    with HangGuard(fs, OP_TIMEOUT_S) as g:
        g.beat("read null")
        assert os.listdir(fs.mnt) == ["null"]
        assert os.stat(fs.mnt / "null").st_size == 3 * BLOCK + 5
        assert read_file(fs.mnt / "null", chunk=1 << 20) == bytes(3 * BLOCK + 5)


def test_password_and_tcp_server(world):
    """AUTH with --password-file, and a tcp:// server address."""
    s = ServerProc("fallow", {**FS_SERVER_OPTS, "requirepass": "s3cret pass"})
    s.start()
    try:
        pw = world.root / "pw"
        pw.write_text("s3cret pass\n")
        data = random.randbytes(3 * BLOCK)
        fs = world.mount(None, "--server", f"tcp://127.0.0.1:{s.port}", "--password-file", pw,
                         "--direct-io", "--prefetch", "off")
        (fs.backing / "f").write_bytes(data)
        with HangGuard(fs, OP_TIMEOUT_S) as g:
            g.beat("read twice")
            assert read_file(fs.mnt / "f") == data
            s0 = fs.stats()
            assert read_file(fs.mnt / "f") == data
            d = stats_delta(s0, fs.stats())
        assert fs.stats()["fallow_connected"] == 1
        assert d["cache_hits"] == 3
    finally:
        s.cleanup()


def test_bad_options_are_clear_errors(world):
    """Bad input: exit code 1 at once with a message naming the problem, nothing mounted."""
    mnt, backing = world.root / "mnt", world.root / "backing"
    mnt.mkdir()
    backing.mkdir()
    fallow = str(fallow_bin())
    cases = {
        "missing mount point": ([fallow, "fs", str(world.root / "nope"), "--backing", str(backing)], "nope"),
        "missing backing": ([fallow, "fs", str(mnt), "--backing", str(world.root / "gone")], "--backing"),
        "block size": ([fallow, "fs", str(mnt), "--backing", str(backing), "--block-bytes", "1000"],
                       "--block-bytes"),
        "prefetch policy": ([fallow, "fs", str(mnt), "--backing", str(backing), "--prefetch", "sometimes"],
                            "--prefetch"),
        "stats of nothing": ([fallow, "fs", "--stats", str(mnt)], "no fallow fs serves"),
    }
    for name, (argv, needle) in cases.items():
        out = subprocess.run(argv, capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        assert out.returncode == 1, f"{name}: exit code {out.returncode}"
        assert needle in out.stderr.decode(), f"{name}: {out.stderr.decode()!r}"
        assert not is_mounted(mnt), f"{name}: left a mount"


def test_no_server_at_start_then_no_cache(world):
    """No fallow at the address: the mount works from the backing directory (fallow_connected 0); and
    --no-cache never uses fallow. Both pass a short model run."""
    for flags in (["--server", "unix:" + str(world.root / "no-such.sock")], ["--no-cache"]):
        fs = world.mount(None, "--direct-io", *flags, name="m-" + flags[0].strip("-"))
        with HangGuard(fs, OP_TIMEOUT_S) as g:
            fsx = Fsx(fs.mnt, fs.backing, FsxConfig(ops=3000, seed=11, files=4, max_file_bytes=8 * BLOCK),
                      progress=g.beat)
            try:
                fsx.setup()
                fsx.run()
            finally:
                fsx.close_all()
            st = fs.stats()
        assert st["fallow_connected"] == 0 and st["cache_hits"] == 0, (flags, st)
        assert fs.signal(signal.SIGTERM) == 0


NOBODY_UID = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a reader as another user")
def test_allow_other(fs_server, world):
    """Another user (nobody) reads through the mount only with --allow-other, and a file it creates there is
    its own in the backing directory."""
    os.chmod(world.root, 0o755)
    script = 'cat "$1/f" && printf "by nobody" > "$1/mine"'  # sh and cat: nobody may not run our python
    results = {}
    for flags in ([], ["--allow-other"]):
        name = "allow-other" if flags else "default"
        sub = world.root / name
        sub.mkdir(mode=0o755)
        (sub / "backing").mkdir(mode=0o777)
        os.chmod(sub / "backing", 0o777)  # not masked by the umask: nobody may create files in it
        fs = world.mount(fs_server, *flags, name=name)
        (fs.backing / "f").write_text("for everyone")
        os.chmod(fs.backing / "f", 0o644)
        out = subprocess.run(["/bin/sh", "-c", script, "sh", str(fs.mnt)], capture_output=True, timeout=15,
                             user=NOBODY_UID, group=NOBODY_UID, extra_groups=[], cwd="/")
        results[name] = (out.returncode, out.stdout.decode(), "Permission denied" in out.stderr.decode())
        assert fs.signal(signal.SIGTERM) == 0
    assert results["default"][0] != 0 and results["default"][2], results  # EACCES without --allow-other
    assert results["allow-other"] == (0, "for everyone", False), results
    mine = world.root / "allow-other" / "backing" / "mine"
    assert mine.read_text() == "by nobody"
    assert (mine.stat().st_uid, mine.stat().st_gid) == (NOBODY_UID, NOBODY_UID)


# ------------------------------------------------------------------------------------------------- 6. lifecycle
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_cleanly(fs_server, world, sig):
    fs = world.mount(fs_server)
    (fs.mnt / "kept").write_bytes(b"written before the signal")
    rc = fs.signal(sig)
    assert rc == 0, f"fallow fs exited with {rc} on {sig!r}:\n{fs.logtext()}"
    assert not is_mounted(fs.mnt) and not mountpoint_q(fs.mnt)
    assert (fs.backing / "kept").read_bytes() == b"written before the signal"
    assert os.listdir(fs.mnt) == []  # the bare mount point again


def test_dead_mount_is_cleaned_up_by_the_next_start(fs_server, world):
    fs = world.mount(fs_server)
    (fs.backing / "f").write_bytes(b"still here")
    fs.kill9()
    assert is_mounted(fs.mnt), "kill -9 left no mount to clean up"
    assert _errno(lambda: os.listdir(fs.mnt)) == errno.ENOTCONN
    again = world.mount(fs_server, backing=fs.backing, mountpoint=fs.mnt, name="again")
    with HangGuard(again, OP_TIMEOUT_S) as g:
        g.beat("read through the new mount")
        assert (again.mnt / "f").read_bytes() == b"still here"
    assert again.signal(signal.SIGTERM) == 0
    assert not is_mounted(fs.mnt)
