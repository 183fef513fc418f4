// Package forwardbench is the forward kind of the lab (ADR 0037): the
// Kafka forwarder measured under the throughput load, reached as
// `ipcbench throughput --forward kafka`. Each cell of its grid (record
// size × producer count) is the same producers → aggregator → file run as
// package throughput's, with the aggregator forwarding into Kafka
// (--forward-kafka), while a sampler reads the forwarder's metrics every
// 100 ms:
//
//	producers ──► aggregator ──► file ──► forwarder ──► Kafka
//	                   │ /metrics (records_out_total, logagg_forward_kafka_*)
//	                   ▼
//	              sampler (Spec.Sample) ──► records/s, max lag, drain time
//
// After the producers end, a cell waits until Kafka has acknowledged every
// record the aggregator wrote (records_produced_total >= records_out_total)
// before stopping the aggregator, so the aggregator's CPU time covers the
// whole forwarding. With Spec.Baseline (always, in Run) the same load runs
// once more without forwarding, and the difference of CPU per record is
// the forwarder's cost.
//
// It is a kind of its own, not a mode of throughput.Options, because its
// rows are not throughput.Rows: a Row holds the load's accounting (a
// throughput.Measurement) plus the forwarder's lag, acknowledgement
// latency and CPU (ADR 0043, ADR 0046).
//
// Concurrency: Run and Measure measure one cell at a time and must not run
// concurrently with another experiment (they compete for CPUs).
package forwardbench
