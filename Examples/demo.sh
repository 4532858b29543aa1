#!/usr/bin/env bash
# make demo: three crew stations (captain, first-officer, relief) keep one navigation log in
# sync. Each is a host of its own: a network namespace on a bridge (198.18.0.1-3), with its own
# hostname, /run, D-Bus system bus and avahi-daemon, running `navlog-sync run`. The demo adds
# entries everywhere, cuts relief off, edits on both sides of the cut, heals it, and shows that
# the three logs end identical, with the peer tables along the way.
#
# Without root (no namespaces), the three run as processes on this host, dialling each other
# on loopback, and relief is cut off by restarting it --offline.
#
# Everything it starts is stopped, and everything it makes removed, at the end, also when
# interrupted; only its own processes and namespaces are touched.
#
#   Examples/demo.sh [path/to/navlog-sync]
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(realpath "${1:-.build/release/navlog-sync}")
[[ -x $binary ]] || { echo "build first: swift build -c release --product navlog-sync" >&2; exit 2; }

names=(captain first-officer relief)
work=$(mktemp -d /tmp/navlog-demo.XXXXXX)
tag=$$
declare -A pid fd shown namespace port
bold="" plain=""
if [[ -t 1 ]]; then
    bold=$(tput bold 2>/dev/null || true)
    plain=$(tput sgr0 2>/dev/null || true)
fi

cleanup() {
    set +e
    for name in "${names[@]}"; do
        [[ -n ${fd[$name]:-} ]] && eval "exec ${fd[$name]}>&-"
    done
    for name in "${names[@]}"; do
        [[ -n ${pid[$name]:-} ]] && kill "${pid[$name]}" 2>/dev/null
        local ns=${namespace[$name]:-}
        if [[ -n $ns ]]; then
            # Whatever runs in our namespace (navlog-sync, dbus-daemon, avahi-daemon) is ours.
            local pids
            pids=$(ip netns pids "$ns" 2>/dev/null)
            [[ -n $pids ]] && kill $pids 2>/dev/null
            ip netns del "$ns" 2>/dev/null
        fi
    done
    [[ -n ${bridge:-} ]] && ip netns del "$bridge" 2>/dev/null
    wait 2>/dev/null
    [[ -n ${KEEP_DEMO:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "interrupted: cleaning up"; exit 130' INT TERM

say() { echo; echo "${bold}== $*${plain}"; }

# Prints what a host wrote since the last call, indented and labelled.
show() {
    local name=$1 file="$work/$1.out" from=$(( ${shown[$1]:-0} + 1 ))
    local total
    total=$(wc -l < "$file")
    if (( total >= from )); then
        sed -n "${from},${total}p" "$file" | sed "s/^/    [$name] /"
        shown[$name]=$total
    fi
}

# Waits until a host's output has at least COUNT lines matching PATTERN (extended regex).
wait_for() {
    local name=$1 pattern=$2 count=${3:-1} deadline=$((SECONDS + ${4:-30}))
    until (( $(count "$name" "$pattern") >= count )); do
        if (( SECONDS > deadline )); then
            echo "timed out waiting for $name to print /$pattern/ $count times; it printed:" >&2
            sed 's/^/    /' "$work/$name.out" >&2
            exit 1
        fi
        if ! kill -0 "${pid[$name]}" 2>/dev/null; then
            echo "$name stopped; it printed:" >&2
            sed 's/^/    /' "$work/$name.out" >&2
            exit 1
        fi
        sleep 0.1
    done
}

# How many lines of a host's output match PATTERN so far.
count() { grep -cE -- "$2" "$work/$1.out" || true; }

send() { echo "$2" >&"${fd[$1]}"; }

# Shows a host's peer table (RTT, jitter, loss, last seen), after a second of pings: links
# are pinged when they have carried nothing for 500 ms.
peers() {
    local before
    sleep 1
    before=$(count "$1" "^PEER")
    send "$1" peers
    wait_for "$1" "^PEER" $((before + 1))
    sleep 0.2
    show "$1"
}

# The id of the entry a host stored last for a waypoint (as `stored ID WAYPOINT` says).
entry_id() { grep -E "stored [0-9a-f]{8} $2\$" "$work/$1.out" | tail -1 | awk '{print $3}'; }

# Starts navlog-sync for a host, reading commands from a FIFO held open on fd[name].
start() {
    local name=$1
    shift
    rm -f "$work/$name.in"
    mkfifo "$work/$name.in"
    local command=("$binary" run --name "$name" --data "$work/$name.db" --psk-file "$work/group.key" "$@")
    if [[ $mode == namespaces ]]; then
        ip netns exec "${namespace[$name]}" unshare --mount --uts --propagation private \
            "$PWD/Examples/demo-host.sh" "$name" "$work/$name.in" "$work/$name.out" "${command[@]}" &
    else
        "${command[@]}" < "$work/$name.in" >> "$work/$name.out" 2>&1 &
    fi
    pid[$name]=$!
    local descriptor
    exec {descriptor}>"$work/$name.in"
    fd[$name]=$descriptor
}

# Quits hosts (all at once, so none redials another that is leaving) and waits for them.
stop() {
    local name
    for name in "$@"; do
        send "$name" quit
        eval "exec ${fd[$name]}>&-"
        fd[$name]=""
    done
    for name in "$@"; do
        wait "${pid[$name]}" 2>/dev/null || true
        pid[$name]=""
    done
}

# The hosts' logs, as `navlog-sync list --json` reads them from each database.
identical_logs() {
    local first
    first=$("$binary" list --data "$work/${names[0]}.db" --json)
    for name in "${names[@]:1}"; do
        [[ $("$binary" list --data "$work/$name.db" --json) == "$first" ]] || return 1
    done
}

started_at=$SECONDS
if [[ $(id -u) -eq 0 ]] && ip netns add "navlog-probe-$tag" 2>/dev/null; then
    ip netns del "navlog-probe-$tag"
    mode=namespaces
else
    mode=processes
fi

"$binary" keygen --out "$work/group.key" > /dev/null
touch "$work/"{captain,first-officer,relief}.out

if [[ $mode == namespaces ]]; then
    say "Three hosts in network namespaces on one bridge, each with its own avahi-daemon"
    bridge="navlog-bridge-$tag"
    ip netns add "$bridge"
    ip -n "$bridge" link add br0 type bridge
    ip -n "$bridge" link set br0 up
    for index in 0 1 2; do
        name=${names[$index]}
        namespace[$name]="navlog-$name-$tag"
        ip netns add "${namespace[$name]}"
        ip link add eth0 netns "${namespace[$name]}" type veth peer name "port$index" netns "$bridge"
        ip -n "$bridge" link set "port$index" master br0 up
        ip -n "${namespace[$name]}" addr add "198.18.0.$((index + 1))/24" dev eth0
        ip -n "${namespace[$name]}" link set eth0 up
        ip -n "${namespace[$name]}" link set lo up
        echo "    $name: 198.18.0.$((index + 1)), namespace ${namespace[$name]}"
    done
    for name in "${names[@]}"; do start "$name"; done
else
    say "Not root, so no network namespaces: three processes on this host, dialling each other on loopback"
    base=$((40000 + tag % 20000))
    port=([captain]=$base [first-officer]=$((base + 1)) [relief]=$((base + 2)))
    # Captain and first-officer name each other; relief names both (and they do not name it,
    # so nobody redials relief while it is offline).
    start captain --port "${port[captain]}" --peer "127.0.0.1:${port[first-officer]}"
    start first-officer --port "${port[first-officer]}" --peer "127.0.0.1:${port[captain]}"
    relief_peers=(--peer "127.0.0.1:${port[captain]}" --peer "127.0.0.1:${port[first-officer]}")
    start relief --port "${port[relief]}" "${relief_peers[@]}"
fi

say "Starting navlog-sync on each; they find each other and connect over TLS"
for name in "${names[@]}"; do wait_for "$name" "joined" 2; done
for name in "${names[@]}"; do show "$name"; done

say "Each station adds entries"
send captain 'add leg=1 waypoint=TESAT planned=10:05 fuel=12400 altitude=37000'
send captain 'add leg=2 waypoint=NIPAS planned=10:41 fuel=11150 altitude=37000'
send first-officer 'add leg=3 waypoint=ARNEM planned=11:12 fuel=9900 altitude=39000 remarks="step climb"'
send relief 'add leg=4 waypoint=VEPOK planned=11:50 fuel=8600 altitude=39000'
for name in "${names[@]}"; do wait_for "$name" "stored" 4; done
for name in "${names[@]}"; do show "$name"; done
"$binary" list --data "$work/captain.db" | sed 's/^/    /'

say "The captain's peer table"
peers captain

if [[ $mode == namespaces ]]; then
    say "Cutting relief off: its link to the bridge goes down"
    ip -n "$bridge" link set port2 down
    wait_for captain "relief left" 1
    wait_for first-officer "relief left" 1
    wait_for relief "left" 2
else
    say "Cutting relief off: it restarts --offline"
    stop relief
    start relief --port "${port[relief]}" --offline
    wait_for relief "listening" 2
fi
for name in "${names[@]}"; do show "$name"; done

say "Edits on both sides of the cut"
tesat=$(entry_id captain TESAT)
arnem=$(entry_id first-officer ARNEM)
send captain "edit $tesat actual=10:07 fuel=12350"
send first-officer "delete $arnem"
send relief "edit $tesat remarks=\"light chop, seat belts on\""
send relief 'add leg=5 waypoint=ELNAR planned=12:20 fuel=7300 altitude=39000'
wait_for captain "stored" 5
wait_for first-officer "deleted" 1
wait_for relief "stored" 6
for name in "${names[@]}"; do show "$name"; done
echo "    captain's log:"
"$binary" list --data "$work/captain.db" | sed 's/^/      /'
echo "    relief's log:"
"$binary" list --data "$work/relief.db" | sed 's/^/      /'

say "Healing the cut"
healed_at=$(date +%s%N)
if [[ $mode == namespaces ]]; then
    ip -n "$bridge" link set port2 up
    wait_for captain "relief joined" 2 60
    wait_for relief "joined" 4 60
else
    stop relief
    start relief --port "${port[relief]}" "${relief_peers[@]}"
    wait_for relief "joined" 4 60
fi
wait_for relief "synced with" 4 60
for name in "${names[@]}"; do show "$name"; done

say "All three logs"
deadline=$((SECONDS + 30))
until identical_logs; do
    (( SECONDS < deadline )) || { echo "the logs did not converge within 30 s" >&2; exit 1; }
    sleep 0.2
done
converged_ms=$((($(date +%s%N) - healed_at) / 1000000))
"$binary" list --data "$work/relief.db" | sed 's/^/    /'
checksum=$("$binary" list --data "$work/captain.db" --json | sha256sum | cut -c1-16)
echo "    identical on captain, first-officer and relief (sha256 of list --json: $checksum...),"
echo "    $converged_ms ms after the cut was healed (redial with backoff, TLS, digests, missing versions)."
echo "    TESAT was edited on both sides of the cut: the later edit, by the hybrid logical clock, is the entry everywhere."

say "Peer tables after healing"
peers captain
peers relief

say "Stopping"
stop "${names[@]}"
for name in "${names[@]}"; do show "$name"; done
echo
echo "Done in $((SECONDS - started_at)) s: every host converged to the same log."
