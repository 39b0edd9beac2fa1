"""COMMAND (INFO, DOCS, LIST, COUNT, GETKEYS, GETKEYSANDFLAGS) against Redis 7.0.15's command table.

The expected replies are built from crates/fallow-server/src/command/info/redis_commands.json (what
scripts/gen-redis-commands.py took from a real redis-server), with the wire types Redis writes them in
(status vs bulk strings, sets, maps), for RESP2 and RESP3. Against redis-server this checks the data;
against fallow it checks that fallow answers Redis's bytes for every Redis command it lists. Only the
order of dict-ordered parts (the command list, a container's subcommands) is not compared: Redis walks a
hash table seeded at random on each start.
"""
import json

import pytest

from helpers import REPO_ROOT, TARGET, RawConn, encode

pytestmark = pytest.mark.resp

DATA = json.loads((REPO_ROOT / "crates/fallow-server/src/command/info/redis_commands.json").read_text())
REDIS = {cmd["name"]: cmd for cmd in DATA["commands"]}
for _cmd in DATA["commands"]:
    for _sub in _cmd.get("subcommands", []):
        REDIS[_sub["name"]] = _sub


# Redis commands fallow refuses (it keeps no snapshots, has no MONITOR): it lists them with its own rows
# (docs/compat.md, COMMAND), so they are compared with Redis's data only against redis-server.
OWN_ROWS = {"save", "bgsave", "bgrewriteaof"} if TARGET == "fallow" else set()


def is_redis_row(name):
    return name in REDIS and name not in OWN_ROWS


# ------------------------------------------------------------------ typed RESP (keeps the wire types)
def read_typed(c: RawConn):
    line = c.readline()
    kind, rest = line[:1].decode(), line[1:]
    if kind in "+-":
        return (kind, rest.decode())
    if kind == ":":
        return (":", int(rest))
    if kind == "$":
        if int(rest) < 0:
            return ("_", None)
        return ("$", c.read_exact(int(rest) + 2)[:-2].decode(errors="replace"))
    if kind == "=":  # verbatim text (CLIENT INFO, LATENCY DOCTOR ... in RESP3)
        return ("=", c.read_exact(int(rest) + 2)[:-2].decode(errors="replace"))
    if kind in ",#(":
        return (kind, rest.decode())
    if kind == "_":
        return ("_", None)
    if kind in "*~":
        if int(rest) < 0:
            return ("_", None)
        return (kind, [read_typed(c) for _ in range(int(rest))])
    if kind == "%":
        return ("%", [(read_typed(c), read_typed(c)) for _ in range(int(rest))])
    raise AssertionError(f"unexpected reply {line!r}")


def call(c: RawConn, *args):
    c.send(encode(*args))
    return read_typed(c)


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def conn(request, raw):
    c = raw()
    call(c, "HELLO", str(request.param))
    c.proto = request.param
    return c


# ------------------------------------------------------------------ Redis's reply, from the data
class Shape:
    def __init__(self, proto):
        self.resp3 = proto == 3

    def set(self, items):
        return ("~" if self.resp3 else "*", items)

    def map(self, pairs):
        if self.resp3:
            return ("%", pairs)
        return ("*", [item for pair in pairs for item in pair])

    def value(self, value):
        return (":", value) if isinstance(value, int) else ("$", value)

    def simple_set(self, names):
        return self.set([("+", name) for name in names])

    def key_spec(self, spec):
        pairs = []
        if "notes" in spec:
            pairs.append((("$", "notes"), ("$", spec["notes"])))
        pairs.append((("$", "flags"), self.simple_set(spec["flags"])))
        for part in ("begin_search", "find_keys"):
            search = spec[part]
            inner = self.map([(("$", k), self.value(v)) for k, v in search["spec"].items()])
            pairs.append((("$", part), self.map([(("$", "type"), ("$", search["type"])),
                                                 (("$", "spec"), inner)])))
        return self.map(pairs)

    def info(self, cmd, listed):
        subs = cmd.get("subcommands")
        return ("*", [
            ("$", cmd["name"]),
            (":", cmd["arity"]),
            self.simple_set(cmd["flags"]),
            (":", cmd["first_key"]),
            (":", cmd["last_key"]),
            (":", cmd["key_step"]),
            self.simple_set(cmd["acl_categories"]),
            self.set([("$", tip) for tip in cmd["tips"]]),
            self.set([self.key_spec(spec) for spec in cmd["key_specs"]]),
            self.set([]) if subs is None else
            ("*", [self.info(sub, listed) for sub in sorted_subs(subs, listed)]),
        ])

    def argument(self, arg):
        pairs = []
        for key, value in arg.items():
            if key == "flags":
                value = self.simple_set(value)
            elif key == "arguments":
                value = ("*", [self.argument(nested) for nested in value])
            else:
                value = self.value(value)
            pairs.append((("$", key), value))
        return self.map(pairs)

    def docs(self, cmd, listed):
        pairs = []
        for key, value in cmd["docs"].items():
            if key == "doc_flags":
                value = self.simple_set(value)
            elif key == "history":
                value = self.set([("*", [("$", since), ("$", change)]) for since, change in value])
            elif key == "arguments":
                value = ("*", [self.argument(arg) for arg in value])
            else:
                value = ("$", value)
            pairs.append((("$", key), value))
        if "subcommands" in cmd:
            subs = sorted_subs(cmd["subcommands"], listed)
            pairs.append((("$", "subcommands"),
                          self.map([(("$", sub["name"]), self.docs(sub, listed)) for sub in subs])))
        return self.map(pairs)


def sorted_subs(subs, listed):
    return sorted((sub for sub in subs if sub["name"] in listed), key=lambda sub: sub["name"])


# ------------------------------------------------------------------ the server's reply, dict order removed
def sort_info_subcommands(info):
    kind, fields = info
    if kind == "*" and fields[9][0] == "*":
        fields[9] = ("*", sorted((sort_info_subcommands(sub) for sub in fields[9][1]),
                                 key=lambda sub: sub[1][0][1]))
    return info


def pairs_of(reply):
    kind, items = reply
    return items if kind == "%" else list(zip(items[::2], items[1::2]))


def sort_docs_subcommands(docs, shape):
    pairs = pairs_of(docs)
    for i, (key, value) in enumerate(pairs):
        if key == ("$", "subcommands"):
            subs = sorted(((name, sort_docs_subcommands(sub, shape)) for name, sub in pairs_of(value)),
                          key=lambda pair: pair[0][1])
            pairs[i] = (key, shape.map(subs))
    return shape.map(pairs)


def listed_names(c):
    kind, names = call(c, "COMMAND", "LIST")
    assert kind == "*"
    return {name for _, name in names}


# ------------------------------------------------------------------ tests
def test_info_is_redis_for_every_redis_command(conn):
    listed = listed_names(conn)
    shape = Shape(conn.proto)
    checked = 0
    for name in sorted(listed):
        if not is_redis_row(name):
            continue  # one of fallow's own commands
        kind, [reply] = call(conn, "COMMAND", "INFO", name)
        assert kind == "*"
        assert sort_info_subcommands(reply) == shape.info(REDIS[name], listed), name
        checked += 1
    assert checked >= 150


def test_docs_are_redis_for_every_redis_command(conn):
    listed = listed_names(conn)
    shape = Shape(conn.proto)
    checked = 0
    for name in sorted(listed):
        if not is_redis_row(name):
            continue
        pairs = pairs_of(call(conn, "COMMAND", "DOCS", name))
        assert [key for key, _ in pairs] == [("$", name)]
        assert sort_docs_subcommands(pairs[0][1], shape) == shape.docs(REDIS[name], listed), name
        checked += 1
    assert checked >= 150


def test_count_info_and_docs_cover_the_top_level_commands(conn):
    listed = listed_names(conn)
    top = {name for name in listed if "|" not in name}
    assert call(conn, "COMMAND", "COUNT") == (":", len(top))
    kind, infos = call(conn, "COMMAND")
    assert kind == "*" and {info[1][0][1] for info in infos} == top
    kind, infos = call(conn, "COMMAND", "INFO")
    assert {info[1][0][1] for info in infos} == top
    docs = pairs_of(call(conn, "COMMAND", "DOCS"))
    assert {name for (_, name), _ in docs} == top
    for name in listed - top:
        assert name.split("|")[0] in top


def test_info_and_docs_lookups(conn):
    shape = Shape(conn.proto)
    kind, replies = call(conn, "COMMAND", "INFO", "GET", "nosuch", "config|GET", "get|x", "a|b|c")
    assert kind == "*" and len(replies) == 5
    assert replies[0][1][0] == ("$", "get")
    assert replies[1] == ("_", None)
    assert replies[2] == shape.info(REDIS["config|get"], set())
    assert replies[3] == replies[4] == ("_", None)
    pairs = pairs_of(call(conn, "COMMAND", "DOCS", "nosuch", "Config|Set", "get"))
    assert [key for key, _ in pairs] == [("$", "config|set"), ("$", "get")]
    assert pairs[0][1] == shape.docs(REDIS["config|set"], set())
    assert call(conn, "COMMAND", "DOCS", "nosuch") == shape.map([])


def test_list_filters(conn):
    listed = listed_names(conn)
    kind, names = call(conn, "COMMAND", "LIST", "FILTERBY", "PATTERN", "config|*")
    assert {name for _, name in names} == {name for name in listed if name.startswith("config|")}
    assert len(names) >= 4
    kind, names = call(conn, "COMMAND", "LIST", "FILTERBY", "pattern", "X*")
    assert {name for _, name in names} == {name for name in listed if name.startswith("x")}
    kind, names = call(conn, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "hyperloglog")
    assert {name for _, name in names} == {"pfadd", "pfcount", "pfdebug", "pfmerge", "pfselftest"} & listed
    assert len(names) >= 3
    assert call(conn, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch") == ("*", [])
    assert call(conn, "COMMAND", "LIST", "FILTERBY", "MODULE", "m") == ("*", [])
    syntax = ("-", "ERR syntax error")
    assert call(conn, "COMMAND", "LIST", "FILTERBY", "PATTERN") == syntax
    assert call(conn, "COMMAND", "LIST", "FILTERBY", "OTHER", "x") == syntax
    assert call(conn, "COMMAND", "LIST", "PATTERN", "x", "y") == syntax
    assert call(conn, "COMMAND", "LIST", "FILTERBY", "PATTERN", "x", "y") == syntax


def test_acl_categories_agree_with_list(conn):
    listed = listed_names(conn)
    kind, names = call(conn, "COMMAND", "LIST", "FILTERBY", "ACLCAT", "string")
    names = {name for _, name in names}
    expected = {name for name in listed if name in REDIS and "@string" in REDIS[name]["acl_categories"]}
    assert expected <= names and "get" in names


# COMMAND GETKEYSANDFLAGS as Redis 7.0.15 answers it: (call, [(key, flags)] or the error).
GETKEYS_CASES = [
    ("get k", [("k", ["RO", "access"])]),
    ("set k v", [("k", ["OW", "update"])]),
    ("set k v GET ex 1", [("k", ["RW", "access", "update"])]),
    ("mset a 1 b 2", [("a", ["OW", "update"]), ("b", ["OW", "update"])]),
    ("del a b", [("a", ["RM", "delete"]), ("b", ["RM", "delete"])]),
    ("zunionstore d 2 a b weights 1 2",
     [("d", ["OW", "update"]), ("a", ["RO", "access"]), ("b", ["RO", "access"])]),
    ("zunionstore d abc a", "ERR Invalid arguments specified for command"),
    ("zunionstore d 3 a b", "ERR Invalid arguments specified for command"),
    ("zinter 2 a b", [("a", ["RO", "access"]), ("b", ["RO", "access"])]),
    ("eval s 2 k1 k2 a1", [("k1", ["RW", "access", "update"]), ("k2", ["RW", "access", "update"])]),
    ("eval s 0", []),
    ("eval s 5 k1", []),
    ("evalsha_ro s 1 k", [("k", ["RO", "access"])]),
    ("sort l limit 0 1 store d get #", [("l", ["RO", "access"]), ("d", ["OW", "update"])]),
    ("sort l store a store b", [("l", ["RO", "access"]), ("b", ["OW", "update"])]),
    ("sort l store", [("l", ["RO", "access"])]),
    ("sort_ro l by x", [("l", ["RO", "access"])]),
    ("migrate h 6379 k 0 1000", [("k", ["RW", "access", "delete"])]),
    ("migrate h 6379 k 0 1000 keys a b", "ERR Invalid arguments specified for command"),
    ("xread count 1 streams s1 s2 0 0", [("s1", ["RO", "access"]), ("s2", ["RO", "access"])]),
    ("xreadgroup group g c streams s 0", [("s", ["RO", "access"])]),
    ("xread streams s1", "ERR Invalid number of arguments specified for command"),
    ("georadius k 0 0 1 km store d", [("k", ["RO", "access"]), ("d", ["OW", "update"])]),
    ("bitfield k get u8 0", [("k", ["RO", "access"])]),
    ("bitfield k set u8 0 1", [("k", ["RW", "access", "update"])]),
    ("lmove a b left right", [("a", ["RW", "access", "delete"]), ("b", ["RW", "insert"])]),
    ("blmpop 0 2 a b left", [("a", ["RW", "access", "delete"]), ("b", ["RW", "access", "delete"])]),
    ("zmpop 1 z min", [("z", ["RW", "access", "delete"])]),
    ("sintercard 2 a b limit 1", [("a", ["RO", "access"]), ("b", ["RO", "access"])]),
    ("xadd s * f v", [("s", ["RW", "update"])]),
    ("rename a b", [("a", ["RW", "access", "delete"]), ("b", ["OW", "update"])]),
    ("object encoding k", [("k", ["RO"])]),
    ("memory usage k", [("k", ["RO"])]),
    ("xgroup create s g $", [("s", ["RW", "insert"])]),
    ("pfcount a b", [("a", ["RW", "access"]), ("b", ["RW", "access"])]),
    ("bitop and d a b", [("d", ["OW", "update"]), ("a", ["RO", "access"]), ("b", ["RO", "access"])]),
    ("watch a b", [("a", ["RO"]), ("b", ["RO"])]),
    ("ping x", "ERR The command has no key arguments"),
    ("config get x", "ERR The command has no key arguments"),
    ("nosuch a", "ERR Invalid command specified"),
    ("object nosuch k", "ERR Invalid command specified"),
    ("get a b", "ERR Invalid number of arguments specified for command"),
]


@pytest.mark.parametrize("line,expected", GETKEYS_CASES, ids=[case[0] for case in GETKEYS_CASES])
def test_getkeys_and_flags(conn, line, expected):
    argv = line.split(" ")
    with_flags = call(conn, "COMMAND", "GETKEYSANDFLAGS", *argv)
    keys_only = call(conn, "COMMAND", "GETKEYS", *argv)
    if isinstance(expected, str):
        assert with_flags == keys_only == ("-", expected)
        return
    assert with_flags == ("*", [("*", [("$", key), Shape(conn.proto).simple_set(flags)])
                                for key, flags in expected])
    assert keys_only == ("*", [("$", key) for key, _ in expected])


def test_getkeys_arity_and_help(conn):
    assert call(conn, "COMMAND", "GETKEYS") == (
        "-", "ERR wrong number of arguments for 'command|getkeys' command")
    assert call(conn, "COMMAND", "GETKEYSANDFLAGS") == (
        "-", "ERR wrong number of arguments for 'command|getkeysandflags' command")
    assert call(conn, "COMMAND", "COUNT", "x") == (
        "-", "ERR wrong number of arguments for 'command|count' command")
    kind, lines = call(conn, "COMMAND", "HELP")
    assert kind == "*" and ("+", "GETKEYSANDFLAGS <full-command>") in lines


# Subcommands whose call (with placeholder arguments) would change the shared server or the connection.
CHANGES_STATE = {"client|pause", "client|kill", "client|reply", "script|debug", "script|flush",
                 "function|flush", "function|delete", "acl|setuser", "acl|deluser", "config|set"}


def test_listed_commands_are_implemented(conn):
    """Each command and subcommand COMMAND LIST names answers something other than "unknown"."""
    for name in sorted(listed_names(conn)):
        if "|" not in name or name in CHANGES_STATE:
            continue  # top-level names are found by dispatch
        parent, sub = name.split("|")
        kind, text = call(conn, parent, sub, *(["x"] * max(0, abs(REDIS.get(name, {}).get("arity", 2)) - 2)))
        assert not (kind == "-" and ("unknown subcommand" in text or "unknown command" in text)), name


@pytest.mark.fallow_only
def test_missing_subcommands_are_not_listed(conn):
    """fallow leaves out of COMMAND the Redis subcommands it does not implement (info/redis.rs)."""
    listed = listed_names(conn)
    for parent in ("client", "config", "object", "memory", "xinfo", "xgroup", "command"):
        for sub in REDIS[parent]["subcommands"]:
            if sub["name"] in listed:
                continue
            kind, text = call(conn, parent, sub["name"].split("|")[1],
                              *(["x"] * max(0, abs(sub["arity"]) - 2)))
            assert kind == "-" and "unknown subcommand" in text, sub["name"]


@pytest.mark.fallow_only
def test_own_commands_report_their_rows(conn):
    """fallow's own commands are listed in Redis's shapes: key specs from their key positions."""
    kind, [info] = call(conn, "COMMAND", "INFO", "txn.lock")
    fields = info[1]
    assert fields[0] == ("$", "txn.lock") and fields[1] == (":", -2)
    assert fields[3:6] == [(":", 1), (":", -1), (":", 1)]
    assert len(fields[8][1]) == 1  # one key spec
    assert call(conn, "COMMAND", "GETKEYS", "txn.lock", "a", "b") == ("*", [("$", "a"), ("$", "b")])
    pairs = pairs_of(call(conn, "COMMAND", "DOCS", "txn.lock"))
    docs = dict(pairs_of(pairs[0][1]))
    assert docs[("$", "group")] == ("$", "transactions")
    assert docs[("$", "summary")][1].startswith("Lock the keys")


@pytest.mark.fallow_only
def test_list_by_own_category_is_acl_cat(conn):
    """fallow's own ACL categories (topn, bag, server ...) list the commands ACL CAT lists (with their
    subcommands: a subcommand is in its command's row's categories)."""
    for category in ("topn", "bag", "server"):
        kind, names = call(conn, "COMMAND", "LIST", "FILTERBY", "ACLCAT", category)
        kind, acl = call(conn, "ACL", "CAT", category)
        top = {name for _, name in names if "|" not in name}
        assert top == {name for _, name in acl} and top, category
        assert {name.split("|")[0] for _, name in names} == top
