package segment

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rdFakeWriter plays the writer's part of the naming contract with plain
// file operations: append to the active file, rename it on rotation.
type rdFakeWriter struct {
	t      testing.TB
	output string
	seq    uint64
	f      *os.File
}

func newRdFakeWriter(t testing.TB, output string) *rdFakeWriter {
	w := &rdFakeWriter{t: t, output: output, seq: 1}
	w.create()
	return w
}

func (w *rdFakeWriter) create() {
	f, err := os.OpenFile(w.output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		w.t.Fatal(err)
	}
	w.f = f
}

func (w *rdFakeWriter) write(s string) {
	if _, err := w.f.WriteString(s); err != nil {
		w.t.Error(err)
	}
}

func (w *rdFakeWriter) rotate() {
	if err := os.Rename(w.output, RotatedName(w.output, w.seq)); err != nil {
		w.t.Error(err)
	}
	w.f.Close()
	w.seq++
	w.create()
}

func rdNext(t *testing.T, r *Reader, timeout time.Duration) (string, Position, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	line, pos, err := r.Next(ctx)
	return string(line), pos, err
}

func rdMust(t *testing.T, r *Reader, wantLine string, wantPos Position) {
	t.Helper()
	line, pos, err := rdNext(t, r, 10*time.Second)
	if err != nil {
		t.Fatalf("Next: %v (want %q)", err, wantLine)
	}
	if line != wantLine || pos != wantPos {
		t.Fatalf("Next = %q at %v, want %q at %v", line, pos, wantLine, wantPos)
	}
}

func newTestReader(t *testing.T, cfg ReaderConfig) *Reader {
	t.Helper()
	if cfg.Poll == 0 {
		cfg.Poll = 2 * time.Millisecond
	}
	r, err := NewReader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestReaderFollowsRotation(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	w := newRdFakeWriter(t, out)
	var entered []Position
	r := newTestReader(t, ReaderConfig{Output: out, OnSegment: func(p Position) { entered = append(entered, p) }})

	w.write("a1\na2\n")
	rdMust(t, r, "a1\n", Position{1, 3})
	rdMust(t, r, "a2\n", Position{1, 6})

	// At EOF of the active segment: the reader waits...
	if _, _, err := rdNext(t, r, 30*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next at EOF = %v, want deadline exceeded", err)
	}
	// ...and a line written just before the rename is still read from the
	// renamed file, before the new active segment.
	w.write("a3\n")
	w.rotate()
	w.write("b1\n")
	rdMust(t, r, "a3\n", Position{1, 9})
	rdMust(t, r, "b1\n", Position{2, 3})
	if got := r.Position(); got != (Position{2, 3}) {
		t.Fatalf("Position = %v", got)
	}
	// Two rotations while the reader is not looking.
	w.rotate()
	w.write("c1\n")
	w.rotate()
	w.write("d1\n")
	rdMust(t, r, "c1\n", Position{3, 3})
	rdMust(t, r, "d1\n", Position{4, 3})
	if want := []Position{{1, 0}, {2, 0}, {3, 0}, {4, 0}}; fmt.Sprint(entered) != fmt.Sprint(want) {
		t.Fatalf("OnSegment saw %v, want %v", entered, want)
	}
	if s := r.Stats(); s != (ReaderStats{}) {
		t.Fatalf("stats %+v, want none skipped", s)
	}
}

func TestReaderPartialLineWaitsForNewline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	w := newRdFakeWriter(t, out)
	r := newTestReader(t, ReaderConfig{Output: out})
	w.write("first\nhalf-")
	rdMust(t, r, "first\n", Position{1, 6})
	if line, _, err := rdNext(t, r, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("incomplete line returned: %q, %v", line, err)
	}
	w.write("done\n")
	rdMust(t, r, "half-done\n", Position{1, 16})
}

func TestReaderStartPositions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	w := newRdFakeWriter(t, out)
	w.write("s1a\ns1b\n")
	w.rotate()
	w.write("s2a\ns2b\n")
	w.rotate()
	w.write("s3a\n")

	// The zero position starts at the oldest segment.
	r := newTestReader(t, ReaderConfig{Output: out})
	rdMust(t, r, "s1a\n", Position{1, 4})

	// A checkpoint in the middle of a rotated segment.
	r2 := newTestReader(t, ReaderConfig{Output: out, Start: Position{2, 4}})
	rdMust(t, r2, "s2b\n", Position{2, 8})
	rdMust(t, r2, "s3a\n", Position{3, 4})

	// A checkpoint at the very end of a rotated segment.
	r3 := newTestReader(t, ReaderConfig{Output: out, Start: Position{1, 8}})
	rdMust(t, r3, "s2a\n", Position{2, 4})

	// In the active segment.
	w.write("s3b\n")
	r4 := newTestReader(t, ReaderConfig{Output: out, Start: Position{3, 4}})
	rdMust(t, r4, "s3b\n", Position{3, 8})

	// Beyond the end of a segment: the log was truncated behind us.
	r5 := newTestReader(t, ReaderConfig{Output: out, Start: Position{2, 100}})
	if _, _, err := rdNext(t, r5, time.Second); !errors.Is(err, ErrBadPosition) {
		t.Fatalf("Next from beyond the end = %v, want ErrBadPosition", err)
	}
}

func TestReaderWaitsForOutputToAppear(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	r := newTestReader(t, ReaderConfig{Output: out})
	if _, _, err := rdNext(t, r, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next without output = %v", err)
	}
	w := newRdFakeWriter(t, out)
	w.write("x\n")
	rdMust(t, r, "x\n", Position{1, 2})
}

func TestReaderCountsWhatItSkips(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	w := newRdFakeWriter(t, out)
	w.write("s1\ntorn") // writer "crashed" mid-line, then rotated
	w.rotate()
	w.write("s2\n")
	w.rotate()
	w.write(strings.Repeat("x", 100) + "\nafter-long\n")
	w.rotate()
	w.write("s4\n")
	if err := os.Remove(RotatedName(out, 2)); err != nil {
		t.Fatal(err)
	}
	r := newTestReader(t, ReaderConfig{Output: out, MaxLine: 16})
	rdMust(t, r, "s1\n", Position{1, 3})
	rdMust(t, r, "after-long\n", Position{3, 112})
	rdMust(t, r, "s4\n", Position{4, 3})
	want := ReaderStats{MissingSegments: 1, TornTails: 1, TornBytes: 4, OversizeLines: 1}
	if s := r.Stats(); s != want {
		t.Fatalf("stats %+v, want %+v", s, want)
	}
}

// TestReaderConcurrentWriter races a writer that splits lines across writes
// and rotates often against a reader, and checks every line arrives once,
// in order, with positions that match the bytes.
func TestReaderConcurrentWriter(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	const n = 20000
	w := newRdFakeWriter(t, out)
	r := newTestReader(t, ReaderConfig{Output: out, Poll: time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			line := fmt.Sprintf("{\"i\":%d}\n", i)
			h := len(line) / 2
			w.write(line[:h])
			w.write(line[h:])
			if i%997 == 996 {
				w.rotate()
			}
			if i%50 == 0 {
				r.Wake()
			}
		}
	}()
	var pos Position
	seq := uint64(1)
	for i := 0; i < n; i++ {
		line, p, err := rdNext(t, r, 20*time.Second)
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := fmt.Sprintf("{\"i\":%d}\n", i); line != want {
			t.Fatalf("line %d = %q, want %q", i, line, want)
		}
		if p.Seq != pos.Seq {
			if p.Seq != seq {
				t.Fatalf("line %d in segment %d, want %d", i, p.Seq, seq)
			}
			pos = Position{Seq: p.Seq}
		}
		if p.Offset != pos.Offset+int64(len(line)) {
			t.Fatalf("line %d ends at %v, want offset %d", i, p, pos.Offset+int64(len(line)))
		}
		pos = p
		if i%997 == 996 {
			seq++
		}
	}
	<-done
	if s := r.Stats(); s != (ReaderStats{}) {
		t.Fatalf("stats %+v", s)
	}
}

func TestNewReaderValidates(t *testing.T) {
	if _, err := NewReader(ReaderConfig{}); err == nil {
		t.Fatal("empty Output accepted")
	}
	if _, err := NewReader(ReaderConfig{Output: "x", Start: Position{1, -1}}); err == nil {
		t.Fatal("negative offset accepted")
	}
	r, err := NewReader(ReaderConfig{Output: "x"})
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, _, err := r.Next(context.Background()); !errors.Is(err, ErrReaderClosed) {
		t.Fatalf("Next after Close = %v", err)
	}
}
