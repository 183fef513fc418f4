# The two commands of the README:
#   make demo   builds everything, runs the aggregator on all five transports
#               with producers on each, and prints the per-transport table
#   make test   runs every test (what CI runs)
GO      ?= go
BIN     := bin
GOFLAGS ?=

.PHONY: all setup build demo test test-short lint bench lab fuzz deb clean

all: build

setup:
	bash scripts/setup.sh

build:
	mkdir -p $(BIN)
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

demo: setup build
	$(BIN)/ipcbench demo

test: setup build lint
	bash scripts/test.sh

# Static checks (.golangci.yml: vet, staticcheck, errorlint and the depguard
# rules that lock the package layering). golangci-lint is built once from
# the Go module proxy at a pinned version into .cache/tools.
GOLANGCI_VERSION ?= v2.15.0
GOLANGCI         := .cache/tools/golangci-lint
lint:
	@test -x $(GOLANGCI) || GOBIN=$(CURDIR)/.cache/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	$(GOLANGCI) run --timeout 15m ./...

# Unit tests only: no root, broker or browser needed.
test-short: build
	$(GO) test -short -count=1 ./...

# The interim throughput benchmark of the core issue: every seed transport,
# 1 and 4 producers, 100 B and 1 KiB, one write per record.
bench: build
	$(BIN)/ipcbench throughput --transport unixsock,tcp,unixgram,udp,fifo --size 100,1024 --producers 1,4

# Every fuzz target for FUZZTIME each (go test allows one target per run).
# What they find is added to the package's testdata/fuzz corpus by go test
# when it fails; copy interesting finds there to keep them.
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	internal/framing:FuzzStream \
	internal/shmring:FuzzPoll \
	internal/segment:FuzzLoadCheckpoint \
	internal/record:FuzzAppend internal/record:FuzzSyslog internal/record:FuzzRFC3164 \
	internal/record:FuzzScanObjectMatchesNested internal/record:FuzzPaths \
	internal/rules:FuzzEditsKeepJSON \
	internal/transport/file:FuzzLines internal/transport/file:FuzzContainer \
	internal/transport/file:FuzzPayload internal/transport/file:FuzzMultiline \
	internal/transport/journal:FuzzDecode internal/transport/journal:FuzzRender \
	internal/jsonstr:FuzzAppendEscaped \
	internal/transport/otlp:FuzzDecode internal/transport/otlp:FuzzJSONRequest \
	internal/forward/otlp:FuzzLineEncoder
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz: $$name in ./$$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$pkg; done

# The whole lab in one command, with an HTML report.
lab: setup build
	$(BIN)/ipcbench all --quick -o report.html

# The Debian package (dist/logagg_VERSION_ARCH.deb): binaries, systemd
# units, /etc/logagg/logagg.yaml; see contrib/deb. nfpm is built once from
# the Go module proxy at a pinned version (v2.43.0: later ones need
# modules the proxy does not serve) into .cache/tools.
NFPM_VERSION ?= v2.43.0
NFPM         := .cache/tools/nfpm
DEB_VERSION  ?= 0.1.0+git$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
deb: build
	@test -x $(NFPM) || GOBIN=$(CURDIR)/.cache/tools $(GO) install github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
	mkdir -p dist
	LOGAGG_VERSION=$(DEB_VERSION) LOGAGG_ARCH=$$($(GO) env GOARCH) $(NFPM) package --config contrib/deb/nfpm.yaml --packager deb --target dist/

clean:
	rm -rf $(BIN) dist report.html
