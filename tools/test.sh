#!/usr/bin/env bash
# Sets up the machine and runs every hookrelay test: the C++ suite under Bazel and the Go client
# library. Usage: tools/test.sh [--asan|--tsan]   (the default build is what CI runs)
set -uo pipefail
cd "$(dirname "$0")/.."

config=()
case "${1:-}" in
  --asan) config=(--config=asan) ;;
  --tsan) config=(--config=tsan) ;;
  "") ;;
  *) echo "usage: $0 [--asan|--tsan]" >&2; exit 2 ;;
esac

tools/bootstrap.sh || exit 1

log=$(mktemp)
failures=$(mktemp)  # what each failed C++ test asserted, printed again at the very end
suite=""
failed_names=()  # printed at the end, so the tail of a long run names what failed
section() { suite=$1; echo "== $1"; }
trap 'rm -f "$log" "$failures"' EXIT

section "C++ tests (bazel test //... ${config[*]})"
bazel test "${config[@]}" --nocache_test_results --test_tag_filters=-benchmark //... 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}
cc_passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
cc_failed=$(grep -cE '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
if [ "$bazel_rc" -ne 0 ] && [ "$cc_failed" -eq 0 ]; then cc_failed=1; fi  # build failure
while read -r target _; do failed_names+=("bazel $target"); done \
  < <(grep -E '^//[^ ]+ +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")
if [ "$bazel_rc" -ne 0 ] && [ "$cc_failed" -eq 1 ] && [ ${#failed_names[@]} -eq 0 ]; then
  failed_names+=("bazel build (exit $bazel_rc)")
fi
# A failed test's own log, here: later runs below (the JetStream suites again) overwrite it.
if [ ${#failed_names[@]} -gt 0 ]; then
  testlogs=$(bazel info "${config[@]}" bazel-testlogs 2>/dev/null || true)
  for name in "${failed_names[@]}"; do
    target=${name#bazel //}
    for file in "$testlogs/${target/://}/test.log" "$testlogs/${target/://}"/shard_*/test.log; do
      [ -f "$file" ] || continue
      echo "== ${file#"$testlogs"/}: what failed, then its last 80 lines"
      grep -a -E -A12 '^\[  FAILED  \]|Failure$|WARNING: (Address|ThreadSanitizer)' "$file" |
        head -60 | tee -a "$failures" || true
      tail -n 80 "$file"
    done
  done
fi

go_passed=0
go_failed=0

# The JetStream engine's suites once more, against the current nats-server release (the run above
# used the oldest supported one, tests/nats_cluster.h): README and deploy/README.md claim both.
current_nats="$HOME/.cache/hookrelay-nats/v2.15.2/nats-server"
if [ -z "${config[*]}" ]; then
  section "JetStream engine suites against nats-server v2.15.2"
  if bazel test --nocache_test_results --test_env=HOOKRELAY_NATS_SERVER="$current_nats" \
      //tests:store_conformance_test //tests:jetstream_e2e_test 2>&1 | tail -8; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi
if [ -d clients/go ] && [ -z "${config[*]}" ]; then
  section "Go client library (go vet, go test -race)"
  if (cd clients/go && go vet ./... && go test -race -count=1 ./... 2>&1 | tee "$log"); then
    go_passed=$(grep -cE '^ok ' "$log")
  else
    go_failed=1; failed_names+=("$suite")
  fi
fi

# The Go library → collector → deliverer → receiver test, on the binaries `bazel test` just built.
if [ -d tests/crosslang ] && [ -z "${config[*]}" ]; then
  section "Cross-language test (Go library → collector → deliverer → receiver)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if (cd tests/crosslang && go vet ./... &&
      HOOKRELAY_BIN_DIR="$bin_dir" go test -race -count=1 ./... 2>&1 | tee "$log") &&
     grep -qE '^ok ' "$log"; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# Real SDKs (Segment's and RudderStack's Node SDKs, pinned in package-lock.json) with their
# defaults against the collector and deliverer binaries; secret rotation checked by the official
# Standard Webhooks verifiers (Node's from package.json, Python's in a pinned venv).
if [ -d tests/ecosystem ] && [ -z "${config[*]}" ]; then
  section "SDK ecosystem test (Segment and RudderStack Node SDKs, Standard Webhooks verifiers)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  sw_version=1.1.0
  sw_venv="${HOME}/.cache/hookrelay-venv-standardwebhooks-${sw_version}"
  if [ ! -x "$sw_venv/bin/python" ] || ! "$sw_venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
    echo "ecosystem test: installing standardwebhooks ${sw_version} (Python) into $sw_venv"
    rm -rf "$sw_venv"
    /usr/bin/env python3 -m venv "$sw_venv" &&
      "$sw_venv/bin/pip" install --quiet --disable-pip-version-check "standardwebhooks==${sw_version}"
  fi
  # npm install, not npm ci: npm 11's ci refuses a lock file without other platforms' optional
  # packages. Direct dependencies are pinned exactly in package.json, the rest by the lock file.
  if (cd tests/ecosystem && npm install --no-audit --no-fund --loglevel=error &&
      HOOKRELAY_BIN_DIR="$bin_dir" HOOKRELAY_SW_PYTHON="$sw_venv/bin/python" node --test 2>&1 |
        tee "$log") &&
     grep -qE '^# fail 0' "$log"; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# Dashboard and alert rules: promtool check/test rules, the dashboard's structure and PromQL, the
# PrometheusRule kept identical to the rule file.
if [ -d tests/observe ] && [ -z "${config[*]}" ]; then
  section "Dashboard and alert rules (tests/observe/static_checks.sh)"
  if tests/observe/static_checks.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
  section "Dashboard and alerts against a live Prometheus (tests/observe/live_test.py)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if HOOKRELAY_BIN_DIR="$bin_dir" timeout 600 python3 tests/observe/live_test.py; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The web console in a real browser: Debian's Chromium, headless, driven by Selenium through the
# setup flow against the collector, deliverer and demo receiver bazel just built.
if [ -d tests/console ] && [ -z "${config[*]}" ]; then
  section "Web console in headless Chromium (tests/console/run.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if HOOKRELAY_BIN_DIR="$bin_dir" timeout 700 tests/console/run.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# Images and manifests: tools/build-images.sh, every kustomization rendered and validated offline,
# the demo overlay's pods started from the images as a kubelet would (tests/deploy/deploy_test.py).
if [ -d tests/deploy ] && [ -z "${config[*]}" ]; then
  section "Images and Kubernetes manifests (tests/deploy/run.sh)"
  if timeout 900 tests/deploy/run.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The JetStream engine benchmark, smoke version (2 s per load run, a 5,000-job backlog): the
# script, the servers and the load tools work together, on the binaries `bazel test` just built
# (fastbuild: the figures mean nothing, docs/BENCHMARKS.md has the real run).
if [ -z "${config[*]}" ]; then
  section "JetStream benchmark smoke run (SMOKE=1 tools/bench/run_jetstream_bench.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SMOKE=1 SKIP_BUILD=1 BIN_DIR="$bin_dir" timeout 180 tools/bench/run_jetstream_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The JetStream sizing benchmark, smoke version (200 events/s for 2 s + 5 s through a 3-node
# cluster, collector, deliverer and receiver): the script works, nothing is lost.
if [ -z "${config[*]}" ]; then
  section "JetStream sizing smoke run (SMOKE=1 tools/bench/run_jetstream_sizing.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SMOKE=1 SKIP_BUILD=1 BIN_DIR="$bin_dir" timeout 180 tools/bench/run_jetstream_sizing.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("jetstream sizing smoke")
  fi
fi

# The delivery benchmark, smoke version (3 s runs, a 5,000-job backlog, the deliverer's default
# flags): the script, the servers and the load tools work together, on the binaries `bazel test`
# just built (fastbuild: the figures mean nothing, docs/BENCHMARKS.md has the real run).
if [ -z "${config[*]}" ]; then
  section "Delivery benchmark smoke run (SMOKE=1 tools/bench/run_delivery_bench.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SMOKE=1 SKIP_BUILD=1 BIN_DIR="$bin_dir" timeout 300 tools/bench/run_delivery_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The deliverer-alone benchmark, smoke version (2,000 jobs over HTTP, then over HTTPS): the job
# source, the deliverer and the receiver work together and every job gets its outcome.
if [ -z "${config[*]}" ]; then
  section "Deliverer benchmark smoke run (tools/bench/run_deliverer_bench.sh, JOBS=2000)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  smoke_ok=1
  # tee -a: when stderr is a log file (CI's `.ci/run > log 2>&1`), a plain tee truncated it.
  for tls in "" 1; do
    if ! SKIP_BUILD=1 TLS="$tls" JOBS=2000 ROUNDS=1 DELIVERERS="smoke=$bin_dir/deliverer/deliverer" \
        JOB_SOURCE="$bin_dir/tools/bench/job_source" BENCH_RECEIVER="$bin_dir/tools/bench/bench_receiver" \
        timeout 120 tools/bench/run_deliverer_bench.sh | tee -a /dev/stderr | grep -q '"delivered":2000,'; then
      smoke_ok=0
    fi
  done
  if [ "$smoke_ok" = 1 ]; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("deliverer bench smoke")
  fi
fi

# The ingest benchmark, smoke version (2 s per load run): the script and the load tool work
# together on the binaries `bazel test` just built (fastbuild: the figures mean nothing).
if [ -z "${config[*]}" ]; then
  section "Ingest benchmark smoke run (tools/bench/run_ingest_bench.sh, DURATION=2s)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SKIP_BUILD=1 COLLECTOR="$bin_dir/collector/collector" INGEST_LOAD="$bin_dir/tools/bench/ingest_load" \
      DURATION=2s WARMUP=1s timeout 180 tools/bench/run_ingest_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The per-thread CPU of ingest, smoke version (3 s of gRPC load): the script reads every
# collector thread's CPU and the load tool's count.
if [ -z "${config[*]}" ]; then
  section "Ingest CPU smoke run (tools/bench/run_ingest_cpu.sh, DURATION=3)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if DURATION=3 timeout 120 tools/bench/run_ingest_cpu.sh "$bin_dir/collector/collector" \
      "$bin_dir/tools/bench/ingest_load" grpc | tee -a /dev/stderr | grep -q "us per event \[.*jobstore-write="; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The fairness benchmark, smoke version (2,000 events, a receiver answering in 200 ms beside a
# fast one, one pair): the script, the binaries and the protection metrics work together.
if [ -z "${config[*]}" ]; then
  section "Fairness benchmark smoke run (tools/bench/run_fairness_bench.sh, EVENTS=2000)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if BIN_DIR="$bin_dir" EVENTS=2000 SLOW_DELAY=200ms REPEAT=1 timeout 300 \
      tools/bench/run_fairness_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The collector memory / start-up benchmark (issue 14), smoke version (20,000 jobs): the script,
# the collector and the load tool work together and a restart still counts every job
# (fastbuild: the figures mean nothing, docs/BENCHMARKS.md has the command for the real run).
if [ -z "${config[*]}" ]; then
  section "Memory benchmark smoke run (SMOKE=1 tools/bench/run_memory_bench.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SMOKE=1 SKIP_BUILD=1 BIN_DIR="$bin_dir" timeout 300 tools/bench/run_memory_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The held-backlog benchmark (issue 23), smoke version (100,000 jobs held for a throttled
# destination, more than the window: it is detached): the other destination's jobs all arrive
# beside them (fastbuild: the figures mean nothing; docs/BENCHMARKS.md has the real run).
if [ -z "${config[*]}" ]; then
  section "Held-backlog benchmark smoke run (SMOKE=1 tools/bench/run_held_backlog_bench.sh)"
  bin_dir=$(bazel info bazel-bin 2>/dev/null)
  if SMOKE=1 SKIP_BUILD=1 BIN_DIR="$bin_dir" timeout 300 tools/bench/run_held_backlog_bench.sh; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

# The libFuzzer targets (//fuzz), a fixed number of runs each over the seed corpus: clang-14 with
# ASan + UBSan in their own Bazel output base (docs/FUZZING.md).
if [ -z "${config[*]}" ]; then
  section "Fuzz smoke run (tools/fuzz.sh smoke)"
  if tools/fuzz.sh smoke; then
    go_passed=$((go_passed + 1))
  else
    go_failed=$((go_failed + 1)); failed_names+=("$suite")
  fi
fi

passed=$((cc_passed + go_passed))
failed=$((cc_failed + go_failed))
echo
echo "test suites: ${passed} passed, ${failed} failed"
for name in "${failed_names[@]}"; do echo "failed: $name"; done
# A CI page shows the head and the tail of a long run: what the failed tests asserted goes last.
if [ -s "$failures" ]; then
  echo "what the failed C++ tests asserted (their whole logs are above):"
  grep -a -v '^\[nats-' "$failures" | head -80
fi
[ "$failed" -eq 0 ]
