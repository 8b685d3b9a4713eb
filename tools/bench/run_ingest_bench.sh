#!/usr/bin/env bash
# Ingest benchmark: builds the collector and //tools/bench:ingest_load with -c opt, starts one
# collector on a fresh temporary data directory (every port 0, read back from its log), and runs
#   1. HTTP  POST /v1/batch, closed loop, $HTTP_CONNECTIONS keep-alive connections
#   2. gRPC  Collector/Ingest, closed loop, $GRPC_CALLS calls in flight
#   3. HTTP  open loop at half the rate measured in 1 (acknowledgement latency at that rate)
#   4. gRPC  open loop at half the rate measured in 2
# then prints a summary, stops the collector with SIGTERM and removes the directory.
#
#   tools/bench/run_ingest_bench.sh                 # about 80 s of runs once built
#   DURATION=10s WARMUP=2s tools/bench/run_ingest_bench.sh
#   SKIP_BUILD=1 COLLECTOR=path INGEST_LOAD=path tools/bench/run_ingest_bench.sh
#   IDLE_WAIT=120 tools/bench/run_ingest_bench.sh   # shared machine: wait for quiet before runs
#   OPEN_RATES="10000 30000 50000" tools/bench/run_ingest_bench.sh   # + HTTP open loops at those rates
#
# Bounded: every step has a timeout (the build BUILD_TIMEOUT, default 600 s, of which a cached
# build needs seconds unless other bazel commands hold the workspace; each load run duration +
# warm-up + 25 s; the defaults make about 80 s of runs), and the collector is stopped on any
# exit. Traffic stays on 127.0.0.1. With RESULTS=DIR, each run's output and the summary are kept
# there.
set -euo pipefail

cd "$(dirname "$0")/../.."
WORKSPACE=$(pwd)

DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
HTTP_CONNECTIONS=${HTTP_CONNECTIONS:-64}
GRPC_CALLS=${GRPC_CALLS:-64}
GRPC_CHANNELS=${GRPC_CHANNELS:-1}
EVENTS_PER_REQUEST=${EVENTS_PER_REQUEST:-100}
EVENT_BYTES=${EVENT_BYTES:-300}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
CONFIG=${CONFIG:-deploy/local/config.yaml}
WRITE_KEY=${WRITE_KEY:-wk_live_123}

seconds() {  # "15s" / "1m" / "500ms" -> seconds (float)
  python3 -c 'import re,sys
m=re.fullmatch(r"([0-9.]+)(ms|s|m)?",sys.argv[1]); print(float(m.group(1))*{"ms":0.001,"s":1,"m":60}[m.group(2) or "s"])' "$1"
}
DURATION_S=$(seconds "$DURATION")
WARMUP_S=$(seconds "$WARMUP")
RUN_TIMEOUT=$(python3 -c "import math; print(math.ceil($DURATION_S + $WARMUP_S + 25))")

TMP=$(mktemp -d /tmp/hookrelay-ingest-bench.XXXXXX)
COLLECTOR_PID=""
cleanup() {
  local rc=$?
  if [[ -n "$COLLECTOR_PID" ]] && kill -0 "$COLLECTOR_PID" 2>/dev/null; then
    kill -TERM "$COLLECTOR_PID" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$COLLECTOR_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$COLLECTOR_PID" 2>/dev/null; then
      echo "collector did not stop within 10 s of SIGTERM; killing it" >&2
      kill -KILL "$COLLECTOR_PID" 2>/dev/null || true
    fi
    wait "$COLLECTOR_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
  echo "== building (bazel build -c opt //collector:collector //tools/bench:ingest_load)"
  BUILD_START=$SECONDS
  timeout "$BUILD_TIMEOUT" bazel build -c opt //collector:collector //tools/bench:ingest_load \
    >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; exit 1; }
  # Not `bazel info`: it would queue behind other people's bazel commands. bazel-out is the same
  # for every configuration; bazel-bin follows whoever built last.
  case "$(uname -m)" in x86_64) CPU=k8 ;; *) CPU=$(uname -m) ;; esac
  BIN=$WORKSPACE/bazel-out/$CPU-opt/bin
  COLLECTOR=$BIN/collector/collector
  INGEST_LOAD=$BIN/tools/bench/ingest_load
  echo "   built in $(( SECONDS - BUILD_START )) s"
fi
# Private copies: other builds in this workspace may replace bazel-bin's files mid-run.
cp "${COLLECTOR:?}" "$TMP/collector"
cp "${INGEST_LOAD:?}" "$TMP/ingest_load"

# --- collector ---------------------------------------------------------------------------------
"$TMP/collector" --config="$WORKSPACE/$CONFIG" --data_dir="$TMP/data" \
  --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
    --admin_http_address=127.0.0.1:0 \
  >"$TMP/collector.log" 2>&1 &
COLLECTOR_PID=$!
for _ in $(seq 1 100); do
  grep -q '"msg":"collector serving"' "$TMP/collector.log" && break
  kill -0 "$COLLECTOR_PID" 2>/dev/null || { cat "$TMP/collector.log"; echo "collector exited" >&2; exit 1; }
  sleep 0.1
done
SERVING=$(grep -m1 '"msg":"collector serving"' "$TMP/collector.log") \
  || { cat "$TMP/collector.log"; echo "collector did not start within 10 s" >&2; exit 1; }
HTTP_PORT=$(jq -r .http_port <<<"$SERVING")
GRPC_PORT=$(jq -r .grpc_port <<<"$SERVING")
METRICS_PORT=$(jq -r .metrics_port <<<"$SERVING")
echo "== collector pid $COLLECTOR_PID: http 127.0.0.1:$HTTP_PORT grpc 127.0.0.1:$GRPC_PORT" \
  "metrics 127.0.0.1:$METRICS_PORT data $TMP/data"
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"

CLK_TCK=$(getconf CLK_TCK)
# "<collector utime+stime> <machine busy> <machine total>", all in clock ticks.
cpu_sample() {
  echo "$(awk '{ print $14 + $15 }' "/proc/$COLLECTOR_PID/stat")" \
       "$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat)"
}

# With IDLE_WAIT=N (seconds), waits up to N s before each run for the rest of the machine to
# quiet down (under 25% of one core busy over 2 s); on a shared machine this keeps other
# people's builds out of the figures. Off by default, to keep the run time bounded.
wait_idle() {
  local deadline=$(( SECONDS + ${IDLE_WAIT:-0} )) a b busy
  while (( SECONDS < deadline )); do
    a=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat)
    sleep 2
    b=$(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat)
    busy=$(python3 -c 'import sys,os
a=list(map(float,sys.argv[1].split())); b=list(map(float,sys.argv[2].split()))
print(int(100*os.cpu_count()*(b[0]-a[0])/(b[1]-a[1])))' "$a" "$b")
    (( busy < 25 )) && return 0
    echo "   machine busy ${busy}% (of one core) before the run; waiting"
  done
}

# run NAME MODE PORT CONNECTIONS RATE: one ingest_load run. Leaves its RESULT JSON in
# $TMP/NAME.json and, in $TMP/NAME.cpu, CPU use over the measurement window (sampled from here,
# so within ~0.1 s of the generator's own window): the collector's, the whole machine's, in % of
# one core.
run() {
  local name=$1 mode=$2 port=$3 connections=$4 rate=$5
  echo
  wait_idle
  echo "== $name: ingest_load --mode=$mode --connections=$connections --rate=$rate"
  (
    sleep "$(python3 -c "print($WARMUP_S + 0.15)")"; a=$(cpu_sample); t0=$(date +%s.%N)
    sleep "$DURATION_S"; b=$(cpu_sample); t1=$(date +%s.%N)
    python3 -c 'import sys
a=list(map(float,sys.argv[1].split())); b=list(map(float,sys.argv[2].split())); tck=float(sys.argv[3])
wall=float(sys.argv[5])-float(sys.argv[4]); share=(b[1]-a[1])/(b[2]-a[2])
import os; ncpu=os.cpu_count()
print("%.0f %.0f" % (100*(b[0]-a[0])/tck/wall, 100*share*ncpu))' "$a" "$b" "$CLK_TCK" "$t0" "$t1" >"$TMP/$name.cpu"
  ) &
  local sampler=$!
  timeout "$RUN_TIMEOUT" "$TMP/ingest_load" --mode="$mode" --target="127.0.0.1:$port" \
    --write_key="$WRITE_KEY" --connections="$connections" --grpc_channels="$GRPC_CHANNELS" \
    --events_per_request="$EVENTS_PER_REQUEST" --event_bytes="$EVENT_BYTES" \
    --duration="$DURATION" --warmup="$WARMUP" --rate="$rate" | tee "$TMP/$name.out" || true
  wait "$sampler" || echo "0 0" >"$TMP/$name.cpu"
  grep '^RESULT ' "$TMP/$name.out" | sed 's/^RESULT //' >"$TMP/$name.json" || echo '{}' >"$TMP/$name.json"
  read -r coll machine <"$TMP/$name.cpu"
  jq -r --argjson coll "$coll" --argjson machine "$machine" '
    "collector cpu:     \($coll)% of one core; whole machine busy \($machine)% (of \(100 * '"$(nproc)"')%);" +
    " collector \(if .durable_events > 0 then (10 * $coll / 100 * .window_s * 1e6 / .durable_events | floor) / 10 else 0 end) us CPU per durable event"' \
    "$TMP/$name.json"
}

half_rate() { jq -r '((.durable_events_per_s // 0) / 2 | floor)' "$TMP/$1.json"; }

run http_closed http "$HTTP_PORT" "$HTTP_CONNECTIONS" 0
run grpc_closed grpc "$GRPC_PORT" "$GRPC_CALLS" 0
HTTP_HALF=$(half_rate http_closed)
GRPC_HALF=$(half_rate grpc_closed)
if (( HTTP_HALF > 0 )); then run http_open http "$HTTP_PORT" "$HTTP_CONNECTIONS" "$HTTP_HALF"; fi
if (( GRPC_HALF > 0 )); then run grpc_open grpc "$GRPC_PORT" "$GRPC_CALLS" "$GRPC_HALF"; fi
# OPEN_RATES="10000 30000 ...": also HTTP open loops at those rates (acknowledgement latency
# against load: where the p99 starts to climb).
CURVE=()
for rate in ${OPEN_RATES:-}; do
  run "http_open_$rate" http "$HTTP_PORT" "$HTTP_CONNECTIONS" "$rate"
  CURVE+=("http_open_$rate")
done

# --- summary -----------------------------------------------------------------------------------
summary() {
echo "== summary ($EVENTS_PER_REQUEST events of ~$EVENT_BYTES B per request, $DURATION measured after $WARMUP warm-up)"
printf '%-16s %10s %8s %13s %8s %8s %8s %8s %6s %6s %6s %7s  %s\n' run offered/s ok_reqs durable_ev/s \
  p50_ms p90_ms p99_ms max_ms coll% gen% other% us/ev failures
for name in http_closed grpc_closed http_open grpc_open "${CURVE[@]}"; do
  [[ -f "$TMP/$name.json" ]] || continue
  read -r coll machine <"$TMP/$name.cpu"
  jq -r --arg name "$name" --argjson coll "$coll" --argjson machine "$machine" '
    (100 * .client_cpu_s / .window_s | floor) as $gen |
    [$name,
     (if .rate == 0 then "closed" else (.rate|tostring) end),
     .ok_requests, .durable_events_per_s, .p50_ms, .p90_ms, .p99_ms, .max_ms, $coll, $gen,
     ([$machine - $coll - $gen, 0] | max),
     (if .durable_events > 0 then $coll / 100 * .window_s * 1e6 / .durable_events else 0 end),
     (.failures | to_entries | map("\(.key)=\(.value)") | join(",") | if . == "" then "-" else . end)]
    | @tsv' "$TMP/$name.json" 2>/dev/null |
    awk -F'\t' '{ printf "%-16s %10s %8s %13s %8.2f %8.2f %8.2f %8.2f %6s %6s %6s %7.1f  %s\n",
                  $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 }'
done
echo "coll%/gen%/other%: CPU of the collector / the load generator / everything else on the machine"
echo "during the measured window, in % of one core ($(nproc) cores = $(( 100 * $(nproc) ))%); us/ev: collector CPU per durable event"
echo "targets: http >= 150000 ev/s, grpc >= 200000 ev/s (closed loop); p99 <= 20 ms at half rate (open loop)"
echo "store on disk after the runs: $(du -sh "$TMP/data" | cut -f1)"
}
echo
summary | tee "$TMP/summary.txt"
if [[ -n "${RESULTS:-}" ]]; then
  mkdir -p "$RESULTS"
  cp "$TMP"/*.out "$TMP"/*.json "$TMP"/*.cpu "$TMP/summary.txt" "$TMP/collector.log" "$RESULTS"/
  cp "$TMP/data/LOG" "$RESULTS/rocksdb.LOG" 2>/dev/null || true
  echo "results kept in $RESULTS"
fi
