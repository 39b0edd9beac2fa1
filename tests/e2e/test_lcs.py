"""LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN].

Every expected reply was captured from redis-server 7.0.15 and runs against both servers (E2E_TARGET=redis).
"""
import pytest

from helpers import Err

pytestmark = pytest.mark.resp


def test_the_documented_example(c):
    c.cmd("MSET", "key1", "ohmytext", "key2", "mynewtext")
    assert c.cmd("LCS", "key1", "key2") == b"mytext"
    assert c.cmd("LCS", "key1", "key2", "LEN") == 6
    assert c.cmd("LCS", "key1", "key2", "IDX") == [
        b"matches", [[[4, 7], [5, 8]], [[2, 3], [0, 1]]], b"len", 6]
    assert c.cmd("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "4") == [b"matches", [[[4, 7], [5, 8]]], b"len", 6]
    assert c.cmd("lcs", "key1", "key2", "idx", "minmatchlen", "4", "withmatchlen") == [
        b"matches", [[[4, 7], [5, 8], 4]], b"len", 6]
    # a negative minimum is 0; MINMATCHLEN and WITHMATCHLEN without IDX change nothing
    assert c.cmd("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "-5") == c.cmd("LCS", "key1", "key2", "IDX")
    assert c.cmd("LCS", "key1", "key2", "WITHMATCHLEN", "MINMATCHLEN", "9") == b"mytext"
    assert c.cmd("LCS", "key1", "key2", "LEN", "WITHMATCHLEN") == 6


@pytest.mark.parametrize("a,b,sequence,matches,length", [
    ("cbbccaacbccaabbaa", "addbaaaabbadcdbbcd", b"baaaabba",
     [[[16, 16], [10, 10], 1], [[11, 14], [6, 9], 4], [[5, 6], [4, 5], 2], [[2, 2], [3, 3], 1]], 8),
    ("cabcbbcacb", "bcaaadacdaaabba", b"cacbba",
     [[[7, 7], [14, 14], 1], [[4, 5], [12, 13], 2], [[3, 3], [7, 7], 1], [[0, 1], [1, 2], 2]], 6),
    ("bcbbaccacbbabbaba", "baaaddbbdbbd", b"baaabbb",
     [[[15, 15], [9, 9], 1], [[12, 13], [6, 7], 2], [[11, 11], [3, 3], 1], [[7, 7], [2, 2], 1],
      [[3, 4], [0, 1], 2]], 7),
    ("babbaabcbaaabcccaaaa", "caccdaaabbaccdbdb", b"caccaaaa",
     [[[19, 19], [10, 10], 1], [[16, 18], [5, 7], 3], [[14, 15], [2, 3], 2], [[11, 11], [1, 1], 1],
      [[7, 7], [0, 0], 1]], 8),
])
def test_of_the_equally_long_subsequences_redis_picks_the_same(c, a, b, sequence, matches, length):
    c.cmd("MSET", "x", a, "y", b)
    assert c.cmd("LCS", "x", "y") == sequence
    assert c.cmd("LCS", "x", "y", "IDX", "WITHMATCHLEN") == [b"matches", matches, b"len", length]


def test_missing_keys_are_empty_strings(c):
    c.cmd("SET", "key1", "ohmytext")
    assert c.cmd("LCS", "key1", "nokey") == b""
    assert c.cmd("LCS", "nokey", "key1", "LEN") == 0
    assert c.cmd("LCS", "nokey", "nokey", "IDX") == [b"matches", [], b"len", 0]


def test_errors(c):
    c.cmd("MSET", "key1", "ohmytext", "key2", "mynewtext")
    c.cmd("RPUSH", "list", "a")
    not_strings = Err("ERR The specified keys must contain string values")
    assert c.cmd("LCS", "key1", "list") == not_strings
    # the keys' types are checked before the options
    assert c.cmd("LCS", "list", "key1", "FOO") == not_strings
    assert c.cmd("LCS", "key1", "key2", "LEN", "IDX") == Err(
        "ERR If you want both the length and indexes, please just use IDX.")
    assert c.cmd("LCS", "key1", "key2", "MINMATCHLEN") == Err("ERR syntax error")
    assert c.cmd("LCS", "key1", "key2", "MINMATCHLEN", "x") == Err("ERR value is not an integer or out of range")
    assert c.cmd("LCS", "key1", "key2", "FOO") == Err("ERR syntax error")
    assert c.cmd("LCS", "key1") == Err("ERR wrong number of arguments for 'lcs' command")


def test_the_table_is_bounded_by_proto_max_bulk_len(c):
    too_large = Err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
    # 20001 x 20001 cells of 4 bytes: 1.6 GB, past the default 512 MB
    c.cmd("MSET", "big1", "a" * 20000, "big2", "b" * 20000)
    assert c.cmd("LCS", "big1", "big2") == too_large
    assert c.cmd("LCS", "big1", "big2", "LEN") == too_large
    c.cmd("MSET", "m1", "a" * 600, "m2", "b" * 600)
    assert c.cmd("CONFIG", "SET", "proto-max-bulk-len", "1mb") == "OK"
    try:
        assert c.cmd("LCS", "m1", "m2", "LEN") == too_large
        c.cmd("MSET", "m1", "a" * 400, "m2", "ab" * 200)
        assert c.cmd("LCS", "m1", "m2", "LEN") == 200
    finally:
        c.cmd("CONFIG", "SET", "proto-max-bulk-len", "536870912")


def test_resp3_map(c):
    c.cmd("MSET", "key1", "ohmytext", "key2", "mynewtext")
    c.cmd("HELLO", "3")
    assert c.cmd("LCS", "key1", "key2", "IDX", "WITHMATCHLEN") == {
        b"matches": [[[4, 7], [5, 8], 4], [[2, 3], [0, 1], 2]], b"len": 6}
