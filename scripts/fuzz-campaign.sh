#!/usr/bin/env bash
# A bounded fuzzing campaign over the cargo-fuzz targets in fuzz/ (docs/fuzzing.md), one target at a time at
# nice 19 so it only takes CPU nobody else wants.
#
#   scripts/fuzz-campaign.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 420 s, every target)
#   MAX_LEN=4096 scripts/fuzz-campaign.sh ... longest input (default 512: the checks also run small limits,
#                                             64-byte lines and values, so every limit is reached within it,
#                                             at twice the executions of 1024)
#   MINIMIZE=1 scripts/fuzz-campaign.sh ...   also merges what the run found into fuzz/corpus/<target>
#                                             and minimizes it (cargo fuzz cmin)
#
# Each target starts from the kept corpus (fuzz/corpus/<target>) plus its working corpus
# (fuzz/corpus-work/<target>, git-ignored, grows run after run). A crash stops that target and leaves the
# input in fuzz/artifacts/<target>/. Prints, per target: executions, exec/s, seconds, coverage (cov, ft)
# and crashes; logs go to fuzz/logs/<target>.log. Needs the nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`).
set -euo pipefail

cd "$(dirname "$0")/.."
seconds=${1:-420}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(resp_request resp_reply memcache_text memcache_meta memcache_binary config_file acl_rules)
fi
# Safe Rust parsers: no sanitizer (2-3x the executions), but debug assertions and overflow checks on.
build_flags=(-O -a -s none)
bin_dir=fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release
mkdir -p fuzz/logs

nice -n 19 cargo +nightly fuzz build "${build_flags[@]}" >fuzz/logs/build.log 2>&1 || {
    echo "cargo fuzz build failed; see fuzz/logs/build.log" >&2
    exit 1
}

# Merges the working corpus into the kept one and minimizes it by edge coverage (hit counts would keep
# thousands of files): what `cargo fuzz cmin` does (libFuzzer's -merge=1), on the binary built above.
# The named regression-* inputs (crashes found and fixed) stay whatever they cover.
minimize() {
    local target=$1 kept=fuzz/corpus/$1 merged
    merged=$(mktemp -d)
    nice -n 19 "$bin_dir/$target" -merge=1 -use_counters=0 "$merged" \
        "$kept" "fuzz/corpus-work/$target" >"fuzz/logs/$target.cmin.log" 2>&1
    find "$kept" -maxdepth 1 -type f ! -name 'regression-*' -delete
    cp "$merged"/* "$kept"/
    rm -r "$merged"
}

printf '%-16s %12s %9s %7s %6s %7s %7s\n' target executions exec/s seconds cov ft crashes
total=0
for target in "${targets[@]}"; do
    work=fuzz/corpus-work/$target
    mkdir -p "$work" "fuzz/artifacts/$target"
    crashes_before=$(find "fuzz/artifacts/$target" -type f | wc -l)
    log=fuzz/logs/$target.log
    started=$(date +%s)
    # The binary built above, not `cargo fuzz run`, which would rebuild whenever a source file changed.
    nice -n 19 "$bin_dir/$target" -artifact_prefix="fuzz/artifacts/$target/" "$work" "fuzz/corpus/$target" \
        -max_total_time="$seconds" -max_len="${MAX_LEN:-512}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 >"$log" 2>&1 || true
    elapsed=$(($(date +%s) - started))
    executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=$(($(find "fuzz/artifacts/$target" -type f | wc -l) - crashes_before))
    printf '%-16s %12s %9s %7s %6s %7s %7s\n' "$target" "${executions:-?}" "${rate:-?}" "$elapsed" \
        "${cov:-?}" "${ft:-?}" "$crashes"
    total=$((total + ${executions:-0}))
    if [ "${MINIMIZE:-0}" = 1 ]; then
        minimize "$target"
    fi
done
echo "total executions: $total ($(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ))"
