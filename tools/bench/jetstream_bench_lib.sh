# Helpers shared by the JetStream bench scripts (run_jetstream_bench.sh, run_jetstream_sizing.sh),
# sourced by them: durations, processes (the caller's PIDS array), CPU snapshots, waits for log
# lines, free ports, a metric from /metrics. Not a script of its own.

seconds() {  # "15s" / "1m" / "500ms" -> seconds (float)
  python3 -c 'import re,sys
m=re.fullmatch(r"([0-9.]+)(ms|s|m)?",sys.argv[1]); print(float(m.group(1))*{"ms":0.001,"s":1,"m":60}[m.group(2) or "s"])' "$1"
}

stop() {
  local pid=$1
  [[ -n "$pid" ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "   pid $pid did not stop within 15 s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
}

forget() {  # forget PID...: no longer in PIDS
  local p keep=() q
  for p in "${PIDS[@]}"; do
    for q in "$@"; do [[ "$p" == "$q" ]] && continue 2; done
    keep+=("$p")
  done
  PIDS=("${keep[@]}")
}

cpu_snap() {
  local line g p sum t
  line="$(date +%s.%N) $(awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat)"
  for g in "$@"; do
    sum=0
    for p in ${g//,/ }; do
      t=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null || echo 0)
      sum=$(( sum + t ))
    done
    line+=" $sum"
  done
  echo "$line"
}

wait_for_line() {
  local file=$1 pattern=$2 pid=$3 limit=${4:-10}
  for _ in $(seq 1 $(( limit * 10 ))); do
    if grep -m1 -- "$pattern" "$file" 2>/dev/null; then return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "process $pid exited before logging $pattern:" >&2; tail -20 "$file" >&2; return 1
    fi
    sleep 0.1
  done
  echo "no $pattern within $limit s in $file" >&2; tail -20 "$file" >&2; return 1
}

free_ports() {
  python3 -c 'import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

metric() {
  local port=$1; shift
  curl -s --max-time 5 "http://127.0.0.1:$port/metrics" 2>/dev/null |
    awk -v prefixes="$*" 'BEGIN { n = split(prefixes, p, " ") }
      $0 !~ /^#/ { for (i = 1; i <= n; i++) if (index($1, p[i]) == 1) { s += $NF; m++ } }
      END { if (m) printf "%.0f\n", s; else print "NA" }'
}
