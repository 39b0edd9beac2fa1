#!/usr/bin/env python3
"""Checks that fallow-server's modules depend on each other one way (issue 17).

Reads every `.rs` file under crates/fallow-server/src, maps it to its module path
(`command/zset.rs` -> `command::zset`), and collects the modules it names: `use` trees
(`use crate::{a, b::c}`, `use super::x`) and inline paths (`crate::a::f()`, `super::super::b`).
Comments, strings and `#[cfg(test)]` modules are skipped: tests may reach anywhere.

An edge from a parent to one of its own descendants is not a dependency (`mod.rs` naming its
children is how Rust nests modules); every other edge is. The check fails when those edges form a
cycle (printed as the shortest loop in each strongly connected set), or when fallow-server's
Cargo.toml depends on fallow-bench.

    python3 scripts/check-imports.py              # check; exit 1 on a cycle
    python3 scripts/check-imports.py --graph      # also print each module's dependencies
    python3 scripts/check-imports.py --self-test  # the checker finds a planted cycle, passes a clean tree
"""
import re
import sys
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATE = ROOT / "crates" / "fallow-server"
SRC = CRATE / "src"
CRATE_ROOTS = {"lib.rs", "main.rs"}


def module_of(path: Path, src: Path = SRC) -> tuple:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    if len(parts) == 1 and parts[0] + ".rs" in CRATE_ROOTS:
        return ()
    return tuple(parts)


def strip_comments_and_strings(text: str) -> str:
    """Blanks comments, string and char literals (keeping newlines) so their text names nothing."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(text: str) -> str:
    """Removes `#[cfg(test)] mod name { ... }` blocks (brace-matched on comment-free text)."""
    while True:
        match = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
        if not match:
            return text
        depth, i = 1, match.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        text = text[:match.start()] + "\n" * text.count("\n", match.start(), i) + text[i:]


def expand_use_tree(tree: str) -> list:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (renames and globs kept as path ends)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1:tree.rindex("}")]
    parts, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    parts.append(inner[start:])
    return [p for part in parts if part for p in expand_use_tree(prefix + part)]


def resolve(path: str, here: tuple, modules: set):
    """The module a `crate::`/`super::`/`self::` path names (its longest module prefix), or None."""
    segments = [s for s in path.split("::") if s]
    if not segments:
        return None
    if segments[0] == "crate":
        base, rest = (), segments[1:]
    elif segments[0] in ("super", "self"):
        base = here
        while segments and segments[0] in ("super", "self"):
            if segments.pop(0) == "super":
                base = base[:-1]
        rest = segments
    else:
        return None
    best = base
    for k in range(1, len(rest) + 1):
        candidate = base + tuple(rest[:k])
        if candidate in modules:
            best = candidate
        else:
            break
    return best


def collect_edges(files: dict, modules: set) -> dict:
    edges = {m: set() for m in modules}
    for module, text in files.items():
        paths = []
        for use in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
            paths.extend(expand_use_tree(use.group(1)))
        paths.extend(re.findall(r"\b(?:crate|super|self)(?:::\w+)+", text))
        for path in paths:
            target = resolve(path, module, modules)
            if target is None or target == module:
                continue
            if target[:len(module)] == module:  # a parent naming its own descendant
                continue
            edges[module].add(target)
    return edges


def strongly_connected(edges: dict) -> list:
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            result.append(group)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [g for g in result if len(g) > 1]


def shortest_loop(edges: dict, group: list) -> list:
    members = set(group)
    start = min(group)
    previous, queue = {start: None}, deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(edges[v] & members):
            if w == start:
                loop = [v]
                while previous[loop[-1]] is not None:
                    loop.append(previous[loop[-1]])
                return list(reversed(loop)) + [start]
            if w not in previous:
                previous[w] = v
                queue.append(w)
    return group


def name(module: tuple) -> str:
    return "::".join(module) or "crate"


def read_modules(src: Path) -> dict:
    files = {}
    for path in sorted(src.rglob("*.rs")):
        if path.parent == src and path.name == "main.rs":
            continue
        text = path.read_text()
        files[module_of(path, src)] = drop_test_modules(strip_comments_and_strings(text))
    return files


def cycles(src: Path) -> tuple:
    """(edges, [(group, loop)]) for the crate whose sources are under `src`."""
    files = read_modules(src)
    edges = collect_edges(files, set(files))
    return edges, [(g, shortest_loop(edges, g)) for g in strongly_connected(edges)]


def self_test() -> int:
    """Plants trees with and without a cycle and checks what the checker says of each."""
    import tempfile

    def tree(files: dict) -> Path:
        root = Path(tempfile.mkdtemp())
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    clean = tree({
        "lib.rs": "pub mod a; pub mod b;",
        "a/mod.rs": "pub mod child; use self::child::X; pub fn f() { child::g(); }",
        "a/child.rs": "use super::f; use crate::b::{Y, z::{W}}; // crate::a::never\n",
        "b/mod.rs": 'pub mod z; const S: &str = "crate::a::in_a_string";',
        "b/z.rs": "#[cfg(test)]\nmod tests { use crate::a::child::X; }\n",
    })
    _, found = cycles(clean)
    assert not found, f"a parent naming its child, comments, strings and tests are not cycles: {found}"
    knotted = tree({
        "lib.rs": "pub mod a; pub mod b; pub mod c;",
        "a.rs": "use crate::b::Thing;",
        "b.rs": "pub fn f() { crate::c::g(); }",
        "c.rs": "use crate::{a::{self, X as Y}};",
    })
    _, found = cycles(knotted)
    assert len(found) == 1 and sorted(found[0][0]) == [("a",), ("b",), ("c",)], found
    print("self-test: ok (a planted 3-module cycle is found; a clean tree passes)")
    return 0


def main() -> int:
    if "--self-test" in sys.argv:
        return self_test()
    edges, found = cycles(SRC)
    modules = set(edges)
    if "--graph" in sys.argv:
        for module in sorted(edges):
            print(f"{name(module)} -> {', '.join(name(t) for t in sorted(edges[module]))}")
    failures = 0
    for group, loop in found:
        failures += 1
        loop = " -> ".join(name(m) for m in loop)
        print(f"cycle among {len(group)} modules ({', '.join(sorted(name(m) for m in group))})")
        print(f"  e.g. {loop}")
    manifest = (CRATE / "Cargo.toml").read_text()
    if re.search(r"^\s*fallow-bench\s*=", manifest, re.M):
        failures += 1
        print("crates/fallow-server/Cargo.toml depends on fallow-bench")
    print(f"{len(modules)} modules, {sum(map(len, edges.values()))} dependencies, "
          f"{failures} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
