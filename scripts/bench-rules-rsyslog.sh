#!/usr/bin/env bash
# bench-rules-rsyslog.sh - what Debian's rules cost us and rsyslog, side by
# side: the same producer (RFC 3164 lines of 100 B, user.notice, 32 per
# write over a unix stream socket, flat out for 5 s) into
#   - the aggregator with one output, and with contrib/bench/debian-rules.yaml
#     (every record to the main file and to user.log), through ipcbench;
#   - rsyslogd with one omfile, and with Debian 12's six selectors (every
#     record to syslog and user.log), the same JSON template ipcbench gives it.
# Prints records/s (records written over the time from the producer's start
# until the last is in the file) and the daemon's CPU per record, RUNS rounds
# interleaved.
#   scripts/bench-rules-rsyslog.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
dir=$(mktemp -d /tmp/lgrr.XXXXXX)
trap 'rm -rf "$dir"' EXIT
export LOGAGG_BIN_DIR=$PWD/bin

ours() { # ours NAME [ipcbench flags]
	local name=$1
	shift
	bin/ipcbench throughput --transport unixsock --size 100 --producers 1 --buffer 3200 --format rfc3164 \
		--duration 5s --runs 1 --vs none --no-progress --json "$dir/$name.json" "$@" >/dev/null 2>&1
	python3 - "$dir/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))['rows'][0]
print(f"logagg  {sys.argv[2]:7} {r['records_per_s']/1e3:6.0f}k records/s, daemon {r['daemon_cpu_ns_per_record']:5.0f} ns/record")
PY
}

rsyslog() { # rsyslog one|debian
	local mode=$1 d=$dir/rs-$1
	mkdir -p "$d"
	cat >"$d/rs.conf" <<EOF
global(workDirectory="$d" maxMessageSize="64k")
module(load="imptcp")
template(name="json" type="string"
  string="{\"timestamp\":\"%timereported:::date-rfc3339%\",\"host\":\"%hostname%\",\"source\":\"%programname%\",\"level\":\"%syslogseverity-text%\",\"message\":\"%msg:::json%\"}\n")
input(type="imptcp" path="$d/sock" unlink="on")
EOF
	if [ "$mode" = one ]; then
		echo "action(type=\"omfile\" file=\"$d/syslog\" template=\"json\")" >>"$d/rs.conf"
	else
		cat >>"$d/rs.conf" <<EOF
*.*;auth,authpriv.none action(type="omfile" file="$d/syslog" template="json")
auth,authpriv.* action(type="omfile" file="$d/auth.log" template="json")
cron.* action(type="omfile" file="$d/cron.log" template="json")
kern.* action(type="omfile" file="$d/kern.log" template="json")
mail.* action(type="omfile" file="$d/mail.log" template="json")
user.* action(type="omfile" file="$d/user.log" template="json")
EOF
	fi
	/usr/sbin/rsyslogd -n -f "$d/rs.conf" -i "$d/pid" 2>/dev/null &
	local rp=$!
	for _ in $(seq 50); do [ -S "$d/sock" ] && break; sleep 0.1; done
	local t0 s0 t1 s1 sent
	t0=$(awk '{print $14+$15}' /proc/$rp/stat)
	s0=$(date +%s.%N)
	bin/producer unixsock 100 --addr "unix://$d/sock" --format rfc3164 --rate 0 --buffer 3200 --duration 5s \
		--json-summary 2>"$d/sum.json"
	sent=$(sed -n 's/.*"sent":\([0-9]*\).*/\1/p' "$d/sum.json")
	until [ "$(wc -l <"$d/syslog")" -ge "$sent" ]; do sleep 0.05; done
	s1=$(date +%s.%N)
	t1=$(awk '{print $14+$15}' /proc/$rp/stat)
	if [ "$mode" = debian ] && [ "$(wc -l <"$d/user.log")" -ne "$sent" ]; then
		echo "rsyslog wrote $(wc -l <"$d/user.log") of $sent records to user.log" >&2
	fi
	kill $rp
	wait $rp 2>/dev/null || true
	awk -v m="$mode" -v n="$sent" -v s="$s1-$s0" -v c="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" \
		'BEGIN{split(s,a,"-"); printf "rsyslog %-7s %6.0fk records/s, daemon %5.0f ns/record\n", m, n/(a[1]-a[2])/1e3, c/hz*1e9/n}'
	rm -rf "$d"
}

for r in $(seq "$RUNS"); do
	echo "round $r"
	ours none
	ours rules --config contrib/bench/debian-rules.yaml
	rsyslog one
	rsyslog debian
done
