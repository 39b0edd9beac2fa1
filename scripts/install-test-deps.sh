#!/usr/bin/env bash
# Idempotent installer for the e2e test dependencies (Debian 12, run as root or with sudo).
#   apt: redis-server redis-tools memcached libmemcached-tools fuse3 fio postgresql (+ python3-pip if pip is
#        missing) (fuse3: fusermount3 and /etc/fuse.conf for the `fallow fs` tests, tests/e2e/test_fs.py; fio
#        and postgresql: the file-cache benchmark's smoke test, tests/e2e/test_fs_bench.py, whose pgbench item
#        runs PostgreSQL over a mount)
#   pip: tests/requirements.txt
# With --bench it also installs what the benchmarks need and the tests do not: scripts/bench/requirements.txt
# (PostgreSQL, which the read-through experiments of scripts/bench/elastic use too, is always installed).
# Runs `apt-get update` only when something is missing. Stops the Debian services that the
# packages may auto-start (the tests start their own servers on free ports).
set -euo pipefail
cd "$(dirname "$0")/.."

BENCH=0
for arg in "$@"; do
    case "$arg" in
        --bench) BENCH=1 ;;
        *) echo "usage: $0 [--bench]" >&2; exit 2 ;;
    esac
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have redis-server    || need_pkgs+=(redis-server)
have redis-cli       || need_pkgs+=(redis-tools)
have redis-benchmark || need_pkgs+=(redis-tools)
have memcached       || need_pkgs+=(memcached)
have memccapable     || need_pkgs+=(libmemcached-tools)
have fusermount3     || need_pkgs+=(fuse3)   # fallow fs tests (FUSE mounts; unmounting a killed fs's mount)
have fio             || need_pkgs+=(fio)     # fallow-bench fs (tests/e2e/test_fs_bench.py)
PY=${PYTHON:-python3}
have "$PY" || need_pkgs+=(python3)
if ! "$PY" -m pip --version >/dev/null 2>&1; then need_pkgs+=(python3-pip); fi
# fallow-bench fs's pgbench item (tests/e2e/test_fs_bench.py): the server, pgbench and the postgres user.
if ! ls /usr/lib/postgresql/*/bin/pgbench >/dev/null 2>&1; then need_pkgs+=(postgresql); fi

if [ ${#need_pkgs[@]} -gt 0 ]; then
    # de-duplicate
    mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
    echo "install-test-deps: apt-get install ${need_pkgs[*]}"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
    # apt may have started the stock services on the default ports; we never use them
    for svc in redis-server memcached postgresql; do
        $SUDO service "$svc" stop >/dev/null 2>&1 || true
        $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
    done
else
    echo "install-test-deps: apt packages already present"
fi

if "$PY" - <<'PYEOF' 2>/dev/null
import importlib.metadata as m, sys
from pathlib import Path
# satisfied when every requirement's distribution is importable at a matching major version
reqs = {"redis": (5, 9), "pymemcache": (4, 5), "pytest": (7, 10)}
for name, (lo, hi) in reqs.items():
    major = int(m.version(name).split(".")[0])
    if not lo <= major < hi:
        sys.exit(1)
PYEOF
then
    echo "install-test-deps: python packages already present"
else
    echo "install-test-deps: pip install -r tests/requirements.txt"
    # Debian's system python is "externally managed" (PEP 668): allow installing into it
    "$PY" -m pip install -q -r tests/requirements.txt 2>/dev/null \
        || "$PY" -m pip install -q --break-system-packages -r tests/requirements.txt
fi

if [ "$BENCH" = 1 ]; then
    if "$PY" -c 'import matplotlib, numpy, psycopg' 2>/dev/null; then
        echo "install-test-deps: benchmark python packages already present"
    else
        echo "install-test-deps: pip install -r scripts/bench/requirements.txt"
        "$PY" -m pip install -q -r scripts/bench/requirements.txt 2>/dev/null \
            || "$PY" -m pip install -q --break-system-packages -r scripts/bench/requirements.txt
    fi
fi

for t in redis-server redis-cli redis-benchmark memcached memccapable fusermount3; do
    have "$t" || { echo "install-test-deps: $t still missing" >&2; exit 1; }
done
"$PY" -c 'import redis, pymemcache, pytest' || { echo "install-test-deps: python deps missing" >&2; exit 1; }
# FUSE needs the device node too; a container may lack it (tests/e2e/test_fs.py then skips, saying why)
[ -e /dev/fuse ] || echo "install-test-deps: /dev/fuse is missing: the fallow fs tests will be skipped" >&2
echo "install-test-deps: ok ($(redis-server --version | awk '{print $3}'), $(memcached -V), $(fusermount3 -V))"
