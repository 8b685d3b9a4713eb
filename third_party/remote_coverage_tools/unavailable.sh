#!/bin/sh
echo "remote_coverage_tools is not available in hookrelay's offline build; bazel coverage is unsupported" >&2
exit 1
