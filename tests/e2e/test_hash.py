import pytest

from helpers import Err

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def test_hset_hget_hgetall(r, c):
    assert r.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert r.hset("h", "a", "9") == 0
    assert r.hget("h", "a") == "9"
    assert r.hget("h", "zz") is None
    assert r.hget("nokey", "a") is None
    assert r.hgetall("h") == {"a": "9", "b": "2"}
    assert r.hgetall("nokey") == {}
    assert c.cmd("HSET", "h", "a") == Err("ERR wrong number of arguments for 'hset' command")
    assert c.cmd("HMSET", "h", "x", "1") == "OK"
    r.set("s", "v")
    assert c.cmd("HSET", "s", "f", "v") == Err(WRONGTYPE)
    assert c.cmd("HGET", "s", "f") == Err(WRONGTYPE)


def test_hsetnx_hdel_hlen_hexists_hstrlen(r):
    assert r.hsetnx("h", "f", "1") == 1
    assert r.hsetnx("h", "f", "2") == 0
    assert r.hget("h", "f") == "1"
    r.hset("h", mapping={"g": "hello", "i": "x"})
    assert r.hlen("h") == 3
    assert r.hexists("h", "g") is True
    assert r.hexists("h", "nope") is False
    assert r.hstrlen("h", "g") == 5
    assert r.hstrlen("h", "nope") == 0
    assert r.hdel("h", "f", "nope", "g") == 2
    assert r.hdel("h", "i") == 1
    assert r.exists("h") == 0  # empty hash is removed
    assert r.hlen("h") == 0


def test_hmget_hkeys_hvals(r):
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert r.hmget("h", "a", "x", "b") == ["1", None, "2"]
    assert r.hmget("nokey", "a") == [None]
    assert sorted(r.hkeys("h")) == ["a", "b"]
    assert sorted(r.hvals("h")) == ["1", "2"]


def test_hincrby_hincrbyfloat(r, c):
    assert r.hincrby("h", "n", 5) == 5
    assert r.hincrby("h", "n", -7) == -2
    assert c.cmd("HINCRBYFLOAT", "h", "f", "1.5") == b"1.5"
    assert c.cmd("HINCRBYFLOAT", "h", "f", "0.25") == b"1.75"
    r.hset("h", "s", "abc")
    assert c.cmd("HINCRBY", "h", "s", "1") == Err("ERR hash value is not an integer")
    assert c.cmd("HINCRBYFLOAT", "h", "s", "1") == Err("ERR hash value is not a float")
    assert c.cmd("HINCRBY", "h", "n", "x") == Err("ERR value is not an integer or out of range")
    r.hset("h", "big", str(2**63 - 1))
    assert c.cmd("HINCRBY", "h", "big", "1") == Err("ERR increment or decrement would overflow")


def test_hrandfield(r):
    r.hset("h", mapping={"a": "1", "b": "2", "c": "3"})
    assert r.hrandfield("h") in ("a", "b", "c")
    assert sorted(r.hrandfield("h", 10)) == ["a", "b", "c"]
    assert len(r.hrandfield("h", -5)) == 5
    assert r.hrandfield("nokey") is None


def test_hscan(r):
    r.hset("h", mapping={f"f{i}": str(i) for i in range(300)})
    got = dict(r.hscan_iter("h", count=50))
    assert got == {f"f{i}": str(i) for i in range(300)}
    assert dict(r.hscan_iter("h", match="f29*")) == {"f29": "29", **{f"f29{i}": f"29{i}" for i in range(10)}}
