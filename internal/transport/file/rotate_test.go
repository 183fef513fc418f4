package file_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/testenv"
)

// want checks that r holds exactly the lines prefix 0..n-1, each once.
func wantEach(t *testing.T, r []rec, prefix string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, x := range r {
		seen[x.Message]++
	}
	for i := range n {
		m := fmt.Sprintf("%s %06d", prefix, i)
		if seen[m] != 1 {
			t.Errorf("%q seen %d times", m, seen[m])
		}
	}
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func copyTruncate(t *testing.T, p, to string) {
	t.Helper()
	src, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	if err := src.Truncate(0); err != nil {
		t.Fatal(err)
	}
}

// TestRenameAndCreate: the old file is read to its end, the new one from
// its start.
func TestRenameAndCreate(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "") // empty: known once it has bytes, and then read from its start
	in := start(t, "file://"+p+"?from=start", state)
	appendFile(t, p, lines("l", 0, 100))
	in.wait(50)
	appendFile(t, p, lines("l", 100, 200))
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, p+".1", lines("l", 200, 300)) // a writer that still has the old file open
	appendFile(t, p, lines("l", 300, 400))
	r := in.wait(400)
	wantEach(t, r, "l", 400)
	for _, x := range r {
		if x.Agg.File != p {
			t.Fatalf("path %q, want %q (the name it was written under)", x.Agg.File, p)
		}
	}
}

// TestCopyTruncate: copytruncate, with the copy inside the glob: the
// truncated file is read from its start, the copy goes on where the
// original was left, and nothing is read twice.
func TestCopyTruncate(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "") // empty: known once it has bytes, and then read from its start
	in := start(t, "file://"+p+"*?from=start", state)
	appendFile(t, p, lines("l", 0, 1000))
	in.wait(1000)
	appendFile(t, p, lines("l", 1000, 2000)) // not read yet, perhaps
	copyTruncate(t, p, p+".1")
	appendFile(t, p, lines("l", 2000, 2100))
	in.wait(2100)
	time.Sleep(500 * time.Millisecond) // nothing more comes
	r := in.records()
	wantEach(t, r, "l", 2100)
	if len(r) != 2100 {
		t.Errorf("%d records, want 2100", len(r))
	}
}

// TestCopyTruncateWithoutCopy: a file truncated in place is read again
// from its start.
func TestTruncatedInPlace(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, "") // empty: known once it has bytes, and then read from its start
	in := start(t, "file://"+p+"?from=start", state)
	appendFile(t, p, lines("a", 0, 100))
	in.wait(100)
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, p, lines("b", 0, 10))
	r := in.wait(110)
	wantEach(t, r[100:], "b", 10)
}

// newFileWithInode deletes p and creates a file at p with content, on
// the inode p had (ext4 and tmpfs hand a freed inode out again at once;
// the test skips where the file system does not).
func newFileWithInode(t *testing.T, p, content string) {
	t.Helper()
	old := ino(t, p)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	var spare []string
	defer func() {
		for _, s := range spare {
			os.Remove(s)
		}
	}()
	for i := range 50 {
		tmp := fmt.Sprintf("%s.tmp%d", p, i)
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if ino(t, tmp) == old {
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
			return
		}
		spare = append(spare, tmp)
	}
	t.Skip("the file system did not reuse the inode")
}

// TestRecycledInode: a file deleted and a new one created on the same
// inode, shorter than the old one's checkpoint, while the input runs and
// while it is stopped: every line of the new file is delivered.
func TestRecycledInode(t *testing.T) {
	for _, stopped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopped=%v", stopped), func(t *testing.T) {
			dir, state := tempDirs(t)
			p := filepath.Join(dir, "app.log")
			appendFile(t, p, lines("old", 0, 1000))
			// max_open=1: reading b.log closes app.log, whose inode can
			// then be handed out again while the input runs.
			raw := "file://" + dir + "/*.log?from=start&scan=50ms&max_open=1"
			in := start(t, raw, state)
			in.wait(1000)
			appendFile(t, filepath.Join(dir, "b.log"), "b\n")
			in.wait(1001)
			if stopped {
				in.stop()
			}
			newFileWithInode(t, p, lines("new", 0, 10))
			if stopped {
				in = start(t, raw, state)
				r := in.wait(10)
				wantEach(t, r, "new", 10)
				return
			}
			r := in.wait(1011)
			wantEach(t, r[1001:], "new", 10)
		})
	}
}

// TestRestartResumes: a stopped input resumes at its checkpoint: nothing
// twice, nothing lost, also for lines appended while it was stopped and
// for a file created meanwhile (read from its start: the input has run
// before, so any file it does not know is new).
func TestRestartResumes(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "a.log")
	appendFile(t, p, lines("a", 0, 100))
	raw := "file://" + dir + "/*.log?from=start"
	in := start(t, raw, state)
	in.wait(100)
	in.stop()
	appendFile(t, p, lines("a", 100, 200))
	appendFile(t, filepath.Join(dir, "b.log"), lines("b", 0, 50))
	in = start(t, raw, state)
	in.wait(150)
	time.Sleep(300 * time.Millisecond)
	r := in.records()
	if len(r) != 150 {
		t.Fatalf("%d records after the restart, want 150: %s", len(r), describe(r))
	}
	wantEach(t, r, "b", 50)
	var as []rec
	for _, x := range r {
		if strings.HasPrefix(x.Message, "a ") {
			as = append(as, x)
		}
	}
	for i, x := range as {
		if want := fmt.Sprintf("a %06d", 100+i); x.Message != want {
			t.Fatalf("record %d %q, want %q", i, x.Message, want)
		}
	}
}

// TestDeletedWhileRead: a file deleted with lines not read yet is read to
// its end through the open descriptor, then closed (rotate_wait later),
// so its space is freed.
func TestDeletedWhileRead(t *testing.T) {
	dir, state := tempDirs(t)
	p := filepath.Join(dir, "app.log")
	appendFile(t, p, lines("l", 0, 10))
	in := start(t, "file://"+dir+"/*.log?from=start&rotate_wait=100ms&scan=50ms", state)
	in.wait(10)
	appendFile(t, p, lines("l", 10, 20000))
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	r := in.wait(20000)
	wantEach(t, r, "l", 20000)
	testenv.Eventually(t, 10*time.Second, "the deleted file closed", func() bool {
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, e := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l == p+" (deleted)" {
				return false
			}
		}
		return gauge(in, "input_files") == 0
	})
}
