package rtt

import (
	"context"
	"testing"
)

// BenchmarkRoundTrip reports the median round trip per mechanism as a
// custom unit. Recipe for the figures in the lab report (same core):
//
//	go test -run '^$' -bench RoundTrip -benchtime 20000x ./internal/bench/rtt/
//
// Pinned cross-core and with C reference rows, use the binary instead:
//
//	ipcbench rtt --transport pipe,unixsock --iterations 100000 --placement cross
func BenchmarkRoundTrip(b *testing.B) {
	for _, mech := range []string{MechPipeInproc, MechPipe, MechUnixSock, MechMQ, MechShmFutex, MechShmSpin} {
		b.Run(mech, func(b *testing.B) {
			b.ReportAllocs()
			rep, err := Run(context.Background(), Options{Mechanisms: []string{mech}, Iterations: max(b.N, 100), Warmup: 100, Placements: []string{PlaceSame}})
			if err != nil {
				b.Fatal(err)
			}
			r := rep.Rows[0]
			if r.Error != "" {
				b.Fatal(r.Error)
			}
			b.ReportMetric(r.Stats.Median, "ns-median/rtt")
			b.ReportMetric(r.Stats.Q99, "ns-p99/rtt")
		})
	}
}
