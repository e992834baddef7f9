# fenced — build, test, lint, bench, demo.
# The two commands a new user needs: `make demo` and `make test`.

SHELL        := /usr/bin/env bash
GO           ?= go
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -X main.version=$(VERSION)
BIN          := bin/fenced
# Tools are pinned and run through the Go module proxy; nothing is vendored.
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT    := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
BENCH_COUNT  ?= 6
TEST_TIMEOUT ?= 60m

.PHONY: all build deps test test-short lint bench demo clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/fenced
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/fenced

deps: ## install the Debian packages the tests need (openipmi, ipmitool, etcd-server, iproute2)
	./hack/install-deps.sh

test: deps ## the full suite: unit + integration against real BMC simulators
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

test-short: ## fast unit tests only (no simulators, no cluster)
	$(GO) test -short -count=1 ./...

lint: ## gofmt, go vet, staticcheck (pinned)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files --others --exclude-standard '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench: deps ## benchmarks, $(BENCH_COUNT) runs each, summarised with medians by benchstat
	@mkdir -p bin
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./... | tee bin/bench.txt
	$(GO) run $(BENCHSTAT) bin/bench.txt

demo: ## (coming) bring up the local cluster, pull a node's plug, show the recovery
	@echo "make demo is not built yet: it arrives with the local cluster harness and the agent."
	@echo "It will start a control plane, 3 machines behind simulated BMCs, run fenced,"
	@echo "cut one machine's power and print the recovery timeline."
	@echo "Today you can try the BMC side: make build && bin/fenced bmc --help"

clean: ## remove build output
	rm -rf bin
