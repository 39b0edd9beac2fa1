import time

import pytest

from helpers import Err

pytestmark = pytest.mark.resp

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOTINT = "ERR value is not an integer or out of range"


def test_get_set_basic(r, c):
    assert r.get("k") is None
    assert r.set("k", "v") is True
    assert r.get("k") == "v"
    assert c.cmd("SET", "k", "w") == "OK"
    assert c.cmd("GET", "k") == b"w"
    assert c.cmd("GET", "nokey") is None


def test_binary_safe_value(rb):
    val = bytes(range(256)) * 4 + b"\r\n\x00"
    rb.set(b"bin\x00key", val)
    assert rb.get(b"bin\x00key") == val


def test_set_ex_px(r):
    assert r.set("k", "v", ex=100)
    assert 98 <= r.ttl("k") <= 100
    assert r.set("k", "v", px=50000)
    assert 49000 <= r.pttl("k") <= 50000
    r.set("short", "v", px=100)
    time.sleep(0.25)
    assert r.get("short") is None


def test_set_exat_pxat(r):
    now = int(time.time())
    assert r.set("k", "v", exat=now + 100)
    assert 98 <= r.ttl("k") <= 100
    assert r.set("k2", "v", pxat=(now + 200) * 1000)
    assert 198 <= r.ttl("k2") <= 200
    # absolute time in the past: key is set and immediately expired
    assert r.set("k3", "v", exat=now - 10)
    assert r.exists("k3") == 0


def test_set_nx_xx(r, c):
    assert r.set("k", "1", nx=True) is True
    assert r.set("k", "2", nx=True) is None
    assert r.get("k") == "1"
    assert r.set("k", "3", xx=True) is True
    assert r.get("k") == "3"
    assert r.set("missing", "x", xx=True) is None
    assert r.exists("missing") == 0
    assert c.cmd("SET", "k", "v", "NX", "XX") == Err("ERR syntax error")


def test_set_keepttl_and_get(r, c):
    r.set("k", "v", ex=100)
    r.set("k", "v2", keepttl=True)
    assert 98 <= r.ttl("k") <= 100
    r.set("k", "v3")
    assert r.ttl("k") == -1
    assert r.set("k", "new", get=True) == "v3"
    assert r.set("fresh", "x", get=True) is None
    assert r.get("fresh") == "x"
    r.rpush("list", "a")
    assert c.cmd("SET", "list", "v", "GET") == Err(WRONGTYPE)
    assert r.type("list") == "list"


def test_set_errors(c):
    assert c.cmd("SET", "k", "v", "EX", "0") == Err("ERR invalid expire time in 'set' command")
    assert c.cmd("SET", "k", "v", "EX", "-5") == Err("ERR invalid expire time in 'set' command")
    assert c.cmd("SET", "k", "v", "EX", "abc") == Err(NOTINT)
    assert c.cmd("SET", "k", "v", "EX", "10", "PX", "100") == Err("ERR syntax error")
    assert c.cmd("SET", "k", "v", "KEEPTTL", "EX", "10") == Err("ERR syntax error")
    assert c.cmd("SET", "k", "v", "BOGUS") == Err("ERR syntax error")
    assert c.cmd("SET", "k") == Err("ERR wrong number of arguments for 'set' command")
    assert c.cmd("GET") == Err("ERR wrong number of arguments for 'get' command")
    assert c.cmd("GET", "a", "b") == Err("ERR wrong number of arguments for 'get' command")


def test_get_wrongtype(r, c):
    r.lpush("l", "x")
    assert c.cmd("GET", "l") == Err(WRONGTYPE)


def test_setnx_setex_psetex(r, c):
    assert r.setnx("k", "1") is True
    assert r.setnx("k", "2") is False
    assert r.get("k") == "1"
    assert r.setex("e", 100, "v") is True
    assert 98 <= r.ttl("e") <= 100
    assert r.psetex("p", 100000, "v") is True
    assert 99000 <= r.pttl("p") <= 100000
    assert c.cmd("SETEX", "e", "0", "v") == Err("ERR invalid expire time in 'setex' command")
    assert c.cmd("PSETEX", "e", "-1", "v") == Err("ERR invalid expire time in 'psetex' command")
    assert c.cmd("SETEX", "e", "x", "v") == Err(NOTINT)


def test_mget_mset_msetnx(r, c):
    assert r.mset({"a": "1", "b": "2"}) is True
    r.lpush("l", "x")
    assert r.mget("a", "b", "nope", "l") == ["1", "2", None, None]
    assert r.msetnx({"c": "3", "a": "9"}) is False
    assert r.exists("c") == 0
    assert r.msetnx({"c": "3", "d": "4"}) is True
    assert r.mget("c", "d") == ["3", "4"]
    assert c.cmd("MSET", "a") == Err("ERR wrong number of arguments for 'mset' command")
    assert c.cmd("MSET", "a", "1", "b") == Err("ERR wrong number of arguments for 'mset' command")


def test_getset_getdel(r, c):
    assert r.getset("k", "1") is None
    assert r.getset("k", "2") == "1"
    r.expire("k", 100)
    assert r.getset("k", "3") == "2"
    assert r.ttl("k") == -1  # GETSET discards the TTL
    assert r.getdel("k") == "3"
    assert r.exists("k") == 0
    assert r.getdel("k") is None
    r.sadd("s", "m")
    assert c.cmd("GETDEL", "s") == Err(WRONGTYPE)


def test_getex(r, c):
    r.set("k", "v")
    assert r.getex("k", ex=100) == "v"
    assert 98 <= r.ttl("k") <= 100
    assert r.getex("k", px=200000) == "v"
    assert 199 <= r.ttl("k") <= 200
    assert r.getex("k", persist=True) == "v"
    assert r.ttl("k") == -1
    assert r.getex("k", exat=int(time.time()) + 50) == "v"
    assert 48 <= r.ttl("k") <= 50
    assert r.getex("missing") is None
    assert c.cmd("GETEX", "k", "EX", "0") == Err("ERR invalid expire time in 'getex' command")
    assert c.cmd("GETEX", "k", "EX", "10", "PERSIST") == Err("ERR syntax error")


def test_append_strlen(r, c):
    assert r.append("k", "Hello") == 5
    assert r.append("k", " World") == 11
    assert r.get("k") == "Hello World"
    assert r.strlen("k") == 11
    assert r.strlen("missing") == 0
    r.set("n", 12)
    assert r.append("n", "3") == 3
    assert r.incr("n") == 124
    r.hset("h", "f", "v")
    assert c.cmd("APPEND", "h", "x") == Err(WRONGTYPE)
    assert c.cmd("STRLEN", "h") == Err(WRONGTYPE)


def test_getrange(r):
    r.set("k", "This is a string")
    assert r.getrange("k", 0, 3) == "This"
    assert r.getrange("k", -3, -1) == "ing"
    assert r.getrange("k", 0, -1) == "This is a string"
    assert r.getrange("k", 10, 100) == "string"
    assert r.getrange("k", 5, 2) == ""
    assert r.getrange("k", 100, 200) == ""
    assert r.getrange("missing", 0, -1) == ""


def test_setrange(r, c):
    r.set("k", "Hello World")
    assert r.setrange("k", 6, "Redis") == 11
    assert r.get("k") == "Hello Redis"
    assert r.setrange("pad", 5, "x") == 6
    assert r.get("pad") == "\x00\x00\x00\x00\x00x"
    assert r.setrange("empty", 0, "") == 0
    assert r.exists("empty") == 0
    assert c.cmd("SETRANGE", "k", "-1", "x") == Err("ERR offset is out of range")
    assert c.cmd("SETRANGE", "k", "536870912", "x") == Err(
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)")


def test_incr_decr(r, c):
    assert r.incr("n") == 1
    assert r.incrby("n", 10) == 11
    assert r.decr("n") == 10
    assert r.decrby("n", 20) == -10
    r.set("n", " 1")
    assert c.cmd("INCR", "n") == Err(NOTINT)
    r.set("n", "1.5")
    assert c.cmd("INCR", "n") == Err(NOTINT)
    r.set("n", "abc")
    assert c.cmd("INCRBY", "n", "1") == Err(NOTINT)
    r.set("n", "1")
    assert c.cmd("INCRBY", "n", "x") == Err(NOTINT)
    assert c.cmd("INCRBY", "n", "99999999999999999999") == Err(NOTINT)
    r.lpush("l", "a")
    assert c.cmd("INCR", "l") == Err(WRONGTYPE)
    r.set("n", 5, ex=100)
    r.incr("n")
    assert r.ttl("n") > 0  # INCR keeps the TTL


def test_incr_overflow(r, c):
    r.set("n", str(2**63 - 1))
    assert c.cmd("INCR", "n") == Err("ERR increment or decrement would overflow")
    r.set("n", str(-(2**63)))
    assert c.cmd("DECR", "n") == Err("ERR increment or decrement would overflow")
    r.set("n", "1")
    assert c.cmd("DECRBY", "n", str(-(2**63))) == Err("ERR decrement would overflow")
    assert r.get("n") == "1"


def test_incrbyfloat(r, c):
    r.set("f", "10.50")
    assert c.cmd("INCRBYFLOAT", "f", "0.1") == b"10.6"
    assert c.cmd("INCRBYFLOAT", "f", "-5") == b"5.6"
    r.set("f", "5.0e3")
    assert c.cmd("INCRBYFLOAT", "f", "2.0e2") == b"5200"
    assert c.cmd("INCRBYFLOAT", "new", "3") == b"3"
    r.set("f", "abc")
    assert c.cmd("INCRBYFLOAT", "f", "1") == Err("ERR value is not a valid float")
    r.set("f", "1")
    assert c.cmd("INCRBYFLOAT", "f", "x") == Err("ERR value is not a valid float")
    assert c.cmd("INCRBYFLOAT", "f", "inf") == Err("ERR increment would produce NaN or Infinity")
    r.sadd("s", "a")
    assert c.cmd("INCRBYFLOAT", "s", "1") == Err(WRONGTYPE)
