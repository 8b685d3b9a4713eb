#!/usr/bin/env bash
# Runs hookrelay locally on the JetStream engine (issue 12, a preview): a 3-node NATS JetStream
# cluster on loopback, two collectors on it (--store=jetstream --nats_replicas=3) with the sample
# config (deploy/local/config.yaml), one deliverer connected to both, and the demo receiver that
# prints each webhook and whether its X-Signature verified. The first collector has the ports of
# tools/run.sh, so the README's examples work unchanged.
# Ctrl-C (SIGINT), SIGTERM or SIGHUP stops everything in order: the deliverer (it reports what it
# holds), the collectors, the receiver, then the NATS servers.
#
# Environment (defaults):
#   collector 1: HTTP_PORT (8080), GRPC_PORT (50051), METRICS_PORT (9464), ADMIN_PORT (8081)
#   collector 2: HTTP_PORT_2 (8090), GRPC_PORT_2 (50052), METRICS_PORT_2 (9466), ADMIN_PORT_2 (8091)
#   DELIVERER_METRICS_PORT (9465); RECEIVER_PORT (9000: the sample config's URL; another port
#   runs on a copy of the config pointing there)
#   NATS_PORTS ("4222 4223 4224"), NATS_ROUTE_PORTS ("6222 6223 6224"),
#   NATS_MONITOR_PORTS ("8222 8223 8224"): client, cluster-route and monitoring ports of n1 n2 n3
#   DATA_DIR (./data-jetstream): the servers' configs and JetStream stores (n1/ n2/ n3/), kept
#   between runs, and every log (logs/)
#   HOOKRELAY_BIN_DIR: prebuilt binaries (a bazel-bin); when set, no bootstrap and no build
#   HOOKRELAY_NATS_SERVER: the nats-server binary (default: the one tools/bootstrap.sh builds)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${HOOKRELAY_BIN_DIR:-}" ]; then
  bin=$HOOKRELAY_BIN_DIR
else
  tools/bootstrap.sh
  bazel build -c opt //collector:collector //deliverer:deliverer //tools/receiver:demo_receiver \
    //tools/hookrelayctl:hookrelayctl
  bin=$(bazel info -c opt bazel-bin 2>/dev/null)
fi
nats_server=${HOOKRELAY_NATS_SERVER:-$HOME/.cache/hookrelay-nats/v2.14.9/nats-server}
if [ ! -x "$nats_server" ]; then
  echo "run-jetstream: no nats-server at $nats_server: run tools/bootstrap.sh" >&2
  exit 1
fi

http_port=${HTTP_PORT:-8080}
grpc_port=${GRPC_PORT:-50051}
metrics_port=${METRICS_PORT:-9464}
admin_port=${ADMIN_PORT:-8081}
http_port_2=${HTTP_PORT_2:-8090}
grpc_port_2=${GRPC_PORT_2:-50052}
metrics_port_2=${METRICS_PORT_2:-9466}
admin_port_2=${ADMIN_PORT_2:-8091}
deliverer_metrics_port=${DELIVERER_METRICS_PORT:-9465}
receiver_port=${RECEIVER_PORT:-9000}
read -r -a nats_ports <<<"${NATS_PORTS:-4222 4223 4224}"
read -r -a route_ports <<<"${NATS_ROUTE_PORTS:-6222 6223 6224}"
read -r -a monitor_ports <<<"${NATS_MONITOR_PORTS:-8222 8223 8224}"
if [ "${#nats_ports[@]}" -ne 3 ] || [ "${#route_ports[@]}" -ne 3 ] || [ "${#monitor_ports[@]}" -ne 3 ]; then
  echo "run-jetstream: NATS_PORTS, NATS_ROUTE_PORTS and NATS_MONITOR_PORTS take three ports each" >&2
  exit 2
fi
data_dir=${DATA_DIR:-./data-jetstream}
mkdir -p "$data_dir/logs"
data_dir=$(cd "$data_dir" && pwd)
logs=$data_dir/logs

config=deploy/local/config.yaml
if [ "$receiver_port" != 9000 ]; then
  config=$data_dir/config.yaml
  sed "s#http://127.0.0.1:9000/#http://127.0.0.1:${receiver_port}/#" deploy/local/config.yaml >"$config"
fi

# Something already listening (another run?) would answer the readiness checks in our place.
for port in "${nats_ports[@]}" "${route_ports[@]}" "${monitor_ports[@]}" "$receiver_port" \
            "$http_port" "$grpc_port" "$metrics_port" "$admin_port" "$http_port_2" "$grpc_port_2" \
            "$metrics_port_2" "$admin_port_2" "$deliverer_metrics_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "run-jetstream: 127.0.0.1:$port is in use (another run?); see the ports at the top of $0" >&2
    exit 1
  fi
done

pids=()
names=()
interrupted=""
# running PID: the process has not exited (an exited child stays a zombie, for which kill -0
# succeeds, until `wait` reaps it). /proc/PID/stat: "pid (comm) state ...".
running() {
  read -r proc_stat 2>/dev/null <"/proc/$1/stat" || return 1
  proc_stat=${proc_stat##*) }
  [ "${proc_stat:0:1}" != Z ]
}
# The EXIT trap: stops what was started, in order.
stop() {
  set +e
  trap '' INT TERM HUP  # a second Ctrl-C does not cut the stop short
  # Newest first: the deliverer, the collectors, the receiver, then the NATS servers.
  for (( stop_i=${#pids[@]}-1; stop_i>=0; stop_i-- )); do
    stop_pid=${pids[stop_i]}
    stop_name=${names[stop_i]}
    stop_until=$((SECONDS + 10))
    [ "$stop_name" = deliverer ] && stop_until=$((SECONDS + 20))  # its --drain_timeout is 15 s
    running "$stop_pid" && echo "stopping ${stop_name}"
    kill -TERM "$stop_pid" 2>/dev/null
    while running "$stop_pid" && [ "$SECONDS" -lt "$stop_until" ]; do sleep 0.1; done
    if running "$stop_pid"; then
      echo "run-jetstream: ${stop_name} did not stop; killing it" >&2
      kill -KILL "$stop_pid" 2>/dev/null
    fi
    wait "$stop_pid" 2>/dev/null
  done
  echo "stopped"
  # Stopped on request (a Ctrl-C may also have cut short whatever command was running): 0.
  [ -z "$interrupted" ] || exit 0
}
trap stop EXIT
# Ctrl-C, SIGTERM, SIGHUP: noted here, acted on (exit, then the EXIT trap) at the next check. The
# processes started below are each in a session of their own (setsid), so the terminal's Ctrl-C
# reaches this script only, never them out of order.
trap 'interrupted=1' INT TERM HUP
exit_if_interrupted() { [ -z "$interrupted" ] || exit 0; }

# start NAME LOG COMMAND...: runs COMMAND in the background, output to LOG ("-": the terminal).
start() {
  local name=$1 log=$2
  shift 2
  if [ "$log" = - ]; then setsid "$@" </dev/null & else setsid "$@" </dev/null >"$log" 2>&1 & fi
  pids+=($!)
  names+=("$name")
}

# fail MESSAGE LOG: says what did not start, with the end of its log; the EXIT trap stops the rest.
fail() {
  echo "run-jetstream: $1" >&2
  [ -n "${2:-}" ] && [ -f "$2" ] && tail -20 "$2" >&2
  exit 1
}

# wait_for NAME LOG SECONDS COMMAND...: until COMMAND succeeds, while process NAME still runs.
wait_for() {
  local name=$1 log=$2 limit=$3 deadline=$((SECONDS + $3)) pid=${pids[-1]} i
  shift 3
  for i in "${!names[@]}"; do [ "${names[i]}" = "$name" ] && pid=${pids[i]}; done
  until "$@" >/dev/null 2>&1; do
    exit_if_interrupted
    running "$pid" || fail "${name} exited" "$log"
    [ "$SECONDS" -lt "$deadline" ] || fail "${name} not ready after ${limit} s" "$log"
    sleep 0.1
  done
}

# --- the NATS cluster: n1 n2 n3, JetStream, full mesh of routes (as tests/nats_cluster.cc) ---
nats_urls=()
for n in 0 1 2; do
  name=n$((n + 1))
  routes=()
  for m in 0 1 2; do
    [ "$m" = "$n" ] || routes+=("nats-route://127.0.0.1:${route_ports[m]}")
  done
  mkdir -p "$data_dir/$name"
  cat >"$data_dir/$name.conf" <<CONF
# Generated by tools/run-jetstream.sh on every start.
server_name: $name
listen: 127.0.0.1:${nats_ports[n]}
http: 127.0.0.1:${monitor_ports[n]}
jetstream {
  store_dir: "$data_dir/$name"
  max_memory_store: 64MB
  max_file_store: 1GB
}
cluster {
  name: hookrelay-local
  listen: 127.0.0.1:${route_ports[n]}
  routes: [$(IFS=,; echo "${routes[*]}")]
}
CONF
  start "nats-server $name" "$logs/nats-$name.log" "$nats_server" -c "$data_dir/$name.conf"
  nats_urls+=("nats://127.0.0.1:${nats_ports[n]}")
done
nats_url=$(IFS=,; echo "${nats_urls[*]}")
# /healthz without options: JetStream on, a meta leader elected, this node's streams current.
for n in 0 1 2; do
  wait_for "nats-server n$((n + 1))" "$logs/nats-n$((n + 1)).log" 60 \
    curl -fsS -m 2 "http://127.0.0.1:${monitor_ports[n]}/healthz"
done

# --- the demo receiver, two collectors on the cluster, one deliverer on both ---
start receiver - "$bin/tools/receiver/demo_receiver" --address="127.0.0.1:${receiver_port}" --secret=s3cr3t

start collector-1 "$logs/collector-1.log" "$bin/collector/collector" \
  --config="$config" \
  --store=jetstream --nats_url="$nats_url" --nats_replicas=3 \
  --http_address="127.0.0.1:${http_port}" \
  --grpc_address="127.0.0.1:${grpc_port}" \
  --metrics_address="127.0.0.1:${metrics_port}" \
  --admin_http_address="127.0.0.1:${admin_port}"
wait_for collector-1 "$logs/collector-1.log" 60 curl -fsS -m 2 "http://127.0.0.1:${http_port}/healthz"

# The second one starts once the first has made the streams and buckets.
start collector-2 "$logs/collector-2.log" "$bin/collector/collector" \
  --config="$config" \
  --store=jetstream --nats_url="$nats_url" --nats_replicas=3 \
  --http_address="127.0.0.1:${http_port_2}" \
  --grpc_address="127.0.0.1:${grpc_port_2}" \
  --metrics_address="127.0.0.1:${metrics_port_2}" \
  --admin_http_address="127.0.0.1:${admin_port_2}"
wait_for collector-2 "$logs/collector-2.log" 60 curl -fsS -m 2 "http://127.0.0.1:${http_port_2}/healthz"

# The demo receiver is on loopback, which a production deliverer refuses.
start deliverer "$logs/deliverer.log" "$bin/deliverer/deliverer" \
  --collector="127.0.0.1:${grpc_port},127.0.0.1:${grpc_port_2}" \
  --metrics_address="127.0.0.1:${deliverer_metrics_port}" \
  --allow_private_networks
wait_for deliverer "$logs/deliverer.log" 30 \
  sh -c "curl -fsS -m 2 http://127.0.0.1:${deliverer_metrics_port}/metrics |
         grep -q '^hookrelay_deliverer_collectors_connected 2'"

exit_if_interrupted
ctl="bazel-bin/tools/hookrelayctl/hookrelayctl"
[ "$admin_port" = 8081 ] || ctl="HOOKRELAY_ADMIN_URL=http://127.0.0.1:${admin_port} $ctl"
cat <<MSG

hookrelay is running on JetStream:
  NATS cluster:  n1 n2 n3 at ${nats_url} (R3; monitoring on ${monitor_ports[*]})
  collector 1:   HTTP ${http_port}, gRPC ${grpc_port}, metrics ${metrics_port}, admin/console ${admin_port}
  collector 2:   HTTP ${http_port_2}, gRPC ${grpc_port_2}, metrics ${metrics_port_2}, admin/console ${admin_port_2}
  deliverer:     both collectors, metrics ${deliverer_metrics_port}
  demo receiver: http://127.0.0.1:${receiver_port}/hooks (its lines appear below)
  data and logs: ${data_dir} (stores n1/ n2/ n3/, kept between runs; logs/)
Send a first event to either collector; the receiver prints it with "X-Signature: verified":

  curl -u wk_live_123: -H 'Content-Type: application/json' \\
    -d '{"batch":[{"type":"track","userId":"u1","event":"Signed Up","properties":{"plan":"pro"}}]}' \\
    http://127.0.0.1:${http_port}/v1/batch

Console:       http://127.0.0.1:${admin_port}/ (either collector; the run-time config is shared in the KV bucket hr_config)
Set up more:   $ctl destinations list   (README "Set up at run time")
Metrics:       curl -s http://127.0.0.1:${metrics_port}/metrics http://127.0.0.1:${deliverer_metrics_port}/metrics | grep hookrelay_
Stop with Ctrl-C.
MSG
# Until a signal (Ctrl-C) or one of the processes exits. `wait` on a short sleep returns at once
# when a trapped signal arrives (a signal just before it waits at most the sleep).
sleeper=""
while [ -z "$interrupted" ]; do
  for i in "${!pids[@]}"; do
    if ! running "${pids[i]}"; then
      wait "${pids[i]}" && code=0 || code=$?
      echo "run-jetstream: ${names[i]} exited (status ${code}); stopping the rest" >&2
      exit 1
    fi
  done
  sleep 0.5 &
  sleeper=$!
  wait "$sleeper" || true
done
[ -z "$sleeper" ] || kill "$sleeper" 2>/dev/null || true
exit 0
