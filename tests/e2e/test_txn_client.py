"""The Python client (python/fallow) against fallow: transactions over redis-py connections, retries after
TXNABORT, a two-node Cluster, and the bank-transfer invariant."""
from __future__ import annotations

import random
import sys
import threading
import time

import pytest
import redis

from helpers import HOST, REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "python"))
import fallow  # noqa: E402

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]


@pytest.fixture
def phasing_off(r):
    assert r.config_set("txn-phasing", "no")
    yield
    r.config_set("txn-phasing", "yes")


def test_commit_reads_before_and_returns_write_replies(r):
    with fallow.transaction(r) as t:
        assert t.execute("SCARD", "s") == 0
        assert t.execute("SADD", "s", "x", "y") == "QUEUED"
        assert t.execute("INCRBY", "c", 5) == "QUEUED"
        assert t.execute("SCARD", "s") == 0  # no read-your-own-writes
    assert t.results == [2, 5]
    assert r.scard("s") == 2


def test_writes_behind_and_execute_and_commit(r):
    with fallow.transaction(r) as t:
        t.write("SADD", "s", "x", "y")
        t.write("SADD", "s")  # refused at once: its error is its result
        assert t.execute("SCARD", "s") == 0
        t.write("INCRBY", "c", 5)
    assert t.results[0] == 2 and t.results[2] == 5
    assert isinstance(t.results[1], redis.ResponseError)
    with fallow.transaction(r) as t:
        t.write("SADD", "s", "z")
        assert t.execute_and_commit("SCARD", "s") == 2
        with pytest.raises(RuntimeError):
            t.execute("GET", "c")
    assert t.results == [1]
    assert r.scard("s") == 3
    # Writes only: TXN.BEGIN, the writes and TXN.COMMIT in one batch.
    assert fallow.run(r, lambda t: t.write("INCR", "c")) is None
    assert r.get("c") == "6"
    assert r.ping()


def test_a_write_behind_that_conflicts_aborts_and_retries(r, redis_client_factory, phasing_off):
    holder = fallow.transaction(redis_client_factory())
    assert holder.execute("SCARD", "s") == 0
    with pytest.raises(fallow.TxnAborted):
        with fallow.transaction(r) as t:
            t.write("INCR", "attempts")
            t.write("SADD", "s", "x")
    assert r.get("attempts") is None
    release = threading.Timer(0.1, holder.commit)
    release.start()
    fallow.run(r, lambda t: t.write("SADD", "s", "x"), retries=200, backoff=0.001, backoff_max=0.01)
    release.join()
    assert r.smembers("s") == {"x"}
    assert r.ping()


def test_an_exception_aborts(r):
    with pytest.raises(ValueError):
        with fallow.transaction(r) as t:
            t.execute("SADD", "s", "x")
            raise ValueError("changed my mind")
    assert r.scard("s") == 0
    assert t.results is None
    # the connection went back clean: a plain command on the pool works
    assert r.ping()


def test_txnabort_raises_and_run_retries(r, redis_client_factory, phasing_off):
    holder = fallow.transaction(redis_client_factory())
    holder.execute("SADD", "s", "held")
    with pytest.raises(fallow.TxnAborted) as aborted:
        with fallow.transaction(r) as t:
            t.execute("SCARD", "s")
    assert aborted.value.cause == "conflict"

    release = threading.Timer(0.1, holder.commit)
    release.start()
    attempts = []

    def read(t):
        attempts.append(1)
        return t.execute("SCARD", "s")

    assert fallow.run(r, read, retries=200, backoff=0.001, backoff_max=0.01) == 1
    release.join()
    assert len(attempts) > 1


def test_run_gives_up_after_its_retries(r, redis_client_factory, phasing_off):
    holder = fallow.transaction(redis_client_factory())
    holder.execute("SADD", "s", "held")
    try:
        with pytest.raises(fallow.TxnAborted):
            fallow.run(r, lambda t: t.execute("SCARD", "s"), retries=2, backoff=0.001)
    finally:
        holder.abort()
    assert r.scard("s") == 0


def test_python_and_rust_place_keys_alike():
    names = ["10.0.0.0:6379", "10.0.0.1:6379", "10.0.0.2:6379"]
    placed = [fallow.node_for(names, f"key:{i}") for i in range(16)]
    # the same list is pinned in crates/fallow-client/src/ring.rs
    assert placed == [0, 1, 2, 0, 2, 0, 1, 2, 0, 2, 2, 1, 0, 0, 0, 1]


def _cluster(server, server_factory):
    other = server_factory()
    clients = [redis.Redis(host=HOST, port=s.port, decode_responses=True, socket_timeout=5)
               for s in (server, other)]
    for client in clients:
        client.flushall()
    return fallow.Cluster(clients)


def test_cluster_transaction_spans_nodes(server, server_factory):
    cluster = _cluster(server, server_factory)
    keys = [next(f"k{i}" for i in range(1000) if cluster.node_for(f"k{i}") == node) for node in (0, 1)]
    with fallow.transaction(cluster) as t:
        t.execute("INCRBY", keys[0], 1)
        t.execute("INCRBY", keys[1], 2)
    assert t.results == [1, 2]
    assert cluster.clients[0].get(keys[0]) == "1"
    assert cluster.clients[1].get(keys[1]) == "2"
    assert cluster.clients[0].exists(keys[1]) == 0


ACCOUNTS = 8
BALANCE_INITIAL = 100


def _bank(target, new_target):
    """Tellers move money between accounts, checking the balance they take from; an auditor reads every
    account in one transaction. The total never changes and no balance goes negative."""
    accounts = [f"acct:{i}" for i in range(ACCOUNTS)]
    total = BALANCE_INITIAL * ACCOUNTS
    for account in accounts:
        with fallow.transaction(target) as t:
            t.execute("SET", account, BALANCE_INITIAL)
    errors: list = []
    committed: list = []
    audits: list = []
    done = threading.Event()

    def read_all(t):
        balances = [int(t.execute("GET", account) or 0) for account in accounts[:-1]]
        # The last read carries the commit (on several nodes: execute, then commit).
        return balances + [int(t.execute_and_commit("GET", accounts[-1]) or 0)]

    def teller(seed):
        rng = random.Random(seed)
        mine = new_target()
        try:
            for _ in range(40):
                source, dest = rng.sample(accounts, 2)
                amount = rng.randint(1, 60)

                def transfer(t):
                    if int(t.execute("GET", source) or 0) >= amount:
                        # Odd tellers send their writes behind, with the commit.
                        send = t.write if seed % 2 else t.execute
                        send("DECRBY", source, amount)
                        send("INCRBY", dest, amount)

                # A transfer reads its source, then upgrades to an increment, which waits for other
                # readers and deadlocks with another upgrade of the account: some run out of retries,
                # which is no error here (nothing of them is applied).
                try:
                    fallow.run(mine, transfer, retries=30, backoff=0.0005, backoff_max=0.005)
                    committed.append(1)
                except fallow.TxnAborted:
                    pass
        except Exception as error:  # surfaced by the main thread
            errors.append(error)

    def auditor():
        mine = new_target()
        try:
            while not done.is_set():
                try:
                    balances = fallow.run(mine, read_all, retries=30, backoff=0.0005, backoff_max=0.005)
                except fallow.TxnAborted:
                    continue
                assert sum(balances) == total and min(balances) >= 0, balances
                audits.append(1)
                time.sleep(0.01)
        except Exception as error:
            errors.append(error)

    threads = [threading.Thread(target=teller, args=(seed,)) for seed in range(4)]
    audit = threading.Thread(target=auditor)
    for thread in threads + [audit]:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    audit.join()
    assert not errors, errors
    assert committed
    try:
        balances = fallow.run(target, read_all, retries=50, backoff=0.0005, backoff_max=0.005)
    except fallow.TxnAborted:
        # Nothing runs any more: a lock still held would be one the server never released.
        clients = target.clients if isinstance(target, fallow.Cluster) else [target]
        locked = [c.info("txn").get("txn_locked_records") for c in clients]
        pytest.fail(f"the final audit ran out of retries; locked records per node: {locked}")
    assert sum(balances) == total and min(balances) >= 0, balances


def test_bank_transfers_keep_the_total(r, redis_client_factory):
    assert r.config_set("txn-lock-wait-ms", 50)
    try:
        _bank(r, redis_client_factory)
    finally:
        r.config_set("txn-lock-wait-ms", 500)


def test_bank_transfers_keep_the_total_over_two_nodes(server, server_factory):
    cluster = _cluster(server, server_factory)
    for client in cluster.clients:
        assert client.config_set("txn-lock-wait-ms", 50)

    def new_cluster():
        return fallow.Cluster([redis.Redis(host=HOST, port=c.connection_pool.connection_kwargs["port"],
                                           decode_responses=True, socket_timeout=5)
                               for c in cluster.clients], cluster.names)

    try:
        _bank(cluster, new_cluster)
    finally:
        cluster.clients[0].config_set("txn-lock-wait-ms", 500)


def test_declared_locks_serialize_read_modify_write_without_deadlocks(r, redis_client_factory):
    threads, increments = 4, 50
    deadlocks_before = int(r.info("txn")["txn_deadlocks_on_upgrade"])

    def increment(t):
        t.lock("counter")
        value = int(t.execute("GET", "counter") or 0)
        t.write("SET", "counter", value + 1)

    def worker():
        client = redis_client_factory()
        for _ in range(increments):
            fallow.run(client, increment)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert int(r.get("counter")) == threads * increments
    info = r.info("txn")
    assert int(info["txn_deadlocks_on_upgrade"]) == deadlocks_before
