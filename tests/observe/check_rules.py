#!/usr/bin/env python3
"""Checks deploy/prometheus/hookrelay-rules.yaml against the project's conventions and its unit
tests' coverage. promtool checks the syntax and runs the tests; this checks what it does not:

- every group is named hookrelay.*; every alerting rule has `for:`, labels.severity critical or
  warning, annotations summary, description and runbook_url
  https://github.com/hookrelay/hookrelay/blob/main/deploy/README.md#<lower-case alert name>;
- every alert name appears in hookrelay-rules.test.yaml in at least one case where it fires
  (`exp_alerts:` with items) and one where it must not (`exp_alerts: []`). This is a text scan
  of the test file, which keeps `alertname:` on the line after `- eval_time:` and
  `exp_alerts:` right after it.

Usage: python3 tests/observe/check_rules.py [RULE_FILE [TEST_FILE]]
Prints one line per problem and exits 1 if there is any, else prints a summary and exits 0.
"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import miniyaml  # noqa: E402
from list_rule_exprs import ROOT, alert_rules, groups_of  # noqa: E402

RUNBOOK = "https://github.com/hookrelay/hookrelay/blob/main/deploy/README.md#"
SEVERITIES = ("critical", "warning")


def lint(path):
    problems = []
    try:
        groups = groups_of(miniyaml.load_file(path))
        rules = alert_rules(path)
    except (OSError, miniyaml.YamlError) as e:
        return [f"{path}: {e}"], []
    for g in groups:
        name = (g or {}).get("name") or ""
        if not name.startswith("hookrelay."):
            problems.append(f"{path}: group {name!r} is not named hookrelay.*")
    seen = set()
    for group, rule in rules:
        alert = rule.get("alert")
        where = f"{path}: alert {alert} (group {group})"
        if not rule.get("expr"):
            problems.append(f"{where}: no expr")
        if not rule.get("for"):
            problems.append(f"{where}: no `for:`")
        labels = rule.get("labels") or {}
        severity = labels.get("severity")
        if severity not in SEVERITIES:
            problems.append(f"{where}: severity {severity!r} is not one of {SEVERITIES}")
        if (alert, severity) in seen:
            problems.append(f"{where}: another rule has the same name and severity")
        seen.add((alert, severity))
        annotations = rule.get("annotations") or {}
        for key in ("summary", "description", "runbook_url"):
            if not annotations.get(key):
                problems.append(f"{where}: no annotations.{key}")
        url = annotations.get("runbook_url")
        if url and url != RUNBOOK + str(alert).lower():
            problems.append(f"{where}: runbook_url should be {RUNBOOK}{str(alert).lower()}")
    return problems, sorted({r.get("alert") for _, r in rules})


def coverage(test_path, alerts):
    """{alert: (fires, does_not_fire)} from a text scan of the promtool test file."""
    fires, quiet = set(), set()
    current = None
    with open(test_path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*(?:-\s+)?alertname:\s*(\S+)\s*$", line)
            if m:
                current = m.group(1).strip("'\"")
                continue
            m = re.match(r"^\s*(?:-\s+)?exp_alerts:\s*(.*?)\s*$", line)
            if m and current:
                (quiet if m.group(1) == "[]" else fires).add(current)
                current = None
    problems = []
    for alert in alerts:
        if alert not in fires:
            problems.append(f"{test_path}: no case where {alert} fires")
        if alert not in quiet:
            problems.append(f"{test_path}: no case where {alert} must not fire (exp_alerts: [])")
    for alert in sorted((fires | quiet) - set(alerts)):
        problems.append(f"{test_path}: tests alert {alert}, which the rule file does not define")
    return problems


def main(argv):
    rules = argv[1] if len(argv) > 1 else os.path.join(
        ROOT, "deploy", "prometheus", "hookrelay-rules.yaml")
    tests = argv[2] if len(argv) > 2 else re.sub(r"\.ya?ml$", ".test.yaml", rules)
    problems, alerts = lint(rules)
    if alerts:
        try:
            problems += coverage(tests, alerts)
        except OSError as e:
            problems.append(f"{tests}: {e}")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"{len(alerts)} alerts follow the conventions; each fires and stays quiet in a test")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
