import os
import time

import pytest

from helpers import Err, RawConn, wait_for

pytestmark = pytest.mark.resp


def test_ping_echo(c):
    assert c.cmd("PING") == "PONG"
    assert c.cmd("PING", "hi") == b"hi"
    assert c.cmd("ECHO", "hello world") == b"hello world"
    assert c.cmd("ECHO") == Err("ERR wrong number of arguments for 'echo' command")
    assert c.cmd("PING", "a", "b") == Err("ERR wrong number of arguments for 'ping' command")


def _check_hello_map(m, proto):
    for field in (b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"):
        assert field in m, field
    assert m[b"server"] == b"redis"
    assert m[b"version"].startswith(b"7.0.")
    assert m[b"proto"] == proto
    assert isinstance(m[b"id"], int) and m[b"id"] > 0
    assert m[b"mode"] == b"standalone"
    assert m[b"role"] == b"master"
    assert m[b"modules"] == []


def test_hello_2_and_3(c):
    rep = c.cmd("HELLO", "2")
    assert isinstance(rep, list)  # flat array in RESP2
    _check_hello_map(dict(zip(rep[::2], rep[1::2])), 2)
    rep = c.cmd("HELLO", "3")
    assert isinstance(rep, dict)  # map in RESP3
    _check_hello_map(rep, 3)
    rep = c.cmd("HELLO")  # no version: current protocol
    assert rep[b"proto"] == 3
    assert c.cmd("HELLO", "4") == Err("NOPROTO unsupported protocol version")
    assert c.cmd("HELLO", "x") == Err("ERR Protocol version is not an integer or out of range")


def test_hello_setname(c):
    rep = c.cmd("HELLO", "3", "SETNAME", "myconn")
    assert rep[b"proto"] == 3
    assert c.cmd("CLIENT", "GETNAME") == b"myconn"


def test_info_sections(c):
    info = c.cmd("INFO").decode()
    for section in ("# Server", "# Clients", "# Memory", "# Stats", "# Keyspace"):
        assert section in info
    assert "\r\nredis_version:7.0." in info
    mem = c.cmd("INFO", "memory").decode()
    assert mem.startswith("# Memory\r\n")
    assert "used_memory:" in mem and "# Server" not in mem
    fields = dict(l.split(":", 1) for l in mem.split("\r\n") if l and not l.startswith("#"))
    assert int(fields["used_memory"]) > 0
    c.cmd("SET", "a", "1")
    c.cmd("SET", "b", "1", "EX", "100")
    ks = c.cmd("INFO", "keyspace").decode()
    assert "db0:keys=2,expires=1,avg_ttl=" in ks
    clients = c.cmd("INFO", "clients").decode()
    assert "connected_clients:" in clients
    stats = c.cmd("INFO", "stats").decode()
    assert "total_commands_processed:" in stats
    server = c.cmd("INFO", "server").decode()
    assert "tcp_port:" in server and "process_id:" in server


def test_config_get_set(c):
    assert c.cmd("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"0"]
    assert c.cmd("CONFIG", "SET", "maxmemory", "100mb") == "OK"
    assert c.cmd("CONFIG", "GET", "maxmemory") == [b"maxmemory", b"104857600"]
    assert c.cmd("CONFIG", "SET", "maxmemory", "0") == "OK"
    assert c.cmd("CONFIG", "SET", "maxmemory-policy", "allkeys-lru") == "OK"
    assert c.cmd("CONFIG", "GET", "maxmemory-policy") == [b"maxmemory-policy", b"allkeys-lru"]
    assert c.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction") == "OK"
    assert c.cmd("CONFIG", "SET", "timeout", "300") == "OK"
    assert c.cmd("CONFIG", "GET", "timeout") == [b"timeout", b"300"]
    assert c.cmd("CONFIG", "SET", "timeout", "0") == "OK"
    assert c.cmd("CONFIG", "GET", "nonexistent-param") == []
    pol = c.cmd("CONFIG", "SET", "maxmemory-policy", "bogus")
    assert isinstance(pol, Err) and pol.startswith("ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy')")
    unk = c.cmd("CONFIG", "SET", "no-such-param", "1")
    assert unk == Err("ERR Unknown option or number of arguments for CONFIG SET - 'no-such-param'")
    got = c.cmd("CONFIG", "GET", "maxmemory*")
    assert b"maxmemory" in got and b"maxmemory-policy" in got


def test_config_resetstat(c):
    for _ in range(5):
        c.cmd("PING")
    assert c.cmd("CONFIG", "RESETSTAT") == "OK"
    stats = c.cmd("INFO", "stats").decode()
    n = int(stats.split("total_commands_processed:")[1].split("\r\n")[0])
    assert n <= 2


def test_client_id_name_list_info(raw):
    a, b = raw(), raw()
    ida = a.cmd("CLIENT", "ID")
    idb = b.cmd("CLIENT", "ID")
    assert isinstance(ida, int) and idb != ida
    assert a.cmd("CLIENT", "GETNAME") is None
    assert a.cmd("CLIENT", "SETNAME", "alpha") == "OK"
    assert a.cmd("CLIENT", "GETNAME") == b"alpha"
    assert a.cmd("CLIENT", "SETNAME", "has space") == Err(
        "ERR Client names cannot contain spaces, newlines or special characters.")
    lst = b.cmd("CLIENT", "LIST").decode()
    lines = [l for l in lst.split("\n") if l]
    assert any(f"id={ida} " in l and " name=alpha " in l for l in lines)
    assert any(f"id={idb} " in l for l in lines)
    info = a.cmd("CLIENT", "INFO").decode()
    assert info.startswith(f"id={ida} ") and " name=alpha " in info and info.endswith("\n")
    only = b.cmd("CLIENT", "LIST", "ID", str(ida)).decode()
    assert only.startswith(f"id={ida} ") and only.count("\n") == 1


def test_client_kill(raw):
    a, b = raw(), raw()
    ida = a.cmd("CLIENT", "ID")
    assert b.cmd("CLIENT", "KILL", "ID", str(ida)) == 1
    assert a.is_closed(2.0)
    assert b.cmd("CLIENT", "KILL", "ID", "999999") == 0
    assert b.cmd("CLIENT", "KILL", "1.2.3.4:5") == Err("ERR No such client")
    # old-style addr form
    c2 = raw()
    addr = [kv.split("=", 1)[1] for kv in c2.cmd("CLIENT", "INFO").decode().split() if kv.startswith("addr=")][0]
    assert b.cmd("CLIENT", "KILL", addr) == "OK"
    assert c2.is_closed(2.0)


def test_client_reply(c):
    c.send(b"CLIENT REPLY OFF\r\nSET a 1\r\nGET a\r\nCLIENT REPLY ON\r\n")
    assert c.read_reply() == "OK"  # only the REPLY ON answer comes back
    assert c.cmd("GET", "a") == b"1"
    c.send(b"CLIENT REPLY SKIP\r\nSET b 2\r\nGET b\r\n")
    assert c.read_reply() == b"2"


def test_command_count_info_docs(c):
    n = c.cmd("COMMAND", "COUNT")
    assert isinstance(n, int) and n > 50
    info = c.cmd("COMMAND", "INFO", "get", "nosuchcommand")
    assert info[1] is None
    get = info[0]
    assert get[0] == b"get" and get[1] == 2 and get[3:6] == [1, 1, 1]
    docs = c.cmd("COMMAND", "DOCS", "get")
    assert docs[0] == b"get"
    d = dict(zip(docs[1][::2], docs[1][1::2]))
    assert b"summary" in d and b"since" in d and b"group" in d and d[b"group"] == b"string"


def test_time(c):
    sec, usec = c.cmd("TIME")
    assert abs(int(sec) - time.time()) < 5
    assert 0 <= int(usec) < 1_000_000


def test_dbsize_memory_usage(c):
    assert c.cmd("DBSIZE") == 0
    c.cmd("SET", "k", "x" * 1000)
    assert c.cmd("DBSIZE") == 1
    usage = c.cmd("MEMORY", "USAGE", "k")
    assert isinstance(usage, int) and 1000 <= usage < 4096
    assert c.cmd("MEMORY", "USAGE", "missing") is None


def test_reset(c):
    c.cmd("HELLO", "3")
    c.cmd("SELECT", "5")
    c.cmd("CLIENT", "SETNAME", "x")
    c.cmd("MULTI")
    assert c.cmd("RESET") == "RESET"
    assert c.cmd("CLIENT", "GETNAME") is None
    assert c.cmd("SET", "k", "db0") == "OK"  # not QUEUED: multi was cleared
    c.send(b"HGETALL nokey\r\n")
    assert c.readline() == b"*0"  # back to RESP2
    c2 = RawConn(port=c.sock.getpeername()[1])
    assert c2.cmd("GET", "k") == b"db0"  # back to db 0
    c2.close()


def test_quit(c):
    assert c.cmd("QUIT") == "OK"
    assert c.is_closed(2.0)


def test_unknown_command(c):
    assert c.cmd("foo", "bar") == Err("ERR unknown command 'foo', with args beginning with: 'bar' ")
    assert c.cmd("foo") == Err("ERR unknown command 'foo', with args beginning with: ")
    assert c.cmd("CONFIG", "BOGUS") == Err(
        "ERR unknown subcommand 'BOGUS'. Try CONFIG HELP.")


def test_sigterm_shutdown(server_factory):
    s = server_factory()
    assert RawConn(path=s.unixsocket).cmd("PING") == "PONG"
    assert RawConn(port=s.port).cmd("SET", "k", "v") == "OK"
    rc = s.stop(timeout=10)
    assert rc == 0
    assert not os.path.exists(s.unixsocket)


def test_wait_answers_zero_replicas(c):
    assert c.cmd("WAIT", "0", "0") == 0
    assert c.cmd("WAIT", "-1", "0") == 0
    assert c.cmd("WAIT", "x", "0") == Err("ERR value is not an integer or out of range")
    assert c.cmd("WAIT", "0", "x") == Err("ERR timeout is not an integer or out of range")
    assert c.cmd("WAIT", "0", "-1") == Err("ERR timeout is negative")
    started = time.monotonic()
    assert c.cmd("WAIT", "1", "300") == 0
    assert time.monotonic() - started >= 0.29, "no replica acknowledged: the timeout passes"
    assert c.cmd("MULTI") == "OK" and c.cmd("WAIT", "1", "0") == "QUEUED"
    assert c.cmd("EXEC") == [0], "inside MULTI it answers at once"


def test_slowlog_keeps_slow_commands_as_redis_does(c):
    assert c.cmd("CONFIG", "SET", "slowlog-log-slower-than", "0") == "OK"
    try:
        assert c.cmd("SLOWLOG", "RESET") == "OK"
        c.cmd("SET", "slow", "x" * 200)
        c.cmd("RPUSH", "many", *[str(n) for n in range(40)])
        entries = c.cmd("SLOWLOG", "GET", "-1")
        by_command = {entry[3][0].lower(): entry for entry in entries}
        assert by_command[b"set"][3] == [b"SET", b"slow", b"x" * 128 + b"... (72 more bytes)"]
        assert by_command[b"rpush"][3][31] == b"... (11 more arguments)"
        assert len(by_command[b"rpush"][3]) == 32
        assert all(len(entry) == 6 and isinstance(entry[2], int) for entry in entries)
        assert c.cmd("SLOWLOG", "LEN") >= 2
        assert len(c.cmd("SLOWLOG", "GET", "1")) == 1
        assert c.cmd("SLOWLOG", "GET", "-2") == Err("ERR count should be greater than or equal to -1")
        assert c.cmd("CONFIG", "SET", "slowlog-log-slower-than", "-1") == "OK"
        assert c.cmd("SLOWLOG", "RESET") == "OK"
        c.cmd("GET", "slow")
        assert c.cmd("SLOWLOG", "LEN") == 0
    finally:
        c.cmd("CONFIG", "SET", "slowlog-log-slower-than", "10000")


def test_client_pause_holds_commands_until_it_ends(raw):
    pauser, other = raw(), raw(timeout=10)
    assert pauser.cmd("CLIENT", "PAUSE", "x") == Err("ERR timeout is not an integer or out of range")
    assert pauser.cmd("CLIENT", "PAUSE", "-1") == Err("ERR timeout is negative")
    assert pauser.cmd("CLIENT", "PAUSE", "10", "bogus") == Err("ERR CLIENT PAUSE mode must be WRITE or ALL")
    assert pauser.cmd("CLIENT", "PAUSE") == Err("ERR wrong number of arguments for 'client|pause' command")
    assert pauser.cmd("CLIENT", "PAUSE", "400", "WRITE") == "OK"
    started = time.monotonic()
    assert other.cmd("GET", "paused") is None
    assert time.monotonic() - started < 0.3, "reads go on under a WRITE pause"
    assert other.cmd("SET", "paused", "1") == "OK"
    assert time.monotonic() - started >= 0.35, "the write waited for the pause to end"
    assert pauser.cmd("CLIENT", "PAUSE", "400") == "OK"
    started = time.monotonic()
    assert other.cmd("PING") == "PONG"
    assert time.monotonic() - started >= 0.35, "every command waits under an ALL pause"
    assert pauser.cmd("CLIENT", "UNPAUSE") == "OK"


def test_replicaof_no_one_and_lolwut(c):
    assert c.cmd("REPLICAOF", "NO", "ONE") == "OK"
    assert c.cmd("SLAVEOF", "no", "one") == "OK"
    assert c.cmd("REPLICAOF", "no") == Err("ERR wrong number of arguments for 'replicaof' command")
    assert c.cmd("LOLWUT") == b"Redis ver. 7.0.15\n"
    assert c.cmd("LOLWUT", "VERSION", "x") == Err("ERR value is not an integer or out of range")


@pytest.mark.fallow_only
def test_replicaof_a_primary_is_refused(c):
    assert c.cmd("REPLICAOF", "localhost", "6399") == \
        Err("ERR fallow has no replication: only REPLICAOF NO ONE is accepted")


def test_cluster_commands_answer_as_a_standalone_redis(c):
    """Clients probe CLUSTER INFO, READONLY... to learn the mode: Redis 7.0 without cluster-enabled answers."""
    disabled = Err("ERR This instance has cluster support disabled")
    for call in (("CLUSTER", "INFO"), ("CLUSTER", "HELP"), ("CLUSTER", "KEYSLOT", "a"), ("CLUSTER", "SLOTS"),
                 ("CLUSTER", "SETSLOT", "1", "NODE", "x"), ("READONLY",), ("READWRITE",), ("ASKING",)):
        assert c.cmd(*call) == disabled, call
    assert c.cmd("CLUSTER", "INFO", "x") == Err("ERR wrong number of arguments for 'cluster|info' command")
    assert c.cmd("CLUSTER", "KEYSLOT") == Err("ERR wrong number of arguments for 'cluster|keyslot' command")
    assert c.cmd("CLUSTER") == Err("ERR wrong number of arguments for 'cluster' command")
    assert c.cmd("CLUSTER", "NOSUCH") == Err("ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.")
    assert c.cmd("READONLY", "x") == Err("ERR wrong number of arguments for 'readonly' command")
