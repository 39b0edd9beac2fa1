"""CONFIG GET/SET over every parameter redis-server 7.0.15 knows, compared live: each test starts a private
target server (fallow, or Redis with E2E_TARGET=redis) and a reference redis-server, and expects the same
names, defaults, replies and stored values from both. Where fallow differs on purpose (its own settings'
defaults, values it cannot honour) the difference is listed here and in docs/configuration.md."""
import shutil

import pytest

from helpers import Err, RawConn, ServerProc, TARGET

pytestmark = [pytest.mark.resp,
              pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server 7.0")]

# fallow's own settings, beyond Redis's names (docs/configuration.md).
FALLOW_EXTRA = {
    "memcache-port", "threads", "shards", "memory-mode", "elastic-reserve", "elastic-min", "elastic-max",
    "elastic-grow-bytes-per-sec", "elastic-poll-interval-ms", "reclaim-fast-threshold", "host-memory-trace",
    "metrics-port", "memcache-item-size-max", "segment-size", "pubsub-queue-messages-max", "log-level",
    "memcache-tenant", "memcache-auth", "txn-locks", "txn-phasing", "txn-phase-max-ms", "txn-lock-wait-ms",
    "lua-strict-keys", "auth-failures-before-delay", "auth-failure-delay-ms", "auth-failure-delay-max-ms",
    "tier2-size", "tier2-path", "tier2-fsync", "tier2-admission", "tier2-reads", "tier2-admit-hits",
    "tier2-region-size", "tier2-clean-ahead-bytes-per-sec", "tracking-table-max-bytes",
    "shm-channels", "shm-ring-bytes", "shm-ring-bytes-max", "shm-spin-us", "shm-allowed-uids", "vsock-port",
}
# Values that describe the server itself (addresses, paths, how it was started).
SERVER_DESCRIBING = {"bind", "port", "dir", "unixsocket", "unixsocketperm", "daemonize", "pidfile", "logfile",
                     "loglevel", "databases"}
# fallow's own settings whose defaults differ from Redis's on purpose (docs/configuration.md).
FALLOW_DEFAULTS = {"client-output-buffer-limit", "maxmemory-clients"}
# Values fallow refuses because it cannot honour them: (name, value Redis takes).
REFUSED = [("appendonly", "yes"), ("save", "3600 1"), ("tls-port", "6380"), ("tls-replication", "yes"),
           ("tls-cluster", "yes"), ("min-replicas-to-write", "1"),
           ("min-slaves-to-write", "1"), ("activedefrag", "yes")]
# fallow's own bounds on what it keeps in memory (docs/configuration.md): Redis takes up to 2^63-1.
FALLOW_LIMITS = {"slowlog-max-len", "acllog-max-len"}
# Left out of the value-by-value comparison: fallow's own settings with their own checks (tested in
# test_config.py), those whose change would cut the test's connection, and the refused ones above.
NOT_PROBED = {"bind", "port", "requirepass", "maxclients", "timeout", "maxmemory", "maxmemory-clients",
              "maxmemory-policy", "client-output-buffer-limit", "save", "appendonly", "proto-max-bulk-len",
              "client-query-buffer-limit", "protected-mode", "oom-score-adj", "tls-port", "tls-replication",
              "tls-cluster", "min-replicas-to-write", "min-slaves-to-write",
              "activedefrag"} | SERVER_DESCRIBING | FALLOW_LIMITS
PROBES = ["abc", "-1", "0", "1", "17", "1000", "yes", "NO", "1kb", "", "99999999999999999999", "-9223372036854775809",
          "LOCAL", "50 99.0", "1 2 3"]


@pytest.fixture
def pair():
    """(target, reference): connections to a private target server and a private redis-server."""
    servers = [ServerProc(TARGET).start(), ServerProc("redis").start()]
    conns = [RawConn(port=s.port) for s in servers]
    try:
        yield conns
    finally:
        for c in conns:
            c.close()
        for s in servers:
            s.cleanup()


def _config(c, *patterns):
    reply = c.cmd("CONFIG", "GET", *patterns)
    return {reply[i].decode(): reply[i + 1].decode() for i in range(0, len(reply), 2)}


def test_config_get_star_knows_every_redis_name(pair):
    target, reference = _config(pair[0], "*"), _config(pair[1], "*")
    assert set(reference) - set(target) == set()
    assert set(target) - set(reference) <= FALLOW_EXTRA
    assert len(reference) > 180, "Redis 7.0.15 lists 192 names (aliases included)"


def test_defaults_are_redis_defaults(pair):
    target, reference = _config(pair[0], "*"), _config(pair[1], "*")
    # both were started with enable-debug-command yes (helpers.ServerProc)
    assert target["enable-debug-command"] == reference["enable-debug-command"] == "yes"
    differ = {name for name in reference if target[name] != reference[name]}
    allowed = SERVER_DESCRIBING | (FALLOW_DEFAULTS if TARGET == "fallow" else set())
    assert differ - allowed == set(), {n: (target[n], reference[n]) for n in differ - allowed}


def test_every_settable_parameter_answers_as_redis(pair):
    target, reference = pair
    names = sorted(_config(reference, "*"))
    compared, differ = 0, []
    for name in names:
        if name in NOT_PROBED:
            continue
        before = [_config(c, name)[name] for c in pair]
        for value in PROBES:
            replies = [c.cmd("CONFIG", "SET", name, value) for c in pair]
            after = [_config(c, name)[name] for c in pair]
            if replies[0] != replies[1] or after[0] != after[1]:
                differ.append((name, value, replies, after))
            restored = [c.cmd("CONFIG", "SET", name, old) for c, old in zip(pair, before)]
            assert restored[0] == restored[1] and [_config(c, name)[name] for c in pair] == before
            compared += 1
    assert differ == [], "\n".join(map(repr, differ))
    assert compared > 1500


def test_aliases_share_one_value(pair):
    for c in pair:
        assert c.cmd("CONFIG", "SET", "hash-max-ziplist-entries", "100", "slave-priority", "7") == "OK"
        assert _config(c, "hash-max-*-entries", "*-priority") == {
            "hash-max-ziplist-entries": "100", "hash-max-listpack-entries": "100",
            "slave-priority": "7", "replica-priority": "7"}


def test_several_patterns_each_name_once_exact_names_as_given(pair):
    replies = [c.cmd("CONFIG", "GET", "MAXMEMORY", "maxmemory", "maxmem*") for c in pair]
    for reply in replies:
        names = reply[0::2]  # in any order (Redis's comes from a hash table)
        assert b"MAXMEMORY" in names and b"maxmemory" not in names
        assert b"maxmemory-policy" in names and len(names) == len(set(names))
    assert set(replies[0][0::2]) == set(replies[1][0::2])


def test_config_set_arguments(pair):
    for c in pair:
        assert c.cmd("CONFIG", "SET", "maxmemory") == Err("ERR wrong number of arguments for 'config|set' command")
        assert c.cmd("CONFIG", "SET", "maxmemory", "0", "hz") == Err("ERR syntax error")
        assert c.cmd("CONFIG", "GET") == Err("ERR wrong number of arguments for 'config|get' command")


def test_hidden_parameters_need_their_exact_name(pair):
    for c in pair:
        assert _config(c, "key-load-delay") == {"key-load-delay": "0"}
        assert _config(c, "key-load-*") == {}
        assert "watchdog-period" not in _config(c, "*")


@pytest.mark.parametrize("args,reply", [
    (("maxclients", "abc", "daemonize", "no"),
     "ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config"),
    (("maxclients", "abc", "Nosuch", "1"), "ERR Unknown option or number of arguments for CONFIG SET - 'Nosuch'"),
    (("maxclients", "5", "MAXCLIENTS", "6"),
     "ERR CONFIG SET failed (possibly related to argument 'MAXCLIENTS') - duplicate parameter"),
    (("maxclients", "abc", "dbfilename", "x"),
     "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - can't set protected config"),
    (("dir", "/tmp"), "ERR CONFIG SET failed (possibly related to argument 'dir') - can't set protected config"),
    (("enable-debug-command", "no"),
     "ERR CONFIG SET failed (possibly related to argument 'enable-debug-command') - can't set immutable config"),
    (("activerehashing", "no", "lfu-log-factor", "-1"),
     "ERR CONFIG SET failed (possibly related to argument 'lfu-log-factor') - argument must be between 0 and "
     "2147483647 inclusive"),
])
def test_names_are_checked_before_values_and_nothing_changes(pair, args, reply):
    for c in pair:
        before = _config(c, "*")
        assert c.cmd("CONFIG", "SET", *args) == Err(reply)
        assert _config(c, "*") == before


def test_protected_configs_when_enabled(server_factory):
    s = server_factory(enable_protected_configs="yes")
    with RawConn(port=s.port) as c:
        assert c.cmd("CONFIG", "SET", "dbfilename", "a/b") == Err(
            "ERR CONFIG SET failed (possibly related to argument 'dbfilename') - dbfilename can't be a path, "
            "just a filename")
        assert c.cmd("CONFIG", "SET", "dbfilename", "other.rdb") == "OK"
        assert _config(c, "dbfilename") == {"dbfilename": "other.rdb"}


DEBUG_REFUSED = ('ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", you can '
                 'run it from a local connection, otherwise you need to set this option in the configuration '
                 'file, and then restart the server.')


@pytest.mark.parametrize("setting,allowed", [("no", False), ("local", True), ("yes", True)])
def test_debug_needs_enable_debug_command(server_factory, setting, allowed):
    s = server_factory(enable_debug_command=setting)
    for conn in (RawConn(port=s.port), RawConn(path=s.unixsocket)):
        with conn as c:
            assert c.cmd("DEBUG", "SLEEP", "0") == ("OK" if allowed else Err(DEBUG_REFUSED))
            assert c.cmd("DEBUG") == Err("ERR wrong number of arguments for 'debug' command"), "arity first"
            assert c.cmd("MULTI") == "OK"
            queued = c.cmd("DEBUG", "SLEEP", "0")
            assert queued == ("QUEUED" if allowed else Err(DEBUG_REFUSED))
            exec_reply = c.cmd("EXEC")
            assert exec_reply == (["OK"] if allowed else Err(
                "EXECABORT Transaction discarded because of previous errors."))


@pytest.mark.fallow_only
@pytest.mark.parametrize("name,value", REFUSED)
def test_values_fallow_cannot_honour_are_refused(server_factory, name, value):
    s = server_factory()
    with RawConn(port=s.port) as c:
        before = _config(c, name)
        reply = c.cmd("CONFIG", "SET", name, value)
        assert isinstance(reply, Err)
        assert str(reply).startswith(f"ERR CONFIG SET failed (possibly related to argument '{name}') - fallow ")
        assert _config(c, name) == before


def test_encoding_thresholds_drive_dump(server_factory):
    """DUMP's payload follows the thresholds in force when the key was written: a listpack hash (RDB type
    16) within hash-max-listpack-entries, a hash (4) past it; an intset (11) within set-max-intset-entries, a
    set (2) past it."""
    s = server_factory()
    with RawConn(port=s.port) as c:
        assert c.cmd("HSET", "small", "a", "1", "b", "2") == 2
        assert c.cmd("DUMP", "small")[0] == 16
        assert c.cmd("SADD", "ints", "1", "2", "3") == 3
        assert c.cmd("DUMP", "ints")[0] == 11
        assert c.cmd("CONFIG", "SET", "hash-max-ziplist-entries", "1", "set-max-intset-entries", "2") == "OK"
        assert c.cmd("HSET", "big", "a", "1", "b", "2") == 2
        assert c.cmd("DUMP", "big")[0] == 4
        assert c.cmd("SADD", "many", "1", "2", "3") == 3
        assert c.cmd("DUMP", "many")[0] == 2


@pytest.mark.parametrize("name,value", [
    ("list-max-listpack-size", v) for v in ("-100", "-1", "0", "1", "3", "2147483647", "-2147483648")
] + [("list-compress-depth", "1"), ("zset-max-listpack-entries", "2"), ("zset-max-ziplist-value", "3"),
     ("hash-max-listpack-value", "3"), ("set-max-intset-entries", "2"), ("rdbcompression", "no")])
def test_dump_follows_encoding_thresholds_as_redis(pair, name, value):
    """Keys written under a threshold DUMP as Redis's do: byte for byte where Redis's payload is deterministic
    (lists, sorted sets, listpacks, intsets), the same RDB type otherwise (hash-table order is Redis's own)."""
    long = "x" * 40
    for c in pair:
        assert c.cmd("CONFIG", "SET", name, value) == "OK"
        c.cmd("RPUSH", "list", long, *"abcdefg", long)
        c.cmd("ZADD", "zset", "1", "a", "2", "bb", "3", "cccc")
        c.cmd("HSET", "hash", "a", "1", "bbbb", "2")
        c.cmd("SADD", "set", "1", "2", "3")
    for key in ("list", "zset"):
        dumps = [c.cmd("DUMP", key) for c in pair]
        assert dumps[0] == dumps[1], key
    for key in ("hash", "set"):
        dumps = [c.cmd("DUMP", key) for c in pair]
        assert dumps[0][0] == dumps[1][0], key
        if dumps[1][0] in (11, 16):  # intset, listpack: deterministic
            assert dumps[0] == dumps[1], key


@pytest.mark.parametrize("name,value", [("stream-node-max-entries", "3"), ("stream-node-max-entries", "0"),
                                        ("stream-node-max-bytes", "60"), ("stream-node-max-bytes", "0")])
def test_stream_nodes_follow_node_limits_as_redis(pair, name, value):
    """XINFO STREAM's radix-tree counts and approximate trimming (whole nodes) follow the node limits in
    force when the entries were added."""
    for c in pair:
        assert c.cmd("CONFIG", "SET", name, value) == "OK"
        for ms in range(1, 31):
            c.cmd("XADD", "s", f"{ms}-1", "field", "value")
    infos = []
    for c in pair:
        info = c.cmd("XINFO", "STREAM", "s")
        fields = dict(zip(info[0::2], info[1::2]))
        infos.append((fields[b"radix-tree-keys"], fields[b"radix-tree-nodes"]))
    assert infos[0] == infos[1]
    trims = [c.cmd("XTRIM", "s", "MAXLEN", "~", "5") for c in pair]
    assert trims[0] == trims[1]
