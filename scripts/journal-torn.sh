#!/bin/bash
# journal-torn.sh AGGREGATOR [RUNS]: systemd-journal-remote appends 300,000
# entries (150 runs of 2,000) to a journal file while the aggregator
# follows it; per run, prints how many entries journalctl gave without all
# their fields (read again whole, ADR 0066), how many did not add up again,
# and how many records carry their message. About 12 s a run.
set -eu
agg=${1:?usage: journal-torn.sh AGGREGATOR [RUNS]}
runs=${2:-1}
remote=/lib/systemd/systemd-journal-remote
for run in $(seq "$runs"); do
	d=$(mktemp -d /tmp/journal-torn.XXXXXX)
	mkdir "$d/j"
	"$agg" --listen "journal://$d/j?from=start" --output "$d/out.jsonl" --fsync never --state-dir "$d/state" 2> "$d/agg.log" &
	pid=$!
	python3 - "$d/j/system.journal" "$remote" <<'PY'
import subprocess, sys, time
path, remote = sys.argv[1], sys.argv[2]
t, n = int(time.time() * 1e6), 0
for _ in range(150):
    b = []
    for _ in range(2000):
        t += 1
        b.append(f"__REALTIME_TIMESTAMP={t}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n"
                 f"MESSAGE=entry {n}\nSEQ={n}\nPRIORITY=6\nSYSLOG_IDENTIFIER=app\n_PID=4242\n\n")
        n += 1
    subprocess.run([remote, "--output=" + path, "-"], input="".join(b).encode(), stderr=subprocess.DEVNULL, check=True)
PY
	# Wait (at most a minute) for the last entry in the output.
	for _ in $(seq 600); do
		grep -q '"message":"entry 299999"' "$d"/out.jsonl* 2>/dev/null && break
		sleep 0.1
	done
	kill "$pid"
	wait "$pid" || true
	mended=$(grep -c 'read again whole' "$d/agg.log" || true)
	unverified=$(grep -c "do not add up" "$d/agg.log" || true)
	with=$(cat "$d"/out.jsonl* | grep -c '"message":"entry ' || true)
	echo "run $run: torn and read again whole $mended, unverified $unverified, records with their message $with of 300000"
	rm -rf "$d"
done
