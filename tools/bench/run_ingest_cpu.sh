#!/usr/bin/env bash
# Collector CPU per ingested event, by thread: starts one collector on a fresh temporary data
# directory (every port 0), runs a closed loop of ingest_load against it, and prints events/s and
# the CPU per durable event of each of the collector's threads (by name) over the measured
# window, read from /proc/PID/task/*/stat. With PERF=DIR, also records a call-graph profile of the
# collector for 5 s of the window and folds it (tools/bench/flamegraph.py) into DIR/folded.txt.
#
#   tools/bench/run_ingest_cpu.sh COLLECTOR INGEST_LOAD [http|grpc]
#   CONNECTIONS=32 DURATION=10 PERF=/tmp/prof tools/bench/run_ingest_cpu.sh …
#
# Build both with `bazel build -c opt //collector:collector //tools/bench:ingest_load`; alternate
# two collectors for an A/B. Bounded: the load runs DURATION (default 10) s after a 2 s warm-up;
# the collector is stopped on any exit. Traffic stays on 127.0.0.1.
set -euo pipefail
COLLECTOR=${1:?collector binary}
LOAD=${2:?ingest_load binary}
MODE=${3:-http}
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10}
WORKSPACE=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
"$COLLECTOR" --config="$WORKSPACE/deploy/local/config.yaml" --data_dir="$TMP/data" \
  --http_address=127.0.0.1:0 --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0 \
  --admin_http_address=127.0.0.1:0 >"$TMP/collector.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 1 100); do
  grep -q '"msg":"collector serving"' "$TMP/collector.log" && break
  kill -0 "$PID" 2>/dev/null || { cat "$TMP/collector.log"; exit 1; }
  sleep 0.1
done
SERVING=$(grep -m1 '"msg":"collector serving"' "$TMP/collector.log") || {
  echo "collector did not start within 10 s" >&2; exit 1; }
if [[ $MODE == http ]]; then PORT=$(jq -r .http_port <<<"$SERVING"); else PORT=$(jq -r .grpc_port <<<"$SERVING"); fi
timeout $((DURATION + 30)) "$LOAD" --mode="$MODE" --target="127.0.0.1:$PORT" --write_key=wk_live_123 \
  --connections="$CONNECTIONS" --events_per_request=100 --event_bytes=300 --duration="${DURATION}s" \
  --warmup=2s --rate=0 --threads=1 >"$TMP/load.txt" 2>&1 &
LOAD_PID=$!
# CPU ticks per thread name (threads of one name summed).
threads() {
  for t in /proc/$PID/task/*; do
    echo "$(tr ' ' _ <"$t/comm") $(awk '{ print $14 + $15 }' "$t/stat")"
  done | awk '{ a[$1] += $2 } END { for (k in a) print k, a[k] }' | sort
}
sleep 2
threads >"$TMP/before"
if [[ -n "${PERF:-}" ]]; then
  mkdir -p "$PERF"
  sleep 2
  perf record -F 499 --call-graph=dwarf,16384 -p "$PID" -o "$PERF/perf.data" -- sleep 5 >/dev/null 2>&1
  sleep $((DURATION - 7 > 0 ? DURATION - 7 : 0))
else
  sleep "$DURATION"
fi
threads >"$TMP/after"
wait "$LOAD_PID"
EVENTS=$(grep -o '"durable_events_per_s":[0-9]*' "$TMP/load.txt" | cut -d: -f2)
[[ -n $EVENTS ]] || { cat "$TMP/load.txt"; exit 1; }
python3 - "$TMP/before" "$TMP/after" "$EVENTS" "$DURATION" "$(getconf CLK_TCK)" "$MODE" <<'PY'
import sys
read = lambda p: {l.split()[0]: int(l.split()[1]) for l in open(p)}
before, after = read(sys.argv[1]), read(sys.argv[2])
events_per_s, seconds, tck, mode = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
us = lambda ticks: ticks / tck * 1e6 / (events_per_s * seconds)
total = sum(after.values()) - sum(before.get(k, 0) for k in after)
parts = " ".join(f"{k}={us(after[k] - before.get(k, 0)):.1f}" for k in sorted(after)
                 if after[k] - before.get(k, 0) > 0)
print(f"{mode}: {events_per_s} events/s, collector {100 * total / tck / seconds:.0f}% of a core, "
      f"{us(total):.1f} us per event [{parts}]")
PY
if [[ -n "${PERF:-}" ]]; then
  perf script -i "$PERF/perf.data" 2>/dev/null | python3 "$WORKSPACE/tools/bench/flamegraph.py" fold >"$PERF/folded.txt"
  echo "profile: $PERF/folded.txt"
fi
