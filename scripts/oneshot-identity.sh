#!/usr/bin/env bash
# oneshot-identity.sh [AGGREGATOR] [RUNS]: how many records from one-shot
# util-linux `logger` runs over loopback TCP and UDP carry the sender's pid
# (found by the aggregator's peer lookup while the short-lived process is
# still alive). Prints "tcp HIT/N udp HIT/N" per run.
set -euo pipefail
bin=${1:-bin/aggregator}; runs=${2:-3}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 20000))
for _ in $(seq "$runs"); do
	out=$dir/out.jsonl; rm -f "$out"
	"$bin" --listen "tcp://127.0.0.1:$port" --listen "udp://127.0.0.1:$port" --output "$out" --fsync never 2>"$dir/log" &
	apid=$!
	for _ in $(seq 100); do grep -q "listening" "$dir/log" 2>/dev/null && break; sleep 0.05; done
	for i in $(seq 15); do
		logger -T -n 127.0.0.1 -P "$port" "tcp one-shot $i"
		logger -d -n 127.0.0.1 -P "$port" "udp one-shot $i"
	done
	for _ in $(seq 100); do [ "$(wc -l <"$out" 2>/dev/null || echo 0)" -ge 30 ] && break; sleep 0.05; done
	kill "$apid"; wait "$apid" || true
	python3 - "$out" <<'PY'
import json, sys
c = {'tcp': [0, 0], 'udp': [0, 0]}
for l in open(sys.argv[1]):
    a = json.loads(l)['agg']
    c[a['transport']][0] += 1
    c[a['transport']][1] += 'pid' in a.get('peer', {})
print('tcp %d/%d udp %d/%d' % (c['tcp'][1], c['tcp'][0], c['udp'][1], c['udp'][0]))
PY
done
