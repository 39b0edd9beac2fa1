"""Consistent hashing over several redis-py clients, the same ring as the Rust client's (fallow_client::ring):
160 points per node named "host:port#i", FNV-1a with the splitmix64 finaliser, hash tags as in Redis Cluster."""
from __future__ import annotations

import bisect

VIRTUAL_NODES_PER_NODE = 160
_MASK = (1 << 64) - 1


def _hash(data: bytes) -> int:
    state = 0xCBF29CE484222325
    for byte in data:
        state ^= byte
        state = (state * 0x100000001B3) & _MASK
    state ^= state >> 30
    state = (state * 0xBF58476D1CE4E5B9) & _MASK
    state ^= state >> 27
    state = (state * 0x94D049BB133111EB) & _MASK
    return state ^ (state >> 31)


def _hash_tag(key: bytes) -> bytes:
    open_at = key.find(b"{")
    if open_at < 0:
        return key
    close_at = key.find(b"}", open_at + 1)
    if close_at <= open_at + 1:
        return key
    return key[open_at + 1:close_at]


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


class _Ring:
    def __init__(self, names: list[str]):
        points = []
        for index, name in enumerate(names):
            for replica in range(VIRTUAL_NODES_PER_NODE):
                points.append((_hash(f"{name}#{replica}".encode()), index))
        points.sort()
        self._hashes = [point for point, _ in points]
        self._owners = [owner for _, owner in points]

    def node_for(self, key) -> int:
        if not self._hashes:
            return 0
        at = bisect.bisect_left(self._hashes, _hash(_hash_tag(_as_bytes(key))))
        return self._owners[at % len(self._owners)]


def _name(client) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def node_for(names: list[str], key) -> int:
    """The index of the node owning `key` among nodes named "host:port"."""
    return _Ring(names).node_for(key)


class Cluster:
    """redis-py clients, one per node, with keys placed by consistent hashing."""

    def __init__(self, clients, names: list[str] | None = None):
        self.clients = list(clients)
        if not self.clients:
            raise ValueError("a cluster needs at least one client")
        self.names = names or [_name(c) for c in self.clients]
        self._ring = _Ring(self.names)

    def node_for(self, key) -> int:
        return self._ring.node_for(key)

    def client_for(self, key):
        return self.clients[self.node_for(key)]

    def execute_command(self, *args):
        """A plain command on the node of args[1] (node 0 when there is no key)."""
        client = self.clients[self.node_for(args[1])] if len(args) > 1 else self.clients[0]
        return client.execute_command(*args)
