#!/usr/bin/env bash
# setup.sh - install everything the demo, the lab and the tests need on a
# fresh Debian 12 machine of this kind (run as root). Idempotent: a second run
# only checks.
#   Debian packages: util-linux (logger), bpftrace, rsyslog, chromium, gcc, iproute2,
#                   nftables (bufsweep's packet-loss rows),
#                   systemd (systemd-socket-activate, systemd-analyze: tests only),
#                   systemd-journal-remote (writes journal files for the journal:// tests),
#                   sockperf (the independent check of ipcbench latency: tests only)
#   syslog-ng:      unpacked into a private prefix (it conflicts with rsyslog as a package)
#   Go modules:     go mod download
#   Kafka:          jars fetched from Maven Central by scripts/kafka.sh fetch
#   OpenTelemetry:  the test Collector (contrib/otelcol, built from the module
#                   proxy into .cache/tools/otelcol-logagg) and a Python venv
#                   with the OpenTelemetry SDK and its OTLP exporters
#                   ($CACHE/otel-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${LOGAGG_CACHE:-$HOME/.cache/logagg}"
mkdir -p "$CACHE"

need_pkgs=()
for p in util-linux bpftrace rsyslog chromium gcc make iproute2 nftables procps curl systemd systemd-journal-remote sockperf \
	libivykis0 libpcre3 libnet1 libwrap0 libjson-c5; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need_pkgs+=("$p")
done
if [ "${#need_pkgs[@]}" -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: need root to install: ${need_pkgs[*]}" >&2
		exit 1
	fi
	echo "setup: apt-get install ${need_pkgs[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

# syslog-ng conflicts with rsyslog as a Debian package, so its package is
# unpacked into a private prefix instead (its libraries install normally).
SNG="$CACHE/syslog-ng"
if [ ! -x "$SNG/usr/sbin/syslog-ng" ]; then
	echo "setup: unpacking syslog-ng-core into $SNG" >&2
	tmp=$(mktemp -d)
	chmod 755 "$tmp"
	(cd "$tmp" && apt-get download -qq syslog-ng-core 2>/dev/null)
	mkdir -p "$SNG"
	dpkg-deb -x "$tmp"/syslog-ng-core_*.deb "$SNG"
	rm -rf "$tmp"
fi
if ! LD_LIBRARY_PATH="$SNG/usr/lib/syslog-ng" "$SNG/usr/sbin/syslog-ng" --version >/dev/null 2>&1; then
	echo "setup: syslog-ng in $SNG does not run" >&2
	LD_LIBRARY_PATH="$SNG/usr/lib/syslog-ng" ldd "$SNG/usr/sbin/syslog-ng" | grep "not found" >&2 || true
	exit 1
fi

if command -v go >/dev/null; then
	go mod download
fi

# The OpenTelemetry Collector the OTLP tests and benchmarks compare with and
# forward to: a module of its own (its dependency graph stays out of the
# aggregator's go.mod), rebuilt when its sources are newer than the binary.
OTELCOL=.cache/tools/otelcol-logagg
if command -v go >/dev/null && { [ ! -x "$OTELCOL" ] || [ -n "$(find contrib/otelcol -newer "$OTELCOL" -type f)" ]; }; then
	echo "setup: building the test OpenTelemetry Collector into $OTELCOL" >&2
	mkdir -p .cache/tools
	(cd contrib/otelcol && go build -o "../../$OTELCOL" .)
fi

# Python's OpenTelemetry SDK and OTLP exporters (gRPC and HTTP), for the
# receivers' tests with a client nobody here wrote.
OTELPY="$CACHE/otel-venv"
OTELPY_PKGS="opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2"
if ! "$OTELPY/bin/python" -c "import opentelemetry.sdk._logs, opentelemetry.exporter.otlp.proto.grpc._log_exporter, opentelemetry.exporter.otlp.proto.http._log_exporter" 2>/dev/null; then
	echo "setup: installing the OpenTelemetry Python SDK into $OTELPY" >&2
	python3 -m venv "$OTELPY"
	# shellcheck disable=SC2086
	"$OTELPY/bin/pip" install -q $OTELPY_PKGS >&2
fi

# Kafka jars from Maven Central (cached; a no-op once present)
scripts/kafka.sh fetch >&2

# tracefs for bpftrace
if [ -d /sys/kernel/tracing ] && [ ! -e /sys/kernel/tracing/trace ] && [ "$(id -u)" -eq 0 ]; then
	mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
fi
echo "setup: ok" >&2
