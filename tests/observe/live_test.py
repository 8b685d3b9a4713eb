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
    failing destination and not for the healthy one;
  - then the deliverer stops and more events come in: HookrelayNoDelivererSubscribed's
    expression becomes true, and so does HookrelayBacklogGrowing's with its 300 s threshold
    lowered to 2 s (the one change made to an expression; its `for:` is not evaluated).
Runs on both job-store engines: the embedded one, and JetStream (a one-node nats-server with
JetStream on 127.0.0.1, R1), where the job counts are the cluster's (scope="cluster").

Usage: HOOKRELAY_BIN_DIR=$(bazel info bazel-bin) python3 tests/observe/live_test.py [ENGINE...]
  ENGINE: embedded, jetstream (default: both). JetStream needs nats-server: HOOKRELAY_NATS_SERVER,
  else ~/.cache/hookrelay-nats/v2.14.9/nats-server (tools/bootstrap.sh builds it).
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
ENGINE = ["embedded"]  # the engine of the current run, shown in every check
NATS_SERVER_VERSION = "v2.14.9"  # tests/nats_cluster.h


def check(ok, message):
    print(("PASS  " if ok else "FAIL  ") + f"[{ENGINE[0]}] " + message, flush=True)
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


def nats_server_path():
    path = os.environ.get("HOOKRELAY_NATS_SERVER") or os.path.join(
        os.path.expanduser("~"), ".cache", "hookrelay-nats", NATS_SERVER_VERSION, "nats-server")
    return path if os.access(path, os.X_OK) else None


def query_value(base, expr):
    """The first sample of `expr`'s result, or None (no result, or an error)."""
    status, body = prom_query(base, expr)
    try:
        return float(body["data"]["result"][0]["value"][1]) if status == 200 else None
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def run(engine, bin_dir, prometheus):
    ENGINE[0] = engine
    failed_before = len(failures)
    work = tempfile.mkdtemp(prefix=f"hookrelay-observe-{engine}-")
    processes = []
    failing = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FailingHandler)
    FailingHandler.requests = 0
    threading.Thread(target=failing.serve_forever, daemon=True).start()
    try:
        store_flags = []
        if engine == "jetstream":
            nats_port = free_port()
            nats = Process("nats-server", [
                nats_server_path(), "-js", "-a", "127.0.0.1", "-p", str(nats_port),
                "-sd", os.path.join(work, "nats")], work)
            processes.append(nats)
            nats.wait_line("Server is ready")
            store_flags = ["--store=jetstream", f"--nats_url=nats://127.0.0.1:{nats_port}",
                           "--nats_replicas=1"]
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
            "--admin_http_address=127.0.0.1:0"] + store_flags, work)
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
            "sum by (state, scope) (hookrelay_jobs{": "jobs by state",
            "hookrelay_delivery_requests_total": "receivers' responses",
            "process_resident_memory_bytes": "process memory",
            "hookrelay_delivery_pickup_seconds_bucket": "pickup latency quantiles",
            "hookrelay_destination_concurrency_limit": "concurrency limit by destination",
            "hookrelay_dispatch_deferred_total": "jobs held back by reason",
        }
        if engine == "jetstream":  # the NATS row: one server here, the leader of both groups
            main_panels["hookrelay_jetstream_replicas"] = "NATS copies by state"
            main_panels["hookrelay_jetstream_has_leader"] = "NATS leaderless groups"
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
        # Deliverers gone, events still coming: nothing delivers them. The job counts and the
        # backlog's age come from the engine (on JetStream: the consumer's pending jobs).
        deliverer.stop()
        processes.remove(deliverer)
        for b in range(5):
            batch = [event(1000 + b * 10 + i) for i in range(10)]
            status, _ = http_json(ingest, {"batch": batch}, auth)
            check(status == 200, f"batch {b} accepted with no deliverer ({status})")
        scope = "cluster" if engine == "jetstream" else "collector"
        # 50 events for 2 destinations: 100 jobs ready at least (retries falling due add more).
        # On JetStream some wait at the consumer (scope cluster), some were fetched ahead by the
        # collector (scope collector): the two parts add up.
        ready = None
        deadline = time.time() + 30
        while time.time() < deadline:
            ready = query_value(base, 'sum(hookrelay_jobs{state="ready"})')
            if ready is not None and ready >= 100:
                break
            time.sleep(0.5)
        parts = {s: query_value(base, f'hookrelay_jobs{{state="ready", scope="{s}"}}')
                 for s in ("collector", "cluster")}
        check(ready is not None and ready >= 100,
              f"the ready jobs count the 100 undelivered jobs ({ready}; by scope {parts})")
        check((parts["cluster"] is not None) == (engine == "jetstream"),
              f"a cluster part exists on JetStream only ({parts})")
        by_alert = {r["alert"]: r["expr"] for r in rules}
        for alert, lower in (("HookrelayNoDelivererSubscribed", None),
                             ("HookrelayBacklogGrowing", ("> 300", "> 2"))):
            expr = by_alert.get(alert, "")
            if lower:
                check(lower[0] in expr, f"{alert}'s threshold is {lower[0]}")
                expr = expr.replace(lower[0], lower[1])
            fired = []
            deadline = time.time() + 30
            while time.time() < deadline:
                status, body = prom_query(base, expr)
                fired = body["data"]["result"] if status == 200 else []
                if fired:
                    break
                time.sleep(0.5)
            check(len(fired) == 1 and fired[0]["metric"].get("scope") == scope,
                  f"{alert}'s expression{' (threshold ' + lower[1] + ')' if lower else ''} is "
                  f"true once, for scope {scope}, with no deliverer: "
                  f"{[f['metric'] for f in fired]}")

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
        failing.server_close()
        if len(failures) > failed_before:
            print(f"logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def main():
    bin_dir = os.environ.get("HOOKRELAY_BIN_DIR")
    if not bin_dir:
        print("HOOKRELAY_BIN_DIR is not set (bazel info bazel-bin)", file=sys.stderr)
        return 2
    prometheus = shutil.which("prometheus")
    if not prometheus:
        print("prometheus is not installed (tools/bootstrap.sh installs it)", file=sys.stderr)
        return 2
    engines = sys.argv[1:] or ["embedded", "jetstream"]
    for engine in engines:
        if engine not in ("embedded", "jetstream"):
            print(f"unknown engine {engine!r}: embedded or jetstream", file=sys.stderr)
            return 2
        if engine == "jetstream" and nats_server_path() is None:
            print("no nats-server: run tools/bootstrap.sh or set HOOKRELAY_NATS_SERVER",
                  file=sys.stderr)
            return 2
    for engine in engines:
        print(f"--- engine: {engine}", flush=True)
        if run(engine, bin_dir, prometheus) != 0:
            failures.append(f"{engine}: could not run")
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
