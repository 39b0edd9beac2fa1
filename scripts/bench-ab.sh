#!/usr/bin/env bash
# Quick A/B of fallow against redis-server: both started side by side, redis-benchmark alternating between
# them ROUNDS times. Prints redis-benchmark's CSV (test, rps, avg, min, p50, p95, p99, max ms) and the server
# CPU µs per request from /proc. Not recorded anywhere; for quick checks while tuning.
#   scripts/bench-ab.sh [-P PIPELINE] [-r ROUNDS] [-n REQUESTS] [-- extra fallow flags, e.g. --threads 1]
set -euo pipefail
cd "$(dirname "$0")/.."
pipeline=16 rounds=3 requests=400000
while [ $# -gt 0 ]; do
    case $1 in
        -P) pipeline=$2; shift 2 ;;
        -r) rounds=$2; shift 2 ;;
        -n) requests=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "usage: $0 [-P N] [-r N] [-n N] [-- fallow flags]" >&2; exit 2 ;;
    esac
done
fallow=${FALLOW_BIN:-target/release/fallow}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fallow_port=$(free_port) redis_port=$(free_port)
"$fallow" --port "$fallow_port" --memcache-port 0 --unixsocket '' --log-level warn "$@" & fallow_pid=$!
redis-server --port "$redis_port" --save '' --appendonly no >/dev/null & redis_pid=$!
trap 'kill $fallow_pid $redis_pid 2>/dev/null; wait 2>/dev/null' EXIT
sleep 0.5
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for round in $(seq "$rounds"); do
    for server in fallow redis; do
        if [ $server = fallow ]; then port=$fallow_port pid=$fallow_pid; else port=$redis_port pid=$redis_pid; fi
        before=$(cpu_ticks $pid)
        result=$(redis-benchmark -p "$port" -t set,get -n "$requests" -r 100000 -c 50 -P "$pipeline" --csv 2>/dev/null | tail -2 | tr '\n' ' ')
        after=$(cpu_ticks $pid)
        cpu_us=$(python3 -c "print(round(($after - $before) / $(getconf CLK_TCK) * 1e6 / (2 * $requests), 2))")
        echo "round $round $server: $result cpu_us_per_request=$cpu_us"
    done
done
