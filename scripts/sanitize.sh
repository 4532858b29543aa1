#!/usr/bin/env bash
# The whole `swift test` suite under ThreadSanitizer, then under AddressSanitizer (with
# LeakSanitizer), each from a build of its own (.build-tsan, .build-asan). The processes the
# tests start (navlog-sync, multipeer-test-peer) come from the same build, so they run under
# the sanitizer too, and so does every call into GnuTLS and Avahi through the C shims.
#
#   scripts/sanitize.sh [thread|address ...]      (default: both)
#
# Every report, from the test process or a child, is written to
# bench-results/sanitize/<sanitizer>/report.<pid>; the run fails if there is one, or if a test
# fails. Code under a sanitizer runs several times slower, so MULTIPEER_TEST_TIME_SCALE
# stretches the tests' keepalives, handshake timeouts and deadlines
# (Tests/MultipeerTestSupport/TestTime.swift). The multi-host suite is not run here.
#
# Swift's crash handler is off (SWIFT_BACKTRACE=enable=no): under AddressSanitizer it trips the
# sanitizer itself and swift-backtrace hangs, so a trap would stop the run for good instead of
# printing its message. Each sanitizer's run is bounded too (SANITIZE_MINUTES, default 40): a
# run that takes longer is stopped and counted as failed.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -gt 0 ]] || set -- thread address

failed=()
for sanitizer in "$@"; do
    case $sanitizer in
        thread) scratch=.build-tsan scale=6 ;;
        address) scratch=.build-asan scale=4 ;;
        *) echo "unknown sanitizer '$sanitizer' (thread or address)" >&2; exit 64 ;;
    esac
    reports=$PWD/bench-results/sanitize/$sanitizer
    rm -rf "$reports" && mkdir -p "$reports"
    echo "== $sanitizer: building into $scratch"
    swift build --build-tests --sanitize="$sanitizer" --scratch-path "$scratch"
    echo "== $sanitizer: running the suite (time scale $scale)"
    export MULTIPEER_TEST_TIME_SCALE=$scale
    export TSAN_OPTIONS="log_path=$reports/report second_deadlock_stack=1"
    export ASAN_OPTIONS="log_path=$reports/report detect_leaks=1 strict_string_checks=1 detect_stack_use_after_return=1"
    export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt print_suppressions=0"
    export SWIFT_BACKTRACE=enable=no
    status=0
    timeout --signal=INT --kill-after=60 "${SANITIZE_MINUTES:-40}m" \
        scripts/run-tests.sh --without-hosts --sanitize="$sanitizer" --scratch-path "$scratch" || status=$?
    [[ $status -ne 124 ]] || echo "$sanitizer: the run took more than ${SANITIZE_MINUTES:-40} minutes and was stopped" >&2
    found=$(find "$reports" -type f | wc -l)
    if [[ $found -gt 0 ]]; then
        cat "$reports"/*
        echo "$sanitizer: $found report(s) in $reports" >&2
        failed+=("$sanitizer: $found report(s)")
    elif [[ $status -ne 0 ]]; then
        failed+=("$sanitizer: tests failed (status $status)")
    else
        echo "== $sanitizer: every test passed, no reports"
    fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
    printf '%s\n' "${failed[@]}" >&2
    exit 1
fi
