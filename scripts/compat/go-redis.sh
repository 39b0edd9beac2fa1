#!/usr/bin/env bash
# go-redis's own integration test suite, run against redis-server 7.0.15 and
# against fallow, one after the other, each on a free port of its own.
# Outside CI: it needs the Go toolchain and the Go module proxy.
#
#   scripts/compat/go-redis.sh            # both servers, then the comparison
#   SERVERS=fallow scripts/compat/go-redis.sh   # one server only (no comparison)
#
# Environment (all optional):
#   GOREDIS_VERSION  go-redis tag to test (default v9.7.3, whose suite targets Redis 7.x)
#   OUT              results and scratch dir (default /tmp/go-redis-compat)
#   FALLOW_BIN       fallow binary (default target/release/fallow of this checkout; not built here)
#   REDIS_SERVER     redis-server binary (default: redis-server on PATH, expected 7.0.15)
#   SERVERS          which servers to run, in order (default "redis fallow")
#   SUITE_TIMEOUT    ginkgo's --timeout for one server's run (default 10m)
#   SEED             ginkgo's --seed, the same for both runs so the specs run in the same order (default 1)
#
# Results in $OUT: redis.log / fallow.log (ginkgo -v output), redis.json /
# fallow.json (ginkgo JSON reports), summary.json and summary.txt (totals per
# server and every spec that passes on Redis and fails on fallow, with its error).
#
# How the suite finds its server. go-redis's main_test.go BeforeSuite starts its
# own redis-server processes from testdata/redis/src/redis-server (built from a
# Redis tarball by its Makefile): the main server on REDIS_PORT (default 6380),
# three ring shards (6390-6392), a sentinel set (9123-9128) and a 6-node cluster
# (8220-8225). RE_CLUSTER=true instead points everything at :6379, DB 0 (a Redis
# Enterprise setup). Neither fits, so the scratch copy's main_test.go gets one
# patch: with GOREDIS_EXTERNAL_SERVER set, BeforeSuite only reads REDIS_PORT and
# starts nothing, and AfterSuite stops nothing. The specs then talk to the
# server this script started, as go-redis's own CI does (DB 15, RESP3 by default).
# Only TestGinkgoSuite runs (-run): the plain Go tests and examples
# (TestHookError, Example*, TestRingSetAddrsAndRebalanceRace, benchmarks) dial a
# fixed :6379 or the ring ports.
#
# Excluded specs (-ginkgo.skip-file / -ginkgo.skip), and why:
#   osscluster_test.go      Redis Cluster: six cluster-enabled servers on 8220-8225
#   sentinel_test.go        Sentinel: three sentinels, a master and two replicas on 9123-9128
#   ring_test.go            Ring client: two or three shards on 6390-6392, shards killed and restarted
#   json_test.go, search_test.go, timeseries_commands_test.go, probabilistic_test.go,
#   gears_commands_test.go  Redis Stack modules (RedisJSON, RediSearch, RedisTimeSeries,
#                           RedisBloom, RedisGears) on a redis-stack server at :6379 (Docker upstream);
#                           not part of Redis 7.0
#   monitor_test.go         hard-wired to :6379, and upstream gates it behind RUN_MONITOR_TEST
#   "cluster races"         needs the cluster above
#   "UniversalClient should connect to failover servers|clusters", "UniversalClient connect to
#   clusters ..."           need the sentinels or the cluster
#   "withConn"              a client with default options, hard-wired to localhost:6379
#   "XRead LastEntry blocks" XREAD's "+" id is Redis 7.4, so it fails on 7.0.15; its goroutine
#                           then sends XADD 100 ms later on the closed client and fails whichever
#                           unrelated spec runs at that moment
# Specs for commands newer than 7.0 (HEXPIRE, ZRANK WITHSCORE, CLIENT SETINFO, ...)
# stay in: they fail on Redis 7.0.15 too, and the comparison only lists specs that
# pass on Redis.
#
# Both servers start from a small config file, as go-redis's harness starts
# Redis from redis.conf (so CONFIG REWRITE works): redis.conf for Redis,
# fallow.toml for fallow (docs/configuration.md), with the same settings.
# Retries: -ginkgo.flake-attempts=2 on both; a spec that passed only on its retry is listed as flaky.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GOREDIS_VERSION=${GOREDIS_VERSION:-v9.7.3}
OUT=${OUT:-/tmp/go-redis-compat}
FALLOW_BIN=${FALLOW_BIN:-$ROOT/target/release/fallow}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
SERVERS=${SERVERS:-redis fallow}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-10m}
SEED=${SEED:-1}
MODULE=github.com/redis/go-redis/v9

SKIP_FILES='(^|/)(osscluster_test|sentinel_test|ring_test|json_test|search_test|timeseries_commands_test|probabilistic_test|gears_commands_test|monitor_test)\.go'
SKIP_SPECS='cluster races|UniversalClient should connect to (failover servers|clusters)|UniversalClient connect to clusters|withConn|XRead LastEntry blocks'

log() { printf '[go-redis-compat %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "error: $*"; exit 2; }

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
command -v go >/dev/null || die "go is not on PATH"
command -v python3 >/dev/null || die "python3 is not on PATH"
command -v redis-cli >/dev/null || die "redis-cli is not on PATH (it checks that a server answers)"
mkdir -p "$OUT"

# ---- servers -----------------------------------------------------------------
SERVER_PID=""
cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {  # the first port from $1 on that nothing answers on
    local p=$1
    while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do
        p=$((p + 1))
        ((p < $1 + 200)) || die "no free port from $1"
    done
    echo "$p"
}

wait_ping() {  # port pid
    local i
    for i in $(seq 1 100); do
        if [[ "$(redis-cli -p "$1" ping 2>/dev/null)" == PONG ]]; then return 0; fi
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.2
    done
    return 1
}

start_server() {  # name port -> SERVER_PID, SERVER_VERSION
    local name=$1 port=$2 dir="$OUT/$1-data"
    rm -rf "$dir"
    mkdir -p "$dir"
    case $name in
    redis)
        cat >"$dir/redis.conf" <<EOF
bind 127.0.0.1
port $port
dir $dir
save ""
appendonly no
enable-module-command yes
EOF
        "$REDIS_SERVER" "$dir/redis.conf" >"$OUT/$name-server.log" 2>&1 &
        ;;
    fallow)
        [[ -x "$FALLOW_BIN" ]] || die "no fallow binary at $FALLOW_BIN (build it: cargo build --release)"
        # From a config file too, so CONFIG REWRITE has a file to rewrite (fallow's is TOML).
        cat >"$dir/fallow.toml" <<EOF
port = $port
memcache-port = 0
unixsocket = ""
dir = "$dir"
log-level = "warn"
enable-module-command = "yes"
EOF
        "$FALLOW_BIN" --config "$dir/fallow.toml" >"$OUT/$name-server.log" 2>&1 &
        ;;
    *) die "unknown server $name (redis or fallow)" ;;
    esac
    SERVER_PID=$!
    wait_ping "$port" "$SERVER_PID" || die "$name did not answer PING on port $port (see $OUT/$name-server.log)"
    SERVER_VERSION=$(redis-cli -p "$port" info server | tr -d '\r' | sed -n 's/^redis_version://p')
}

# ---- go-redis source -----------------------------------------------------------
log "fetching $MODULE@$GOREDIS_VERSION from the Go module proxy"
MODDIR=$(cd "$OUT" && timeout 300 go mod download -json "$MODULE@$GOREDIS_VERSION" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])') ||
    die "go mod download $MODULE@$GOREDIS_VERSION failed"
SRC="$OUT/src"
rm -rf "$SRC"
cp -r "$MODDIR" "$SRC"
chmod -R u+w "$SRC"

# The one patch (see the header): BeforeSuite returns before starting servers,
# AfterSuite skips stopping them.
python3 - "$SRC/main_test.go" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
anchor = '\tRECluster, _ = strconv.ParseBool(os.Getenv("RE_CLUSTER"))\n'
guard = '\tif !RECluster {\n\t\tExpect(cluster.Close()).NotTo(HaveOccurred())\n'
if anchor not in s or guard not in s:
    sys.exit("main_test.go: BeforeSuite/AfterSuite not as expected; the patch needs updating for this version")
s = s.replace(anchor, anchor + '\tif os.Getenv("GOREDIS_EXTERNAL_SERVER") != "" {\n'
              '\t\treturn // scripts/compat/go-redis.sh started the server on REDIS_PORT\n\t}\n', 1)
s = s.replace(guard, guard.replace('!RECluster', '!RECluster && os.Getenv("GOREDIS_EXTERNAL_SERVER") == ""'), 1)
open(p, "w").write(s)
EOF

log "building the test binary (go test -c; dependencies from the module proxy)"
TESTBIN="$OUT/go-redis.test"
(cd "$SRC" && timeout 600 go test -c -o "$TESTBIN" .) >"$OUT/build.log" 2>&1 ||
    { tail -20 "$OUT/build.log"; die "go test -c failed (see $OUT/build.log)"; }

# ---- runs ------------------------------------------------------------------------
# A hard limit above ginkgo's own: the suite timeout plus a minute.
suite_s=$(python3 -c "
import re,sys; m=re.fullmatch(r'(\d+)([smh])','$SUITE_TIMEOUT') or sys.exit('SUITE_TIMEOUT: use e.g. 600s or 10m')
print(int(m[1])*{'s':1,'m':60,'h':3600}[m[2]])")
META="$OUT/meta.json"
declare -A PORTS VERSIONS RCS
base=21380
for name in $SERVERS; do
    rm -f "$OUT/$name.json" "$OUT/$name.log"
    port=$(free_port "$base")
    base=$((port + 1))
    log "$name: starting on port $port"
    start_server "$name" "$port"
    [[ $name != redis || $SERVER_VERSION == 7.0.15 ]] || log "warning: redis-server is $SERVER_VERSION, not 7.0.15"
    PORTS[$name]=$port
    VERSIONS[$name]=$SERVER_VERSION
    log "$name: redis_version $SERVER_VERSION; running the suite (log: $OUT/$name.log, at most $SUITE_TIMEOUT)"
    set +e
    (cd "$SRC" && GOREDIS_EXTERNAL_SERVER=1 REDIS_PORT=$port timeout -k 10 $((suite_s + 60)) "$TESTBIN" \
        -test.run '^TestGinkgoSuite$' -test.timeout $((suite_s + 30))s \
        -ginkgo.timeout "$SUITE_TIMEOUT" -ginkgo.seed "$SEED" -ginkgo.flake-attempts 2 \
        -ginkgo.no-color -ginkgo.v -ginkgo.json-report "$OUT/$name.json" \
        -ginkgo.skip-file "$SKIP_FILES" -ginkgo.skip "$SKIP_SPECS") >"$OUT/$name.log" 2>&1 &
    test_pid=$!
    while kill -0 "$test_pid" 2>/dev/null; do
        sleep 15
        kill -0 "$test_pid" 2>/dev/null || break
        log "$name: $(grep -c '^•' "$OUT/$name.log" || true) specs done, $(grep -c '^• \[FAILED\]\|^• \[PANICKED\]\|^• \[TIMEDOUT\]' "$OUT/$name.log" || true) failed"
    done
    wait "$test_pid"
    RCS[$name]=$?
    set -e
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        log "$name: the server exited during the run (see $OUT/$name-server.log)"
        RCS[$name]="${RCS[$name]} (server exited)"
    fi
    grep -E '^(Ran [0-9]+ of|SUCCESS!|FAIL!)' "$OUT/$name.log" | sed "s/^/    $name: /" || true
    cleanup
    SERVER_PID=""
done

# ---- summary -----------------------------------------------------------------------
python3 - "$META" <<EOF
import json, sys
servers = {}
for kv in """$(for n in $SERVERS; do echo "$n ${PORTS[$n]} ${VERSIONS[$n]} ${RCS[$n]// /_}"; done)""".splitlines():
    name, port, version, rc = kv.split(" ", 3)
    servers[name] = {"port": int(port), "redis_version": version, "exit_status": rc.replace("_", " ")}
json.dump({
    "go_redis_version": "$GOREDIS_VERSION",
    "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
    "fallow_commit": "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)",
    "fallow_binary": "$FALLOW_BIN",
    "fallow_binary_mtime": "$(date -u -r "$FALLOW_BIN" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo unknown)",
    "command": "scripts/compat/go-redis.sh",
    "ginkgo_seed": int("$SEED"),
    "skip_files": r"""$SKIP_FILES""",
    "skip_specs": r"""$SKIP_SPECS""",
    "servers": servers,
}, open(sys.argv[1], "w"), indent=2)
EOF

if [[ " $SERVERS " == *" redis "* && " $SERVERS " == *" fallow "* ]]; then
    log "comparing (summary: $OUT/summary.json, $OUT/summary.txt)"
    python3 "$ROOT/scripts/compat/ginkgo_compare.py" --ref "redis=$OUT/redis.json" \
        --cand "fallow=$OUT/fallow.json" --meta "$META" --out "$OUT/summary.json" --text "$OUT/summary.txt"
else
    cp "$META" "$OUT/summary.json"
    log "one server only: counts are in the log's last lines and $OUT/<server>.json"
fi
