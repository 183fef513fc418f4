// Package trace runs the lab's bpftrace scripts (package bpftrace, directory
// bpftrace/) against a process and decodes their `-f json` output into
// typed counts, histograms and printf lines.
//
// Lifetime: Start checks privileges, bpftrace, tracefs and every probe the
// script names, starts bpftrace and returns once the probes are attached;
// the caller decides how long to trace and calls Stop, which sends SIGINT
// and waits for bpftrace to print its maps (END block and the automatic
// print of every map) and exit. Run is Start, wait for ctx, Stop. bpftrace is
// started with Pdeathsig so it dies with us if we die first.
//
// Concurrency: a Session's Stop may be called from any goroutine, once or
// more; the Output it returns is owned by the caller. Parse, SyscallName,
// CategoryOf and DropReasons are pure and safe for concurrent use.
//
// Kernel features: this package never assumes kprobes. Scripts use
// tracepoints; a script naming a probe type the kernel lacks (kprobe without
// CONFIG_KPROBES, kfunc without bpftrace/BTF support) fails in Start with a
// *ProbeError that says what is missing, before bpftrace runs.
package trace
