"""Every error reply is counted (issue 17, item 7): INFO stats `total_error_replies` and the INFO
`errorstats` section (`errorstat_<PREFIX>:count=N`), as Redis 7 counts them, including the errors
that dispatch answers before a command runs (NOAUTH, arity, ACL denials, the subscribe context,
unknown commands) and those inside EXEC."""
import pytest

from helpers import RawConn

pytestmark = pytest.mark.resp


def info_fields(admin: RawConn, section: str) -> dict:
    reply = admin.cmd("INFO", section)
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def errorstats(admin: RawConn) -> dict:
    fields = info_fields(admin, "errorstats")
    return {name[len("errorstat_"):]: int(value.split("=")[1]) for name, value in fields.items()}


def total_errors(admin: RawConn) -> int:
    return int(info_fields(admin, "stats")["total_error_replies"])


def test_dispatch_errors_are_counted_by_prefix(server_factory):
    s = server_factory(requirepass="pw")
    # A raw connection: a client library's own start-up commands would be counted too.
    admin = RawConn(port=s.port)
    assert admin.cmd("AUTH", "pw") == "OK"
    assert admin.cmd("ACL", "SETUSER", "reader", "on", ">rpw", "~*", "+get") == "OK"
    assert admin.cmd("CONFIG", "RESETSTAT") == "OK"  # forgets the start-up probe's errors

    raw = RawConn(port=s.port)
    assert raw.cmd("GET", "k").startswith("NOAUTH")  # before AUTH
    assert raw.cmd("AUTH", "pw") == "OK"
    assert "wrong number of arguments" in raw.cmd("GET")  # arity
    assert "unknown command" in raw.cmd("NOSUCHCOMMAND")
    assert raw.cmd("SET", "s", "v") == "OK"
    assert raw.cmd("LPUSH", "s", "x").startswith("WRONGTYPE")  # a handler's error
    raw.close()

    reader = RawConn(port=s.port)
    assert reader.cmd("AUTH", "reader", "rpw") == "OK"
    assert reader.cmd("SET", "k", "v").startswith("NOPERM")  # ACL denial
    reader.close()

    sub = RawConn(port=s.port)
    assert sub.cmd("AUTH", "pw") == "OK"
    sub.cmd("SUBSCRIBE", "ch")
    sub.send(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
    assert "only (P|S)SUBSCRIBE" in str(sub.read_reply())  # subscribe context
    sub.close()

    tx = RawConn(port=s.port)
    assert tx.cmd("AUTH", "pw") == "OK"
    assert tx.cmd("MULTI") == "OK"
    assert tx.cmd("INCR", "s") == "QUEUED"
    replies = tx.cmd("EXEC")
    assert str(replies[0]).startswith("ERR value is not an integer")  # inside EXEC
    tx.close()

    stats = errorstats(admin)
    assert stats.get("NOAUTH") == 1, stats
    assert stats.get("NOPERM") == 1, stats
    assert stats.get("WRONGTYPE") == 1, stats
    # arity, unknown command, subscribe context, EXEC's INCR
    assert stats.get("ERR") == 4, stats
    assert total_errors(admin) == sum(stats.values()) == 7

    assert admin.cmd("CONFIG", "RESETSTAT") == "OK"
    assert errorstats(admin) == {}
    assert total_errors(admin) == 0
    admin.close()
