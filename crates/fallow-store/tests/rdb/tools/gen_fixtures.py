#!/usr/bin/env python3
"""Records Redis 7.0.15 DUMP / FUNCTION DUMP payloads as test fixtures.

Needs a disposable Redis 7.0.15 (it runs FLUSHALL, FUNCTION FLUSH and
CONFIG SET on it):

    redis-server --port 7791 --save '' --daemonize yes --enable-debug-command local
    python3 tools/gen_fixtures.py [--port 7791] > tests/fixtures/dump_cases.txt

Output format (one block per case, hex "-" = empty byte string):

    case <name>
    mode exact|decode|legacy
    config <redis config name> <value>      (zero or more)
    type string|list|set|zset|hash|function
    e <hex>                                  element / string / library
    p <field hex> <value hex>                hash pair
    z <member hex> <score as f64 bits, 16 hex digits>
    dump <payload hex>
    end

mode exact:  Redis's encoding is deterministic; our encoder must produce
             these bytes and our decoder must read them back.
mode decode: Redis's bytes depend on its seeded hash tables (hashtable sets
             and hashes, multi-library FUNCTION DUMP); only decoding is
             checked (as a set / map).
mode legacy: payload in a pre-7.0 encoding, built here by hand; Redis 7.0.15
             accepted it with RESTORE and the recorded value is what Redis
             read back (LRANGE / SMEMBERS / ZRANGE / HGETALL).
"""

import argparse
import random
import re
import struct
import sys

import redis

KEY = b"fixture:key"

DEFAULT_CONFIG = {
    "hash-max-listpack-entries": "128",
    "hash-max-listpack-value": "64",
    "zset-max-listpack-entries": "128",
    "zset-max-listpack-value": "64",
    "set-max-intset-entries": "512",
    "list-max-listpack-size": "-2",
    "list-compress-depth": "0",
    "rdbcompression": "yes",
}


def hx(data):
    return data.hex() if data else "-"


def f64_bits(value):
    return struct.pack(">d", value).hex()


class Recorder:
    def __init__(self, client, out):
        self.r = client
        self.out = out
        self.names = set()
        self.count = 0

    def reset_config(self, config):
        for name, value in DEFAULT_CONFIG.items():
            self.r.config_set(name, config.get(name, value))
        apply_debug_threshold(self.r, config)

    def begin(self, name, mode, config):
        assert name not in self.names, name
        self.names.add(name)
        self.count += 1
        self.out.write(f"case {name}\nmode {mode}\n")
        for key, value in config.items():
            self.out.write(f"config {key} {value}\n")

    def finish(self, payload):
        self.out.write(f"dump {hx(payload)}\nend\n")

    def value(self, name, kind, value, config=None):
        config = config or {}
        self.r.flushall()
        self.reset_config(config)
        store(self.r, kind, value)
        if kind == "zset":
            # Record scores as Redis holds them: a -0 that went through a
            # listpack comes back as 0 after conversion to a skiplist.
            value = [(member, self.r.zscore(KEY, member)) for member, _ in value]
        encoding = self.r.object("encoding", KEY)
        mode = "decode" if encoding == b"hashtable" else "exact"
        payload = self.r.dump(KEY)
        self.begin(name, mode, config)
        write_value(self.out, kind, value)
        self.finish(payload)
        self.reset_config({})

    def functions(self, name, libraries):
        self.r.function_flush()
        for code in libraries:
            self.r.function_load(code)
        payload = self.r.function_dump()
        self.begin(name, "exact" if len(libraries) < 2 else "decode", {})
        self.out.write("type function\n")
        for code in libraries:
            self.out.write(f"e {hx(code)}\n")
        self.finish(payload)
        self.r.function_flush()

    def legacy(self, name, kind, payload):
        self.r.flushall()
        self.r.restore(KEY, 0, payload, replace=True)
        self.begin(name, "legacy", {})
        write_value(self.out, kind, read_back(self.r, kind))
        self.finish(payload)


def apply_debug_threshold(r, config):
    """DEBUG QUICKLIST-PACKED-THRESHOLD (0 restores Redis's 1 GiB); needs
    the server started with --enable-debug-command local."""
    r.execute_command("DEBUG", "QUICKLIST-PACKED-THRESHOLD",
                      config.get("debug-quicklist-packed-threshold", "0"))


def store(r, kind, value):
    chunk = 1000
    if kind == "string":
        r.set(KEY, value)
    elif kind == "list":
        for i in range(0, len(value), chunk):
            r.rpush(KEY, *value[i:i + chunk])
    elif kind == "set":
        r.sadd(KEY, *value)
    elif kind == "zset":
        # One ZADD: Redis picks listpack vs skiplist from the whole batch.
        r.zadd(KEY, {member: score for member, score in value})
    elif kind == "hash":
        flat = [item for pair in value for item in pair]
        r.execute_command("HSET", KEY, *flat)
    else:
        raise ValueError(kind)


def read_back(r, kind):
    if kind == "string":
        return r.get(KEY)
    if kind == "list":
        return r.lrange(KEY, 0, -1)
    if kind == "set":
        return sorted(r.smembers(KEY))
    if kind == "zset":
        return [(m, float(s)) for m, s in r.zrange(KEY, 0, -1, withscores=True)]
    if kind == "hash":
        return list(r.hgetall(KEY).items())
    raise ValueError(kind)


def write_value(out, kind, value):
    out.write(f"type {kind}\n")
    if kind == "string":
        out.write(f"e {hx(value)}\n")
    elif kind in ("list", "set"):
        for element in value:
            out.write(f"e {hx(element)}\n")
    elif kind == "zset":
        for member, score in value:
            out.write(f"z {hx(member)} {f64_bits(score)}\n")
    elif kind == "hash":
        for field, val in value:
            out.write(f"p {hx(field)} {hx(val)}\n")


# ---------------------------------------------------------------- values


def rand_bytes(rng, length, alphabet):
    return bytes(rng.choice(alphabet) for _ in range(length))


def lorem(rng, length):
    words = [b"lorem", b"ipsum", b"dolor", b"sit", b"amet", b"consectetur",
             b"adipiscing", b"elit", b"sed", b"do", b"eiusmod", b"tempor"]
    out = b""
    while len(out) < length:
        out += rng.choice(words) + b" "
    return out[:length]


INT_EDGES = [0, 1, 12, 13, 127, 128, -1, -128, -129, 255, 4095, 4096, -4096,
             -4097, 32767, 32768, -32768, -32769, 8388607, 8388608, -8388608,
             -8388609, 2147483647, 2147483648, -2147483648, -2147483649,
             9223372036854775807, -9223372036854775808]


def string_cases(rng):
    literal = [b"", b"a", b"hello", b"12345", b"-1", b"0", b"007", b"-0",
               b"+1", b" 1", b"1 ", b"1.5", b"0x10", b"12345678901",
               b"99999999999", b"9223372036854775807",
               b"-9223372036854775808", b"9223372036854775808",
               b"a" * 20, b"a" * 21, b"a" * 100, b"ab" * 1000,
               b"abcdefghijklmnopqrstu", b"\x00" * 30, bytes(range(256)),
               b"\xff" * 64]
    cases = [(f"string_lit_{i}", s) for i, s in enumerate(literal)]
    cases += [(f"string_int_{v}", str(v).encode()) for v in INT_EDGES]
    for i in range(60):
        alphabet = bytes(range(97, 97 + rng.choice([2, 3, 4, 6, 16, 26])))
        length = rng.choice([21, 22, 25, 30, 40, 64, 100, 500, 3000])
        cases.append((f"string_rand_{i}", rand_bytes(rng, length, alphabet)))
    for i in range(10):
        cases.append((f"string_binary_{i}", bytes(rng.randrange(256) for _ in range(rng.choice([21, 100, 5000])))))
    cases.append(("string_lorem_20k", lorem(rng, 20000)))
    cases.append(("string_lorem_30k", lorem(rng, 30000)))
    return cases


def list_cases(rng):
    ints = [str(v).encode() for v in INT_EDGES]
    odd = [b"", b"007", b"-0", b"+5", b"1.0", b"x" * 63, b"x" * 64,
           b"y" * 4095, b"y" * 4096, b"z" * 16380, b"w" * 127, b"v" * 126]
    cases = [
        ("list_one", [b"a"], {}),
        ("list_small", [b"a", b"b", b"c", b"1", b"2", b"3"], {}),
        ("list_ints", ints, {}),
        ("list_odd_lengths", odd, {}),
        ("list_5000", [f"element:{i}".encode() for i in range(5000)], {}),
        ("list_numbers_3000", [str(i).encode() for i in range(3000)], {}),
        ("list_big_element", [b"a", b"x" * 8200, b"b", b"c" * 10000, b"d"], {}),
        ("list_rand_sizes", [rand_bytes(rng, rng.randrange(0, 600), b"abcdef") for _ in range(120)], {}),
        ("list_incompressible", [bytes(rng.randrange(256) for _ in range(10)) for _ in range(1000)], {}),
        ("list_boundary_100", [b"q" * 100 for _ in range(200)], {}),
        ("list_depth1", [f"item-{i % 50}".encode() for i in range(4000)], {"list-compress-depth": "1"}),
        ("list_depth2", [f"item-{i % 70}".encode() for i in range(6000)], {"list-compress-depth": "2"}),
        ("list_depth1_two_nodes", [f"item-{i}".encode() for i in range(1200)], {"list-compress-depth": "1"}),
        ("list_fill5", [f"e{i}".encode() for i in range(23)], {"list-max-listpack-size": "5"}),
        ("list_fill_m1", [f"element:{i}".encode() for i in range(1500)], {"list-max-listpack-size": "-1"}),
        ("list_fill_m5", [f"element:{i}".encode() for i in range(5000)], {"list-max-listpack-size": "-5"}),
        ("list_nocompress", [f"element:{i % 10}".encode() for i in range(1500)], {"rdbcompression": "no"}),
    ]
    plain = {"debug-quicklist-packed-threshold": "100"}
    cases.append(("list_plain_nodes", [b"a", b"x" * 150, b"b", b"c", b"y" * 100, b"z" * 99, b"w" * 3000], plain))
    cases.append(("list_plain_depth1", [f"item-{i % 9}".encode() if i % 50 else b"P" * (100 + i % 300) for i in range(1500)],
                  dict(plain, **{"list-compress-depth": "1"})))
    for size in (8170, 8180, 8185, 8190):
        cases.append((f"list_element_{size}", [b"s", b"k" * size, b"t"], {}))
    return cases


def set_cases(rng):
    return [
        ("set_int16", [b"1", b"2", b"3", b"-7"], {}),
        ("set_int32", [b"1", b"70000", b"-70000"], {}),
        ("set_int64", [b"1", b"9223372036854775807", b"-9223372036854775808"], {}),
        ("set_edges", [str(v).encode() for v in INT_EDGES], {}),
        ("set_512", [str(i * 3).encode() for i in range(512)], {}),
        ("set_513", [str(i).encode() for i in range(513)], {}),
        ("set_strings", [b"a", b"b", b"c"], {}),
        ("set_mixed", [b"1", b"2", b"007"], {}),
        ("set_big_strings", [f"member:{i}".encode() for i in range(1000)], {}),
        ("set_intset_limit4", [b"1", b"2", b"3", b"4", b"5"], {"set-max-intset-entries": "4"}),
        ("set_rand_ints", [str(rng.randrange(-10**15, 10**15)).encode() for _ in range(300)], {}),
    ]


SCORES = [1.5, float("inf"), float("-inf"), 0.0, -0.0, 1e300, -1e300, 1e-300,
          0.1, 2.5, 3.0, -7.0, 1e17, 2.0 ** 62, 2.0 ** 62 + 2048, -(2.0 ** 62),
          2.0 ** 63, 123456789.125, 1.0 / 3, 5e-324]


def zset_cases(rng):
    scored = [(f"m{i}".encode(), s) for i, s in enumerate(SCORES)]
    ties = [(m, 1.0) for m in (b"b", b"a", b"ab", b"", b"aa", b"B")]
    zero_ties = [(b"pos", 0.0), (b"neg", -0.0), (b"a", 0.0)]

    def many(n, width=8):
        return [(f"member:{i:0{width}}".encode(), float(rng.randrange(-1000, 1000)) / 4) for i in range(n)]

    return [
        ("zset_scores", scored, {}),
        ("zset_ties", ties, {}),
        ("zset_zero_ties", zero_ties, {}),
        ("zset_int_members", [(str(v).encode(), float(i)) for i, v in enumerate(INT_EDGES)], {}),
        ("zset_128", many(128), {}),
        ("zset_129", many(129), {}),
        ("zset_member_64", [(b"k" * 64, 1.0), (b"x", 2.0)], {}),
        ("zset_member_65", [(b"k" * 65, 1.0), (b"x", 2.0)], {}),
        ("zset_skiplist_scores", scored + [(b"long" * 20, 0.5)], {}),
        ("zset_skiplist_zero_ties", zero_ties + [(b"L" * 70, 0.0)], {}),
        # First member longer than 64 bytes: created as a skiplist, so -0 stays -0.
        ("zset_skiplist_negzero", [(b"L" * 70, 1.0), (b"neg", -0.0), (b"pos", 0.0)], {}),
        ("zset_400", many(400), {}),
        ("zset_limit4", [(b"a", 1.0), (b"b", 2.0), (b"c", 3.0), (b"d", 4.0), (b"e", 5.0)], {"zset-max-listpack-entries": "4"}),
        ("zset_rand_scores", [(f"r{i}".encode(), rng.uniform(-1e6, 1e6)) for i in range(100)], {}),
    ]


def hash_cases(rng):
    def fields(n, vlen=5):
        return [(f"field:{i}".encode(), (f"v{i}" * vlen)[:vlen].encode()) for i in range(n)]

    return [
        ("hash_small", [(b"a", b"1"), (b"b", b"hello"), (b"c", b"-5")], {}),
        ("hash_ints", [(str(v).encode(), str(-v).encode()) for v in INT_EDGES[:20]], {}),
        ("hash_empty_strings", [(b"", b""), (b"x", b"")], {}),
        ("hash_value_64", [(b"a", b"v" * 64), (b"f" * 64, b"1")], {}),
        ("hash_value_65", [(b"a", b"v" * 65), (b"b", b"2")], {}),
        ("hash_128", fields(128), {}),
        ("hash_129", fields(129), {}),
        ("hash_300", fields(300, 30), {}),
        ("hash_compressible", [(f"f{i}".encode(), b"abcabcabcabc") for i in range(60)], {}),
        ("hash_limit4", fields(5), {"hash-max-listpack-entries": "4"}),
        ("hash_nocompress", [(f"f{i}".encode(), b"abcabcabcabc") for i in range(60)], {"rdbcompression": "no"}),
    ]


LIB_A = b"#!lua name=liba\nredis.register_function('fa', function(keys, args) return 'a' end)"
LIB_B = (b"#!lua name=libb\n"
         + b"\n".join(b"redis.register_function('fb%d', function(keys, args) return %d end)" % (i, i) for i in range(20)))
LIB_TINY = b"#!lua name=t\nredis.register_function('t',function() return 1 end)"


# ------------------------------------------------------- legacy payloads

CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x95AC9329AC4BC9B5 if _c & 1 else _c >> 1
    CRC_TABLE.append(_c)


def crc64(data):
    crc = 0
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def rdb_len(n):
    if n < 64:
        return bytes([n])
    if n < 16384:
        return bytes([0x40 | (n >> 8), n & 0xFF])
    return b"\x80" + struct.pack(">I", n)


def rdb_str(data):
    return rdb_len(len(data)) + data


def payload(type_byte, body, version=9):
    data = bytes([type_byte]) + body + struct.pack("<H", version)
    return data + struct.pack("<Q", crc64(data))


def strict_int(data):
    """string2ll: canonical decimal i64 (no '+', no leading zeros, no '-0')."""
    if len(data) > 20 or not re.fullmatch(rb"0|-?[1-9][0-9]*", data):
        return None
    value = int(data)
    return value if -(2 ** 63) <= value < 2 ** 63 else None


def ziplist(elements):
    body = b""
    prev = 0
    tail = 10
    for element in elements:
        tail = 10 + len(body)
        entry = bytes([prev]) if prev < 254 else b"\xfe" + struct.pack("<I", prev)
        value = strict_int(element)
        if value is not None and 0 <= value <= 12:
            entry += bytes([0xF1 + value])
        elif value is not None and -128 <= value <= 127:
            entry += b"\xfe" + struct.pack("<b", value)
        elif value is not None and -32768 <= value <= 32767:
            entry += b"\xc0" + struct.pack("<h", value)
        elif value is not None and -(2 ** 23) <= value < 2 ** 23:
            entry += b"\xf0" + struct.pack("<i", value)[:3]
        elif value is not None and -(2 ** 31) <= value < 2 ** 31:
            entry += b"\xd0" + struct.pack("<i", value)
        elif value is not None:
            entry += b"\xe0" + struct.pack("<q", value)
        elif len(element) < 64:
            entry += bytes([len(element)]) + element
        elif len(element) < 16384:
            entry += bytes([0x40 | (len(element) >> 8), len(element) & 0xFF]) + element
        else:
            entry += b"\x80" + struct.pack(">I", len(element)) + element
        body += entry
        prev = len(entry)
    return struct.pack("<IIH", 10 + len(body) + 1, tail, len(elements)) + body + b"\xff"


def zipmap(pairs):
    out = bytes([len(pairs) if len(pairs) < 254 else 254])
    for field, value in pairs:
        for data, free in ((field, None), (value, 2)):
            out += bytes([len(data)]) if len(data) < 254 else b"\xfe" + struct.pack("<I", len(data))
            if free is not None:
                out += bytes([free])
            out += data + (b"\x00" * (free or 0))
    return out + b"\xff"


def text_double(value):
    if value != value:
        return b"\xfd"
    if value == float("inf"):
        return b"\xfe"
    if value == float("-inf"):
        return b"\xff"
    text = ("%.17g" % value).encode()
    return bytes([len(text)]) + text


def legacy_cases(rng):
    elements = [b"a", b"1", b"-5", b"300", b"70000", b"5000000000", b"x" * 70, b"", b"12", b"13"]
    pairs = [(b"f1", b"v1"), (b"f2", b"22"), (b"long", b"y" * 300)]
    zpairs = [(b"a", 1.0), (b"b", 2.5), (b"c", float("inf")), (b"d", -3.0)]
    zflat = [item for m, s in zpairs for item in (m, ("%.17g" % s if s != float("inf") else "inf").encode())]
    big = [f"element:{i}".encode() for i in range(600)]
    quicklist_v1 = rdb_len(2) + rdb_str(ziplist(big[:300])) + rdb_str(ziplist(big[300:]))
    return [
        ("legacy_list_type1", "list", payload(1, rdb_len(len(elements)) + b"".join(rdb_str(e) for e in elements))),
        ("legacy_set_type2", "set", payload(2, rdb_len(3) + rdb_str(b"x") + rdb_str(b"y") + rdb_str(b"z"))),
        ("legacy_zset_type3", "zset", payload(3, rdb_len(len(zpairs)) + b"".join(rdb_str(m) + text_double(s) for m, s in zpairs))),
        ("legacy_hash_type4", "hash", payload(4, rdb_len(len(pairs)) + b"".join(rdb_str(f) + rdb_str(v) for f, v in pairs))),
        ("legacy_zset2_type5", "zset", payload(5, rdb_len(len(zpairs)) + b"".join(rdb_str(m) + struct.pack("<d", s) for m, s in zpairs))),
        ("legacy_zipmap_type9", "hash", payload(9, rdb_str(zipmap(pairs)))),
        ("legacy_ziplist_list_type10", "list", payload(10, rdb_str(ziplist(elements)))),
        ("legacy_intset_type11", "set", payload(11, rdb_str(struct.pack("<II", 2, 3) + struct.pack("<hhh", -2, 5, 9)))),
        ("legacy_ziplist_zset_type12", "zset", payload(12, rdb_str(ziplist(zflat)))),
        ("legacy_ziplist_hash_type13", "hash", payload(13, rdb_str(ziplist([i for p in pairs for i in p])))),
        ("legacy_quicklist_type14", "list", payload(14, quicklist_v1)),
        ("legacy_ziplist_big_prevlen", "list", payload(10, rdb_str(ziplist([b"p" * 300, b"q", b"r" * 20000, b"s"])))),
        ("legacy_version_6", "list", payload(1, rdb_len(1) + rdb_str(b"old"), version=6)),
    ]


def stress_cases(rng, count):
    """Random values of every kind, for ad-hoc runs (not committed)."""
    alphabets = [b"ab", b"abc", b"abcd", b"0123456789", bytes(range(97, 123)), bytes(range(256))]
    for i in range(count):
        kind = rng.choice(["string", "string", "list", "set", "zset", "hash"])
        alphabet = rng.choice(alphabets)

        def item(max_len):
            return rand_bytes(rng, rng.randrange(0, max_len), alphabet)

        if kind == "string":
            value = item(rng.choice([30, 300, 5000]))
        elif kind == "list":
            value = [item(rng.choice([5, 40, 300])) for _ in range(rng.randrange(1, 3000))]
        elif kind == "set":
            if rng.random() < 0.5:
                value = list({str(rng.randrange(-10 ** rng.randrange(1, 18), 10 ** 17)).encode() for _ in range(rng.randrange(1, 600))})
            else:
                value = list({item(20) for _ in range(rng.randrange(1, 300))})
        elif kind == "zset":
            members = list({item(rng.choice([10, 80])) for _ in range(rng.randrange(1, 300))})
            value = [(m, rng.choice([float(rng.randrange(-50, 50)), rng.uniform(-1e9, 1e9), rng.random()])) for m in members]
        else:
            fields = list({item(rng.choice([10, 80])) for _ in range(rng.randrange(1, 300))})
            value = [(f, item(rng.choice([10, 80]))) for f in fields]
        yield f"stress_{i}_{kind}", kind, value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=7791)
    parser.add_argument("--stress", type=int, default=0,
                        help="emit N random cases instead of the fixture set")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    client = redis.Redis(port=args.port)
    assert client.info("server")["redis_version"] == "7.0.15", "needs Redis 7.0.15"
    out = sys.stdout
    out.write("# Generated by tools/gen_fixtures.py against Redis 7.0.15; do not edit.\n")
    rec = Recorder(client, out)
    if args.stress:
        for name, kind, value in stress_cases(random.Random(args.seed), args.stress):
            rec.value(name, kind, value)
        print(f"{rec.count} cases", file=sys.stderr)
        return
    rng = random.Random(7015)
    for name, value in string_cases(rng):
        rec.value(name, "string", value)
    for name, value, config in list_cases(rng):
        rec.value(name, "list", value, config)
    for name, value, config in set_cases(rng):
        rec.value(name, "set", value, config)
    for name, value, config in zset_cases(rng):
        rec.value(name, "zset", value, config)
    for name, value, config in hash_cases(rng):
        rec.value(name, "hash", value, config)
    rec.functions("function_one", [LIB_A])
    rec.functions("function_long", [LIB_B])
    rec.functions("function_tiny", [LIB_TINY])
    rec.functions("function_two", [LIB_A, LIB_B])
    rec.functions("function_three", [LIB_A, LIB_B, LIB_TINY])
    for name, kind, data in legacy_cases(rng):
        rec.legacy(name, kind, data)
    client.flushall()
    print(f"{rec.count} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
