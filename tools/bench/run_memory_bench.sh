#!/usr/bin/env bash
# Collector memory and start-up with a backlog (issue 14 §2): builds the collector and
# //tools/bench:ingest_load with -c opt, starts one collector on a fresh data directory with no
# deliverer connected (receivers down: every job stays ready), ingests until the store holds
# $JOBS jobs (HTTP /v1/batch, closed loop), then
#   - RSS during ingest (VmHWM, the peak) and after it (VmRSS, 5 s after the last append),
#   - stops the collector (SIGTERM), restarts it on the same directory and measures the time
#     from exec to the "collector serving" log line and to /healthz answering 200,
#   - RSS after the restart (at healthy, and 10 s later) and its peak (VmHWM),
#   - checks that hookrelay_jobs{state="ready"} still counts every job.
# Every figure is read from /proc/PID/status (VmRSS, VmHWM), every 0.5 s during the ingest.
#
#   tools/bench/run_memory_bench.sh                  # 10,000,000 jobs: the documented run
#   JOBS=1000000 tools/bench/run_memory_bench.sh
#   SMOKE=1 tools/bench/run_memory_bench.sh          # 20,000 jobs: the script works, no figure
#   SKIP_BUILD=1 BIN_DIR=bazel-bin tools/bench/run_memory_bench.sh
#   RESULTS=/tmp/mem-bench tools/bench/run_memory_bench.sh   # keep logs and samples
#
# Bounded: the build BUILD_TIMEOUT (600 s), the ingest INGEST_TIMEOUT (default 1800 s), each
# start 60 s; the collector and the load generator are stopped on any exit. Needs about 250 B of
# disk per job (2.5 GB for 10M) under $TMPDIR (default /tmp).
set -euo pipefail

cd "$(dirname "$0")/../.."
WORKSPACE=$(pwd)

JOBS=${JOBS:-10000000}
if [[ -n "${SMOKE:-}" ]]; then JOBS=20000; fi
CONNECTIONS=${CONNECTIONS:-32}
EVENTS_PER_REQUEST=${EVENTS_PER_REQUEST:-100}
EVENT_BYTES=${EVENT_BYTES:-300}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
INGEST_TIMEOUT=${INGEST_TIMEOUT:-1800}
CONFIG=${CONFIG:-deploy/local/config.yaml}  # one source, one webhook destination: 1 job/event
WRITE_KEY=${WRITE_KEY:-wk_live_123}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hookrelay-memory-bench.XXXXXX")
COLLECTOR_PID=""
LOAD_PID=""
SAMPLER_PID=""
stop_pid() {  # stop_pid PID: SIGTERM, up to 60 s, then SIGKILL
  local pid=$1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "pid $pid did not stop within 60 s of SIGTERM; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  stop_pid "$SAMPLER_PID"
  stop_pid "$LOAD_PID"
  stop_pid "$COLLECTOR_PID"
  if [[ -n "${RESULTS:-}" ]]; then
    mkdir -p "$RESULTS"
    cp "$TMP"/*.log "$TMP"/*.txt "$RESULTS"/ 2>/dev/null || true
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
  echo "== building (bazel build -c opt //collector:collector //tools/bench:ingest_load)"
  timeout "$BUILD_TIMEOUT" bazel build -c opt //collector:collector //tools/bench:ingest_load \
    >"$TMP/build.log" 2>&1 || { tail -30 "$TMP/build.log"; exit 1; }
  case "$(uname -m)" in x86_64) CPU=k8 ;; *) CPU=$(uname -m) ;; esac
  BIN_DIR=$WORKSPACE/bazel-out/$CPU-opt/bin
fi
BIN_DIR=${BIN_DIR:-$WORKSPACE/bazel-bin}
cp "$BIN_DIR/collector/collector" "$TMP/collector"
cp "$BIN_DIR/tools/bench/ingest_load" "$TMP/ingest_load"

# --- helpers -----------------------------------------------------------------------------------
# mb PID FIELD: a /proc/PID/status field (VmRSS, VmHWM) in MB.
mb() { awk '/^'"$2"':/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }
now() { date +%s.%N; }

# start_collector LOG: starts it, waits for "collector serving" (60 s), sets COLLECTOR_PID,
# METRICS_PORT, HTTP_PORT and SERVING_S (seconds from exec to the line).
start_collector() {
  local log=$1 t0
  t0=$(now)
  "$TMP/collector" --config="$WORKSPACE/$CONFIG" --data_dir="$TMP/data" \
    --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
    --admin_http_address=127.0.0.1:0 >"$log" 2>&1 &
  COLLECTOR_PID=$!
  for _ in $(seq 1 3000); do
    grep -q '"msg":"collector serving"' "$log" && break
    kill -0 "$COLLECTOR_PID" 2>/dev/null || { tail -20 "$log"; echo "collector exited" >&2; exit 1; }
    sleep 0.02
  done
  SERVING_S=$(python3 -c "print(round($(now) - $t0, 2))")
  local serving
  serving=$(grep -m1 '"msg":"collector serving"' "$log") \
    || { tail -20 "$log"; echo "collector did not start within 60 s" >&2; exit 1; }
  HTTP_PORT=$(jq -r .http_port <<<"$serving")
  METRICS_PORT=$(jq -r .metrics_port <<<"$serving")
  for _ in $(seq 1 3000); do
    curl -sf -o /dev/null "http://127.0.0.1:$METRICS_PORT/healthz" && break
    sleep 0.02
  done
  HEALTHY_S=$(python3 -c "print(round($(now) - $t0, 2))")
}
ready_jobs() {
  curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" |
    awk '/^hookrelay_jobs\{state="ready",/ { printf "%.0f", $2; found = 1 } END { if (!found) print 0 }'
}

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
  "$(awk '/MemTotal/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"

# --- 1. ingest with receivers down -------------------------------------------------------------
start_collector "$TMP/collector1.log"
echo "== collector pid $COLLECTOR_PID (no deliverer: every job stays ready); target $JOBS jobs"
( while kill -0 "$COLLECTOR_PID" 2>/dev/null; do
    echo "$(date +%s) $(mb "$COLLECTOR_PID" VmRSS) $(mb "$COLLECTOR_PID" VmHWM)"; sleep 0.5
  done ) >"$TMP/rss_samples.txt" &
SAMPLER_PID=$!
INGEST_START=$(now)
"$TMP/ingest_load" --mode=http --target="127.0.0.1:$HTTP_PORT" --write_key="$WRITE_KEY" \
  --connections="$CONNECTIONS" --events_per_request="$EVENTS_PER_REQUEST" \
  --event_bytes="$EVENT_BYTES" --duration="${INGEST_TIMEOUT}s" --warmup=0s >"$TMP/ingest_load.log" 2>&1 &
LOAD_PID=$!
deadline=$(( SECONDS + INGEST_TIMEOUT ))
stored=0
while (( SECONDS < deadline )); do
  stored=$(ready_jobs)
  (( stored >= JOBS )) && break
  kill -0 "$LOAD_PID" 2>/dev/null || { tail -20 "$TMP/ingest_load.log"; echo "ingest_load exited" >&2; exit 1; }
  sleep 1
done
stop_pid "$LOAD_PID"; LOAD_PID=""
INGEST_S=$(python3 -c "print(round($(now) - $INGEST_START, 1))")
sleep 5
stored=$(ready_jobs)
RSS_AFTER_INGEST=$(mb "$COLLECTOR_PID" VmRSS)
HWM_INGEST=$(mb "$COLLECTOR_PID" VmHWM)
stop_pid "$SAMPLER_PID"; SAMPLER_PID=""
echo "   stored $stored jobs in ${INGEST_S} s; RSS peak ${HWM_INGEST} MB, after ingest ${RSS_AFTER_INGEST} MB"
echo "   on disk: $(du -sh "$TMP/data" | cut -f1)"

# --- 2. restart on the backlog -----------------------------------------------------------------
stop_pid "$COLLECTOR_PID"; COLLECTOR_PID=""
start_collector "$TMP/collector2.log"
RSS_AT_HEALTHY=$(mb "$COLLECTOR_PID" VmRSS)
sleep 10
RSS_AFTER_RESTART=$(mb "$COLLECTOR_PID" VmRSS)
HWM_RESTART=$(mb "$COLLECTOR_PID" VmHWM)
READY_AFTER=$(ready_jobs)

{
echo "== summary: $stored jobs (${EVENT_BYTES} B events, 1 job each), receivers down"
printf '%-40s %10s\n' "RSS peak during ingest (VmHWM)" "${HWM_INGEST} MB"
printf '%-40s %10s\n' "RSS after ingest (VmRSS, +5 s)" "${RSS_AFTER_INGEST} MB"
printf '%-40s %10s\n' "restart: exec -> \"collector serving\"" "${SERVING_S} s"
printf '%-40s %10s\n' "restart: exec -> /healthz 200" "${HEALTHY_S} s"
printf '%-40s %10s\n' "RSS at healthy after restart" "${RSS_AT_HEALTHY} MB"
printf '%-40s %10s\n' "RSS 10 s after restart" "${RSS_AFTER_RESTART} MB"
printf '%-40s %10s\n' "RSS peak after restart (VmHWM)" "${HWM_RESTART} MB"
printf '%-40s %10s\n' "ready jobs after restart (metrics)" "$READY_AFTER"
echo "targets (issue 14): RSS <= 256 MB during ingest and after restart; healthy <= 2 s"
} | tee "$TMP/summary.txt"
if (( READY_AFTER < stored )); then
  echo "FAIL: the restarted collector counts $READY_AFTER ready jobs, $stored were stored" >&2
  exit 1
fi
