#!/usr/bin/env bash
# JetStream deployment sizing: what each process of a --store=jetstream deployment needs (CPU and
# memory) at steady event rates, for Kubernetes requests/limits. For each rate of $RATES
# (events/s), on this machine, everything on 127.0.0.1 (ports chosen free by the OS):
#
#   1. fresh   three nats-servers clustered over loopback routes (JetStream, empty store
#              directories, settings otherwise the defaults, as run_jetstream_bench.sh's r3), a
#              bench_receiver, a collector --store=jetstream --nats_replicas=3 (default flags
#              otherwise; one source and one webhook destination, the receiver: one job per
#              event, every request signed) and a deliverer with default flags connected to it.
#   2. load    ingest_load HTTP open loop at the rate for $WARMUP + $DURATION (+ 1 s, so every
#              process still runs when the window closes), $EVENTS_PER_REQUEST events of
#              ~$EVENT_BYTES B per request over $HTTP_CONNECTIONS connections (the event shape of
#              run_jetstream_bench.sh's ingest), events without a timestamp: the collector stamps
#              its receipt time, so the receiver measures end-to-end latency.
#   3. measure over the $DURATION window only (from the warm-up's end): CPU in % of one core
#              (100 % = 1 core = 1000m) of the collector, the deliverer, each nats-server (and
#              their sum), the receiver and the load generator, from /proc/PID/stat utime + stime
#              over wall time; at the window's end each one's RSS now and peak (VmRSS, VmHWM of
#              /proc/PID/status). Events accepted (the collector's hookrelay_ingest_events_total)
#              and delivered (the receiver's count) over the window, per second.
#   4. verdict the load over: "kept up" when the receiver had, by then, at least every event the
#              collector accepted in the run less 2 s worth of the rate; then up to $DRAIN_GRACE s
#              for the rest to arrive (a shortfall after that is reported as lost). Ingest ack
#              p50/p99 from ingest_load's RESULT; end-to-end (collector receipt -> receiver)
#              p50/p99 from the receiver's summary (deliveries from the window's start on).
#   5. stop    everything, the store directories removed.
# Then a markdown table (one row per rate) and a table of the details. The exit status is 1 when
# a run produced nothing (no event accepted or delivered, a process died) or delivery did not
# keep up (or lost events).
#
#   tools/bench/run_jetstream_sizing.sh                        # 1000 and 3000 ev/s, ~3 min once built
#   RATES="500 1000 2000 5000" RESULTS=/tmp/js-sizing tools/bench/run_jetstream_sizing.sh
#   SMOKE=1 tools/bench/run_jetstream_sizing.sh                # 200 ev/s, 2 s + 5 s: a check that it works
#   SKIP_BUILD=1 BIN_DIR=bazel-out/k8-opt/bin tools/bench/run_jetstream_sizing.sh   # binaries already built
#   IDLE_WAIT=120 tools/bench/run_jetstream_sizing.sh          # shared machine: wait for quiet first
#
# Knobs (environment):
#   RATES="1000 3000"      events/s, one fresh deployment each (SMOKE: 200)
#   WARMUP=10s DURATION=60s  unmeasured warm-up, then the measured window (SMOKE: 2s, 5s)
#   EVENTS_PER_REQUEST=100 EVENT_BYTES=300 HTTP_CONNECTIONS=16   the load's shape
#   DRAIN_GRACE=30         s after the load for the last deliveries (lost = still missing then)
#   JETSTREAM_FLAGS=""     more collector flags (e.g. --nats_dedup_replicas=1)
#   DELIVERER_FLAGS=""     deliverer flags (e.g. --sender_threads=2 --credits=256)
#   IDLE_WAIT=N            wait up to N s before each measurement for the machine to be quiet
#                          (other processes under 25 % of one core over 2 s); 0 (default): don't
#   RESULTS=DIR            keep the logs and JSON (per rate: rN.json, rN.cpu.json, rN.ingest.json,
#                          rN.*.log, rN.*.metrics) and the summary there
#   SKIP_BUILD=1 [BIN_DIR=DIR]   use built binaries (default bazel-bin); without SKIP_BUILD:
#                          bazel build -c opt of the collector, deliverer, bench_receiver, ingest_load
#   COLLECTOR= DELIVERER= BENCH_RECEIVER= INGEST_LOAD=   a binary each, instead of BIN_DIR's
#   NATS_SERVER=PATH       default $HOOKRELAY_NATS_SERVER, else the one tools/bootstrap.sh builds
#   BUILD_TIMEOUT=600      s for the build
# Bounded: the build BUILD_TIMEOUT, every start-up 20-40 s, the load its warm-up + duration + 30 s,
# the drain DRAIN_GRACE, every stop 15 s (then SIGKILL), IDLE_WAIT at most its value per rate;
# every process started here is stopped on any exit and the temporary directory removed. Needs
# jq, curl, python3 and nats-server.
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/jetstream_bench_lib.sh
source tools/bench/jetstream_bench_lib.sh
WORKSPACE=$(pwd)

if [[ -n "${SMOKE:-}" ]]; then
  : "${RATES:=200}" "${WARMUP:=2s}" "${DURATION:=5s}" "${DRAIN_GRACE:=15}"
fi
RATES=${RATES:-"1000 3000"}
WARMUP=${WARMUP:-10s}
DURATION=${DURATION:-60s}
EVENTS_PER_REQUEST=${EVENTS_PER_REQUEST:-100}
EVENT_BYTES=${EVENT_BYTES:-300}
HTTP_CONNECTIONS=${HTTP_CONNECTIONS:-16}
DRAIN_GRACE=${DRAIN_GRACE:-30}
JETSTREAM_FLAGS=${JETSTREAM_FLAGS:-}
DELIVERER_FLAGS=${DELIVERER_FLAGS:-}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
WRITE_KEY=wk_bench_sizing
KEEP_UP_SLACK_S=2  # "kept up": delivered by the load's end >= accepted − this many seconds of the rate
TAIL_S=1           # the load runs this long past the window, so every process is alive at its end
NATS_SERVER=${NATS_SERVER:-${HOOKRELAY_NATS_SERVER:-$HOME/.cache/hookrelay-nats/v2.14.9/nats-server}}

for tool in jq curl python3; do
  command -v "$tool" >/dev/null || { echo "run_jetstream_sizing: needs $tool" >&2; exit 1; }
done
[[ -x "$NATS_SERVER" ]] || { echo "run_jetstream_sizing: no nats-server at $NATS_SERVER (tools/bootstrap.sh builds it)" >&2; exit 1; }
for rate in $RATES; do
  if ! [[ "$rate" =~ ^[0-9]+$ ]] || (( rate == 0 )); then
    echo "run_jetstream_sizing: RATES must be positive integers, got '$rate'" >&2; exit 2
  fi
done

secs() { python3 -c "import sys; print(f'{float(sys.argv[1]):g}s')" "$1"; }
DURATION_S=$(seconds "$DURATION")
DURATION_NS=$(python3 -c "print(round($DURATION_S * 1e9))")
WARMUP_S=$(seconds "$WARMUP")
RUN_TIMEOUT=$(python3 -c "import math; print(math.ceil($DURATION_S + $WARMUP_S + $TAIL_S + 30))")

TMP=$(mktemp -d /tmp/hookrelay-jetstream-sizing.XXXXXX)
PIDS=()  # every process started, stopped in reverse order on exit
FAILED=()  # what did not work (the exit status)

# stop PID: SIGTERM, up to 15 s (the deliverer drains), then SIGKILL.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local i
  for (( i = ${#PIDS[@]} - 1; i >= 0; i-- )); do stop "${PIDS[$i]}"; done
  if [[ -n "${RESULTS:-}" ]]; then
    mkdir -p "$RESULTS"
    find "$TMP" -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' \
      -o -name '*.out' -o -name '*.metrics' -o -name '*.yaml' \) -exec cp {} "$RESULTS"/ \;
    echo "logs kept in $RESULTS"
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
TARGETS="//collector:collector //deliverer:deliverer //tools/bench:bench_receiver //tools/bench:ingest_load"
if [[ -z "${SKIP_BUILD:-}" ]]; then
  echo "== building (bazel build -c opt $TARGETS)"
  BUILD_START=$SECONDS
  # shellcheck disable=SC2086
  timeout "$BUILD_TIMEOUT" bazel build -c opt $TARGETS >"$TMP/build.log" 2>&1 \
    || { tail -30 "$TMP/build.log"; exit 1; }
  # Not `bazel info` (it queues behind other bazel commands); bazel-bin follows whoever built last.
  case "$(uname -m)" in x86_64) CPU=k8 ;; *) CPU=$(uname -m) ;; esac
  BIN_DIR=$WORKSPACE/bazel-out/$CPU-opt/bin
  echo "   built in $(( SECONDS - BUILD_START )) s"
fi
BIN_DIR=${BIN_DIR:-$WORKSPACE/bazel-bin}
# Private copies: other builds in this workspace may replace bazel-bin's files mid-run.
cp "${COLLECTOR:-$BIN_DIR/collector/collector}" "$TMP/collector"
cp "${DELIVERER:-$BIN_DIR/deliverer/deliverer}" "$TMP/deliverer"
cp "${BENCH_RECEIVER:-$BIN_DIR/tools/bench/bench_receiver}" "$TMP/bench_receiver"
cp "${INGEST_LOAD:-$BIN_DIR/tools/bench/ingest_load}" "$TMP/ingest_load"
cp "$NATS_SERVER" "$TMP/nats-server"

{
  echo "== machine: nproc=$(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//');" \
    "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
  echo "   nats-server $("$TMP/nats-server" --version 2>&1 | head -1); code $(git -C "$WORKSPACE" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$WORKSPACE" diff --quiet HEAD 2>/dev/null || echo ' + uncommitted changes')"
} | tee "$TMP/machine.txt"

# --- helpers -----------------------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)

# cpu_snap GROUP...: "<wall s> <machine busy ticks> <machine total ticks> <ticks of each group>";
# a group is a comma-separated list of pids, summed (utime + stime; a pid gone counts 0).
# cpu_json "SNAP_A" "SNAP_B" NAME...: CPU between the snapshots in % of one core, as JSON
# {"wall_s", "tick", "machine", "<name>"..., "rest"} (rest = machine − the named groups; tick = one
# clock tick over the window, the resolution: 0 means less than that).
cpu_json() {
  python3 - "$CLK_TCK" "$(nproc)" "$@" <<'EOF'
import json, sys
tck, ncpu, a, b, names = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5:]
wall = float(b[0]) - float(a[0])
out = {"wall_s": round(wall, 2), "tick": round(100.0 / tck / wall, 2) if wall > 0 else None}
out["machine"] = round(100.0 * ncpu * (float(b[1]) - float(a[1])) / max(1.0, float(b[2]) - float(a[2])), 1)
named = 0.0
for i, name in enumerate(names):
    v = 100.0 * (float(b[3 + i]) - float(a[3 + i])) / tck / wall if wall > 0 else 0.0
    out[name] = round(v, 1)
    named += v
out["rest"] = round(max(0.0, out["machine"] - named), 1)
print(json.dumps(out))
EOF
}
# mem_json NAME=PID...: {"<name>": {"rss_kb", "hwm_kb"}} from /proc/PID/status (null: gone).
mem_json() {
  local arg name pid rss hwm sep="" out="{"
  for arg in "$@"; do
    name=${arg%%=*}; pid=${arg#*=}
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    if [[ -n "$rss" && -n "$hwm" ]]; then
      out+="$sep\"$name\":{\"rss_kb\":$rss,\"hwm_kb\":$hwm}"
    else
      out+="$sep\"$name\":null"
    fi
    sep=","
  done
  echo "$out}"
}

# With IDLE_WAIT=N (seconds), waits up to N s for the machine to drop under 25 % of one core
# (over 2 s, nothing of this script running meanwhile) before a measurement.
wait_idle() {
  local deadline=$(( SECONDS + ${IDLE_WAIT:-0} )) a b busy
  while (( SECONDS < deadline )); do
    a=$(cpu_snap); sleep 2; b=$(cpu_snap)
    busy=$(cpu_json "$a" "$b" | jq '.machine | floor')
    (( busy < 25 )) && return 0
    echo "   machine busy ${busy}% (of one core) before the run; waiting"
  done
}

# wait_for_line FILE PATTERN PID [SECONDS]: a line matching PATTERN (printed), default 10 s.

# free_ports N: N different free ports on 127.0.0.1, one per line. Each socket stays bound until
# all are chosen: ports picked one at a time may repeat (a port released and handed out again),
# and two servers given one port fail to start.

# start_nats NAME NODES: fresh servers on empty store directories; sets NATS_URLS, NATS_PIDS
# (comma-separated), NATS_DIR. NODES=1: one server, no cluster; 3: a cluster over loopback routes.
start_nats() {
  local name=$1 nodes=$2 i j routes
  NATS_DIR=$TMP/$name.nats
  mkdir -p "$NATS_DIR"
  local client=() route=()
  local ports=()
  mapfile -t ports < <(free_ports $(( 2 * nodes )))
  for (( i = 0; i < nodes; i++ )); do
    client+=("${ports[$(( 2 * i ))]}"); route+=("${ports[$(( 2 * i + 1 ))]}")
  done
  NATS_URLS=""; NATS_PIDS=""
  for (( i = 0; i < nodes; i++ )); do
    {
      echo "server_name: n$(( i + 1 ))"
      echo "listen: 127.0.0.1:${client[$i]}"
      echo "jetstream { store_dir: \"$NATS_DIR/n$(( i + 1 ))\", max_memory_store: 256MB, max_file_store: 64GB }"
      if (( nodes > 1 )); then
        routes=""
        for (( j = 0; j < nodes; j++ )); do
          (( j == i )) || routes+="${routes:+, }nats-route://127.0.0.1:${route[$j]}"
        done
        echo "cluster { name: hookrelay-bench, listen: 127.0.0.1:${route[$i]}, routes: [$routes] }"
      fi
    } >"$NATS_DIR/n$(( i + 1 )).conf"
    "$TMP/nats-server" -c "$NATS_DIR/n$(( i + 1 )).conf" >"$TMP/$name.nats-n$(( i + 1 )).log" 2>&1 &
    local pid=$!; PIDS+=("$pid")
    NATS_PIDS+="${NATS_PIDS:+,}$pid"
    NATS_URLS+="${NATS_URLS:+,}nats://127.0.0.1:${client[$i]}"
  done
  i=1
  for pid in ${NATS_PIDS//,/ }; do
    wait_for_line "$TMP/$name.nats-n$i.log" "Server is ready" "$pid" 20 >/dev/null
    # A cluster: every server knows the JetStream meta leader (else the first API requests time out).
    if (( nodes > 1 )); then
      wait_for_line "$TMP/$name.nats-n$i.log" "metadata leader" "$pid" 30 >/dev/null
    fi
    i=$(( i + 1 ))
  done
}
stop_nats() {
  local pid
  for pid in ${NATS_PIDS//,/ }; do stop "$pid"; forget "$pid"; done
  rm -rf "$NATS_DIR"
  NATS_PIDS=""; NATS_URLS=""
}

# start_collector NAME CONFIG: --store=jetstream R3 on the servers started for it. Sets
# COLLECTOR_PID, HTTP_PORT, GRPC_PORT, METRICS_PORT.
start_collector() {
  local name=$1 config=$2 store=()
  store=(--store=jetstream --nats_url="$NATS_URLS" --nats_replicas=3)
  # shellcheck disable=SC2206  # JETSTREAM_FLAGS is a list of flags
  store+=($JETSTREAM_FLAGS)
  local serving="" attempt
  # Up to 3 attempts: on a cluster formed seconds ago the engine's start can fail (seen: "the
  # configuration bucket hr_config: Error"); each failure is reported in the summary.
  for attempt in 1 2 3; do
    "$TMP/collector" --config="$config" --data_dir="$TMP/$name.data" "${store[@]}" \
      --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
      --admin_http_address=127.0.0.1:0 >"$TMP/$name.collector.log" 2>&1 &
    COLLECTOR_PID=$!; PIDS+=("$COLLECTOR_PID")
    if serving=$(wait_for_line "$TMP/$name.collector.log" '"msg":"collector serving"' "$COLLECTOR_PID" 40); then
      break
    fi
    echo "$name: collector start attempt $attempt failed: $(grep -m1 '"level":"error"' "$TMP/$name.collector.log" || tail -1 "$TMP/$name.collector.log")" \
      | tee -a "$TMP/start_failures.txt" >&2
    cp "$TMP/$name.collector.log" "$TMP/$name.collector.failed$attempt.log"
    stop "$COLLECTOR_PID"; forget "$COLLECTOR_PID"; rm -rf "$TMP/$name.data"
    sleep 1
  done
  [[ -n "$serving" ]] || { echo "$name: the collector did not start" >&2; exit 1; }
  HTTP_PORT=$(jq -r .http_port <<<"$serving")
  GRPC_PORT=$(jq -r .grpc_port <<<"$serving")
  METRICS_PORT=$(jq -r .metrics_port <<<"$serving")
}

# start_deliverer NAME: default flags (plus $DELIVERER_FLAGS); sets DELIVERER_PID,
# DELIVERER_METRICS_PORT. --allow_private_networks: the receiver is on 127.0.0.1.
start_deliverer() {
  local name=$1 flags=()
  # shellcheck disable=SC2206  # DELIVERER_FLAGS is a list of flags
  flags=($DELIVERER_FLAGS)
  "$TMP/deliverer" --collector="127.0.0.1:$GRPC_PORT" --metrics_address=127.0.0.1:0 \
    --allow_private_networks "${flags[@]}" >"$TMP/$name.deliverer.log" 2>&1 &
  DELIVERER_PID=$!; PIDS+=("$DELIVERER_PID")
  DELIVERER_METRICS_PORT=$(wait_for_line "$TMP/$name.deliverer.log" '"msg":"deliverer running"' \
    "$DELIVERER_PID" 20 | jq -r .metrics_port)
}

# start_receiver NAME: sets RECEIVER_PID, RECEIVER_PORT; a tick (with the running total) every 100 ms.
start_receiver() {
  local name=$1
  "$TMP/bench_receiver" --threads=1 --report_interval=100ms >"$TMP/$name.receiver.log" 2>&1 &
  RECEIVER_PID=$!; PIDS+=("$RECEIVER_PID")
  RECEIVER_PORT=$(wait_for_line "$TMP/$name.receiver.log" '"msg":"listening"' "$RECEIVER_PID" | jq -r .port)
}

# metric PORT PREFIX...: the sum of the samples whose name{labels} starts with a prefix; NA if none.
accepted() { metric "$METRICS_PORT" 'hookrelay_ingest_events_total{'; }
problems() {  # warning/error lines in a collector or deliverer log (not the admin token note)
  grep -E '"level":"(warning|error)"' "$1" 2>/dev/null | grep -c -v 'no admin token' || true
}
# The receiver's running total from the last line of its log.
last_total() {
  local line
  line=$(tail -n 1 "$1" 2>/dev/null || true)
  if [[ $line =~ \"total\":([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi
}
alive() {  # alive PID...: every one still running
  local p
  for p in "$@"; do kill -0 "$p" 2>/dev/null || return 1; done
}

# --- one rate ----------------------------------------------------------------------------------
# run_rate RATE: a fresh deployment, the load, the measurement; $TMP/rRATE.json.
run_rate() {
  local rate=$1 name="r$1"
  echo
  echo "== $name: 3 nats-servers (R3), collector --store=jetstream, deliverer (defaults), bench_receiver;" \
    "ingest_load --rate=$rate ($EVENTS_PER_REQUEST x ~$EVENT_BYTES B per request, $HTTP_CONNECTIONS connections) for $DURATION after $WARMUP"
  start_nats "$name" 3
  local nats_pids=() n1 n2 n3
  IFS=, read -r -a nats_pids <<<"$NATS_PIDS"
  n1=${nats_pids[0]}; n2=${nats_pids[1]}; n3=${nats_pids[2]}
  start_receiver "$name"
  cat >"$TMP/$name.config.yaml" <<EOF
sources:
  - id: bench
    name: Sizing benchmark
    kind: server
    write_keys: [$WRITE_KEY]
destinations:
  - id: bench-hook
    type: webhooks
    sources: [bench]
    enabled: true
    shared_secret: bench-s3cr3t
    urls:
      - url: http://127.0.0.1:$RECEIVER_PORT/hooks
        headers:
          X-Api-Key: bench
EOF
  start_collector "$name" "$TMP/$name.config.yaml"
  start_deliverer "$name"
  wait_idle

  # Every argument expanded before the background job starts: its children are then only timeout's.
  local load_duration
  load_duration=$(secs "$(python3 -c "print($DURATION_S + $TAIL_S)")")
  timeout "$RUN_TIMEOUT" "$TMP/ingest_load" --mode=http --target="127.0.0.1:$HTTP_PORT" \
    --write_key="$WRITE_KEY" --connections="$HTTP_CONNECTIONS" \
    --events_per_request="$EVENTS_PER_REQUEST" --event_bytes="$EVENT_BYTES" --rate="$rate" \
    --warmup="$WARMUP" --duration="$load_duration" \
    --omit_timestamp >"$TMP/$name.ingest.out" 2>&1 &
  local timeout_pid=$! load_pid=""
  PIDS+=("$timeout_pid")
  for _ in $(seq 1 100); do  # ingest_load: timeout's child, once it has exec'd
    load_pid=$(pgrep -P "$timeout_pid" | head -1 || true)
    [[ -n "$load_pid" && "$(cat "/proc/$load_pid/comm" 2>/dev/null)" == ingest_load ]] && break
    load_pid=""
    sleep 0.02
  done
  [[ -n "$load_pid" ]] || { echo "   ingest_load did not start" >&2; load_pid=0; }

  local groups=("$COLLECTOR_PID" "$DELIVERER_PID" "$n1" "$n2" "$n3" "$RECEIVER_PID" "$load_pid")
  local names=(collector deliverer nats1 nats2 nats3 receiver load)
  local a b acc_a acc_b del_a del_b died=""
  sleep "$(python3 -c "print($WARMUP_S + 0.15)")"
  kill -USR1 "$RECEIVER_PID"  # the receiver's summary (end-to-end latency) from here on
  a=$(cpu_snap "${groups[@]}"); acc_a=$(accepted); del_a=$(last_total "$TMP/$name.receiver.log")
  local end_ns left_ns
  end_ns=$(( $(date +%s%N) + DURATION_NS ))
  # The window: every process is checked each 0.5 s (a deployment process gone ends it).
  while (( (left_ns = end_ns - $(date +%s%N)) > 0 )); do
    if ! alive "$COLLECTOR_PID" "$DELIVERER_PID" "$n1" "$n2" "$n3" "$RECEIVER_PID"; then
      died=1; echo "   a process of the deployment exited during the window" >&2; break
    fi
    if (( left_ns > 500000000 )); then sleep 0.5; else sleep "0.$(printf '%09d' "$left_ns")"; fi
  done
  b=$(cpu_snap "${groups[@]}"); acc_b=$(accepted); del_b=$(last_total "$TMP/$name.receiver.log")
  mem_json collector="$COLLECTOR_PID" deliverer="$DELIVERER_PID" nats1="$n1" nats2="$n2" \
    nats3="$n3" receiver="$RECEIVER_PID" load="$load_pid" >"$TMP/$name.mem.json"
  cpu_json "$a" "$b" "${names[@]}" >"$TMP/$name.cpu.json"
  if [[ "$load_pid" == 0 ]] || ! alive "$load_pid"; then
    echo "   (the load generator had exited before the window's end: its CPU is short)" >&2
  fi

  local rc=0
  wait "$timeout_pid" || rc=$?
  forget "$timeout_pid"
  (( rc == 0 )) || echo "   ingest_load exited $rc (see $name.ingest.out)"
  grep '^RESULT ' "$TMP/$name.ingest.out" | sed 's/^RESULT //' >"$TMP/$name.ingest.json" \
    || echo '{}' >"$TMP/$name.ingest.json"

  # The verdict at the load's end, then the last deliveries (up to DRAIN_GRACE s).
  local acc_run del_run del_final drain_s deadline t0
  acc_run=$(accepted); del_run=$(last_total "$TMP/$name.receiver.log")
  t0=$SECONDS; deadline=$(( SECONDS + DRAIN_GRACE ))
  while [[ "$acc_run" =~ ^[0-9]+$ ]] && (( $(last_total "$TMP/$name.receiver.log") < acc_run )) \
      && (( SECONDS < deadline )); do
    alive "$DELIVERER_PID" || break
    sleep 0.2
  done
  drain_s=$(( SECONDS - t0 ))
  sleep 0.3  # a last tick
  del_final=$(last_total "$TMP/$name.receiver.log")
  curl -s --max-time 5 "http://127.0.0.1:$METRICS_PORT/metrics" >"$TMP/$name.collector.metrics" 2>/dev/null || true
  curl -s --max-time 5 "http://127.0.0.1:$DELIVERER_METRICS_PORT/metrics" >"$TMP/$name.deliverer.metrics" 2>/dev/null || true

  stop "$DELIVERER_PID"; forget "$DELIVERER_PID"
  stop "$RECEIVER_PID"; forget "$RECEIVER_PID"
  local summary
  summary=$(grep '"msg":"summary"' "$TMP/$name.receiver.log" | tail -1 || true)
  [[ -n "$summary" ]] || summary='{}'
  local dprob cprob
  dprob=$(problems "$TMP/$name.deliverer.log"); cprob=$(problems "$TMP/$name.collector.log")
  stop "$COLLECTOR_PID"; forget "$COLLECTOR_PID"; rm -rf "$TMP/$name.data"
  stop_nats

  python3 - "$rate" "$KEEP_UP_SLACK_S" "$a" "$b" "$acc_a" "$acc_b" "$del_a" "$del_b" "$acc_run" \
    "$del_run" "$del_final" "$drain_s" "$TMP/$name.cpu.json" "$TMP/$name.mem.json" \
    "$TMP/$name.ingest.json" "$summary" "$dprob" "$cprob" "${died:-0}" >"$TMP/$name.json" <<'EOF'
import json, sys
(rate, slack, a, b, acc_a, acc_b, del_a, del_b, acc_run, del_run, del_final, drain_s, cpu_f, mem_f,
 ingest_f, summary, dprob, cprob, died) = sys.argv[1:]
rate, slack = float(rate), float(slack)
wall = float(b.split()[0]) - float(a.split()[0])
def num(x):
    try:
        return int(x)
    except ValueError:
        return None
acc_a, acc_b, acc_run = num(acc_a), num(acc_b), num(acc_run)
del_a, del_b, del_run, del_final = int(del_a), int(del_b), int(del_run), int(del_final)
cpu = json.load(open(cpu_f))
mem = json.load(open(mem_f))
try:
    ingest = json.loads(open(ingest_f).read() or "{}")
except ValueError:
    ingest = {}
try:
    recv = json.loads(summary)
except ValueError:
    recv = {}
accepted_per_s = (acc_b - acc_a) / wall if acc_a is not None and acc_b is not None and wall > 0 else 0
delivered_per_s = (del_b - del_a) / wall if wall > 0 else 0
nats_cpu = [cpu.get("nats%d" % i, 0) for i in (1, 2, 3)]
kept_up = acc_run is not None and acc_run > 0 and del_run >= acc_run - slack * rate
lost = max(0, acc_run - del_final) if acc_run is not None else None
out = {
    "rate": rate, "window_s": round(wall, 2),
    "accepted_per_s": round(accepted_per_s, 1), "delivered_per_s": round(delivered_per_s, 1),
    "accepted_in_run": acc_run, "delivered_by_load_end": del_run,
    "delivered_after_drain": del_final, "drain_s": int(drain_s), "lost": lost,
    "kept_up": bool(kept_up), "died": died == "1",
    "cpu": cpu, "nats_cpu_sum": round(sum(nats_cpu), 1), "nats_cpu_max": max(nats_cpu),
    "mem": mem,
    "ack": {k: ingest.get(k) for k in ("durable_events_per_s", "p50_ms", "p99_ms", "max_ms",
                                      "ok_requests", "failures", "late_sends", "client_cpu_s")},
    "e2e": {k: recv.get(k) for k in ("latency_count", "p50_ms", "p90_ms", "p99_ms", "max_ms",
                                    "no_timestamp")},
    "warnings": {"deliverer": int(dprob), "collector": int(cprob)},
}
print(json.dumps(out))
EOF
  echo "   $(jq -c '{accepted_per_s, delivered_per_s, accepted_in_run, delivered_by_load_end, delivered_after_drain, kept_up, lost}' "$TMP/$name.json")"
  echo "   cpu % of one core: $(cat "$TMP/$name.cpu.json")"
  echo "   memory (kB): $(jq -c 'with_entries(.value |= (if . then "\(.rss_kb) now, \(.hwm_kb) peak" else null end))' "$TMP/$name.mem.json")"
  echo "   ack: $(jq -c .ack "$TMP/$name.json"); e2e: $(jq -c .e2e "$TMP/$name.json"); warnings: $(jq -c .warnings "$TMP/$name.json")"
  if [[ "$(jq -r '.died or (.accepted_per_s <= 0) or (.delivered_per_s <= 0) or ((.ack.ok_requests // 0) == 0)' "$TMP/$name.json")" == true ]]; then
    FAILED+=("$name: produced nothing or a process died")
  fi
  if [[ "$(jq -r '.kept_up' "$TMP/$name.json")" != true ]]; then FAILED+=("$name: delivery did not keep up"); fi
  if [[ "$(jq -r '(.lost // 1) > 0' "$TMP/$name.json")" == true ]]; then
    FAILED+=("$name: $(jq -r '.lost' "$TMP/$name.json") events not delivered within ${DRAIN_GRACE} s of the load's end")
  fi
}

for rate in $RATES; do run_rate "$rate"; done

# --- summary -----------------------------------------------------------------------------------
summary() {
  echo "== summary: jetstream R3 (3 nats-servers on this machine), collector + deliverer with default flags" \
    "${JETSTREAM_FLAGS:+(collector $JETSTREAM_FLAGS) }${DELIVERER_FLAGS:+(deliverer $DELIVERER_FLAGS) }and bench_receiver;" \
    "HTTP $EVENTS_PER_REQUEST events of ~$EVENT_BYTES B per request, $HTTP_CONNECTIONS connections, open loop;" \
    "$DURATION measured after $WARMUP"
  sed 's/^== //' "$TMP/machine.txt"
  # shellcheck disable=SC2086  # RATES is a list
  python3 - "$TMP" "$(nproc)" "$KEEP_UP_SLACK_S" $RATES <<'EOF'
import json, os, sys
tmp, ncpu, slack, rates = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
runs = []
for r in rates:
    try:
        with open(os.path.join(tmp, "r%s.json" % r)) as f:
            runs.append(json.load(f))
    except (OSError, ValueError):
        runs.append({"rate": float(r)})
def mb(m, name, key="hwm_kb"):
    v = (m or {}).get(name)
    return "%.0f" % (v[key] / 1024.0) if v else "-"
def ms(x):
    return "-" if x is None else ("%.1f" % x if x < 100 else "%.0f" % x)
def pct(c, name, tick=None):
    v = c.get(name)
    tick = tick or c.get("tick")
    if v is None:
        return "-"
    if v == 0 and tick:
        return "<%.1f" % tick  # not one clock tick in the window
    return "%.1f" % v if v < 10 else "%.0f" % v
print()
print("| rate ev/s | accepted ev/s | delivered/s | collector CPU % / RSS peak MB | deliverer CPU % / RSS peak MB "
      "| NATS servers CPU % (sum, max one) / RSS peak MB (max one) | ack p99 ms | e2e p99 ms | kept up |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
for d in runs:
    if "cpu" not in d:
        print("| %.0f | (no result) | | | | | | | no |" % d["rate"])
        continue
    c, m = d["cpu"], d["mem"]
    nats_hwm = [m[n]["hwm_kb"] for n in ("nats1", "nats2", "nats3") if m.get(n)]
    print("| %.0f | %.0f | %.0f | %s / %s | %s / %s | %s, %s / %s | %s | %s | %s |" % (
        d["rate"], d["accepted_per_s"], d["delivered_per_s"],
        pct(c, "collector"), mb(m, "collector"), pct(c, "deliverer"), mb(m, "deliverer"),
        pct(d, "nats_cpu_sum", c.get("tick")), pct(d, "nats_cpu_max", c.get("tick")), "%.0f" % (max(nats_hwm) / 1024.0) if nats_hwm else "-",
        ms(d["ack"].get("p99_ms")), ms(d["e2e"].get("p99_ms")),
        "yes" if d["kept_up"] else "**no**"))
print()
print("Details (CPU %% of one core over the window, RSS MB now / peak at the window's end; %d cores = %d %%):" % (ncpu, 100 * ncpu))
print()
print("| rate | collector RSS | deliverer RSS | nats1 / nats2 / nats3 CPU % | nats1 / nats2 / nats3 RSS "
      "| receiver CPU % / RSS | load gen CPU % / RSS | machine / rest CPU % | ack p50 ms | e2e p50 ms "
      "| accepted / delivered at load end / after drain | ingest failures | warnings (deliverer/collector) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
for d in runs:
    if "cpu" not in d:
        continue
    c, m = d["cpu"], d["mem"]
    both = lambda n: "%s / %s" % (mb(m, n, "rss_kb"), mb(m, n))
    fails = ",".join("%s=%s" % kv for kv in (d["ack"].get("failures") or {}).items()) or "-"
    print("| %.0f | %s | %s | %s / %s / %s | %s; %s; %s | %s / %s | %s / %s | %s / %s | %s | %s | %s / %s / %s%s | %s | %s/%s |" % (
        d["rate"], both("collector"), both("deliverer"),
        pct(c, "nats1"), pct(c, "nats2"), pct(c, "nats3"), both("nats1"), both("nats2"), both("nats3"),
        pct(c, "receiver"), mb(m, "receiver"), pct(c, "load"), mb(m, "load"),
        pct(c, "machine"), pct(c, "rest"), ms(d["ack"].get("p50_ms")), ms(d["e2e"].get("p50_ms")),
        d["accepted_in_run"], d["delivered_by_load_end"], d["delivered_after_drain"],
        " (lost %s)" % d["lost"] if d.get("lost") else "", fails,
        d["warnings"]["deliverer"], d["warnings"]["collector"]))
print()
print("accepted ev/s: the collector's hookrelay_ingest_events_total over the window; delivered/s: the")
print("receiver's count over the window; kept up: delivered by the load's end >= accepted in the run")
print("- %s s of the rate. ack: ingest_load's acknowledgement latency (open loop, from the scheduled" % slack)
print("send); e2e: collector receipt -> receiver, deliveries from the window's start on. RSS peak =")
print("VmHWM; the servers' file store is page cache, not RSS. 100 % CPU = one core = 1000m; <x: less")
print("than one clock tick (x %) in the window.")
EOF
}
echo
{
  summary
  if [[ -s "$TMP/start_failures.txt" ]]; then
    echo "collector start failures (retried):"; sed 's/^/  /' "$TMP/start_failures.txt"
  fi
} | tee "$TMP/summary.txt"
if (( ${#FAILED[@]} > 0 )); then
  printf 'run_jetstream_sizing: %s\n' "${FAILED[@]}" >&2
  exit 1
fi
