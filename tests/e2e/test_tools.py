"""External client tools against the server: memccapable and redis-benchmark."""
import re
import shutil
import subprocess

import pytest


def _need(tool):
    if shutil.which(tool) is None:
        pytest.fail(f"{tool} not installed (run scripts/install-test-deps.sh)")


@pytest.mark.memcache
@pytest.mark.slow
def test_memccapable(server):
    _need("memccapable")
    p = subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(server.mc_port), "-t", "5"],
                       capture_output=True, timeout=120)
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    assert p.returncode == 0, out
    assert "All tests passed" in out, out
    lines = [l for l in out.splitlines() if re.search(r"\[(pass|fail|skipped)\]", l)]
    assert len(lines) > 40, out
    assert not [l for l in lines if "[fail]" in l], out


def _bench(server, *args, timeout=120):
    _need("redis-benchmark")
    p = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(server.port), *args],
                       capture_output=True, timeout=timeout)
    out = p.stdout.decode(errors="replace")
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, out + err
    bad = [l for l in (out + "\n" + err).replace("\r", "\n").splitlines()
           if re.search(r"error|ERR|WRONGTYPE|unknown|Protocol", l, re.I)]
    assert not bad, bad
    return out


def _results(out):
    """Parse `-q` output lines like 'SET: 123456.78 requests per second, p50=0.1 msec'."""
    res = {}
    for l in out.replace("\r", "\n").splitlines():
        m = re.match(r"^([A-Z0-9_ ()\-a-z]+?): ([\d.]+) requests per second", l.strip())
        if m:
            res[m.group(1)] = float(m.group(2))
    return res


@pytest.mark.resp
@pytest.mark.slow
def test_redis_benchmark_default_suite(server):
    out = _bench(server, "-q", "-n", "10000")
    res = _results(out)
    for name in ("PING_INLINE", "PING_MBULK", "SET", "GET", "INCR", "LPUSH", "RPUSH", "LPOP",
                 "RPOP", "SADD", "HSET", "SPOP", "ZADD", "ZPOPMIN", "LPUSH (needed to benchmark LRANGE)",
                 "LRANGE_100 (first 100 elements)", "MSET (10 keys)"):
        assert name in res and res[name] > 0, (name, res)


@pytest.mark.resp
def test_redis_benchmark_pipelined(server, r):
    out = _bench(server, "-t", "set,get", "-n", "20000", "-P", "16", "-q")
    res = _results(out)
    assert set(res) == {"SET", "GET"} and all(v > 0 for v in res.values()), res
    assert r.exists("key:__rand_int__") == 1
