#!/usr/bin/env bash
# launch-producers.sh - start N producers against the aggregator and report how many failed.
#
#   bash launch-producers.sh [transport] [size] [count] [-- extra producer flags]
#
# Defaults: unixsock 100 5, as in the seed. transport is one of unixsock,
# unixgram, tcp, udp, fifo, shm, mq. Extra flags after "--" go to every
# producer (for example: -- --seq --rate 1000 --duration 10s).
# Uses ./bin/producer if it exists, else builds ./cmd/producer once.
set -u

transport=${1:-unixsock}
size=${2:-100}
count=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
if [ "${1:-}" = "--" ]; then shift; fi

case "$count" in ''|*[!0-9]*) echo "launch-producers: count must be a number, got '$count'" >&2; exit 2;; esac

cd "$(dirname "$0")" || exit 2

tmp=""
if [ -x ./bin/producer ]; then
	producer=./bin/producer
else
	# Build once rather than "go run" N times: N concurrent compiles would
	# skew the start times of the producers by seconds.
	tmp=$(mktemp -d) || exit 2
	trap 'rm -rf "$tmp"' EXIT
	if ! go build -o "$tmp/producer" ./cmd/producer; then
		echo "launch-producers: could not build ./cmd/producer" >&2
		exit 2
	fi
	producer="$tmp/producer"
fi

echo "launch-producers: starting $count producers: $producer $transport $size $*" >&2
pids=()
for i in $(seq 1 "$count"); do
	"$producer" --source "producer-$i" "$@" "$transport" "$size" &
	pids+=("$!")
done

failed=0
for pid in "${pids[@]}"; do
	if ! wait "$pid"; then
		failed=$((failed + 1))
	fi
done

echo "launch-producers: $count producers, $failed failed" >&2
[ "$failed" -eq 0 ]
