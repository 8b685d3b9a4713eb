#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of //fuzz (docs/FUZZING.md).
#   tools/fuzz.sh smoke                 every target, a fixed number of runs over its seed corpus
#                                       (what tools/test.sh runs; a crash fails it)
#   tools/fuzz.sh long [TARGET] [RUNS]  millions of inputs (default 2,000,000 per target), new
#                                       inputs kept in $FUZZ_WORK/corpus/TARGET (not committed)
# The fuzz build uses clang-14 in its own Bazel output base, so the gcc build is never disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(http_request_fuzzer json_event_fuzzer ingest_request_fuzzer config_fuzzer
         renderer_fuzzer signer_fuzzer trace_context_fuzzer)
mode="${1:-smoke}"
output_base="${FUZZ_OUTPUT_BASE:-$HOME/.cache/hookrelay-bazel-fuzz}"
work="${FUZZ_WORK:-${TMPDIR:-/tmp}/hookrelay-fuzz}"
smoke_runs="${FUZZ_SMOKE_RUNS:-50000}"

bazel_fuzz() { bazel --output_base="$output_base" "$@"; }

case "$mode" in
  smoke) selected=("${targets[@]}"); runs="$smoke_runs" ;;
  long)
    selected=("${targets[@]}")
    [ -n "${2:-}" ] && selected=("$2")
    runs="${3:-2000000}"
    ;;
  *) echo "usage: $0 smoke | long [TARGET] [RUNS]" >&2; exit 2 ;;
esac

labels=()
for t in "${selected[@]}"; do labels+=("//fuzz:$t"); done
echo "== fuzz: building ${selected[*]} (clang-14, ASan + UBSan + libFuzzer)"
bazel_fuzz build --config=fuzz "${labels[@]}"
bin_dir=$(bazel_fuzz info --config=fuzz bazel-bin 2>/dev/null)

failed=0
for t in "${selected[@]}"; do
  corpus="fuzz/corpus/$t"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=("-dict=fuzz/dict/$t.dict")
  log="$work/$t.log"
  mkdir -p "$work" "$work/artifacts/$t"
  if [ "$mode" = smoke ]; then
    # The seed corpus is read, never written: the run is the same on every machine.
    inputs=("$corpus")
  else
    mkdir -p "$work/corpus/$t"
    inputs=("$work/corpus/$t" "$corpus")
  fi
  start=$(date +%s)
  if "$bin_dir/fuzz/$t" -runs="$runs" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
       -print_final_stats=1 -artifact_prefix="$work/artifacts/$t/" "${dict[@]}" \
       "${inputs[@]}" >"$log" 2>&1; then
    stats=$(grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" | tr '\n' ' ')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1)
    echo "fuzz: $t ok in $(( $(date +%s) - start ))s: $cov $stats"
  else
    failed=$((failed + 1))
    echo "fuzz: $t FAILED (log $log; reproducer in $work/artifacts/$t/)"
    tail -40 "$log"
  fi
done
[ "$failed" -eq 0 ]
