import pytest
import redis

from helpers import HOST, Err, RawConn

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
