// Package tracebench runs the lab's bpftrace scripts against a real
// workload: our aggregator plus producer processes (as `ipcbench
// throughput` starts them), or the fixed-rate latency workload of package
// latency. It answers three questions of the seeds:
//
//   - What does script S show for transport T? (Run: typed rows of count
//     maps, histograms and stats per transport and side.)
//   - How many syscalls does one record cost the producer and the
//     aggregator, and how many of them are the Go runtime's rather than
//     the transport's? (Run with CompareProbes, the default; Tables puts
//     them in a syscall × transport matrix per side.)
//   - What does tracing itself cost a latency-sensitive workload?
//     (RunOverhead, seed 002: no tracer, an idle tracer, a tracer logging
//     every event.)
//
// Both experiments have the shape of ADR 0037: Kind and OverheadKind,
// Options and OverheadOptions, Run and RunOverhead, Tables and
// OverheadTables.
//
// # Attaching before the first event
//
// bpftrace scripts take one pid ($1). The aggregator is started first and
// traced once it notifies READY=1 (internal/bench/harness), so its start-up is not
// counted but every record it receives is. A producer would start sending
// before bpftrace (which compiles for about a second) could attach, so each
// producer is started through a gate: `/bin/sh -c 'read x && exec producer
// ARGS'`. The shell's pid is the producer's pid after exec, so bpftrace
// attaches to that pid while the shell waits on its stdin; one newline then
// releases it. What is counted for a producer is therefore its whole life
// from execve on (Go runtime start-up included, as in seed 000's counts),
// plus the one execve of the shell. Several producers get one bpftrace
// session each and their outputs are summed.
//
// # Lifetimes and concurrency
//
// Run and RunOverhead start and end every process they create (aggregator,
// producers, bpftrace, the latency echo child) before they return, also on
// error and on context cancellation; the work directory is removed unless
// the caller supplied it. Neither is safe to call concurrently with itself:
// runs would compete for the CPUs they measure. Results are plain data
// owned by the caller.
//
// # Privileges
//
// Tracing needs root (or CAP_BPF + CAP_PERFMON). Run and RunOverhead check
// that first and return an error wrapping trace.ErrNotRoot, whose message
// says what is needed, before starting any process; tracefs is mounted when
// missing (trace.EnsureTracefs).
package tracebench
