package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseFsync(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want FsyncPolicy
		bad  bool
	}{
		{in: "batch", want: FsyncPolicy{Mode: FsyncBatch}},
		{in: "never", want: FsyncPolicy{Mode: FsyncNever}},
		{in: "interval=250ms", want: FsyncPolicy{Mode: FsyncInterval, Interval: 250 * time.Millisecond}},
		{in: "interval=0s", bad: true},
		{in: "interval=x", bad: true},
		{in: "always", bad: true},
	} {
		got, err := ParseFsync(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("ParseFsync(%q) err = %v, want bad=%v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad && got != tc.want {
			t.Errorf("ParseFsync(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if !tc.bad && got.String() != tc.in {
			t.Errorf("String() = %q, want %q", got.String(), tc.in)
		}
	}
}

type vetoAll struct{ asked []uint64 }

func (v *vetoAll) MayDelete(seq uint64) bool { v.asked = append(v.asked, seq); return false }

func TestRotationRetentionAndRetainer(t *testing.T) {
	for _, veto := range []bool{false, true} {
		t.Run(fmt.Sprintf("veto=%v", veto), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			o := Options{Path: out, MaxSize: 100, MaxFiles: 2, Fsync: FsyncPolicy{Mode: FsyncBatch}}
			var v *vetoAll
			if veto {
				v = &vetoAll{}
				o.Retainer = v
			}
			l, err := Open(o, nil)
			if err != nil {
				t.Fatal(err)
			}
			line := []byte(strings.Repeat("x", 39) + "\n") // 40 bytes: two fit in 100, three do not
			var all bytes.Buffer
			for i := 0; i < 12; i++ {
				if _, err := l.WriteBuffers([][]byte{line}); err != nil {
					t.Fatal(err)
				}
				all.Write(line)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			seqs, err := ListRotated(out)
			if err != nil {
				t.Fatal(err)
			}
			// 12 lines, 2 per segment: segments 1..5 rotated, 6 active.
			if !veto {
				if fmt.Sprint(seqs) != "[4 5]" {
					t.Fatalf("rotated segments %v, want [4 5] (MaxFiles=2)", seqs)
				}
			} else {
				if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
					t.Fatalf("with a retainer vetoing, rotated segments %v, want all kept", seqs)
				}
				if len(v.asked) == 0 {
					t.Fatal("retainer never asked")
				}
				// everything is still on disk, in order
				var got bytes.Buffer
				for _, s := range seqs {
					b, _ := os.ReadFile(RotatedName(out, s))
					got.Write(b)
				}
				b, _ := os.ReadFile(out)
				got.Write(b)
				if !bytes.Equal(got.Bytes(), all.Bytes()) {
					t.Fatal("segments do not concatenate to what was written")
				}
			}
			if s, _ := ActiveSeq(out); s != 6 {
				t.Fatalf("ActiveSeq = %d, want 6", s)
			}
		})
	}
}

func TestReopenAfterExternalMove(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	l, err := Open(Options{Path: out, Fsync: FsyncPolicy{Mode: FsyncNever}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.WriteBuffers([][]byte{[]byte("a\n")})
	if err := os.Rename(out, out+".moved"); err != nil {
		t.Fatal(err)
	}
	l.WriteBuffers([][]byte{[]byte("b\n")}) // still goes to the moved file
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	l.WriteBuffers([][]byte{[]byte("c\n")})
	moved, _ := os.ReadFile(out + ".moved")
	fresh, _ := os.ReadFile(out)
	if string(moved) != "a\nb\n" || string(fresh) != "c\n" {
		t.Fatalf("moved=%q fresh=%q", moved, fresh)
	}
}

func TestWritevGathersAndClosedLogErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	l, err := Open(Options{Path: out, Fsync: FsyncPolicy{Mode: FsyncInterval, Interval: time.Hour}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bufs := make([][]byte, 3000) // more than IOV_MAX, so writevAll must loop
	var want bytes.Buffer
	for i := range bufs {
		bufs[i] = []byte(fmt.Sprintf("%d\n", i))
		want.Write(bufs[i])
	}
	n, err := l.WriteBuffers(bufs)
	if err != nil || n != int64(want.Len()) {
		t.Fatalf("WriteBuffers = %d, %v; want %d", n, err, want.Len())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(out)
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("content mismatch")
	}
	if _, err := l.WriteBuffers(bufs[:1]); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
}

type allowBelow struct{ seq uint64 }

func (a *allowBelow) MayDelete(seq uint64) bool { return seq < a.seq }

func TestMaxDiskDeletesOnlyShippedSegmentsThenRefuses(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	ret := &allowBelow{seq: 0} // nothing shipped yet
	l, err := Open(Options{Path: out, MaxSize: 100, MaxDisk: 250, Retainer: ret, Fsync: FsyncPolicy{Mode: FsyncNever}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	line := []byte(strings.Repeat("y", 49) + "\n") // 50 bytes
	n := 0
	for ; n < 100; n++ {
		if _, err := l.WriteBuffers([][]byte{line}); err != nil {
			if !errors.Is(err, ErrDiskCap) {
				t.Fatalf("write %d: %v", n, err)
			}
			break
		}
	}
	if n != 5 { // 250 bytes fit, the sixth line does not
		t.Fatalf("wrote %d lines before the cap, want 5", n)
	}
	ret.seq = 2 // the forwarder shipped segment 1
	if _, err := l.WriteBuffers([][]byte{line}); err != nil {
		t.Fatalf("after shipping, write still refused: %v", err)
	}
	if _, err := os.Stat(RotatedName(out, 1)); !os.IsNotExist(err) {
		t.Fatal("shipped segment 1 was not deleted to make room")
	}
	if _, err := os.Stat(RotatedName(out, 2)); err != nil {
		t.Fatal("unshipped segment 2 was deleted")
	}
}

func TestTornTailIsCutOnOpen(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	os.WriteFile(out, []byte("{\"a\":1}\n{\"b\":2}\n{\"c\":"), 0o644)
	l, err := Open(Options{Path: out, Fsync: FsyncPolicy{Mode: FsyncNever}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.WriteBuffers([][]byte{[]byte("{\"d\":4}\n")})
	l.Close()
	if got, _ := os.ReadFile(out); string(got) != "{\"a\":1}\n{\"b\":2}\n{\"d\":4}\n" {
		t.Fatalf("got %q", got)
	}
}

// An output that is not a regular file (/dev/null for benchmarks) takes
// writes under any fsync and size policy: fsync would fail with EINVAL on
// it and rotation would rename a device node.
func TestSpecialFileOutputIsNeitherSyncedNorRotated(t *testing.T) {
	l, err := Open(Options{Path: os.DevNull, MaxSize: 10, MaxDisk: 25, Fsync: FsyncPolicy{Mode: FsyncBatch}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := l.WriteBuffers([][]byte{[]byte("0123456789abcdef\n")}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("%s is no longer a character device: %v %v", os.DevNull, fi, err)
	}
	if rotated, _ := filepath.Glob(os.DevNull + ".*"); len(rotated) != 0 {
		t.Fatalf("rotated segments of %s: %v", os.DevNull, rotated)
	}
}

// A write that fails midway (here the file size limit, as a full disk
// would) leaves only whole lines: the file is cut back to the last complete
// line and WriteBuffers reports those bytes, so a retry starts at a record
// boundary and the file never ends torn.
func TestFailedWriteLeavesWholeLines(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.jsonl")
			l, err := Open(Options{Path: out, Fsync: FsyncPolicy{Mode: FsyncNever}, DirectIO: direct}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			line := []byte(strings.Repeat("x", 999) + "\n")
			var bufs [][]byte
			for range 200 { // 200 KB: past the direct-write threshold
				bufs = append(bufs, line)
			}
			// A limit in the middle of line 151: the kernel writes up to it.
			const limit = 150*1000 + 500
			var old unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
				t.Fatal(err)
			}
			if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
				t.Fatal(err)
			}
			n, werr := l.WriteBuffers(bufs)
			unix.Setrlimit(unix.RLIMIT_FSIZE, &old)
			if werr == nil {
				t.Fatal("write past the file size limit succeeded")
			}
			if n%1000 != 0 || n > limit {
				t.Fatalf("WriteBuffers reported %d bytes: not whole lines within the limit", n)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(b)) != n || (len(b) > 0 && b[len(b)-1] != '\n') {
				t.Fatalf("file holds %d bytes (reported %d), last byte %q: torn", len(b), n, b[len(b)-1:])
			}
			// The retry of the rest appends whole lines after it.
			if _, err := l.WriteBuffers(bufs[n/1000:]); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(out); len(b) != 200*1000 || bytes.Count(b, []byte("\n")) != 200 {
				t.Fatalf("after the retry: %d bytes, %d lines; want 200 whole lines", len(b), bytes.Count(b, []byte("\n")))
			}
		})
	}
}

// A rotation that finds the active file moved away by someone else (a
// logrotate without SIGHUP), or replaced by another file, renames nothing
// and fails nothing: the moved file keeps what was written to it, the
// other program's new file keeps its name, and writing goes on at the path.
func TestRotateAfterExternalMove(t *testing.T) {
	for _, replaced := range []bool{false, true} {
		t.Run(fmt.Sprintf("replaced=%v", replaced), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			l, err := Open(Options{Path: out, MaxSize: 4, Fsync: FsyncPolicy{Mode: FsyncNever}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if _, err := l.WriteBuffers([][]byte{[]byte("a\n")}); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(out, out+".moved"); err != nil {
				t.Fatal(err)
			}
			want := ""
			if replaced {
				want = "theirs\n"
				if err := os.WriteFile(out, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// "b\n" goes to the moved file; "c\n" does not fit: rotation.
			for _, rec := range []string{"b\n", "c\n"} {
				if _, err := l.WriteBuffers([][]byte{[]byte(rec)}); err != nil {
					t.Fatalf("write %q: %v", rec, err)
				}
			}
			moved, _ := os.ReadFile(out + ".moved")
			active, _ := os.ReadFile(out)
			if string(moved) != "a\nb\n" || string(active) != want+"c\n" {
				t.Fatalf("moved=%q active=%q", moved, active)
			}
			if seqs, _ := ListRotated(out); len(seqs) != 0 {
				t.Fatalf("rotated segments %v: another file was renamed as ours", seqs)
			}
		})
	}
}

func TestReconfigureMovesOrRollsBack(t *testing.T) {
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.jsonl"), filepath.Join(dir, "sub", "two.jsonl")
	l, err := Open(Options{Path: one}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	write := func(s string) {
		t.Helper()
		if _, err := l.WriteBuffers([][]byte{[]byte(s + "\n")}); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	// A path that cannot be opened (its directory is a regular file):
	// refused, and the log keeps writing where it was.
	if err := l.Reconfigure(Options{Path: filepath.Join(one, "x.jsonl")}); err == nil {
		t.Fatal("Reconfigure to a path under a regular file succeeded")
	}
	write("b")
	if err := l.Reconfigure(Options{Path: two, MaxFiles: 2}); err != nil {
		t.Fatal(err)
	}
	write("c")
	if b, _ := os.ReadFile(one); string(b) != "a\nb\n" {
		t.Errorf("%s = %q, want a and b", one, b)
	}
	if b, _ := os.ReadFile(two); string(b) != "c\n" {
		t.Errorf("%s = %q, want c", two, b)
	}
	if l.Path() != two {
		t.Errorf("Path() = %s, want %s", l.Path(), two)
	}
}
