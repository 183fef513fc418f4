// Package bufsweep moves the same volume over tcp, unixsock and fifo
// through a user-space write buffer of each size from 1 B to 1 MiB (seed
// 003's setvbuf experiment) and reports MB/s (median and spread over runs)
// and the write syscalls made, optionally through packet loss or delay.
//
// The writer behaves exactly like stdio with setvbuf(_IOFBF, size): the
// application hands it records of RecordSize bytes; it copies them into the
// buffer and calls write(2) once the buffer is full (a record may straddle
// two flushes), plus once at the end for the remainder. Moving V bytes thus
// costs ceil(V/size) flushes. The writer counts its write(2) calls itself
// (a flush whose write returns short is continued with another call,
// counted apart as a partial write) and cross-checks them with syscw from
// /proc/thread-self/io (this thread only: exact) and /proc/self/io (the
// whole process: includes the reader and, with toxiproxy, its writes).
//
// The writer and the reader each run on a goroutine locked to its own OS
// thread and use raw read(2)/write(2) on blocking descriptors, so the Go
// netpoller is not in the path and the thread-level syscw belongs to the
// writer alone.
//
// Faults apply to tcp only; Row.Engine names what applied them (ADR 0042):
//   - loss (EngineNftNetns): Run re-executes the binary
//     (NetnsChildSubcommand, which the binary must route to NetnsChild) in
//     a new network namespace, where an nftables rule on the input hook
//     drops a random share of TCP packets; the writer and reader of the
//     loss rows run there, and the rule's counters and TcpRetransSegs come
//     back on each row. Needs root and nft, else the rows are skipped with
//     a note.
//   - delay and bandwidth (EngineToxiproxy): an in-process toxiproxy
//     between writer and reader, which delays each chunk it reads, not
//     each packet; this kernel has no sch_netem.
//
// Concurrency: Run measures rows one after another and is not safe for
// concurrent use with itself.
package bufsweep
