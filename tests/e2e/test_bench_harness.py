"""The benchmark instruments themselves: fallow-bench against fallow and the null server, and the peers
harness end to end (a --quick smoke run, so the recorded benchmarks cannot rot unnoticed)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import fallow_bin

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.fallow_only


def _bench_bin() -> Path:
    b = fallow_bin().parent / "fallow-bench"
    if not b.exists():
        pytest.fail(f"fallow-bench not found at {b}; cargo build --release")
    return b


def test_fallow_bench_against_fallow_resp_and_memcache(server, tmp_path):
    for url, protocol in ((f"tcp://127.0.0.1:{server.port}", "resp3"),
                          (f"tcp://127.0.0.1:{server.mc_port}", "memcache-meta"),
                          (f"unix:{server.unixsocket}", "resp2")):
        out = tmp_path / "run.json"
        p = subprocess.run([str(_bench_bin()), "run", "--server", url, "--protocol", protocol, "--quiet",
                            "--prefill", "--keys", "2000", "--requests", "20000", "--ratio", "1:4",
                            "--pipeline", "8", "--threads", "1", "--connections", "4", "--value-size", "16-512",
                            "--json", str(out)], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        res = json.loads(out.read_text())["results"]
        assert res["errors"] == 0, res
        assert res["requests"] == 20000, res
        assert res["gets"] + res["sets"] == 20000, res
        # every key was prefilled, so every GET hits
        assert res["hits"] == res["gets"] and res["misses"] == 0, res
        assert 0 < res["latency_us"]["p50"] <= res["latency_us"]["p99"] <= res["latency_us"]["max"], res


def test_peers_harness_quick_smoke(tmp_path):
    out = tmp_path / "peers.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "peers.py"), "--quick",
                        "--targets", "fallow,redis,null-resp", "--calibration", str(tmp_path / "none.json"),
                        "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    medians = json.loads(out.read_text())["medians"]
    for op in ("get", "set"):
        for target in ("fallow", "redis", "null-resp"):
            cell = medians[f"{op}|32|16|uniform|{target}"]
            assert cell["ops"] > 1000 and cell["cpu_us_op"] > 0, (op, target, cell)
    assert "| get | 32 B | 16 | uniform | fallow |" in p.stdout, p.stdout
