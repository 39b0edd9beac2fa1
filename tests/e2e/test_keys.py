import time

import pytest

from helpers import Err, wait_for

pytestmark = pytest.mark.resp


def test_del_unlink_exists(r):
    r.mset({"a": 1, "b": 2, "c": 3})
    assert r.exists("a", "b", "missing") == 2
    assert r.exists("a", "a") == 2
    assert r.delete("a", "missing") == 1
    assert r.unlink("b", "c", "b") == 2
    assert r.exists("a", "b", "c") == 0
    assert r.dbsize() == 0


def test_type(r):
    r.set("s", "v")
    r.rpush("l", "v")
    r.sadd("set", "v")
    r.zadd("z", {"v": 1})
    r.hset("h", "f", "v")
    assert [r.type(k) for k in ("s", "l", "set", "z", "h", "none")] == [
        "string", "list", "set", "zset", "hash", "none"]


def test_expire_ttl_persist(r, c):
    r.set("k", "v")
    assert r.ttl("k") == -1
    assert r.pttl("k") == -1
    assert r.ttl("missing") == -2
    assert r.pttl("missing") == -2
    assert r.expire("k", 100) is True
    assert 98 <= r.ttl("k") <= 100
    assert r.pexpire("k", 50000) is True
    assert 49000 <= r.pttl("k") <= 50000
    assert r.persist("k") is True
    assert r.persist("k") is False
    assert r.ttl("k") == -1
    assert r.expire("missing", 10) is False
    assert c.cmd("EXPIRE", "k", "abc") == Err("ERR value is not an integer or out of range")
    # expire with a non-positive time deletes the key
    assert r.expire("k", -1) is True
    assert r.exists("k") == 0


def test_expireat_pexpireat_expiretime(r, c):
    r.set("k", "v")
    at = int(time.time()) + 100
    assert r.expireat("k", at) is True
    assert c.cmd("EXPIRETIME", "k") == at
    assert c.cmd("PEXPIRETIME", "k") == at * 1000
    assert r.pexpireat("k", at * 1000 + 5000) is True
    assert c.cmd("EXPIRETIME", "k") == at + 5
    r.set("p", "v")
    assert c.cmd("EXPIRETIME", "p") == -1
    assert c.cmd("EXPIRETIME", "missing") == -2
    assert r.expireat("k", int(time.time()) - 10) is True
    assert r.exists("k") == 0


def test_expire_options(r, c):
    r.set("k", "v")
    assert c.cmd("EXPIRE", "k", "100", "XX") == 0  # no ttl yet
    assert c.cmd("EXPIRE", "k", "100", "GT") == 0  # no ttl counts as infinite
    assert c.cmd("EXPIRE", "k", "100", "NX") == 1
    assert c.cmd("EXPIRE", "k", "200", "NX") == 0
    assert c.cmd("EXPIRE", "k", "200", "XX") == 1
    assert c.cmd("EXPIRE", "k", "100", "GT") == 0
    assert c.cmd("EXPIRE", "k", "300", "GT") == 1
    assert c.cmd("EXPIRE", "k", "400", "LT") == 0
    assert c.cmd("EXPIRE", "k", "50", "LT") == 1
    assert 48 <= r.ttl("k") <= 50
    assert c.cmd("PEXPIRE", "k", "10000", "LT") == 1
    assert c.cmd("EXPIRE", "k", "10", "NX", "XX") == Err(
        "ERR NX and XX, GT or LT options at the same time are not compatible")
    assert c.cmd("EXPIRE", "k", "10", "GT", "LT") == Err(
        "ERR GT and LT options at the same time are not compatible")
    assert c.cmd("EXPIRE", "k", "10", "FOO") == Err("ERR Unsupported option FOO")


def test_rename_renamenx(r, c):
    r.set("a", "1", ex=100)
    assert r.rename("a", "b") is True
    assert r.get("b") == "1"
    assert r.exists("a") == 0
    assert 98 <= r.ttl("b") <= 100
    r.set("c", "3")
    assert r.renamenx("b", "c") is False
    assert r.renamenx("b", "d") is True
    assert r.get("d") == "1"
    assert c.cmd("RENAME", "nope", "x") == Err("ERR no such key")
    assert c.cmd("RENAMENX", "nope", "x") == Err("ERR no such key")
    r.rpush("l", "x")
    assert r.rename("l", "c") is True  # overwrites whatever type
    assert r.type("c") == "list"
    assert r.rename("c", "c") is True


def test_copy(r, c):
    r.set("src", "v", ex=100)
    assert r.copy("src", "dst") is True
    assert r.get("dst") == "v"
    assert 98 <= r.ttl("dst") <= 100
    r.set("other", "x")
    assert r.copy("src", "other") is False
    assert r.copy("src", "other", replace=True) is True
    assert r.get("other") == "v"
    r.sadd("s", "a", "b")
    r.copy("s", "s2")
    r.sadd("s", "c")
    assert r.smembers("s2") == {"a", "b"}  # deep copy
    assert r.copy("missing", "x") is False
    assert r.copy("src", "db3", destination_db=3) is True
    assert c.cmd("SELECT", "3") == "OK"
    assert c.cmd("GET", "db3") == b"v"


def test_keys_patterns(r):
    r.mset({"hello": 1, "hallo": 1, "hxllo": 1, "hllo": 1, "heeeello": 1, "x[y": 1})
    assert sorted(r.keys("h?llo")) == ["hallo", "hello", "hxllo"]
    assert sorted(r.keys("h*llo")) == ["hallo", "heeeello", "hello", "hllo", "hxllo"]
    assert sorted(r.keys("h[ae]llo")) == ["hallo", "hello"]
    assert sorted(r.keys("h[^e]llo")) == ["hallo", "hxllo"]
    assert sorted(r.keys("h[a-b]llo")) == ["hallo"]
    assert r.keys("x\\[y") == ["x[y"]
    assert len(r.keys("*")) == 6
    assert r.keys("nomatch*") == []


def test_scan_full_iteration(r):
    n = 1000
    with r.pipeline(transaction=False) as p:
        for i in range(n):
            p.set(f"key:{i}", i)
        for i in range(50):
            p.sadd(f"set:{i}", "m")
        p.execute()
    seen = []
    cursor = 0
    for _ in range(10000):
        cursor, keys = r.scan(cursor, count=37)
        seen.extend(keys)
        if cursor == 0:
            break
    assert cursor == 0
    assert set(seen) == {f"key:{i}" for i in range(n)} | {f"set:{i}" for i in range(50)}
    assert set(r.scan_iter(match="key:99*", count=100)) == {"key:99"} | {f"key:99{i}" for i in range(10)}
    assert set(r.scan_iter(_type="set", count=100)) == {f"set:{i}" for i in range(50)}
    assert set(r.scan_iter(match="set:1*", _type="set")) == {"set:1"} | {f"set:1{i}" for i in range(10)}


def test_scan_errors(c):
    assert c.cmd("SCAN", "abc") == Err("ERR invalid cursor")
    assert c.cmd("SCAN", "0", "COUNT", "0") == Err("ERR syntax error")
    assert c.cmd("SCAN", "0", "BOGUS", "x") == Err("ERR syntax error")


def test_randomkey_dbsize(r):
    assert r.randomkey() is None
    assert r.dbsize() == 0
    r.mset({"a": 1, "b": 2})
    assert r.randomkey() in ("a", "b")
    assert r.dbsize() == 2


def test_flushdb_flushall(r, c):
    r.set("a", 1)
    assert c.cmd("SELECT", "1") == "OK"
    assert c.cmd("SET", "b", "1") == "OK"
    assert c.cmd("FLUSHDB") == "OK"
    assert c.cmd("DBSIZE") == 0
    assert r.dbsize() == 1
    assert c.cmd("SET", "b", "1") == "OK"
    assert c.cmd("FLUSHALL", "ASYNC") == "OK"
    assert wait_for(lambda: r.dbsize() == 0 and c.cmd("DBSIZE") == 0)
    assert c.cmd("FLUSHDB", "SYNC") == "OK"
    assert c.cmd("FLUSHALL", "BOGUS") == Err("ERR syntax error")


def test_touch_object(r, c):
    r.set("a", "1")
    r.set("b", "x" * 100)
    assert r.touch("a", "b", "missing") == 2
    enc = c.cmd("OBJECT", "ENCODING", "a")
    assert isinstance(enc, bytes) and len(enc) > 0
    idle = c.cmd("OBJECT", "IDLETIME", "a")
    assert isinstance(idle, int) and 0 <= idle <= 2
    assert c.cmd("OBJECT", "ENCODING", "missing") is None
    # OBJECT FREQ needs an LFU policy
    assert c.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == "OK"
    try:
        freq = c.cmd("OBJECT", "FREQ", "a")
        assert isinstance(freq, int) and freq >= 0
    finally:
        assert c.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction") == "OK"
    err = c.cmd("OBJECT", "FREQ", "a")
    assert isinstance(err, Err) and err.startswith("ERR An LFU maxmemory policy is not selected")


def test_an_overwritten_key_keeps_its_lfu_frequency(c):
    # Redis's dbOverwrite keeps the old value's LFU counter under an LFU policy: a SET does not make
    # a hot key look new (and cold) to eviction.
    assert c.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == "OK"
    try:
        c.cmd("SET", "lfu:hot", "v1")
        c.cmd("SET", "lfu:new", "v")
        for _ in range(100):
            c.cmd("GET", "lfu:hot")
        before = c.cmd("OBJECT", "FREQ", "lfu:hot")
        assert before > c.cmd("OBJECT", "FREQ", "lfu:new")
        c.cmd("SET", "lfu:hot", "v2")
        assert c.cmd("OBJECT", "FREQ", "lfu:hot") >= before
    finally:
        assert c.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction") == "OK"
        c.cmd("DEL", "lfu:hot", "lfu:new")


def test_object_encoding_exact(r, c):
    r.set("int", "123")
    r.set("emb", "short")
    r.set("raw", "x" * 100)
    assert c.cmd("OBJECT", "ENCODING", "int") == b"int"
    assert c.cmd("OBJECT", "ENCODING", "emb") == b"embstr"
    assert c.cmd("OBJECT", "ENCODING", "raw") == b"raw"


def test_object_encoding_of_collections_follows_the_thresholds(r, c):
    """Redis 7.0's compact encodings (listpack, intset) while the contents fit the *-max-* settings."""
    r.delete("enc:h", "enc:h2", "enc:s", "enc:s2", "enc:z", "enc:z2", "enc:l")
    r.hset("enc:h", mapping={"a": "1", "b": "2"})
    r.hset("enc:h2", "f", "v" * 65)
    r.sadd("enc:s", 1, 2, 3)
    r.sadd("enc:s2", 1, "x")
    r.zadd("enc:z", {"a": 1})
    r.zadd("enc:z2", {"m" * 65: 1})
    r.rpush("enc:l", "a")
    expected = {"enc:h": b"listpack", "enc:h2": b"hashtable", "enc:s": b"intset", "enc:s2": b"hashtable",
                "enc:z": b"listpack", "enc:z2": b"skiplist", "enc:l": b"quicklist"}
    for key, encoding in expected.items():
        assert c.cmd("OBJECT", "ENCODING", key) == encoding, key
    try:
        assert c.cmd("CONFIG", "SET", "hash-max-listpack-entries", "2", "set-max-intset-entries", "3",
                     "zset-max-listpack-entries", "1") == "OK"
        r.hset("enc:h", "c", "3")  # a third field: past the limit
        r.sadd("enc:s", 4)
        r.zadd("enc:z", {"b": 2})
        assert c.cmd("OBJECT", "ENCODING", "enc:h") == b"hashtable"
        assert c.cmd("OBJECT", "ENCODING", "enc:s") == b"hashtable"
        assert c.cmd("OBJECT", "ENCODING", "enc:z") == b"skiplist"
    finally:
        assert c.cmd("CONFIG", "SET", "hash-max-listpack-entries", "128", "set-max-intset-entries", "512",
                     "zset-max-listpack-entries", "128") == "OK"
        r.delete(*expected)


def test_select_isolation(raw):
    a, b = raw(), raw()
    for db in range(16):
        assert a.cmd("SELECT", str(db)) == "OK"
        assert a.cmd("SET", "k", f"db{db}") == "OK"
    for db in range(16):
        assert b.cmd("SELECT", str(db)) == "OK"
        assert b.cmd("GET", "k") == f"db{db}".encode()
        assert b.cmd("DBSIZE") == 1
    assert a.cmd("SELECT", "16") == Err("ERR DB index is out of range")
    assert a.cmd("SELECT", "-1") == Err("ERR DB index is out of range")
    assert a.cmd("SELECT", "x") == Err("ERR value is not an integer or out of range")


def test_move_and_swapdb(raw):
    a = raw()
    a.cmd("SET", "k", "v")
    assert a.cmd("MOVE", "k", "2") == 1
    assert a.cmd("EXISTS", "k") == 0
    assert a.cmd("SWAPDB", "0", "2") == "OK"
    assert a.cmd("GET", "k") == b"v"


def test_lazy_expiry_on_access(r):
    r.set("k", "v", px=50)
    time.sleep(0.12)
    assert r.get("k") is None
    assert r.exists("k") == 0


def test_active_expiry(r):
    with r.pipeline(transaction=False) as p:
        for i in range(200):
            p.set(f"vol:{i}", "v", px=100)
        p.set("keep", "v")
        p.execute()
    assert r.dbsize() == 201
    # never touch the volatile keys: the server must reap them on its own
    assert wait_for(lambda: r.dbsize() == 1, timeout=3.0, interval=0.1), r.dbsize()
    assert r.get("keep") == "v"
