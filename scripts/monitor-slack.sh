#!/bin/bash
# monitor-slack.sh SLACK_NS WINDOWS [IPCBENCH ARGS...]: runs one ipcbench
# throughput cell (give it a --duration of about 3.3 s × WINDOWS + 3 s) and,
# in its aggregator, sets the timer slack of the Go runtime's monitor
# thread (sysmon: the first thread the runtime creates, the lowest thread
# id after the process's own) to 50 µs (the kernel's default) and SLACK_NS
# in turn, 3 s each. Prints per window the slack, the aggregator's CPU
# ticks per GB written (wchar) and MB/s, then the medians of each side.
# Needs root (another thread's slack needs CAP_SYS_NICE). ADR 0065 has
# what it measured.
set -eu
slack=${1:?usage: monitor-slack.sh SLACK_NS WINDOWS [IPCBENCH ARGS...]}
windows=${2:?usage: monitor-slack.sh SLACK_NS WINDOWS [IPCBENCH ARGS...]}
shift 2
bin=${LOGAGG_BIN_DIR:-$(dirname "$0")/../bin}
if pgrep -x aggregator > /dev/null; then
	echo "an aggregator is already running" >&2
	exit 1
fi
"$bin/ipcbench" throughput --no-progress "$@" > /dev/null 2>&1 &
bench=$!
trap 'kill $bench 2>/dev/null || true' EXIT
pid=""
for _ in $(seq 300); do
	pid=$(pgrep -xo aggregator) && break
	sleep 0.05
done
[ -n "$pid" ] || { echo "no aggregator started" >&2; exit 1; }
sleep 2
monitor=$(ls "/proc/$pid/task" | sort -n | awk -v p="$pid" '$1 > p' | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
wchar() { awk '/^wchar/ {print $2}' "/proc/$pid/io"; }
for w in $(seq "$windows"); do
	s=50000
	[ $((w % 2)) = 0 ] && s=$slack
	echo "$s" > "/proc/$monitor/timerslack_ns"
	sleep 0.3
	t0=$(ticks) c0=$(wchar)
	sleep 3
	t1=$(ticks) c1=$(wchar)
	[ "$c1" -gt "$c0" ] || break
	echo "$s $(((t1 - t0) * 1000000000 / (c1 - c0))) $(((c1 - c0) / 3000000))"
done | tee /dev/stderr | python3 -c '
import statistics, sys
rows = [l.split() for l in sys.stdin][2:]  # the first pair warms up
for side in ("50000", sys.argv[1]):
    r = [x for x in rows if x[0] == side]
    if r:
        print(f"slack {int(side)//1000} us: median {statistics.median(int(x[1]) for x in r)} ticks/GB, "
              f"{statistics.median(int(x[2]) for x in r)} MB/s over {len(r)} windows")
' "$slack"
