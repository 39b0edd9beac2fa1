"""DUMP and RESTORE, and FUNCTION DUMP / RESTORE: payloads byte-identical to Redis 7.0.15's where Redis's
own are deterministic, Redis's payloads restore, and damaged ones are refused with Redis's errors. The
payloads below were recorded from redis-server 7.0.15 (E2E_TARGET=redis checks them again)."""
import pytest

from helpers import HOST, TARGET, Err, RawConn, ServerProc

pytestmark = pytest.mark.resp

# DUMP of each value on Redis 7.0.15.
RECORDED = {
    "string": (["SET", "k", "hello"], b"\x00\x05hello\n\x00cr\xdfve4 \n"),
    "integer string": (["SET", "k", "12345"], b"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\x08\xb9"),
    "small hash": (["HSET", "k", "f", "v"], b"\x10\r\r\x00\x00\x00\x02\x00\x81f\x02\x81v\x02\xff\n\x00 \xf1=D#T\x08\x9d"),
}


def recorded(c, name):
    command, payload = RECORDED[name]
    c.cmd("DEL", "k")
    c.cmd(*command)
    return payload


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_dump_is_byte_identical_to_redis(c, name):
    payload = recorded(c, name)
    assert c.cmd("DUMP", "k") == payload


def test_every_redis_type_survives_dump_and_restore(r, c):
    r.rpush("list", *[f"item{n}" for n in range(500)])
    r.sadd("ints", *range(100))
    r.sadd("words", "a", "b", "c")
    r.zadd("zset", {"a": 1.5, "b": float("-inf"), "c": 3})
    r.hset("big", mapping={f"field{n}": "x" * 100 for n in range(200)})
    r.set("long", "abc" * 1000)
    for key in ["list", "ints", "words", "zset", "big", "long"]:
        payload = c.cmd("DUMP", key)
        assert c.cmd("RESTORE", key + ":copy", "0", payload) == "OK"
        assert c.cmd("TYPE", key + ":copy") == c.cmd("TYPE", key)
    assert r.lrange("list:copy", 0, -1) == r.lrange("list", 0, -1)
    assert r.smembers("ints:copy") == r.smembers("ints")
    assert r.smembers("words:copy") == r.smembers("words")
    assert r.zrange("zset:copy", 0, -1, withscores=True) == r.zrange("zset", 0, -1, withscores=True)
    assert r.hgetall("big:copy") == r.hgetall("big")
    assert r.get("long:copy") == r.get("long")


def test_restore_checks_as_redis_checks(r, c):
    payload = recorded(c, "string")
    assert c.cmd("DUMP", "nokey") is None
    assert c.cmd("RESTORE", "k", "0", payload) == Err("BUSYKEY Target key name already exists.")
    assert c.cmd("RESTORE", "k2", "-1", payload) == Err("ERR Invalid TTL value, must be >= 0")
    assert c.cmd("RESTORE", "k2", "0", payload, "IDLETIME", "-1") == Err("ERR Invalid IDLETIME value, must be >= 0")
    assert c.cmd("RESTORE", "k2", "0", payload, "FREQ", "256") == \
        Err("ERR Invalid FREQ value, must be >= 0 and <= 255")
    assert c.cmd("RESTORE", "k2", "0", payload, "IDLETIME", "1", "FREQ", "2") == Err("ERR syntax error")
    assert c.cmd("RESTORE", "k2", "0", payload, "BOGUS") == Err("ERR syntax error")
    assert c.cmd("RESTORE", "k2", "0", b"junk") == Err("ERR DUMP payload version or checksum are wrong")
    assert c.cmd("RESTORE", "k2", "0", payload[:-1] + b"x") == Err("ERR DUMP payload version or checksum are wrong")
    assert c.cmd("RESTORE", "k", "0", payload, "REPLACE", "ABSTTL") == "OK"
    assert c.cmd("RESTORE", "gone", "1000", payload, "ABSTTL") == "OK"
    assert c.cmd("EXISTS", "gone") == 0, "an absolute TTL in the past keeps nothing"
    assert c.cmd("RESTORE", "ttl", "100000", payload) == "OK"
    assert 99000 < c.cmd("PTTL", "ttl") <= 100000
    assert c.cmd("RESTORE", "idle", "0", payload, "IDLETIME", "1000") == "OK"
    assert r.get("idle") == "hello"
    policy = c.cmd("CONFIG", "GET", "maxmemory-policy")[1]
    assert c.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lfu") == "OK"
    try:
        assert c.cmd("RESTORE", "frequent", "0", payload, "FREQ", "100") == "OK"
        assert c.cmd("OBJECT", "FREQ", "frequent") == 100
    finally:
        c.cmd("CONFIG", "SET", "maxmemory-policy", policy)


def test_function_dump_and_restore(c):
    c.cmd("FUNCTION", "FLUSH")
    one = "#!lua name=l1\nredis.register_function('f1', function() return 1 end)"
    # FUNCTION DUMP of `one` alone on Redis 7.0.15.
    payload = c.cmd("FUNCTION", "LOAD", one) and c.cmd("FUNCTION", "DUMP")
    assert payload == (b"\xf5@D" + one.encode() + b"\n\x00" + payload[-8:])
    assert c.cmd("FUNCTION", "RESTORE", payload) == Err("ERR Library l1 already exists")
    assert c.cmd("FUNCTION", "RESTORE", payload, "REPLACE") == "OK"
    assert c.cmd("FUNCTION", "RESTORE", payload, "BOGUS") == \
        Err("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
    assert c.cmd("FUNCTION", "RESTORE", b"junk") == Err("ERR DUMP payload version or checksum are wrong")
    assert c.cmd("FUNCTION", "DELETE", "l1") == "OK"
    c.cmd("FUNCTION", "LOAD", "#!lua name=l3\nredis.register_function('f1', function() return 3 end)")
    assert c.cmd("FUNCTION", "RESTORE", payload, "REPLACE") == Err("ERR Function f1 already exists")
    assert c.cmd("FUNCTION", "RESTORE", payload, "FLUSH") == "OK"
    assert c.cmd("FCALL", "f1", "0") == 1
    assert c.cmd("FUNCTION", "STATS")[3][1] == [b"libraries_count", 1, b"functions_count", 1]
    c.cmd("FUNCTION", "FLUSH")
    assert c.cmd("FUNCTION", "DUMP")[:2] == b"\n\x00", "no library: the footer alone"


@pytest.mark.fallow_only
def test_function_libraries_survive_a_restart(tmp_path):
    server = ServerProc("fallow", {"dir": str(tmp_path)}).start()
    try:
        conn = RawConn(HOST, server.port)
        conn.cmd("FUNCTION", "LOAD", "#!lua name=kept\nredis.register_function('kept_f', function() return 7 end)")
        conn.close()
        assert server.stop() == 0
        server.start()
        conn = RawConn(HOST, server.port)
        assert conn.cmd("FCALL", "kept_f", "0") == 7
        conn.close()
        server.stop()
        (tmp_path / "functions.rdb").write_bytes(b"damaged")
        server.start()
        conn = RawConn(HOST, server.port)
        assert conn.cmd("FCALL", "kept_f", "0") == Err("ERR Function not found")
        assert conn.cmd("PING") == "PONG"
        assert (tmp_path / "functions.rdb.damaged").read_bytes() == b"damaged"
    finally:
        server.cleanup()


def test_migrate_moves_keys_to_another_server(server, c):
    target = ServerProc(TARGET).start()
    try:
        other = RawConn(HOST, target.port)
        c.cmd("SET", "a", "1")
        c.cmd("HSET", "h", "f", "v")
        c.cmd("SET", "t", "x", "PX", "50000")
        assert c.cmd("MIGRATE", HOST, str(target.port), "a", "0", "1000") == "OK"
        assert c.cmd("EXISTS", "a") == 0 and other.cmd("GET", "a") == b"1"
        assert c.cmd("MIGRATE", HOST, str(target.port), "nokey", "0", "1000") == "NOKEY"
        assert c.cmd("MIGRATE", HOST, str(target.port), "", "0", "1000", "COPY", "KEYS", "h", "t") == "OK"
        assert other.cmd("HGETALL", "h") == [b"f", b"v"]
        assert 40000 < other.cmd("PTTL", "t") <= 50000
        assert c.cmd("MIGRATE", HOST, str(target.port), "", "0", "1000", "KEYS", "h") == \
            Err("ERR Target instance replied with error: BUSYKEY Target key name already exists.")
        assert c.cmd("MIGRATE", HOST, str(target.port), "x", "0", "1000", "KEYS", "h") == \
            Err("ERR When using MIGRATE KEYS option, the key argument must be set to the empty string")
        assert c.cmd("MIGRATE", HOST, str(target.port), "", "0", "1000", "BOGUS") == Err("ERR syntax error")
        assert c.cmd("MIGRATE", HOST, str(target.port), "h", "x", "1000") == \
            Err("ERR value is not an integer or out of range")
        assert c.cmd("MIGRATE", HOST, str(target.port), "", "0", "1000", "REPLACE", "KEYS", "h", "t") == "OK"
        assert c.cmd("EXISTS", "h", "t") == 0
        other.close()
    finally:
        target.cleanup()


def test_migrate_errors_are_redis_s(c):
    """Redis 7.0 reports a refused connection as a failed write (its blocking connect only waits for the
    socket to turn writable) and a name that does not resolve as a failed connection; the key stays."""
    import socket
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        closed_port = probe.getsockname()[1]
    assert c.cmd("SET", "mig:k", "v") == "OK"
    assert c.cmd("MIGRATE", HOST, str(closed_port), "mig:k", "0", "100") == \
        Err("IOERR error or timeout writing to target instance")
    assert c.cmd("MIGRATE", "nosuchhost.invalid", "6379", "mig:k", "0", "100") == \
        Err("IOERR error or timeout connecting to the client")
    assert c.cmd("MIGRATE", HOST, str(closed_port), "mig:missing", "0", "100") == "NOKEY"
    assert c.cmd("GET", "mig:k") == b"v"
    c.cmd("DEL", "mig:k")
