#!/usr/bin/env python3
"""Writes Redis's command table, as a real redis-server reports it, to a checked-in data file.

Redis 7.0 builds its command table from JSON files (redis/src/commands/*.json) and answers
COMMAND INFO and COMMAND DOCS from it. fallow takes the same data from the horse's mouth: this
script asks a running redis-server (7.0.15) for COMMAND INFO and COMMAND DOCS over RESP3, and writes
crates/fallow-server/src/command/info/redis_commands.json, one command (with its subcommands) per
line, which fallow loads once (`command::info::redis`).

    redis-server --port 7431 --save '' --daemonize yes
    python3 scripts/gen-redis-commands.py --port 7431
    redis-cli -p 7431 shutdown nosave

Each command keeps exactly the fields Redis replies with, in Redis's order, so fallow can write the
same bytes back: a field Redis omits (no `complexity`, no `history`) is omitted here too.
"""
import argparse
import json
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/fallow-server/src/command/info/redis_commands.json"
REPLY_BYTES_MAX = 64 << 20  # COMMAND DOCS is about 1 MB; refuse anything absurd


class Resp3:
    """A minimal RESP3 client that keeps the wire types (simple vs bulk strings, sets vs arrays)."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.file = self.sock.makefile("rb")
        self.read_bytes = 0
        self.call("HELLO", "3")

    def call(self, *args):
        frame = b"*%d\r\n" % len(args)
        for arg in args:
            arg = arg.encode()
            frame += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(frame)
        return self.read()

    def line(self):
        line = self.file.readline()
        self.read_bytes += len(line)
        if not line.endswith(b"\r\n") or self.read_bytes > REPLY_BYTES_MAX:
            sys.exit("bad or oversized reply from the server")
        return line[:-2]

    def read(self):
        line = self.line()
        kind, rest = chr(line[0]), line[1:]
        if kind == "+":
            return ("simple", rest.decode())
        if kind == "-":
            sys.exit("server error: " + rest.decode())
        if kind == ":":
            return ("int", int(rest))
        if kind == "$":
            data = self.file.read(int(rest) + 2)[:-2]
            return ("bulk", data.decode())
        if kind == "=":  # verbatim text (INFO): "txt:" then the text
            data = self.file.read(int(rest) + 2)[:-2]
            return ("bulk", data[4:].decode())
        if kind == "_":
            return ("null", None)
        if kind in "*~":
            return ("array" if kind == "*" else "set", [self.read() for _ in range(int(rest))])
        if kind == "%":
            return ("map", [(self.read()[1], self.read()) for _ in range(int(rest))])
        sys.exit("unexpected reply type " + kind)


def plain(value):
    """The value without wire types: maps become (ordered) objects, the rest lists and scalars."""
    kind, data = value
    if kind in ("array", "set"):
        return [plain(item) for item in data]
    if kind == "map":
        return {key: plain(item) for key, item in data}
    return data


def command_info(reply):
    """COMMAND INFO's 10 fields, named."""
    kind, fields = reply
    assert kind == "array" and len(fields) == 10, reply
    name, arity, flags, first, last, step, categories, tips, key_specs, subcommands = fields
    info = {
        "name": plain(name),
        "arity": plain(arity),
        "flags": plain(flags),
        "first_key": plain(first),
        "last_key": plain(last),
        "key_step": plain(step),
        "acl_categories": plain(categories),
        "tips": plain(tips),
        "key_specs": plain(key_specs),
    }
    # Redis writes an empty set for a command without subcommands and an array for a container.
    if subcommands[0] == "array":
        info["subcommands"] = [command_info(sub) for sub in subcommands[1]]
    return info


def attach_docs(info, docs):
    """Puts each command's docs (subcommands' docs into their own entries) under `docs`."""
    own = dict(docs)
    nested = own.pop("subcommands", {})
    info["docs"] = own
    subs = {sub["name"]: sub for sub in info.get("subcommands", [])}
    assert set(subs) == set(nested), (info["name"], sorted(subs), sorted(nested))
    for name, sub_docs in nested.items():
        attach_docs(subs[name], sub_docs)
    if "subcommands" in info:
        info["subcommands"].sort(key=lambda sub: sub["name"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=6379)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    conn = Resp3(args.host, args.port)
    version = plain(conn.call("INFO", "server"))
    version = next(line.split(":", 1)[1] for line in version.splitlines()
                   if line.startswith("redis_version:"))
    infos = [command_info(reply) for reply in conn.call("COMMAND", "INFO")[1]]
    docs = plain(conn.call("COMMAND", "DOCS"))
    for info in infos:
        attach_docs(info, docs[info["name"]])
    infos.sort(key=lambda info: info["name"])

    lines = [json.dumps(info, separators=(",", ":"), ensure_ascii=False) for info in infos]
    text = '{"redis_version":%s,"commands":[\n%s\n]}\n' % (json.dumps(version), ",\n".join(lines))
    args.out.write_text(text)
    print(f"{args.out}: {len(infos)} commands of Redis {version}")


if __name__ == "__main__":
    main()
