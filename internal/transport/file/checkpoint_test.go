package file_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/file"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

func checkpointOffset(t *testing.T, ck string) int64 {
	b, err := os.ReadFile(ck)
	if err != nil {
		return -1
	}
	var d struct {
		Files []struct {
			Offset int64 `json:"offset"`
		} `json:"files"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("checkpoint %s: %v", b, err)
	}
	if len(d.Files) != 1 {
		return -1
	}
	return d.Files[0].Offset
}

// TestCheckpointFollowsWrites: the checkpoint does not move past records
// that are read but not written (the output is stuck), and moves once
// they are.
func TestCheckpointFollowsWrites(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "")
	raw := "file://" + p + "?from=start&checkpoint_interval=20ms"
	in := start(t, raw, state)
	ck, _ := file.CheckpointPath(state, in.l.URL())
	testenv.Eventually(t, 10*time.Second, "the first checkpoint", func() bool { _, err := os.Stat(ck); return err == nil })
	in.cap.Block()
	appendFile(t, p, lines("l", 0, 1000))
	testenv.Eventually(t, 10*time.Second, "the input blocked on the output", func() bool { return in.cap.Waiting() > 0 })
	time.Sleep(100 * time.Millisecond)
	if off := checkpointOffset(t, ck); off > 0 {
		t.Fatalf("checkpoint at %d while nothing is written", off)
	}
	in.cap.Unblock()
	size := int64(len(lines("l", 0, 1000)))
	testenv.Eventually(t, 10*time.Second, "the checkpoint at the end", func() bool { return checkpointOffset(t, ck) == size })
	in.wait(1000)
}

// TestSecondInstanceRefused: two inputs on one URL and state directory
// would write one checkpoint: the second is refused, naming the holder.
func TestSecondInstanceRefused(t *testing.T) {
	dir, state := tempDirs(t)
	raw := "file://" + dir + "/*.log"
	in := start(t, raw, state)
	_, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(transporttest.NewCapture(), sink.Options{}),
		Opts: transport.DefaultOptions(), StateDir: state})
	if !errors.Is(err, transport.ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second Open: %v; want ErrInUse naming pid %d", err, os.Getpid())
	}
	in.stop()
	l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(transporttest.NewCapture(), sink.Options{}),
		Opts: transport.DefaultOptions(), StateDir: state})
	if err != nil {
		t.Fatalf("Open after the first stopped: %v", err)
	}
	l.Close()
}
