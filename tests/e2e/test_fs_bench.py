"""The file-cache benchmark (issue 21) end to end: `fallow-bench fs --quick` builds the emulated device (loop
device, ext4, blkio throttle), mounts `fallow fs` over it and runs every item at a small size. Needs root,
/dev/fuse, fusermount3, fio, losetup and the cgroup v1 blkio and memory controllers; skipped otherwise."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
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


def _run_quick(tmp_path, items: str, work_dir: Path | None = None) -> dict:
    """`fallow-bench fs --quick --items ITEMS`; within the 60 s watchdog, else interrupted (so it cleans up).
    The scratch directory goes in `work_dir` (default `tmp_path`)."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    bench = fallow_bin().parent / "fallow-bench"
    if not bench.exists():
        pytest.fail(f"fallow-bench not found at {bench}; cargo build --release")
    out = tmp_path / "out"
    proc = subprocess.Popen([str(bench), "fs", "--quick", "--quiet", "--items", items,
                             "--fallow-bin", str(fallow_bin()), "--out", str(out), "--work-dir", str(work_dir or tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, stderr = proc.communicate(timeout=50)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=8)
        pytest.fail(f"fallow-bench fs --quick --items {items} took over 50 s: {stderr[-2000:]}")
    finally:
        assert not _leftovers(proc.pid), _leftovers(proc.pid)
    assert proc.returncode == 0, stderr[-4000:]
    report = json.loads((out / "fs.json").read_text())
    assert report["error"] is None
    device = report["device"]["measured"]
    spec = report["settings"]["device"]
    # The throttle holds: sequential reads near the configured rate, random reads at most the IOPS limit.
    assert 0.5 * spec["read_bytes_per_s"] < device["seq_1m_bytes_per_s"] < 2.0 * spec["read_bytes_per_s"], device
    assert 0 < device["rand_4k_iops"] < 1.5 * spec["read_iops"], device
    assert 0 < device["rand_4k_p50_us"] <= device["rand_4k_p99_us"], device
    report["out"] = out
    return report


def test_fs_bench_slowcat(tmp_path):
    report = _run_quick(tmp_path, "slowcat")
    s = report["settings"]
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
    assert (report["out"] / "fs-slowcat.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Slowcat" in (report["out"] / "fs.md").read_text()


@pytest.mark.parametrize("workload", ["video", "oltp"])
def test_fs_bench_matrix(tmp_path, workload):
    report = _run_quick(tmp_path, workload)
    runs = {r["name"]: r for r in report[workload]}
    assert {"no FUSE", "no cache"} <= set(runs), runs.keys()
    assert any(name.startswith("feedback") for name in runs), runs.keys()
    for run in runs.values():
        assert run["read_bytes"] > 0 and run["read_bytes_per_s"] > 0, run
        if run["fuse"]:
            assert run["fs_stats"] is not None and run["speedup_vs_no_cache"] > 0, run
            assert run["fs_stats"]["fallow_errors"] == 0, run
            # OLTP's counters cover the measured run alone; --quick's file fits the VM, so after the warm-up
            # its reads may all be page-cache hits: the warm-up's reads reached the mount.
            warm_reads = (run.get("warm_up") or {}).get("fs_reads") or 0
            assert run["fs_stats"]["reads"] + warm_reads > 0, run
        if workload == "video":
            # fio's flow control: one byte written per six read; the readers loop over their files.
            assert 0.1 <= run["write_bytes"] / run["read_bytes"] <= 0.25, run
        else:
            lat = run["read_latency"]
            assert 0 < lat["lat_p50_us"] <= lat["lat_p99_us"], run
    assert (report["out"] / f"fs-{workload}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_fs_bench_pgbench(tmp_path):
    """PostgreSQL, run as its own user, with its data directory on `fallow fs --allow-other`: `pgbench -S`."""
    if not list(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl")):
        pytest.skip("PostgreSQL is not installed (scripts/install-test-deps.sh)")
    # The server runs as user postgres, which cannot traverse pytest's private (0700) temporary directories.
    work_dir = Path(tempfile.mkdtemp(prefix="fallow-fsbench-pg-", dir="/var/tmp"))
    try:
        work_dir.chmod(0o755)
        report = _run_quick(tmp_path, "pgbench", work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    runs = {r["name"]: r for r in report["pgbench"]}
    assert set(runs) == {"no FUSE", "no cache", "feedback 64M"}, runs.keys()
    for run in runs.values():
        assert run["tps"] > 0 and run["latency_mean_ms"] > 0 and run["seconds"] >= 1, run
        assert run["speedup_vs_no_cache"] > 0, run
        if run["fuse"]:
            # The server read its files through the mount (at least at its start, in the warm-up).
            assert run["warm_up"]["fs_reads"] > 0, run
            assert run["fs_stats"]["fallow_errors"] == 0 and run["fs_stats"]["meta_errors"] == 0, run
    assert runs["feedback 64M"]["pool_bytes"] == 64 << 20
    assert (report["out"] / "fs-pgbench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## PostgreSQL pgbench -S" in (report["out"] / "fs.md").read_text()


def test_fs_bench_efficiency_and_elastic(tmp_path):
    report = _run_quick(tmp_path, "efficiency,elastic")
    s = report["settings"]
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
    assert min(pools) <= 0.6 * elastic["pool_bytes"] and max(pools) == elastic["pool_bytes"], pools
    for png in ("fs-efficiency", "fs-elastic"):
        assert (report["out"] / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png


def test_fs_bench_refuses_bad_values():
    bench = fallow_bin().parent / "fallow-bench"
    if not bench.exists():
        pytest.fail(f"fallow-bench not found at {bench}; cargo build --release")
    p = subprocess.run([str(bench), "fs", "--oltp-zipf", "0"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "--oltp-zipf" in p.stderr, p.stderr
