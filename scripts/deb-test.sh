#!/usr/bin/env bash
# deb-test.sh - build the Debian package (make deb), install it with one
# dpkg -i on this machine (no systemd as PID 1: the maintainer scripts must
# cope), check what it installed, then dpkg -r and dpkg -P and check what
# each leaves. Needs root; without it, skips outside CI and fails in CI
# (CI=true). Refuses to run where a package named logagg is already
# installed. Usage: scripts/deb-test.sh [PACKAGE.deb]
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "deb-test: FAIL: $*" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
	[ "${CI:-}" = true ] && fail "needs root"
	echo "deb-test: skipped: needs root" >&2
	exit 0
fi
if dpkg-query -W -f='${Status}' logagg 2>/dev/null | grep -q installed; then
	fail "a package logagg is already installed here; not touching it"
fi

deb=${1:-}
if [ -z "$deb" ]; then
	rm -f dist/logagg_*.deb
	make -s deb >&2
	deb=$(ls dist/logagg_*.deb)
fi
user_existed=0
getent passwd logagg >/dev/null && user_existed=1
cleanup() {
	dpkg -P logagg >/dev/null 2>&1 || true
	if [ "$user_existed" = 0 ]; then
		deluser --system --quiet logagg >/dev/null 2>&1 || true
		delgroup --system --quiet logagg >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

echo "deb-test: dpkg -i $deb" >&2
dpkg -i "$deb" >&2 || fail "dpkg -i failed"

for f in /usr/lib/logagg/aggregator /usr/lib/logagg/producer /usr/lib/logagg/ipcbench \
	/lib/systemd/system/logagg.service /lib/systemd/system/logagg.socket \
	/lib/systemd/system/logagg-devlog.socket /lib/systemd/system/logagg-journal.socket \
	/etc/logagg/logagg.yaml /usr/share/doc/logagg/README.md /usr/share/doc/logagg/docs/service.md; do
	[ -f "$f" ] || fail "$f not installed"
done
[ "$(readlink /usr/bin/aggregator)" = /usr/lib/logagg/aggregator ] || fail "/usr/bin/aggregator is not the symlink"
[ -x /usr/bin/ipcbench ] || fail "/usr/bin/ipcbench missing"
dpkg-query -W -f='${Conffiles}\n' logagg | grep -q '/etc/logagg/logagg.yaml' || fail "/etc/logagg/logagg.yaml is not a conffile"

IFS=: read -r _ _ uid gid _ home shell < <(getent passwd logagg) || fail "no user logagg"
[ "$uid" -lt 1000 ] || fail "logagg is not a system user (uid $uid)"
[ "$(getent group logagg | cut -d: -f3)" = "$gid" ] || fail "logagg's primary group is not logagg"
[ "$shell" = /usr/sbin/nologin ] || fail "logagg's shell is $shell"
[ "$home" = /nonexistent ] || fail "logagg's home is $home"
[ "$(stat -c '%U:%G %a' /var/log/logagg)" = "logagg:adm 2750" ] || fail "/var/log/logagg is $(stat -c '%U:%G %a' /var/log/logagg)"

# The installed configuration is valid where the group logagg exists.
/usr/bin/aggregator check-config /etc/logagg/logagg.yaml >&2 || fail "the installed configuration does not pass check-config"
# The daemon runs as logagg and writes where the unit lets it.
out=$(setpriv --reuid=logagg --regid=logagg --init-groups /usr/bin/aggregator --listen "unixgram:///var/log/logagg/t.sock" \
	--output /var/log/logagg/t.jsonl --drain-timeout 2s 2>&1 & pid=$!
	for _ in $(seq 100); do [ -S /var/log/logagg/t.sock ] && break; sleep 0.05; done
	logger -u /var/log/logagg/t.sock "deb-test" && for _ in $(seq 100); do grep -q deb-test /var/log/logagg/t.jsonl 2>/dev/null && break; sleep 0.05; done
	kill -TERM $pid; wait $pid; echo "exit $?")
echo "$out" | grep -q "exit 0" || fail "the installed aggregator did not run as logagg: $out"
grep -q '"message":"deb-test"' /var/log/logagg/t.jsonl || fail "no record written as logagg"
[ "$(stat -c %G /var/log/logagg/t.jsonl)" = adm ] || fail "output not in group adm"

echo "deb-test: dpkg -r logagg" >&2
dpkg -r logagg >&2 || fail "dpkg -r failed"
[ ! -e /usr/lib/logagg/aggregator ] && [ ! -e /usr/bin/aggregator ] || fail "binaries left after dpkg -r"
[ ! -e /lib/systemd/system/logagg.service ] || fail "unit left after dpkg -r"
[ -f /etc/logagg/logagg.yaml ] || fail "dpkg -r removed the configuration (a conffile stays until purge)"
getent passwd logagg >/dev/null || fail "dpkg -r removed the user"

echo "deb-test: dpkg -P logagg" >&2
dpkg -P logagg >&2 || fail "dpkg -P failed"
[ ! -e /etc/logagg ] || fail "/etc/logagg left after purge"
[ ! -e /var/log/logagg ] || fail "/var/log/logagg left after purge"
echo "deb-test: ok" >&2
