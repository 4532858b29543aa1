#!/usr/bin/env bash
# Checks the simulator's shrinker (make test): a world with a planted defect (--plant) fails,
# is shrunk to a smaller world that breaks the same promise, and that world's replay command,
# run as printed, fails the same way.
#
#   scripts/shrink-check.sh [SIMULATOR]   (default .build/debug/multipeer-simulator)
set -euo pipefail
cd "$(dirname "$0")/.."
simulator=${1:-.build/debug/multipeer-simulator}
seed=2  # a world of 8 hosts whose planted defect breaks 44 s in
output=$("$simulator" --seed $seed --plant --duration 60 --hosts 3-8 --fault-every 5 --shrink-minutes 3 --jobs 2 --failures-only) && {
    echo "shrink-check: the planted defect broke nothing" >&2
    exit 1
}
grep -E '^seed|^  (broken|shrunk|no smaller)' <<<"$output"
original=$(sed -n "s/^seed $seed: FAILED, \([0-9]*\) hosts.*/\1/p" <<<"$output")
smallest=$(sed -n 's/^  replay the smallest: //p' <<<"$output")
[[ -n "$smallest" ]] || { echo "shrink-check: no smaller world printed" >&2; exit 1; }
# The smallest world, replayed as printed (without its trace), breaks the planted promise alone.
replayed=$(${smallest% --trace} --shrink-minutes 0 --failures-only) && {
    echo "shrink-check: the smallest world's replay passed: $smallest" >&2
    exit 1
}
hosts=$(sed -n 's/^seed [0-9]*: FAILED, \([0-9]*\) hosts.*/\1/p' <<<"$replayed")
grep -q "broken promise: .*(--plant)" <<<"$replayed" || { echo "shrink-check: the replay broke another promise" >&2; exit 1; }
(( hosts < original )) || { echo "shrink-check: $hosts hosts, no fewer than the original's $original" >&2; exit 1; }
echo "shrink-check: $original hosts shrunk to $hosts; the smallest world's replay breaks the planted promise"
