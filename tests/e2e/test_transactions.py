import pytest

from helpers import Err

pytestmark = pytest.mark.resp


def test_multi_exec(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("SET", "a", "1") == "QUEUED"
    assert c.cmd("INCR", "a") == "QUEUED"
    assert c.cmd("GET", "a") == "QUEUED"
    assert c.cmd("EXEC") == ["OK", 2, b"2"]


def test_exec_runtime_error_does_not_abort(c):
    c.cmd("SET", "s", "x")
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("INCR", "s") == "QUEUED"
    assert c.cmd("SET", "b", "1") == "QUEUED"
    res = c.cmd("EXEC")
    assert res == [Err("ERR value is not an integer or out of range"), "OK"]
    assert c.cmd("GET", "b") == b"1"


def test_execabort_on_queue_error(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("SET", "a", "1") == "QUEUED"
    assert c.cmd("SET", "a") == Err("ERR wrong number of arguments for 'set' command")
    assert c.cmd("NOSUCHCMD") == Err("ERR unknown command 'NOSUCHCMD', with args beginning with: ")
    assert c.cmd("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")
    assert c.cmd("EXISTS", "a") == 0


def test_discard(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("SET", "a", "1") == "QUEUED"
    assert c.cmd("DISCARD") == "OK"
    assert c.cmd("EXISTS", "a") == 0
    assert c.cmd("DISCARD") == Err("ERR DISCARD without MULTI")
    assert c.cmd("EXEC") == Err("ERR EXEC without MULTI")


def test_nested_multi_and_watch_inside(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("MULTI") == Err("ERR MULTI calls can not be nested")
    assert c.cmd("WATCH", "x") == Err("ERR WATCH inside MULTI is not allowed")
    assert c.cmd("EXEC") == []


def test_watch_abort_on_modification(raw):
    a, b = raw(), raw()
    a.cmd("SET", "w", "1")
    assert a.cmd("WATCH", "w") == "OK"
    assert b.cmd("SET", "w", "2") == "OK"
    assert a.cmd("MULTI") == "OK"
    assert a.cmd("SET", "w", "3") == "QUEUED"
    assert a.cmd("EXEC") is None  # nil multi-bulk
    assert a.cmd("GET", "w") == b"2"


def test_watch_ok_when_untouched_and_unwatch(raw):
    a, b = raw(), raw()
    assert a.cmd("WATCH", "w") == "OK"
    assert a.cmd("MULTI") == "OK"
    assert a.cmd("SET", "w", "1") == "QUEUED"
    assert a.cmd("EXEC") == ["OK"]
    # UNWATCH forgets the watched keys
    assert a.cmd("WATCH", "w") == "OK"
    b.cmd("SET", "w", "2")
    assert a.cmd("UNWATCH") == "OK"
    assert a.cmd("MULTI") == "OK"
    assert a.cmd("SET", "w", "3") == "QUEUED"
    assert a.cmd("EXEC") == ["OK"]
    assert a.cmd("GET", "w") == b"3"


def test_watch_missing_key_then_created(raw):
    a, b = raw(), raw()
    assert a.cmd("WATCH", "nk") == "OK"
    b.cmd("SET", "nk", "x")
    a.cmd("MULTI")
    a.cmd("PING")
    assert a.cmd("EXEC") is None


def test_watch_expired_key_touch_by_flush(raw):
    a, b = raw(), raw()
    a.cmd("SET", "k", "v")
    assert a.cmd("WATCH", "k") == "OK"
    b.cmd("FLUSHALL")
    a.cmd("MULTI")
    a.cmd("PING")
    assert a.cmd("EXEC") is None


def test_redis_py_pipeline_transaction(r):
    with r.pipeline() as p:
        p.set("a", 1).incr("a").get("a")
        assert p.execute() == [True, 2, "2"]
