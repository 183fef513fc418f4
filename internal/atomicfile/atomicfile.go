// Package atomicfile replaces a small file so that a crash at any point
// leaves the old content or the new, never a torn one: the checkpoints of
// the forwarders (segment), the file input and the journal input are all
// saved this way.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write stores b at path: it writes PATH.tmp with perm, fsyncs it, renames
// it over path and fsyncs the directory. Not safe for concurrent calls on
// the same path.
func Write(path string, b []byte, perm os.FileMode) error {
	tmp, err := WriteTemp(path, b, perm)
	if err != nil {
		return err
	}
	return Commit(tmp, path)
}

// WriteTemp is Write's first half: PATH.tmp written and fsynced, its name
// returned. Tests stop here to play a crash before the rename.
func WriteTemp(path string, b []byte, perm os.FileMode) (string, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %s: %w", tmp, err)
	}
	return tmp, nil
}

// Commit is Write's second half: tmp renamed over path, and the directory
// fsynced, since the rename is durable only once the directory entry is.
func Commit(tmp, path string) error {
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("commit %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("fsync the directory of %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync the directory of %s: %w", path, err)
	}
	return nil
}
