package file

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"os"
	"strconv"

	"github.com/ipclab/logagg/internal/atomicfile"
)

// fpBytes is how much of a file's start its fingerprint covers. A file
// shorter than that is fingerprinted as far as it goes, and the
// fingerprint is extended as it grows (fpLen says how far it reaches).
const fpBytes = 256

var crcTable = crc64.MakeTable(crc64.ECMA)

func fingerprint(b []byte) uint64 { return crc64.Checksum(b, crcTable) }

// ErrBadCheckpoint means the checkpoint file exists and cannot be read.
// Saving is atomic, so a crash never leaves one: the input refuses to
// start and leaves the decision (remove it, or restore it) to an operator.
var ErrBadCheckpoint = errors.New("file: bad checkpoint file")

// checkpointVersion is the version of the checkpoint's format.
const checkpointVersion = 1

// ckFile is one file's entry in the checkpoint: who it is (device, inode,
// fingerprint of its first fpLen bytes) and how far its records are
// written (offset). Orphan marks content whose inode no longer holds it
// (a file truncated by copytruncate, whose copy may still turn up).
type ckFile struct {
	Path   string `json:"path"`
	Dev    uint64 `json:"dev"`
	Ino    uint64 `json:"ino"`
	FP     string `json:"fp"` // hex
	FPLen  int    `json:"fp_len"`
	Offset int64  `json:"offset"`
	Orphan bool   `json:"orphan,omitempty"`
}

type ckDoc struct {
	Version int      `json:"version"`
	Files   []ckFile `json:"files"`
}

// loadCheckpoint reads the checkpoint at path; found is false (nil error)
// when there is none.
func loadCheckpoint(path string) (files []ckFile, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("file: read checkpoint: %w", err)
	}
	files, err = parseCheckpoint(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w %s: %w", ErrBadCheckpoint, path, err)
	}
	return files, true, nil
}

func parseCheckpoint(b []byte) ([]ckFile, error) {
	var d ckDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	if d.Version != checkpointVersion {
		return nil, fmt.Errorf("version %d, want %d", d.Version, checkpointVersion)
	}
	for _, f := range d.Files {
		if _, err := strconv.ParseUint(f.FP, 16, 64); err != nil || f.FPLen < 0 || f.FPLen > fpBytes || f.Offset < 0 {
			return nil, fmt.Errorf("entry %q: fp %q fp_len %d offset %d", f.Path, f.FP, f.FPLen, f.Offset)
		}
	}
	return d.Files, nil
}

func encodeCheckpoint(files []ckFile) []byte {
	b, _ := json.Marshal(ckDoc{Version: checkpointVersion, Files: files})
	return append(b, '\n')
}

// saveCheckpoint stores b at path atomically and durably (a crash leaves
// the old checkpoint or the new one).
func saveCheckpoint(path string, b []byte) error {
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("file: checkpoint: %w", err)
	}
	return nil
}
