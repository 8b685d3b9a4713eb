#!/usr/bin/env python3
"""The dashboard and the alert rules against live metrics (issue: deploy and observe, part 6).

Starts a collector, a deliverer, the demo receiver and a failing receiver (HTTP 500, served here)
on 127.0.0.1, and Debian's Prometheus scraping the collector and the deliverer every second with
deploy/prometheus/hookrelay-rules.yaml loaded. Drives traffic (accepted events for both
destinations, a few rejected ones), waits for two scrapes after it, then evaluates through
Prometheus's HTTP API:
  - every dashboard query (variables substituted as Grafana would with "All"): each must parse;
    the main panels (ingest rate, deliveries by outcome, latency quantiles, jobs by state) must
    return series;
  - every alert expression: each must parse; HookrelayDeliveryFailing's must be true for the
    failing destination and not for the healthy one.

Usage: HOOKRELAY_BIN_DIR=$(bazel info bazel-bin) python3 tests/observe/live_test.py
Network: 127.0.0.1 only; every wait is bounded.
"""

import base64
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(ROOT, "deploy/grafana/hookrelay-dashboard.json")
RULES = os.path.join(ROOT, "deploy/prometheus/hookrelay-rules.yaml")
WRITE_KEY = "wk_live_observe"
SECRET = "observe-secret"

failures = []


def check(ok, message):
    print(("PASS  " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        failures.append(message)


def free_port():
    # Prometheus cannot report a port it picked itself; this one is free now and bound at once.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FailingHandler(http.server.BaseHTTPRequestHandler):
    requests = 0

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        FailingHandler.requests += 1
        self.send_response(500)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class Process:
    """A child whose stderr/stdout lines are collected; JSON log fields can be awaited."""

    def __init__(self, name, args, log_dir):
        self.name = name
        self.log_path = os.path.join(log_dir, name + ".log")
        self.log = open(self.log_path, "w")
        self.lines = []
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()

    def field(self, name, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and name in record:
                    return record[name]
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no '{name}' in its log (see {self.log_path})")

    def wait_line(self, text, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(text in line for line in list(self.lines)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: never printed '{text}' (see {self.log_path})")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def http_json(url, body=None, headers=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        payload = e.read()
        try:
            return e.code, json.loads(payload)
        except ValueError:
            return e.code, payload.decode(errors="replace")


def prom_query(base, expr):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return http_json(url)


def substitute(expr):
    for name, value in (("${namespace}", ".*"), ("$namespace", ".*"), ("${instance}", ".*"),
                        ("$instance", ".*"), ("$__rate_interval", "1m"), ("$__interval", "1m"),
                        ("${__rate_interval}", "1m")):
        expr = expr.replace(name, value)
    return expr


def dashboard_exprs():
    out = subprocess.run([sys.executable, os.path.join(HERE, "check_dashboard.py"), "--list-exprs",
                          DASHBOARD], check=True, capture_output=True, text=True).stdout
    return [substitute(json.loads(line)) for line in out.splitlines() if line.strip()]


def rule_exprs():
    out = subprocess.run([sys.executable, os.path.join(HERE, "list_rule_exprs.py"), RULES],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def event(i, kind="track"):
    e = {"type": kind, "messageId": f"observe-{kind}-{i}", "userId": f"user-{i % 7}"}
    if kind == "track":
        e["event"] = "Order Completed"
        e["properties"] = {"revenue": i}
    return e


def main():
    bin_dir = os.environ.get("HOOKRELAY_BIN_DIR")
    if not bin_dir:
        print("HOOKRELAY_BIN_DIR is not set (bazel info bazel-bin)", file=sys.stderr)
        return 2
    prometheus = shutil.which("prometheus")
    if not prometheus:
        print("prometheus is not installed (tools/bootstrap.sh installs it)", file=sys.stderr)
        return 2

    work = tempfile.mkdtemp(prefix="hookrelay-observe-")
    processes = []
    failing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FailingHandler)
    threading.Thread(target=failing.serve_forever, daemon=True).start()
    try:
        receiver = Process("receiver", [os.path.join(bin_dir, "tools/receiver/demo_receiver"),
                                        "--address=127.0.0.1:0", f"--secret={SECRET}"], work)
        processes.append(receiver)
        receiver.wait_line("listening on")
        receiver_url = next(l for l in receiver.lines if "listening on" in l).split(
            "listening on ")[1].split()[0]
        if not receiver_url.endswith("/"):
            receiver_url += "/"

        config = os.path.join(work, "config.yaml")
        with open(config, "w") as f:
            f.write(f"""sources:
  - id: shop
    name: Shop
    kind: server
    write_keys: [{WRITE_KEY}]
destinations:
  - id: healthy-hook
    type: webhooks
    sources: [shop]
    enabled: true
    shared_secret: {SECRET}
    urls:
      - url: {receiver_url}hooks
  - id: failing-hook
    type: webhooks
    sources: [shop]
    enabled: true
    urls:
      - url: http://127.0.0.1:{failing.server_address[1]}/hooks
""")
        collector = Process("collector", [
            os.path.join(bin_dir, "collector/collector"), f"--config={config}",
            f"--data_dir={work}/data", "--grpc_address=127.0.0.1:0",
            "--http_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
            "--admin_http_address=127.0.0.1:0"], work)
        processes.append(collector)
        grpc_port = collector.field("grpc_port")
        http_port = collector.field("http_port")
        collector_metrics = collector.field("metrics_port")

        deliverer = Process("deliverer", [
            os.path.join(bin_dir, "deliverer/deliverer"), f"--collector=127.0.0.1:{grpc_port}",
            "--metrics_address=127.0.0.1:0", "--allow_private_networks"], work)
        processes.append(deliverer)
        deliverer_metrics = deliverer.field("metrics_port")

        prom_port = free_port()
        prom_config = os.path.join(work, "prometheus.yml")
        with open(prom_config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: hookrelay-collector
    static_configs:
      - targets: ["127.0.0.1:{collector_metrics}"]
  - job_name: hookrelay-deliverer
    static_configs:
      - targets: ["127.0.0.1:{deliverer_metrics}"]
""")
        prom = Process("prometheus", [
            prometheus, f"--config.file={prom_config}", f"--storage.tsdb.path={work}/tsdb",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-lifecycle"], work)
        processes.append(prom)
        base = f"http://127.0.0.1:{prom_port}"
        deadline = time.time() + 60
        targets_up = False
        while time.time() < deadline and prom.proc.poll() is None:
            try:
                status, body = prom_query(base, "sum(up)")
                if status == 200 and body["data"]["result"] and \
                        float(body["data"]["result"][0]["value"][1]) == 2:
                    targets_up = True
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.25)
        check(targets_up, "Prometheus scrapes the collector and the deliverer (sum(up) == 2)")
        if not targets_up:
            return 1

        # Traffic: 30 batches of 10 events of every type, plus rejected requests.
        ingest = f"http://127.0.0.1:{http_port}/v1/batch"
        auth = {"Authorization": "Basic " + base64.b64encode(
            f"{WRITE_KEY}:".encode()).decode()}
        kinds = ["track", "identify", "page", "screen", "group", "alias"]
        accepted = 0
        for b in range(30):
            batch = []
            for i in range(10):
                kind = kinds[(b * 10 + i) % len(kinds)]
                e = event(b * 10 + i, kind)
                if kind == "page":
                    e["name"] = "Home"
                if kind == "screen":
                    e["name"] = "Cart"
                if kind == "group":
                    e["groupId"] = "g1"
                if kind == "alias":
                    e["previousId"] = "anon-1"
                batch.append(e)
            status, _ = http_json(ingest, {"batch": batch}, auth)
            if status == 200:
                accepted += len(batch)
            time.sleep(0.05)
        check(accepted == 300, f"collector accepted {accepted}/300 events")
        bad = {"Authorization": "Basic " + base64.b64encode(b"wrong:").decode()}
        rejected = [http_json(ingest, {"batch": [event(i)]}, bad)[0] for i in range(5)]
        check(rejected == [401] * 5, f"wrong write key answered 401 x5 ({rejected})")

        # Deliveries to the healthy receiver; retries against the failing one.
        deadline = time.time() + 60
        while time.time() < deadline:
            status, body = prom_query(base, 'sum(hookrelay_delivery_attempts_total'
                                            '{destination="healthy-hook",outcome="delivered"})')
            retried = prom_query(base, 'sum(hookrelay_delivery_attempts_total'
                                       '{destination="failing-hook",outcome="retry"})')[1]
            try:
                if float(body["data"]["result"][0]["value"][1]) >= 300 and \
                        float(retried["data"]["result"][0]["value"][1]) >= 300:
                    break
            except (KeyError, IndexError, TypeError, ValueError):
                pass
            time.sleep(0.5)
        check(FailingHandler.requests >= 300,
              f"the failing receiver was called ({FailingHandler.requests} requests)")
        time.sleep(2.5)  # two more scrapes after the traffic

        # Every dashboard query parses; the main panels have series.
        exprs = dashboard_exprs()
        check(len(exprs) >= 20, f"{len(exprs)} dashboard queries listed")
        main_panels = {
            "hookrelay_ingest_events_total": "ingest rate",
            "hookrelay_delivery_attempts_total{namespace": "deliveries by outcome",
            "hookrelay_delivery_attempt_duration_seconds_bucket": "attempt latency quantiles",
            "hookrelay_delivery_end_to_end_seconds_bucket": "end-to-end latency quantiles",
            "hookrelay_jobs{namespace": "jobs by state",
            "hookrelay_delivery_requests_total": "receivers' responses",
            "process_resident_memory_bytes": "process memory",
            "hookrelay_delivery_pickup_seconds_bucket": "pickup latency quantiles",
            "hookrelay_destination_concurrency_limit": "concurrency limit by destination",
            "hookrelay_dispatch_deferred_total": "jobs held back by reason",
        }
        seen_main = set()
        for expr in exprs:
            status, body = prom_query(base, expr)
            ok = status == 200 and isinstance(body, dict) and body.get("status") == "success"
            check(ok, f"dashboard query evaluates: {expr[:110]}"
                      + ("" if ok else f" -> {status} {body}"))
            for needle, what in main_panels.items():
                if needle in expr and ok:
                    seen_main.add(needle)
                    check(len(body["data"]["result"]) > 0,
                          f"main panel '{what}' has series: {expr[:80]}")
        check(seen_main == set(main_panels),
              f"every main panel found in the dashboard (missing: {set(main_panels) - seen_main})")

        # Every alert expression parses; the failing destination trips HookrelayDeliveryFailing.
        rules = rule_exprs()
        check(len(rules) >= 10, f"{len(rules)} alert expressions listed")
        for rule in rules:
            status, body = prom_query(base, rule["expr"])
            ok = status == 200 and isinstance(body, dict) and body.get("status") == "success"
            check(ok, f"alert {rule['alert']} expression evaluates"
                      + ("" if ok else f" -> {status} {body}"))
            if rule["alert"] == "HookrelayDeliveryFailing" and ok:
                destinations = {r["metric"].get("destination") for r in body["data"]["result"]}
                threshold = rule["expr"].strip().rsplit(">", 1)[-1].strip()
                check(destinations == {"failing-hook"},
                      f"{rule['alert']} (> {threshold}) is true for failing-hook only: "
                      f"{sorted(d or '' for d in destinations)}")
        # The loaded rule groups are the file's, and Prometheus reports no evaluation error.
        status, body = http_json(base + "/api/v1/rules")
        groups = body["data"]["groups"] if status == 200 else []
        errors = [r["name"] + ": " + r.get("lastError", "") for g in groups for r in g["rules"]
                  if r.get("health") not in ("ok", "unknown")]
        check(len(groups) >= 3 and not errors,
              f"Prometheus loaded {len(groups)} rule groups, evaluation errors: {errors}")
    finally:
        for p in reversed(processes):
            p.stop()
        failing.shutdown()
        if failures:
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
