"""An fsx-style randomized model test for a filesystem mounted over a backing directory.

Random reads, writes, truncates, appends, whole-file sequential reads and mmap reads at random offsets and sizes
(1 byte to several cache blocks, biased towards the block boundaries) over several files, through the mount;
every byte read is compared with a plain in-memory model (one bytearray per file), and the backing files are
compared with the model now and then and at the end. Writes made behind the mount (straight into the backing
file, then close and reopen: close-to-open consistency) are in the mix too.

Seeded: the seed is printed; a failure raises ModelMismatch with the seed, the op number and the tail of the op
history. Runs on its own against a plain directory (mount = backing) to debug the harness:

    python3 tests/e2e/fsx.py --plain /tmp/somedir --ops 100000 --seed 1
"""
from __future__ import annotations

import argparse
import collections
import errno
import mmap
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HISTORY_OPS = 40  # how many recent ops a failure report shows


class ModelMismatch(AssertionError):
    pass


@dataclass
class FsxConfig:
    ops: int = 10_000
    seed: int = 1
    block_bytes: int = 131072
    files: int = 8
    max_file_bytes: int = 20 * 131072  # some files grow to many blocks
    mmap_reads: bool = True
    behind_writes: bool = True  # writes straight into the backing file, then close and reopen
    behind_truncates: bool = True  # some of those are truncates (shrinking or growing)
    check_every_ops: int = 2000  # compare every backing file with the model this often
    hook_every_ops: int = 0  # call the cache-pressure hook this often (0: never)
    op_timeout_s: float = 10.0  # a watchdog (the caller's) treats a longer op as a hang
    prefix: str = ""  # file names: several harnesses can share a directory


@dataclass
class FileState:
    name: str
    model: bytearray = field(default_factory=bytearray)
    fds: dict = field(default_factory=dict)  # mode name -> fd through the mount


OPEN_MODES = {
    "rw": os.O_RDWR,
    "ro": os.O_RDONLY,
    "append": os.O_WRONLY | os.O_APPEND,
}

# op name -> weight (per thousand)
OP_WEIGHTS = {
    "read": 330,
    "write": 230,
    "append": 60,
    "truncate": 50,
    "seqread": 15,
    "mmap": 40,
    "reopen": 90,
    "stat": 60,
    "fsync": 4,  # slow when other work fills the disk
    "behind": 10,
    "check_backing": 5,
    "reread_after_reopen": 100,
    "otrunc": 8,
}


class Fsx:
    """The harness. `mount` is where operations go, `backing` where the files really are (equal for --plain)."""

    def __init__(self, mount: Path, backing: Path, cfg: FsxConfig,
                 hook: Callable[[int, random.Random], str] | None = None,
                 progress: Callable[[str], None] | None = None):
        self.mount, self.backing, self.cfg = Path(mount), Path(backing), cfg
        self.rng = random.Random(cfg.seed)
        self.hook = hook  # cache pressure: shrinks or flushes the cache; returns what it did (for the history)
        self.progress = progress or (lambda desc: None)  # the watchdog's heartbeat
        self.history: collections.deque[str] = collections.deque(maxlen=HISTORY_OPS)
        self.files = [FileState(f"{cfg.prefix}f{i:02d}") for i in range(cfg.files)]
        self.counts: collections.Counter[str] = collections.Counter()
        self.bytes_read = 0
        self.bytes_written = 0
        self.op_no = 0
        self.slowest: tuple[float, str] = (0.0, "")  # (seconds, op) of the slowest op so far
        names, weights = zip(*[(k, v) for k, v in OP_WEIGHTS.items()
                               if (k != "mmap" or cfg.mmap_reads) and (k != "behind" or cfg.behind_writes)])
        self.op_names, self.op_weights = list(names), list(weights)

    # ------------------------------------------------------------------ setup / teardown
    def setup(self) -> None:
        """Half the files are made in the backing directory, half through the mount; sizes from 0 to many blocks."""
        for i, f in enumerate(self.files):
            size = self.rng.choice([0, 1, self.cfg.block_bytes - 1, self.cfg.block_bytes + 1,
                                    self.rng.randrange(self.cfg.max_file_bytes // 2),
                                    self.cfg.max_file_bytes // 2 + 7])
            data = self.rng.randbytes(size)
            root = self.backing if i % 2 == 0 else self.mount
            with open(root / f.name, "wb") as out:
                out.write(data)
            f.model = bytearray(data)
            self._note(f"setup {f.name} size={size} via={'backing' if root == self.backing else 'mount'}")

    def close_all(self) -> None:
        for f in self.files:
            for fd in f.fds.values():
                os.close(fd)
            f.fds.clear()

    # ------------------------------------------------------------------ the run
    def run(self) -> dict:
        t0 = time.monotonic()
        for self.op_no in range(1, self.cfg.ops + 1):
            if self.hook and self.cfg.hook_every_ops and self.op_no % self.cfg.hook_every_ops == 0:
                self._note(f"hook: {self.hook(self.op_no, self.rng)}")
            if self.op_no % self.cfg.check_every_ops == 0:
                self.check_all_backing()
            op = self.rng.choices(self.op_names, self.op_weights)[0]
            f = self.rng.choice(self.files)
            self.counts[op] += 1
            t_op = time.monotonic()
            try:
                getattr(self, "op_" + op)(f)
            except (ModelMismatch, TimeoutError):  # TimeoutError: the caller's watchdog, not the filesystem
                raise
            except OSError as e:
                self.fail(f"{op} on {f.name} raised {e!r}")
            took = time.monotonic() - t_op
            if took > self.slowest[0]:
                self.slowest = (took, self.history[-1] if self.history else op)
        self.close_all()
        self.check_all_backing()
        self.check_all_mount()
        return {"ops": self.cfg.ops, "seconds": round(time.monotonic() - t0, 2), "counts": dict(self.counts),
                "bytes_read": self.bytes_read, "bytes_written": self.bytes_written, "seed": self.cfg.seed,
                "slowest_op": f"{self.slowest[0]:.3f}s {self.slowest[1]}"}

    # ------------------------------------------------------------------ helpers
    def _note(self, text: str) -> None:
        entry = f"#{self.op_no} {text}"
        self.history.append(entry)
        self.progress(entry)

    def fail(self, what: str) -> None:
        tail = "\n".join(self.history)
        raise ModelMismatch(f"fsx seed={self.cfg.seed} op #{self.op_no}: {what}\n--- last {len(self.history)} ops "
                            f"---\n{tail}")

    def fd(self, f: FileState, mode: str) -> int:
        if mode not in f.fds:
            f.fds[mode] = os.open(self.mount / f.name, OPEN_MODES[mode])
        return f.fds[mode]

    def read_fd(self, f: FileState) -> int:
        return self.fd(f, self.rng.choice(["rw", "ro"]))

    def offset(self, f: FileState, slack: int) -> int:
        """Uniform, at a block boundary +- a little, or near the end of the file."""
        size, b = len(f.model), self.cfg.block_bytes
        kind = self.rng.random()
        if kind < 0.4:
            return self.rng.randrange(size + slack + 1)
        if kind < 0.8:
            k = self.rng.randrange(size // b + 2)
            return max(0, k * b + self.rng.randint(-16, 16))
        return max(0, size + self.rng.randint(-300, 300))

    def length(self) -> int:
        """Mostly small, often up to a block, sometimes several blocks."""
        b, kind = self.cfg.block_bytes, self.rng.random()
        if kind < 0.5:
            return self.rng.randint(1, 512)
        if kind < 0.85:
            return self.rng.randint(1, b + 64)
        return self.rng.randint(b, 3 * b + 100)

    def expect(self, f: FileState, off: int, got: bytes, want_len: int, how: str) -> None:
        want = bytes(f.model[off:off + want_len])
        self.bytes_read += len(got)
        if got == want:
            return
        first = next((i for i, (a, c) in enumerate(zip(got, want)) if a != c), min(len(got), len(want)))
        self.fail(f"{how} {f.name} off={off} len={want_len}: got {len(got)} bytes, want {len(want)}; first "
                  f"difference at file offset {off + first} (block {(off + first) // self.cfg.block_bytes}): "
                  f"got {got[first:first + 16].hex()} want {want[first:first + 16].hex()} "
                  f"(file size in model {len(f.model)})")

    def model_write(self, f: FileState, off: int, data: bytes) -> None:
        if off > len(f.model):
            f.model.extend(bytes(off - len(f.model)))
        f.model[off:off + len(data)] = data

    def model_truncate(self, f: FileState, size: int) -> None:
        if size < len(f.model):
            del f.model[size:]
        else:
            f.model.extend(bytes(size - len(f.model)))

    def pread_all(self, fd: int, n: int, off: int) -> bytes:
        """pread until n bytes or EOF (a short read in the middle is legal)."""
        parts, got = [], 0
        while got < n:
            chunk = os.pread(fd, n - got, off + got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def pwrite_all(self, fd: int, data: bytes, off: int) -> None:
        done = 0
        while done < len(data):
            n = os.pwrite(fd, data[done:], off + done)
            if n <= 0:
                self.fail(f"pwrite returned {n}")
            done += n

    # ------------------------------------------------------------------ ops
    def op_read(self, f: FileState) -> None:
        off, n = self.offset(f, 400), self.length()
        self._note(f"read {f.name} off={off} len={n} size={len(f.model)}")
        self.expect(f, off, self.pread_all(self.read_fd(f), n, off), n, "pread")

    def op_reread_after_reopen(self, f: FileState) -> None:
        """Close every fd of the file, open it afresh, read a range (close-to-open, and re-reads of cached blocks)."""
        self.op_reopen(f, all_fds=True)
        self.op_read(f)

    def op_write(self, f: FileState) -> None:
        off = self.offset(f, 300)
        n = min(self.length(), max(0, self.cfg.max_file_bytes - off))
        if n == 0:
            return self.op_truncate(f)
        data = self.rng.randbytes(n)
        self._note(f"write {f.name} off={off} len={n} size={len(f.model)}")
        self.pwrite_all(self.fd(f, "rw"), data, off)
        self.model_write(f, off, data)
        self.bytes_written += n

    def op_append(self, f: FileState) -> None:
        n = min(self.length(), max(0, self.cfg.max_file_bytes - len(f.model)))
        if n == 0:
            return self.op_truncate(f)
        data = self.rng.randbytes(n)
        self._note(f"append {f.name} len={n} size={len(f.model)}")
        fd, done = self.fd(f, "append"), 0
        while done < n:
            done += os.write(fd, data[done:])
        self.model_write(f, len(f.model), data)
        self.bytes_written += n

    def op_truncate(self, f: FileState) -> None:
        b, kind = self.cfg.block_bytes, self.rng.random()
        if kind < 0.3:
            size = self.rng.randrange(len(f.model) + 1)  # shrink
        elif kind < 0.6:
            size = max(0, self.rng.randrange(self.cfg.max_file_bytes // b + 1) * b + self.rng.randint(-3, 3))
        else:
            size = self.rng.randrange(self.cfg.max_file_bytes + 1)
        size = min(size, self.cfg.max_file_bytes)
        how = self.rng.choice(["ftruncate", "truncate-path"])
        self._note(f"{how} {f.name} {len(f.model)} -> {size}")
        if how == "ftruncate":
            os.ftruncate(self.fd(f, "rw"), size)
        else:
            os.truncate(self.mount / f.name, size)
        self.model_truncate(f, size)

    def op_otrunc(self, f: FileState) -> None:
        """Open with O_TRUNC (what `>` in a shell does) and write a fresh start, beside the fds already open."""
        n = min(self.length(), self.cfg.max_file_bytes)
        data = self.rng.randbytes(n)
        self._note(f"open-O_TRUNC+write {f.name} len={n} size={len(f.model)}")
        fd = os.open(self.mount / f.name, os.O_WRONLY | os.O_TRUNC)
        try:
            self.pwrite_all(fd, data, 0)
        finally:
            os.close(fd)
        f.model[:] = data
        self.bytes_written += n

    def op_seqread(self, f: FileState) -> None:
        """The whole file front to back in equal chunks (what read-ahead is for), through a fresh fd."""
        chunk = self.rng.choice([4096, 65536, self.cfg.block_bytes, 1 << 20])
        self._note(f"seqread {f.name} chunk={chunk} size={len(f.model)}")
        fd = os.open(self.mount / f.name, os.O_RDONLY)
        try:
            off = 0
            while True:
                got = os.read(fd, chunk)
                if not got:
                    break
                self.expect(f, off, got, len(got), "seqread")
                off += len(got)
            if off != len(f.model):
                self.fail(f"seqread {f.name} ended at {off}, model size {len(f.model)}")
        finally:
            os.close(fd)

    def op_mmap(self, f: FileState) -> None:
        size = len(f.model)
        if size == 0:
            return self.op_read(f)
        off, n = self.rng.randrange(size), self.length()
        self._note(f"mmap-read {f.name} off={off} len={n} size={size}")
        try:
            m = mmap.mmap(self.fd(f, "ro"), size, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError as e:
            if e.errno == errno.ENODEV:  # direct_io files refuse mmap on kernels without DIRECT_IO_ALLOW_MMAP
                self.fail("mmap refused with ENODEV: run without mmap_reads for direct_io mounts")
            raise
        try:
            self.expect(f, off, m[off:off + n], n, "mmap")
        finally:
            m.close()

    def op_reopen(self, f: FileState, all_fds: bool = False) -> None:
        modes = list(f.fds) if all_fds else [self.rng.choice(list(OPEN_MODES))]
        self._note(f"reopen {f.name} {','.join(modes) or '-'}")
        for mode in modes:
            fd = f.fds.pop(mode, None)
            if fd is not None:
                os.close(fd)
        if not all_fds:
            self.fd(f, modes[0])

    def op_stat(self, f: FileState) -> None:
        self._note(f"stat {f.name} size={len(f.model)}")
        sizes = {"stat": os.stat(self.mount / f.name).st_size}
        for mode, fd in f.fds.items():
            sizes[f"fstat({mode})"] = os.fstat(fd).st_size
        wrong = {k: v for k, v in sizes.items() if v != len(f.model)}
        if wrong:
            self.fail(f"stat {f.name}: sizes {wrong}, model {len(f.model)}")

    def op_fsync(self, f: FileState) -> None:
        self._note(f"fsync {f.name}")
        os.fsync(self.fd(f, "rw"))

    def op_behind(self, f: FileState) -> None:
        """Another writer changes the backing file (same size: only mtime tells); close-to-open must see it."""
        self.op_reopen(f, all_fds=True)
        size = len(f.model)
        if self.cfg.behind_truncates and self.rng.random() < 0.3:
            return self.behind_truncate(f)
        if size == 0:
            return
        off = self.offset(f, 0) % size
        n = min(self.length(), size - off)
        data = self.rng.randbytes(n)
        self._note(f"behind {f.name} off={off} len={n} size={size}")
        fd = os.open(self.backing / f.name, os.O_WRONLY)
        try:
            self.pwrite_all(fd, data, off)
        finally:
            os.close(fd)
        self.model_write(f, off, data)
        self.op_read(f)

    def behind_truncate(self, f: FileState) -> None:
        """Another process truncates the backing file (closed through the mount); the next open must see it."""
        size = self.rng.randrange(self.cfg.max_file_bytes + 1)
        self._note(f"behind-truncate {f.name} {len(f.model)} -> {size}")
        os.truncate(self.backing / f.name, size)
        self.model_truncate(f, size)
        self.op_read(f)

    def op_check_backing(self, f: FileState) -> None:
        self._note(f"check-backing {f.name}")
        self.check_backing(f)

    # ------------------------------------------------------------------ whole-file checks
    def check_backing(self, f: FileState) -> None:
        got = (self.backing / f.name).read_bytes()
        if got != f.model:
            self.expect(f, 0, got, max(len(got), len(f.model)), "backing file")

    def check_all_backing(self) -> None:
        for f in self.files:
            self.check_backing(f)

    def check_all_mount(self) -> None:
        for f in self.files:
            got = (self.mount / f.name).read_bytes()
            self.expect(f, 0, got, max(len(got), len(f.model)), "final read through the mount")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plain", type=Path, required=True, help="a plain directory: mount = backing")
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--block-bytes", type=int, default=131072)
    args = ap.parse_args(argv)
    args.plain.mkdir(parents=True, exist_ok=True)
    cfg = FsxConfig(ops=args.ops, seed=args.seed, block_bytes=args.block_bytes,
                    max_file_bytes=20 * args.block_bytes)
    print(f"fsx seed={cfg.seed}", flush=True)
    fsx = Fsx(args.plain, args.plain, cfg)
    fsx.setup()
    try:
        print(fsx.run())
    finally:
        fsx.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
