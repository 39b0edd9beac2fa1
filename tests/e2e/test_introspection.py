"""Introspection against fallow and Redis 7.0.15 alike: MEMORY, LATENCY (monitor and histograms), MONITOR,
DEBUG's subcommands that client test suites use, CLIENT KILL / LIST / NO-TOUCH, LOLWUT."""
import re
import time

import pytest

from helpers import Err, Push, RawConn, wait_for

pytestmark = pytest.mark.resp

SYNTAX = Err("ERR syntax error")
NOT_INTEGER = Err("ERR value is not an integer or out of range")


# --------------------------------------------------------------------------- MEMORY
def test_memory_usage_samples_options(c):
    assert c.cmd("SET", "k", "v") == "OK"
    assert isinstance(c.cmd("MEMORY", "USAGE", "k"), int)
    assert isinstance(c.cmd("MEMORY", "USAGE", "k", "SAMPLES", "5"), int)
    assert isinstance(c.cmd("MEMORY", "USAGE", "k", "SAMPLES", "0"), int)
    assert isinstance(c.cmd("MEMORY", "USAGE", "k", "samples", "1", "SAMPLES", "2"), int)
    assert c.cmd("MEMORY", "USAGE", "k", "SAMPLES", "-1") == SYNTAX
    assert c.cmd("MEMORY", "USAGE", "k", "SAMPLES", "x") == NOT_INTEGER
    assert c.cmd("MEMORY", "USAGE", "k", "FOO", "5") == SYNTAX
    assert c.cmd("MEMORY", "USAGE", "k", "SAMPLES") == SYNTAX
    assert c.cmd("MEMORY", "USAGE", "missing") is None
    assert c.cmd("MEMORY", "USAGE") == Err("ERR wrong number of arguments for 'memory|usage' command")


MEMORY_STATS_HEAD = ["peak.allocated", "total.allocated", "startup.allocated", "replication.backlog",
                     "clients.slaves", "clients.normal", "cluster.links", "aof.buffer", "lua.caches",
                     "functions.caches"]
MEMORY_STATS_TAIL = ["overhead.total", "keys.count", "keys.bytes-per-key", "dataset.bytes",
                     "dataset.percentage", "peak.percentage", "allocator.allocated", "allocator.active",
                     "allocator.resident", "allocator-fragmentation.ratio", "allocator-fragmentation.bytes",
                     "allocator-rss.ratio", "allocator-rss.bytes", "rss-overhead.ratio", "rss-overhead.bytes",
                     "fragmentation", "fragmentation.bytes"]


def test_memory_stats_fields_in_redis_order(c):
    assert c.cmd("SELECT", "3") == "OK"
    assert c.cmd("SET", "a", "b") == "OK"
    assert c.cmd("SELECT", "0") == "OK"
    flat = c.cmd("MEMORY", "STATS")
    names = [flat[i].decode() for i in range(0, len(flat), 2)]
    assert names == MEMORY_STATS_HEAD + ["db.3"] + MEMORY_STATS_TAIL
    stats = dict(zip(names, flat[1::2]))
    db3 = stats["db.3"]
    assert [db3[i] for i in range(0, len(db3), 2)] == [
        b"overhead.hashtable.main", b"overhead.hashtable.expires", b"overhead.hashtable.slot-to-keys"]
    assert stats["keys.count"] == 1
    assert stats["total.allocated"] > 0 and stats["peak.allocated"] >= stats["total.allocated"]
    assert float(stats["peak.percentage"]) <= 100.0
    # RESP3: a map whose ratios are doubles.
    c.cmd("HELLO", "3")
    stats3 = c.cmd("MEMORY", "STATS")
    assert list(stats3)[:10] == [name.encode() for name in MEMORY_STATS_HEAD]
    assert isinstance(stats3[b"fragmentation"], tuple) and stats3[b"fragmentation"][0] == "double"


def test_memory_doctor_purge_help(c):
    doctor = c.cmd("MEMORY", "DOCTOR").decode()
    assert doctor.startswith("Hi Sam, this instance is empty or is using very little memory")
    assert doctor.endswith("\n")
    assert c.cmd("MEMORY", "PURGE") == "OK"
    assert c.cmd("MEMORY", "HELP") == [
        "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR", "    Return memory problems reports.",
        "MALLOC-STATS", "    Return internal statistics report from the memory allocator.",
        "PURGE", "    Attempt to purge dirty pages for reclamation by the allocator.",
        "STATS", "    Return information about the memory usage of the server.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return memory in bytes used by <key> and its value. Nested values are",
        "    sampled up to <count> times (default: 5, 0 means sample all).",
        "HELP", "    Prints this help."]
    assert c.cmd("MEMORY", "FOO") == Err("ERR unknown subcommand 'FOO'. Try MEMORY HELP.")


# --------------------------------------------------------------------------- LATENCY
@pytest.fixture
def monitored(c):
    """The shared server with the latency monitor on at 50 ms; off and empty again afterwards."""
    assert c.cmd("LATENCY", "RESET") >= 0
    assert c.cmd("CONFIG", "SET", "latency-monitor-threshold", "50") == "OK"
    yield c
    c.cmd("CONFIG", "SET", "latency-monitor-threshold", "0")
    c.cmd("LATENCY", "RESET")


def test_latency_monitor_records_slow_commands(monitored):
    c = monitored
    assert c.cmd("CONFIG", "GET", "latency-monitor-threshold") == [b"latency-monitor-threshold", b"50"]
    before = int(time.time())
    assert c.cmd("DEBUG", "SLEEP", "0.1") == "OK"
    [[event, when, latest, worst]] = c.cmd("LATENCY", "LATEST")
    assert event == b"command" and before <= when <= before + 2
    assert 100 <= latest < 1000 and worst == latest
    [[when2, ms]] = c.cmd("LATENCY", "HISTORY", "command")
    assert (when2, ms) == (when, latest)
    assert c.cmd("LATENCY", "HISTORY", "nope") == []
    graph = c.cmd("LATENCY", "GRAPH", "command").decode()
    lines = graph.split("\n")
    assert lines[0] == f"command - high {latest} ms, low {latest} ms (all time high {latest} ms)"
    assert lines[1] == "-" * 80
    assert lines[2:6] == [" ", " ", " ", "_"], "one sample: the lowest mark on the fourth row"
    assert lines[6] == " " and re.fullmatch(r"\d", lines[7]) and lines[8] == "s"
    doctor = c.cmd("LATENCY", "DOCTOR").decode()
    assert doctor.startswith("Dave, I have observed latency spikes in this Redis instance.")
    assert f"1. command: 1 latency spikes (average {latest}ms, mean deviation 0ms, period " in doctor
    assert "- Check your Slow Log to understand what are the commands you are running" in doctor
    assert c.cmd("LATENCY", "RESET", "command", "nope") == 1
    assert c.cmd("LATENCY", "LATEST") == []
    assert c.cmd("LATENCY", "GRAPH", "command") == Err("ERR No samples available for event 'command'")
    assert c.cmd("DEBUG", "SLEEP", "0.01") == "OK"
    assert c.cmd("LATENCY", "LATEST") == [], "under the threshold"


def test_latency_doctor_when_off_and_quiet(c):
    assert c.cmd("LATENCY", "RESET") >= 0
    assert c.cmd("LATENCY", "DOCTOR").decode().startswith(
        "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance.")
    assert c.cmd("CONFIG", "SET", "latency-monitor-threshold", "1000") == "OK"
    try:
        assert c.cmd("LATENCY", "DOCTOR") == (
            b"Dave, no latency spike was observed during the lifetime of this Redis instance, not in the "
            b"slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think "
            b"things over.\n")
    finally:
        c.cmd("CONFIG", "SET", "latency-monitor-threshold", "0")


def test_latency_histogram_and_latencystats(c):
    assert c.cmd("CONFIG", "RESETSTAT") == "OK"
    for _ in range(3):
        assert c.cmd("SET", "a", "1") == "OK"
    assert c.cmd("GET", "a") == b"1"
    reply = c.cmd("LATENCY", "HISTOGRAM", "set", "GET", "nosuchcommand")
    histograms = dict(zip(reply[::2], reply[1::2]))
    assert sorted(histograms) == [b"get", b"set"]
    calls, count, usec_name, buckets = histograms[b"set"]
    assert (calls, count, usec_name) == (b"calls", 3, b"histogram_usec")
    micros, cumulative = buckets[::2], buckets[1::2]
    assert cumulative == sorted(cumulative) and cumulative[-1] == 3
    # HDR buckets at powers of two from 1024 ns: 1, 2, 4, 8, 16, 33, 66, 132 ... µs.
    powers = {1, 2, 4, 8, 16, 33, 66, 132, 264, 528, 1056, 2113, 4227}
    assert set(micros) <= powers, micros
    assert c.cmd("LATENCY", "HISTOGRAM", "nosuchcommand") == []
    every = c.cmd("LATENCY", "HISTOGRAM")
    assert b"set" in every[::2] and b"get" in every[::2]
    info = c.cmd("INFO", "latencystats").decode()
    assert info.startswith("# Latencystats\r\n")
    assert re.search(r"\r\nlatency_percentiles_usec_set:p50=\d+\.\d{3},p99=\d+\.\d{3},p99\.9=\d+\.\d{3}\r\n", info)
    assert "latencystats" not in c.cmd("INFO").decode().lower()


def test_latency_tracking_settings(c):
    settings = c.cmd("CONFIG", "GET", "latency-tracking*")
    assert dict(zip(settings[::2], settings[1::2])) == {
        b"latency-tracking": b"yes", b"latency-tracking-info-percentiles": b"50 99 99.9"}
    prefix = "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - "
    assert c.cmd("CONFIG", "SET", "latency-tracking-info-percentiles", "50 101") == Err(
        prefix + "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]")
    assert c.cmd("CONFIG", "SET", "latency-tracking-info-percentiles", "x") == Err(
        prefix + "Invalid latency-tracking-info-percentiles parameters")
    assert c.cmd("CONFIG", "SET", "latency-tracking-info-percentiles", "90") == "OK"
    try:
        c.cmd("PING")
        info = c.cmd("INFO", "latencystats").decode()
        assert re.search(r"latency_percentiles_usec_ping:p90=\d+\.\d{3}\r\n", info)
    finally:
        assert c.cmd("CONFIG", "SET", "latency-tracking-info-percentiles", "50 99 99.9") == "OK"


def test_latency_help_and_errors(c):
    help_lines = c.cmd("LATENCY", "HELP")
    assert help_lines[0] == "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert "    (default: reset all data for all event classes)" in help_lines
    assert help_lines[-2:] == ["HELP", "    Prints this help."]
    assert c.cmd("LATENCY", "FOO") == Err("ERR unknown subcommand 'FOO'. Try LATENCY HELP.")
    assert c.cmd("LATENCY", "HISTORY") == Err("ERR wrong number of arguments for 'latency|history' command")
    assert c.cmd("LATENCY", "GRAPH") == Err("ERR wrong number of arguments for 'latency|graph' command")


# --------------------------------------------------------------------------- MONITOR
LINE = re.compile(rb"^\+(\d+)\.(\d{6}) \[(\d+) ([^\]]+)\] (.*)$")


def monitor_lines(m, count):
    """The next `count` MONITOR lines as (db, origin, arguments part)."""
    lines = []
    for _ in range(count):
        raw = m.readline()
        match = LINE.match(raw)
        assert match, raw
        lines.append((int(match.group(3)), match.group(4).decode(), match.group(5).decode()))
    return lines


def test_monitor_streams_commands_as_redis(raw):
    m = raw()
    assert m.cmd("MONITOR") == "OK"
    c = raw()
    port = c.sock.getsockname()[1]
    me = f"127.0.0.1:{port}"
    assert c.cmd("SET", "k", b'v "q" \\ \n\x01\xff') == "OK"
    assert c.cmd("SELECT", "2") == "OK"
    assert c.cmd("GET", "k") is None
    assert c.cmd("SELECT", "0") == "OK"
    assert isinstance(c.cmd("AUTH", "user", "secret"), Err)
    assert c.cmd("CONFIG", "GET", "maxmemory")  # administrative: not shown
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("SET", "a", "1") == "QUEUED"
    assert c.cmd("EXEC") == ["OK"]
    assert c.cmd("EVAL", "return redis.call('set','x',123)", "0") == "OK"
    assert isinstance(c.cmd("NOSUCHCOMMAND"), Err)  # rejected before running: not shown
    assert c.cmd("INCR", "k") == NOT_INTEGER  # ran and failed: shown
    assert c.cmd("PING") == "PONG"
    assert monitor_lines(m, 12) == [
        (0, me, r'"SET" "k" "v \"q\" \\ \n\x01\xff"'),
        (2, me, '"SELECT" "2"'),
        (2, me, '"GET" "k"'),
        (0, me, '"SELECT" "0"'),
        (0, me, '"AUTH" "(redacted)" "(redacted)"'),
        (0, me, '"MULTI"'),
        (0, me, '"SET" "a" "1"'),
        (0, me, '"EXEC"'),
        (0, me, '''"EVAL" "return redis.call('set','x',123)" "0"'''),
        (0, "lua", '"set" "x" "123"'),
        (0, me, '"INCR" "k"'),
        (0, me, '"PING"'),
    ]


def test_monitor_timestamps_and_hello_redaction(raw):
    m = raw()
    assert m.cmd("MONITOR") == "OK"
    c = raw()
    before = time.time()
    assert isinstance(c.cmd("HELLO", "2", "AUTH", "someone", "pw", "SETNAME", "nm"), Err)
    line = m.readline()
    match = LINE.match(line)
    assert match, line
    assert before - 1 <= float(match.group(1) + b"." + match.group(2)) <= time.time() + 1
    assert match.group(5) == b'"HELLO" "2" "AUTH" "(redacted)" "(redacted)" "SETNAME" "nm"'


def test_monitor_names_unix_socket_clients(server, raw):
    m = raw()
    assert m.cmd("MONITOR") == "OK"
    with RawConn(path=server.unixsocket) as u:
        assert u.cmd("PING") == "PONG"
    assert monitor_lines(m, 1) == [(0, f"unix:{server.unixsocket}", '"PING"')]


def test_monitor_ends_with_reset(raw):
    m = raw()
    assert m.cmd("MONITOR") == "OK"
    c = raw()
    assert c.cmd("SET", "before", "1") == "OK"
    assert monitor_lines(m, 1)[0][2] == '"SET" "before" "1"'
    m.send(b"RESET\r\n")
    assert m.readline() == b"+RESET"
    assert c.cmd("SET", "after", "1") == "OK"
    assert m.cmd("PING") == "PONG", "no more lines after RESET"
    q = raw()
    assert q.cmd("MONITOR") == "OK"
    assert q.cmd("QUIT") == "OK"
    assert q.is_closed()
    assert c.cmd("PING") == "PONG"


def test_monitor_inside_multi_is_refused(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("MONITOR") == "QUEUED"
    assert c.cmd("EXEC") == [Err("ERR MONITOR isn't allowed for DENY BLOCKING client")]


def flood_a_slow_monitor(port):
    """A monitor that never reads, 20 MB of lines for it; returns the connection that wrote them."""
    c = RawConn(port=port)
    assert c.cmd("CONFIG", "SET", "client-output-buffer-limit", "normal 256kb 0 0") == "OK"
    m = RawConn(port=port)
    monitor_id = m.cmd("CLIENT", "ID")
    assert m.cmd("MONITOR") == "OK"
    assert b" flags=O " in c.cmd("CLIENT", "LIST", "ID", monitor_id)
    value = b"x" * 20_000
    for _ in range(1000):
        c.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n" + value + b"\r\n")
        assert c.readline() == b"+OK"
    wait_for(lambda: c.cmd("CLIENT", "LIST", "ID", monitor_id) == b"", timeout=5)
    m.close()
    return c


def test_slow_monitor_is_disconnected(server_factory):
    c = flood_a_slow_monitor(server_factory().port)
    assert c.cmd("PING") == "PONG"
    c.close()


@pytest.mark.fallow_only
def test_slow_monitor_is_counted(server_factory):
    c = flood_a_slow_monitor(server_factory().port)
    info = c.cmd("INFO", "fallow").decode()
    assert "\r\nmonitors_dropped_slow:1\r\n" in info and "\r\nmonitors:0\r\n" in info
    assert int(re.search(r"monitor_lines_sent:(\d+)", info).group(1)) > 0
    stats = c.cmd("INFO", "stats").decode()
    assert int(re.search(r"client_output_buffer_limit_disconnections:(\d+)", stats).group(1)) >= 1
    c.close()


# --------------------------------------------------------------------------- DEBUG
def test_debug_object_lines(c):
    assert c.cmd("SET", "k", "v") == "OK"
    assert c.cmd("SET", "n", "123") == "OK"
    assert c.cmd("SET", "big", "12345678901") == "OK"
    line = c.cmd("DEBUG", "OBJECT", "k")
    assert re.fullmatch(r"Value at:0x[0-9a-f]+ refcount:1 encoding:embstr serializedlength:2 lru:\d+ "
                        r"lru_seconds_idle:\d+", line), line
    assert re.fullmatch(r"Value at:0x[0-9a-f]+ refcount:2147483647 encoding:int serializedlength:2 .*",
                        c.cmd("DEBUG", "OBJECT", "n"))
    assert re.fullmatch(r"Value at:0x[0-9a-f]+ refcount:1 encoding:int serializedlength:12 .*",
                        c.cmd("DEBUG", "OBJECT", "big"))
    assert c.cmd("RPUSH", "l", "a", "b") == 2
    assert re.fullmatch(r"Value at:0x[0-9a-f]+ refcount:1 encoding:quicklist serializedlength:16 lru:\d+ "
                        r"lru_seconds_idle:\d+ ql_nodes:1 ql_avg_node:2\.00 ql_listpack_max:-2 ql_compressed:0 "
                        r"ql_uncompressed_size:13", c.cmd("DEBUG", "OBJECT", "l"))
    assert c.cmd("DEBUG", "OBJECT", "nokey") == Err("ERR no such key")


def test_debug_set_active_expire_stops_active_expiry(c):
    assert c.cmd("DEBUG", "SET-ACTIVE-EXPIRE", "0") == "OK"
    try:
        assert c.cmd("SET", "short", "1", "PX", "30") == "OK"
        time.sleep(0.4)
        assert c.cmd("DBSIZE") == 1, "nothing removes it but a touch"
        assert c.cmd("EXISTS", "short") == 0
        assert c.cmd("SET", "short2", "1", "PX", "30") == "OK"
    finally:
        assert c.cmd("DEBUG", "SET-ACTIVE-EXPIRE", "1") == "OK"
    wait_for(lambda: c.cmd("DBSIZE") == 0, timeout=3)


def test_debug_subcommands_as_redis(c):
    assert c.cmd("SET", "k", "v") == "OK"
    assert c.cmd("RPUSH", "l", "a") == 1
    assert c.cmd("DEBUG", "SLEEP", "0") == "OK"
    assert c.cmd("DEBUG", "SLEEP", "x") == "OK"
    assert c.cmd("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100") == "OK"
    assert c.cmd("DEBUG", "QUICKLIST-PACKED-THRESHOLD", "x") == Err(
        "ERR argument must be a memory value bigger than 1 and smaller than 4gb")
    assert c.cmd("DEBUG", "LISTPACK", "nokey") == Err("ERR no such key")
    assert c.cmd("DEBUG", "LISTPACK", "k") == Err("ERR Not a listpack encoded object.")
    assert c.cmd("DEBUG", "LISTPACK", "l") == Err("ERR Not a listpack encoded object.")
    assert c.cmd("DEBUG", "CHANGE-REPL-ID") == "OK"
    for sub in ("JMAP", "FOO", "SET-ACTIVE-EXPIRE", "OBJECT"):
        assert c.cmd("DEBUG", sub) == Err(
            f"ERR unknown subcommand or wrong number of arguments for '{sub}'. Try DEBUG HELP.")


@pytest.mark.fallow_only
def test_debug_reload_is_refused(c):
    assert c.cmd("DEBUG", "RELOAD") == Err(
        "ERR DEBUG RELOAD is not supported: fallow keeps no snapshots to reload from")


# --------------------------------------------------------------------------- CLIENT
def test_client_kill_filter_errors(c):
    for bad in ("x", "0", "-1"):
        assert c.cmd("CLIENT", "KILL", "ID", bad) == Err("ERR client-id should be greater than 0")
    assert c.cmd("CLIENT", "KILL", "ID", "999999") == 0
    assert c.cmd("CLIENT", "KILL", "TYPE", "foo") == Err("ERR Unknown client type 'foo'")
    for kind in ("master", "replica", "slave", "pubsub"):
        assert c.cmd("CLIENT", "KILL", "TYPE", kind) == 0
    assert c.cmd("CLIENT", "KILL", "USER", "nouser") == Err("ERR No such user 'nouser'")
    assert c.cmd("CLIENT", "KILL", "ADDR", "1.1.1.1:1") == 0
    assert c.cmd("CLIENT", "KILL", "LADDR", "1.1.1.1:1") == 0
    assert c.cmd("CLIENT", "KILL", "SKIPME", "maybe") == SYNTAX
    assert c.cmd("CLIENT", "KILL", "FOO", "bar") == SYNTAX
    assert c.cmd("CLIENT", "KILL", "ID", "5", "TYPE") == SYNTAX
    assert c.cmd("CLIENT", "KILL", "1.2.3.4:5") == Err("ERR No such client")


def test_client_kill_filters_count_and_skipme(server_factory):
    s = server_factory()
    a, b, d = (RawConn(port=s.port) for _ in range(3))
    try:
        local = [kv.split("=", 1)[1] for kv in a.cmd("CLIENT", "INFO").decode().split() if kv.startswith("laddr=")][0]
        assert b.cmd("PING") == "PONG" and d.cmd("PING") == "PONG"
        assert a.cmd("CLIENT", "KILL", "LADDR", local, "TYPE", "normal") == 2, "SKIPME yes by default"
        assert b.is_closed() and d.is_closed()
        assert a.cmd("PING") == "PONG"
        assert a.cmd("CLIENT", "KILL", "USER", "default", "SKIPME", "no") == 1
        assert a.is_closed(), "killing itself closes after the reply"
    finally:
        for conn in (a, b, d):
            conn.close()


def test_client_list_filters_as_redis(c):
    my_id = c.cmd("CLIENT", "ID")
    assert f"id={my_id} ".encode() in c.cmd("CLIENT", "LIST", "TYPE", "normal")
    assert c.cmd("CLIENT", "LIST", "TYPE", "pubsub") == b""
    assert c.cmd("CLIENT", "LIST", "TYPE", "foo") == Err("ERR Unknown client type 'foo'")
    assert c.cmd("CLIENT", "LIST", "ID", "x") == Err("ERR Invalid client ID")
    assert c.cmd("CLIENT", "LIST", "ID", "0") == b""
    assert c.cmd("CLIENT", "LIST", "ID", "-5", str(my_id)).startswith(f"id={my_id} ".encode())
    assert c.cmd("CLIENT", "LIST", "TYPE", "normal", "ID", str(my_id)) == SYNTAX
    assert c.cmd("CLIENT", "LIST", "foo") == SYNTAX


def test_client_flags_and_help(c):
    assert c.cmd("CLIENT", "NO-EVICT", "on") == "OK"
    assert c.cmd("CLIENT", "NO-EVICT", "off") == "OK"
    assert c.cmd("CLIENT", "NO-EVICT", "maybe") == SYNTAX
    assert c.cmd("CLIENT", "REPLY", "foo") == SYNTAX
    assert c.cmd("CLIENT", "SETNAME", "") == "OK"
    assert c.cmd("CLIENT", "GETNAME") is None
    assert c.cmd("CLIENT", "SETNAME") == Err("ERR wrong number of arguments for 'client|setname' command")
    assert c.cmd("CLIENT", "SETNAME", "a", "b") == Err(
        "ERR wrong number of arguments for 'client|setname' command")
    assert c.cmd("CLIENT", "KILL") == Err("ERR wrong number of arguments for 'client|kill' command")
    assert c.cmd("CLIENT", "INFO", "x") == Err("ERR wrong number of arguments for 'client|info' command")
    assert c.cmd("CLIENT", "LIST", "ID") == SYNTAX
    assert c.cmd("CLIENT", "SETNAME", "a\nb") == Err(
        "ERR Client names cannot contain spaces, newlines or special characters.")
    lines = c.cmd("CLIENT", "HELP")
    assert lines[0] == "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert lines[1:3] == ["CACHING (YES|NO)",
                          "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes."]
    position = lines.index("NO-EVICT (ON|OFF)")
    assert lines[position + 1] == "    Protect current client connection from eviction."
    assert lines[-2:] == ["HELP", "    Prints this help."]


@pytest.mark.fallow_only
def test_client_no_touch_leaves_lru_alone(c):
    """CLIENT NO-TOUCH is Redis 7.2's (7.0.15 answers it as an unknown subcommand): reads leave the LRU
    record alone; TOUCH still touches."""
    assert c.cmd("SET", "k", "v") == "OK"
    assert c.cmd("CLIENT", "NO-TOUCH", "ON") == "OK"
    assert b" flags=T " in c.cmd("CLIENT", "INFO")
    assert c.cmd("CLIENT", "NO-TOUCH", "maybe") == SYNTAX
    time.sleep(2.1)
    assert c.cmd("GET", "k") == b"v"
    assert c.cmd("OBJECT", "IDLETIME", "k") >= 2
    assert c.cmd("TOUCH", "k") == 1
    assert c.cmd("OBJECT", "IDLETIME", "k") == 0
    time.sleep(1.1)
    assert c.cmd("CLIENT", "NO-TOUCH", "OFF") == "OK"
    assert c.cmd("GET", "k") == b"v"
    assert c.cmd("OBJECT", "IDLETIME", "k") == 0


# --------------------------------------------------------------------------- LOLWUT
VERSION_LINE = b"Redis ver. 7.0.15\n"


def test_lolwut_version_line_and_errors(c):
    assert c.cmd("LOLWUT") == VERSION_LINE
    assert c.cmd("LOLWUT", "VERSION", "4") == VERSION_LINE
    assert c.cmd("LOLWUT", "VERSION", "99") == VERSION_LINE
    assert c.cmd("LOLWUT", "foo") == VERSION_LINE
    assert c.cmd("LOLWUT", "VERSION") == VERSION_LINE
    assert c.cmd("LOLWUT", "VERSION", "x") == NOT_INTEGER
    assert c.cmd("LOLWUT", "VERSION", "5", "x") == NOT_INTEGER
    assert c.cmd("LOLWUT", "VERSION", "6", "10", "x") == NOT_INTEGER


def test_lolwut_schotter(c):
    # Small drawings have no random rows: byte-identical to Redis's.
    assert c.cmd("LOLWUT", "VERSION", "5", "1", "1", "1") == (
        "⠋\n\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15\n".encode())
    assert c.cmd("LOLWUT", "VERSION", "5", "3", "1", "1") == (
        "⠀⡤⡄\n⠀⠉⠁\n\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15\n".encode())
    assert c.cmd("LOLWUT", "VERSION", "5", "-5", "0", "0") == c.cmd("LOLWUT", "VERSION", "5", "1", "1", "1")
    # The default: 66 columns, 8 x 12 squares; the first two rows of squares are never displaced.
    lines = c.cmd("LOLWUT", "VERSION", "5").decode().split("\n")
    assert len(lines) == 49 + 3 and lines[-3:] == [
        "", "Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15", ""]
    assert all(len(line) == 66 for line in lines[:49])
    assert lines[0] == "⠀" + "⡤⠤⠤⠤⠤⠤⠤⠤" * 8 + "⡄"
    assert lines[1] == "⠀" + "⡇⠀⠀⠀⠀⠀⠀⠀" * 8 + "⡇"


def test_lolwut_skyline(c):
    assert c.cmd("LOLWUT", "VERSION", "6", "1", "1") == (
        b"\x1b[0;97;107m \x1b[0m\nDedicated to the 8 bit game developers of past and present.\n"
        b"Original 8 bit image from Plaguemon by hikikomori. Redis ver. 7.0.15\n")
    lines = c.cmd("LOLWUT", "VERSION", "6").decode().split("\n")
    assert len(lines) == 20 + 3 and lines[-1] == ""
    assert lines[-2] == "Original 8 bit image from Plaguemon by hikikomori. Redis ver. 7.0.15"
    cell = re.compile(r"\x1b\[0;(30;40|90;100|37;47|97;107)m \x1b\[0m")
    for line in lines[:20]:
        assert len(cell.findall(line)) == 80 and cell.sub("", line) == ""
    assert "97;107" in lines[0], "the sky is white"


# --------------------------------------------------------------------------- MODULE
MODULE_REFUSED = ('ERR MODULE command not allowed. If the enable-module-command option is set to "local", you can '
                  'run it from a local connection, otherwise you need to set this option in the configuration file, '
                  'and then restart the server.')


def test_module_load_and_unload_are_refused_unless_enabled(c):
    # Both servers start with enable-module-command at its default, no: LIST and HELP still answer.
    assert c.cmd("MODULE", "LIST") == []
    for call in (("LOAD", "/x.so"), ("LOADEX", "/x.so", "ARGS", "a"), ("UNLOAD", "x")):
        assert c.cmd("MODULE", *call) == Err(MODULE_REFUSED), call
    assert c.cmd("MODULE") == Err("ERR wrong number of arguments for 'module' command"), "arity first"
    assert c.cmd("MODULE", "LOAD") == Err("ERR wrong number of arguments for 'module|load' command")
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("MODULE", "UNLOAD", "x") == Err(MODULE_REFUSED), "refused before queueing"
    assert c.cmd("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")


def test_module_lists_none_and_loads_none(server_factory):
    s = server_factory(enable_module_command="yes")
    with RawConn(port=s.port) as c:
        assert c.cmd("MODULE", "LIST") == []
        loading_failed = Err("ERR Error loading the extension. Please check the server logs.")
        assert c.cmd("MODULE", "LOAD", "/nonexistent/module.so") == loading_failed
        assert c.cmd("MODULE", "LOADEX", "/nonexistent/module.so", "CONFIG", "a", "b", "ARGS", "c") == loading_failed
        assert c.cmd("MODULE", "UNLOAD", "nosuch") == Err("ERR Error unloading module: no such module with that name")
        assert c.cmd("MODULE", "LIST", "x") == Err("ERR wrong number of arguments for 'module|list' command")
        assert c.cmd("MODULE", "LOAD") == Err("ERR wrong number of arguments for 'module|load' command")
        assert c.cmd("MODULE", "NOSUCH") == Err("ERR unknown subcommand 'NOSUCH'. Try MODULE HELP.")
        help_lines = c.cmd("MODULE", "HELP")
        assert help_lines[0] == "MODULE <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        assert "UNLOAD <name>" in help_lines and help_lines[-2:] == ["HELP", "    Prints this help."]
        assert c.cmd("PING") == "PONG", "the server keeps serving"
