#!/usr/bin/env bash
# Memory for N distinct keys with 32-byte values (default 1,000,000) in redis vs fallow:
# DBSIZE, INFO used_memory, VmRSS. Usage: scripts/bench-memory.sh [-n KEYS] [--record]
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/bench/bench.py memory "$@"
