#!/usr/bin/env bash
# Per-destination fairness benchmark (issue 14 §1): does a receiver answering in 2 s slow down a
# fast one beside it?
#
#   solo    one collector, one deliverer (default flags), one fast receiver (//tools/bench:
#           bench_receiver); $EVENTS events preloaded with no deliverer running, one job each for
#           the fast destination; then the deliverer starts. Rate = jobs / (last − first request)
#           as the fast receiver saw them.
#   beside  the same, with a second destination on a receiver answering after $SLOW_DELAY
#           (bench_receiver --delay): every event makes one job for each destination, so the
#           fast destination's jobs are interleaved with the slow one's in the store. The fast
#           destination's rate is measured the same way; the slow one's requests in that span
#           are reported too.
# Prints the fast destination's rate solo and beside the slow one, and their ratio (goal ≥ 0.9, issue 23),
# for each of $REPEAT interleaved pairs and their medians; the same over the first 1 s and 3 s
# of the fast receiver's deliveries (the start, measured on its own).
#
#   BIN_DIR=$(bazel info -c opt bazel-bin) tools/bench/run_fairness_bench.sh   # prebuilt -c opt
#   EVENTS=20000 SLOW_DELAY=2s RESULTS=/tmp/fair tools/bench/run_fairness_bench.sh
#   DELIVERER_FLAGS=--credits=128 tools/bench/run_fairness_bench.sh   # extra deliverer flags
#   ENGINE=r3 tools/bench/run_fairness_bench.sh   # JetStream: a fresh 3-node loopback cluster per
#                                                 # run (nats-server: $NATS_SERVER), replicas 3
#
# Bounded: each phase at most $PHASE_TIMEOUT s (default 120). Everything on 127.0.0.1, ports 0.
# Needs jq, curl.
set -euo pipefail

cd "$(dirname "$0")/../.."
BIN_DIR=${BIN_DIR:-$(bazel info -c opt bazel-bin)}
EVENTS=${EVENTS:-20000}
SLOW_DELAY=${SLOW_DELAY:-2s}
PHASE_TIMEOUT=${PHASE_TIMEOUT:-120}
REPEAT=${REPEAT:-1}  # solo/beside pairs, interleaved (a shared machine: medians are reported)
ENGINE=${ENGINE:-embedded}  # embedded | r3
NATS_SERVER=${NATS_SERVER:-${HOOKRELAY_NATS_SERVER:-$HOME/.cache/hookrelay-nats/v2.14.9/nats-server}}
WRITE_KEY=wk_fair_bench
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ -n "${RESULTS:-}" ]]; then mkdir -p "$RESULTS"; cp -r "$TMP"/. "$RESULTS"/; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

wait_for_line() {  # FILE PATTERN PID: up to 10 s
  local file=$1 pattern=$2 pid=$3
  for _ in $(seq 1 100); do
    if grep -m1 -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited:" >&2; tail -20 "$file" >&2; return 1; }
    sleep 0.1
  done
  echo "no $pattern within 10 s in $file" >&2; return 1
}

# free_ports N: N different free ports on 127.0.0.1, one per line. Each socket stays bound until
# all are chosen: ports picked one at a time may repeat (a port released and handed out again),
# and two servers given one port fail to start.
free_ports() {
  python3 -c 'import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

# start_cluster NAME: three nats-servers with JetStream, clustered over loopback routes, on empty
# store directories; sets NATS_URLS.
start_cluster() {
  local name=$1 i j routes client=() route=()
  local ports=()
  mapfile -t ports < <(free_ports 6)
  for i in 0 1 2; do client+=("${ports[$(( 2 * i ))]}"); route+=("${ports[$(( 2 * i + 1 ))]}"); done
  NATS_URLS=""; NATS_PIDS=()
  for i in 0 1 2; do
    routes=""
    for j in 0 1 2; do (( j == i )) || routes+="${routes:+, }nats-route://127.0.0.1:${route[$j]}"; done
    mkdir -p "$TMP/$name.nats/n$i"
    printf 'server_name: n%d\nlisten: 127.0.0.1:%d\njetstream { store_dir: "%s" }\ncluster { name: fair, listen: 127.0.0.1:%d, routes: [%s] }\n' \
      "$i" "${client[$i]}" "$TMP/$name.nats/n$i" "${route[$i]}" "$routes" >"$TMP/$name.nats/n$i.conf"
    "$NATS_SERVER" -c "$TMP/$name.nats/n$i.conf" >"$TMP/$name.nats-n$i.log" 2>&1 &
    PIDS+=("$!"); NATS_PIDS+=("$!")
    NATS_URLS+="${NATS_URLS:+,}nats://127.0.0.1:${client[$i]}"
  done
  for i in 0 1 2; do
    for _ in $(seq 1 300); do grep -q "metadata leader" "$TMP/$name.nats-n$i.log" && break; sleep 0.1; done
  done
}

start_receiver() {  # NAME ARGS...: sets RPID RPORT
  local name=$1; shift
  "$BIN_DIR/tools/bench/bench_receiver" "$@" >"$TMP/$name.log" 2>&1 &
  RPID=$!; PIDS+=("$RPID")
  RPORT=$(wait_for_line "$TMP/$name.log" '"msg":"listening"' "$RPID" | jq -r .port)
}

destination() {  # ID PORT
  cat <<EOF
  - id: $1
    type: webhooks
    sources: [bench]
    enabled: true
    shared_secret: bench-s3cr3t
    urls:
      - url: http://127.0.0.1:$2/hooks
EOF
}

run() {  # NAME WITH_SLOW(0|1): prints the fast receiver's summary line
  local name=$1 with_slow=$2
  start_receiver "$name.fast" --report_interval=200ms
  local fast_pid=$RPID fast_port=$RPORT slow_pid="" slow_port=""
  if (( with_slow )); then
    start_receiver "$name.slow" --threads=2 --delay="$SLOW_DELAY"
    slow_pid=$RPID; slow_port=$RPORT
  fi
  mkdir -p "$TMP/$name"
  {
    printf 'sources:\n  - {id: bench, name: Fairness benchmark, kind: server, write_keys: [%s]}\n' "$WRITE_KEY"
    printf 'destinations:\n'
    destination fast-hook "$fast_port"
    if (( with_slow )); then destination slow-hook "$slow_port"; fi
  } >"$TMP/$name/config.yaml"
  local engine_flags=()
  if [[ $ENGINE == r3 ]]; then
    start_cluster "$name"
    engine_flags=(--store=jetstream "--nats_url=$NATS_URLS" --nats_replicas=3)
  fi
  "$BIN_DIR/collector/collector" --config="$TMP/$name/config.yaml" --data_dir="$TMP/$name/data" \
    --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
    --admin_http_address=127.0.0.1:0 "${engine_flags[@]}" >"$TMP/$name.collector.log" 2>&1 &
  local cpid=$!; PIDS+=("$cpid")
  local serving http grpc metrics
  serving=$(wait_for_line "$TMP/$name.collector.log" '"msg":"collector serving"' "$cpid")
  http=$(jq -r .http_port <<<"$serving"); grpc=$(jq -r .grpc_port <<<"$serving")
  metrics=$(jq -r .metrics_port <<<"$serving")
  # Preload: every event durable before any deliverer runs.
  timeout 120 "$BIN_DIR/tools/bench/ingest_load" --mode=http --target="127.0.0.1:$http" \
    --write_key="$WRITE_KEY" --connections=16 --events_per_request=100 --event_bytes=300 \
    --rate=100000 --duration="$(python3 -c "print($EVENTS / 100000)")s" --warmup=0s \
    --omit_timestamp >"$TMP/$name.ingest.out" 2>&1 || true
  # The fast destination's jobs: the ready jobs, one per destination per event.
  local durable
  durable=$(curl -s --max-time 5 "http://127.0.0.1:$metrics/metrics" |
    awk '/^hookrelay_jobs\{state="ready",/ { s += $2 } END { print int(s) }')
  durable=$(( ${durable:-0} / (1 + with_slow) ))
  "$BIN_DIR/deliverer/deliverer" --collector="127.0.0.1:$grpc" --metrics_address=127.0.0.1:0 \
    --allow_private_networks ${DELIVERER_FLAGS:-} >"$TMP/$name.deliverer.log" 2>&1 &
  local dpid=$!; PIDS+=("$dpid")
  if [[ -n "${PERF:-}" ]]; then  # PERF=1: profile the collector for 2 s after the deliverer starts
    timeout 30 perf record -F 499 -g -o "$TMP/$name.collector.perf.data" -p "$cpid" -- sleep 2 \
      >"$TMP/$name.perf.log" 2>&1 &
  fi
  local deadline=$(( SECONDS + PHASE_TIMEOUT ))
  # Until the fast receiver has every event (its running total, from its 200 ms ticks).
  local total=0 line
  while (( total < durable && SECONDS < deadline )); do
    sleep 0.2
    line=$(tail -n 1 "$TMP/$name.fast.log" 2>/dev/null || true)
    [[ $line =~ \"total\":([0-9]+) ]] && total=${BASH_REMATCH[1]}
  done
  echo "$name: $durable events preloaded, $total delivered to the fast receiver" >&2
  kill "$fast_pid" 2>/dev/null || true
  wait "$fast_pid" 2>/dev/null || true
  curl -s --max-time 5 "http://127.0.0.1:$metrics/metrics" >"$TMP/$name.collector.metrics" || true
  if [[ -n "$slow_pid" ]]; then
    kill "$slow_pid" 2>/dev/null || true; wait "$slow_pid" 2>/dev/null || true
    grep '"msg":"summary"' "$TMP/$name.slow.log" | tail -1 >"$TMP/slow.summary" || true
  fi
  # CPU seconds each process used (start-up and preload included for the collector).
  local hz; hz=$(getconf CLK_TCK)
  echo "$name: cpu s: collector $(awk -v hz="$hz" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$cpid/stat"), deliverer $(awk -v hz="$hz" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$dpid/stat")" >&2
  kill "$dpid" "$cpid" 2>/dev/null || true
  wait "$dpid" "$cpid" 2>/dev/null || true
  if [[ $ENGINE == r3 ]]; then
    kill "${NATS_PIDS[@]}" 2>/dev/null || true; wait "${NATS_PIDS[@]}" 2>/dev/null || true
    rm -rf "$TMP/$name.nats"
  fi
  grep '"msg":"summary"' "$TMP/$name.fast.log" | tail -1 || echo '{}'
}

# early NAME: the fast receiver's rate over its first 1 s and first 3 s (from its first request;
# its 200 ms running totals, interpolated), "r1 r3": the start, while a deliverer has just
# connected and the slow destination's jobs compete for its first credits.
early() {
  python3 - "$TMP/$1.fast.log" <<'PY'
import json, sys
from datetime import datetime
def t(s): return datetime.strptime(s.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
ticks, first = [], None
for line in open(sys.argv[1]):
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("msg") == "tick": ticks.append((t(m["at"]), m["total"]))
    if m.get("msg") == "summary" and m.get("first"): first = t(m["first"])
out = []
for w in (1.0, 3.0):
    end, at = (first or 0) + w, None
    for (t0, n0), (t1, n1) in zip(ticks, ticks[1:]):
        if t0 <= end <= t1:
            at = n0 + (n1 - n0) * (end - t0) / (t1 - t0) if t1 > t0 else n1
            break
    out.append(f"{at / w:.0f}" if first and at is not None else "0")
print(" ".join(out))
PY
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "engine: $ENGINE; events: $EVENTS; slow receiver delay: $SLOW_DELAY; pairs: $REPEAT"
RATES=()
EARLY=()
for i in $(seq 1 "$REPEAT"); do
  solo=$(run "solo$i" 0)
  echo "solo $i:   $solo"
  beside=$(run "beside$i" 1)
  echo "beside $i: $beside"
  echo "slow receiver (until the fast one was done): $(cat "$TMP/slow.summary" 2>/dev/null)"
  grep -E '^hookrelay_(dispatch_deferred_total|destination_concurrency_limit|store_commit_batch_items_sum|dispatch_outcomes_total\{outcome="delivered")' \
    "$TMP/beside$i.collector.metrics" 2>/dev/null | sed 's/^/  collector: /' || true
  RATES+=("$(jq -r '.rate_per_s // 0' <<<"$solo"):$(jq -r '.rate_per_s // 0' <<<"$beside")")
  read -r s1 s3 <<<"$(early "solo$i")"
  read -r b1 b3 <<<"$(early "beside$i")"
  echo "first seconds: solo $s1/s (1 s) $s3/s (3 s); beside $b1/s (1 s) $b3/s (3 s)"
  EARLY+=("$s1:$b1:$s3:$b3")
done
python3 - "${EARLY[@]}" <<'EOF'
import statistics, sys
rows = [tuple(map(float, a.split(":"))) for a in sys.argv[1:]]
for k, label in ((0, "first 1 s"), (2, "first 3 s")):
    ratios = [r[k + 1] / r[k] for r in rows if r[k]]
    if ratios:
        print(f"{label}: median ratio {statistics.median(ratios):.2f} "
              f"({', '.join(f'{x:.2f}' for x in ratios)}; goal >= 0.90 from the first second)")
EOF
python3 - "${RATES[@]}" <<'EOF'
import statistics, sys
pairs = [tuple(map(float, a.split(":"))) for a in sys.argv[1:]]
for i, (s, b) in enumerate(pairs, 1):
    print(f"pair {i}: fast destination solo {s:.0f}/s, beside the slow one {b:.0f}/s, "
          f"ratio {b / s if s else 0:.2f}")
solo = statistics.median(s for s, _ in pairs)
beside = statistics.median(b for _, b in pairs)
ratios = [b / s for s, b in pairs if s]
print(f"median: solo {solo:.0f}/s, beside {beside:.0f}/s; ratio of medians {beside / solo:.2f}, "
      f"median ratio {statistics.median(ratios):.2f} (goal >= 0.90)")
EOF
