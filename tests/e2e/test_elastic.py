"""Elastic memory (issue 4) end to end, each on a private fallow with its own flags: resident memory really goes
back to the OS (ELASTIC RECLAIM on both paths, CONFIG SET elastic-max), weighted fair shares between tenants
(ACL users), persistent tenants are never evicted and get -OOM at their floor, and a real memory hog (a child
process) makes fallow shrink without being killed itself.

Sizes are small (hundreds of MB) and every test is bounded in time. The hog test makes the "host" small by giving
fallow a reserve of (MemAvailable - 1.5 GB): CI machines are shared, so we never push the real machine towards the
OOM killer; fallow reacts to what MemAvailable says, and the reserve only moves the point at which it reacts.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from helpers import REPO_ROOT, Err, RawConn, ServerProc, wait_for

pytestmark = [pytest.mark.fallow_only, pytest.mark.resp]

MiB = 1 << 20
HOG = REPO_ROOT / "scripts" / "bench" / "elastic" / "hog.py"
WEIGHTS = {"t200": 200, "t300": 300, "t600": 600}
INFO_ELASTIC_FIELDS = (
    "memory_mode pool_target_bytes pool_resident_bytes pool_used_bytes pool_min_bytes pool_max_bytes "
    "pool_reserve_bytes pool_floor_bytes process_rss_bytes host_source host_total_bytes host_available_bytes "
    "psi_some_avg10 psi_full_avg10 cgroup_memory_max_bytes cgroup_memory_high_bytes cgroup_memory_current_bytes "
    "reclaim_careful_runs reclaim_careful_objects reclaim_careful_bytes reclaim_careful_us reclaim_fast_runs "
    "reclaim_fast_objects reclaim_fast_bytes reclaim_fast_us reclaim_last_path reclaim_last_bytes reclaim_last_us "
    "controller_shrinks controller_grows controller_wakeups_pressure").split()


# --------------------------------------------------------------------------- helpers
class Elastic(ServerProc):
    """fallow with extra flags (ServerProc itself passes only a few)."""

    def __init__(self, flags):
        super().__init__("fallow")
        self.flags = [str(f) for f in flags]

    def argv(self):
        return super().argv() + self.flags


@pytest.fixture
def elastic():
    started = []

    def make(*flags) -> Elastic:
        s = Elastic(flags)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.cleanup()


def vm_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))


def _number(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v.strip()


def info(c: RawConn, section: str) -> dict:
    text = c.cmd("INFO", section)
    assert not isinstance(text, Err), text
    out = {}
    for line in text.decode().splitlines():
        if ":" in line and not line.startswith("#"):
            k, v = line.split(":", 1)
            out[k] = _number(v)
    return out


def tenants(c: RawConn) -> dict[str, dict]:
    out = {}
    for k, v in info(c, "tenants").items():
        if k.startswith("tenant_"):
            fields = dict(p.split("=", 1) for p in str(v).split(","))
            out[k[len("tenant_"):]] = {f: _number(x) for f, x in fields.items()}
    return out


def write(c: RawConn, prefix: str, start: int, count: int, value: bytes) -> list:
    """Pipelined SETs of prefix{start..start+count}; returns the replies."""
    c.send(b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(value), value)
                    for k in (f"{prefix}{i}".encode() for i in range(start, start + count))))
    return [c.read_reply(timeout=30) for _ in range(count)]


def fill(c: RawConn, prefix: str, total_bytes: int, value_bytes: int, batch: int = 64) -> int:
    value = b"v" * value_bytes
    n = total_bytes // value_bytes
    for start in range(0, n, batch):
        replies = write(c, prefix, start, min(batch, n - start), value)
        assert all(r == "OK" for r in replies), [r for r in replies if r != "OK"][:3]
    return n


def existing(c: RawConn, prefix: str, n: int, batch: int = 1000) -> int:
    found = 0
    for start in range(0, n, batch):
        keys = [f"{prefix}{i}".encode() for i in range(start, min(n, start + batch))]
        c.send(b"".join(b"*2\r\n$6\r\nEXISTS\r\n$%d\r\n%s\r\n" % (len(k), k) for k in keys))
        found += sum(c.read_reply(timeout=30) for _ in keys)
    return found


def as_tenant(port: int, name: str) -> RawConn:
    c = RawConn(port=port, timeout=30)
    assert c.cmd("AUTH", name, "any") == "OK"
    return c


def define_tenant(admin: RawConn, name: str, weight: int, kind: str = "ephemeral"):
    assert admin.cmd("TENANT", "SET", name, "WEIGHT", weight, "KIND", kind) == "OK"
    assert admin.cmd("ACL", "SETUSER", name, "on", "nopass", "+@all", "~*") == "OK"


def shares(admin: RawConn, names) -> tuple[dict, int]:
    t = tenants(admin)
    held = {n: t[n]["resident_bytes"] for n in names}
    total = sum(held.values())
    return {n: held[n] / max(total, 1) for n in names}, total


# --------------------------------------------------------------------------- tests
def test_info_elastic_has_the_documented_fields(elastic):
    s = elastic("--memory-mode", "elastic")
    with RawConn(port=s.port) as c:
        fields = info(c, "elastic")
        assert [f for f in INFO_ELASTIC_FIELDS if f not in fields] == []
        assert fields["memory_mode"] == "elastic"
        status = c.cmd("ELASTIC", "STATUS")
        pairs = dict(zip(status[::2], status[1::2]))
        assert b"pool_target_bytes" in pairs and b"process_rss_bytes" in pairs
        assert "default" in tenants(c)


@pytest.mark.parametrize("path", ["FAST", "CAREFUL"])
def test_reclaim_gives_rss_back(elastic, path):
    """Fill ~400 MB, ELASTIC RECLAIM 200 MB: VmRSS of the server falls by >= 90% of it."""
    s = elastic("--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-min", "600mb",
                "--elastic-max", "600mb")
    request = 200 * MiB
    with RawConn(port=s.port, timeout=30) as c:
        n = fill(c, "k", 400 * MiB, 16 * 1024)
        rss_before = vm_rss(s.pid)
        released, objects, duration_us, used_path = c.cmd("ELASTIC", "RECLAIM", request, path, timeout=30)
        assert used_path == path.lower().encode()
        assert released >= 0.95 * request and objects > 0 and duration_us >= 0, (released, objects, duration_us)
        fell = wait_for(lambda: rss_before - vm_rss(s.pid) >= 0.9 * request, timeout=1.0)
        assert fell, f"RSS fell by {(rss_before - vm_rss(s.pid)) / MiB:.0f} MiB of {request / MiB:.0f} MiB"
        assert c.cmd("DBSIZE") <= n - 0.8 * request // (16 * 1024)
        fields = info(c, "elastic")
        assert fields[f"reclaim_{path.lower()}_runs"] >= 1
        assert fields[f"reclaim_{path.lower()}_bytes"] >= released
        assert fields["reclaim_last_path"] == path.lower()


def test_config_set_elastic_max_shrinks_within_a_second(elastic):
    s = elastic("--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-max", "600mb",
                "--elastic-grow-bytes-per-sec", "8gb")
    with RawConn(port=s.port, timeout=30) as c:
        fill(c, "k", 400 * MiB, 16 * 1024)
        resident_before = info(c, "elastic")["pool_resident_bytes"]
        rss_before = vm_rss(s.pid)
        assert resident_before >= 380 * MiB
        limit = 150 * MiB
        t0 = time.monotonic()
        assert c.cmd("CONFIG", "SET", "elastic-max", "150mb") == "OK"
        under = wait_for(lambda: info(c, "elastic")["pool_resident_bytes"] <= limit, timeout=1.0, interval=0.01)
        took = time.monotonic() - t0
        assert under, f"pool still {info(c, 'elastic')['pool_resident_bytes'] / MiB:.0f} MiB after {took:.2f} s"
        fields = info(c, "elastic")
        assert fields["pool_target_bytes"] <= limit and fields["pool_max_bytes"] == limit
        assert c.cmd("CONFIG", "GET", "elastic-max")[1] in (b"157286400", b"150mb")
        released = resident_before - fields["pool_resident_bytes"]
        assert rss_before - vm_rss(s.pid) >= 0.9 * released


def _write_round_robin(conns: dict, value: bytes, total_bytes: int, counters: dict, batch: int = 32):
    """Each tenant in turn writes `batch` new keys until total_bytes were written; every SET must succeed."""
    written = 0
    while written < total_bytes:
        for name, c in conns.items():
            replies = write(c, f"{name}:", counters[name], batch, value)
            assert all(r == "OK" for r in replies), (name, [r for r in replies if r != "OK"][:3])
            counters[name] += batch
            written += batch * len(value)


def _assert_shares(admin, names, pool: int, tolerance: float = 0.05):
    got, total = shares(admin, names)
    weight_sum = sum(WEIGHTS[n] for n in names)
    want = {n: WEIGHTS[n] / weight_sum for n in names}
    assert total >= 0.8 * pool, f"tenants hold {total / MiB:.0f} MiB of a {pool / MiB:.0f} MiB pool"
    off = {n: round(got[n] - want[n], 3) for n in names}
    assert all(abs(d) <= tolerance for d in off.values()), f"shares {got}, wanted {want}"
    return got


def _fair_server(elastic, pool: int):
    return elastic("--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-max", pool, "--shards", "4",
                   "--elastic-grow-bytes-per-sec", "8gb")


def test_fair_shares_of_a_full_pool(elastic):
    """Weights 200/300/600 writing as fast as each other: resident bytes converge to 2/11, 3/11, 6/11 of the
    pool (within 5 percentage points; segments are 2 MiB, so a finer bound would measure granularity)."""
    pool = 256 * MiB
    s = _fair_server(elastic, pool)
    value = b"f" * (16 * 1024)
    with RawConn(port=s.port, timeout=30) as admin:
        for name, weight in WEIGHTS.items():
            define_tenant(admin, name, weight)
        conns = {n: as_tenant(s.port, n) for n in WEIGHTS}
        counters = dict.fromkeys(WEIGHTS, 0)
        try:
            _write_round_robin(conns, value, 3 * pool, counters)
            _assert_shares(admin, WEIGHTS, pool)
            _write_round_robin(conns, value, pool, counters)  # still writing: the shares hold
            got = _assert_shares(admin, WEIGHTS, pool)
        finally:
            for c in conns.values():
                c.close()
        t = tenants(admin)
        assert all(t[n]["evicted_keys"] > 0 for n in WEIGHTS), t
        # r_i = w_i / Σw over the tenants holding bytes (the idle default tenant counts for nothing)
        assert {n: round(float(t[n]["share"]), 4) for n in WEIGHTS} == {"t200": 0.1818, "t300": 0.2727,
                                                                           "t600": 0.5455}, t
        # f_i = (c_i / P) / r_i: near 1 for everyone when the shares are right
        assert all(0.6 <= float(t[n]["fairness"]) <= 1.4 for n in WEIGHTS), (t, got)


def test_late_tenant_reclaims_its_share(elastic):
    pool = 256 * MiB
    s = _fair_server(elastic, pool)
    value = b"f" * (16 * 1024)
    with RawConn(port=s.port, timeout=30) as admin:
        for name, weight in WEIGHTS.items():
            define_tenant(admin, name, weight)
        early = {n: as_tenant(s.port, n) for n in ("t200", "t300")}
        counters = dict.fromkeys(WEIGHTS, 0)
        try:
            _write_round_robin(early, value, 2 * pool, counters)
            before = _assert_shares(admin, ("t200", "t300"), pool)
            held_before = {n: tenants(admin)[n]["resident_bytes"] for n in early}
            late = dict(early, t600=as_tenant(s.port, "t600"))
            _write_round_robin(late, value, 3 * pool, counters)
            after = _assert_shares(admin, WEIGHTS, pool)
        finally:
            for c in early.values():
                c.close()
        held_after = tenants(admin)
        assert all(held_after[n]["resident_bytes"] < 0.7 * held_before[n] for n in early), (before, after)
        assert held_after["t600"]["resident_bytes"] >= (6 / 11 - 0.05) * pool


def test_persistent_tenant_is_never_evicted_and_gets_oom(elastic):
    # Without tier 2 persistent bytes are a floor (with it they leave RAM as stubs: test_tier2.py).
    pool = 128 * MiB
    s = elastic("--memory-mode", "elastic", "--elastic-reserve", "0", "--elastic-max", pool, "--shards", "4",
                "--elastic-grow-bytes-per-sec", "8gb", "--tier2-size", "0")
    value = b"p" * (16 * 1024)
    with RawConn(port=s.port, timeout=30) as admin:
        define_tenant(admin, "keep", 100, "persistent")
        define_tenant(admin, "cache", 100, "ephemeral")
        with as_tenant(s.port, "keep") as keep, as_tenant(s.port, "cache") as cache:
            kept = fill(keep, "keep:", 32 * MiB, len(value))
            churned = fill(cache, "cache:", 3 * pool, len(value))
            t = tenants(admin)
            assert t["keep"]["kind"] == "persistent" and t["keep"]["evicted_keys"] == 0, t["keep"]
            assert t["cache"]["evicted_keys"] > 0 and existing(cache, "cache:", churned) < churned, t["cache"]
            assert existing(keep, "keep:", kept) == kept
            assert info(admin, "elastic")["pool_floor_bytes"] >= 32 * MiB
            # persistent writes take the ephemeral tenant's bytes, then hit the floor: -OOM, nothing evicted
            errors, ok = [], 0
            for start in range(kept, kept + 2 * pool // len(value), 64):
                replies = write(keep, "keep:", start, 64, value)
                ok += sum(r == "OK" for r in replies)
                errors += [r for r in replies if isinstance(r, Err)]
                if errors:
                    break
            assert errors and all(str(e).startswith("OOM") for e in errors), errors[:3]
            assert ok > 0  # the ephemeral tenant's bytes were taken first
            t = tenants(admin)
            assert t["keep"]["evicted_keys"] == 0
            assert t["cache"]["resident_bytes"] <= 0.2 * pool, t["cache"]
            assert existing(keep, "keep:", kept + ok) == kept + ok


def test_memory_hog_makes_fallow_shrink(elastic):
    """The host budget is 1.5 GB: reserve = available - 1.5 GB, with `available` as fallow sees it
    (host_available_bytes: MemAvailable plus the free pages on per-CPU lists, which MemAvailable misses). fallow
    holds 1 GB; a hog takes 1 GB more, so the target falls by about 1 GB (to about 0.5 GB) and fallow gives about
    0.5 GB back, while the hog finishes normally (exit 0: it was not OOM-killed, and it never waited for memory).
    The machine is shared, so the expectations start from the target fallow had just before the hog started."""
    budget, fill_bytes, hog_bytes = 1536 * MiB, 1024 * MiB, 1024 * MiB
    s = elastic("--memory-mode", "elastic", "--elastic-reserve", "99%", "--elastic-grow-bytes-per-sec", "8gb")
    with RawConn(port=s.port, timeout=30) as c:
        available = sorted(info(c, "elastic")["host_available_bytes"] for _ in range(5))[2]
        assert c.cmd("CONFIG", "SET", "elastic-reserve", available - budget) == "OK"
        wait_for(lambda: info(c, "elastic")["pool_target_bytes"] >= fill_bytes + 64 * MiB, timeout=3)
        fill(c, "k", fill_bytes, 64 * 1024)
        before = info(c, "elastic")
        assert before["pool_resident_bytes"] >= 0.9 * fill_bytes, before
        slack = before["pool_target_bytes"] - before["pool_resident_bytes"]
        assert slack <= hog_bytes - 256 * MiB, f"the host moved: {slack / MiB:.0f} MiB free in the pool; {before}"
        rss_before = vm_rss(s.pid)
        hog = subprocess.Popen([sys.executable, str(HOG), "--target-bytes", str(hog_bytes), "--hold-s", "2",
                                "--json-lines"], stdout=subprocess.PIPE, text=True)
        samples = []  # (target, resident, server RSS) while the hog runs
        try:
            deadline = time.monotonic() + 15
            while hog.poll() is None and time.monotonic() < deadline:
                fields = info(c, "elastic")
                samples.append((fields["pool_target_bytes"], fields["pool_resident_bytes"], vm_rss(s.pid)))
                time.sleep(0.05)
            out, _ = hog.communicate(timeout=10)
        finally:
            if hog.poll() is None:
                hog.kill()
                hog.wait()
        assert hog.returncode == 0, out[-2000:]
        assert json.loads(out.splitlines()[-1])["blocked_s"] == 0, out[-500:]
        min_target = min(t for t, _, _ in samples)
        min_resident = min(r for _, r, _ in samples)
        expected_target = before["pool_target_bytes"] - hog_bytes
        report = (f"target {before['pool_target_bytes'] / MiB:.0f} -> {min_target / MiB:.0f} MiB (expected about "
                  f"{expected_target / MiB:.0f}), pool {before['pool_resident_bytes'] / MiB:.0f} -> "
                  f"{min_resident / MiB:.0f} MiB")
        assert min_target <= before["pool_target_bytes"] - 0.8 * hog_bytes, report
        assert min_resident <= min_target + 64 * MiB, report
        expected_fall = before["pool_resident_bytes"] - max(expected_target, 0)
        assert before["pool_resident_bytes"] - min_resident >= 0.8 * expected_fall, report
        assert rss_before - min(rss for _, _, rss in samples) >= 0.8 * expected_fall, report
        assert info(c, "elastic")["controller_shrinks"] >= 1
        assert s.alive()


def test_hog_script_standalone():
    """hog.py holds what it is asked for (every page touched: RSS), and exits 0 on SIGTERM."""
    hog = subprocess.Popen([sys.executable, str(HOG), "--target-bytes", "128mb", "--step-mib", "16",
                            "--report-interval-s", "0.1"], stdout=subprocess.PIPE, text=True)
    try:
        line = hog.stdout.readline()
        assert "held=128MiB" in line, line
        assert vm_rss(hog.pid) >= 128 * MiB
        hog.terminate()
        out, _ = hog.communicate(timeout=10)
    finally:
        if hog.poll() is None:
            hog.kill()
    assert hog.returncode == 0 and "done" in out, out
