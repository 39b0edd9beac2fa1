import pytest

from helpers import Err

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def test_zadd_zscore_zcard(r, c):
    assert r.zadd("z", {"a": 1, "b": 2, "c": 3}) == 3
    assert r.zadd("z", {"a": 10}) == 0
    assert r.zscore("z", "a") == 10.0
    assert r.zscore("z", "nope") is None
    assert r.zcard("z") == 3
    assert r.zadd("z", {"a": 5, "d": 4}, nx=True) == 1
    assert r.zscore("z", "a") == 10.0
    assert r.zadd("z", {"a": 5, "e": 4}, xx=True) == 0
    assert r.zscore("z", "a") == 5.0 and r.zscore("z", "e") is None
    assert r.zadd("z", {"a": 1, "b": 100}, gt=True, ch=True) == 1
    assert r.zadd("z", {"a": 1}, lt=True, ch=True) == 1
    assert r.zadd("z", {"a": 2}, incr=True) == 3.0
    assert c.cmd("ZADD", "z", "NX", "XX", "1", "a") == Err(
        "ERR XX and NX options at the same time are not compatible")
    assert c.cmd("ZADD", "z", "GT", "NX", "1", "a") == Err(
        "ERR GT, LT, and/or NX options at the same time are not compatible")
    assert c.cmd("ZADD", "z", "abc", "a") == Err("ERR value is not a valid float")
    assert c.cmd("ZADD", "z", "1") == Err("ERR wrong number of arguments for 'zadd' command")
    assert c.cmd("ZADD", "z", "1", "a", "2") == Err("ERR syntax error")
    r.set("s", "v")
    assert c.cmd("ZADD", "s", "1", "a") == Err(WRONGTYPE)


def test_zscore_formatting(c):
    c.cmd("ZADD", "z", "1.5", "a", "-inf", "lo", "+inf", "hi", "3", "i")
    assert c.cmd("ZSCORE", "z", "a") == b"1.5"
    assert c.cmd("ZSCORE", "z", "i") == b"3"
    assert c.cmd("ZSCORE", "z", "lo") == b"-inf"
    assert c.cmd("ZSCORE", "z", "hi") == b"inf"
    assert c.cmd("ZINCRBY", "z", "0.25", "a") == b"1.75"
    # Redis 7.0 formats doubles with %.17g
    assert c.cmd("ZINCRBY", "z", "0.1", "i") == b"3.1000000000000001"


def test_zrange_variants(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3, "d": 4})
    assert r.zrange("z", 0, -1) == ["a", "b", "c", "d"]
    assert r.zrange("z", 0, 1, withscores=True) == [("a", 1.0), ("b", 2.0)]
    assert r.zrange("z", 0, -1, desc=True) == ["d", "c", "b", "a"]
    assert r.zrevrange("z", 0, 0) == ["d"]
    assert r.zrangebyscore("z", 2, 3) == ["b", "c"]
    assert r.zrangebyscore("z", "(2", "+inf") == ["c", "d"]
    assert r.zrangebyscore("z", "-inf", "+inf", start=1, num=2) == ["b", "c"]
    assert r.zrevrangebyscore("z", 4, 3) == ["d", "c"]
    assert r.zrange("z", 1, 3, byscore=True) == ["a", "b", "c"]
    assert r.zcount("z", "(1", 3) == 2
    assert r.zrange("nokey", 0, -1) == []


def test_lex(r):
    r.zadd("z", {m: 0 for m in "abcdefg"})
    assert r.zrangebylex("z", "-", "[c") == ["a", "b", "c"]
    assert r.zrangebylex("z", "(a", "(d") == ["b", "c"]
    assert r.zrevrangebylex("z", "+", "[f") == ["g", "f"]
    assert r.zlexcount("z", "[b", "[e") == 4
    assert r.zremrangebylex("z", "[a", "[b") == 2
    assert r.zcard("z") == 5


def test_rank_rem_incr(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert r.zrank("z", "a") == 0
    assert r.zrevrank("z", "a") == 2
    assert r.zrank("z", "nope") is None
    assert r.zincrby("z", 5, "a") == 6.0
    assert r.zrange("z", 0, -1) == ["b", "c", "a"]
    assert r.zrem("z", "b", "nope") == 1
    assert r.zremrangebyrank("z", 0, 0) == 1
    assert r.zremrangebyscore("z", "-inf", "+inf") == 1
    assert r.exists("z") == 0


def test_pop(r):
    r.zadd("z", {"a": 1, "b": 2, "c": 3})
    assert r.zpopmin("z") == [("a", 1.0)]
    assert r.zpopmax("z", 5) == [("c", 3.0), ("b", 2.0)]
    assert r.zpopmin("z") == []
    assert r.exists("z") == 0


def test_store_ops(r):
    r.zadd("a", {"x": 1, "y": 2})
    r.zadd("b", {"y": 3, "z": 4})
    assert r.zunionstore("u", ["a", "b"]) == 3
    assert r.zrange("u", 0, -1, withscores=True) == [("x", 1.0), ("z", 4.0), ("y", 5.0)]
    assert r.zinterstore("i", {"a": 2, "b": 1}, aggregate="MAX") == 1
    assert r.zscore("i", "y") == 4.0
    assert r.zdiffstore("d", ["a", "b"]) == 1
    assert r.zrange("d", 0, -1) == ["x"]
    assert r.zmscore("a", ["x", "nope"]) == [1.0, None]
    assert r.zrandmember("a") in ("x", "y")


def test_zrange_errors(c):
    c.cmd("ZADD", "z", "1", "a")
    assert c.cmd("ZRANGEBYSCORE", "z", "x", "1") == Err("ERR min or max is not a float")
    assert c.cmd("ZRANGEBYLEX", "z", "a", "b") == Err("ERR min or max not valid string range item")
    assert c.cmd("ZRANGE", "z", "0", "1", "LIMIT", "0", "1") == Err(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")


def test_zscan(r):
    r.zadd("z", {f"m{i}": i for i in range(300)})
    assert dict(r.zscan_iter("z", count=30)) == {f"m{i}": float(i) for i in range(300)}
