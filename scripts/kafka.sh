#!/usr/bin/env bash
# kafka.sh - run Apache Kafka on loopback, without Docker, for tests and demos.
#
#   scripts/kafka.sh start  [--brokers 1|3] [--dir DIR] [--port P] [--node N] [--fresh]
#   scripts/kafka.sh stop   [--dir DIR] [--node N] [--kill]
#   scripts/kafka.sh status [--dir DIR]
#   scripts/kafka.sh fetch                  (download and cache the jars only)
#
# start fetches org.apache.kafka:kafka_2.13 from Maven Central with Maven
# (once, into ${LOGAGG_CACHE:-~/.cache/logagg}/kafka-VERSION/libs), formats
# KRaft storage and starts combined broker+controller JVMs on 127.0.0.1. It
# waits until every broker's port is open AND its log says
# "Kafka Server started" (the port opens ~0.5 s before the broker serves),
# then prints the bootstrap list ("127.0.0.1:19092" or
# "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096") as the last stdout line.
# Progress goes to stderr.
#
# --brokers 3 starts three JVMs forming one KRaft quorum (3 voters), with
# replication factor 3 and min.insync.replicas=2.
# Node i listens on P+2(i-1) (broker) and P+2(i-1)+1 (controller); P is
# --port, $LOGAGG_KAFKA_PORT or 19092, clear of the aggregator's 9000.
# --node N starts or stops one node only (failure tests); start without
# --node starts every node that is not running. Data survives stop/start in
# DIR (--dir, $LOGAGG_KAFKA_DIR or ${TMPDIR:-/tmp}/logagg-kafka-$UID);
# --fresh deletes it first. stop sends SIGTERM (--kill: SIGKILL) by pid and
# waits for the process to exit.
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
	sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
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
	--port) port=${2:?--port needs a number}; shift 2 ;;
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
[[ $port =~ ^[0-9]+$ ]] || die "--port must be a number, got $port"
[[ -z $node || ($node -ge 1 && $node -le $brokers) ]] || die "--node must be in 1..$brokers"

broker_port() { echo $((port + 2 * ($1 - 1))); }
controller_port() { echo $((port + 2 * ($1 - 1) + 1)); }
node_dir() { echo "$dir/node$1"; }
nodes() {
	if [[ -n $node ]]; then echo "$node"; else seq 1 "$brokers"; fi
}
pid_of() {
	local f
	f="$(node_dir "$1")/kafka.pid"
	[[ -f $f ]] || return 1
	local p
	p=$(cat "$f")
	[[ -n $p ]] && kill -0 "$p" 2>/dev/null && echo "$p"
}
bootstrap() {
	local i out=
	for i in $(seq 1 "$brokers"); do
		out+=${out:+,}127.0.0.1:$(broker_port "$i")
	done
	echo "$out"
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

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

launch() { # node
	local i=$1 nd bp cp
	nd=$(node_dir "$i")
	bp=$(broker_port "$i")
	cp=$(controller_port "$i")
	if port_open "$bp" || port_open "$cp"; then
		die "port $bp or $cp is already in use by another process (choose --port)"
	fi
	# A fresh server.log, so readiness is not read from a previous run.
	rm -f "$nd/server.log"
	java_cmd "$nd"
	# setsid: the broker outlives this script and its terminal. The pid file
	# holds the JVM's own pid; the wrapping shell waits for it and records
	# how it ended in exit.status, so a JVM that dies during start-up
	# without a log line (seen under load) at least says how it died.
	rm -f "$nd/exit.status"
	setsid bash -c 'nd=$1; shift; "$@" </dev/null >"$nd/stdout.log" 2>&1 & echo $! >"$nd/kafka.pid.tmp" && mv "$nd/kafka.pid.tmp" "$nd/kafka.pid"; wait $!; echo "exit status $?" >"$nd/exit.status"' _ "$nd" \
		"${JAVA[@]}" kafka.Kafka "$nd/server.properties" </dev/null >/dev/null 2>&1 &
	disown
}

wait_ready() { # node
	local i=$1 nd bp deadline p
	nd=$(node_dir "$i")
	bp=$(broker_port "$i")
	deadline=$((SECONDS + START_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! p=$(pid_of "$i"); then
			# the pid file appears (atomically) a moment after launch
			if [[ -f $nd/kafka.pid ]]; then
				log "node $i exited during start-up; last lines of its logs:"
				sleep 0.2 # let the wrapper record the exit status
				cat "$nd/exit.status" >&2 2>/dev/null || true
				tail -n 30 "$nd/stdout.log" "$nd/server.log" "$nd/format.log" >&2 2>/dev/null || true
				ls -la "$nd" >&2 2>/dev/null || true
				return 1
			fi
		elif port_open "$bp" && grep -q "Kafka Server started" "$nd/server.log" 2>/dev/null; then
			return 0
		fi
		sleep 0.2
	done
	log "node $i not ready after ${START_TIMEOUT}s; see $nd/server.log"
	return 1
}

start() {
	if ((fresh)); then
		stop_nodes KILL
		rm -rf "$dir"
		mkdir -p "$dir"
	fi
	fetch
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
	local i started=()
	for i in $(nodes); do
		if pid_of "$i" >/dev/null; then
			log "node $i already running (pid $(pid_of "$i"))"
			continue
		fi
		rm -f "$(node_dir "$i")/kafka.pid"
		configure "$i"
		launch "$i"
		started+=("$i")
	done
	for i in "${started[@]}"; do
		# A JVM that dies during start-up without an error (seen in CI and
		# here, under load, twice in a row once) is tried up to three times
		# in all before giving up.
		local attempt=1
		until wait_ready "$i"; do
			((attempt < 3)) || die "start failed (node $i) after $attempt attempts"
			attempt=$((attempt + 1))
			log "node $i died during start-up; attempt $attempt of 3"
			rm -f "$(node_dir "$i")/kafka.pid"
			sleep 2
			launch "$i"
		done
		log "node $i ready on 127.0.0.1:$(broker_port "$i") (pid $(pid_of "$i"), logs in $(node_dir "$i"))"
	done
	bootstrap
}

stop_nodes() { # signal
	local s=$1 i p pids=()
	for i in $(nodes); do
		if p=$(pid_of "$i"); then
			log "stopping node $i (pid $p, SIG$s)"
			kill -"$s" "$p" 2>/dev/null || true
			pids+=("$i:$p")
		fi
	done
	# Controlled shutdown can stall once the quorum is gone (last nodes of a
	# cluster); after 30 s we stop waiting politely.
	local deadline=$((SECONDS + 30)) ip
	for ip in "${pids[@]}"; do
		i=${ip%%:*}
		p=${ip#*:}
		while kill -0 "$p" 2>/dev/null; do
			if ((SECONDS >= deadline)); then
				log "node $i (pid $p) did not exit; SIGKILL"
				kill -KILL "$p" 2>/dev/null || true
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
stop) stop_nodes "$sig" ;;
status) status ;;
*) usage ;;
esac
