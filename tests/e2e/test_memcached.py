import base64
import struct
import time

import pytest
from pymemcache.exceptions import MemcacheClientError

from helpers import RawConn, wait_for

pytestmark = pytest.mark.memcache


# ------------------------------------------------------------------ pymemcache / text protocol
def test_set_get_delete(mc):
    assert mc.set("k", b"v") is True
    assert mc.get("k") == b"v"
    assert mc.get("missing") is None
    assert mc.get_many(["k", "missing"]) == {"k": b"v"}
    assert mc.delete("k") is True
    assert mc.delete("k", noreply=False) is False
    assert mc.get("k") is None


def test_flags_roundtrip(mcraw):
    c = mcraw()
    c.send(b"set k 4294967295 0 3\r\nabc\r\n")
    assert c.readline() == b"STORED"
    c.send(b"get k\r\n")
    assert c.read_until(b"END\r\n") == b"VALUE k 4294967295 3\r\nabc\r\nEND\r\n"


def test_add_replace_append_prepend(mc):
    assert mc.add("k", b"1") is True
    assert mc.add("k", b"2") is False
    assert mc.get("k") == b"1"
    assert mc.replace("k", b"3") is True
    assert mc.replace("missing", b"x") is False
    assert mc.append("k", b"4") is True
    assert mc.prepend("k", b"0") is True
    assert mc.get("k") == b"034"
    assert mc.append("missing", b"x") is False
    assert mc.prepend("missing", b"x") is False


def test_gets_cas(mc):
    mc.set("k", b"v1")
    v, cas = mc.gets("k")
    assert v == b"v1" and int(cas) > 0
    assert mc.cas("k", b"v2", cas) is True
    assert mc.cas("k", b"v3", cas) is False  # stale cas -> EXISTS
    assert mc.get("k") == b"v2"
    assert mc.cas("missing", b"x", cas) is None  # NOT_FOUND


def test_incr_decr(mc, mcraw):
    mc.set("n", b"10")
    assert mc.incr("n", 5) == 15
    assert mc.decr("n", 20) == 0  # decr clamps at 0
    assert mc.incr("missing", 1) is None
    mc.set("big", b"18446744073709551615")
    assert mc.incr("big", 1) == 0  # 64-bit wrap
    c = mcraw()
    c.send(b"set s 0 0 3\r\nabc\r\n")
    assert c.readline() == b"STORED"
    c.send(b"incr s 1\r\n")
    assert c.readline() == b"CLIENT_ERROR cannot increment or decrement non-numeric value"
    c.send(b"incr n abc\r\n")
    assert c.readline() == b"CLIENT_ERROR invalid numeric delta argument"


def test_touch_and_expiry(mc):
    mc.set("k", b"v", expire=1)
    assert mc.touch("k", 100) is True
    assert mc.touch("missing", 100) is False
    mc.set("short", b"v", expire=1)
    time.sleep(2.1)
    assert mc.get("short") is None
    assert mc.get("k") == b"v"


def test_negative_exptime_expires_immediately(mc):
    mc.set("k", b"v", expire=-1)
    assert mc.get("k") is None


def test_flush_all(mc):
    mc.set("a", b"1")
    mc.set("b", b"2")
    assert mc.flush_all() is True
    assert mc.get_many(["a", "b"]) == {}


def test_flush_all_delay(mc):
    mc.set("a", b"1")
    assert mc.flush_all(delay=2) is True
    assert mc.get("a") == b"1"
    assert wait_for(lambda: mc.get("a") is None, timeout=4.0, interval=0.2)


def test_noreply(mcraw):
    c = mcraw()
    c.send(b"set k 0 0 1 noreply\r\nv\r\nadd k 0 0 1 noreply\r\nx\r\nincr n 1 noreply\r\n"
           b"delete nope noreply\r\nappend k 0 0 1 noreply\r\nw\r\nget k\r\n")
    assert c.read_until(b"END\r\n") == b"VALUE k 0 2\r\nvw\r\nEND\r\n"


def test_pymemcache_noreply(server, mc):
    from pymemcache.client.base import Client
    nr = Client(("127.0.0.1", server.mc_port), timeout=5, connect_timeout=5, default_noreply=True)
    assert nr.set("k", b"v") is True  # noreply: client cannot know, returns True
    nr.close()
    # Nothing orders two connections (in memcached either): the set lands, but maybe after our first get.
    assert wait_for(lambda: mc.get("k") == b"v", timeout=2.0, interval=0.02)


def test_gat_gats(mcraw):
    c = mcraw()
    c.send(b"set k 7 0 2\r\nhi\r\n")
    assert c.readline() == b"STORED"
    c.send(b"gat 100 k missing\r\n")
    assert c.read_until(b"END\r\n") == b"VALUE k 7 2\r\nhi\r\nEND\r\n"
    c.send(b"gats 100 k\r\n")
    out = c.read_until(b"END\r\n")
    head, rest = out.split(b"\r\n", 1)
    parts = head.split()
    assert parts[:4] == [b"VALUE", b"k", b"7", b"2"] and int(parts[4]) > 0
    assert rest == b"hi\r\nEND\r\n"
    c.send(b"mg k t\r\n")
    ttl = int(c.readline().split()[1][1:])
    assert 98 <= ttl <= 100


def _stats(c, sub=b""):
    c.send(b"stats" + (b" " + sub if sub else b"") + b"\r\n")
    out = c.read_until(b"END\r\n")
    lines = out.split(b"\r\n")[:-2]
    for ln in lines:
        parts = ln.split(b" ", 2)
        assert parts[0] == b"STAT" and len(parts) == 3, ln
    return {ln.split(b" ", 2)[1].decode(): ln.split(b" ", 2)[2].decode() for ln in lines}


def test_stats(mcraw, mc):
    mc.set("k", b"v")
    c = mcraw()
    s = _stats(c)
    for k in ("pid", "uptime", "version", "curr_items", "cmd_get", "cmd_set", "get_hits",
              "get_misses", "curr_connections", "total_items", "bytes", "limit_maxbytes"):
        assert k in s, k
    assert int(s["curr_items"]) == 1
    assert int(s["cmd_set"]) >= 1
    st = _stats(c, b"settings")
    assert "maxbytes" in st and "item_size_max" in st
    items = _stats(c, b"items")
    assert any(k.startswith("items:") and k.endswith(":number") for k in items)
    _stats(c, b"slabs")  # well-formed STAT lines + END


def test_version_verbosity_quit(mcraw):
    c = mcraw()
    c.send(b"version\r\n")
    line = c.readline()
    assert line.startswith(b"VERSION ") and len(line) > 8
    c.send(b"verbosity 1\r\n")
    assert c.readline() == b"OK"
    c.send(b"verbosity 0 noreply\r\nquit\r\n")
    assert c.read_until_closed(2.0) == b""


def test_unknown_command_error(mcraw):
    c = mcraw()
    c.send(b"bogus\r\n")
    assert c.readline() == b"ERROR"
    c.send(b"version\r\n")
    assert c.readline().startswith(b"VERSION")


def test_key_too_long(mcraw, mc):
    c = mcraw()
    key = b"k" * 251
    c.send(b"set " + key + b" 0 0 1\r\nv\r\n")
    # memcached then parses the data line "v" as a command (-> ERROR); fresh conns below
    assert c.readline() == b"CLIENT_ERROR bad command line format"
    g = mcraw()
    g.send(b"get " + key + b"\r\n")
    assert g.readline() == b"CLIENT_ERROR bad command line format"
    g.send(b"mg " + key + b" v\r\n")
    assert g.readline() == b"CLIENT_ERROR bad command line format"
    ok = b"k" * 250
    c2 = mcraw()
    c2.send(b"set " + ok + b" 0 0 1\r\nv\r\n")
    assert c2.readline() == b"STORED"
    with pytest.raises(MemcacheClientError):
        mc.set("k" * 251, b"v")


def test_value_too_large(mcraw):
    c = mcraw(timeout=10)
    big = b"x" * (1024 * 1024 + 1)
    c.send(b"set big 0 0 %d\r\n" % len(big) + big + b"\r\n")
    assert c.readline() == b"SERVER_ERROR object too large for cache"
    c.send(b"get big\r\n")
    assert c.readline() == b"END"
    c.send(b"set small 0 0 2\r\nok\r\n")
    assert c.readline() == b"STORED"


def test_bad_data_chunk(mcraw):
    c = mcraw()
    c.send(b"set k 0 0 2\r\nabcd\r\n")
    assert c.readline() == b"CLIENT_ERROR bad data chunk"


# ------------------------------------------------------------------ meta protocol
def test_meta_set_get(mcraw):
    c = mcraw()
    c.send(b"ms mk 5 T0 F30\r\nhello\r\n")
    assert c.readline() == b"HD"
    c.send(b"mg mk v\r\n")
    assert c.read_until(b"hello\r\n") == b"VA 5\r\nhello\r\n"
    c.send(b"mg mk s f v k\r\n")
    assert c.read_until(b"hello\r\n") == b"VA 5 s5 f30 kmk\r\nhello\r\n"
    c.send(b"mg mk\r\n")
    assert c.readline() == b"HD"
    c.send(b"mg missing v\r\n")
    assert c.readline() == b"EN"
    c.send(b"mg mk t\r\n")
    assert c.readline() == b"HD t-1"
    c.send(b"mg mk c\r\n")
    line = c.readline()
    assert line.startswith(b"HD c") and int(line[4:]) > 0


def test_meta_opaque_quiet_noop(mcraw):
    c = mcraw()
    c.send(b"mg miss1 v q\r\nmg miss2 v q Oabc\r\nms k 1 q\r\nx\r\nmg k v Oxyz\r\nmn\r\n")
    assert c.read_until(b"MN\r\n") == b"VA 1 Oxyz\r\nx\r\nMN\r\n"


def test_meta_base64_key(mcraw):
    c = mcraw()
    key = base64.b64encode(b"bin\x00key")
    c.send(b"ms " + key + b" 2 b\r\nhi\r\n")
    assert c.readline() == b"HD"
    c.send(b"mg " + key + b" b v k\r\n")
    assert c.read_until(b"hi\r\n") == b"VA 2 k" + key + b" b\r\nhi\r\n"


def test_meta_set_modes(mcraw):
    c = mcraw()
    c.send(b"ms k 1 ME\r\na\r\n")
    assert c.readline() == b"HD"
    c.send(b"ms k 1 ME\r\nb\r\n")
    assert c.readline() == b"NS"
    c.send(b"ms k 1 MA\r\nc\r\n")
    assert c.readline() == b"HD"
    c.send(b"ms k 1 MP\r\nd\r\n")
    assert c.readline() == b"HD"
    c.send(b"mg k v\r\n")
    assert c.read_until(b"dac\r\n") == b"VA 3\r\ndac\r\n"
    c.send(b"ms nokey 1 MR\r\nz\r\n")
    assert c.readline() == b"NS"
    c.send(b"ms k 1 MR\r\nr\r\n")
    assert c.readline() == b"HD"
    c.send(b"ms k 1 MS\r\ns\r\n")
    assert c.readline() == b"HD"
    c.send(b"ms nokey 1 MA\r\nz\r\n")
    assert c.readline() == b"NS"
    c.send(b"ms k 1 MX\r\nz\r\n")
    assert c.readline() == b"CLIENT_ERROR invalid mode for ms M token"


def test_meta_set_cas(mcraw):
    c = mcraw()
    c.send(b"ms k 1 c\r\na\r\n")
    line = c.readline()
    assert line.startswith(b"HD c")
    cas = int(line[4:])
    c.send(b"ms k 1 C%d\r\nb\r\n" % (cas + 1000))
    assert c.readline() == b"EX"
    c.send(b"ms k 1 C%d\r\nb\r\n" % cas)
    assert c.readline() == b"HD"
    c.send(b"ms nokey 1 C1\r\nb\r\n")
    assert c.readline() == b"NF"


def test_meta_delete(mcraw):
    c = mcraw()
    c.send(b"ms k 1\r\na\r\nmd k\r\nmd k\r\nmd k q\r\nmn\r\n")
    assert c.read_until(b"MN\r\n") == b"HD\r\nHD\r\nNF\r\nNF\r\nMN\r\n"  # q hides only HD


def test_meta_arithmetic(mcraw):
    c = mcraw()
    c.send(b"ma n\r\n")
    assert c.readline() == b"NF"
    c.send(b"ma n N0 J10 v\r\n")  # autovivify with initial value 10
    assert c.read_until(b"\r\n10\r\n") == b"VA 2\r\n10\r\n"
    c.send(b"ma n v\r\n")
    assert c.read_until(b"11\r\n") == b"VA 2\r\n11\r\n"
    c.send(b"ma n MI D5 v\r\n")
    assert c.read_until(b"16\r\n") == b"VA 2\r\n16\r\n"
    c.send(b"ma n MD D100 v\r\n")
    assert c.read_until(b"0\r\n") == b"VA 1\r\n0\r\n"
    c.send(b"ma n\r\n")
    assert c.readline() == b"HD"
    c.send(b"ms s 1\r\nx\r\nma s\r\n")
    assert c.readline() == b"HD"
    assert c.readline() == b"CLIENT_ERROR cannot increment or decrement non-numeric value"


def test_meta_debug(mcraw):
    c = mcraw()
    c.send(b"ms k 3 T100\r\nabc\r\nme k\r\n")
    assert c.readline() == b"HD"
    line = c.readline()
    assert line.startswith(b"ME k ")
    fields = dict(kv.split(b"=", 1) for kv in line.split()[2:])
    # memcached 1.6.18 prints exp with an inverted sign (-100); accept either sign
    assert b"exp" in fields and 98 <= abs(int(fields[b"exp"])) <= 100
    assert b"size" in fields
    c.send(b"me missing\r\n")
    assert c.readline() == b"EN"


# ------------------------------------------------------------------ binary protocol
def _bin_req(opcode, key=b"", value=b"", extras=b"", opaque=0, cas=0):
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x80, opcode, len(key), len(extras), 0, 0,
                       len(body), opaque, cas) + body


def _bin_resp(c):
    hdr = c.read_exact(24)
    magic, op, klen, elen, dtype, status, blen, opaque, cas = struct.unpack(">BBHBBHIIQ", hdr)
    assert magic == 0x81
    body = c.read_exact(blen) if blen else b""
    return dict(op=op, status=status, opaque=opaque, cas=cas, extras=body[:elen],
                key=body[elen:elen + klen], value=body[elen + klen:])


def test_binary_set_get_noop(mcraw):
    c = mcraw()
    c.send(_bin_req(0x01, b"bk", b"bval", struct.pack(">II", 0xdeadbeef, 0), opaque=7))
    r = _bin_resp(c)
    assert (r["op"], r["status"], r["opaque"]) == (0x01, 0, 7) and r["cas"] > 0
    c.send(_bin_req(0x00, b"bk", opaque=8))
    r = _bin_resp(c)
    assert (r["status"], r["opaque"], r["value"]) == (0, 8, b"bval")
    assert struct.unpack(">I", r["extras"]) == (0xdeadbeef,)
    c.send(_bin_req(0x00, b"missing"))
    r = _bin_resp(c)
    assert r["status"] == 0x0001  # key not found
    # quiet get for a miss produces nothing; noop flushes
    c.send(_bin_req(0x09, b"missing", opaque=1) + _bin_req(0x0a, opaque=99))
    r = _bin_resp(c)
    assert (r["op"], r["status"], r["opaque"]) == (0x0a, 0, 99)


def test_text_and_binary_see_same_data(mcraw):
    t, b = mcraw(), mcraw()
    t.send(b"set shared 0 0 3\r\nabc\r\n")
    assert t.readline() == b"STORED"
    b.send(_bin_req(0x00, b"shared"))
    assert _bin_resp(b)["value"] == b"abc"


# ------------------------------------------------------------------ cross protocol (fallow)
@pytest.mark.fallow_only
def test_memcache_set_visible_via_resp(mc, r):
    mc.set("xproto", b"hello")
    assert r.get("xproto") == "hello"
    r.set("fromresp", "v")
    assert mc.get("fromresp") == b"v"
