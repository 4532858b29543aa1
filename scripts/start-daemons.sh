#!/usr/bin/env bash
# Starts the D-Bus system bus and avahi-daemon if they are not running already.
set -euo pipefail

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

if avahi-daemon --check 2>/dev/null; then
    exit 0
fi

if ! dbus-send --system --dest=org.freedesktop.DBus --type=method_call --print-reply \
        /org/freedesktop/DBus org.freedesktop.DBus.GetId >/dev/null 2>&1; then
    $sudo mkdir -p /run/dbus
    # A pid file left by a bus that is gone makes dbus-daemon refuse to start.
    if [[ -f /run/dbus/pid ]] && ! kill -0 "$(cat /run/dbus/pid)" 2>/dev/null; then
        $sudo rm -f /run/dbus/pid
    fi
    echo "Starting the D-Bus system bus"
    $sudo dbus-daemon --system --fork
fi

echo "Starting avahi-daemon"
$sudo avahi-daemon -D --no-chroot
for _ in $(seq 1 50); do
    avahi-daemon --check 2>/dev/null && exit 0
    sleep 0.1
done
echo "avahi-daemon did not come up; see 'avahi-daemon --no-chroot' run in the foreground" >&2
exit 1
