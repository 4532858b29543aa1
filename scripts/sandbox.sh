#!/usr/bin/env bash
# Runs a command in a discovery world of its own: a network namespace with only loopback up,
# a private /run, and its own D-Bus system bus and avahi-daemon. Nothing it advertises leaves
# the namespace, and nothing else on the machine shows up in it. Needs root.
#
#   scripts/sandbox.sh swift test --skip-build
#
# Inside, MULTIPEER_SANDBOX=1 is set. Tests that restart avahi-daemon run only with
# MULTIPEER_RUN_ALONE=1 as well (scripts/run-tests.sh runs them after the rest, alone), since
# the daemon they restart is the one every other test in the sandbox uses. Everything started here is stopped on exit, also
# after a failure or an interrupt; only the processes in the namespace made here are touched.
set -euo pipefail

if [[ "${1:-}" == "--inside" ]]; then
    shift
    source "$(dirname "$(realpath "$0")")/private-daemons.sh"
    start_private_daemons
    export MULTIPEER_SANDBOX=1
    status=0
    "$@" || status=$?
    stop_private_daemons
    exit "$status"
fi

namespace="multipeer-test-$$"
cleanup() {
    # Whatever still runs in our namespace was started by this script.
    local pids
    pids=$(ip netns pids "$namespace" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill $pids 2>/dev/null || true
    ip netns del "$namespace" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$namespace"
ip -n "$namespace" link set lo up
ip netns exec "$namespace" unshare --mount --propagation private "$(realpath "$0")" --inside "$@"
