#!/usr/bin/env python3
"""What any cache policy could give `fallow-bench fs`'s OLTP item: its own fio reads, replayed offline.

`fallow-bench fs` measures OLTP as fio's `randread` with `random_distribution=zipf:0.9` over a 2 GiB file in 8 KiB
reads, 4 readers in a closed loop, on a device throttled to 1000 reads a second. Every read that misses both the
page cache and the pool costs a device request, so the mean latency is readers / (device IOPS / fraction of reads
that reach the device) (Little's law), and the speedup of a pool over no pool is the ratio of those fractions.

This script records the reads such a run makes (fio itself, `ioengine=null`, `write_iolog`: the same generator,
seeds and interleaving of the 4 readers, no I/O), and replays them through a page cache (exact LRU of
--page-cache-pages pages; 0 for none, as a `--direct-io` mount) in front of a second level of --pool-blocks
blocks under several policies:

- `lru`: exact LRU.
- `s3fifo`: FIFO whose items read since they were stored are stored again, spending a read (up to 3): the
  pool's careful release (docs/elastic.md "Release paths") without its segments.
- `doorkeeper`: `s3fifo` that, once full, stores a block only at its second miss within the last `capacity`
  misses (two generations of a set): what `fallow fs` does (docs/fs.md "Admission").
- `tinylfu`: `s3fifo` behind TinyLFU admission (a new block enters only when it was read more often than the
  block it would evict; counts halved every 10 capacities of reads).
- `lfu`: perfect LFU, exact counts over the whole history (no sketch, no ageing).
- `opt`: Belady's optimum (evicts the block read again furthest in the future, or does not store): no online
  policy can do better on this stream.

The first --warm-up-reads reads fill the caches; the rest are counted. Prints a table, writes JSON (and a PNG
when matplotlib is installed, see scripts/bench/requirements.txt) to --out.

    python3 scripts/bench/oltp-policy-replay.py --out docs/bench-results/fs-oltp-policy-replay
"""
import argparse
import collections
import heapq
import json
import os
import subprocess
import sys
import tempfile
import time

PAGE_BYTES = 8192


def fio_trace(args) -> list[int]:
    """The pages fio's OLTP readers read, the readers' reads taken in turn (they run at one rate)."""
    reads_per_job = (args.warm_up_reads + args.measured_reads) // args.readers
    with tempfile.TemporaryDirectory() as scratch:
        # One job section per reader, each with its own log (clones of numjobs would share one file and
        # overwrite each other's lines); fio seeds each by its thread number, as it seeds numjobs' clones.
        command = ["fio", "--ioengine=null", "--output-format=terse"]
        for reader in range(args.readers):
            # `loops` draws on from the same generator (fio 3.33 ran past number_ios with time_based or io_size).
            command += [f"--name=oltp{reader}", "--rw=randread", "--norandommap", f"--size={args.file_bytes}",
                        f"--loops={-(-reads_per_job * PAGE_BYTES // args.file_bytes)}",
                        f"--bs={PAGE_BYTES}", f"--random_distribution=zipf:{args.theta}",
                        f"--write_iolog={scratch}/reader{reader}.iolog"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        per_reader = []
        for reader in range(args.readers):
            with open(f"{scratch}/reader{reader}.iolog") as f:
                # "<ms> <file> read <offset> <length>"
                per_reader.append([int(fields[3]) // PAGE_BYTES for fields in map(str.split, f)
                                   if len(fields) == 5 and fields[2] == "read"][:reads_per_job])
    assert all(len(reads) == reads_per_job for reads in per_reader), [len(r) for r in per_reader]
    return [page for turn in zip(*per_reader) for page in turn]


def page_cache_misses(trace: list[int], pages: int) -> list[tuple[int, int]]:
    """(position, page) of every read an exact LRU of `pages` pages misses; all reads when `pages` is 0."""
    if pages == 0:
        return list(enumerate(trace))
    lru: collections.OrderedDict[int, None] = collections.OrderedDict()
    misses = []
    for position, page in enumerate(trace):
        if page in lru:
            lru.move_to_end(page)
            continue
        misses.append((position, page))
        lru[page] = None
        if len(lru) > pages:
            lru.popitem(last=False)
    return misses


def lru_hits(stream: list[int], capacity: int) -> list[bool]:
    cache: collections.OrderedDict[int, None] = collections.OrderedDict()
    hits = []
    for page in stream:
        hit = page in cache
        hits.append(hit)
        if hit:
            cache.move_to_end(page)
        else:
            cache[page] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits


class S3Fifo:
    """FIFO with re-insertion of read items (2-bit read count), as the pool's careful release."""
    READS_MAX = 3

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.queue: collections.deque[int] = collections.deque()
        self.reads: dict[int, int] = {}

    def read(self, page: int) -> bool:
        if page in self.reads:
            self.reads[page] = min(self.reads[page] + 1, self.READS_MAX)
            return True
        return False

    def victim(self) -> int:
        """The block the next store evicts: read ones go round again, spending a read."""
        while self.reads[self.queue[0]] > 0:
            self.reads[self.queue[0]] -= 1
            self.queue.rotate(-1)
        return self.queue[0]

    def store(self, page: int) -> None:
        if len(self.reads) >= self.capacity:
            del self.reads[self.victim()]
            self.queue.popleft()
        self.reads[page] = 0
        self.queue.append(page)


def s3fifo_hits(stream: list[int], capacity: int) -> list[bool]:
    cache = S3Fifo(capacity)
    hits = []
    for page in stream:
        hit = cache.read(page)
        hits.append(hit)
        if not hit:
            cache.store(page)
    return hits


def doorkeeper_hits(stream: list[int], capacity: int) -> list[bool]:
    cache = S3Fifo(capacity)
    current: set[int] = set()
    previous: set[int] = set()
    recorded = 0  # misses in `current`; generations turn every `capacity` misses, as in admission.rs
    hits = []
    for page in stream:
        hit = cache.read(page)
        hits.append(hit)
        if hit:
            continue
        seen = page in current or page in previous
        current.add(page)
        recorded += 1
        if recorded >= capacity:
            previous, current, recorded = current, set(), 0
        if len(cache.reads) < capacity or seen:
            cache.store(page)
    return hits


def tinylfu_hits(stream: list[int], capacity: int) -> list[bool]:
    cache = S3Fifo(capacity)
    counts: collections.Counter[int] = collections.Counter()
    reads_since_halving = 0
    hits = []
    for page in stream:
        counts[page] += 1
        reads_since_halving += 1
        if reads_since_halving >= 10 * capacity:
            counts = collections.Counter({p: c // 2 for p, c in counts.items() if c > 1})
            reads_since_halving = 0
        hit = cache.read(page)
        hits.append(hit)
        if hit:
            continue
        if len(cache.reads) < capacity or counts[page] > counts[cache.victim()]:
            cache.store(page)
    return hits


def lfu_hits(stream: list[int], capacity: int) -> list[bool]:
    counts: collections.Counter[int] = collections.Counter()
    cached: set[int] = set()
    heap: list[tuple[int, int]] = []  # (count when pushed, page); stale entries skipped
    hits = []
    for page in stream:
        counts[page] += 1
        hit = page in cached
        hits.append(hit)
        if hit:
            heapq.heappush(heap, (counts[page], page))
            continue
        if len(cached) < capacity:
            cached.add(page)
            heapq.heappush(heap, (counts[page], page))
            continue
        while heap[0][1] not in cached or counts[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)
        if counts[page] > heap[0][0]:
            cached.discard(heapq.heappop(heap)[1])
            cached.add(page)
            heapq.heappush(heap, (counts[page], page))
    return hits


def opt_hits(stream: list[int], capacity: int) -> list[bool]:
    never = len(stream)
    next_use = [never] * len(stream)
    last_seen: dict[int, int] = {}
    for position in range(len(stream) - 1, -1, -1):
        next_use[position] = last_seen.get(stream[position], never)
        last_seen[stream[position]] = position
    cached: dict[int, int] = {}  # page -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, page); stale entries skipped
    hits = []
    for position, page in enumerate(stream):
        hit = page in cached
        hits.append(hit)
        if len(cached) >= capacity and not hit:
            while cached.get(heap[0][1]) != -heap[0][0]:
                heapq.heappop(heap)
            if -heap[0][0] <= next_use[position]:
                continue  # everything cached is read again sooner than this page: do not store it
            del cached[heapq.heappop(heap)[1]]
        cached[page] = next_use[position]
        heapq.heappush(heap, (-next_use[position], page))
    return hits


POLICIES = {"lru": lru_hits, "s3fifo": s3fifo_hits, "doorkeeper": doorkeeper_hits, "tinylfu": tinylfu_hits,
            "lfu": lfu_hits, "opt": opt_hits}


def replay(trace, page_cache_pages, pool_blocks, policies, warm_up_reads):
    measured = len(trace) - warm_up_reads
    misses = page_cache_misses(trace, page_cache_pages)
    counted = [position >= warm_up_reads for position, _ in misses]
    page_cache_miss_ratio = sum(counted) / measured
    stream = [page for _, page in misses]
    rows = []
    for name in policies:
        started = time.monotonic()
        hits = POLICIES[name](stream, pool_blocks)
        pool_hits = sum(hit for hit, count in zip(hits, counted) if count)
        device_ratio = (sum(counted) - pool_hits) / measured
        rows.append({
            "page_cache_pages": page_cache_pages, "pool_blocks": pool_blocks, "policy": name,
            "page_cache_miss_ratio": page_cache_miss_ratio,
            "pool_answers_of_page_cache_misses": pool_hits / max(1, sum(counted)),
            "device_ratio": device_ratio,
            # Device-bound closed loop: latency is proportional to the reads that reach the device.
            "speedup_over_page_cache_alone": page_cache_miss_ratio / device_ratio if page_cache_pages else None,
            "seconds": time.monotonic() - started,
        })
        print(f"page cache {page_cache_pages:>6} pages, pool {pool_blocks:>6} blocks, {name:>7}: "
              f"page cache misses {page_cache_miss_ratio:.3f}, pool answers {rows[-1]['pool_answers_of_page_cache_misses']:.3f}, "
              f"device {device_ratio:.3f}"
              + (f", {rows[-1]['speedup_over_page_cache_alone']:.2f}x over no pool" if page_cache_pages else ""),
              flush=True)
    return rows


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no PNG (pip install -r scripts/bench/requirements.txt)", file=sys.stderr)
        return
    shown = [r for r in rows if r["speedup_over_page_cache_alone"]]
    configs = sorted({(r["page_cache_pages"], r["pool_blocks"]) for r in shown})
    policies = list(dict.fromkeys(r["policy"] for r in shown))
    fig, axes = plt.subplots(1, len(configs), figsize=(5 * len(configs), 4), squeeze=False)
    for ax, (pages, blocks) in zip(axes[0], configs):
        speedups = [next(r["speedup_over_page_cache_alone"] for r in shown
                         if (r["page_cache_pages"], r["pool_blocks"], r["policy"]) == (pages, blocks, p))
                    for p in policies]
        ax.bar(policies, speedups, color=["tab:blue"] * (len(policies) - 1) + ["tab:gray"])
        ax.set_title(f"page cache {pages} pages, pool {blocks} blocks", fontsize=9)
        ax.set_ylabel("speedup over no pool (device-bound model)")
        for x, s in enumerate(speedups):
            ax.text(x, s, f"{s:.2f}", ha="center", va="bottom", fontsize=8)
    fig.suptitle("fio OLTP reads (zipf 0.9, 2 GiB, 8 KiB) replayed through cache policies; opt = Belady")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file-bytes", type=int, default=2 << 30)
    parser.add_argument("--theta", type=float, default=0.9)
    parser.add_argument("--readers", type=int, default=4)
    # About what a 1 GiB run of fallow-bench fs reads: a 244 s warm-up at 4,000-5,000 reads/s, then 30 s.
    parser.add_argument("--warm-up-reads", type=int, default=1_200_000)
    parser.add_argument("--measured-reads", type=int, default=300_000)
    # 20,000 pages: an LRU of that size misses about as often (52%) as the 256 MiB VM's page cache did without a pool.
    parser.add_argument("--page-cache-pages", default="20000,0")
    # What the pools held when full (docs/benchmarks.md: 11,025 blocks in 100 MiB, about 114,000 in 1 GiB).
    parser.add_argument("--pool-blocks", default="11025,114000")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    policies = args.policies.split(",")
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; known: {sorted(POLICIES)}")
    os.makedirs(args.out, exist_ok=True)
    print(f"recording {args.warm_up_reads + args.measured_reads} fio reads", flush=True)
    trace = fio_trace(args)
    rows = []
    for pages in map(int, args.page_cache_pages.split(",")):
        for blocks in map(int, args.pool_blocks.split(",")):
            rows += replay(trace, pages, blocks, policies, args.warm_up_reads)
    settings = {k: v for k, v in vars(args).items() if k != "out"}
    with open(os.path.join(args.out, "replay.json"), "w") as f:
        json.dump({"settings": settings, "reads": len(trace), "distinct_pages": len(set(trace)), "rows": rows},
                  f, indent=1)
    plot(rows, os.path.join(args.out, "replay.png"))


if __name__ == "__main__":
    main()
