"""Strict serializability of concurrent transactions and plain commands, checked on recorded histories
(txn_history.check), under each lock setting; and the checker itself on histories with known anomalies."""
import random
import threading
import time

import pytest

from helpers import Err, RawConn
from txn_history import Anomaly, Txn, check

KEYS = ["hist:a", "hist:b", "hist:c"]
THREADS = 6
TRANSACTIONS_PER_THREAD = 30
ATTEMPTS_MAX = 200


def aborted(reply) -> bool:
    return isinstance(reply, Err) and reply.startswith("TXNABORT")


class Worker(threading.Thread):
    def __init__(self, port: int, number: int, history: list, lock: threading.Lock):
        super().__init__()
        self.port, self.number, self.history, self.lock = port, number, history, lock
        self.rng = random.Random(number)
        self.error = None

    def record(self, txn: Txn) -> None:
        with self.lock:
            self.history.append(txn)

    def run(self) -> None:
        try:
            with RawConn(port=self.port, timeout=10) as conn:
                for index in range(TRANSACTIONS_PER_THREAD):
                    if self.rng.random() < 0.2:
                        self.plain(conn, index)
                    else:
                        self.transaction(conn, index)
        except Exception as error:  # surfaced by the test
            self.error = error

    def plain(self, conn: RawConn, index: int) -> None:
        key = self.rng.choice(KEYS)
        txn = Txn(name=f"w{self.number}.p{index}", start=time.monotonic())
        if self.rng.random() < 0.5:
            element = f"{self.number}.{index}.p"
            txn.writes.append((key, element))
            reply = conn.cmd("SADD", key, element)
        else:
            reply = conn.cmd("SMEMBERS", key)
            if not isinstance(reply, Err):
                txn.reads.append((key, frozenset(member.decode() for member in reply)))
        txn.end = time.monotonic()
        txn.committed = not isinstance(reply, Err)
        assert txn.committed or aborted(reply), reply
        self.record(txn)

    def transaction(self, conn: RawConn, index: int) -> None:
        operations = [(self.rng.choice(KEYS), self.rng.random() < 0.5) for _ in range(self.rng.randint(1, 4))]
        for attempt in range(ATTEMPTS_MAX):
            txn = Txn(name=f"w{self.number}.t{index}.{attempt}", start=time.monotonic())
            assert conn.cmd("TXN.BEGIN") == "OK"
            failed = False
            for position, (key, is_write) in enumerate(operations):
                if is_write:
                    element = f"{self.number}.{index}.{attempt}.{position}"
                    txn.writes.append((key, element))
                    reply = conn.cmd("SADD", key, element)
                    failed = aborted(reply)
                    assert failed or reply == "QUEUED", reply
                else:
                    reply = conn.cmd("SMEMBERS", key)
                    failed = aborted(reply)
                    if not failed:
                        txn.reads.append((key, frozenset(member.decode() for member in reply)))
                if failed:
                    break
            if failed:
                assert conn.cmd("TXN.ABORT") == "OK"
            else:
                reply = conn.cmd("TXN.COMMIT")
                txn.committed = isinstance(reply, list)
                assert txn.committed or aborted(reply), reply
            txn.end = time.monotonic()
            self.record(txn)
            if txn.committed:
                return
            time.sleep(self.rng.random() * 0.002 * (attempt + 1))
        raise AssertionError(f"transaction {index} of worker {self.number} never committed")


@pytest.mark.resp
@pytest.mark.fallow_only
@pytest.mark.parametrize("locks,phasing", [("abstract", "yes"), ("abstract", "no"), ("rw", "yes")])
def test_concurrent_histories_are_strictly_serializable(server, raw, locks, phasing):
    admin = raw()
    try:
        assert admin.cmd("CONFIG", "SET", "txn-locks", locks) == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-phasing", phasing) == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "2000") == "OK"
        history: list[Txn] = []
        lock = threading.Lock()
        workers = [Worker(server.port, number, history, lock) for number in range(THREADS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=50)
            assert not worker.is_alive(), "a worker hung"
            assert worker.error is None, repr(worker.error)
        committed = [txn for txn in history if txn.committed]
        assert len(committed) >= THREADS * TRANSACTIONS_PER_THREAD
        assert sum(len(txn.reads) for txn in committed) > 0
        assert sum(len(txn.writes) for txn in committed) > 0
        assert check(history) > 0
        # every committed element is in the final state, no aborted one is
        final = {key: {member.decode() for member in admin.cmd("SMEMBERS", key)} for key in KEYS}
        written = {(key, element) for txn in committed for key, element in txn.writes}
        assert {(key, element) for key in KEYS for element in final[key]} == written
        assert int(admin.cmd("INFO", "txn").decode().split("txn_locked_records:")[1].split()[0]) == 0
    finally:
        assert admin.cmd("CONFIG", "SET", "txn-locks", "abstract") == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-phasing", "yes") == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "500") == "OK"


def committed(name, start, end, reads=(), writes=()):
    return Txn(name=name, start=start, end=end, committed=True, reads=list(reads), writes=list(writes))


def test_checker_accepts_a_serial_history():
    history = [
        committed("t1", 0, 1, writes=[("a", "x")]),
        committed("t2", 2, 3, reads=[("a", frozenset({"x"}))], writes=[("b", "y")]),
        committed("t3", 2.5, 4, reads=[("b", frozenset())]),  # concurrent with t2: may precede it
    ]
    assert check(history) > 0


def test_checker_finds_write_skew():
    history = [
        committed("t1", 0, 2, reads=[("a", frozenset())], writes=[("b", "y")]),
        committed("t2", 0, 2, reads=[("b", frozenset())], writes=[("a", "x")]),
    ]
    with pytest.raises(Anomaly, match="cycle"):
        check(history)


def test_checker_finds_a_stale_read_in_real_time():
    history = [
        committed("t1", 0, 1, writes=[("a", "x")]),
        committed("t2", 2, 3, reads=[("a", frozenset())]),
    ]
    with pytest.raises(Anomaly, match="cycle"):
        check(history)


def test_checker_finds_dirty_and_own_reads():
    dirty = [
        Txn(name="t1", start=0, end=1, committed=False, writes=[("a", "x")]),
        committed("t2", 0, 2, reads=[("a", frozenset({"x"}))]),
    ]
    with pytest.raises(Anomaly, match="aborted"):
        check(dirty)
    own = [committed("t1", 0, 1, reads=[("a", frozenset({"x"}))], writes=[("a", "x")])]
    with pytest.raises(Anomaly, match="own"):
        check(own)


def test_checker_finds_a_fractured_read():
    # t2 sees t1's write to a but not its write to b: no order explains both
    history = [
        committed("t1", 0, 3, writes=[("a", "x"), ("b", "y")]),
        committed("t2", 0, 3, reads=[("a", frozenset({"x"})), ("b", frozenset())]),
    ]
    with pytest.raises(Anomaly, match="cycle"):
        check(history)
