#!/usr/bin/env bash
# Delivery benchmark: collector, deliverer and a fast local receiver (//tools/bench:bench_receiver)
# on the same machine, every listener on 127.0.0.1 with a port of 0. Builds with -c opt, then:
#
#   0. capture     one event through the whole pipeline; the receiver keeps the request the
#                  deliverer sent (body and headers), for 1.
#   1. ceiling     wrk -t$WRK_THREADS -c$WRK_CONNECTIONS POSTs that request to a fresh receiver for
#                  $CEILING_DURATION s, $CEILING_RUNS times: what the receiver can take on this
#                  machine (the best run).
#   2. throughput  for each "sender_threads:credits[:max_host_connections]" (0 = the deliverer's
#                  derived default) of
#                  $THROUGHPUT_VARIANTS: fresh collector and receiver, $PRELOAD_EVENTS events
#                  preloaded with no deliverer running, then a deliverer started with those flags;
#                  deliveries/s = jobs / (last request − first request) as the receiver saw them.
#                  Also the CPU of each process (and per thread) while the backlog drained.
#   3. latency     fresh collector + deliverer (default flags) + receiver; ingest_load open loop at
#                  $LATENCY_RATE events/s, events without a timestamp (the collector stamps its
#                  receipt time), for $DURATION_LATENCY s after $WARMUP_LATENCY s; the receiver's
#                  now − timestamp is the end-to-end latency.
#   4. memory      the same as 3 for $DURATION_MEMORY s (default 600), the deliverer's VmRSS (and
#                  the collector's and receiver's) sampled every $MEM_SAMPLE_INTERVAL s.
# then prints a summary and stops everything (on any exit), removing the temporary directory.
#
#   tools/bench/run_delivery_bench.sh                       # ~20 min once built (10 of them memory)
#   DURATION_MEMORY=60 tools/bench/run_delivery_bench.sh    # shorter memory phase
#   PHASES="ceiling throughput" THROUGHPUT_VARIANTS="0:0:0 2:128:128" tools/bench/run_delivery_bench.sh
#   PHASES=throughput THROUGHPUT_VARIANTS=0:0:0 PERF=1 tools/bench/run_delivery_bench.sh  # + profile
#   RESULTS=/tmp/delivery-bench tools/bench/run_delivery_bench.sh   # keep every log there
#   IDLE_WAIT=60 tools/bench/run_delivery_bench.sh          # shared machine: wait for quiet first
#   SMOKE=1 tools/bench/run_delivery_bench.sh               # seconds per phase: a check that it works
#   ORDERING=per_user USERS=10000 PHASES=throughput THROUGHPUT_VARIANTS=0:0:0 \
#     tools/bench/run_delivery_bench.sh                     # per-user order, 10,000 users
#   BATCH=100:500000:1000 PHASES="throughput latency" THROUGHPUT_VARIANTS=0:0:0 \
#     tools/bench/run_delivery_bench.sh                     # batched webhooks (deliveries = events)
#   SMOKE=1 SKIP_BUILD=1 BIN_DIR=$(bazel info bazel-bin) tools/bench/run_delivery_bench.sh  # prebuilt
#   TLS=1 PHASES="ceiling throughput" THROUGHPUT_VARIANTS=0:0:0 tools/bench/run_delivery_bench.sh
#                                                           # HTTPS receivers (the ceiling stays HTTP)
#
# Bounded: the build has BUILD_TIMEOUT (default 600 s), every start-up 10 s, every load run its
# duration + 30 s, each throughput drain THROUGHPUT_TIMEOUT (default 180 s), IDLE_WAIT at most its
# value per measurement. Traffic stays on 127.0.0.1. Needs wrk, jq, curl, python3 (perf for PERF=1).
set -euo pipefail

cd "$(dirname "$0")/../.."
WORKSPACE=$(pwd)

if [[ -n "${SMOKE:-}" ]]; then
  : "${PHASES:=ceiling throughput latency}" "${CEILING_DURATION:=3}" "${CEILING_RUNS:=1}"
  : "${THROUGHPUT_VARIANTS:=0:0:0}" "${PRELOAD_EVENTS:=5000}" "${PRELOAD_RATE:=5000}"
  : "${THROUGHPUT_TIMEOUT:=60}" "${LATENCY_RATE:=500}" "${DURATION_LATENCY:=3}" "${WARMUP_LATENCY:=1}"
fi
PHASES=${PHASES:-"ceiling throughput latency memory"}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
RECEIVER_THREADS=${RECEIVER_THREADS:-1}
EVENT_BYTES=${EVENT_BYTES:-300}
# 1. ceiling
CEILING_DURATION=${CEILING_DURATION:-10}
CEILING_RUNS=${CEILING_RUNS:-3}  # the best run counts: other tenants only ever lower it
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNECTIONS=${WRK_CONNECTIONS:-64}
# 2. throughput: "sender_threads:credits[:max_host_connections]", 0 (or a missing
# max_host_connections) = the deliverer's derived default; the first is the deliverer's defaults
# (one sender thread per core, 64 connections per host per thread, credits 2 x threads x 64)
THROUGHPUT_VARIANTS=${THROUGHPUT_VARIANTS:-"0:0:0 1:0:0 0:128:0 0:512:0 0:0:128 1:2000:64 2:128:128 2:256:256"}
# PERF=1: also profile collector, deliverer and receiver (perf record at 499 Hz with call graphs
# of kind PERF_CALL_GRAPH, PERF_SECONDS from 1 s after the deliverer starts) in every throughput
# variant; top symbols in NAME.perf.txt, folded stacks (tools/bench/flamegraph.py fold) in
# NAME.ROLE.folded, a CPU breakdown in NAME.ROLE.breakdown.md (keep them with RESULTS=DIR; render
# a flame graph with `tools/bench/flamegraph.py svg < NAME.deliverer.folded > deliverer.svg`).
# dwarf: correct stacks through code built without frame pointers (Debian's libraries, -c opt).
PERF=${PERF:-}
PERF_SECONDS=${PERF_SECONDS:-5}
PERF_CALL_GRAPH=${PERF_CALL_GRAPH:-dwarf,16384}
PRELOAD_EVENTS=${PRELOAD_EVENTS:-300000}
PRELOAD_RATE=${PRELOAD_RATE:-100000}  # events/s offered while preloading (open loop)
THROUGHPUT_TIMEOUT=${THROUGHPUT_TIMEOUT:-180}
# 3. latency / 4. memory
LATENCY_RATE=${LATENCY_RATE:-5000}
LATENCY_EVENTS_PER_REQUEST=${LATENCY_EVENTS_PER_REQUEST:-10}
LATENCY_CONNECTIONS=${LATENCY_CONNECTIONS:-16}
DURATION_LATENCY=${DURATION_LATENCY:-30}
WARMUP_LATENCY=${WARMUP_LATENCY:-5}
DURATION_MEMORY=${DURATION_MEMORY:-600}
MEM_SAMPLE_INTERVAL=${MEM_SAMPLE_INTERVAL:-30}

WRITE_KEY=wk_bench_delivery
for tool in wrk jq curl python3; do
  command -v "$tool" >/dev/null || { echo "run_delivery_bench: needs $tool" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/hookrelay-delivery-bench.XXXXXX)
PIDS=()  # every process started, stopped in reverse order on exit

# stop PID: SIGTERM, up to 15 s (the deliverer drains), then SIGKILL.
stop() {
  local pid=$1
  [[ -n "$pid" ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "   pid $pid did not stop within 15 s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local i
  for (( i = ${#PIDS[@]} - 1; i >= 0; i-- )); do stop "${PIDS[$i]}"; done
  if [[ -n "${RESULTS:-}" ]]; then
    mkdir -p "$RESULTS"
    find "$TMP" -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' \
      -o -name '*.out' -o -name '*.metrics' -o -name 'webhook.body*' -o -name '*.perf.txt' -o -name '*.folded' \
      -o -name '*.breakdown.md' \) -exec cp {} "$RESULTS"/ \;
    echo "logs kept in $RESULTS"
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
if [[ -z "${SKIP_BUILD:-}" ]]; then
  TARGETS="//collector:collector //deliverer:deliverer //tools/bench:bench_receiver //tools/bench:ingest_load"
  echo "== building (bazel build -c opt $TARGETS)"
  BUILD_START=$SECONDS
  # shellcheck disable=SC2086
  timeout "$BUILD_TIMEOUT" bazel build -c opt $TARGETS >"$TMP/build.log" 2>&1 \
    || { tail -30 "$TMP/build.log"; exit 1; }
  # Not `bazel info` (it queues behind other bazel commands); bazel-bin follows whoever built last.
  case "$(uname -m)" in x86_64) CPU=k8 ;; *) CPU=$(uname -m) ;; esac
  BIN=$WORKSPACE/bazel-out/$CPU-opt/bin
  COLLECTOR=$BIN/collector/collector
  DELIVERER=$BIN/deliverer/deliverer
  BENCH_RECEIVER=$BIN/tools/bench/bench_receiver
  INGEST_LOAD=$BIN/tools/bench/ingest_load
  echo "   built in $(( SECONDS - BUILD_START )) s"
fi
if [[ -n "${SKIP_BUILD:-}" && -n "${BIN_DIR:-}" ]]; then
  : "${COLLECTOR:=$BIN_DIR/collector/collector}" "${DELIVERER:=$BIN_DIR/deliverer/deliverer}"
  : "${BENCH_RECEIVER:=$BIN_DIR/tools/bench/bench_receiver}" "${INGEST_LOAD:=$BIN_DIR/tools/bench/ingest_load}"
fi
# Private copies: other builds in this workspace may replace bazel-bin's files mid-run.
cp "${COLLECTOR:?}" "$TMP/collector"
cp "${DELIVERER:?}" "$TMP/deliverer"
cp "${BENCH_RECEIVER:?}" "$TMP/bench_receiver"
cp "${INGEST_LOAD:?}" "$TMP/ingest_load"

{
  echo "== machine: nproc=$(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');" \
    "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo);" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
  lscpu | grep -v '^Flags' | sed -n '1,20s/^/   /p' || true
} | tee "$TMP/machine.txt"

# --- helpers -----------------------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)

# cpu_snap PID...: "<wall s> <machine busy ticks> <machine total ticks> <ticks of each PID>"
# (utime + stime; "NA" for a process that is gone).
cpu_snap() {
  local line p
  line="$(date +%s.%N) $(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat)"
  for p in "$@"; do
    line+=" $(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo NA)"
  done
  echo "$line"
}
# cpu_json "SNAP_A" "SNAP_B" NAME...: CPU between two snapshots, in % of one core, as JSON:
# {"wall_s":…, "machine":…, "<name>":…, "other":…} (other = machine − the named processes).
cpu_json() {
  python3 - "$CLK_TCK" "$(nproc)" "$@" <<'EOF'
import json, sys
tck, ncpu, a, b, names = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5:]
wall = float(b[0]) - float(a[0])
out = {"wall_s": round(wall, 2)}
machine = 100.0 * ncpu * (float(b[1]) - float(a[1])) / max(1.0, float(b[2]) - float(a[2]))
out["machine"] = round(machine)
named = 0.0
for i, name in enumerate(names):
    x, y = a[3 + i], b[3 + i]
    if x == "NA" or y == "NA" or wall <= 0:
        out[name] = None
        continue
    v = 100.0 * (float(y) - float(x)) / tck / wall
    out[name] = round(v)
    named += v
out["other"] = round(max(0.0, machine - named))
print(json.dumps(out))
EOF
}

# threads_snap PID: one line per thread, "tid comm ticks" (comm with spaces squeezed to "_").
threads_snap() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "${t##*/} $(tr ' ' '_' <"$t/comm" 2>/dev/null) $(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }')"
  done 2>/dev/null
}
# threads_json "SNAP_A" "SNAP_B" WALL_S: CPU per thread name between two snapshots, in % of one
# core, largest first (threads that started in between count from 0).
threads_json() {
  python3 - "$CLK_TCK" "$@" <<'EOF2'
import json, sys
tck, wall = float(sys.argv[1]), float(sys.argv[4])
def parse(text):
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].isdigit():
            out[parts[0]] = (parts[1], int(parts[2]))
    return out
a, b = parse(sys.argv[2]), parse(sys.argv[3])
by_name = {}
for tid, (name, ticks) in b.items():
    by_name[name] = by_name.get(name, 0.0) + ticks - a.get(tid, (name, 0))[1]
pct = {k: round(100.0 * v / tck / wall) for k, v in by_name.items() if wall > 0}
print(json.dumps(dict(sorted(((k, v) for k, v in pct.items() if v > 0), key=lambda kv: -kv[1]))))
EOF2
}

# With IDLE_WAIT=N (seconds), waits up to N s for the rest of the machine to drop under 25 % of
# one core (over 2 s) before a measurement; off by default so the run time stays bounded.
wait_idle() {
  local deadline=$(( SECONDS + ${IDLE_WAIT:-0} )) a b busy
  while (( SECONDS < deadline )); do
    a=$(cpu_snap); sleep 2; b=$(cpu_snap)
    busy=$(cpu_json "$a" "$b" | jq .machine)
    (( busy < 25 )) && return 0
    echo "   machine busy ${busy}% (of one core) before the run; waiting"
  done
}

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo NA; }

# wait_for_line FILE PATTERN PID: up to 10 s for a line matching PATTERN; prints it.
wait_for_line() {
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 100); do
    if grep -m1 -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "process $pid exited before logging $pattern:" >&2; tail -20 "$file" >&2; return 1
    fi
    sleep 0.1
  done
  echo "no $pattern within 10 s in $file" >&2; tail -20 "$file" >&2; return 1
}

# start_receiver NAME ARGS...: sets RECEIVER_PID, RECEIVER_PORT; log $TMP/NAME.receiver.log.
# TLS=1 (throughput and latency phases): the receiver serves HTTPS with a fresh self-signed
# certificate that the deliverer trusts (--ca_file); RECEIVER_SCHEME and RECEIVER_CA say so.
start_receiver() {
  local name=$1; shift
  RECEIVER_SCHEME=http RECEIVER_CA=
  local arg
  for arg in "$@"; do
    if [[ $arg == --tls_cert_out=* ]]; then RECEIVER_SCHEME=https RECEIVER_CA=${arg#--tls_cert_out=}; fi
  done
  "$TMP/bench_receiver" --threads="$RECEIVER_THREADS" "$@" >"$TMP/$name.receiver.log" 2>&1 &
  RECEIVER_PID=$!; PIDS+=("$RECEIVER_PID")
  RECEIVER_PORT=$(wait_for_line "$TMP/$name.receiver.log" '"msg":"listening"' "$RECEIVER_PID" | jq -r .port)
}

# BATCH="max_events:max_bytes:max_wait_ms": the destination sends batched webhooks (options.batch);
# the receiver counts each member as a delivery. Empty (default): one event per request.
BATCH=${BATCH:-}
# ORDERING=per_user: the destination keeps each user's events in order (options.ordering); USERS=N:
# the load's events cycle through N userIds (0, the default: 100, one per event of a request).
ORDERING=${ORDERING:-}
USERS=${USERS:-0}
batch_options() {
  [[ -n "$BATCH" || -n "$ORDERING" ]] || return 0
  printf '    options:\n'
  if [[ -n "$ORDERING" ]]; then printf '      ordering: %s\n' "$ORDERING"; fi
  [[ -n "$BATCH" ]] || return 0
  local events bytes wait
  IFS=: read -r events bytes wait <<<"$BATCH"
  printf '      batch: {max_events: %s, max_bytes: %s, max_wait_ms: %s}\n' \
    "$events" "$bytes" "$wait"
}

# start_collector NAME: a fresh data directory and a config whose one destination is the
# receiver (shared secret set, so every request is signed). Sets COLLECTOR_PID, HTTP_PORT,
# GRPC_PORT, COLLECTOR_METRICS_PORT.
start_collector() {
  local name=$1
  mkdir -p "$TMP/$name"
  cat >"$TMP/$name/config.yaml" <<EOF
sources:
  - id: bench
    name: Delivery benchmark
    kind: server
    write_keys: [$WRITE_KEY]
destinations:
  - id: bench-hook
    type: webhooks
    sources: [bench]
    enabled: true
    shared_secret: bench-s3cr3t
    urls:
      - url: $RECEIVER_SCHEME://127.0.0.1:$RECEIVER_PORT/hooks
        headers:
          X-Api-Key: bench
$(batch_options)
EOF
  "$TMP/collector" --config="$TMP/$name/config.yaml" --data_dir="$TMP/$name/data" \
    --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
    --admin_http_address=127.0.0.1:0 \
    >"$TMP/$name.collector.log" 2>&1 &
  COLLECTOR_PID=$!; PIDS+=("$COLLECTOR_PID")
  local serving
  serving=$(wait_for_line "$TMP/$name.collector.log" '"msg":"collector serving"' "$COLLECTOR_PID")
  HTTP_PORT=$(jq -r .http_port <<<"$serving")
  GRPC_PORT=$(jq -r .grpc_port <<<"$serving")
  COLLECTOR_METRICS_PORT=$(jq -r .metrics_port <<<"$serving")
}

# start_deliverer NAME SENDER_THREADS CREDITS [FLAGS...]: sets DELIVERER_PID, DELIVERER_METRICS_PORT.
start_deliverer() {
  local name=$1 threads=$2 credits=$3; shift 3
  "$TMP/deliverer" --collector="127.0.0.1:$GRPC_PORT" --metrics_address=127.0.0.1:0 \
    --allow_private_networks --sender_threads="$threads" --credits="$credits" \
    ${RECEIVER_CA:+--ca_file="$RECEIVER_CA"} "$@" \
    >"$TMP/$name.deliverer.log" 2>&1 &
  DELIVERER_PID=$!; PIDS+=("$DELIVERER_PID")
  DELIVERER_METRICS_PORT=$(wait_for_line "$TMP/$name.deliverer.log" '"msg":"deliverer running"' \
    "$DELIVERER_PID" | jq -r .metrics_port)
}

# metric PORT PREFIX...: the sum of the samples whose name{labels} starts with one of the prefixes
# ("NA" when /metrics cannot be read or nothing matches).
metric() {
  local port=$1; shift
  curl -s --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null |
    awk -v prefixes="$*" 'BEGIN { n = split(prefixes, p, " ") }
      $0 !~ /^#/ { for (i = 1; i <= n; i++) if (index($1, p[i]) == 1) { s += $NF; m++ } }
      END { if (m) printf "%.0f\n", s; else print "NA" }'
}
# histogram_quantiles FILE NAME: {"count", "p50_ms", "p99_ms"} of a Prometheus histogram in a
# saved /metrics file, interpolated linearly within buckets (as PromQL's histogram_quantile).
histogram_quantiles() {
  python3 - "$1" "$2" <<'PY'
import json, re, sys
path, name = sys.argv[1], sys.argv[2]
buckets = []
try:
    for line in open(path):
        m = re.match(r'%s_bucket\{le="([^"]+)"\} (\S+)' % re.escape(name), line)
        if m:
            buckets.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
except OSError:
    pass
buckets.sort()
count = buckets[-1][1] if buckets else 0
def q(p):
    if count == 0:
        return None
    rank, prev_le, prev_c = p * count, 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == float("inf"):
                return round(prev_le * 1000, 3)
            frac = (rank - prev_c) / (c - prev_c) if c > prev_c else 1.0
            return round((prev_le + (le - prev_le) * frac) * 1000, 3)
        prev_le, prev_c = le, c
print(json.dumps({"count": int(count), "p50_ms": q(0.5), "p99_ms": q(0.99)}))
PY
}
save_metrics() {  # save_metrics NAME: both processes' /metrics, for the record
  curl -s --max-time 5 "http://127.0.0.1:$COLLECTOR_METRICS_PORT/metrics" >"$TMP/$1.collector.metrics" 2>/dev/null || true
  curl -s --max-time 5 "http://127.0.0.1:$DELIVERER_METRICS_PORT/metrics" >"$TMP/$1.deliverer.metrics" 2>/dev/null || true
}
attempt_quantiles() {  # attempt_quantiles FILE: p50/p99 of the POSTs' slot-to-answer time
  histogram_quantiles "$1" hookrelay_delivery_attempt_duration_seconds
}

# Lines the deliverer / collector logged at warning or error (not the collector's start-up note
# that the admin API has no token: it listens on 127.0.0.1 here).
problems() {
  grep -E '"level":"(warning|error)"' "$1" 2>/dev/null | grep -c -v 'no admin token' || true
}

# The receiver's running total from the last line of its log (one process: this is polled while
# the machine is measured).
last_total() {
  local line
  line=$(tail -n 1 "$1" 2>/dev/null || true)
  if [[ $line =~ \"total\":([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi
}

# stop_services: deliverer (drains), collector, receiver (prints its summary); clears PIDS.
stop_services() {
  stop "${DELIVERER_PID:-}"; stop "${COLLECTOR_PID:-}"; stop "${RECEIVER_PID:-}"
  DELIVERER_PID=""; COLLECTOR_PID=""; RECEIVER_PID=""; PIDS=()
}

secs() { python3 -c "import sys; print(f'{float(sys.argv[1]):g}s')" "$1"; }

# ingest_start NAME RATE DURATION_S WARMUP_S EVENTS_PER_REQUEST CONNECTIONS: ingest_load over
# HTTP in the background (INGEST_PID, the `timeout` wrapping it), events without a timestamp;
# ingest_wait NAME waits for it and leaves its RESULT JSON in $TMP/NAME.ingest.json.
ingest_start() {
  local name=$1 rate=$2 duration=$3 warmup=$4 epr=$5 connections=$6
  timeout "$(python3 -c "import math; print(math.ceil($duration + $warmup + 30))")" \
    "$TMP/ingest_load" --mode=http --target="127.0.0.1:$HTTP_PORT" --write_key="$WRITE_KEY" \
    --connections="$connections" --events_per_request="$epr" --event_bytes="$EVENT_BYTES" \
    --rate="$rate" --duration="$(secs "$duration")" --warmup="$(secs "$warmup")" --omit_timestamp \
    --users="$USERS" >"$TMP/$name.ingest.out" 2>&1 &
  INGEST_PID=$!; PIDS+=("$INGEST_PID")
}
ingest_wait() {
  local name=$1 rc=0
  wait "$INGEST_PID" || rc=$?
  (( rc == 0 )) || echo "   ingest_load exited $rc (see $name.ingest.out)"
  grep '^RESULT ' "$TMP/$name.ingest.out" | sed 's/^RESULT //' >"$TMP/$name.ingest.json" \
    || echo '{}' >"$TMP/$name.ingest.json"
}
ingest() { ingest_start "$@"; ingest_wait "$1"; }

receiver_summary() { grep '"msg":"summary"' "$TMP/$1.receiver.log" | tail -1 || echo '{}'; }

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# --- 0. capture one real webhook request --------------------------------------------------------
echo
echo "== capture: one request of 10 events through collector and deliverer (defaults)"
start_receiver capture --capture="$TMP/webhook.body"
start_collector capture
start_deliverer capture 0 0
ingest capture 10 1 0 10 1
for _ in $(seq 1 150); do [[ -s "$TMP/webhook.body.headers" ]] && break; sleep 0.1; done
[[ -s "$TMP/webhook.body.headers" ]] || { echo "no webhook arrived within 15 s" >&2; tail -5 "$TMP"/capture.*.log >&2; exit 1; }
sleep 0.5
stop_services
BODY_BYTES=$(wc -c <"$TMP/webhook.body")
echo "   body: $BODY_BYTES bytes: $(head -c 400 "$TMP/webhook.body")"
echo "   headers: $(grep -v -i -E '^(host|content-length):' "$TMP/webhook.body.headers" | sed -E 's/^(X-Signature|Idempotency-Key): .*/\1: …/' | paste -sd'|' -)"
grep -qi '^X-Signature:' "$TMP/webhook.body.headers" || { echo "the captured request is not signed" >&2; exit 1; }

# --- 1. ceiling: wrk replays that request -----------------------------------------------------
CEILING_RPS=""
CEILING_LINES=()
if has_phase ceiling; then
  for run in $(seq 1 "$CEILING_RUNS"); do
    name="ceiling$run"
    echo
    wait_idle
    echo "== $name: wrk -t$WRK_THREADS -c$WRK_CONNECTIONS -d${CEILING_DURATION}s -s tools/bench/wrk_post.lua" \
      "(captured request) -> bench_receiver --threads=$RECEIVER_THREADS"
    start_receiver "$name"
    WRK_BODY_FILE="$TMP/webhook.body" timeout $(( CEILING_DURATION + 30 )) \
      wrk -t"$WRK_THREADS" -c"$WRK_CONNECTIONS" -d"${CEILING_DURATION}s" --latency \
      -s "$WORKSPACE/tools/bench/wrk_post.lua" "http://127.0.0.1:$RECEIVER_PORT/hooks" \
      >"$TMP/$name.wrk.out" 2>&1 &
    WRK_TIMEOUT_PID=$!; PIDS+=("$WRK_TIMEOUT_PID")
    sleep 0.5
    WRK_PID=$(pgrep -P "$WRK_TIMEOUT_PID" | head -1 || true)
    # CPU over the middle of the run (from 1 s in to 1 s before the end).
    sleep 0.5; A=$(cpu_snap "$RECEIVER_PID" "${WRK_PID:-0}")
    sleep $(( CEILING_DURATION - 2 )); B=$(cpu_snap "$RECEIVER_PID" "${WRK_PID:-0}")
    wait "$WRK_TIMEOUT_PID" || echo "   wrk exited $?"
    cpu_json "$A" "$B" receiver wrk >"$TMP/$name.cpu.json"
    sed 's/^/   /' "$TMP/$name.wrk.out"
    rps=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$TMP/$name.wrk.out")
    non2xx=$(awk '/Non-2xx/ { print $NF }' "$TMP/$name.wrk.out")
    errors=$(grep -E '^ +Socket errors' "$TMP/$name.wrk.out" | sed 's/^ *//' || true)
    stop_services
    line="run $run: ${rps:-?} requests/s (non-2xx: ${non2xx:-0}${errors:+; $errors}); cpu % of one core: $(cat "$TMP/$name.cpu.json")"
    CEILING_LINES+=("$line")
    echo "   $line"
    if [[ -n "$rps" ]] && (( rps > ${CEILING_RPS:-0} )); then CEILING_RPS=$rps; fi
  done
fi

# --- 2. throughput: a preloaded backlog drained by the deliverer --------------------------------
THROUGHPUT_ROWS=()
if has_phase throughput; then
  for variant in $THROUGHPUT_VARIANTS; do
    IFS=: read -r threads credits conns <<<"$variant"
    conns=${conns:-0}
    name="throughput_t${threads}_c${credits}_h${conns}"
    echo
    echo "== $name: preload $PRELOAD_EVENTS events (no deliverer), then deliverer" \
      "--sender_threads=$threads --credits=$credits --max_host_connections=$conns"
    start_receiver "$name" --report_interval=200ms ${TLS:+--tls_cert_out="$TMP/$name.receiver.pem"}
    start_collector "$name"
    PRELOAD_S=$(python3 -c "print($PRELOAD_EVENTS / $PRELOAD_RATE)")
    ingest "$name" "$PRELOAD_RATE" "$PRELOAD_S" 0 100 16
    echo "   preload: $(jq -c '{ok_requests, durable_events, failures}' "$TMP/$name.ingest.json")"
    JOBS=$(metric "$COLLECTOR_METRICS_PORT" 'hookrelay_jobs{state="ready"')
    echo "   jobs ready in the store: $JOBS"
    [[ "$JOBS" =~ ^[0-9]+$ ]] && (( JOBS > 0 )) || { echo "   no jobs; skipping" >&2; stop_services; continue; }
    wait_idle
    A=$(cpu_snap "$COLLECTOR_PID" "$RECEIVER_PID")
    CT_A=$(threads_snap "$COLLECTOR_PID")
    START_NS=$(date +%s%N)
    start_deliverer "$name" "$threads" "$credits" --max_host_connections="$conns"
    PERF_WAIT=()
    if [[ -n "$PERF" ]]; then
      for role in deliverer collector receiver; do
        case $role in deliverer) pid=$DELIVERER_PID ;; collector) pid=$COLLECTOR_PID ;; *) pid=$RECEIVER_PID ;; esac
        (sleep 1; exec timeout $(( PERF_SECONDS + 20 )) perf record -F 499 --call-graph="$PERF_CALL_GRAPH" -o "$TMP/$name.$role.perf.data" \
          -p "$pid" -- sleep "$PERF_SECONDS") >"$TMP/$name.$role.perf.log" 2>&1 &
        PERF_WAIT+=("$!"); PIDS+=("$!")
      done
    fi
    A="$A $(awk '{ print $14 + $15 }' "/proc/$DELIVERER_PID/stat")"
    DT_A=$(threads_snap "$DELIVERER_PID")
    DEADLINE=$(( SECONDS + THROUGHPUT_TIMEOUT ))
    while (( $(last_total "$TMP/$name.receiver.log") < JOBS )) && (( SECONDS < DEADLINE )); do
      kill -0 "$DELIVERER_PID" 2>/dev/null || { echo "   deliverer exited" >&2; break; }
      sleep 0.25
    done
    B=$(cpu_snap "$COLLECTOR_PID" "$RECEIVER_PID" "$DELIVERER_PID")
    END_NS=$(date +%s%N)
    DT_B=$(threads_snap "$DELIVERER_PID"); CT_B=$(threads_snap "$COLLECTOR_PID")
    cpu_json "$A" "$B" collector receiver deliverer >"$TMP/$name.cpu.json"
    WALL=$(python3 -c "print(($END_NS - $START_NS) / 1e9)")
    echo "   deliverer threads (% of one core): $(threads_json "$DT_A" "$DT_B" "$WALL" | tee "$TMP/$name.deliverer_threads.json")"
    echo "   collector threads (% of one core): $(threads_json "$CT_A" "$CT_B" "$WALL" | tee "$TMP/$name.collector_threads.json")"
    sleep 1  # outcomes reach the collector
    LEFT=$(metric "$COLLECTOR_METRICS_PORT" 'hookrelay_jobs{state="ready"' \
      'hookrelay_jobs{state="leased"' 'hookrelay_jobs{state="scheduled"')
    save_metrics "$name"
    stop "$RECEIVER_PID"
    SUMMARY=$(receiver_summary "$name")
    for pid in "${PERF_WAIT[@]}"; do wait "$pid" || true; done
    stop_services
    if (( ${#PERF_WAIT[@]} > 0 )); then
      for role in deliverer collector receiver; do
        [[ -s "$TMP/$name.$role.perf.data" ]] || continue
        echo "## $role: samples by thread and library"
        timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort comm,dso -g none \
          --percent-limit 1 --stdio 2>/dev/null | grep '%' | head -25 || true
        echo "## $role: top symbols (self)"
        timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort comm,dso,symbol \
          -g none --percent-limit 0.8 --stdio 2>/dev/null | grep '%' | head -30 || true
        echo "## $role: inclusive (children), top entries"
        timeout 120 perf report -i "$TMP/$name.$role.perf.data" --children --sort symbol -g none \
          --percent-limit 4 --stdio 2>/dev/null | grep '%' | head -40 || true
        timeout 300 perf script -i "$TMP/$name.$role.perf.data" 2>/dev/null |
          python3 "$WORKSPACE/tools/bench/flamegraph.py" fold >"$TMP/$name.$role.folded" || true
        python3 "$WORKSPACE/tools/bench/flamegraph.py" breakdown <"$TMP/$name.$role.folded" \
          >"$TMP/$name.$role.breakdown.md" || true
        rm -f "$TMP/$name.$role.perf.data"
      done >"$TMP/$name.perf.txt"
      echo "   profile: $name.perf.txt"
    fi
    DPROB=$(problems "$TMP/$name.deliverer.log"); CPROB=$(problems "$TMP/$name.collector.log")
    ROW=$(jq -c --argjson jobs "$JOBS" --argjson threads "$threads" --argjson credits "$credits" \
      --argjson conns "$conns" --argjson attempt "$(attempt_quantiles "$TMP/$name.deliverer.metrics")" \
      --arg left "$LEFT" --argjson cpu "$(cat "$TMP/$name.cpu.json")" \
      --argjson wall "$WALL" \
      --argjson dprob "$DPROB" --argjson cprob "$CPROB" \
      '{name: "t\($threads)/c\($credits)/h\($conns)", threads: $threads, credits: $credits,
        max_host_connections: $conns, jobs: $jobs,
        received: .requests, span_s, rate_per_s, wall_s: $wall, left: $left, cpu: $cpu,
        deliverer_us_per_delivery: (if (.requests // 0) > 0 and $cpu.deliverer != null
          then ($cpu.deliverer / 100 * $wall * 1e6 / .requests | floor) else null end),
        attempt: $attempt,
        deliverer_warnings: $dprob, collector_warnings: $cprob}' <<<"$SUMMARY")
    THROUGHPUT_ROWS+=("$ROW")
    echo "   $ROW"
  done
fi

# --- 3 and 4. latency at a fixed rate; memory over a long run ----------------------------------
# steady NAME DURATION_S SAMPLE_INTERVAL_S: fresh services with default deliverer flags, open-loop
# ingest at $LATENCY_RATE; the receiver's counters are reset (SIGUSR1) at the end of the warm-up.
steady() {
  local name=$1 duration=$2 interval=$3
  echo
  wait_idle
  echo "== $name: ingest_load --rate=$LATENCY_RATE --events_per_request=$LATENCY_EVENTS_PER_REQUEST" \
    "--omit_timestamp for ${duration} s after ${WARMUP_LATENCY} s; deliverer defaults"
  start_receiver "$name" ${TLS:+--tls_cert_out="$TMP/$name.receiver.pem"}
  start_collector "$name"
  start_deliverer "$name" 0 0
  ingest_start "$name" "$LATENCY_RATE" "$duration" "$WARMUP_LATENCY" \
    "$LATENCY_EVENTS_PER_REQUEST" "$LATENCY_CONNECTIONS"
  local t0=$SECONDS
  : >"$TMP/$name.rss.txt"
  printf '%8s %14s %14s %13s %15s\n' t_s deliverer_kB collector_kB receiver_kB delivered \
    | tee -a "$TMP/$name.rss.txt"
  rss_line() {
    printf '%8s %14s %14s %13s %15s\n' "$(( SECONDS - t0 ))" "$(rss_kb "$DELIVERER_PID")" \
      "$(rss_kb "$COLLECTOR_PID")" "$(rss_kb "$RECEIVER_PID")" "$(last_total "$TMP/$name.receiver.log")"
  }
  rss_line | tee -a "$TMP/$name.rss.txt"
  sleep "$(python3 -c "print($WARMUP_LATENCY + 0.3)")"
  kill -USR1 "$RECEIVER_PID"
  local a b next=$(( t0 + interval ))
  a=$(cpu_snap "$COLLECTOR_PID" "$DELIVERER_PID" "$RECEIVER_PID")
  local dt_a ct_a t_a
  t_a=$(date +%s.%N)
  dt_a=$(threads_snap "$DELIVERER_PID"); ct_a=$(threads_snap "$COLLECTOR_PID")
  local end=$(( t0 + ${WARMUP_LATENCY%.*} + ${duration%.*} ))
  while (( SECONDS < end )); do
    if (( SECONDS >= next )); then rss_line | tee -a "$TMP/$name.rss.txt"; next=$(( next + interval )); fi
    kill -0 "$DELIVERER_PID" 2>/dev/null || { echo "   deliverer exited" >&2; break; }
    sleep 0.2
  done
  b=$(cpu_snap "$COLLECTOR_PID" "$DELIVERER_PID" "$RECEIVER_PID")
  echo "   deliverer threads (% of one core): $(threads_json "$dt_a" "$(threads_snap "$DELIVERER_PID")" \
    "$(python3 -c "import time; print(time.time() - $t_a)")" | tee "$TMP/$name.deliverer_threads.json")"
  echo "   collector threads (% of one core): $(threads_json "$ct_a" "$(threads_snap "$COLLECTOR_PID")" \
    "$(python3 -c "import time; print(time.time() - $t_a)")" | tee "$TMP/$name.collector_threads.json")"
  rss_line | tee -a "$TMP/$name.rss.txt"
  cpu_json "$a" "$b" collector deliverer receiver >"$TMP/$name.cpu.json"
  ingest_wait "$name"
  # Let the last events arrive: everything the collector took must reach the receiver.
  local ingested
  ingested=$(metric "$COLLECTOR_METRICS_PORT" 'hookrelay_ingest_events_total{')
  for _ in $(seq 1 100); do
    (( $(last_total "$TMP/$name.receiver.log") >= ${ingested/NA/0} )) && break
    sleep 0.1
  done
  save_metrics "$name"
  stop "$RECEIVER_PID"
  stop_services
  local summary
  summary=$(receiver_summary "$name")
  jq -c --argjson ingest "$(cat "$TMP/$name.ingest.json")" --argjson cpu "$(cat "$TMP/$name.cpu.json")" \
    --argjson pickup "$(histogram_quantiles "$TMP/$name.deliverer.metrics" hookrelay_delivery_pickup_seconds)" \
    --argjson dispatch "$(histogram_quantiles "$TMP/$name.collector.metrics" hookrelay_dispatch_latency_seconds)" \
    --arg ingested "$ingested" --argjson attempt "$(attempt_quantiles "$TMP/$name.deliverer.metrics")" \
    --argjson dprob "$(problems "$TMP/$name.deliverer.log")" \
    --argjson cprob "$(problems "$TMP/$name.collector.log")" \
    '{requests, total, ingested: $ingested, span_s, rate_per_s, latency_count, no_timestamp,
      p50_ms, p90_ms, p99_ms, p999_ms, max_ms, mean_ms, pickup: $pickup, dispatch: $dispatch,
      ack: {durable_events_per_s: $ingest.durable_events_per_s, p50_ms: $ingest.p50_ms,
            p99_ms: $ingest.p99_ms, max_ms: $ingest.max_ms, failures: $ingest.failures,
            late_sends: $ingest.late_sends},
      attempt: $attempt, cpu: $cpu, deliverer_warnings: $dprob, collector_warnings: $cprob}' <<<"$summary" \
    >"$TMP/$name.result.json"
  echo "   $(cat "$TMP/$name.result.json")"
}

if has_phase latency; then steady latency "$DURATION_LATENCY" 10; fi
if has_phase memory; then steady memory "$DURATION_MEMORY" "$MEM_SAMPLE_INTERVAL"; fi

# --- summary -----------------------------------------------------------------------------------
summary() {
  echo "== summary (webhook body $BODY_BYTES bytes, signed; receiver --threads=$RECEIVER_THREADS; $(nproc) cores shared by everything)"
  if [[ -n "$CEILING_RPS" ]]; then
    echo "ceiling: wrk -t$WRK_THREADS -c$WRK_CONNECTIONS ${CEILING_DURATION}s, best of $CEILING_RUNS: $CEILING_RPS requests/s"
    printf '  %s\n' "${CEILING_LINES[@]}"
  fi
  if (( ${#THROUGHPUT_ROWS[@]} > 0 )); then
    echo "throughput ($PRELOAD_EVENTS events preloaded; deliveries/s = received / (last − first request)):"
    printf '  %-16s %8s %9s %13s %9s %8s %8s %6s %6s %6s %6s %8s %8s %6s  %s\n' variant jobs received \
      deliveries/s %ceiling span_s wall_s coll% deliv% recv% other% us/deliv att_p99 left "warn(d/c)"
    for row in "${THROUGHPUT_ROWS[@]}"; do
      jq -r --arg ceiling "${CEILING_RPS:-0}" '
        [.name, .jobs, .received, (.rate_per_s | floor),
         (if ($ceiling | tonumber) > 0 then (1000 * .rate_per_s / ($ceiling | tonumber) | floor) / 10 else "-" end),
         .span_s, ((.wall_s * 100 | floor) / 100), .cpu.collector, .cpu.deliverer, .cpu.receiver, .cpu.other,
         .deliverer_us_per_delivery, "\(.attempt.p99_ms)ms",
         .left, "\(.deliverer_warnings)/\(.collector_warnings)"] | @tsv' <<<"$row" |
        awk -F'\t' '{ printf "  %-16s %8s %9s %13s %9s %8s %8s %6s %6s %6s %6s %8s %8s %6s  %s\n", $1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15 }'
    done
    echo "  (cpu from deliverer start until the last job arrived, % of one core; us/deliv = deliverer CPU"
    echo "   microseconds per delivery over that time; att_p99 = p99 of hookrelay_delivery_attempt_duration_seconds,"
    echo "   slot to answer per POST; left = jobs still ready/leased/scheduled after)"
  fi
  for name in latency memory; do
    [[ -f "$TMP/$name.result.json" ]] || continue
    jq -r --arg name "$name" --arg rate "$LATENCY_RATE" '
      "\($name) at \($rate) ev/s: end-to-end (collector receipt -> receiver) over \(.latency_count) events:" +
      " p50 \(.p50_ms) ms, p90 \(.p90_ms) ms, p99 \(.p99_ms) ms, p99.9 \(.p999_ms) ms, max \(.max_ms) ms;" +
      " delivered \(.total) of \(.ingested) ingested; ingest ack p99 \(.ack.p99_ms) ms;" +
      " pickup (collector receipt -> deliverer receipt, hookrelay_delivery_pickup_seconds, from the warm-up on)" +
      " p50 \(.pickup.p50_ms) ms, p99 \(.pickup.p99_ms) ms over \(.pickup.count) jobs;" +
      " of which in the collector (receipt -> handed to the stream, hookrelay_dispatch_latency_seconds)" +
      " p50 \(.dispatch.p50_ms) ms, p99 \(.dispatch.p99_ms) ms;" +
      " attempt (POST) p50 \(.attempt.p50_ms) ms, p99 \(.attempt.p99_ms) ms;" +
      " cpu % of one core \(.cpu | tojson); warnings deliverer/collector \(.deliverer_warnings)/\(.collector_warnings)"' \
      "$TMP/$name.result.json"
  done
  if [[ -f "$TMP/memory.rss.txt" ]]; then
    echo "memory: VmRSS every ${MEM_SAMPLE_INTERVAL} s during the ${DURATION_MEMORY} s run:"
    sed 's/^/  /' "$TMP/memory.rss.txt"
  fi
  echo "targets: >= 25000 deliveries/s and >= 20% of the ceiling; p99 <= 50 ms at 5000 ev/s; deliverer RSS flat over 10 min"
}
echo
summary | tee "$TMP/summary.txt"
