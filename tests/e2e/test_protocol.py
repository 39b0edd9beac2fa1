import os
import random
import subprocess

import pytest

from helpers import Err, RawConn, encode, wait_for

pytestmark = pytest.mark.resp


def test_pipeline_1000_in_one_write(c):
    payload = b"".join(encode("SET", f"k{i}", f"v{i}") for i in range(500))
    payload += b"".join(encode("GET", f"k{i}") for i in range(500))
    c.send(payload)
    replies = [c.read_reply(timeout=10) for _ in range(1000)]
    assert replies[:500] == ["OK"] * 500
    assert replies[500:] == [f"v{i}".encode() for i in range(500)]


def test_inline_commands(c):
    c.send(b"PING\r\n")
    assert c.read_reply() == "PONG"
    c.send(b"SET a b\r\n")
    assert c.read_reply() == "OK"
    c.send(b"GET a\n")  # bare LF is accepted for inline
    assert c.read_reply() == b"b"
    c.send(b'SET "quoted key" "hello world\\n"\r\n')
    assert c.read_reply() == "OK"
    assert c.cmd("GET", "quoted key") == b"hello world\n"
    c.send(b"SET sq 'it''s'\r\n")  # adjacent quotes are not allowed
    assert c.read_reply() == Err("ERR Protocol error: unbalanced quotes in request")
    assert c.is_closed(2.0)


def test_inline_unbalanced_quotes(c):
    c.send(b'SET "a b\r\n')
    assert c.read_reply() == Err("ERR Protocol error: unbalanced quotes in request")
    assert c.is_closed(2.0)


def test_empty_inline_lines_ignored(c):
    c.send(b"\r\n\r\nPING\r\n")
    assert c.read_reply() == "PONG"


def test_resp3_types(c):
    assert c.cmd("HELLO", "3")[b"proto"] == 3
    c.cmd("HSET", "h", "f", "v")
    c.send(encode("HGETALL", "h"))
    assert c.readline() == b"%1"
    assert c.read_reply() == b"f" and c.read_reply() == b"v"
    c.cmd("SADD", "s", "m")
    c.send(encode("SMEMBERS", "s"))
    assert c.readline() == b"~1"
    assert c.read_reply() == b"m"
    c.cmd("ZADD", "z", "1.5", "a")
    c.send(encode("ZSCORE", "z", "a"))
    assert c.readline() == b",1.5"
    c.send(encode("GET", "missing"))
    assert c.readline() == b"_"
    c.send(encode("HGET", "h", "nofield"))
    assert c.readline() == b"_"
    c.send(encode("ZRANGE", "z", "0", "-1", "WITHSCORES"))
    assert c.readline() == b"*1"
    assert c.read_reply() == [b"a", ("double", "1.5")]
    assert c.cmd("HGETALL", "missing") == {}
    assert c.cmd("EXISTS", "h") == 1


def test_resp3_via_redis_py(r3):
    r3.hset("h", mapping={"a": "1"})
    assert r3.hgetall("h") == {"a": "1"}
    r3.sadd("s", "x", "y")
    assert r3.smembers("s") == {"x", "y"}
    r3.zadd("z", {"m": 2.5})
    assert r3.zscore("z", "m") == 2.5
    assert r3.get("missing") is None


def test_truncated_frame_then_close(server, raw):
    other = raw()
    assert other.cmd("SET", "keep", "1") == "OK"
    bad = raw()
    bad.send(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$5\r\nab")
    bad.close()
    assert other.cmd("GET", "keep") == b"1"
    assert other.cmd("EXISTS", "x") == 0
    assert raw().cmd("PING") == "PONG"


@pytest.mark.parametrize("frame", [b"*-5\r\n", b"*abc\r\n", b"*3000000000\r\n"])
def test_invalid_multibulk_length(c, frame):
    c.send(frame)
    if frame == b"*-5\r\n":
        # a negative count is treated like an empty/null multibulk and ignored
        assert c.cmd("PING") == "PONG"
        return
    assert c.read_reply() == Err("ERR Protocol error: invalid multibulk length")
    assert c.is_closed(2.0)


def test_invalid_bulk_length(c):
    c.send(b"*1\r\n$600000000\r\n")
    assert c.read_reply() == Err("ERR Protocol error: invalid bulk length")
    assert c.is_closed(2.0)


def test_bulk_length_not_a_number(c):
    c.send(b"*1\r\n$abc\r\n")
    assert c.read_reply() == Err("ERR Protocol error: invalid bulk length")
    assert c.is_closed(2.0)


def test_expected_dollar(c):
    c.send(b"*1\r\n+PING\r\n")
    assert c.read_reply() == Err("ERR Protocol error: expected '$', got '+'")
    assert c.is_closed(2.0)


def test_unknown_and_arity(c):
    assert c.cmd("NOPE") == Err("ERR unknown command 'NOPE', with args beginning with: ")
    assert c.cmd("nope", "a", "b") == Err("ERR unknown command 'nope', with args beginning with: 'a' 'b' ")
    assert c.cmd("GET") == Err("ERR wrong number of arguments for 'get' command")
    assert c.cmd("HSET", "h", "f") == Err("ERR wrong number of arguments for 'hset' command")
    assert c.cmd("PING") == "PONG"  # connection stays usable


def test_abrupt_disconnect_mid_pipeline(raw):
    a = raw()
    complete = b"".join(encode("SET", f"p{i}", "v") for i in range(100))
    a.send(complete + encode("SET", "partial", "v")[:-7])
    # make sure the server has processed the complete part before closing
    b = raw()
    assert wait_for(lambda: b.cmd("EXISTS", "p99") == 1, timeout=3)
    a.close()
    assert b.cmd("EXISTS", *[f"p{i}" for i in range(100)]) == 100
    assert b.cmd("EXISTS", "partial") == 0
    assert raw().cmd("PING") == "PONG"


def test_random_garbage_never_crashes(server, raw):
    rng = random.Random(1234)
    for i in range(60):
        g = raw(timeout=2)
        kind = i % 3
        if kind == 0:
            data = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2048)))
        elif kind == 1:
            data = b"*" + bytes(rng.choice(b"0123456789-$*\r\n") for _ in range(rng.randint(1, 64)))
        else:
            data = encode("SET", "g", "v")[: rng.randint(1, 20)] + os.urandom(rng.randint(0, 64))
        try:
            g.send(data)
        except OSError:
            pass
        g.close()
    assert server.alive()
    assert raw().cmd("PING") == "PONG"


# ------------------------------------------------------------------- redis-cli
def _cli(server, *args, stdin=None):
    p = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(server.port), *args],
                       input=stdin, capture_output=True, timeout=20)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_redis_cli_basic(server):
    assert _cli(server, "set", "k", "v") == (0, "OK\n", "")
    assert _cli(server, "--no-raw", "get", "k") == (0, '"v"\n', "")
    assert _cli(server, "--no-raw", "get", "missing") == (0, "(nil)\n", "")
    assert _cli(server, "--raw", "get", "k") == (0, "v\n", "")
    assert _cli(server, "--no-raw", "incr", "n") == (0, "(integer) 1\n", "")
    rc, out, _ = _cli(server, "--no-raw", "rpush", "l", "a", "b")
    assert out == "(integer) 2\n"
    assert _cli(server, "--no-raw", "lrange", "l", "0", "-1") == (0, '1) "a"\n2) "b"\n', "")
    rc, out, _ = _cli(server, "--no-raw", "lpush", "k", "x")
    assert out == "(error) WRONGTYPE Operation against a key holding the wrong kind of value\n"


def test_redis_cli_stdin(server):
    rc, out, err = _cli(server, stdin=b"set a 1\nincr a\nget a\n")
    assert rc == 0 and out == "OK\n2\n2\n"


def test_redis_cli_pipe_mode(server):
    data = b"".join(encode("SET", f"pipe{i}", str(i)) for i in range(1000))
    rc, out, err = _cli(server, "--pipe", stdin=data)
    assert rc == 0, err
    assert "errors: 0, replies: 1000" in out
    assert _cli(server, "dbsize") == (0, "1000\n", "")


def test_redis_cli_unix_socket(server):
    p = subprocess.run(["redis-cli", "-s", server.unixsocket, "ping"], capture_output=True, timeout=20)
    assert (p.returncode, p.stdout) == (0, b"PONG\n")
    with RawConn(path=server.unixsocket) as u:
        assert u.cmd("SET", "viaunix", "1") == "OK"
    assert _cli(server, "get", "viaunix") == (0, "1\n", "")
