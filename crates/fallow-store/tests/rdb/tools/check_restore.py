#!/usr/bin/env python3
"""Checks that Redis 7.0.15 accepts OUR payloads, and records the verdicts.

    cargo run -q --example encode_fixtures > /tmp/ours.txt
    python3 tools/check_restore.py /tmp/ours.txt > tests/fixtures/restore_checks.txt

For each non-legacy case of tests/fixtures/dump_cases.txt it applies the
case's config plus `sanitize-dump-payload yes` (so Redis deep-validates our
listpacks, intsets and ziplists), then:
  values:    RESTORE our payload; the value read back (GET / LRANGE /
             SMEMBERS / ZRANGE WITHSCORES / HGETALL) must equal the case's
             value, OBJECT ENCODING must equal what Redis gives its own
             payload, and for exact cases DUMP must return our bytes.
  functions: FUNCTION RESTORE our payload; FUNCTION LIST WITHCODE must hold
             exactly the case's libraries; for exact cases FUNCTION DUMP
             must return our bytes.
Output lines: `<case> <last 8 bytes of our payload (its CRC), hex> <verdict>`.
The Rust test redis_restored_our_payloads requires every verdict to be `ok`
and the CRC to match what the encoder produces today.
"""

import argparse
import os
import struct
import sys

import redis

sys.path.insert(0, os.path.dirname(__file__))
from gen_fixtures import DEFAULT_CONFIG, apply_debug_threshold  # noqa: E402

KEY = b"check:ours"
THEIRS = b"check:theirs"
CASES = os.environ.get('RDB_CASES') or os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'dump_cases.txt')


def unhex(text):
    return b"" if text == "-" else bytes.fromhex(text)


def load_cases():
    cases, case = [], None
    for line in open(CASES):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        tag = words[0]
        if tag == "case":
            case = {"name": words[1], "config": {}, "e": [], "p": [], "z": []}
        elif tag == "mode":
            case["mode"] = words[1]
        elif tag == "config":
            case["config"][words[1]] = words[2]
        elif tag == "type":
            case["type"] = words[1]
        elif tag == "e":
            case["e"].append(unhex(words[1]))
        elif tag == "p":
            case["p"].append((unhex(words[1]), unhex(words[2])))
        elif tag == "z":
            case["z"].append((unhex(words[1]), struct.unpack(">d", bytes.fromhex(words[2]))[0]))
        elif tag == "dump":
            case["dump"] = unhex(words[1])
        elif tag == "end":
            cases.append(case)
    return cases


def expected_value(case):
    kind = case["type"]
    if kind == "string":
        return b"".join(case["e"])
    if kind == "list":
        return case["e"]
    if kind == "set":
        return sorted(case["e"])
    if kind == "zset":
        return sorted(case["z"])
    if kind == "hash":
        return sorted(case["p"])
    raise ValueError(kind)


def read_value(r, kind, key):
    if kind == "string":
        return r.get(key)
    if kind == "list":
        return r.lrange(key, 0, -1)
    if kind == "set":
        return sorted(r.smembers(key))
    if kind == "zset":
        return sorted((m, float(s)) for m, s in r.zrange(key, 0, -1, withscores=True))
    if kind == "hash":
        return sorted(r.hgetall(key).items())
    raise ValueError(kind)


def check_value(r, case, ours):
    r.flushall()
    for name, value in DEFAULT_CONFIG.items():
        r.config_set(name, case["config"].get(name, value))
    apply_debug_threshold(r, case["config"])
    try:
        r.restore(KEY, 0, ours)
    except redis.ResponseError as err:
        return f"RESTORE-refused:{str(err).replace(' ', '_')}"
    if read_value(r, case["type"], KEY) != expected_value(case):
        return "value-differs"
    r.restore(THEIRS, 0, case["dump"])
    if r.object("encoding", KEY) != r.object("encoding", THEIRS):
        return "encoding-differs"
    if case["mode"] == "exact" and r.dump(KEY) != ours:
        return "redump-differs"
    return "ok"


def check_functions(r, case, ours):
    for name, value in DEFAULT_CONFIG.items():
        r.config_set(name, value)
    apply_debug_threshold(r, {})
    r.function_flush()
    try:
        r.execute_command("FUNCTION", "RESTORE", ours)
    except redis.ResponseError as err:
        return f"RESTORE-refused:{str(err).replace(' ', '_')}"
    listed = r.execute_command("FUNCTION", "LIST", "WITHCODE")
    entries = [lib if isinstance(lib, dict) else dict(zip(lib[::2], lib[1::2])) for lib in listed]
    codes = sorted(entry.get(b"library_code", entry.get("library_code")) for entry in entries)
    if codes != sorted(case["e"]):
        return "libraries-differ"
    if case["mode"] == "exact" and r.function_dump() != ours:
        return "redump-differs"
    r.function_flush()
    return "ok"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ours", help="output of `cargo run --example encode_fixtures`")
    parser.add_argument("--port", type=int, default=7791)
    args = parser.parse_args()
    r = redis.Redis(port=args.port)
    assert r.info("server")["redis_version"] == "7.0.15", "needs Redis 7.0.15"
    r.config_set("sanitize-dump-payload", "yes")
    ours = {}
    for line in open(args.ours):
        name, data = line.split()
        ours[name] = bytes.fromhex(data)
    print("# Generated by tools/check_restore.py against Redis 7.0.15"
          " (sanitize-dump-payload yes); do not edit.")
    failures = 0
    for case in load_cases():
        if case["mode"] == "legacy":
            continue
        payload = ours[case["name"]]
        if case["type"] == "function":
            verdict = check_functions(r, case, payload)
        else:
            verdict = check_value(r, case, payload)
        failures += verdict != "ok"
        print(f"{case['name']} {payload[-8:].hex()} {verdict}")
    r.flushall()
    r.config_set("sanitize-dump-payload", "no")
    for name, value in DEFAULT_CONFIG.items():
        r.config_set(name, value)
    apply_debug_threshold(r, {})
    print(f"{failures} failures", file=sys.stderr)


if __name__ == "__main__":
    main()
