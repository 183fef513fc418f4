#!/usr/bin/env bash
# filebench.sh - file tail -> JSON lines: logagg's file:// input against
# rsyslog's imfile, reading the same file, side by side in one run.
#
# Usage: scripts/filebench.sh [LINES] [RUNS]     (default 3000000 lines of 100 B, 3 runs)
#
# Writes LINES numbered 100-byte lines into one file, then for each run
# starts each reader on it from its start and waits until its output
# holds every line: logagg (bin/aggregator --listen file://F?from=start,
# output a JSON-lines file, --fsync never) and rsyslog (rsyslogd -n with
# imfile from the start and omfile with a JSON template, the same shape of
# record: {"message":…}). Reported per reader: lines/s over the whole read
# and CPU per line (utime+stime of the process from /proc/PID/stat when
# the last line is out). Run it on an idle machine: lines/s moves with
# other load; CPU per line much less. docs/benchmarks.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
LINES=${1:-3000000}
RUNS=${2:-3}
RSYSLOGD=${RSYSLOGD:-/usr/sbin/rsyslogd}
command -v "$RSYSLOGD" >/dev/null || { echo "filebench: rsyslogd not found (apt-get install rsyslog)" >&2; exit 1; }
mkdir -p bin && go build -o bin/ ./cmd/aggregator
W=$(mktemp -d /tmp/filebench.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
TCK=$(getconf CLK_TCK)
F=$W/app.log
python3 - "$F" "$LINES" <<'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "wb", buffering=1 << 20) as f:
    for i in range(n):
        pre = b"seq=%010d " % i
        f.write(pre + bytes(97 + (i + j) % 26 for j in range(len(pre), 99)) + b"\n")
EOF
cat "$F" >/dev/null # in the page cache for both

cpu_s() { awk -v t="$TCK" '{print ($14+$15)/t}' "/proc/$1/stat"; }

# wait_lines PID FILE N START: waits until the last line of FILE is the
# file's last line (seq N-1: one file is read in order), checks FILE has N
# lines, and prints the seconds since START.
wait_lines() {
	local pid=$1 out=$2 n=$3 start=$4 last
	last=$(printf 'seq=%010d' $((n - 1)))
	while :; do
		if [ -f "$out" ] && tail -c 400 "$out" | grep -q "$last"; then break; fi
		kill -0 "$pid" 2>/dev/null || { echo "filebench: reader $pid died" >&2; exit 1; }
		sleep 0.02
	done
	echo "$(date +%s.%N) - $start" | bc
	local got; got=$(wc -l <"$out")
	[ "$got" -ge "$n" ] || { echo "filebench: $out has $got lines, want $n" >&2; exit 1; }
}

run_logagg() {
	local d=$W/logagg.$1
	mkdir -p "$d"
	local start; start=$(date +%s.%N)
	bin/aggregator --listen "file://$F?from=start" --output "$d/out.jsonl" --fsync never --state-dir "$d" \
		--max-size 0 2>"$d/log" &
	local pid=$!
	PIDS+=("$pid")
	local secs; secs=$(wait_lines "$pid" "$d/out.jsonl" "$LINES" "$start")
	local cpu; cpu=$(cpu_s "$pid")
	kill "$pid"; wait "$pid" 2>/dev/null || true
	report logagg "$secs" "$cpu"
}

run_rsyslog() {
	local d=$W/rsyslog.$1
	mkdir -p "$d/work"
	cat >"$d/rsyslog.conf" <<EOF
global(workDirectory="$d/work")
module(load="imfile" mode="inotify")
template(name="json" type="list") {
  constant(value="{\"message\":\"") property(name="msg" format="json") constant(value="\"}\n")
}
input(type="imfile" File="$F" Tag="app" freshStartTail="off" readMode="0")
action(type="omfile" file="$d/out.jsonl" template="json")
EOF
	local start; start=$(date +%s.%N)
	"$RSYSLOGD" -n -f "$d/rsyslog.conf" -i "$d/rsyslog.pid" 2>"$d/log" &
	local pid=$!
	PIDS+=("$pid")
	local secs; secs=$(wait_lines "$pid" "$d/out.jsonl" "$LINES" "$start")
	local cpu; cpu=$(cpu_s "$pid")
	kill "$pid"; wait "$pid" 2>/dev/null || true
	report rsyslog "$secs" "$cpu"
}

report() {
	awk -v r="$1" -v s="$2" -v c="$3" -v n="$LINES" \
		'BEGIN { printf "%-8s %10.0f lines/s  %7.0f ns CPU/line  (%.2f s, %.2f s CPU)\n", r, n/s, c*1e9/n, s, c }'
}

echo "filebench: $LINES lines of 100 B, $RUNS runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$RUNS"); do
	run_logagg "$i"
	run_rsyslog "$i"
done
