#!/usr/bin/env python3
"""Keeps deploy/kubernetes/components/monitoring/prometheusrule.yaml in step with
deploy/prometheus/hookrelay-rules.yaml.

How: the PrometheusRule embeds the rule file's text. Everything after its `spec:` line is the
rule file from its `groups:` line to the end, every line indented by two spaces (uniform
indentation does not change what YAML means, block scalars included). So this check is a plain
text comparison, which needs no YAML library; as a second guard it also reads both files with
tests/observe/miniyaml.py and compares spec.groups with groups. The PrometheusRule's lines up to
`spec:` (comments, metadata) are edited by hand.

Usage (from anywhere):
  python3 tests/observe/check_rules_sync.py            check; exit 1 with a diff if out of step
  python3 tests/observe/check_rules_sync.py --fix      rewrite the PrometheusRule's spec from
                                                       the rule file
  python3 tests/observe/check_rules_sync.py --extract OUT
                                                       write the PrometheusRule's groups as a
                                                       plain rule file (for promtool check rules)
"""

import difflib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import miniyaml  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = os.path.join(ROOT, "deploy", "prometheus", "hookrelay-rules.yaml")
PROMETHEUS_RULE = os.path.join(
    ROOT, "deploy", "kubernetes", "components", "monitoring", "prometheusrule.yaml")


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().rstrip("\n").split("\n")


def rule_file_groups(lines):
    """The rule file's lines from `groups:` to the end."""
    if "groups:" not in lines:
        raise ValueError(f"{RULES}: no top-level `groups:` line")
    return lines[lines.index("groups:"):]


def split_prometheus_rule(lines):
    """(header lines up to and including `spec:`, the lines after it)."""
    if "spec:" not in lines:
        raise ValueError(f"{PROMETHEUS_RULE}: no top-level `spec:` line")
    i = lines.index("spec:")
    return lines[: i + 1], lines[i + 1:]


def indent(lines):
    return [("  " + l) if l else "" for l in lines]


def dedent(lines):
    out = []
    for n, l in enumerate(lines):
        if l and not l.startswith("  "):
            raise ValueError(f"{PROMETHEUS_RULE}: line {n + 1} after `spec:` is not indented")
        out.append(l[2:])
    return out


def check():
    problems = []
    expected = indent(rule_file_groups(read_lines(RULES)))
    _, actual = split_prometheus_rule(read_lines(PROMETHEUS_RULE))
    if actual != expected:
        diff = difflib.unified_diff(expected, actual, "expected (from hookrelay-rules.yaml)",
                                    "prometheusrule.yaml after spec:", lineterm="", n=1)
        problems.append("prometheusrule.yaml spec is not the rule file's groups indented by two "
                        "spaces (run tests/observe/check_rules_sync.py --fix):\n"
                        + "\n".join(list(diff)[:40]))
    try:
        rules = miniyaml.load_file(RULES)
        pr = miniyaml.load_file(PROMETHEUS_RULE)
    except miniyaml.YamlError as e:
        return problems + [f"cannot read YAML: {e}"]
    if pr.get("apiVersion") != "monitoring.coreos.com/v1" or pr.get("kind") != "PrometheusRule":
        problems.append("prometheusrule.yaml is not a monitoring.coreos.com/v1 PrometheusRule")
    spec = pr.get("spec") or {}
    if set(spec) != {"groups"}:
        problems.append(f"PrometheusRule spec has keys {sorted(spec)}, expected only groups")
    if list(rules) != ["groups"]:
        problems.append(f"rule file has top-level keys {list(rules)}, expected only groups")
    if spec.get("groups") != rules.get("groups"):
        problems.append("PrometheusRule spec.groups differs from the rule file's groups (parsed)")
    return problems


def main(argv):
    try:
        if len(argv) == 2 and argv[1] == "--fix":
            header, _ = split_prometheus_rule(read_lines(PROMETHEUS_RULE))
            body = indent(rule_file_groups(read_lines(RULES)))
            with open(PROMETHEUS_RULE, "w", encoding="utf-8") as f:
                f.write("\n".join(header + body) + "\n")
            print(f"rewrote the spec of {os.path.relpath(PROMETHEUS_RULE)}")
            return 0
        if len(argv) == 3 and argv[1] == "--extract":
            _, body = split_prometheus_rule(read_lines(PROMETHEUS_RULE))
            with open(argv[2], "w", encoding="utf-8") as f:
                f.write("\n".join(dedent(body)) + "\n")
            return 0
        if len(argv) != 1:
            print(__doc__, file=sys.stderr)
            return 2
        problems = check()
    except (OSError, ValueError) as e:
        print(e)
        return 1
    for p in problems:
        print(p)
    if problems:
        return 1
    print("PrometheusRule spec.groups == deploy/prometheus/hookrelay-rules.yaml groups")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
