#!/usr/bin/env python3
"""A perf recording's samples over time: how busy a process was in each time bin, and in the
busiest bins the call-graph frames that stand out against the whole recording.

  tools/bench/perf_bins.py FILE.perf.data [BIN_MS [MIN_SAMPLES]]

Prints one line per bin: its start (seconds into the recording) and its sample count (at 499 Hz
and 250 ms bins, 125 samples = one core busy). For bins with at least MIN_SAMPLES samples, the
six frames whose share of the bin's samples exceeds their share of all samples the most
("frame bin%/all%"): what the process was doing when it was busiest, e.g. a garbage collector's
marking during a latency stall. Needs a recording with call graphs (perf record -g), such as
run_jetstream_bench.sh keeps with PERF=1 PERF_KEEP=1.
"""
import collections
import re
import subprocess
import sys


def samples(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "tid,time,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    result, current = [], None
    for line in out.split("\n"):
        header = re.match(r"^\s*\d+\s+([\d.]+):\s*$", line)
        if header:
            if current:
                result.append(current)
            current = (float(header.group(1)), [])
        elif line.strip() and current is not None:
            current[1].append(line.strip().split(" ", 1)[-1])  # the symbol, without the address
    if current:
        result.append(current)
    return result


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bin_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    min_samples = int(sys.argv[3]) if len(sys.argv) > 3 else None
    all_samples = samples(sys.argv[1])
    if not all_samples:
        sys.exit(f"{sys.argv[1]}: no samples")
    start = min(t for t, _ in all_samples)
    bins = collections.defaultdict(list)
    overall = collections.Counter()
    for t, stack in all_samples:
        bins[int((t - start) * 1000 / bin_ms)].append(stack)
        overall.update(set(stack))
    total = len(all_samples)
    for b in sorted(bins):
        stacks = bins[b]
        line = f"{b * bin_ms / 1000:7.2f} {len(stacks):4d}"
        if min_samples is not None and len(stacks) >= min_samples:
            here = collections.Counter()
            for stack in stacks:
                here.update(set(stack))
            n = len(stacks)
            top = sorted(here, key=lambda f: -(here[f] / n - overall[f] / total))[:6]
            line += "   " + " | ".join(
                f"{f[:60]} {100 * here[f] / n:.0f}%/{100 * overall[f] / total:.0f}%" for f in top)
        print(line)


if __name__ == "__main__":
    main()
