#!/usr/bin/env python3
"""Writes seed inputs for every fuzz target into fuzz/corpus/<target>/ (docs/fuzzing.md).

Seeds are real inputs: requests of every command shape, pipelines, inline commands, memcached requests of
every verb (text, meta, binary frames), replies of every type, the config examples of docs/configuration.md
and ACL rules from the tests. Run it when adding a target, then minimize with `cargo fuzz cmin`.
"""
import hashlib
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def write(target, inputs):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    for data in inputs:
        name = hashlib.sha1(data).hexdigest()
        (directory / name).write_bytes(data)


def multibulk(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


def command_names():
    names = set()
    for path in (ROOT / "crates/fallow-server/src/command").rglob("*.rs"):
        names.update(re.findall(r'spec\(\s*"([a-z0-9.|_-]+)"', path.read_text()))
    return sorted(names)


def resp_requests():
    shapes = [
        multibulk("PING"),
        multibulk("SET", "key", "value"),
        multibulk("SET", "k", b"\x00\r\n\xff", "EX", "10", "NX"),
        multibulk("GET", "key"),
        multibulk("MSET", *[f"k{i}" if j % 2 == 0 else f"v{i}" for i in range(8) for j in range(2)]),
        multibulk("HSET", "h", "f1", "v1", "f2", "v2"),
        multibulk("ZADD", "z", "1.5", "a", "-inf", "b"),
        multibulk("LPUSH", "l", "a", "b", "c"),
        multibulk("XADD", "s", "*", "field", "value"),
        multibulk("SUBSCRIBE", "chan"),
        multibulk("ACL", "SETUSER", "alice", "on", ">pw", "~*", "+@all"),
        multibulk("CONFIG", "SET", "maxmemory", "100mb"),
        multibulk("TXN.BEGIN"),
        multibulk("SET", "big", "x" * 300),
        multibulk("SET", "empty", ""),
        b"*0\r\n",
        b"*-1\r\n",
        b"*1\r\n$-1\r\n",
        b"*2\r\n$3\r\nGET\r\n$1\r\n",
        b"*1\r\n:3\r\n",
        b"*3\r\n$3\r\nSET\r\n$600000000\r\n",
        b"PING\r\n",
        b"PING\n",
        b"\r\n",
        b"SET a \"b c\\x41\\n\" 'it\\'s'\r\n",
        b"SET a \"unbalanced\r\n",
        b"GET 'x'y\r\n",
        b"ECHO \"\\xzz\\t\\a\\b\"\r\n",
        b"*1\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\nPING\r\n\r\n*0\r\n",
        b"*" + b"9" * 30 + b"\r\n",
        b"*2\r\n$01\r\nx\r\n",
    ]
    shapes += [multibulk(*name.split("|"), "key", "arg") for name in command_names()[::6]]
    pipeline = b"".join(shapes[:10])
    return shapes + [pipeline]


def resp_replies():
    return [
        b"+OK\r\n",
        b"+QUEUED\r\n",
        b"-ERR unknown command\r\n",
        b"-TXNABORT conflict\r\n",
        b":0\r\n:-42\r\n:9223372036854775807\r\n",
        b"$5\r\nhello\r\n",
        b"$0\r\n\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"_\r\n",
        b"*3\r\n$5\r\nhello\r\n:7\r\n*1\r\n+QUEUED\r\n",
        b"*2\r\n:1\r\n*1\r\n-TXNABORT conflict\r\n",
        b"*1\r\n" * 12 + b":1\r\n",
        b"*4\r\n$1\r\na\r\n$-1\r\n*0\r\n*2\r\n+x\r\n-y\r\n",
        b"$3\r\nabXY",
        b"+no cr\n",
        b"$2147483648\r\n",
        b"+OK\r\n+OK\r\n:1\r\n$3\r\nabc\r\n",
    ]


def mc_text():
    value = b"hello"
    seeds = [
        b"get a\r\n",
        b"get a bb ccc\r\n",
        b"gets  a   b \n",
        b"gat 10 k\r\n",
        b"gats -1 k j\r\n",
        b"gat 10\r\n",
        b"set k 5 -1 5\r\nhello\r\n",
        b"add k 0 0 5 noreply\r\nhello\r\n",
        b"replace k 0 0 5\r\nhello\r\n",
        b"append k 0 0 3\r\nabc\r\n",
        b"prepend k 0 0 3\r\nabc\r\n",
        b"cas k 1 2 2 99\r\nhi\r\n",
        b"cas k 1 2 2 99 noreply\r\nhi\r\n",
        b"set k 0 0 4\r\n\r\n\r\n\r\n",
        b"set k 0 0 1\r\nxyz\r\n",
        b"set k 0 0 1048577\r\n",
        b"set k 0 0 65\r\n" + b"v" * 65 + b"\r\n",
        b"incr k 5\r\n",
        b"decr k 18446744073709551615 noreply\r\n",
        b"touch k 10\r\n",
        b"delete k\r\n",
        b"delete k 0 noreply\r\n",
        b"flush_all\r\n",
        b"flush_all 10 noreply\r\n",
        b"verbosity 1\r\n",
        b"verbosity noreply\r\n",
        b"stats\r\n",
        b"stats detail on\r\n",
        b"stats slabs\r\n",
        b"version\r\n",
        b"quit\r\n",
        b"foo\r\n",
        b"get " + b"a" * 251 + b"\r\n",
        b"x" * 100,
    ]
    seeds.append(b"get a\r\nset k 0 0 5\r\n" + value + b"\r\ndelete k\r\nincr n 1\r\n")
    return seeds


def mc_meta():
    return [
        b"mg foo v k O123 t f c s h l q u N30 R5 T60\r\n",
        b"mg Zm9v b v k\r\n",
        b"mg foo\r\n",
        b"ms foo 3 T60 F5 c\r\nbar\r\n",
        b"ms foo 3 MA q\r\nbar\r\n",
        b"ms Zm9v 2 b I E7 C99\r\nhi\r\n",
        b"ms foo 70 T1\r\n" + b"v" * 70 + b"\r\n",
        b"ms foo 3 Mz\r\nbar\r\n",
        b"md foo q C5 I T30\r\n",
        b"ma foo N0 J13 D2 MD v\r\n",
        b"ma foo M+ q O" + b"o" * 33 + b"\r\n",
        b"mn\r\n",
        b"me foo\r\n",
        b"me Zm9v b\r\n",
        b"mg foo v v\r\n",
        b"mz foo\r\n",
        b"mg foo v\r\nms foo 3 T0\r\nbar\r\nmd foo q\r\nmn\r\n",
    ]


def binary(opcode, key=b"", extras=b"", value=b"", opaque=0x1234, cas=0):
    body = len(extras) + len(key) + len(value)
    header = struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0, body, opaque, cas)
    return header + extras + key + value


def mc_binary():
    store = struct.pack(">II", 5, 60)
    arith = struct.pack(">QQI", 1, 0, 0)
    frames = [
        binary(0x00, b"key"),
        binary(0x09, b"key"),
        binary(0x0C, b"key"),
        binary(0x0D, b"key"),
        binary(0x01, b"key", store, b"value"),
        binary(0x11, b"key", store, b"value"),
        binary(0x02, b"key", store, b"value"),
        binary(0x03, b"key", store, b"value", cas=7),
        binary(0x0E, b"key", b"", b"more"),
        binary(0x0F, b"key", b"", b"more"),
        binary(0x04, b"key"),
        binary(0x05, b"n", arith),
        binary(0x06, b"n", struct.pack(">QQI", 1, 5, 0xFFFFFFFF)),
        binary(0x07),
        binary(0x17),
        binary(0x08),
        binary(0x08, extras=struct.pack(">I", 10)),
        binary(0x0A),
        binary(0x0B),
        binary(0x10),
        binary(0x10, b"items"),
        binary(0x1B, extras=struct.pack(">I", 1)),
        binary(0x1C, b"key", struct.pack(">I", 10)),
        binary(0x1D, b"key", struct.pack(">I", 10)),
        binary(0x23, b"key", struct.pack(">I", 10)),
        binary(0x24, b"key", struct.pack(">I", 10)),
        binary(0x30, b"key"),
        binary(0x01, b"key", store, b"v" * 70),
        struct.pack(">BBHBBHIIQ", 0x80, 0x01, 3, 8, 0, 0, 2 << 20, 0, 0),
        struct.pack(">BBHBBHIIQ", 0x80, 0x00, 300, 0, 0, 0, 10, 0, 0),
    ]
    pipeline = b"".join(frames[:6]) + binary(0x0A)
    return frames + [pipeline, binary(0x00, b"key") + b"get k\r\n"]


def config_files():
    docs = (ROOT / "docs" / "configuration.md").read_text()
    examples = [block.encode() for block in re.findall(r"```toml\n(.*?)```", docs, re.S)]
    return examples + [
        b"",
        b'port = 6380\nmaxmemory = "100mb"\nmaxmemory-policy = "allkeys-lru"\n',
        b'memory-mode = "fixed"\nmaxmemory = 1073741824\nshards = 8\nthreads = 2\n',
        b'tenants = ["web:2", "batch:1:ephemeral", "default:1:persistent:yes"]\nmemcache-tenant = "web"\n',
        b'txn-locks = "rw"\ntxn-phasing = false\ntxn-lock-wait-ms = 100\n',
        b'proto-max-bulk-len = "1mb"\nclient-query-buffer-limit = "10kb"\nmemcache-item-size-max = "2m"\n',
        b'elastic-reserve = "10%"\nelastic-poll-interval-ms = 50\nhz = 100\nsegment-size = "4mb"\n',
        b'prot = 1\n',
        b'maxmemory = "1tb"\n',
        b'databases = 0\n',
    ]


def acl_rules():
    lines = [
        "on\n>pw\n~*\n+@all",
        "off\n>pw2",
        "on\n>pw\n~cache:*\n+get",
        "-set",
        "on\nnopass\n~*\n+@all",
        "on\n>shop-pw\n~shop:*\n&*\n+@all\n-@admin",
        "reset\non\nallkeys\nallchannels\nallcommands\nnocommands\nresetkeys\nresetchannels",
        "#" + "a" * 64 + "\n!" + "a" * 64,
        ">secret\n<secret\nresetpass",
        "%R~read:*\n%W~write:*\n%RW~both:*",
        "+client|kill\n-config|set\n+@read\n-@dangerous",
        "+nosuchcommand\n~a b\n?x",
    ]
    return [line.encode() for line in lines]


def main():
    write("resp_request", resp_requests())
    write("resp_reply", resp_replies())
    write("memcache_text", mc_text())
    write("memcache_meta", mc_meta())
    write("memcache_binary", mc_binary())
    write("config_file", config_files())
    write("acl_rules", acl_rules())


if __name__ == "__main__":
    main()
