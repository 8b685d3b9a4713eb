#!/usr/bin/env python3
"""Structural checks of a Grafana dashboard JSON (deploy/grafana/hookrelay-dashboard.json).
Python stdlib only.

Usage:
  check_dashboard.py DASHBOARD.json                 check; one line per problem, exit 1 if any
  check_dashboard.py --list-exprs DASHBOARD.json    print every target's expr as a JSON string,
                                                    one per line, variables ($namespace, ...)
                                                    left in place
  check_dashboard.py --list-exprs --substitute DASHBOARD.json
                                                    the same with variables replaced as for a
                                                    live Prometheus: template variables by their
                                                    allValue (.*), $__rate_interval and
                                                    $__interval by 1m, $__range by 1h
  check_dashboard.py --as-rule-file DASHBOARD.json  the substituted exprs as recording rules, so
                                                    that `promtool check rules` parses them
Options: --known FILE  known metric names (default: known_metrics.txt next to this script).

What is checked:
- the file is JSON; uid (1-40 of [A-Za-z0-9_-]), title, schemaVersion >= 36; no fixed id;
- every panel (rows' children too) has a type Grafana ships, a title and a gridPos of integers
  with w, h >= 1, x, y >= 0 and x + w <= 24; top-level panels do not overlap; ids are unique;
- data panels have fieldConfig.defaults.unit and targets; every target has an expr, a
  legendFormat and a refId unique in its panel;
- every datasource (panels, targets, query variables) is {"type": "prometheus",
  "uid": "${datasource}"} and a `datasource` variable of type datasource exists;
- every variable referenced ($name, ${name}, ${name:fmt}, [[name]]) is defined (Grafana's
  built-ins, $__*, excepted); query variables that include All use allValue ".*";
- in every expr: (), {} and [] balance (outside string literals); every metric name
  (hookrelay_* / process_*, with _bucket/_sum/_count stripped) is a known metric; every selector
  of such a metric filters namespace=~"$namespace" and instance=~"$instance".
"""

import json
import os
import re
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GRID_WIDTH = 24
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "heatmap",
               "piechart", "state-timeline", "status-history", "barchart", "logs"}
DATA_PANEL_TYPES = PANEL_TYPES - {"row", "text"}
DATASOURCE_UID = "${datasource}"
REQUIRED_FILTERS = ('namespace=~"$namespace"', 'instance=~"$instance"')
METRIC = re.compile(r"(?<![A-Za-z0-9_:])((?:hookrelay|process)_[A-Za-z0-9_:]*)")
VAR_REF = re.compile(r"\$\{([A-Za-z0-9_]+)(?::[^}]*)?\}|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]"
                     r"|\$([A-Za-z0-9_]+)")
BUILTIN_VARS = {"timeFilter"}  # and everything starting with __
SUBSTITUTIONS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h",
                 "__interval_ms": "60000", "__range_s": "3600", "__range_ms": "3600000"}


def load_known(path):
    with open(path, encoding="utf-8") as f:
        return {l.strip() for l in f if l.strip() and not l.strip().startswith("#")}


def all_panels(dashboard):
    """Top-level panels and the children of (collapsed) rows, in order."""
    for p in dashboard.get("panels") or []:
        yield p
        if isinstance(p, dict):
            for child in p.get("panels") or []:
                yield child


def targets_of(panel):
    t = panel.get("targets") if isinstance(panel, dict) else None
    return t if isinstance(t, list) else []


def string_spans(expr):
    """[(start, end)] of PromQL string literals ("...", '...', `...`)."""
    spans, i = [], 0
    while i < len(expr):
        q = expr[i]
        if q in "\"'`":
            j = i + 1
            while j < len(expr) and expr[j] != q:
                j += 2 if expr[j] == "\\" and q != "`" else 1
            spans.append((i, min(j, len(expr) - 1)))
            i = j + 1
        else:
            i += 1
    return spans


def balance_problem(expr):
    pairs = {")": "(", "}": "{", "]": "["}
    stack = []
    spans = string_spans(expr)
    inside = lambda k: any(s <= k <= e for s, e in spans)  # noqa: E731
    for s, e in spans:
        if e >= len(expr) or expr[e] != expr[s] or e == s:
            return "unterminated string literal"
    for k, c in enumerate(expr):
        if inside(k):
            continue
        if c in "({[":
            stack.append(c)
        elif c in ")}]":
            if not stack:
                return f"unbalanced {c!r} at offset {k} (nothing to close)"
            if stack[-1] != pairs[c]:
                return f"unbalanced {c!r} at offset {k} (an open {stack[-1]!r} is not closed)"
            stack.pop()
    if stack:
        return f"unclosed {stack[-1]!r}"
    return None


def metric_problems(expr, known, require_filters):
    problems = []
    spans = string_spans(expr)
    for m in METRIC.finditer(expr):
        name = m.group(1)
        base = name
        if base not in known:
            for suffix in ("_bucket", "_sum", "_count"):
                if base.endswith(suffix) and base[: -len(suffix)] in known:
                    base = base[: -len(suffix)]
                    break
        if base not in known:
            problems.append(f"unknown metric {name}")
        in_string = any(s <= m.start() <= e for s, e in spans)
        if not require_filters or in_string:
            continue
        rest = expr[m.end():].lstrip()
        if not rest.startswith("{"):
            problems.append(f"selector of {name} has no label matchers "
                            f"(needs {' and '.join(REQUIRED_FILTERS)})")
            continue
        end = rest.find("}")
        matchers = rest[: end + 1] if end >= 0 else rest
        for f in REQUIRED_FILTERS:
            if f not in matchers.replace(" ", ""):
                problems.append(f"selector of {name} does not filter {f}")
    return problems


def var_refs(text):
    for m in VAR_REF.finditer(text):
        name = m.group(1) or m.group(2) or m.group(3)
        if not name.startswith("__") and name not in BUILTIN_VARS:
            yield name


def walk_strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from walk_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_strings(v)


def check_datasource(ds, where, problems):
    if isinstance(ds, dict):
        if ds.get("uid") != DATASOURCE_UID:
            problems.append(f"{where}: datasource uid {ds.get('uid')!r} is not "
                            f"{DATASOURCE_UID!r} (hard-coded datasource)")
        if ds.get("type") not in (None, "prometheus"):
            problems.append(f"{where}: datasource type {ds.get('type')!r} is not prometheus")
    else:
        problems.append(f"{where}: datasource {ds!r} is not "
                        f'{{"type": "prometheus", "uid": "{DATASOURCE_UID}"}}')


def check(dashboard, known):
    problems = []
    if not isinstance(dashboard, dict):
        return ["the dashboard is not a JSON object"]

    uid = dashboard.get("uid")
    if not isinstance(uid, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid):
        problems.append(f"uid {uid!r} is missing or invalid (1-40 of [A-Za-z0-9_-])")
    title = dashboard.get("title")
    if not isinstance(title, str) or not title.strip():
        problems.append("title is missing or empty")
    sv = dashboard.get("schemaVersion")
    if not isinstance(sv, int) or isinstance(sv, bool) or sv < 36:
        problems.append(f"schemaVersion {sv!r} is missing or < 36")
    if dashboard.get("id") is not None:
        problems.append(f"id is {dashboard.get('id')!r}: leave it out (or null) so that import "
                        "does not overwrite another dashboard")

    # Template variables.
    variables = (dashboard.get("templating") or {}).get("list") or []
    defined = {}
    for v in variables:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            problems.append(f"template variable without a name: {v!r}"[:200])
            continue
        defined[v["name"]] = v
    ds_var = defined.get("datasource")
    if not ds_var or ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
        problems.append('no template variable "datasource" of type datasource with query '
                        '"prometheus"')
    for name, v in defined.items():
        if v.get("type") == "query":
            check_datasource(v.get("datasource"), f"variable {name}", problems)
            query = v.get("query")
            qtext = query.get("query") if isinstance(query, dict) else query
            if not isinstance(qtext, str) or not qtext.strip():
                problems.append(f"variable {name}: no query")
            else:
                for p in metric_problems(qtext, known, require_filters=False):
                    problems.append(f"variable {name}: {p}")
            if v.get("includeAll") and v.get("allValue") != ".*":
                problems.append(f"variable {name}: includes All but allValue is "
                                f"{v.get('allValue')!r}, not '.*' (a missing label must match)")

    # Panels.
    panels = dashboard.get("panels")
    if not isinstance(panels, list) or not panels:
        problems.append("no panels")
        panels = []
    seen_ids = {}
    for p in all_panels(dashboard):
        if not isinstance(p, dict):
            problems.append(f"panel is not an object: {p!r}"[:200])
            continue
        name = f"panel {p.get('id')!r} {p.get('title')!r}"
        ptype = p.get("type")
        if not isinstance(ptype, str) or not ptype:
            problems.append(f"{name}: no type")
        elif ptype not in PANEL_TYPES:
            problems.append(f"{name}: unknown panel type {ptype!r}")
        if not isinstance(p.get("title"), str) or not p.get("title").strip():
            problems.append(f"{name}: no title")
        pid = p.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            problems.append(f"{name}: no integer id")
        elif pid in seen_ids:
            problems.append(f"{name}: duplicate panel id {pid} (also {seen_ids[pid]!r})")
        else:
            seen_ids[pid] = p.get("title")
        g = p.get("gridPos")
        if not isinstance(g, dict):
            problems.append(f"{name}: no gridPos")
        else:
            bad = [k for k in ("h", "w", "x", "y")
                   if not isinstance(g.get(k), int) or isinstance(g.get(k), bool)]
            if bad:
                problems.append(f"{name}: gridPos {', '.join(bad)} missing or not integers")
            else:
                if g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0:
                    problems.append(f"{name}: gridPos {g} has a negative position or empty size")
                if g["x"] + g["w"] > GRID_WIDTH:
                    problems.append(f"{name}: gridPos x + w = {g['x'] + g['w']} > {GRID_WIDTH}")
        if ptype == "row":
            if "datasource" in p and p["datasource"] is not None:
                check_datasource(p["datasource"], name, problems)
            continue
        if ptype in DATA_PANEL_TYPES:
            check_datasource(p.get("datasource"), name, problems)
            unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
            if not isinstance(unit, str) or not unit:
                problems.append(f"{name}: no fieldConfig.defaults.unit")
            if not targets_of(p):
                problems.append(f"{name}: no targets")
        ref_ids = set()
        for t in targets_of(p):
            if not isinstance(t, dict):
                problems.append(f"{name}: target is not an object")
                continue
            where = f"{name} target {t.get('refId')!r}"
            if t.get("refId") in ref_ids:
                problems.append(f"{where}: duplicate refId")
            ref_ids.add(t.get("refId"))
            check_datasource(t.get("datasource"), where, problems)
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                problems.append(f"{where}: no expr")
                continue
            if not isinstance(t.get("legendFormat"), str) or not t.get("legendFormat"):
                problems.append(f"{where}: no legendFormat")
            b = balance_problem(expr)
            if b:
                problems.append(f"{where}: {b} in expr {expr!r}")
            for m in metric_problems(expr, known, require_filters=True):
                problems.append(f"{where}: {m}")

    # Overlaps of top-level panels (children of collapsed rows live in their row's space).
    boxes = []
    for p in panels:
        g = p.get("gridPos") if isinstance(p, dict) else None
        if isinstance(g, dict) and all(isinstance(g.get(k), int) for k in "hwxy"):
            boxes.append((p, g))
    for i, (p, a) in enumerate(boxes):
        for q, b in boxes[i + 1:]:
            if (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
                    and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]):
                problems.append(f"panels {p.get('id')!r} {p.get('title')!r} and {q.get('id')!r} "
                                f"{q.get('title')!r} overlap ({a} / {b})")

    # Variables referenced but not defined.
    places = [(f"variable {v.get('name')}", v) for v in variables]
    places += [(f"panel {p.get('id')!r} {p.get('title')!r}", dict(p, panels=None))
               for p in all_panels(dashboard) if isinstance(p, dict)]
    for where, obj in places:
        for s in walk_strings(obj):
            for name in var_refs(s):
                if name not in defined:
                    problems.append(f"{where}: variable ${name} is referenced but not defined")
    return list(dict.fromkeys(problems))


def exprs(dashboard):
    for p in all_panels(dashboard):
        for t in targets_of(p):
            if isinstance(t, dict) and isinstance(t.get("expr"), str):
                yield t["expr"]


def substitute(expr, dashboard):
    variables = {v.get("name"): v for v in (dashboard.get("templating") or {}).get("list") or []
                 if isinstance(v, dict)}

    def value(name):
        if name in SUBSTITUTIONS:
            return SUBSTITUTIONS[name]
        v = variables.get(name) or {}
        return v.get("allValue") or ".*"

    return VAR_REF.sub(lambda m: value(m.group(1) or m.group(2) or m.group(3)), expr)


def main(argv):
    args = argv[1:]
    mode, subst, known_path = "check", False, os.path.join(HERE, "known_metrics.txt")
    paths = []
    while args:
        a = args.pop(0)
        if a == "--list-exprs":
            mode = "list"
        elif a == "--as-rule-file":
            mode, subst = "rules", True
        elif a == "--substitute":
            subst = True
        elif a == "--known" and args:
            known_path = args.pop(0)
        elif a.startswith("-"):
            print(__doc__, file=sys.stderr)
            return 2
        else:
            paths.append(a)
    if len(paths) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    path = paths[0]
    try:
        with open(path, encoding="utf-8") as f:
            dashboard = json.load(f)
    except OSError as e:
        print(f"{path}: {e}")
        return 1
    except json.JSONDecodeError as e:
        print(f"{path}: invalid JSON: {e}")
        return 1

    if mode == "list":
        for e in exprs(dashboard):
            print(json.dumps(substitute(e, dashboard) if subst else e))
        return 0
    if mode == "rules":
        print("groups:\n  - name: dashboard-exprs\n    rules:")
        for n, e in enumerate(exprs(dashboard), 1):
            print(f"      - record: dashboard:expr_{n}\n        expr: "
                  + json.dumps(substitute(e, dashboard)))
        return 0

    try:
        known = load_known(known_path)
    except OSError as e:
        print(f"{known_path}: {e}")
        return 1
    problems = check(dashboard, known)
    for p in problems:
        print(f"{path}: {p}")
    if problems:
        return 1
    n_panels = sum(1 for p in all_panels(dashboard) if p.get("type") != "row")
    print(f"{path}: OK ({n_panels} panels, {len(list(exprs(dashboard)))} queries)")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... --list-exprs | head` is fine
    sys.exit(main(sys.argv))
