"""Streams (Redis 7.0 X* commands): replies and error texts as redis-server 7.0.15 gives them.

Every test but the last (tier 2) runs against both targets: E2E_TARGET=redis checks the expectations
themselves. Ids are explicit wherever a reply would show them, so replies are exact; where Redis
reports a time (idle times, delivery and seen times) the tests check its kind, not its value.
"""
from __future__ import annotations

import re
import signal
import time

import pytest

from helpers import Err, RawConn, encode, wait_for

pytestmark = pytest.mark.resp
WRONGTYPE = Err("WRONGTYPE Operation against a key holding the wrong kind of value")
INVALID_ID = Err("ERR Invalid stream ID specified as stream command argument")


def entry(id_: str, *items: str) -> list:
    return [id_.encode(), [item.encode() for item in items]]


def fill(c, key: str, ids, *pairs: str) -> None:
    pairs = pairs or ("f", "v")
    for id_ in ids:
        assert c.cmd("XADD", key, id_, *pairs) == id_.encode()


def as_map(flat: list) -> dict:
    return dict(zip(flat[::2], flat[1::2]))


def blocked_clients(c) -> int:
    info = c.cmd("INFO", "clients").decode()
    return int(re.search(r"blocked_clients:(\d+)", info).group(1))


def wait_blocked(c, count: int = 1) -> None:
    assert wait_for(lambda: blocked_clients(c) == count, timeout=5), "the client did not block"


# --------------------------------------------------------------------------- adding and reading
def test_add_ids_and_ranges(c):
    assert c.cmd("XADD", "s", "1-1", "a", "1") == b"1-1"
    assert c.cmd("XADD", "s", "1-*", "b", "2", "c", "3") == b"1-2"
    assert c.cmd("XADD", "s", "5", "d", "4") == b"5-0"
    assert c.cmd("XADD", "s", "5-*", "e", "5") == b"5-1"
    assert c.cmd("XLEN", "s") == 4
    assert c.cmd("XRANGE", "s", "-", "+") == [
        entry("1-1", "a", "1"), entry("1-2", "b", "2", "c", "3"), entry("5-0", "d", "4"), entry("5-1", "e", "5")]
    assert c.cmd("XRANGE", "s", "1", "1") == [entry("1-1", "a", "1"), entry("1-2", "b", "2", "c", "3")]
    assert c.cmd("XRANGE", "s", "(1-1", "(5-1") == [entry("1-2", "b", "2", "c", "3"), entry("5-0", "d", "4")]
    assert c.cmd("XREVRANGE", "s", "+", "-", "COUNT", "2") == [entry("5-1", "e", "5"), entry("5-0", "d", "4")]
    assert c.cmd("XREVRANGE", "s", "(5-0", "-") == [entry("1-2", "b", "2", "c", "3"), entry("1-1", "a", "1")]
    assert [e[0] for e in c.cmd("XREVRANGE", "s", "(5", "(1-2")] == [b"5-1", b"5-0"]  # `5` is 5-max here
    assert c.cmd("XRANGE", "s", "-", "+", "COUNT", "0") is None
    assert c.cmd("XRANGE", "s", "5", "1") == []
    assert c.cmd("XRANGE", "nokey", "-", "+") == []
    # strtoull's leniency, as Redis parses ids
    assert c.cmd("XADD", "s", " 7", "f", "v") == b"7-0"
    assert c.cmd("XADD", "s", "+8-009", "f", "v") == b"8-9"


def test_add_errors(c):
    c.cmd("XADD", "s", "1-1", "a", "1")
    assert c.cmd("XADD", "s", "1-1", "a", "1") == Err(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert c.cmd("XADD", "s", "0-*", "a", "1") == Err(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")
    assert c.cmd("XADD", "new", "0-0", "a", "1") == Err("ERR The ID specified in XADD must be greater than 0-0")
    assert c.cmd("EXISTS", "new") == 0
    assert c.cmd("XADD", "new", "0-*", "a", "1") == b"0-1"
    assert c.cmd("XADD", "s", "*", "a") == Err("ERR wrong number of arguments for 'xadd' command")
    assert c.cmd("XADD", "s", "MAXLEN", "~", "5") == Err("ERR wrong number of arguments for 'xadd' command")
    for bad in ("-", "+", "-1", "1-x", "5-18446744073709551616", "x" * 200):
        assert c.cmd("XADD", "s", bad, "a", "1") == INVALID_ID, bad
    assert c.cmd("XADD", "s", "MAXLEN", "5", "LIMIT", "10", "*", "a", "1") == Err(
        "ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert c.cmd("XADD", "s", "LIMIT", "10", "*", "a", "1") == Err(
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    assert c.cmd("XADD", "s", "MAXLEN", "-1", "*", "a", "1") == Err("ERR The MAXLEN argument must be >= 0.")
    assert c.cmd("XADD", "s", "MAXLEN", "~", "x", "*", "a", "1") == Err("ERR value is not an integer or out of range")
    assert c.cmd("XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "a", "1") == Err(
        "ERR syntax error, MAXLEN and MINID options at the same time are not compatible")
    assert c.cmd("XADD", "s", "MINID", "+", "*", "a", "1") == INVALID_ID
    assert c.cmd("XADD", "nokey", "NOMKSTREAM", "*", "a", "1") is None
    assert c.cmd("EXISTS", "nokey") == 0
    c.cmd("SET", "str", "v")
    assert c.cmd("XADD", "str", "*", "a", "1") == WRONGTYPE
    assert c.cmd("XLEN", "str") == WRONGTYPE
    assert c.cmd("XRANGE", "str", "-", "+") == WRONGTYPE
    assert c.cmd("LPUSH", "s", "x") == WRONGTYPE


def test_last_possible_id(c):
    top = "18446744073709551615-18446744073709551615"
    assert c.cmd("XADD", "s", top, "a", "1") == top.encode()
    for id_ in ("*", "18446744073709551615-*"):
        assert c.cmd("XADD", "s", id_, "a", "1") == Err(
            "ERR The stream has exhausted the last possible ID, unable to add more items")
    assert c.cmd("XRANGE", "s", "(" + top, "+") == Err("ERR invalid start ID for the interval")
    assert c.cmd("XRANGE", "s", "-", "(0-0") == Err("ERR invalid end ID for the interval")


def test_range_errors(c):
    c.cmd("XADD", "s", "1-1", "a", "1")
    assert c.cmd("XRANGE", "s", "(-", "+") == INVALID_ID
    assert c.cmd("XRANGE", "s", "abc", "+") == INVALID_ID
    assert c.cmd("XRANGE", "s", "-", "+", "COUNT") == Err("ERR syntax error")
    assert c.cmd("XRANGE", "s", "-", "+", "LIMIT", "1") == Err("ERR syntax error")
    assert c.cmd("XRANGE", "s", "-", "+", "COUNT", "x") == Err("ERR value is not an integer or out of range")
    assert c.cmd("XRANGE", "s", "-", "+", "COUNT", "-1") is None
    assert c.cmd("XRANGE", "s") == Err("ERR wrong number of arguments for 'xrange' command")


def test_auto_ids_grow_with_the_clock(c):
    ids = [c.cmd("XADD", "s", "*", "f", "v") for _ in range(5)]
    parsed = [tuple(int(part) for part in id_.split(b"-")) for id_ in ids]
    assert parsed == sorted(set(parsed))
    assert abs(parsed[-1][0] - time.time() * 1000) < 60_000
    assert c.cmd("XADD", "s", f"{parsed[-1][0]}-*", "f", "v") == b"%d-%d" % (parsed[-1][0], parsed[-1][1] + 1)


def test_rq_style_capped_stream(c):
    """What rq-like job queues do: append with MAXLEN ~ and read the newest entry back."""
    last = None
    for n in range(250):
        last = c.cmd("XADD", "queue", "MAXLEN", "~", "10", "*", "field", f"value{n}")
        assert c.cmd("XREVRANGE", "queue", "+", "-", "COUNT", "1") == [[last, [b"field", f"value{n}".encode()]]]
    # Approximate trimming drops whole nodes of 100 entries: 110 entries trim to 10, twice, then 40 more.
    assert c.cmd("XLEN", "queue") == 50
    info = as_map(c.cmd("XINFO", "STREAM", "queue"))
    assert (info[b"entries-added"], info[b"radix-tree-keys"], info[b"max-deleted-entry-id"]) == (250, 1, b"0-0")


# --------------------------------------------------------------------------- deleting and trimming
def test_delete_and_trim(c):
    fill(c, "s", [f"{ms}-0" for ms in range(1, 151)])
    assert c.cmd("XDEL", "s", "1-0", "2-0", "1-0", "999-0") == 2
    assert c.cmd("XDEL", "s", "abc") == INVALID_ID
    assert c.cmd("XDEL", "nokey", "abc") == 0
    assert c.cmd("XTRIM", "s", "MAXLEN", "~", "100") == 0  # the first node still holds 98 entries
    assert c.cmd("XTRIM", "s", "MAXLEN", "~", "10") == 98
    assert c.cmd("XLEN", "s") == 50
    assert c.cmd("XTRIM", "s", "MAXLEN", "=", "45") == 5
    assert c.cmd("XTRIM", "s", "MINID", "120") == 14
    assert c.cmd("XRANGE", "s", "-", "+", "COUNT", "1") == [entry("120-0", "f", "v")]
    assert c.cmd("XTRIM", "s", "MINID", "~", "200", "LIMIT", "0") == 31
    assert c.cmd("XLEN", "s") == 0
    assert c.cmd("EXISTS", "s") == 1  # an emptied stream stays
    assert c.cmd("XTRIM", "nokey", "MAXLEN", "0") == 0
    assert c.cmd("XTRIM", "s", "LIMIT", "10") == Err(
        "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy")
    assert c.cmd("XTRIM", "s", "MAXLEN", "1", "LIMIT", "5") == Err(
        "ERR syntax error, LIMIT cannot be used without the special ~ option")
    assert c.cmd("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "-1") == Err("ERR The LIMIT argument must be >= 0.")
    assert c.cmd("XTRIM", "s", "FOO", "1") == Err("ERR syntax error")
    assert c.cmd("XTRIM", "s", "MAXLEN", "~") == Err("ERR value is not an integer or out of range")
    assert c.cmd("XTRIM", "s", "MAXLEN") == Err("ERR wrong number of arguments for 'xtrim' command")


def test_add_with_trim(c):
    fill(c, "s", [f"1-{seq}" for seq in range(1, 6)])
    assert c.cmd("XADD", "s", "MAXLEN", "3", "2-0", "f", "v") == b"2-0"
    assert [e[0] for e in c.cmd("XRANGE", "s", "-", "+")] == [b"1-4", b"1-5", b"2-0"]
    assert c.cmd("XADD", "s", "MINID", "=", "1-5", "3-0", "f", "v") == b"3-0"
    assert [e[0] for e in c.cmd("XRANGE", "s", "-", "+")] == [b"1-5", b"2-0", b"3-0"]
    assert c.cmd("XADD", "s", "NOMKSTREAM", "MAXLEN", "~", "1", "LIMIT", "1000", "4-0", "f", "v") == b"4-0"
    assert c.cmd("XLEN", "s") == 4  # one node: nothing to drop whole


def test_info_stream(c):
    fill(c, "s", [f"1-{seq}" for seq in range(1, 251)])
    assert c.cmd("XDEL", "s", "1-250") == 1
    assert c.cmd("XINFO", "STREAM", "s") == [
        b"length", 249, b"radix-tree-keys", 3, b"radix-tree-nodes", 5, b"last-generated-id", b"1-250",
        b"max-deleted-entry-id", b"1-250", b"entries-added", 250, b"recorded-first-entry-id", b"1-1",
        b"groups", 0, b"first-entry", entry("1-1", "f", "v"), b"last-entry", entry("1-249", "f", "v")]
    big = "x" * 1000
    fill(c, "b", [f"1-{seq}" for seq in range(1, 11)], "f", big)
    info = as_map(c.cmd("XINFO", "STREAM", "b"))
    assert (info[b"radix-tree-keys"], info[b"radix-tree-nodes"]) == (3, 5)  # about 4 KB per node
    assert c.cmd("TYPE", "s") == "stream"
    assert c.cmd("OBJECT", "ENCODING", "s") == b"stream"
    c.cmd("XGROUP", "CREATE", "e", "g", "$", "MKSTREAM")
    assert c.cmd("XINFO", "STREAM", "e") == [
        b"length", 0, b"radix-tree-keys", 0, b"radix-tree-nodes", 1, b"last-generated-id", b"0-0",
        b"max-deleted-entry-id", b"0-0", b"entries-added", 0, b"recorded-first-entry-id", b"0-0",
        b"groups", 1, b"first-entry", None, b"last-entry", None]


def test_setid(c):
    fill(c, "s", ["1-1", "1-2", "1-3", "1-4"])
    c.cmd("XDEL", "s", "1-4")
    assert c.cmd("XSETID", "s", "1-2") == Err("ERR The ID specified in XSETID is smaller than the target stream top item")
    assert c.cmd("XSETID", "s", "1-5", "ENTRIESADDED", "1") == Err(
        "ERR The entries_added specified in XSETID is smaller than the target stream length")
    assert c.cmd("XSETID", "s", "1-5", "ENTRIESADDED", "-1") == Err("ERR entries_added must be positive")
    assert c.cmd("XSETID", "s", "1-5", "MAXDELETEDID", "2-0") == Err(
        "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
    assert c.cmd("XSETID", "s", "1-5", "FOO") == Err("ERR syntax error")
    assert c.cmd("XSETID", "s", "$") == INVALID_ID
    assert c.cmd("XSETID", "nokey", "1-5") == Err("ERR no such key")
    assert c.cmd("XSETID", "s", "1-3") == "OK"  # the top entry, even below the deleted 1-4
    assert c.cmd("XSETID", "s", "9-9", "ENTRIESADDED", "10", "MAXDELETEDID", "5-5") == "OK"
    info = as_map(c.cmd("XINFO", "STREAM", "s"))
    assert (info[b"last-generated-id"], info[b"entries-added"], info[b"max-deleted-entry-id"]) == (
        b"9-9", 10, b"5-5")
    assert c.cmd("XADD", "s", "9-9", "f", "v") == Err(
        "ERR The ID specified in XADD is equal or smaller than the target stream top item")


# --------------------------------------------------------------------------- XREAD
def test_read(c):
    fill(c, "a", ["1-1", "1-2", "1-3"])
    fill(c, "b", ["2-1"])
    assert c.cmd("XREAD", "COUNT", "2", "STREAMS", "a", "b", "0", "0") == [
        [b"a", [entry("1-1", "f", "v"), entry("1-2", "f", "v")]], [b"b", [entry("2-1", "f", "v")]]]
    assert c.cmd("XREAD", "STREAMS", "a", "b", "nokey", "1-2", "$", "0") == [[b"a", [entry("1-3", "f", "v")]]]
    assert c.cmd("XREAD", "STREAMS", "a", "1-3") is None
    c.cmd("XDEL", "a", "1-3")
    assert c.cmd("XREAD", "STREAMS", "a", "1-2") is None  # nothing live after it
    c.cmd("HELLO", "3")
    assert c.cmd("XREAD", "STREAMS", "b", "0") == {b"b": [entry("2-1", "f", "v")]}
    assert c.cmd("XREAD", "STREAMS", "b", "2-1") is None


def test_read_errors(c):
    fill(c, "s", ["1-1"])
    c.cmd("SET", "str", "v")
    unbalanced = Err("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.")
    assert c.cmd("XREAD", "STREAMS", "s", "t", "0") == unbalanced
    assert c.cmd("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "t", "0") == unbalanced
    assert c.cmd("XREAD", "STREAMS", "s") == Err("ERR wrong number of arguments for 'xread' command")
    assert c.cmd("XREAD", "FOO", "STREAMS", "s", "0") == Err("ERR syntax error")
    assert c.cmd("XREAD", "COUNT", "x", "STREAMS", "s", "0") == Err("ERR value is not an integer or out of range")
    assert c.cmd("XREAD", "BLOCK", "-1", "STREAMS", "s", "0") == Err("ERR timeout is negative")
    assert c.cmd("XREAD", "BLOCK", "1.5", "STREAMS", "s", "0") == Err("ERR timeout is not an integer or out of range")
    assert c.cmd("XREAD", "GROUP", "g", "c", "STREAMS", "s", "0") == Err(
        "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
    assert c.cmd("XREAD", "NOACK", "STREAMS", "s", "0") == Err(
        "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
    assert c.cmd("XREAD", "STREAMS", "s", ">") == Err(
        "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")
    assert c.cmd("XREAD", "STREAMS", "s", "+") == INVALID_ID
    assert c.cmd("XREAD", "STREAMS", "s", "str", "0", "0") == WRONGTYPE
    assert c.cmd("XREAD", "COUNT", "-5", "STREAMS", "s", "0") == [[b"s", [entry("1-1", "f", "v")]]]
    assert c.cmd("XREADGROUP", "COUNT", "1", "STREAMS", "s", "t", "0", "0") == Err(
        "ERR Missing GROUP option for XREADGROUP")


# --------------------------------------------------------------------------- consumer groups
def test_group_management(c):
    assert c.cmd("XGROUP", "CREATE", "s", "g", "$") == Err(
        "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the "
        "MKSTREAM option to create an empty stream automatically.")
    assert c.cmd("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM") == "OK"
    assert c.cmd("XGROUP", "CREATE", "s", "g", "$") == Err("BUSYGROUP Consumer Group name already exists")
    assert c.cmd("XGROUP", "CREATE", "s", "g2", "+") == INVALID_ID
    assert c.cmd("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "-2") == Err(
        "ERR value for ENTRIESREAD must be positive or -1")
    assert c.cmd("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "x") == Err(
        "ERR value is not an integer or out of range")
    assert c.cmd("XGROUP", "CREATE", "s", "g2", "0", "FOO") == Err(
        "ERR unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP.")
    assert c.cmd("XGROUP", "setid", "s", "g", "0", "MKSTREAM") == Err(
        "ERR unknown subcommand or wrong number of arguments for 'setid'. Try XGROUP HELP.")
    assert c.cmd("XGROUP", "SETID", "s", "nog", "0") == Err("NOGROUP No such consumer group 'nog' for key name 's'")
    assert c.cmd("XGROUP", "SETID", "s", "g", "+", "ENTRIESREAD", "3") == "OK"
    assert c.cmd("XGROUP", "CREATECONSUMER", "s", "g", "c1") == 1
    assert c.cmd("XGROUP", "CREATECONSUMER", "s", "g", "c1") == 0
    assert c.cmd("XGROUP", "CREATECONSUMER", "s", "nog", "c1") == Err(
        "NOGROUP No such consumer group 'nog' for key name 's'")
    assert c.cmd("XGROUP", "DELCONSUMER", "s", "g", "c2") == 0
    assert c.cmd("XGROUP", "DELCONSUMER", "s", "g", "c1") == 0
    assert c.cmd("XGROUP", "DESTROY", "s", "nog") == 0
    assert c.cmd("XGROUP", "DESTROY", "s", "g") == 1
    assert c.cmd("XGROUP", "FOO", "s", "g") == Err("ERR unknown subcommand 'FOO'. Try XGROUP HELP.")
    assert c.cmd("XGROUP", "CREATE", "s", "g") == Err("ERR wrong number of arguments for 'xgroup|create' command")
    assert c.cmd("XGROUP", "DESTROY", "s", "g", "x") == Err(
        "ERR wrong number of arguments for 'xgroup|destroy' command")
    assert c.cmd("XGROUP") == Err("ERR wrong number of arguments for 'xgroup' command")
    c.cmd("SET", "str", "v")
    assert c.cmd("XGROUP", "CREATE", "str", "g", "0") == WRONGTYPE
    help_ = c.cmd("XGROUP", "HELP")
    assert help_[0] == "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert help_[1:3] == ["CREATE <key> <groupname> <id|$> [option]", "    Create a new consumer group. Options are:"]
    assert help_[-2:] == ["HELP", "    Prints this help."] and len(help_) == 17


def test_readgroup_ack_pending(c):
    fill(c, "s", ["1-1", "1-2", "1-3"])
    assert c.cmd("XGROUP", "CREATE", "s", "g", "0") == "OK"
    assert c.cmd("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">") == [
        [b"s", [entry("1-1", "f", "v"), entry("1-2", "f", "v")]]]
    assert c.cmd("XREADGROUP", "GROUP", "g", "bob", "NOACK", "STREAMS", "s", ">") == [
        [b"s", [entry("1-3", "f", "v")]]]
    assert c.cmd("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">") is None
    assert c.cmd("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0") == [[b"s", []]]
    assert c.cmd("XPENDING", "s", "g") == [2, b"1-1", b"1-2", [[b"alice", b"2"]]]
    # history: the consumer's own pending entries; a deleted one comes back without fields
    c.cmd("XDEL", "s", "1-1")
    assert c.cmd("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0") == [
        [b"s", [[b"1-1", None], entry("1-2", "f", "v")]]]
    pending = c.cmd("XPENDING", "s", "g", "-", "+", "10")
    assert [(p[0], p[1], p[3]) for p in pending] == [(b"1-1", b"alice", 1), (b"1-2", b"alice", 2)]
    assert all(isinstance(p[2], int) and p[2] >= 0 for p in pending)
    assert c.cmd("XPENDING", "s", "g", "IDLE", "3600000", "-", "+", "10") == []
    assert c.cmd("XPENDING", "s", "g", "-", "+", "10", "nobody") == []
    assert c.cmd("XPENDING", "s", "g", "(1-1", "+", "10", "alice")[0][0] == b"1-2"
    assert c.cmd("XACK", "s", "g", "1-1", "1-2", "9-9") == 2
    assert c.cmd("XACK", "s", "g", "abc") == INVALID_ID
    assert c.cmd("XACK", "s", "nog", "abc") == 0
    assert c.cmd("XPENDING", "s", "g") == [0, None, None, None]
    assert c.cmd("XPENDING", "s", "nog") == Err("NOGROUP No such key 's' or consumer group 'nog'")
    assert c.cmd("XPENDING", "s", "g", "-", "+") == Err("ERR syntax error")
    assert c.cmd("XPENDING", "s", "g", "IDLE", "5", "-", "+") == Err("ERR syntax error")
    assert c.cmd("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">") == Err(
        "NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option")
    assert c.cmd("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$") == Err(
        "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer "
        "by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty "
        "result set.")


def test_claim(c):
    fill(c, "s", ["1-1", "1-2", "1-3"])
    c.cmd("XGROUP", "CREATE", "s", "g", "0")
    c.cmd("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    c.cmd("XDEL", "s", "1-1")
    # a claim of a deleted entry drops it from the PEL; idle times not reached claim nothing
    assert c.cmd("XCLAIM", "s", "g", "bob", "3600000", "1-1", "1-2") == []
    assert c.cmd("XPENDING", "s", "g")[:3] == [2, b"1-2", b"1-3"]
    assert c.cmd("XCLAIM", "s", "g", "bob", "0", "1-2") == [entry("1-2", "f", "v")]
    assert c.cmd("XCLAIM", "s", "g", "carol", "0", "1-2", "RETRYCOUNT", "7", "JUSTID") == [b"1-2"]
    assert [p[1:4:2] for p in c.cmd("XPENDING", "s", "g", "-", "+", "10")] == [[b"carol", 7], [b"alice", 1]]
    c.cmd("XACK", "s", "g", "1-3")
    assert c.cmd("XCLAIM", "s", "g", "dave", "0", "1-3", "9-9", "FORCE", "JUSTID") == [b"1-3"]
    assert c.cmd("XCLAIM", "s", "g", "dave", "0", "LASTID", "5-5") == []
    groups = c.cmd("XINFO", "GROUPS", "s")
    assert as_map(groups[0])[b"last-delivered-id"] == b"5-5"
    assert c.cmd("XCLAIM", "s", "g", "x", "abc", "1-2") == Err("ERR Invalid min-idle-time argument for XCLAIM")
    assert c.cmd("XCLAIM", "s", "g", "x", "0", "1-2", "IDLE", "abc") == Err(
        "ERR Invalid IDLE option argument for XCLAIM")
    assert c.cmd("XCLAIM", "s", "g", "x", "0", "1-2", "foo") == Err("ERR Unrecognized XCLAIM option 'foo'")
    assert c.cmd("XCLAIM", "s", "g", "x", "0", "+") == Err("ERR Unrecognized XCLAIM option '+'")
    assert c.cmd("XCLAIM", "s", "nog", "x", "0", "1-2") == Err("NOGROUP No such key 's' or consumer group 'nog'")
    # consumers are made only when they get something
    names = [as_map(consumer)[b"name"] for consumer in c.cmd("XINFO", "CONSUMERS", "s", "g")]
    assert names == [b"alice", b"bob", b"carol", b"dave"]


def test_autoclaim(c):
    fill(c, "s", ["1-1", "1-2", "1-3", "1-4"])
    c.cmd("XGROUP", "CREATE", "s", "g", "0")
    c.cmd("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    c.cmd("XDEL", "s", "1-1", "1-3")
    # Redis 7's third element: the pending ids whose entries were deleted (they leave the PEL)
    assert c.cmd("XAUTOCLAIM", "s", "g", "bob", "0", "0", "COUNT", "1") == [b"1-2", [], [b"1-1"]]
    assert c.cmd("XAUTOCLAIM", "s", "g", "bob", "0", "0", "COUNT", "1") == [b"1-3", [entry("1-2", "f", "v")], []]
    assert c.cmd("XAUTOCLAIM", "s", "g", "bob", "0", "(1-2", "JUSTID") == [b"0-0", [b"1-4"], [b"1-3"]]
    assert c.cmd("XAUTOCLAIM", "s", "g", "carol", "3600000", "-") == [b"0-0", [], []]
    assert c.cmd("XPENDING", "s", "g") == [2, b"1-2", b"1-4", [[b"bob", b"2"]]]
    assert c.cmd("XAUTOCLAIM", "s", "g", "x", "0", "0", "COUNT", "0") == Err("ERR COUNT must be > 0")
    assert c.cmd("XAUTOCLAIM", "s", "g", "x", "0", "0", "COUNT", "abc") == Err("ERR COUNT must be > 0")
    assert c.cmd("XAUTOCLAIM", "s", "g", "x", "0", "0", "FOO") == Err("ERR syntax error")
    assert c.cmd("XAUTOCLAIM", "s", "g", "x", "abc", "0") == Err("ERR Invalid min-idle-time argument for XAUTOCLAIM")
    assert c.cmd("XAUTOCLAIM", "s", "nog", "x", "0", "0") == Err("NOGROUP No such key 's' or consumer group 'nog'")
    assert c.cmd("XAUTOCLAIM", "s", "g", "x", "0", "0", "COUNT", str(1 << 58)) == Err(
        "ERR Insufficient memory, failed allocating transient memory, COUNT too high.")


def test_entries_read_and_lag(c):
    fill(c, "t", ["1-1", "1-2", "1-3"])
    c.cmd("XGROUP", "CREATE", "t", "g", "0")
    c.cmd("XGROUP", "CREATE", "t", "g2", "1-1")
    c.cmd("XGROUP", "CREATE", "t", "g4", "9-9")
    c.cmd("XGROUP", "CREATE", "t", "big", "0", "ENTRIESREAD", "5")

    def lags():
        return {m[b"name"]: (m[b"entries-read"], m[b"lag"]) for m in map(as_map, c.cmd("XINFO", "GROUPS", "t"))}

    assert lags() == {b"g": (None, 3), b"g2": (None, 2), b"g4": (None, None), b"big": (5, -2)}
    c.cmd("XDEL", "t", "1-2")
    assert lags()[b"g"] == (None, None)  # a deleted entry ahead: unknown
    c.cmd("XREADGROUP", "GROUP", "g2", "c", "COUNT", "1", "STREAMS", "t", ">")
    assert lags()[b"g2"] == (3, 0)
    c.cmd("XDEL", "t", "1-1")
    assert lags()[b"g"] == (None, 1)
    c.cmd("XTRIM", "t", "MAXLEN", "0")
    assert lags() == {b"g": (None, 0), b"g2": (3, 0), b"g4": (None, None), b"big": (5, -2)}


def test_info_groups_consumers_full(c):
    fill(c, "s", ["1-1", "1-2"])
    c.cmd("XGROUP", "CREATE", "s", "g", "0")
    c.cmd("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", ">")
    assert c.cmd("XINFO", "GROUPS", "s") == [[
        b"name", b"g", b"consumers", 1, b"pending", 1, b"last-delivered-id", b"1-1", b"entries-read", 1, b"lag", 1]]
    consumers = c.cmd("XINFO", "CONSUMERS", "s", "g")
    assert len(consumers) == 1 and consumers[0][:4] == [b"name", b"alice", b"pending", 1]
    assert consumers[0][4] == b"idle" and isinstance(consumers[0][5], int) and consumers[0][5] >= 0
    full = c.cmd("XINFO", "STREAM", "s", "FULL")
    assert full[:14] == [
        b"length", 2, b"radix-tree-keys", 1, b"radix-tree-nodes", 2, b"last-generated-id", b"1-2",
        b"max-deleted-entry-id", b"0-0", b"entries-added", 2, b"recorded-first-entry-id", b"1-1"]
    assert full[14:16] == [b"entries", [entry("1-1", "f", "v"), entry("1-2", "f", "v")]]
    group = as_map(full[17][0])
    assert group[b"pel-count"] == 1 and group[b"entries-read"] == 1 and group[b"lag"] == 1
    [[pending_id, owner, delivered_ms, deliveries]] = group[b"pending"]
    assert (pending_id, owner, deliveries) == (b"1-1", b"alice", 1)
    assert abs(delivered_ms - time.time() * 1000) < 60_000
    consumer = as_map(group[b"consumers"][0])
    assert list(consumer) == [b"name", b"seen-time", b"pel-count", b"pending"]
    assert consumer[b"pending"][0][0] == b"1-1" and consumer[b"pending"][0][2] == 1
    assert c.cmd("XINFO", "STREAM", "s", "FULL", "COUNT", "1")[15] == [entry("1-1", "f", "v")]
    assert c.cmd("XINFO", "STREAM", "s", "FULL", "COUNT") == Err(
        "ERR unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP.")
    assert c.cmd("XINFO", "STREAM", "s", "FULL", "COUNT", "x") == Err("ERR value is not an integer or out of range")
    assert c.cmd("XINFO", "CONSUMERS", "s", "nog") == Err("NOGROUP No such consumer group 'nog' for key name 's'")
    assert c.cmd("XINFO", "GROUPS", "nokey") == Err("ERR no such key")
    assert c.cmd("XINFO", "FOO", "s") == Err("ERR unknown subcommand 'FOO'. Try XINFO HELP.")
    # the name as C's %.128s prints it: up to a NUL byte, at most 128 bytes
    assert c.cmd("XINFO", "x\x00y") == Err("ERR unknown subcommand 'x'. Try XINFO HELP.")
    assert c.cmd("XGROUP", "a" * 200) == Err(f"ERR unknown subcommand '{'a' * 128}'. Try XGROUP HELP.")
    assert c.cmd("XINFO", "CONSUMERS", "s") == Err("ERR wrong number of arguments for 'xinfo|consumers' command")
    assert c.cmd("XINFO", "HELP") == [
        "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "CONSUMERS <key> <groupname>",
        "    Show consumers of <groupname>.", "GROUPS <key>", "    Show the stream consumer groups.",
        "STREAM <key> [FULL [COUNT <count>]", "    Show information about the stream.", "HELP",
        "    Prints this help."]


def test_resp3_maps(c):
    fill(c, "s", ["1-1"])
    c.cmd("XGROUP", "CREATE", "s", "g", "0")
    c.cmd("HELLO", "3")
    info = c.cmd("XINFO", "STREAM", "s")
    assert isinstance(info, dict) and info[b"first-entry"] == entry("1-1", "f", "v")
    assert c.cmd("XINFO", "GROUPS", "s") == [{
        b"name": b"g", b"consumers": 0, b"pending": 0, b"last-delivered-id": b"0-0", b"entries-read": None,
        b"lag": 1}]
    assert c.cmd("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">") == {b"s": [entry("1-1", "f", "v")]}
    full = c.cmd("XINFO", "STREAM", "s", "FULL")
    assert isinstance(full[b"groups"][0], dict) and isinstance(full[b"groups"][0][b"consumers"][0], dict)
    assert c.cmd("XPENDING", "s", "nog") == Err("NOGROUP No such key 's' or consumer group 'nog'")


# --------------------------------------------------------------------------- blocking
def test_read_blocks_until_an_entry(c, raw):
    reader = raw()
    reader.send(encode("XREAD", "BLOCK", "0", "STREAMS", "s", "$"))
    wait_blocked(c)
    assert c.cmd("XADD", "s", "5-1", "f", "v") == b"5-1"
    assert reader.read_reply() == [[b"s", [entry("5-1", "f", "v")]]]
    # `$` meant the last id when the command blocked: an older id added later does not serve it
    reader.send(encode("XREAD", "BLOCK", "2000", "STREAMS", "s", "$"))
    wait_blocked(c)
    c.cmd("DEL", "s")
    c.cmd("XADD", "s", "1-1", "f", "v")
    time.sleep(0.2)
    assert blocked_clients(c) == 1
    c.cmd("XADD", "s", "6-1", "f", "v")
    assert reader.read_reply() == [[b"s", [entry("6-1", "f", "v")]]]


def test_every_blocked_reader_gets_the_entry(c, raw):
    readers = [raw() for _ in range(3)]
    for reader in readers:
        reader.send(encode("XREAD", "BLOCK", "5000", "STREAMS", "q", "0"))
    wait_blocked(c, 3)
    c.cmd("XADD", "q", "1-1", "f", "v")
    for reader in readers:
        assert reader.read_reply() == [[b"q", [entry("1-1", "f", "v")]]]


def test_block_timeout_and_multi(c):
    t0 = time.monotonic()
    assert c.cmd("XREAD", "BLOCK", "200", "STREAMS", "s", "$") is None
    assert 0.15 <= time.monotonic() - t0 < 3
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("XREAD", "BLOCK", "0", "STREAMS", "s", "$") == "QUEUED"
    assert c.cmd("EXEC") == [None]
    c.cmd("HELLO", "3")
    assert c.cmd("XREAD", "BLOCK", "50", "STREAMS", "s", "$") is None


def test_readgroup_blocks_and_is_served(c, raw):
    c.cmd("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    reader = raw()
    reader.send(encode("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">"))
    wait_blocked(c)
    c.cmd("XADD", "s", "3-3", "f", "v")
    assert reader.read_reply() == [[b"s", [entry("3-3", "f", "v")]]]
    assert c.cmd("XPENDING", "s", "g") == [1, b"3-3", b"3-3", [[b"alice", b"1"]]]
    # history never blocks
    assert reader.cmd("XREADGROUP", "GROUP", "g", "bob", "BLOCK", "0", "STREAMS", "s", "0") == [[b"s", []]]


def test_blocked_readgroup_learns_its_group_or_stream_went_away(c, raw):
    command = encode("XREADGROUP", "GROUP", "g", "alice", "BLOCK", "0", "STREAMS", "s", ">")
    c.cmd("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    reader = raw()
    reader.send(command)
    wait_blocked(c)
    assert c.cmd("XGROUP", "DESTROY", "s", "g") == 1
    assert reader.read_reply() == Err("NOGROUP the consumer group this client was blocked on no longer exists")
    c.cmd("XGROUP", "CREATE", "s", "g", "$")
    reader.send(command)
    wait_blocked(c)
    assert c.cmd("DEL", "s") == 1
    assert reader.read_reply() == Err("UNBLOCKED the stream key no longer exists")
    c.cmd("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    reader.send(command)
    wait_blocked(c)
    c.cmd("SET", "s", "now a string")
    assert reader.read_reply() == Err("UNBLOCKED the stream key no longer exists")


# --------------------------------------------------------------------------- fallow: memory and tier 2
@pytest.mark.fallow_only
def test_memory_is_accounted(c):
    c.cmd("XADD", "s", "1-1", "f", "v")
    small = c.cmd("MEMORY", "USAGE", "s")
    for seq in range(2, 1002):
        c.cmd("XADD", "s", f"1-{seq}", "field", "x" * 100)
    grown = c.cmd("MEMORY", "USAGE", "s")
    assert grown > small + 1000 * 100
    c.cmd("XTRIM", "s", "MAXLEN", "0")
    assert c.cmd("MEMORY", "USAGE", "s") < grown // 10


@pytest.mark.fallow_only
def test_large_replies_respect_the_output_limit(server_factory):
    srv = server_factory(client_output_buffer_limit="normal 1mb 0 0")
    with RawConn(port=srv.port) as c:
        value = "e" * 1000
        for seq in range(1, 2001):
            c.send(encode("XADD", "s", f"1-{seq}", "f", value))
        assert [c.read_reply() for _ in range(2000)][-1] == b"1-2000"
        for command in (("XRANGE", "s", "-", "+"), ("XREVRANGE", "s", "+", "-"), ("XREAD", "STREAMS", "s", "0")):
            reply = c.cmd(*command)
            assert isinstance(reply, Err) and "would exceed the client output buffer hard limit" in reply, command
        assert len(c.cmd("XRANGE", "s", "-", "+", "COUNT", "100")) == 100
        assert len(c.cmd("XREAD", "COUNT", "100", "STREAMS", "s", "0")[0][1]) == 100


@pytest.mark.fallow_only
def test_streams_survive_a_restart_on_tier2(server_factory, tmp_path):
    data = tmp_path / "data"
    flags = {"dir": str(data), "tier2_size": "64mb", "tier2_fsync": "always"}
    s = server_factory(**flags)
    with RawConn(port=s.port) as admin:
        assert admin.cmd("TENANT", "SET", "vault", "WEIGHT", 100, "KIND", "persistent") == "OK"
        assert admin.cmd("ACL", "SETUSER", "vault", "on", ">pw", "~*", "+@all") == "OK"
    with RawConn(port=s.port) as c:
        assert c.cmd("AUTH", "vault", "pw") == "OK"
        fill(c, "s", [f"1-{seq}" for seq in range(1, 151)])
        c.cmd("XDEL", "s", "1-7")
        c.cmd("XGROUP", "CREATE", "s", "g", "0")
        c.cmd("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">")
        before = [c.cmd("XINFO", "STREAM", "s"), c.cmd("XINFO", "GROUPS", "s"), c.cmd("XPENDING", "s", "g")]
    s.stop(signal.SIGKILL)  # every write was logged before it was acknowledged (tier2-fsync always)
    s.start()
    with RawConn(port=s.port) as c:
        assert c.cmd("AUTH", "vault", "pw") == "OK"
        after = [c.cmd("XINFO", "STREAM", "s"), c.cmd("XINFO", "GROUPS", "s"), c.cmd("XPENDING", "s", "g")]
        assert after == before
        assert c.cmd("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", ">") == [
            [b"s", [entry("1-4", "f", "v")]]]
