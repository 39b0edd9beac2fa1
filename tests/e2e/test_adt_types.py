"""The data types of the transaction layer's ADTs: TopN (TOPN.*), summary bags (BAG.*) and UID.NEXT."""
import random

import pytest

from helpers import Err

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
NOT_INTEGER = "ERR value is not an integer or out of range"


def arity(name):
    return Err(f"ERR wrong number of arguments for '{name}' command")


def reference_top(k, adds):
    """The k best of each member's highest score: score descending, ties to the smaller member."""
    best = {}
    for score, member in adds:
        best[member] = max(score, best.get(member, score))
    ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:k]


# --------------------------------------------------------------------------- TopN
def test_topn_reserve_add_list(c):
    assert c.cmd("TOPN.RESERVE", "t", 3) == "OK"
    assert c.cmd("EXISTS", "t") == 1, "a reserved TopN exists while empty"
    assert c.cmd("TYPE", "t") == "topn"
    assert c.cmd("TOPN.K", "t") == 3
    assert c.cmd("TOPN.COUNT", "t") == 0
    assert c.cmd("TOPN.LIST", "t") == []
    assert c.cmd("TOPN.MAX", "t") is None
    assert c.cmd("TOPN.ADD", "t", 5, "b", 5, "c", 7, "a") == 3
    assert c.cmd("TOPN.ADD", "t", 6, "d", 1, "e") == 1, "e ranks below the last kept"
    assert c.cmd("TOPN.LIST", "t") == [b"a", b"d", b"b"]
    assert c.cmd("TOPN.LIST", "t", "WITHSCORES") == [b"a", 7, b"d", 6, b"b", 5]
    assert c.cmd("TOPN.MAX", "t") == [b"a", 7]
    assert c.cmd("TOPN.COUNT", "t") == 3


def test_topn_keeps_highest_score_and_counts_members_once(c):
    assert c.cmd("TOPN.ADD", "t", 9, "m", 2, "m", 4, "n") == 2
    assert c.cmd("TOPN.LIST", "t", "withscores") == [b"m", 9, b"n", 4]
    assert c.cmd("TOPN.K", "t") == 10, "TOPN.ADD creates a TopN keeping 10"
    assert c.cmd("TOPN.ADD", "t", -9223372036854775808, "low", 9223372036854775807, "high") == 2
    assert c.cmd("TOPN.MAX", "t") == [b"high", 9223372036854775807]


def test_topn_ties_go_to_the_smaller_member(c):
    assert c.cmd("TOPN.RESERVE", "t", 2) == "OK"
    assert c.cmd("TOPN.ADD", "t", 1, "c", 1, "b", 1, "a", 1, "d") == 2
    assert c.cmd("TOPN.LIST", "t") == [b"a", b"b"]


def test_topn_matches_reference_on_random_adds(c):
    rng = random.Random(5)
    k = 7
    assert c.cmd("TOPN.RESERVE", "t", k) == "OK"
    adds = []
    for _ in range(40):
        batch = [(rng.randint(-20, 20), f"m{rng.randint(0, 30)}") for _ in range(rng.randint(1, 5))]
        adds += batch
        kept = dict(reference_top(k, adds))
        expected = len({member for _, member in batch if member in kept})
        flat = [part for score, member in batch for part in (score, member)]
        assert c.cmd("TOPN.ADD", "t", *flat) == expected
    listed = c.cmd("TOPN.LIST", "t", "WITHSCORES")
    assert [(score, member.decode()) for member, score in zip(listed[::2], listed[1::2])] == [
        (score, member) for member, score in reference_top(k, adds)
    ]


def test_topn_missing_key(c):
    assert c.cmd("TOPN.LIST", "none") == []
    assert c.cmd("TOPN.LIST", "none", "WITHSCORES") == []
    assert c.cmd("TOPN.MAX", "none") is None
    assert c.cmd("TOPN.COUNT", "none") == 0
    assert c.cmd("TOPN.K", "none") == 0
    assert c.cmd("EXISTS", "none") == 0, "reads do not create the key"


def test_topn_bad_arguments(c):
    assert c.cmd("TOPN.RESERVE", "t", 0) == Err("ERR k must be between 1 and 1000000")
    assert c.cmd("TOPN.RESERVE", "t", 1000001) == Err("ERR k must be between 1 and 1000000")
    assert c.cmd("TOPN.RESERVE", "t", -1) == Err("ERR k must be between 1 and 1000000")
    assert c.cmd("TOPN.RESERVE", "t", "ten") == Err(NOT_INTEGER)
    assert c.cmd("TOPN.RESERVE", "t", 1000000) == "OK"
    assert c.cmd("TOPN.RESERVE", "t", 5) == Err("ERR key already exists")
    assert c.cmd("SET", "s", "v") == "OK"
    assert c.cmd("TOPN.RESERVE", "s", 5) == Err("ERR key already exists")
    assert c.cmd("TOPN.ADD", "t", "1.5", "m") == Err(NOT_INTEGER)
    assert c.cmd("TOPN.ADD", "t", "9223372036854775808", "m") == Err(NOT_INTEGER)
    assert c.cmd("TOPN.ADD", "t", 1, "m", 2) == Err("ERR syntax error")
    assert c.cmd("TOPN.COUNT", "t") == 0, "a failed add changes nothing"
    assert c.cmd("TOPN.ADD", "new", "x", "m") == Err(NOT_INTEGER)
    assert c.cmd("EXISTS", "new") == 0, "a failed add creates nothing"
    assert c.cmd("TOPN.LIST", "t", "WITHSCORES", "x") == Err("ERR syntax error")
    assert c.cmd("TOPN.LIST", "t", "bogus") == Err("ERR syntax error")
    assert c.cmd("TOPN.ADD", "t", 1) == arity("topn.add")
    assert c.cmd("TOPN.RESERVE", "t") == arity("topn.reserve")
    assert c.cmd("TOPN.MAX", "t", "x") == arity("topn.max")
    assert c.cmd("TOPN.LIST") == arity("topn.list")


def test_topn_wrongtype(c):
    assert c.cmd("SET", "s", "v") == "OK"
    for command in (["TOPN.ADD", "s", 1, "m"], ["TOPN.LIST", "s"], ["TOPN.MAX", "s"],
                    ["TOPN.COUNT", "s"], ["TOPN.K", "s"]):
        assert c.cmd(*command) == Err(WRONGTYPE), command
    assert c.cmd("TOPN.ADD", "t", 1, "m") == 1
    assert c.cmd("GET", "t") == Err(WRONGTYPE)
    assert c.cmd("ZADD", "t", 1, "m") == Err(WRONGTYPE)
    assert c.cmd("BAG.ADD", "t", 1) == Err(WRONGTYPE)


def test_topn_keyspace_commands(c):
    assert c.cmd("TOPN.RESERVE", "t", 2) == "OK"
    assert c.cmd("TOPN.ADD", "t", 3, "a", 2, "b") == 2
    assert c.cmd("OBJECT", "ENCODING", "t") == b"btree"
    assert c.cmd("COPY", "t", "copy") == 1
    assert c.cmd("TOPN.ADD", "copy", 9, "z") == 1
    assert c.cmd("TOPN.LIST", "copy") == [b"z", b"a"]
    assert c.cmd("TOPN.LIST", "t") == [b"a", b"b"], "the copy is independent"
    assert c.cmd("TOPN.K", "copy") == 2
    assert c.cmd("RENAME", "t", "renamed") == "OK"
    assert c.cmd("TOPN.LIST", "renamed", "WITHSCORES") == [b"a", 3, b"b", 2]
    assert sorted(c.cmd("SCAN", 0, "TYPE", "topn", "COUNT", 100)[1]) == [b"copy", b"renamed"]
    assert c.cmd("EXPIRE", "renamed", 100) == 1
    assert 0 < c.cmd("TTL", "renamed") <= 100
    assert c.cmd("DEL", "renamed", "copy") == 2
    assert c.cmd("EXISTS", "renamed", "copy") == 0


def test_topn_memory_usage_follows_kept_members(c):
    assert c.cmd("TOPN.RESERVE", "t", 100) == "OK"
    empty = c.cmd("MEMORY", "USAGE", "t")
    assert c.cmd("TOPN.ADD", "t", *[part for i in range(50) for part in (i, f"member:{i}")]) == 50
    fifty = c.cmd("MEMORY", "USAGE", "t")
    assert fifty > empty + 50 * 32
    assert c.cmd("TOPN.ADD", "t", *[part for i in range(50, 100) for part in (i, f"member:{i}")]) == 50
    hundred = c.cmd("MEMORY", "USAGE", "t")
    assert hundred > fifty
    assert c.cmd("TOPN.ADD", "t", *[part for i in range(100, 200) for part in (i, f"member:{i}")]) == 100
    assert c.cmd("TOPN.COUNT", "t") == 100
    assert c.cmd("MEMORY", "USAGE", "t") == hundred, "evictions give back what the newcomers take"


def test_topn_resp3_pairs(r3):
    assert r3.execute_command("TOPN.ADD", "t", 2, "a", 1, "b") == 2
    assert r3.execute_command("TOPN.LIST", "t", "WITHSCORES") == [["a", 2], ["b", 1]]
    assert r3.execute_command("TOPN.LIST", "t") == ["a", "b"]
    assert r3.execute_command("TOPN.MAX", "t") == ["a", 2]
    assert r3.execute_command("TOPN.MAX", "none") is None


def test_topn_with_redis_py(r):
    assert r.execute_command("TOPN.RESERVE", "bids", 2) == "OK"
    assert r.execute_command("TOPN.ADD", "bids", 100, "alice", 120, "bob", 90, "carol") == 2
    assert r.execute_command("TOPN.LIST", "bids", "WITHSCORES") == ["bob", 120, "alice", 100]
    assert r.execute_command("TOPN.MAX", "bids") == ["bob", 120]
    assert r.type("bids") == "topn"
    with pytest.raises(Exception, match="WRONGTYPE"):
        r.get("bids")


# --------------------------------------------------------------------------- bags
def test_bag_add_and_summaries(c):
    assert c.cmd("BAG.ADD", "b", 4) == 1
    assert c.cmd("BAG.ADD", "b", -2, 10, 0) == 4
    assert c.cmd("TYPE", "b") == "bag"
    assert c.cmd("BAG.COUNT", "b") == 4
    assert c.cmd("BAG.MIN", "b") == -2
    assert c.cmd("BAG.MAX", "b") == 10
    assert c.cmd("BAG.MEAN", "b") == b"3"
    assert c.cmd("BAG.SUMMARY", "b") == [4, -2, 10, b"3"]
    assert c.cmd("BAG.ADD", "b", 1) == 5
    assert c.cmd("BAG.MEAN", "b") == b"2.6000000000000001"


def test_bag_sum_does_not_overflow(c):
    big = 9223372036854775807
    assert c.cmd("BAG.ADD", "b", big, big, big) == 3
    assert float(c.cmd("BAG.MEAN", "b")) == float(big)
    assert c.cmd("BAG.ADD", "b", -9223372036854775808) == 4
    assert c.cmd("BAG.MIN", "b") == -9223372036854775808


def test_bag_missing_key(c):
    assert c.cmd("BAG.COUNT", "none") == 0
    assert c.cmd("BAG.MIN", "none") is None
    assert c.cmd("BAG.MAX", "none") is None
    assert c.cmd("BAG.MEAN", "none") is None
    assert c.cmd("BAG.SUMMARY", "none") == [0, None, None, None]
    assert c.cmd("EXISTS", "none") == 0


def test_bag_bad_arguments_and_wrongtype(c):
    assert c.cmd("BAG.ADD", "b", 1, "x") == Err(NOT_INTEGER)
    assert c.cmd("EXISTS", "b") == 0, "nothing is added when one value is bad"
    assert c.cmd("BAG.ADD", "b", "1.0") == Err(NOT_INTEGER)
    assert c.cmd("BAG.ADD", "b") == arity("bag.add")
    assert c.cmd("BAG.MEAN", "b", "x") == arity("bag.mean")
    assert c.cmd("BAG.SUMMARY") == arity("bag.summary")
    assert c.cmd("RPUSH", "l", "x") == 1
    for command in ("BAG.COUNT", "BAG.MIN", "BAG.MAX", "BAG.MEAN", "BAG.SUMMARY"):
        assert c.cmd(command, "l") == Err(WRONGTYPE), command
    assert c.cmd("BAG.ADD", "l", 1) == Err(WRONGTYPE)
    assert c.cmd("BAG.ADD", "b", 1) == 1
    assert c.cmd("TOPN.LIST", "b") == Err(WRONGTYPE)
    assert c.cmd("INCR", "b") == Err(WRONGTYPE)


def test_bag_keyspace_commands(c):
    assert c.cmd("BAG.ADD", "b", 1, 2, 3) == 3
    assert c.cmd("OBJECT", "ENCODING", "b") == b"summary"
    usage = c.cmd("MEMORY", "USAGE", "b")
    assert c.cmd("BAG.ADD", "b", *range(100)) == 103
    assert c.cmd("MEMORY", "USAGE", "b") == usage, "a bag keeps no items"
    assert c.cmd("COPY", "b", "c") == 1
    assert c.cmd("BAG.ADD", "c", 1000) == 104
    assert c.cmd("BAG.COUNT", "b") == 103
    assert c.cmd("RENAME", "b", "r") == "OK"
    count, low, high, mean = c.cmd("BAG.SUMMARY", "r")
    assert (count, low, high, float(mean)) == (103, 0, 99, (1 + 2 + 3 + sum(range(100))) / 103)
    assert c.cmd("SCAN", 0, "TYPE", "bag", "COUNT", 100)[1] in ([b"r", b"c"], [b"c", b"r"])
    assert c.cmd("DEL", "r", "c") == 2


def test_bag_resp3_and_redis_py(r, r3):
    assert r.execute_command("BAG.ADD", "b", 1, 2) == 2
    assert r.execute_command("BAG.MEAN", "b") == "1.5"
    assert r.execute_command("BAG.SUMMARY", "b") == [2, 1, 2, "1.5"]
    assert r3.execute_command("BAG.MEAN", "b") == 1.5
    assert r3.execute_command("BAG.SUMMARY", "b") == [2, 1, 2, 1.5]
    assert r3.execute_command("BAG.MIN", "none") is None


# --------------------------------------------------------------------------- UID.NEXT
def test_uid_next(c):
    assert c.cmd("UID.NEXT", "ids") == 1
    assert c.cmd("UID.NEXT", "ids") == 2
    assert c.cmd("GET", "ids") == b"2"
    assert c.cmd("TYPE", "ids") == "string"
    assert c.cmd("SET", "ids", 100) == "OK"
    assert c.cmd("UID.NEXT", "ids") == 101


def test_uid_next_errors(c):
    assert c.cmd("SET", "max", 9223372036854775807) == "OK"
    assert c.cmd("UID.NEXT", "max") == Err("ERR increment or decrement would overflow")
    assert c.cmd("SET", "text", "abc") == "OK"
    assert c.cmd("UID.NEXT", "text") == Err(NOT_INTEGER)
    assert c.cmd("TOPN.ADD", "t", 1, "m") == 1
    assert c.cmd("UID.NEXT", "t") == Err(WRONGTYPE)
    assert c.cmd("UID.NEXT") == arity("uid.next")
    assert c.cmd("UID.NEXT", "a", "b") == arity("uid.next")


def test_uid_next_is_unique_across_clients(redis_client_factory):
    clients = [redis_client_factory() for _ in range(3)]
    ids = [client.execute_command("UID.NEXT", "ids") for _ in range(20) for client in clients]
    assert len(set(ids)) == len(ids)


# --------------------------------------------------------------------------- command table
@pytest.mark.parametrize("name,group,flags", [
    ("topn.reserve", "topn", {"write", "denyoom", "fast"}),
    ("topn.add", "topn", {"write", "denyoom", "fast"}),
    ("topn.list", "topn", {"readonly"}),
    ("topn.max", "topn", {"readonly", "fast"}),
    ("bag.add", "bag", {"write", "denyoom", "fast"}),
    ("bag.summary", "bag", {"readonly", "fast"}),
    ("uid.next", "string", {"write", "denyoom", "fast"}),
])
def test_command_info_and_docs(c, name, group, flags):
    info = c.cmd("COMMAND", "INFO", name)[0]
    assert info[0] == name.encode()
    assert set(info[2]) == flags
    assert info[3:6] == [1, 1, 1]
    docs = c.cmd("COMMAND", "DOCS", name)
    assert docs[0] == name.encode()
    fields = dict(zip(docs[1][::2], docs[1][1::2]))
    assert fields[b"group"] == group.encode()


def test_acl_categories(c):
    categories = c.cmd("ACL", "CAT")
    assert b"topn" in categories and b"bag" in categories
    assert set(c.cmd("ACL", "CAT", "topn")) >= {b"topn.add", b"topn.list", b"topn.reserve"}
    assert set(c.cmd("ACL", "CAT", "bag")) >= {b"bag.add", b"bag.mean"}
