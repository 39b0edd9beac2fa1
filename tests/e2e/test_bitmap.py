"""Bitmaps (SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD, BITFIELD_RO): replies and error texts as
redis-server 7.0.15 gives them.

Every test but the last runs against both targets (E2E_TARGET=redis checks the expectations themselves);
the last checks fallow's memory accounting of a growing bitmap, where Redis allocates past maxmemory.
"""
from __future__ import annotations

import pytest

from helpers import Err, RawConn

pytestmark = pytest.mark.resp
WRONGTYPE = Err("WRONGTYPE Operation against a key holding the wrong kind of value")
SYNTAX = Err("ERR syntax error")
NOT_INTEGER = Err("ERR value is not an integer or out of range")
BAD_OFFSET = Err("ERR bit offset is not an integer or out of range")
BAD_BIT = Err("ERR bit is not an integer or out of range")
BAD_TYPE = Err("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.")
# The largest bit offset: its byte must lie below proto-max-bulk-len (512 MB).
OFFSET_MAX = 2**32 - 1


def test_setbit_getbit(c):
    assert c.cmd("SETBIT", "b", 7, 1) == 0
    assert c.cmd("GET", "b") == b"\x01"
    assert c.cmd("SETBIT", "b", 7, 1) == 1
    assert c.cmd("SETBIT", "b", 0, 1) == 0
    assert c.cmd("GET", "b") == b"\x81"
    assert c.cmd("SETBIT", "b", 20, 1) == 0, "grows with zero bytes"
    assert c.cmd("GET", "b") == b"\x81\x00\x08"
    assert c.cmd("SETBIT", "b", 7, 0) == 1
    assert [c.cmd("GETBIT", "b", i) for i in (0, 1, 7, 20, 21, 10**6)] == [1, 0, 0, 1, 0, 0]
    assert c.cmd("GETBIT", "missing", 3) == 0
    # A clear bit past the end still creates or grows the string.
    assert c.cmd("SETBIT", "z", 9, 0) == 0
    assert c.cmd("GET", "z") == b"\x00\x00"
    # Bits of an ordinary string: 'a' is 0x61.
    c.cmd("SET", "s", "a")
    assert [c.cmd("GETBIT", "s", i) for i in range(8)] == [0, 1, 1, 0, 0, 0, 0, 1]


def test_setbit_getbit_errors(c):
    assert c.cmd("SETBIT", "b", -1, 1) == BAD_OFFSET
    assert c.cmd("SETBIT", "b", "x", 1) == BAD_OFFSET
    assert c.cmd("SETBIT", "b", OFFSET_MAX + 1, 1) == BAD_OFFSET
    assert c.cmd("SETBIT", "b", 2**63 - 1, 1) == BAD_OFFSET
    assert c.cmd("SETBIT", "b", 1, 2) == BAD_BIT
    assert c.cmd("SETBIT", "b", 1, "on") == BAD_BIT
    assert c.cmd("SETBIT", "b", "x", "on") == BAD_OFFSET, "the offset is checked first"
    assert c.cmd("GETBIT", "b", OFFSET_MAX) == 0
    assert c.cmd("GETBIT", "b", OFFSET_MAX + 1) == BAD_OFFSET
    assert c.cmd("GETBIT", "b", "1.5") == BAD_OFFSET
    assert c.cmd("EXISTS", "b") == 0
    c.cmd("LPUSH", "l", "a")
    assert c.cmd("SETBIT", "l", 1, 1) == WRONGTYPE
    assert c.cmd("SETBIT", "l", -1, 1) == BAD_OFFSET, "arguments before the type"
    assert c.cmd("GETBIT", "l", 1) == WRONGTYPE
    assert c.cmd("SETBIT", "b", 1) == Err("ERR wrong number of arguments for 'setbit' command")


def test_setbit_keeps_the_ttl(c):
    c.cmd("SET", "b", "x")
    c.cmd("EXPIRE", "b", 1000)
    c.cmd("SETBIT", "b", 100, 1)
    assert 0 < c.cmd("TTL", "b") <= 1000


def test_bitcount(c):
    c.cmd("SET", "s", "foobar")
    assert c.cmd("BITCOUNT", "s") == 26
    assert c.cmd("BITCOUNT", "s", 0, 0) == 4
    assert c.cmd("BITCOUNT", "s", 1, 1) == 6
    assert c.cmd("BITCOUNT", "s", 1, 1, "BYTE") == 6
    assert c.cmd("BITCOUNT", "s", 5, 30, "BIT") == 17
    assert c.cmd("BITCOUNT", "s", 5, 30, "bit") == 17
    assert c.cmd("BITCOUNT", "s", -2, -1) == 7
    assert c.cmd("BITCOUNT", "s", -100, 100) == 26
    assert c.cmd("BITCOUNT", "s", 4, 2) == 0
    assert c.cmd("BITCOUNT", "s", 100, 200) == 0
    assert c.cmd("BITCOUNT", "s", -3, -100) == 0, "a reversed negative range counts nothing"
    assert c.cmd("BITCOUNT", "s", -100, -3) == 19
    assert c.cmd("BITCOUNT", "s", -1, -1, "BIT") == 0
    assert c.cmd("BITCOUNT", "s", -9, -1, "BIT") == 5
    c.cmd("SET", "e", "")
    assert c.cmd("BITCOUNT", "e") == 0
    assert c.cmd("BITCOUNT", "e", 0, -1) == 0
    assert c.cmd("BITCOUNT", "missing") == 0


def test_bitcount_errors(c):
    c.cmd("SET", "s", "foobar")
    assert c.cmd("BITCOUNT", "s", 1) == SYNTAX
    assert c.cmd("BITCOUNT", "s", "a", 1) == NOT_INTEGER
    assert c.cmd("BITCOUNT", "s", 0, "b") == NOT_INTEGER
    assert c.cmd("BITCOUNT", "s", 0, 1, "BITS") == SYNTAX
    assert c.cmd("BITCOUNT", "s", 0, 1, "BIT", "x") == SYNTAX
    # Redis 7.0 answers a reversed negative range before it reads BYTE|BIT.
    assert c.cmd("BITCOUNT", "s", -1, -5, "foo") == 0
    # ... and looks the key up before it reads any range: a missing key counts 0 whatever follows.
    assert c.cmd("BITCOUNT", "missing", "a", "b") == 0
    assert c.cmd("BITCOUNT", "missing", 1) == 0
    c.cmd("HSET", "h", "f", "v")
    assert c.cmd("BITCOUNT", "h") == WRONGTYPE
    assert c.cmd("BITCOUNT", "h", "a", "b") == WRONGTYPE


def test_bitpos(c):
    c.cmd("SET", "k", b"\xff\xf0\x00")
    assert c.cmd("BITPOS", "k", 0) == 12
    c.cmd("SET", "k", b"\x00\xff\xf0")
    assert c.cmd("BITPOS", "k", 1, 0) == 8
    assert c.cmd("BITPOS", "k", 1, 2) == 16
    assert c.cmd("BITPOS", "k", 1, 2, -1, "BYTE") == 16
    assert c.cmd("BITPOS", "k", 1, 7, 15, "BIT") == 8
    assert c.cmd("BITPOS", "k", 1, 17, 20, "BIT") == 17
    assert c.cmd("BITPOS", "k", 1, 20, -1, "BIT") == -1
    assert c.cmd("BITPOS", "k", 0, 9, 16, "BIT") == -1
    assert c.cmd("BITPOS", "k", 0, -4, -1, "BIT") == 20
    assert c.cmd("BITPOS", "k", 1, 3, 2) == -1, "an empty range"
    assert c.cmd("BITPOS", "k", 1, -1, 0) == -1
    # All ones: without an end, a clear bit is found just past the string; with one, none is.
    c.cmd("SET", "ones", b"\xff\xff\xff")
    assert c.cmd("BITPOS", "ones", 0) == 24
    assert c.cmd("BITPOS", "ones", 0, 1) == 24
    assert c.cmd("BITPOS", "ones", 0, 3, -1, "BIT") == -1
    assert c.cmd("BITPOS", "ones", 0, 0, -1) == -1
    assert c.cmd("BITPOS", "ones", 0, 0, 100) == -1
    assert c.cmd("BITPOS", "ones", 1, 2) == 16
    c.cmd("SET", "zeros", b"\x00" * 40)
    assert c.cmd("BITPOS", "zeros", 1) == -1
    assert c.cmd("BITPOS", "zeros", 0, 35) == 280
    assert c.cmd("SETBIT", "zeros", 301, 1) == 0
    assert c.cmd("BITPOS", "zeros", 1) == 301
    assert c.cmd("BITPOS", "zeros", 1, 1, 37) == 301
    assert c.cmd("BITPOS", "zeros", 1, 1, 36) == -1
    # A missing key is zeros without end; an empty string holds no bit at all.
    assert c.cmd("BITPOS", "missing", 0) == 0
    assert c.cmd("BITPOS", "missing", 1) == -1
    c.cmd("SET", "e", "")
    assert c.cmd("BITPOS", "e", 0) == -1
    assert c.cmd("BITPOS", "e", 1) == -1


def test_bitpos_errors(c):
    c.cmd("SET", "k", "abc")
    assert c.cmd("BITPOS", "k", 2) == Err("ERR The bit argument must be 1 or 0.")
    assert c.cmd("BITPOS", "k", "x") == NOT_INTEGER
    assert c.cmd("BITPOS", "k", 1, "x") == NOT_INTEGER
    assert c.cmd("BITPOS", "k", 1, 0, "x") == NOT_INTEGER
    assert c.cmd("BITPOS", "k", 1, 0, -1, "bits") == SYNTAX
    assert c.cmd("BITPOS", "k", 1, 0, "x", "bits") == SYNTAX, "BYTE|BIT is read before the end"
    assert c.cmd("BITPOS", "k", 1, 0, -1, "bit", "x") == SYNTAX
    assert c.cmd("BITPOS", "missing", 1, "x") == -1, "a missing key's range is not read"
    assert c.cmd("BITPOS", "missing", 2) == Err("ERR The bit argument must be 1 or 0.")
    c.cmd("SADD", "set", "m")
    assert c.cmd("BITPOS", "set", 1) == WRONGTYPE
    assert c.cmd("BITPOS", "k") == Err("ERR wrong number of arguments for 'bitpos' command")


def test_bitop(c):
    c.cmd("SET", "a", b"\xff\x0f\xaa")
    c.cmd("SET", "b", b"\xf0")
    assert c.cmd("BITOP", "AND", "d", "a", "b") == 3
    assert c.cmd("GET", "d") == b"\xf0\x00\x00", "shorter sources are zero-padded"
    assert c.cmd("BITOP", "or", "d", "b", "a") == 3
    assert c.cmd("GET", "d") == b"\xff\x0f\xaa"
    assert c.cmd("BITOP", "Xor", "d", "a", "b", "a") == 3
    assert c.cmd("GET", "d") == b"\xf0\x00\x00"
    assert c.cmd("BITOP", "NOT", "d", "a") == 3
    assert c.cmd("GET", "d") == b"\x00\xf0\x55"
    # Missing keys are empty strings.
    assert c.cmd("BITOP", "AND", "d", "a", "missing") == 3
    assert c.cmd("GET", "d") == b"\x00\x00\x00"
    assert c.cmd("BITOP", "OR", "d", "missing", "b") == 1
    assert c.cmd("GET", "d") == b"\xf0"
    # The destination may be a source.
    assert c.cmd("BITOP", "OR", "a", "a", "b", "d") == 3
    assert c.cmd("GET", "a") == b"\xff\x0f\xaa"
    # An empty result deletes the destination; a written one has no TTL.
    c.cmd("SET", "e", "")
    assert c.cmd("BITOP", "OR", "d", "missing", "e") == 0
    assert c.cmd("EXISTS", "d") == 0
    c.cmd("SET", "d", "x")
    assert c.cmd("BITOP", "NOT", "d", "missing") == 0
    assert c.cmd("EXISTS", "d") == 0
    c.cmd("SET", "d", "x")
    c.cmd("EXPIRE", "d", 100)
    assert c.cmd("BITOP", "NOT", "d", "b") == 1
    assert c.cmd("TTL", "d") == -1
    assert c.cmd("GET", "d") == b"\x0f"


def test_bitop_errors(c):
    c.cmd("SET", "a", "x")
    c.cmd("LPUSH", "l", "x")
    assert c.cmd("BITOP", "NAND", "d", "a") == SYNTAX
    assert c.cmd("BITOP", "NOT", "d", "a", "a") == Err("ERR BITOP NOT must be called with a single source key.")
    assert c.cmd("BITOP", "AND", "d", "a", "l") == WRONGTYPE
    assert c.cmd("BITOP", "AND", "l", "a") == 1, "the destination's old type does not matter"
    assert c.cmd("TYPE", "l") == "string"
    assert c.cmd("BITOP", "AND", "d") == Err("ERR wrong number of arguments for 'bitop' command")


def test_bitfield(c):
    assert c.cmd("BITFIELD", "bf", "SET", "i8", 0, -100, "GET", "u8", 0, "GET", "i4", 4) == [0, 156, -4]
    assert c.cmd("GET", "bf") == b"\x9c"
    assert c.cmd("BITFIELD", "bf", "INCRBY", "u2", 100, 1, "GET", "u2", 100) == [1, 1]
    assert c.cmd("STRLEN", "bf") == 13, "writes grow the string to their last bit"
    # '#N' is the N-th field of the type's width.
    assert c.cmd("BITFIELD", "bf", "SET", "u8", "#1", 200, "GET", "u8", 8, "GET", "u16", "#0") == [0, 200, 0x9CC8]
    # Reads past the end are zeros, and create nothing.
    assert c.cmd("BITFIELD", "missing", "GET", "i64", 1000) == [0]
    assert c.cmd("EXISTS", "missing") == 0
    assert c.cmd("BITFIELD", "bf") == []
    assert c.cmd("BITFIELD", "missing") == []
    # Widest types.
    assert c.cmd("BITFIELD", "w", "SET", "i64", 0, -1, "GET", "u63", 0, "GET", "i64", 0) == [0, 2**63 - 1, -1]
    assert c.cmd("BITFIELD", "w", "SET", "u63", 1, 2**63 - 1, "GET", "i64", 0) == [2**63 - 1, -1]
    assert c.cmd("BITFIELD", "w", "SET", "i1", 3, -1, "GET", "u1", 3, "INCRBY", "i1", 3, 1) == [-1, 1, 0]
    assert c.cmd("BITFIELD_RO", "bf", "GET", "u8", "#1", "GET", "i8", 0) == [200, -100]
    assert c.cmd("BITFIELD_RO", "missing", "GET", "u8", 0) == [0]


def test_bitfield_overflow(c):
    assert c.cmd("BITFIELD", "o", "SET", "u8", 0, 200) == [0]
    assert c.cmd("BITFIELD", "o", "INCRBY", "u8", 0, 100) == [44], "WRAP by default"
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "SAT", "INCRBY", "u8", 0, 250, "INCRBY", "u8", 0, -300) == [255, 0]
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "FAIL", "INCRBY", "u8", 0, -1, "INCRBY", "u8", 0, 7) == [None, 7]
    # OVERFLOW applies to the operations after it, each one its own.
    assert c.cmd("BITFIELD", "o", "SET", "i8", 0, 100, "INCRBY", "i8", 0, 100,
                 "OVERFLOW", "sat", "INCRBY", "i8", 0, -300,
                 "OVERFLOW", "fail", "INCRBY", "i8", 0, -1,
                 "OVERFLOW", "wrap", "INCRBY", "i8", 0, -100) == [7, -56, -128, None, 28]
    # SET makes the value fit as the policy says, and answers the old value.
    assert c.cmd("BITFIELD", "o", "SET", "u8", 0, 256, "GET", "u8", 0) == [28, 0]
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "SAT", "SET", "u8", 0, -1, "GET", "u8", 0) == [0, 255]
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "FAIL", "SET", "i8", 0, 128, "GET", "i8", 0) == [None, -1]
    # Redis's wrapping comparison saturates the smallest i64 high for narrow signed types.
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "SAT", "SET", "i8", 0, -2**63, "GET", "i8", 0) == [-1, 127]
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "SAT", "SET", "i8", 0, -200, "GET", "i8", 0) == [127, -128]
    assert c.cmd("BITFIELD", "o", "SET", "i64", 8, 2**63 - 1, "INCRBY", "i64", 8, 1,
                 "OVERFLOW", "SAT", "INCRBY", "i64", 8, -1, "INCRBY", "i64", 8, -2**63) == [0, -2**63, -2**63, -2**63]
    assert c.cmd("BITFIELD", "o", "OVERFLOW", "SAT", "INCRBY", "u63", 8, 2**63 - 1, "INCRBY", "u63", 8, -2**63) == [2**63 - 1, 0]
    # A write that fails still creates (or grows) the string, as Redis does.
    assert c.cmd("BITFIELD", "new", "OVERFLOW", "FAIL", "INCRBY", "u2", 0, 10) == [None]
    assert c.cmd("GET", "new") == b"\x00"


def test_bitfield_errors(c):
    c.cmd("SET", "k", "x")
    assert c.cmd("BITFIELD", "k", "GET", "u64", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "i65", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "i0", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "I8", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "x8", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "i08", 0) == BAD_TYPE
    assert c.cmd("BITFIELD", "k", "GET", "i8", -1) == BAD_OFFSET
    assert c.cmd("BITFIELD", "k", "GET", "i8", "#-1") == BAD_OFFSET
    assert c.cmd("BITFIELD", "k", "GET", "i8", OFFSET_MAX) == [0]
    assert c.cmd("BITFIELD", "k", "GET", "i8", OFFSET_MAX + 1) == BAD_OFFSET
    assert c.cmd("BITFIELD", "k", "GET", "i8", "#536870911") == [0]
    assert c.cmd("BITFIELD", "k", "GET", "i8", "#536870912") == BAD_OFFSET
    assert c.cmd("BITFIELD", "k", "GET", "i8", "#9223372036854775807") == BAD_OFFSET, "the product wraps"
    assert c.cmd("BITFIELD", "k", "GET", "i8") == SYNTAX
    assert c.cmd("BITFIELD", "k", "SET", "i8", 0) == SYNTAX
    assert c.cmd("BITFIELD", "k", "INCRBY", "i8", 0, "x") == NOT_INTEGER
    assert c.cmd("BITFIELD", "k", "FOO", 1, 2) == SYNTAX
    assert c.cmd("BITFIELD", "k", "OVERFLOW") == SYNTAX
    assert c.cmd("BITFIELD", "k", "OVERFLOW", "CLAMP") == Err("ERR Invalid OVERFLOW type specified")
    # Every operation is parsed before any runs.
    assert c.cmd("BITFIELD", "k", "SET", "u8", 0, 1, "GET", "u64", 0) == BAD_TYPE
    assert c.cmd("GET", "k") == b"x"
    ro_error = Err("ERR BITFIELD_RO only supports the GET subcommand")
    assert c.cmd("BITFIELD_RO", "k", "SET", "i8", 0, 1) == ro_error
    assert c.cmd("BITFIELD_RO", "k", "GET", "i8", 0, "INCRBY", "i8", 0, 1) == ro_error
    assert c.cmd("BITFIELD_RO", "k", "INCRBY", "i8", 0, "x") == NOT_INTEGER, "parsed before refused"
    c.cmd("HSET", "h", "f", "v")
    assert c.cmd("BITFIELD", "h", "GET", "i8", 0) == WRONGTYPE
    assert c.cmd("BITFIELD", "h", "SET", "i8", 0, 1) == WRONGTYPE
    assert c.cmd("BITFIELD", "h") == WRONGTYPE
    assert c.cmd("BITFIELD_RO", "h", "GET", "i8", 0) == WRONGTYPE


def test_bitfield_nil_in_resp3(raw):
    c = raw()
    c.cmd("HELLO", "3")
    assert c.cmd("BITFIELD", "k", "OVERFLOW", "FAIL", "INCRBY", "u1", 0, 2, "GET", "u1", 0) == [None, 0]


def _info_int(c, section, field):
    for line in c.cmd("INFO", section).decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":")[1])
    raise AssertionError(field)


@pytest.mark.fallow_only
def test_growth_is_refused_past_maxmemory(server_factory):
    # Redis checks maxmemory only before a command starts; fallow reserves a bitmap's growth first, so
    # one SETBIT, BITFIELD or BITOP cannot take the server past its limit.
    s = server_factory(maxmemory="25mb", maxmemory_policy="noeviction")
    oom = Err("OOM command not allowed when used memory > 'maxmemory'.")
    with RawConn(port=s.port, timeout=10) as c:
        assert c.cmd("SETBIT", "huge", 8 * 400_000_000, 1) == oom
        assert c.cmd("BITFIELD", "huge", "SET", "u8", "#400000000", 1) == oom
        assert c.cmd("EXISTS", "huge") == 0
        assert c.cmd("SETBIT", "b", 8 * 10_000_000, 1) == 0, "growth that fits"
        assert c.cmd("STRLEN", "b") == 10_000_001
        assert c.cmd("SETBIT", "b", 8 * 40_000_000, 1) == oom, "growth past the cap"
        assert c.cmd("BITFIELD", "b", "INCRBY", "i64", 8 * 40_000_000, 1) == oom
        assert c.cmd("STRLEN", "b") == 10_000_001
        assert c.cmd("BITOP", "NOT", "c", "b") == 10_000_001
        assert c.cmd("BITOP", "NOT", "d", "b") == oom
        assert c.cmd("EXISTS", "d") == 0
        assert _info_int(c, "memory", "used_memory") < 25 << 20
        assert _info_int(c, "stats", "total_oom_rejections") == 5
