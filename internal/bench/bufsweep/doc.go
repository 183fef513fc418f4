// Package bufsweep moves a fixed volume over tcp, unixsock and fifo through
// a user-space write buffer of each size from 1 B to 1 MiB (seed 003's
// setvbuf experiment) and reports the elapsed time, MB/s and the write
// syscalls made, optionally through network faults (delay, jitter,
// bandwidth).
//
// The writer behaves exactly like stdio with setvbuf(_IOFBF, size): the
// application hands it records of RecordSize bytes; it copies them into the
// buffer and calls write(2) once the buffer is full (a record may straddle
// two flushes), plus once at the end for the remainder. Moving V bytes thus
// costs ceil(V/size) flushes. The writer counts its write(2) calls itself
// (a flush whose write returns short is continued with another call,
// counted apart as a partial write) and cross-checks them with syscw from
// /proc/thread-self/io (this thread only: exact) and /proc/self/io (the
// whole process: includes the reader and, with faults, toxiproxy's own
// writes).
//
// The writer and the reader each run on a goroutine locked to its own OS
// thread and use raw read(2)/write(2) on blocking descriptors, so the Go
// netpoller is not in the path and the thread-level syscw belongs to the
// writer alone.
//
// Faults: this kernel has no netem (FACTS.md); NetemAvailable checks by
// adding a netem qdisc to lo in a throw-away network namespace. When netem
// works, TCP rows with a fault run on a socket pair created inside a
// private namespace whose lo carries the netem qdisc; otherwise an
// in-process toxiproxy (github.com/Shopify/toxiproxy/v2) sits between
// writer and reader on loopback with latency/jitter/bandwidth toxics on the
// writer-to-reader direction. Row.FaultVia says which was used. Toxiproxy
// delays each chunk it reads by the latency (pipelined, not per packet), so
// a transfer gains about one latency, not one per write, unless the window
// is exhausted. Faults apply to tcp only.
//
// Concurrency: Run measures rows one after another and is not safe for
// concurrent use with itself.
package bufsweep
