#!/usr/bin/env bash
# bench-ratelimit.sh - what a rate-limited flood costs the other producers:
# a normal producer flat out over a unix stream socket, alone and beside a
# flooding one (another pid, at FLOOD records/s) that a per-pid rate limit
# cuts to BURST records/s. Prints both rates and their ratio, RUNS times
# interleaved, and the aggregator's count of suppressed records.
#   scripts/bench-ratelimit.sh [RUNS] [FLOOD] [BURST]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3} FLOOD=${2:-50000} BURST=${3:-1000} DUR=5s
dir=$(mktemp -d /tmp/lgrl.XXXXXX)
trap 'kill $agg 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/rl.yaml" <<YAML
rules:
  - name: flood
    match: {app: flooder}
    rate_limit: {key: pid, interval: 1s, burst: $BURST}
    route: [default]
YAML
bin/aggregator --config "$dir/rl.yaml" --listen "unix://$dir/s.sock" --output /dev/null --metrics 127.0.0.1:0 2>"$dir/agg.log" &
agg=$!
for _ in $(seq 50); do [ -S "$dir/s.sock" ] && break; sleep 0.1; done
rate() { sed -n 's/.*"rate":\([0-9.]*\).*/\1/p' "$1" | tail -1; }
for r in $(seq "$RUNS"); do
	bin/producer unixsock 100 --addr "unix://$dir/s.sock" --rate 0 --duration $DUR --source normal --json-summary 2>"$dir/alone.json"
	bin/producer unixsock 100 --addr "unix://$dir/s.sock" --rate "$FLOOD" --tick 1ms --duration $DUR --source flooder --json-summary 2>"$dir/flood.json" &
	f=$!
	bin/producer unixsock 100 --addr "unix://$dir/s.sock" --rate 0 --duration $DUR --source normal --json-summary 2>"$dir/beside.json"
	wait $f
	a=$(rate "$dir/alone.json") b=$(rate "$dir/beside.json") fl=$(rate "$dir/flood.json")
	echo "run $r: normal alone $a records/s, beside a flood of $fl records/s: $b records/s, ratio $(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.3f", b/a}')"
done
m=$(grep -o 'metrics on http://[^ ]*' "$dir/agg.log" | cut -d' ' -f3)
curl -s "$m" | grep '^logagg_rule_suppressed_total'
