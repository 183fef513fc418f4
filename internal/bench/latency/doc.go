// Package latency measures one-way and round-trip latency at a fixed send
// rate (seed 002: 20,000 records/s of 4 KiB) with HdrHistogram, measured
// once from each message's scheduled send time, and prints seed 002's
// table.
//
// Two modes:
//
//   - "raw": transport to transport. This process sends; an echo process
//     (this binary re-executed with the hidden subcommand EchoSubcommand, see
//     EchoMain) receives each message, writes its own receive time into it
//     and sends it back. One-way latency is echo-receive time minus send
//     time; round trip is the time the echo came back minus send time. Both
//     clocks are CLOCK_MONOTONIC, which is one clock for every process on a
//     machine, so the one-way figure needs no clock synchronisation.
//   - "aggregator": producer send -> record written to the output file. The
//     aggregator binary is started with --fsync never; records stamped with
//     a sequence number (client.WithSeq) are sent at the fixed rate and the
//     output file is tailed with inotify; latency is the time the tailer
//     read the line minus the record's scheduled send time. The tailer adds
//     its own wake-up (inotify event + read(2), a few microseconds on an
//     idle CPU, tens when the CPU must wake) to every figure; the
//     aggregator's batching is part of what is measured.
//
// Pacing: message i is due at start + i/rate. The sender thread sleeps with
// clock_nanosleep(TIMER_ABSTIME), timer slack 1 ns, until a margin before
// the due time and spins on the clock for the rest (PacingSpin): a timer
// wake-up on this VM is 25 µs late at p50 and 46 µs at p99, and a sender
// that slept until the due time (PacingSleep, the previous sender) put
// that into every latency. The margin is twice the latest of the recent
// wake-ups, so at seed 002's 50 µs interval the sender spins a CPU, as
// sockperf's does; unlike sockperf's, it yields at every turn, so a thread
// that wakes on its CPU runs at once. The sender's lateness (actual send minus scheduled) is
// recorded as a distribution of its own (Row.SendLag) and shown beside the
// latencies, so that a table says when the instrument, not the transport,
// made a figure. The first Warmup messages are sent and received but not
// recorded.
//
// Placement (as in package rtt, ADR 0038): PlaceSame pins the sender, the
// receiver and the echo's thread to one CPU, PlaceCross leaves the sender
// alone on one CPU and puts the echo and the receiver on a second (the
// message crosses CPUs, the reply does not), PlaceUnpinned leaves them
// to the scheduler; every row
// records where each of the three was seen running (getcpu, sampled every
// 16th message). Aggregator rows run unpinned.
//
// Coordinated omission (wrk2's method): every message carries its
// scheduled send time, not the time it actually left, and every latency is
// recorded once with RecordValue. A stall anywhere (the sender
// descheduled, a full socket buffer, a slow receiver) delays the messages
// due during it, and each of those is a real observation with the delay
// in it; a late sender's own delay is in its messages' latencies too
// (Row.LateSends counts them). RecordCorrectedValue would add synthetic
// observations for the same stall a second time, which is what the
// previous version did (see docs/adr/). Every distribution carries
// its observation count, and a percentile with fewer than bench.MinTail
// observations beyond it is shown as bench.Unsupported.
//
// Concurrency and lifetimes: Run measures rows one after another (rows
// would compete for the two CPUs) and is not safe for concurrent use with
// itself. Each row uses one locked OS thread to send and one to receive;
// each records into its own histograms, merged once the row ends, and
// gives its thread back to the runtime with its CPU mask and timer slack
// restored. EchoMain is the whole life of a child process.
package latency
