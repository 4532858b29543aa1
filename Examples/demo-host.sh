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
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/dbus
dbus-daemon --system --fork
avahi-daemon -D --no-chroot
for _ in $(seq 1 100); do
    avahi-daemon --check 2>/dev/null && break
    sleep 0.05
done
avahi-daemon --check || { echo "$name: avahi-daemon did not start" >> "$out"; exit 1; }
status=0
"$@" < "$fifo" >> "$out" 2>&1 || status=$?
avahi-daemon -k 2>/dev/null || true
[[ -f /run/dbus/pid ]] && kill "$(cat /run/dbus/pid)" 2>/dev/null || true
exit "$status"
