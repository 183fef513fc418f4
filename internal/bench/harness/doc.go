// Package harness starts our aggregator and our producers as processes for
// the lab's experiments. It learns from the aggregator's readiness
// notification, not its log, that it serves and on which addresses, and
// reads each producer's JSON summary (ADR 0040).
//
// Daemon and Running are the log daemon under test as the workload kinds
// (throughput, peers, conns, the forward kind) drive it: AggregatorDaemon
// is ours, with a listener per transport in a run directory, and package
// peers adds rsyslog, syslog-ng and the null reader.
//
//	Aggregator.Start ─► private dir (0700) with a unixgram socket
//	                 ─► aggregator, NOTIFY_SOCKET=that socket
//	aggregator ─► LOGAGG_LISTEN=url … LOGAGG_METRICS=url … READY=1 ─► Start returns a *Proc
//	aggregator exits, Aggregator.StartTimeout passes, ctx ends ─► Start fails with the stderr tail
//
// Lifetimes: the Proc's process lives until Stop, Kill, or the end of the
// context given to Start (which sends SIGTERM, as Stop does). The
// notification socket is read until the process exits, so that the
// aggregator's STATUS= and WATCHDOG= messages never fill it (its sends
// block). A Proc's methods are safe for concurrent use.
//
//	Producer.Start ─► producer (or, Gated, a shell that execs it at Release, same pid)
//	ProducerProc.Wait ─► its --json-summary line: sent, failed, writes, error
package harness
