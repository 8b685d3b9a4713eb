#!/usr/bin/env bash
# Deliverer CPU per delivery, the deliverer alone: tools/bench/job_source (the collector's side of
# Collector.Subscribe, jobs made in memory and paced by the deliverer's credits) → the deliverer
# at its default flags → tools/bench/bench_receiver (one thread), all on 127.0.0.1. No collector
# and no storage, so the figure moves with the deliverer's own code and far less with the rest of
# the machine than run_delivery_bench.sh's. Prints one JSON line per round:
#   {"variant":…,"round":…,"jobs":…,"per_s":…,"deliverer_us":…,"receiver_us":…,"source_us":…}
# (µs of each process's CPU per delivery, from /proc and the source's getrusage).
#
#   tools/bench/run_deliverer_bench.sh                       # builds //deliverer and the tools
#   SKIP_BUILD=1 DELIVERERS="old=/tmp/a/deliverer new=/tmp/b/deliverer" ROUNDS=5 \
#     tools/bench/run_deliverer_bench.sh                     # an A/B, rounds interleaved
#
# PERF=DIR: also profiles the deliverer (perf record, call graphs, PERF_SECONDS = 4 s from 1 s
# after it starts) in every round and folds the stacks (tools/bench/flamegraph.py) into
# DIR/<variant>-<round>.folded, with the breakdown beside it.
# BATCH=max_events:max_bytes:max_wait_ms: the destination batches its webhooks (deliveries are
# then events, several per request).
# TLS=1: the receiver serves HTTPS (a fresh self-signed certificate the deliverer trusts with
# --ca_file), so each delivery's figure includes TLS on kept-alive connections.
# JOBS (300000) per round; DELIVERER_FLAGS are added to the deliverer's command line. Bounded:
# each round ends when the source has every outcome, or after ROUND_TIMEOUT (120) s. Needs jq.
set -euo pipefail
cd "$(dirname "$0")/../.."

JOBS=${JOBS:-300000}
ROUNDS=${ROUNDS:-3}
ROUND_TIMEOUT=${ROUND_TIMEOUT:-120}
DELIVERER_FLAGS=${DELIVERER_FLAGS:-}
PERF=${PERF:-}
TLS=${TLS:-}
BATCH=${BATCH:-}
PERF_SECONDS=${PERF_SECONDS:-4}
[[ -z "$PERF" ]] || mkdir -p "$PERF"

if [[ -z "${SKIP_BUILD:-}" ]]; then
  bazel build -c opt //deliverer:deliverer //tools/bench:job_source //tools/bench:bench_receiver >&2
  BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
  : "${DELIVERERS:=current=$BIN/deliverer/deliverer}"
  : "${JOB_SOURCE:=$BIN/tools/bench/job_source}" "${BENCH_RECEIVER:=$BIN/tools/bench/bench_receiver}"
fi
: "${DELIVERERS:?DELIVERERS=\"name=path ...\" with SKIP_BUILD}" "${JOB_SOURCE:?}" "${BENCH_RECEIVER:?}"

TMP=$(mktemp -d /tmp/hookrelay-deliverer-bench.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# wait_for_line FILE PATTERN PID: prints the first line of FILE matching PATTERN (10 s at most).
wait_for_line() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 100); do
    if grep -m1 -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited:" >&2; tail -20 "$file" >&2; return 1; }
    sleep 0.1
  done
  echo "no $pattern within 10 s in $file" >&2; return 1
}

run_round() {
  local name=$1 deliverer=$2 round=$3
  local tls_flags=() scheme=http
  if [[ -n "$TLS" ]]; then tls_flags=(--tls_cert_out="$TMP/receiver.pem"); scheme=https; fi
  "$BENCH_RECEIVER" --threads=1 "${tls_flags[@]}" >"$TMP/receiver.log" 2>&1 &
  local receiver=$!; PIDS+=("$receiver")
  local rport
  rport=$(wait_for_line "$TMP/receiver.log" '"msg":"listening"' "$receiver" | jq -r .port)
  local ca_flags=()
  [[ -z "$TLS" ]] || ca_flags=(--ca_file="$TMP/receiver.pem")
  local batch_flags=()
  [[ -z "$BATCH" ]] || batch_flags=(--batch="$BATCH")
  "$JOB_SOURCE" --url="$scheme://127.0.0.1:$rport/hooks" --jobs="$JOBS" "${batch_flags[@]}" >"$TMP/source.out" 2>"$TMP/source.err" &
  local source=$!; PIDS+=("$source")
  local sport
  sport=$(wait_for_line "$TMP/source.out" '"port"' "$source" | jq -r .port)
  # shellcheck disable=SC2086
  "$deliverer" --collector="127.0.0.1:$sport" --metrics_address=127.0.0.1:0 \
    --allow_private_networks "${ca_flags[@]}" $DELIVERER_FLAGS >"$TMP/deliverer.log" 2>&1 &
  local deliverer_pid=$!; PIDS+=("$deliverer_pid")
  local r0; r0=$(cpu_ticks "$receiver")
  local perf_pid=""
  if [[ -n "$PERF" ]]; then
    (sleep 1; exec timeout $((PERF_SECONDS + 20)) perf record -F 499 --call-graph=dwarf,16384 \
      -o "$TMP/perf.data" -p "$deliverer_pid" -- sleep "$PERF_SECONDS") >"$TMP/perf.log" 2>&1 &
    perf_pid=$!
  fi
  local waited=0
  while kill -0 "$source" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if (( waited > ROUND_TIMEOUT * 5 )); then echo "round timed out" >&2; kill "$source"; break; fi
  done
  local d1 r1
  d1=$(cpu_ticks "$deliverer_pid"); r1=$(cpu_ticks "$receiver")
  if [[ -n "$perf_pid" ]]; then
    wait "$perf_pid" || true
    timeout 300 perf script -i "$TMP/perf.data" 2>/dev/null |
      python3 tools/bench/flamegraph.py fold >"$PERF/$name-$round.folded" || true
    python3 tools/bench/flamegraph.py breakdown <"$PERF/$name-$round.folded" \
      >"$PERF/$name-$round.breakdown.md" || true
    rm -f "$TMP/perf.data"
  fi
  kill "$deliverer_pid" "$receiver" 2>/dev/null || true
  wait "$deliverer_pid" "$receiver" 2>/dev/null || true
  PIDS=()
  local summary; summary=$(grep '"jobs"' "$TMP/source.out" || echo '{}')
  jq -c --arg name "$name${TLS:+ (https)}" --argjson round "$round" --argjson d "$d1" --argjson r "$((r1 - r0))" \
    --argjson tick "$TICK" '{variant: $name, round: $round, jobs, delivered, per_s,
      deliverer_us: (if .delivered > 0 then ($d / $tick * 1e6 / .delivered * 10 | round / 10) else null end),
      receiver_us: (if .delivered > 0 then ($r / $tick * 1e6 / .delivered * 10 | round / 10) else null end),
      source_us: (if .delivered > 0 then (.cpu_s * 1e6 / .delivered * 10 | round / 10) else null end)}' \
    <<<"$summary"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" >&2
for round in $(seq 1 "$ROUNDS"); do
  for pair in $DELIVERERS; do
    run_round "${pair%%=*}" "${pair#*=}" "$round"
  done
done
