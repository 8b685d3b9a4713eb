#!/usr/bin/env bash
# JetStream engine benchmark (issue 12 §4): in one run, on this machine, everything on 127.0.0.1
# (ports chosen free by the OS):
#
#   0. probe     a jetstream R1 collector takes one 100-event request; the size of the jobs it
#                stored in HR_JOBS (payload, Nats-Msg-Id) is read back (nats_ceiling --probe_stream)
#                and used for the ceiling's messages.
#   1. ingest    for each engine of $INGEST_ENGINES (embedded, r1, r3): fresh servers and a fresh
#                collector (deploy/local/config.yaml: one destination, so one job per event), then
#                the load of run_ingest_bench.sh: ingest_load HTTP closed loop ($HTTP_CONNECTIONS
#                connections x $EVENTS_PER_REQUEST events of ~$EVENT_BYTES B), then open loop at
#                half the rate measured (acknowledgement p99 at that rate).
#      ceiling   right after the r1 / r3 collector: fresh servers again, and nats_ceiling (a minimal
#                async JetStream publisher: stream configured like HR_JOBS plus a consumer like the
#                dispatch consumer, messages of the probed size with a Nats-Msg-Id each,
#                js_PublishMsgAsync, at most $CEILING_WINDOWS unacknowledged publishes) closed loop
#                for each window, then open loop at the rate the collector's open loop used; and
#                (CEILING_PROTOCOL=1, a diagnostic) nats_ceiling --protocol --requests=N: the
#                engine's exchange per request emulated, N requests in flight, each a multi_last
#                direct get on a stream like HR_DEDUP, on its answer 100 jobs, all acks, then 100
#                markers: what the engine's protocol allows without hookrelay's own code.
#   2. delivery  for each engine of $DELIVERY_ENGINES (embedded, r3): fresh servers, receiver
#                (bench_receiver) and collector, $PRELOAD_EVENTS events preloaded with no
#                deliverer, then a deliverer with $DELIVERY_FLAGS drains the backlog; deliveries/s =
#                requests / (last − first request) as the receiver saw them. After each
#                jetstream drain (DELIVERY_CEILING=1), the same backlog published and drained by
#                nats_ceiling --drain alone (fetches of 256 like the engine's fetcher, one ack per
#                job): the ack policy's own ceiling for deliveries.
#   3. summary   every run, CPU split (collector / nats-servers / load generator / everything
#                else), and the ratios: r3 / ceiling r3, r1 / ceiling r1 (closed-loop ingest vs the
#                best ceiling window), jetstream r3 / embedded deliveries; the issue's goals. The
#                exit status is 1 when a step produced nothing or a drain lost jobs (not for goals
#                missed).
#
# Every run also records the servers' traffic per event (or per delivery) from their /varz
# (in/out messages and bytes summed over the servers: NAME.varz.json), and with PERF=1 perf
# profiles of the collector and every server in the r3 closed loop and the first r3 drain.
#
# Servers: r1 = one nats-server (JetStream, no cluster); r3 = three nats-servers clustered over
# loopback routes (as tests/nats_cluster.cc). Server settings otherwise the defaults, like the
# deployment's nats.conf (no per-message fsync: sync_interval default). Every measurement gets
# servers started fresh on empty store directories, removed afterwards.
#
#   tools/bench/run_jetstream_bench.sh                         # one round, ~8 min once built
#   ROUNDS=3 IDLE_WAIT=120 RESULTS=/tmp/js-bench tools/bench/run_jetstream_bench.sh   # the figures
#   SMOKE=1 tools/bench/run_jetstream_bench.sh                 # seconds per run: a check that it works
#   SKIP_BUILD=1 BIN_DIR=bazel-bin tools/bench/run_jetstream_bench.sh   # binaries already built
#   PERF=1 ...                                                 # + perf profiles of the r3 closed loop
#   PERF=1 PERF_RUN='r3_open*' PERF_KEEP=1 ...                 # of other runs; keep NAME.ROLE.perf.data
#   LATENCY_LOG=1 RESULTS=DIR ...                              # every ingest request: NAME.latency.csv
#
# ROUNDS=N repeats ingest (embedded, r1 + ceiling, r3 + ceiling) N times, interleaved, then the
# deliveries N times, interleaved; the summary gives each round and the median of the ratios.
# IDLE_WAIT=N waits up to N s before each measurement for the machine to be quiet (other
# processes under 25 % of one core over 2 s). Bounded: build BUILD_TIMEOUT (600 s), every start-up
# 40 s, every load run its duration + warm-up + 30 s, each drain DRAIN_TIMEOUT (180 s); every
# process started here is stopped on any exit, and the temporary directory removed (RESULTS=DIR
# keeps the logs and JSON). Needs jq, curl, python3 and nats-server ($NATS_SERVER, default the
# one tools/bootstrap.sh builds).
set -euo pipefail

cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/jetstream_bench_lib.sh
source tools/bench/jetstream_bench_lib.sh
WORKSPACE=$(pwd)

if [[ -n "${SMOKE:-}" ]]; then
  : "${DURATION:=2s}" "${WARMUP:=1s}" "${PRELOAD_EVENTS:=5000}"
  : "${PRELOAD_RATE:=5000}" "${HTTP_CONNECTIONS:=16}" "${DRAIN_TIMEOUT:=30}"
  : "${INGEST_ENGINES:=embedded r3}" "${TAP_SECONDS:=1}"  # r1 runs in the probe
fi
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
HTTP_CONNECTIONS=${HTTP_CONNECTIONS:-64}
EVENTS_PER_REQUEST=${EVENTS_PER_REQUEST:-100}
EVENT_BYTES=${EVENT_BYTES:-300}
CONFIG=${CONFIG:-deploy/local/config.yaml}
# Delivery phase: ORDERING=per_user gives the destination per-user order; USERS=N cycles the
# preloaded events' userIds through N users (0: 100, one per event of a request).
ORDERING=${ORDERING:-}
USERS=${USERS:-0}
WRITE_KEY=${WRITE_KEY:-wk_live_123}
ROUNDS=${ROUNDS:-1}
PHASES=${PHASES:-"ingest delivery"}
INGEST_ENGINES=${INGEST_ENGINES:-"embedded r1 r3"}
JETSTREAM_FLAGS=${JETSTREAM_FLAGS:-}  # more collector flags on r1 / r3, e.g. --nats_dedup_replicas=1
CEILING=${CEILING:-1}  # 0: no ceiling runs after the r1 / r3 collectors
# 1: also a diagnostic closed-loop run, nats_ceiling --protocol --requests=$HTTP_CONNECTIONS: the
# engine's whole exchange with the servers per request (dedup lookup, then the jobs, all acks, then
# the markers) at the load's concurrency, without HTTP or hookrelay's code; not the goal's ceiling.
# PROTOCOL_DEDUP_R1=1 adds the same with the dedup stream at one replica (jobs still R3).
CEILING_PROTOCOL=${CEILING_PROTOCOL:-1}
# The first window is what the closed loop keeps in flight (connections x events per request);
# 65536 is the engine's own PublishAsync.MaxPending.
if [[ -n "${SMOKE:-}" ]]; then
  CEILING_WINDOWS=${CEILING_WINDOWS:-$(( HTTP_CONNECTIONS * EVENTS_PER_REQUEST ))}
else
  CEILING_WINDOWS=${CEILING_WINDOWS:-"$(( HTTP_CONNECTIONS * EVENTS_PER_REQUEST )) 65536"}
fi
DELIVERY_ENGINES=${DELIVERY_ENGINES:-"embedded r3"}
DELIVERY_FLAGS=${DELIVERY_FLAGS:-"2:128:128"}  # sender_threads:credits:max_host_connections
DRAIN_BATCHES=${DRAIN_BATCHES:-256}  # fetch sizes of the drain ceiling (256: the engine's largest fetch)
TAP_SECONDS=${TAP_SECONDS:-5}  # how long the collector's pull requests are sampled in a jetstream drain
DELIVERY_CEILING=${DELIVERY_CEILING:-1}  # 1: after each jetstream drain, nats_ceiling --drain on the same backlog
PRELOAD_EVENTS=${PRELOAD_EVENTS:-200000}
PRELOAD_RATE=${PRELOAD_RATE:-40000}
DRAIN_TIMEOUT=${DRAIN_TIMEOUT:-180}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-600}
PERF=${PERF:-}
# 1: each ingest run's acknowledged requests (seconds into the window, ms) in NAME.latency.csv,
# to see stalls as well as percentiles.
LATENCY_LOG=${LATENCY_LOG:-}
PERF_SECONDS=${PERF_SECONDS:-5}
NATS_SERVER=${NATS_SERVER:-${HOOKRELAY_NATS_SERVER:-$HOME/.cache/hookrelay-nats/v2.14.9/nats-server}}

for tool in jq curl python3; do
  command -v "$tool" >/dev/null || { echo "run_jetstream_bench: needs $tool" >&2; exit 1; }
done
[[ -x "$NATS_SERVER" ]] || { echo "run_jetstream_bench: no nats-server at $NATS_SERVER (tools/bootstrap.sh builds it)" >&2; exit 1; }

DURATION_S=$(seconds "$DURATION")
WARMUP_S=$(seconds "$WARMUP")
RUN_TIMEOUT=$(python3 -c "import math; print(math.ceil($DURATION_S + $WARMUP_S + 30))")

TMP=$(mktemp -d /tmp/hookrelay-jetstream-bench.XXXXXX)
PIDS=()  # every process started, stopped in reverse order on exit
FAILED=()  # what did not work (the exit status; the smoke run's check)

# stop PID: SIGTERM, up to 15 s, then SIGKILL.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local i
  for (( i = ${#PIDS[@]} - 1; i >= 0; i-- )); do stop "${PIDS[$i]}"; done
  if [[ -n "${RESULTS:-}" ]]; then
    mkdir -p "$RESULTS"
    find "$TMP" -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' -o -name '*.json' \
      -o -name '*.out' -o -name '*.cpu' -o -name '*.metrics' -o -name '*.latency.csv' \
      -o -name "${PERF_KEEP:+*.perf.data}" \) \
      -exec cp {} "$RESULTS"/ \;
    echo "logs kept in $RESULTS"
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -------------------------------------------------------------------------------------
TARGETS="//collector:collector //deliverer:deliverer //tools/bench:bench_receiver //tools/bench:ingest_load //tools/bench:nats_ceiling"
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
cp "${NATS_CEILING:-$BIN_DIR/tools/bench/nats_ceiling}" "$TMP/nats_ceiling"
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
# {"wall_s", "machine", "<name>"..., "rest"} (rest = machine − the named groups).
cpu_json() {
  python3 - "$CLK_TCK" "$(nproc)" "$@" <<'EOF'
import json, sys
tck, ncpu, a, b, names = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5:]
wall = float(b[0]) - float(a[0])
out = {"wall_s": round(wall, 2)}
out["machine"] = round(100.0 * ncpu * (float(b[1]) - float(a[1])) / max(1.0, float(b[2]) - float(a[2])))
named = 0.0
for i, name in enumerate(names):
    v = 100.0 * (float(b[3 + i]) - float(a[3 + i])) / tck / wall if wall > 0 else 0.0
    out[name] = round(v)
    named += v
out["rest"] = round(max(0.0, out["machine"] - named))
print(json.dumps(out))
EOF
}
# threads_snap PID: "tid comm ticks" per thread; threads_json A B WALL_S: % of one core by name.
threads_snap() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "${t##*/} $(tr ' ' '_' <"$t/comm" 2>/dev/null) $(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $12 + $13 }')"
  done 2>/dev/null
}
threads_json() {
  python3 - "$CLK_TCK" "$@" <<'EOF'
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
out = dict(sorted(((k, v) for k, v in pct.items() if v > 0), key=lambda kv: -kv[1]))
# Threads sharing a name (the NATS client's threads are all "collector"): the busiest by tid.
by_tid = {"%s/%s" % (name, tid): round(100.0 * (ticks - a.get(tid, (name, 0))[1]) / tck / wall)
          for tid, (name, ticks) in b.items() if wall > 0}
top = sorted(((k, v) for k, v in by_tid.items() if v >= 2), key=lambda kv: -kv[1])[:8]
if len(top) > 1:
    out["busiest"] = dict(top)
print(json.dumps(out))
EOF
}

# With IDLE_WAIT=N (seconds), waits up to N s for the machine to drop under 25 % of one core
# (over 2 s, nothing of this script running meanwhile) before a measurement.
wait_idle() {
  local deadline=$(( SECONDS + ${IDLE_WAIT:-0} )) a b busy
  while (( SECONDS < deadline )); do
    a=$(cpu_snap); sleep 2; b=$(cpu_snap)
    busy=$(cpu_json "$a" "$b" | jq .machine)
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
  local monitor=()
  local ports=()
  mapfile -t ports < <(free_ports $(( 3 * nodes )))
  for (( i = 0; i < nodes; i++ )); do
    client+=("${ports[$(( 3 * i ))]}"); route+=("${ports[$(( 3 * i + 1 ))]}")
    monitor+=("${ports[$(( 3 * i + 2 ))]}")
  done
  NATS_URLS=""; NATS_PIDS=""; NATS_MONITOR="${monitor[*]}"
  for (( i = 0; i < nodes; i++ )); do
    {
      echo "server_name: n$(( i + 1 ))"
      echo "listen: 127.0.0.1:${client[$i]}"
      echo "http: 127.0.0.1:${monitor[$i]}"  # /varz: messages and bytes in and out
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
  NATS_PIDS=""; NATS_URLS=""; NATS_MONITOR=""
}
# varz_snap: "in_msgs out_msgs in_bytes out_bytes" summed over the running servers (client and
# route traffic alike: a replicated write shows up on every server it crosses).
varz_snap() {
  local port
  for port in ${NATS_MONITOR:-}; do
    curl -s --max-time 2 "http://127.0.0.1:$port/varz" | jq -r '"\(.in_msgs) \(.out_msgs) \(.in_bytes) \(.out_bytes)"' 2>/dev/null
  done | awk '{ a += $1; b += $2; c += $3; d += $4 } END { print a + 0, b + 0, c + 0, d + 0 }'
}
# varz_json "SNAP_A" "SNAP_B" N: the servers' traffic per event (N events) as JSON.
varz_json() {
  python3 -c 'import json,sys
a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; n=max(float(sys.argv[3]),1)
print(json.dumps(dict(zip(["in_msgs","out_msgs","in_bytes","out_bytes"],[round((y-x)/n,2) for x,y in zip(a,b)]))))' "$1" "$2" "$3"
}

# start_collector NAME ENGINE CONFIG: embedded (fresh data directory) or r1 / r3 (on the servers
# started for it). Sets COLLECTOR_PID, HTTP_PORT, GRPC_PORT, METRICS_PORT.
start_collector() {
  local name=$1 engine=$2 config=$3 store=()
  case $engine in
    embedded) store=(--store=embedded) ;;
    r1) store=(--store=jetstream --nats_url="$NATS_URLS" --nats_replicas=1) ;;
    r3) store=(--store=jetstream --nats_url="$NATS_URLS" --nats_replicas=3) ;;
    *) echo "unknown engine $engine" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2206  # JETSTREAM_FLAGS is a list of flags
  if [[ $engine != embedded ]]; then store+=($JETSTREAM_FLAGS); fi
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
stop_collector() {
  stop "$COLLECTOR_PID"; forget "$COLLECTOR_PID"; COLLECTOR_PID=""
  rm -rf "$TMP/$1.data"
}

nats_for() {  # nats_for NAME ENGINE: the servers an engine needs
  case $2 in r1) start_nats "$1" 1 ;; r3) start_nats "$1" 3 ;; *) NATS_PIDS=""; NATS_URLS=""; NATS_DIR="" ;; esac
}

# metric PORT PREFIX...: the sum of the samples whose name{labels} starts with a prefix; NA if none.
problems() {  # warning/error lines in a collector or deliverer log (not the admin token note)
  grep -E '"level":"(warning|error)"' "$1" 2>/dev/null | grep -c -v 'no admin token' || true
}
secs() { python3 -c "import sys; print(f'{float(sys.argv[1]):g}s')" "$1"; }

# PERF=1: perf_start NAME DELAY_S ROLE=PID... profiles each process (and every running
# nats-server, as natsK) for PERF_SECONDS from DELAY_S on; perf_finish NAME waits and writes the
# reports to $TMP/NAME.perf.txt.
PERF_PIDS=(); PERF_ROLES=()
perf_start() {
  local name=$1 delay=$2 k=1 pid role; shift 2
  PERF_PIDS=(); PERF_ROLES=("$@")
  for pid in ${NATS_PIDS//,/ }; do PERF_ROLES+=("nats$k=$pid"); k=$(( k + 1 )); done
  for role in "${PERF_ROLES[@]}"; do
    pid=${role#*=}; role=${role%%=*}
    (sleep "$delay"; exec timeout $(( PERF_SECONDS + 20 )) \
      perf record -F 499 -g -o "$TMP/$name.$role.perf.data" -p "$pid" -- sleep "$PERF_SECONDS") \
      >"$TMP/$name.$role.perf.log" 2>&1 &
    PERF_PIDS+=("$!"); PIDS+=("$!")
  done
}
perf_finish() {
  local name=$1 pid role
  (( ${#PERF_PIDS[@]} > 0 )) || return 0
  for pid in "${PERF_PIDS[@]}"; do wait "$pid" || true; forget "$pid"; done
  for role in "${PERF_ROLES[@]}"; do
    role=${role%%=*}
    [[ -s "$TMP/$name.$role.perf.data" ]] || continue
    echo "## $role: samples $(timeout 60 perf report -i "$TMP/$name.$role.perf.data" --stdio 2>/dev/null | awk '/^# Samples/ { print $3; exit }') at 499 Hz over ${PERF_SECONDS} s"
    echo "## $role: by thread"
    timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort pid -g none \
      --percent-limit 2 --stdio 2>/dev/null | grep '%' | head -20 || true
    echo "## $role: by thread and library"
    timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort pid,dso -g none \
      --percent-limit 1 --stdio 2>/dev/null | grep '%' | head -30 || true
    echo "## $role: top symbols by thread (self)"
    timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort pid,symbol -g none \
      --percent-limit 0.8 --stdio 2>/dev/null | grep '%' | head -40 || true
    echo "## $role: top symbols (self)"
    timeout 120 perf report -i "$TMP/$name.$role.perf.data" --no-children --sort dso,symbol -g none \
      --percent-limit 0.7 --stdio 2>/dev/null | grep '%' | head -40 || true
    echo "## $role: inclusive (children)"
    timeout 120 perf report -i "$TMP/$name.$role.perf.data" --children --sort symbol -g none \
      --percent-limit 3 --stdio 2>/dev/null | grep '%' | head -60 || true
    [[ -n "${PERF_KEEP:-}" ]] || rm -f "$TMP/$name.$role.perf.data"
  done | sed -E 's/[[:space:]]+-[[:space:]]+-[[:space:]]*$//; s/[[:space:]]+$//' >"$TMP/$name.perf.txt"
  PERF_PIDS=(); PERF_ROLES=()
  echo "   profile: $name.perf.txt"
}

# measure NAME GROUPS NAMES -- COMMAND...: runs COMMAND (a load generator printing RESULT {json})
# with a timeout; CPU of the groups over the measured window (from the warm-up's end, for
# $DURATION) in $TMP/NAME.cpu.json, RESULT in $TMP/NAME.json, collector threads in
# $TMP/NAME.threads.json. With READY=PATTERN, the warm-up starts when the command prints it.
measure() {
  local name=$1 groups=$2 names=$3; shift 4
  (
    if [[ -n "${READY:-}" ]]; then
      for _ in $(seq 1 300); do grep -q -- "$READY" "$TMP/$name.out" 2>/dev/null && break; sleep 0.1; done
    fi
    sleep "$(python3 -c "print($WARMUP_S + 0.15)")"
    # shellcheck disable=SC2086
    a=$(cpu_snap $groups); ta=""; tb=""; va=$(varz_snap)
    if [[ -n "${COLLECTOR_PID:-}" ]]; then ta=$(threads_snap "$COLLECTOR_PID"); fi
    sleep "$DURATION_S"
    # shellcheck disable=SC2086
    b=$(cpu_snap $groups); vb=$(varz_snap)
    if [[ -n "${COLLECTOR_PID:-}" ]]; then tb=$(threads_snap "$COLLECTOR_PID"); fi
    echo "$va" >"$TMP/$name.varz"; echo "$vb" >>"$TMP/$name.varz"
    # shellcheck disable=SC2086
    cpu_json "$a" "$b" $names >"$TMP/$name.cpu.json"
    if [[ -n "$ta" ]]; then threads_json "$ta" "$tb" "$DURATION_S" >"$TMP/$name.threads.json"; fi
  ) &
  local sampler=$!
  # shellcheck disable=SC2053
  if [[ -n "$PERF" && "$name" == ${PERF_RUN:-r3_closed*} ]]; then
    perf_start "$name" "$(python3 -c "print($WARMUP_S + 1)")" "collector=$COLLECTOR_PID"
  fi
  timeout "$RUN_TIMEOUT" "$@" >"$TMP/$name.out" 2>&1 || echo "   (load generator exited $?)"
  wait "$sampler" || echo '{}' >"$TMP/$name.cpu.json"
  grep '^RESULT ' "$TMP/$name.out" | sed 's/^RESULT //' >"$TMP/$name.json" || echo '{}' >"$TMP/$name.json"
  if [[ -n "${NATS_MONITOR:-}" && -s "$TMP/$name.varz" ]]; then
    local n
    n=$(jq -r '.durable_events // .acked_in_window // 0' "$TMP/$name.json")
    varz_json "$(sed -n 1p "$TMP/$name.varz")" "$(sed -n 2p "$TMP/$name.varz")" "$n" >"$TMP/$name.varz.json"
  fi
  perf_finish "$name"
}

ingest_run() {  # ingest_run NAME RATE: ingest_load HTTP against the running collector
  local name=$1 rate=$2
  echo
  wait_idle
  echo "== $name: ingest_load --mode=http --connections=$HTTP_CONNECTIONS --events_per_request=$EVENTS_PER_REQUEST --event_bytes=$EVENT_BYTES --rate=$rate ($DURATION after $WARMUP)"
  measure "$name" "$COLLECTOR_PID ${NATS_PIDS:-0}" "collector nats" -- \
    "$TMP/ingest_load" --mode=http --target="127.0.0.1:$HTTP_PORT" --write_key="$WRITE_KEY" \
    --connections="$HTTP_CONNECTIONS" --events_per_request="$EVENTS_PER_REQUEST" \
    --event_bytes="$EVENT_BYTES" --duration="$DURATION" --warmup="$WARMUP" --rate="$rate" \
    ${LATENCY_LOG:+--latency_log="$TMP/$name.latency.csv"}
  jq -c '{durable_events_per_s, p50_ms, p99_ms, max_ms, failures}' "$TMP/$name.json" | sed 's/^/   /'
  echo "   cpu % of one core: $(cat "$TMP/$name.cpu.json"); collector threads: $(cat "$TMP/$name.threads.json" 2>/dev/null)"
  if [[ -s "$TMP/$name.varz.json" ]]; then echo "   servers' traffic per event: $(cat "$TMP/$name.varz.json")"; fi
}

ceiling_run() {  # ceiling_run NAME REPLICAS WINDOW RATE [FLAGS...]: nats_ceiling on the running servers
  local name=$1 replicas=$2 window=$3 rate=$4; shift 4
  echo
  wait_idle
  echo "== $name: nats_ceiling --replicas=$replicas --max_pending=$window --rate=$rate --msg_bytes=$MSG_BYTES --msg_id_bytes=$MSG_ID_BYTES $* ($DURATION after $WARMUP)"
  COLLECTOR_PID="" READY="^publishing" measure "$name" "${NATS_PIDS:-0}" "nats" -- \
    "$TMP/nats_ceiling" --url="$NATS_URLS" --replicas="$replicas" --max_pending="$window" \
    --rate="$rate" --batch="$EVENTS_PER_REQUEST" --msg_bytes="$MSG_BYTES" \
    --msg_id_bytes="$MSG_ID_BYTES" --subjects="$EVENTS_PER_REQUEST" \
    --duration="$DURATION" --warmup="$WARMUP" "$@"
  jq -c '{msgs_per_s, p50_ms, p99_ms, max_ms, failures}' "$TMP/$name.json" | sed 's/^/   /'
  echo "   cpu % of one core: $(cat "$TMP/$name.cpu.json")"
  if [[ -s "$TMP/$name.varz.json" ]]; then echo "   servers' traffic per message: $(cat "$TMP/$name.varz.json")"; fi
}

half_rate() { jq -r '((.durable_events_per_s // 0) / 2 | floor)' "$TMP/$1.json" 2>/dev/null || echo 0; }

# --- 0. probe: the size of a real job in HR_JOBS -------------------------------------------------
echo
echo "== probe: one request of $EVENTS_PER_REQUEST events into a jetstream R1 collector; job sizes in HR_JOBS"
nats_for probe r1
start_collector probe r1 "$WORKSPACE/$CONFIG"
timeout 30 "$TMP/ingest_load" --mode=http --target="127.0.0.1:$HTTP_PORT" --write_key="$WRITE_KEY" \
  --connections=1 --events_per_request="$EVENTS_PER_REQUEST" --event_bytes="$EVENT_BYTES" \
  --rate="$EVENTS_PER_REQUEST" --duration=1s --warmup=0s >"$TMP/probe.out" 2>&1 || true
timeout 30 "$TMP/nats_ceiling" --url="$NATS_URLS" --probe_stream=HR_JOBS \
  --probe_messages="$EVENTS_PER_REQUEST" >"$TMP/probe.ceiling.out" 2>&1 || true
stop_collector probe; stop_nats
PROBE=$(grep '^PROBE ' "$TMP/probe.ceiling.out" | sed 's/^PROBE //' || true)
if [[ -z "$PROBE" ]]; then
  echo "   no job could be read back (see probe.ceiling.out); using 520 / 44 bytes" >&2
  FAILED+=("probe")
  PROBE='{"data_bytes":520,"msg_id_bytes":44}'
fi
echo "$PROBE" >"$TMP/probe.json"
MSG_BYTES=${MSG_BYTES:-$(jq -r .data_bytes <<<"$PROBE")}
MSG_ID_BYTES=${MSG_ID_BYTES:-$(jq -r .msg_id_bytes <<<"$PROBE")}
echo "   $PROBE"
echo "   ceiling messages: $MSG_BYTES bytes, Nats-Msg-Id of $MSG_ID_BYTES bytes"

has_phase() { [[ " $PHASES " == *" $1 "* ]]; }

# --- 1. ingest (and the ceilings), ROUNDS times interleaved ------------------------------------
if has_phase ingest; then
  for round in $(seq 1 "$ROUNDS"); do
    for engine in $INGEST_ENGINES; do
      name="${engine}_${round}"
      echo
      echo "== round $round: $engine collector"
      nats_for "$name" "$engine"
      start_collector "$name" "$engine" "$WORKSPACE/$CONFIG"
      ingest_run "${engine}_closed_$round" 0
      half=$(half_rate "${engine}_closed_$round")
      if (( half > 0 )); then ingest_run "${engine}_open_$round" "$half"; else FAILED+=("${engine}_closed_$round"); fi
      JOBS=$(metric "$METRICS_PORT" 'hookrelay_jobs{state="ready"')
      echo "   jobs ready in the store after both runs: $JOBS; warnings/errors logged: $(problems "$TMP/$name.collector.log")"
      stop_collector "$name"
      if [[ -n "$NATS_PIDS" ]]; then stop_nats; fi
      if [[ "$engine" != embedded && "$CEILING" != 0 ]]; then
        replicas=${engine#r}
        echo
        echo "== round $round: ceiling R$replicas (fresh servers)"
        nats_for "ceiling_${name}" "$engine"
        for window in $CEILING_WINDOWS; do
          ceiling_run "ceiling_r${replicas}_w${window}_$round" "$replicas" "$window" 0
        done
        rate=$half
        (( rate > 0 )) || rate=$(jq -r '(.msgs_per_s // 0) / 2 | floor' "$TMP/ceiling_r${replicas}_w${CEILING_WINDOWS%% *}_$round.json")
        ceiling_run "ceiling_r${replicas}_open_$round" "$replicas" 65536 "$rate"
        if [[ "$CEILING_PROTOCOL" != 0 ]]; then
          ceiling_run "protocol_r${replicas}_$round" "$replicas" "${CEILING_WINDOWS%% *}" 0 \
            --protocol --requests="$HTTP_CONNECTIONS"
          if [[ -n "${PROTOCOL_DEDUP_R1:-}" && "$replicas" != 1 ]]; then
            ceiling_run "protocol_dedup1_r${replicas}_$round" "$replicas" "${CEILING_WINDOWS%% *}" 0 \
              --protocol --requests="$HTTP_CONNECTIONS" --dedup_replicas=1
          fi
        fi
        stop_nats
      fi
    done
  done
fi

# --- 2. deliveries: a preloaded backlog drained, ROUNDS times interleaved ----------------------
last_total() {
  local line
  line=$(tail -n 1 "$1" 2>/dev/null || true)
  if [[ $line =~ \"total\":([0-9]+) ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi
}
if has_phase delivery; then
  IFS=: read -r D_THREADS D_CREDITS D_CONNS <<<"$DELIVERY_FLAGS"
  for round in $(seq 1 "$ROUNDS"); do
    for engine in $DELIVERY_ENGINES; do
      name="delivery_${engine}_$round"
      echo
      echo "== $name: preload $PRELOAD_EVENTS events at $PRELOAD_RATE/s (no deliverer), then deliverer" \
        "--sender_threads=$D_THREADS --credits=$D_CREDITS --max_host_connections=$D_CONNS"
      nats_for "$name" "$engine"
      "$TMP/bench_receiver" --threads=1 --report_interval=200ms >"$TMP/$name.receiver.log" 2>&1 &
      RECEIVER_PID=$!; PIDS+=("$RECEIVER_PID")
      RECEIVER_PORT=$(wait_for_line "$TMP/$name.receiver.log" '"msg":"listening"' "$RECEIVER_PID" | jq -r .port)
      cat >"$TMP/$name.config.yaml" <<EOF
sources:
  - id: bench
    name: Delivery benchmark
    kind: server
    write_keys: [wk_bench_delivery]
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
      if [[ -n "$ORDERING" ]]; then
        printf '    options:\n      ordering: %s\n' "$ORDERING" >>"$TMP/$name.config.yaml"
      fi
      start_collector "$name" "$engine" "$TMP/$name.config.yaml"
      preload_s=$(python3 -c "print($PRELOAD_EVENTS / $PRELOAD_RATE)")
      timeout "$(python3 -c "import math; print(math.ceil($preload_s + 40))")" "$TMP/ingest_load" \
        --mode=http --target="127.0.0.1:$HTTP_PORT" --write_key=wk_bench_delivery --connections=16 \
        --events_per_request=100 --event_bytes="$EVENT_BYTES" --rate="$PRELOAD_RATE" \
        --duration="$(secs "$preload_s")" --warmup=0s --omit_timestamp --users="$USERS" \
        >"$TMP/$name.preload.out" 2>&1 || true
      echo "   preload: $(grep '^RESULT ' "$TMP/$name.preload.out" | sed 's/^RESULT //' | jq -c '{ok_requests, durable_events, failures}')"
      JOBS=NA
      for _ in $(seq 1 20); do
        JOBS=$(metric "$METRICS_PORT" 'hookrelay_jobs{state="ready"')
        [[ "$JOBS" =~ ^[0-9]+$ ]] && (( JOBS > 0 )) && break
        sleep 0.5
      done
      echo "   jobs ready in the store: $JOBS"
      if ! [[ "$JOBS" =~ ^[0-9]+$ ]] || (( JOBS == 0 )); then
        echo "   no jobs; skipping" >&2; FAILED+=("$name")
        stop "$RECEIVER_PID"; forget "$RECEIVER_PID"; stop_collector "$name"; if [[ -n "$NATS_PIDS" ]]; then stop_nats; fi
        continue
      fi
      wait_idle
      A=$(cpu_snap "$COLLECTOR_PID" "${NATS_PIDS:-0}" "$RECEIVER_PID")
      CT_A=$(threads_snap "$COLLECTOR_PID")
      VA=$(varz_snap)
      START_NS=$(date +%s%N)
      "$TMP/deliverer" --collector="127.0.0.1:$GRPC_PORT" --metrics_address=127.0.0.1:0 \
        --allow_private_networks --sender_threads="$D_THREADS" --credits="$D_CREDITS" \
        --max_host_connections="$D_CONNS" >"$TMP/$name.deliverer.log" 2>&1 &
      DELIVERER_PID=$!; PIDS+=("$DELIVERER_PID")
      if [[ -n "$PERF" && "$engine" != embedded && "$round" == 1 ]]; then
        perf_start "$name" 1 "collector=$COLLECTOR_PID" "deliverer=$DELIVERER_PID"
      fi
      TAP_PID=""
      if [[ "$engine" != embedded ]]; then
        # A copy of the collector's pull requests (every consumer's) for TAP_SECONDS: how many jobs each fetch asks for.
        timeout $(( TAP_SECONDS + 15 )) "$TMP/nats_ceiling" --url="$NATS_URLS" \
          --tap='$JS.API.CONSUMER.MSG.NEXT.HR_JOBS.*' --duration="${TAP_SECONDS}s" \
          >"$TMP/$name.tap.out" 2>&1 &
        TAP_PID=$!; PIDS+=("$TAP_PID")
      fi
      A="$A 0"
      DEADLINE=$(( SECONDS + DRAIN_TIMEOUT ))
      while (( $(last_total "$TMP/$name.receiver.log") < JOBS )) && (( SECONDS < DEADLINE )); do
        kill -0 "$DELIVERER_PID" 2>/dev/null || { echo "   deliverer exited" >&2; break; }
        sleep 0.25
      done
      B=$(cpu_snap "$COLLECTOR_PID" "${NATS_PIDS:-0}" "$RECEIVER_PID" "$DELIVERER_PID")
      END_NS=$(date +%s%N)
      if [[ -n "${NATS_MONITOR:-}" ]]; then varz_json "$VA" "$(varz_snap)" "$JOBS" >"$TMP/$name.varz.json"; fi
      perf_finish "$name"
      if [[ -n "$TAP_PID" ]]; then
        wait "$TAP_PID" || true; forget "$TAP_PID"
        grep '^TAP ' "$TMP/$name.tap.out" | sed 's/^TAP //' >"$TMP/$name.tap.json" || true
        echo "   the collector's pull requests (first ${TAP_SECONDS} s): $(jq -c '{pull_requests, mean_batch}' "$TMP/$name.tap.json" 2>/dev/null)"
      fi
      WALL=$(python3 -c "print(($END_NS - $START_NS) / 1e9)")
      CT_B=$(threads_snap "$COLLECTOR_PID")
      cpu_json "$A" "$B" collector nats receiver deliverer >"$TMP/$name.cpu.json"
      threads_json "$CT_A" "$CT_B" "$WALL" >"$TMP/$name.threads.json"
      sleep 1  # outcomes reach the store
      LEFT=$(metric "$METRICS_PORT" 'hookrelay_jobs{state="ready"' 'hookrelay_jobs{state="leased"' \
        'hookrelay_jobs{state="scheduled"')
      stop "$DELIVERER_PID"; forget "$DELIVERER_PID"
      stop "$RECEIVER_PID"; forget "$RECEIVER_PID"
      SUMMARY=$(grep '"msg":"summary"' "$TMP/$name.receiver.log" | tail -1 || echo '{}')
      [[ -n "$SUMMARY" ]] || SUMMARY='{}'
      jq -c --argjson jobs "$JOBS" --arg left "$LEFT" --argjson cpu "$(cat "$TMP/$name.cpu.json")" \
        --argjson wall "$WALL" --argjson threads "$(cat "$TMP/$name.threads.json")" \
        --argjson varz "$(cat "$TMP/$name.varz.json" 2>/dev/null || echo null)" \
        --argjson dprob "$(problems "$TMP/$name.deliverer.log")" \
        --argjson cprob "$(problems "$TMP/$name.collector.log")" \
        '{jobs: $jobs, received: .requests, span_s, rate_per_s, wall_s: $wall, left: $left,
          cpu: $cpu, collector_threads: $threads, servers_per_delivery: $varz,
          deliverer_warnings: $dprob,
          collector_warnings: $cprob}' <<<"$SUMMARY" >"$TMP/$name.json"
      echo "   $(cat "$TMP/$name.json")"
      if [[ "$(jq -r '.received // 0' "$TMP/$name.json")" -lt "$JOBS" ]]; then FAILED+=("$name"); fi
      stop_collector "$name"
      if [[ -n "$NATS_PIDS" ]]; then stop_nats; fi
      if [[ "$engine" != embedded && "$DELIVERY_CEILING" != 0 ]]; then
        # The same backlog drained by nats_ceiling alone: the engine's fetch + per-job ack
        # ceiling (no HTTP, no deliverer), on fresh servers.
        for drain_batch in $DRAIN_BATCHES; do
          dname="drain_ceiling_${engine}_$round"
          (( drain_batch == 256 )) || dname="drain_ceiling_${engine}_b${drain_batch}_$round"
          echo
          wait_idle
          echo "== $dname: nats_ceiling --replicas=${engine#r} --messages=$JOBS, then --drain --drain_batch=$drain_batch (one ack per message)"
          nats_for "$dname" "$engine"
          timeout $(( DRAIN_TIMEOUT + 120 )) "$TMP/nats_ceiling" --url="$NATS_URLS" --replicas="${engine#r}" \
            --messages="$JOBS" --max_pending=6400 --msg_bytes="$MSG_BYTES" --msg_id_bytes="$MSG_ID_BYTES" \
            --subjects="$EVENTS_PER_REQUEST" --duration=120s --warmup=0s --drain --drain_batch="$drain_batch" \
            --drain_timeout="${DRAIN_TIMEOUT}s" >"$TMP/$dname.out" 2>&1 &
          CEILING_PID=$!; PIDS+=("$CEILING_PID")
          # CPU and the servers' traffic while draining (from "draining" to the end).
          for _ in $(seq 1 $(( (DRAIN_TIMEOUT + 120) * 10 ))); do
            grep -q '^draining' "$TMP/$dname.out" 2>/dev/null && break
            kill -0 "$CEILING_PID" 2>/dev/null || break
            sleep 0.1
          done
          A=$(cpu_snap "${NATS_PIDS:-0}" "$CEILING_PID"); VA=$(varz_snap)
          wait "$CEILING_PID" || echo "   (nats_ceiling exited $?)"
          forget "$CEILING_PID"
          B=$(cpu_snap "${NATS_PIDS:-0}" 0); VB=$(varz_snap)
          grep '^DRAIN ' "$TMP/$dname.out" | sed 's/^DRAIN //' >"$TMP/$dname.json" || echo '{}' >"$TMP/$dname.json"
          cpu_json "$A" "$B" nats ceiling_ignored >"$TMP/$dname.cpu.json"
          varz_json "$VA" "$VB" "$(jq -r '.acked // 0' "$TMP/$dname.json")" >"$TMP/$dname.varz.json"
          echo "   $(cat "$TMP/$dname.json")"
          echo "   cpu % of one core (servers; the drainer's own is client_cpu_s): $(jq -c 'del(.ceiling_ignored)' "$TMP/$dname.cpu.json"); servers' traffic per message: $(cat "$TMP/$dname.varz.json")"
          stop_nats
        done
      fi
    done
  done
fi

# --- 3. summary --------------------------------------------------------------------------------
summary() {
  echo "== summary: $EVENTS_PER_REQUEST events of ~$EVENT_BYTES B per request, HTTP $HTTP_CONNECTIONS connections," \
    "$DURATION measured after $WARMUP; ceiling messages $MSG_BYTES B + Nats-Msg-Id $MSG_ID_BYTES B"
  sed 's/^== //' "$TMP/machine.txt"
  python3 - "$TMP" "$ROUNDS" "$CEILING_WINDOWS" "$(nproc)" <<'EOF'
import json, os, statistics, sys
tmp, rounds, windows, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4])
def load(name):
    try:
        with open(os.path.join(tmp, name + ".json")) as f:
            return json.loads(f.read() or "{}")
    except (OSError, ValueError):
        return None
def cpu(name):
    try:
        with open(os.path.join(tmp, name + ".cpu.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
rows = []
print("%-26s %10s %12s %8s %8s %8s %8s %6s %6s %6s %6s  %s" % (
    "run", "offered/s", "acked/s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "coll%", "nats%", "gen%", "rest%", "failures"))
ratios = {"r3/ceiling_r3": [], "r1/ceiling_r1": [], "r3 ingest ev/s": [], "delivery r3/embedded": [],
          "r3 open p99 ms": [], "embedded open p99 ms": [], "r3/protocol_r3": [], "r1/protocol_r1": [],
          "ceiling_r3 msgs/s": [], "ceiling_r1 msgs/s": [], "drain ceiling r3 acks/s": [],
          "delivery r3/drain ceiling": []}
for r in range(1, rounds + 1):
    names = []
    for engine in ("embedded", "r1", "r3"):
        names += ["%s_closed_%d" % (engine, r), "%s_open_%d" % (engine, r)]
        if engine != "embedded":
            names += ["ceiling_%s_w%s_%d" % (engine, w, r) for w in windows]
            names += ["ceiling_%s_open_%d" % (engine, r), "protocol_%s_%d" % (engine, r),
                      "protocol_dedup1_%s_%d" % (engine, r)]
    for name in names:
        d = load(name)
        if d is None:
            continue
        c = cpu(name)
        gen = 100.0 * d.get("client_cpu_s", 0) / max(d.get("window_s", 1), 1e-9)
        rate = d.get("durable_events_per_s", d.get("msgs_per_s", 0))
        rest = max(0, c.get("machine", 0) - c.get("collector", 0) - c.get("nats", 0) - gen)
        fails = ",".join("%s=%s" % kv for kv in (d.get("failures") or {}).items()) or "-"
        if str(d.get("mode", "")).startswith("ceiling") and d.get("requests"):  # request latency (lookup .. last ack), as an HTTP request's
            d = dict(d, p50_ms=d.get("req_p50_ms", 0), p90_ms=0, p99_ms=d.get("req_p99_ms", 0))
        print("%-26s %10s %12.0f %8.2f %8.2f %8.2f %8.2f %6s %6s %6.0f %6.0f  %s" % (
            name, "closed" if not d.get("rate") else "%.0f" % d["rate"], rate, d.get("p50_ms", 0),
            d.get("p90_ms", 0), d.get("p99_ms", 0), d.get("max_ms", 0), c.get("collector", "-"),
            c.get("nats", "-"), gen, rest, fails))
    def best_ceiling(engine):
        vals = [(load("ceiling_%s_w%s_%d" % (engine, w, r)) or {}).get("msgs_per_s", 0) for w in windows]
        return max(vals) if vals else 0
    for engine in ("r1", "r3"):
        ing = (load("%s_closed_%d" % (engine, r)) or {}).get("durable_events_per_s", 0)
        ceil = best_ceiling(engine)
        if ceil:
            ratios["ceiling_%s msgs/s" % engine].append(ceil)
        if ing and ceil:
            ratios["%s/ceiling_%s" % (engine, engine)].append(ing / ceil)
        proto = (load("protocol_%s_%d" % (engine, r)) or {}).get("msgs_per_s", 0)
        if ing and proto:
            ratios["%s/protocol_%s" % (engine, engine)].append(ing / proto)
    r3 = (load("r3_closed_%d" % r) or {}).get("durable_events_per_s", 0)
    if r3:
        ratios["r3 ingest ev/s"].append(r3)
    for engine, key in (("r3", "r3 open p99 ms"), ("embedded", "embedded open p99 ms")):
        d = load("%s_open_%d" % (engine, r))
        if d and d.get("p99_ms") is not None:
            ratios[key].append(d["p99_ms"])
    de = (load("delivery_embedded_%d" % r) or {}).get("rate_per_s") or 0
    dj = (load("delivery_r3_%d" % r) or {}).get("rate_per_s") or 0
    if de and dj:
        ratios["delivery r3/embedded"].append(dj / de)
    dc = (load("drain_ceiling_r3_%d" % r) or {}).get("acks_per_s") or 0
    if dc:
        ratios["drain ceiling r3 acks/s"].append(dc)
    if dj and dc:
        ratios["delivery r3/drain ceiling"].append(dj / dc)
print("protocol_*: nats_ceiling --protocol --requests=<connections>, latencies per request (p90 not kept)")
print("coll%/nats%/gen%/rest%: CPU of the collector / all nats-servers / the load generator (ingest_load or")
print("nats_ceiling) / everything else, over the measured window, in %% of one core (%d cores = %d%%)" % (ncpu, 100 * ncpu))
drows = []
for r in range(1, rounds + 1):
    for engine in ("embedded", "r1", "r3"):
        d = load("delivery_%s_%d" % (engine, r))
        if d:
            drows.append(("delivery_%s_%d" % (engine, r), d))
if drows:
    print("%-26s %8s %9s %13s %8s %6s %6s %6s %6s %6s %6s  %s" % (
        "delivery", "jobs", "received", "deliveries/s", "span_s", "coll%", "nats%", "deliv%", "recv%", "rest%", "left", "warn(d/c)"))
    for name, d in drows:
        c = d.get("cpu", {})
        print("%-26s %8s %9s %13.0f %8s %6s %6s %6s %6s %6s %6s  %s/%s" % (
            name, d.get("jobs"), d.get("received"), d.get("rate_per_s") or 0, d.get("span_s"),
            c.get("collector"), c.get("nats"), c.get("deliverer"), c.get("receiver"), c.get("rest"),
            d.get("left"), d.get("deliverer_warnings"), d.get("collector_warnings")))
print("ratios (per round; median):")
for key, vals in ratios.items():
    if not vals:
        continue
    fmt = "%.0f" if "/s" in key or "ms" in key else "%.3f"
    print("  %-22s %s; median %s" % (key, ", ".join(fmt % v for v in vals), fmt % statistics.median(vals)))
def goal(text, key, ok):
    vals = ratios[key]
    if vals:
        print("  %-48s %s" % (text, "met" if ok(statistics.median(vals)) else "NOT met"))
for r in range(1, rounds + 1):
    t = load("delivery_r3_%d.tap" % r)
    if t:
        print("delivery_r3_%d: the collector's fetches asked for %.1f jobs on average (%s pull requests in %s s)" % (
            r, t.get("mean_batch", 0), t.get("pull_requests"), t.get("seconds")))
    for f in sorted(os.listdir(tmp)):
        if f.startswith("drain_ceiling_r3_") and f.endswith("_%d.json" % r):
            d = load(f[:-5])
            c = cpu(f[:-5])
            if d:
                print("%s: %s messages drained in %.2f s = %.0f acks/s, servers %s%% of a core (nats_ceiling --drain)" % (
                    f[:-5], d.get("acked"), d.get("seconds", 0), d.get("acks_per_s", 0), c.get("nats", "-")))
print("goals (issue 12 §4), on the medians:")
goal("jetstream R3 ingest >= 0.5 of the ceiling", "r3/ceiling_r3", lambda v: v >= 0.5)
goal("jetstream R3 ingest >= 50,000 events/s", "r3 ingest ev/s", lambda v: v >= 50000)
goal("deliveries/s with jetstream within 80 % of embedded", "delivery r3/embedded", lambda v: v >= 0.8)
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
  echo "run_jetstream_bench: these steps produced nothing or lost jobs: ${FAILED[*]}" >&2
  exit 1
fi
