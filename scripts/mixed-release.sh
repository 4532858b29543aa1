#!/usr/bin/env bash
# A peer of this tree beside a peer of a release, as on a fleet that upgrades one device at a
# time: the same program (Tests/MixedReleasePeer) built against both, over loopback (static
# peers, no DNS-SD), in the two directions the guide's "Upgrading a fleet" describes:
#   1. the release sends 300 Weather, which this tree's session (declaring nothing) never reads,
#      then a Note: the Note arrives; the first 256 Weather are held, the other 44 are refused,
#      and the release's application gets a messageRejected for each;
#   2. this tree sends 2,000 Weather and a Note to the release, which reads only Note: its hold
#      of Weather fills, and the Note waits (the release stops reading the link) until its
#      application subscribes to Weather; then all 2,000 Weather arrive, and the Note.
# Each peer checks its side and exits 1 naming what it did not see. The release is built once
# into .build/mixed-release (minutes), then reused.
#
#   scripts/mixed-release.sh [COMMIT]     (default: 7727df6, release 0.9.0)
set -euo pipefail
shopt -s inherit_errexit  # (a failed build inside $(...) stops the script)
cd "$(dirname "$0")/.."
release=${1:-7727df65143c9037ebcef51f9005b46a75880f56}
work=$PWD/.build/mixed-release

if ! git cat-file -e "$release^{commit}" 2>/dev/null; then
    echo "The release's commit $release is not in this clone (a shallow one?): git fetch --unshallow" >&2
    exit 1
fi

# The release's tree, as it was tagged (written again only when the commit changes).
if [[ "$(cat "$work/release/.commit" 2>/dev/null)" != "$release" ]]; then
    rm -rf "$work/release"
    mkdir -p "$work/release"
    git archive "$release" | tar -x -C "$work/release"
    echo "$release" > "$work/release/.commit"
fi

echo "Building the peer against this tree and against $release"
swift build --product mixed-release-peer
this=$(swift build --show-bin-path)/mixed-release-peer
package=$work/peer
mkdir -p "$package/Sources/mixed-release-peer"
cp Tests/MixedReleasePeer/main.swift "$package/Sources/mixed-release-peer/"
cat > "$package/Package.swift" <<MANIFEST
// swift-tools-version: 6.0
// Written by scripts/mixed-release.sh: the mixed-release peer against the release's tree.
import PackageDescription

let package = Package(
    name: "MixedRelease",
    dependencies: [.package(path: "$work/release")],
    targets: [
        .executableTarget(
            name: "mixed-release-peer",
            dependencies: [.product(name: "MultipeerSession", package: "release")]
        )
    ]
)
MANIFEST
swift build --package-path "$package" --product mixed-release-peer
older=$(swift build --package-path "$package" --show-bin-path)/mixed-release-peer

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

# Runs a listener and, once it listens, a dialler; both must exit 0. Prints what each saw.
#   pair LISTENER_BINARY LISTENER_NAME "STEPS" DIALLER_BINARY DIALLER_NAME "STEPS"
pair() {
    local log=$work/$2.log
    # shellcheck disable=SC2086  # (the steps are words)
    "$1" --name "$2" --port 0 $3 > "$log" 2>&1 &
    local listener=$!
    pids+=("$listener")
    local port=""
    for _ in $(seq 1 300); do
        port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log" | head -1)
        [[ -n "$port" ]] && break
        sleep 0.1
    done
    [[ -n "$port" ]] || { cat "$log"; echo "$2 never listened" >&2; return 1; }
    # shellcheck disable=SC2086
    "$4" --name "$5" --dial "127.0.0.1:$port" $6 > "$work/$5.log" 2>&1 &
    local dialler=$!
    pids+=("$dialler")
    local failed=0
    wait "$listener" || failed=1
    wait "$dialler" || failed=1
    grep -hE "^[a-z]+: (sent|[0-9]+ [A-Za-z]+ (received|rejected)|no |the hold|done)" "$log" "$work/$5.log" || true
    if ((failed)); then
        echo "--- $2"; tail -20 "$log"; echo "--- $5"; tail -20 "$work/$5.log"
        return 1
    fi
}

echo
echo "1. the release sends what this tree never reads"
pair "$this" newer "read Note joined received Note 1 left" \
    "$older" older "joined send Weather 300 send Note 1 rejected Weather 44"

echo
echo "2. this tree sends what the release never reads"
pair "$older" older "read Note joined held-full Weather nothing Note 3 read Weather received Weather 2000 received Note 1" \
    "$this" newer "joined send Weather 2000 send Note 1 left"
echo
echo "mixed-release: this tree and $release behave as Upgrading a fleet says"
