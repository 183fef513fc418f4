package file_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport/file"
)

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func threads(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// TestTenThousandFiles: 10,000 files are watched and read with at most
// max_open descriptors and no thread per file; a line appended to any of
// them later arrives.
func TestTenThousandFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 files")
	}
	dir, state := tempDirs(t)
	const n = 10000
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.log", i)), []byte(fmt.Sprintf("first %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fds0, thr0 := openFDs(t), threads(t)
	in := start(t, "file://"+dir+"/*.log?from=start&max_open=64", state)
	maxFDs, maxThr := 0, 0
	sample := func() {
		maxFDs, maxThr = max(maxFDs, openFDs(t)), max(maxThr, threads(t))
	}
	testenv.Poll(t, 120*time.Second, "a record of every file", func() (int, bool) {
		sample()
		return in.cap.Len(), in.cap.Len() >= n
	})
	testenv.Eventually(t, 10*time.Second, "every file watched", func() bool { return gauge(in, "input_files") == n })
	for _, i := range []int{0, 4321, n - 1} {
		appendFile(t, filepath.Join(dir, fmt.Sprintf("f%05d.log", i)), fmt.Sprintf("later %d\n", i))
	}
	testenv.Poll(t, 30*time.Second, "the lines appended later", func() (int, bool) {
		sample()
		return in.cap.Len(), in.cap.Len() >= n+3
	})
	seen := map[string]bool{}
	for _, r := range in.records() {
		seen[r.Message] = true
	}
	for i := range n {
		if !seen[fmt.Sprintf("first %d", i)] {
			t.Fatalf("line of file %d missing", i)
		}
	}
	t.Logf("fds: %d before, at most %d while watching %d files (max_open 64); threads: %d before, at most %d",
		fds0, maxFDs, n, thr0, maxThr)
	// max_open, the inotify fd, the checkpoint being saved, the runtime's
	// own (epoll, its pipe) and the test's /proc reads.
	if maxFDs > fds0+64+8 {
		t.Errorf("%d fds open, more than %d + max_open 64 + 8", maxFDs, fds0)
	}
	if maxThr > thr0+8 {
		t.Errorf("%d threads, %d before: threads grow with files", maxThr, thr0)
	}
	in.stop()
	ck, _ := file.CheckpointPath(state, in.l.URL())
	st, err := os.Stat(ck)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of %d files: %d bytes", n, st.Size())
}
