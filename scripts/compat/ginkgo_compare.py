#!/usr/bin/env python3
"""Compare two ginkgo JSON reports of the same suite: a reference server's and fallow's.

Used by scripts/compat/go-redis.sh. Usage:

    ginkgo_compare.py --ref redis=REDIS.json --cand fallow=FALLOW.json \
        --meta META.json --out SUMMARY.json [--text SUMMARY.txt]

Counts only It nodes. Per server:
  passed    the spec passed (flaky: it needed a retry, -ginkgo.flake-attempts)
  failed    failed, panicked, timed out, interrupted or aborted
  skipped   the spec called Skip() itself (e.g. "flaky test")
  excluded  filtered out by the script's -ginkgo.skip / -ginkgo.skip-file
  pending   PIt (disabled upstream)
The diff lists every spec that passes on the reference and not on the candidate,
with the node that failed and the condensed error.
"""

import argparse
import json
import re
import sys

FAILED_STATES = {"failed", "panicked", "timedout", "interrupted", "aborted"}
# Replies of a Redis server: the first word of an error line.
ERROR_LINE = re.compile(
    r"^(ERR|WRONGTYPE|NOSCRIPT|BUSY|NOTBUSY|NOAUTH|NOPERM|WRONGPASS|EXECABORT|LOADING|"
    r"READONLY|OOM|NOGROUP|BUSYGROUP|NOPROTO|UNBLOCKED|IOERR|MOVED|ASK|CROSSSLOT)\b"
)


def spec_name(r):
    return " / ".join(r["ContainerHierarchyTexts"] + [r["LeafNodeText"]])


def condense(message):
    """One line for a gomega failure message: server error first, else the squashed text."""
    lines = [ln.strip() for ln in message.splitlines()]
    for ln in lines:
        if ERROR_LINE.match(ln):
            return ln
    out = []
    for ln in lines:
        if not ln or re.fullmatch(r"<[^>]*>:?", ln):
            continue
        if out and out[-1] == ln:
            continue
        out.append(ln)
    text = " ".join(out)
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= 400 else text[:397] + "..."


def load(path):
    with open(path) as f:
        suites = json.load(f)
    specs, seen = {}, {}
    for suite in suites:
        for r in suite["SpecReports"]:
            if r["LeafNodeType"] != "It":
                continue
            name = spec_name(r)
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:  # the same spec text registered again (a loop over protocols)
                name = "%s #%d" % (name, seen[name])
            failure = r.get("Failure") or {}
            state = r["State"]
            if state == "skipped":
                # A Skip() call carries its message; a filtered spec carries none.
                state = "skipped" if failure.get("Message") else "excluded"
            elif state in FAILED_STATES:
                state = "failed"
            loc = r["LeafNodeLocation"]
            specs[name] = {
                "state": state,
                "attempts": r.get("NumAttempts", 1),
                "location": "%s:%d" % (loc["FileName"].rsplit("/", 1)[-1], loc["LineNumber"]),
                "failed_in": failure.get("FailureNodeType", ""),
                "error": condense(failure.get("Message", "")) if state in ("failed", "skipped") else "",
                "raw_state": r["State"],
            }
    return suites, specs


def totals(specs):
    t = {k: 0 for k in ("passed", "failed", "skipped", "excluded", "pending")}
    for s in specs.values():
        t[s["state"]] = t.get(s["state"], 0) + 1
    t["ran"] = t["passed"] + t["failed"]
    t["flaky"] = sorted(n for n, s in specs.items() if s["state"] == "passed" and s["attempts"] > 1)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True, help="NAME=report.json of the reference server")
    ap.add_argument("--cand", required=True, help="NAME=report.json of the server under test")
    ap.add_argument("--meta", help="JSON object merged into the summary (versions, ports, command)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--text", help="also write the human-readable summary here")
    a = ap.parse_args()

    summary = {}
    if a.meta:
        with open(a.meta) as f:
            summary.update(json.load(f))
    servers = summary.setdefault("servers", {})
    loaded = {}
    for role, arg in (("ref", a.ref), ("cand", a.cand)):
        name, path = arg.split("=", 1)
        entry = servers.setdefault(name, {})
        try:
            suites, specs = load(path)
        except (OSError, ValueError) as e:
            entry["report"] = "missing or unreadable: %s" % e
            loaded[role] = (name, None)
            continue
        entry["report"] = path
        entry["suite_succeeded"] = all(s.get("SuiteSucceeded") for s in suites)
        entry["suite_failure_reasons"] = [r for s in suites for r in (s.get("SpecialSuiteFailureReasons") or [])]
        entry.update(totals(specs))
        entry["failed_specs"] = [
            {"spec": n, "location": s["location"], "failed_in": s["failed_in"], "error": s["error"]}
            for n, s in sorted(specs.items()) if s["state"] == "failed"
        ]
        loaded[role] = (name, specs)

    ref_name, ref = loaded["ref"]
    cand_name, cand = loaded["cand"]
    diff, better = [], []
    if ref is not None and cand is not None:
        def by_location(kv):
            f, _, line = kv[1]["location"].rpartition(":")
            return f, int(line), kv[0]

        for n, r in sorted(ref.items(), key=by_location):
            c = cand.get(n)
            if r["state"] == "passed" and (c is None or c["state"] != "passed"):
                diff.append({
                    "spec": n,
                    "location": r["location"],
                    "state": c["state"] if c else "absent",
                    "failed_in": c["failed_in"] if c else "",
                    "error": c["error"] if c else "",
                })
            if r["state"] == "failed" and c is not None and c["state"] == "passed":
                better.append({"spec": n, "location": r["location"], "ref_error": r["error"]})
    summary["pass_on_%s_fail_on_%s" % (ref_name, cand_name)] = diff
    summary["fail_on_%s_pass_on_%s" % (ref_name, cand_name)] = better

    with open(a.out, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    out = []
    out.append("%-8s %7s %7s %8s %9s %8s %6s" % ("server", "passed", "failed", "skipped", "excluded", "pending", "flaky"))
    for name in (ref_name, cand_name):
        e = servers.get(name, {})
        if "passed" not in e:
            out.append("%-8s %s" % (name, e.get("report", "no report")))
            continue
        out.append("%-8s %7d %7d %8d %9d %8d %6d" % (
            name, e["passed"], e["failed"], e["skipped"], e["excluded"], e["pending"], len(e["flaky"])))
    for name in (ref_name, cand_name):
        for n in servers.get(name, {}).get("flaky", []):
            out.append("flaky on %s (passed on its retry): %s" % (name, n))
    out.append("")
    out.append("%d specs pass on %s and fail on %s:" % (len(diff), ref_name, cand_name))
    for d in diff:
        where = " [%s]" % d["failed_in"] if d["failed_in"] and d["failed_in"] != "It" else ""
        out.append("  %s (%s)%s" % (d["spec"], d["location"], where))
        out.append("      %s" % (d["error"] or d["state"]))
    if better:
        out.append("")
        out.append("%d specs fail on %s and pass on %s:" % (len(better), ref_name, cand_name))
        for b in better:
            out.append("  %s (%s)" % (b["spec"], b["location"]))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if a.text:
        with open(a.text, "w") as f:
            f.write(text)
    return 0 if ref is not None and cand is not None else 2


if __name__ == "__main__":
    sys.exit(main())
