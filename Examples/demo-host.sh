#!/usr/bin/env bash
# One host of the demo, run by Examples/demo.sh inside the host's network namespace and a
# mount and UTS namespace of its own: gives the host its hostname, a private /run with its own
# D-Bus system bus and avahi-daemon, then runs the command with standard input from FIFO and
# output appended to OUT.
#
#   demo-host.sh NAME FIFO OUT COMMAND...
set -euo pipefail
name=$1 fifo=$2 out=$3
shift 3
hostname "$name"
source "$(dirname "$(realpath "$0")")/../scripts/private-daemons.sh"
start_private_daemons 2>> "$out"
status=0
"$@" < "$fifo" >> "$out" 2>&1 || status=$?
stop_private_daemons
exit "$status"
