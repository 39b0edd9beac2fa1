#!/usr/bin/env bash
# Throughput/latency/CPU-per-op of fallow vs redis-server 7.0 (redis-benchmark -t set,get,
# -P 1 and -P 16) and vs memcached 1.6 (memcaslap), 3 alternating repeats, medians.
# No CPU pinning. Usage: scripts/bench-peers.sh [-n REQUESTS] [--repeats R] [--record]
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/bench/bench.py peers "$@"
