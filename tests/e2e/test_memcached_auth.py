"""memcached authentication (docs/memcached.md, "Authentication"): the listener stays closed while the server
requires authentication and memcache-auth is no (also when that changes at run time); with memcache-auth yes,
binary SASL PLAIN and text `set` credentials map onto ACL users, whose command and key permissions apply to
every memcached request; memcache-tenant changes need @admin; multi-gets are bounded by bytes, not keys.

Every test starts its own fallow (loopback only, bounded loops)."""
from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess

import pytest
from pymemcache.client.base import Client as MemcacheClient

from helpers import HOST, Err, RawConn, wait_for

pytestmark = [pytest.mark.fallow_only]

PASSWORD = "s3cret"
SASL_LIST_MECHS, SASL_AUTH, SASL_STEP = 0x20, 0x21, 0x22
BIN_GET, BIN_SET, BIN_FLUSH = 0x00, 0x01, 0x08
AUTH_ERROR = 0x20


def admin_conn(server) -> RawConn:
    c = RawConn(port=server.port)
    if server.password:
        assert c.cmd("AUTH", server.password) == "OK"
    return c


def info_field(conn: RawConn, section: str, name: str) -> str:
    found = re.search(rf"^{name}:(\S*)", conn.cmd("INFO", section).decode(), re.M)
    assert found, name
    return found.group(1)


def info_fallow(conn: RawConn, name: str) -> str:
    return info_field(conn, "fallow", name)


def mc_stats(conn: RawConn) -> dict[str, str]:
    conn.send(b"stats\r\n")
    lines = conn.read_until(b"END\r\n").decode().splitlines()
    return {line.split()[1]: line.split()[2] for line in lines if line.startswith("STAT ")}


def refused(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return False
    except OSError:
        return True


def serves(port: int) -> bool:
    try:
        with RawConn(port=port, timeout=1) as c:
            c.send(b"version\r\n")
            return c.readline().startswith(b"VERSION")
    except (OSError, TimeoutError, ConnectionError):
        return False


def binary_request(opcode: int, key: bytes = b"", value: bytes = b"", extras: bytes = b"") -> bytes:
    body = len(extras) + len(key) + len(value)
    header = struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0, body, 0x1234, 0)
    return header + extras + key + value


def binary_response(conn: RawConn) -> tuple[int, bytes]:
    """(status, value) of one response."""
    header = conn.read_exact(24)
    _, _, keylen, extlen, _, status, bodylen, opaque, _ = struct.unpack(">BBHBBHIIQ", header)
    assert opaque == 0x1234
    body = conn.read_exact(bodylen)
    return status, body[extlen + keylen:]


def text_auth(conn: RawConn, user: str, password: str) -> bytes:
    payload = f"{user} {password}".encode()
    conn.send(b"set auth 0 0 %d\r\n%s\r\n" % (len(payload), payload))
    return conn.readline()


def sasl_plain(conn: RawConn, user: str, password: str, authzid: str = "") -> tuple[int, bytes]:
    conn.send(binary_request(SASL_AUTH, b"PLAIN", f"{authzid}\0{user}\0{password}".encode()))
    return binary_response(conn)


@pytest.fixture
def pw_server(server_factory):
    """requirepass and memcache-auth yes, with a RESP key to protect."""
    s = server_factory(requirepass=PASSWORD, memcache_auth="yes")
    with admin_conn(s) as admin:
        assert admin.cmd("SET", "canary", "alive") == "OK"
    return s


# ------------------------------------------------------------------------------------- listener gating
def test_listener_absent_with_requirepass_and_no_memcache_auth(server_factory):
    s = server_factory(requirepass=PASSWORD)
    assert refused(s.mc_port)
    log = s.logtext()
    assert "memcached listener not started" in log and "--memcache-auth yes" in log, log
    with admin_conn(s) as admin:
        assert info_fallow(admin, "memcache_listener") == "closed"
        assert info_fallow(admin, "memcache_listener_closed_reason") == "auth_required_memcache_auth_no"
        assert admin.cmd("CONFIG", "GET", "memcache-auth") == [b"memcache-auth", b"no"]
        # Enabling memcached authentication opens it.
        assert admin.cmd("CONFIG", "SET", "memcache-auth", "yes") == "OK"
        assert wait_for(lambda: not refused(s.mc_port), 3.0)
        assert info_fallow(admin, "memcache_listener") == "open"
        assert isinstance(admin.cmd("CONFIG", "SET", "memcache-auth", "maybe"), Err)


def test_runtime_requirepass_closes_the_listener_and_its_connections(server_factory):
    s = server_factory()
    with RawConn(port=s.mc_port) as open_conn, admin_conn(s) as admin:
        open_conn.send(b"set k 0 0 1\r\nx\r\n")
        assert open_conn.readline() == b"STORED"
        assert admin.cmd("CONFIG", "SET", "requirepass", PASSWORD) == "OK"
        assert open_conn.is_closed(3.0), "the unauthenticated memcached connection stays open"
        assert wait_for(lambda: refused(s.mc_port), 3.0)
        assert wait_for(lambda: "memcached listener closed" in s.logtext(), 3.0), s.logtext()
        assert admin.cmd("AUTH", PASSWORD) == "OK"
        assert info_fallow(admin, "memcache_listener_closures") == "1"
        # Turning authentication off again reopens it on the same port.
        assert admin.cmd("CONFIG", "SET", "requirepass", "") == "OK"
        assert wait_for(lambda: serves(s.mc_port), 3.0)


def test_acl_setuser_closes_the_listener_and_deluser_reopens_it(server_factory):
    s = server_factory()
    assert serves(s.mc_port)
    with admin_conn(s) as admin:
        assert admin.cmd("ACL", "SETUSER", "shop", "on", ">pw", "~shop:*", "+@all") == "OK"
        assert wait_for(lambda: refused(s.mc_port), 3.0)
        assert admin.cmd("ACL", "DELUSER", "shop") == 1
        assert wait_for(lambda: serves(s.mc_port), 3.0)


# ------------------------------------------------------------------------------------- authentication
def test_every_protocol_is_refused_before_auth(pw_server):
    with RawConn(port=pw_server.mc_port) as text:
        for request in (b"get canary\r\n", b"mg canary v\r\n", b"flush_all\r\n", b"stats\r\n",
                        b"delete canary\r\n"):
            text.send(request)
            assert text.readline() == b"CLIENT_ERROR unauthenticated", request
    with RawConn(port=pw_server.mc_port) as binary:
        for opcode, key in ((BIN_GET, b"canary"), (BIN_FLUSH, b"")):
            binary.send(binary_request(opcode, key))
            assert binary_response(binary) == (AUTH_ERROR, b"Auth failure.")
    with admin_conn(pw_server) as admin:
        assert admin.cmd("GET", "canary") == b"alive"


def test_text_set_authenticates(pw_server):
    with RawConn(port=pw_server.mc_port) as conn:
        assert text_auth(conn, "default", "wrong") == b"CLIENT_ERROR authentication failure"
        conn.send(b"get canary\r\n")
        assert conn.readline() == b"CLIENT_ERROR unauthenticated"
        assert text_auth(conn, "default", PASSWORD) == b"STORED"
        conn.send(b"get canary\r\n")
        assert conn.read_until(b"END\r\n") == b"VALUE canary 0 5\r\nalive\r\nEND\r\n"
        stats = mc_stats(conn)
        assert (stats["auth_cmds"], stats["auth_errors"]) == ("2", "1")
        assert int(stats["unauthenticated_cmds"]) == 1
    with admin_conn(pw_server) as admin:
        # Counted and logged like a failed RESP AUTH.
        assert info_field(admin, "stats", "acl_access_denied_auth") == "1"
        entry = admin.cmd("ACL", "LOG", "1")[0]
        fields = dict(zip(entry[::2], entry[1::2]))
        assert (fields[b"reason"], fields[b"object"]) == (b"auth", b"memcached-set-auth")
    # pymemcache has no authentication of its own: the first set carries the credentials.
    client = MemcacheClient((HOST, pw_server.mc_port), default_noreply=False, timeout=5)
    try:
        assert client.set("auth", f"default {PASSWORD}") is True
        assert client.get("canary") == b"alive"
    finally:
        client.close()


def test_binary_sasl_plain(pw_server):
    with RawConn(port=pw_server.mc_port) as conn:
        conn.send(binary_request(SASL_LIST_MECHS))
        assert binary_response(conn) == (0, b"PLAIN")
        assert sasl_plain(conn, "default", "wrong") == (AUTH_ERROR, b"Auth failure.")
        conn.send(binary_request(SASL_AUTH, b"CRAM-MD5", b"x"))
        assert binary_response(conn)[0] == AUTH_ERROR
        conn.send(binary_request(SASL_STEP, b"PLAIN", b"x"))
        assert binary_response(conn)[0] == AUTH_ERROR
        conn.send(binary_request(BIN_GET, b"canary"))
        assert binary_response(conn)[0] == AUTH_ERROR
        assert sasl_plain(conn, "default", PASSWORD, authzid="default") == (0, b"Authenticated")
        conn.send(binary_request(BIN_GET, b"canary"))
        assert binary_response(conn) == (0, b"alive")
        conn.send(binary_request(BIN_SET, b"bin", b"v1", extras=b"\0" * 8))
        assert binary_response(conn)[0] == 0
    with admin_conn(pw_server) as admin:
        assert admin.cmd("GET", "bin") == b"v1"
        assert info_fallow(admin, "memcache_auth_errors") == "3"


def test_libmemcached_binary_sasl(pw_server):
    tool = shutil.which("memccat") or shutil.which("memcat")
    if tool is None:
        pytest.skip("libmemcached-tools not installed")
    server = f"{HOST}:{pw_server.mc_port}"

    def cat(password: str) -> subprocess.CompletedProcess:
        return subprocess.run([tool, "--binary", f"--servers={server}", "--username=default",
                               f"--password={password}", "canary"],
                              capture_output=True, text=True, timeout=10)

    good = cat(PASSWORD)
    if "SASL" in good.stderr and "support" in good.stderr.lower():
        pytest.skip(f"libmemcached built without SASL: {good.stderr.strip()}")
    assert good.returncode == 0 and good.stdout.strip() == "alive", (good.stdout, good.stderr)
    bad = cat("wrong")
    assert bad.returncode != 0 and "alive" not in bad.stdout


# ------------------------------------------------------------------------------------- permissions
def test_acl_user_keys_and_commands_apply_to_memcached(pw_server):
    with admin_conn(pw_server) as admin:
        # +info: memcached `stats` needs INFO, which Redis 7.0 puts in @dangerous
        assert admin.cmd("ACL", "SETUSER", "shop", "on", ">shop-pw", "~shop:*", "+@all", "-@admin",
                         "-@dangerous", "+info") == "OK"
        assert admin.cmd("SET", "shop:cart", "3") == "OK"
    with RawConn(port=pw_server.mc_port) as text:
        assert text_auth(text, "shop", "shop-pw") == b"STORED"
        text.send(b"get shop:cart\r\n")
        assert text.read_until(b"END\r\n") == b"VALUE shop:cart 0 1\r\n3\r\nEND\r\n"
        for request in (b"get canary\r\n", b"get shop:cart canary\r\n", b"mg canary v\r\n",
                        b"set canary 0 0 4\r\ndead\r\n", b"ms canary 4\r\ndead\r\n",
                        b"delete canary\r\n", b"incr canary 1\r\n", b"touch canary 1\r\n",
                        b"flush_all\r\n"):
            text.send(request)
            assert text.readline() == b"CLIENT_ERROR permission denied", request
        text.send(b"set shop:new 0 0 2\r\nok\r\n")
        assert text.readline() == b"STORED"
        assert int(mc_stats(text)["permission_denied_cmds"]) == 9
    with admin_conn(pw_server) as admin:
        assert info_field(admin, "stats", "acl_access_denied_key") == "8"
        assert info_field(admin, "stats", "acl_access_denied_cmd") == "1"  # flush_all
    with RawConn(port=pw_server.mc_port) as binary:
        assert sasl_plain(binary, "shop", "shop-pw") == (0, b"Authenticated")
        binary.send(binary_request(BIN_GET, b"canary"))
        assert binary_response(binary) == (AUTH_ERROR, b"Permission denied.")
        binary.send(binary_request(BIN_FLUSH))
        assert binary_response(binary) == (AUTH_ERROR, b"Permission denied.")
        binary.send(binary_request(BIN_GET, b"shop:new"))
        assert binary_response(binary) == (0, b"ok")
    with admin_conn(pw_server) as admin:
        assert admin.cmd("GET", "canary") == b"alive"
        assert admin.cmd("DBSIZE") == 3


def test_flush_all_needs_dangerous(pw_server):
    with admin_conn(pw_server) as admin:
        assert admin.cmd("ACL", "SETUSER", "writer", "on", ">pw", "~*", "+@all", "-@dangerous") == "OK"
    with RawConn(port=pw_server.mc_port) as conn:
        assert text_auth(conn, "writer", "pw") == b"STORED"
        conn.send(b"flush_all\r\n")
        assert conn.readline() == b"CLIENT_ERROR permission denied"
    with RawConn(port=pw_server.mc_port) as conn:
        assert text_auth(conn, "default", PASSWORD) == b"STORED"
        conn.send(b"flush_all\r\n")
        assert conn.readline() == b"OK"
    with admin_conn(pw_server) as admin:
        assert admin.cmd("DBSIZE") == 0


def test_memcache_tenant_change_needs_admin(pw_server):
    with admin_conn(pw_server) as admin:
        assert admin.cmd("ACL", "SETUSER", "shop", "on", ">pw", "~shop:*", "+@all", "-@admin",
                         "-@dangerous") == "OK"
        assert admin.cmd("ACL", "SETUSER", "ops", "on", ">pw", "~*", "+@all", "-@admin",
                         "+config") == "OK"
        for user in ("shop", "ops"):
            with RawConn(port=pw_server.port) as conn:
                assert conn.cmd("AUTH", user, "pw") == "OK"
                reply = conn.cmd("CONFIG", "SET", "memcache-tenant", "other")
                assert isinstance(reply, Err) and reply.startswith("NOPERM"), (user, reply)
        with RawConn(port=pw_server.port) as ops:
            assert ops.cmd("AUTH", "ops", "pw") == "OK"
            assert ops.cmd("CONFIG", "SET", "hz", "20") == "OK", "+config still sets other settings"
        assert admin.cmd("CONFIG", "GET", "memcache-tenant") == [b"memcache-tenant", b"default"]
        assert info_field(admin, "stats", "acl_access_denied_cmd") == "2"
        entry = admin.cmd("ACL", "LOG", "1")[0]
        fields = dict(zip(entry[::2], entry[1::2]))
        assert (fields[b"object"], fields[b"username"]) == (b"config|set", b"ops")
        assert admin.cmd("CONFIG", "SET", "memcache-tenant", "other") == "OK"
    assert wait_for(lambda: "memcache-tenant changed" in pw_server.logtext(), 3.0), pw_server.logtext()


# ------------------------------------------------------------------------------------- multi-get
def test_multi_get_takes_thousands_of_keys(server_factory):
    s = server_factory()
    client = MemcacheClient((HOST, s.mc_port), default_noreply=False, timeout=10)
    try:
        values = {f"k{index}": f"v{index}" for index in range(2000)}
        assert client.set_many(values) == []
        found = client.get_many(list(values))
        assert len(found) == 2000 and found["k1999"] == b"v1999"
    finally:
        client.close()
    with RawConn(port=s.mc_port, timeout=10) as raw:
        raw.send(b"get " + b" ".join(b"k%d" % index for index in range(10_000)) + b"\r\n")
        reply = raw.read_until(b"END\r\n", timeout=10)
        assert reply.count(b"VALUE ") == 2000
        # Bounded by bytes: a get line over 2 MiB is refused and the connection closed.
        raw.send(b"get " + b"x" * 200 + (b" " + b"y" * 200) * 11_000 + b"\r\n")
        assert raw.read_until_closed(10).startswith(b"CLIENT_ERROR line too long")


def test_tenant_recipe_user_does_normal_work(pw_server):
    """docs/tenants.md's recipe (`+@all -@admin -@dangerous`) keeps data commands, transactions and pub/sub."""
    import redis

    with admin_conn(pw_server) as admin:
        assert admin.cmd("ACL", "SETUSER", "web", "on", ">pw", "~*", "&*", "+@all", "-@admin",
                         "-@dangerous") == "OK"
    client = redis.Redis(host=HOST, port=pw_server.port, username="web", password="pw",
                         decode_responses=True, socket_timeout=5)
    try:
        assert client.set("web:a", "1") and client.incr("web:a") == 2
        assert client.hset("web:h", mapping={"f": "v"}) == 1 and client.hgetall("web:h") == {"f": "v"}
        assert client.lpush("web:l", "x", "y") == 2 and client.expire("web:l", 100)
        with client.pipeline(transaction=True) as pipe:
            assert pipe.set("web:b", "2").get("web:b").execute() == [True, "2"]
        assert client.publish("web:events", "hi") == 0
        assert sorted(client.scan_iter("web:*")) == ["web:a", "web:b", "web:h", "web:l"]
        for denied in (lambda: client.flushall(), lambda: client.config_set("hz", "20"),
                       lambda: client.acl_setuser("evil", enabled=True)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                denied()
    finally:
        client.close()
