#!/usr/bin/env bash
# test.sh - run every test the way CI does: build the binaries, build and
# install the Debian package (scripts/deb-test.sh), start a real
# Kafka broker on loopback, run `go test -race` over the whole module, stop
# the broker. Assumes scripts/setup.sh has run (make test does that).
set -euo pipefail
cd "$(dirname "$0")/.."
export LOGAGG_BIN_DIR="$PWD/bin"
mkdir -p "$LOGAGG_BIN_DIR"
go build -o "$LOGAGG_BIN_DIR/" ./cmd/...

# The Debian package: make deb, dpkg -i, checks, dpkg -r, dpkg -P (root).
bash scripts/deb-test.sh

if [ -d /sys/kernel/tracing ] && [ ! -e /sys/kernel/tracing/trace ] && [ "$(id -u)" -eq 0 ]; then
	mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
fi

# --port auto: ports no other test run or process holds (see kafka.sh).
KDIR=$(mktemp -d /tmp/logagg-test-kafka.XXXXXX)
cleanup() { scripts/kafka.sh stop --dir "$KDIR" >/dev/null 2>&1 || true; rm -rf "$KDIR"; }
trap cleanup EXIT
LOGAGG_KAFKA_BROKERS=$(scripts/kafka.sh start --dir "$KDIR" --port auto | tail -1)
export LOGAGG_KAFKA_BROKERS
echo "test: kafka broker at $LOGAGG_KAFKA_BROKERS" >&2

# One package at a time keeps the timing-sensitive system tests (bpftrace,
# fork/exec of producers, brokers) from fighting over the machine's 2 vCPUs.
go test -race -count=1 -p 1 -timeout 40m ./...
