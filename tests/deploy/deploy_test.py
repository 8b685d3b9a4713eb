#!/usr/bin/env python3
"""The Kubernetes manifests and the images, short of a cluster (issue: deploy and observe, §1–2).

1. Renders every kustomization (base, overlays/demo, base + components/monitoring) with
   `kubectl kustomize` and validates every object offline against the Kubernetes OpenAPI schemas
   (kubernetes-validate, pinned in tests/deploy/run.sh); custom resources (ServiceMonitor,
   PrometheusRule) are checked against the Services they select.
2. Checks each image: non-root user 65532, OCI labels, an entrypoint present in the image.
3. Starts the demo overlay's pods as a kubelet would, without Kubernetes: every container of
   every workload runs its image's entrypoint with the rendered `command`/`args`/`env`, inside the
   image's root filesystem (chroot, read-only when the manifest says so), as the manifest's
   runAsUser/runAsGroup with fsGroup as supplementary group, with the rendered ConfigMaps and
   Secrets mounted as files (defaultMode, group fsGroup), volumeClaimTemplates and emptyDirs as
   fresh directories, and /etc/hosts naming every Service. All pods share one private network
   namespace (tests/deploy/run.sh), so Service names resolve to 127.0.0.1.
   Then: every startup/readiness/liveness probe passes (httpGet, grpc via hookrelayctl health,
   tcpSocket), every Service port reaches a listening container port, every NetworkPolicy port
   is a container port of the pods it selects, an event sent to the collector's Service reaches
   the demo receiver with a verified signature, and every process exits 0 on SIGTERM within its
   terminationGracePeriodSeconds.

Usage: tests/deploy/run.sh (it builds the images, prepares the validator, and runs this in a
private network and mount namespace as root).
Environment: HOOKRELAY_IMAGES (OCI layouts from tools/build-images.sh), HOOKRELAY_BIN_DIR
(bazel-bin, for hookrelayctl), KUBERNETES_VALIDATE (the validator's executable).
"""

import base64
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
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KUBE = os.path.join(ROOT, "deploy/kubernetes")
K8S_VERSION = "1.33.0"
NAMESPACE = "hookrelay-test"
WAIT = 60

failures = []


def check(ok, message):
    print(("PASS  " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        failures.append(message)
    return ok


def run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


# --- 1. render and validate -------------------------------------------------------------------

def render(path):
    return run(["kubectl", "kustomize", path]).stdout


def validate(name, text, work):
    path = os.path.join(work, name.replace("/", "_") + ".yaml")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([os.environ["KUBERNETES_VALIDATE"], "--strict", "-k", K8S_VERSION,
                        "--quiet", path], capture_output=True, text=True)
    output = (p.stdout + p.stderr).strip()
    problems = [l for l in output.splitlines()
                if l.strip() and "Couldn't find schema for kind" not in l]
    check(p.returncode == 0 and not problems,
          f"{name}: every object valid against the Kubernetes {K8S_VERSION} schemas (strict)"
          + ("" if not problems else "\n      " + "\n      ".join(problems[:20])))


def render_all(work):
    rendered = {}
    for name in ("base", "overlays/demo"):
        rendered[name] = render(os.path.join(KUBE, name))
    # The monitoring component on top of the base, as a user's overlay would add it. Kustomize
    # loads components only from within the tree, so the overlay is a temporary directory there.
    overlay = tempfile.mkdtemp(prefix=".test-monitoring-", dir=os.path.join(KUBE, "overlays"))
    try:
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
                    "resources: [../../base]\ncomponents: [../../components/monitoring]\n")
        rendered["base+components/monitoring"] = render(overlay)
    finally:
        shutil.rmtree(overlay, ignore_errors=True)
    objects = {}
    for name, text in rendered.items():
        docs = [d for d in yaml.safe_load_all(text) if d]
        check(len(docs) > 5, f"{name}: renders ({len(docs)} objects)")
        validate(name, text, work)
        objects[name] = docs
    return objects


def check_monitoring(docs):
    services = [d for d in docs if d["kind"] == "Service"]
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    check(len(monitors) == 2, f"monitoring: {len(monitors)} ServiceMonitors")
    for m in monitors:
        selector = m["spec"]["selector"].get("matchLabels", {})
        ports = [e.get("port") for e in m["spec"]["endpoints"]]
        matched = [s for s in services
                   if all(s["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
                   and any(p["name"] in ports for p in s["spec"]["ports"])]
        check(len(matched) == 1,
              f"ServiceMonitor {m['metadata']['name']} scrapes exactly one Service "
              f"({[s['metadata']['name'] for s in matched]}) on port {ports}")
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    with open(os.path.join(ROOT, "deploy/prometheus/hookrelay-rules.yaml")) as f:
        groups = yaml.safe_load(f)["groups"]
    check(len(rules) == 1 and rules[0]["spec"]["groups"] == groups,
          "PrometheusRule carries exactly deploy/prometheus/hookrelay-rules.yaml's groups")


# --- 2. images --------------------------------------------------------------------------------

class Images:
    """Unpacked images (umoci unpack): rootfs and OCI runtime config per image name."""

    def __init__(self, layouts, work):
        self.layouts = layouts
        self.work = work
        self.bundles = {}

    def bundle(self, image):
        name = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
        if name not in self.bundles:
            layout = os.path.join(self.layouts, name)
            bundle = os.path.join(self.work, "bundles", name)
            os.makedirs(os.path.dirname(bundle), exist_ok=True)
            run(["umoci", "unpack", "--image", f"{layout}:latest", bundle])
            with open(os.path.join(bundle, "config.json")) as f:
                runtime = json.load(f)
            self.bundles[name] = (bundle, runtime)
        return self.bundles[name]


def check_images(images):
    for name in ("hookrelay-collector", "hookrelay-deliverer", "hookrelay-receiver"):
        bundle, runtime = images.bundle(name)
        process = runtime["process"]
        user = process["user"]
        check(user.get("uid") == 65532 and user.get("gid") == 65532,
              f"image {name}: runs as 65532:65532 ({user.get('uid')}:{user.get('gid')})")
        labels = runtime.get("annotations", {})
        for label in ("org.opencontainers.image.source", "org.opencontainers.image.revision",
                      "org.opencontainers.image.version"):
            check(bool(labels.get(label)), f"image {name}: label {label}={labels.get(label)}")
        entry = process["args"][0]
        rootfs = os.path.join(bundle, "rootfs")
        check(os.access(rootfs + entry, os.X_OK), f"image {name}: entrypoint {entry} present")
        check(not os.path.exists(rootfs + "/bin/sh"), f"image {name}: no shell in the image")


# --- 3. pods ----------------------------------------------------------------------------------

def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def find(docs, kind, name):
    for d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    return None


def write_files(directory, files, mode, gid):
    os.makedirs(directory, exist_ok=True)
    os.chmod(directory, 0o755)
    for key, data in files.items():
        path = os.path.join(directory, key)
        with open(path, "wb") as f:
            f.write(data)
        os.chown(path, 0, gid)
        os.chmod(path, mode)


class Container:
    def __init__(self, pod, spec, log_dir):
        self.pod = pod
        self.spec = spec
        self.name = f"{pod.name}/{spec['name']}"
        self.proc = None
        self.lines = []
        self.log_path = os.path.join(log_dir, f"{pod.name}-{spec['name']}.log")
        self.ports = {p["name"]: p["containerPort"] for p in spec.get("ports", []) if "name" in p}
        self.port_numbers = {p["containerPort"] for p in spec.get("ports", [])}

    def port(self, ref):
        return self.ports[ref] if isinstance(ref, str) else ref

    def start(self, images, docs, hosts_file):
        pod = self.pod
        bundle, runtime = images.bundle(self.spec["image"])
        root = os.path.join(pod.dir, "root-" + self.spec["name"])
        run(["cp", "-a", os.path.join(bundle, "rootfs"), root])  # owners kept
        # The container's mounts, on its own copy of the image.
        run(["mount", "--bind", root, root])
        mounts = [("/etc/hosts", hosts_file, True)]
        for vm in self.spec.get("volumeMounts", []):
            mounts.append((vm["mountPath"], pod.volumes[vm["name"]], vm.get("readOnly", False)))
        for target, source, read_only in mounts:
            path = root + target
            if os.path.isdir(source):
                os.makedirs(path, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "a").close()
            run(["mount", "--bind", source, path])
            if read_only:
                run(["mount", "-o", "remount,bind,ro", path])
        run(["mount", "-t", "proc", "proc", root + "/proc"])
        run(["mount", "--rbind", "/dev", root + "/dev"])
        security = dict(pod.security)
        security.update(self.spec.get("securityContext", {}))
        if security.get("readOnlyRootFilesystem"):
            run(["mount", "-o", "remount,bind,ro", root])
        uid = security.get("runAsUser", runtime["process"]["user"]["uid"])
        gid = security.get("runAsGroup", runtime["process"]["user"]["gid"])
        check(security.get("runAsNonRoot") is True and uid != 0,
              f"{self.name}: runAsNonRoot, uid {uid}")
        groups = [str(pod.fs_group)] if pod.fs_group is not None else []

        # command replaces the image's entrypoint, args its cmd (Kubernetes semantics).
        entrypoint = runtime["process"]["args"]
        argv = self.spec.get("command", entrypoint[:1]) + self.spec.get("args", entrypoint[1:])
        env = {}
        for item in runtime["process"].get("env", []):
            k, _, v = item.partition("=")
            env[k] = v
        for e in self.spec.get("env", []):
            env[e["name"]] = self.env_value(e, docs)
        env["HOSTNAME"] = pod.name
        userspec = f"{uid}:{gid}"
        chroot = [shutil.which("chroot") or "/usr/sbin/chroot", f"--userspec={userspec}"]
        if groups:
            chroot.append("--groups=" + ",".join(groups))
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(chroot + [root] + argv, env=env, cwd="/",
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, daemon=True).start()
        print(f"      started {self.name}: {' '.join(argv)} (as {userspec}"
              f"{', groups ' + ','.join(groups) if groups else ''}"
              f"{', read-only root' if security.get('readOnlyRootFilesystem') else ''})",
              flush=True)

    def env_value(self, e, docs):
        if "value" in e:
            return e["value"]
        source = e.get("valueFrom", {})
        if "fieldRef" in source:
            return {"metadata.name": self.pod.name, "metadata.namespace": NAMESPACE,
                    "status.podIP": "127.0.0.1"}[source["fieldRef"]["fieldPath"]]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            return base64.b64decode(find(docs, "Secret", ref["name"])["data"][ref["key"]]).decode()
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return find(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        raise ValueError(f"{self.name}: unsupported env {e}")

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


class Pod:
    def __init__(self, workload, work, docs):
        template = workload["spec"]["template"]
        self.workload = workload
        self.kind = workload["kind"]
        base = workload["metadata"]["name"]
        self.name = f"{base}-0" if self.kind == "StatefulSet" else f"{base}-7d4b9c-x2x9z"
        self.labels = template["metadata"].get("labels", {})
        self.spec = template["spec"]
        self.security = self.spec.get("securityContext", {})
        self.fs_group = self.security.get("fsGroup")
        self.grace = self.spec.get("terminationGracePeriodSeconds", 30)
        self.dir = os.path.join(work, "pods", self.name)
        os.makedirs(self.dir)
        self.volumes = {}
        gid = self.fs_group if self.fs_group is not None else 0
        for v in self.spec.get("volumes", []):
            path = os.path.join(self.dir, "volumes", v["name"])
            if "configMap" in v:
                cm = find(docs, "ConfigMap", v["configMap"]["name"])
                check(cm is not None, f"{self.name}: ConfigMap {v['configMap']['name']} rendered")
                files = {k: s.encode() for k, s in (cm or {}).get("data", {}).items()}
                write_files(path, files, v["configMap"].get("defaultMode", 0o644), gid)
            elif "secret" in v:
                secret = find(docs, "Secret", v["secret"]["secretName"])
                optional = v["secret"].get("optional", False)
                check(secret is not None or optional,
                      f"{self.name}: Secret {v['secret']['secretName']} rendered or optional")
                files = {k: base64.b64decode(s) for k, s in (secret or {}).get("data", {}).items()}
                write_files(path, files, v["secret"].get("defaultMode", 0o644), gid)
            elif "emptyDir" in v:
                os.makedirs(path)
                os.chmod(path, 0o1777)
            else:
                raise ValueError(f"{self.name}: unsupported volume {v}")
            self.volumes[v["name"]] = path
        # Each volumeClaimTemplate: a fresh volume, owned by fsGroup as the kubelet sets it.
        for claim in workload["spec"].get("volumeClaimTemplates", []):
            path = os.path.join(self.dir, "volumes", claim["metadata"]["name"])
            os.makedirs(path)
            os.chown(path, 0, gid)
            os.chmod(path, 0o2775 if self.fs_group is not None else 0o755)
            self.volumes[claim["metadata"]["name"]] = path
        self.containers = [Container(self, c, self.dir) for c in self.spec["containers"]]


def hosts_file(docs, work):
    names = ["localhost"]
    for s in by_kind(docs, "Service"):
        n = s["metadata"]["name"]
        names += [n, f"{n}.{NAMESPACE}", f"{n}.{NAMESPACE}.svc", f"{n}.{NAMESPACE}.svc.cluster.local"]
    for sts in by_kind(docs, "StatefulSet"):
        headless = sts["spec"]["serviceName"]
        pod = f"{sts['metadata']['name']}-0"
        names += [f"{pod}.{headless}", f"{pod}.{headless}.{NAMESPACE}.svc.cluster.local"]
    path = os.path.join(work, "hosts")
    with open(path, "w") as f:
        f.write("127.0.0.1 " + " ".join(names) + "\n::1 localhost ip6-localhost\n")
    return path


def probe_ok(container, kind, probe, ctl):
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = container.port(get["port"])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{get.get('path', '/')}",
                                        timeout=probe.get("timeoutSeconds", 1) + 1) as r:
                return 200 <= r.status < 400, f"GET :{port}{get.get('path', '/')} {r.status}"
        except urllib.error.HTTPError as e:
            return False, f"GET :{port}{get.get('path', '/')} {e.code}"
        except OSError as e:
            return False, f"GET :{port}{get.get('path', '/')} {e}"
    if "grpc" in probe:
        g = probe["grpc"]
        args = [ctl, f"--collector=127.0.0.1:{g['port']}", "--timeout=2s", "health"]
        if g.get("service"):
            args.append(f"--service={g['service']}")
        p = subprocess.run(args, capture_output=True, text=True)
        return p.returncode == 0, f"grpc :{g['port']} {g.get('service', '')} {p.stdout.strip()}" \
                                  f"{p.stderr.strip()}"
    if "tcpSocket" in probe:
        port = container.port(probe["tcpSocket"]["port"])
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True, f"tcp :{port}"
        except OSError as e:
            return False, f"tcp :{port} {e}"
    return False, f"unsupported probe {probe}"


def run_demo(docs, images, work, ctl):
    hosts = hosts_file(docs, work)
    pods = [Pod(w, work, docs) for w in by_kind(docs, "StatefulSet") + by_kind(docs, "Deployment")]
    containers = [c for p in pods for c in p.containers]
    names = {p.workload["metadata"]["name"] for p in pods}
    check(names == {"hookrelay-collector", "hookrelay-deliverer", "hookrelay-receiver"},
          f"demo workloads: {sorted(names)}")
    try:
        # StatefulSet first (the collector), as OrderedReady and the deliverer's probe expect.
        for c in containers:
            c.start(images, docs, hosts)

        # Every probe passes within its startup budget.
        for c in containers:
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                probe = c.spec.get(kind)
                if not probe:
                    continue
                deadline = time.time() + WAIT
                ok, what = False, ""
                while time.time() < deadline and c.alive():
                    ok, what = probe_ok(c, kind, probe, ctl)
                    if ok:
                        break
                    time.sleep(0.2)
                check(ok, f"{c.name}: {kind} passes ({what})"
                          + ("" if c.alive() else f" — process exited, see {c.log_path}"))
        check(any(c.spec.get("readinessProbe") for c in containers),
              "the workloads declare readiness probes")

        # Every Service port reaches a container port that listens.
        for s in by_kind(docs, "Service"):
            selector = s["spec"].get("selector", {})
            targets = [c for p in pods for c in p.containers
                       if all(p.labels.get(k) == v for k, v in selector.items())]
            check(bool(targets), f"Service {s['metadata']['name']} selects a pod")
            for port in s["spec"]["ports"]:
                target = port.get("targetPort", port["port"])
                owners = [c for c in targets
                          if (target in c.ports if isinstance(target, str)
                              else target in c.port_numbers)]
                if not check(bool(owners), f"Service {s['metadata']['name']}:{port['port']} → "
                                           f"targetPort {target} is a container port"):
                    continue
                number = owners[0].port(target)
                try:
                    socket.create_connection(("127.0.0.1", number), timeout=2).close()
                    ok = True
                except OSError:
                    ok = False
                check(ok, f"Service {s['metadata']['name']}:{port['port']} → :{number} accepts "
                          f"connections")

        # NetworkPolicies open ports the selected pods actually have.
        for np in by_kind(docs, "NetworkPolicy"):
            selector = np["spec"]["podSelector"].get("matchLabels", {})
            selected = [c for p in pods for c in p.containers
                        if all(p.labels.get(k) == v for k, v in selector.items())]
            for rule in np["spec"].get("ingress", []):
                for port in rule.get("ports", []):
                    ref = port["port"]
                    ok = any((ref in c.ports) if isinstance(ref, str) else (ref in c.port_numbers)
                             for c in selected)
                    check(ok, f"NetworkPolicy {np['metadata']['name']}: port {ref} is a "
                              f"container port of the pods it selects")

        # The demo flow: an event through the collector's Service reaches the receiver, signed.
        config = yaml.safe_load(find_config(docs))
        write_key = config["sources"][0]["write_keys"][0]
        http_port = find(docs, "Service", "hookrelay-collector")["spec"]["ports"][0]["port"]
        body = json.dumps({"batch": [{"type": "track", "event": "Deployed",
                                      "userId": "u-deploy", "messageId": "deploy-test-1"}]})
        request = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/v1/batch", data=body.encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": "Basic " + base64.b64encode(f"{write_key}:".encode()).decode()})
        with urllib.request.urlopen(request, timeout=10) as r:
            check(r.status == 200, f"event accepted by the collector Service ({r.status})")
        receiver = next(c for c in containers if c.pod.workload["metadata"]["name"] ==
                        "hookrelay-receiver")
        deadline = time.time() + WAIT
        line = None
        while time.time() < deadline and line is None:
            line = next((l for l in receiver.lines if "deploy-test-1" in l), None)
            time.sleep(0.1)
        check(line is not None and "X-Signature: verified" in line,
              f"the receiver got the event with a verified signature: {line!r}")
    finally:
        # Deliverers first, then the rest; each must exit 0 within its grace period.
        order = sorted(containers, key=lambda c: c.pod.kind == "StatefulSet")
        for c in order:
            if c.proc is None:
                continue
            if c.alive():
                c.proc.send_signal(signal.SIGTERM)
            try:
                code = c.proc.wait(timeout=c.pod.grace)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                code = "killed after terminationGracePeriodSeconds"
            check(code == 0, f"{c.name}: exits 0 on SIGTERM within {c.pod.grace}s ({code})")
        subprocess.run(["sh", "-c", f"grep ' {work}/' /proc/self/mounts | cut -d' ' -f2 | "
                        "sort -r | xargs -r -n1 umount -l"], check=False)


def find_config(docs):
    for cm in by_kind(docs, "ConfigMap"):
        if "config.yaml" in cm.get("data", {}):
            return cm["data"]["config.yaml"]
    raise ValueError("no ConfigMap with config.yaml")


def main():
    for var in ("HOOKRELAY_IMAGES", "HOOKRELAY_BIN_DIR", "KUBERNETES_VALIDATE"):
        if not os.environ.get(var):
            print(f"{var} is not set: run tests/deploy/run.sh", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("the pods are started with chroot and bind mounts: run as root", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="hookrelay-deploy-")
    os.chmod(work, 0o755)
    try:
        objects = render_all(work)
        check_monitoring(objects["base+components/monitoring"])
        images = Images(os.environ["HOOKRELAY_IMAGES"], work)
        check_images(images)
        ctl = os.path.join(os.environ["HOOKRELAY_BIN_DIR"], "tools/hookrelayctl/hookrelayctl")
        run_demo(objects["overlays/demo"], images, work, ctl)
    finally:
        if failures:
            print(f"logs kept in {work}/pods", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
