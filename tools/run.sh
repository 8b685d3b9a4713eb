#!/usr/bin/env bash
# Sets up the machine, builds, and runs hookrelay locally on the embedded store with the sample
# config (deploy/local/config.yaml). Ctrl-C (SIGINT) or SIGTERM drains and stops everything.
# Environment: HTTP_PORT (8080), GRPC_PORT (50051), METRICS_PORT (9464), DATA_DIR (./data).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/bootstrap.sh
bazel build -c opt //collector:collector

http_port=${HTTP_PORT:-8080}
grpc_port=${GRPC_PORT:-50051}
metrics_port=${METRICS_PORT:-9464}
data_dir=${DATA_DIR:-./data}
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

"$bin/collector/collector" \
  --config=deploy/local/config.yaml \
  --data_dir="$data_dir" \
  --http_address="127.0.0.1:${http_port}" \
  --grpc_address="127.0.0.1:${grpc_port}" \
  --metrics_address="127.0.0.1:${metrics_port}" &
collector=$!
trap 'kill -TERM $collector 2>/dev/null; wait $collector' INT TERM

for _ in $(seq 1 50); do
  curl -fsS "http://127.0.0.1:${http_port}/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done

cat <<MSG

hookrelay is running (collector: HTTP ${http_port}, gRPC ${grpc_port}, metrics ${metrics_port}).
Send a first event:

  curl -u wk_live_123: -H 'Content-Type: application/json' \\
    -d '{"batch":[{"type":"track","userId":"u1","event":"Signed Up","properties":{"plan":"pro"}}]}' \\
    http://127.0.0.1:${http_port}/v1/batch

Metrics: curl -s http://127.0.0.1:${metrics_port}/metrics | grep hookrelay_
Stop with Ctrl-C.
MSG
wait $collector
