#!/usr/bin/env python3
"""Flame graphs and CPU breakdowns from `perf script` output, with no other tool.

  perf script -i deliverer.perf.data > deliverer.script
  tools/bench/flamegraph.py fold < deliverer.script > deliverer.folded
  tools/bench/flamegraph.py svg --title "deliverer" < deliverer.folded > deliverer.svg
  tools/bench/flamegraph.py breakdown < deliverer.folded     # a Markdown table
  tools/bench/flamegraph.py timeline --bin-ms 250 --busy 130 < nats1.script   # samples over time

`fold` collapses each sample's call stack into one line, root first, frames separated by ';' and
the sample count last (the format of Brendan Gregg's stackcollapse scripts): the thread name is
the root frame, and each frame is `symbol` or, when perf could not name it, `[library]`. The
library of the sampled (leaf) frame is kept as a last pseudo-frame `{library}` so `breakdown` can
group self time by where it was spent; `svg` drops it.

`svg` lays the stacks out as a classic flame graph (root at the bottom, width =
share of samples, siblings sorted by name) in a self-contained SVG with a <title> tooltip per
frame. `breakdown` prints self time by category (kernel, libcurl, malloc/free, ...) and the
inclusive share of the project's own hot functions.

`timeline` reads `perf script` output too and prints one line per time bin: its start (seconds
into the recording) and its samples (at 499 Hz and 250 ms bins, 125 = one core busy). In bins
with at least --busy samples it adds the six frames whose share of the bin exceeds their share of
the whole recording the most ("frame bin%/all%"): what the process did when it was busiest, e.g.
a garbage collector marking during a latency stall.
"""

import argparse
import collections
import html
import re
import sys
import zlib

HEADER = re.compile(r"^(\S.*?)\s+(\d+)(?:/\d+)?\s+(?:\[\d+\]\s+)?([\d.]+):")
FRAME = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def library(path):
    if path.startswith("[kernel") or path == "[vdso]":
        return "kernel" if path.startswith("[kernel") else "vdso"
    base = path.rsplit("/", 1)[-1]
    return re.sub(r"\.so(\.[\d.]+)?$", "", base) or "unknown"


def samples(lines):
    """Each sample of `perf script` output with frames: (thread name, time, [(symbol, library)]
    leaf first)."""
    comm, time, frames = None, 0.0, []
    for line in lines:
        if not line.strip():
            if comm is not None and frames:
                yield comm, time, frames
            comm, frames = None, []
            continue
        m = HEADER.match(line)
        if m and not line[0].isspace():
            if comm is not None and frames:
                yield comm, time, frames
            comm, frames = m.group(1).replace(" ", "_").replace(";", ":"), []
            time = float(m.group(3))
            continue
        m = FRAME.match(line)
        if m and comm is not None:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)).replace(";", ":")
            frames.append((sym, library(m.group(2))))
    if comm is not None and frames:
        yield comm, time, frames


def fold(lines):
    stacks = collections.Counter()
    for comm, _, frames in samples(lines):
        # perf marks frames inlined into their caller as "(inlined)": their code is the
        # caller's library.
        leaf_lib = next((lib for _, lib in frames if lib != "inlined"), "unknown")
        names = [sym if sym != "[unknown]" else f"[{lib}]" for sym, lib in reversed(frames)]
        stacks[";".join([comm] + names + ["{" + leaf_lib + "}"])] += 1
    for stack, n in sorted(stacks.items()):
        print(f"{stack} {n}")


def read_folded(lines):
    out = []
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if stack and n.isdigit():
            out.append((stack.split(";"), int(n)))
    return out


# Self time categories, first match wins: (name, test on (leaf symbol, leaf library)).
CATEGORIES = [
    ("kernel (syscalls, scheduler, network stack)", lambda s, l: l in ("kernel", "vdso")),
    ("malloc / free", lambda s, l: l == "libc" and re.search(
        r"malloc|free|_int_|realloc|calloc|tcache|cfree|memalign|arena", s)),
    ("libc memcpy / strings", lambda s, l: l == "libc" and re.search(
        r"mem|str|__strlen|__strchr", s)),
    ("libc locks / threads (pthread, futex)", lambda s, l: l == "libc" and re.search(
        r"pthread|futex|lll_|__lll|sem_", s)),
    ("libc other", lambda s, l: l == "libc" or l.startswith("ld-linux")),
    ("libstdc++", lambda s, l: l.startswith("libstdc++")),
    ("libcurl", lambda s, l: l.startswith("libcurl")),
    ("nghttp2", lambda s, l: l.startswith("libnghttp2")),
    ("OpenSSL (libcrypto, libssl)", lambda s, l: l.startswith("libcrypto") or l.startswith("libssl")),
    ("gRPC", lambda s, l: l.startswith("libgrpc") or l.startswith("libgpr") or l.startswith("libaddress_sorting")),
    ("protobuf", lambda s, l: l.startswith("libprotobuf")),
    ("Abseil", lambda s, l: l.startswith("libabsl")),
    ("prometheus-cpp", lambda s, l: l.startswith("libprometheus")),
    ("simdjson", lambda s, l: l.startswith("libsimdjson")),
]


def breakdown(lines, top):
    stacks = read_folded(lines)
    total = sum(n for _, n in stacks)
    if total == 0:
        print("no samples")
        return
    self_cat = collections.Counter()
    inclusive = collections.Counter()
    for frames, n in stacks:
        leaf_lib = frames[-1][1:-1] if frames[-1].startswith("{") else "unknown"
        leaf = frames[-2] if len(frames) > 1 else ""
        for name, test in CATEGORIES:
            if test(leaf, leaf_lib):
                self_cat[name] += n
                break
        else:
            self_cat["the binary itself (project code, statically linked parts)"
                     if leaf_lib not in ("unknown",) and not leaf_lib.startswith("lib")
                     else f"other ({leaf_lib})"] += n
        for f in set(frames[1:-1]):
            inclusive[f] += n
    print(f"{total} samples\n")
    print("| self time in | share |\n|---|---:|")
    for name, n in self_cat.most_common():
        print(f"| {name} | {100.0 * n / total:.1f} % |")
    print("\n| function (inclusive) | share |\n|---|---:|")
    for name, n in inclusive.most_common(top):
        print(f"| `{name[:100]}` | {100.0 * n / total:.1f} % |")


def color(name):
    h = zlib.crc32(name.encode())
    if name.startswith("[") or name.startswith("{"):
        return "rgb(200,200,200)"
    if "hookrelay" in name:  # the project's own code in a different hue
        return f"rgb({60 + h % 60},{140 + h % 80},{200 + h % 50})"
    return f"rgb({205 + h % 50},{80 + (h >> 8) % 120},{40 + (h >> 16) % 40})"


def svg(lines, title, width=1200, row=16, min_px=0.3):
    root = {"n": 0, "kids": {}}
    for frames, n in read_folded(lines):
        if frames and frames[-1].startswith("{"):
            frames = frames[:-1]
        node = root
        node["n"] += n
        for f in frames:
            node = node["kids"].setdefault(f, {"n": 0, "kids": {}})
            node["n"] += n
    total = max(1, root["n"])
    rects = []
    depth_max = [0]

    def walk(node, name, x, depth):
        w = width * node["n"] / total
        if w < min_px:
            return
        depth_max[0] = max(depth_max[0], depth)
        rects.append((name, x, depth, w, node["n"]))
        cx = x
        for kid_name in sorted(node["kids"]):
            kid = node["kids"][kid_name]
            walk(kid, kid_name, cx, depth + 1)
            cx += width * kid["n"] / total

    walk(root, "all", 0.0, 0)
    height = (depth_max[0] + 1) * row + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<rect width="100%" height="100%" fill="#fafafa"/>',
           f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">'
           f'{html.escape(title)} ({total} samples)</text>']
    for name, x, depth, w, n in rects:
        y = height - (depth + 1) * row
        label = html.escape(name)
        tip = f"{label} ({n} samples, {100.0 * n / total:.2f} %)"
        out.append(f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                   f'height="{row - 1}" fill="{color(name)}" rx="2"/>')
        chars = int(w / 7)
        if chars >= 3:
            text = name if len(name) <= chars else name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.1f}" y="{y + row - 4}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    print("\n".join(out))


def timeline(lines, bin_ms, busy):
    recorded = [(t, {sym for sym, _ in frames}) for _, t, frames in samples(lines)]
    if not recorded:
        sys.exit("timeline: no samples with call stacks (perf record -g)")
    start = min(t for t, _ in recorded)
    bins = collections.defaultdict(list)
    overall = collections.Counter()
    for t, syms in recorded:
        bins[int((t - start) * 1000 / bin_ms)].append(syms)
        overall.update(syms)
    total = len(recorded)
    for b in sorted(bins):
        in_bin = bins[b]
        line = f"{b * bin_ms / 1000:7.2f} {len(in_bin):4d}"
        if busy is not None and len(in_bin) >= busy:
            here = collections.Counter()
            for syms in in_bin:
                here.update(syms)
            n = len(in_bin)
            top = sorted(here, key=lambda f: -(here[f] / n - overall[f] / total))[:6]
            line += "   " + " | ".join(
                f"{f[:60]} {100 * here[f] / n:.0f}%/{100 * overall[f] / total:.0f}%" for f in top)
        print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fold")
    s = sub.add_parser("svg")
    s.add_argument("--title", default="flame graph")
    s.add_argument("--width", type=int, default=1200)
    b = sub.add_parser("breakdown")
    b.add_argument("--top", type=int, default=25)
    t = sub.add_parser("timeline")
    t.add_argument("--bin-ms", type=int, default=100)
    t.add_argument("--busy", type=int, default=None)
    args = p.parse_args()
    if args.cmd == "fold":
        fold(sys.stdin)
    elif args.cmd == "svg":
        svg(sys.stdin, args.title, args.width)
    elif args.cmd == "timeline":
        timeline(sys.stdin, args.bin_ms, args.busy)
    else:
        breakdown(sys.stdin, args.top)


if __name__ == "__main__":
    main()
