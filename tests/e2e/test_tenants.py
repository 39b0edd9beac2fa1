"""Tenants (docs/tenants.md): ACL users and the memcached listener mapped to tenants, private keyspaces,
shared tenants, TENANT SET/GET/LIST, INFO tenants, per-tenant hits and misses, and (when the elastic
controller is present) the OOM reply a persistent tenant gets when only persistent data is left.

Every test here uses a private fallow started with tenants on the command line."""
from __future__ import annotations

import re
import subprocess
import time

import pytest
import redis
from pymemcache.client.base import Client as MemcacheClient

from helpers import HOST, Err, RawConn, ServerProc, fallow_bin, wait_for

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

TENANTS = ["alpha:100", "beta:200", "gamma:300:ephemeral:yes", "vault:100:persistent", "mc:100"]
INFO_LINE = re.compile(
    r"^tenant_(?P<name>[^:]+):id=(?P<id>\d+),weight=(?P<weight>\d+),kind=(?P<kind>ephemeral|persistent),"
    r"shared=(?P<shared>yes|no),tier2=(?P<tier2>yes|no),resident_bytes=(?P<resident_bytes>\d+),share=(?P<share>[0-9.]+),"
    r"fairness=(?P<fairness>[0-9.]+),hits=(?P<hits>\d+),misses=(?P<misses>\d+),"
    r"evicted_keys=(?P<evicted_keys>\d+),evicted_bytes=(?P<evicted_bytes>\d+)$")
PERSISTENT_OOM = ("OOM command not allowed: no room for persistent data of tenant 'vault' "
                  "(the pool is full of persistent data)")


class TenantServer(ServerProc):
    """A private fallow with extra command-line flags."""

    def __init__(self, flags: list[str]):
        super().__init__("fallow")
        self.flags = flags

    def argv(self):
        return super().argv() + self.flags


def start(flags: list[str]) -> TenantServer:
    server = TenantServer(flags)
    try:
        return server.start()
    except Exception:
        server.cleanup()
        raise


@pytest.fixture(scope="module")
def tenant_server():
    flags = [arg for tenant in TENANTS for arg in ("--tenant", tenant)]
    # Tenant users make authentication required: memcached clients then authenticate (as `default`, which
    # has no password here) instead of finding the listener closed.
    server = start(flags + ["--memcache-tenant", "mc", "--shards", "2", "--memcache-auth", "yes"])
    yield server
    server.cleanup()


@pytest.fixture
def admin(tenant_server):
    """The default user; its FLUSHALL empties the common keyspace. Every tenant is emptied per test."""
    client = redis.Redis(host=HOST, port=tenant_server.port, decode_responses=True, socket_timeout=5)
    for tenant in TENANTS:
        name = tenant.split(":")[0]
        client.acl_setuser(name, enabled=True, nopass=True, keys=["*"], channels=["*"],
                           commands=["+@all"])
    yield client
    for tenant in TENANTS:
        name = tenant.split(":")[0]
        with as_user(tenant_server, name) as user:
            user.flushall()
    client.flushall()
    client.close()


def as_user(server: ServerProc, user: str, **kw) -> redis.Redis:
    return redis.Redis(host=HOST, port=server.port, username=user, password="x",
                       decode_responses=True, socket_timeout=5, **kw)


@pytest.fixture
def users(tenant_server, admin):
    made = []

    def make(name: str) -> redis.Redis:
        client = as_user(tenant_server, name)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def pairs(reply) -> dict:
    """A field/value reply as a dict: a map in RESP3, a flat array in RESP2."""
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def tenant_get(client: redis.Redis, name: str) -> dict:
    return pairs(client.execute_command("TENANT", "GET", name))


def info_text(client: redis.Redis, *sections: str) -> str:
    """INFO as the server writes it (redis-py would parse it)."""
    with RawConn(port=client.connection_pool.connection_kwargs["port"]) as conn:
        return conn.cmd("INFO", *sections).decode()


def info_tenants(client: redis.Redis) -> dict[str, dict]:
    text = info_text(client, "tenants")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    parsed = {}
    for line in lines:
        match = INFO_LINE.match(line)
        assert match, f"malformed INFO tenants line: {line!r}"
        parsed[match["name"]] = match.groupdict()
    return parsed


# ------------------------------------------------------------------ keyspaces
def test_users_of_different_tenants_do_not_see_each_others_keys(users, admin):
    alpha, beta = users("alpha"), users("beta")
    assert alpha.set("k", "a") and alpha.set("only-alpha", "1")
    assert beta.set("k", "b")
    admin.set("k", "default")
    assert alpha.get("k") == "a" and beta.get("k") == "b" and admin.get("k") == "default"
    assert beta.get("only-alpha") is None
    assert beta.exists("only-alpha") == 0 and alpha.exists("only-alpha") == 1
    assert sorted(alpha.keys("*")) == ["k", "only-alpha"]
    assert beta.keys("*") == ["k"]
    assert sorted(alpha.scan_iter("*")) == ["k", "only-alpha"]
    assert list(beta.scan_iter("*")) == ["k"]
    assert alpha.dbsize() == 2 and beta.dbsize() == 1 and admin.dbsize() == 1
    assert beta.randomkey() == "k"
    assert alpha.flushall()
    assert alpha.dbsize() == 0
    assert beta.get("k") == "b", "FLUSHALL of one tenant leaves the others"
    assert admin.get("k") == "default"


def test_databases_move_and_swap_inside_the_namespace(users, admin):
    alpha, beta = users("alpha"), users("beta")
    alpha.set("moved", "1")
    assert alpha.move("moved", 3)
    with RawConn(port=alpha.connection_pool.connection_kwargs["port"]) as raw:
        assert raw.cmd("AUTH", "alpha", "x") == "OK"
        assert raw.cmd("SELECT", "3") == "OK"
        assert raw.cmd("GET", "moved") == b"1"
        assert raw.cmd("COPY", "moved", "copied", "DB", "4") == 1
        assert raw.cmd("SWAPDB", "3", "5") == "OK"
        assert raw.cmd("DBSIZE") == 0
        assert raw.cmd("SELECT", "5") == "OK"
        assert raw.cmd("GET", "moved") == b"1"
        assert raw.cmd("INFO", "keyspace").count(b"db") == 2  # db4 and db5 of alpha's namespace
    with RawConn(port=beta.connection_pool.connection_kwargs["port"]) as other:
        assert other.cmd("AUTH", "beta", "x") == "OK"
        for db in ("3", "4", "5"):
            assert other.cmd("SELECT", db) == "OK"
            assert other.cmd("DBSIZE") == 0
        assert other.cmd("INFO", "keyspace") == b"# Keyspace\r\n"
    assert admin.execute_command("INFO", "keyspace").get("db5") is None


def test_a_shared_tenant_sees_the_default_keyspace(users, admin):
    gamma, alpha = users("gamma"), users("alpha")
    admin.set("common", "from-default")
    assert gamma.get("common") == "from-default"
    gamma.set("written-by-gamma", "1")
    assert admin.get("written-by-gamma") == "1"
    assert alpha.get("common") is None
    assert tenant_get(admin, "gamma")["shared"] == "yes"


def test_watch_and_blocking_pops_stay_in_the_namespace(tenant_server, users):
    alpha, beta = users("alpha"), users("beta")
    with alpha.pipeline() as pipe:
        pipe.watch("w")
        beta.set("w", "changed by beta")
        pipe.multi()
        pipe.set("w", "alpha")
        assert pipe.execute() == [True], "another tenant's key of the same name is not the watched one"
    with RawConn(port=tenant_server.port) as waiter:
        assert waiter.cmd("AUTH", "alpha", "x") == "OK"
        waiter.send(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nlist\r\n$1\r\n2\r\n")
        time.sleep(0.2)
        beta.lpush("list", "for-beta")
        time.sleep(0.2)
        alpha.lpush("list", "for-alpha")
        assert waiter.read_reply(timeout=3) == [b"list", b"for-alpha"]
    assert beta.lrange("list", 0, -1) == ["for-beta"]


def test_pubsub_is_not_partitioned(users):
    alpha, beta = users("alpha"), users("beta")
    pubsub = alpha.pubsub()
    pubsub.subscribe("news")
    assert wait_for(lambda: pubsub.get_message(timeout=0.1), 2.0)["type"] == "subscribe"
    assert beta.publish("news", "hello") == 1
    message = wait_for(lambda: pubsub.get_message(timeout=0.1), 2.0)
    assert message["data"] == "hello"
    pubsub.close()


# ------------------------------------------------------------------ TENANT command
def test_tenant_list_get_set(admin, users):
    names = admin.execute_command("TENANT", "LIST")
    assert names[0] == "default"
    assert [t.split(":")[0] for t in TENANTS] == names[1:len(TENANTS) + 1]
    beta = tenant_get(admin, "beta")
    assert beta["weight"] == 200 and beta["kind"] == "ephemeral" and beta["shared"] == "no"
    assert list(beta) == ["id", "weight", "kind", "shared", "tier2", "resident_bytes", "share", "fairness",
                          "hits", "misses", "evicted_keys", "evicted_bytes"]
    # r_i = w_i / Σw over the tenants holding bytes; an idle tenant shows the share it would get on joining
    every = [tenant_get(admin, name) for name in names]
    active_weight = sum(t["weight"] for t in every if int(t["resident_bytes"]) > 0)
    joining = 0 if int(beta["resident_bytes"]) > 0 else 200
    assert float(beta["share"]) == pytest.approx(200 / (active_weight + joining), abs=1e-6)
    vault = tenant_get(admin, "vault")
    assert vault["kind"] == "persistent"

    assert admin.execute_command("TENANT", "SET", "beta", "WEIGHT", "250") == "OK"
    beta = tenant_get(admin, "beta")
    assert beta["weight"] == 250 and beta["kind"] == "ephemeral", "options left out keep their value"
    assert admin.execute_command("TENANT", "SET", "beta", "weight", "200", "kind", "ephemeral",
                                 "shared", "no") == "OK"
    default = tenant_get(admin, "default")
    assert default["id"] == 0 and default["shared"] == "yes" and default["weight"] == 100


def test_tenant_set_creates_with_defaults_and_rebinds_connected_users(admin, users):
    admin.acl_setuser("late", enabled=True, nopass=True, keys=["*"], commands=["+@all"])
    late = users("late")
    admin.set("seen-before", "1")
    assert late.get("seen-before") == "1", "a user without a tenant is the default tenant"
    assert admin.execute_command("TENANT", "SET", "late") == "OK"
    created = tenant_get(admin, "late")
    assert (created["weight"], created["kind"], created["shared"], created["tier2"]) == (
        100, "ephemeral", "no", "yes")
    assert late.get("seen-before") is None, "the connected user moved to its own tenant"
    late.set("mine", "1")
    assert admin.get("mine") is None
    # a tenant holding data cannot move keyspace
    with pytest.raises(redis.ResponseError, match="cannot change keyspace"):
        admin.execute_command("TENANT", "SET", "late", "SHARED", "yes")
    late.flushall()


def test_tenant_errors(c):
    assert c.cmd("TENANT", "SET", "x", "WEIGHT", "0") == Err(
        "ERR weight must be an integer 1..1000000, got '0'")
    assert c.cmd("TENANT", "SET", "x", "WEIGHT", "heavy") == Err(
        "ERR weight must be an integer 1..1000000, got 'heavy'")
    assert c.cmd("TENANT", "SET", "x", "KIND", "durable") == Err(
        "ERR kind must be ephemeral or persistent, got 'durable'")
    assert c.cmd("TENANT", "SET", "x", "SHARED", "maybe") == Err(
        "ERR shared must be yes or no, got 'maybe'")
    assert c.cmd("TENANT", "SET", "x", "TIER2", "maybe") == Err(
        "ERR tier2 must be yes or no, got 'maybe'")
    assert c.cmd("TENANT", "SET", "x", "KIND", "persistent", "TIER2", "no") == Err(
        "ERR a persistent tenant keeps tier 2 (TIER2 no is for ephemeral tenants)")
    assert c.cmd("TENANT", "SET", "x", "WEIGHT") == Err("ERR syntax error")
    assert c.cmd("TENANT", "SET", "x", "COLOR", "red") == Err("ERR syntax error")
    assert c.cmd("TENANT", "SET", "a:b").startswith("ERR invalid tenant name 'a:b'")
    assert c.cmd("TENANT", "GET", "nobody") == Err("ERR no such tenant 'nobody'")
    assert b"x" not in c.cmd("TENANT", "LIST"), "failed SETs created nothing"
    assert c.cmd("TENANT", "SET", "default", "SHARED", "no") == Err(
        "ERR the default tenant lives in the common keyspace")
    assert c.cmd("TENANT", "GET") == Err("ERR wrong number of arguments for 'tenant|get' command")
    assert c.cmd("TENANT", "BOGUS") == Err("ERR unknown subcommand 'BOGUS'. Try TENANT HELP.")
    assert c.cmd("TENANT") == Err("ERR wrong number of arguments for 'tenant' command")
    help_lines = c.cmd("TENANT", "HELP")
    assert any(line.startswith("SET <name>") for line in help_lines)


def test_tenant_tier2_switch_round_trip(admin):
    assert tenant_get(admin, "alpha")["tier2"] == "yes", "tier 2 is on unless declared off"
    assert admin.execute_command("TENANT", "SET", "blocks", "WEIGHT", "40", "TIER2", "no") == "OK"
    blocks = tenant_get(admin, "blocks")
    assert (blocks["weight"], blocks["kind"], blocks["tier2"]) == (40, "ephemeral", "no")
    assert info_tenants(admin)["blocks"]["tier2"] == "no"
    # Options left out keep their value; a persistent tenant needs tier 2 back first.
    assert admin.execute_command("TENANT", "SET", "blocks", "WEIGHT", "50") == "OK"
    assert tenant_get(admin, "blocks")["tier2"] == "no"
    with pytest.raises(redis.ResponseError, match="a persistent tenant keeps tier 2"):
        admin.execute_command("TENANT", "SET", "blocks", "KIND", "persistent")
    assert tenant_get(admin, "blocks")["kind"] == "ephemeral", "a refused SET changes nothing"
    assert admin.execute_command("TENANT", "SET", "blocks", "KIND", "persistent", "TIER2", "yes") == "OK"
    blocks = tenant_get(admin, "blocks")
    assert (blocks["kind"], blocks["tier2"]) == ("persistent", "yes")
    assert admin.execute_command("TENANT", "SET", "blocks", "KIND", "ephemeral", "tier2", "NO") == "OK"
    assert tenant_get(admin, "blocks")["tier2"] == "no"


def test_tier2_declared_off_on_the_command_line():
    server = start(["--tenant", "fs:100:ephemeral:no:no", "--tenant", "old:100:ephemeral:no"])
    try:
        with RawConn(port=server.port) as conn:
            fs = dict(zip(*[iter(conn.cmd("TENANT", "GET", "fs"))] * 2))
            old = dict(zip(*[iter(conn.cmd("TENANT", "GET", "old"))] * 2))
            assert (fs[b"kind"], fs[b"tier2"]) == (b"ephemeral", b"no")
            assert old[b"tier2"] == b"yes", "a declaration without the field keeps tier 2"
    finally:
        server.cleanup()


@pytest.fixture
def c(tenant_server, admin):
    with RawConn(port=tenant_server.port) as conn:
        yield conn


def test_tenant_is_an_admin_command(tenant_server, admin):
    admin.acl_setuser("plain", enabled=True, nopass=True, keys=["*"], commands=["+@all", "-@admin"])
    with RawConn(port=tenant_server.port) as conn:
        assert conn.cmd("AUTH", "plain", "x") == "OK"
        reply = conn.cmd("TENANT", "LIST")
        assert isinstance(reply, Err) and reply.startswith("NOPERM")


# ------------------------------------------------------------------ INFO and counters
def test_info_tenants_lines(admin, users):
    users("alpha").set("k", "v" * 1000)
    assert admin.execute_command("TENANT", "SET", "fresh", "WEIGHT", "50", "KIND", "persistent") == "OK"
    tenants = info_tenants(admin)
    assert list(tenants)[:len(TENANTS) + 1] == ["default", *[t.split(":")[0] for t in TENANTS]]
    assert tenants["gamma"]["shared"] == "yes" and tenants["vault"]["kind"] == "persistent"
    assert int(tenants["alpha"]["resident_bytes"]) > 0
    assert tenants["fresh"]["weight"] == "50" and tenants["fresh"]["kind"] == "persistent"
    assert int(tenants["fresh"]["resident_bytes"]) == 0 and float(tenants["fresh"]["fairness"]) == 0
    # the shares of the tenants holding bytes add up to 1; an idle one shows what it would get on joining
    holding = [t for t in tenants.values() if int(t["resident_bytes"]) > 0]
    assert sum(float(t["share"]) for t in holding) == pytest.approx(1.0, abs=1e-4)
    active_weight = sum(int(t["weight"]) for t in holding)
    assert float(tenants["fresh"]["share"]) == pytest.approx(50 / (active_weight + 50), abs=1e-5)
    default_info = info_text(admin)
    assert "# Tenants" in default_info and "tenant_alpha:id=" in default_info
    assert "tenant_beta:id=" in info_text(admin, "all")


def test_hits_and_misses_count_per_tenant(admin, users):
    alpha, beta = users("alpha"), users("beta")
    before = {name: tenant_get(admin, name) for name in ("alpha", "beta")}
    alpha.set("here", "1")
    alpha.incr("counter")
    alpha.append("text", "x")
    alpha.setrange("text", 3, "y")
    for _ in range(3):
        assert alpha.get("here") == "1"
    assert alpha.get("missing") is None
    assert beta.get("here") is None
    after = {name: tenant_get(admin, name) for name in ("alpha", "beta")}
    assert after["alpha"]["hits"] - before["alpha"]["hits"] == 3
    assert after["alpha"]["misses"] - before["alpha"]["misses"] == 1, "writes count no misses"
    assert after["beta"]["hits"] == before["beta"]["hits"]
    assert after["beta"]["misses"] - before["beta"]["misses"] == 1
    info = info_tenants(admin)["alpha"]
    assert int(info["hits"]) == after["alpha"]["hits"]


# ------------------------------------------------------------------ memcached listener
@pytest.mark.memcache
def test_memcache_tenant_routes_the_listener(tenant_server, admin, users):
    mc = MemcacheClient((HOST, tenant_server.mc_port), connect_timeout=5, timeout=5,
                        default_noreply=False)
    try:
        assert admin.config_get("memcache-tenant") == {"memcache-tenant": "mc"}
        assert mc.set("item", b"from-memcache") is True
        assert users("mc").get("item") == "from-memcache"
        assert admin.get("item") is None
        assert mc.get("item") == b"from-memcache"
        assert int(tenant_get(admin, "mc")["hits"]) >= 2
        assert admin.config_set("memcache-tenant", "default")
        assert mc.get("item") is None, "the open connection follows CONFIG SET"
        admin.set("shared-item", "x")
        assert mc.get("shared-item") == b"x"
        with pytest.raises(redis.ResponseError):
            admin.config_set("memcache-tenant", "bad:name")
    finally:
        admin.config_set("memcache-tenant", "mc")
        mc.close()


# ------------------------------------------------------------------ configuration
def test_tenants_from_a_toml_file_and_flags(tmp_path):
    config = tmp_path / "fallow.toml"
    config.write_text('tenants = ["filed:300:persistent", "both:1"]\nmemcache-tenant = "filed"\n')
    server = start(["--config", str(config), "--tenant", "both:7:ephemeral:yes"])
    try:
        with RawConn(port=server.port) as conn:
            assert conn.cmd("TENANT", "LIST") == [b"default", b"filed", b"both"]
            filed = dict(zip(*[iter(conn.cmd("TENANT", "GET", "filed"))] * 2))
            assert filed[b"weight"] == 300 and filed[b"kind"] == b"persistent"
            both = dict(zip(*[iter(conn.cmd("TENANT", "GET", "both"))] * 2))
            assert both[b"weight"] == 7 and both[b"shared"] == b"yes", "flags come after the file"
            assert conn.cmd("CONFIG", "GET", "memcache-tenant") == [b"memcache-tenant", b"filed"]
    finally:
        server.cleanup()


@pytest.mark.parametrize("bad", ["solo", "x:0", "x:1:durable", "x:1:ephemeral:maybe",
                                 "default:1:ephemeral:no", "x:1:ephemeral:no:maybe",
                                 "x:1:persistent:no:no", "x:1:ephemeral:no:no:extra"])
def test_bad_tenant_flags_stop_startup(bad):
    result = subprocess.run([str(fallow_bin()), "--port", "0", "--memcache-port", "0",
                             "--unixsocket", "", "--tenant", bad],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 2, result.stderr
    assert "tenant" in result.stderr


# ------------------------------------------------------------------ persistent data and the pool
def elastic_available() -> bool:
    """True when this build has the elastic controller (its flags are in --help)."""
    result = subprocess.run([str(fallow_bin()), "--help"], capture_output=True, text=True, timeout=10)
    return "--elastic-max" in result.stdout


def test_persistent_tenant_gets_oom_after_ephemeral_data_is_evicted():
    if not elastic_available():
        pytest.skip("no elastic controller in this build (no --elastic-max); "
                    "crates/fallow-server/tests/tenants.rs covers this in process")
    pool_bytes = 32 << 20
    value = "x" * (32 << 10)
    # Without tier 2 persistent bytes are a floor; with it they leave RAM as stubs (test_tier2.py).
    server = start(["--tenant", "alpha:100", "--tenant", "vault:100:persistent", "--shards", "2",
                    "--memory-mode", "elastic", "--elastic-max", str(pool_bytes), "--tier2-size", "0"])
    try:
        with RawConn(port=server.port) as admin, RawConn(port=server.port) as alpha, \
                RawConn(port=server.port) as vault:
            for name, conn in (("alpha", alpha), ("vault", vault)):
                assert admin.cmd("ACL", "SETUSER", name, "on", "nopass", "~*", "+@all") == "OK"
                assert conn.cmd("AUTH", name, "x") == "OK"

            def target_bytes() -> int:
                status = admin.cmd("ELASTIC", "STATUS")
                return int(dict(zip(status[::2], status[1::2]))[b"pool_target_bytes"])

            assert wait_for(lambda: 0 < target_bytes() <= pool_bytes, 5.0)
            alpha_keys = (pool_bytes // 2) // len(value)
            for index in range(alpha_keys):
                assert alpha.cmd("SET", f"a{index}", value) == "OK"
            stored, refusal = 0, None
            for index in range(2 * pool_bytes // len(value)):
                reply = vault.cmd("SET", f"v{index}", value)
                if reply != "OK":
                    refusal = reply
                    break
                stored += 1
            assert refusal == Err(PERSISTENT_OOM)
            assert alpha.cmd("DBSIZE") < alpha_keys, "ephemeral keys went first"
            assert vault.cmd("DBSIZE") == stored, "no persistent key was evicted"
            alpha_info = dict(zip(*[iter(admin.cmd("TENANT", "GET", "alpha"))] * 2))
            vault_info = dict(zip(*[iter(admin.cmd("TENANT", "GET", "vault"))] * 2))
            assert alpha_info[b"evicted_keys"] > 0 and vault_info[b"evicted_keys"] == 0
    finally:
        server.cleanup()
