#!/usr/bin/env bash
# Installs the Debian 12 packages hookrelay builds, tests and runs with, and nothing else.
# Safe to run any number of times: when everything is present it changes nothing and needs no
# network. Run as root, or as a user with sudo.
set -euo pipefail

packages=(
  # build
  bazel-bootstrap          # Bazel 4.2.3 (offline; see third_party/README.md)
  g++ pkg-config
  # RPC, schema, base library
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  # metrics, crypto, compression, HTTP server and client
  prometheus-cpp-dev libssl-dev zlib1g-dev libboost1.81-dev libcurl4-openssl-dev
  # storage, JSON, config; the NATS C client for the JetStream engine
  librocksdb-dev libsimdjson-dev rapidjson-dev libyaml-cpp-dev libnats-dev
  # the servers' allocator
  libjemalloc-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev curl
  # the bench scripts and their smoke runs in the test command: wrk (the delivery ceiling), jq,
  # db_bench from rocksdb-tools (RocksDB's synced write ceiling in run_ingest_bench.sh)
  wrk jq rocksdb-tools
  # fuzzing (tools/fuzz.sh): clang and its libFuzzer / sanitizer runtimes
  clang-14 libclang-rt-14-dev
  # deploy and observe (tools/build-images.sh, tests/deploy, tests/observe): image assembly,
  # Prometheus and promtool, a Python venv for the offline Kubernetes schema validator
  umoci prometheus python3-venv
  # the console's browser test (tests/console): Chromium driven headless through chromedriver
  chromium chromium-driver
)
# The Go client library needs a Go toolchain; Debian's is used only when none is installed.
command -v go >/dev/null 2>&1 || packages+=(golang-go)
# The SDK ecosystem test runs Node.js SDKs; Debian's Node is used only when none is installed.
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
else
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "bootstrap: packages done"
fi

# The NATS servers the JetStream engine is tested against, built from the Go module proxy
# (Debian's nats-server 2.9.10 predates features hookrelay relies on): the oldest release it
# supports (collector/store/jetstream/jetstream_layout.h, kMinNatsServerVersion; the whole test
# suite runs on it) and the current one (tools/test.sh runs the engine's suites on it too). Kept
# outside the tree; tests find them there (or at $HOOKRELAY_NATS_SERVER).
for nats_version in v2.14.9 v2.15.2; do
  nats_dir="$HOME/.cache/hookrelay-nats/$nats_version"
  if [ -x "$nats_dir/nats-server" ]; then
    echo "bootstrap: nats-server $nats_version present"
  else
    echo "bootstrap: building nats-server $nats_version (go install, about a minute)"
    mkdir -p "$nats_dir"
    GOBIN="$nats_dir" GOFLAGS=-buildvcs=false go install "github.com/nats-io/nats-server/v2@$nats_version"
    "$nats_dir/nats-server" --version
  fi
done
