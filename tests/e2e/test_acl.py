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
        assert list(newest) == [b"count", b"reason", b"context", b"object", b"username", b"age-seconds",
                                b"client-info"]  # Redis 7.0's fields, in its order
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
def test_acl_log_is_bounded(server_factory):
    s = server_factory(acllog_max_len=3)
    with RawConn(port=s.port) as admin:
        with RawConn(port=s.port) as u:
            for user in range(5):
                assert u.cmd("AUTH", f"user{user}", "x") == Err(WRONGPASS)
        entries = _entries(admin, 100)
        assert [e[b"username"] for e in entries] == [b"user4", b"user3", b"user2"]
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


# --------------------------------------------------------------------------- rule language, Redis 7.0 texts
def _listed(conn, name):
    return next(line.decode() for line in conn.cmd("ACL", "LIST") if line.startswith(f"user {name} ".encode()))


def _sorted_tokens(text):
    return sorted(text.split(" "))


@pytest.fixture
def acl_users(c):
    """Deletes the users a test made on the shared server."""
    made = []
    yield made
    if made:
        c.cmd("ACL", "DELUSER", *made)


# (rules, ACL LIST line Redis 7.0.15 prints). Lines with several single commands are compared as token
# sets: Redis lists those in its command hash table's order, which changes from one start to the next.
LIST_CASES = [
    ([], "user u off resetchannels -@all"),
    (["reset"], "user u off sanitize-payload resetchannels -@all"),
    (["on", "nopass", "skip-sanitize-payload"], "user u on nopass skip-sanitize-payload resetchannels -@all"),
    (["+@all", "-get", "+get", "-config|set", "+config"], "user u off resetchannels +@all"),
    (["+config|get", "+config|set", "-config"], "user u off resetchannels -@all"),
    (["+@all", "-@read", "+get"], "user u off resetchannels +@all -@read +get"),
    (["+@all", "-@dangerous", "-@admin"], "user u off resetchannels +@all -@dangerous"),
    (["~a*", "%R~b*", "%W~c*", "%RW~d*", "%R~a*", "&ch", "&ch"],
     "user u off ~a* %R~b* %W~c* ~d* resetchannels &ch -@all"),
    (["allkeys", "allchannels", "allcommands"], "user u off ~* &* +@all"),
    (["~x", "resetkeys", "&y", "resetchannels", "+get", "nocommands"], "user u off resetchannels -@all"),
    (["%R"], "user u off %R~ resetchannels -@all"),
    (["+select|0", "+select|1", "+select|0"], "user u off resetchannels -@all +select|0 +select|1"),
    (["(~x* +set)", "(%R~y*", "&z", "+@hash", "-hget)"],
     "user u off resetchannels -@all (~x* resetchannels -@all +set) (%R~y* resetchannels &z -@all +@hash -hget)"),
    (["(+get)", "(+get)", "clearselectors", "(~a)"], "user u off resetchannels -@all (~a resetchannels -@all)"),
    (["+get", "+set", "+hset", "+config|get", "+client|id"],
     "user u off resetchannels -@all +set +hset +client|id +config|get +get"),
]


@pytest.mark.parametrize("rules,expected", LIST_CASES)
def test_acl_list_text_is_redis_7_0s(c, acl_users, rules, expected):
    acl_users.append("u")
    c.cmd("ACL", "DELUSER", "u")
    assert c.cmd("ACL", "SETUSER", "u", *rules) == "OK"
    line = _listed(c, "u")
    if len([t for t in expected.split(" ") if t[:1] in "+-" and not t.startswith(("+@", "-@"))]) > 1:
        assert _sorted_tokens(line) == _sorted_tokens(expected)
    else:
        assert line == expected
    # the listed rules, applied again, describe the same user
    assert c.cmd("ACL", "DELUSER", "u") == 1
    words = line.split(" ")[2:]
    assert c.cmd("ACL", "SETUSER", "u", *words) == "OK"
    assert _sorted_tokens(_listed(c, "u")) == _sorted_tokens(line)


def test_acl_list_greedy_categories_are_redis_7_0s(c, acl_users):
    acl_users.append("u")
    assert c.cmd("ACL", "SETUSER", "u", "-@all", "+@read", "+@write", "-@dangerous") == "OK"
    line = _listed(c, "u")
    assert line.startswith("user u off resetchannels -@all +@string +@hash +@geo +@blocking +@bitmap +@set "
                           "+@hyperloglog +@stream +@sortedset +@list +@keyspace "), line


SETUSER_ERRORS = [
    (["~*", "~x"], "Error in ACL SETUSER modifier '~x': Adding a pattern after the * pattern (or the 'allkeys' "
                   "flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty "
                   "list of patterns"),
    (["&*", "&x"], "Error in ACL SETUSER modifier '&x': Adding a pattern after the * pattern (or the "
                   "'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to "
                   "start with an empty list of channels"),
    (["+nosuch"], "Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL"),
    (["-@nosuch"], "Error in ACL SETUSER modifier '-@nosuch': Unknown command or category name in ACL"),
    (["+config|get|x"], "Error in ACL SETUSER modifier '+config|get|x': Allowing first-arg of a subcommand "
                        "is not supported"),
    (["+config|"], "Error in ACL SETUSER modifier '+config|': Syntax error"),
    (["+config|nosuch"], "Error in ACL SETUSER modifier '+config|nosuch': Unknown command or category name in ACL"),
    (["-select|0"], "Error in ACL SETUSER modifier '-select|0': Unknown command or category name in ACL"),
    (["<nope"], "Error in ACL SETUSER modifier '<nope': The password you are trying to remove from the user "
                "does not exist"),
    (["#abc"], "Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and "
               "contain only lowercase hexadecimal characters"),
    (["%X~x"], "Error in ACL SETUSER modifier '%X~x': Syntax error"),
    (["%RR~x"], "Error in ACL SETUSER modifier '%RR~x': Syntax error"),
    (["bogus"], "Error in ACL SETUSER modifier 'bogus': Syntax error"),
    (["(+get"], "Unmatched parenthesis in acl selector starting at '(+get'."),
    (["(+get", "~x"], "Unmatched parenthesis in acl selector starting at '(+get'."),
    (["(+nosuch)"], "Error in ACL SETUSER modifier '(+nosuch)': Unknown command or category name in ACL"),
    (["(on)"], "Error in ACL SETUSER modifier '(on)': Syntax error"),
]


@pytest.mark.parametrize("rules,error", SETUSER_ERRORS)
def test_acl_setuser_errors_are_redis_7_0s(c, acl_users, rules, error):
    acl_users.append("e")
    assert c.cmd("ACL", "SETUSER", "e", *rules) == Err("ERR " + error)
    assert c.cmd("ACL", "GETUSER", "e") is None, "a refused SETUSER creates nothing"


def test_acl_getuser_shape_is_redis_7_0s(c, acl_users):
    acl_users.append("g")
    assert c.cmd("ACL", "SETUSER", "g", "on", ">p1", "~a*", "%R~b*", "&ch", "+get", "(~x* +set)",
                 "(%W~y* &z +@hash -hget)") == "OK"
    reply = c.cmd("ACL", "GETUSER", "g")
    assert reply == [
        b"flags", [b"on"],
        b"passwords", [b"f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a"],
        b"commands", b"-@all +get",
        b"keys", b"~a* %R~b*",
        b"channels", b"&ch",
        b"selectors", [
            [b"commands", b"-@all +set", b"keys", b"~x*", b"channels", b""],
            [b"commands", b"-@all +@hash -hget", b"keys", b"%W~y*", b"channels", b"&z"],
        ],
    ]
    assert c.cmd("ACL", "GETUSER", "default") == [
        b"flags", [b"on", b"nopass"], b"passwords", [], b"commands", b"+@all", b"keys", b"~*",
        b"channels", b"&*", b"selectors", []]
    assert c.cmd("ACL", "GETUSER", "nosuch") is None


# fallow's own commands (docs/commands.md), which may sit in Redis categories of their choosing.
FALLOW_OWN = {b"shards", b"shardscan", b"elastic", b"tenant"}


def _redis_cat(c, category):
    return sorted(n for n in c.cmd("ACL", "CAT", category) if b"." not in n and n not in FALLOW_OWN)


def test_acl_cat_lists_redis_7_0s_categories_and_commands(c):
    cats = [x.decode() for x in c.cmd("ACL", "CAT")]
    assert cats[:21] == ["keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
                         "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking",
                         "dangerous", "connection", "transaction", "scripting"]
    assert _redis_cat(c, "hyperloglog") == [b"pfadd", b"pfcount", b"pfdebug", b"pfmerge",
                                                          b"pfselftest"]
    assert _redis_cat(c, "TRANSACTION") == [b"discard", b"exec", b"multi", b"unwatch", b"watch"]
    assert _redis_cat(c, "geo") == sorted(
        x.encode() for x in ["geoadd", "geodist", "geohash", "geopos", "georadius", "georadius_ro",
                             "georadiusbymember", "georadiusbymember_ro", "geosearch", "geosearchstore"])
    dangerous = set(c.cmd("ACL", "CAT", "dangerous"))
    assert {b"config|set", b"flushall", b"keys", b"sort", b"client|kill", b"acl|setuser"} <= dangerous
    assert b"config" not in dangerous and b"get" not in dangerous
    assert c.cmd("ACL", "CAT", "nosuch") == Err("ERR Unknown category 'nosuch'")


def test_key_permissions_follow_redis_key_specs(c, raw, acl_users):
    acl_users.append("kp")
    assert c.cmd("ACL", "SETUSER", "kp", "on", "nopass", "%R~r*", "%W~w*", "+set", "+get", "+copy",
                 "+lmove") == "OK"
    cases = [
        ("set w1 v", "OK"),
        ("set w1 v get", "This user has no permissions to access the 'w1' key"),
        ("get w1", "This user has no permissions to access the 'w1' key"),
        ("get r1", "OK"),
        ("copy r1 w1", "OK"),
        ("copy w1 r1", "This user has no permissions to access the 'w1' key"),
        ("lmove r1 w1 left left", "This user has no permissions to access the 'r1' key"),
    ]
    for command, expected in cases:
        got = c.cmd("ACL", "DRYRUN", "kp", *command.split(" "))
        assert got == (expected if expected == "OK" else expected.encode()), command
    with raw() as u:
        assert u.cmd("AUTH", "kp", "x") == "OK"
        assert u.cmd("SET", "w1", "v") == "OK"
        assert u.cmd("GET", "w1") == Err("NOPERM this user has no permissions to access one of the keys used "
                                         "as arguments")


def test_selectors_grant_a_command_with_its_keys(c, acl_users):
    acl_users.append("sel")
    assert c.cmd("ACL", "SETUSER", "sel", "on", "nopass", "~app:*", "+get", "(~cache:* +set +get)") == "OK"
    dry = lambda *a: c.cmd("ACL", "DRYRUN", "sel", *a)
    assert dry("get", "app:1") == "OK"
    assert dry("get", "cache:1") == "OK"
    assert dry("set", "cache:1", "v") == "OK"
    assert dry("set", "app:1", "v") == b"This user has no permissions to access the 'app:1' key"
    assert dry("del", "app:1") == b"This user has no permissions to run the 'del' command"
    assert dry("get", "other") == b"This user has no permissions to access the 'other' key"


def test_channel_permissions_and_pattern_exactness(c, raw, acl_users):
    acl_users.append("ch")
    assert c.cmd("ACL", "SETUSER", "ch", "on", "nopass", "+publish", "+subscribe", "+psubscribe", "+spublish",
                 "&news.*") == "OK"
    dry = lambda *a: c.cmd("ACL", "DRYRUN", "ch", *a)
    assert dry("publish", "news.a", "m") == "OK"
    assert dry("psubscribe", "news.*") == "OK"
    assert dry("psubscribe", "news.a") == b"This user has no permissions to access the 'news.a' channel"
    assert dry("subscribe", "news.a", "x") == b"This user has no permissions to access the 'x' channel"
    assert dry("spublish", "x", "m") == b"This user has no permissions to access the 'x' channel"
    assert dry("config", "get", "x") == b"This user has no permissions to run the 'config|get' command"
    with raw() as u:
        assert u.cmd("AUTH", "ch", "x") == "OK"
        assert u.cmd("PUBLISH", "other", "m") == Err(
            "NOPERM this user has no permissions to access one of the channels used as arguments")
        assert u.cmd("CONFIG", "GET", "x") == Err(
            "NOPERM this user has no permissions to run the 'config|get' command")


def test_subcommand_rules(c, acl_users):
    acl_users.append("sub")
    assert c.cmd("ACL", "SETUSER", "sub", "on", "nopass", "+config|get", "+select|0") == "OK"
    dry = lambda *a: c.cmd("ACL", "DRYRUN", "sub", *a)
    assert dry("config", "get", "maxmemory") == "OK"
    assert dry("config", "set", "maxmemory", "0") == b"This user has no permissions to run the 'config|set' command"
    assert dry("select", "0") == "OK"
    assert dry("select", "1") == b"This user has no permissions to run the 'select' command"


def test_acl_help_is_redis_7_0s(c):
    lines = c.cmd("ACL", "HELP")
    assert lines[0] == "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert [l for l in lines if not l.startswith(" ")] == [
        "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", "CAT [<category>]",
        "DELUSER <username> [<username> ...]", "DRYRUN <username> <command> [<arg> ...]", "GETUSER <username>",
        "GENPASS [<bits>]", "LIST", "LOAD", "LOG [<count> | RESET]", "SAVE",
        "SETUSER <username> <attribute> [<attribute> ...]", "USERS", "WHOAMI", "HELP"]


# --------------------------------------------------------------------------- ACL file
def test_acl_load_and_save_without_a_file(c):
    msg = ("ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the "
           "ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file "
           "set) in order to store users in the Redis configuration.")
    assert c.cmd("ACL", "LOAD") == Err(msg)
    assert c.cmd("ACL", "SAVE") == Err(msg)


def test_acl_file_load_save_all_or_nothing(server_factory, tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user default on nopass ~* &* +@all\nuser bob on >x ~k* +get\n")
    s = server_factory(aclfile=str(path))
    with RawConn(port=s.port) as c:
        assert _listed(c, "bob") == ("user bob on #2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 "
                                     "~k* resetchannels -@all +get")
        assert c.cmd("CONFIG", "GET", "aclfile") == [b"aclfile", str(path).encode()]
        assert c.cmd("CONFIG", "SET", "aclfile", "/x") == Err(
            "ERR CONFIG SET failed (possibly related to argument 'aclfile') - can't set immutable config")
        assert c.cmd("ACL", "SETUSER", "carol", "on", "%R~x", "(+set ~y)") == "OK"
        assert c.cmd("ACL", "SAVE") == "OK"
        assert path.read_text() == (
            "user bob on #2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 ~k* resetchannels -@all +get\n"
            "user carol on %R~x resetchannels -@all (~y resetchannels -@all +set)\n"
            "user default on nopass ~* &* +@all\n")
        with RawConn(port=s.port) as bob:
            assert bob.cmd("AUTH", "bob", "x") == "OK"
            path.write_text("user default on nopass ~* &* +@all\nuser bob on >x ~k* +get +nosuch -bar\n"
                            "user bob off\nfoo\nuser al ice\nuser z (+get\nuser q bogus %X~y\n")
            f = str(path)
            assert c.cmd("ACL", "LOAD") == Err(
                f"ERR {f}:2: Error in applying operation '+nosuch': Unknown command or category name in ACL. "
                f"{f}:2: Error in applying operation '-bar': Unknown command or category name in ACL. "
                f"WARNING: Duplicate user 'bob' found on line 3. {f}:4 should start with user keyword followed "
                f"by the username. {f}:5: Syntax error. {f}:6: Unmatched parenthesis in selector definition."
                f"{f}:7: Syntax error. WARNING: ACL errors detected, no change to the previously active ACL "
                "rules was performed")
            assert sorted(c.cmd("ACL", "USERS")) == [b"bob", b"carol", b"default"], "nothing changed"
            assert bob.cmd("PING") == Err("NOPERM this user has no permissions to run the 'ping' command")
            path.write_text("user default on nopass ~* &* +@all\n\n   \nuser bob on >y ~k*   +get +ping\n")
            assert c.cmd("ACL", "LOAD") == "OK"
            assert sorted(c.cmd("ACL", "USERS")) == [b"bob", b"default"]
            # Redis 7.0 frees every replaced user and closes its connections
            assert bob.is_closed(2.0)
        path.unlink()
        assert c.cmd("ACL", "LOAD") == Err(
            f"ERR Error loading ACLs, opening file '{path}': No such file or directory")


def test_acl_log_names_subcommands_and_contexts(server_factory):
    s = server_factory()
    with RawConn(port=s.port) as admin, RawConn(port=s.port) as u:
        assert admin.cmd("ACL", "SETUSER", "lg", "on", "nopass", "+config|get", "+multi", "+exec", "~k") == "OK"
        assert u.cmd("AUTH", "lg", "x") == "OK"
        assert u.cmd("CONFIG", "SET", "a", "b") == Err(
            "NOPERM this user has no permissions to run the 'config|set' command")
        assert u.cmd("MULTI") == "OK"
        assert u.cmd("GET", "k").startswith("NOPERM")
        assert u.cmd("CONFIG", "SET", "a", "b").startswith("NOPERM")
        seen = [(e[b"reason"], e[b"context"], e[b"object"], e[b"count"]) for e in _entries(admin)]
        assert seen == [(b"command", b"multi", b"config|set", 1), (b"command", b"multi", b"get", 1),
                        (b"command", b"toplevel", b"config|set", 1)]


def test_a_bad_acl_file_refuses_the_start(server_factory, tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user bob on +nosuch\n")
    with pytest.raises(RuntimeError):
        server_factory(aclfile=str(path))


def test_acl_log_context_lua(server_factory):
    s = server_factory()
    with RawConn(port=s.port) as admin, RawConn(port=s.port) as u:
        assert admin.cmd("ACL", "SETUSER", "lu", "on", "nopass", "+eval", "~*") == "OK"
        assert u.cmd("AUTH", "lu", "x") == "OK"
        err = u.cmd("EVAL", "return redis.call('set','k','v')", "0")
        assert err.startswith("ERR The user executing the script can't run this command or subcommand")
        seen = [(e[b"reason"], e[b"context"], e[b"object"], e[b"username"]) for e in _entries(admin)]
        assert seen == [(b"command", b"lua", b"set", b"lu")]


def test_setuser_names_the_first_bad_rule_even_after_binary_bytes(c):
    """Redis applies rules in order: a later bad rule is named even when an earlier one holds bytes that are
    not UTF-8 (fallow reads those as U+FFFD on a scratch copy, and never keeps them)."""
    assert c.cmd("ACL", "SETUSER", "binrules", "reset", b"&doR\xe9-oel", "segkrs|") == \
        Err("ERR Error in ACL SETUSER modifier 'segkrs|': Syntax error")
    assert c.cmd("ACL", "SETUSER", "binrules", "reset", b"~k\xe9", "+@all", "nosuchrule") == \
        Err("ERR Error in ACL SETUSER modifier 'nosuchrule': Syntax error")
    c.cmd("ACL", "DELUSER", "binrules")


@pytest.mark.fallow_only
def test_setuser_refuses_rules_that_are_not_utf8(c):
    """fallow's documented limit (docs/compat.md, ACL): Redis takes the bytes as a key pattern."""
    reply = c.cmd("ACL", "SETUSER", "binrules2", "on", b"~k\xe9")
    assert isinstance(reply, Err) and reply.endswith("': Syntax error")
    assert c.cmd("ACL", "GETUSER", "binrules2") is None, "the user was not created"
