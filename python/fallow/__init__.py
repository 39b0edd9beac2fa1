"""fallow's Python client: interactive transactions over plain redis-py clients.

    import redis, fallow
    r = redis.Redis(port=6379)
    with fallow.transaction(r) as t:       # TXN.BEGIN; commit on exit, abort on an exception
        n = t.execute("SCARD", "s")         # a read: its value on the state before the transaction
        t.execute("SADD", "s", "x")         # a write: "QUEUED"; applied at commit
        t.write("INCR", "c")                # a write sent behind, with the next command or the commit
    print(t.results)                        # the writes' replies, from TXN.COMMIT

    fallow.run(r, lambda t: ..., retries=16)  # retried with backoff on fallow.TxnAborted

The TXN.* commands run on one connection taken from the client's pool for the whole transaction. With a
`fallow.Cluster([r1, r2])` keys are spread by the same consistent hashing as the Rust client; a transaction
begins a server transaction on each node it touches and commits on all after the body (no two-phase
commit: a failure between the per-node commits leaves a partial commit, raised as PartialCommit).

`fallow.shm_redis(port=6379)` is a redis.Redis whose connections are shared-memory channels to a co-located
server (`fallow.ShmConnection` as a redis-py connection class, `fallow.open_channel` as a socket-like object),
falling back to the Unix socket when the server refuses; `fallow.shm_memcache(port=11211)` is a pymemcache
Client on a memcached channel (falling back to the memcached TCP port); see shm.py and docs/shm.md.

`fallow.socket_path(port)` names the server's Unix socket as the server and every fallow tool do
(`$FALLOW_SOCKET`, else the per-port default): `redis.Redis(unix_socket_path=fallow.socket_path(6379))`.
"""
from .cluster import Cluster, node_for
from .shm import ShmChannel, ShmConnection, ShmError, ShmRefused, open_channel, shm_memcache, shm_redis
from .socket_path import default_socket_path, socket_path
from .txn import PartialCommit, Transaction, TxnAborted, run, transaction

__all__ = ["Cluster", "PartialCommit", "ShmChannel", "ShmConnection", "ShmError", "ShmRefused", "Transaction",
           "TxnAborted", "default_socket_path", "node_for", "open_channel", "run", "shm_memcache", "shm_redis",
           "socket_path", "transaction"]
