#!/usr/bin/env bash
# kafka.sh - run Apache Kafka on loopback, without Docker, for tests and demos.
#
#   scripts/kafka.sh start   [--brokers 1|3] [--dir DIR] [--port P|auto] [--node N] [--fresh]
#   scripts/kafka.sh reserve [--brokers 1|3] [--dir DIR]
#   scripts/kafka.sh stop    [--dir DIR] [--node N] [--kill]
#   scripts/kafka.sh status  [--dir DIR]
#   scripts/kafka.sh fetch                  (download and cache the jars only)
#
# start fetches org.apache.kafka:kafka_2.13 from Maven Central with Maven
# (once, into ${LOGAGG_CACHE:-~/.cache/logagg}/kafka-VERSION/libs), formats
# KRaft storage and starts combined broker+controller JVMs on 127.0.0.1. It
# waits until every broker's port is open AND its log says
# "Kafka Server started" (the port opens ~0.5 s before the broker serves),
# then prints the bootstrap list ("127.0.0.1:19092" or
# "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096") as the last stdout line.
# Progress goes to stderr. A start that fails leaves no broker behind: what
# it launched is killed.
#
# --brokers 3 starts three JVMs forming one KRaft quorum (3 voters), with
# replication factor 3 and min.insync.replicas=2.
# Node i listens on P+2(i-1) (broker) and P+2(i-1)+1 (controller); P is
# --port, $LOGAGG_KAFKA_PORT, the port DIR remembers, or 19092 (clear of the
# aggregator's 9000). P "auto" takes ports that are free and stay so:
# below the kernel's ephemeral range (the kernel gives none of them to a
# socket bound to port 0 or to an outgoing connection), not open, and not
# reserved by another DIR (reservations are symlinks PORT -> DIR in
# /tmp/logagg-kafka-ports-UID, held while DIR exists). If a broker still
# finds its port taken, start picks fresh ones and tries again.
# reserve picks ports that way for DIR and prints the bootstrap list
# without starting anything (for a test that needs the address of a broker
# that is not up yet); a later start uses them.
# --node N starts or stops one node only (failure tests); start without
# --node starts every node that is not running. Data survives stop/start in
# DIR (--dir, $LOGAGG_KAFKA_DIR or ${TMPDIR:-/tmp}/logagg-kafka-$UID);
# --fresh deletes it first. stop sends SIGTERM (--kill: SIGKILL) to the
# node's processes and waits for them to exit.
#
# Environment: LOGAGG_KAFKA_HEAP (JVM heap flags, default "-Xms64m -Xmx512m"),
# LOGAGG_KAFKA_START_TIMEOUT (seconds, default 120), LOGAGG_CACHE.
set -euo pipefail

KAFKA_VERSION=4.3.1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATES=$HERE/kafka
CACHE=${LOGAGG_CACHE:-$HOME/.cache/logagg}/kafka-$KAFKA_VERSION
LIBS=$CACHE/libs
HEAP=${LOGAGG_KAFKA_HEAP:-"-Xms64m -Xmx512m"}
START_TIMEOUT=${LOGAGG_KAFKA_START_TIMEOUT:-120}

log() { echo "kafka.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

usage() {
	sed -n '2,40p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

cmd=${1:-}
[[ -n $cmd ]] || usage
shift
brokers=
dir=${LOGAGG_KAFKA_DIR:-${TMPDIR:-/tmp}/logagg-kafka-$(id -u)}
port=${LOGAGG_KAFKA_PORT:-}
node=
fresh=0
sig=TERM
while (($#)); do
	case $1 in
	--brokers) brokers=${2:?--brokers needs 1 or 3}; shift 2 ;;
	--dir) dir=${2:?--dir needs a path}; shift 2 ;;
	--port) port=${2:?--port needs a number or auto}; shift 2 ;;
	--node) node=${2:?--node needs a number}; shift 2 ;;
	--fresh) fresh=1; shift ;;
	--kill) sig=KILL; shift ;;
	-h | --help) usage ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done

# The layout of a running set is remembered in DIR so that stop/status and a
# restart of one node need no flags.
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [[ -z $brokers ]]; then
	brokers=$(cat "$dir/brokers" 2>/dev/null || echo 1)
fi
[[ $brokers == 1 || $brokers == 3 ]] || die "--brokers must be 1 or 3, got $brokers"
if [[ -z $port ]]; then
	port=$(cat "$dir/port" 2>/dev/null || echo 19092)
fi
[[ $port =~ ^[0-9]+$ || $port == auto ]] || die "--port must be a number or auto, got $port"
if [[ $port == auto && $cmd != start ]]; then
	port=$(cat "$dir/port" 2>/dev/null || echo 19092) # what DIR has (reserve picks anew)
fi
[[ -z $node || ($node -ge 1 && $node -le $brokers) ]] || die "--node must be in 1..$brokers"

broker_port() { echo $((port + 2 * ($1 - 1))); }
controller_port() { echo $((port + 2 * ($1 - 1) + 1)); }
node_dir() { echo "$dir/node$1"; }
nodes() {
	if [[ -n $node ]]; then echo "$node"; else seq 1 "$brokers"; fi
}
# node_pids NODE prints the live processes of the node: the launcher whose
# pid kafka.pid holds (launch writes it from $! before anything reads it;
# setsid made the launcher the leader of its own session and process group)
# and the JVM in that group. A zombie does not count, nor a process that
# only recycled one of those ids: its command line must name the node's
# server.properties. Fails if there are none.
node_pids() {
	local nd p q st out=()
	nd=$(node_dir "$1")
	read -r p 2>/dev/null <"$nd/kafka.pid" || return 1
	[[ $p =~ ^[0-9]+$ ]] || return 1
	for q in $p $(pgrep -g "$p" 2>/dev/null); do
		[[ " ${out[*]} " == *" $q "* ]] && continue
		read -r st 2>/dev/null <"/proc/$q/stat" || continue
		st=${st##*) }
		[[ ${st%% *} == Z ]] && continue
		[[ $(tr '\0' ' ' 2>/dev/null <"/proc/$q/cmdline") == *"$nd/server.properties"* ]] || continue
		out+=("$q")
	done
	((${#out[@]})) && echo "${out[*]}"
}
# pid_of NODE prints the node's launcher pid if the node is running.
pid_of() {
	node_pids "$1" >/dev/null && cat "$(node_dir "$1")/kafka.pid"
}
# signal_node NODE SIG signals the node's processes: SIGTERM goes to the JVM
# (the launcher then records how it ended), anything else to all of them.
signal_node() {
	local pids p leader
	pids=$(node_pids "$1") || return 0
	leader=$(cat "$(node_dir "$1")/kafka.pid")
	for p in $pids; do
		if [[ $2 != TERM || $p != "$leader" || $pids == "$leader" ]]; then
			kill -"$2" "$p" 2>/dev/null || true
		fi
	done
}
# kill_node NODE kills what a start of the node launched and waits until it
# is gone.
kill_node() {
	local deadline=$((SECONDS + 30))
	while node_pids "$1" >/dev/null; do
		signal_node "$1" KILL
		((SECONDS < deadline)) || die "node $1: processes $(node_pids "$1") survive SIGKILL"
		sleep 0.1
	done
	rm -f "$(node_dir "$1")/kafka.pid"
}
bootstrap() {
	local i out=
	for i in $(seq 1 "$brokers"); do
		out+=${out:+,}127.0.0.1:$(broker_port "$i")
	done
	echo "$out"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Port reservations for --port auto: a symlink BASE -> DIR, valid while DIR
# exists and remembers BASE as its port. Every set takes a slot of six
# ports (three nodes) whatever its size, so slots never overlap.
REGISTRY=/tmp/logagg-kafka-ports-$(id -u)
SLOT=6
reserved_by() { # base: prints the DIR holding it
	local d
	d=$(readlink "$REGISTRY/$1" 2>/dev/null) || return 1
	[[ -d $d && $(cat "$d/port" 2>/dev/null) == "$1" ]] && echo "$d"
}

# pick_ports chooses a free slot for DIR, reserves it and sets port. The
# slot lies below the kernel's ephemeral range (above it if that starts too
# low), so the kernel never hands its ports to a socket bound to port 0 or
# to an outgoing connection; none of its ports is open now, and no other
# DIR holds it.
pick_ports() {
	local lo hi first last base i try free owner old
	read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
	first=20000 last=$((lo - SLOT))
	if ((last < first)); then first=$((hi + 1)) last=$((65536 - SLOT)); fi
	((last >= first)) || die "no room for broker ports outside the ephemeral range $lo-$hi"
	mkdir -p "$REGISTRY"
	exec 8>"$REGISTRY/.lock"
	flock 8
	for i in "$REGISTRY"/[0-9]*; do # forget reservations of removed DIRs
		if [[ -L $i ]] && ! reserved_by "${i##*/}" >/dev/null; then
			rm -f "$i"
		fi
	done
	for ((try = 0; try < 500; try++)); do
		base=$((first + (RANDOM * 32768 + RANDOM) % ((last - first) / SLOT + 1) * SLOT))
		if owner=$(reserved_by "$base") && [[ $owner != "$dir" ]]; then
			continue
		fi
		free=1
		for ((i = base; i < base + SLOT; i++)); do
			if port_open "$i"; then
				free=0
				break
			fi
		done
		((free)) || continue
		old=$(cat "$dir/port" 2>/dev/null || true)
		if [[ -n $old && $old != "$base" && $(reserved_by "$old") == "$dir" ]]; then
			rm -f "$REGISTRY/$old"
		fi
		ln -sfn "$dir" "$REGISTRY/$base"
		echo "$base" >"$dir/port"
		port=$base
		flock -u 8
		exec 8>&-
		log "ports $port-$((port + 2 * brokers - 1)) reserved for $dir"
		return 0
	done
	die "no free slot of $SLOT ports found in $first-$((last + SLOT - 1))"
}

# resolve_port turns port "auto" into DIR's reserved ports (picking them if
# DIR holds none) and refuses a fixed port another DIR has reserved.
resolve_port() {
	local old owner
	if [[ $port == auto ]]; then
		old=$(cat "$dir/port" 2>/dev/null || true)
		if [[ -n $old && $(reserved_by "$old") == "$dir" ]]; then
			port=$old
		else
			pick_ports
		fi
	elif owner=$(reserved_by "$port") && [[ $owner != "$dir" ]]; then
		die "port $port is reserved by $owner (use --port auto)"
	fi
}

# fetch downloads Kafka's jars once. A lock keeps concurrent starts from
# racing; the marker file is written last so an interrupted download is redone.
fetch() {
	[[ -f $CACHE/.complete ]] && return 0
	command -v mvn >/dev/null || die "mvn not found: install Maven (apt-get install maven)"
	command -v java >/dev/null || die "java not found: install a JRE >= 17"
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.lock"
	flock 9
	if [[ ! -f $CACHE/.complete ]]; then
		log "downloading Kafka $KAFKA_VERSION from Maven Central into $LIBS"
		rm -rf "$LIBS.tmp" "$LIBS"
		# (sed strips the colour codes mvn -q prints even in batch mode)
		mvn -q -B -Dstyle.color=never -f "$TEMPLATES/pom.xml" dependency:copy-dependencies \
			-DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" 2>&1 |
			sed 's/\x1b\[[0-9;]*m//g' >&2 ||
			die "maven download failed"
		mv "$LIBS.tmp" "$LIBS"
		touch "$CACHE/.complete"
	fi
	flock -u 9
	exec 9>&-
}

java_cmd() { # node-dir: prints nothing, sets the array JAVA
	# shellcheck disable=SC2206 # HEAP is a list of JVM flags
	JAVA=(java $HEAP -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
		-Dlog4j2.configurationFile="$TEMPLATES/log4j2.properties"
		-Dkafka.logs.dir="$1" -cp "$LIBS/*")
}

configure() { # node
	local i=$1 nd voters= j rf=1 isr=1
	nd=$(node_dir "$i")
	for j in $(seq 1 "$brokers"); do
		voters+=${voters:+,}$j@127.0.0.1:$(controller_port "$j")
	done
	if ((brokers == 3)); then rf=3 isr=2; fi
	mkdir -p "$nd/data"
	sed -e "s|@NODE_ID@|$i|" -e "s|@VOTERS@|$voters|" \
		-e "s|@BROKER_PORT@|$(broker_port "$i")|" \
		-e "s|@CONTROLLER_PORT@|$(controller_port "$i")|" \
		-e "s|@DATA_DIR@|$nd/data|" -e "s|@RF@|$rf|g" -e "s|@MIN_ISR@|$isr|g" \
		"$TEMPLATES/server.properties.tmpl" >"$nd/server.properties"
	if [[ ! -f $nd/data/meta.properties ]]; then
		log "formatting KRaft storage of node $i"
		java_cmd "$nd"
		"${JAVA[@]}" kafka.tools.StorageTool format -t "$(cat "$dir/cluster.id")" \
			-c "$nd/server.properties" >"$nd/format.log" 2>&1 ||
			{ cat "$nd/format.log" >&2; die "formatting node $i failed"; }
	fi
}

# proc_state PID prints the state letter of a process (R, S, Z...), if any.
proc_state() {
	local st
	read -r st 2>/dev/null <"/proc/$1/stat" || return 1
	st=${st##*) }
	echo "${st%% *}"
}

launch() { # node: starts it; fails (with the reason in stdout.log) if a port is taken
	local i=$1 nd bp cp p st
	nd=$(node_dir "$i")
	bp=$(broker_port "$i")
	cp=$(controller_port "$i")
	# A fresh server.log, so readiness is not read from a previous run.
	rm -f "$nd/server.log" "$nd/exit.status"
	if port_open "$bp" || port_open "$cp"; then
		echo "kafka.sh: port $bp or $cp: Address already in use (by another process)" >"$nd/stdout.log"
		return 1
	fi
	java_cmd "$nd"
	# setsid: the broker outlives this script and its terminal. A background
	# job of this script is never a process-group leader, so setsid execs
	# in place: $! is the launcher, leader of a new session and process
	# group that the JVM joins. The launcher waits for the JVM and records
	# how it ended in exit.status, so a JVM that dies during start-up
	# without a log line (seen under load) at least says how it died.
	setsid bash -c 'nd=$1; shift; "$@" </dev/null >"$nd/stdout.log" 2>&1 & wait $!; echo "exit status $?" >"$nd/exit.status"' _ "$nd" \
		"${JAVA[@]}" kafka.Kafka "$nd/server.properties" </dev/null >/dev/null 2>&1 &
	p=$!
	disown
	echo "$p" >"$nd/kafka.pid.tmp"
	mv "$nd/kafka.pid.tmp" "$nd/kafka.pid"
	# Until it has exec'd, the launcher is a copy of this script, which
	# node_pids would not count: wait for the exec (or its end).
	for _ in $(seq 500); do
		st=$(proc_state "$p") || break
		[[ $st != Z ]] || break
		[[ $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") != *"$nd/server.properties"* ]] || break
		sleep 0.01
	done
}

wait_ready() { # node
	local i=$1 nd bp deadline
	nd=$(node_dir "$i")
	bp=$(broker_port "$i")
	deadline=$((SECONDS + START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! node_pids "$i" >/dev/null; then
			# The launcher wrote exit.status before it exited.
			log "node $i exited during start-up; last lines of its logs:"
			cat "$nd/exit.status" >&2 2>/dev/null || true
			tail -n 30 "$nd/stdout.log" "$nd/server.log" "$nd/format.log" >&2 2>/dev/null || true
			return 1
		fi
		if port_open "$bp" && grep -q "Kafka Server started" "$nd/server.log" 2>/dev/null; then
			return 0
		fi
		sleep 0.2
	done
	log "node $i not ready after ${START_TIMEOUT}s; see $nd/server.log"
	return 1
}

# port_taken NODE: the node failed because one of its ports was in use.
port_taken() {
	grep -qs "Address already in use" "$(node_dir "$1")/stdout.log" "$(node_dir "$1")/server.log"
}

# The nodes this start launched: killed if it fails or is interrupted.
STARTED=()
abort_start() {
	local i
	for i in "${STARTED[@]}"; do
		kill_node "$i" || true
	done
}

start() {
	if ((fresh)); then
		stop_nodes KILL
		rm -rf "$dir"
		mkdir -p "$dir"
	fi
	fetch
	local i auto=0 running=0
	for i in $(seq 1 "$brokers"); do
		if pid_of "$i" >/dev/null; then running=1; fi
	done
	if [[ $port == auto ]]; then
		auto=1
		if ((running)); then
			port=$(cat "$dir/port") # a running set keeps its ports
		fi
	fi
	resolve_port
	echo "$brokers" >"$dir/brokers"
	echo "$port" >"$dir/port"
	if [[ ! -f $dir/cluster.id ]]; then
		# A Kafka cluster id is 16 random bytes in URL-safe base64, unpadded.
		# One that starts with '-' reads as an option to kafka-storage
		# ("--cluster-id: expected one argument", 1 start in 64); Kafka's
		# own Uuid.randomUuid draws again in that case, and so do we.
		local id=-
		while [[ $id == -* ]]; do
			id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
		done
		printf '%s' "$id" >"$dir/cluster.id"
	fi
	for i in $(nodes); do
		if pid_of "$i" >/dev/null; then
			log "node $i already running (pid $(pid_of "$i"))"
			continue
		fi
		STARTED+=("$i")
	done
	((${#STARTED[@]})) || {
		bootstrap
		return 0
	}
	trap abort_start EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	# A JVM that dies during start-up (seen under load) is tried up to three
	# times in all. Ports found taken are picked afresh when they were
	# picked here (--port auto, the whole set starting); a fixed port in use
	# is an error.
	local attempt=1 failed
	while :; do
		failed=
		for i in "${STARTED[@]}"; do
			configure "$i"
			if ! launch "$i"; then
				failed=$i
				break
			fi
		done
		if [[ -z $failed ]]; then
			for i in "${STARTED[@]}"; do
				if ! wait_ready "$i"; then
					failed=$i
					break
				fi
			done
		fi
		[[ -n $failed ]] || break
		abort_start
		((attempt < 3)) || die "start failed (node $failed) after $attempt attempts"
		attempt=$((attempt + 1))
		if port_taken "$failed"; then
			if ((!auto || running)); then
				die "node $failed: port $(broker_port "$failed") or $(controller_port "$failed") is in use by another process (choose another --port, or --port auto)"
			fi
			log "node $failed: its ports were taken meanwhile; picking others (attempt $attempt of 3)"
			pick_ports
		else
			log "node $failed died during start-up; attempt $attempt of 3"
			sleep 2
		fi
	done
	trap - EXIT INT TERM
	for i in "${STARTED[@]}"; do
		log "node $i ready on 127.0.0.1:$(broker_port "$i") (pid $(pid_of "$i"), logs in $(node_dir "$i"))"
	done
	bootstrap
}

# reserve picks and reserves ports for DIR without starting anything.
reserve() {
	local i
	for i in $(seq 1 "$brokers"); do
		if pid_of "$i" >/dev/null; then
			die "node $i of $dir is running: stop it before reserving other ports"
		fi
	done
	echo "$brokers" >"$dir/brokers"
	pick_ports
	bootstrap
}

stop_nodes() { # signal
	local s=$1 i stopping=()
	for i in $(nodes); do
		if node_pids "$i" >/dev/null; then
			log "stopping node $i (pid $(pid_of "$i"), SIG$s)"
			signal_node "$i" "$s"
			stopping+=("$i")
		fi
	done
	# Controlled shutdown can stall once the quorum is gone (last nodes of a
	# cluster); after 30 s we stop waiting politely.
	local deadline=$((SECONDS + 30))
	for i in "${stopping[@]}"; do
		while node_pids "$i" >/dev/null; do
			if ((SECONDS >= deadline)); then
				log "node $i ($(node_pids "$i")) did not exit; SIGKILL"
				signal_node "$i" KILL
			fi
			sleep 0.1
		done
		rm -f "$(node_dir "$i")/kafka.pid"
	done
}

status() {
	local i p rc=0
	for i in $(seq 1 "$brokers"); do
		if p=$(pid_of "$i"); then
			echo "node $i running pid $p 127.0.0.1:$(broker_port "$i")"
		else
			echo "node $i stopped"
			rc=3
		fi
	done
	return $rc
}

case $cmd in
fetch) fetch ;;
start) start ;;
reserve) reserve ;;
stop) stop_nodes "$sig" ;;
status) status ;;
*) usage ;;
esac
