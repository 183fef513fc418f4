package file_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestFromEndThenAppend: a file seen the first time is read from its end
// by default; what is appended arrives, with the file's path.
func TestFromEndThenAppend(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, lines("old", 0, 3))
	in := start(t, "file://"+p, state)
	testenv.Eventually(t, 10*time.Second, "the file watched", func() bool { return gauge(in, "input_files") == 1 })
	appendFile(t, p, lines("new", 0, 3))
	r := in.wait(3)
	if got := strings.Join(messages(r), "|"); got != "new 000000|new 000001|new 000002" {
		t.Fatalf("got %q", got)
	}
	if r[0].Agg.File != p || r[0].Agg.Transport != "file" || r[0].Agg.Listener != "file://"+p {
		t.Errorf("record %s", r[0].Raw)
	}
}

// TestFromStartGlob: from=start reads what the files hold; a file created
// later is read from its start whatever from says.
func TestFromStartGlob(t *testing.T) {
	dir, state := tempDirs(t)
	appendFile(t, filepath.Join(dir, "a.log"), lines("a", 0, 5))
	appendFile(t, filepath.Join(dir, "skip.txt"), lines("x", 0, 5))
	in := start(t, "file://"+dir+"/*.log?from=start", state)
	in.wait(5)
	appendFile(t, filepath.Join(dir, "b.log"), lines("b", 0, 5))
	r := in.wait(10)
	if len(r) != 10 {
		t.Fatalf("%d records: %s", len(r), describe(r))
	}
	for _, x := range r {
		if strings.HasPrefix(x.Message, "x") {
			t.Errorf("a file outside the glob read: %s", x.Raw)
		}
	}
}

func gauge(in *input, name string) float64 {
	var v float64
	switch name {
	case "input_files":
		v = readGauge(in.m.InputFiles, in.l.URL())
	case "input_lag_bytes":
		v = readGauge(in.m.InputLagBytes, in.l.URL())
	}
	return v
}

var _ = os.Remove
