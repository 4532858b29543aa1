#!/usr/bin/env bash
# What changed in the public API since the previous release: `swift package
# diagnose-api-breaking-changes` against the newest tag before HEAD (or BASELINE, a tag or
# commit), over the library's one product. Breaks listed in docs/api-breaks.txt (the version
# under way's, each of them in CHANGELOG.md under Breaking) are allowed; any other fails.
#
#   scripts/api-check.sh [BASELINE]
#
# The tool compares the MultipeerSession module's own declarations: the types it re-exports from
# the layers below (MultipeerError, PeerIdentity, GoodbyeReason, ...) are not among them, so their
# changes are the changelog's to list by hand. It builds the baseline in a checkout of its own
# under .build (about two minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
baseline=${1:-$(git describe --tags --abbrev=0 HEAD^ 2>/dev/null || true)}
if [[ -z "$baseline" ]]; then
    echo "api-check: no release tag before HEAD in this clone (git fetch --tags), and no baseline given" >&2
    exit 2
fi
echo "The public API against $baseline ($(git rev-parse --short "$baseline^{commit}")), breaks allowed: docs/api-breaks.txt"
swift package diagnose-api-breaking-changes "$baseline" --products MultipeerSession \
    --breakage-allowlist-path docs/api-breaks.txt 2>&1 | grep -v "^\[[0-9]*/[0-9]*\]\|unhandled; explicitly declare\|/apidiff/.*\.docc$"
