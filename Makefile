# byzlog's one entry point. `make test` installs what it needs, builds, lints
# and runs every test; `make localnet` runs a 4-validator network on loopback.
SHELL := /bin/bash
.DEFAULT_GOAL := help

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

# Pinned tool versions: this is the one place they are declared. CometBFT and
# protoc-gen-go follow the Go modules, so the binaries match the libraries.
COMETBFT_VERSION           := $(shell awk '$$1 == "github.com/cometbft/cometbft" { print $$2; exit }' abciapp/go.mod)
PROTOC_GEN_GO_VERSION      := $(shell awk '$$1 == "google.golang.org/protobuf" { print $$2; exit }' protos/go.mod)
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
NATS_SERVER_VERSION        := v2.15.2
NATSCLI_VERSION            := v0.5.0
GRPCURL_VERSION            := v1.9.4
export COMETBFT_VERSION PROTOC_GEN_GO_VERSION PROTOC_GEN_GO_GRPC_VERSION NATS_SERVER_VERSION NATSCLI_VERSION GRPCURL_VERSION BIN

# The product: what the Dockerfile ships. The lab (byzlog-lab: bench, chaos,
# attack, demo) is a module of its own and is never shipped.
COMMANDS := byzlog byzlog-app byzlog-gateway byzlog-indexer
LAB := byzlog-lab
MODULES := protos abciapp gateway indexer services services/lab
DEMO_RECORDS ?= 10000
LOCALNET_DIR ?= run/localnet
UNIT_TIMEOUT ?= 10m
E2E_TIMEOUT ?= 25m
E2E_RUN ?=
FUZZTIME ?= 30s
BENCHTIME ?= 30x
BENCH_OUT ?= bench-results
BENCH_ARGS ?=
SOAK_DURATION ?= 10m
SOAK_RATE ?= 10000
CHAOS_DURATION ?= 3m
CHAOS_OUT ?= chaos-results
CHAOS_ARGS ?=
CHAOS_SMOKE_NEMESES ?= all,-txn-pause,-txn-lying-node,-txn-partition,-txn-power,-txn-lying-gateway
ATTACK_DURATION ?= 60s
ATTACK_OUT ?= attack-results
ATTACK_ARGS ?=

.PHONY: help
help: ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z0-9-]+:.*## / { printf "  make %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## install apt packages and pinned Go tools into ./bin (skips what is present)
	@scripts/deps.sh

.PHONY: build
build: deps ## build byzlog's binaries and the lab's into ./bin
	@scripts/progress.sh "build: $(COMMANDS) $(LAB)" go build -o $(BIN)/ $(addprefix github.com/byzlog/byzlog/services/,$(COMMANDS)) github.com/byzlog/byzlog/services/lab/$(LAB)

.PHONY: proto
proto: deps ## regenerate the Go code of protos/
	scripts/proto.sh gen

.PHONY: verify-proto
verify-proto: deps ## fail when the committed generated code differs from what protos/ generates
	scripts/proto.sh verify

.PHONY: lint
lint: deps ## gofmt, go vet over the workspace, every module tidy and building on its own
	@unformatted=$$(gofmt -l $(MODULES)); \
	if [ -n "$$unformatted" ]; then echo "lint: gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet -tags e2e work
	go vet -tags failpoints github.com/byzlog/byzlog/abciapp/...
	go vet -tags e2e,bench github.com/byzlog/byzlog/services/lab/e2e
	@for m in $(MODULES); do \
	  (cd $$m && GOWORK=off go mod tidy -diff >/dev/null) || { echo "lint: $$m/go.mod or go.sum is not tidy: run (cd $$m && GOWORK=off go mod tidy)"; exit 1; }; \
	  (cd $$m && GOWORK=off go build ./...) || { echo "lint: $$m does not build on its own (GOWORK=off)"; exit 1; }; \
	done

.PHONY: verify-sdk-example
verify-sdk-example: ## build scripts/sdk-example, a module outside the workspace, against the SDKs as a user's module does
	cd scripts/sdk-example && GOWORK=off go mod tidy -diff >/dev/null || { echo "verify-sdk-example: scripts/sdk-example/go.mod is not tidy: run (cd scripts/sdk-example && GOWORK=off go mod tidy)"; exit 1; }
	cd scripts/sdk-example && GOWORK=off go vet . && GOWORK=off go build -o /dev/null .

.PHONY: unit
unit: deps ## unit and integration tests (real RocksDB) with the race detector
	go test -race -count=1 -timeout $(UNIT_TIMEOUT) work

.PHONY: failpoints-app
failpoints-app: deps ## build bin/byzlog-app-failpoints, the test build whose app crashes or misbehaves on demand
	go build -tags failpoints -o $(BIN)/byzlog-app-failpoints github.com/byzlog/byzlog/services/byzlog-app

.PHONY: e2e
e2e: build failpoints-app librdkafka ## end-to-end tests on the real binaries: localnets with crashes, restarts and a Byzantine proposer (two shards side by side, then the benchmark smoke; E2E_RUN=regexp runs those alone)
	BYZLOG_BIN=$(BIN) E2E_TIMEOUT=$(E2E_TIMEOUT) E2E_RUN='$(E2E_RUN)' scripts/e2e.sh

LIBRDKAFKA_DIR ?= run/librdkafka
LIBRDKAFKA_TESTS ?= 0000-0119
LIBRDKAFKA_OUT ?= run/librdkafka-suite.txt

.PHONY: librdkafka librdkafka-suite
librdkafka: ## fetch Debian's librdkafka source package and build its own test suite into $(LIBRDKAFKA_DIR) (kept once built; ~3 min)
	@scripts/librdkafka/build.sh $(LIBRDKAFKA_DIR)

librdkafka-suite: build librdkafka ## librdkafka's own tests $(LIBRDKAFKA_TESTS) against a gateway's Kafka face, one at a time: a pass/fail/skip table in $(LIBRDKAFKA_OUT), exit 1 on a failure not on scripts/librdkafka/skip.txt (make test runs a handful)
	@mkdir -p $(dir $(LIBRDKAFKA_OUT))
	BYZLOG_BIN=$(BIN) LIBRDKAFKA_DIR=$(abspath $(LIBRDKAFKA_DIR)) LIBRDKAFKA_TESTS=$(LIBRDKAFKA_TESTS) LIBRDKAFKA_OUT=$(abspath $(LIBRDKAFKA_OUT)) go test -tags e2e -count=1 -timeout 10h -v -run '^TestLibrdkafkaSuite$$' github.com/byzlog/byzlog/services/lab/e2e

KAFKA_COMPAT_OUT ?= run/kafka-compat.txt

.PHONY: kafka-compat
kafka-compat: build ## franz-go's whole kgo test suite against a gateway's Kafka face (make test runs a subset): which tests pass, in $(KAFKA_COMPAT_OUT) and the output beside it (~25 min)
	@mkdir -p $(dir $(KAFKA_COMPAT_OUT))
	BYZLOG_BIN=$(BIN) BYZLOG_KGO_RUN=. BYZLOG_KGO_RESULTS=$(abspath $(KAFKA_COMPAT_OUT)) go test -tags e2e -count=1 -timeout 50m -v -run TestKafkaCompat github.com/byzlog/byzlog/services/lab/e2e

KAFKA_PROBE_RUNS ?= 10

.PHONY: kafka-probes
kafka-probes: build ## librdkafka at its defaults (scripts/kafka-probes) against a gateway's Kafka face on a fresh network, KAFKA_PROBE_RUNS (10) times: 4,000 records stored in the order sent, 50 asynchronous commits read back as 50 (make test runs it once)
	BYZLOG_BIN=$(BIN) BYZLOG_KAFKA_PROBE_RUNS=$(KAFKA_PROBE_RUNS) go test -tags e2e -count=1 -timeout 60m -v -run '^TestKafkaProbes$$' github.com/byzlog/byzlog/services/lab/e2e

.PHONY: fuzz
fuzz: deps ## run every fuzz target for FUZZTIME each (default 30s)
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' abciapp gateway indexer protos services | xargs -n1 dirname | sort -u); do \
	  for target in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz: $$dir $$target"; (cd $$dir && go test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) .); \
	  done; \
	done

.PHONY: bench
bench: build ## byzlog beside stock CometBFT (kvstore, noop) and JetStream, 100 B and 1 KiB: table, ratios, chart and JSON in $(BENCH_OUT), ~18 min (BENCH_ARGS=--scaling, --profile)
	$(BIN)/byzlog-lab bench suite --out $(BENCH_OUT) $(BENCH_ARGS)

.PHONY: bench-smoke
bench-smoke: build ## the suite's 1-minute variant (every system but byzlog-kafka-txn, 100 B, 3 s each; make test runs it as an e2e test)
	$(BIN)/byzlog-lab bench suite --smoke --out $(BENCH_OUT) $(BENCH_ARGS)

.PHONY: bench-soak
bench-soak: build ## byzlog for SOAK_DURATION (10m) open loop at SOAK_RATE records/s (70% of a measured peak), the topic retaining 4 MiB a partition: CPU per process, and figures and every RSS minute by minute
	$(BIN)/byzlog-lab bench suite --systems byzlog --record-sizes 100 --warmup 30s --duration $(SOAK_DURATION) --rate $(SOAK_RATE) --retention-bytes 4194304 --window 1m --out $(BENCH_OUT)/soak $(BENCH_ARGS)

.PHONY: bench-core
bench-core: deps ## Go benchmarks of the state machine on RocksDB (records/s, ns/record, allocs/record)
	go test -run '^$$' -bench . -benchtime $(BENCHTIME) github.com/byzlog/byzlog/abciapp/...

.PHONY: bench-gateway
bench-gateway: build ## via-gateway records/s and receipt latency vs one-record txs, and a linger/bundle-size sweep (BYZLOG_BENCH_SECONDS, default 20)
	BYZLOG_BIN=$(BIN) go test -tags e2e,bench -count=1 -timeout 30m -v -run TestBenchGateway github.com/byzlog/byzlog/services/lab/e2e

.PHONY: bench-join
bench-join: build ## time for a wiped validator to reach the tip by replay from genesis and by state sync, at BYZLOG_JOIN_BLOCKS (1000,20000) blocks of history, then each node's stores before and after pruning to BYZLOG_JOIN_RETAIN (1000) blocks (1 h 46 min for the default here; e2e TestStateSyncJoin and chaos statesync-one are the short variants)
	BYZLOG_BIN=$(BIN) go test -tags e2e,bench -count=1 -timeout 4h -v -run TestBenchJoin github.com/byzlog/byzlog/services/lab/e2e

.PHONY: bench-indexer
bench-indexer: build ## commit→subscriber latency and the indexer's catch-up publish rate (BYZLOG_BENCH_SECONDS, default 20)
	BYZLOG_BIN=$(BIN) go test -tags e2e,bench -count=1 -timeout 30m -v -run TestBenchIndexer github.com/byzlog/byzlog/services/lab/e2e

.PHONY: chaos
chaos: build failpoints-app ## every nemesis (the 6 txn- rows with the transactional pipeline) for CHAOS_DURATION (3m) each under load, history checked: table in $(CHAOS_OUT), exit 1 on any anomaly (~45 min before the txn- rows, ~5 min each of them)
	$(BIN)/byzlog-lab chaos --duration $(CHAOS_DURATION) --out $(CHAOS_OUT) $(CHAOS_ARGS)

.PHONY: chaos-smoke
chaos-smoke: build failpoints-app ## the short chaos run make test runs: 12 s per nemesis of CHAOS_SMOKE_NEMESES (every one but the txn- rows other than txn-kill, which make chaos runs), 2 faults each
	$(BIN)/byzlog-lab chaos --duration 12s --hold 3s --gap 2s --settle 120s --kafka-settle 45s --nemeses $(CHAOS_SMOKE_NEMESES) $(CHAOS_ARGS)

.PHONY: attack
attack: build ## the no-attack phase, then every Byzantine-client attack for ATTACK_DURATION (60s) each under honest load: table in $(ATTACK_OUT), exit 1 if a row has a crash, an anomaly or < 0.8x honest throughput (~20 min)
	$(BIN)/byzlog-lab attack --duration $(ATTACK_DURATION) --out $(ATTACK_OUT) $(ATTACK_ARGS)

.PHONY: attack-smoke
attack-smoke: build ## the short attack run make test runs: 10 s per row (~5 min)
	$(BIN)/byzlog-lab attack --duration 10s --settle 30s $(ATTACK_ARGS)

.PHONY: model
model: ## model-check the protocol with spin (scripts/model): every property passes, every sanity mutation fails; installs spin if missing
	@(command -v spin && command -v gcc) >/dev/null 2>&1 || (apt-get update && apt-get install -y spin gcc)
	@scripts/model/run.sh

.PHONY: test
test: deps build lint verify-sdk-example verify-proto verify-reference unit e2e model ## everything CI runs
	$(MAKE) --no-print-directory demo DEMO_RECORDS=2000
	$(MAKE) --no-print-directory chaos-smoke
	$(MAKE) --no-print-directory attack-smoke

.PHONY: reference verify-reference
reference: build ## write every binary's --help usage and flags into the configuration reference, docs/reference.md
	BIN=$(BIN) scripts/reference.sh gen

verify-reference: build ## fail when docs/reference.md differs from the binaries' flags
	BIN=$(BIN) scripts/reference.sh verify

.PHONY: run
run: deps build ## run the whole system (4 validators, NATS, gateway, indexer) in $(LOCALNET_DIR) until Ctrl-C; resumes its data
	$(BIN)/byzlog run --dir $(LOCALNET_DIR)

.PHONY: demo
demo: deps build ## a self-checking tour on a fresh cluster: produce DEMO_RECORDS (10000), consume through NATS, verify, print figures
	$(BIN)/byzlog-lab demo --records $(DEMO_RECORDS)

.PHONY: localnet
localnet: build ## start a 4-validator localnet in $(LOCALNET_DIR) (resumes an existing one)
	$(BIN)/byzlog localnet up --dir $(LOCALNET_DIR)

.PHONY: localnet-status
localnet-status: ## heights and app hashes of the localnet
	$(BIN)/byzlog localnet status --dir $(LOCALNET_DIR)

.PHONY: localnet-down
localnet-down: ## stop the localnet (its data stays)
	$(BIN)/byzlog localnet down --dir $(LOCALNET_DIR)

.PHONY: clean
clean: ## stop the localnet, remove built binaries and run data (keeps installed tools)
	@if [ -x $(BIN)/byzlog ] && [ -f $(LOCALNET_DIR)/localnet.json ]; then $(BIN)/byzlog localnet down --dir $(LOCALNET_DIR); fi
	rm -f $(addprefix $(BIN)/,$(COMMANDS) $(LAB)) $(BIN)/byzlog-app-failpoints
	rm -rf run
