#!/usr/bin/env bash
# The one command that runs ALL tests: deps, the import-cycle check, cargo build+test, pytest e2e (incl. memccapable and
# redis-benchmark checks in tests/e2e/test_tools.py). Exits non-zero on any failure.
#   E2E_TARGET=fallow (default) | redis | memcached   -- which server the e2e suite starts
#   SKIP_DEPS=1  -- don't run scripts/install-test-deps.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
export E2E_TARGET=${E2E_TARGET:-fallow}
export FALLOW_BIN=${FALLOW_BIN:-$ROOT/target/release/fallow}
case "$FALLOW_BIN" in /*) ;; *) FALLOW_BIN=$ROOT/$FALLOW_BIN ;; esac

declare -a names=() results=() times=()
failed=0
step() {  # step NAME CMD...
    local name=$1; shift
    echo "==> $name: $*"
    local t0=$SECONDS rc=0
    "$@" || rc=$?
    names+=("$name"); results+=("$rc"); times+=($((SECONDS - t0)))
    if [ "$rc" -ne 0 ]; then failed=1; echo "==> $name FAILED (exit $rc)"; fi
    return "$rc"
}
summary() {
    echo
    echo "==================== test summary ===================="
    for i in "${!names[@]}"; do
        local s="ok"; [ "${results[$i]}" -ne 0 ] && s="FAIL (exit ${results[$i]})"
        printf '  %-22s %-16s %4ss\n' "${names[$i]}" "$s" "${times[$i]}"
    done
    [ "$failed" -eq 0 ] && echo "  RESULT: PASS" || echo "  RESULT: FAIL"
    echo "======================================================"
}
trap summary EXIT

if [ "${SKIP_DEPS:-0}" != 1 ]; then
    step deps bash scripts/install-test-deps.sh || exit 1
fi

if [ "$E2E_TARGET" = fallow ]; then
    # fallow-server's modules depend on each other one way, and not on fallow-bench (docs/architecture.md)
    step import-check bash -c 'python3 scripts/check-imports.py --self-test && python3 scripts/check-imports.py' || true
    step cargo-build cargo build --release --workspace || exit 1
    step cargo-test cargo test --workspace --release || true
    if [ ! -x "$FALLOW_BIN" ]; then
        echo "fallow binary not found at $FALLOW_BIN" >&2
        names+=("fallow-binary"); results+=(1); times+=(0); failed=1
        exit 1
    fi
fi

# pytest exit code 5 (nothing collected) is a failure too, like any non-zero code
step "pytest-e2e[$E2E_TARGET]" "$PY" -m pytest tests/e2e -q -rfE --durations=5 || true

exit "$failed"
