#!/usr/bin/env bash
# tools/run-jetstream.sh run for real on free loopback ports (the README's one command for the
# JetStream engine): a 3-node NATS cluster, two collectors, one deliverer, the demo receiver.
# Events sent over HTTP to each collector are printed by the receiver with a verified signature;
# then a Ctrl-C (SIGINT to the script's process group, as a terminal sends it) stops everything
# in order (deliverer, collectors, receiver, NATS servers) and leaves no process behind.
# Runs under `bazel test` (the script and binaries from runfiles) or by hand with
# HOOKRELAY_BIN_DIR=bazel-bin. Needs the nats-server tools/bootstrap.sh builds.
set -euo pipefail
# Job control: the script gets a process group of its own, as in a terminal, with SIGINT not
# ignored (a background job of a non-interactive shell starts with SIGINT ignored, which bash
# cannot trap).
set -m

if [ -n "${TEST_SRCDIR:-}" ]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-hookrelay}"
  bin=$root
  tmp="$TEST_TMPDIR"
else
  root="$(cd "$(dirname "$0")/.." && pwd)"
  bin="$(cd "${HOOKRELAY_BIN_DIR:?set HOOKRELAY_BIN_DIR to bazel-bin}" && pwd)"
  tmp=$(mktemp -d)
fi
script="$root/tools/run-jetstream.sh"
out="$tmp/run.out"
data="$tmp/data-jetstream"
start=$SECONDS

pid=""
children=()
cleanup() {
  # Only on failure is anything still running here.
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
  for _ in $(seq 1 100); do
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  for c in "${children[@]}"; do kill -KILL "$c" 2>/dev/null || true; done
  [ -z "$pid" ] || kill -KILL "$pid" 2>/dev/null || true
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- $out" >&2
  tail -40 "$out" >&2 || true
  for f in "$data"/logs/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2
    tail -15 "$f" >&2
  done
  exit 1
}
pass() { echo "PASS: $* ($((SECONDS - start)) s)"; }

# Waits (at most $2 s) for a line matching $1 in the script's output, while the script runs.
wait_line() {
  local tenths=$(($2 * 10))
  until grep -q -- "$1" "$out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "tools/run-jetstream.sh exited before printing '$1'"
    tenths=$((tenths - 1))
    [ "$tenths" -gt 0 ] || fail "no line matching '$1' after $2 s"
    sleep 0.1
  done
}

# 19 distinct free ports on 127.0.0.1, held together while chosen.
read -r -a p <<<"$(python3 -c '
import socket
socks = []
for _ in range(19):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
')"
[ "${#p[@]}" -eq 19 ] || fail "could not choose free ports"

HOOKRELAY_BIN_DIR="$bin" DATA_DIR="$data" \
  HTTP_PORT=${p[0]} GRPC_PORT=${p[1]} METRICS_PORT=${p[2]} ADMIN_PORT=${p[3]} \
  HTTP_PORT_2=${p[4]} GRPC_PORT_2=${p[5]} METRICS_PORT_2=${p[6]} ADMIN_PORT_2=${p[7]} \
  DELIVERER_METRICS_PORT=${p[8]} RECEIVER_PORT=${p[9]} \
  NATS_PORTS="${p[10]} ${p[11]} ${p[12]}" NATS_ROUTE_PORTS="${p[13]} ${p[14]} ${p[15]}" \
  NATS_MONITOR_PORTS="${p[16]} ${p[17]} ${p[18]}" \
  "$script" >"$out" 2>&1 &
pid=$!
wait_line "Stop with Ctrl-C." 40
grep -q "http://127.0.0.1:${p[0]}/v1/batch" "$out" || fail "the printed first event does not name collector 1's port"
grep -q "http://127.0.0.1:${p[9]}/hooks" "$out" || fail "the receiver's URL is not printed"
# The script's children other than its own short-lived commands (sleep, cat), from /proc.
children=()
names=""
for stat in /proc/[0-9]*/stat; do
  read -r line 2>/dev/null <"$stat" || continue
  comm=${line#*(}; comm=${comm%) *}
  rest=${line##*) }; read -r _ ppid _ <<<"$rest"
  [ "$ppid" = "$pid" ] || continue
  case "$comm" in sleep|cat) continue ;; esac
  children+=("${line%% *}")
  names+="$comm "
done
names=$(tr ' ' '\n' <<<"$names" | sort | tr '\n' ' ')
[ "$names" = " collector collector deliverer demo_receiver nats-server nats-server nats-server " ] ||
  fail "running: $names"
pass "started: 3 nats-server, 2 collectors, 1 deliverer, 1 demo receiver"

# Events to both collectors: a batch (the README's example) and single tracks.
send() {  # port path body
  local answer
  answer=$(curl -sS -m 10 -u wk_live_123: -H 'Content-Type: application/json' -d "$3" \
    "http://127.0.0.1:$1$2") || fail "POST $2 to :$1 failed"
  [ "$answer" = '{"success":true}' ] || fail "POST $2 to :$1 answered $answer"
}
send "${p[0]}" /v1/batch \
  '{"batch":[{"type":"track","userId":"u1","event":"Signed Up","messageId":"c1-batch-1","properties":{"plan":"pro"}},
             {"type":"identify","userId":"u1","messageId":"c1-batch-2","traits":{"plan":"pro"}}]}'
send "${p[0]}" /v1/track '{"userId":"u2","event":"Order Completed","messageId":"c1-track-1"}'
send "${p[4]}" /v1/batch \
  '{"batch":[{"type":"track","userId":"u3","event":"Signed Up","messageId":"c2-batch-1"}]}'
send "${p[4]}" /v1/track '{"userId":"u4","event":"Order Completed","messageId":"c2-track-1"}'
for id in c1-batch-1 c1-batch-2 c1-track-1 c2-batch-1 c2-track-1; do
  wait_line "^POST /hooks .*messageId=${id} .*X-Signature: verified$" 20
done
[ "$(grep -c '^POST /hooks' "$out")" = 5 ] || fail "the receiver printed $(grep -c '^POST /hooks' "$out") webhooks, want 5"
! grep -q 'X-Signature: \(MISMATCH\|absent\|unchecked\)' "$out" || fail "a signature did not verify"
pass "5 events through both collectors, each printed once by the receiver, signature verified"

# Ctrl-C: SIGINT to the script's process group, as a terminal sends it to the foreground job.
kill -INT -- "-$pid"
for _ in $(seq 1 300); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null && fail "tools/run-jetstream.sh still running 30 s after SIGINT"
set +e
wait "$pid"
code=$?
set -e
pid=""
[ "$code" = 0 ] || fail "tools/run-jetstream.sh exited $code after SIGINT"
for c in "${children[@]}"; do
  ! kill -0 "$c" 2>/dev/null || fail "process $c ($(tr '\0' ' ' <"/proc/$c/cmdline")) still running"
done
# Nothing at all with the data directory on its command line (the nats-servers' -c n1.conf).
for cmdline in /proc/[0-9]*/cmdline; do
  args=$(tr '\0' ' ' 2>/dev/null <"$cmdline") || continue
  case "$args" in *"$data"*) fail "still running: $args" ;; esac
done
order=$(grep -E '^stopp' "$out" | tr '\n' ',')
[ "$order" = "stopping deliverer,stopping collector-2,stopping collector-1,stopping receiver,stopping nats-server n3,stopping nats-server n2,stopping nats-server n1,stopped," ] ||
  fail "stop order: $order"
for c in 1 2; do
  grep -q '"msg":"collector stopped"' "$data/logs/collector-$c.log" || fail "collector $c did not drain"
  ! grep -q '"level":"error"' "$data/logs/collector-$c.log" || fail "collector $c logged an error"
done
grep -q '"msg":"deliverer stopped"' "$data/logs/deliverer.log" || fail "the deliverer did not drain"
pass "SIGINT: deliverer, collectors, receiver, then the NATS servers stopped; exit 0, nothing left running"
[ -n "${TEST_TMPDIR:-}" ] || rm -rf "$tmp"
