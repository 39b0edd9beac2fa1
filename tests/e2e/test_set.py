import pytest

from helpers import Err

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def test_sadd_srem_smembers(r, c):
    assert r.sadd("s", "a", "b", "a") == 2
    assert r.sadd("s", "b", "c") == 1
    assert r.smembers("s") == {"a", "b", "c"}
    assert r.scard("s") == 3
    assert r.sismember("s", "a") == 1
    assert r.sismember("s", "z") == 0
    assert r.smismember("s", ["a", "z"]) == [1, 0]
    assert r.srem("s", "a", "z") == 1
    assert r.srem("s", "b", "c") == 2
    assert r.exists("s") == 0
    assert r.smembers("nokey") == set()
    r.set("str", "v")
    assert c.cmd("SADD", "str", "x") == Err(WRONGTYPE)
    assert c.cmd("SADD", "s") == Err("ERR wrong number of arguments for 'sadd' command")


def test_integer_members(r):
    r.sadd("s", 1, 2, 3, "10000000000000000000000")
    assert r.smembers("s") == {"1", "2", "3", "10000000000000000000000"}


def test_spop_srandmember(r):
    r.sadd("s", *"abcde")
    m = r.spop("s")
    assert m in set("abcde")
    assert r.scard("s") == 4
    popped = r.spop("s", 10)
    assert len(popped) == 4
    assert r.exists("s") == 0
    assert r.spop("s") is None
    r.sadd("t", *"abc")
    assert r.srandmember("t") in set("abc")
    assert sorted(r.srandmember("t", 5)) == ["a", "b", "c"]
    assert len(r.srandmember("t", -7)) == 7
    assert r.scard("t") == 3


def test_smove(r):
    r.sadd("a", "x", "y")
    r.sadd("b", "z")
    assert r.smove("a", "b", "x") is True
    assert r.smove("a", "b", "nope") is False
    assert r.smembers("a") == {"y"}
    assert r.smembers("b") == {"x", "z"}


def test_algebra(r):
    r.sadd("a", "1", "2", "3", "4")
    r.sadd("b", "3", "4", "5")
    r.sadd("c", "4", "6")
    assert r.sinter("a", "b") == {"3", "4"}
    assert r.sinter("a", "b", "c") == {"4"}
    assert r.sinter("a", "missing") == set()
    assert r.sunion("a", "b", "c") == {"1", "2", "3", "4", "5", "6"}
    assert r.sdiff("a", "b") == {"1", "2"}
    assert r.sdiff("a", "b", "c") == {"1", "2"}
    assert r.sinterstore("dst", ["a", "b"]) == 2
    assert r.smembers("dst") == {"3", "4"}
    assert r.sunionstore("dst", ["b", "c"]) == 4
    assert r.sdiffstore("dst", ["a", "a"]) == 0
    assert r.exists("dst") == 0
    assert r.sintercard(3, ["a", "b", "c"]) == 1
    assert r.sintercard(2, ["a", "b"], limit=1) == 1


def test_algebra_wrongtype(r, c):
    r.sadd("a", "1")
    r.set("s", "x")
    assert c.cmd("SINTER", "a", "s") == Err(WRONGTYPE)
    assert c.cmd("SUNIONSTORE", "d", "a", "s") == Err(WRONGTYPE)


def test_sscan(r):
    r.sadd("s", *[f"m{i}" for i in range(500)])
    assert set(r.sscan_iter("s", count=40)) == {f"m{i}" for i in range(500)}
