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

source scripts/two-hosts.sh
two_hosts multipeer-det

ip netns exec "${hosts[0]}" env MULTIPEER_PEER_NAMESPACE="${hosts[1]}" "$binary" "$@" --json bench-results/detection-network.json
