"""Interactive transactions (TXN.BEGIN / TXN.COMMIT / TXN.ABORT) and their locks (docs/transactions.md):
reads on the pre-transaction state, queued writes, commuting operations sharing a lock, phasing, fail
fast, deadlocks, lock-wait timeouts, plain commands and MULTI/EXEC respecting transactions' locks."""
import struct
import threading
import time

import pytest

from helpers import Err, wait_for

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

BLOCKED_S = 0.3  # how long a reply must not arrive for a request to count as waiting


@pytest.fixture(autouse=True)
def txn_defaults(server, raw):
    # waits in these tests last a few BLOCKED_S; the default bound (500 ms) is tested on its own
    assert raw().cmd("CONFIG", "SET", "txn-lock-wait-ms", "5000") == "OK"
    yield
    admin = raw()
    for name, value in [("txn-locks", "abstract"), ("txn-phasing", "yes"),
                        ("txn-phase-max-ms", "10"), ("txn-lock-wait-ms", "500")]:
        assert admin.cmd("CONFIG", "SET", name, value) == "OK"


def waits(conn, *args):
    """Sends a command and checks that its reply does not come yet."""
    conn.send(encode_cmd(*args))
    with pytest.raises(TimeoutError):
        conn.read_reply(timeout=BLOCKED_S)


def encode_cmd(*args):
    from helpers import encode
    return encode(*args)


def txn_info(conn) -> dict:
    text = conn.cmd("INFO", "txn").decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_reads_see_the_state_before_the_transaction_and_writes_apply_at_commit(c):
    c.cmd("SADD", "s", "a")
    assert c.cmd("TXN.BEGIN") == "OK"
    assert c.cmd("SADD", "s", "b", "c") == "QUEUED"
    assert c.cmd("SCARD", "s") == 1, "no read-your-own-writes"
    assert c.cmd("INCRBY", "n", "5") == "QUEUED"
    assert c.cmd("GET", "n") is None
    assert c.cmd("TXN.COMMIT") == [2, 5]
    assert c.cmd("SCARD", "s") == 3
    assert c.cmd("GET", "n") == b"5"


def test_abort_drops_queued_writes(c):
    assert c.cmd("TXN.BEGIN") == "OK"
    assert c.cmd("SET", "k", "v") == "QUEUED"
    assert c.cmd("TXN.ABORT") == "OK"
    assert c.cmd("EXISTS", "k") == 0
    assert c.cmd("TXN.ABORT") == Err("ERR TXN.ABORT without TXN.BEGIN")
    assert c.cmd("TXN.COMMIT") == Err("ERR TXN.COMMIT without TXN.BEGIN")


def test_commit_reports_errors_per_write_as_exec_does(c):
    c.cmd("SET", "str", "x")
    assert c.cmd("TXN.BEGIN") == "OK"
    assert c.cmd("INCR", "str") == "QUEUED"
    assert c.cmd("SET", "other", "1") == "QUEUED"
    assert c.cmd("TXN.COMMIT") == [Err("ERR value is not an integer or out of range"), "OK"]
    assert c.cmd("GET", "other") == b"1"


def test_commands_that_cannot_run_inside_a_transaction_are_refused(c):
    assert c.cmd("TXN.BEGIN") == "OK"
    for command in [("KEYS", "*"), ("SELECT", "1"), ("MULTI",), ("BLPOP", "l", "0"),
                    ("SUBSCRIBE", "ch"), ("FLUSHALL",), ("TXN.BEGIN",)]:
        reply = c.cmd(*command)
        assert isinstance(reply, Err), command
    assert c.cmd("PING") == "PONG"
    assert c.cmd("SADD", "s", "x") == "QUEUED", "the transaction goes on"
    assert c.cmd("TXN.COMMIT") == [1]


def test_txn_begin_inside_multi_is_refused(c):
    assert c.cmd("MULTI") == "OK"
    assert c.cmd("TXN.BEGIN") == Err("ERR TXN.BEGIN inside MULTI is not allowed")
    assert c.cmd("DISCARD") == "OK"


def test_commuting_adds_share_the_lock_and_a_read_waits_for_the_phase(raw):
    t1, t2, t3 = raw(), raw(), raw()
    for t in (t1, t2, t3):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert t2.cmd("SADD", "s", "y") == "QUEUED", "adds commute: no wait"
    waits(t3, "SCARD", "s")
    assert t1.cmd("TXN.COMMIT") == [1]
    with pytest.raises(TimeoutError):
        t3.read_reply(timeout=BLOCKED_S)  # t2 still holds the add phase
    assert t2.cmd("TXN.COMMIT") == [1]
    assert t3.read_reply() == 2, "the read sees both commits"
    assert t3.cmd("TXN.COMMIT") == []


def test_reader_writer_baseline_serializes_adds(raw):
    admin = raw()
    assert admin.cmd("CONFIG", "SET", "txn-locks", "rw") == "OK"
    t1, t2 = raw(), raw()
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    waits(t2, "SADD", "s", "y")
    assert t1.cmd("TXN.COMMIT") == [1]
    assert t2.read_reply() == "QUEUED"
    assert t2.cmd("TXN.COMMIT") == [1]


def test_without_phasing_a_conflict_aborts_the_whole_pipelined_transaction(raw):
    admin = raw()
    assert admin.cmd("CONFIG", "SET", "txn-phasing", "no") == "OK"
    t1, t2 = raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert t2.cmd("TXN.BEGIN") == "OK"
    reply = t2.cmd("SCARD", "s")
    assert isinstance(reply, Err) and reply.startswith("TXNABORT conflict"), reply
    # the rest of the transaction fails too instead of running outside it
    assert t2.cmd("SADD", "t", "y").startswith("TXNABORT conflict")
    assert t2.cmd("TXN.COMMIT").startswith("TXNABORT conflict")
    assert admin.cmd("EXISTS", "t") == 0
    assert t1.cmd("TXN.COMMIT") == [1]
    info = txn_info(admin)
    assert int(info["txn_aborts_conflict"]) >= 1
    assert int(info["conflict_read_set.add"]) >= 1


def test_a_deadlock_aborts_the_transaction_that_would_close_the_cycle(raw):
    t1, t2 = raw(), raw()
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SET", "a", "1") == "QUEUED"
    assert t2.cmd("SET", "b", "2") == "QUEUED"
    waits(t1, "SET", "b", "1")
    reply = t2.cmd("SET", "a", "2")
    assert reply.startswith("TXNABORT deadlock"), reply
    assert t1.read_reply() == "QUEUED", "t2's abort let t1 in"
    assert t2.cmd("TXN.ABORT") == "OK"
    assert t1.cmd("TXN.COMMIT") == ["OK", "OK"]
    assert t2.cmd("MGET", "a", "b") == [b"1", b"1"]


def test_a_lock_wait_is_bounded(raw):
    admin = raw()
    assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "200") == "OK"
    t1, t2 = raw(), raw()
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SET", "k", "1") == "QUEUED"
    reply = t2.cmd("GET", "k", timeout=5)
    assert reply.startswith("TXNABORT timeout"), reply
    assert t2.cmd("TXN.COMMIT").startswith("TXNABORT timeout")
    assert t1.cmd("TXN.COMMIT") == ["OK"]
    assert int(txn_info(admin)["txn_aborts_timeout"]) >= 1


def test_plain_commands_respect_transaction_locks(raw):
    t1, plain, reader = raw(), raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert plain.cmd("SADD", "s", "y") == 1, "a plain add commutes with the transaction's add"
    waits(reader, "SCARD", "s")
    assert t1.cmd("TXN.COMMIT") == [1]
    assert reader.read_reply() == 2
    assert int(txn_info(reader)["txn_locked_records"]) == 0


def test_exec_waits_for_a_transaction_lock(raw):
    t1, m = raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SET", "k", "new") == "QUEUED"
    assert m.cmd("MULTI") == "OK"
    assert m.cmd("GET", "k") == "QUEUED"
    waits(m, "EXEC")
    assert t1.cmd("TXN.COMMIT") == ["OK"]
    assert m.read_reply() == [b"new"]


def test_hash_writes_to_different_fields_share_the_lock(raw):
    t1, t2, t3 = raw(), raw(), raw()
    for t in (t1, t2, t3):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("HSET", "h", "f", "1") == "QUEUED"
    assert t2.cmd("HSET", "h", "g", "2") == "QUEUED"
    waits(t3, "HSET", "h", "f", "3")
    assert t1.cmd("TXN.COMMIT") == [1]
    assert t3.read_reply() == "QUEUED"
    assert t2.cmd("TXN.COMMIT") == [1]
    assert t3.cmd("TXN.COMMIT") == [0]
    assert t1.cmd("HGETALL", "h") == [b"f", b"3", b"g", b"2"]


def test_a_disconnect_aborts_and_releases(raw):
    t1, other = raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SET", "k", "v") == "QUEUED"
    waits(other, "GET", "k")
    t1.close()
    assert other.read_reply() is None, "the queued write was dropped"
    wait_for(lambda: int(txn_info(other)["txn_aborts_disconnect"]) >= 1)


def test_info_counts_commits_waits_and_conflict_pairs(raw):
    t1, t2 = raw(), raw()
    before = txn_info(t1)
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("INCRBY", "n", "1") == "QUEUED"
    waits(t2, "GET", "n")
    assert t1.cmd("TXN.COMMIT") == [1]
    assert t2.read_reply() == b"1"
    assert t2.cmd("TXN.COMMIT") == []
    after = txn_info(t1)
    assert int(after["txn_commits"]) - int(before["txn_commits"]) == 2
    assert int(after["txn_lock_waits"]) > int(before["txn_lock_waits"])
    assert int(after["conflict_read_counter.incr"]) >= 1
    assert after["txn_locks"] == "abstract"


def test_config_validates_txn_settings(c):
    assert c.cmd("CONFIG", "SET", "txn-locks", "maybe") == Err(
        "ERR CONFIG SET failed (possibly related to argument 'txn-locks') - argument(s) must be one of the following: abstract, rw")
    assert c.cmd("CONFIG", "GET", "txn-phasing") == [b"txn-phasing", b"yes"]


def test_new_types_commute_inside_transactions(raw):
    t1, t2, reader = raw(), raw(), raw()
    for t in (t1, t2, reader):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("TOPN.ADD", "best", "5", "alice") == "QUEUED"
    assert t2.cmd("TOPN.ADD", "best", "7", "bob") == "QUEUED", "adds to a TopN share the lock"
    assert t1.cmd("BAG.ADD", "stats", "5") == "QUEUED"
    assert t2.cmd("BAG.ADD", "stats", "7") == "QUEUED"
    # UID.NEXT answers at once, inside either transaction, with different ids
    ids = {t1.cmd("UID.NEXT", "post:id"), t2.cmd("UID.NEXT", "post:id")}
    assert len(ids) == 2 and all(isinstance(value, int) for value in ids)
    waits(reader, "TOPN.MAX", "best")
    assert t1.cmd("TXN.COMMIT") == [1, 1]
    assert t2.cmd("TXN.COMMIT") == [1, 2]
    assert reader.read_reply() == [b"bob", 7]
    assert reader.cmd("BAG.SUMMARY", "stats") == [2, 5, 7, b"6"]
    assert reader.cmd("TXN.COMMIT") == []


def test_a_nowait_transaction_aborts_instead_of_queueing(raw):
    t1, t2 = raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert t2.cmd("TXN.BEGIN", "NOWAIT") == "OK"
    assert t2.cmd("SADD", "s", "y") == "QUEUED", "a shared mode is granted at once"
    assert t2.cmd("SCARD", "s").startswith("TXNABORT conflict")
    assert t2.cmd("TXN.ABORT") == "OK"
    assert t2.cmd("TXN.BEGIN", "SOMETIMES") == Err("ERR syntax error")
    assert t2.cmd("TXN.BEGIN", "NOWAIT", "NOWAIT") == Err("ERR syntax error")
    assert t1.cmd("TXN.COMMIT") == [1]


def test_txn_nowait_switches_an_open_transaction_to_aborting(raw):
    t1, t2 = raw(), raw()
    assert t2.cmd("TXN.NOWAIT").startswith("ERR TXN.NOWAIT without TXN.BEGIN")
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert t2.cmd("TXN.BEGIN") == "OK"
    assert t2.cmd("TXN.NOWAIT") == "OK"
    assert t2.cmd("SCARD", "s").startswith("TXNABORT conflict"), "refused, not queued"
    assert t2.cmd("TXN.ABORT") == "OK"
    assert t1.cmd("TXN.COMMIT") == [1]


def test_a_busy_transaction_keeps_going_after_a_refused_command(raw):
    admin = raw()
    assert admin.cmd("CONFIG", "SET", "txn-phasing", "no") == "OK"
    t1, t2 = raw(), raw()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SADD", "s", "x") == "QUEUED"
    assert t2.cmd("TXN.BEGIN", "BUSY", "NOWAIT") == "OK"
    assert t2.cmd("INCR", "c") == "QUEUED"
    reply = t2.cmd("SCARD", "s")
    assert isinstance(reply, Err) and reply.startswith("TXNBUSY conflict"), reply
    assert t1.cmd("TXN.COMMIT") == [1]
    assert t2.cmd("SCARD", "s") == 1, "sent again once the holder is gone"
    assert t2.cmd("TXN.COMMIT") == [1]
    assert int(txn_info(admin)["txn_busy_replies"]) >= 1


def test_txn_lock_turns_an_upgrade_deadlock_into_a_wait(raw):
    t1, t2 = raw(), raw()
    # read, then add: the second upgrade would close a cycle
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
        assert t.cmd("SCARD", "s") == 0
    waits(t1, "SADD", "s", "a")
    assert t2.cmd("SADD", "s", "b").startswith("TXNABORT deadlock")
    assert t1.read_reply() == "QUEUED"
    assert t2.cmd("TXN.ABORT") == "OK"
    assert t1.cmd("TXN.COMMIT") == [1]
    assert int(txn_info(t1)["txn_deadlocks_on_upgrade"]) >= 1
    # declared up front, the second waits its turn and then sees the first's add
    for t in (t1, t2):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("TXN.LOCK", "s") == "OK"
    waits(t2, "TXN.LOCK", "s")
    assert t1.cmd("SCARD", "s") == 1
    assert t1.cmd("SADD", "s", "b") == "QUEUED"
    assert t1.cmd("TXN.COMMIT") == [1]
    assert t2.read_reply() == "OK"
    assert t2.cmd("SCARD", "s") == 2
    assert t2.cmd("SADD", "s", "c") == "QUEUED"
    assert t2.cmd("TXN.COMMIT") == [1]
    assert t1.cmd("TXN.LOCK", "s").startswith("ERR TXN.LOCK without TXN.BEGIN")
    assert t1.cmd("TXN.LOCK").startswith("ERR wrong number of arguments")


def mc_waits(conn, request: bytes):
    """Sends a memcached request and checks that its reply does not come yet."""
    conn.send(request)
    with pytest.raises(TimeoutError):
        conn.readline(timeout=BLOCKED_S)


def test_memcached_requests_respect_transaction_locks(raw, mcraw, mc):
    t1, t2 = raw(), raw()
    writer, reader = mcraw(), mcraw()
    before = mc.stats()
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("SET", "k", "txn") == "QUEUED"
    # The transaction's write lock holds off memcached writes and reads of the item alike.
    mc_waits(writer, b"set k 0 0 5\r\nplain\r\n")
    mc_waits(reader, b"get k\r\n")
    late = []
    pymemcache_set = threading.Thread(target=lambda: late.append(mc.set("k", "late")))
    pymemcache_set.start()
    time.sleep(BLOCKED_S)
    assert pymemcache_set.is_alive(), "pymemcache's set waits too"
    assert t1.cmd("TXN.COMMIT") == ["OK"]
    # Granted in arrival order, each after the last: the set, the get, then pymemcache's set.
    assert writer.readline() == b"STORED"
    assert reader.readline() == b"VALUE k 0 5"
    assert reader.readline() == b"plain"
    assert reader.readline() == b"END"
    pymemcache_set.join(timeout=5)
    assert late == [True]
    # A transaction's read lock is shared with memcached reads; a delete waits for the commit.
    assert t2.cmd("TXN.BEGIN") == "OK"
    assert t2.cmd("GET", "k") == b"late"
    assert mc.get("k") == b"late"
    mc_waits(writer, b"delete k\r\n")
    assert t2.cmd("TXN.COMMIT") == []
    assert writer.readline() == b"DELETED"
    assert int(txn_info(t1)["txn_locked_records"]) == 0
    # a request that waited counts once
    after = mc.stats()
    assert after[b"cmd_set"] - before[b"cmd_set"] == 2
    assert after[b"cmd_get"] - before[b"cmd_get"] == 2


def test_a_memcached_lock_wait_is_bounded_and_the_connection_goes_on(raw, mcraw):
    admin, t1 = raw(), raw()
    assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "200") == "OK"
    assert t1.cmd("TXN.BEGIN") == "OK"
    assert t1.cmd("INCR", "n") == "QUEUED"
    text = mcraw()
    # pipelined behind the refused request: answered once the wait ends
    text.send(b"incr n 1\r\nversion\r\n")
    refused = text.readline(timeout=5)
    assert refused.startswith(b"SERVER_ERROR item locked by a transaction: timeout"), refused
    assert text.readline().startswith(b"VERSION ")
    # binary: status 0x86 (temporary failure), echoing the opcode and opaque
    binary = mcraw()
    key = b"n"
    binary.send(struct.pack(">BBHBBHIIQ", 0x80, 0x00, len(key), 0, 0, 0, len(key), 0xFEED, 0) + key)
    header = binary.read_exact(24, timeout=5)
    magic, opcode, _, _, _, status, body_len, opaque, _ = struct.unpack(">BBHBBHIIQ", header)
    assert (magic, opcode, status, opaque) == (0x81, 0x00, 0x86, 0xFEED)
    assert binary.read_exact(body_len).startswith(b"item locked by a transaction: timeout")
    assert t1.cmd("TXN.COMMIT") == [1]
    text.send(b"get n\r\n")
    assert text.readline() == b"VALUE n 0 1"


def test_a_flush_aborts_the_transactions_open_across_it(raw, mcraw):
    admin, reader, writer = raw(), raw(), raw()
    assert admin.cmd("SET", "k", "1") == "OK"
    for t in (reader, writer):
        assert t.cmd("TXN.BEGIN") == "OK"
    assert reader.cmd("GET", "k") == b"1"
    assert writer.cmd("SET", "copy", "1") == "QUEUED"
    mc = mcraw()
    mc.send(b"flush_all\r\n")
    assert mc.readline() == b"OK"
    assert reader.cmd("GET", "k").startswith("TXNABORT flush")
    assert writer.cmd("TXN.COMMIT").startswith("TXNABORT flush")
    assert admin.cmd("EXISTS", "copy") == 0
    assert reader.cmd("TXN.ABORT") == "OK"
    # FLUSHALL over RESP too; a transaction begun after it commits
    assert writer.cmd("TXN.BEGIN") == "OK"
    assert writer.cmd("GET", "k") is None
    assert admin.cmd("FLUSHALL") == "OK"
    assert writer.cmd("TXN.COMMIT").startswith("TXNABORT flush")
    assert writer.cmd("TXN.BEGIN") == "OK"
    assert writer.cmd("SET", "k", "2") == "QUEUED"
    assert writer.cmd("TXN.COMMIT") == ["OK"]
    assert int(txn_info(admin)["txn_aborts_flush"]) >= 3
