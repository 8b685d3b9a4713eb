#!/usr/bin/env bash
# A destination's backlog held back beside another destination (issue 23 §2): with $HELD_JOBS
# jobs queued for a throttled destination (rate_limit_per_second: 1, the way a receiver that is
# paused or slow holds its jobs), do another destination's jobs still go out at their full rate,
# and does the collector stay within its memory budget (RSS ≤ 256 MB)?
#
#   solo    a fresh collector (embedded engine), $FAST_EVENTS events for the fast destination
#           preloaded, then one deliverer (default flags) drains them; rate = jobs / (last − first
#           request) as the fast receiver saw them.
#   held    a fresh collector; $HELD_JOBS events for the held destination ingested first (no
#           deliverer: every job stays ready, as after a restart on such a backlog), then the same
#           $FAST_EVENTS for the fast one, then the deliverer. The fast destination's rate is
#           measured the same way; the held receiver's requests, the collector's RSS (peak and
#           during the drain, sampled every 0.5 s) and its CPU are reported.
# Prints both rates and their ratio (goal ≥ 0.9: "at its full rate" within the run-to-run
# spread), and the RSS figures (goal ≤ 256 MB).
#
#   tools/bench/run_held_backlog_bench.sh                       # 10,000,000 held: the documented run
#   HELD_JOBS=2000000 tools/bench/run_held_backlog_bench.sh     # a shorter one
#   SMOKE=1 tools/bench/run_held_backlog_bench.sh               # 100,000 held, 5,000 fast: the script works
#   SETTLE=90 tools/bench/run_held_backlog_bench.sh              # let compactions of the backlog finish first
#   PERF=1 RESULTS=/tmp/held tools/bench/run_held_backlog_bench.sh  # perf profile of the collector, 5 s of each drain
#   SKIP_BUILD=1 BIN_DIR=$(bazel info -c opt bazel-bin) RESULTS=/tmp/held tools/bench/run_held_backlog_bench.sh
#
# Bounded: the build BUILD_TIMEOUT (600 s), the held ingest INGEST_TIMEOUT (1800 s), each drain
# DRAIN_TIMEOUT (300 s). Everything on 127.0.0.1, ports chosen by the OS. Needs about 250 B of
# disk per held job under $TMPDIR (default /tmp). Needs jq, curl, python3.
set -euo pipefail

cd "$(dirname "$0")/../.."
WORKSPACE=$(pwd)

HELD_JOBS=${HELD_JOBS:-10000000}
FAST_EVENTS=${FAST_EVENTS:-200000}
if [[ -n "${SMOKE:-}" ]]; then HELD_JOBS=100000; FAST_EVENTS=5000; fi  # held: past the 64k window
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
INGEST_TIMEOUT=${INGEST_TIMEOUT:-1800}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-300}
# Seconds to wait after the held ingest, before the fast destination's events: RocksDB's
# compactions of the fresh backlog (minutes of work for 10M jobs) compete for the same cores.
SETTLE=${SETTLE:-0}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/hookrelay-held-bench.XXXXXX")
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "${RESULTS:-}" ]]; then
    mkdir -p "$RESULTS"
    cp "$TMP"/*.log "$TMP"/*.txt "$TMP"/*.yaml "$RESULTS"/ 2>/dev/null || true
    cp "$TMP"/*.perf.data "$RESULTS"/ 2>/dev/null || true
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "${SKIP_BUILD:-}" ]]; then
  echo "== building (bazel build -c opt //collector:collector //deliverer:deliverer //tools/bench:ingest_load //tools/bench:bench_receiver)"
  timeout "$BUILD_TIMEOUT" bazel build -c opt //collector:collector //deliverer:deliverer \
    //tools/bench:ingest_load //tools/bench:bench_receiver >"$TMP/build.log" 2>&1 \
    || { tail -30 "$TMP/build.log"; exit 1; }
  BIN_DIR=$(bazel info -c opt bazel-bin)
fi
BIN_DIR=${BIN_DIR:-$WORKSPACE/bazel-bin}

mb() { awk '/^'"$2"':/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$1/stat"; }

wait_for_line() {  # FILE PATTERN PID: up to 60 s
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 600); do
    if grep -m1 -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited:" >&2; tail -20 "$file" >&2; return 1; }
    sleep 0.1
  done
  echo "no $pattern within 60 s in $file" >&2; return 1
}

start_receiver() {  # NAME ARGS...: sets RPID RPORT
  local name=$1; shift
  "$BIN_DIR/tools/bench/bench_receiver" "$@" >"$TMP/$name.log" 2>&1 &
  RPID=$!; PIDS+=("$RPID")
  RPORT=$(wait_for_line "$TMP/$name.log" '"msg":"listening"' "$RPID" | jq -r .port)
}

ready_jobs() {  # METRICS_PORT
  curl -sf --max-time 5 "http://127.0.0.1:$1/metrics" |
    awk '/^hookrelay_jobs\{state="ready",/ { s += $2 } END { printf "%.0f", s }'
}

# ingest PORT WRITE_KEY EVENTS: closed loop until the store holds that many more ready jobs.
ingest() {
  local http=$1 key=$2 events=$3 metrics=$4 before target
  before=$(ready_jobs "$metrics"); target=$(( before + events ))
  "$BIN_DIR/tools/bench/ingest_load" --mode=http --target="127.0.0.1:$http" --write_key="$key" \
    --connections=32 --events_per_request=100 --event_bytes=300 \
    --duration="${INGEST_TIMEOUT}s" --warmup=0s --omit_timestamp >"$TMP/ingest.$key.log" 2>&1 &
  local lpid=$!; PIDS+=("$lpid")
  local deadline=$(( SECONDS + INGEST_TIMEOUT )) n=0 last=$SECONDS
  while (( SECONDS < deadline )); do
    n=$(ready_jobs "$metrics")
    (( n >= target )) && break
    kill -0 "$lpid" 2>/dev/null || { tail -20 "$TMP/ingest.$key.log"; echo "ingest_load exited" >&2; exit 1; }
    if (( SECONDS - last >= 30 )); then echo "   … $(( n - before )) of $events stored" >&2; last=$SECONDS; fi
    sleep 0.5
  done
  kill "$lpid" 2>/dev/null || true; wait "$lpid" 2>/dev/null || true
  (( n >= target )) || { echo "only $(( n - before )) of $events stored within ${INGEST_TIMEOUT} s" >&2; exit 1; }
}

run() {  # NAME HELD(0|1): prints "rate held_requests rss_peak rss_drain_max collector_cpu"
  local name=$1 held=$2
  start_receiver "$name.fast" --report_interval=200ms
  local fast_pid=$RPID fast_port=$RPORT
  start_receiver "$name.held" --report_interval=1s
  local held_pid=$RPID held_port=$RPORT
  cat >"$TMP/$name.yaml" <<EOF
sources:
  - {id: held-src, name: Held backlog, kind: server, write_keys: [wk_held]}
  - {id: fast-src, name: Fast destination, kind: server, write_keys: [wk_fast]}
destinations:
  - id: held-hook
    type: webhooks
    sources: [held-src]
    enabled: true
    shared_secret: bench-s3cr3t
    urls: [{url: "http://127.0.0.1:$held_port/hooks"}]
    options: {rate_limit_per_second: 1}
  - id: fast-hook
    type: webhooks
    sources: [fast-src]
    enabled: true
    shared_secret: bench-s3cr3t
    urls: [{url: "http://127.0.0.1:$fast_port/hooks"}]
EOF
  "$BIN_DIR/collector/collector" --config="$TMP/$name.yaml" --data_dir="$TMP/$name.data" \
    --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
    --admin_http_address=127.0.0.1:0 >"$TMP/$name.collector.log" 2>&1 &
  local cpid=$!; PIDS+=("$cpid")
  local serving http grpc metrics
  serving=$(wait_for_line "$TMP/$name.collector.log" '"msg":"collector serving"' "$cpid")
  http=$(jq -r .http_port <<<"$serving"); grpc=$(jq -r .grpc_port <<<"$serving")
  metrics=$(jq -r .metrics_port <<<"$serving")
  ( while kill -0 "$cpid" 2>/dev/null; do
      echo "$(date +%s.%N) $(mb "$cpid" VmRSS) $(mb "$cpid" VmHWM)"; sleep 0.5
    done ) >"$TMP/$name.rss.txt" &
  PIDS+=("$!")
  if (( held )); then
    echo "   $name: ingesting $HELD_JOBS events for the held destination" >&2
    ingest "$http" wk_held "$HELD_JOBS" "$metrics"
    echo "   $name: $(ready_jobs "$metrics") jobs ready, RSS $(mb "$cpid" VmRSS) MB, on disk $(du -sh "$TMP/$name.data" | cut -f1)" >&2
    if (( SETTLE > 0 )); then
      echo "   $name: waiting ${SETTLE} s (compactions; collector CPU so far $(cpu_s "$cpid") s)" >&2
      sleep "$SETTLE"
      echo "   $name: collector CPU $(cpu_s "$cpid") s after the wait" >&2
    fi
  fi
  ingest "$http" wk_fast "$FAST_EVENTS" "$metrics"
  local cpu_before; cpu_before=$(cpu_s "$cpid")
  local drain_start; drain_start=$(date +%s.%N)
  "$BIN_DIR/deliverer/deliverer" --collector="127.0.0.1:$grpc" --metrics_address=127.0.0.1:0 \
    --allow_private_networks >"$TMP/$name.deliverer.log" 2>&1 &
  local dpid=$!; PIDS+=("$dpid")
  if [[ -n "${PERF:-}" ]]; then  # PERF=1: profile the collector for 5 s once the fast drain runs
    ( for _ in $(seq 1 600); do grep -q '"total":[1-9]' "$TMP/$name.fast.log" 2>/dev/null && break; sleep 0.1; done
      timeout 30 perf record -F 499 -g -o "$TMP/$name.collector.perf.data" -p "$cpid" -- sleep 5 \
        >"$TMP/$name.perf.log" 2>&1
      perf report -i "$TMP/$name.collector.perf.data" --no-children --stdio 2>/dev/null | head -120 \
        >"$TMP/$name.perf.txt" ) &
  fi
  local deadline=$(( SECONDS + DRAIN_TIMEOUT )) total=0 line
  while (( total < FAST_EVENTS && SECONDS < deadline )); do
    sleep 0.2
    line=$(tail -n 1 "$TMP/$name.fast.log" 2>/dev/null || true)
    [[ $line =~ \"total\":([0-9]+) ]] && total=${BASH_REMATCH[1]}
  done
  local cpu; cpu=$(python3 -c "print(round($(cpu_s "$cpid") - $cpu_before, 1))")
  curl -s --max-time 5 "http://127.0.0.1:$metrics/metrics" >"$TMP/$name.metrics.txt" || true
  kill "$fast_pid" "$held_pid" 2>/dev/null || true
  wait "$fast_pid" "$held_pid" 2>/dev/null || true
  local hwm; hwm=$(mb "$cpid" VmHWM)
  local drain_max
  drain_max=$(awk -v t="$drain_start" '$1 >= t && $2 > m { m = $2 } END { print m + 0 }' "$TMP/$name.rss.txt")
  kill "$dpid" "$cpid" 2>/dev/null || true
  wait "$dpid" "$cpid" 2>/dev/null || true
  rm -rf "$TMP/$name.data"
  if (( total < FAST_EVENTS )); then
    echo "FAIL: $name: the fast receiver got $total of $FAST_EVENTS within ${DRAIN_TIMEOUT} s" >&2
    exit 1
  fi
  local rate held_requests
  rate=$(grep '"msg":"summary"' "$TMP/$name.fast.log" | tail -1 | jq -r '.rate_per_s // 0')
  held_requests=$(grep '"msg":"summary"' "$TMP/$name.held.log" | tail -1 | jq -r '.requests // 0')
  echo "$rate $held_requests $hwm $drain_max $cpu"
}

echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')," \
  "$(awk '/MemTotal/ { printf "%.1f GB", $2 / 1048576 }' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== held jobs: $HELD_JOBS (rate_limit_per_second: 1); fast destination: $FAST_EVENTS events"
solo_out=$(run solo 0); read -r solo_rate _ solo_hwm solo_drain solo_cpu <<<"$solo_out"
echo "solo:  fast destination $solo_rate/s; collector RSS peak $solo_hwm MB, during the drain ≤ $solo_drain MB, CPU $solo_cpu s"
held_out=$(run held 1); read -r held_rate held_requests held_hwm held_drain held_cpu <<<"$held_out"
echo "held:  fast destination $held_rate/s beside $HELD_JOBS held jobs ($held_requests requests reached the held receiver); collector RSS peak $held_hwm MB, during the drain ≤ $held_drain MB, CPU $held_cpu s"
grep -E '^hookrelay_(dispatch_deferred_total|jobs\{)' "$TMP/held.metrics.txt" 2>/dev/null | sed 's/^/  collector: /' || true
python3 - "$solo_rate" "$held_rate" "$held_hwm" <<'EOF'
import sys
solo, held, hwm = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
ratio = held / solo if solo else 0
print(f"ratio: {ratio:.2f} of the solo rate (goal >= 0.90); RSS peak {hwm:.0f} MB (goal <= 256 MB)")
EOF
