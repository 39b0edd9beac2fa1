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
    when the block raises. A server transaction begins lazily on each node the first command touches:
    TXN.BEGIN rides in the same pipelined batch as that command.

    `write` sends a write behind: it waits, unsent, for the next command on its node (or the commit) and
    goes in the same batch ahead of it, so it costs no round trip. `execute_and_commit` runs the last
    command with TXN.COMMIT right behind it. Both as in the Rust client (docs/transactions.md)."""

    def __init__(self, target):
        self._cluster = target if isinstance(target, Cluster) else None
        self._clients = target.clients if self._cluster else [target]
        self._connections: dict[int, object] = {}
        self._begun: set[int] = set()
        # Per node, the writes not sent yet: (args, index in `results`), or (TXN.LOCK args, None).
        self._pending: dict[int, list[tuple[tuple, int | None]]] = {}
        # Per node, the index in `results` of each write the server queued, in order.
        self._queued: dict[int, list[int]] = {}
        # Replies the server gave a write behind at once (errors), by index in `results`.
        self._early: dict[int, object] = {}
        self._writes = 0
        self.aborted: str | None = None
        self.results: list | None = None

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.results is not None:
            return False
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
        self._connections[node] = connection
        self._queued[node] = []
        return connection

    def _check_open(self) -> None:
        if self.aborted is not None:
            raise TxnAborted(self.aborted)
        if self.results is not None:
            raise RuntimeError("the transaction was committed by execute_and_commit")

    def _send(self, node: int, commands: list) -> tuple:
        """Sends TXN.BEGIN (first time), the node's pending writes and `commands` in one batch."""
        connection = self._connection(node)
        begin = node not in self._begun
        pending = self._pending.pop(node, [])
        batch = ([("TXN.BEGIN",)] if begin else []) + [args for args, _ in pending] + commands
        connection.send_packed_command(connection.pack_commands(batch))
        self._begun.add(node)
        return begin, pending, len(commands)

    def _receive(self, node: int, sent: tuple) -> tuple[str | None, list]:
        """Reads the replies to `_send`: returns the abort a pending write met and the replies (or
        ResponseErrors) of the commands."""
        begin, pending, count = sent
        connection = self._connections[node]

        def reply():
            try:
                return connection.read_response()
            except ResponseError as error:
                return error

        if begin and isinstance(reply(), ResponseError):
            connection.disconnect()  # the batch's other replies are unread: the connection is spent
            raise ResponseError("TXN.BEGIN refused")
        cause, unexpected = None, None
        for _, index in pending:
            answer = reply()
            if isinstance(answer, ResponseError) and _abort_cause(answer) is not None:
                cause = cause or _abort_cause(answer)
            elif index is None:
                if answer not in (b"OK", "OK", True):
                    unexpected = unexpected or answer
            elif _is_queued(answer):
                self._queued[node].append(index)
            else:
                self._early[index] = answer
        replies = [reply() for _ in range(count)]
        if unexpected is not None:
            raise ResponseError(f"TXN.LOCK answered {unexpected!r}")
        return cause, replies

    def _fail(self, cause: str, message: str = ""):
        self.aborted = cause
        self.abort()
        raise TxnAborted(cause, message)

    def execute(self, *args):
        """Runs one command in the transaction: a read returns its value, a write "QUEUED"."""
        self._check_open()
        node = self._node(args)
        cause, (reply,) = self._receive(node, self._send(node, [args]))
        if isinstance(reply, ResponseError):
            cause = cause or _abort_cause(reply)
            if cause is None:
                raise reply
        if cause is not None:
            self._fail(cause, str(reply))
        if _is_queued(reply):
            self._queued[node].append(self._writes)
            self._writes += 1
        return reply

    def write(self, *args) -> None:
        """Issues a write whose reply comes at commit (in `results`), sent behind the next command."""
        self._check_open()
        node = self._node(args)
        self._pending.setdefault(node, []).append((args, self._writes))
        self._writes += 1

    def lock(self, *keys) -> None:
        """Declares keys the transaction will both read and write: each is locked exclusively before
        anything else touches it (TXN.LOCK, as SELECT ... FOR UPDATE), so two read-then-write transactions
        queue instead of deadlocking on the upgrade. Sent behind, like `write`."""
        self._check_open()
        for key in keys:
            self._pending.setdefault(self._node(("TXN.LOCK", key)), []).append((("TXN.LOCK", key), None))

    def execute_and_commit(self, *args):
        """Runs the last command with TXN.COMMIT behind it (one round trip) and returns its reply; the
        writes' replies are then in `results`. On several nodes this is `execute`, then `commit`."""
        self._check_open()
        node = self._node(args)
        if any(other != node for other in set(self._connections) | set(self._pending)):
            reply = self.execute(*args)
            self.commit()
            return reply
        cause, (reply, committed) = self._receive(node, self._send(node, [args, ("TXN.COMMIT",)]))
        for answer in (reply, committed):
            if isinstance(answer, ResponseError):
                cause = cause or _abort_cause(answer)
        if cause is not None:
            self._begun.discard(node)  # the refused TXN.COMMIT ended the server transaction
            self._fail(cause)
        if isinstance(committed, ResponseError):
            self._release()
            raise committed
        if _is_queued(reply):
            self._queued[node].append(self._writes)
            self._writes += 1
        results: list = [None] * self._writes
        for index, item in zip(self._queued[node], committed or []):
            results[index] = item
        self._finish(results)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def _finish(self, results: list) -> list:
        for index, answer in self._early.items():
            results[index] = answer
        self._release()
        self.results = results
        return results

    def _send_pending_across_nodes(self) -> None:
        """With several nodes, every node's pending writes are queued before any node commits, so a
        write's abort on one node cannot follow another node's commit."""
        nodes = set(self._connections) | set(self._pending)
        if len(nodes) < 2 or not self._pending:
            return
        sent = {node: self._send(node, []) for node in nodes if node in self._pending}
        causes = [self._receive(node, batch)[0] for node, batch in sent.items()]
        cause = next((c for c in causes if c is not None), None)
        if cause is not None:
            self._fail(cause)

    def commit(self) -> list:
        """TXN.COMMIT on every node touched (behind its pending writes), sent to all before any reply is
        read."""
        self._check_open()
        self._send_pending_across_nodes()
        nodes = sorted(set(self._connections) | set(self._pending))
        sent = {node: self._send(node, [("TXN.COMMIT",)]) for node in nodes}
        results: list = [None] * self._writes
        committed, cause, failure = 0, None, None
        for node in nodes:
            try:
                write_cause, (reply,) = self._receive(node, sent[node])
            except Exception as error:  # the connection failed: whether this node committed is unknown
                self._connections[node].disconnect()
                failure = failure or error
                continue
            if isinstance(reply, ResponseError):
                cause = cause or write_cause or _abort_cause(reply)
                failure = failure or (None if _abort_cause(reply) else reply)
                continue
            committed += 1
            for index, item in zip(self._queued[node], reply or []):
                results[index] = item
        if failure is not None or (cause is not None and committed > 0):
            self._release()
            raise PartialCommit(f"{committed} node(s) committed, then {failure or 'TXNABORT ' + cause}")
        if cause is not None:
            self._release()
            self.aborted = cause
            raise TxnAborted(cause)
        return self._finish(results)

    def abort(self) -> None:
        """TXN.ABORT on every node begun; locks are released and queued writes dropped."""
        for node, connection in self._connections.items():
            if node not in self._begun:
                continue
            try:
                connection.send_command("TXN.ABORT")
                connection.read_response()
            except Exception:  # the server aborts a transaction whose connection goes away
                connection.disconnect()
        self._pending.clear()
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
