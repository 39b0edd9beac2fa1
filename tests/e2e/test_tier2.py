"""Tier 2 (the log on flash, `crates/fallow-store/src/tier2/`, `crates/fallow-server/src/durability.rs`):
persistent tenants' data survives kill -9, data beyond RAM is demoted to tier 2 and read back, device faults
(injected with DEBUG TIER2-FAULT, a full filesystem, a filesystem remounted read-only) give clear errors and
never a crash or a wrong value, a corrupt or truncated tier-2 file is recovered around, one server per --dir,
and tenants and users outlive restarts.

Every test starts private servers on a data directory it owns (`--dir`), so a restart finds the same
tier-2 file, tenants.conf and users.acl. The filesystem tests (full, read-only) loop-mount a small ext4 and
are skipped where mounting is not allowed.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import threading
import time
import zlib
from pathlib import Path

import pytest

from helpers import Err, RawConn, ServerProc, encode, fallow_bin, free_port, wait_for

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

KIB = 1 << 10
MIB = 1 << 20
TENANT = "vault"
PASSWORD = "pw"


# --------------------------------------------------------------------------- helpers
@pytest.fixture
def launch():
    """launch(dir, **flags) starts a fallow on data directory `dir` (flags as fallow's, '_' -> '-');
    every server started is stopped (SIGKILL if needed) at the end of the test."""
    started: list[ServerProc] = []

    def start(data_dir: Path, **flags) -> ServerProc:
        extra = {"dir": str(data_dir), "tier2-size": "256mb"}
        extra.update({k.replace("_", "-"): v for k, v in flags.items()})
        s = ServerProc("fallow", extra)
        started.append(s)
        return s.start()

    start.servers = started  # type: ignore[attr-defined]
    yield start
    for s in started:
        s.cleanup()


def kill9(s: ServerProc) -> None:
    s.proc.send_signal(signal.SIGKILL)
    s.proc.wait(10)


def info(c: RawConn, section: str = "tier2") -> dict[str, str]:
    text = c.cmd("INFO", section, timeout=10).decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def make_persistent_tenant(s: ServerProc, name: str = TENANT) -> None:
    """A persistent tenant and the ACL user of the same name (which writes as that tenant)."""
    with RawConn(port=s.port) as c:
        assert c.cmd("TENANT", "SET", name, "WEIGHT", 100, "KIND", "persistent") == "OK"
        assert c.cmd("ACL", "SETUSER", name, "on", f">{PASSWORD}", "~*", "+@all") == "OK"


def tenant_conn(s: ServerProc, name: str = TENANT, timeout: float = 10.0) -> RawConn:
    c = RawConn(port=s.port, timeout=timeout)
    reply = c.cmd("AUTH", name, PASSWORD)
    assert reply == "OK", f"AUTH {name}: {reply!r}"
    return c


def pipeline(c: RawConn, commands, batch: int = 64, timeout: float = 20.0) -> list:
    """Sends commands in pipelined batches; returns every reply in order."""
    out = []
    commands = list(commands)
    for i in range(0, len(commands), batch):
        chunk = commands[i:i + batch]
        c.send(b"".join(encode(*cmd) for cmd in chunk))
        out.extend(c.read_reply(timeout=timeout) for _ in chunk)
    return out


def value_for(key: bytes, size: int) -> bytes:
    """A value that names its key (a value read back under another key is caught), `size` bytes."""
    head = key + b"="
    body = (b"%08x" % zlib.crc32(key)) * (size // 8 + 1)
    return (head + body)[:size]


def run_fallow(cwd: Path, *flags) -> tuple[subprocess.CompletedProcess, str]:
    """Runs a fallow expected to refuse to start (bounded); returns it and its output."""
    argv = [str(fallow_bin()), "--bind", "127.0.0.1", "--port", str(free_port()), "--memcache-port",
            str(free_port()), "--unixsocket", str(cwd / f"refused-{free_port()}.sock"), "--log-level", "warn"]
    r = subprocess.run(argv + [str(f) for f in flags], capture_output=True, text=True, timeout=20, cwd=cwd)
    return r, r.stdout + r.stderr


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def classify(replies, expected) -> tuple[int, int, int, list]:
    """(correct, missing, errors, wrong) of GET replies against expected values."""
    correct = missing = errors = 0
    wrong = []
    assert len(replies) == len(expected)
    for (key, want), reply in zip(expected.items(), replies):
        if reply == want:
            correct += 1
        elif reply is None:
            missing += 1
        elif isinstance(reply, Err):
            errors += 1
        else:
            wrong.append((key, reply[:40] if isinstance(reply, bytes) else reply))
    return correct, missing, errors, wrong


def is_write_failure(reply) -> bool:
    return isinstance(reply, Err) and (reply.startswith("IOERR") or reply.startswith("OOM"))


def try_write(s: ServerProc, *cmd):
    """A persistent write on a fresh tenant connection: its reply, or 'closed' when the server closed the
    connection without one (tier2-fsync always when the device failed before the record was durable)."""
    c = tenant_conn(s)
    try:
        c.send(encode(*cmd))
        return c.read_reply(timeout=10)
    except (ConnectionError, OSError):
        return "closed"
    finally:
        c.close()


# --------------------------------------------------------------------------- loop-mounted ext4
class LoopFs:
    """A small ext4 image on a loop device mounted at `mnt` (root only); skips the test when that is not
    possible here."""

    def __init__(self, base: Path, size_mb: int, options: str = "rw"):
        if os.geteuid() != 0:
            pytest.skip("loop mounts need root")
        for tool in ("mkfs.ext4", "mount", "umount", "losetup", "blockdev", "findmnt"):
            if shutil.which(tool) is None:
                pytest.skip(f"{tool} not installed")
        self.image = base / "fs.img"
        self.mnt = base / "mnt"
        self.mnt.mkdir()
        self.dev = None
        self.mounted = False
        subprocess.run(["truncate", "-s", f"{size_mb}M", str(self.image)], check=True)
        r = subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"mkfs.ext4 failed: {r.stderr.strip()}")
        r = subprocess.run(["losetup", "--find", "--show", str(self.image)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"no loop device here: {r.stderr.strip()}")
        self.dev = r.stdout.strip()
        # A loop device keeps a read-only flag set by an earlier user: clear it.
        subprocess.run(["blockdev", "--setrw", self.dev], capture_output=True)
        self.mount(options)

    def mount(self, options: str) -> None:
        r = subprocess.run(["mount", "-t", "ext4", "-o", options, self.dev, str(self.mnt)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            self.close()
            pytest.skip(f"cannot mount an ext4 loop device here: {r.stderr.strip()}")
        self.mounted = True

    def options(self) -> str:
        return subprocess.run(["findmnt", "-n", "-o", "OPTIONS", str(self.mnt)], capture_output=True,
                              text=True).stdout.strip()

    def umount(self) -> None:
        if self.mounted:
            for _ in range(20):
                if subprocess.run(["umount", str(self.mnt)], capture_output=True).returncode == 0:
                    break
                time.sleep(0.1)
            else:
                subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)
            self.mounted = False

    def close(self) -> None:
        self.umount()
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = None


# --------------------------------------------------------------------------- 1. kill -9, exact contents
def test_persistent_data_survives_kill9(launch, tmp_path):
    data = tmp_path / "data"
    s = launch(data, tier2_fsync="always")
    make_persistent_tenant(s)
    big = value_for(b"big", 300 * KIB)  # records span many blocks
    binary_key, binary_value = b"bin\x00\xff\r\nkey", bytes(range(256)) * 3
    with tenant_conn(s) as c:
        script = [
            ("SET", "s1", "hello"), ("APPEND", "s1", "!!"), ("SET", "s2", "world"),
            ("SET", "num", "10"), ("INCRBY", "num", "5"), ("SET", "big", big), ("SET", binary_key, binary_value),
            ("SET", "gone", "x"), ("DEL", "gone"), ("SET", "gone2", "y"), ("UNLINK", "gone2"),
            ("SET", "over", "old"), ("SET", "over", "new"),
            ("HSET", "h", "f1", "v1", "f2", "v2", "f3", "v3"), ("HDEL", "h", "f2"), ("HINCRBY", "h", "n", "7"),
            ("RPUSH", "l", "a", "b", "c", "d"), ("LPOP", "l"), ("LPUSH", "l", "z"),
            ("ZADD", "z", "1", "one", "2", "two", "3", "three"), ("ZINCRBY", "z", "10", "one"), ("ZREM", "z", "two"),
            ("SADD", "set", "m1", "m2", "m3"), ("SREM", "set", "m2"),
            ("SET", "ttl", "v"), ("EXPIRE", "ttl", "100000"), ("SET", "ex", "v", "EX", "50000"),
            ("SET", "persisted", "v", "EX", "1000"), ("PERSIST", "persisted"),
            ("SELECT", "1"), ("SET", "d1a", "1"), ("SET", "d1b", "2"), ("FLUSHDB",), ("SET", "d1c", "3"),
            ("SELECT", "2"), ("SET", "d2", "keep"), ("SELECT", "0"),
        ]
        replies = [c.cmd(*cmd) for cmd in script]
        assert not any(isinstance(r, Err) for r in replies), list(zip(script, replies))
        assert c.cmd("DBSIZE") == 13
    kill9(s)

    s = launch(data, tier2_fsync="always")
    with RawConn(port=s.port) as admin:
        tenant = admin.cmd("TENANT", "GET", TENANT)
        assert not isinstance(tenant, Err), f"tenant lost over kill -9: {tenant!r}"
        tenant = dict(zip(tenant[::2], tenant[1::2]))
        assert tenant[b"kind"] == b"persistent", tenant
        assert any(u.startswith(b"user vault on ") for u in admin.cmd("ACL", "LIST")), admin.cmd("ACL", "LIST")
        assert admin.cmd("GET", "s1") is None  # the default user's keyspace is another one
    with tenant_conn(s) as c:  # AUTH works without re-creating the user
        assert c.cmd("GET", "s1") == b"hello!!"
        assert c.cmd("GET", "s2") == b"world"
        assert c.cmd("GET", "num") == b"15"
        assert c.cmd("GET", "big") == big
        assert c.cmd("GET", binary_key) == binary_value
        assert c.cmd("GET", "over") == b"new"
        assert c.cmd("EXISTS", "gone", "gone2") == 0
        assert dict(zip(*[iter(c.cmd("HGETALL", "h"))] * 2)) == {b"f1": b"v1", b"f3": b"v3", b"n": b"7"}
        assert c.cmd("LRANGE", "l", 0, -1) == [b"z", b"b", b"c", b"d"]
        assert c.cmd("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"three", b"3", b"one", b"11"]
        assert sorted(c.cmd("SMEMBERS", "set")) == [b"m1", b"m3"]
        assert 99_000 < c.cmd("TTL", "ttl") <= 100_000
        assert 49_000 < c.cmd("TTL", "ex") <= 50_000
        assert c.cmd("TTL", "persisted") == -1
        assert c.cmd("TTL", "s1") == -1
        assert c.cmd("DBSIZE") == 13
        assert c.cmd("SELECT", "1") == "OK"
        # FLUSHDB replayed in order: what came before it is gone, what came after it is there.
        assert (c.cmd("DBSIZE"), c.cmd("EXISTS", "d1a", "d1b"), c.cmd("GET", "d1c")) == (1, 0, b"3")
        assert c.cmd("SELECT", "2") == "OK"
        assert c.cmd("GET", "d2") == b"keep"
        assert c.cmd("SELECT", "0") == "OK"
        assert c.cmd("SET", "after", "restart") == "OK"  # the log goes on after recovery
    with RawConn(port=s.port) as admin:
        assert int(info(admin)["tier2_recovery_keys"]) >= 13


def test_keys_and_scan_list_recovered_keys(launch, tmp_path):
    """After a restart every recovered key is a stub (its value only on tier 2): KEYS and SCAN list them
    (a worker once panicked here, "a stub's value is on tier 2", closing the connection)."""
    data = tmp_path / "data"
    s = launch(data)
    make_persistent_tenant(s)
    names = sorted(b"k%02d" % i for i in range(20))
    with tenant_conn(s) as c:
        assert all(c.cmd("SET", k, "v") == "OK" for k in names)
    assert s.stop() == 0
    s = launch(data)
    with tenant_conn(s) as c:
        assert sorted(c.cmd("KEYS", "*")) == names
    with tenant_conn(s) as c:
        cursor, seen = b"0", []
        while True:
            cursor, keys = c.cmd("SCAN", cursor, "COUNT", 7)
            seen.extend(keys)
            if cursor == b"0":
                break
        assert sorted(set(seen)) == names
    assert s.alive()


# --------------------------------------------------------------------------- 2. kill -9 loop
class Writer(threading.Thread):
    """Pipelines SETs on its own tenant connection until the server dies; a key counts as acknowledged only
    once its +OK arrived. mode 'unique': every key new; mode 'overwrite': a few keys, rising sequence.
    Paced to about `rate` SETs a second, at most `limit` in all, so every cycle is killed mid-load and stays
    small enough to verify."""

    def __init__(self, port: int, cycle: int, mode: str, seq_start: int, rng: random.Random,
                 rate: float = 6000, limit: int = 3000):
        super().__init__(daemon=True)
        self.port, self.cycle, self.mode, self.seq, self.rng = port, cycle, mode, seq_start, rng
        self.rate, self.limit = rate, limit
        self.sent: list[tuple[bytes, bytes]] = []
        self.acked: list[tuple[bytes, bytes]] = []
        self.error: str | None = None

    def next_item(self) -> tuple[bytes, bytes]:
        self.seq += 1
        if self.mode == "unique":
            key = b"u:%d:%d" % (self.cycle, self.seq)
            return key, value_for(key, 16 + zlib.crc32(key) % 1200)
        key = b"o:%d" % (self.seq % 17)
        return key, b"%s=%d" % (key, self.seq)

    def run(self) -> None:
        try:
            c = RawConn(port=self.port, timeout=10)
        except OSError:
            return  # killed before it connected
        try:
            reply = c.cmd("AUTH", TENANT, PASSWORD)
            if reply != "OK":
                self.error = f"AUTH: {reply!r}"
                return
            started = time.monotonic()
            while len(self.sent) < self.limit:
                items = [self.next_item() for _ in range(self.rng.randint(1, 16))]
                self.sent.extend(items)
                c.send(b"".join(encode("SET", k, v) for k, v in items))
                for item in items:
                    reply = c.read_reply(timeout=10)
                    if reply != "OK":
                        self.error = f"SET {item[0]!r}: {reply!r}"
                        return
                    self.acked.append(item)
                ahead = len(self.sent) / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            c.read_until_closed(timeout=10)  # done: wait for the kill
        except TimeoutError as e:
            self.error = f"no reply in 10 s from a live server: {e}"
        except (OSError, ConnectionError):
            pass  # the server was killed
        finally:
            c.close()


def mget_all(s: ServerProc, c: RawConn, keys: list[bytes], batch: int = 250) -> list:
    """MGET in batches. A reply that never comes is reported with what releases it (another client)."""
    got = []
    for i in range(0, len(keys), batch):
        try:
            got.extend(c.cmd("MGET", *keys[i:i + batch], timeout=10))
        except TimeoutError:
            with RawConn(port=s.port) as other:
                other.cmd("PING")
            try:
                c.read_reply(timeout=3)
                released = "a PING on another connection released it"
            except TimeoutError:
                released = "a PING on another connection did not release it"
            pytest.fail(f"server bug: MGET of {batch} keys (tier-2 stubs after a restart) got no reply in 10 s "
                        f"while the server was idle; {released}")
    return got


def test_kill9_loop_loses_no_acknowledged_write(launch, tmp_path):
    data = tmp_path / "data"
    rng = random.Random(0x5EED)
    flags = {"tier2_fsync": "always", "tier2_region_size": "256kb", "shards": 4}
    unique: dict[bytes, bytes] = {}  # every unique key sent -> its value
    by_cycle: list[list[bytes]] = []
    durable: set[bytes] = set()  # acknowledged, or read back after a restart: must never go missing
    over_floor: dict[bytes, int] = {}  # overwrite key -> lowest sequence it may read back as
    over_sent: dict[bytes, int] = {}  # overwrite key -> newest sequence sent
    seq = 0
    cycles = total_acked = unacked_present = verified = 0

    def verify(c: RawConn, keys: list[bytes], when: str) -> None:
        nonlocal unacked_present, verified
        got = mget_all(s, c, keys)
        lost = [k for k, v in zip(keys, got) if k in durable and v != unique[k]]
        wrong = [k for k, v in zip(keys, got) if v is not None and v != unique[k]]
        assert not lost and not wrong, (
            f"{when}: {len(lost)} acknowledged keys lost (e.g. {lost[:3]}), {len(wrong)} with a wrong value "
            f"(e.g. {wrong[:3]}); {len(durable)} acknowledged so far")
        found = [k for k, v in zip(keys, got) if v is not None and k not in durable]
        unacked_present += len(found)
        durable.update(found)
        verified += len(keys)

    started = time.monotonic()
    s = launch(data, **flags)
    make_persistent_tenant(s)
    while cycles < 20 or (cycles < 30 and time.monotonic() - started < 20):
        writers = [Writer(s.port, cycles, "unique", 0, random.Random(rng.random())),
                   Writer(s.port, cycles, "overwrite", seq, random.Random(rng.random()), rate=3000)]
        for w in writers:
            w.start()
        time.sleep(rng.uniform(0.03, 0.35))
        kill9(s)
        for w in writers:
            w.join(15)
            assert not w.is_alive(), "a writer hung after the kill"
            assert w.error is None, f"cycle {cycles}: {w.error}"
        u, o = writers
        seq = o.seq
        unique.update(u.sent)
        by_cycle.append([k for k, _ in u.sent])
        durable.update(k for k, _ in u.acked)
        for key, value in o.acked:
            over_floor[key] = max(over_floor.get(key, 0), int(value.split(b"=")[1]))
        for key, value in o.sent:
            over_sent[key] = max(over_sent.get(key, 0), int(value.split(b"=")[1]))
        total_acked += len(u.acked) + len(o.acked)
        cycles += 1

        s = launch(data, **flags)
        with tenant_conn(s, timeout=20) as c:
            # This cycle's and the previous cycle's keys, and a sample of all older ones.
            older = [k for keys in by_cycle[:-2] for k in keys]
            sample = rng.sample(older, min(len(older), 1500))
            verify(c, [k for keys in by_cycle[-2:] for k in keys] + sample, f"after kill {cycles}")
            for key in over_sent:
                v = c.cmd("GET", key)
                got_seq = None if v is None else int(v.split(b"=")[1])
                floor = over_floor.get(key)
                assert (got_seq is None and floor is None) or (
                    got_seq is not None and (floor or 0) <= got_seq <= over_sent[key]), (
                    f"after kill {cycles}: {key!r} read back as sequence {got_seq}; newest acknowledged "
                    f"{floor}, newest sent {over_sent[key]}")
                if got_seq is not None:
                    over_floor[key] = over_sent[key] = got_seq
    with tenant_conn(s, timeout=20) as c:
        verify(c, list(unique), "at the end")
        assert c.cmd("DBSIZE") == len(durable) + len(over_floor)
    elapsed = time.monotonic() - started
    summary = (f"{cycles} kill -9 cycles in {elapsed:.1f} s: {total_acked} acknowledged SETs, 0 lost, "
               f"{unacked_present} unacknowledged ones found after a restart, {verified} reads verified")
    print(summary)
    assert cycles >= 20 and total_acked >= 20 * 100, summary


# --------------------------------------------------------------------------- 3. beyond RAM
@pytest.mark.parametrize("reads", ["io-uring", "threads"])
def test_persistent_data_beyond_ram(launch, tmp_path, reads):
    maxmemory = 32 * MIB
    s = launch(tmp_path / "data", maxmemory="32mb", tier2_fsync="everysec", shards=4, tier2_reads=reads)
    make_persistent_tenant(s)
    base_rss = rss_bytes(s.pid)
    # 128 MiB of values into a 32 MiB budget: 4x, so "resident memory well under the data" means something
    # beside the process's own base and buffers.
    n, size = 8192, 16 * KIB
    data_bytes = n * size
    expected = {b"p:%05d" % i: value_for(b"p:%05d" % i, size) for i in range(n)}
    peak_rss = 0
    with tenant_conn(s, timeout=30) as c:
        items = list(expected.items())
        for i in range(0, n, 1024):
            replies = pipeline(c, (("SET", k, v) for k, v in items[i:i + 1024]), batch=32)
            assert all(r == "OK" for r in replies), [r for r in replies if r != "OK"][:3]
            peak_rss = max(peak_rss, rss_bytes(s.pid))
        used = int(info(c, "memory")["used_memory"])
        got = pipeline(c, (("GET", k) for k in expected), batch=32)
        correct, missing, errors, wrong = classify(got, expected)
        assert (correct, missing, errors, wrong) == (n, 0, 0, []), (correct, missing, errors, wrong[:3])
        t2 = info(c)
        used_after = int(info(c, "memory")["used_memory"])
    # Once tier 2's writer has caught up, what stays resident is the RAM budget plus the process's own.
    limit = base_rss + maxmemory + 32 * MIB
    settled = wait_for(lambda: rss_bytes(s.pid) < limit, 5.0, 0.1)
    rss = rss_bytes(s.pid)
    report = (f"VmRSS {rss >> 20} MiB settled, {peak_rss >> 20} MiB peak while writing (base {base_rss >> 20} MiB) "
              f"for {data_bytes >> 20} MiB of data under maxmemory {maxmemory >> 20} MiB")
    print(report)
    assert used <= maxmemory + 2 * MIB and used_after <= maxmemory + 2 * MIB, (used, used_after, maxmemory)
    assert settled and rss < 0.6 * data_bytes, report
    assert int(t2["tier2_demotions"]) >= n // 2, t2["tier2_demotions"]
    assert int(t2["tier2_hits"]) >= n // 2, t2["tier2_hits"]
    assert int(t2["tier2_lost_keys"]) == 0 and int(t2["tier2_read_errors"]) == 0, t2
    assert t2["tier2_read_path"] == expected_read_path(reads) and int(t2["tier2_sync_reads"]) == 0, t2
    # A first read on tier 2 is served from its record without promoting the key; a second promotes it
    # (Ex-Tmem Algorithm 2) when it pays. At the RAM limit that depends on how fast RAM turns over
    # against the gap between the reads (timing: either outcome is counted); with room in RAM they
    # promote. The first keys written were read once above, as stubs.
    served = int(t2["tier2_served_without_promotion"])
    assert served >= n // 2 and int(t2["tier2_promotions"]) == 0, t2
    first = list(expected)[:256]
    with tenant_conn(s, timeout=30) as c:
        got = pipeline(c, (("GET", k) for k in first), batch=32)
        declined = info(c)
    assert classify(got, {k: expected[k] for k in first})[:3] == (256, 0, 0)
    decided = int(declined["tier2_promotions"]) + int(declined["tier2_promotions_declined"])
    assert decided >= 200, declined
    with RawConn(port=s.port) as admin:
        assert admin.cmd("CONFIG", "SET", "maxmemory", str(4 * maxmemory)) == "OK"
    with tenant_conn(s, timeout=30) as c:
        got = pipeline(c, (("GET", k) for k in first), batch=32)
        again = info(c)
    assert classify(got, {k: expected[k] for k in first})[:3] == (256, 0, 0)
    assert int(again["tier2_promotions"]) >= 200, again
    assert int(again["tier2_promotions_declined"]) - int(declined["tier2_promotions_declined"]) < 56, again


# --------------------------------------------------------------------------- 4. noeviction spills to tier 2
def test_noeviction_ephemeral_spills_to_tier2(launch, tmp_path):
    s = launch(tmp_path / "data", maxmemory="16mb", maxmemory_policy="noeviction", shards=4)
    n, size = 2560, 16 * KIB  # 40 MiB into 16 MiB, as the default (ephemeral) tenant
    expected = {b"e:%05d" % i: value_for(b"e:%05d" % i, size) for i in range(n)}
    with RawConn(port=s.port, timeout=30) as c:
        replies = pipeline(c, (("SET", k, v) for k, v in expected.items()), batch=32)
        bad = [r for r in replies if r != "OK"]
        assert not bad, f"{len(bad)} SETs failed, e.g. {bad[:3]}"
        got = pipeline(c, (("GET", k) for k in expected), batch=32)
        result = classify(got, expected)
        assert result == (n, 0, 0, []), result[:3] + (result[3][:3],)
        assert c.cmd("DBSIZE") == n
        t2 = info(c)
        assert int(t2["tier2_demotions"]) > 0 and int(t2["tier2_hits"]) > 0, t2
        assert int(info(c, "memory")["used_memory"]) <= 16 * MIB + 2 * MIB


# --------------------------------------------------------------------------- 5. injected device faults
def test_fault_write_error(launch, tmp_path):
    data = tmp_path / "data"
    s = launch(data, tier2_fsync="always")
    make_persistent_tenant(s)
    with tenant_conn(s) as c:
        for i in range(20):
            assert c.cmd("SET", f"k{i}", f"v{i}") == "OK"
    with RawConn(port=s.port) as admin:
        assert admin.cmd("DEBUG", "TIER2-FAULT", "write-error") == "OK"
        first = try_write(s, "SET", "failed", "x")
        assert first == "closed" or is_write_failure(first), first
        second = try_write(s, "SET", "failed2", "y")
        assert isinstance(second, Err) and second.startswith("IOERR"), second
        # Not only SET: every persistent write is refused, and nothing is half done.
        hset = try_write(s, "HSET", "hnew", "f", "v")
        assert isinstance(hset, Err) and hset.startswith("IOERR"), hset
        assert admin.cmd("PING") == "PONG"
        assert admin.cmd("SET", "eph", "1") == "OK" and admin.cmd("GET", "eph") == b"1"
        t2 = info(admin)
        assert int(t2["tier2_write_errors"]) >= 1, t2
        assert t2["tier2_status"].startswith("failed"), t2["tier2_status"]
        assert admin.cmd("DEBUG", "TIER2-FAULT", "none") == "OK"
    with tenant_conn(s) as c:
        assert [c.cmd("GET", f"k{i}") for i in range(20)] == [b"v%d" % i for i in range(20)]
    kill9(s)
    s = launch(data, tier2_fsync="always")
    with tenant_conn(s) as c:
        assert [c.cmd("GET", f"k{i}") for i in range(20)] == [b"v%d" % i for i in range(20)]
        assert c.cmd("GET", "failed") in (None, b"x")
        assert c.cmd("GET", "failed2") is None
        assert c.cmd("SET", "again", "ok") == "OK"  # a restart brings writes back


def test_failed_persistent_write_is_not_applied(launch, tmp_path):
    s = launch(tmp_path / "data", tier2_fsync="always")
    make_persistent_tenant(s)
    with tenant_conn(s) as c:
        assert c.cmd("SET", "kept", "1") == "OK"
        assert c.cmd("RPUSH", "list", "a") == 1
    with RawConn(port=s.port) as admin:
        assert admin.cmd("DEBUG", "TIER2-FAULT", "write-error") == "OK"
    first = try_write(s, "SET", "probe", "x")  # the write that finds the device failed
    assert first == "closed" or is_write_failure(first), first
    with tenant_conn(s) as c:
        replies = [c.cmd("SET", "new", "y"), c.cmd("RPUSH", "list", "b"), c.cmd("HSET", "h", "f", "v"),
                   c.cmd("DEL", "kept")]
        assert all(isinstance(r, Err) and r.startswith("IOERR") for r in replies), replies
        # Refused writes left nothing behind: the state readers see is the state a restart finds.
        state = (c.cmd("GET", "new"), c.cmd("LRANGE", "list", 0, -1), c.cmd("EXISTS", "h"), c.cmd("GET", "kept"))
        assert state == (None, [b"a"], 0, b"1"), state


def expected_read_path(reads: str) -> str:
    """INFO tier2_read_path for `--tier2-reads reads`: io_uring falls back to threads where the kernel
    disables it (kernel.io_uring_disabled)."""
    disabled = Path("/proc/sys/kernel/io_uring_disabled")
    if reads == "io-uring" and disabled.exists() and disabled.read_text().strip() != "0":
        return "threads"
    return reads


def _demoted_persistent(launch, data: Path, reads: str = "io-uring"):
    """A server whose persistent tenant holds 32 MiB in a 16 MiB budget (most of it only on tier 2)."""
    s = launch(data, maxmemory="16mb", tier2_fsync="always", shards=4, tier2_reads=reads)
    make_persistent_tenant(s)
    expected = {b"d:%05d" % i: value_for(b"d:%05d" % i, 16 * KIB) for i in range(2048)}
    with tenant_conn(s, timeout=30) as c:
        replies = pipeline(c, (("SET", k, v) for k, v in expected.items()), batch=32)
        assert all(r == "OK" for r in replies)
        assert int(info(c)["tier2_demotions"]) > 1000
    return s, expected


@pytest.mark.parametrize("fault,reads", [("read-error", "io-uring"), ("vanished", "io-uring"),
                                         ("read-error", "threads")])
def test_fault_reading_demoted_keys(launch, tmp_path, fault, reads):
    """Reads ahead through io_uring (the default) and on the thread pool meet the injected fault alike."""
    data = tmp_path / "data"
    s, expected = _demoted_persistent(launch, data, reads)
    with RawConn(port=s.port) as admin, tenant_conn(s, timeout=30) as c:
        assert info(admin)["tier2_read_path"] == expected_read_path(reads)
        assert admin.cmd("DEBUG", "TIER2-FAULT", fault) == "OK"
        got = pipeline(c, (("GET", k) for k in expected), batch=32)
        correct, missing, errors, wrong = classify(got, expected)
        assert not wrong, f"{fault}: {len(wrong)} wrong values, e.g. {wrong[:3]}"
        assert missing + errors > 0, f"{fault}: every demoted key read back from a failed device?"
        assert admin.cmd("PING") == "PONG" and s.alive()
        assert admin.cmd("SET", "eph", "1") == "OK"
        t2 = info(admin)
        assert int(t2["tier2_read_errors"]) + int(t2["tier2_lost_keys"]) >= 1, t2
        if fault == "vanished":
            # Under everysec the first write may be acknowledged before the writer meets the missing device;
            # once it has, writes are refused.
            first = try_write(s, "SET", "new", "x")
            assert first in ("OK", "closed") or is_write_failure(first), first
            assert wait_for(lambda: info(admin)["tier2_status"].startswith("failed"), 5), info(admin)
            second = try_write(s, "SET", "new2", "y")
            assert isinstance(second, Err) and second.startswith("IOERR"), second
            assert int(info(admin)["tier2_write_errors"]) >= 1
        assert admin.cmd("DEBUG", "TIER2-FAULT", "none") == "OK"
        got = pipeline(c, (("GET", k) for k in expected), batch=32)
        after = classify(got, expected)
        assert not after[3], f"after the fault cleared: wrong values {after[3][:3]}"
    # Every write was acknowledged durable before the fault, and a key dropped for a failed read is only
    # dropped from RAM: a restart brings back every key.
    s.stop()
    s = launch(data, maxmemory="16mb", tier2_fsync="always", shards=4)
    with tenant_conn(s, timeout=30) as c:
        got = pipeline(c, (("GET", k) for k in expected), batch=32)
        restarted = classify(got, expected)
    assert not restarted[3], restarted[3][:3]
    assert restarted[0] == len(expected), (
        f"{fault}: after the fault ({correct} correct, {missing} missing, {errors} errors) and a restart, "
        f"{restarted[:3]} (correct, missing, errors) of {len(expected)} persistent keys")


# --------------------------------------------------------------------------- 6. ENOSPC
def test_enospc_gives_clear_errors(launch, tmp_path):
    fs = LoopFs(tmp_path, 24)
    try:
        data = tmp_path / "data"
        flags = {"tier2_path": str(fs.mnt / "tier2.dat"), "tier2_size": "1gb", "tier2_region_size": "1mb",
                 "tier2_fsync": "always"}
        s = launch(data, **flags)
        make_persistent_tenant(s)
        acked: dict[bytes, bytes] = {}
        failure = None
        c = tenant_conn(s)
        try:
            for i in range(0, 800, 8):  # up to 50 MiB of 64 KiB values into a 24 MiB filesystem
                items = [(b"f:%04d" % j, value_for(b"f:%04d" % j, 64 * KIB)) for j in range(i, i + 8)]
                c.send(b"".join(encode("SET", k, v) for k, v in items))
                for k, v in items:
                    reply = c.read_reply(timeout=10)
                    if reply != "OK":
                        failure = reply
                        break
                    acked[k] = v
                if failure is not None:
                    break
        except (ConnectionError, OSError):
            failure = "closed"
        finally:
            c.close()
        assert failure is not None, "50 MiB of persistent data fit a 24 MiB filesystem?"
        assert failure == "closed" or is_write_failure(failure), failure
        assert s.alive(), s.logtext()
        assert len(acked) > 100, f"only {len(acked)} writes before the filesystem was full"
        later = try_write(s, "SET", "later", "x")
        assert is_write_failure(later), later
        with RawConn(port=s.port) as admin:
            assert admin.cmd("PING") == "PONG"
            t2 = info(admin)
            assert int(t2["tier2_write_errors"]) >= 1, t2
            assert t2["tier2_status"].startswith("failed"), t2["tier2_status"]
        with tenant_conn(s, timeout=30) as c:
            got = pipeline(c, (("GET", k) for k in acked), batch=32)
            assert classify(got, acked) == (len(acked), 0, 0, [])
        # What was acknowledged is on the full filesystem: a restart recovers all of it.
        kill9(s)
        s = launch(data, **flags)
        with tenant_conn(s, timeout=30) as c:
            got = pipeline(c, (("GET", k) for k in acked), batch=32)
            result = classify(got, acked)
            assert result == (len(acked), 0, 0, []), result[:3]
        s.stop()
    finally:
        for server in launch.servers:  # nothing may hold the filesystem when it is unmounted
            server.stop(signal.SIGKILL)
        fs.close()


# --------------------------------------------------------------------------- 7. read-only filesystem
def test_readonly_filesystem(launch, tmp_path):
    fs = LoopFs(tmp_path, 24, options="rw,errors=remount-ro")
    try:
        data = tmp_path / "data"
        path = fs.mnt / "tier2.dat"
        s = launch(data, tier2_path=str(path), tier2_size="16mb", tier2_region_size="1mb", tier2_fsync="always")
        make_persistent_tenant(s)
        with tenant_conn(s) as c:
            for i in range(50):
                assert c.cmd("SET", f"k{i}", f"v{i}") == "OK"
        # `mount -o remount,ro` refuses while fallow holds its file open for writing ("busy"); ext4 remounts
        # itself read-only on an error under errors=remount-ro, which the test triggers through sysfs.
        r = subprocess.run(["mount", "-o", "remount,ro", str(fs.mnt)], capture_output=True, text=True)
        if r.returncode != 0:
            trigger = Path("/sys/fs/ext4") / Path(fs.dev).name / "trigger_fs_error"
            if not trigger.exists():
                pytest.skip(f"cannot remount read-only ({r.stderr.strip()}) and no {trigger}")
            trigger.write_text("fallow test: remount read-only\n")
        # Linux 6.x marks an ext4 that remounted itself read-only after an error "emergency_ro".
        assert wait_for(lambda: fs.options().startswith("ro") or "emergency_ro" in fs.options(), 5), fs.options()
        first = try_write(s, "SET", "after-ro", "x")
        assert first == "closed" or is_write_failure(first), first
        second = try_write(s, "SET", "after-ro2", "y")
        assert is_write_failure(second), second
        with RawConn(port=s.port) as admin:
            assert admin.cmd("PING") == "PONG"
            t2 = info(admin)
            assert int(t2["tier2_write_errors"]) >= 1, t2
            assert t2["tier2_status"].startswith("failed"), t2["tier2_status"]
        with tenant_conn(s) as c:
            assert [c.cmd("GET", f"k{i}") for i in range(50)] == [b"v%d" % i for i in range(50)]
        s.stop()
        assert not s.alive()

        # Starting on a read-only mount: a clear refusal, not a panic.
        fs.umount()
        fs.mount("ro")
        r, out = run_fallow(tmp_path, "--dir", tmp_path / "data2", "--tier2-path", path, "--tier2-size", "16mb",
                            "--tier2-region-size", "1mb")
        assert r.returncode != 0, out
        assert "panicked" not in out and "RUST_BACKTRACE" not in out, out
        assert str(path) in out and "Read-only file system" in out, out
    finally:
        for server in launch.servers:  # nothing may hold the filesystem when it is unmounted
            server.stop(signal.SIGKILL)
        fs.close()


# --------------------------------------------------------------------------- 8. corrupt / truncated file
def _write_then_stop(launch, data: Path, n: int, flags: dict) -> dict[bytes, bytes]:
    s = launch(data, **flags)
    make_persistent_tenant(s)
    expected = {b"c:%05d" % i: value_for(b"c:%05d" % i, 2000 + i % 300) for i in range(n)}
    with tenant_conn(s, timeout=30) as c:
        assert all(r == "OK" for r in pipeline(c, (("SET", k, v) for k, v in expected.items())))
    assert s.stop() == 0, s.logtext()
    return expected


def _read_all(s: ServerProc, expected: dict) -> tuple:
    with tenant_conn(s, timeout=30) as c:
        got = pipeline(c, (("GET", k) for k in expected), batch=128)
        dbsize = c.cmd("DBSIZE")
        t2 = info(c)
    return classify(got, expected), dbsize, t2


def test_corrupt_and_truncated_tier2_file(launch, tmp_path):
    region = 256 * KIB
    flags = {"tier2_region_size": "256kb", "tier2_fsync": "always", "shards": 4}
    clean = tmp_path / "clean"
    expected = _write_then_stop(launch, clean, 3000, flags)  # ~6.5 MiB: ~27 regions
    size = (clean / "tier2.dat").stat().st_size
    assert size > 4 * MIB, size

    # Flipped bytes in the middle of three regions past 1 MiB (region headers left intact).
    flipped = tmp_path / "flipped"
    shutil.copytree(clean, flipped)
    rng = random.Random(7)
    with open(flipped / "tier2.dat", "r+b") as f:
        for k in (5, 11, 17):
            offset = 4096 + k * region + region // 2 + rng.randrange(0, 4096)
            assert offset > MIB and offset + 64 < size
            f.seek(offset)
            f.write(rng.randbytes(64))
    s = launch(flipped, **flags)
    (correct, missing, errors, wrong), dbsize, t2 = _read_all(s, expected)
    assert not wrong, f"corrupt records served as values: {wrong[:3]}"
    assert errors == 0
    assert int(t2["tier2_recovery_corrupt_records"]) > 0, t2
    assert 1 <= missing <= 3 * region // 2000 + 3, (correct, missing)
    assert dbsize == correct
    s.stop()

    # Truncated in the middle of a record.
    cut = tmp_path / "cut"
    shutil.copytree(clean, cut)
    os.truncate(cut / "tier2.dat", size // 2 + 1234)
    s = launch(cut, **flags)
    (correct, missing, errors, wrong), dbsize, t2 = _read_all(s, expected)
    assert not wrong and errors == 0, wrong[:3]
    assert 0.35 * len(expected) < correct < 0.65 * len(expected), (correct, missing)
    assert dbsize == correct
    # The log goes on after the torn tail, and a further restart keeps both old and new keys.
    more = {b"n:%04d" % i: value_for(b"n:%04d" % i, 3000) for i in range(500)}
    with tenant_conn(s, timeout=30) as c:
        assert all(r == "OK" for r in pipeline(c, (("SET", k, v) for k, v in more.items())))
    kill9(s)
    s = launch(cut, **flags)
    (correct2, _, _, wrong2), _, _ = _read_all(s, expected)
    assert not wrong2 and correct2 == correct, (correct, correct2, wrong2[:3])
    (correct3, *_rest), _, _ = _read_all(s, more)
    assert correct3 == len(more), _rest
    s.stop()

    # The undamaged copy still reads back whole.
    s = launch(clean, **flags)
    (correct, missing, errors, wrong), dbsize, t2 = _read_all(s, expected)
    assert (correct, missing, errors, wrong) == (len(expected), 0, 0, [])
    assert int(t2["tier2_recovery_corrupt_records"]) == 0


# --------------------------------------------------------------------------- 9. one server per --dir
def test_admission_rule_setting(launch, tmp_path):
    r, out = run_fallow(tmp_path, "--dir", tmp_path / "bad", "--tier2-admission", "lfu")
    assert r.returncode != 0 and "tier2-admission must be frequency, hits or all" in out, out
    assert "panicked" not in out
    r, out = run_fallow(tmp_path, "--dir", tmp_path / "bad", "--tier2-reads", "aio")
    assert r.returncode != 0 and "tier2-reads must be io-uring or threads" in out, out
    s = launch(tmp_path / "data", tier2_admission="hits", tier2_admit_hits="2")
    with RawConn(port=s.port) as c:
        assert c.cmd("CONFIG", "GET", "tier2-admission") == [b"tier2-admission", b"hits"]
        t2 = info(c)
    assert t2["tier2_admission"] == "hits" and int(t2["tier2_admission_sketch_bytes"]) > 0, t2


def test_second_server_on_same_dir_refused(launch, tmp_path):
    data = tmp_path / "data"
    s = launch(data)
    with RawConn(port=s.port) as c:
        assert c.cmd("SET", "k", "v") == "OK"
    r, out = run_fallow(tmp_path, "--dir", data)
    assert r.returncode == 2, (r.returncode, out)
    assert "in use by another fallow" in out, out
    assert "panicked" not in out
    with RawConn(port=s.port) as c:
        assert c.cmd("PING") == "PONG" and c.cmd("GET", "k") == b"v"
    assert (data / "fallow.lock").read_text().strip() == str(s.pid)


# --------------------------------------------------------------------------- 10. tenants and users over restarts
def test_tenants_and_users_survive_clean_restart(launch, tmp_path):
    data = tmp_path / "data"
    s = launch(data)
    make_persistent_tenant(s)
    with RawConn(port=s.port) as admin:
        assert admin.cmd("TENANT", "SET", "cache", "WEIGHT", 300) == "OK"
        assert admin.cmd("ACL", "SETUSER", "app", "on", ">apppw", "~app:*", "+get", "+set") == "OK"
    with tenant_conn(s) as c:
        assert c.cmd("SET", "a", "1") == "OK"
        assert c.cmd("HSET", "h", "f", "v") == 1
    assert s.stop() == 0, s.logtext()

    s = launch(data)
    with RawConn(port=s.port) as admin:
        tenants = sorted(admin.cmd("TENANT", "LIST"))
        assert tenants == sorted([b"default", b"vault", b"cache"]), tenants
        cache = admin.cmd("TENANT", "GET", "cache")
        cache = dict(zip(cache[::2], cache[1::2]))
        assert (cache[b"weight"], cache[b"kind"]) == (300, b"ephemeral"), cache
        # The restricted user kept its password and permissions.
        assert admin.cmd("AUTH", "app", "apppw") == "OK"
        assert admin.cmd("SET", "app:x", "1") == "OK"
        assert admin.cmd("SET", "other", "1").startswith("NOPERM")
        assert admin.cmd("DEL", "app:x").startswith("NOPERM")
    with tenant_conn(s) as c:
        assert c.cmd("GET", "a") == b"1" and c.cmd("HGET", "h", "f") == b"v"
        # Re-declaring the tenant keeps its data (and the new weight is saved).
        assert c.cmd("TENANT", "SET", TENANT, "WEIGHT", 200, "KIND", "persistent") == "OK"
        assert c.cmd("GET", "a") == b"1"
        assert c.cmd("SET", "b", "2") == "OK"
    assert s.stop() == 0, s.logtext()

    s = launch(data)
    with tenant_conn(s) as c:
        assert (c.cmd("GET", "a"), c.cmd("GET", "b"), c.cmd("HGET", "h", "f")) == (b"1", b"2", b"v")
        vault = c.cmd("TENANT", "GET", TENANT)
        vault = dict(zip(vault[::2], vault[1::2]))
        assert (vault[b"weight"], vault[b"kind"]) == (200, b"persistent"), vault


# --------------------------------------------------------------------------- 11. memcached reads tier 2 ahead
def test_memcached_gets_read_tier2_ahead(launch, tmp_path):
    """memcached requests that read values (get, multi-get, mg, binary get, and writes that build on the old
    value: append, incr) have their stubs read ahead off the worker, as RESP commands do: counted as
    tier2_async_reads, not tier2_sync_reads (issue 18)."""
    import struct

    s = launch(tmp_path / "data", maxmemory="16mb", maxmemory_policy="noeviction", shards=4)
    n, size = 2560, 16 * KIB  # 40 MiB into 16 MiB: most values end on tier 2
    keys = [b"m:%05d" % i for i in range(n)]
    expected = {k: value_for(k, size) for k in keys}
    batch = 32

    def read_value(mc: RawConn, key: bytes) -> bytes:
        head = mc.readline(timeout=30)
        assert head == b"VALUE %s 0 %d" % (key, size), (key, head[:80])
        value = mc.read_exact(size + 2, timeout=30)
        assert value.endswith(b"\r\n"), key
        return value[:-2]

    def binary_get(key: bytes, opaque: int) -> bytes:
        return struct.pack(">BBHBBHIIQ", 0x80, 0x0c, len(key), 0, 0, 0, len(key), opaque, 0) + key

    with RawConn(port=s.mc_port, timeout=30) as mc, RawConn(port=s.port, timeout=30) as c:
        for i in range(0, n, batch):
            chunk = keys[i:i + batch]
            mc.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, size, expected[k]) for k in chunk))
            for k in chunk:
                assert mc.readline(timeout=30) == b"STORED", k
        before = info(c)
        stubbed = int(c.cmd("DBSIZE"))
        assert stubbed == n and int(before["tier2_demotions"]) > n // 4, before

        # A quarter each: single-key get, multi-get (8 keys a line, one named twice), mg, binary getk; every
        # batch is pipelined, so requests whose values are resident run before and after those that wait for
        # tier 2, and the replies must stay in order.
        quarter = n // 4
        single, multi, meta, binary = (keys[q * quarter:(q + 1) * quarter] for q in range(4))
        for i in range(0, quarter, batch):
            chunk = single[i:i + batch]
            mc.send(b"".join(b"get %s\r\n" % k for k in chunk))
            for k in chunk:
                assert read_value(mc, k) == expected[k], k
                assert mc.readline(timeout=30) == b"END", k
        for i in range(0, quarter, batch):
            lines = [multi[j:j + 8] for j in range(i, min(i + batch, quarter), 8)]
            mc.send(b"".join(b"get %s %s\r\n" % (b" ".join(line), line[0]) for line in lines))
            for line in lines:
                for k in line + [line[0]]:
                    assert read_value(mc, k) == expected[k], k
                assert mc.readline(timeout=30) == b"END", line
        for i in range(0, quarter, batch):
            chunk = meta[i:i + batch]
            mc.send(b"".join(b"mg %s v k\r\n" % k for k in chunk) + b"mn\r\n")
            for k in chunk:
                head = mc.readline(timeout=30)
                assert head == b"VA %d k%s" % (size, k), (k, head[:80])
                assert mc.read_exact(size + 2, timeout=30) == expected[k] + b"\r\n", k
            assert mc.readline(timeout=30) == b"MN"
        for i in range(0, quarter, batch):
            chunk = binary[i:i + batch]
            mc.send(b"".join(binary_get(k, i + j) for j, k in enumerate(chunk)))
            for j, k in enumerate(chunk):
                header = mc.read_exact(24, timeout=30)
                magic, opcode, keylen, extlen, _, status, body, opaque, _ = struct.unpack(">BBHBBHIIQ", header)
                assert (magic, opcode, status, opaque) == (0x81, 0x0c, 0, i + j), (k, header)
                got = mc.read_exact(body, timeout=30)
                assert got[extlen:extlen + keylen] == k and got[extlen + keylen:] == expected[k], k
        first = info(c)

        # A second read of a key served from tier 2 (promoting it or, RAM at its limit turning over
        # faster than the reads come, served in place) has its record read ahead too.
        again = keys[:256]
        for i in range(0, len(again), batch):
            chunk = again[i:i + batch]
            mc.send(b"".join(b"mg %s v\r\n" % k for k in chunk))
            for k in chunk:
                assert mc.readline(timeout=30) == b"VA %d" % size, k
                assert mc.read_exact(size + 2, timeout=30) == expected[k] + b"\r\n", k
        second = info(c)

        # Writes that build on the old value (append, incr) read the stubs they touch ahead too.
        builds = meta[:128]  # read once above (served from tier 2): still stubs
        for i in range(0, len(builds), batch):
            chunk = builds[i:i + batch]
            mc.send(b"".join(b"append %s 0 0 3\r\n+++\r\n" % k for k in chunk))
            for k in chunk:
                assert mc.readline(timeout=30) == b"STORED", k
        arith = meta[128:192]
        mc.send(b"".join(b"incr %s 1\r\n" % k for k in arith))
        for k in arith:
            reply = mc.readline(timeout=30)
            assert reply == b"CLIENT_ERROR cannot increment or decrement non-numeric value", (k, reply)
        third = info(c)
        mc.send(b"".join(b"get %s\r\n" % k for k in builds[:32]))
        for k in builds[:32]:
            head = mc.readline(timeout=30)
            assert head == b"VALUE %s 0 %d" % (k, size + 3), (k, head[:80])
            assert mc.read_exact(size + 5, timeout=30) == expected[k] + b"+++\r\n", k
            assert mc.readline(timeout=30) == b"END", k

    def grew(after: dict, name: str, since: dict = before) -> int:
        return int(after[f"tier2_{name}"]) - int(since[f"tier2_{name}"])

    from_tier2 = grew(first, "hits")
    report = {name: (grew(first, name), grew(second, name, first))
              for name in ("hits", "async_reads", "sync_reads", "promotions", "promotions_declined",
                           "served_without_promotion")}
    print(report)
    assert from_tier2 >= n // 4, report
    assert grew(first, "async_reads") >= from_tier2 // 2, report
    assert grew(first, "sync_reads") <= max(8, from_tier2 // 50), report
    decided = grew(second, "promotions", first) + grew(second, "promotions_declined", first)
    assert grew(second, "hits", first) > 0 and decided > 0, report
    assert grew(second, "async_reads", first) >= grew(second, "hits", first) // 2, report
    assert grew(second, "sync_reads", first) <= 8, report
    writes = {name: grew(third, name, second) for name in ("hits", "async_reads", "sync_reads")}
    print("append/incr on stubs:", writes)
    assert writes["async_reads"] >= (len(builds) + len(arith)) // 2 and writes["sync_reads"] <= 8, writes
    assert int(third["tier2_lost_keys"]) == 0 and int(third["tier2_read_errors"]) == 0, third


# --------------------------------------------------------------------------- 12. a tenant with tier 2 off
def tenant_fields(c: RawConn, name: str) -> dict[bytes, object]:
    reply = c.cmd("TENANT", "GET", name)
    return dict(zip(reply[::2], reply[1::2]))


def test_tier2_off_tenant_is_evicted_not_demoted(launch, tmp_path):
    """An ephemeral tenant with TIER2 no (a cache of disk blocks) leaves RAM by eviction even with tier 2
    attached and every departure admitted; another tenant's data still goes to tier 2."""
    s = launch(tmp_path / "data", maxmemory="16mb", maxmemory_policy="allkeys-lru", shards=4,
               tier2_admission="all", tenant="blocks:100:ephemeral:no:no")
    n, size = 2560, 16 * KIB  # 40 MiB into 16 MiB
    with RawConn(port=s.port) as admin:
        assert admin.cmd("TENANT", "SET", "cache", "WEIGHT", 100) == "OK"
        for name in ("blocks", "cache"):
            assert admin.cmd("ACL", "SETUSER", name, "on", f">{PASSWORD}", "~*", "+@all") == "OK"
    blocks = {b"b:%05d" % i: value_for(b"b:%05d" % i, size) for i in range(n)}
    with tenant_conn(s, "blocks", timeout=30) as c:
        replies = pipeline(c, (("SET", k, v) for k, v in blocks.items()), batch=32)
        assert all(r == "OK" for r in replies), [r for r in replies if r != "OK"][:3]
        got = pipeline(c, (("GET", k) for k in blocks), batch=32)
        correct, missing, errors, wrong = classify(got, blocks)
        t2 = info(c)
        evicted = tenant_fields(c, "blocks")[b"evicted_keys"]
    assert (errors, wrong) == (0, []), (errors, wrong[:3])
    assert missing > n // 2 and correct > 0, (correct, missing)
    assert int(t2["tier2_demotions"]) == 0 and int(t2["tier2_clean_ahead_bytes"]) == 0, t2
    assert evicted == missing, "every departure is an eviction of the tenant"
    cache = {b"c:%05d" % i: value_for(b"c:%05d" % i, size) for i in range(n)}
    with tenant_conn(s, "cache", timeout=30) as c:
        replies = pipeline(c, (("SET", k, v) for k, v in cache.items()), batch=32)
        assert all(r == "OK" for r in replies), [r for r in replies if r != "OK"][:3]
        got = pipeline(c, (("GET", k) for k in cache), batch=32)
        correct, missing, errors, wrong = classify(got, cache)
        t2 = info(c)
    assert int(t2["tier2_demotions"]) > n // 2, t2
    assert (correct, errors, wrong) == (n, 0, []), (correct, missing, errors, wrong[:3])


def test_tier2_switch_survives_restart_and_old_tenants_conf_loads(launch, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    # A tenants.conf written before the tier2 field: its tenants keep tier 2.
    (data / "tenants.conf").write_text("vault:100:persistent:no\nold:70:ephemeral:no\n")
    s = launch(data)
    with RawConn(port=s.port) as admin:
        assert tenant_fields(admin, "old")[b"tier2"] == b"yes"
        assert tenant_fields(admin, "vault")[b"tier2"] == b"yes"
        assert admin.cmd("TENANT", "SET", "blocks", "WEIGHT", 30, "TIER2", "no") == "OK"
        assert admin.cmd("TENANT", "SET", "vault", "TIER2", "no") == Err(
            "ERR a persistent tenant keeps tier 2 (TIER2 no is for ephemeral tenants)")
    assert s.stop() == 0, s.logtext()
    saved = (data / "tenants.conf").read_text().splitlines()
    assert saved == ["vault:100:persistent:no:yes", "old:70:ephemeral:no:yes", "blocks:30:ephemeral:no:no"]

    s = launch(data)
    with RawConn(port=s.port) as admin:
        blocks = tenant_fields(admin, "blocks")
        assert (blocks[b"weight"], blocks[b"kind"], blocks[b"tier2"]) == (30, b"ephemeral", b"no")
        assert admin.cmd("TENANT", "SET", "blocks", "TIER2", "yes") == "OK"
    assert s.stop() == 0, s.logtext()
    s = launch(data)
    with RawConn(port=s.port) as admin:
        assert tenant_fields(admin, "blocks")[b"tier2"] == b"yes"


def test_a_tenants_conf_with_a_bad_tier2_field_stops_startup(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "tenants.conf").write_text("vault:100:persistent:no:no\n")
    r, out = run_fallow(tmp_path, "--dir", data, "--tier2-size", "64mb")
    assert r.returncode != 0 and "a persistent tenant keeps tier 2" in out, out
    assert "panicked" not in out
