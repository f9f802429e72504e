# opkit's build. `make demo` and `make test` work on a fresh machine with Go
# 1.26+, make and the Go module proxy: they build what they need (make test
# also installs Debian's chromium for the browser tests, and Debian's
# postgresql for the PostgreSQL archive's tests).

GO                     ?= go
BIN                    := $(CURDIR)/bin
OPKIT                  := $(BIN)/opkit
GOLANGCI_LINT_VERSION  := v2.15.0
GOLANGCI_LINT          := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# go test's timeout per package binary; integration packages start a plane.
TEST_TIMEOUT           ?= 30m

.PHONY: all build plane browser postgresql demo test vet lint unit usermodule fmt bench clean

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

## test: vet, lint and every test (unit and integration, browser tests in
## headless chromium, the archive's conformance suite on SQLite and on a
## real PostgreSQL, and testdata/usermodule: pkg/opkittest used from
## another module), race detector on
test: plane browser postgresql vet lint unit usermodule

vet:
	$(GO) vet ./...

lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...

unit:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# A module of its own (the go tool skips testdata/ in ./...): an operator's
# tests written against pkg/opkittest alone, with a replace to this checkout.
# -mod=mod: it takes this checkout's requirements as they are, so that a
# dependency added here does not fail it for an untidy go.mod.
usermodule:
	cd testdata/usermodule && $(GO) test -mod=mod -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## bench: opkit against a hand-written controller-runtime operator and the
## API server's ceiling (about 95 min; BENCH_FLAGS=-memory-runs=1: 65 min);
## prints a table and writes bench/latest.json.
## Choose with BENCH_FLAGS, e.g. BENCH_FLAGS="-scenarios drain,idle -runs 1"
bench: plane
	$(GO) run ./bench -json bench/latest.json $(BENCH_FLAGS)

## fmt: format the code as the linters want it
fmt: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) fmt ./...

$(GOLANGCI_LINT):
	@mkdir -p $(BIN)/.install
	GOBIN=$(BIN)/.install $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.install/golangci-lint $@

clean:
	-$(OPKIT) cluster stop 2>/dev/null
	rm -rf $(BIN)
