#!/usr/bin/env bash
# Builds the libFuzzer targets (Fuzz/README.md) with coverage instrumentation, AddressSanitizer
# and libFuzzer's driver into .build-fuzz, then runs each one.
#
#   scripts/fuzz.sh [SECONDS]        fuzz each target for SECONDS (default 60), starting from its
#                                    seed corpus in Fuzz/Corpus; what it learns is kept in
#                                    .build-fuzz/corpus, crashes in .build-fuzz/crashes
#   scripts/fuzz.sh --corpus-only    run each target once over its seed corpus (make test): the
#                                    normal debug build's targets, which replay what they are
#                                    given (no instrumentation: the fuzzing build's own run is
#                                    scripts/fuzz.sh 1)
#   FUZZ_TARGETS="SyncMessageFuzzer" scripts/fuzz.sh 120     only the targets named
#
# Exits non-zero on the first crash, with libFuzzer's report and the input's path.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(FrameFuzzer HelloFuzzer TXTFuzzer NavlogFuzzer PayloadFuzzer SyncVersionFuzzer SyncMessageFuzzer)
[[ -n ${FUZZ_TARGETS:-} ]] && read -r -a targets <<<"$FUZZ_TARGETS"
mode=${1:-60}

if [[ $mode == --corpus-only ]]; then
    swift build >/dev/null
    for target in "${targets[@]}"; do
        ran=$(.build/debug/"$target" "Fuzz/Corpus/$target") || {
            echo "$target crashed on its seed corpus (.build/debug/$target -v Fuzz/Corpus/$target names the input)" >&2
            exit 1
        }
        echo "$target: $ran"
    done
    exit 0
fi

swift_bin=$(dirname "$(readlink -f "$(command -v swift)")")
runtime=$(ls "$swift_bin"/../lib/clang/*/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a 2>/dev/null | head -1)
[[ -n $runtime ]] || { echo "libFuzzer (libclang_rt.fuzzer_no_main) is not in this Swift toolchain" >&2; exit 69; }
# swiftc's -sanitize=fuzzer links libFuzzer's own main, which clashes with the entry point
# SwiftPM gives executables; so: coverage and ASan here, and the driver without its main.
flags=(--scratch-path .build-fuzz
    -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table
    -Xswiftc -parse-as-library -Xswiftc -DFUZZING -Xlinker "$runtime" -Xlinker -lstdc++)
for target in "${targets[@]}"; do
    swift build "${flags[@]}" --product "$target" 2>&1 | grep -v "Cannot export local symbol" || true
    [[ -x .build-fuzz/debug/$target ]] || { echo "the fuzz build of $target failed" >&2; exit 1; }
done

summary=()
for target in "${targets[@]}"; do
    binary=.build-fuzz/debug/$target
    seeds=Fuzz/Corpus/$target
    log=.build-fuzz/$target.log
    mkdir -p ".build-fuzz/corpus/$target" .build-fuzz/crashes
    dictionary=()
    [[ -f Fuzz/Dictionaries/$target.dict ]] && dictionary=(-dict="Fuzz/Dictionaries/$target.dict")
    if ! "$binary" -max_total_time="$mode" -print_final_stats=1 -artifact_prefix=".build-fuzz/crashes/$target-" \
        "${dictionary[@]}" ".build-fuzz/corpus/$target" "$seeds" >"$log" 2>&1; then
        tail -40 "$log"
        echo "$target crashed: the input is in .build-fuzz/crashes (add it to $seeds and a regression test)" >&2
        exit 1
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    corpus=$(ls ".build-fuzz/corpus/$target" | wc -l)
    summary+=("$target: $mode s, $runs executions, corpus $corpus inputs (+ $(ls "$seeds" | wc -l) seeds), no crash")
done
printf '%s\n' "${summary[@]}"
