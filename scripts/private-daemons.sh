# Sourced by scripts that make hosts of their own (sandbox.sh, Examples/demo-host.sh): inside a
# private mount namespace, gives this host a tmpfs on /run with its own D-Bus system bus and
# avahi-daemon, and stops them again.
#
#   source scripts/private-daemons.sh; start_private_daemons; ...; stop_private_daemons

start_private_daemons() {
    mount -t tmpfs -o mode=755 tmpfs /run
    mkdir -p /run/dbus
    dbus-daemon --system --fork
    avahi-daemon -D --no-chroot
    for _ in $(seq 1 100); do
        avahi-daemon --check 2>/dev/null && return 0
        sleep 0.05
    done
    echo "$(hostname): avahi-daemon did not start" >&2
    return 1
}

stop_private_daemons() {
    avahi-daemon -k 2>/dev/null || true
    [[ -f /run/dbus/pid ]] && kill "$(cat /run/dbus/pid)" 2>/dev/null || true
}
