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
4. The JetStream engine (overlays/jetstream, overlays/jetstream-external, issue 12 §5): both
   render and validate; the collectors are a Deployment with an HPA whose --nats_url comes from
   the Secret naming every pod of the NATS StatefulSet, whose rendered nats.conf the real
   nats-server accepts. Then the jetstream overlay (with the demo overlay's receiver, config and
   secrets on top) is started the same way, but each pod in its own network namespace with its
   own address, as on a node (two collectors and three NATS servers listen on the same ports):
   the 3 NATS servers (the pinned nats-server binary in place of the official image; TLS on
   client and route connections with certificates this test makes, the collectors' NATS user
   and password from Secrets it creates as a user would), 2 collector replicas, a deliverer and
   the receiver. Every probe passes; the servers form one JetStream
   cluster; the collectors create the streams with 3 replicas; the deliverer, resolving the
   collectors' headless Service, subscribes to both collector pods; events sent to each collector
   pod are each delivered exactly once, signed, and the jobs stream is left empty; every process
   (NATS after its preStop lame duck) exits 0 on SIGTERM.

Usage: tests/deploy/run.sh (it builds the images, prepares the validator, and runs this in a
private network, mount and PID namespace as root).
Environment: HOOKRELAY_IMAGES (OCI layouts from tools/build-images.sh), HOOKRELAY_BIN_DIR
(bazel-bin, for hookrelayctl), KUBERNETES_VALIDATE (the validator's executable),
HOOKRELAY_NATS_SERVER (the nats-server binary tools/bootstrap.sh builds).
"""

import base64
import json
import os
import re
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


def make_nats_pki(directory):
    """What a user (or cert-manager) puts in the Secrets hookrelay-nats-tls and
    hookrelay-nats-auth: a CA, the servers' certificate naming every pod through the headless
    Service (routes and collectors) and the client Service, its key, and a password."""
    os.makedirs(directory)
    # Each pod by name: the collectors' OpenSSL does not match a wildcard over one label
    # (*.hookrelay-nats-headless), though the servers' Go TLS would for the routes.
    names = ",".join([f"DNS:hookrelay-nats-{i}.hookrelay-nats-headless" for i in range(3)]
                     + [f"DNS:*.hookrelay-nats-headless.{NAMESPACE}.svc.cluster.local",
                        "DNS:hookrelay-nats"])
    script = f"""set -e
cd '{directory}'
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
openssl req -x509 -new -key ca.key -out ca.crt -days 2 -subj '/CN=hookrelay test NATS CA' \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out tls.key
openssl req -new -key tls.key -out tls.csr -subj '/CN=hookrelay-nats'
printf 'subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n' > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile tls.ext -out tls.crt
"""
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"making the NATS test certificates: {p.stdout}{p.stderr}")
    with open(os.path.join(directory, "password"), "w") as f:
        f.write(base64.b32encode(os.urandom(20)).decode().lower() + "\n")
    return {name: os.path.join(directory, name)
            for name in ("ca.crt", "tls.crt", "tls.key", "password")}


def render_all(work, nats_pki):
    rendered = {}
    for name in ("base", "overlays/demo", "overlays/jetstream", "overlays/jetstream-external"):
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
    # What the JetStream test starts: the demo overlay's additions (receiver, config, secrets,
    # deliverer patches) on top of overlays/jetstream instead of the base. Kustomize loads files
    # only from within an overlay's directory, so the demo's files are copied into a temporary one.
    overlay = tempfile.mkdtemp(prefix=".test-jetstream-demo-", dir=os.path.join(KUBE, "overlays"))
    try:
        demo = os.path.join(KUBE, "overlays/demo")
        for entry in os.listdir(demo):
            if entry != "kustomization.yaml":
                shutil.copy(os.path.join(demo, entry), overlay)
        with open(os.path.join(demo, "kustomization.yaml")) as f:
            kustomization = yaml.safe_load(f)
        check("../../base" in kustomization["resources"], "overlays/demo builds on ../../base")
        kustomization["resources"] = ["../jetstream" if r == "../../base" else r
                                      for r in kustomization["resources"]]
        # The NATS Secrets the jetstream overlay expects to exist, made the way a user would
        # (`kubectl create secret generic ... --from-file`).
        for name in nats_pki:
            shutil.copy(nats_pki[name], os.path.join(overlay, "nats-" + name))
        kustomization.setdefault("secretGenerator", []).extend([
            {"name": "hookrelay-nats-tls",
             "files": [f"{k}=nats-{k}" for k in ("ca.crt", "tls.crt", "tls.key")],
             "options": {"disableNameSuffixHash": True}},
            {"name": "hookrelay-nats-auth", "files": ["password=nats-password"],
             "options": {"disableNameSuffixHash": True}},
        ])
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            yaml.safe_dump(kustomization, f)
        rendered["overlays/jetstream+demo"] = render(overlay)
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


def nats_config(docs):
    """The StatefulSet hookrelay-nats, and its nats.conf from the ConfigMap it mounts."""
    sts = find(docs, "StatefulSet", "hookrelay-nats")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    args = container.get("args", [])
    path = args[args.index("--config") + 1]
    for vm in container["volumeMounts"]:
        if path.startswith(vm["mountPath"] + "/"):
            volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"]
                          if v["name"] == vm["name"])
            cm = find(docs, "ConfigMap", volume["configMap"]["name"])
            return sts, container, cm["data"][path[len(vm["mountPath"]) + 1:]]
    raise ValueError(f"no volume holds {path}")


def check_jetstream_manifests(objects, nats_server, nats_pki):
    """overlays/jetstream and overlays/jetstream-external, as rendered (no process started)."""
    docs = objects["overlays/jetstream"]
    check(find(docs, "StatefulSet", "hookrelay-collector") is None,
          "jetstream: the base's collector StatefulSet is gone")
    collector = find(docs, "Deployment", "hookrelay-collector")
    if not check(collector is not None, "jetstream: collectors are a Deployment"):
        return
    pod = collector["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c["args"]
    check("--store=jetstream" in args and "--nats_replicas=3" in args
          and "--nats_url=$(NATS_URL)" in args,
          "jetstream: collector args --store=jetstream --nats_url=$(NATS_URL) --nats_replicas=3")
    check(not any(a.startswith("--data_dir") for a in args)
          and not any("persistentVolumeClaim" in v for v in pod.get("volumes", []))
          and "volumeClaimTemplates" not in collector["spec"],
          "jetstream: collectors have no data volume")
    env = {e["name"]: e for e in c.get("env", [])}
    ref = env.get("NATS_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
    check(ref.get("name") == "hookrelay-nats" and ref.get("key") == "url",
          f"jetstream: NATS_URL from Secret hookrelay-nats, key url ({ref})")
    # NATS credentials and TLS: files from Secrets, never values on the command line.
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith("--nats_") and "=" in a)

    def secret_file(path):
        """The (Secret, key) a file path of the container comes from, or None."""
        for vm in c.get("volumeMounts", []):
            if path.startswith(vm["mountPath"] + "/"):
                volume = next(v for v in pod["volumes"] if v["name"] == vm["name"])
                if "secret" not in volume:
                    return None
                name = path[len(vm["mountPath"]) + 1:]
                items = {i["path"]: i["key"] for i in volume["secret"].get("items", [])}
                return volume["secret"]["secretName"], items.get(name, name)
        return None
    check(flags.get("nats_user") == "hookrelay"
          and secret_file(flags.get("nats_password_file", "")) == ("hookrelay-nats-auth", "password")
          and secret_file(flags.get("nats_tls_ca_file", "")) == ("hookrelay-nats-tls", "ca.crt"),
          f"jetstream: collectors log in to NATS as hookrelay, the password and the CA files from "
          f"the Secrets hookrelay-nats-auth and hookrelay-nats-tls ({flags})")
    tls_volume = next((v for v in pod["volumes"]
                       if v.get("secret", {}).get("secretName") == "hookrelay-nats-tls"), {})
    check([i["key"] for i in tls_volume.get("secret", {}).get("items", [])] == ["ca.crt"],
          "jetstream: collectors mount only ca.crt of hookrelay-nats-tls (not the servers' key)")
    hpa = find(docs, "HorizontalPodAutoscaler", "hookrelay-collector")
    check(hpa is not None and hpa["spec"]["scaleTargetRef"] == {
              "apiVersion": "apps/v1", "kind": "Deployment", "name": "hookrelay-collector"}
          and hpa["spec"]["minReplicas"] >= 2
          and hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
          and collector["spec"]["replicas"] == hpa["spec"]["minReplicas"],
          "jetstream: an HPA scales the collector Deployment on CPU, from its 2 replicas")
    check(bool(c.get("resources", {}).get("requests", {}).get("cpu")),
          "jetstream: collectors request CPU (the HPA's utilization refers to it)")

    # NATS: the Secret's URL names every pod of the StatefulSet, the config routes to every pod.
    sts, nats, conf = nats_config(docs)
    replicas = sts["spec"]["replicas"]
    headless = find(docs, "Service", sts["spec"]["serviceName"])
    check(replicas == 3 and sts["spec"].get("podManagementPolicy") == "Parallel",
          "jetstream: NATS is a 3-server StatefulSet started in parallel (a quorum is needed)")
    check(headless is not None and headless["spec"].get("clusterIP") == "None"
          and headless["spec"].get("publishNotReadyAddresses") is True,
          f"jetstream: NATS's serviceName {sts['spec']['serviceName']} is headless, "
          f"publishing not-ready pods")
    ports = {p["name"]: p["containerPort"] for p in nats["ports"]}
    check(ports == {"client": 4222, "cluster": 6222, "monitor": 8222},
          f"jetstream: NATS ports client 4222, cluster 6222, monitor 8222 ({ports})")
    pods = [f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}" for i in range(replicas)]
    secret = find(docs, "Secret", "hookrelay-nats")
    url = base64.b64decode(secret["data"]["url"]).decode() if secret else ""
    check(url == ",".join(f"nats://{p}:{ports['client']}" for p in pods),
          f"jetstream: Secret hookrelay-nats names every NATS pod: {url}")
    routes = re.findall(r"nats://[^\s,\]]+", conf.split("cluster", 1)[-1])
    check(sorted(routes) == sorted(f"nats://{p}:{ports['cluster']}" for p in pods),
          f"jetstream: nats.conf routes to every NATS pod: {routes}")
    check(re.search(r"^server_name:\s*\$POD_NAME\s*$", conf, re.M) is not None
          and env_of(nats).get("POD_NAME") == {"fieldRef": {"fieldPath": "metadata.name"}},
          "jetstream: each server is named after its pod ($POD_NAME from metadata.name)")
    check(any(vm["name"] == "data" and vm["mountPath"] == "/data" for vm in nats["volumeMounts"])
          and [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["data"]
          and re.search(r"store_dir:\s*/data\s*$", conf, re.M) is not None,
          "jetstream: JetStream stores under /data, the pod's volumeClaimTemplate")
    # TLS on the client and route ports from the mounted Secret hookrelay-nats-tls; hookrelay's
    # own account with its user, whose password comes from hookrelay-nats-auth.
    tls_mount = next((vm["mountPath"] for vm in nats["volumeMounts"] if next(
        (v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == vm["name"]),
        {}).get("secret", {}).get("secretName") == "hookrelay-nats-tls"), None)
    client_part, cluster_part = conf.split("\ncluster", 1) if "\ncluster" in conf else (conf, "")
    check(tls_mount is not None and all(
              re.search(rf"{key}:\s*{re.escape(tls_mount)}/{name}\s*$", part, re.M)
              for part in (client_part, cluster_part)
              for key, name in (("cert_file", "tls.crt"), ("key_file", "tls.key"),
                                ("ca_file", "ca.crt"))),
          f"jetstream: nats.conf has TLS on client and route connections, files from the Secret "
          f"hookrelay-nats-tls mounted at {tls_mount}")
    password_ref = env_of(nats).get("HOOKRELAY_NATS_PASSWORD", {}).get("secretKeyRef", {})
    check(re.search(r"user:\s*hookrelay\s*\n\s*password:\s*\$HOOKRELAY_NATS_PASSWORD", conf)
          is not None and re.search(r"jetstream:\s*enabled", conf) is not None
          and password_ref == {"name": "hookrelay-nats-auth", "key": "password"},
          f"jetstream: nats.conf has an account with JetStream and the user hookrelay, its "
          f"password from Secret hookrelay-nats-auth ({password_ref})")
    # The server binary the test runs checks the rendered file (with this test's certificates
    # where the Secret would be mounted), and is the version the image pins.
    with tempfile.NamedTemporaryFile("w", suffix=".conf") as f:
        f.write(conf.replace(f"{tls_mount}/", os.path.dirname(nats_pki["ca.crt"]) + "/")
                if tls_mount else conf)
        f.flush()
        p = subprocess.run([nats_server, "-c", f.name, "-t"], capture_output=True, text=True,
                           env={"POD_NAME": f"{sts['metadata']['name']}-0",
                                "HOOKRELAY_NATS_PASSWORD": "checked"})
    check(p.returncode == 0, f"jetstream: nats-server -t accepts the rendered nats.conf "
                             f"({(p.stdout + p.stderr).strip()})")
    version = subprocess.run([nats_server, "--version"], capture_output=True,
                             text=True).stdout.strip().rsplit(" ", 1)[-1].lstrip("v")
    check(nats["image"] == f"nats:{version}",
          f"jetstream: the NATS image ({nats['image']}) is the tested server's version {version}")
    budget = find(docs, "PodDisruptionBudget", "hookrelay-nats")
    check(budget is not None and budget["spec"].get("maxUnavailable") == 1
          and budget["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"],
          "jetstream: a PodDisruptionBudget keeps 2 of 3 NATS servers (maxUnavailable 1)")

    # External NATS: the same collectors, no NATS objects, the Secret left to the user.
    external = objects["overlays/jetstream-external"]
    nats_objects = [f"{d['kind']}/{d['metadata']['name']}" for d in external
                    if "nats" in d["metadata"]["name"]]
    check(not nats_objects, f"jetstream-external: no NATS objects ({nats_objects})")
    check(find(external, "Deployment", "hookrelay-collector") == collector,
          "jetstream-external: the collector Deployment is the jetstream overlay's")
    names = lambda ds: sorted(f"{d['kind']}/{d['metadata']['name']}" for d in ds)
    check(names(external) == names(d for d in docs if "nats" not in d["metadata"]["name"]),
          "jetstream-external: exactly the jetstream overlay's objects minus NATS's")


def env_of(container):
    return {e["name"]: e.get("valueFrom", e.get("value")) for e in container.get("env", [])}


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

    def add_nats(self, server):
        """Stands in for the official image `nats` (scratch variant), which the test cannot pull:
        the local nats-server binary at the image's path, /nats-server, with the image's
        entrypoint, cmd and PATH (nats-io/nats-docker, */scratch/Dockerfile). Substituted: the
        binary (built by tools/bootstrap.sh from the same release; dynamically linked, so its
        libc and loader come along, where the official one is static) and the image's default
        nats-server.conf, which the rendered args replace anyway."""
        bundle = os.path.join(self.work, "bundles", "nats")
        rootfs = os.path.join(bundle, "rootfs")
        for d in ("proc", "dev", "etc", "tmp"):
            os.makedirs(os.path.join(rootfs, d))
        shutil.copy(server, os.path.join(rootfs, "nats-server"))
        os.chmod(os.path.join(rootfs, "nats-server"), 0o755)
        for line in run(["ldd", server]).stdout.splitlines():
            parts = line.split()
            lib = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
            if lib.startswith("/"):
                target = rootfs + lib
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy(lib, target)
        with open(os.path.join(rootfs, "nats-server.conf"), "w") as f:
            f.write("port: 4222\nhttp_port: 8222\n")
        runtime = {"process": {"args": ["/nats-server", "--config", "nats-server.conf"],
                               "user": {"uid": 0, "gid": 0},
                               "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                                       "/sbin:/bin:/"]}}
        self.bundles["nats"] = (bundle, runtime)


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

    def start(self, images, docs, hosts_file, host_conf=None):
        pod = self.pod
        bundle, runtime = images.bundle(self.spec["image"])
        root = os.path.join(pod.dir, "root-" + self.spec["name"])
        run(["cp", "-a", os.path.join(bundle, "rootfs"), root])  # owners kept
        # The container's mounts, on its own copy of the image.
        run(["mount", "--bind", root, root])
        mounts = [("/etc/hosts", hosts_file, True)]
        if host_conf:
            mounts.append(("/etc/host.conf", host_conf, True))
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

        # command replaces the image's entrypoint, args its cmd (Kubernetes semantics), and
        # $(VAR) in them is the container's env variable VAR ($$ escapes a $).
        spec_env = {e["name"]: self.env_value(e, docs) for e in self.spec.get("env", [])}

        def expand(arg):
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                          lambda m: "$" if m.group(0) == "$$" else spec_env.get(m.group(1),
                                                                                 m.group(0)),
                          arg)

        entrypoint = runtime["process"]["args"]
        argv = ([expand(a) for a in self.spec["command"]] if "command" in self.spec
                else entrypoint[:1])
        argv += ([expand(a) for a in self.spec["args"]] if "args" in self.spec
                 else entrypoint[1:])
        env = {}
        for item in runtime["process"].get("env", []):
            k, _, v = item.partition("=")
            env[k] = v
        env.update(spec_env)
        env["HOSTNAME"] = pod.name
        userspec = f"{uid}:{gid}"
        chroot = [shutil.which("chroot") or "/usr/sbin/chroot", f"--userspec={userspec}"]
        if groups:
            chroot.append("--groups=" + ",".join(groups))
        # A pod with its own network namespace (PodNetwork): the container joins it.
        nsenter = [shutil.which("nsenter") or "/usr/bin/nsenter", f"--net={pod.netns}"]
        self.prefix = (nsenter if pod.netns else []) + chroot + [root]
        self.env = env
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.prefix + argv, env=env, cwd="/",
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
                    "status.podIP": self.pod.ip}[source["fieldRef"]["fieldPath"]]
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

    def pre_stop(self):
        """The preStop exec hook, as the kubelet runs it before SIGTERM: the command in the
        container (its root, user, env and network), to completion. None when there is none."""
        command = self.spec.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if not command or not self.alive():
            return None
        p = subprocess.run(self.prefix + command, env=self.env, cwd="/", capture_output=True,
                           text=True, timeout=self.pod.grace)
        return p.returncode, " ".join(command), (p.stdout + p.stderr).strip()


class Pod:
    """Replica `index` of a workload. Without a network, it shares the test's network namespace
    (address 127.0.0.1); with one (PodNetwork), it gets its own namespace and address."""

    def __init__(self, workload, work, docs, index=0, network=None):
        template = workload["spec"]["template"]
        self.workload = workload
        self.kind = workload["kind"]
        base = workload["metadata"]["name"]
        self.name = (f"{base}-{index}" if self.kind == "StatefulSet"
                     else f"{base}-7d4b9c-{['x2x9z', 'k8q4w', 'p5n7d', 'r2m6f'][index]}")
        self.ip, self.netns = network.add(self.name) if network else ("127.0.0.1", None)
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
                if "items" in v["secret"]:  # Only these keys, under these names.
                    files = {i["path"]: files[i["key"]] for i in v["secret"]["items"]
                             if i["key"] in files}
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
    ip = container.pod.ip
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = container.port(get["port"])
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}{get.get('path', '/')}",
                                        timeout=probe.get("timeoutSeconds", 1) + 1) as r:
                return 200 <= r.status < 400, f"GET :{port}{get.get('path', '/')} {r.status}"
        except urllib.error.HTTPError as e:
            return False, f"GET :{port}{get.get('path', '/')} {e.code}"
        except OSError as e:
            return False, f"GET :{port}{get.get('path', '/')} {e}"
    if "grpc" in probe:
        g = probe["grpc"]
        args = [ctl, f"--collector={ip}:{g['port']}", "--timeout=2s", "health"]
        if g.get("service"):
            args.append(f"--service={g['service']}")
        p = subprocess.run(args, capture_output=True, text=True)
        return p.returncode == 0, f"grpc :{g['port']} {g.get('service', '')} {p.stdout.strip()}" \
                                  f"{p.stderr.strip()}"
    if "tcpSocket" in probe:
        port = container.port(probe["tcpSocket"]["port"])
        try:
            with socket.create_connection((ip, port), timeout=2):
                return True, f"tcp :{port}"
        except OSError as e:
            return False, f"tcp :{port} {e}"
    return False, f"unsupported probe {probe}"


def check_probes(containers, ctl):
    """Every startup/readiness/liveness probe passes within its budget."""
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


def selects(selector, pod):
    return all(pod.labels.get(k) == v for k, v in selector.items())


def check_service_ports(docs, pods):
    """Every Service port reaches a container port that listens, on every pod it selects."""
    for s in by_kind(docs, "Service"):
        selector = s["spec"].get("selector", {})
        targets = [c for p in pods for c in p.containers if selects(selector, p)]
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
            failed = []
            for owner in owners:
                try:
                    socket.create_connection((owner.pod.ip, number), timeout=2).close()
                except OSError:
                    failed.append(owner.name)
            check(not failed, f"Service {s['metadata']['name']}:{port['port']} → :{number} accepts "
                              f"connections" + (f" (not on {failed})" if failed else ""))


def check_network_policies(docs, pods):
    """NetworkPolicies open ports the selected pods actually have."""
    for np in by_kind(docs, "NetworkPolicy"):
        selector = np["spec"]["podSelector"].get("matchLabels", {})
        selected = [c for p in pods for c in p.containers if selects(selector, p)]
        for rule in np["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                ref = port["port"]
                ok = any((ref in c.ports) if isinstance(ref, str) else (ref in c.port_numbers)
                         for c in selected)
                check(ok, f"NetworkPolicy {np['metadata']['name']}: port {ref} is a "
                          f"container port of the pods it selects")


def stop(tiers):
    """Stops the containers tier by tier, as pod deletions would: within a tier, each one's
    preStop hook runs, then SIGTERM; each must exit 0 within its terminationGracePeriodSeconds."""
    for tier in tiers:
        started = [c for c in tier if c.proc is not None]
        for c in started:
            hook = c.pre_stop()
            if hook is not None:
                check(hook[0] == 0, f"{c.name}: preStop `{hook[1]}` exits 0 ({hook[2]})")
            if c.alive():
                c.proc.send_signal(signal.SIGTERM)
        for c in started:
            try:
                code = c.proc.wait(timeout=c.pod.grace)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                code = "killed after terminationGracePeriodSeconds"
            check(code == 0, f"{c.name}: exits 0 on SIGTERM within {c.pod.grace}s ({code})")


def unmount_all(work):
    subprocess.run(["sh", "-c", f"grep ' {work}/' /proc/self/mounts | cut -d' ' -f2 | "
                    "sort -r | xargs -r -n1 umount -l"], check=False)


def send_batch(url, write_key, events):
    body = json.dumps({"batch": events})
    request = urllib.request.Request(
        url, data=body.encode(),
        headers={"Content-Type": "application/json",
                 "Authorization": "Basic " + base64.b64encode(f"{write_key}:".encode()).decode()})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status


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

        check_probes(containers, ctl)
        check(any(c.spec.get("readinessProbe") for c in containers),
              "the workloads declare readiness probes")
        check_service_ports(docs, pods)
        check_network_policies(docs, pods)

        # The demo flow: an event through the collector's Service reaches the receiver, signed.
        config = yaml.safe_load(find_config(docs))
        write_key = config["sources"][0]["write_keys"][0]
        http_port = find(docs, "Service", "hookrelay-collector")["spec"]["ports"][0]["port"]
        status = send_batch(f"http://127.0.0.1:{http_port}/v1/batch", write_key,
                            [{"type": "track", "event": "Deployed", "userId": "u-deploy",
                              "messageId": "deploy-test-1"}])
        check(status == 200, f"event accepted by the collector Service ({status})")
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
        # Deliverers first, then the rest (the StatefulSet, the collector, last).
        stop([[c] for c in sorted(containers, key=lambda c: c.pod.kind == "StatefulSet")])
        unmount_all(work)


class PodNetwork:
    """A network namespace per pod, as a node gives them: a holder process (the kubelet's pause
    container) owns the namespace, a veth pair links it to a bridge in the test's namespace, and
    the pod gets an address of 10.244.0.0/24 (the test reaches it from the bridge, 10.244.0.1).
    Containers join it with nsenter. Everything stays inside the test's private network
    namespace (tests/deploy/run.sh); /proc is that PID namespace's own (run.sh's --mount-proc),
    so /proc/<pid>/ns/net is the holder's."""

    BRIDGE = "hr0"

    def __init__(self):
        links = run(["ip", "-o", "link", "show"]).stdout
        names = [l.split(":")[1].strip() for l in links.splitlines()]
        if names != ["lo"]:
            raise RuntimeError(f"PodNetwork: expected a fresh network namespace with only lo "
                               f"(tests/deploy/run.sh makes one), found {names}")
        run(["ip", "link", "add", self.BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", "10.244.0.1/24", "dev", self.BRIDGE])
        run(["ip", "link", "set", self.BRIDGE, "up"])
        self.holders = []
        self.own = os.readlink("/proc/self/ns/net")

    def add(self, name):
        n = len(self.holders)
        holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
        self.holders.append(holder)
        netns = f"/proc/{holder.pid}/ns/net"

        def holding():  # unshare has made the namespace and exec'ed sleep
            with open(f"/proc/{holder.pid}/cmdline", "rb") as f:
                return f.read() == b"sleep\0infinity\0" and os.readlink(netns) != self.own
        deadline = time.time() + 10
        while not holding():
            if time.time() > deadline:
                raise RuntimeError(f"PodNetwork: {netns} is not the holder's own namespace")
            time.sleep(0.01)
        ip = f"10.244.0.{10 + n}"
        veth = f"hrv{n}"
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns",
             str(holder.pid)])
        run(["ip", "link", "set", veth, "master", self.BRIDGE, "up"])
        inside = ["nsenter", f"--net={netns}", "ip"]
        run(inside + ["addr", "add", f"{ip}/24", "dev", "eth0"])
        run(inside + ["link", "set", "eth0", "up"])
        run(inside + ["link", "set", "lo", "up"])
        return ip, netns

    def close(self):
        for holder in self.holders:
            holder.kill()
            holder.wait()


def pod_hosts_files(docs, pods, work):
    """/etc/hosts and /etc/host.conf standing in for the cluster DNS when pods have addresses of
    their own: a Service's names resolve to every pod it selects (a headless Service's answer; a
    ClusterIP Service's virtual IP has no kube-proxy here, so it gets the same list), and
    <pod>.<serviceName> to a StatefulSet pod. `multi on` makes glibc return every address of a
    name, as DNS does (the images have no host.conf; Go's resolver returns all anyway)."""
    lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
    for p in pods:
        names = []
        for s in by_kind(docs, "Service"):
            if s["spec"].get("selector") and selects(s["spec"]["selector"], p):
                n = s["metadata"]["name"]
                names += [n, f"{n}.{NAMESPACE}", f"{n}.{NAMESPACE}.svc",
                          f"{n}.{NAMESPACE}.svc.cluster.local"]
        if p.kind == "StatefulSet":
            headless = p.workload["spec"]["serviceName"]
            names += [f"{p.name}.{headless}", f"{p.name}.{headless}.{NAMESPACE}.svc.cluster.local"]
        if names:
            lines.append(f"{p.ip} " + " ".join(names))
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("\n".join(lines) + "\n")
    host_conf = os.path.join(work, "host.conf")
    with open(host_conf, "w") as f:
        f.write("multi on\n")
    return hosts, host_conf


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def nats_info(ip, port):
    """The INFO a NATS server sends a new client (before any TLS handshake)."""
    with socket.create_connection((ip, port), timeout=5) as sock:
        line = sock.makefile("rb").readline().decode()
    return json.loads(line.split(" ", 1)[1]) if line.startswith("INFO ") else None


def metric(ip, port, name):
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


def wait_for(condition, timeout=WAIT, interval=0.2):
    deadline = time.time() + timeout
    while True:
        try:
            value = condition()
        except (OSError, ValueError, KeyError):
            value = None
        if value or time.time() >= deadline:
            return value
        time.sleep(interval)


def run_jetstream(docs, images, work, ctl, nats_server):
    """overlays/jetstream (+ the demo's receiver, config and secrets), started pod by pod."""
    work = os.path.join(work, "jetstream")
    os.makedirs(work)
    images.add_nats(nats_server)
    image = find(docs, "StatefulSet", "hookrelay-nats")["spec"]["template"]["spec"]["containers"][0]["image"]
    version = run([nats_server, "--version"]).stdout.strip().rsplit(" ", 1)[-1]
    print(f"NOTE  jetstream: the NATS pods run the nats-server {version} binary built by "
          f"tools/bootstrap.sh in place of the image {image}, which cannot be pulled or built "
          f"offline (same release; the image's entrypoint, command and paths)", flush=True)
    network = PodNetwork()

    def replicas(kind, name):
        w = find(docs, kind, name)
        return [Pod(w, work, docs, i, network) for i in range(w["spec"].get("replicas", 1))]

    nats = replicas("StatefulSet", "hookrelay-nats")
    collectors = replicas("Deployment", "hookrelay-collector")
    deliverers = replicas("Deployment", "hookrelay-deliverer")
    receivers = replicas("Deployment", "hookrelay-receiver")
    pods = nats + collectors + deliverers + receivers
    workloads = by_kind(docs, "StatefulSet") + by_kind(docs, "Deployment")
    check(sorted(w["metadata"]["name"] for w in workloads) ==
          sorted({p.workload["metadata"]["name"] for p in pods})
          and (len(nats), len(collectors), len(deliverers), len(receivers)) == (3, 2, 1, 1),
          f"jetstream: pods {[p.name for p in pods]} (3 NATS, 2 collectors, a deliverer and the "
          f"receiver)")
    hosts, host_conf = pod_hosts_files(docs, pods, work)
    containers = lambda ps: [c for p in ps for c in p.containers]
    try:
        # NATS first (the collectors wait for it at start), then collectors, then the rest.
        for group in (nats, collectors, deliverers + receivers):
            for c in containers(group):
                c.start(images, docs, hosts, host_conf)
            check_probes(containers(group), ctl)

        # One cluster: every server routes to the two others, and JetStream has a meta leader of
        # a 3-server cluster.
        for p in nats:
            others = sorted(o.name for o in nats if o is not p)
            routez = wait_for(lambda: get_json(f"http://{p.ip}:8222/routez"))
            remotes = sorted({r.get("remote_name") for r in (routez or {}).get("routes", [])})
            check(remotes == others, f"{p.name}: routes to {remotes}")
        # Clients must use TLS and log in: what each server announces to a client.
        for p in nats:
            info = wait_for(lambda: nats_info(p.ip, 4222))
            check(info and info.get("tls_required") is True and info.get("auth_required") is True,
                  f"{p.name}: clients need TLS and credentials ({info})")
        meta = wait_for(lambda: get_json(f"http://{nats[0].ip}:8222/jsz")["meta_cluster"])
        check(meta and meta.get("cluster_size") == 3 and meta.get("leader") in
              [p.name for p in nats], f"JetStream meta cluster of 3, leader {meta}")

        # The collectors made the streams with the rendered --nats_replicas (3): a copy on each
        # server (a server's /jsz lists the streams it holds).
        def streams(pod=nats[0]):
            jsz = get_json(f"http://{pod.ip}:8222/jsz?streams=true&config=true")
            return {s["name"]: s for a in jsz.get("account_details", [])
                    for s in a.get("stream_detail", [])}
        for name in ("HR_JOBS", "HR_DEAD"):
            holders = [p.name for p in nats
                       if wait_for(lambda: streams(p)[name]["config"]["num_replicas"] == 3)]
            check(holders == [p.name for p in nats],
                  f"stream {name}: 3 replicas, held by {holders}")

        check_service_ports(docs, pods)
        check_network_policies(docs, pods)

        # The deliverer found both collector pods through the headless Service (a Deployment's
        # pods have no names of their own, only the Service's records).
        for p in collectors:
            streams_open = wait_for(lambda: metric(p.ip, 9464, "hookrelay_dispatch_streams") == 1)
            check(streams_open, f"{p.name}: the deliverer's stream is connected "
                                f"(hookrelay_dispatch_streams "
                                f"{metric(p.ip, 9464, 'hookrelay_dispatch_streams')})")
            readyz = wait_for(lambda: urllib.request.urlopen(
                f"http://{p.ip}:9464/readyz", timeout=2).status == 200)
            check(readyz, f"{p.name}: /readyz 200")

        # Events to each collector pod: every one delivered exactly once, signed.
        config = yaml.safe_load(find_config(docs))
        write_key = config["sources"][0]["write_keys"][0]
        http_port = find(docs, "Service", "hookrelay-collector")["spec"]["ports"][0]["port"]
        sent = []
        for i, p in enumerate(collectors):
            events = [{"type": "track", "event": "Deployed", "userId": f"u-{n}",
                       "messageId": f"js-{i}-{n}"} for n in range(20)]
            status = send_batch(f"http://{p.ip}:{http_port}/v1/batch", write_key, events)
            check(status == 200, f"{p.name}: 20 events accepted ({status})")
            sent += [e["messageId"] for e in events]
        receiver = receivers[0].containers[0]

        def received():
            seen = {}
            for line in list(receiver.lines):
                m = re.search(r"messageId=(\S+)", line)
                if m:
                    seen.setdefault(m.group(1), []).append(line)
            return seen
        wait_for(lambda: set(sent) <= received().keys())
        time.sleep(1)  # Room for a duplicate to show up.
        seen = received()
        check(set(seen) == set(sent) and all(len(seen[m]) == 1 for m in sent),
              f"the receiver got each of the {len(sent)} events exactly once "
              f"({sum(len(v) for v in seen.values())} requests, "
              f"{len(set(sent) - set(seen))} missing, "
              f"{sorted(m for m, v in seen.items() if len(v) > 1)} repeated)")
        unverified = [l for v in seen.values() for l in v if "X-Signature: verified" not in l]
        check(not unverified, f"every delivery's signature verified ({unverified[:3]})")
        # Completed jobs leave the work-queue stream.
        left = [None]

        def drained():
            left[0] = streams()["HR_JOBS"]["state"]["messages"]
            return left[0] == 0
        check(wait_for(drained, timeout=15),
              f"HR_JOBS is empty once everything is delivered ({left[0]} messages left)")
    finally:
        # The reverse of the start: deliverer, then receiver and collectors, then NATS (each
        # server after its preStop lame duck).
        stop([containers(deliverers), containers(receivers + collectors), containers(nats)])
        network.close()
        unmount_all(work)


def find_config(docs):
    for cm in by_kind(docs, "ConfigMap"):
        if "config.yaml" in cm.get("data", {}):
            return cm["data"]["config.yaml"]
    raise ValueError("no ConfigMap with config.yaml")


def main():
    for var in ("HOOKRELAY_IMAGES", "HOOKRELAY_BIN_DIR", "KUBERNETES_VALIDATE",
                "HOOKRELAY_NATS_SERVER"):
        if not os.environ.get(var):
            print(f"{var} is not set: run tests/deploy/run.sh", file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        print("the pods are started with chroot and bind mounts: run as root", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="hookrelay-deploy-")
    os.chmod(work, 0o755)
    try:
        nats_pki = make_nats_pki(os.path.join(work, "nats-pki"))
        objects = render_all(work, nats_pki)
        check_monitoring(objects["base+components/monitoring"])
        images = Images(os.environ["HOOKRELAY_IMAGES"], work)
        check_images(images)
        ctl = os.path.join(os.environ["HOOKRELAY_BIN_DIR"], "tools/hookrelayctl/hookrelayctl")
        run_demo(objects["overlays/demo"], images, work, ctl)
        nats_server = os.environ["HOOKRELAY_NATS_SERVER"]
        check_jetstream_manifests(objects, nats_server, nats_pki)
        run_jetstream(objects["overlays/jetstream+demo"], images, work, ctl, nats_server)
    finally:
        if failures:
            print(f"logs kept in {work}/pods and {work}/jetstream/pods", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'FAILED' if failures else 'OK'}: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
