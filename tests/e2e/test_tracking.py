"""Client-side caching (CLIENT TRACKING): byte-exact against Redis 7.0.

Replies and invalidations are compared as raw bytes. `exchange` sends a command followed by PING and
returns everything before the PONG, so messages that arrive with (or after) a reply are seen in order
and nothing unexpected can hide. Another connection's invalidations are queued while the writing command
runs, so a PING on the receiving connection afterwards finds them ahead of its PONG.
"""
import re
import time

import pytest

from helpers import RawConn, encode, wait_for

pytestmark = pytest.mark.resp

PONG = b"+PONG\r\n"
# PING's reply on a RESP2 connection with subscriptions.
PONG_SUBSCRIBED = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
NULL3 = b"_\r\n"


def bulk(value) -> bytes:
    value = value.encode() if isinstance(value, str) else value
    return b"$%d\r\n%s\r\n" % (len(value), value)


def keys_array(*keys) -> bytes:
    return b"*%d\r\n" % len(keys) + b"".join(bulk(k) for k in keys)


def invalidate(*keys) -> bytes:
    """A RESP3 invalidation push for `keys`."""
    return b">2\r\n" + bulk("invalidate") + keys_array(*keys)


INVALIDATE_ALL = b">2\r\n" + bulk("invalidate") + NULL3


def message(payload: bytes) -> bytes:
    """A redirected invalidation as a RESP2 subscriber receives it."""
    return b"*3\r\n" + bulk("message") + bulk("__redis__:invalidate") + payload


def exchange(conn, *args, pong=PONG) -> bytes:
    """Sends `args` (if any) and a PING; returns what arrived before the PONG."""
    conn.send((encode(*args) if args else b"") + encode("PING"))
    return conn.read_until(pong)[: -len(pong)]


def call(conn, *args) -> bytes:
    """Sends one command without a PING after it (a PING would end CLIENT CACHING's effect, or be
    queued inside MULTI); returns its reply, a simple line."""
    conn.send(encode(*args))
    return conn.read_until(b"\r\n")


def resp3(raw):
    conn = raw()
    conn.send(encode("HELLO", "3"))
    conn.read_until(b"modules\r\n*0\r\n")
    return conn


def client_id(conn) -> int:
    return conn.cmd("CLIENT", "ID")


def info_tracking(conn) -> dict:
    text = conn.cmd("INFO", "everything")
    text = text.decode() if isinstance(text, bytes) else text
    fields = dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)
    return {k: int(v) for k, v in fields.items() if k.startswith("tracking_")}


def test_default_mode_invalidates_readers_once(raw):
    a, other = resp3(raw), raw()
    assert exchange(a, "CLIENT", "TRACKING", "on") == b"+OK\r\n"
    assert exchange(a, "GET", "k") == NULL3
    assert other.cmd("SET", "k", "1") == "OK"
    assert exchange(a) == invalidate("k")
    assert other.cmd("SET", "k", "2") == "OK"
    assert exchange(a) == b"", "the entry went with the first invalidation"
    # Multi-key reads track every key; a missing key is tracked too.
    assert exchange(a, "MGET", "k", "missing") == b"*2\r\n$1\r\n2\r\n_\r\n"
    assert other.cmd("DEL", "k", "missing") == 1
    assert exchange(a) == invalidate("k")
    assert other.cmd("SET", "missing", "now") == "OK"
    assert exchange(a) == invalidate("missing")
    # Its own write: the invalidation follows the reply.
    exchange(a, "GET", "k")
    assert exchange(a, "SET", "k", "3") == b"+OK\r\n" + invalidate("k")


def test_writes_that_change_nothing_do_not_invalidate(raw):
    a, other = resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    exchange(a, "GET", "k")
    assert other.cmd("DEL", "k") == 0
    assert other.cmd("SET", "k", "v", "XX") is None
    assert exchange(a) == b""
    assert other.cmd("EXPIRE", "k", "100") == 0
    assert exchange(a) == b""


def test_expire_rename_and_types_invalidate(raw):
    a, other = resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    other.cmd("SET", "s", "v")
    other.cmd("RPUSH", "l", "x")
    exchange(a, "GET", "s")
    exchange(a, "LRANGE", "l", "0", "-1")
    assert other.cmd("EXPIRE", "s", "100") == 1
    assert exchange(a) == invalidate("s")
    exchange(a, "GET", "s")
    assert other.cmd("RENAME", "s", "t") == "OK"
    assert exchange(a) == invalidate("s")
    assert other.cmd("LPOP", "l") == b"x"
    assert exchange(a) == invalidate("l")


def test_keys_expire_with_an_invalidation(raw):
    a, other = resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    assert other.cmd("SET", "e", "1", "PX", "1500") == "OK"
    assert exchange(a, "GET", "e") == bulk("1")
    # Active expiry (or the read below, lazily) removes it: the reader is told either way.
    time.sleep(1.7)
    other.cmd("GET", "e")
    assert exchange(a) == invalidate("e")


def test_flush_sends_a_null_to_every_tracking_client(raw):
    a, b, other = resp3(raw), resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    exchange(b, "CLIENT", "TRACKING", "on", "BCAST")
    exchange(a, "GET", "k")
    assert other.cmd("FLUSHALL") == "OK"
    assert exchange(a) == INVALIDATE_ALL
    assert exchange(b) == INVALIDATE_ALL
    assert exchange(a, "FLUSHDB") == b"+OK\r\n" + INVALIDATE_ALL
    assert exchange(b) == INVALIDATE_ALL
    assert info_tracking(other)["tracking_total_keys"] == 0


def test_resp2_redirect_to_a_subscriber(raw):
    listener, tracked, other = raw(), raw(), raw()
    listener_id = client_id(listener)
    listener.send(encode("SUBSCRIBE", "__redis__:invalidate"))
    listener.read_until(b":1\r\n")
    assert exchange(tracked, "CLIENT", "TRACKING", "on", "REDIRECT", str(listener_id)) == b"+OK\r\n"
    assert tracked.cmd("CLIENT", "GETREDIR") == listener_id
    exchange(tracked, "GET", "a")
    exchange(tracked, "GET", "b")
    assert exchange(tracked, "SET", "a", "1") == b"+OK\r\n"
    assert exchange(listener, pong=PONG_SUBSCRIBED) == message(keys_array("a"))
    assert other.cmd("MSET", "a", "2", "b", "2") == "OK"
    assert exchange(listener, pong=PONG_SUBSCRIBED) == message(keys_array("b"))
    # A flush: the null as the tracking client's protocol (RESP2) writes it.
    assert other.cmd("FLUSHDB") == "OK"
    assert exchange(listener, pong=PONG_SUBSCRIBED) == message(b"$-1\r\n")


def test_resp2_without_redirect_gets_nothing(raw):
    a, other = raw(), raw()
    assert exchange(a, "CLIENT", "TRACKING", "on") == b"+OK\r\n"
    exchange(a, "GET", "k")
    assert exchange(a, "SET", "k", "1") == b"+OK\r\n"
    assert other.cmd("SET", "k", "2") == "OK"
    assert exchange(a) == b""


def test_redirect_to_a_resp3_connection(raw):
    target, tracked, other = resp3(raw), raw(), raw()
    target_id = client_id(target)
    assert exchange(tracked, "CLIENT", "TRACKING", "on", "REDIRECT", str(target_id)) == b"+OK\r\n"
    exchange(tracked, "GET", "z")
    assert other.cmd("SET", "z", "1") == "OK"
    assert exchange(target) == invalidate("z")


def test_broken_redirect_is_reported(raw):
    target, tracked, other = raw(), resp3(raw), raw()
    target_id = client_id(target)
    exchange(tracked, "CLIENT", "TRACKING", "on", "REDIRECT", str(target_id))
    exchange(tracked, "GET", "c")
    target.close()
    assert wait_for(lambda: f"id={target_id} " not in other.cmd("CLIENT", "LIST").decode())
    assert other.cmd("SET", "c", "1") == "OK"
    broken = b">2\r\n" + bulk("tracking-redir-broken") + b":%d\r\n" % target_id
    assert exchange(tracked) == broken
    assert exchange(tracked, "CLIENT", "TRACKINGINFO") == (
        b"%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n"
        + b"$8\r\nredirect\r\n:%d\r\n$8\r\nprefixes\r\n*0\r\n" % target_id)
    exchange(tracked, "GET", "c")
    assert exchange(tracked, "SET", "c", "2") == b"+OK\r\n" + broken
    assert tracked.cmd("CLIENT", "GETREDIR") == target_id


def test_bcast_prefixes_batch_sorted_keys_per_prefix(raw):
    b, other = resp3(raw), raw()
    assert exchange(b, "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "b", "PREFIX", "a") == b"+OK\r\n"
    assert other.cmd("MSET", "a2", "1", "b1", "1", "c", "1", "a1", "1") == "OK"
    assert exchange(b) == invalidate("a1", "a2") + invalidate("b1")
    # Broadcasts go out once per event loop (after the pipelined PING here), own changes included.
    assert exchange(b, "SET", "a3", "1") == b"+OK\r\n"
    assert exchange(b) == invalidate("a3")
    assert other.cmd("DEL", "zz") == 0
    assert exchange(b) == b""
    # Prefixes add up; NOLOOP spares it its own changes.
    assert exchange(b, "CLIENT", "TRACKING", "on", "BCAST", "NOLOOP", "PREFIX", "c") == b"+OK\r\n"
    assert exchange(b, "MSET", "c1", "1", "a9", "1") == b"+OK\r\n"
    assert other.cmd("SET", "c1", "2") == "OK"
    assert exchange(b) == invalidate("c1")
    assert info_tracking(other)["tracking_total_prefixes"] == 3


def test_bcast_without_prefix_sees_every_key(raw):
    b, other = resp3(raw), raw()
    exchange(b, "CLIENT", "TRACKING", "on", "BCAST")
    other.cmd("MSET", "y", "1", "x", "1")
    assert exchange(b) == invalidate("x", "y")


def test_noloop_default_mode(raw):
    n, other = resp3(raw), raw()
    exchange(n, "CLIENT", "TRACKING", "on", "NOLOOP")
    exchange(n, "GET", "q")
    assert exchange(n, "SET", "q", "1") == b"+OK\r\n"
    exchange(n, "GET", "q")
    other.cmd("SET", "q", "2")
    assert exchange(n) == invalidate("q")


def test_optin_and_optout(raw):
    p, other = resp3(raw), raw()
    exchange(p, "CLIENT", "TRACKING", "on", "OPTIN")
    exchange(p, "GET", "u")
    other.cmd("SET", "u", "1")
    assert exchange(p) == b"", "OPTIN: reads are not tracked without CLIENT CACHING YES"
    assert call(p, "CLIENT", "CACHING", "yes") == b"+OK\r\n"
    assert exchange(p, "CLIENT", "TRACKINGINFO") == (
        b"%3\r\n$5\r\nflags\r\n~3\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n"
        b"$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n")
    assert call(p, "CLIENT", "CACHING", "yes") == b"+OK\r\n"
    exchange(p, "GET", "u")
    exchange(p, "GET", "w")
    other.cmd("MSET", "u", "2", "w", "2")
    assert exchange(p) == invalidate("u"), "CACHING YES covers the next command only"
    assert exchange(p, "CLIENT", "TRACKING", "on", "OPTOUT") == (
        b"-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, "
        b"and then re-enabling it with a different mode.\r\n")
    exchange(p, "CLIENT", "TRACKING", "off")
    exchange(p, "CLIENT", "TRACKING", "on", "OPTOUT")
    assert call(p, "CLIENT", "CACHING", "no") == b"+OK\r\n"
    exchange(p, "GET", "u")
    exchange(p, "GET", "w")
    other.cmd("MSET", "u", "3", "w", "3")
    assert exchange(p) == invalidate("w")


def test_caching_holds_through_multi(raw):
    p, other = resp3(raw), raw()
    exchange(p, "CLIENT", "TRACKING", "on", "OPTIN")
    assert call(p, "CLIENT", "CACHING", "yes") == b"+OK\r\n"
    assert call(p, "MULTI") == b"+OK\r\n"
    assert call(p, "GET", "u") == b"+QUEUED\r\n"
    assert call(p, "GET", "w") == b"+QUEUED\r\n"
    assert exchange(p, "EXEC") == b"*2\r\n_\r\n_\r\n"
    other.cmd("MSET", "u", "1", "w", "1")
    assert exchange(p) == invalidate("u") + invalidate("w")


def test_multi_exec_invalidations_follow_the_exec_reply(raw):
    a, other = resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    assert call(a, "MULTI") == b"+OK\r\n"
    for args in (("GET", "k"), ("SET", "k", "v"), ("GET", "j")):
        assert call(a, *args) == b"+QUEUED\r\n"
    assert exchange(a, "EXEC") == b"*3\r\n_\r\n+OK\r\n_\r\n" + invalidate("k")
    other.cmd("SET", "j", "1")
    assert exchange(a) == invalidate("j")


def test_scripts_track_the_keys_they_read(raw):
    a, other = resp3(raw), raw()
    exchange(a, "CLIENT", "TRACKING", "on")
    script = "redis.call('set', KEYS[1], 'x'); return redis.call('get', KEYS[1])"
    assert exchange(a, "EVAL", script, "1", "m") == bulk("x")
    other.cmd("SET", "m", "2")
    assert exchange(a) == invalidate("m")


def test_errors_match_redis(raw):
    a = resp3(raw)
    cases = [
        (("CLIENT", "TRACKING", "on", "PREFIX", "a"), "ERR PREFIX option requires BCAST mode to be enabled"),
        (("CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"), "ERR You can't specify both OPTIN mode and OPTOUT mode"),
        (("CLIENT", "TRACKING", "on", "BCAST", "OPTIN"), "ERR OPTIN and OPTOUT are not compatible with BCAST"),
        (("CLIENT", "TRACKING", "on", "REDIRECT", "999999"), "ERR The client ID you want redirect to does not exist"),
        (("CLIENT", "TRACKING", "on", "REDIRECT", "x"), "ERR value is not an integer or out of range"),
        (("CLIENT", "TRACKING", "maybe"), "ERR syntax error"),
        (("CLIENT", "TRACKING", "on", "foo"), "ERR syntax error"),
        (("CLIENT", "TRACKING", "on", "REDIRECT"), "ERR syntax error"),
        (("CLIENT", "TRACKING"), "ERR wrong number of arguments for 'client|tracking' command"),
        (("CLIENT", "CACHING"), "ERR wrong number of arguments for 'client|caching' command"),
        (("CLIENT", "TRACKINGINFO", "x"), "ERR wrong number of arguments for 'client|trackinginfo' command"),
        (("CLIENT", "CACHING", "yes"), "ERR CLIENT CACHING can be called only when the client is in tracking "
                                       "mode with OPTIN or OPTOUT mode enabled"),
        (("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab", "PREFIX", "a"),
         "ERR Prefix 'ab' overlaps with another provided prefix 'a'. Prefixes for a single client must not overlap."),
    ]
    for args, error in cases:
        assert exchange(a, *args) == b"-" + error.encode() + b"\r\n", args
    assert exchange(a, "CLIENT", "TRACKING", "on") == b"+OK\r\n"
    assert exchange(a, "CLIENT", "TRACKING", "on", "BCAST") == (
        b"-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then "
        b"re-enabling it with a different mode.\r\n")
    assert exchange(a, "CLIENT", "CACHING", "yes") == (
        b"-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.\r\n")
    assert exchange(a, "CLIENT", "CACHING", "no") == (
        b"-ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.\r\n")
    assert exchange(a, "CLIENT", "CACHING", "maybe") == b"-ERR syntax error\r\n"
    exchange(a, "CLIENT", "TRACKING", "off")
    exchange(a, "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "a")
    assert exchange(a, "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "ab") == (
        b"-ERR Prefix 'ab' overlaps with an existing prefix 'a'. Prefixes for a single client must not overlap.\r\n")


def test_trackinginfo_getredir_and_reset(raw):
    a = raw()
    off = b"*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
    assert exchange(a, "CLIENT", "TRACKINGINFO") == off
    assert exchange(a, "CLIENT", "GETREDIR") == b":-1\r\n"
    exchange(a, "CLIENT", "TRACKING", "on", "BCAST", "NOLOOP", "PREFIX", "x", "PREFIX", "a")
    assert exchange(a, "CLIENT", "TRACKINGINFO") == (
        b"*6\r\n$5\r\nflags\r\n*3\r\n$2\r\non\r\n$5\r\nbcast\r\n$6\r\nnoloop\r\n$8\r\nredirect\r\n:0\r\n"
        b"$8\r\nprefixes\r\n*2\r\n$1\r\na\r\n$1\r\nx\r\n")
    assert exchange(a, "CLIENT", "GETREDIR") == b":0\r\n"
    assert exchange(a, "RESET") == b"+RESET\r\n"
    assert exchange(a, "CLIENT", "TRACKINGINFO") == off


def test_info_counts_clients_keys_items_and_prefixes(raw):
    a, b, other = resp3(raw), resp3(raw), raw()
    base = info_tracking(other)["tracking_clients"]
    exchange(a, "CLIENT", "TRACKING", "on")
    exchange(b, "CLIENT", "TRACKING", "on")
    exchange(a, "MGET", "k1", "k2")
    exchange(b, "GET", "k1")
    fields = info_tracking(other)
    assert fields["tracking_clients"] == base + 2
    assert (fields["tracking_total_keys"], fields["tracking_total_items"]) == (2, 3)
    other.cmd("SET", "k1", "v")
    fields = info_tracking(other)
    assert (fields["tracking_total_keys"], fields["tracking_total_items"]) == (1, 1)
    exchange(a, "CLIENT", "TRACKING", "off")
    b.close()
    assert wait_for(lambda: info_tracking(other)["tracking_clients"] == base)


def test_table_bound_invalidates_entries_over_it(server, raw):
    a, other = resp3(raw), raw()
    old = other.cmd("CONFIG", "GET", "tracking-table-max-keys")[1]
    assert other.cmd("CONFIG", "SET", "tracking-table-max-keys", "2") == "OK"
    try:
        exchange(a, "CLIENT", "TRACKING", "on")
        exchange(a, "GET", "t1")
        exchange(a, "GET", "t2")
        # The third key puts the table over its bound; the next command brings it back (Redis picks a key
        # at random, fallow the oldest: either way one reader is told as if the key changed).
        got = exchange(a, "GET", "t3")
        assert got in (NULL3 + invalidate(k) for k in ("t1", "t2", "t3")), got
        assert info_tracking(other)["tracking_total_keys"] == 2
    finally:
        other.cmd("CONFIG", "SET", "tracking-table-max-keys", old)


@pytest.mark.memcache
@pytest.mark.fallow_only
def test_memcached_writes_invalidate_resp_readers(raw, mcraw):
    # fallow's memcached listener shares the default keyspace: a RESP reader's cache hears of its writes.
    a, mc = resp3(raw), mcraw()
    exchange(a, "CLIENT", "TRACKING", "on")
    exchange(a, "GET", "mk")
    mc.send(b"set mk 0 0 1\r\nx\r\n")
    assert mc.readline() == b"STORED"
    assert exchange(a) == invalidate("mk")


def test_client_list_shows_tracking_flags_and_redirection(raw):
    a, target = raw(), raw()
    target_id = client_id(target)

    def fields():
        line = a.cmd("CLIENT", "INFO").decode().strip()
        return dict(part.split("=", 1) for part in line.split(" "))

    assert (fields()["flags"], fields()["redir"]) == ("N", "-1")
    exchange(a, "CLIENT", "TRACKING", "on", "BCAST", "REDIRECT", str(target_id))
    assert (fields()["flags"], fields()["redir"]) == ("tB", str(target_id))
    exchange(a, "CLIENT", "TRACKING", "off")
    exchange(a, "CLIENT", "TRACKING", "on")
    assert (fields()["flags"], fields()["redir"]) == ("t", "0")


def test_evicted_keys_are_invalidated(server_factory):
    s = server_factory(maxmemory="10mb", maxmemory_policy="allkeys-lru", tier2_size=0)
    with RawConn(port=s.port, timeout=10) as tracker, RawConn(port=s.port, timeout=10) as writer:
        tracker.send(encode("HELLO", "3"))
        tracker.read_until(b"modules\r\n*0\r\n")
        exchange(tracker, "CLIENT", "TRACKING", "on")
        tracked = [f"t{i}" for i in range(100)]
        for key in tracked:
            writer.cmd("SET", key, "x" * 1000)
        exchange(tracker, "MGET", *tracked)
        # 30 MB more through a 10 MB limit: the tracked keys are evicted on the way.
        fill = b"".join(encode("SET", f"f{i}", "x" * 1000) for i in range(30000))
        writer.send(fill + encode("PING"))
        writer.read_until(b"+PONG\r\n", timeout=30)
        pushes = exchange(tracker)
        invalidated = set(re.findall(rb">2\r\n\$10\r\ninvalidate\r\n\*1\r\n\$\d+\r\n(t\d+)\r\n", pushes))
        evicted = {key.encode() for key in tracked if writer.cmd("EXISTS", key) == 0}
        assert evicted, "the fill evicted tracked keys"
        assert invalidated == evicted
