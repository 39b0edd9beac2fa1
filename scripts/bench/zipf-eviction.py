#!/usr/bin/env python3
"""How well a server's eviction keeps a zipf working set, against exact LRU of the same capacity.

Replays one zipf(theta) stream of reads over KEYS keys of VALUE_BYTES (fio's skew for the OLTP benchmark of
`fallow-bench fs`): GET each key, SET it on a miss (what a read-through cache such as `fallow fs` does), and
runs an exact LRU of --lru-keys entries over the same stream. Prints both hit ratios per window of reads.
Start the server with its pool capped first, e.g.

    fallow --port 7790 --elastic-max 100m --tier2-size 0 &
    python3 scripts/bench/zipf-eviction.py --port 7790 --keys 65536 --reads 400000 --lru-keys 11025

and give --lru-keys as the number of values the pool holds when full (DBSIZE after a fill).
"""
import argparse
import bisect
import itertools
import os
import random
from collections import OrderedDict

import redis


def zipf_stream(keys: int, theta: float, reads: int, seed: int) -> list[int]:
    weights = [k ** -theta for k in range(1, keys + 1)]
    total = sum(weights)
    cdf = list(itertools.accumulate(w / total for w in weights))
    rng = random.Random(seed)
    # Ranks scattered over the key space, as fio scatters them over the file.
    scatter = list(range(keys))
    rng.shuffle(scatter)
    return [scatter[min(bisect.bisect_left(cdf, rng.random()), keys - 1)] for _ in range(reads)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--keys", type=int, default=65536)
    parser.add_argument("--theta", type=float, default=0.9)
    parser.add_argument("--reads", type=int, default=400_000)
    parser.add_argument("--value-bytes", type=int, default=8192)
    parser.add_argument("--lru-keys", type=int, required=True)
    parser.add_argument("--window", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    server = redis.Redis(host=args.host, port=args.port)
    server.flushall()
    value = os.urandom(args.value_bytes)
    lru: OrderedDict[int, None] = OrderedDict()
    server_hits = lru_hits = 0
    for index, key in enumerate(zipf_stream(args.keys, args.theta, args.reads, args.seed), start=1):
        name = b"b%036d" % key
        if server.get(name) is None:
            server.set(name, value)
        else:
            server_hits += 1
        if key in lru:
            lru.move_to_end(key)
            lru_hits += 1
        else:
            lru[key] = None
            if len(lru) > args.lru_keys:
                lru.popitem(last=False)
        if index % args.window == 0:
            print(f"{index} reads: server hit {server_hits / args.window:.3f}, "
                  f"LRU({args.lru_keys}) hit {lru_hits / args.window:.3f}", flush=True)
            server_hits = lru_hits = 0
    print(f"server keys at the end: {server.dbsize()}")


if __name__ == "__main__":
    main()
