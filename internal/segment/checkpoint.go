package segment

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/ipclab/logagg/internal/atomicfile"
)

// ErrBadCheckpoint means a checkpoint file exists but cannot be parsed.
// It is never the result of a crash (saving is atomic), so the caller should
// stop and let an operator decide rather than silently start over.
var ErrBadCheckpoint = errors.New("segment: bad checkpoint file")

// CheckpointPath is where a forwarder named name keeps its checkpoint next
// to output: "<output>.<name>.checkpoint", or "<output>.checkpoint" when
// name is empty. ListRotated never mistakes it for a segment.
func CheckpointPath(output, name string) string {
	if name == "" {
		return output + ".checkpoint"
	}
	return output + "." + name + ".checkpoint"
}

type checkpointFile struct {
	Version int    `json:"version"`
	Seq     uint64 `json:"seq"`
	Offset  int64  `json:"offset"`
}

// LoadCheckpoint reads the checkpoint at path. found is false (with a nil
// error) when there is none yet, meaning "start from the beginning".
func LoadCheckpoint(path string) (pos Position, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, fmt.Errorf("segment: read checkpoint: %w", err)
	}
	var c checkpointFile
	if err := json.Unmarshal(b, &c); err != nil {
		return Position{}, false, fmt.Errorf("%w %s: %w", ErrBadCheckpoint, path, err)
	}
	if c.Version != 1 || c.Seq == 0 || c.Offset < 0 {
		return Position{}, false, fmt.Errorf("%w %s: version %d seq %d offset %d", ErrBadCheckpoint, path, c.Version, c.Seq, c.Offset)
	}
	return Position{Seq: c.Seq, Offset: c.Offset}, true, nil
}

// SaveCheckpoint stores pos at path atomically and durably: it writes
// "<path>.tmp", fsyncs it, renames it over path and fsyncs the directory.
// A crash at any point leaves either the old or the new checkpoint, never a
// torn one. Not safe for concurrent calls on the same path.
func SaveCheckpoint(path string, pos Position) error {
	tmp, err := writeCheckpointTemp(path, pos)
	if err != nil {
		return err
	}
	return commitCheckpoint(tmp, path)
}

// writeCheckpointTemp is the first half of SaveCheckpoint (tests stop here
// to simulate a crash before the rename).
func writeCheckpointTemp(path string, pos Position) (string, error) {
	if pos.Seq == 0 {
		return "", fmt.Errorf("segment: checkpoint of position %v: seq 0 is not a segment", pos)
	}
	b, err := json.Marshal(checkpointFile{Version: 1, Seq: pos.Seq, Offset: pos.Offset})
	if err != nil {
		return "", fmt.Errorf("segment: encode checkpoint: %w", err)
	}
	tmp, err := atomicfile.WriteTemp(path, append(b, '\n'), 0o644)
	if err != nil {
		return "", fmt.Errorf("segment: checkpoint: %w", err)
	}
	return tmp, nil
}

func commitCheckpoint(tmp, path string) error {
	if err := atomicfile.Commit(tmp, path); err != nil {
		return fmt.Errorf("segment: checkpoint: %w", err)
	}
	return nil
}
