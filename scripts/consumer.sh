#!/usr/bin/env bash
# Builds and tests Examples/Consumer, a package that depends on MultipeerSession as an
# application does (by path; `import MultipeerSession`, `import MultipeerSync` for the store, and
# `import MultipeerSessionTesting` in its tests):
#   1. every ```swift block of README.md, of the DocC catalog and of the library's doc comments
#      is written into Examples/Consumer/Sources/Samples/Samples.swift, each as the body of a
#      function of its own, and compiled;
#   2. the build must print no warning (a user sees every one of ours);
#   3. the DocC catalog is converted against the library's public symbols, warnings as errors;
#   4. its tests run the public API between sessions in one process (DurabilityTests, which
#      kills a crew-checklist process, and ExplorationTests, simulated worlds flat out, alone
#      after the others).
#
#   scripts/consumer.sh [swift test options]
set -euo pipefail
cd "$(dirname "$0")/.."
consumer=Examples/Consumer
samples=$consumer/Sources/Samples/Samples.swift

extract() {  # FILE: prints each ```swift block of FILE (markdown, or /// comments) as a function
    awk -v file="$1" '
        { line = $0 }
        file ~ /\.swift$/ { if (line !~ /^[ \t]*\/\/\/ ?/) { inside = 0; next } sub(/^[ \t]*\/\/\/ ?/, "", line) }
        inside && line ~ /^```/ { print "}\n"; inside = 0; next }
        inside && line ~ /^import / { next }  # the file imports MultipeerSession and its testing product
        inside { print "    " line; next }
        line ~ /^```swift[ \t]*$/ {
            name = file; gsub(/[^A-Za-z0-9]/, "_", name)
            printf "// %s:%d\nfunc sample_%s_%d() async throws {\n", file, NR, name, NR
            inside = 1
        }
    ' "$1"
}

{
    echo "// Written by scripts/consumer.sh from the documentation; do not edit."
    echo "import Foundation  // (for samples of tests: FileManager)"
    echo "import Instrumentation  // (for samples of tracing: ServiceContext)"
    echo "import MultipeerSession"
    echo "import MultipeerSessionTesting"
    echo "import MultipeerSync"
    echo "import Synchronization  // (for samples that share state between tasks: Mutex)"
    echo
    for file in README.md Sources/MultipeerSession/MultipeerSession.docc/*.md Sources/MultipeerSession/*.swift \
        Sources/MultipeerSessionTesting/*.swift Sources/MultipeerSync/MultipeerSync.docc/*.md \
        Sources/MultipeerSync/*.swift Sources/MultipeerSync/*/*.swift; do
        extract "$file"
    done
} > "$samples"
echo "$(grep -c '^func sample_' "$samples") documentation samples to compile in $samples"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
swift build --package-path "$consumer" --build-tests 2>&1 | tee "$log"
# swift-distributed-tracing 1.7.3's own manifest leaves a file of its sources unhandled: SwiftPM
# says so to every package that depends on it, about that package, not ours.
if grep "warning:" "$log" | grep -v "^warning: 'swift-distributed-tracing': found 1 file(s) which are unhandled" | grep -q .; then
    echo "The consumer's build printed warnings (above); a user of the package would see them." >&2
    exit 1
fi
# The DocC catalog against the library's symbols, as the consumer's build made them: every
# ``link`` must resolve and every parameter be documented (warnings are errors).
build=$(swift build --package-path "$consumer" --show-bin-path)
symbols=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$symbols"' EXIT
module_maps=()
while IFS= read -r map; do module_maps+=(-Xcc "-fmodule-map-file=$map"); done < <(
    find "$build" -maxdepth 2 -name module.modulemap; find "$consumer/.build/checkouts" -path "*/Sources/*" -name module.modulemap)
for module in MultipeerSession MultipeerSync; do
    mkdir -p "$symbols/$module"
    swift-symbolgraph-extract -module-name "$module" -target "$(uname -m)-unknown-linux-gnu" -minimum-access-level public \
        -I "$build/Modules" -I Sources/CGnuTLS -I Sources/CAvahi -I Sources/CZlib "${module_maps[@]}" -output-dir "$symbols/$module"
    docc convert "Sources/$module/$module.docc" --additional-symbol-graph-dir "$symbols/$module" \
        --output-path "$symbols/$module.archive" --warnings-as-errors \
        --fallback-display-name "$module" --fallback-bundle-identifier "$module"
    echo "DocC ($module): every link of the catalog and the doc comments resolves"
done

# A simulated world replays its seed only where Swift's hashing is deterministic (the testing
# article says so), as an application's test process sets it.
export SWIFT_DETERMINISTIC_HASHING=1
if [[ $# -gt 0 ]]; then
    swift test --package-path "$consumer" --skip-build "$@"
else
    # DurabilityTests and ExplorationTests alone, after the rest: the store takes 10,000
    # versions on every core, and the explorer runs simulated worlds flat out two at a time,
    # which would starve the timing of the session's tests running beside them.
    swift test --package-path "$consumer" --skip-build --skip DurabilityTests --skip ExplorationTests
    swift test --package-path "$consumer" --skip-build --filter DurabilityTests
    swift test --package-path "$consumer" --skip-build --filter ExplorationTests
fi
