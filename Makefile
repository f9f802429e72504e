# opkit's build. `make demo` and `make test` work on a fresh machine with Go
# 1.26+, make and the Go module proxy: they build what they need (make test
# also installs Debian's chromium for the browser tests, Debian's
# postgresql for the PostgreSQL archive's tests, Debian's jq for opkit
# init's bash handler, and TypeScript's compiler and pyright from the npm
# registry, with the machine's Node.js, for the handler SDKs' type checks).

GO                     ?= go
BIN                    := $(CURDIR)/bin
OPKIT                  := $(BIN)/opkit
GOLANGCI_LINT_VERSION  := v2.15.0
# opkit's cache on this machine (devcluster.DefaultCacheDir: the plane's
# binaries are there too): golangci-lint is built once a machine, not once
# a checkout (some minutes of CPU with an empty build cache).
OPKIT_CACHE_DIR        ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/opkit
GOLANGCI_LINT          := $(OPKIT_CACHE_DIR)/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)
# The type checkers the handler SDKs' tests run (sdk/, opkit init's
# projects): TypeScript's compiler and pyright, from the npm registry,
# installed once a machine with the machine's Node.js (make sdktools).
TYPESCRIPT_VERSION     := 5.9.3
PYRIGHT_VERSION        := 1.1.414
SDK_TOOLS_DIR          := $(OPKIT_CACHE_DIR)/tools/sdk-typescript-$(TYPESCRIPT_VERSION)-pyright-$(PYRIGHT_VERSION)
OPKIT_TSC              ?= $(SDK_TOOLS_DIR)/node_modules/.bin/tsc
OPKIT_PYRIGHT          ?= $(SDK_TOOLS_DIR)/node_modules/.bin/pyright
export OPKIT_TSC OPKIT_PYRIGHT
# go test's timeout per package binary; integration packages start a plane.
TEST_TIMEOUT           ?= 30m
# The machine's cores, which the test run is sized from.
CORES                  := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
# How many test binaries run at once: one a core. Most of an integration
# package's time is waiting, not CPU, but each binary with a plane of its
# own brings etcd, a kube-apiserver and engines with it: on 2 cores, more
# binaries at once made each slower than they saved (docs/testing.md).
TEST_P                 ?= $(CORES)
# How many scenarios opkit test runs at once, beside the unit tests.
SCENARIOS_P            ?= $(CORES)
# The tests' waits are this many times longer than on a quiet machine
# (pkg/opkittest, and opkit test's expect steps): a wait that its
# condition ends costs nothing more; only a failing test waits the longer.
OPKIT_TEST_TIMEOUT_SCALE ?= 3
export OPKIT_TEST_TIMEOUT_SCALE
# Every plane the tests start, by whichever command, is lean
# (devcluster.Options.Lean): API Priority and Fairness off and
# kube-controller-manager without the controllers no test here uses; a
# plane's start takes a fifth less CPU, and make test starts some 120.
OPKIT_PLANE_LEAN       ?= 1
export OPKIT_PLANE_LEAN
# The processes of make test's second phase (the test binaries, the
# engines and handlers they start, each plane's etcd and kube-apiserver)
# collect their garbage at five times their live heap, not Go's default
# of two: internal/plan's tests with their plane took 11% less CPU, at
# half as much memory again at their peak (two runs each, 2026-12-03).
# Not the compile phase, whose compilers and linter beside each other
# would need several times the memory; not make bench, whose figures are
# for Go's default.
TEST_GOGC              ?= 400
# A binary built with the race detector sleeps a second at its exit
# (atexit_sleep_ms): each test binary, and each engine or helper process a
# test starts from its own binary, need not (clustertest.Exit says more).
GORACE                 ?= atexit_sleep_ms=0
export GORACE
# The packages whose tests take longest, started first, longest first
# (go test starts them in the order given; ./... adds the rest once each),
# so that none of them starts last and finishes alone. Warm, nothing
# beside it (2026-12-03): cmd/opkit 368 s, engine 340, devcluster 88,
# console 80, archive 45, printer 50, devnode 37, natsjs 43, cli 39,
# aggregate 34; the others less than 25 each.
SLOW_PACKAGES          := ./cmd/opkit ./internal/engine ./internal/devcluster ./internal/console ./internal/archive ./examples/printer ./internal/devcluster/devnode ./internal/source/natsjs ./internal/cli ./internal/aggregate
# Packages whose tests wait more than they compute (conformance 142 s,
# rehearsal 122, kafkasrc 73, warm): tested in the checks' lane once the
# bench's tests and the scenarios are done, while the unit lane is still
# on the rest. With them in the unit lane, the checks' lane ended at the
# middle of the run and the unit lane's last third, two binaries at a
# time, left the cores a third idle: 76% of two cores used over the run,
# 85% with this lane (two warm runs, 2026-12-03).
LATE_PACKAGES          := ./internal/conformance ./internal/manifests/rehearsal ./internal/source/kafkasrc
MODULE                 := github.com/opkit-dev/opkit
# go test links each test binary again at every run (the link is not
# cached): without DWARF (-w) and the symbol table (-s), which nothing in
# a test reads (a panic's stack and the race detector's reports name
# files and lines from the binary's own tables, which stay), a link takes
# a quarter less CPU with -w and a tenth less again with -s (cmd/opkit's,
# three links each); some ninety links a run took 15% of make test's CPU
# (process accounting, 2026-12-03).
TEST_LDFLAGS           ?= -s -w
# Packages whose tests start their own test binary as a handler hundreds
# of times: it is built again without the race detector for that
# (clustertest.HandlerBinary), compiled here beforehand.
HANDLER_PACKAGES       := ./internal/engine ./internal/conformance
# The bench's tests run without the race detector, beside the others
# (benchtests): they check that every scenario measures, on engines and
# baselines that the race detector made several times slower; the code
# they measure has its race-detected tests in its own packages.
BENCH_PACKAGE          := github.com/opkit-dev/opkit/bench

# make image: the platforms, and what the image's labels say. The same
# commit gives the same digest; SOURCE_DATE_EPOCH (the commit's time) dates
# every file. Evaluated only by make image (recursive: no git call otherwise).
IMAGE_PLATFORMS        ?= linux/amd64 linux/arm64
IMAGE_SOURCE           ?= https://github.com/opkit-dev/opkit
IMAGE_REVISION         ?= $(shell git rev-parse HEAD 2>/dev/null)
IMAGE_VERSION          ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
SOURCE_DATE_EPOCH      ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# More flags for cmd/opkit-image, e.g. -ca-certificates FILE.
IMAGE_FLAGS            ?=

.PHONY: all build plane browser postgresql sdktools jq demo test compile compiletests checks vet lint unit late benchtests usermodule helmchart scenarios fmt bench soak churn fuzz fuzzsmoke image clean

all: build

## build: the opkit binary, in bin/
build:
	$(GO) build -o $(OPKIT) ./cmd/opkit

## plane: build (first time, ~5 min) or verify the cached control-plane binaries
plane: build
	$(OPKIT) cluster build >/dev/null

## demo: run the Printer operator on a local control plane with a dev node (Ctrl-C stops it)
demo: plane
	$(OPKIT) dev examples/printer --apply examples/printer/printer.yaml

## browser: Debian's chromium, for the console's browser tests (apt-get
## installs it when it is missing; as root, or with sudo)
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (Debian package) for the console's browser tests"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; }

## postgresql: Debian's postgresql, for the PostgreSQL archive's tests, which
## start their own server from its binaries (apt-get installs it when it is
## missing; as root, or with sudo)
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  echo "installing postgresql (Debian package) for the PostgreSQL archive's tests"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq postgresql >/dev/null; }

## jq: Debian's jq, which the bash handler opkit init writes reads its
## binding context with (apt-get installs it when it is missing)
jq:
	@command -v jq >/dev/null 2>&1 || { \
	  echo "installing jq (Debian package) for opkit init's bash handler"; \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq jq >/dev/null; }

## sdktools: TypeScript's compiler and pyright (npm), for the SDKs' type
## checks (installed once a machine, in opkit's cache)
sdktools:
	@test -x $(OPKIT_TSC) -a -x $(OPKIT_PYRIGHT) || { \
	  echo "installing typescript@$(TYPESCRIPT_VERSION) and pyright@$(PYRIGHT_VERSION) (npm) for the SDKs' type checks"; \
	  mkdir -p $(SDK_TOOLS_DIR) && npm install --prefix $(SDK_TOOLS_DIR) --no-audit --no-fund --silent typescript@$(TYPESCRIPT_VERSION) pyright@$(PYRIGHT_VERSION) >/dev/null; }

## test: vet, lint and every test (unit and integration, browser tests in
## headless chromium, the archive's conformance suite on SQLite and on a
## real PostgreSQL, the Helm chart with Helm's Go library, and
## testdata/usermodule: pkg/opkittest used from
## another module, and the examples' scenarios through opkit test), race
## detector on
##
## In two phases, so that no test waits while a compiler takes the cores:
## first what only needs CPU (every test binary compiled, vet, lint),
## then the tests, the unit tests beside the other modules' and the
## scenarios; each part's output is printed whole when it ends.
test: plane browser postgresql sdktools jq
	$(MAKE) --no-print-directory -j2 --output-sync=target compile
	GOGC=$(TEST_GOGC) $(MAKE) --no-print-directory -j2 --output-sync=target unit checks

# The first phase of make test: every package and test package compiled
# with the race detector into the build cache (go list -export compiles
# without linking: go test links each binary again and does not cache
# the link, so linking here was paid twice), beside vet and lint, and
# what tests would otherwise build while others wait: the Helm chart's
# renderer (go run by the manifests' rehearsal) and the bench's peers
# (shell-operator, built once into the plane's cache).
compile: compiletests lint

compiletests: vet
	$(GO) list -race -test -export -deps -f '' $$($(GO) list ./... | grep -vx '$(BENCH_PACKAGE)') >/dev/null
	$(GO) list -test -export -deps -f '' ./bench $(HANDLER_PACKAGES) >/dev/null
	cd testdata/usermodule && $(GO) list -mod=mod -race -test -export -deps -f '' ./... >/dev/null
	cd deploy/helm && $(GO) list -mod=mod -race -test -export -deps -f '' ./... >/dev/null
	cd deploy/helm && $(GO) build -mod=mod -o /dev/null ./render
	$(GO) run ./bench -prepare-peers

# What make test runs beside unit, in this order: the bench's tests, the
# other modules', the scenarios, then the packages that wait most.
checks:
	$(MAKE) --no-print-directory benchtests usermodule helmchart scenarios late fuzzsmoke

vet:
	$(GO) vet ./...

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

unit:
	$(GO) test -race -count=1 -ldflags='$(TEST_LDFLAGS)' -p $(TEST_P) -timeout $(TEST_TIMEOUT) $(SLOW_PACKAGES) $$($(GO) list ./... | grep -vx -e '$(BENCH_PACKAGE)' $(foreach p,$(LATE_PACKAGES),-e '$(MODULE)/$(p:./%=%)'))

# The checks' lane's last part, one binary at a time (LATE_PACKAGES).
late:
	$(GO) test -race -count=1 -ldflags='$(TEST_LDFLAGS)' -p 1 -timeout $(TEST_TIMEOUT) $(LATE_PACKAGES)

benchtests:
	$(GO) test -count=1 -ldflags='$(TEST_LDFLAGS)' -timeout $(TEST_TIMEOUT) ./bench

# A module of its own (the go tool skips testdata/ in ./...): an operator's
# tests written against pkg/opkittest alone, with a replace to this checkout.
# -mod=mod: it takes this checkout's requirements as they are, so that a
# dependency added here does not fail it for an untidy go.mod.
usermodule:
	cd testdata/usermodule && $(GO) test -mod=mod -race -count=1 -ldflags='$(TEST_LDFLAGS)' -timeout $(TEST_TIMEOUT) ./...

# The Helm chart's tests, with Helm's Go library (no helm binary): a module
# of its own, deploy/helm, so that Helm's dependencies stay out of opkit's
# (deploy/helm/doc.go says why); it uses this checkout through a replace.
helmchart:
	cd deploy/helm && $(GO) test -mod=mod -race -count=1 -ldflags='$(TEST_LDFLAGS)' -timeout $(TEST_TIMEOUT) ./...

# The examples' scenarios (*.test.yaml), run by opkit test as a user runs
# them: a control plane of its own, a scenario a core at a time.
scenarios: build
	$(OPKIT) test -p $(SCENARIOS_P) examples testdata/scenarios

## image: opkit's OCI image, built without Docker (docs/image.md):
## bin/opkit-image/ (an OCI layout) and bin/opkit-image.tar (the same, as an
## oci-archive) for IMAGE_PLATFORMS. A static opkit (CGO_ENABLED=0,
## -trimpath, no VCS stamp, its version set with -X), CA certificates and a
## non-root user, no shell. Prints the digests.
image:
	@set -e; args=; \
	for p in $(IMAGE_PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p#*/}; out=$(BIN)/image/$${os}_$${arch}/opkit; \
	  echo "building opkit $(IMAGE_VERSION) for $$p"; \
	  GOFLAGS=-mod=readonly CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOAMD64=v1 GOARM64=v8.0 \
	    $(GO) build -trimpath -buildvcs=false \
	      -ldflags '-s -w -X github.com/opkit-dev/opkit/internal/cli.Version=$(IMAGE_VERSION)' \
	      -o $$out ./cmd/opkit; \
	  args="$$args $$p=$$out"; \
	done; \
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./cmd/opkit-image \
	  -layout $(BIN)/opkit-image -archive $(BIN)/opkit-image.tar \
	  -source '$(IMAGE_SOURCE)' -revision '$(IMAGE_REVISION)' -version '$(IMAGE_VERSION)' -tag '$(IMAGE_VERSION)' $(IMAGE_FLAGS) $$args

## bench: opkit against a hand-written controller-runtime operator and the
## API server's ceiling (about 95 min; BENCH_FLAGS=-memory-runs=1: 65 min);
## prints a table and writes bench/latest.json.
## Choose with BENCH_FLAGS, e.g. BENCH_FLAGS="-scenarios drain,idle -runs 1"
bench: plane
	$(GO) run ./bench -json bench/latest.json $(BENCH_FLAGS)

## soak: the conformance model's check (internal/conformance, docs/conformance.md)
## against the engine on the local plane for DURATION, with new seeds from
## SEED on; prints the seed of every failure, shrunk, and a report of what
## was tried. KNOWN=0 leaves out the cases of known defects; PARALLEL cases
## play at once (each mostly waits for its engine to be quiet).
SEED     ?= $(shell date +%s)
DURATION ?= 30m
KNOWN    ?= 1
PARALLEL ?= 4
soak: plane
	@echo "make soak SEED=$(SEED) DURATION=$(DURATION)"
	$(GO) test -race -count=1 -timeout 0 -run '^TestConformance$$' ./internal/conformance \
	  -conformance.seed=$(SEED) -conformance.duration=$(DURATION) -conformance.known=$(if $(filter 0,$(KNOWN)),false,true) -conformance.parallel=$(PARALLEL) \
	  -conformance.report=$(BIN)/soak-report.txt; \
	  status=$$?; cat $(BIN)/soak-report.txt 2>/dev/null; exit $$status

## churn: the long soak beside the model's (TestChurn in internal/conformance,
## docs/testing.md): one engine for DURATION under churn (objects created,
## changed and deleted, webhook deliveries, NATS messages, handlers failing
## and retried, its stack restarted now and then), its goroutines, live
## heap and open files sampled at a sixth, a half and the end, and required
## within 10% of each other from 30m on (the heap less client-go's Events
## recorder, which keeps the last minutes' Events by design). The report:
## $(BIN)/churn-report.txt, the engine's heap profiles beside it.
churn: plane
	@echo "make churn DURATION=$(DURATION)"
	$(GO) test -race -count=1 -timeout 0 -run '^TestChurn$$' ./internal/conformance \
	  -churn.duration=$(DURATION) -churn.report=$(BIN)/churn-report.txt; \
	  status=$$?; cat $(BIN)/churn-report.txt 2>/dev/null; exit $$status

## fuzz: each Go fuzz target (a func FuzzX in a _test.go file under api,
## internal or pkg), one after another, for FUZZTIME each, on FUZZPARALLEL
## workers (default: one a core). A finding stops it; go test keeps the
## failing input in the package's testdata/fuzz/FuzzX/, where it stays, a
## seed the package's tests play from then on.
FUZZTIME     ?= 10m
FUZZPARALLEL ?= $(shell nproc)
fuzz:
	$(call fuzz_each,$(FUZZTIME),$(FUZZPARALLEL),10s)

# What make test fuzzes beside its seeds (which go test plays in unit):
# each target for 300 inputs, one worker, no time spent making an input
# found smaller. A count, not a time: go test fails a run whose time ends
# while it still plays the corpus (on a loaded machine, in 3 s), with
# nothing found.
fuzzsmoke:
	$(call fuzz_each,300x,1,0)

define fuzz_each
	@grep -r --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' api internal pkg | sort | while IFS=: read -r file fn; do \
	  target=$${fn#func }; dir=./$$(dirname $$file); echo "fuzz $$target ($$dir, $(1))"; \
	  $(GO) test $$dir -run '^$$' -fuzz "^$$target$$" -fuzztime=$(1) -fuzzminimizetime=$(3) -parallel=$(2) -short || exit 1; \
	done
endef

## fmt: format the code as the linters want it
fmt: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) fmt ./...

$(GOLANGCI_LINT):
	@mkdir -p $(@D)/.install-$(GOLANGCI_LINT_VERSION)
	GOBIN=$(@D)/.install-$(GOLANGCI_LINT_VERSION) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(@D)/.install-$(GOLANGCI_LINT_VERSION)/golangci-lint $@

clean:
	-$(OPKIT) cluster stop 2>/dev/null
	rm -rf $(BIN)
