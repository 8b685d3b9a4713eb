#!/usr/bin/env bash
# The README's setup walkthrough, command for command: an empty collector (no --config), a
# deliverer, the demo receiver; then the setup flow once with hookrelayctl and once with curl
# against the JSON API, each ending with a delivered event whose X-Signature verified. Also: a
# sixth URL and a reserved header refused naming the field and the limit (exit 1, nothing
# changed), a revoked key refused at once, and everything still there after a restart.
# Runs under `bazel test` (binaries from runfiles) or by hand with HOOKRELAY_BIN_DIR=bazel-bin.
set -euo pipefail

if [ -n "${TEST_SRCDIR:-}" ]; then
  bin="$TEST_SRCDIR/${TEST_WORKSPACE:-hookrelay}"
  tmp="$TEST_TMPDIR"
else
  bin="${HOOKRELAY_BIN_DIR:?set HOOKRELAY_BIN_DIR to bazel-bin}"
  tmp=$(mktemp -d)
fi
collector="$bin/collector/collector"
deliverer="$bin/deliverer/deliverer"
receiver="$bin/tools/receiver/demo_receiver"
ctl="$bin/tools/hookrelayctl/hookrelayctl"
# HOOKRELAY_ENGINE=jetstream: the collector runs on a loopback 3-node JetStream cluster
# (tests/nats_cluster_runner) that outlives the collector's restart.
engine="${HOOKRELAY_ENGINE:-embedded}"

pids=()
cleanup() {
  for (( i=${#pids[@]}-1; i>=0; i-- )); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
cluster_pid=""
stop_cluster() {
  if [ -n "$cluster_pid" ]; then
    kill -TERM "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
}
trap 'cleanup; stop_cluster' EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -20 "$f" >&2; done
  exit 1
}
pass() { echo "PASS: $*"; }

# Waits (10 s at most) for a JSON log line with field $2 in file $1; prints its value.
field() {
  for _ in $(seq 1 200); do
    v=$(grep -o "\"$2\":[0-9]*" "$1" 2>/dev/null | head -1 | cut -d: -f2 || true)
    if [ -n "$v" ] && [ "$v" != 0 ]; then echo "$v"; return 0; fi
    sleep 0.05
  done
  fail "no $2 in $1"
}

# Waits (20 s at most) for a line matching $2 in $1.
wait_line() {
  for _ in $(seq 1 400); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  fail "no line matching '$2' in $1"
}

engine_flags=()
if [ "$engine" = jetstream ]; then
  "$bin/tests/nats_cluster_runner" >"$tmp/cluster.log" 2>&1 &
  cluster_pid=$!
  for _ in $(seq 1 900); do
    grep -q '^nats_url=' "$tmp/cluster.log" 2>/dev/null && break
    kill -0 "$cluster_pid" 2>/dev/null || fail "the NATS cluster did not start"
    sleep 0.1
  done
  nats_url=$(grep -o '^nats_url=.*' "$tmp/cluster.log" | head -1 | cut -d= -f2-)
  [ -n "$nats_url" ] || fail "no nats_url from the cluster runner in 90 s"
  engine_flags=(--store=jetstream "--nats_url=$nats_url" --nats_replicas=3)
elif [ "$engine" != embedded ]; then
  fail "HOOKRELAY_ENGINE must be embedded or jetstream, not $engine"
fi

start_collector() {
  "$collector" --data_dir="$tmp/data" --grpc_address=127.0.0.1:0 --http_address=127.0.0.1:0 \
    --metrics_address=127.0.0.1:0 --admin_http_address=127.0.0.1:0 \
    --admin_token_file="$tmp/admin-token" "${engine_flags[@]}" >"$tmp/collector.log" 2>&1 &
  pids+=($!)
  wait_line "$tmp/collector.log" '"collector serving"'
  grpc_port=$(field "$tmp/collector.log" grpc_port)
  http_port=$(field "$tmp/collector.log" http_port)
  admin_port=$(field "$tmp/collector.log" admin_http_port)
  "$deliverer" --collector="127.0.0.1:$grpc_port" --metrics_address=127.0.0.1:0 \
    --allow_private_networks --admin_token_file="$tmp/admin-token" >"$tmp/deliverer.log" 2>&1 &
  pids+=($!)
  wait_line "$tmp/deliverer.log" '"deliverer running"'
  export HOOKRELAY_ADMIN_URL="http://127.0.0.1:$admin_port"
}

# --- set-up (README "Set up at run time") ---
head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$tmp/admin-token"
printf 'demo-s3cret' >"$tmp/orders.secret"
export HOOKRELAY_ADMIN_TOKEN_FILE="$tmp/admin-token"
"$receiver" --address=127.0.0.1:0 --secret=demo-s3cret --print_bodies >"$tmp/receiver.log" 2>&1 &
pids+=($!)
wait_line "$tmp/receiver.log" "listening on"
receiver_url=$(grep -o 'http://127.0.0.1:[0-9]*/' "$tmp/receiver.log" | head -1)
start_collector
grep -q "\"job store opened\",\"store\":\"$engine" "$tmp/collector.log" ||
  fail "the collector did not open the $engine engine: $(grep 'job store' "$tmp/collector.log")"
pass "collector on the $engine engine"

# --- with hookrelayctl ---
"$ctl" catalog | grep -q Webhooks || fail "catalog does not list Webhooks"
"$ctl" sources create --id=shop --name="Shop backend" --kind=server >"$tmp/source.txt"
write_key=$("$ctl" -o json sources get shop | grep -o '"writeKeys":\["[^"]*"' | cut -d'"' -f4)
[ -n "$write_key" ] || fail "no write key"
"$ctl" destinations create --id=orders --source=shop \
  --url="${receiver_url}orders" --header="X-Api-Key: demo" \
  --shared-secret-file="$tmp/orders.secret" --enabled >"$tmp/destination.txt"
grep -q "shared secret: *set" "$tmp/destination.txt" || fail "secret not set: $(cat "$tmp/destination.txt")"
! grep -q demo-s3cret "$tmp/destination.txt" || fail "the secret was printed"
"$ctl" destinations test orders >"$tmp/test.txt" || fail "destinations test: $(cat "$tmp/test.txt")"
grep -q "outcome: delivered" "$tmp/test.txt" || fail "test event not delivered"
pass "hookrelayctl: source, destination, test event"

curl -fsS -u "$write_key:" -H 'Content-Type: application/json' \
  -d '{"userId":"u1","event":"Order Completed","messageId":"cli-flow-1"}' \
  "http://127.0.0.1:$http_port/v1/track" >/dev/null
wait_line "$tmp/receiver.log" 'cli-flow-1.*X-Signature: verified'
pass "an event through the CLI-made destination arrived, signature verified"

# A sixth URL: refused naming the field and the limit; nothing changed.
before=$("$ctl" -o json destinations get orders | sed 's/"stats":{[^}]*}//')
args=()
for i in 1 2 3 4 5 6; do args+=("--url=https://hook$i.example/x"); done
set +e
"$ctl" destinations update orders "${args[@]}" 2>"$tmp/six.err"
code=$?
"$ctl" destinations update orders --url="https://h.example/x" --header="Content-Type: text/plain" 2>"$tmp/reserved.err"
code2=$?
set -e
[ "$code" = 1 ] || fail "six URLs: exit $code"
grep -q "INVALID_ARGUMENT" "$tmp/six.err" && grep -q "urls: .*at most 5" "$tmp/six.err" ||
  fail "six URLs: $(cat "$tmp/six.err")"
[ "$code2" = 1 ] || fail "reserved header: exit $code2"
grep -q 'urls\[0\].headers\["Content-Type"\]: .*reserved' "$tmp/reserved.err" ||
  fail "reserved header: $(cat "$tmp/reserved.err")"
after=$("$ctl" -o json destinations get orders | sed 's/"stats":{[^}]*}//')
[ "$before" = "$after" ] || fail "the destination changed after refused updates"
pass "six URLs and a reserved header refused, naming the field and the limit; nothing changed"

# --- with curl against the JSON API (README) ---
token=$(cat "$tmp/admin-token")
api="http://127.0.0.1:$admin_port/admin/v1"
curl -fsS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d '{"id":"app","name":"Mobile app","kind":"mobile"}' "$api/sources" >"$tmp/app.json"
app_key=$(grep -o '"writeKeys":\["[^"]*"' "$tmp/app.json" | cut -d'"' -f4)
curl -fsS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  -d "{\"id\":\"app-hook\",\"sources\":[\"app\"],\"enabled\":true,\"sharedSecret\":\"demo-s3cret\",
       \"urls\":[{\"url\":\"${receiver_url}app\",\"headers\":{\"X-Api-Key\":\"demo\"}}]}" \
  "$api/destinations" >"$tmp/app-hook.json"
grep -q '"sharedSecretSet":true' "$tmp/app-hook.json" || fail "curl: $(cat "$tmp/app-hook.json")"
status=$(curl -sS -o "$tmp/bad.json" -w '%{http_code}' -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -X PATCH -d '{"urls":[]}' "$api/destinations/app-hook")
[ "$status" = 400 ] && grep -q '"field":"urls"' "$tmp/bad.json" || fail "curl PATCH: $status $(cat "$tmp/bad.json")"
status=$(curl -sS -o /dev/null -w '%{http_code}' "$api/sources")
[ "$status" = 401 ] || fail "no token: $status"
curl -fsS -u "$app_key:" -H 'Content-Type: application/json' \
  -d '{"anonymousId":"a1","event":"Opened","messageId":"curl-flow-1"}' \
  "http://127.0.0.1:$http_port/v1/track" >/dev/null
wait_line "$tmp/receiver.log" 'curl-flow-1.*X-Signature: verified'
pass "curl: source, destination, a delivered signed event; errors name the field"

# Rotation: the revoked key is refused at once.
new_key=$("$ctl" sources write-keys create shop)
"$ctl" sources write-keys revoke shop "$write_key" >/dev/null
status=$(curl -sS -o /dev/null -w '%{http_code}' -u "$write_key:" -H 'Content-Type: application/json' \
  -d '{"userId":"u1","event":"X"}' "http://127.0.0.1:$http_port/v1/track")
[ "$status" = 401 ] || fail "revoked key answered $status"
pass "revoked write key refused"

# An audience and a deletion (README, "Audiences and deletions"): the bodies the receiver sees.
curl -fsS -u "$new_key:" -H 'Content-Type: application/json' \
  -d '{"userId":"ada","traits":{"plan":"pro"},"messageId":"aud-flow-1"}' \
  "http://127.0.0.1:$http_port/v1/identify" >/dev/null
wait_line "$tmp/receiver.log" 'aud-flow-1.*X-Signature: verified'
"$ctl" audiences create --id=pro --name="Pro Customers" --source=shop \
  --rule='{"match":"all","conditions":[{"trait":"plan","op":"eq","value":"pro"}]}' >"$tmp/audience.txt" ||
  fail "audiences create: $(cat "$tmp/audience.txt")"
wait_line "$tmp/receiver.log" '"traits":{"pro_customers":true},"timestamp":"[^"]*","context":{"personas":{"computation_class":"audience","computation_key":"pro_customers","computation_id":"pro"}}}$'
grep -B1 '"pro_customers":true' "$tmp/receiver.log" | grep -q 'identify.*userId=ada.*X-Signature: verified' ||
  fail "the identify was not signed or not for ada: $(grep -B1 pro_customers "$tmp/receiver.log")"
[ "$("$ctl" -o json audiences get pro | grep -o '"members":"[0-9]*"')" = '"members":"1"' ] ||
  fail "members: $("$ctl" -o json audiences get pro)"
pass "audience: one signed identify with the trait and context.personas for the member"

"$ctl" deletions create --user=ada --request-id=ticket-4711 >"$tmp/deletion.txt" ||
  fail "deletions create: $(cat "$tmp/deletion.txt")"
wait_line "$tmp/receiver.log" '^    {"type":"delete","userId":"ada","timestamp":"[0-9T:.Z-]*"}$'
grep -B1 '{"type":"delete","userId":"ada"' "$tmp/receiver.log" | grep -q 'delete.*userId=ada.*X-Signature: verified' ||
  fail "the delete was not signed: $(grep -B1 '"type":"delete"' "$tmp/receiver.log")"
"$ctl" audiences sync pro >/dev/null
[ "$("$ctl" -o json audiences get pro | grep -o '"members":"[0-9]*"')" = '"members":"0"' ] ||
  fail "members after the deletion: $("$ctl" -o json audiences get pro)"
[ "$(grep -c '"pro_customers":false' "$tmp/receiver.log")" = 0 ] || fail "an identify followed the deletion"
pass "deletion: one signed delete body exactly, the member removed without an identify"

# Restart: everything is still there.
cleanup
pids=()
receiver_address=${receiver_url#http://}
"$receiver" --address="${receiver_address%/}" --secret=demo-s3cret --print_bodies >>"$tmp/receiver.log" 2>&1 &
pids+=($!)
start_collector
"$ctl" destinations list | grep -q "app-hook" || fail "destinations gone after restart"
curl -fsS -u "$new_key:" -H 'Content-Type: application/json' \
  -d '{"userId":"u1","event":"Again","messageId":"after-restart-1"}' \
  "http://127.0.0.1:$http_port/v1/track" >/dev/null
wait_line "$tmp/receiver.log" 'after-restart-1.*X-Signature: verified'
pass "after a restart: config kept, new key works, delivery signed"
