# fenced — build, test, lint, bench, demo.
# The two commands a new user needs: `make demo` and `make test`.

SHELL        := /usr/bin/env bash
GO           ?= go
# git describe's version, or a v0.0.0 pre-release before the first tag
# (hack/release/version.sh); stamped into fenced's pkg/version.
# Computed once per make (not at every use: a commit made meanwhile would
# change it half-way).
ifeq ($(origin VERSION),undefined)
VERSION      := $(shell hack/release/version.sh)
endif
LDFLAGS      := -X fenced.io/fenced/pkg/version.stamped=$(VERSION)
BIN          := bin/fenced
# kustomize (under cli-runtime, for kubectl's -k) imports Go's plugin
# package unless this tag is set, and a cgo binary that links plugin exports
# every symbol dynamically: 144 MB instead of 108, 84 MB resident for
# `fenced version` instead of 50, twice the link time. fenced loads no
# plugins. Exported, so that the binaries tests and benchmarks build under
# make are built the same way (the static builds of image and release are
# the same size either way).
GO_TAGS      := kustomize_disable_go_plugin_support
export GOFLAGS := $(strip $(GOFLAGS) -tags=$(GO_TAGS))
# Tools are pinned and run through the Go module proxy; nothing is vendored.
STATICCHECK  := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT    := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
# gotestsum prints each test as it finishes (name, result, seconds) and the
# failures' output at the end; hack/testsummary then tables the scenarios.
GOTESTSUM    := gotest.tools/gotestsum@v1.13.0
BENCH_COUNT  ?= 6
TEST_TIMEOUT ?= 60m
FUZZTIME     ?= 1m
# make soak: how often the fault matrix runs, how long random faults are
# injected (0 skips a phase), and the seed that replays a random phase.
SOAK_MATRIX_RUNS ?= 5
SOAK_DURATION    ?= 60m
SOAK_SEED        ?=
# The tests of the fault matrix (a regexp of names; default every e2e test
# but the benchmarks and TestSoak).
SOAK_TESTS       ?=

CLUSTER_STATE ?= $(or $(TMPDIR),/tmp)/fenced-cluster

.PHONY: all build image image-fence-agents fence-agents-lock man deps kube-binaries test test-loaded test-short fuzz fuzz-short e2e e2e-matrix e2e-watchdog-vm lint bench bench-scale bench-scale-medians soak soak-smoke demo cluster-up cluster-down kind-power-loss clean help bench-gossip bench-gossip-big bench-fast bench-false-reads

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build bin/fenced
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/fenced

# The images: static binaries (no cgo; -trimpath and an empty build ID, so
# that the same source gives the same bytes), one per platform of
# IMAGE_PLATFORMS, put into an OCI archive (an image index, one image per
# platform) by hack/image with go-containerregistry, stamped with the
# commit's time. Two variants: the static one (make image) and one with
# ClusterLabs' fence agents from the Debian packages of
# hack/image/fence-agents.lock (make image-fence-agents; the .debs are
# fetched once into FENCE_AGENTS_DEBS_CACHE and checked against the lock).
IMAGE_PLATFORMS            ?= linux/amd64,linux/arm64
IMAGE_ARCHIVE              ?= bin/fenced-image.tar
IMAGE_TAG                  ?= fenced:$(VERSION)
FENCE_AGENTS_IMAGE_ARCHIVE ?= bin/fenced-fence-agents-image.tar
FENCE_AGENTS_IMAGE_TAG     ?= fenced-fence-agents:$(VERSION)
FENCE_AGENTS_LOCK          ?= hack/image/fence-agents.lock
FENCE_AGENTS_DEBS_CACHE    ?= $(HOME)/.cache/fenced/debs
# The binaries that go into the images: IMAGE_BINARY-OS-ARCH (tests
# building images at the same time give each its own).
IMAGE_BINARY  ?= bin/image/fenced
# $(call build-image,VARIANT,ARCHIVE,TAG)
define build-image
	@mkdir -p $(dir $(IMAGE_BINARY))
	@set -e; args=; for platform in $(subst $(comma), ,$(IMAGE_PLATFORMS)); do \
	  os=$${platform%%/*}; arch=$${platform#*/}; \
	  echo "building $(IMAGE_BINARY)-$$os-$$arch"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -buildid= $(LDFLAGS)" -o $(IMAGE_BINARY)-$$os-$$arch ./cmd/fenced; \
	  args="$$args -binary $$platform=$(IMAGE_BINARY)-$$os-$$arch"; \
	done; \
	$(GO) run ./hack/image $$args -variant $(1) -lock $(FENCE_AGENTS_LOCK) -debs-cache $(FENCE_AGENTS_DEBS_CACHE) \
	  -out $(2) -tag $(3) -version $(VERSION) \
	  -revision "$$(git rev-parse HEAD 2>/dev/null)" -created "$$(git log -1 --format=%ct 2>/dev/null || echo 0)"
endef
comma := ,

image: ## the static container image for IMAGE_PLATFORMS, built offline (no base image pulled): an OCI archive, bin/fenced-image.tar
	$(call build-image,static,$(IMAGE_ARCHIVE),$(IMAGE_TAG))

image-fence-agents: ## the image with ClusterLabs fence agents (Debian packages of hack/image/fence-agents.lock), for IMAGE_PLATFORMS: bin/fenced-fence-agents-image.tar
	$(call build-image,fence-agents,$(FENCE_AGENTS_IMAGE_ARCHIVE),$(FENCE_AGENTS_IMAGE_TAG))

fence-agents-lock: ## regenerate hack/image/fence-agents.lock from Debian's Packages indexes (the packages' newest versions)
	$(GO) run ./hack/image/debianlock -lock $(FENCE_AGENTS_LOCK)

man: ## man pages for every command, generated from the commands, into bin/man
	$(GO) run ./cmd/fenced man bin/man

deps: ## install the Debian packages the tests need (openipmi, ipmitool, etcd-server, iproute2, systemd, dbus-daemon, snmpd, snmp, fence-agents, containerd, runc, containernetworking-plugins)
	./hack/install-deps.sh

kube-binaries: ## build the pinned Kubernetes binaries and kubectl once (cached outside the repo, ~6-9 min cold)
	./hack/kube-binaries.sh >/dev/null

test: deps kube-binaries ## the full suite: unit, integration (BMC simulators), end-to-end scenarios, a short fuzz of every decoder
	$(GO) vet ./...
	@mkdir -p bin && rm -f bin/test.json
	$(GO) build -o bin/testsummary ./hack/testsummary
	@echo "running every package's tests; each test is printed as it finishes, what still runs every 30 s (the end-to-end scenarios take ~30 min on 2 cores)"
	bin/testsummary -watch 30s bin/test.json & watcher=$$!; trap 'kill $$watcher 2>/dev/null' EXIT; \
	  $(GO) run $(GOTESTSUM) --format testname --format-hide-empty-pkg --jsonfile bin/test.json -- -count=1 -timeout $(TEST_TIMEOUT) ./...; \
	  rc=$$?; kill $$watcher 2>/dev/null; bin/testsummary bin/test.json; exit $$rc
	$(MAKE) --no-print-directory fuzz-short

# make test as users and CI runners run it: beside other work. A busy loop
# pinned with taskset to one core (LOADED_CPU) runs for the whole of
# LOADED_TARGET (make test; e2e for the scenarios alone); the last line
# says pass or fail, how long, and how much CPU the hog burnt (a hog that
# got none proves nothing). The scenarios take longer loaded: hence
# LOADED_TEST_TIMEOUT. Not part of make test.
LOADED_CPU          ?= 0
LOADED_TARGET       ?= test
LOADED_TEST_TIMEOUT ?= 90m
test-loaded: ## make test with a CPU hog of one core beside it (a busy loop pinned to LOADED_CPU); says how it did; not part of make test
	@command -v taskset >/dev/null || { echo "test-loaded: needs taskset (util-linux)"; exit 2; }
	@taskset -c $(LOADED_CPU) sh -c 'while :; do :; done' & hog=$$!; \
	  trap 'kill $$hog 2>/dev/null' EXIT; \
	  echo "test-loaded: a busy loop (pid $$hog) pinned to CPU $(LOADED_CPU) of $$(nproc) beside make $(LOADED_TARGET)"; \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) $(LOADED_TARGET) TEST_TIMEOUT=$(LOADED_TEST_TIMEOUT); rc=$$?; \
	  took=$$(( $$(date +%s) - start )); \
	  burnt=$$(awk -v hz=$$(getconf CLK_TCK) '{ printf "%.0f", ($$14 + $$15) / hz }' /proc/$$hog/stat 2>/dev/null); \
	  if [ $$rc = 0 ]; then verdict=passed; else verdict="FAILED (exit $$rc)"; fi; \
	  echo "test-loaded: make $(LOADED_TARGET) $$verdict in $$((took / 60))m$$((took % 60))s beside a one-core hog, which burnt $${burnt:-?} CPU-seconds of them; load average now $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	  exit $$rc

fuzz: ## run every fuzz target for FUZZTIME each (default 1m)
	FUZZTIME=$(FUZZTIME) GO=$(GO) ./hack/fuzz.sh

fuzz-short: ## run every fuzz target for 5s each (part of make test)
	FUZZTIME=5s GO=$(GO) ./hack/fuzz.sh

# The core scenarios on every supported Kubernetes version
# (cluster.SupportedKubeVersions), one harness at a time: each version's
# binaries are built from the module proxy first (~8 min cold each).
# E2E_MATRIX_VERSIONS picks others; the table goes to bin/e2e-matrix/matrix.md.
E2E_MATRIX_VERSIONS ?=
e2e-matrix: deps ## the core scenarios on each supported Kubernetes version (~25 min a version warm); table in bin/e2e-matrix/matrix.md
	$(GO) run ./hack/e2ematrix $(if $(E2E_MATRIX_VERSIONS),-versions $(E2E_MATRIX_VERSIONS))

e2e: deps kube-binaries ## only the end-to-end scenarios on the local cluster harness, verbose
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/

# fenced's watchdog code on a real Linux kernel: Debian's kernel under QEMU
# (software emulation) with QEMU's emulated i6300ESB watchdog and the
# kernel's driver; hack/vm-kernel.sh installs QEMU and cpio and caches the
# kernel. make test skips it.
e2e-watchdog-vm: ## the watchdog on a real kernel: armed, petted, stopped, closed and disarmed by fenced's code in a QEMU VM (~1 min; installs QEMU); not part of make test
	FENCED_VM_DIR=$$(./hack/vm-kernel.sh | tail -n1) && export FENCED_VM_DIR && \
	  $(GO) test -count=1 -v -run TestWatchdogOnARealKernel ./test/vm/

test-short: ## fast unit tests only (no simulators, no cluster)
	$(GO) test -short -count=1 ./...

lint: ## gofmt, go vet, staticcheck (pinned)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go') $$(git ls-files --others --exclude-standard '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt: not formatted:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench: deps kube-binaries ## Go benchmarks (medians by benchstat), then recovery after power loss on the harness: BMC up, BMC dark, watchdog level (~26 min)
	@mkdir -p bin
	$(GO) test -run '^$$' -bench . -benchmem -count $(BENCH_COUNT) ./pkg/... | tee bin/bench.txt
	$(GO) run $(BENCHSTAT) bin/bench.txt
	FENCED_BENCH=1 $(GO) test -count=1 -timeout 40m -v -run 'TestRecoveryBenchmark|TestRecoveryWithoutFencing' ./test/e2e/ > bin/recovery.txt 2>&1; \
	  rc=$$?; grep -v -e '^=== ' -e '^\s*[a-z_]*_test.go:' -e '^\s*$$' bin/recovery.txt | grep -v '^[IEW][0-9]' ; exit $$rc

soak-smoke: deps kube-binaries ## the soak's driver on a few faults (~2 min): what make soak runs for an hour
	FENCED_SOAK_SMOKE=1 $(GO) test -count=1 -v -run '^TestSoak$$' ./test/e2e/ 2>&1 | grep --line-buffered -e ' soak ' -e '^--- ' -e '^FAIL' -e '^ok'; exit $${PIPESTATUS[0]}

# Endurance, not part of make test. Phase 1: every end-to-end test but the
# benchmarks and TestSoak, SOAK_MATRIX_RUNS times (go test -count), pass and
# fail per run tabled by hack/soakmatrix. Phase 2: TestSoak, random faults
# on one harness for SOAK_DURATION with the invariants checked throughout
# (its own deadlines bound it, hence -timeout 0). bin/soak.txt gets both
# tables; any failure or broken invariant makes the target fail.
soak: deps kube-binaries ## endurance: the e2e fault matrix SOAK_MATRIX_RUNS times (default 5, ~30 min each), then random faults for SOAK_DURATION (default 60m); tables in bin/soak.txt
	@mkdir -p bin && rm -f bin/soak.txt bin/soak-matrix.* bin/soak-random.*
	$(GO) build -o bin/testsummary ./hack/testsummary
	@rc=0; \
	if [ "$(SOAK_MATRIX_RUNS)" != 0 ]; then \
	  tests='$(SOAK_TESTS)'; [ -n "$$tests" ] || \
	    tests=$$($(GO) test -list . ./test/e2e/ | grep '^Test' | grep -v -e '^TestSoak$$' -e '^TestRecovery' | paste -sd'|'); \
	  echo "soak phase 1: the fault matrix, $(SOAK_MATRIX_RUNS) runs of $$tests (~30 min a run on 2 cores); what still runs every 30 s"; \
	  bin/testsummary -watch 30s bin/soak-matrix.json & watcher=$$!; \
	  $(GO) run $(GOTESTSUM) --format testname --jsonfile bin/soak-matrix.json -- \
	    -count=$(SOAK_MATRIX_RUNS) -timeout $$(( $(SOAK_MATRIX_RUNS) * 60 ))m -run "^($$tests)$$" ./test/e2e/; \
	  kill $$watcher 2>/dev/null; \
	  $(GO) run ./hack/soakmatrix bin/soak-matrix.json > bin/soak-matrix.txt || rc=1; \
	fi; \
	if [ "$(SOAK_DURATION)" != 0 ]; then \
	  echo "soak phase 2: random faults for $(SOAK_DURATION) (log: bin/soak-random.log)"; \
	  SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_REPORT=$(CURDIR)/bin/soak-random.txt \
	    $(GO) test -count=1 -timeout 0 -v -run '^TestSoak$$' ./test/e2e/ 2>&1 | tee bin/soak-random.log | \
	    grep --line-buffered -e ' soak ' -e '^--- ' -e '^FAIL' -e '^ok'; \
	  [ "$${PIPESTATUS[0]}" = 0 ] || rc=1; \
	fi; \
	echo; cat bin/soak-matrix.txt bin/soak-random.txt 2>/dev/null | tee bin/soak.txt; exit $$rc

# The fencer in a 1000-Node cluster and a rack of 40 going dark twice (BMCs
# up, then BMCs dark behind a PDU level): test/scale/fencer at full size.
# Its 20-Node version runs in every `go test`.
bench-scale: deps kube-binaries ## one fencer, 1000 Nodes, a rack of 40 goes dark (BMCs up, then dark with a PDU level); table in bin/bench-scale.txt, the fencer's log and its heap and CPU profiles at rest beside it (~6 min)
	@mkdir -p bin
	set -o pipefail; FENCED_BENCH_SCALE=1 FENCED_BENCH_SCALE_OUT=$(CURDIR)/bin/bench-scale.txt FENCED_BENCH_SCALE_FENCER_LOG=$(CURDIR)/bin/bench-scale-fencer.log FENCED_BENCH_SCALE_PROFILES=$(CURDIR)/bin nice -n 10 $(GO) test -count=1 -timeout 40m -v -run '^TestFencerAtScale$$' ./test/scale/fencer/ 2>&1 \
	  | tee bin/bench-scale.log | grep --line-buffered -v -e '^=== ' -e '^\s*$$'

BENCH_SCALE_RUNS ?= 10
bench-scale-medians: deps kube-binaries ## make bench-scale BENCH_SCALE_RUNS times (10): each figure's median, lowest and highest in bin/bench-scale-medians.txt, each run's JSON in bin/bench-scale-runs (~45 min)
	@mkdir -p bin/bench-scale-runs && rm -f bin/bench-scale-runs/*.json
	@set -e; for i in $$(seq 1 $(BENCH_SCALE_RUNS)); do \
	  echo "== bench-scale run $$i of $(BENCH_SCALE_RUNS) (log: bin/bench-scale.log)"; \
	  FENCED_BENCH_SCALE_FIGURES=$(CURDIR)/bin/bench-scale-runs/run-$$i.json $(MAKE) --no-print-directory bench-scale > /dev/null; \
	  $(GO) run ./hack/benchscale bin/bench-scale-runs/*.json | tail -n +3; \
	done
	$(GO) run ./hack/benchscale bin/bench-scale-runs/*.json | tee bin/bench-scale-medians.txt

# Gossip at scale: rings of the real heartbeat Ring in one process on
# 127.0.0.1 (test/scale/gossip). GOSSIP_SIZES etc. shorten a trial run.
GOSSIP_SIZES      ?= 10,100,200
GOSSIP_BIG        ?= 250,500,1000
GOSSIP_FAST_SIZES ?= 10,100
GOSSIP_KILLS      ?= 20
GOSSIP_REST       ?= 30s
# The big rings run with every memberlist timer stretched GOSSIP_DILATION
# times (test/scale/gossip Options.Dilation): 2 cores cannot run 500 members
# at full speed in one process, and the figures come back in the protocol's time.
# 2 held 500 members on 2 cores; 1000 needed 5 (make bench-gossip-big
# GOSSIP_BIG=1000 GOSSIP_DILATION=5).
GOSSIP_DILATION   ?= 2
GOSSIP_ENV         = FENCED_BENCH_GOSSIP=1 FENCED_GOSSIP_OUT=$(CURDIR)/bin/bench-gossip.txt FENCED_GOSSIP_KILLS=$(GOSSIP_KILLS) FENCED_GOSSIP_REST=$(GOSSIP_REST)
# The rings of 250 to 1000 run last: on 2 shared cores they may not form within
# FENCED_GOSSIP_BUILD_TIMEOUT, and the file then says how far it got.
bench-gossip: ## gossip at scale: crash detection, false dead reports at rest/with loss/CPU starved, traffic, CPU and RSS per member; rings of 10-200 (250-1000 best effort), LAN and fast profiles (~60-90 min) -> bin/bench-gossip.txt
	@mkdir -p bin && rm -f bin/bench-gossip.txt
	$(GOSSIP_ENV) FENCED_GOSSIP_SIZES=$(GOSSIP_SIZES) FENCED_GOSSIP_PROFILE=lan \
	  $(GO) test -count=1 -timeout 90m -v -run TestGossipAtScale ./test/scale/gossip/
	$(GOSSIP_ENV) FENCED_GOSSIP_SIZES=$(GOSSIP_FAST_SIZES) FENCED_GOSSIP_PROFILE=fast \
	  $(GO) test -count=1 -timeout 90m -v -run TestGossipAtScale ./test/scale/gossip/
	$(MAKE) --no-print-directory bench-gossip-big GOSSIP_KEEP=1

# Only the big rings (500: ~12 min at ×2; 1000: ~35 min at ×5), dilated; the CPU-starved window is left
# out, since hogs starve a dilated ring k times less than a real one.
bench-gossip-big: ## gossip rings of GOSSIP_BIG (default 250,500,1000) with every memberlist timer stretched GOSSIP_DILATION (2) times; figures in the protocol's time -> bin/bench-gossip.txt
	@mkdir -p bin && [ -n "$(GOSSIP_KEEP)" ] || rm -f bin/bench-gossip.txt
	$(GOSSIP_ENV) FENCED_GOSSIP_SIZES=$(GOSSIP_BIG) FENCED_GOSSIP_PROFILE=lan FENCED_GOSSIP_BUILD_TIMEOUT=30m \
	  FENCED_GOSSIP_DILATION=$(GOSSIP_DILATION) FENCED_GOSSIP_HOGS=0 \
	  $(GO) test -count=1 -timeout 150m -v -run TestGossipAtScale ./test/scale/gossip/
	@cat bin/bench-gossip.txt

# The fast gossip profile on the harness: power-loss recoveries and BMC
# reads at rest, under a CPU hog and with 2 % packet loss on one machine.
FAST_ROUNDS ?= 10
FAST_REST   ?= 3m
bench-false-reads: ## false power reads of healthy nodes: 100 agents in a process stalled 300ms every 1.5s (scheduling p99 >= 200 ms), 5 % loss, beats and gossip to one fencer (~35 min) -> bin/bench-false-reads.txt
	@mkdir -p bin
	FENCED_BENCH_FALSE_READS=1 FENCED_FALSE_READS_OUT=$(CURDIR)/bin/bench-false-reads.txt \
	  $(GO) test -count=1 -timeout 80m -v -run '^TestFalseReads$$' ./test/scale/gossip/

bench-fast: deps kube-binaries ## gossip.profile fast on the harness: FAST_ROUNDS power losses, false suspicions at rest/CPU hog/2 % loss (~30 min) -> bin/bench-fast.txt
	@mkdir -p bin
	@echo "progress below; the whole log in bin/bench-fast.txt"
	FENCED_BENCH=1 FENCED_BENCH_ROUNDS=$(FAST_ROUNDS) FENCED_BENCH_REST=$(FAST_REST) $(GO) test -count=1 -timeout 60m -v \
	  -run 'TestRecoveryBenchmarkFast' ./test/e2e/ 2>&1 | tee bin/bench-fast.txt | grep --line-buffered -e 'bench_fast_test.go' -e 'bench_test.go'; \
	  rc=$${PIPESTATUS[0]}; grep -v -e '^=== ' -e '^\s*[a-z_]*_test.go:' -e '^\s*$$' bin/bench-fast.txt | grep -v '^[IEW][0-9]' ; exit $$rc

demo: deps kube-binaries ## local cluster + fenced, pull a node's plug, print the recovery timeline, tear down
	$(GO) run ./internal/cmd/fenced-demo

cluster-up: deps kube-binaries ## start the local cluster in the background for kubectl (docs/contributing.md)
	@mkdir -p bin $(CLUSTER_STATE)
	$(GO) build -o bin/fenced-cluster ./internal/cmd/fenced-cluster
	@if [ -f $(CLUSTER_STATE)/pid ] && kill -0 $$(cat $(CLUSTER_STATE)/pid) 2>/dev/null; then \
	  echo "already running (pid $$(cat $(CLUSTER_STATE)/pid)); make cluster-down first"; exit 1; fi
	@nohup bin/fenced-cluster -state $(CLUSTER_STATE) > $(CLUSTER_STATE)/cluster.log 2>&1 & echo $$! > $(CLUSTER_STATE)/pid
	@for i in $$(seq 600); do \
	  [ -f $(CLUSTER_STATE)/ready ] && break; \
	  kill -0 $$(cat $(CLUSTER_STATE)/pid) 2>/dev/null || { tail -30 $(CLUSTER_STATE)/cluster.log; exit 1; }; \
	  sleep 0.5; done
	@sed -n '/^cluster ready/,$$p' $(CLUSTER_STATE)/cluster.log

cluster-down: ## stop the cluster started by cluster-up
	@if [ -f $(CLUSTER_STATE)/pid ]; then \
	  pid=$$(cat $(CLUSTER_STATE)/pid); kill $$pid 2>/dev/null; \
	  for i in $$(seq 120); do kill -0 $$pid 2>/dev/null || break; sleep 0.5; done; \
	  rm -f $(CLUSTER_STATE)/pid; echo "cluster stopped"; \
	else echo "no cluster running"; fi

kind-power-loss: ## (needs Docker and kind) pull a worker's plug on a kind cluster (test/kind/README.md)
	./test/kind/run-power-loss.sh

clean: ## remove build output
	rm -rf bin

# A release, into one folder: bin/release/$(VERSION)/ (docs/release.md says
# what a maintainer does with it). Not part of make test. The same commit
# gives the same bytes: binaries built with -trimpath and no build ID,
# archives and the chart package stamped with the commit's time, SBOMs
# without a serial number or the time of the run.
REGISTRY          ?= ghcr.io/fenced-io
HOMEPAGE          ?= https://github.com/fenced-io/fenced
RELEASE_URL       ?= $(HOMEPAGE)/releases/download/$(VERSION)
RELEASE_DIR       ?= bin/release/$(VERSION)
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
# The images to build; a target this Makefile lacks is skipped with a message.
RELEASE_IMAGES    ?= image image-fence-agents
CYCLONEDX_GOMOD   := github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
# The Helm the chart's tests use (internal/testbed/cluster.HelmModule).
HELM_MODULE       := helm.sh/helm/v3/cmd/helm@v3.22.0
RELEASE_WORK      := bin/release-work/$(VERSION)
# Every file's time: the commit's.
RELEASE_MTIME     := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
.PHONY: release
release: ## the release folder bin/release/VERSION: linux amd64/arm64 archives, both images (OCI archives), the chart, SBOMs, SHA256SUMS, the krew manifest
	@case "$(VERSION)" in *dirty*) echo "warning: the tree has uncommitted changes; $(VERSION) cannot be rebuilt from a commit";; esac
	rm -rf $(RELEASE_DIR) $(RELEASE_WORK)
	@mkdir -p $(RELEASE_DIR) $(RELEASE_WORK)
	$(GO) build -o $(RELEASE_WORK)/release ./hack/release
	GOBIN=$(CURDIR)/$(RELEASE_WORK) $(GO) install $(CYCLONEDX_GOMOD)
	@set -e; mtime=$(RELEASE_MTIME); \
	for platform in $(RELEASE_PLATFORMS); do \
	  os=$${platform%%/*}; arch=$${platform#*/}; bin=$(RELEASE_WORK)/$$os-$$arch/fenced; \
	  echo "building fenced for $$platform"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w -buildid= $(LDFLAGS)" -o $$bin ./cmd/fenced; \
	  $(RELEASE_WORK)/release archive -binary $$bin -platform $$platform -version $(VERSION) -mtime $$mtime -out $(RELEASE_DIR) LICENSE README.md; \
	  GOOS=$$os GOARCH=$$arch $(RELEASE_WORK)/cyclonedx-gomod bin -json -noserial -notimestamp -version $(VERSION) \
	    -output $(RELEASE_DIR)/fenced-$(VERSION)-$$os-$$arch.cdx.json $$bin; \
	done
	@set -e; mtime=$(RELEASE_MTIME); platforms=$$(echo $(RELEASE_PLATFORMS) | tr ' ' ,); \
	sboms=$$(for p in $(RELEASE_PLATFORMS); do echo $(RELEASE_DIR)/fenced-$(VERSION)-$${p%%/*}-$${p#*/}.cdx.json; done); \
	for target in $(RELEASE_IMAGES); do \
	  if ! grep -q "^$$target:" $(firstword $(MAKEFILE_LIST)); then echo "skipping $$target: this Makefile has no such target"; continue; fi; \
	  case $$target in \
	    image) name=fenced; lock=; \
	      $(MAKE) --no-print-directory image VERSION=$(VERSION) IMAGE_ARCHIVE=$(RELEASE_DIR)/$$name-$(VERSION).oci.tar IMAGE_PLATFORMS=$$platforms \
	        IMAGE_TAG=$(REGISTRY)/$$name:$(VERSION) IMAGE_BINARY=$(RELEASE_WORK)/image/fenced;; \
	    image-fence-agents) name=fenced-fence-agents; lock=$(or $(FENCE_AGENTS_LOCK),hack/image/fence-agents.lock); \
	      $(MAKE) --no-print-directory image-fence-agents VERSION=$(VERSION) FENCE_AGENTS_IMAGE_ARCHIVE=$(RELEASE_DIR)/$$name-$(VERSION).oci.tar IMAGE_PLATFORMS=$$platforms \
	        FENCE_AGENTS_IMAGE_TAG=$(REGISTRY)/$$name:$(VERSION) IMAGE_BINARY=$(RELEASE_WORK)/image/fenced;; \
	    *) echo "release: unknown image target $$target"; exit 1;; \
	  esac; \
	  $(RELEASE_WORK)/release image-sbom -image $(RELEASE_DIR)/$$name-$(VERSION).oci.tar -repository $(REGISTRY)/$$name \
	    -version $(VERSION) -mtime $$mtime $${lock:+-debian-lock $$lock} -out $(RELEASE_DIR)/$$name-$(VERSION).oci.cdx.json $$sboms; \
	done
	@set -e; mtime=$(RELEASE_MTIME); \
	cp -r deploy/helm/fenced $(RELEASE_WORK)/chart; \
	$(RELEASE_WORK)/release chart-values -registry $(REGISTRY) $(RELEASE_WORK)/chart/values.yaml; \
	$(GO) run $(HELM_MODULE) package $(RELEASE_WORK)/chart --version $(patsubst v%,%,$(VERSION)) --app-version $(VERSION) -d $(RELEASE_DIR); \
	$(RELEASE_WORK)/release retar -mtime $$mtime $(RELEASE_DIR)/fenced-$(patsubst v%,%,$(VERSION)).tgz
	$(RELEASE_WORK)/release krew -dir $(RELEASE_DIR) -version $(VERSION) -url $(RELEASE_URL) -homepage $(HOMEPAGE)
	$(RELEASE_WORK)/release sums -dir $(RELEASE_DIR)
	@cd $(RELEASE_DIR) && sha256sum -c --quiet SHA256SUMS && echo && echo "$(RELEASE_DIR):" && find . -type f | sort | xargs ls -l | awk '{printf "  %10d  %s\n", $$5, $$9}'
