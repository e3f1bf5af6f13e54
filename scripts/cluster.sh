#!/usr/bin/env bash
# A local attnserve cluster on loopback: N replicas sharing one redis-server (sessions under
# leases), behind the HAProxy gateway of deploy/k8s/overlays/gateway/haproxy.cfg, for a demo and
# for the tests (tests/integration/gateway_test.py, bench/gateway_failover.py).
#
#   scripts/cluster.sh start [--replicas N] [--gateways G] [--port P] [--dir DIR] [--build-dir B]
#                            [-- FLAGS...]
#       starts redis-server, N attnserve-server replicas and G haproxy gateways (default 1),
#       waits until every one answers, prints the gateways' addresses and returns (the processes
#       run on, detached). Ports: the gateway on P (default 50050), gateway j (2..G) on P+90+j,
#       replica i (1..N) on P+i with its metrics on P+100+i, Redis on P+99, HAProxy's stats on
#       P+98 (/stats, /metrics; gateway j's on P+80+j). FLAGS go to every
#       replica after the cluster's own (--session_store, --session_lease_ms=2000,
#       --checkpoint_every_appends=1, --advertise_address, ports), so they can override them.
#   scripts/cluster.sh kill I [SIGNAL]      sends SIGNAL (default KILL) to replica I
#   scripts/cluster.sh restart I            starts replica I again (after a kill)
#   scripts/cluster.sh stop                 SIGTERM to everything (the replicas drain), then waits
#   scripts/cluster.sh status               what runs, one line each
#
# State and logs live in DIR (default ${TMPDIR:-/tmp}/attnserve-cluster): pids, ports,
# haproxy.cfg, replica-I.log, haproxy.log, redis.log. Needs the build (scripts/build.sh),
# redis-server and haproxy (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

command=${1:-}
[[ -n "$command" ]] && shift
replicas=3
gateways=1
port=50050
dir=${TMPDIR:-/tmp}/attnserve-cluster
build_dir=${BUILD_DIR:-build}
index=""
signal=KILL
server_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --replicas) replicas=$2; shift 2 ;;
    --gateways) gateways=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --build-dir) build_dir=$2; shift 2 ;;
    --) shift; server_flags=("$@"); break ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *)
      if [[ -z "$index" ]]; then index=$1; else signal=$1; fi
      shift ;;
  esac
done

die() { echo "cluster: $*" >&2; exit 1; }
# Gateway j's ports (P+90+j, P+80+j) stay below the stats port and Redis (P+98, P+99).
[[ "$gateways" =~ ^[1-7]$ ]] || die "--gateways must be 1 to 7"
[[ "$build_dir" == /* ]] || build_dir="$ROOT/$build_dir"
# Whether the process of pid file $1 runs (a zombie that no init reaps does not count).
alive() {
  [[ -f "$1" ]] || return 1
  local state
  state=$(awk '{print $3}' "/proc/$(cat "$1")/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z ]]
}
# Waits until 127.0.0.1:$1 accepts connections (bash's /dev/tcp), up to $2 seconds, while the
# process of pid file $3 (if given) lives.
wait_port() {
  local deadline=$(( $(date +%s) + $2 ))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    [[ $(date +%s) -lt $deadline ]] || return 1
    [[ -z "${3:-}" ]] || alive "$3" || return 1
    sleep 0.1
  done
}

start_replica() {
  local i=$1
  local grpc_port=$(( $(cat "$dir/port") + i )) metrics_port=$(( $(cat "$dir/port") + 100 + i ))
  local -a flags=()
  [[ -f "$dir/server.flags" ]] && mapfile -t flags < "$dir/server.flags"
  setsid "$build_dir/server/attnserve-server" --host=127.0.0.1 --port="$grpc_port" \
    --metrics_port="$metrics_port" --http_port=-1 --advertise_address="127.0.0.1:$grpc_port" \
    --instance_name="replica-$i" --session_store="redis://127.0.0.1:$(( $(cat "$dir/port") + 99 ))" \
    --session_lease_ms=2000 --checkpoint_every_appends=1 ${flags[@]+"${flags[@]}"} \
    > "$dir/replica-$i.log" 2>&1 < /dev/null &
  echo $! > "$dir/replica-$i.pid"
  echo "$grpc_port" > "$dir/replica-$i.port"
  wait_port "$grpc_port" 120 "$dir/replica-$i.pid" || die "replica $i did not start: see $dir/replica-$i.log"
  wait_port "$metrics_port" 10 || die "replica $i has no metrics port: see $dir/replica-$i.log"
}

case "$command" in
  start)
    [[ -x "$build_dir/server/attnserve-server" ]] || die "no $build_dir/server/attnserve-server: run scripts/build.sh"
    command -v redis-server >/dev/null || die "redis-server is not installed (scripts/setup.sh)"
    haproxy=$(command -v haproxy || echo /usr/sbin/haproxy)
    [[ -x "$haproxy" ]] || die "haproxy is not installed (scripts/setup.sh)"
    mkdir -p "$dir"
    for pid in "$dir"/*.pid; do
      if alive "$pid"; then die "a cluster already runs in $dir: scripts/cluster.sh stop --dir $dir"; fi
    done
    rm -f "$dir"/*.pid "$dir"/*.log
    echo "$port" > "$dir/port"
    echo "$replicas" > "$dir/replicas"
    printf '%s\n' ${server_flags[@]+"${server_flags[@]}"} > "$dir/server.flags"
    redis_port=$(( port + 99 ))
    for p in $(seq "$port" $(( port + replicas ))) $(seq $(( port + 98 )) $(( port + 100 + replicas ))) \
             $(seq $(( port + 92 )) $(( port + 90 + gateways ))) $(seq $(( port + 82 )) $(( port + 80 + gateways ))); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then die "port $p is in use: choose another --port"; fi
    done
    setsid redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
      > "$dir/redis.log" 2>&1 < /dev/null &
    echo $! > "$dir/redis.pid"
    wait_port "$redis_port" 20 "$dir/redis.pid" || die "redis-server did not start: see $dir/redis.log"
    for i in $(seq 1 "$replicas"); do start_replica "$i"; done
    # The gateways' config with this cluster's ports and servers in place of Kubernetes', and
    # its maps (empty: learnt from the replicas' answers) beside it.
    servers=""
    for i in $(seq 1 "$replicas"); do
      servers+="    server replica-$i 127.0.0.1:$(( port + i )) port $(( port + 100 + i )) proto h2 check-proto h1"$'\n'
    done
    : > "$dir/holders.map"
    : > "$dir/replicas.map"
    addresses=""
    for j in $(seq 1 "$gateways"); do
      if [[ $j -eq 1 ]]; then gw_port=$port stats_port=$(( port + 98 )) name=haproxy
      else gw_port=$(( port + 90 + j )) stats_port=$(( port + 80 + j )) name=haproxy-$j; fi
      awk -v servers="$servers" '
        /# SERVERS BEGIN/ { skip = 1; if (!done++) printf "%s", servers; next }
        /# SERVERS END/ { skip = 0; next }
        !skip' deploy/k8s/overlays/gateway/haproxy.cfg |
        sed -e "s/^\( *bind \):8080/\1127.0.0.1:$gw_port/" -e "s/^\( *bind \):8404/\1127.0.0.1:$stats_port/" \
        > "$dir/$name.cfg"
      "$haproxy" -c -q -f "$dir/$name.cfg" || die "haproxy refuses $dir/$name.cfg"
      setsid "$haproxy" -f "$dir/$name.cfg" -db > "$dir/$name.log" 2>&1 < /dev/null &
      echo $! > "$dir/$name.pid"
      wait_port "$gw_port" 20 "$dir/$name.pid" || die "haproxy did not start: see $dir/$name.log"
      addresses+=" 127.0.0.1:$gw_port"
    done
    echo "cluster: gateway on$addresses; $replicas replicas on $(( port + 1 ))..$(( port + replicas ));" \
         "redis on $redis_port; haproxy stats on http://127.0.0.1:$(( port + 98 ))/stats; logs in $dir"
    ;;
  kill)
    [[ -n "$index" ]] || die "kill I [SIGNAL]: which replica"
    alive "$dir/replica-$index.pid" || die "replica $index is not running"
    kill "-$signal" "$(cat "$dir/replica-$index.pid")"
    ;;
  restart)
    [[ -n "$index" ]] || die "restart I: which replica"
    alive "$dir/replica-$index.pid" && die "replica $index is still running"
    start_replica "$index"
    ;;
  stop)
    [[ -d "$dir" ]] || exit 0
    for pid in "$dir"/replica-*.pid "$dir"/haproxy*.pid; do
      alive "$pid" && kill -TERM "$(cat "$pid")" || true
    done
    for pid in "$dir"/replica-*.pid "$dir"/haproxy*.pid; do
      for _ in $(seq 1 400); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$(cat "$pid")" || true
    done
    if alive "$dir/redis.pid"; then
      kill -TERM "$(cat "$dir/redis.pid")"
      for _ in $(seq 1 100); do alive "$dir/redis.pid" || break; sleep 0.1; done
    fi
    rm -f "$dir"/*.pid
    ;;
  status)
    for pid in "$dir"/*.pid; do
      [[ -f "$pid" ]] || continue
      name=$(basename "$pid" .pid)
      if alive "$pid"; then echo "$name: running (pid $(cat "$pid"))"; else echo "$name: stopped"; fi
    done
    ;;
  *)
    die "usage: scripts/cluster.sh start|kill|restart|stop|status [options]; --help says more" ;;
esac
