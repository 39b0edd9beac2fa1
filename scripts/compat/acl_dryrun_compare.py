#!/usr/bin/env python3
"""Compares ACL DRYRUN (and ACL LIST) between fallow and redis-server 7.0.15 on random users and calls.

Usage: scripts/compat/acl_dryrun_compare.py [--users N] [--seed S]
Starts both servers on free loopback ports (FALLOW_BIN, default target/release/fallow), creates N random
users (key patterns with %R~/%W~, channels, categories, selectors), runs every call below through ACL DRYRUN
for each user on both, and prints each difference. Exits 1 when any reply differs. Outside CI.
"""
import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALLS = [
    "get a", "set a 1", "set a 1 get", "getdel a", "copy a b", "lmove a b left right", "mset a 1 b 2",
    "mget a b", "xread count 2 streams a b 0 0", "zunionstore a 2 b c", "zunionstore a x b", "sort a",
    "sort a store b", "sort_ro a", "bitfield a get u8 0", "bitfield a incrby u8 0 1", "bitfield_ro a get u8 0",
    "object encoding a", "del a b", "rename a b", "eval 'return 1' 1 a", "publish ch x", "subscribe ch",
    "psubscribe ch*", "spublish ch x", "config get maxmemory", "config set maxmemory 0", "flushall", "info",
    "incr a", "hset a f v", "hget a f", "georadius a 0 0 1 km store b", "migrate h 1 a 0 10",
    "pfmerge a b", "smove a b m", "blpop a b 0", "xreadgroup group g c streams a >", "lcs a b", "keys *",
]
PATTERNS = ["~a", "~b", "%R~a", "%W~a", "%R~b", "%W~b", "%RW~*", "~*", "%R~*", "allkeys", "resetkeys"]
CHANNELS = ["&ch", "&ch*", "allchannels", "resetchannels", "&x"]
COMMANDS = ["+@all", "-@all", "+@read", "+@write", "-@dangerous", "+get", "+set", "-set", "+config|get",
            "+@keyspace", "+@pubsub", "+sort", "+bitfield", "+object|encoding", "+@scripting", "+xread"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(argv, port):
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            client = redis.Redis(port=port, decode_responses=True)
            client.ping()
            return process, client
        except redis.ConnectionError:
            time.sleep(0.05)
    process.kill()
    sys.exit(f"{argv[0]} did not start")


def random_rules(rng):
    rules = ["on", "nopass"]
    rules += rng.sample(COMMANDS, rng.randint(1, 4))
    rules += rng.sample(PATTERNS, rng.randint(0, 3))
    rules += rng.sample(CHANNELS, rng.randint(0, 2))
    if rng.random() < 0.3:
        inner = rng.sample(COMMANDS, 2) + rng.sample(PATTERNS[:-2], 1)
        rules.append("(" + " ".join(inner) + ")")
    return rules


def reply(client, *args):
    try:
        return client.execute_command(*args)
    except redis.ResponseError as error:
        return f"ERR: {error}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    fallow_bin = os.environ.get("FALLOW_BIN", os.path.join(ROOT, "target/release/fallow"))
    redis_port, fallow_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        servers = [
            start(["redis-server", "--port", str(redis_port), "--save", "", "--bind", "127.0.0.1"], redis_port),
            start([fallow_bin, "--port", str(fallow_port), "--memcache-port", "0", "--dir", tmp], fallow_port),
        ]
        try:
            differences, allowed = compare(rng, options.users, [client for _, client in servers])
        finally:
            for process, _ in servers:
                process.kill()
    calls = options.users * len(CALLS)
    print(f"{options.users} users x {len(CALLS)} calls = {calls} DRYRUNs ({allowed} allowed by Redis), "
          f"{differences} differences")
    sys.exit(1 if differences else 0)


def compare(rng, users, clients):
    differences = allowed = 0
    for index in range(users):
        rules = random_rules(rng)
        created = [reply(client, "ACL", "SETUSER", f"u{index}", "reset", *rules) for client in clients]
        if created[0] != created[1]:
            differences += 1
            print(f"SETUSER {rules}: redis {created[0]!r} fallow {created[1]!r}")
        if created[0] != "OK":
            continue
        for call in CALLS:
            args = call.replace("'return 1'", "return_1").split()
            answers = [reply(client, "ACL", "DRYRUN", f"u{index}", *args) for client in clients]
            allowed += answers[0] == "OK"
            if answers[0] != answers[1]:
                differences += 1
                print(f"{rules} | {call}: redis {answers[0]!r} fallow {answers[1]!r}")
    return differences, allowed


if __name__ == "__main__":
    main()
