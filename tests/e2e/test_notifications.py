"""Keyspace notifications (notify-keyspace-events): the exact (channel, message) sequence a PSUBSCRIBE client
receives for a list of commands, identical for fallow and redis-server 7.0.15 (the expectations were recorded
from redis-server with `notify-keyspace-events KEA`)."""
import time

import pytest

from helpers import HOST, Err, Push, encode, wait_for

pytestmark = pytest.mark.resp

SENTINEL = b"__keyspace@0__:~end"


def cmd_words(line):
    return line.split(" ") if isinstance(line, str) else list(line)


@pytest.fixture
def notifications(server, raw):
    """(run, collect): run(lines) sends commands on one connection; collect() returns the keyspace
    messages a PSUBSCRIBE client received since, up to a sentinel published last."""
    writer, sub = raw(), raw()
    sub.send(b"PSUBSCRIBE __key*__:*\r\n")
    assert sub.read_reply() == [b"psubscribe", b"__key*__:*", 1]

    def run(lines):
        return [writer.cmd(*cmd_words(line)) for line in lines]

    def collect():
        writer.cmd("PUBLISH", SENTINEL, "end")
        got = []
        while True:
            message = sub.read_reply(timeout=5)
            assert message[0] == b"pmessage", message
            if message[2] == SENTINEL:
                return got
            got.append((message[2], message[3]))

    yield run, collect
    writer.cmd("CONFIG", "SET", "notify-keyspace-events", "")


def expected(events, db=0):
    """Each (event, key) as Redis publishes it under K and E: the keyspace message, then the keyevent one."""
    out = []
    for event, key in events:
        out.append((f"__keyspace@{db}__:{key}".encode(), event.encode()))
        out.append((f"__keyevent@{db}__:{event}".encode(), key.encode()))
    return out


# (setup run with notifications off, commands run with KEA, the (event, key) Redis published, in order)
SCENARIOS = {
    "strings": ([], [
        "SET k v", "SET k v NX", "SET k v2 XX GET", "SETNX k x", "SETNX n x", "SETEX e 100 v",
        "PSETEX p 100000 v", "GETSET k v3", "MSET a 1 b 2", "MSETNX c 1 d 2", "MSETNX c 1 z 2",
        "APPEND k xyz", "APPEND newapp xyz", "SETRANGE k 1 Q", "INCR i", "INCRBY i 5", "DECR i",
        "DECRBY i 2", "INCRBYFLOAT f 1.5", "GETDEL k", "GETDEL missing", "GETEX a EX 100",
        "GETEX a PERSIST", "GETEX a PERSIST", "GETEX b", "SET k v KEEPTTL", "SET x 1 EX 100",
        "GETEX x PXAT 1",
    ], [
        ("set", "k"), ("set", "k"), ("set", "n"), ("set", "e"), ("expire", "e"), ("set", "p"),
        ("expire", "p"), ("set", "k"), ("set", "a"), ("set", "b"), ("set", "c"), ("set", "d"),
        ("append", "k"), ("append", "newapp"), ("setrange", "k"), ("incrby", "i"), ("incrby", "i"),
        ("incrby", "i"), ("incrby", "i"), ("incrbyfloat", "f"), ("del", "k"), ("expire", "a"),
        ("persist", "a"), ("set", "k"), ("set", "x"), ("expire", "x"), ("del", "x"),
    ]),
    "setrange_empty_and_bits": ([], [
        ["SETRANGE", "new", "0", ""], "SETBIT b 7 0", "SETBIT b 7 0", "SETBIT b 7 1", "SET s abc",
        ["SETRANGE", "s", "1", ""], "BITOP AND dst b b", "BITOP AND dst nosuch nosuch",
        "BITFIELD bf SET u8 0 1", "BITFIELD bf GET u8 0", "PFADD h a", "PFADD h a", "PFADD h b",
        "PFADD h2", "PFMERGE h3 h h2",
    ], [
        ("setbit", "b"), ("setbit", "b"), ("set", "s"), ("set", "dst"), ("del", "dst"),
        ("setbit", "bf"), ("pfadd", "h"), ("pfadd", "h"), ("pfadd", "h2"), ("pfadd", "h3"),
    ]),
    "generic": (["SET a 1", "SET b 1", "SET c 1", "RPUSH l x"], [
        "DEL a missing b", "DEL missing", "UNLINK l", "SET a 1", "EXPIRE a 100", "EXPIRE missing 100",
        "PEXPIRE a 100000", "EXPIREAT a 99999999999", "PEXPIREAT a 99999999999999", "PERSIST a",
        "PERSIST a", "EXPIRE a 100 NX", "EXPIRE a 50 GT", "EXPIRE a 50 XX", "EXPIRE a -1",
    ], [
        ("del", "a"), ("del", "b"), ("del", "l"), ("set", "a"), ("expire", "a"), ("expire", "a"),
        ("expire", "a"), ("expire", "a"), ("persist", "a"), ("expire", "a"), ("expire", "a"),
        ("del", "a"),
    ]),
    "rename_copy_move": (["SET a 1", "SET b 1", "SET c 1"], [
        "RENAME a a2", "RENAMENX b c", "RENAMENX b b2", "RENAME a2 a2", "COPY b2 c", "COPY b2 c REPLACE",
    ], [
        ("rename_from", "a"), ("rename_to", "a2"), ("rename_from", "b"), ("rename_to", "b2"),
        ("copy_to", "c"),
    ]),
    "lists": (["RPUSH l a b c d e"], [
        "LPUSH l x y", "RPUSH l z", "LPUSHX l 1", "RPUSHX l 2", "LPUSHX none 1", "LPOP l", "RPOP l 2",
        "LINSERT l BEFORE a new", "LINSERT l BEFORE nosuch new", "LSET l 0 q", "LREM l 0 a",
        "LREM l 0 nosuch", "LTRIM l 0 1", "LTRIM l 0 -1", "LMOVE l l2 LEFT RIGHT", "RPOPLPUSH l l2",
        "LPOP l", "LPOP l", "LPOP l 0", "LMPOP 1 l2 LEFT COUNT 5", "BLPOP l2 0.01",
    ], [
        ("lpush", "l"), ("rpush", "l"), ("lpush", "l"), ("rpush", "l"), ("lpop", "l"), ("rpop", "l"),
        ("linsert", "l"), ("lset", "l"), ("lrem", "l"), ("ltrim", "l"), ("ltrim", "l"),
        ("rpush", "l2"), ("lpop", "l"), ("lpush", "l2"), ("rpop", "l"), ("del", "l"), ("lpop", "l2"),
        ("del", "l2"),
    ]),
    "list_emptied": (["RPUSH l a b"], ["LTRIM l 5 10", "RPUSH l a", "LREM l 0 a"], [
        ("ltrim", "l"), ("del", "l"), ("rpush", "l"), ("lrem", "l"), ("del", "l"),
    ]),
    "hashes": (["HSET h a 1 b 2"], [
        "HSET h a 1 c 3", "HSETNX h a 1", "HSETNX h d 4", "HMSET h e 5", "HINCRBY h n 1",
        "HINCRBYFLOAT h f 1.5", "HDEL h a zz", "HDEL h zz", "HDEL h b c d e n f", "HSET h2 x 1",
        "HINCRBY h3 f 0",
    ], [
        ("hset", "h"), ("hset", "h"), ("hset", "h"), ("hincrby", "h"), ("hincrbyfloat", "h"),
        ("hdel", "h"), ("hdel", "h"), ("del", "h"), ("hset", "h2"), ("hincrby", "h3"),
    ]),
    "sets": (["SADD s a b c"], [
        "SADD s a", "SADD s d", "SREM s zz", "SREM s a", "SPOP s", "SADD s2 m", "SMOVE s2 s3 m",
        "SMOVE s s4 nosuch", "SINTERSTORE dst s s", "SUNIONSTORE dst2 s s3", "SDIFFSTORE dst3 s s",
        "SINTERSTORE dst empty1 empty2", "SINTERSTORE nothing empty1 empty2", "SPOP missing",
        "SPOP s 100",
    ], [
        ("sadd", "s"), ("srem", "s"), ("spop", "s"), ("sadd", "s2"), ("srem", "s2"), ("del", "s2"),
        ("sadd", "s3"), ("sinterstore", "dst"), ("sunionstore", "dst2"), ("del", "dst"), ("spop", "s"),
        ("del", "s"),
    ]),
    "zsets": (["ZADD z 1 a 2 b 3 c"], [
        "ZADD z 1 a", "ZADD z 5 a", "ZADD z INCR 1 a", "ZADD z INCR 0 a", "ZINCRBY z 2 b", "ZREM z zz",
        "ZREM z a", "ZADD z 10 x 11 y 12 w", "ZREMRANGEBYSCORE z 10 10", "ZREMRANGEBYRANK z 0 0",
        "ZREMRANGEBYLEX z - +", "ZADD z 1 a 2 b", "ZPOPMIN z", "ZPOPMAX z", "ZPOPMIN missing",
        "ZADD z 1 a 2 b", "ZUNIONSTORE zu 1 z", "ZINTERSTORE zi 1 z", "ZDIFFSTORE zd 1 z",
        "ZRANGESTORE zr z 0 -1", "ZRANGESTORE zr z 5 6", "ZUNIONSTORE zu 1 nosuch",
        "ZMPOP 1 z MIN COUNT 10", "GEOADD g 1 1 a", "GEOADD g 1 1 a",
        "GEOSEARCHSTORE gs g FROMLONLAT 1 1 BYRADIUS 10 km",
        "GEORADIUS g 1 1 10 km STORE gr", "GEOSEARCHSTORE gs g FROMLONLAT 50 50 BYRADIUS 1 km",
    ], [
        ("zadd", "z"), ("zincr", "z"), ("zincr", "z"), ("zrem", "z"), ("zadd", "z"),
        ("zremrangebyscore", "z"), ("zremrangebyrank", "z"), ("zremrangebylex", "z"), ("del", "z"),
        ("zadd", "z"), ("zpopmin", "z"), ("zpopmax", "z"), ("del", "z"), ("zadd", "z"),
        ("zunionstore", "zu"), ("zinterstore", "zi"), ("zdiffstore", "zd"), ("zrangestore", "zr"),
        ("del", "zr"), ("del", "zu"), ("zpopmin", "z"), ("del", "z"), ("zadd", "g"),
        ("geosearchstore", "gs"), ("georadiusstore", "gr"), ("del", "gs"),
    ]),
    "streams": ([], [
        "XADD st 1-1 a 1", "XADD st 2-1 a 2", "XADD st 3-1 a 3", "XDEL st 1-1", "XDEL st 9-9",
        "XTRIM st MAXLEN 1", "XTRIM st MAXLEN 1", "XGROUP CREATE st g 0",
        "XGROUP CREATE st2 g $ MKSTREAM", "XGROUP SETID st g 0", "XGROUP CREATECONSUMER st g c1",
        "XGROUP CREATECONSUMER st g c1", "XREADGROUP GROUP g c2 COUNT 1 STREAMS st >",
        "XCLAIM st g c3 0 3-1", "XAUTOCLAIM st g c4 0 0", "XAUTOCLAIM st g c4 0 0",
        "XGROUP DELCONSUMER st g nobody", "XGROUP DELCONSUMER st g c2", "XGROUP DESTROY st nosuch",
        "XGROUP DESTROY st g", "XSETID st 5-0", "XADD st MAXLEN 1 6-1 b 1", "XADD nostream NOMKSTREAM * a 1",
    ], [
        ("xadd", "st"), ("xadd", "st"), ("xadd", "st"), ("xdel", "st"), ("xtrim", "st"),
        ("xgroup-create", "st"), ("xgroup-create", "st2"), ("xgroup-setid", "st"),
        ("xgroup-createconsumer", "st"), ("xgroup-createconsumer", "st"),
        ("xgroup-createconsumer", "st"), ("xgroup-createconsumer", "st"),
        ("xgroup-delconsumer", "st"), ("xgroup-destroy", "st"), ("xsetid", "st"), ("xadd", "st"),
        ("xtrim", "st"),
    ]),
    "sort_store": (["RPUSH l 3 1 2"], [
        "SORT l STORE out", "SORT l LIMIT 5 5 STORE out", "SORT nosuch STORE out",
    ], [
        ("sortstore", "out"), ("del", "out"),
    ]),
    "multi_exec": (["SET a 1"], ["MULTI", "SET a 2", "INCR a", "DEL a", "EXEC"], [
        ("set", "a"), ("incrby", "a"), ("del", "a"),
    ]),
    "lua": ([], [["EVAL", "redis.call('set', KEYS[1], 'x'); redis.call('lpush', KEYS[2], 'y')", "2",
                  "a", "l"]], [
        ("set", "a"), ("lpush", "l"),
    ]),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_events_of_commands_match_redis(notifications, name):
    run, collect = notifications
    setup, commands, events = SCENARIOS[name]
    run(setup)
    run([["CONFIG", "SET", "notify-keyspace-events", "KEA"]])
    run(commands)
    assert collect() == expected(events)


def test_moves_and_copies_name_the_other_database(notifications):
    run, collect = notifications
    run(["SET k 1", "CONFIG SET notify-keyspace-events KEA", "COPY k k2 DB 3", "MOVE k 4"])
    assert collect() == [
        (b"__keyspace@3__:k2", b"copy_to"), (b"__keyevent@3__:copy_to", b"k2"),
        (b"__keyspace@0__:k", b"move_from"), (b"__keyevent@0__:move_from", b"k"),
        (b"__keyspace@4__:k", b"move_to"), (b"__keyevent@4__:move_to", b"k"),
    ]


def test_classes_filter_events_and_channels(notifications):
    run, collect = notifications
    run(["CONFIG SET notify-keyspace-events Kl", "SET s 1", "LPUSH l a", "DEL l"])
    assert collect() == [(b"__keyspace@0__:l", b"lpush")]
    run(["CONFIG SET notify-keyspace-events Eg", "SET s 1", "LPUSH l a", "DEL l", "DEL s"])
    assert collect() == [(b"__keyevent@0__:del", b"l"), (b"__keyevent@0__:del", b"s")]
    run(["CONFIG SET notify-keyspace-events A", "SET s 1"])
    assert collect() == [], "neither K nor E: nothing is published"


def test_new_keys(notifications):
    run, collect = notifications
    run(["SET old 1", "CONFIG SET notify-keyspace-events KEn", "SET k 1", "SET k 2", "RPUSH l a", "RPUSH l b",
         "RENAME l l2", "SADD s a"])
    assert collect() == expected([("new", "k"), ("new", "l"), ("new", "l2"), ("new", "s")])
    run(["CONFIG SET notify-keyspace-events KEA", "SET k3 1"])
    assert collect() == expected([("set", "k3")]), "A does not include n"
    run(["CONFIG SET notify-keyspace-events KE$n", "SET k4 1"])
    assert collect() == expected([("new", "k4"), ("set", "k4")])


def test_restore(notifications, raw):
    run, collect = notifications
    writer = raw()
    run(["RPUSH l a", "SET k v", "CONFIG SET notify-keyspace-events KEA"])
    payload = writer.cmd("DUMP", "l")
    assert writer.cmd("RESTORE", "l2", "0", payload) == "OK"
    assert writer.cmd("RESTORE", "k", "0", payload, "REPLACE") == "OK"
    assert writer.cmd("RESTORE", "k", "1", payload, "REPLACE", "ABSTTL") == "OK"
    assert collect() == expected([("restore", "l2"), ("restore", "k"), ("del", "k")])


def test_migrate_deletes_the_keys_it_moved(notifications, server_factory):
    run, collect = notifications
    target = server_factory()
    run(["SET m 1", "SET kept 1", "CONFIG SET notify-keyspace-events KEg",
         ["MIGRATE", HOST, str(target.port), "m", "0", "5000"],
         ["MIGRATE", HOST, str(target.port), "kept", "0", "5000", "COPY"]])
    assert collect() == expected([("del", "m")])


def test_key_misses(notifications):
    run, collect = notifications
    run(["SET k v", "HSET h f v", "CONFIG SET notify-keyspace-events KEm", "GET missing", "GET k", "HGET nohash f",
         "HGET h nofield", "MGET a k b", "LRANGE nolist 0 -1", "SET x 1", "INCR nocounter"])
    assert collect() == expected([("keymiss", "missing"), ("keymiss", "nohash"), ("keymiss", "a"),
                                  ("keymiss", "b"), ("keymiss", "nolist")])


def test_blocked_pop_served_by_a_push(notifications, raw):
    run, collect = notifications
    blocked = raw()
    run(["CONFIG SET notify-keyspace-events KEl"])
    blocked.send(b"BLPOP l 5\r\n")
    wait_for(lambda: b"cmd=blpop" in run(["CLIENT LIST"])[0])
    run(["LPUSH l a"])
    assert blocked.read_reply() == [b"l", b"a"]
    assert collect() == expected([("lpush", "l"), ("lpop", "l")])


@pytest.mark.parametrize("setting,shown", [
    ("KEA", "AKE"), ("", ""), ("g$lshzxetdKE", "AKE"), ("KEn", "nKE"), ("KEAmn", "AKEm"), ("Elg", "glE"),
    ("x", "x"),
])
def test_config_get_shows_redis_canonical_classes(c, setting, shown):
    try:
        assert c.cmd("CONFIG", "SET", "notify-keyspace-events", setting) == "OK"
        assert c.cmd("CONFIG", "GET", "notify-keyspace-events") == [b"notify-keyspace-events", shown.encode()]
    finally:
        c.cmd("CONFIG", "SET", "notify-keyspace-events", "")


def test_config_set_refuses_unknown_class(c):
    assert c.cmd("CONFIG", "SET", "notify-keyspace-events", "KEQ") == Err(
        "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - "
        "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.")


def test_expired_lazily_and_actively(notifications):
    run, collect = notifications
    run(["SET lazy 1 PX 100000", "SET active 1 PX 30", "CONFIG SET notify-keyspace-events Ex",
         "PEXPIRE lazy 30"])
    time.sleep(0.05)
    run(["GET lazy"])  # lazy expiry, unless the active cycle came first: one event either way
    got = []
    wait_for(lambda: got.extend(collect()) or len(got) >= 2, timeout=5)
    assert sorted(got) == [(b"__keyevent@0__:expired", b"active"), (b"__keyevent@0__:expired", b"lazy")]


def test_resp3_subscriber_gets_pushes(server, raw):
    sub, writer = raw(), raw()
    assert sub.cmd("HELLO", "3")[b"proto"] == 3
    sub.send(b"SUBSCRIBE __keyevent@0__:lpush\r\n")
    assert sub.read_reply() == Push([b"subscribe", b"__keyevent@0__:lpush", 1])
    try:
        writer.cmd("CONFIG", "SET", "notify-keyspace-events", "El")
        writer.cmd("LPUSH", "l", "a")
        assert sub.read_reply() == Push([b"message", b"__keyevent@0__:lpush", b"l"])
    finally:
        writer.cmd("CONFIG", "SET", "notify-keyspace-events", "")


def test_evicted_keys_are_published(server_factory, raw):
    # Without tier 2 (ignored by redis-server), so what leaves RAM is evicted, as in Redis.
    s = server_factory(maxmemory="10mb", maxmemory_policy="allkeys-random", tier2_size=0)
    sub, writer = raw(port=s.port, timeout=10), raw(port=s.port, timeout=10)
    sub.send(b"PSUBSCRIBE __keyevent@0__:evicted\r\n")
    assert sub.read_reply() == [b"psubscribe", b"__keyevent@0__:evicted", 1]
    assert writer.cmd("CONFIG", "SET", "notify-keyspace-events", "Ee") == "OK"
    value = b"x" * 1000
    written = [f"k{i}".encode() for i in range(30000)]
    for start in range(0, len(written), 500):
        batch = written[start:start + 500]
        writer.send(b"".join(encode("SET", key, value) for key in batch))
        assert [writer.read_reply() for _ in batch] == ["OK"] * len(batch)
    stats = writer.cmd("INFO", "stats").decode()
    evicted = int(stats.split("evicted_keys:")[1].split("\r\n")[0])
    assert evicted > 0
    keys = [sub.read_reply(timeout=10)[3] for _ in range(evicted)]
    assert set(keys) <= set(written) and len(set(keys)) == evicted
