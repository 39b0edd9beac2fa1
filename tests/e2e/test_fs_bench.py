"""The file-cache benchmark (issue 21) end to end: `fallow-bench fs --quick` builds the emulated device (loop
device, ext4, blkio throttle), mounts `fallow fs` over it and runs every item at a small size. Needs root,
/dev/fuse, fusermount3, fio, losetup and the cgroup v1 blkio and memory controllers; skipped otherwise."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import fallow_bin

pytestmark = pytest.mark.fallow_only


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    for tool in ("fio", "fusermount3", "losetup", "mkfs.ext4"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/install-test-deps.sh)"
    for controller in ("blkio", "memory"):
        if not Path(f"/sys/fs/cgroup/{controller}/cgroup.procs").exists():
            return f"no cgroup v1 {controller} controller"
    return None


def _leftovers(pid: int) -> list[str]:
    """What a run with this process id could have left behind: loop devices, cgroups, mounts."""
    tag = f"fallow-fsbench-{pid}"
    found = [line for line in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
             if tag in line]
    found += [str(p) for c in ("blkio", "memory") for p in Path(f"/sys/fs/cgroup/{c}").glob(tag)]
    found += [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if tag in line]
    return found


def test_fs_bench_quick(tmp_path):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    bench = fallow_bin().parent / "fallow-bench"
    if not bench.exists():
        pytest.fail(f"fallow-bench not found at {bench}; cargo build --release")
    out = tmp_path / "out"
    proc = subprocess.Popen([str(bench), "fs", "--quick", "--quiet", "--fallow-bin", str(fallow_bin()),
                             "--out", str(out), "--work-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-4000:]
    assert not _leftovers(proc.pid), _leftovers(proc.pid)
    report = json.loads((out / "fs.json").read_text())
    s = report["settings"]
    assert report["error"] is None

    device = report["device"]["measured"]
    # The throttle holds: sequential reads near the configured rate, random reads near the IOPS limit.
    assert 0.5 * s["device"]["read_bytes_per_s"] < device["seq_1m_bytes_per_s"] < 2.0 * s["device"]["read_bytes_per_s"]
    assert 0 < device["rand_4k_iops"] < 1.5 * s["device"]["read_iops"], device
    assert 0 < device["rand_4k_p50_us"] <= device["rand_4k_p99_us"], device

    cases = {c["name"]: c for c in report["slowcat"]}
    assert set(cases) >= {"cold device", "page cache", "fallow miss", "fallow hit", "FUSE passthrough"}
    for case in cases.values():
        assert case["read_bytes"] == case["file_bytes"] == s["slowcat_bytes"], case
        assert case["read_mean_ms"] > 0 and case["bytes_per_s"] > 0, case
    # The cold passes read the file from the device; the page cache and fallow hit passes did not.
    for name in ("cold device", "fallow miss", "FUSE passthrough"):
        assert cases[name]["device_read_bytes"] >= s["slowcat_bytes"] // 2, cases[name]
    assert cases["page cache"]["device_read_bytes"] < s["slowcat_bytes"] // 4, cases["page cache"]
    hit = cases["fallow hit"]
    assert hit["device_read_bytes"] < s["slowcat_bytes"] // 4, hit
    assert hit["fs_stats"]["cache_hit_bytes"] >= s["slowcat_bytes"] // 2, hit["fs_stats"]

    for workload in ("video", "oltp"):
        runs = {r["name"]: r for r in report[workload]}
        assert {"no FUSE", "no cache"} <= set(runs), runs.keys()
        assert any(name.startswith("feedback") for name in runs), runs.keys()
        for run in runs.values():
            assert run["read_bytes"] > 0 and run["read_bytes_per_s"] > 0, run
            if run["fuse"] and run["pool_bytes"]:
                assert run["fs_stats"] is not None and run["speedup_vs_no_cache"] > 0, run
            if workload == "video":
                # fio's flow control: one byte written per six read; the readers loop over their files.
                assert 0.1 <= run["write_bytes"] / run["read_bytes"] <= 0.25, run
            else:
                lat = run["read_latency"]
                assert 0 < lat["lat_p50_us"] <= lat["lat_p99_us"], run

    eff = report["efficiency"]
    assert eff["memcpy_bytes_per_s"] > 1e8, eff
    for bandwidth in eff["hit"] + eff["null"]:
        assert bandwidth["bytes_per_s"] > 0 and bandwidth["read_bytes"] > 0, bandwidth
    for bandwidth in eff["hit"]:
        assert bandwidth["hit_ratio"] > 0.9, bandwidth

    elastic = report["elastic"]
    assert 0 < elastic["cut_s"] < elastic["restore_s"], elastic
    assert len(elastic["read_bytes_per_s"]) >= s["elastic_s"] - 1, elastic
    assert elastic["before_bytes_per_s"] > 0 and elastic["read_bytes"] > 0, elastic
    pools = [sample["pool_target_bytes"] for sample in elastic["samples"]]
    assert min(pools) <= 0.6 * elastic["pool_bytes"], pools

    for png in ("fs-slowcat", "fs-video", "fs-oltp", "fs-efficiency", "fs-elastic"):
        assert (out / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert "## Slowcat" in (out / "fs.md").read_text()


def test_fs_bench_refuses_bad_values():
    bench = fallow_bin().parent / "fallow-bench"
    if not bench.exists():
        pytest.fail(f"fallow-bench not found at {bench}; cargo build --release")
    p = subprocess.run([str(bench), "fs", "--oltp-zipf", "0"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "--oltp-zipf" in p.stderr, p.stderr
