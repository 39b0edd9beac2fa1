"""RUBiS auctions under concurrent transactions: for every closed auction the winning bid is the highest
committed bid, no bid commits after its auction closed, and the bid statistics count exactly the committed
bids. Bidders and closers race on the same items, with boosting (bids share the TopN lock) and with the
reader/writer baseline."""
import random
import threading

import pytest

from helpers import Err, RawConn

pytestmark = [pytest.mark.resp, pytest.mark.fallow_only]

ITEMS = 8
BIDDERS = 6
BIDS_PER_BIDDER = 40
ATTEMPTS_MAX = 200


def aborted(reply) -> bool:
    return isinstance(reply, Err) and reply.startswith("TXNABORT")


def run_txn(conn: RawConn, commands, rng: random.Random):
    """Runs commands in one transaction, retrying on TXNABORT; returns (replies, commit replies)."""
    for attempt in range(ATTEMPTS_MAX):
        assert conn.cmd("TXN.BEGIN") == "OK"
        replies = []
        for command in commands(replies):
            reply = conn.cmd(*command)
            if aborted(reply):
                break
            replies.append(reply)
        else:
            committed = conn.cmd("TXN.COMMIT")
            if isinstance(committed, list):
                return replies, committed
            assert aborted(committed), committed
            continue
        assert conn.cmd("TXN.ABORT") == "OK"
        rng_sleep(rng, attempt)
    raise AssertionError("a transaction never committed")


def rng_sleep(rng, attempt):
    import time
    time.sleep(rng.random() * 0.001 * (attempt + 1))


class Bidder(threading.Thread):
    def __init__(self, port, number, committed_bids, lock):
        super().__init__()
        self.port, self.number, self.bids, self.lock = port, number, committed_bids, lock
        self.rng = random.Random(number)
        self.error = None

    def run(self):
        try:
            with RawConn(port=self.port, timeout=10) as conn:
                for index in range(BIDS_PER_BIDDER):
                    self.bid(conn, index)
        except Exception as error:
            self.error = error

    def bid(self, conn, index):
        item = min(int(self.rng.paretovariate(1.0)) - 1, ITEMS - 1)  # hot items, as RUBiS's zipf bids
        amount = (index + 1) * 1000 + self.number  # unique: ties would make the winner ambiguous
        bidder = f"user{self.number}"

        def commands(replies):
            yield ("HGET", f"item:{item}", "status")
            if replies and replies[0] == b"open":
                yield ("TOPN.ADD", f"bids:{item}", amount, bidder)
                yield ("BAG.ADD", f"bidstats:{item}", amount)
                yield ("INCRBY", "bids:total", 1)

        replies, _ = run_txn(conn, commands, self.rng)
        if replies[0] == b"open":
            with self.lock:
                self.bids.setdefault(item, []).append((amount, bidder))


def close_auction(conn, item, rng):
    def commands(replies):
        yield ("HSET", f"item:{item}", "status", "closed")
        yield ("TOPN.MAX", f"bids:{item}")
        yield ("BAG.SUMMARY", f"bidstats:{item}")

    replies, _ = run_txn(conn, commands, rng)
    return replies[1], replies[2]


@pytest.mark.parametrize("locks", ["abstract", "rw"])
def test_the_winning_bid_is_the_highest_committed_bid(server, raw, locks):
    admin = raw()
    try:
        assert admin.cmd("CONFIG", "SET", "txn-locks", locks) == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "2000") == "OK"
        for item in range(ITEMS):
            assert admin.cmd("HSET", f"item:{item}", "status", "open") == 1
            assert admin.cmd("TOPN.RESERVE", f"bids:{item}", 3) == "OK"
        committed_bids, lock = {}, threading.Lock()
        bidders = [Bidder(server.port, number, committed_bids, lock) for number in range(BIDDERS)]
        for bidder in bidders:
            bidder.start()
        winners = {}
        rng = random.Random(99)
        with RawConn(port=server.port, timeout=10) as closer:
            # close half the auctions while bidding runs, the rest after it
            for item in range(0, ITEMS, 2):
                rng_sleep(rng, 5)
                winners[item] = close_auction(closer, item, rng)
            for bidder in bidders:
                bidder.join(timeout=50)
                assert not bidder.is_alive(), "a bidder hung"
                assert bidder.error is None, repr(bidder.error)
            for item in range(1, ITEMS, 2):
                winners[item] = close_auction(closer, item, rng)
        total = sum(len(bids) for bids in committed_bids.values())
        assert total > 0
        assert admin.cmd("GET", "bids:total") == str(total).encode()
        for item, (best, summary) in winners.items():
            bids = committed_bids.get(item, [])
            if not bids:
                assert best is None and summary[0] == 0, (item, best, summary)
                continue
            amount, bidder = max(bids)
            assert best == [bidder.encode(), amount], f"item {item}: winner {best}, highest bid {amount}"
            count, low, high = summary[0], summary[1], summary[2]
            assert (count, low, high) == (len(bids), min(bids)[0], amount), (item, summary)
            # nothing was accepted after the close
            assert admin.cmd("BAG.COUNT", f"bidstats:{item}") == len(bids)
    finally:
        assert admin.cmd("CONFIG", "SET", "txn-locks", "abstract") == "OK"
        assert admin.cmd("CONFIG", "SET", "txn-lock-wait-ms", "500") == "OK"
