#!/usr/bin/env python3
"""Prints every alerting rule of a Prometheus rule file as one JSON object per line:
{"alert": "<name>", "expr": "<PromQL>"}, in file order (two rules may share a name when they
differ by severity). Also accepts a PrometheusRule (rules under spec.groups).

Usage: python3 tests/observe/list_rule_exprs.py [RULE_FILE]
       (default: deploy/prometheus/hookrelay-rules.yaml, relative to the repository root)

Reads YAML with tests/observe/miniyaml.py (stdlib only), which understands the simple block
style of deploy/prometheus/hookrelay-rules.yaml.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import miniyaml  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT = os.path.join(ROOT, "deploy", "prometheus", "hookrelay-rules.yaml")


def groups_of(doc):
    """The rule groups of a rule file ({groups: [...]}) or a PrometheusRule ({spec: {groups}})."""
    if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
        doc = doc.get("spec") or {}
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise miniyaml.YamlError("no `groups:` list")
    return doc["groups"]


def alert_rules(path):
    """[(group name, rule dict)] for every alerting rule of the file."""
    result = []
    for group in groups_of(miniyaml.load_file(path)):
        for rule in (group or {}).get("rules") or []:
            if isinstance(rule, dict) and "alert" in rule:
                result.append((group.get("name"), rule))
    return result


def main(argv):
    path = argv[1] if len(argv) > 1 else DEFAULT
    try:
        rules = alert_rules(path)
    except (OSError, miniyaml.YamlError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        return 1
    for _, rule in rules:
        expr = rule.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            print(f"{path}: alert {rule.get('alert')} has no expr", file=sys.stderr)
            return 1
        print(json.dumps({"alert": rule["alert"], "expr": expr.strip()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
