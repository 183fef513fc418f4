package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/testenv"
)

// withBinaries puts the aggregator and producer on PATH for the re-executed
// ipcbench (it looks for them next to itself, then on PATH).
func withBinaries(t *testing.T) {
	t.Helper()
	dir := filepath.Dir(testenv.Binary(t, "aggregator"))
	if filepath.Dir(testenv.Binary(t, "producer")) != dir {
		t.Fatal("aggregator and producer built into different directories")
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// The peers subcommand itself, with both peer daemons: every daemon ran,
// the stream transport lost nothing anywhere, and the configs are saved.
func TestPeersCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three daemons")
	}
	testenv.RequireCommand(t, "rsyslogd")
	if _, err := os.Stat(filepath.Join(peers.SyslogNGPrefix(), "usr/sbin/syslog-ng")); err != nil {
		testenv.SkipOrFail(t, "syslog-ng not unpacked (scripts/setup.sh does it)")
	}
	withBinaries(t)
	out := filepath.Join(t.TempDir(), "peers.json")
	stdout, _ := ipcbench(t, peers.Kind, "--quick", "--transport", "unixsock,udp", "--producers", "1", "--rate", "20000", "--json", out)
	for _, d := range []string{"logagg", "rsyslog", "syslog-ng", "null-reader", "of null"} {
		if !strings.Contains(stdout, d) {
			t.Errorf("table has no row for %s:\n%s", d, stdout)
		}
	}
	var res struct {
		Kind string
		Rows []peers.Row
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Kind != peers.Kind || len(res.Rows) != 2 {
		t.Fatalf("kind %q with %d cells, want peers with 2", res.Kind, len(res.Rows))
	}
	for _, c := range res.Rows {
		if len(c.Daemons) != 4 || len(c.Configs) != 4 {
			t.Fatalf("%s: %d rows and %d configs, want 4 each (3 daemons and the null reader)", c.Transport, len(c.Daemons), len(c.Configs))
		}
		for _, r := range c.Daemons {
			if r.Sent == 0 || r.DaemonCPUNs <= 0 || r.DaemonRSSKiB <= 0 {
				t.Errorf("%s/%s: sent %d, CPU %v ns/rec, RSS %d KiB", r.Daemon, r.Transport, r.Sent, r.DaemonCPUNs, r.DaemonRSSKiB)
			}
			if c.Transport == "unixsock" && r.Lost != 0 {
				t.Errorf("%s lost %d records over a unix stream socket", r.Daemon, r.Lost)
			}
		}
	}
}
