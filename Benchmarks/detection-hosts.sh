#!/usr/bin/env bash
# Runs DetectionBenchmark between two hosts made of network namespaces, A (198.18.0.1) and
# B (198.18.0.2) on a veth pair: the peer runs on B, and B's packets are dropped with iptables
# to make a black hole in the network. Needs root. Everything it starts is stopped on exit;
# only its own namespaces are touched.
#
#   Benchmarks/detection-hosts.sh [--trials N] [--baseline-trials N] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
binary="$PWD/.build/release/DetectionBenchmark"
[[ -x $binary && -x .build/release/multipeer-test-peer ]] || {
    echo "build first: swift build -c release --product DetectionBenchmark; swift build -c release --product multipeer-test-peer" >&2
    exit 2
}

tag=$$
hosts=("multipeer-det-a-$tag" "multipeer-det-b-$tag")
cleanup() {
    for host in "${hosts[@]}"; do
        local pids
        pids=$(ip netns pids "$host" 2>/dev/null || true)
        [[ -n "$pids" ]] && kill $pids 2>/dev/null || true
        ip netns del "$host" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for host in "${hosts[@]}"; do ip netns add "$host"; done
ip link add "mda$tag" netns "${hosts[0]}" type veth peer name "mdb$tag" netns "${hosts[1]}"
ip -n "${hosts[0]}" addr add 198.18.0.1/24 dev "mda$tag"
ip -n "${hosts[1]}" addr add 198.18.0.2/24 dev "mdb$tag"
for i in 0 1; do ip -n "${hosts[$i]}" link set lo up; done
ip -n "${hosts[0]}" link set "mda$tag" up
ip -n "${hosts[1]}" link set "mdb$tag" up

ip netns exec "${hosts[0]}" env MULTIPEER_PEER_NAMESPACE="${hosts[1]}" "$binary" --json bench-results/detection-network.json "$@"
