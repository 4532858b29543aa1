#!/usr/bin/env bash
# `make bench`: runs every benchmark (release builds made by the Makefile), one after another
# so that none disturbs another's timing, then BenchReport, which writes
# bench-results/report.md, report.json and charts/. The namespace benchmarks (detection in the
# network, discovery, scale) need root; without it they are left out and the report says so.
# Results of an earlier run are removed first: the report shows this run only.
#
#   Benchmarks/run-all.sh [--quick] [--only STEP,...]
#       --quick: fewer trials and short holds, a few minutes; for trying the tooling, not for figures
#       --only: these steps alone (the names `make bench` prints after ==), e.g.
#               make bench BENCH_ARGS="--only detection,lossy-link"
set -euo pipefail
cd "$(dirname "$0")/.."
results=bench-results
mkdir -p "$results"
rm -rf "$results"/{link,session,session-locks,session-mixed,navlog,sync,store,store-memory,store-partition,anchors,detection,detection-network,delivery,stopped-reader,discovery,mesh,durations,report}.json "$results"/report.md "$results"/charts "$results"/hosts-loss

quick=0
only=""
while (($#)); do
    case $1 in
        --quick) quick=1 ;;
        --only) only=",$2,"; shift ;;
        *) echo "usage: Benchmarks/run-all.sh [--quick] [--only STEP,...]" >&2; exit 64 ;;
    esac
    shift
done
trials() { if ((quick)); then echo "$1"; else echo "$2"; fi; }

durations=()
step() {
    local name=$1
    shift
    [[ -z $only || $only == *",$name,"* ]] || return 0
    echo "== $name"
    local start=$SECONDS
    "$@"
    durations+=("\"$name\": $((SECONDS - start))")
}

step link .build/release/LinkBenchmark $( ((quick)) && echo --quick )
step session .build/release/SessionBenchmark --seconds "$(trials 1 3)"
# The locks a message takes, counted by Benchmarks/LockCounter (preloaded in this run alone).
# Files through the API: 64 MiB and 1 GiB (64 MiB alone in a quick run).
step session-resources .build/release/SessionBenchmark --resources --seconds "$(trials 1 3)" --resource-sizes "$(trials 67108864 67108864,1073741824)"
# A byte stream through the API: 256 MiB one way (64 MiB in a quick run).
step session-streams .build/release/SessionBenchmark --streams --seconds "$(trials 1 3)" --stream-bytes "$(trials 67108864 268435456)"
# A 1 KiB message's latency while a 1 GiB file and a 256 MiB stream share its link (64 MiB each in a quick run).
step session-mixed .build/release/SessionBenchmark --mixed --seconds "$(trials 2 5)" --file-bytes "$(trials 67108864 1073741824)" --stream-bytes "$(trials 67108864 268435456)"
step session-locks env LD_PRELOAD="$PWD/.build/release/liblockcounter.so" .build/release/SessionBenchmark --locks --seconds "$(trials 1 3)"
step detection .build/release/DetectionBenchmark --trials "$(trials 5 20)"
step delivery .build/release/DeliveryBenchmark --seconds "$(trials 3 10)"
step navlog .build/release/NavlogBenchmark --entries "$(trials 1000 1000,10000,100000)"
# The replicated store's reconciliation core (docs/SYNC.md 4-5): round trips and metadata bytes.
step sync .build/release/SyncBenchmark --trials "$(trials 1 5)"
# The store over real sessions and SQLite: durable puts, a fresh station joining, differences.
step store .build/release/StoreBenchmark --records "$(trials 10000 100000)"
# The store's anchors on the same records: Yjs (pycrdt) and Automerge, by their own protocols.
step anchors .build/anchors-venv/bin/python Benchmarks/anchors.py --records "$(trials 10000 100000)" --trials "$(trials 1 3)" --json "$results/anchors.json"
# 16 stores in a simulated world, cut in two for 60 s while each half writes 1,000 records.
step store-partition .build/release/StoreBenchmark --phases partition --seeds "$(trials 1 1,2,3,4,5)" --json "$results/store-partition.json"
# A station holding a million records (100,000 in a quick run), in a process of its own, syncing:
# its peak resident memory.
step store-memory .build/release/StoreBenchmark --records "$(trials 100000 1000000)" --differences 2 --phases memory --json "$results/store-memory.json"
# Two stations that never met, 10 differences among 100,000 records (issue 60's first row):
# round trips and metadata bytes.
step store-never-met .build/release/StoreBenchmark --records "$(trials 10000 100000)" --differences 10 --phases memory --json "$results/store-never-met.json"
# Host a's memory under churn (three navlog-sync hosts, one frozen now and then, one killed):
# 30 minutes, 2 in a quick run.
step navlog-soak Benchmarks/navlog-soak.py --binary "$PWD/.build/release/navlog-sync" --seconds "$(trials 120 1800)" --sample 30 \
    --json "$results/navlog-soak.json"
if [[ $(id -u) -eq 0 ]]; then
    step detection-network Benchmarks/detection-hosts.sh --trials "$(trials 5 20)" --baseline-trials "$(trials 1 3)"
    step discovery Benchmarks/discovery-hosts.sh --trials "$(trials 5 20)"
    step mesh scripts/sandbox.sh .build/release/MeshBenchmark --hold "$(trials 5 60)" $( ((quick)) && echo --hub 100 )
    # The host suite's lossy link, again and again: how often its links are torn down.
    step lossy-link .build/release/navlog-hosts --binary "$PWD/.build/release/navlog-sync" --only "loss and delay" \
        --repeat "$(trials 1 12)" --loss-seconds "$(trials 20 60)" --report "$results/hosts-loss" 
else
    echo "The namespace benchmarks (detection in the network, discovery, scale) were not run: they need root (sudo make bench)"
fi

(IFS=,; echo "{${durations[*]}}") >"$results/durations.json"
.build/release/BenchReport --results "$results"
