"""Bulk load and sorted export: `fallow load`, `fallow dump --sorted`, `fallow-bench gensort`, and the
SHARDS / SHARDSCAN commands they use (docs/bulk.md)."""
from __future__ import annotations

import csv
import io
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from helpers import REPO_ROOT, Err, fallow_bin

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

SORT_RECORD_BYTES = 100


def bench_bin() -> Path:
    p = Path(os.environ.get("FALLOW_BENCH_BIN", "target/release/fallow-bench"))
    return p if p.is_absolute() else REPO_ROOT / p


def run(*args, check=True, timeout=50) -> subprocess.CompletedProcess:
    p = subprocess.run([str(a) for a in args], capture_output=True, timeout=timeout)
    p.out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    if check:
        assert p.returncode == 0, p.out
    return p


def load(server, path, *extra, check=True, transport="tcp"):
    url = f"unix:{server.unixsocket}" if transport == "unix" else f"tcp://127.0.0.1:{server.port}"
    return run(fallow_bin(), "load", path, "--server", url, "--quiet", *extra, check=check)


def dump(server, path, *extra, check=True, transport="tcp"):
    url = f"unix:{server.unixsocket}" if transport == "unix" else f"tcp://127.0.0.1:{server.port}"
    return run(fallow_bin(), "dump", path, "--server", url, "--quiet", *extra, check=check)


def count(p, tool, label) -> int:
    """A figure of the final `load:`/`dump:` line, e.g. count(p, "load", "skipped")."""
    line = next((l for l in p.stdout.decode().splitlines() if l.startswith(tool + ":")), None)
    assert line is not None, p.out
    found = re.search(rf"(\d+) {re.escape(label)}(?![\w-])", line)
    assert found, (label, line)
    return int(found.group(1))


def records_of(data: bytes) -> list[bytes]:
    return [data[i:i + SORT_RECORD_BYTES] for i in range(0, len(data), SORT_RECORD_BYTES)]


# --------------------------------------------------------------------------- gensort + sort format
def gensort(path: Path, n: int, seed: int = 1):
    p = run(bench_bin(), "gensort", n, "--out", path, "--seed", seed, check=False)
    if not path.exists() and (p.returncode == 0 or "unrecognized subcommand" in p.out):
        pytest.skip("this fallow-bench binary does not wire the gensort subcommand")
    assert p.returncode == 0, p.out
    return path.read_bytes()


def test_gensort_writes_sort_records(tmp_path):
    data = gensort(tmp_path / "a.sort", 3000, seed=5)
    assert len(data) == 3000 * SORT_RECORD_BYTES
    recs = records_of(data)
    assert len({r[:10] for r in recs}) == 3000, "random 10-byte keys"
    assert recs[7][10:46] == b"  " + b"%032X" % 7 + b"  ", "gensort -a value layout"
    assert all(r.endswith(b"\r\n") for r in recs)
    assert gensort(tmp_path / "b.sort", 3000, seed=5) == data, "same seed, same file"


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_sort_round_trip(server, r, tmp_path, transport):
    data = gensort(tmp_path / "in.sort", 4000, seed=11)
    p = load(server, tmp_path / "in.sort", "--connections", "3", transport=transport)
    assert count(p, "load", "records,") == 4000
    assert r.dbsize() == 4000
    dump(server, tmp_path / "out.sort", "--sorted", transport=transport)
    expected = b"".join(sorted(records_of(data), key=lambda rec: rec[:10]))
    assert (tmp_path / "out.sort").read_bytes() == expected


def test_unsorted_dump_holds_every_record(server, tmp_path):
    data = gensort(tmp_path / "in.dat", 2500, seed=2)
    load(server, tmp_path / "in.dat", "--batch", "1")
    p = dump(server, tmp_path / "out.dat", "--connections", "2")
    assert count(p, "dump", "records,") == 2500
    assert sorted(records_of((tmp_path / "out.dat").read_bytes())) == sorted(records_of(data))


# --------------------------------------------------------------------------- text formats
def awkward_records(n: int, seed: int) -> dict[bytes, bytes]:
    """Keys and values full of separators, escapes, quotes and non-UTF-8 bytes."""
    rng = random.Random(seed)
    alphabet = [b"\t", b"\n", b"\r", b"\\", b'"', b",", b" ", b"\x00", b"\xff", b"\xc3(", b"a", b"Z", b"\\t"]
    out = {b"": b"empty key", b"empty value": b"", b"\r\n": b"\"\"", b"a\tb": b"x\ny"}
    while len(out) < n:
        key = b"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        out[key] = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
    return out


def tsv_escape(field: bytes) -> bytes:
    return (field.replace(b"\\", b"\\\\").replace(b"\t", b"\\t")
            .replace(b"\n", b"\\n").replace(b"\r", b"\\r"))


def csv_field(field: bytes) -> bytes:
    if any(ch in field for ch in (b",", b'"', b"\r", b"\n")):
        return b'"' + field.replace(b'"', b'""') + b'"'
    return field


def encode(records, fmt: str) -> bytes:
    if fmt == "tsv":
        return b"".join(tsv_escape(k) + b"\t" + tsv_escape(v) + b"\n" for k, v in records)
    return b"".join(csv_field(k) + b"," + csv_field(v) + b"\n" for k, v in records)


@pytest.mark.parametrize("fmt", ["tsv", "csv"])
def test_text_round_trip_with_awkward_bytes(server, rb, tmp_path, fmt):
    records = awkward_records(400, seed=3)
    shuffled = list(records.items())
    random.Random(4).shuffle(shuffled)
    (tmp_path / f"in.{fmt}").write_bytes(encode(shuffled, fmt))
    load(server, tmp_path / f"in.{fmt}")
    for key in (b"", b"a\tb", b"\r\n"):
        assert rb.get(key) == records[key], "stored exactly, no escapes left"
    dump(server, tmp_path / f"out.{fmt}", "--sorted")
    out = (tmp_path / f"out.{fmt}").read_bytes()
    assert out == encode(sorted(records.items()), fmt), "the sorted input, byte for byte"
    if fmt == "csv":  # an independent parser reads the same records back
        rows = list(csv.reader(io.StringIO(out.decode("latin-1"), newline="")))
        assert {k.encode("latin-1"): v.encode("latin-1") for k, v in rows} == records


# --------------------------------------------------------------------------- malformed input
BAD_TSV = (b"k1\tv1\n"          # line 1, offset 0
           b"no tab here\n"     # line 2, offset 6
           b"k3\tv3\n"          # line 3, offset 18
           b"k4\tbad \\q escape\n"  # line 4, offset 24
           b"k5\tv5\n")         # line 5, offset 41


def test_malformed_tsv_fails_with_its_location(server, r, tmp_path):
    (tmp_path / "bad.tsv").write_bytes(BAD_TSV)
    p = load(server, tmp_path / "bad.tsv", check=False)
    assert p.returncode != 0
    assert "line 2 (byte offset 6): expected key<TAB>value, found no TAB" in p.out, p.out
    assert r.get("k1") == "v1", "records before the bad one were loaded"
    assert r.get("k3") is None, "nothing after it"


def test_malformed_records_are_skipped_and_reported(server, r, tmp_path):
    (tmp_path / "bad.tsv").write_bytes(BAD_TSV)
    p = load(server, tmp_path / "bad.tsv", "--on-error", "skip")
    assert count(p, "load", "records,") == 3 and count(p, "load", "skipped") == 2, p.out
    assert "line 2 (byte offset 6)" in p.out and "line 4 (byte offset 24)" in p.out, p.out
    assert "bad escape '\\q'" in p.out
    assert [r.get(k) for k in ("k1", "k3", "k5", "k4")] == ["v1", "v3", "v5", None]


def test_malformed_csv_and_truncated_sort_record(server, r, tmp_path):
    (tmp_path / "bad.csv").write_bytes(b'a,1\n"b\nc",2,3\nd,"4"x\ne,5\n')
    p = load(server, tmp_path / "bad.csv", "--on-error", "skip")
    assert count(p, "load", "skipped") == 2, p.out
    assert "line 2 (byte offset 4): expected 2 fields (key,value), found 3" in p.out, p.out
    assert "line 4 (byte offset 14): unexpected byte after a closing quote" in p.out, p.out
    assert r.mget("a", "b\nc", "d", "e") == ["1", None, None, "5"]
    (tmp_path / "cut.sort").write_bytes(b"K" * 10 + b"V" * 90 + b"x" * 42)
    p = load(server, tmp_path / "cut.sort", check=False)
    assert p.returncode != 0
    assert "byte offset 100: truncated record: 42 of 100 bytes" in p.out, p.out


def test_error_replies_are_counted_not_ignored(server_factory, tmp_path):
    # Without tier 2, so the limit refuses writes (with it, noeviction demotes them to flash).
    small = server_factory(maxmemory="2mb", tier2_size=0)
    records = [(b"key:%06d" % i, b"v" * 1000) for i in range(5000)]
    (tmp_path / "big.tsv").write_bytes(encode(records, "tsv"))
    p = load(small, tmp_path / "big.tsv", "--batch", "1", check=False)
    assert p.returncode != 0
    assert count(p, "load", "errors") > 0, p.out
    assert "OOM" in p.out, p.out


def test_dump_skips_and_counts_other_types(server, r, tmp_path):
    r.mset({"s1": "a", "s2": "b"})
    r.rpush("list", "x")
    r.hset("hash", "f", "v")
    p = dump(server, tmp_path / "out.tsv", "--sorted")
    assert count(p, "dump", "non-string keys skipped") == 2, p.out
    assert (tmp_path / "out.tsv").read_bytes() == b"s1\ta\ns2\tb\n"
    p = dump(server, tmp_path / "out.sort", check=False)
    assert p.returncode != 0 and "does not fit a sort record" in p.out, p.out
    p = dump(server, tmp_path / "out2.sort", "--on-error", "skip")
    assert count(p, "dump", "unrepresentable skipped") == 2, p.out


# --------------------------------------------------------------------------- SHARDS / SHARDSCAN
def shard_scan_all(c, shard, count=3):
    cursor, pairs, skipped = "0", {}, 0
    while True:
        reply = c.cmd("SHARDSCAN", shard, cursor, "COUNT", count)
        cursor, flat, n = reply
        assert len(flat) % 2 == 0 and n >= 0
        pairs.update(zip(flat[::2], flat[1::2]))
        skipped += n
        cursor = cursor.decode()
        if cursor == "0":
            return pairs, skipped


def test_shardscan_reads_every_string_once(r, c):
    expected = {f"k{i}".encode(): f"v{i}".encode() for i in range(200)}
    r.mset(expected)
    r.sadd("set", "m")
    shards = c.cmd("SHARDS")
    assert isinstance(shards, int) and shards >= 1
    found, skipped = {}, 0
    for shard in range(shards):
        pairs, n = shard_scan_all(c, shard)
        assert not (found.keys() & pairs.keys()), "a key lives in one shard"
        found.update(pairs)
        skipped += n
    assert found == expected and skipped == 1


def test_shardscan_rejects_bad_arguments(c):
    shards = c.cmd("SHARDS")
    assert isinstance(c.cmd("SHARDSCAN", shards, "0"), Err)
    assert isinstance(c.cmd("SHARDSCAN", -1, "0"), Err)
    assert c.cmd("SHARDSCAN", 0, "12345") == Err("ERR invalid cursor")
    assert c.cmd("SHARDSCAN", 0, "0", "COUNT", "0") == Err("ERR syntax error")
    assert c.cmd("SHARDSCAN", 0, "0", "MATCH", "*") == Err("ERR syntax error")
    assert isinstance(c.cmd("SHARDSCAN", 0), Err)


def test_shardscan_inside_exec_uses_the_transactions_locks(r, c):
    r.set("only", "one")
    shards = c.cmd("SHARDS")
    assert c.cmd("MULTI") == "OK"
    for shard in range(shards):
        assert c.cmd("SHARDSCAN", shard, "0", "COUNT", 100) == "QUEUED"
    replies = c.cmd("EXEC", timeout=5)
    found = [pair for _, flat, _ in replies for pair in zip(flat[::2], flat[1::2])]
    assert found == [(b"only", b"one")]
