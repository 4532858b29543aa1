#!/usr/bin/env bash
# Runs DiscoveryBenchmark between two hosts made of network namespaces: A (198.18.0.1) and
# B (198.18.0.2) on a veth pair, each with its own /run, D-Bus system bus and avahi-daemon.
# The benchmark browses on A; its one-host trials advertise on A too, its two-host trials on B.
# Needs root. Everything it starts is stopped on exit; only its own namespaces are touched.
#
#   Benchmarks/discovery-hosts.sh [--trials N] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
binary="$PWD/.build/release/DiscoveryBenchmark"
[[ -x $binary ]] || { echo "build it first: swift build -c release --product DiscoveryBenchmark" >&2; exit 2; }

source scripts/two-hosts.sh
two_hosts multipeer-bench

# Each host: a private /run with its own D-Bus and avahi-daemon, held open by a sleeping
# process whose PID names the host for nsenter.
holders=()
for host in "${hosts[@]}"; do
    ip netns exec "$host" unshare --mount --propagation private bash -c \
        'mount -t tmpfs -o mode=755 tmpfs /run; mkdir -p /run/dbus; dbus-daemon --system --fork;
         avahi-daemon -D --no-chroot; exec sleep infinity' &
    holders+=($!)
done
for holder in "${holders[@]}"; do
    for _ in $(seq 1 100); do
        nsenter -t "$holder" -m -n avahi-daemon --check 2>/dev/null && break
        sleep 0.05
    done
done

nsenter -t "${holders[0]}" -m -n --wd="$PWD" env MULTIPEER_SANDBOX=1 MULTIPEER_REMOTE_HOST_PID="${holders[1]}" "$binary" "$@"
