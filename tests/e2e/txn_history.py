"""A strict-serializability checker for histories of transactions over add-only sets (written for fallow;
the approach follows Elle's: unique written values make the dependencies visible in the reads).

Each transaction adds unique elements to sets and reads whole sets. In a strictly serializable history
there is one order of the committed transactions that
- puts the writer of every element a transaction read before that transaction (write-read),
- puts a transaction that read a set without an element before the element's writer (read-write),
- puts T1 before T2 whenever T1 committed before T2 began (real time).
The checker builds these edges and looks for a cycle. It also rejects reads of elements no committed
transaction wrote (aborted or never written: dirty or invented reads) and a transaction seeing its own
queued write (fallow's transactions read the state from before they began).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Txn:
    name: str
    start: float
    end: float = 0.0
    committed: bool = False
    reads: list[tuple[str, frozenset]] = field(default_factory=list)
    writes: list[tuple[str, str]] = field(default_factory=list)


class Anomaly(AssertionError):
    pass


def check(history: list[Txn]) -> int:
    """Raises Anomaly with a description of the first violation; returns the number of edges checked."""
    committed = [txn for txn in history if txn.committed]
    writer = {}
    for txn in committed:
        for write in txn.writes:
            if write in writer:
                raise Anomaly(f"{write} written twice ({writer[write].name}, {txn.name}): values must be unique")
            writer[write] = txn
    aborted_writes = {write for txn in history if not txn.committed for write in txn.writes}
    elements_by_key: dict[str, list[tuple[str, Txn]]] = {}
    for (key, element), txn in writer.items():
        elements_by_key.setdefault(key, []).append((element, txn))
    edges: dict[int, set[int]] = {index: set() for index in range(len(committed))}
    index_of = {id(txn): index for index, txn in enumerate(committed)}
    for txn in committed:
        me = index_of[id(txn)]
        for key, seen in txn.reads:
            for element in seen:
                source = writer.get((key, element))
                if source is None:
                    kind = "an aborted transaction's" if (key, element) in aborted_writes else "an unwritten"
                    raise Anomaly(f"{txn.name} read {kind} element {element!r} of {key}")
                if source is txn:
                    raise Anomaly(f"{txn.name} read its own queued write {element!r} of {key}")
                edges[index_of[id(source)]].add(me)
            for element, source in elements_by_key.get(key, []):
                if element not in seen and source is not txn:
                    edges[me].add(index_of[id(source)])
    add_real_time_edges(committed, edges)
    cycle = find_cycle(edges)
    if cycle:
        names = " -> ".join(committed[index].name for index in cycle)
        raise Anomaly(f"not strictly serializable: cycle {names}")
    return sum(len(targets) for targets in edges.values())


def add_real_time_edges(committed: list[Txn], edges: dict[int, set[int]]) -> None:
    """T1 -> T2 when T1 ended before T2 started. Only the edges to the latest-ending predecessors matter
    for cycles, but the histories are small enough to add them all."""
    by_start = sorted(range(len(committed)), key=lambda index: committed[index].start)
    for a in range(len(committed)):
        for b in by_start:
            if committed[b].start > committed[a].end:
                edges[a].add(b)


def find_cycle(edges: dict[int, set[int]]) -> list[int] | None:
    """A cycle in the graph, as a list of nodes, or None (iterative depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = {node: WHITE for node in edges}
    parent: dict[int, int] = {}
    for root in edges:
        if color[root] != WHITE:
            continue
        stack = [(root, iter(edges[root]))]
        color[root] = GREY
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                color[node] = BLACK
                stack.pop()
            elif color[child] == GREY:
                cycle = [child]
                walk = node
                while walk != child:
                    cycle.append(walk)
                    walk = parent[walk]
                cycle.append(child)
                return cycle[::-1]
            elif color[child] == WHITE:
                color[child] = GREY
                parent[child] = node
                stack.append((child, iter(edges[child])))
    return None
