#!/usr/bin/env bash
# The anchor of one namespace host of the multi-host fault suite. Started inside the host's
# network namespace and a mount and UTS namespace of its own: gives the host its hostname and
# a private /run with its own D-Bus system bus and avahi-daemon, prints "ready PID", and sleeps.
# Everything else runs in the host through `nsenter -t PID -m -u -n`.
#
#   ip netns exec NS unshare --mount --uts --propagation private scripts/host-agent.sh NAME
set -euo pipefail
hostname "$1"
source "$(dirname "$(realpath "$0")")/private-daemons.sh"
start_private_daemons
echo "ready $$"
exec sleep infinity
