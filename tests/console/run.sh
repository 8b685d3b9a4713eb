#!/usr/bin/env bash
# The web console test (tests/console/console_test.py): Debian's Chromium, headless, driven by
# Selenium (pinned, in a venv under ~/.cache) through the console served by the real collector,
# with a real deliverer and demo receiver, all on 127.0.0.1.
# Needs: chromium and chromium-driver (apt-get install -y --no-install-recommends chromium
# chromium-driver), python3 with venv, and the binaries already built (this script builds
# nothing): HOOKRELAY_BIN_DIR=<bazel-bin> with collector/collector, deliverer/deliverer and
# tools/receiver/demo_receiver.
# Usage: HOOKRELAY_BIN_DIR=$(bazel info bazel-bin) tests/console/run.sh
#        (TEST_OUTPUT_DIR=<dir> keeps the screenshots there)
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ -z "${HOOKRELAY_BIN_DIR:-}" ]; then
  echo "tests/console/run.sh: set HOOKRELAY_BIN_DIR to the bazel-bin directory" \
       "(HOOKRELAY_BIN_DIR=\$(bazel info bazel-bin)); this script builds nothing" >&2
  exit 2
fi
for bin in collector/collector deliverer/deliverer tools/receiver/demo_receiver; do
  if [ ! -x "$HOOKRELAY_BIN_DIR/$bin" ]; then
    echo "tests/console/run.sh: $HOOKRELAY_BIN_DIR/$bin is missing (bazel build //...)" >&2
    exit 2
  fi
done

chromium=${CHROMIUM:-/usr/bin/chromium}
chromedriver=${CHROMEDRIVER:-/usr/bin/chromedriver}
if [ ! -x "$chromium" ] || [ ! -x "$chromedriver" ]; then
  echo "tests/console/run.sh: needs Debian's chromium and chromedriver ($chromium, $chromedriver):" \
       "apt-get install -y --no-install-recommends chromium chromium-driver" >&2
  exit 2
fi

selenium_version=4.51.0
venv="${HOME}/.cache/hookrelay-venv-selenium-${selenium_version}"
if ! "$venv/bin/python3" -c "import selenium" >/dev/null 2>&1; then
  echo "console test: installing selenium ${selenium_version} into $venv"
  rm -rf "$venv"
  /usr/bin/env python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "selenium==${selenium_version}"
fi

# Selenium is given both paths, so it never runs Selenium Manager (which would download a
# browser or driver); SE_OFFLINE makes sure of it.
export SE_OFFLINE=true CHROMIUM="$chromium" CHROMEDRIVER="$chromedriver"
exec timeout 600 "$venv/bin/python3" tests/console/console_test.py
