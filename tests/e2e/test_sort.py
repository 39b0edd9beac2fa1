"""SORT and SORT_RO on lists, sets and sorted sets: BY and GET patterns, LIMIT, ALPHA, STORE.

Every expected reply was captured from redis-server 7.0.15 and runs against both servers (E2E_TARGET=redis).
No test makes a weight overflow or underflow: Redis checks strtod's errno without clearing it, so after one
ERANGE its numeric sorts fail until something else resets errno.
"""
import hashlib
import time

import pytest

from helpers import Err

pytestmark = pytest.mark.resp
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_DOUBLE = Err("ERR One or more scores can't be converted into double")


def test_numeric_alpha_desc_and_limit(c):
    c.cmd("RPUSH", "l", "3", "10", "2", "10", "-1.5", "1e2")
    assert c.cmd("SORT", "l") == [b"-1.5", b"2", b"3", b"10", b"10", b"1e2"]
    assert c.cmd("SORT", "l", "DESC") == [b"1e2", b"10", b"10", b"3", b"2", b"-1.5"]
    assert c.cmd("SORT", "l", "ALPHA") == [b"-1.5", b"10", b"10", b"1e2", b"2", b"3"]
    assert c.cmd("SORT", "l", "DESC", "ASC", "ALPHA") == [b"-1.5", b"10", b"10", b"1e2", b"2", b"3"]
    assert c.cmd("SORT", "l", "LIMIT", "1", "2") == [b"2", b"3"]
    # a negative offset counts as 0, a negative count as "all"; past the end is empty
    assert c.cmd("SORT", "l", "LIMIT", "-1", "2") == [b"-1.5", b"2"]
    assert c.cmd("SORT", "l", "LIMIT", "4", "-2") == [b"10", b"1e2"]
    assert c.cmd("SORT", "l", "LIMIT", "6", "2") == []
    assert c.cmd("SORT", "l", "LIMIT", "0", "0") == []
    assert c.cmd("SORT_RO", "l", "DESC", "LIMIT", "0", "2") == [b"1e2", b"10"]
    c.cmd("SADD", "s", "5", "3", "100", "-2")
    assert c.cmd("SORT", "s") == [b"-2", b"3", b"5", b"100"]
    assert c.cmd("SORT", "s", "DESC", "LIMIT", "1", "2") == [b"5", b"3"]
    c.cmd("ZADD", "z", "1", "c", "2", "b", "3", "a", "3", "d")
    assert c.cmd("SORT", "z", "ALPHA") == [b"a", b"b", b"c", b"d"]
    assert c.cmd("SORT", "z", "ALPHA", "DESC", "LIMIT", "0", "2") == [b"d", b"c"]


def test_weights_parse_as_strtod(c):
    # leading blanks, an empty string (0), hexadecimal and infinities are numbers; equal weights order by bytes
    c.cmd("RPUSH", "w", " 5", "", " 0x10", "-inf", "+INF", "0", "4.5")
    assert c.cmd("SORT", "w") == [b"-inf", b"", b"0", b"4.5", b" 5", b" 0x10", b"+INF"]
    c.cmd("RPUSH", "bad", "1", "x")
    assert c.cmd("SORT", "bad") == NOT_DOUBLE
    assert c.cmd("SORT", "bad", "STORE", "dst") == NOT_DOUBLE
    assert c.cmd("EXISTS", "dst") == 0
    assert c.cmd("SORT", "bad", "ALPHA") == [b"1", b"x"]
    assert c.cmd("SORT", "bad", "BY", "nosort") == [b"1", b"x"]
    for weight in ["5 ", "nan", "1e", "0x", "--1"]:
        c.cmd("DEL", "one")
        c.cmd("RPUSH", "one", weight, "1")
        assert c.cmd("SORT", "one") == NOT_DOUBLE, weight


def test_alpha_compares_bytes_up_to_a_nul_unless_storing(c):
    c.cmd("RPUSH", "n", "a\x00b", "a\x00a", "a", "b")
    # strcoll stops at the NUL: the three "a" compare equal and keep their order
    assert c.cmd("SORT", "n", "ALPHA") == [b"a\x00b", b"a\x00a", b"a", b"b"]
    assert c.cmd("SORT", "n", "ALPHA", "STORE", "dn") == 4
    assert c.cmd("LRANGE", "dn", "0", "-1") == [b"a", b"a\x00a", b"a\x00b", b"b"]


def test_by_and_get_patterns(c):
    c.cmd("RPUSH", "l", "3", "10", "2", "10", "-1.5", "1e2")
    c.cmd("MSET", "w_3", "30", "w_10", "5", "w_2", "20", "w_-1.5", "1", "w_1e2", "x")
    assert c.cmd("SORT", "l", "BY", "w_*") == NOT_DOUBLE
    c.cmd("SET", "w_1e2", "0")
    assert c.cmd("SORT", "l", "BY", "w_*") == [b"1e2", b"-1.5", b"10", b"10", b"2", b"3"]
    assert c.cmd("SORT", "l", "BY", "w_*", "DESC") == [b"3", b"2", b"10", b"10", b"-1.5", b"1e2"]
    assert c.cmd("SORT", "l", "BY", "w_*", "LIMIT", "1", "2") == [b"-1.5", b"10"]
    assert c.cmd("SORT", "l", "BY", "w_*", "ALPHA") == [b"1e2", b"-1.5", b"2", b"3", b"10", b"10"]
    # missing weights are 0, and ties order by the elements
    assert c.cmd("SORT", "l", "BY", "missing_*") == [b"-1.5", b"10", b"10", b"1e2", b"2", b"3"]
    assert c.cmd("SORT", "l", "GET", "#", "GET", "w_*") == [
        b"-1.5", b"1", b"2", b"20", b"3", b"30", b"10", b"5", b"10", b"5", b"1e2", b"0"]
    # GET of a missing key, of a pattern without '*', of a key of another type: nil
    c.cmd("DEL", "w_3")
    c.cmd("SADD", "w_3", "x")
    assert c.cmd("SORT", "l", "BY", "nosort", "GET", "w_*", "GET", "nostar") == [
        None, None, b"5", None, b"20", None, b"5", None, b"1", None, b"0", None]
    c.cmd("HSET", "h_3", "f", "c", "g", "1")
    c.cmd("HSET", "h_10", "f", "a")
    c.cmd("HSET", "h_2", "f", "b")
    assert c.cmd("SORT", "l", "BY", "h_*->f", "ALPHA", "GET", "#", "GET", "h_*->f", "GET", "h_*->g") == [
        b"-1.5", None, None, b"1e2", None, None, b"10", b"a", None, b"10", b"a", None, b"2", b"b", None,
        b"3", b"c", b"1"]
    # "->" with no field after it is part of the key name
    c.cmd("SET", "h_3->", "key")
    assert c.cmd("SORT", "l", "BY", "h_*->g", "GET", "h_*->") == [None, None, None, None, None, b"key"]


def test_nothing_to_sort_keeps_the_value_order(c):
    c.cmd("RPUSH", "l", "c", "a", "b", "d")
    assert c.cmd("SORT", "l", "BY", "nosort") == [b"c", b"a", b"b", b"d"]
    assert c.cmd("SORT", "l", "BY", "nosort", "DESC") == [b"d", b"b", b"a", b"c"]
    assert c.cmd("SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "2") == [b"b", b"a"]
    assert c.cmd("SORT", "l", "BY", "nosort", "LIMIT", "3", "5") == [b"d"]
    # a BY without '*' anywhere turns sorting off, even before a real pattern
    assert c.cmd("SORT", "l", "BY", "nosort", "BY", "w_*") == [b"c", b"a", b"b", b"d"]
    c.cmd("ZADD", "z", "1", "c", "2", "b", "3", "a", "3", "d")
    assert c.cmd("SORT", "z", "BY", "nosort") == [b"c", b"b", b"a", b"d"]
    assert c.cmd("SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "2") == [b"a", b"b"]
    assert c.cmd("SORT", "z", "BY", "nosort", "LIMIT", "4", "2") == []
    # a set is sorted (ALPHA) when stored or in a script, so the result is deterministic
    c.cmd("SADD", "s", "b", "c", "a", "10", "2")
    assert c.cmd("SORT", "s", "BY", "nosort", "STORE", "ds") == 5
    assert c.cmd("LRANGE", "ds", "0", "-1") == [b"10", b"2", b"a", b"b", b"c"]
    assert c.cmd("SORT", "s", "BY", "nosort", "DESC", "STORE", "ds") == 5
    assert c.cmd("LRANGE", "ds", "0", "-1") == [b"c", b"b", b"a", b"2", b"10"]
    assert c.cmd("EVAL", "return redis.call('sort', KEYS[1], 'BY', 'nosort')", "1", "s") == [
        b"10", b"2", b"a", b"b", b"c"]
    assert sorted(c.cmd("SORT", "s", "BY", "nosort")) == [b"10", b"2", b"a", b"b", b"c"]


def test_equal_weights_keep_redis_order(c):
    """ALPHA BY values tie (and missing ones tie first): the whole list is sorted stably (glibc's merge
    sort), a LIMIT window by Redis's partial quicksort, whose order of ties differs."""
    c.cmd("RPUSH", "t", *["e%d" % i for i in range(1, 10)])
    c.cmd("MSET", "v_e1", "b", "v_e2", "a", "v_e3", "b", "v_e4", "a", "v_e5", "b", "v_e6", "a", "v_e8", "a")
    assert c.cmd("SORT", "t", "BY", "v_*", "ALPHA") == [
        b"e7", b"e9", b"e2", b"e4", b"e6", b"e8", b"e1", b"e3", b"e5"]
    assert c.cmd("SORT", "t", "BY", "v_*", "ALPHA", "DESC") == [
        b"e1", b"e3", b"e5", b"e2", b"e4", b"e6", b"e8", b"e7", b"e9"]
    assert c.cmd("SORT", "t", "BY", "v_*", "ALPHA", "LIMIT", "0", "4") == [b"e7", b"e9", b"e8", b"e4"]
    assert c.cmd("SORT", "t", "BY", "v_*", "ALPHA", "LIMIT", "2", "3") == [b"e8", b"e4", b"e2"]
    assert c.cmd("SORT", "t", "BY", "v_*", "ALPHA", "DESC", "LIMIT", "1", "4") == [b"e3", b"e5", b"e4", b"e6"]
    # 45 elements: the partial quicksort takes medians of three
    c.cmd("RPUSH", "big", *["m%02d" % i for i in range(45)])
    c.cmd("MSET", *sum([["k_m%02d" % i, "abc"[(i * 7) % 3]] for i in range(45)], []))
    assert c.cmd("SORT", "big", "BY", "k_*", "ALPHA", "LIMIT", "10", "8") == [
        b"m42", b"m00", b"m12", b"m39", b"m15", b"m34", b"m01", b"m04"]
    assert c.cmd("SORT", "big", "BY", "k_*", "ALPHA", "DESC", "LIMIT", "0", "6") == [
        b"m14", b"m41", b"m17", b"m29", b"m44", b"m20"]
    assert c.cmd("SORT", "big", "BY", "k_*", "ALPHA", "GET", "#", "GET", "k_*", "LIMIT", "40", "10") == [
        b"m05", b"c", b"m26", b"c", b"m20", b"c", b"m44", b"c", b"m17", b"c"]


def test_store(c):
    c.cmd("RPUSH", "l", "3", "1", "2")
    c.cmd("MSET", "w_1", "x", "w_3", "y")
    assert c.cmd("SORT", "l", "STORE", "dst") == 3
    assert c.cmd("LRANGE", "dst", "0", "-1") == [b"1", b"2", b"3"]
    # GET values that are missing are stored as empty strings; the destination's old value and TTL go
    c.cmd("SET", "dst", "old", "EX", "100")
    assert c.cmd("SORT", "l", "GET", "#", "GET", "w_*", "STORE", "dst") == 6
    assert c.cmd("LRANGE", "dst", "0", "-1") == [b"1", b"x", b"2", b"", b"3", b"y"]
    assert c.cmd("TTL", "dst") == -1
    # the last STORE wins; nothing to store deletes the destination
    assert c.cmd("SORT", "l", "STORE", "a", "STORE", "b") == 3
    assert c.cmd("EXISTS", "a", "b") == 1
    assert c.cmd("SORT", "l", "LIMIT", "0", "0", "STORE", "dst") == 0
    assert c.cmd("EXISTS", "dst") == 0
    c.cmd("SET", "dst", "x")
    assert c.cmd("SORT", "nokey", "STORE", "dst") == 0
    assert c.cmd("EXISTS", "dst") == 0
    assert c.cmd("SORT_RO", "l", "STORE", "dst") == Err("ERR syntax error")


def test_store_wakes_a_blocked_pop(c, raw):
    c.cmd("RPUSH", "l", "2", "1")
    waiter = raw()
    waiter.send(b"*3\r\n$5\r\nBLPOP\r\n$3\r\ndst\r\n$1\r\n5\r\n")
    for _ in range(200):
        if b"blocked_clients:1" in c.cmd("INFO", "clients"):
            break
        time.sleep(0.01)
    assert c.cmd("SORT", "l", "STORE", "dst") == 2
    assert waiter.read_reply() == [b"dst", b"1"]


def test_errors(c):
    c.cmd("RPUSH", "l", "1")
    assert c.cmd("SORT", "l", "LIMIT", "x", "2") == Err("ERR value is not an integer or out of range")
    assert c.cmd("SORT", "l", "LIMIT", "1") == Err("ERR syntax error")
    assert c.cmd("SORT", "l", "FOO") == Err("ERR syntax error")
    assert c.cmd("SORT", "l", "BY") == Err("ERR syntax error")
    assert c.cmd("SORT") == Err("ERR wrong number of arguments for 'sort' command")
    c.cmd("SET", "str", "x")
    assert c.cmd("SORT", "str") == Err(WRONGTYPE)
    # options are checked before the key's type
    assert c.cmd("SORT", "str", "LIMIT", "x", "y") == Err("ERR value is not an integer or out of range")
    assert c.cmd("SORT", "nokey") == []
    assert c.cmd("SORT", "nokey", "BY", "w_*", "GET", "#") == []


def test_patterns_need_access_to_every_key(raw):
    admin = raw()
    try:
        assert admin.cmd("ACL", "SETUSER", "some", "on", ">pw", "~l*", "~w_*", "+@all") == "OK"
        assert admin.cmd("ACL", "SETUSER", "every", "on", ">pw", "allkeys", "+@all") == "OK"
        admin.cmd("RPUSH", "l", "2", "1")
        admin.cmd("MSET", "w_1", "9", "w_2", "8")
        some = raw()
        assert some.cmd("AUTH", "some", "pw") == "OK"
        assert some.cmd("SORT", "l", "BY", "w_*") == Err(
            "ERR BY option of SORT denied due to insufficient ACL permissions.")
        assert some.cmd("SORT", "l", "GET", "#") == Err(
            "ERR GET option of SORT denied due to insufficient ACL permissions.")
        assert some.cmd("SORT_RO", "l", "BY", "w_*") == Err(
            "ERR BY option of SORT denied due to insufficient ACL permissions.")
        # BY without '*' reads no other key
        assert some.cmd("SORT", "l", "BY", "nosort") == [b"2", b"1"]
        assert some.cmd("SORT", "l") == [b"1", b"2"]
        assert some.cmd("SORT", "l", "STORE", "other")[:6] == "NOPERM"
        every = raw()
        assert every.cmd("AUTH", "every", "pw") == "OK"
        assert every.cmd("SORT", "l", "BY", "w_*", "GET", "w_*") == [b"8", b"9"]
    finally:
        raw().cmd("ACL", "DELUSER", "some", "every")


def test_inside_multi_and_resp3(c):
    c.cmd("RPUSH", "l", "b", "a")
    c.cmd("SET", "w_a", "2")
    c.cmd("MULTI")
    c.cmd("SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*")
    c.cmd("SORT", "l", "ALPHA", "STORE", "dst")
    assert c.cmd("EXEC") == [[b"b", None, b"a", b"2"], 2]
    c.cmd("HELLO", "3")
    assert c.cmd("SORT", "l", "GET", "w_*", "ALPHA") == [b"2", None]


@pytest.mark.fallow_only
def test_patterns_lock_every_shard(c):
    """A SORT whose patterns read keys it does not name runs like KEYS (docs/architecture.md, SORT): it is
    refused inside TXN.BEGIN, whose record locks cannot cover those keys, and by lua-strict-keys; without
    such patterns it takes the key's lock like any read."""
    c.cmd("RPUSH", "l", "2", "1")
    c.cmd("MSET", "w_1", "9", "w_2", "8")
    assert c.cmd("COMMAND", "GETKEYS", "SORT", "l", "BY", "w_*", "STORE", "dst") == [b"l", b"dst"]
    assert c.cmd("TXN.BEGIN") == "OK"
    assert c.cmd("SORT", "l", "BY", "w_*") == Err("ERR SORT is not allowed inside a transaction")
    assert c.cmd("SORT_RO", "l", "GET", "w_*") == Err("ERR SORT_RO is not allowed inside a transaction")
    assert c.cmd("SORT_RO", "l", "BY", "nosort", "GET", "#") == [b"2", b"1"]
    assert c.cmd("SORT", "l", "STORE", "dst") == "QUEUED"
    assert c.cmd("TXN.COMMIT") == [2]
    assert c.cmd("LRANGE", "dst", "0", "-1") == [b"1", b"2"]
    assert c.cmd("CONFIG", "SET", "lua-strict-keys", "yes") == "OK"
    try:
        script = "return redis.call('sort', KEYS[1], 'BY', 'w_*')"
        sha = hashlib.sha1(script.encode()).hexdigest()
        assert c.cmd("EVAL", script, "1", "l") == Err(
            f"ERR 'sort' reaches every key, which lua-strict-keys refuses in scripts script: {sha}, "
            "on @user_script:1.")
        assert c.cmd("EVAL", "return redis.call('sort', KEYS[1])", "1", "l") == [b"1", b"2"]
    finally:
        c.cmd("CONFIG", "SET", "lua-strict-keys", "no")
