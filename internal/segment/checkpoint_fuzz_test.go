package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadCheckpoint: whatever a checkpoint file holds, loading it never
// panics; it is either absent-like, ErrBadCheckpoint, or a position that
// saves and loads back unchanged.
func FuzzLoadCheckpoint(f *testing.F) {
	for _, s := range []string{`{"version":1,"seq":3,"offset":42}`, `{"version":1,"seq":0,"offset":1}`, `{"version":2}`, `{`, ``, `null`, `{"version":1,"seq":1,"offset":-1}`, "{\"version\":1,\"seq\":18446744073709551615,\"offset\":9223372036854775807}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "out.checkpoint")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		pos, found, err := LoadCheckpoint(path)
		if err != nil {
			if !errors.Is(err, ErrBadCheckpoint) {
				t.Fatalf("error %v is not ErrBadCheckpoint", err)
			}
			return
		}
		if !found || pos.Seq == 0 || pos.Offset < 0 {
			t.Fatalf("loaded %+v found=%v from %q", pos, found, b)
		}
		if err := SaveCheckpoint(path, pos); err != nil {
			t.Fatal(err)
		}
		again, found, err := LoadCheckpoint(path)
		if err != nil || !found || again != pos {
			t.Fatalf("saved %+v, loaded back %+v %v %v", pos, again, found, err)
		}
	})
}
