import pytest

from helpers import Err, RawConn

pytestmark = pytest.mark.resp

OOM = "OOM command not allowed when used memory > 'maxmemory'."


def _fill(c, prefix, n, size=1000, batch=200):
    """Pipelined SETs; returns the list of replies."""
    out = []
    val = b"x" * size
    for start in range(0, n, batch):
        cmds = b"".join(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
            len(k), k, len(val), val) for k in (f"{prefix}{i}".encode() for i in range(start, min(n, start + batch))))
        c.send(cmds)
        out.extend(c.read_reply(timeout=10) for _ in range(min(n, start + batch) - start))
    return out


def test_noeviction_oom(server_factory):
    # Without tier 2, as Redis: the limit refuses writes (test_tier2.py covers noeviction with tier 2).
    s = server_factory(maxmemory="10mb", maxmemory_policy="noeviction", tier2_size=0)
    with RawConn(port=s.port, timeout=10) as c:
        replies = _fill(c, "k", 20000)
        oks = [x for x in replies if x == "OK"]
        errs = [x for x in replies if isinstance(x, Err)]
        assert 1000 < len(oks) < 20000
        assert errs and all(e == Err(OOM) for e in errs)
        assert len(oks) + len(errs) == 20000
        # pipelined query buffers are freed afterwards, so a few more writes may fit;
        # single writes must hit the limit again quickly and stay there
        more = _fill(c, "m", 2000, batch=1)
        assert Err(OOM) in more and more[-1] == Err(OOM)
        oks += [x for x in more if x == "OK"]
        # reads and deletes still work at the limit
        assert c.cmd("GET", "k0") == b"x" * 1000
        assert c.cmd("DEL", "k0", "k1", "k2") == 3
        assert c.cmd("DBSIZE") == len(oks) - 3


def test_allkeys_lru_keeps_writing(server_factory):
    # RAM eviction as Redis does it; with tier 2 what leaves RAM is kept on flash (test_tier2.py).
    s = server_factory(maxmemory="10mb", maxmemory_policy="allkeys-lru", tier2_size=0)
    with RawConn(port=s.port, timeout=10) as c:
        replies = _fill(c, "k", 30000)
        assert replies == ["OK"] * 30000
        n = c.cmd("DBSIZE")
        assert 1000 < n < 30000  # bounded: old keys were evicted
        assert c.cmd("GET", "k29999") == b"x" * 1000  # most recent write survives
        info = c.cmd("INFO", "stats").decode()
        evicted = int(info.split("evicted_keys:")[1].split("\r\n")[0])
        assert evicted >= 30000 - n
        mem = c.cmd("INFO", "memory").decode()
        used = int(mem.split("used_memory:")[1].split("\r\n")[0])
        assert used <= 11 * 1024 * 1024


def test_config_set_maxmemory_runtime(server_factory):
    s = server_factory(tier2_size=0)
    with RawConn(port=s.port, timeout=10) as c:
        assert _fill(c, "a", 3000) == ["OK"] * 3000
        assert c.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction") == "OK"
        assert c.cmd("CONFIG", "SET", "maxmemory", "1mb") == "OK"
        assert c.cmd("SET", "b", "v") == Err(OOM)
        assert c.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lru") == "OK"
        assert c.cmd("SET", "b", "v") == "OK"
        assert c.cmd("DBSIZE") < 3000  # lowering the limit evicted keys
        assert c.cmd("CONFIG", "SET", "maxmemory", "0") == "OK"
        assert _fill(c, "c", 2000) == ["OK"] * 2000


# ------------------------------------------------------------------ the cap holds per command, before allocating
MIB = 1 << 20


def _info_int(c, section, name):
    text = c.cmd("INFO", section).decode()
    return int(text.split(f"\r\n{name}:")[1].split("\r\n")[0])


def _rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


@pytest.mark.fallow_only
@pytest.mark.parametrize("policy", ["noeviction", "allkeys-lru"])
def test_one_setrange_cannot_pass_maxmemory(server_factory, policy):
    s = server_factory(maxmemory="64mb", maxmemory_policy=policy)
    with RawConn(port=s.port, timeout=10) as c:
        assert c.cmd("SET", "keep", "v") == "OK"
        assert c.cmd("SETRANGE", "huge", 400_000_000, "x") == Err(OOM)
        assert c.cmd("EXISTS", "huge") == 0
        assert c.cmd("GET", "keep") == b"v", "a write larger than the whole cap evicts nothing"
        assert _info_int(c, "memory", "used_memory") < 64 * MIB
        assert _info_int(c, "stats", "total_oom_rejections") == 1
        # growth that fits is fine; growth past the cap is refused on an existing key too
        assert c.cmd("SETRANGE", "huge", 1_000_000, "x") == 1_000_001
        assert c.cmd("SETRANGE", "huge", 100_000_000, "x") == Err(OOM)
        assert c.cmd("STRLEN", "huge") == 1_000_001
    assert _rss_kb(s.pid, "VmHWM") < 150_000, "the 400 MB were never allocated"


@pytest.mark.fallow_only
def test_append_and_big_requests_count_against_the_cap(server_factory):
    s = server_factory(maxmemory="8mb", maxmemory_policy="noeviction")
    with RawConn(port=s.port, timeout=10) as c:
        chunk = "x" * (3 * MIB)
        assert c.cmd("APPEND", "s", chunk) == 3 * MIB
        assert c.cmd("APPEND", "s", chunk) == 6 * MIB
        assert c.cmd("APPEND", "s", chunk) == Err(OOM), "6 MiB + 3 MiB would pass 8 MiB"
        assert c.cmd("STRLEN", "s") == 6 * MIB
        # one LPUSH with many members: its own bytes are counted before it runs
        members = ["m" * 1000] * 3000
        assert c.cmd("LPUSH", "l", *members) == Err(OOM)
        assert c.cmd("EXISTS", "l") == 0
        assert _info_int(c, "memory", "used_memory") <= 8 * MIB
        # COPY knows the size of what it duplicates
        assert c.cmd("COPY", "s", "s2") == Err(OOM)
        assert c.cmd("EXISTS", "s2") == 0
        assert c.cmd("DEL", "s") == 1
        assert c.cmd("LPUSH", "l", *members) == 3000, "fits once there is room"


@pytest.mark.fallow_only
def test_eviction_makes_room_for_a_grown_value(server_factory):
    s = server_factory(maxmemory="16mb", maxmemory_policy="allkeys-lru", tier2_size=0)
    with RawConn(port=s.port, timeout=10) as c:
        _fill(c, "k", 10_000)  # ~10 MB of small keys
        assert c.cmd("SETRANGE", "big", 8 * MIB, "x") == 8 * MIB + 1
        assert _info_int(c, "stats", "evicted_keys") > 0
        # room was made for the growth; the item's own overhead (key, header, index) may go slightly past
        assert _info_int(c, "memory", "used_memory") <= 16 * MIB + 64 * 1024
