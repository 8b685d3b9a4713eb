#!/usr/bin/env bash
# Builds the OCI images hookrelay-collector, hookrelay-deliverer and hookrelay-receiver (the demo
# receiver) offline, from this checkout and the machine's Debian packages: no base image, no
# registry. Each image's root filesystem is the binary plus the exact closure of shared libraries
# it loads (from ldd), the dynamic loader, the CA bundle, and a few files in /etc; umoci turns
# the tree into a one-layer OCI image. Why this way: deploy/README.md ("Images").
#
# Usage: tools/build-images.sh [OUT_DIR]      (default out/images)
# Result: OUT_DIR/<image>/ is an OCI image layout with the tags <version> and latest, e.g.
#   skopeo copy oci:out/images/hookrelay-collector:latest docker://registry.example/hookrelay-collector:v1
#   podman pull oci:out/images/hookrelay-collector:latest
# Images run as uid 65532, need no shell, work with a read-only root filesystem; the processes
# handle SIGTERM themselves (no init).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-out/images}
tools/bootstrap.sh >/dev/null
for tool in umoci strip ldd; do
  command -v "$tool" >/dev/null || { echo "build-images: $tool is missing" >&2; exit 1; }
done
if [ "$(id -u)" -ne 0 ]; then
  # umoci insert records file owners; the image's /data must belong to uid 65532.
  echo "build-images: run as root (umoci needs it to record file ownership)" >&2
  exit 1
fi

echo "build-images: building the binaries (-c opt)"
bazel build -c opt //collector:collector //deliverer:deliverer //tools/receiver:demo_receiver \
  //tools/hookrelayctl:hookrelayctl 2>&1 | tail -1
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
# Every timestamp in the images is the commit's, so two builds of one commit are identical.
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@${epoch}" +%Y-%m-%dT%H:%M:%SZ)
source_url="https://github.com/hookrelay/hookrelay"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# Copies `file` into the tree at the same absolute path (symlinks resolved).
copy_file() {
  local root=$1 file=$2
  mkdir -p "$root$(dirname "$file")"
  cp -L "$file" "$root$file"
}

# build_image NAME ENTRYPOINT PORTS [BINARY...]: the first binary is the entrypoint.
build_image() {
  local name=$1 entrypoint=$2 ports=$3
  shift 3
  local root="$work/$name/rootfs"
  mkdir -p "$root"/{etc/ssl/certs,usr/local/bin,tmp,proc,dev,sys,data,home/nonroot}
  chmod 1777 "$root/tmp"
  chown 65532:65532 "$root/data" "$root/home/nonroot"
  for binary in "$@"; do
    local target="$root/usr/local/bin/$(basename "$binary")"
    cp "$binary" "$target"
    chmod 0755 "$target"
    strip --strip-unneeded "$target"
    # The exact closure of shared libraries the binary loads, and the loader itself.
    ldd "$binary" | awk '/=> \// {print $3} /^\t\/[^ ]+ \(/ {print $1}' | sort -u |
      while read -r lib; do copy_file "$root" "$lib"; done
  done
  cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$root/etc/group" <<'EOF'
root:x:0:
nonroot:x:65532:
EOF
  printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
  # Receivers' certificates are verified against Debian's CA bundle (libcurl's default path).
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  find "$root" -exec touch -h -d "@${epoch}" {} +

  local layout="$out/$name"
  rm -rf "$layout"
  umoci init --layout "$layout"
  umoci new --image "$layout:$version"
  umoci insert --image "$layout:$version" --history.created "$created" \
    --history.created_by "tools/build-images.sh" --history.author hookrelay \
    --history.comment "$name: binary, its shared-library closure, CA bundle, /etc" "$root" /
  local config_args=(
    --image "$layout:$version" --no-history
    --os linux --architecture amd64 --created "$created"
    --author "hookrelay"
    --config.user 65532:65532
    --config.workingdir /home/nonroot
    --config.entrypoint "/usr/local/bin/$entrypoint"
    --config.env PATH=/usr/local/bin
    --config.stopsignal SIGTERM
    --config.label "org.opencontainers.image.title=$name"
    --config.label "org.opencontainers.image.source=$source_url"
    --config.label "org.opencontainers.image.revision=$revision"
    --config.label "org.opencontainers.image.version=$version"
    --config.label "org.opencontainers.image.created=$created"
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
  )
  for port in $ports; do config_args+=(--config.exposedports "$port/tcp"); done
  [ "$name" = hookrelay-collector ] && config_args+=(--config.volume /data)
  umoci config "${config_args[@]}"
  umoci tag --image "$layout:$version" latest
  umoci gc --layout "$layout"

  # Size: the compressed layer as pushed, and the unpacked tree.
  python3 - "$layout" "$version" "$root" <<'EOF'
import json, os, sys
layout, tag, root = sys.argv[1:4]
index = json.load(open(os.path.join(layout, "index.json")))
desc = next(m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
algo, digest = desc["digest"].split(":")
manifest = json.load(open(os.path.join(layout, "blobs", algo, digest)))
compressed = sum(l["size"] for l in manifest["layers"])
unpacked = 0
for dirpath, _, files in os.walk(root):
    for f in files:
        p = os.path.join(dirpath, f)
        if not os.path.islink(p):
            unpacked += os.path.getsize(p)
print(f"build-images: {os.path.basename(layout)}:{tag}  manifest {desc['digest'][:19]}  "
      f"compressed {compressed / 1e6:.1f} MB  unpacked {unpacked / 1e6:.1f} MB")
EOF
}

build_image hookrelay-collector collector "8080 50051 9464" \
  "$bin/collector/collector" "$bin/tools/hookrelayctl/hookrelayctl"
build_image hookrelay-deliverer deliverer "9465" "$bin/deliverer/deliverer"
build_image hookrelay-receiver demo_receiver "9000" "$bin/tools/receiver/demo_receiver"
echo "build-images: OCI layouts in $out (tags $version, latest)"
