#!/bin/bash
# An emulated cluster on one Linux machine: one network namespace per host, each joined
# by a veth pair to a bridge that lives in its own namespace, each host's link shaped
# with tc tbf (both directions). Nothing is connected to the machine's own network:
# the bridge namespace has no uplink and the hosts have no default route, so traffic
# to the 198.18.0.0/15 test range never leaves the namespaces created here.
#
#   netcluster.sh up   --name P --hosts H --link RATE [--latency MS]
#   netcluster.sh down --name P          # kills what runs inside, deletes the namespaces
#   netcluster.sh exec --name P I CMD... # run CMD on host I (1-based), hostname P-hI
#   netcluster.sh addr I                 # host I's address
#   netcluster.sh link --name P I up|down
#
# Host i is namespace P-hI with address 198.18.0.(10+i) on eth0 (so addresses sort in
# host order for up to 89 hosts). Needs root (ip netns, tc).
set -euo pipefail

die() { echo "netcluster: $*" >&2; exit 2; }
usage() { sed -n '8,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

addr() { echo "198.18.0.$((10 + $1))"; }

[ $# -ge 1 ] || usage
cmd=$1; shift
name="" hosts="" link="" latency=""
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=$2; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

check_name() {
  [ -n "$name" ] || die "--name PREFIX is required (a prefix unique to this cluster)"
  [[ $name =~ ^[a-zA-Z0-9_-]{1,24}$ ]] || die "--name: letters, digits, - and _ only, at most 24 characters"
}

members() { ip netns list | awk '{print $1}' | grep -E "^${name}-(br|h[0-9]+)$" || true; }

case $cmd in
  addr)
    [ $# -eq 1 ] && [[ $1 =~ ^[0-9]+$ ]] || usage
    addr "$1" ;;

  up)
    check_name
    [ "$(id -u)" = 0 ] || die "needs root (ip netns, tc)"
    [[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 89 ] || die "--hosts: 1..89"
    [[ $link =~ ^[0-9]+(k|m|g)?bit$ ]] || die "--link: a tc rate such as 200mbit"
    [ -z "$latency" ] || [[ $latency =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--latency: milliseconds"
    [ -z "$(members)" ] || die "namespaces named ${name}-* already exist: pick another --name or run down"
    trap 'echo "netcluster: setup failed, removing ${name}-*" >&2; "$0" down --name "$name" >/dev/null 2>&1 || true' ERR
    br="${name}-br"
    ip netns add "$br"
    ip -n "$br" link set lo up
    ip -n "$br" link add br0 type bridge
    ip -n "$br" link set br0 up
    for i in $(seq 1 "$hosts"); do
      h="${name}-h$i"
      ip netns add "$h"
      ip -n "$h" link set lo up
      # Created inside the bridge namespace, so names never meet other clusters' in the root namespace.
      ip -n "$br" link add "h$i" type veth peer name eth0 netns "$h"
      ip -n "$br" link set "h$i" master br0 up
      ip -n "$h" addr add "$(addr "$i")/24" dev eth0
      ip -n "$h" link set eth0 up
      for side in "-n $h eth0" "-n $br h$i"; do
        # shellcheck disable=SC2086
        set -- $side
        if [ -n "$latency" ]; then
          # tbf's own 'latency' is the longest a packet may queue, not a propagation
          # delay; an added delay needs netem, which some kernels lack.
          if ! tc "$1" "$2" qdisc add dev "$3" root handle 1: netem delay "${latency}ms" 2>/dev/null; then
            trap - ERR
            "$0" down --name "$name" >/dev/null 2>&1 || true
            die "--latency needs the netem qdisc, which this kernel does not have (tbf shapes rate only; its 'latency' is a queue limit, not a delay)"
          fi
          tc "$1" "$2" qdisc add dev "$3" parent 1: handle 2: tbf rate "$link" burst 64kb latency 50ms
        else
          tc "$1" "$2" qdisc add dev "$3" root tbf rate "$link" burst 64kb latency 50ms
        fi
      done
    done
    trap - ERR
    echo "netcluster: $hosts host(s) ${name}-h1..h$hosts at $(addr 1)..$(addr "$hosts"), links $link${latency:+, +${latency} ms}" >&2 ;;

  down)
    check_name
    for ns in $(members); do
      # Only processes inside this cluster's own namespaces.
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
    done
    for ns in $(members); do ip netns del "$ns" 2>/dev/null || true; done
    left=$(members)
    [ -z "$left" ] || die "could not delete: $left" ;;

  exec)
    check_name
    [ $# -ge 2 ] && [[ $1 =~ ^[0-9]+$ ]] || usage
    i=$1; shift
    ns="${name}-h$i"
    ip netns list | awk '{print $1}' | grep -qx "$ns" || die "no host $ns (run up first)"
    # Own UTS namespace too, so each host has its own hostname, as real hosts do.
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@" ;;

  link)
    check_name
    [ $# -eq 2 ] && [[ $1 =~ ^[0-9]+$ ]] && [[ $2 =~ ^(up|down)$ ]] || usage
    ip -n "${name}-br" link set "h$1" "$2" ;;

  *) usage ;;
esac
