import time

import pytest

from helpers import Err, Push, encode, wait_for

pytestmark = pytest.mark.resp


def test_subscribe_publish_resp2(raw):
    sub, pub = raw(), raw()
    sub.send(b"SUBSCRIBE ch1 ch2\r\n")
    assert sub.read_reply() == [b"subscribe", b"ch1", 1]
    assert sub.read_reply() == [b"subscribe", b"ch2", 2]
    assert pub.cmd("PUBLISH", "ch1", "hello") == 1
    assert sub.read_reply() == [b"message", b"ch1", b"hello"]
    assert pub.cmd("PUBLISH", "nobody", "x") == 0
    # only pubsub commands are allowed in RESP2 subscribed context
    assert sub.cmd("GET", "k") == Err(
        "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET "
        "are allowed in this context")
    assert sub.cmd("PING") == [b"pong", b""]
    sub.send(b"UNSUBSCRIBE ch1\r\n")
    assert sub.read_reply() == [b"unsubscribe", b"ch1", 1]
    sub.send(b"UNSUBSCRIBE\r\n")
    assert sub.read_reply() == [b"unsubscribe", b"ch2", 0]
    assert sub.cmd("GET", "k") is None  # back to normal mode


def test_psubscribe(raw):
    sub, pub = raw(), raw()
    sub.send(b"PSUBSCRIBE news.*\r\n")
    assert sub.read_reply() == [b"psubscribe", b"news.*", 1]
    assert pub.cmd("PUBLISH", "news.tech", "m1") == 1
    assert sub.read_reply() == [b"pmessage", b"news.*", b"news.tech", b"m1"]
    assert pub.cmd("PUBLISH", "sport", "m2") == 0
    sub.send(b"PUNSUBSCRIBE news.*\r\n")
    assert sub.read_reply() == [b"punsubscribe", b"news.*", 0]
    sub.send(b"PUNSUBSCRIBE\r\n")
    assert sub.read_reply() == [b"punsubscribe", None, 0]


def test_unsubscribe_when_not_subscribed(c):
    c.send(b"UNSUBSCRIBE\r\n")
    assert c.read_reply() == [b"unsubscribe", None, 0]


def test_pattern_and_channel_both_match(raw):
    sub, pub = raw(), raw()
    sub.send(b"SUBSCRIBE a.b\r\nPSUBSCRIBE a.*\r\n")
    assert sub.read_reply() == [b"subscribe", b"a.b", 1]
    assert sub.read_reply() == [b"psubscribe", b"a.*", 2]
    assert pub.cmd("PUBLISH", "a.b", "x") == 2
    got = [sub.read_reply(), sub.read_reply()]
    assert [b"message", b"a.b", b"x"] in got
    assert [b"pmessage", b"a.*", b"a.b", b"x"] in got


def test_pubsub_channels_numsub_numpat(raw):
    s1, s2, q = raw(), raw(), raw()
    s1.send(b"SUBSCRIBE alpha beta\r\n")
    s1.read_reply(), s1.read_reply()
    s2.send(b"SUBSCRIBE alpha\r\nPSUBSCRIBE p*\r\n")
    s2.read_reply(), s2.read_reply()
    assert sorted(q.cmd("PUBSUB", "CHANNELS")) == [b"alpha", b"beta"]
    assert q.cmd("PUBSUB", "CHANNELS", "a*") == [b"alpha"]
    assert q.cmd("PUBSUB", "NUMSUB", "alpha", "beta", "none") == [b"alpha", 2, b"beta", 1, b"none", 0]
    assert q.cmd("PUBSUB", "NUMPAT") == 1
    s1.close()
    assert wait_for(lambda: q.cmd("PUBSUB", "NUMSUB", "beta") == [b"beta", 0])


def test_resp3_push_messages(raw):
    sub, pub = raw(), raw()
    hello = sub.cmd("HELLO", "3")
    assert hello[b"proto"] == 3
    sub.send(b"SUBSCRIBE ch\r\n")
    m = sub.read_reply()
    assert isinstance(m, Push) and m == [b"subscribe", b"ch", 1]
    # RESP3: regular commands still work while subscribed
    assert sub.cmd("SET", "k", "v") == "OK"
    assert pub.cmd("PUBLISH", "ch", "payload") == 1
    m = sub.read_reply()
    assert isinstance(m, Push) and m == [b"message", b"ch", b"payload"]
    assert sub.cmd("GET", "k") == b"v"
    sub.send(b"UNSUBSCRIBE ch\r\n")
    m = sub.read_reply()
    assert isinstance(m, Push) and m == [b"unsubscribe", b"ch", 0]


def test_redis_py_pubsub_resp3(r3, r):
    p = r3.pubsub()
    p.subscribe("evt")
    first = p.get_message(timeout=2)
    assert first["type"] == "subscribe" and first["channel"] == "evt"
    assert r.publish("evt", "data") == 1
    msg = None
    deadline = time.monotonic() + 3
    while msg is None and time.monotonic() < deadline:
        msg = p.get_message(timeout=0.5)
    assert msg is not None and msg["type"] == "message" and msg["data"] == "data"
    p.close()


def test_sharded_pubsub(raw):
    subscriber, publisher = raw(), raw()
    assert subscriber.cmd("SUBSCRIBE", "c1") == [b"subscribe", b"c1", 1]
    subscriber.send(encode("SSUBSCRIBE", "s1", "s2"))
    assert [subscriber.read_reply(), subscriber.read_reply()] == \
        [[b"ssubscribe", b"s1", 1], [b"ssubscribe", b"s2", 2]], "shard channels are counted apart"
    assert publisher.cmd("SPUBLISH", "s1", "hello") == 1
    assert subscriber.read_reply() == [b"smessage", b"s1", b"hello"]
    assert publisher.cmd("PUBLISH", "s1", "x") == 0, "a shard channel is not a channel"
    assert sorted(publisher.cmd("PUBSUB", "SHARDCHANNELS")) == [b"s1", b"s2"]
    assert publisher.cmd("PUBSUB", "SHARDCHANNELS", "s1*") == [b"s1"]
    assert publisher.cmd("PUBSUB", "SHARDNUMSUB", "s1", "zz") == [b"s1", 1, b"zz", 0]
    assert publisher.cmd("PUBSUB", "SHARDCHANNELS", "a", "b") == \
        Err("ERR unknown subcommand or wrong number of arguments for 'SHARDCHANNELS'. Try PUBSUB HELP.")
    assert subscriber.cmd("SUNSUBSCRIBE", "s1") == [b"sunsubscribe", b"s1", 1]
    assert subscriber.cmd("SUNSUBSCRIBE") == [b"sunsubscribe", b"s2", 0]
    assert subscriber.cmd("SUNSUBSCRIBE") == [b"sunsubscribe", None, 0]
    assert subscriber.cmd("SPUBLISH", "s1", "m") == Err(
        "ERR Can't execute 'spublish': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed "
        "in this context")
    assert publisher.cmd("SSUBSCRIBE") == Err("ERR wrong number of arguments for 'ssubscribe' command")
    resp3 = raw()
    resp3.cmd("HELLO", "3")
    assert resp3.cmd("SSUBSCRIBE", "s9") == Push([b"ssubscribe", b"s9", 1])
    assert publisher.cmd("SPUBLISH", "s9", "m") == 1
    assert resp3.read_reply() == Push([b"smessage", b"s9", b"m"])
