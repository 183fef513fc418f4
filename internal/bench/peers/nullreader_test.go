package peers

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/testenv"
)

// The test binary doubles as the null reader's process (as ipcbench does
// with its hidden subcommand).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == NullReaderSubcommand {
		os.Exit(NullReaderMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// The null reader counts every record the real producer sends on each
// transport it serves (newlines on stream sockets, datagrams on datagram
// ones), and throughput.Measure accounts for it from those counts: a lossless
// run must show written == sent, and an unlimited-rate stream cell must
// not be empty.
func TestNullReaderCountsEveryRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs producers")
	}
	spec := throughput.Spec{
		Daemon:      NullReader{Bin: os.Args[0]},
		ProducerBin: testenv.Binary(t, "producer"),
		Dir:         t.TempDir(),
		Transports:  []string{"unixsock", "tcp", "unixgram", "udp"},
		Producers:   2,
		Size:        100,
		Count:       2000,
		Rate:        20000,
		Format:      "rfc3164",
	}
	res, err := throughput.Measure(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var tbl bytes.Buffer
	throughput.WriteMeasurement(&tbl, res)
	t.Logf("\n%s", tbl.String())
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows, want 4", len(res.Rows))
	}
	for _, r := range res.Rows {
		if r.Sent != 4000 {
			t.Errorf("%s: producers sent %d, want 4000", r.Transport, r.Sent)
		}
		// A loopback UDP socket with an 8 MiB buffer at 40k records/s does
		// not overflow; if this ever flakes the null reader lost them.
		if r.Written != r.Sent || r.Lost != 0 {
			t.Errorf("%s: sent %d, counted %d, lost %d", r.Transport, r.Sent, r.Written, r.Lost)
		}
	}
	if res.AggCPUNs <= 0 || res.Elapsed <= 0 || res.Elapsed > (30*time.Second).Seconds() {
		t.Errorf("CPU %v ns/record over %vs", res.AggCPUNs, res.Elapsed)
	}
}
