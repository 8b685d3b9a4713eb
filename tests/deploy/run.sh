#!/usr/bin/env bash
# The deploy test (tests/deploy/deploy_test.py): builds the images (tools/build-images.sh),
# prepares the offline Kubernetes schema validator (kubernetes-validate, pinned, in a venv under
# ~/.cache), then runs the test as root in a private network, mount and PID namespace (with its
# own /proc): the rendered pods listen on their real ports (8080, 50051, 9464, 9465, 9000, and
# NATS's 4222, 6222, 8222) on that namespace's loopback, or on addresses of a bridge that exists
# only there (the JetStream overlay's pods, one network namespace each).
# Usage: tests/deploy/run.sh    (needs root: chroot, bind mounts, unshare)
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ "$(id -u)" -ne 0 ]; then
  echo "tests/deploy/run.sh: needs root (chroot, bind mounts and namespaces start the pods)" >&2
  exit 1
fi

validator_version=1.37.0
venv="${HOME}/.cache/hookrelay-venv-kv-${validator_version}"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  echo "deploy test: installing kubernetes-validate ${validator_version} into $venv"
  rm -rf "$venv"
  /usr/bin/env python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==${validator_version}"
fi

images=$(mktemp -d)
trap 'rm -rf "$images"' EXIT
tools/build-images.sh "$images"
bin_dir=$(bazel info bazel-bin 2>/dev/null)
bazel build //tools/hookrelayctl:hookrelayctl 2>&1 | tail -1
# The JetStream overlay's NATS pods run this binary (tools/bootstrap.sh, run by build-images.sh,
# builds it) in place of the official image.
nats_server=${HOOKRELAY_NATS_SERVER:-$HOME/.cache/hookrelay-nats/v2.14.9/nats-server}
if [ ! -x "$nats_server" ]; then
  echo "tests/deploy/run.sh: no nats-server at $nats_server: run tools/bootstrap.sh" >&2
  exit 1
fi

export HOOKRELAY_IMAGES="$images" HOOKRELAY_BIN_DIR="$bin_dir" \
  KUBERNETES_VALIDATE="$venv/bin/kubernetes-validate" HOOKRELAY_NATS_SERVER="$nats_server"
exec unshare --net --mount --pid --fork --mount-proc --propagation private -- \
  sh -c 'ip link set lo up && exec "$0" tests/deploy/deploy_test.py' "$venv/bin/python3"
