package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheckpointRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "agg.jsonl")
	path := CheckpointPath(out, "kafka")
	if path != out+".kafka.checkpoint" || CheckpointPath(out, "") != out+".checkpoint" {
		t.Fatalf("CheckpointPath = %q", path)
	}
	if _, found, err := LoadCheckpoint(path); found || err != nil {
		t.Fatalf("Load of missing = %v, %v", found, err)
	}
	for _, p := range []Position{{1, 0}, {7, 12345}, {1 << 40, 1 << 50}} {
		if err := SaveCheckpoint(path, p); err != nil {
			t.Fatal(err)
		}
		got, found, err := LoadCheckpoint(path)
		if err != nil || !found || got != p {
			t.Fatalf("Load = %v %v %v, want %v", got, found, err, p)
		}
	}
	// A checkpoint next to the output is never mistaken for a segment.
	if seqs, err := ListRotated(out); err != nil || len(seqs) != 0 {
		t.Fatalf("ListRotated = %v, %v", seqs, err)
	}
	if err := SaveCheckpoint(path, Position{}); err == nil {
		t.Fatal("saved seq 0")
	}
}

// TestCheckpointCrashBeforeRename simulates a crash after the new
// checkpoint's temp file was written but before it was renamed: the old
// checkpoint must still load, and the next save must succeed over the
// leftover temp file.
func TestCheckpointCrashBeforeRename(t *testing.T) {
	path := CheckpointPath(filepath.Join(t.TempDir(), "agg.jsonl"), "")
	old := Position{3, 300}
	if err := SaveCheckpoint(path, old); err != nil {
		t.Fatal(err)
	}
	tmp, err := writeCheckpointTemp(path, Position{4, 400})
	if err != nil {
		t.Fatal(err)
	}
	// and a torn temp file, as a crash mid-write would leave
	if err := os.WriteFile(tmp, []byte(`{"version":1,"se`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, found, err := LoadCheckpoint(path)
	if err != nil || !found || got != old {
		t.Fatalf("after crash Load = %v %v %v, want %v", got, found, err, old)
	}
	next := Position{5, 500}
	if err := SaveCheckpoint(path, next); err != nil {
		t.Fatal(err)
	}
	if got, _, err := LoadCheckpoint(path); err != nil || got != next {
		t.Fatalf("Load = %v %v, want %v", got, err, next)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left behind: %v", err)
	}
}

func TestCheckpointCorruptIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp")
	for _, body := range []string{"", "garbage", `{"version":2,"seq":1,"offset":0}`, `{"version":1,"seq":0,"offset":0}`, `{"version":1,"seq":1,"offset":-5}`} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, found, err := LoadCheckpoint(path); !errors.Is(err, ErrBadCheckpoint) || found {
			t.Errorf("Load(%q) = %v, %v; want ErrBadCheckpoint", body, found, err)
		}
	}
}
