# The two commands of the README: `make demo` and `make test`. Each installs what is missing.
SWIFT ?= swift
BENCH_ARGS ?=

.PHONY: all deps daemons build test hosts-test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

daemons: deps
	@scripts/start-daemons.sh

build: deps
	$(SWIFT) build

test: daemons
	$(SWIFT) build --build-tests
	scripts/run-tests.sh

# The multi-host fault suite alone (root): namespace hosts, one fault each, a report in bench-results/hosts.
hosts-test: deps
	$(SWIFT) build --product navlog-sync
	$(SWIFT) build --product navlog-hosts
	.build/debug/navlog-hosts --report bench-results/hosts

# Three crew stations keep one navigation log in sync; see Examples/demo.sh.
demo: deps
	$(SWIFT) build -c release --product navlog-sync
	Examples/demo.sh .build/release/navlog-sync

bench: deps
	$(SWIFT) build -c release --product LinkBenchmark
	$(SWIFT) build -c release --product DiscoveryBenchmark
	$(SWIFT) build -c release --product MeshBenchmark
	$(SWIFT) build -c release --product DetectionBenchmark
	$(SWIFT) build -c release --product DeliveryBenchmark
	$(SWIFT) build -c release --product multipeer-test-peer
	.build/release/LinkBenchmark $(BENCH_ARGS)
	.build/release/DetectionBenchmark
	.build/release/DeliveryBenchmark
	@if [ "$$(id -u)" -eq 0 ]; then Benchmarks/detection-hosts.sh && Benchmarks/discovery-hosts.sh && scripts/sandbox.sh .build/release/MeshBenchmark; \
	else echo "The namespace benchmarks (network detection, discovery, mesh) were not run: they need root (sudo make bench)"; fi

clean:
	rm -rf .build
