import time

import pytest
import redis

from helpers import HOST, TARGET, Err, RawConn, encode

pytestmark = pytest.mark.resp

NOAUTH = "NOAUTH Authentication required."
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


@pytest.fixture
def pw_server(server_factory):
    return server_factory(requirepass="s3cret")


def test_requirepass_noauth(pw_server):
    with RawConn(port=pw_server.port) as c:
        assert c.cmd("GET", "k") == Err(NOAUTH)
        assert c.cmd("SET", "k", "v") == Err(NOAUTH)
        assert c.cmd("AUTH", "wrong") == Err(WRONGPASS)
        assert c.cmd("AUTH", "s3cret") == "OK"
        assert c.cmd("SET", "k", "v") == "OK"
        assert c.cmd("AUTH", "default", "s3cret") == "OK"
        assert c.cmd("AUTH", "default", "nope") == Err(WRONGPASS)
        assert c.cmd("ACL", "WHOAMI") == b"default"


def test_hello_auth(pw_server):
    with RawConn(port=pw_server.port) as c:
        err = c.cmd("HELLO", "3")
        assert err == Err("NOAUTH HELLO must be called with the client already authenticated, "
                          "otherwise the HELLO AUTH <user> <pass> option can be used to "
                          "authenticate the client and select the RESP protocol version at the "
                          "same time")
        assert c.cmd("HELLO", "3", "AUTH", "default", "bad") == Err(WRONGPASS)
        rep = c.cmd("HELLO", "3", "AUTH", "default", "s3cret")
        assert rep[b"proto"] == 3 and rep[b"server"] == b"redis"
        assert c.cmd("PING") == "PONG"


def test_redis_py_with_password(pw_server):
    for proto in (2, 3):
        cl = redis.Redis(host=HOST, port=pw_server.port, password="s3cret", protocol=proto,
                         socket_timeout=5, decode_responses=True)
        assert cl.set("x", proto) is True
        assert cl.get("x") == str(proto)
        cl.close()


def test_auth_without_password_configured(c):
    assert c.cmd("AUTH", "x") == Err(
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?")
    # the default user is "nopass" here: any password is accepted
    assert c.cmd("AUTH", "default", "x") == "OK"


def test_acl_setuser_whoami_list_deluser(raw):
    admin = raw()
    try:
        assert admin.cmd("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all") == "OK"
        lst = [l.decode() for l in admin.cmd("ACL", "LIST")]
        assert any(l.startswith("user default on") for l in lst)
        alice = [l for l in lst if l.startswith("user alice ")]
        assert len(alice) == 1 and " on " in alice[0] and "~*" in alice[0] and "+@all" in alice[0]
        assert sorted(admin.cmd("ACL", "USERS")) == [b"alice", b"default"]
        u = raw()
        assert u.cmd("ACL", "WHOAMI") == b"default"
        assert u.cmd("AUTH", "alice", "wrong") == Err(WRONGPASS)
        assert u.cmd("AUTH", "alice", "pw") == "OK"
        assert u.cmd("ACL", "WHOAMI") == b"alice"
        assert u.cmd("SET", "k", "v") == "OK"
        assert admin.cmd("ACL", "SETUSER", "bob", "off", ">pw2") == "OK"
        assert raw().cmd("AUTH", "bob", "pw2") == Err(WRONGPASS)  # disabled user
        assert admin.cmd("ACL", "DELUSER", "alice", "bob", "nobody") == 2
        # deleting a user disconnects its connections
        assert u.is_closed(2.0)
        assert raw().cmd("AUTH", "alice", "pw") == Err(WRONGPASS)
        assert admin.cmd("ACL", "DELUSER", "default") == Err(
            "ERR The 'default' user cannot be removed")
    finally:
        raw().cmd("ACL", "DELUSER", "alice", "bob")


def test_acl_restricted_user(raw):
    admin = raw()
    try:
        assert admin.cmd("ACL", "SETUSER", "ro", "on", ">pw", "~cache:*", "+get") == "OK"
        admin.cmd("SET", "cache:1", "v")
        u = raw()
        assert u.cmd("AUTH", "ro", "pw") == "OK"
        assert u.cmd("GET", "cache:1") == b"v"
        e = u.cmd("SET", "cache:1", "x")
        assert e == Err("NOPERM this user has no permissions to run the 'set' command")
        e = u.cmd("GET", "other")
        assert e == Err("NOPERM this user has no permissions to access one of the keys used as arguments")
    finally:
        raw().cmd("ACL", "DELUSER", "ro")


@pytest.mark.fallow_only
def test_txn_commit_and_exec_check_permissions_again(raw):
    """Permissions taken away after a write was queued deny that write when the transaction commits (as
    EXEC does); the transaction's other writes apply."""
    admin = raw()
    try:
        assert admin.cmd("ACL", "SETUSER", "w", "on", ">pw", "~*", "+@all") == "OK"
        txn, multi = raw(), raw()
        for u in (txn, multi):
            assert u.cmd("AUTH", "w", "pw") == "OK"
        assert txn.cmd("TXN.BEGIN") == "OK"
        assert txn.cmd("SET", "a", "1") == "QUEUED"
        assert txn.cmd("INCR", "n") == "QUEUED"
        assert multi.cmd("MULTI") == "OK"
        assert multi.cmd("SET", "b", "1") == "QUEUED"
        assert admin.cmd("ACL", "SETUSER", "w", "-set") == "OK"
        denied = Err("NOPERM this user has no permissions to run the 'set' command")
        assert txn.cmd("TXN.COMMIT") == [denied, 1]
        assert multi.cmd("EXEC") == [denied]
        assert admin.cmd("MGET", "a", "b", "n") == [None, None, b"1"]
    finally:
        raw().cmd("ACL", "DELUSER", "w")


# --------------------------------------------------------------------------- ACL LOG, denial counters
def _entries(conn, *count):
    return [dict(zip(entry[::2], entry[1::2])) for entry in conn.cmd("ACL", "LOG", *count)]


def _stat(conn, name):
    text = conn.cmd("INFO", "stats").decode()
    return int(text.split(f"\r\n{name}:")[1].split("\r\n")[0])


def test_acl_log_records_denials_grouped_like_redis(server_factory):
    s = server_factory()
    with RawConn(port=s.port) as admin:
        assert admin.cmd("ACL", "SETUSER", "bob", "on", ">pw", "~foo*", "&news", "+get", "+multi",
                         "+exec", "+publish") == "OK"
        with RawConn(port=s.port) as u:
            assert u.cmd("AUTH", "bob", "wrong") == Err(WRONGPASS)
            assert u.cmd("AUTH", "bob", "wrong") == Err(WRONGPASS)
            assert u.cmd("HELLO", "3", "AUTH", "nobody", "x") == Err(WRONGPASS)
            assert u.cmd("AUTH", "bob", "pw") == "OK"
            assert u.cmd("GET", "bar").startswith("NOPERM")
            assert u.cmd("DEL", "foo").startswith("NOPERM")
            assert u.cmd("PUBLISH", "sports", "x").startswith("NOPERM")
            assert u.cmd("MULTI") == "OK"
            assert u.cmd("GET", "baz").startswith("NOPERM")
        entries = _entries(admin)
        seen = [(e[b"reason"], e[b"context"], e[b"object"], e[b"username"], int(e[b"count"]))
                for e in entries]
        assert seen == [
            (b"key", b"multi", b"baz", b"bob", 1),
            (b"channel", b"toplevel", b"sports", b"bob", 1),
            (b"command", b"toplevel", b"del", b"bob", 1),
            (b"key", b"toplevel", b"bar", b"bob", 1),
            (b"auth", b"toplevel", b"HELLO", b"nobody", 1),  # the command as sent, as Redis logs it
            (b"auth", b"toplevel", b"AUTH", b"bob", 2),
        ], seen
        newest = entries[0]
        assert float(newest[b"age-seconds"]) < 5
        assert b"user=" in newest[b"client-info"] and b"addr=" in newest[b"client-info"]
        assert len(_entries(admin, 2)) == 2
        assert _entries(admin, -1) == []
        assert admin.cmd("ACL", "LOG", "x") == Err("ERR value is not an integer or out of range")
        if TARGET == "fallow":  # Redis 7.2's INFO fields; 7.0 has none
            assert _stat(admin, "acl_access_denied_auth") == 3
            assert _stat(admin, "acl_access_denied_cmd") == 1
            assert _stat(admin, "acl_access_denied_key") == 2
            assert _stat(admin, "acl_access_denied_channel") == 1
        assert admin.cmd("ACL", "LOG", "RESET") == "OK"
        assert _entries(admin) == []


@pytest.mark.fallow_only
def test_acl_log_is_bounded_and_has_redis_7_2_fields(server_factory):
    s = server_factory(acllog_max_len=3)
    with RawConn(port=s.port) as admin:
        with RawConn(port=s.port) as u:
            for user in range(5):
                assert u.cmd("AUTH", f"user{user}", "x") == Err(WRONGPASS)
        entries = _entries(admin, 100)
        assert [e[b"username"] for e in entries] == [b"user4", b"user3", b"user2"]
        assert [e[b"entry-id"] for e in entries] == [4, 3, 2]
        assert all(e[b"timestamp-created"] == e[b"timestamp-last-updated"] > 0 for e in entries)
        assert admin.cmd("CONFIG", "SET", "acllog-max-len", "1") == "OK"
        assert len(_entries(admin, 100)) == 1
        assert _stat(admin, "acl_access_denied_auth") == 5
        assert admin.cmd("CONFIG", "RESETSTAT") == "OK"
        assert _stat(admin, "acl_access_denied_auth") == 0


@pytest.mark.fallow_only
def test_failed_auths_are_slowed_per_connection(server_factory):
    s = server_factory(requirepass="s3cret", auth_failures_before_delay=2, auth_failure_delay_ms=200,
                       auth_failure_delay_max_ms=400)
    with RawConn(port=s.port) as guesser, RawConn(port=s.port) as other:
        took = []
        for attempt in range(5):
            started = time.monotonic()
            assert guesser.cmd("AUTH", f"guess{attempt}") == Err(WRONGPASS)
            took.append(time.monotonic() - started)
        assert max(took[:2]) < 0.15, took  # the free failures
        assert 0.19 <= took[2] < 0.35 and 0.39 <= took[3] < 0.6 and 0.39 <= took[4] < 0.6, took
        # pipelined guesses wait too: one reply per delay
        started = time.monotonic()
        guesser.send(encode("AUTH", "a") + encode("AUTH", "b"))
        assert guesser.read_reply() == Err(WRONGPASS) and guesser.read_reply() == Err(WRONGPASS)
        assert time.monotonic() - started >= 0.78
        # another connection is not slowed, and the right password still works on the slowed one
        started = time.monotonic()
        assert other.cmd("AUTH", "s3cret") == "OK"
        assert other.cmd("PING") == "PONG"
        assert time.monotonic() - started < 0.15
        assert guesser.cmd("AUTH", "s3cret") == "OK"
        assert _stat(other, "acl_access_denied_auth") == 7
    assert "failed authentications" in s.logtext()


def test_acl_dryrun_tells_whether_a_user_may_run_a_command(c):
    assert c.cmd("ACL", "SETUSER", "dry", "on", "nopass", "+get", "~k*") == "OK"
    try:
        assert c.cmd("ACL", "DRYRUN", "dry", "get", "k1") == "OK"
        assert c.cmd("ACL", "DRYRUN", "dry", "get", "x1") == b"This user has no permissions to access the 'x1' key"
        assert c.cmd("ACL", "DRYRUN", "dry", "set", "k1", "v") == \
            b"This user has no permissions to run the 'set' command"
        assert c.cmd("ACL", "DRYRUN", "nouser", "get", "k") == Err("ERR User 'nouser' not found")
        assert c.cmd("ACL", "DRYRUN", "dry", "nosuch") == Err("ERR Command 'nosuch' not found")
        assert c.cmd("ACL", "DRYRUN", "dry", "get") == Err("ERR wrong number of arguments for 'get' command")
        assert c.cmd("ACL", "DRYRUN", "dry") == Err("ERR wrong number of arguments for 'acl|dryrun' command")
    finally:
        c.cmd("ACL", "DELUSER", "dry")
