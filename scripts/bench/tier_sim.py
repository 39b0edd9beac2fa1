#!/usr/bin/env python3
"""Tier-2 policy simulation on real key traces (issue 18, benchmark 1: Ex-Tmem's comparison).

Replays the key traces in ../shared/data/cache-traces/ as a read-through cache (a GET; on a miss the object
is fetched from the backing store and SET) against:

  fallow          the server's policy as the store implements it (crates/fallow-store/src/shard/{release,
                  tier,index}.rs, tiering.rs): RAM is a log of segments in creation order (the FIFO put
                  buffer); making room empties one of the 4 oldest sealed segments (the one that keeps the
                  fewest items), re-appending the items that are in the hotter half of a 128-item sample
                  both by last access and by Redis's logarithmic LFU counter (the implicit hot region) and
                  demoting the others: an item whose value still has a tier-2 copy becomes a stub without
                  a write, other items are written to tier 2 when the admission rule (admission.rs) says
                  so, the rest are dropped. `frequency` (the default): everything while tier 2 has more
                  free regions than cleaning keeps + 1, then only an item that a count-min sketch of reads
                  (4 x 4-bit counters per expected key, halved every 10 reads per key) counts at least 3
                  reads, or ranks strictly above a key sampled from the oldest region (8 per region,
                  reservoir); the doorkeeper (the reads >= 3 rule) adapts (admission.rs `Doorkeeper`):
                  it is switched off when fewer than 1/8 of the records it wrote were read on tier 2
                  (or promoted) before cleaning reached them (verdicts over 1/8 of tier 2's records),
                  and tried again after 1, 2, 4 .. 64 tier-2 capacities of departures from RAM (a
                  trial's verdicts count once cleaning has turned tier 2 over); `fixed_doorkeeper`
                  (label `fallow fixed doorkeeper`) never switches it off; `hits`: LFU counter - 5 >=
                  admit_hits_min; `all`. `exclusive` (sweep): a promotion drops the tier-2 copy. Tier 2
                  is a log of regions; while fewer than max(4, regions/64) are free the oldest is cleaned:
                  a stub read on tier 2 since its record was written is copied forward (a write) and
                  unmarked, other stubs are discarded, a copy whose item is in RAM is forgotten. The first tier-2 hit of a stub is served from tier 2 and marks it; a hit
                  on a marked stub promotes it into RAM keeping its copy (Ex-Tmem Algorithm 2), when
                  RAM has room or the gap since its previous read x 4 is within RAM's residency (items in
                  RAM over items appended per request: `promote` recent; `second` promotes every second
                  hit, `never` none).
  fallow-regions  Ex-Tmem's explicit regions (§III-C) with fallow's admission rule and tier 2: a FIFO put
                  buffer and an LRU hot region of `hot_fraction` of RAM; a hit in the buffer moves the item
                  to the hot region; items leaving either go to tier 2 under the same rule as above.
  lru             LRU-demote-all: RAM LRU; every object evicted from RAM is written to a tier-2 LRU; a
                  tier-2 hit moves the object back to RAM.
  arc, clock-pro, s3-fifo, w-tinylfu
                  as Ex-Tmem's §V arranges its baselines: the policy manages RAM + tier 2 as one cache of
                  the total capacity, and the objects it ranks hottest are in RAM: its frequency class first
                  (ARC T2 > T1, CLOCK-Pro hot > cold, S3-FIFO main > small, W-TinyLFU protected > probation
                  > window), most recently used first within a class. An object that moves from RAM rank
                  to tier-2 rank, or that enters the cache at tier-2 rank, is a tier-2 write.

Every object has the same size (--object-bytes, 4 KiB), so capacities are in objects: RAM = 5% and 10% of
the trace's footprint (distinct keys), tier 2 = 50%. The overall hit ratio of each baseline is checked
against libCacheSim's implementation at the same total capacity when libcachesim is installed.

  python3 scripts/bench/tier_sim.py [--jobs 2] [--json docs/bench-results/tier-sim.json]
                                    [--plot docs/bench-results/tier-sim.png] [--prefix arc-P6=4000000]
                                    [--no-sweep] [--traces NAME,...] [--traces-dir DIR]
                                    [--policies LABEL,...]
"""
from __future__ import annotations

import argparse
import array
import datetime as dt
import gzip
import heapq
import io
import json
import lzma
import math
import multiprocessing
import os
import platform
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict, deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACES_DIR = ROOT.parent / "shared" / "data" / "cache-traces"

# ----------------------------------------------------------------------------------------------- traces


def _zstd_text(path: Path) -> io.TextIOBase:
    try:
        import zstandard  # type: ignore

        raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"))
        return io.TextIOWrapper(raw, encoding="ascii")
    except ImportError:
        zstd = shutil.which("zstd")
        if zstd is None:
            raise SystemExit(f"{path.name}: needs the zstandard module (pip install zstandard) or zstd")
        proc = subprocess.Popen([zstd, "-dc", str(path)], stdout=subprocess.PIPE)
        return io.TextIOWrapper(proc.stdout, encoding="ascii")


def read_keys(path: Path, limit: int = 0):
    """The trace's keys in order (raw integers), at most `limit` requests (0: all).

    ARC traces (.lis.zst): lines `start_block n_blocks ignore request_no`, each `n_blocks` page requests;
    LIRS traces (.trace.gz): one integer key per line, `*` lines skipped; cache2k traces (.trace.xz):
    big-endian signed 32-bit integers back to back."""
    name = path.name
    out = array.array("q")
    if name.endswith(".lis.zst") or name.endswith(".lis"):
        stream = _zstd_text(path) if name.endswith(".zst") else open(path, encoding="ascii")
        with stream:
            for line in stream:
                parts = line.split()
                if len(parts) < 2:
                    continue
                start, count = int(parts[0]), int(parts[1])
                out.extend(range(start, start + count))
                if limit and len(out) >= limit:
                    break
    elif name.endswith(".trace.gz"):
        with gzip.open(path, "rt", encoding="ascii") as stream:
            for line in stream:
                line = line.strip()
                if not line or line == "*":
                    continue
                out.append(int(line))
                if limit and len(out) >= limit:
                    break
    elif name.endswith(".trace.xz"):
        data = lzma.open(path).read()
        count = len(data) // 4
        out.extend(struct.unpack(f">{count}i", data[: count * 4]))
    else:
        raise SystemExit(f"{name}: unknown trace format")
    if limit and len(out) > limit:
        del out[limit:]
    return out


def dense(keys) -> tuple[array.array, int]:
    """Keys renumbered 0..footprint-1 in order of first appearance (so state fits in lists)."""
    ids: dict[int, int] = {}
    out = array.array("i", bytes(4 * len(keys)))
    setdefault = ids.setdefault
    for index, key in enumerate(keys):
        out[index] = setdefault(key, len(ids))
    return out, len(ids)


def trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".lis.zst", ".lis", ".trace.gz", ".trace.xz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# ------------------------------------------------------------------------------------ fallow's policy

#: Redis's LFU_INIT_VAL: a new item's counter (crates/fallow-store/src/shard/values.rs).
LFU_INIT = 5
#: Increment probability of the logarithmic counter at each value (index.rs `touch`: factor 10).
LFU_PROBABILITY = [1.0 / (max(c - LFU_INIT, 0) * 10.0 + 1.0) for c in range(256)]
#: admission.rs
SAMPLES_PER_REGION = 8
FREQUENT_READS_MIN = 3
#: tier.rs `PROMOTE_READS_PER_RESIDENCY`.
PROMOTE_READS_PER_RESIDENCY = 4
SKETCH_BYTES_MIN, SKETCH_BYTES_MAX = 4 << 10, 16 << 20


#: Which rule wrote a tier-2 record (the doorkeeper's bookkeeping).
ORIGIN_ROOM, ORIGIN_DOOR, ORIGIN_DUEL, ORIGIN_COPY = 0, 1, 2, 3
ORIGIN_NAMES = ("room", "door", "duel", "copy")
#: admission.rs `Doorkeeper` (FallowBase.on_cleaned, admission_origin); "logs" are tier-2 capacities.
ADAPTIVE_DEFAULTS = {
    "eval_logs": 1 / 8,  # doorkeeper records cleaned per verdict (at least eval_min)
    "eval_min": 64,  # VERDICT_RECORDS_MIN
    "useful_min": 1 / 8,  # USEFUL_ONE_IN: a verdict's records read on tier 2 below this fraction: off
    "off_logs": 1,  # first off period (doubles after each failed trial, back to this after a passed verdict)
    "off_logs_max": 64,  # OFF_LAPS_MAX
}


def regions_kept_free(regions: int) -> int:
    """admission.rs `regions_kept_free`: what tier-2 cleaning keeps free."""
    return max(2, min(regions // 2, max(4, regions // 64)))


class Sketch:
    """admission.rs `FrequencySketch`: 4 four-bit counters per expected key (rounded to a power of two),
    halved every 10 reads per expected key. Rows are separate arrays here (the server puts a key's 4
    counters in one 64-byte block); sizes and aging are the server's."""

    SALTS = (0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F)

    def __init__(self, expected_keys: int):
        wanted = min(max(expected_keys * 2, SKETCH_BYTES_MIN), SKETCH_BYTES_MAX)
        sketch_bytes = min(1 << (wanted - 1).bit_length(), SKETCH_BYTES_MAX)
        width = sketch_bytes * 2 // 4
        self.mask = width - 1
        self.rows = [bytearray(width) for _ in range(4)]
        self.period = 10 * width
        self.reads = 0
        self.halve = bytes(i // 2 for i in range(256))

    def _index(self, key: int, salt: int) -> int:
        h = (key * salt) & 0xFFFFFFFF
        h ^= h >> 15
        h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
        h ^= h >> 12
        return h & self.mask

    def add(self, key: int) -> None:
        for row, salt in zip(self.rows, self.SALTS):
            i = self._index(key, salt)
            if row[i] < 15:
                row[i] += 1
        self.reads += 1
        if self.reads >= self.period:
            self.rows = [bytearray(row.translate(self.halve)) for row in self.rows]
            self.reads = 0

    def estimate(self, key: int) -> int:
        return min(row[self._index(key, salt)] for row, salt in zip(self.rows, self.SALTS))


class Tier2Log:
    """Tier 2 as the store runs it: a circular log of `regions` regions of `region_objects` records,
    cleaned oldest region first while fewer than `keep_free` regions are free (durability.rs `maintain`).

    Object state lives in the caller's arrays: `state[o]` 0 absent, 1 in RAM, 2 stub (value on tier 2
    only); `slot[o]` the record number of its tier-2 copy or -1; `read[o]` 1 when the stub was read on
    tier 2 since its record was written (ITEM_FLAG_TIER2_READ). Each region keeps a reservoir of the
    keys written to it (admission.rs `VictimSamples`)."""

    # Fewest records a region holds: a small tier 2 gets fewer regions rather than rounding its capacity
    # down to one record per region (lirs-loop's 505 objects were 256 in 256 regions before).
    REGION_OBJECTS_MIN = 4

    def __init__(self, capacity: int, regions: int, state, slot, read):
        regions = max(2, min(regions, capacity // self.REGION_OBJECTS_MIN))
        self.regions = regions
        self.region_objects = max(1, capacity // regions)
        self.capacity = self.region_objects * regions
        self.keep_free = regions_kept_free(regions)
        self.free = regions
        self.sealed: deque = deque()
        self.open: list | None = None
        self.open_samples: list = []
        self.next_record = 0
        self.state, self.slot, self.read = state, slot, read
        self.copies = 0  # records copied forward by cleaning (writes)
        self.discarded = 0  # stubs dropped by cleaning (tier-2 evictions)
        self.regions_cleaned = 0
        self.full = 0  # appends refused: no free region
        # Which rule wrote each live record (ORIGIN_*), and a hook told of every live record that cleaning
        # reaches: `cleaned(origin, used, record)`, used when the record was read on tier 2 since it was
        # written (a stub marked read, or an item promoted back into RAM).
        self.origin: bytearray | None = None
        self.cleaned = None

    def append(self, obj: int, free_regions_kept: int = 1) -> int:
        """Writes a record for `obj`; its number, or -1 when tier 2 is full (a client write leaves one
        free region to cleaning, tier2/mod.rs `place`)."""
        if self.open is None or len(self.open) >= self.region_objects:
            if self.free <= free_regions_kept:
                self.full += 1
                return -1
            if self.open is not None:
                self.sealed.append((self.open, self.open_samples))
            self.open = []
            self.open_samples = []
            self.free -= 1
        record = self.next_record
        self.next_record += 1
        self.open.append((obj, record))
        # Reservoir sampling with the key as the draw, as the server does with its key hash.
        seen = len(self.open)
        pick = seen - 1 if seen <= SAMPLES_PER_REGION else (obj * 0x9E3779B1 >> 7) % seen
        if pick < SAMPLES_PER_REGION:
            if pick < len(self.open_samples):
                self.open_samples[pick] = obj
            else:
                self.open_samples.append(obj)
        return record

    def has_room(self) -> bool:
        """admission.rs: while more regions than cleaning keeps (+1) are free, everything is admitted."""
        return self.free > self.keep_free + 1

    def victim(self, draw: int) -> int | None:
        """A key sampled from the oldest region (the next to clean), None when there is none."""
        if not self.sealed:
            return None
        samples = self.sealed[0][1]
        return samples[draw % len(samples)] if samples else None

    def maintain(self) -> None:
        cleaned = 0
        while self.free < self.keep_free and self.sealed and cleaned < 8:
            self.clean_oldest()
            cleaned += 1

    def clean_oldest(self) -> None:
        state, slot, read, origin, cleaned = self.state, self.slot, self.read, self.origin, self.cleaned
        for obj, record in self.sealed.popleft()[0]:
            if slot[obj] != record:
                continue  # dead: overwritten, promoted and forgotten, or moved
            if cleaned is not None:
                cleaned(origin[obj], state[obj] == 1 or read[obj], record)
                origin[obj] = ORIGIN_COPY
            if state[obj] == 2:
                if read[obj]:
                    moved = self.append(obj, 0)
                    if moved >= 0:
                        slot[obj] = moved
                        read[obj] = 0
                        self.copies += 1
                        continue
                state[obj] = 0
                slot[obj] = -1
                self.discarded += 1
            else:
                slot[obj] = -1  # the item is in RAM: its copy is simply forgotten
        self.free += 1
        self.regions_cleaned += 1


class FallowBase:
    """What both fallow variants share: per-object state, the LFU counter, departures from RAM."""

    def __init__(self, footprint: int, ram: int, tier2: int, admission: str, admit_hits_min: int,
                 tier2_regions: int, seed: int, frequent_reads_min: int = FREQUENT_READS_MIN,
                 adaptive: dict | None = None, exclusive: bool = False, fixed_doorkeeper: bool = False):
        self.ram = ram
        self.tier2_nominal = tier2
        self.state = bytearray(footprint)
        self.slot = [-1] * footprint
        self.lfu = bytearray(footprint)
        self.read = bytearray(footprint)
        self.access = [0] * footprint
        assert admission in ("frequency", "hits", "all"), admission
        self.fixed_doorkeeper = fixed_doorkeeper
        self.admission = admission
        self.admit_hits_min = admit_hits_min
        self.frequent_reads_min = frequent_reads_min
        self.sketch = Sketch(ram + tier2)
        self.draws = 0
        self.log = Tier2Log(tier2, tier2_regions, self.state, self.slot, self.read)
        self.rng = random.Random(seed)
        self.resident = 0
        self.ram_hits = self.tier2_hits = self.misses = 0
        self.admissions = 0  # writes of items leaving RAM
        self.stubbed = 0  # items leaving RAM whose copy was still valid: no write
        self.refused = 0  # items leaving RAM that the admission rule (or a full tier 2) dropped
        self.oom = 0  # inserts that found no room (every candidate segment was all hot)
        self.served = 0  # first tier-2 hits served without promotion
        self.exclusive = exclusive  # a promotion drops the tier-2 copy
        # tier.rs `room_for_promotion`: what a promotion pushes out of RAM is written whatever the rule.
        self.promoting = False
        # Per-origin counts of records reached by cleaning, and of those read on tier 2 (every admission).
        self.origin = bytearray(footprint)
        self.origin_cleaned = [0] * 4
        self.origin_used = [0] * 4
        self.origin_written = [0] * 4
        self.log.origin = self.origin
        self.log.cleaned = self.on_cleaned
        # The doorkeeper is switched off while its records go unread.
        self.adapt = {**ADAPTIVE_DEFAULTS, **(adaptive or {})}
        self.door_on = True
        self.verdict_cleaned = self.verdict_used = 0
        self.eval_records = max(self.adapt["eval_min"], int(self.adapt["eval_logs"] * self.log.capacity))
        self.off_until = 0  # the clock (departures from RAM, or requests) of the doorkeeper's next trial
        self.departures = 0
        self.off_logs = self.adapt["off_logs"]
        self.door_switches = 0
        self.door_off_departures = 0
        self.door_settled_at = 0  # a verdict counts once the log has cleaned this many regions

    def touch(self, obj: int, now: int) -> None:
        """index.rs `touch`, without the decay by idle minutes (the traces carry no time)."""
        counter = self.lfu[obj]
        if counter < 255 and (counter <= LFU_INIT or self.rng.random() < LFU_PROBABILITY[counter]):
            self.lfu[obj] = counter + 1
        self.access[obj] = now

    def on_cleaned(self, origin: int, used: bool, record: int) -> None:
        """Cleaning reached a live record written by rule `origin`; `used`: read on tier 2 since written."""
        self.origin_cleaned[origin] += 1
        if used:
            self.origin_used[origin] += 1
        if (origin != ORIGIN_DOOR or self.admission != "frequency" or self.fixed_doorkeeper
                or not self.door_on or self.log.regions_cleaned < self.door_settled_at):
            return
        self.verdict_cleaned += 1
        self.verdict_used += used
        if self.verdict_cleaned < self.eval_records:
            return
        useful = self.verdict_used / self.verdict_cleaned
        self.verdict_cleaned = self.verdict_used = 0
        if useful >= self.adapt["useful_min"]:
            self.off_logs = self.adapt["off_logs"]  # the doorkeeper pays: the next off period is short
            return
        self.door_on = False
        self.door_switches += 1
        self.off_until = self.clock() + int(self.off_logs * self.log.capacity)
        self.off_logs = min(self.off_logs * 2, self.adapt["off_logs_max"])

    def clock(self) -> int:
        """The doorkeeper's clock: items that left RAM without a copy while it was off."""
        return self.departures

    def admission_origin(self, obj: int) -> int:
        """admission.rs `Admission::admits`: the origin of the record to write for `obj` leaving RAM,
        or -1. `frequency`: room; else the doorkeeper (switched off while its records go unread, tried
        again at `off_until`, `depart`); else the duel."""
        if self.admission == "all" or self.promoting:
            return ORIGIN_ROOM
        if self.admission == "hits":
            return ORIGIN_ROOM if self.lfu[obj] - LFU_INIT >= self.admit_hits_min else -1
        if self.log.has_room():
            return ORIGIN_ROOM
        reads = self.sketch.estimate(obj)
        if reads >= self.frequent_reads_min:
            if self.door_on:
                return ORIGIN_DOOR
            self.door_off_departures += 1
        self.draws += 1
        victim = self.log.victim(self.draws)
        return ORIGIN_DUEL if victim is None or reads > self.sketch.estimate(victim) else -1

    def tier2_hit(self, obj: int) -> bool:
        """A read of a stub: True when it promotes (the stub was read on tier 2 before), else it is
        served from tier 2 and marked."""
        self.tier2_hits += 1
        if self.read[obj]:
            if self.exclusive:
                # Exclusive caching: the promoted item's tier-2 copy is dead; leaving RAM again writes.
                self.origin_cleaned[self.origin[obj]] += 1
                self.origin_used[self.origin[obj]] += 1
                self.slot[obj] = -1
            return True
        self.read[obj] = 1
        self.served += 1
        return False

    def depart(self, obj: int) -> None:
        """tier.rs `demote_at` (may_write: the careful path) for an ephemeral item."""
        self.resident -= 1
        if self.slot[obj] >= 0:
            self.state[obj] = 2
            self.stubbed += 1
            return
        if self.admission == "frequency" and not self.door_on:
            self.departures += 1
            if self.clock() >= self.off_until:
                # A trial: the verdict is on the records it writes once the log has turned over.
                self.door_on = True
                self.verdict_cleaned = self.verdict_used = 0
                self.door_settled_at = self.log.regions_cleaned + self.log.regions
        origin = self.admission_origin(obj)
        if origin >= 0:
            record = self.log.append(obj)
            if record >= 0:
                self.slot[obj] = record
                self.state[obj] = 2
                self.read[obj] = 0
                self.admissions += 1
                self.origin[obj] = origin
                self.origin_written[origin] += 1
                return
        self.refused += 1
        self.state[obj] = 0

    def result(self) -> dict:
        return {
            "ram_hits": self.ram_hits,
            "tier2_hits": self.tier2_hits,
            "misses": self.misses,
            "tier2_writes": self.admissions + self.log.copies,
            "tier2_writes_admitted": self.admissions,
            "tier2_writes_cleaning": self.log.copies,
            "left_ram_without_write": self.stubbed,
            "admissions_refused": self.refused,
            "tier2_discarded": self.log.discarded,
            "tier2_full": self.log.full,
            "inserts_refused_oom": self.oom,
            "tier2_capacity_objects": self.log.capacity,
            "tier2_served_without_promotion": self.served,
            "origin_written": dict(zip(ORIGIN_NAMES, self.origin_written)),
            "origin_cleaned": dict(zip(ORIGIN_NAMES, self.origin_cleaned)),
            "origin_used": dict(zip(ORIGIN_NAMES, self.origin_used)),
            "door_switches_off": self.door_switches,
            "door_off_refusals": self.door_off_departures,
            "door_on_at_end": self.door_on,
        }


class FallowServer(FallowBase):
    """The server's RAM: segments in creation order, careful release of one of the 4 oldest sealed
    segments per step (release.rs `plan_careful_release`), hot items re-appended."""

    CANDIDATES = 4
    SAMPLE_SEGMENTS = 16
    SAMPLE_ITEMS_PER_SEGMENT = 8

    def __init__(self, footprint: int, ram: int, tier2: int, admission: str = "frequency",
                 admit_hits_min: int = 1, hot_quantile: float = 0.5, ram_segments: int = 64,
                 tier2_regions: int = 256, seed: int = 1, frequent_reads_min: int = FREQUENT_READS_MIN,
                 adaptive: dict | None = None, exclusive: bool = False, fixed_doorkeeper: bool = False,
                 promote: str = "recent",
                 promote_reads_per_residency: int = PROMOTE_READS_PER_RESIDENCY):
        super().__init__(footprint, ram, tier2, admission, admit_hits_min, tier2_regions, seed,
                         frequent_reads_min, adaptive, exclusive, fixed_doorkeeper)
        assert promote in ("second", "recent", "never"), promote
        self.promote = promote
        self.promote_reads_per_residency = promote_reads_per_residency
        # tier.rs `note_residency`: requests an unread item stays in RAM (Little's law: items in RAM
        # over items appended per request, smoothed 1/4 per estimate), and the last estimate's
        # (request, appends).
        self.residency = 0
        self.appended = 0
        self.residency_sample = (0, 0)
        self.declined = 0  # second tier-2 reads served in place: too rare for RAM to serve the item again
        self.segment_objects = max(1, ram // ram_segments)
        self.hot_quantile = hot_quantile
        self.segments: dict[int, list] = {}
        self.order: deque = deque()  # segment numbers, oldest first
        self.next_segment = 0
        self.active: list | None = None
        self.active_number = -1
        self.segment_of = [0] * footprint
        self.now = 0
        self.survivors = 0  # items re-appended by releases (the implicit hot region's traffic)
        self.releases = 0

    def append(self, obj: int) -> None:
        if self.active is None or len(self.active) >= self.segment_objects:
            self.active_number = self.next_segment
            self.next_segment += 1
            self.active = []
            self.segments[self.active_number] = self.active
            self.order.append(self.active_number)
        self.active.append(obj)
        self.appended += 1
        self.segment_of[obj] = self.active_number

    def hot_thresholds(self) -> tuple[int, int] | None:
        """The access time and LFU counter an item must exceed to survive (`Hotness::is_hot`: at least
        `hot_quantile` of the sample strictly below it by both); None when the sample is empty."""
        order, segments, rng = self.order, self.segments, self.rng
        access, lfu = self.access, self.lfu
        times: list[int] = []
        counters: list[int] = []
        for _ in range(min(self.SAMPLE_SEGMENTS, len(order))):
            items = segments[order[rng.randrange(len(order))]][: self.SAMPLE_ITEMS_PER_SEGMENT]
            times.extend(access[o] for o in items)
            counters.extend(lfu[o] for o in items)
        total = len(times)
        if total == 0:
            return None
        needed = math.ceil(self.hot_quantile * total)
        if needed == 0:
            return (-1, -1)
        times.sort()
        counters.sort()
        return (times[needed - 1], counters[needed - 1])

    def release_step(self) -> int:
        """demote_step → careful_release_step: empties one segment; returns the items that left RAM."""
        sealed = [number for number in list(self.order)[: self.CANDIDATES + 1]
                  if number != self.active_number][: self.CANDIDATES]
        pool = sealed or ([self.active_number] if self.active else [])
        if not pool:
            return 0
        thresholds = self.hot_thresholds()
        access, lfu = self.access, self.lfu
        best = None
        for number in pool:
            items = self.segments[number]
            if thresholds is None:
                keep = []
            else:
                time_min, lfu_min = thresholds
                keep = [o for o in items if access[o] > time_min and lfu[o] > lfu_min]
            if best is None or len(keep) < len(best[1]):
                best = (number, keep)
        number, keep = best
        items = self.segments.pop(number)
        self.note_residency()
        self.order.remove(number)
        if number == self.active_number:
            self.active = None
            self.active_number = -1
        self.releases += 1
        kept = set(keep)
        victims = 0
        for obj in items:
            if obj not in kept:
                self.depart(obj)
                victims += 1
        for obj in keep:
            self.append(obj)
        self.survivors += len(keep)
        return victims

    def declines(self, previous: int, now: int) -> bool:
        """tier.rs `serves_without_promotion` for a second tier-2 read (RAM full: every item slot taken;
        the server allows for the segment a release may leave free). The server also declines while
        tier-2 cleaning is behind (`cleaning_behind`); here cleaning runs after every request and never is."""
        if self.promote == "second" or self.resident + 1 <= self.ram:
            return False
        if self.promote == "never":
            return True
        # recent: promoted only when reads come often enough for the item to be read
        # `promote_reads_per_residency` times while RAM keeps it. The server's clock counts whole
        # seconds (a gap counts as the second it may have lasted); requests here are exact.
        # RAM that has released nothing for longer than the estimate keeps items at least that long.
        residency = max(self.residency, now - self.residency_sample[0])
        return (now - previous) * self.promote_reads_per_residency > residency

    def note_residency(self, window: int = 64) -> None:
        """tier.rs `note_residency`, at most every `window` requests (the server's 100 ms)."""
        sampled_at, sampled_appends = self.residency_sample
        if self.now - sampled_at < window:
            return
        self.residency_sample = (self.now, self.appended)
        appended = self.appended - sampled_appends
        if sampled_at == 0 or appended == 0:
            return
        estimate = self.resident * (self.now - sampled_at) // appended
        self.residency = estimate if self.residency == 0 else (self.residency * 3 + estimate) // 4

    def run(self, trace) -> dict:
        state, ram, log = self.state, self.ram, self.log
        touch, append, release_step = self.touch, self.append, self.release_step
        sketch_add, tier2_hit = self.sketch.add, self.tier2_hit
        # Occupancy, sampled 40 times over the second half (`occupancy`).
        sample_from, sample_every, samples = len(trace) // 2, max(1, len(trace) // 80), []
        for now, obj in enumerate(trace):
            self.now = now
            if now >= sample_from and now % sample_every == 0:
                samples.append(self.occupancy())
            sketch_add(obj)  # index.rs `access_location`: every read, hit or miss
            status = state[obj]
            if status == 1:
                self.ram_hits += 1
                touch(obj, now)
                continue
            if status == 2:
                # A read of a stub: counted, touched, served from tier 2 the first time; else promoted
                # (tier.rs `promote_from`): room first, what leaves RAM for it written whatever the
                # admission rule says, then the value is appended.
                previous = self.access[obj]
                touch(obj, now)
                if not tier2_hit(obj):
                    continue
                if self.declines(previous, now):
                    self.declined += 1
                    continue
                # What 8 slices leave over the limit the server's housekeeping demotes under the same
                # rule (`demote_excess_step`): all of it here, at once.
                self.promoting = True
                while self.resident + 1 > ram and release_step() > 0:
                    pass
                self.promoting = False
                state[obj] = 1
                self.resident += 1
                append(obj)
            else:
                # A miss: the client SETs the object (tiering.rs `make_tier2_room`, one shard).
                self.misses += 1
                fits = True
                while self.resident + 1 > ram:
                    if release_step() == 0 and self.resident + 1 > ram:
                        fits = False
                        break
                if not fits:
                    self.oom += 1
                    continue
                state[obj] = 1
                self.lfu[obj] = LFU_INIT
                self.access[obj] = now
                self.resident += 1
                append(obj)
            if log.free < log.keep_free:
                log.maintain()
        out = self.result()
        out["survivors_reappended"] = self.survivors
        out["promotions_declined"] = self.declined
        out["ram_segment_objects"] = self.segment_objects
        if samples:
            capacity = self.ram + self.tier2_nominal
            out["occupancy_held"] = sum(held for held, _ in samples) / len(samples) / capacity
            out["occupancy_duplicates"] = sum(twice for _, twice in samples) / len(samples) / capacity
        return out

    def occupancy(self) -> tuple[int, int]:
        """(distinct objects held: in RAM or stubs, RAM items whose tier-2 copy is valid too)."""
        slot = self.slot
        twice = sum(1 for items in self.segments.values() for o in items if slot[o] >= 0)
        return self.state.count(1) + self.state.count(2), twice


class FallowRegions(FallowBase):
    """Ex-Tmem's explicit regions: FIFO put buffer + LRU hot region, with fallow's admission and tier 2."""

    def __init__(self, footprint: int, ram: int, tier2: int, admission: str = "frequency",
                 admit_hits_min: int = 1, hot_fraction: float = 0.5, tier2_regions: int = 256,
                 seed: int = 1, frequent_reads_min: int = FREQUENT_READS_MIN,
                 adaptive: dict | None = None, exclusive: bool = False, fixed_doorkeeper: bool = False):
        super().__init__(footprint, ram, tier2, admission, admit_hits_min, tier2_regions, seed,
                         frequent_reads_min, adaptive, exclusive, fixed_doorkeeper)
        self.hot_capacity = min(ram - 1, max(0, round(hot_fraction * ram)))
        self.buffer_capacity = ram - self.hot_capacity

    def run(self, trace) -> dict:
        state, log, touch, depart = self.state, self.log, self.touch, self.depart
        buffer: OrderedDict = OrderedDict()
        hot: OrderedDict = OrderedDict()
        buffer_capacity, hot_capacity = self.buffer_capacity, self.hot_capacity
        sketch_add, tier2_hit = self.sketch.add, self.tier2_hit
        for now, obj in enumerate(trace):
            sketch_add(obj)
            status = state[obj]
            if status == 1:
                self.ram_hits += 1
                touch(obj, now)
                if obj in hot:
                    hot.move_to_end(obj)
                elif hot_capacity > 0:
                    del buffer[obj]
                    hot[obj] = None
                    if len(hot) > hot_capacity:
                        depart(hot.popitem(last=False)[0])
                continue
            if status == 2:
                touch(obj, now)
                if not tier2_hit(obj):
                    continue
            else:
                self.misses += 1
                self.lfu[obj] = LFU_INIT
                self.access[obj] = now
            state[obj] = 1
            self.resident += 1
            buffer[obj] = None
            if len(buffer) > buffer_capacity:
                self.promoting = status == 2
                depart(buffer.popitem(last=False)[0])
                self.promoting = False
            if log.free < log.keep_free:
                log.maintain()
        return self.result()


# ------------------------------------------------------------------------------------------- baselines


def run_lru_demote_all(trace, footprint: int, ram: int, tier2: int) -> dict:
    """RAM LRU; every object evicted from RAM is written to a tier-2 LRU; a tier-2 hit moves it back."""
    top: OrderedDict = OrderedDict()
    bottom: OrderedDict = OrderedDict()
    ram_hits = tier2_hits = misses = writes = 0
    for obj in trace:
        if obj in top:
            top.move_to_end(obj)
            ram_hits += 1
            continue
        if obj in bottom:
            del bottom[obj]
            tier2_hits += 1
        else:
            misses += 1
        top[obj] = None
        if len(top) > ram:
            bottom[top.popitem(last=False)[0]] = None
            writes += 1
            if len(bottom) > tier2:
                bottom.popitem(last=False)
    return {"ram_hits": ram_hits, "tier2_hits": tier2_hits, "misses": misses, "tier2_writes": writes,
            "tier2_writes_on_insert": 0}


class Placement:
    """Which of a single cache's objects are in RAM: the `ram` highest keys (key = class << 40 | last
    access), kept with two lazily cleaned heaps of `key << bits | obj` integers. Counts the objects
    written to tier 2."""

    SHIFT = 40

    def __init__(self, footprint: int, ram: int):
        self.ram = ram
        self.bits = max(1, footprint.bit_length())
        self.mask = (1 << self.bits) - 1
        self.side = bytearray(footprint)  # 0 absent, 1 RAM, 2 tier 2
        self.key = [0] * footprint
        self.top: list = []  # min-heap of RAM entries
        self.bottom: list = []  # min-heap of negated tier-2 entries
        self.in_ram = 0
        self.in_tier2 = 0
        self.dirty = False  # the invariant may be broken
        self.writes = 0
        self.writes_on_insert = 0

    def insert(self, obj: int, key: int) -> None:
        """A new object, placed on tier 2 until `settle` raises it."""
        self.key[obj] = key
        self.side[obj] = 2
        self.in_tier2 += 1
        heapq.heappush(self.bottom, -((key << self.bits) | obj))
        self.dirty = True

    def rekey(self, obj: int, key: int) -> None:
        old = self.key[obj]
        if old == key:
            return
        self.key[obj] = key
        if self.side[obj] == 1:
            heapq.heappush(self.top, (key << self.bits) | obj)
            if key < old:
                self.dirty = True
        else:
            heapq.heappush(self.bottom, -((key << self.bits) | obj))
            self.dirty = True

    def remove(self, obj: int) -> None:
        if self.side[obj] == 1:
            self.in_ram -= 1
            self.dirty = True
        else:
            self.in_tier2 -= 1
        self.side[obj] = 0

    def _compact(self) -> None:
        side, key, bits = self.side, self.key, self.bits
        self.top = list({(key[o] << bits) | o for o in (e & self.mask for e in self.top) if side[o] == 1})
        heapq.heapify(self.top)
        self.bottom = list({-((key[o] << bits) | o) for o in ((-e) & self.mask for e in self.bottom)
                            if side[o] == 2})
        heapq.heapify(self.bottom)

    def settle(self, new: int = -1) -> None:
        """Restores the invariant; `new` is an object inserted by this request (written if it stays on
        tier 2)."""
        if len(self.top) > 2 * self.in_ram + 4096 or len(self.bottom) > 2 * self.in_tier2 + 4096:
            self._compact()
        if not self.dirty:
            return
        self.dirty = False
        side, key, bits, mask = self.side, self.key, self.bits, self.mask
        heappush, heappop = heapq.heappush, heapq.heappop
        top, bottom = self.top, self.bottom
        ram, in_ram, in_tier2, writes = self.ram, self.in_ram, self.in_tier2, self.writes
        while True:
            while top:
                entry = top[0]
                obj = entry & mask
                if side[obj] == 1 and key[obj] == entry >> bits:
                    break
                heappop(top)
            while bottom:
                entry = -bottom[0]
                obj = entry & mask
                if side[obj] == 2 and key[obj] == entry >> bits:
                    break
                heappop(bottom)
            if not bottom:
                break
            if in_ram < ram:
                up = -heappop(bottom)
                side[up & mask] = 1
                in_tier2 -= 1
                in_ram += 1
                heappush(top, up)
                continue
            if not top or -bottom[0] <= top[0]:
                break
            down = heappop(top)
            up = -heappop(bottom)
            side[up & mask] = 1
            side[down & mask] = 2
            heappush(top, up)
            heappush(bottom, -down)
            writes += 1
        self.in_ram, self.in_tier2, self.writes = in_ram, in_tier2, writes
        if new >= 0 and side[new] == 2:
            self.writes += 1
            self.writes_on_insert += 1

    def result(self, ram_hits: int, tier2_hits: int, misses: int) -> dict:
        return {"ram_hits": ram_hits, "tier2_hits": tier2_hits, "misses": misses,
                "tier2_writes": self.writes, "tier2_writes_on_insert": self.writes_on_insert}


def run_arc(trace, footprint: int, ram: int, tier2: int) -> dict:
    """ARC (Megiddo and Modha, FAST '03) of capacity ram + tier2; T2 ranks above T1."""
    c = ram + tier2
    place = Placement(footprint, ram)
    shift = Placement.SHIFT
    t1: OrderedDict = OrderedDict()
    t2: OrderedDict = OrderedDict()
    b1: OrderedDict = OrderedDict()
    b2: OrderedDict = OrderedDict()
    p = 0.0
    ram_hits = tier2_hits = misses = 0
    side = place.side

    def replace(in_b2: bool) -> None:
        if t1 and ((in_b2 and len(t1) == p) or len(t1) > p):
            victim = t1.popitem(last=False)[0]
            b1[victim] = None
        else:
            victim = t2.popitem(last=False)[0]
            b2[victim] = None
        place.remove(victim)

    for now, x in enumerate(trace):
        if x in t1 or x in t2:
            if side[x] == 1:
                ram_hits += 1
            else:
                tier2_hits += 1
            if x in t1:
                del t1[x]
            else:
                del t2[x]
            t2[x] = None
            place.rekey(x, (1 << shift) | now)
            place.settle()
            continue
        misses += 1
        if x in b1:
            p = min(float(c), p + max(len(b2) / len(b1), 1.0))
            replace(False)
            del b1[x]
            t2[x] = None
            place.insert(x, (1 << shift) | now)
        elif x in b2:
            p = max(0.0, p - max(len(b1) / len(b2), 1.0))
            replace(True)
            del b2[x]
            t2[x] = None
            place.insert(x, (1 << shift) | now)
        else:
            l1 = len(t1) + len(b1)
            if l1 == c:
                if len(t1) < c:
                    b1.popitem(last=False)
                    replace(False)
                else:
                    place.remove(t1.popitem(last=False)[0])
            elif l1 < c:
                total = l1 + len(t2) + len(b2)
                if total >= c:
                    if total == 2 * c:
                        b2.popitem(last=False)
                    replace(False)
            t1[x] = None
            place.insert(x, now)
        place.settle(x)
    return place.result(ram_hits, tier2_hits, misses)


def run_clock_pro(trace, footprint: int, ram: int, tier2: int) -> dict:
    """CLOCK-Pro (Jiang, Chen, Zhang, USENIX ATC '05) as its common ports run it (one clock of hot,
    cold and non-resident test pages; the cold target adapts: +1 on a test-page hit, -1 when a test
    page expires); hot pages rank above cold ones."""
    c = ram + tier2
    place = Placement(footprint, ram)
    shift = Placement.SHIFT
    COLD, HOT, TEST = 1, 2, 3
    status = bytearray(footprint)  # 0: not in the clock
    ref = bytearray(footprint)
    nxt = [0] * footprint
    prv = [0] * footprint
    access = [0] * footprint
    hands = {"hot": -1, "cold": -1, "test": -1}
    counts = {"hot": 0, "cold": 0, "test": 0}
    cold_target = [c]

    def link_before_hot(x: int) -> None:
        hot = hands["hot"]
        if hot < 0:
            nxt[x] = prv[x] = x
            hands["hot"] = hands["cold"] = hands["test"] = x
            return
        before = prv[hot]
        nxt[before] = x
        prv[x] = before
        nxt[x] = hot
        prv[hot] = x

    def unlink(x: int) -> None:
        for name in ("hot", "cold", "test"):
            if hands[name] == x:
                hands[name] = prv[x] if prv[x] != x else -1
        if nxt[x] == x:
            for name in ("hot", "cold", "test"):
                hands[name] = -1
        else:
            nxt[prv[x]] = nxt[x]
            prv[nxt[x]] = prv[x]
        status[x] = 0

    def run_hand_test() -> None:
        if hands["test"] == hands["cold"]:
            run_hand_cold()
        x = hands["test"]
        if status[x] == TEST:
            before = prv[x]
            unlink(x)
            hands["test"] = before
            counts["test"] -= 1
            if cold_target[0] > 1:
                cold_target[0] -= 1
        if hands["test"] >= 0:
            hands["test"] = nxt[hands["test"]]

    def run_hand_hot() -> None:
        if hands["hot"] == hands["test"]:
            run_hand_test()
        x = hands["hot"]
        if status[x] == HOT:
            if ref[x]:
                ref[x] = 0
            else:
                status[x] = COLD
                counts["hot"] -= 1
                counts["cold"] += 1
                place.rekey(x, access[x])
        hands["hot"] = nxt[hands["hot"]]

    def run_hand_cold() -> None:
        x = hands["cold"]
        if status[x] == COLD:
            if ref[x]:
                status[x] = HOT
                ref[x] = 0
                counts["cold"] -= 1
                counts["hot"] += 1
                place.rekey(x, (1 << shift) | access[x])
            else:
                status[x] = TEST
                counts["cold"] -= 1
                counts["test"] += 1
                place.remove(x)
                while c < counts["test"]:
                    run_hand_test()
        hands["cold"] = nxt[hands["cold"]]
        while c - cold_target[0] < counts["hot"]:
            run_hand_hot()

    ram_hits = tier2_hits = misses = 0
    side = place.side
    for now, x in enumerate(trace):
        st = status[x]
        if st == COLD or st == HOT:
            if side[x] == 1:
                ram_hits += 1
            else:
                tier2_hits += 1
            ref[x] = 1
            access[x] = now
            place.rekey(x, ((1 << shift) if st == HOT else 0) | now)
            place.settle()
            continue
        misses += 1
        if st == TEST:
            if cold_target[0] < c:
                cold_target[0] += 1
            unlink(x)
            counts["test"] -= 1
            kind = HOT
        else:
            kind = COLD
        while c <= counts["hot"] + counts["cold"]:
            run_hand_cold()
        link_before_hot(x)
        status[x] = kind
        ref[x] = 0
        access[x] = now
        counts["hot" if kind == HOT else "cold"] += 1
        place.insert(x, ((1 << shift) if kind == HOT else 0) | now)
        place.settle(x)
    return place.result(ram_hits, tier2_hits, misses)


def run_s3_fifo(trace, footprint: int, ram: int, tier2: int) -> dict:
    """S3-FIFO (Yang et al., SOSP '23) as libCacheSim's S3FIFO.c runs it: 10% small FIFO, 90% main FIFO
    (2-bit CLOCK), a ghost FIFO of 90% of the capacity, small → main at 2 hits; main ranks above small."""
    c = ram + tier2
    small_capacity = int(c * 0.10)
    main_capacity = c - small_capacity
    ghost_capacity = int(c * 0.90)
    place = Placement(footprint, ram)
    shift = Placement.SHIFT
    where = bytearray(footprint)  # 0 none, 1 small, 2 main
    freq = bytearray(footprint)
    access = [0] * footprint
    small: deque = deque()
    main: deque = deque()
    ghost: deque = deque()
    ghost_stamp = [0] * footprint  # stamp of the live ghost entry, 0 = none
    stamp = 0
    ghost_count = 0
    has_evicted = False
    ram_hits = tier2_hits = misses = 0
    side = place.side
    for now, x in enumerate(trace):
        w = where[x]
        if w:
            if side[x] == 1:
                ram_hits += 1
            else:
                tier2_hits += 1
            freq[x] = min(freq[x] + 1, 255)
            access[x] = now
            place.rekey(x, ((1 << shift) if w == 2 else 0) | now)
            place.settle()
            continue
        misses += 1
        hit_on_ghost = ghost_stamp[x] != 0
        if hit_on_ghost:
            ghost_stamp[x] = 0
            ghost_count -= 1
        while len(small) + len(main) + 1 > c:
            has_evicted = True
            if len(main) > main_capacity or not small:
                while main:
                    y = main.popleft()
                    if freq[y] >= 1:
                        freq[y] = min(freq[y], 3) - 1
                        main.append(y)
                    else:
                        where[y] = 0
                        place.remove(y)
                        break
            else:
                while small:
                    y = small.popleft()
                    if freq[y] >= 2:
                        freq[y] = 0
                        where[y] = 2
                        main.append(y)
                        place.rekey(y, (1 << shift) | access[y])
                    else:
                        where[y] = 0
                        place.remove(y)
                        if ghost_capacity > 0 and ghost_stamp[y] == 0:
                            while ghost_count >= ghost_capacity:
                                g, s = ghost.popleft()
                                if ghost_stamp[g] == s:
                                    ghost_stamp[g] = 0
                                    ghost_count -= 1
                            stamp += 1
                            ghost_stamp[y] = stamp
                            ghost.append((y, stamp))
                            ghost_count += 1
                        break
        freq[x] = 0
        access[x] = now
        if hit_on_ghost or (not has_evicted and len(small) >= small_capacity):
            where[x] = 2
            main.append(x)
            place.insert(x, (1 << shift) | now)
        else:
            where[x] = 1
            small.append(x)
            place.insert(x, now)
        place.settle(x)
        if len(ghost) > 4 * ghost_capacity + 1024:
            ghost = deque((g, s) for g, s in ghost if ghost_stamp[g] == s)
    return place.result(ram_hits, tier2_hits, misses)


def run_w_tinylfu(trace, footprint: int, ram: int, tier2: int) -> dict:
    """W-TinyLFU (Einziger, Friedman, Manes, TOS '17): 1% window LRU, main SLRU (20% probation, 80%
    protected), admission when the window victim is more frequent than the main victim. Frequencies are
    exact 4-bit counts halved every 10 x capacity accesses (the sketch without its collisions).
    Protected ranks above probation, probation above the window."""
    c = ram + tier2
    window_capacity = max(1, int(c * 0.01))
    main_capacity = c - window_capacity
    protected_capacity = int(main_capacity * 0.8)
    place = Placement(footprint, ram)
    shift = Placement.SHIFT
    WINDOW, PROBATION, PROTECTED = 1, 2, 3
    where = bytearray(footprint)
    access = [0] * footprint
    counts = bytearray(footprint)
    halve = bytes(min(i, 15) // 2 for i in range(256))
    sample_period = 10 * c
    samples = 0
    window: OrderedDict = OrderedDict()
    probation: OrderedDict = OrderedDict()
    protected: OrderedDict = OrderedDict()
    ram_hits = tier2_hits = misses = 0
    side = place.side
    for now, x in enumerate(trace):
        if counts[x] < 15:
            counts[x] += 1
        samples += 1
        if samples >= sample_period:
            counts = bytearray(counts.translate(halve))
            samples = 0
        w = where[x]
        access[x] = now
        if w:
            if side[x] == 1:
                ram_hits += 1
            else:
                tier2_hits += 1
            if w == WINDOW:
                window.move_to_end(x)
                place.rekey(x, now)
            elif w == PROTECTED:
                protected.move_to_end(x)
                place.rekey(x, (2 << shift) | now)
            else:
                del probation[x]
                protected[x] = None
                where[x] = PROTECTED
                place.rekey(x, (2 << shift) | now)
                if len(protected) > protected_capacity:
                    y = protected.popitem(last=False)[0]
                    probation[y] = None
                    where[y] = PROBATION
                    place.rekey(y, (1 << shift) | access[y])
            place.settle()
            continue
        misses += 1
        window[x] = None
        where[x] = WINDOW
        place.insert(x, now)
        if len(window) > window_capacity:
            candidate = window.popitem(last=False)[0]
            if len(probation) + len(protected) < main_capacity:
                probation[candidate] = None
                where[candidate] = PROBATION
                place.rekey(candidate, (1 << shift) | access[candidate])
            else:
                victims = probation if probation else protected
                victim = next(iter(victims))
                if counts[candidate] > counts[victim]:
                    del victims[victim]
                    where[victim] = 0
                    place.remove(victim)
                    probation[candidate] = None
                    where[candidate] = PROBATION
                    place.rekey(candidate, (1 << shift) | access[candidate])
                else:
                    where[candidate] = 0
                    place.remove(candidate)
        place.settle(x)
    return place.result(ram_hits, tier2_hits, misses)


BASELINES = {
    "lru": run_lru_demote_all,
    "arc": run_arc,
    "clock-pro": run_clock_pro,
    "s3-fifo": run_s3_fifo,
    "w-tinylfu": run_w_tinylfu,
}

# ---------------------------------------------------------------------------------------------- driver

#: fallow's one setting for every trace (the server's defaults): tier2-admit-hits 1, the sample's upper half.
DEFAULT_FALLOW = {"admission": "frequency", "hot_quantile": 0.5}
DEFAULT_REGIONS = {"admission": "frequency", "hot_fraction": 0.5}


def configurations(sweep: bool) -> list[tuple[str, str, dict]]:
    """(label, kind, params) of every policy run on each trace x RAM size."""
    runs = [(name, name, {}) for name in BASELINES]
    runs.append(("fallow", "fallow", dict(DEFAULT_FALLOW)))
    runs.append(("fallow-regions", "fallow-regions", dict(DEFAULT_REGIONS)))
    runs.append(("fallow fixed doorkeeper", "fallow", {**DEFAULT_FALLOW, "fixed_doorkeeper": True}))
    runs.append(("fallow promote=second", "fallow", {**DEFAULT_FALLOW, "promote": "second"}))
    if sweep:
        runs.append(("fallow promote=never", "fallow", {**DEFAULT_FALLOW, "promote": "never"}))
        runs.append(("fallow promote k=1", "fallow", {**DEFAULT_FALLOW, "promote_reads_per_residency": 1}))
        runs.append(("fallow exclusive", "fallow", {**DEFAULT_FALLOW, "exclusive": True}))
        for admit in (0, 1):
            runs.append((f"fallow hits>={admit}", "fallow",
                         {**DEFAULT_FALLOW, "admission": "hits", "admit_hits_min": admit}))
        for reads in (2, 4, 16):
            # 16: never (counters stop at 15): the duel alone.
            runs.append((f"fallow reads>={reads}", "fallow", {**DEFAULT_FALLOW, "frequent_reads_min": reads}))
        for quantile in (0.25, 0.75):
            runs.append((f"fallow hot-quantile={quantile}", "fallow",
                         {**DEFAULT_FALLOW, "hot_quantile": quantile}))
        for fraction in (0.25, 0.75):
            runs.append((f"fallow-regions hot={fraction}", "fallow-regions",
                         {**DEFAULT_REGIONS, "hot_fraction": fraction}))
        runs.append(("fallow-regions hits>=1", "fallow-regions",
                     {**DEFAULT_REGIONS, "admission": "hits", "admit_hits_min": 1}))
    return runs


#: The policies the plot and the main table show.
PLOTTED = list(BASELINES) + ["fallow", "fallow-regions", "fallow hits>=1"]

TRACES: dict[str, tuple[array.array, int]] = {}  # filled before the workers fork


def simulate(job: tuple) -> dict:
    trace_key, ram_fraction, label, kind, params, ram, tier2, options = job
    trace, footprint = TRACES[trace_key]
    started = time.perf_counter()
    cpu_started = time.process_time()
    if kind == "fallow":
        sim = FallowServer(footprint, ram, tier2, ram_segments=options["ram_segments"],
                           tier2_regions=options["tier2_regions"], seed=options["seed"], **params)
        out = sim.run(trace)
    elif kind == "fallow-regions":
        sim = FallowRegions(footprint, ram, tier2, tier2_regions=options["tier2_regions"],
                            seed=options["seed"], **params)
        out = sim.run(trace)
    else:
        out = BASELINES[kind](trace, footprint, ram, tier2)
    requests = len(trace)
    assert out["ram_hits"] + out["tier2_hits"] + out["misses"] == requests, (label, out)
    out.update({
        "trace": trace_key, "ram_fraction": ram_fraction, "policy": label, "kind": kind, "params": params,
        "ram_objects": ram, "tier2_objects": tier2, "requests": requests,
        "miss_ratio": out["misses"] / requests,
        "ram_hit_ratio": out["ram_hits"] / requests,
        "tier2_hit_ratio": out["tier2_hits"] / requests,
        "seconds": round(time.perf_counter() - started, 2),
        "cpu_seconds": round(time.process_time() - cpu_started, 2),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    })
    return out


#: (our policy, libCacheSim's class, its parameters): ClockPro twice, with the Python binding's default
#: init-ratio-cold (0.5) and the C library's (1).
LIBCACHESIM_PAIRS = (("lru", "LRU", {}), ("arc", "ARC", {}), ("clock-pro", "ClockPro", {}),
                     ("clock-pro", "ClockPro", {"init_ratio_cold": 1.0}), ("s3-fifo", "S3FIFO", {}),
                     ("w-tinylfu", "WTinyLFU", {}))


def libcachesim_check(name: str, trace, totals: list[int]) -> list[dict]:
    """Overall miss ratio of libCacheSim's LRU, ARC, ClockPro, S3FIFO and WTinyLFU at each total capacity."""
    try:
        import libcachesim as lcs  # type: ignore
    except ImportError:
        return []
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / f"{name}.txt"
        with open(path, "w") as out:
            step = 1 << 20
            for start in range(0, len(trace), step):
                out.write("\n".join(str(key + 1) for key in trace[start:start + step]))
                out.write("\n")
        reader = lcs.TraceReader(str(path), lcs.TraceType.PLAIN_TXT_TRACE)
        for total in totals:
            for ours, theirs, params in LIBCACHESIM_PAIRS:
                cache = getattr(lcs, theirs)(total, **params)
                miss_ratio, _ = cache.process_trace(reader)
                label = theirs + "".join(f" {k}={v}" for k, v in params.items())
                rows.append({"trace": name, "total_objects": total, "policy": ours,
                             "libcachesim": label, "libcachesim_miss_ratio": miss_ratio})
    return rows


def plot(results: list[dict], traces: list[str], ram_fractions: list[float], policies: list[str],
         path: Path) -> None:
    try:
        import matplotlib  # type: ignore

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
        return
    index = {(r["trace"], r["ram_fraction"], r["policy"]): r for r in results}
    fig, axes = plt.subplots(len(ram_fractions), 2, figsize=(15, 4.2 * len(ram_fractions)), squeeze=False)
    width = 0.8 / len(policies)
    colors = plt.get_cmap("tab10")
    for row, fraction in enumerate(ram_fractions):
        for column, (metric, title) in enumerate((("miss_ratio", "miss ratio"),
                                                  ("writes_vs_lru", "tier-2 writes / LRU-demote-all's"))):
            ax = axes[row][column]
            for p, policy in enumerate(policies):
                values = [index[(t, fraction, policy)][metric] if (t, fraction, policy) in index else 0
                          for t in traces]
                xs = [i + (p - (len(policies) - 1) / 2) * width for i in range(len(traces))]
                ax.bar(xs, values, width, label=policy, color=colors(p % 10))
            ax.set_xticks(range(len(traces)))
            ax.set_xticklabels(traces, rotation=20, fontsize=8)
            ax.set_title(f"{title} (RAM {fraction:.0%} of footprint, tier 2 50%)", fontsize=10)
            if metric == "writes_vs_lru":
                ax.axhline(0.6, color="black", linestyle="--", linewidth=0.8)
                ax.set_yscale("symlog", linthresh=0.1)
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"# plot written to {path}")


def markdown_table(results: list[dict], traces: list[str], ram_fractions: list[float],
                   policies: list[str]) -> str:
    index = {(r["trace"], r["ram_fraction"], r["policy"]): r for r in results}
    lines = ["| trace | RAM | policy | miss ratio | RAM hit ratio | tier-2 hit ratio | tier-2 writes | "
             "writes / LRU's |", "|---|---|---|---|---|---|---|---|"]
    for trace in traces:
        for fraction in ram_fractions:
            for policy in policies:
                r = index.get((trace, fraction, policy))
                if r is None:
                    continue
                lines.append(f"| {trace} | {fraction:.0%} | {policy} | {r['miss_ratio']:.4f} | "
                             f"{r['ram_hit_ratio']:.4f} | {r['tier2_hit_ratio']:.4f} | {r['tier2_writes']:,} | "
                             f"{r['writes_vs_lru']:.3f} |")
    return "\n".join(lines)


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - not installed
        return None


def evaluate_targets(results: list[dict], traces: list[str], ram_fractions: list[float], label: str) -> list:
    """Per trace x RAM size: `label`'s miss ratio against the best baseline's, its writes against LRU's."""
    targets = []
    for name in traces:
        for fraction in ram_fractions:
            rows = {r["policy"]: r for r in results if r["trace"] == name and r["ram_fraction"] == fraction}
            present = [p for p in BASELINES if p in rows]
            if label not in rows or not present:
                continue
            best = min(present, key=lambda p: rows[p]["miss_ratio"])
            mine = rows[label]
            targets.append({
                "trace": name, "ram_fraction": fraction, "policy": label,
                "fallow_miss_ratio": mine["miss_ratio"], "best_baseline": best,
                "best_baseline_miss_ratio": rows[best]["miss_ratio"],
                "miss_ratio_gap": mine["miss_ratio"] - rows[best]["miss_ratio"],
                "miss_target_met": mine["miss_ratio"] <= rows[best]["miss_ratio"] + 1e-12,
                "fallow_writes_vs_lru": mine["writes_vs_lru"],
                "writes_target_met": mine["writes_vs_lru"] <= 0.6,
            })
    return targets


def summarize(targets: list[dict]) -> dict:
    count = max(1, len(targets))
    return {
        "cells": len(targets),
        "miss_target_met": sum(t["miss_target_met"] for t in targets),
        "writes_target_met": sum(t["writes_target_met"] for t in targets),
        "mean_miss_ratio_gap": sum(t["miss_ratio_gap"] for t in targets) / count,
        "max_miss_ratio_gap": max((t["miss_ratio_gap"] for t in targets), default=0.0),
        "mean_writes_vs_lru": sum(t["fallow_writes_vs_lru"] for t in targets) / count,
    }


def markdown_sweep(results: list[dict], traces: list[str], ram_fractions: list[float],
                   labels: list[str]) -> str:
    """fallow's knobs: miss ratio / tier-2 writes relative to LRU's, per trace and RAM size."""
    index = {(r["trace"], r["ram_fraction"], r["policy"]): r for r in results}
    out = []
    for fraction in ram_fractions:
        out.append(f"\nRAM {fraction:.0%}: miss ratio / tier-2 writes relative to LRU-demote-all's\n")
        out.append("| setting | " + " | ".join(traces) + " |")
        out.append("|---|" + "---|" * len(traces))
        for label in ["lru", "arc"] + labels:
            cells = []
            for trace in traces:
                r = index.get((trace, fraction, label))
                cells.append("" if r is None else f"{r['miss_ratio']:.3f} / {r['writes_vs_lru']:.2f}")
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def occupancy_table(results: list[dict], traces: list[str], ram_fractions: list[float]) -> list[dict]:
    """Per trace x RAM size: fallow's occupancy and miss ratio, and the best baseline at the nominal
    capacity and at the capacity fallow fills with distinct objects."""
    rows = []
    for name in traces:
        for fraction in ram_fractions:
            cell = {r["policy"]: r for r in results if r["trace"] == name and r["ram_fraction"] == fraction}
            if "fallow" not in cell:
                continue
            at = [p for p in BASELINES if f"{p} at fallow's occupancy" in cell]
            if not at:
                continue
            nominal = min((p for p in BASELINES if p in cell), key=lambda p: cell[p]["miss_ratio"])
            held = min(at, key=lambda p: cell[f"{p} at fallow's occupancy"]["miss_ratio"])
            fallow = cell["fallow"]
            rows.append({
                "trace": name, "ram_fraction": fraction,
                "occupancy_held": fallow["occupancy_held"],
                "occupancy_duplicates": fallow["occupancy_duplicates"],
                "fallow_miss_ratio": fallow["miss_ratio"],
                "best_nominal": nominal, "best_nominal_miss_ratio": cell[nominal]["miss_ratio"],
                "best_at_occupancy": held,
                "best_at_occupancy_miss_ratio": cell[f"{held} at fallow's occupancy"]["miss_ratio"],
            })
    return rows


def markdown_occupancy(rows: list[dict]) -> str:
    lines = ["| trace | RAM | distinct objects held / capacity (held twice) | fallow miss | best baseline "
             "(capacity) | gap | best baseline (fallow's occupancy) | gap |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['trace']} | {r['ram_fraction']:.0%} | {r['occupancy_held']:.3f} "
            f"({r['occupancy_duplicates']:.3f}) | {r['fallow_miss_ratio']:.4f} | {r['best_nominal']} "
            f"{r['best_nominal_miss_ratio']:.4f} | {r['fallow_miss_ratio'] - r['best_nominal_miss_ratio']:+.4f} | "
            f"{r['best_at_occupancy']} {r['best_at_occupancy_miss_ratio']:.4f} | "
            f"{r['fallow_miss_ratio'] - r['best_at_occupancy_miss_ratio']:+.4f} |")
    return "\n".join(lines)


def markdown_config_summary(by_config: dict) -> str:
    out = ["| setting | miss target met | writes target met | mean miss gap | max miss gap | "
           "mean writes / LRU's |", "|---|---|---|---|---|---|"]
    for label, s in by_config.items():
        out.append(f"| {label} | {s['miss_target_met']}/{s['cells']} | {s['writes_target_met']}/{s['cells']} | "
                   f"{s['mean_miss_ratio_gap']:+.3f} | {s['max_miss_ratio_gap']:+.3f} | "
                   f"{s['mean_writes_vs_lru']:.3f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES_DIR)
    parser.add_argument("--traces", default="", help="comma-separated trace names (default: every trace)")
    parser.add_argument("--prefix", action="append", default=[],
                        help="NAME=N: use the first N requests of trace NAME")
    parser.add_argument("--ram-fractions", default="0.05,0.10")
    parser.add_argument("--tier2-fraction", type=float, default=0.5)
    parser.add_argument("--object-bytes", type=int, default=4096)
    parser.add_argument("--ram-segments", type=int, default=64, help="RAM segments (segment = RAM / this)")
    parser.add_argument("--tier2-regions", type=int, default=256,
                        help="tier-2 regions (region = tier 2 / this; cleaning keeps max(4, regions/64) free)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-sweep", action="store_true", help="only the default fallow settings")
    parser.add_argument("--no-check", action="store_true", help="skip the libcachesim cross-check")
    parser.add_argument("--at-occupancy", action="store_true",
                        help="also run every baseline at the capacity fallow fills with distinct objects "
                             "(its mean occupancy): how much of the gap is capacity, how much order")
    parser.add_argument("--policies", default="",
                        help="comma-separated policy labels to run (default: every configuration)")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "bench-results" / "tier-sim.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "bench-results" / "tier-sim.png")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--replot", type=Path, metavar="JSON",
                        help="draw the plot and print the tables of an earlier run's JSON; simulate nothing")
    args = parser.parse_args(argv)
    if args.replot:
        document = json.loads(args.replot.read_text())
        results, traces = document["results"], list(document["traces"])
        fractions = document["ram_fractions"]
        if not args.no_plot:
            plot(results, traces, fractions, PLOTTED, args.plot)
        print(markdown_table(results, traces, fractions, PLOTTED))
        print(markdown_sweep(results, traces, fractions, list(document["targets_by_config"])))
        print(markdown_config_summary(document["targets_by_config"]))
        return 0

    started = time.perf_counter()
    ram_fractions = [float(f) for f in args.ram_fractions.split(",") if f]
    prefixes = {}
    for item in args.prefix:
        name, _, count = item.partition("=")
        prefixes[name] = int(count)
    wanted = {t for t in args.traces.split(",") if t}
    paths = sorted(p for p in args.traces_dir.iterdir()
                   if p.is_file() and trace_name(p) != p.name and (not wanted or trace_name(p) in wanted))
    if not paths:
        raise SystemExit(f"no traces in {args.traces_dir}")
    trace_info = {}
    for path in paths:
        name = trace_name(path)
        t0 = time.perf_counter()
        keys = read_keys(path, prefixes.get(name, 0))
        ids, footprint = dense(keys)
        del keys
        TRACES[name] = (ids, footprint)
        trace_info[name] = {"file": path.name, "requests": len(ids), "footprint": footprint,
                            "prefix": prefixes.get(name)}
        print(f"# {name}: {len(ids):,} requests, {footprint:,} distinct keys"
              f"{' (prefix)' if name in prefixes else ''}, read in {time.perf_counter() - t0:.1f} s",
              flush=True)
    traces = list(TRACES)
    runs = configurations(not args.no_sweep)
    if args.policies:
        chosen = [p for p in args.policies.split(",") if p]
        unknown = set(chosen) - {label for label, _, _ in runs}
        if unknown:
            raise SystemExit(f"unknown policies: {', '.join(sorted(unknown))}")
        runs = [run for run in runs if run[0] in chosen]
    options = {"ram_segments": args.ram_segments, "tier2_regions": args.tier2_regions, "seed": args.seed}
    jobs = []
    for name in traces:
        footprint = TRACES[name][1]
        tier2 = max(1, int(footprint * args.tier2_fraction))
        for fraction in ram_fractions:
            ram = max(2, int(footprint * fraction))
            for label, kind, params in runs:
                jobs.append((name, fraction, label, kind, params, ram, tier2, options))
    # The longest first, so two workers finish together.
    jobs.sort(key=lambda job: -len(TRACES[job[0]][0]))
    remaining = {name: sum(1 for job in jobs if job[0] == name) for name in traces}
    results = []
    print(f"# {len(jobs)} simulations on {args.jobs} worker(s)", flush=True)
    context = multiprocessing.get_context("fork")
    with context.Pool(args.jobs, maxtasksperchild=4) as pool:
        for out in pool.imap_unordered(simulate, jobs):
            results.append(out)
            remaining[out["trace"]] -= 1
            print(f"  {out['trace']:<14} RAM {out['ram_fraction']:.0%} {out['policy']:<26} "
                  f"miss {out['miss_ratio']:.4f}  ram-hit {out['ram_hit_ratio']:.4f}  "
                  f"t2-hit {out['tier2_hit_ratio']:.4f}  writes {out['tier2_writes']:>10,}  "
                  f"{out['seconds']:7.1f} s ({out['cpu_seconds']:.1f} s CPU)", flush=True)
            if remaining[out["trace"]] == 0:
                print(f"# {out['trace']} done ({time.perf_counter() - started:.0f} s elapsed)", flush=True)

    occupancy_rows = []
    if args.at_occupancy:
        occupancy_jobs = [
            (r["trace"], r["ram_fraction"], f"{name} at fallow's occupancy", name, {}, 1,
             max(2, round(r["occupancy_held"] * (r["ram_objects"] + r["tier2_objects"]))) - 1, options)
            for r in results if r["policy"] == "fallow" and "occupancy_held" in r for name in BASELINES]
        print(f"# {len(occupancy_jobs)} baseline runs at fallow's occupancy", flush=True)
        with context.Pool(args.jobs, maxtasksperchild=4) as pool:
            results.extend(pool.imap_unordered(simulate, occupancy_jobs))
        occupancy_rows = occupancy_table(results, traces, ram_fractions)

    lru = {(r["trace"], r["ram_fraction"]): r["tier2_writes"] for r in results if r["policy"] == "lru"}
    for r in results:
        base = lru.get((r["trace"], r["ram_fraction"]))
        r["writes_vs_lru"] = r["tier2_writes"] / base if base else float("nan")

    checks = []
    if not args.no_check:
        ours = {(r["trace"], r["ram_objects"] + r["tier2_objects"], r["policy"]): r["miss_ratio"]
                for r in results if r["kind"] in BASELINES}
        for name in traces:
            footprint = TRACES[name][1]
            totals = sorted({max(2, int(footprint * f)) + max(1, int(footprint * args.tier2_fraction))
                             for f in ram_fractions})
            for row in libcachesim_check(name, TRACES[name][0], totals):
                row["ours_miss_ratio"] = ours.get((name, row["total_objects"], row["policy"]))
                if row["ours_miss_ratio"] is not None:
                    row["difference"] = row["ours_miss_ratio"] - row["libcachesim_miss_ratio"]
                checks.append(row)
        if checks:
            print("# libcachesim check (overall miss ratio at the total capacity): ours vs libCacheSim")
            for row in checks:
                print(f"  {row['trace']:<14} C={row['total_objects']:>8,} {row['policy']:<10} "
                      f"{row['ours_miss_ratio']:.4f} vs {row['libcachesim_miss_ratio']:.4f} ({row['libcachesim']})")
        else:
            print("# libcachesim not installed: no cross-check", flush=True)

    targets = evaluate_targets(results, traces, ram_fractions, "fallow")
    fallow_labels = [label for label, kind, _ in runs if kind.startswith("fallow")]
    targets_by_config = {label: summarize(evaluate_targets(results, traces, ram_fractions, label))
                         for label in fallow_labels}
    wall = time.perf_counter() - started
    cpu = sum(r["cpu_seconds"] for r in results)
    policies_main = PLOTTED
    document = {
        "benchmark": "tier-2 policy simulation on real traces (issue 18, benchmark 1)",
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "command": "python3 scripts/bench/tier_sim.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "wall_s": round(wall, 1),
        "simulation_cpu_s": round(cpu, 1),
        "libcachesim_version": package_version("libcachesim"),
        "object_bytes": args.object_bytes,
        "ram_fractions": ram_fractions,
        "tier2_fraction": args.tier2_fraction,
        "ram_segments": args.ram_segments,
        "tier2_regions": args.tier2_regions,
        "seed": args.seed,
        "fallow_default": DEFAULT_FALLOW,
        "fallow_regions_default": DEFAULT_REGIONS,
        "traces": trace_info,
        "results": sorted(results, key=lambda r: (traces.index(r["trace"]), r["ram_fraction"], r["policy"])),
        "targets": targets,
        "targets_by_config": targets_by_config,
        "libcachesim_check": checks,
        "at_occupancy": occupancy_rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=1) + "\n")
    print(f"# results written to {args.json}")
    if not args.no_plot:
        plot(results, traces, ram_fractions, policies_main, args.plot)
    print(markdown_table(results, traces, ram_fractions, policies_main))
    print(markdown_sweep(results, traces, ram_fractions, fallow_labels))
    print(markdown_config_summary(targets_by_config))
    if occupancy_rows:
        print(markdown_occupancy(occupancy_rows))
    for t in targets:
        print(f"# target {t['trace']} RAM {t['ram_fraction']:.0%}: fallow miss {t['fallow_miss_ratio']:.4f} vs "
              f"best {t['best_baseline']} {t['best_baseline_miss_ratio']:.4f} "
              f"({'met' if t['miss_target_met'] else 'MISSED'}); writes {t['fallow_writes_vs_lru']:.3f} x LRU "
              f"({'met' if t['writes_target_met'] else 'MISSED'})")
    print(f"# wall time {wall:.0f} s; {cpu:.0f} s of CPU in the simulations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
