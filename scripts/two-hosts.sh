# Sourced by the benchmarks' host scripts: makes two hosts out of network namespaces, A
# (198.18.0.1) and B (198.18.0.2), joined by a veth pair, and removes them on exit, killing
# whatever still runs in them (all of it started by the calling script).
#
#   source scripts/two-hosts.sh; two_hosts multipeer-bench     # sets hosts=(A B)

two_hosts() {
    local prefix=$1 tag=$$
    hosts=("$prefix-a-$tag" "$prefix-b-$tag")
    trap _two_hosts_cleanup EXIT
    trap 'exit 130' INT TERM
    for host in "${hosts[@]}"; do ip netns add "$host"; done
    ip link add "mpa$tag" netns "${hosts[0]}" type veth peer name "mpb$tag" netns "${hosts[1]}"
    ip -n "${hosts[0]}" addr add 198.18.0.1/24 dev "mpa$tag"
    ip -n "${hosts[1]}" addr add 198.18.0.2/24 dev "mpb$tag"
    for host in "${hosts[@]}"; do ip -n "$host" link set lo up; done
    ip -n "${hosts[0]}" link set "mpa$tag" up
    ip -n "${hosts[1]}" link set "mpb$tag" up
}

_two_hosts_cleanup() {
    for host in "${hosts[@]}"; do
        local pids
        pids=$(ip netns pids "$host" 2>/dev/null || true)
        [[ -n "$pids" ]] && kill $pids 2>/dev/null || true
        ip netns del "$host" 2>/dev/null || true
    done
}
