#!/usr/bin/env bash
# Static checks of the observability files (no cluster, no running hookrelay): the Prometheus
# alert rules and their unit tests, the PrometheusRule that embeds them, the Grafana dashboard.
# Needs promtool (Debian: prometheus package) and python3 (stdlib only).
# Usage, from anywhere: tests/observe/static_checks.sh
# Prints one PASS/FAIL line per check (a failing check's output follows, indented); exits 1 if
# any check failed.
set -euo pipefail
cd "$(dirname "$0")/../.."

RULES=deploy/prometheus/hookrelay-rules.yaml
RULE_TESTS=deploy/prometheus/hookrelay-rules.test.yaml
DASHBOARD=deploy/grafana/hookrelay-dashboard.json
PROMETHEUS_RULE=deploy/kubernetes/components/monitoring/prometheusrule.yaml

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

failed=0
# run NAME COMMAND...: one line per check; the output only when it fails.
run() {
  local name=$1
  shift
  if "$@" >"$tmp/out" 2>&1; then
    echo "PASS  $name"
  else
    echo "FAIL  $name"
    sed 's/^/      /' "$tmp/out"
    failed=1
  fi
}

if ! command -v promtool >/dev/null; then
  echo "FAIL  promtool not found (Debian/Ubuntu: apt-get install prometheus)"
  exit 1
fi

run "promtool check rules $RULES" promtool check rules "$RULES"
run "promtool test rules $RULE_TESTS" promtool test rules "$RULE_TESTS"
run "rule conventions; every alert fires and stays quiet in a test" \
  python3 tests/observe/check_rules.py "$RULES" "$RULE_TESTS"
run "rule exprs listable (tests/observe/list_rule_exprs.py)" \
  python3 tests/observe/list_rule_exprs.py "$RULES"
run "check_dashboard.py $DASHBOARD" python3 tests/observe/check_dashboard.py "$DASHBOARD"
run "dashboard exprs are valid PromQL (promtool check rules, variables substituted)" \
  bash -c 'python3 tests/observe/check_dashboard.py --as-rule-file "$1" >"$2" &&
           promtool check rules "$2"' _ "$DASHBOARD" "$tmp/dashboard-rules.yaml"
run "PrometheusRule spec.groups == $RULES groups" python3 tests/observe/check_rules_sync.py
run "promtool check rules on the PrometheusRule's groups" \
  bash -c 'python3 tests/observe/check_rules_sync.py --extract "$1" && promtool check rules "$1"' \
  _ "$tmp/prometheusrule-groups.yaml"

exit "$failed"
