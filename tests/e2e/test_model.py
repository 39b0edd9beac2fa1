"""`fallow model`: the Krevat et al. performance model from the command line (no server needed)."""
import json
import subprocess

import pytest

from helpers import fallow_bin


def _model(*args):
    b = fallow_bin()
    if not b.exists():
        pytest.fail(f"fallow binary not found at {b}; build it or set FALLOW_BIN")
    p = subprocess.run([str(b), "model", *args], capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def test_hadoop_terasort_optimum_is_8_86_s():
    rc, out, err = _model("mapreduce", "--nodes", "1460", "--input", "1TB",
                          "--disk-mbps", "260", "--net-mbps", "110")
    assert rc == 0, err
    assert "optimum: 8.86 s" in out, out
    assert "network-bound" in out and "disk-bound" in out, out


def test_google_petasort_json_with_measured_time():
    rc, out, err = _model("mapreduce", "--nodes", "4000", "--input", "1PB", "--disk-mbps", "780",
                          "--net-mbps", "110", "--replication", "3", "--backup-write",
                          "--sort", "external", "--measured-s", "21720", "--json")
    assert rc == 0, err
    record = json.loads(out)
    # The paper: 6818 s optimum, 1256 nodes instead of 4000.
    assert abs(record["optimum"]["optimum_s"] - 6818) / 6818 < 0.01, record
    assert round(record["measured"]["nodes_needed"]) == 1256, record


def test_bad_input_size_is_a_clear_error():
    rc, out, err = _model("mapreduce", "--nodes", "10", "--input", "1XB",
                          "--disk-mbps", "100", "--net-mbps", "100")
    assert rc != 0
    assert "unknown unit" in err, err


@pytest.mark.slow
def test_quick_calibration_writes_the_contract_json(tmp_path):
    out_file = tmp_path / "cal.json"
    rc, out, err = _model("calibrate", "--quick", "--dir", str(tmp_path), "--out", str(out_file))
    assert rc == 0, err
    assert "written to" in out, out
    cal = json.loads(out_file.read_text())
    assert cal["version"] == 1
    for rate in (cal["memory"]["copy_bytes_per_sec"], cal["disk"]["seq_read_bytes_per_sec"],
                 cal["disk"]["seq_write_bytes_per_sec"], cal["loopback"]["tcp_stream_bytes_per_sec"],
                 cal["loopback"]["unix_stream_bytes_per_sec"]):
        assert rate > 1e6, cal
    assert cal["disk"]["cache_drop"] in ("drop_caches", "fadvise_dontneed", "none")
    assert len(cal["null_server"]) == 12
    for point in cal["null_server"]:
        assert (point["requests_per_sec"] or 0) > 0 or point.get("error"), point
    assert [p.name for p in tmp_path.iterdir()] == ["cal.json"], "the disk test file is deleted"
