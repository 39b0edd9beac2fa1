import threading
import time

import pytest

from helpers import Err, encode, wait_for

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def test_push_pop_range(r, c):
    assert r.rpush("l", "a", "b") == 2
    assert r.lpush("l", "z") == 3
    assert r.lrange("l", 0, -1) == ["z", "a", "b"]
    assert r.lpushx("nokey", "x") == 0
    assert r.rpushx("l", "c") == 4
    assert r.llen("l") == 4
    assert r.lpop("l") == "z"
    assert r.rpop("l") == "c"
    assert r.lpop("l", 5) == ["a", "b"]
    assert r.exists("l") == 0
    assert r.lpop("l") is None
    assert c.cmd("LPOP", "l", "2") is None
    r.set("s", "v")
    assert c.cmd("LPUSH", "s", "x") == Err(WRONGTYPE)
    assert c.cmd("LPUSH", "s") == Err("ERR wrong number of arguments for 'lpush' command")
    assert c.cmd("LPOP", "s", "-1") == Err("ERR value is out of range, must be positive")


def test_lrange_lindex_lset(r, c):
    r.rpush("l", *"abcde")
    assert r.lrange("l", -2, -1) == ["d", "e"]
    assert r.lrange("l", 3, 100) == ["d", "e"]
    assert r.lrange("l", 4, 1) == []
    assert r.lindex("l", 0) == "a"
    assert r.lindex("l", -1) == "e"
    assert r.lindex("l", 10) is None
    assert r.lset("l", 1, "B") is True
    assert r.lindex("l", 1) == "B"
    assert c.cmd("LSET", "l", "10", "x") == Err("ERR index out of range")
    assert c.cmd("LSET", "nokey", "0", "x") == Err("ERR no such key")


def test_linsert_lrem_ltrim_lpos(r):
    r.rpush("l", "a", "b", "a", "c", "a")
    assert r.linsert("l", "before", "b", "X") == 6
    assert r.linsert("l", "after", "nope", "Y") == -1
    assert r.lpos("l", "a") == 0
    assert r.lpos("l", "a", rank=2) == 3
    assert r.lpos("l", "a", count=0) == [0, 3, 5]
    assert r.lrem("l", 2, "a") == 2
    assert r.lrange("l", 0, -1) == ["X", "b", "c", "a"]
    assert r.lrem("l", -1, "a") == 1
    assert r.ltrim("l", 1, -1) is True
    assert r.lrange("l", 0, -1) == ["b", "c"]
    assert r.ltrim("l", 5, 10) is True
    assert r.exists("l") == 0


def test_lmove_rpoplpush(r):
    r.rpush("src", "a", "b", "c")
    assert r.rpoplpush("src", "dst") == "c"
    assert r.lmove("src", "dst", "LEFT", "RIGHT") == "a"
    assert r.lrange("dst", 0, -1) == ["c", "a"]
    assert r.lmove("src", "src", "LEFT", "RIGHT") == "b"
    assert r.lmove("nokey", "dst", "LEFT", "LEFT") is None


def test_lmpop(r, c):
    r.rpush("b", "1", "2", "3")
    assert c.cmd("LMPOP", "2", "a", "b", "LEFT", "COUNT", "2") == [b"b", [b"1", b"2"]]
    assert c.cmd("LMPOP", "1", "a", "RIGHT") is None


def test_blpop_timeout_returns_nil(r):
    t0 = time.monotonic()
    assert r.blpop(["empty"], timeout=0.3) is None
    assert 0.25 <= time.monotonic() - t0 < 2.5


def test_blpop_immediate(r):
    r.rpush("b", "x")
    assert list(r.blpop(["a", "b"], timeout=1)) == ["b", "x"]
    r.rpush("b", "y", "z")
    assert list(r.brpop(["b"], timeout=1)) == ["b", "z"]


def _push_later(factory, delay, *cmd):
    def run():
        time.sleep(delay)
        cl = factory()
        cl.execute_command(*cmd)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_blpop_woken_by_push(r, redis_client_factory):
    t = _push_later(redis_client_factory, 0.2, "RPUSH", "q", "hello")
    t0 = time.monotonic()
    got = r.blpop(["other", "q"], timeout=5)
    assert list(got) == ["q", "hello"]
    assert time.monotonic() - t0 < 3
    t.join(5)
    assert r.exists("q") == 0


def test_brpop_woken_by_push(r, redis_client_factory):
    t = _push_later(redis_client_factory, 0.2, "LPUSH", "q", "a", "b")
    got = r.brpop(["q"], timeout=5)
    assert list(got) == ["q", "a"]
    t.join(5)
    assert r.lrange("q", 0, -1) == ["b"]


def test_blmove_woken_and_timeout(r, redis_client_factory):
    assert r.blmove("src", "dst", 0.2, "LEFT", "RIGHT") is None
    t = _push_later(redis_client_factory, 0.2, "RPUSH", "src", "v")
    assert r.blmove("src", "dst", 5, "LEFT", "RIGHT") == "v"
    t.join(5)
    assert r.lrange("dst", 0, -1) == ["v"]
    assert r.exists("src") == 0


def test_blpop_fifo_between_waiters(server, redis_client_factory, r):
    results = {}

    def waiter(name):
        cl = redis_client_factory()
        results[name] = cl.blpop(["fq"], timeout=5)

    t1 = threading.Thread(target=waiter, args=("first",), daemon=True)
    t1.start()
    time.sleep(0.15)
    t2 = threading.Thread(target=waiter, args=("second",), daemon=True)
    t2.start()
    time.sleep(0.15)
    r.rpush("fq", "1")
    t1.join(5)
    r.rpush("fq", "2")
    t2.join(5)
    assert list(results["first"]) == ["fq", "1"]
    assert list(results["second"]) == ["fq", "2"]


def test_blpop_errors(c):
    assert c.cmd("BLPOP", "k", "-1") == Err("ERR timeout is negative")
    assert c.cmd("BLPOP", "k", "abc") == Err("ERR timeout is not a float or out of range")
    assert c.cmd("BLPOP", "k") == Err("ERR wrong number of arguments for 'blpop' command")


def test_client_unblock_ends_a_blocking_wait(raw):
    blocked, admin = raw(timeout=10), raw()
    blocked_id = blocked.cmd("CLIENT", "ID")
    for reason, expected in [("TIMEOUT", None), ("ERROR", Err("UNBLOCKED client unblocked via CLIENT UNBLOCK"))]:
        blocked.send(encode("BLPOP", "nolist", "0"))
        assert wait_for(lambda: admin.cmd("CLIENT", "UNBLOCK", str(blocked_id), reason) == 1, timeout=5)
        assert blocked.read_reply() == expected
    assert admin.cmd("CLIENT", "UNBLOCK", str(blocked_id)) == 0, "not blocked now"
    assert admin.cmd("CLIENT", "UNBLOCK", "999999") == 0
    assert admin.cmd("CLIENT", "UNBLOCK", "x") == Err("ERR value is not an integer or out of range")
    assert admin.cmd("CLIENT", "UNBLOCK", "1", "bogus") == Err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")
    assert admin.cmd("CLIENT", "UNBLOCK") == Err("ERR wrong number of arguments for 'client|unblock' command")
    assert admin.cmd("CLIENT", "GETREDIR") == -1
