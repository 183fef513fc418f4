// Package latency measures one-way and round-trip latency at a fixed send
// rate (seed 002: 20,000 records/s of 4 KiB), with HdrHistogram and
// coordinated-omission correction, and prints seed 002's table.
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
//     read the line minus the time just before the client's write. The
//     tailer adds its own wake-up (inotify event + read(2), a few
//     microseconds on an idle CPU, tens when the CPU must wake) to every
//     figure; the aggregator's batching is part of what is measured.
//
// Pacing: message i is due at start + i/rate; the sender thread sleeps with
// clock_nanosleep(TIMER_ABSTIME) with its timer slack set to 1 ns. The
// first Warmup messages are sent and received but not recorded.
//
// Coordinated omission: every latency v is recorded with
// RecordCorrectedValue(v, 1e9/rate) into the "corrected" histogram (which
// adds the samples a stalled sender would have produced) and with
// RecordValue into the "raw" one; N ("based on N measurements") is the raw
// count, the percentiles shown are the corrected ones, as HdrHistogram
// recommends for fixed-rate loads. Because this sender does not wait for
// the echo before sending the next message, the correction is conservative
// (it can only raise the tail).
//
// Concurrency and lifetimes: Run measures rows one after another (rows
// would compete for the two CPUs) and is not safe for concurrent use with
// itself. Each row uses one locked OS thread to send and one to receive;
// each records into its own histograms, merged once the row ends. EchoMain
// is the whole life of a child process.
package latency
