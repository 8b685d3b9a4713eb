#!/usr/bin/env bash
# Sets up the machine, builds, and runs the whole hookrelay pipeline locally: a collector on the
# embedded store with the sample config (deploy/local/config.yaml), a deliverer connected to it,
# and a demo receiver that prints each webhook and whether its X-Signature verified.
# Ctrl-C (SIGINT) or SIGTERM drains and stops everything.
# Environment: HTTP_PORT (8080), GRPC_PORT (50051), METRICS_PORT (9464), DELIVERER_METRICS_PORT
# (9465), DATA_DIR (./data). The receiver listens on 127.0.0.1:9000 (the sample config's URL).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/bootstrap.sh
bazel build -c opt //collector:collector //deliverer:deliverer //tools/receiver:demo_receiver \
  //tools/hookrelayctl:hookrelayctl

http_port=${HTTP_PORT:-8080}
grpc_port=${GRPC_PORT:-50051}
metrics_port=${METRICS_PORT:-9464}
deliverer_metrics_port=${DELIVERER_METRICS_PORT:-9465}
data_dir=${DATA_DIR:-./data}
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

pids=()
stop() {
  # The deliverer first, so it reports what it holds before the collector closes.
  for (( i=${#pids[@]}-1; i>=0; i-- )); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap stop EXIT
trap 'exit 0' INT TERM

"$bin/tools/receiver/demo_receiver" --address=127.0.0.1:9000 --secret=s3cr3t &
pids+=($!)

"$bin/collector/collector" \
  --config=deploy/local/config.yaml \
  --data_dir="$data_dir" \
  --http_address="127.0.0.1:${http_port}" \
  --grpc_address="127.0.0.1:${grpc_port}" \
  --metrics_address="127.0.0.1:${metrics_port}" &
pids+=($!)

for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:${http_port}/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done

# The demo receiver is on loopback, which a production deliverer refuses.
"$bin/deliverer/deliverer" \
  --collector="127.0.0.1:${grpc_port}" \
  --metrics_address="127.0.0.1:${deliverer_metrics_port}" \
  --allow_private_networks &
pids+=($!)
sleep 0.5

cat <<MSG

hookrelay is running: collector (HTTP ${http_port}, gRPC ${grpc_port}, metrics ${metrics_port}),
deliverer (metrics ${deliverer_metrics_port}), demo receiver (http://127.0.0.1:9000/hooks).
Send a first event; the receiver prints it with "X-Signature: verified":

  curl -u wk_live_123: -H 'Content-Type: application/json' \\
    -d '{"batch":[{"type":"track","userId":"u1","event":"Signed Up","properties":{"plan":"pro"}}]}' \\
    http://127.0.0.1:${http_port}/v1/batch

Console:       http://127.0.0.1:8081/ (admin API on loopback, no token needed here)
Set up more:   bazel-bin/tools/hookrelayctl/hookrelayctl destinations list   (README "Set up at run time")
Dead letters:  bazel-bin/tools/hookrelayctl/hookrelayctl dead-letters list
Metrics:       curl -s http://127.0.0.1:${metrics_port}/metrics http://127.0.0.1:${deliverer_metrics_port}/metrics | grep hookrelay_
Stop with Ctrl-C.
MSG
wait -n "${pids[@]}"
