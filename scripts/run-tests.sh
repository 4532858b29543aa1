#!/usr/bin/env bash
# Runs the whole test suite (already built). As root, inside scripts/sandbox.sh, so discovery
# tests use an avahi-daemon of their own and advertise nothing onto the real network; then the
# multi-host fault suite (Tests/HostSuite), which makes namespace hosts of its own.
#
#   scripts/run-tests.sh [--without-hosts] [swift test options]
set -euo pipefail
cd "$(dirname "$0")/.."
hosts=1
if [[ "${1:-}" == "--without-hosts" ]]; then hosts=0; shift; fi
# Simulated worlds replay a seed exactly only where Swift's hashing is deterministic: Set and
# Dictionary orders otherwise change from run to run (DeterminismTests checks it).
export SWIFT_DETERMINISTIC_HASHING=1
# An embedded channel used from a thread other than the one that made it (a test's code after
# an await, say) is a crash, not a line in the log: SwiftNIO's strict mode.
export SWIFTNIO_STRICT=1

# Tests that disturb whatever runs beside them (a connection flood that starves the event loops,
# a flood of adverts, threads spinning flat out, a restart of the shared avahi-daemon, 64 MiB files
# hashed and written), or whose keepalive timing the rest running beside them
# confounds (LinkStatsTests: a pong later than its 1 s timeout, on a machine busy with every
# other suite, counts as a ping lost), run after the rest, each suite alone. Skipped when a --filter chose other tests.
alone=(FloodTests RogueAdvertTests DaemonRestartTests SystemBusWaitTests ThrottleTests LinkStatsTests LargeLogTests StreamCancellationTests ResourceResumeTests ResourceFailureTests NavlogAttachmentResumeTests)
run_alone() {  # COMMAND...: runs the suites in `alone`, one at a time, under COMMAND
    [[ " $* " == *" --filter "* ]] && return 0
    for suite in "${alone[@]}"; do
        # (Anchored: "ThrottleTests" alone would also pick ReportThrottleTests.)
        "$@" --filter "\.$suite/" || return
    done
}

# The cores' tests and the simulated worlds (computation only, some of it heavy: a simulated
# world runs flat out on a thread of its own) run first, on their own; beside the integration
# tests they starved those tests' readers for seconds, and keepalives and handshake deadlines
# failed. Skipped when a --filter chose other tests.
cores='^(MultipeerCoreTests|MultipeerTLSTests|MultipeerDiscoveryTests|MultipeerSessionTests|NavlogSyncTests|MultipeerSyncTests|MultipeerSimulationTests)\.'
run_suite() {  # COMMAND...: the whole suite but the `alone` ones, under COMMAND
    if [[ " $* " == *" --filter "* ]]; then "$@"; return; fi
    "$@" --filter "$cores" && "$@" --skip "$cores"
}

if [[ $(id -u) -eq 0 ]] && ip netns add "multipeer-probe-$$" 2>/dev/null; then
    ip netns del "multipeer-probe-$$"
    run_suite scripts/sandbox.sh swift test --skip-build "$@"
    run_alone scripts/sandbox.sh env MULTIPEER_RUN_ALONE=1 swift test --skip-build "$@"
    [[ $hosts -eq 1 ]] || exit 0
    echo
    echo "The multi-host fault suite (make hosts-test):"
    exec .build/debug/navlog-hosts --report bench-results/hosts
fi
echo "Discovery and navlog-sync process tests were not run: they need a network namespace of their own, which needs root (run 'sudo make test')."
[[ $hosts -eq 1 ]] && echo "The multi-host fault suite was not run: it makes network namespaces, which needs root (sudo make hosts-test)."
run_suite swift test --skip-build "$@"
run_alone env MULTIPEER_RUN_ALONE=1 swift test --skip-build "$@"
