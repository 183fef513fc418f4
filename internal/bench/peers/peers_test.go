package peers

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/testenv"
)

// Every daemon, driven by the same real producer over a stream and a
// datagram transport, is accounted for record by record; the loss-free
// configurations must lose nothing on the stream transport.
func TestPeersSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons")
	}
	testenv.RequireCommand(t, "rsyslogd")
	if !exists(SyslogNGPrefix() + "/usr/sbin/syslog-ng") {
		testenv.SkipOrFail(t, "syslog-ng not unpacked in "+SyslogNGPrefix()+" (scripts/setup.sh does it)")
	}
	spec := throughput.Spec{
		ProducerBin: testenv.Binary(t, "producer"),
		Transports:  []string{"unixsock", "udp"},
		Producers:   1,
		Size:        100,
		Count:       3000,
		Rate:        20000,
	}
	cells, notes, err := compare(context.Background(), spec, DefaultDaemons(testenv.Binary(t, "aggregator")))
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(notes, "\n"))
	}
	var tbl bytes.Buffer
	bench.WriteTables(&tbl, Tables(cells))
	t.Logf("\n%s%s", tbl.String(), strings.Join(notes, "\n"))
	if len(cells) != 2 {
		t.Fatalf("%d cells, want 2", len(cells))
	}
	for _, c := range cells {
		if len(c.Daemons) != 3 {
			t.Fatalf("%s: %d daemons ran, want 3", c.Transport, len(c.Daemons))
		}
		for _, r := range c.Daemons {
			if r.Sent == 0 || r.Written == 0 {
				t.Errorf("%s/%s: sent %d written %d", r.Daemon, r.Transport, r.Sent, r.Written)
			}
			if r.Transport == "unixsock" && (r.Lost != 0 || r.Unique != r.Sent) {
				t.Errorf("%s over unix stream lost %d of %d", r.Daemon, r.Lost, r.Sent)
			}
			if r.Duplicated != 0 {
				t.Errorf("%s/%s: %d duplicates", r.Daemon, r.Transport, r.Duplicated)
			}
		}
		for _, name := range []string{"logagg", "rsyslog", "syslog-ng"} {
			if c.Configs[name] == "" {
				t.Errorf("%s: config of %s not saved", c.Transport, name)
			}
		}
		if !strings.Contains(c.Configs["syslog-ng"], "flow-control") {
			t.Error("syslog-ng config lost its flow control")
		}
	}
}

// Median keeps, per cell and daemon, the whole row of the median run.
func TestMedianKeepsTheMedianRunPerDaemon(t *testing.T) {
	row := func(d string, rps float64, lost int64) throughput.Row {
		return throughput.Row{Daemon: d, Transport: "tcp", RecordsPerS: rps, Lost: lost}
	}
	runs := [][]Row{
		{{Transport: "tcp", Daemons: []throughput.Row{row("logagg", 300, 1), row("rsyslog", 200, 7)}}},
		{{Transport: "tcp", Daemons: []throughput.Row{row("logagg", 100, 2), row("rsyslog", 250, 8)}}},
		{{Transport: "tcp", Daemons: []throughput.Row{row("logagg", 200, 3), row("rsyslog", 150, 9)}}},
	}
	got := Median(runs)
	if len(got) != 1 || len(got[0].Daemons) != 2 {
		t.Fatalf("merged %+v", got)
	}
	if r := got[0].Daemons[0]; r.Daemon != "logagg" || r.RecordsPerS != 200 || r.Lost != 3 {
		t.Errorf("logagg row %+v, want the 200/s run with its loss 3", r)
	}
	if r := got[0].Daemons[1]; r.Daemon != "rsyslog" || r.RecordsPerS != 200 || r.Lost != 7 {
		t.Errorf("rsyslog row %+v, want the 200/s run with its loss 7", r)
	}
	if two := Median(runs[:2]); two[0].Daemons[0].RecordsPerS != 100 {
		t.Errorf("with two runs the lower middle is kept, got %v", two[0].Daemons[0].RecordsPerS)
	}
}

// The rows name our aggregator by the Daemon it is; Tables finds "ours"
// by that name.
func TestOursIsTheAggregatorsName(t *testing.T) {
	if got := (&harness.AggregatorDaemon{}).Name(); got != Ours {
		t.Fatalf("harness.AggregatorDaemon is named %q, peers.Ours is %q", got, Ours)
	}
}
