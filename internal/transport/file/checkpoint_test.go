package file_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/file"
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
