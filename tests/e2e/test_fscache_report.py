"""FSCACHE (docs/fs.md, "Counters in INFO and Prometheus"): a mounted `fallow fs` reports its counters every
second with FSCACHE REPORT; INFO fscache, Prometheus, FSCACHE LIST and GET show the last report of each mount,
which goes when the connection that sent it closes. Checked with redis-py (RESP2 and RESP3) on a private
fallow with a metrics port."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import urllib.request

import pytest
import redis

from helpers import HOST, Err, RawConn, fallow_bin, free_port, wait_for

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

COUNTERS = {"reads": "1200", "read_bytes": "157286400", "cache_hits": "1100", "cache_misses": "100",
            "prefetch_accuracy": "0.8125", "prefetch_depth_mean": "12.5", "fallow_connected": "1"}
MOUNT_LINE = re.compile(r"^fscache_(\d+):mount=([^,]*),(.*)$")


@pytest.fixture
def fs_server(server_factory):
    metrics_port = free_port()
    s = server_factory(metrics_port=metrics_port)
    s.metrics_port = metrics_port
    return s


def connect(s, protocol: int = 2, **kw) -> redis.Redis:
    return redis.Redis(host=HOST, port=s.port, protocol=protocol, decode_responses=True, socket_timeout=5,
                       **kw)


def report(client: redis.Redis, mount: str, counters: dict) -> str:
    args = [item for pair in counters.items() for item in pair]
    return client.execute_command("FSCACHE", "REPORT", mount, *args)


def info_fscache(s) -> tuple[dict, dict]:
    """(section fields, mounts by path -> their fields) from INFO fscache as the server writes it."""
    with RawConn(port=s.port) as conn:
        text = conn.cmd("INFO", "fscache").decode()
    lines = [line for line in text.split("\r\n") if line]
    assert lines[0] == "# Fscache", text
    fields, mounts = {}, {}
    for line in lines[1:]:
        match = MOUNT_LINE.match(line)
        if match:
            pairs = dict(item.split("=", 1) for item in match[3].split(","))
            mounts[match[2]] = pairs
        else:
            name, value = line.split(":", 1)
            fields[name] = value
    return fields, mounts


def metrics(s) -> str:
    with urllib.request.urlopen(f"http://{HOST}:{s.metrics_port}/metrics", timeout=5) as response:
        return response.read().decode()


def test_report_then_info_get_list_and_prometheus(fs_server):
    fs = connect(fs_server)
    assert report(fs, "/mnt/cache", COUNTERS) == "OK"
    fields, mounts = info_fscache(fs_server)
    assert fields["fscache_mounts"] == "1" and int(fields["fscache_reports"]) == 1
    shown = mounts["/mnt/cache"]
    assert {name: shown[name] for name in COUNTERS} == COUNTERS, shown
    assert 0 <= int(shown["age_ms"]) < 5000
    assert fs.execute_command("FSCACHE", "LIST") == ["/mnt/cache"]

    got = fs.execute_command("FSCACHE", "GET", "/mnt/cache")
    got = dict(zip(got[::2], got[1::2]))
    assert got["reads"] == 1200 and got["prefetch_accuracy"] == "0.8125", got
    assert list(got)[:len(COUNTERS)] == list(COUNTERS) and "age_ms" in got
    with connect(fs_server, protocol=3) as resp3:
        as_map = resp3.execute_command("FSCACHE", "GET", "/mnt/cache")
        assert isinstance(as_map, dict) and as_map["read_bytes"] == 157286400, as_map

    page = metrics(fs_server)
    for name, value in COUNTERS.items():
        line = next((line for line in page.splitlines()
                     if line.startswith(f'fallow_fscache_{name}{{mount="/mnt/cache"}} ')), None)
        assert line is not None, f"fallow_fscache_{name} missing from /metrics"
        assert float(line.split()[-1]) == float(value), line
    assert re.search(r"^fallow_fscache_mounts 1(\.0)?$", page, re.M), page

    # A new report replaces the last one: fields not sent again are gone.
    assert report(fs, "/mnt/cache", {"reads": "1300"}) == "OK"
    _, mounts = info_fscache(fs_server)
    assert set(mounts["/mnt/cache"]) == {"reads", "age_ms"} and mounts["/mnt/cache"]["reads"] == "1300"
    fs.close()


def test_info_all_and_default_include_the_section(fs_server):
    with connect(fs_server) as fs:
        assert report(fs, "/mnt/x", {"reads": "1"}) == "OK"
        for sections in ((), ("all",), ("everything",)):
            with RawConn(port=fs_server.port) as conn:
                text = conn.cmd("INFO", *sections).decode()
            assert "# Fscache\r\nfscache_mounts:1\r\n" in text, sections
            assert "fscache_0:mount=/mnt/x,reads=1,age_ms=" in text, sections


def test_mount_paths_are_escaped_into_one_line(fs_server):
    with connect(fs_server) as fs:
        assert report(fs, "/mnt/with space,comma=eq\nline", {"reads": "7"}) == "OK"
        _, mounts = info_fscache(fs_server)
        assert list(mounts) == [r"/mnt/with\x20space\x2ccomma\x3deq\x0aline"]
        assert mounts[r"/mnt/with\x20space\x2ccomma\x3deq\x0aline"]["reads"] == "7"
        # LIST and GET give the path as reported.
        assert fs.execute_command("FSCACHE", "LIST") == ["/mnt/with space,comma=eq\nline"]


def test_a_mount_is_dropped_when_its_connection_closes(fs_server):
    first, second, watcher = connect(fs_server), connect(fs_server), connect(fs_server)
    assert report(first, "/mnt/a", {"reads": "1"}) == "OK"
    assert report(first, "/mnt/b", {"reads": "1"}) == "OK"
    # /mnt/b is reported again by another connection (a restarted fs): it is that one's now.
    assert report(second, "/mnt/b", {"reads": "2"}) == "OK"
    assert sorted(watcher.execute_command("FSCACHE", "LIST")) == ["/mnt/a", "/mnt/b"]
    first.close()
    assert wait_for(lambda: watcher.execute_command("FSCACHE", "LIST") == ["/mnt/b"], 5.0)
    second.close()
    assert wait_for(lambda: watcher.execute_command("FSCACHE", "LIST") == [], 5.0)
    fields, mounts = info_fscache(fs_server)
    assert mounts == {} and fields["fscache_mounts"] == "0"
    assert int(fields["fscache_mounts_dropped_disconnect"]) == 2
    assert "fallow_fscache_reads{" not in metrics(fs_server)
    watcher.close()


def test_errors_and_limits(fs_server):
    with RawConn(port=fs_server.port) as c:
        assert c.cmd("FSCACHE", "REPORT", "/m", "Reads", "1") == Err(
            "ERR FSCACHE REPORT: field names are 1..48 characters of [a-z0-9_], got 'Reads'")
        assert c.cmd("FSCACHE", "REPORT", "/m", "reads", "1e3") == Err(
            "ERR FSCACHE REPORT: field 'reads': value is not an integer or a decimal, got '1e3'")
        for bad in ("nan", "", "1.", "12abc", "99999999999999999999"):
            assert c.cmd("FSCACHE", "REPORT", "/m", "reads", bad).startswith("ERR FSCACHE REPORT: field 'reads'")
        assert c.cmd("FSCACHE", "REPORT", "/m", "reads", "1", "hits") == Err(
            "ERR FSCACHE REPORT needs <field> <value> pairs")
        assert c.cmd("FSCACHE", "REPORT", "/m", "reads", "1", "reads", "2") == Err(
            "ERR FSCACHE REPORT: field 'reads' given twice")
        assert c.cmd("FSCACHE", "REPORT", "/m", "age_ms", "1").startswith("ERR FSCACHE REPORT: field name 'age_ms'")
        too_many = [item for index in range(65) for item in (f"f{index}", "1")]
        assert c.cmd("FSCACHE", "REPORT", "/m", *too_many) == Err("ERR FSCACHE REPORT: at most 64 fields")
        assert c.cmd("FSCACHE", "REPORT", "/m", *too_many[:128]) == "OK"
        assert c.cmd("FSCACHE", "REPORT", "/" + "x" * 4096, "reads", "1") == Err(
            "ERR FSCACHE: a mount path is 1..4096 bytes")
        assert c.cmd("FSCACHE", "REPORT", "", "reads", "1") == Err("ERR FSCACHE: a mount path is 1..4096 bytes")
        assert c.cmd("FSCACHE", "GET", "/nowhere") == Err("ERR FSCACHE: no report from mount '/nowhere'")
        assert c.cmd("FSCACHE", "REPORT", "/m") == Err(
            "ERR wrong number of arguments for 'fscache|report' command")
        assert c.cmd("FSCACHE", "GET") == Err("ERR wrong number of arguments for 'fscache|get' command")
        assert c.cmd("FSCACHE", "BOGUS") == Err("ERR unknown subcommand 'BOGUS'. Try FSCACHE HELP.")
        assert c.cmd("FSCACHE") == Err("ERR wrong number of arguments for 'fscache' command")
        help_lines = c.cmd("FSCACHE", "HELP")
        assert any(line.startswith("REPORT <mount>") for line in help_lines)
        assert c.cmd("FSCACHE", "LIST") == [b"/m"], "refused reports left nothing"
        # 64 mounts report at once; the 65th is refused, a known one still reports.
        for index in range(63):
            assert c.cmd("FSCACHE", "REPORT", f"/mnt/{index}", "reads", str(index)) == "OK"
        assert c.cmd("FSCACHE", "REPORT", "/mnt/extra", "reads", "1") == Err(
            "ERR FSCACHE REPORT: at most 64 mounts report at once")
        assert c.cmd("FSCACHE", "REPORT", "/mnt/0", "reads", "5") == "OK"
        assert len(c.cmd("FSCACHE", "LIST")) == 64
    fields, _ = info_fscache(fs_server)
    assert int(fields["fscache_reports_refused"]) >= 14, fields


def test_a_plain_user_with_fscache_may_report(fs_server):
    with RawConn(port=fs_server.port) as admin:
        assert admin.cmd("ACL", "SETUSER", "fs", "on", ">pw", "~*", "+@read", "+@write", "+@connection",
                         "+fscache") == "OK"
        assert admin.cmd("ACL", "SETUSER", "nofs", "on", ">pw", "~*", "+@read", "+@write",
                         "+@connection") == "OK"
    with connect(fs_server, username="fs", password="pw") as fs:
        assert report(fs, "/mnt/user", {"reads": "3"}) == "OK"
        assert fs.execute_command("FSCACHE", "LIST") == ["/mnt/user"]
    with connect(fs_server, username="nofs", password="pw") as nofs:
        with pytest.raises(redis.exceptions.NoPermissionError):
            report(nofs, "/mnt/other", {"reads": "3"})


# ------------------------------------------------------------------ a real `fallow fs` reporting
def fuse_usable() -> str | None:
    """Why a FUSE mount cannot be made here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 (apt-get install fuse3)"
    return None


def unmount(path) -> None:
    """Detaches a mount a killed fs left behind (lazily: nothing may hold it then)."""
    for argv in (["fusermount3", "-uz", str(path)], ["umount", "-l", str(path)]):
        if not os.path.ismount(path):
            return
        if shutil.which(argv[0]):
            subprocess.run(argv, capture_output=True, timeout=10)


def test_a_mounted_fs_reports_and_disappears_when_killed(fs_server, tmp_path):
    why = fuse_usable()
    if why:
        pytest.skip(why)
    backing, mountpoint = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mountpoint.mkdir()
    data = os.urandom(3 << 20)
    (backing / "f.bin").write_bytes(data)
    log = open(tmp_path / "fs.log", "wb")
    fs = subprocess.Popen([str(fallow_bin()), "fs", str(mountpoint), "--backing", str(backing),
                           "--server", f"unix:{fs_server.unixsocket}", "--direct-io"],
                          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: os.path.ismount(mountpoint) or fs.poll() is not None, 10.0)
        assert fs.poll() is None, (tmp_path / "fs.log").read_text()
        assert (mountpoint / "f.bin").read_bytes() == data
        watcher = connect(fs_server)
        mount = str(mountpoint)

        def reported_read() -> dict | None:
            if mount not in watcher.execute_command("FSCACHE", "LIST"):
                return None
            got = watcher.execute_command("FSCACHE", "GET", mount)
            got = dict(zip(got[::2], got[1::2]))
            return got if got.get("read_bytes", 0) >= len(data) else None

        got = wait_for(reported_read, 5.0, 0.1)
        assert got, watcher.execute_command("FSCACHE", "LIST")
        assert got["fallow_connected"] == 1 and got["reads"] >= 1, got
        _, mounts = info_fscache(fs_server)
        assert int(mounts[mount]["read_bytes"]) >= len(data)
        assert re.search(rf'^fallow_fscache_read_bytes{{mount="{re.escape(mount)}"}} ', metrics(fs_server), re.M)
        tenant = watcher.execute_command("TENANT", "GET", "fs")
        assert dict(zip(tenant[::2], tenant[1::2]))["tier2"] == "no", "the fs tenant's blocks skip tier 2"
        # A killed fs says nothing: its connections close, and the mount leaves INFO with them.
        fs.send_signal(signal.SIGKILL)
        fs.wait(10)
        assert wait_for(lambda: watcher.execute_command("FSCACHE", "LIST") == [], 5.0)
        fields, _ = info_fscache(fs_server)
        assert fields["fscache_mounts"] == "0" and int(fields["fscache_mounts_dropped_disconnect"]) >= 1
        watcher.close()
    finally:
        if fs.poll() is None:
            fs.kill()
            fs.wait(10)
        log.close()
        unmount(mountpoint)
