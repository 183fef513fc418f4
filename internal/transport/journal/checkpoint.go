package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/ipclab/logagg/internal/atomicfile"
)

// ErrBadCheckpoint means a checkpoint file exists but cannot be used. A
// crash never leaves one (saving is atomic), so Open fails and an
// operator decides, rather than the input silently starting over.
var ErrBadCheckpoint = errors.New("journal: bad checkpoint file")

// checkpointFile is the checkpoint on disk: the cursor of the last entry
// written to every output, and the URL it belongs to (for people).
type checkpointFile struct {
	Version int    `json:"version"`
	URL     string `json:"url"`
	Cursor  string `json:"cursor"`
}

// loadCheckpoint reads the cursor saved at path; found is false, with a
// nil error, when there is none yet.
func loadCheckpoint(path string) (cursor string, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("journal: read checkpoint: %w", err)
	}
	var c checkpointFile
	if err := json.Unmarshal(b, &c); err != nil {
		return "", false, fmt.Errorf("%w %s: %w", ErrBadCheckpoint, path, err)
	}
	if c.Version != 1 || !validCursor(c.Cursor) {
		return "", false, fmt.Errorf("%w %s: version %d, cursor %q", ErrBadCheckpoint, path, c.Version, c.Cursor)
	}
	return c.Cursor, true, nil
}

// validCursor reports whether c can be a journal cursor: printable ASCII,
// not empty, of a sane length (journalctl takes it as one argument).
func validCursor(c string) bool {
	if c == "" || len(c) > 1024 {
		return false
	}
	for i := 0; i < len(c); i++ {
		if c[i] < 0x21 || c[i] > 0x7e {
			return false
		}
	}
	return true
}

// saveCheckpoint stores cursor at path atomically and durably (a crash
// leaves the old checkpoint or the new one, never a torn one). Not safe
// for concurrent calls on the same path.
func saveCheckpoint(path, url, cursor string) error {
	b, err := json.Marshal(checkpointFile{Version: 1, URL: url, Cursor: cursor})
	if err != nil {
		return fmt.Errorf("journal: encode checkpoint: %w", err)
	}
	if err := atomicfile.Write(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("journal: checkpoint: %w", err)
	}
	return nil
}
