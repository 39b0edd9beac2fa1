"""scripts/bench/tier_sim.py (issue 18, benchmark 1) on tiny synthetic traces: the three trace formats parse,
every policy accounts for every request, LRU-demote-all equals a plain LRU of the total capacity, the
placement of the single-cache baselines keeps their hottest objects in RAM, fallow's counters add up, and
(when libcachesim is installed) LRU, ARC and S3-FIFO match libCacheSim exactly. No server is needed."""
from __future__ import annotations

import array
import gzip
import json
import lzma
import random
import struct
import subprocess
import sys
from collections import OrderedDict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "tier_sim.py"
sys.path.insert(0, str(SCRIPT.parent))
import tier_sim  # noqa: E402

pytestmark = pytest.mark.fallow_only


def synthetic(requests: int, keys: int, seed: int) -> list[int]:
    """Skewed popularity plus a scan that loops over a block of cold keys."""
    rng = random.Random(seed)
    out = []
    scan = 0
    for _ in range(requests):
        if rng.random() < 0.2:
            out.append(keys + scan)
            scan = (scan + 1) % (keys // 2)
        else:
            out.append(min(keys - 1, int(rng.paretovariate(0.7))) * 7 + 3)
    return out


def plain_lru_misses(trace, capacity: int) -> int:
    cache: OrderedDict = OrderedDict()
    misses = 0
    for key in trace:
        if key in cache:
            cache.move_to_end(key)
            continue
        misses += 1
        cache[key] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return misses


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("traces")
    lirs = synthetic(12000, 600, 1)
    with gzip.open(folder / "syn-lirs.trace.gz", "wt") as out:
        for index, key in enumerate(lirs):
            out.write(f"{key}\r\n")
            if index % 5000 == 0:
                out.write("*\r\n")
    cache2k = synthetic(8000, 400, 2)
    with lzma.open(folder / "syn-cache2k.trace.xz", "wb") as out:
        out.write(struct.pack(f">{len(cache2k)}i", *cache2k))
    rng = random.Random(3)
    with open(folder / "syn-arc.lis", "w") as out:
        for request in range(1500):
            out.write(f"{rng.randrange(0, 4000, 8)} {rng.choice((1, 2, 8))} 0 {request}\n")
    return folder


def test_full_run_on_synthetic_traces(traces, tmp_path):
    out = tmp_path / "sim.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--traces-dir", str(traces), "--json", str(out),
                          "--no-plot", "--no-check", "--jobs", "2"],
                         capture_output=True, text=True, timeout=50)
    assert run.returncode == 0, run.stderr
    assert "# syn-lirs done" in run.stdout and "# wall time" in run.stdout
    document = json.loads(out.read_text())
    info = document["traces"]
    assert info["syn-lirs"]["requests"] == 12000, "`*` lines are skipped"
    assert info["syn-cache2k"]["requests"] == 8000
    arc_lines = [line.split() for line in (traces / "syn-arc.lis").read_text().splitlines()]
    assert info["syn-arc"]["requests"] == sum(int(parts[1]) for parts in arc_lines), "n_blocks expand"

    results = document["results"]
    labels = {label for label, _, _ in tier_sim.configurations(True)}
    for name in info:
        for fraction in (0.05, 0.10):
            cell = {r["policy"] for r in results if r["trace"] == name and r["ram_fraction"] == fraction}
            assert cell == labels, (name, fraction)
    for r in results:
        assert r["ram_hits"] + r["tier2_hits"] + r["misses"] == r["requests"], r
        assert 0 <= r["miss_ratio"] <= 1
        if r["kind"].startswith("fallow"):
            assert r["tier2_writes"] == r["tier2_writes_admitted"] + r["tier2_writes_cleaning"], r
            assert r["inserts_refused_oom"] <= r["misses"]
        if r["policy"] == "lru":
            assert r["writes_vs_lru"] == 1.0
    # LRU-demote-all is one LRU of RAM + tier 2.
    keys = tier_sim.read_keys(traces / "syn-lirs.trace.gz")
    for r in results:
        if r["trace"] == "syn-lirs" and r["policy"] == "lru":
            assert r["misses"] == plain_lru_misses(keys, r["ram_objects"] + r["tier2_objects"])
    assert len(document["targets"]) == 3 * 2
    assert set(document["targets_by_config"]) >= {"fallow", "fallow hits>=1", "fallow-regions hot=0.25"}


def test_placement_keeps_the_hottest_in_ram(monkeypatch):
    """After every request the `ram` objects with the highest (class, recency) keys are the RAM ones."""
    settle = tier_sim.Placement.settle

    def checked(self, new=-1):
        settle(self, new)
        resident = [o for o in range(len(self.side)) if self.side[o]]
        in_ram = [o for o in resident if self.side[o] == 1]
        assert len(in_ram) == self.in_ram == min(self.ram, len(resident))
        below = [self.key[o] for o in resident if self.side[o] == 2]
        if in_ram and below:
            assert min(self.key[o] for o in in_ram) >= max(below)

    monkeypatch.setattr(tier_sim.Placement, "settle", checked)
    trace, footprint = tier_sim.dense(synthetic(3000, 150, 4))
    for name, run in tier_sim.BASELINES.items():
        if name == "lru":
            continue
        out = run(trace, footprint, 8, 60)
        assert out["ram_hits"] + out["tier2_hits"] + out["misses"] == len(trace)
        assert out["tier2_writes"] >= out["tier2_writes_on_insert"]


@pytest.mark.parametrize("kind", ["fallow", "fallow-regions"])
@pytest.mark.parametrize("admission", ["frequency", "fixed doorkeeper", "hits"])
def test_fallow_state_is_consistent(kind, admission):
    trace, footprint = tier_sim.dense(synthetic(20000, 500, 5))
    ram, tier2 = 40, 400
    cls = tier_sim.FallowServer if kind == "fallow" else tier_sim.FallowRegions
    fixed = admission == "fixed doorkeeper"
    sim = cls(footprint, ram, tier2, admission="frequency" if fixed else admission, admit_hits_min=0,
              tier2_regions=16, fixed_doorkeeper=fixed)
    out = sim.run(trace)
    assert out["ram_hits"] + out["tier2_hits"] + out["misses"] == len(trace)
    assert out["tier2_hits"] > 0 and out["tier2_writes_admitted"] > 0
    # A first tier-2 hit is served from tier 2; only a second promotes.
    assert 0 < out["tier2_served_without_promotion"] <= out["tier2_hits"]
    if admission != "hits":
        assert out["admissions_refused"] > 0, "a full tier 2 refuses keys read no more than its oldest"
    # Room is made before each insert or promotion; one over only when a release freed nothing.
    resident = sum(1 for s in sim.state if s == 1)
    assert resident == sim.resident <= ram + 1
    regions = [records for records, _ in sim.log.sealed] + [sim.log.open or []]
    live = {record for region in regions for _, record in region}
    for obj, status in enumerate(sim.state):
        if status == 2:
            assert sim.slot[obj] in live, "a stub's record is on tier 2"
        if status == 0:
            assert sim.slot[obj] == -1
    stubs = sum(1 for s in sim.state if s == 2)
    assert stubs <= sim.log.capacity


def test_the_doorkeeper_switches_off_in_a_loop():
    """A loop larger than both tiers: every key reaches 3 reads, so a fixed doorkeeper writes every
    departure and tier 2 churns without hits; the adaptive one (the default, as the server's) sees its
    records go unread, turns itself off and keeps the duel's stable subset. On the skewed synthetic trace
    it never switches and equals the fixed one."""
    keys = 400
    loop = array.array("i", list(range(keys)) * 100)
    runs = {}
    for fixed in (True, False):
        sim = tier_sim.FallowServer(keys, 20, 200, tier2_regions=40, fixed_doorkeeper=fixed)
        runs[fixed] = sim.run(loop)
    assert runs[True]["door_switches_off"] == 0
    assert runs[False]["door_switches_off"] >= 1
    assert runs[False]["misses"] < 0.75 * runs[True]["misses"]
    assert runs[False]["tier2_writes"] < 0.25 * runs[True]["tier2_writes"]

    trace, footprint = tier_sim.dense(synthetic(20000, 500, 5))
    same = [tier_sim.FallowServer(footprint, 40, 400, tier2_regions=16, fixed_doorkeeper=fixed).run(trace)
            for fixed in (True, False)]
    assert same[1]["door_switches_off"] == 0
    assert {k: v for k, v in same[0].items() if k != "door_off_refusals"} == \
        {k: v for k, v in same[1].items() if k != "door_off_refusals"}


def test_policies_flag_runs_only_the_chosen_labels(traces, tmp_path):
    out = tmp_path / "sim.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--traces-dir", str(traces), "--json", str(out),
                          "--no-plot", "--no-check", "--jobs", "1", "--traces", "syn-lirs",
                          "--policies", "lru,fallow,fallow fixed doorkeeper"],
                         capture_output=True, text=True, timeout=50)
    assert run.returncode == 0, run.stderr
    results = json.loads(out.read_text())["results"]
    assert {r["policy"] for r in results} == {"lru", "fallow", "fallow fixed doorkeeper"}
    bad = subprocess.run([sys.executable, str(SCRIPT), "--traces-dir", str(traces), "--json", str(out),
                          "--no-plot", "--no-check", "--policies", "nope"], capture_output=True, text=True,
                         timeout=50)
    assert bad.returncode != 0 and "unknown policies" in bad.stderr


def test_baselines_match_libcachesim():
    lcs = pytest.importorskip("libcachesim")
    trace, footprint = tier_sim.dense(synthetic(30000, 800, 6))
    ram, tier2 = footprint // 20, footprint // 2
    rows = {row["libcachesim"]: row for row in tier_sim.libcachesim_check("syn", trace, [ram + tier2])}
    assert rows, f"libcachesim {getattr(lcs, '__version__', '')} gave no rows"
    for ours, theirs, tolerance in (("lru", "LRU", 0.0), ("arc", "ARC", 0.0), ("s3-fifo", "S3FIFO", 0.0),
                                    ("w-tinylfu", "WTinyLFU", 0.03)):
        mine = tier_sim.BASELINES[ours](array.array("i", trace), footprint, ram, tier2)
        assert abs(mine["misses"] / len(trace) - rows[theirs]["libcachesim_miss_ratio"]) <= tolerance + 1e-9, ours


def test_promotion_rules():
    """A second tier-2 hit promotes always (`second`), never (`never`), or when the gap since the
    previous read x 4 fits RAM's residency (`recent`, the server's rule: tier.rs `serves_without_promotion`)."""
    trace, footprint = tier_sim.dense(synthetic(20000, 500, 5))
    out = {}
    for promote in ("second", "recent", "never"):
        sim = tier_sim.FallowServer(footprint, 40, 400, promote=promote, tier2_regions=16)
        out[promote] = sim.run(trace)
        assert out[promote]["ram_hits"] + out[promote]["tier2_hits"] + out[promote]["misses"] == len(trace)
    assert out["second"]["promotions_declined"] == 0
    served_twice = out["never"]["tier2_hits"] - out["never"]["tier2_served_without_promotion"]
    assert out["never"]["promotions_declined"] == served_twice > 0, "never: every later hit is served in place"
    assert 0 < out["recent"]["promotions_declined"] < out["never"]["promotions_declined"]
    assert out["never"]["ram_hits"] < out["recent"]["ram_hits"] <= out["second"]["ram_hits"] * 1.1
