"""Interactive transactions (docs/transactions.md, "Protocol") over redis-py connections."""
from __future__ import annotations

import random
import time

from redis.exceptions import ResponseError

from .cluster import Cluster


class TxnAborted(Exception):
    """The server aborted the transaction (`-TXNABORT <cause> ...`); every cause is retryable."""

    def __init__(self, cause: str, message: str = ""):
        super().__init__(message or f"TXNABORT {cause}")
        self.cause = cause


class PartialCommit(Exception):
    """Some nodes committed and others did not (no two-phase commit across nodes); not retryable."""


def _abort_cause(error: ResponseError) -> str | None:
    text = str(error)
    if text == "TXNABORT" or text.startswith("TXNABORT "):
        words = text.split()
        return words[1] if len(words) > 1 else ""
    return None


def _is_queued(reply) -> bool:
    return reply in ("QUEUED", b"QUEUED")


class Transaction:
    """One transaction attempt. Use it as a context manager: it commits when the block ends and aborts
    when the block raises. A server transaction begins lazily on each node the first command touches."""

    def __init__(self, target):
        self._cluster = target if isinstance(target, Cluster) else None
        self._clients = target.clients if self._cluster else [target]
        self._connections: dict[int, object] = {}
        # Per node, the index in `results` of each write the server queued, in order.
        self._queued: dict[int, list[int]] = {}
        self._writes = 0
        self.aborted: str | None = None
        self.results: list | None = None

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None and self.aborted is None:
            self.commit()
        else:
            self.abort()
        return False

    def _node(self, args) -> int:
        if self._cluster is None or len(args) < 2:
            return 0
        return self._cluster.node_for(args[1])

    def _connection(self, node: int):
        connection = self._connections.get(node)
        if connection is not None:
            return connection
        pool = self._clients[node].connection_pool
        try:
            connection = pool.get_connection()
        except TypeError:  # redis-py before 5.3 requires a command name
            connection = pool.get_connection("TXN.BEGIN")
        try:
            connection.send_command("TXN.BEGIN")
            connection.read_response()
        except BaseException:
            pool.release(connection)
            raise
        self._connections[node] = connection
        self._queued[node] = []
        return connection

    def execute(self, *args):
        """Runs one command in the transaction: a read returns its value, a write "QUEUED"."""
        if self.aborted is not None:
            raise TxnAborted(self.aborted)
        node = self._node(args)
        connection = self._connection(node)
        try:
            connection.send_command(*args)
            reply = connection.read_response()
        except ResponseError as error:
            cause = _abort_cause(error)
            if cause is None:
                raise
            self.aborted = cause
            self.abort()
            raise TxnAborted(cause, str(error)) from None
        if _is_queued(reply):
            self._queued[node].append(self._writes)
            self._writes += 1
        return reply

    def commit(self) -> list:
        """TXN.COMMIT on every node touched, sent to all before any reply is read."""
        nodes = list(self._connections)
        for node in nodes:
            self._connections[node].send_command("TXN.COMMIT")
        results: list = [None] * self._writes
        committed, cause, failure = 0, None, None
        for node in nodes:
            try:
                reply = self._connections[node].read_response()
            except ResponseError as error:
                cause = cause or _abort_cause(error)
                failure = failure or (None if _abort_cause(error) else error)
                continue
            except Exception as error:  # the connection failed: whether this node committed is unknown
                self._connections[node].disconnect()
                failure = failure or error
                continue
            committed += 1
            for index, item in zip(self._queued[node], reply or []):
                results[index] = item
        self._release()
        if failure is not None or (cause is not None and committed > 0):
            raise PartialCommit(f"{committed} node(s) committed, then {failure or 'TXNABORT ' + cause}")
        if cause is not None:
            self.aborted = cause
            raise TxnAborted(cause)
        self.results = results
        return results

    def abort(self) -> None:
        """TXN.ABORT on every node touched; locks are released and queued writes dropped."""
        for connection in self._connections.values():
            try:
                connection.send_command("TXN.ABORT")
                connection.read_response()
            except Exception:  # the server aborts a transaction whose connection goes away
                connection.disconnect()
        self._release()

    def _release(self) -> None:
        for node, connection in self._connections.items():
            self._clients[node].connection_pool.release(connection)
        self._connections.clear()


def transaction(target) -> Transaction:
    """A transaction on a redis-py client or a fallow.Cluster, for use in a `with` block."""
    return Transaction(target)


def run(target, body, retries: int = 16, backoff: float = 0.0005, backoff_max: float = 0.05):
    """Runs body(t) in a transaction and commits, retrying on TxnAborted up to `retries` times with
    exponential backoff (seconds, doubling up to `backoff_max`, half of each step random). Returns what
    body returned; the last TxnAborted propagates when the retries run out."""
    for attempt in range(retries + 1):
        try:
            with transaction(target) as t:
                value = body(t)
            return value
        except TxnAborted:
            if attempt == retries:
                raise
            step = min(backoff_max, backoff * (2 ** attempt))
            time.sleep(step / 2 + random.uniform(0, step / 2))
    raise AssertionError("unreachable")
