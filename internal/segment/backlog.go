package segment

import (
	"bytes"
	"errors"
	"io"
	"os"
)

// Backlog measures the log after pos (what a forwarder has not shipped):
// its bytes (the rest of segment pos.Seq and every later one, the active
// file included; everything when nothing was acknowledged yet, pos.Seq 0)
// and whether a complete line is among them.
func Backlog(output string, pos Position) (size int64, lines bool, err error) {
	seqs, err := ListRotated(output)
	if err != nil {
		return 0, false, err
	}
	active := uint64(1)
	if n := len(seqs); n > 0 {
		active = seqs[n-1] + 1
	}
	after := func(seq uint64) int64 { // where pos puts the start of segment seq
		if seq == pos.Seq {
			return pos.Offset
		}
		return 0
	}
	for _, s := range seqs {
		if s < pos.Seq {
			continue
		}
		if st, err := os.Stat(RotatedName(output, s)); err == nil {
			if n := st.Size() - after(s); n > 0 {
				size += n
				lines = true // rotation happens at line ends
			}
		}
	}
	if active < pos.Seq {
		return 0, false, errors.New("the acknowledged position is past the active segment")
	}
	off := after(active)
	st, err := os.Stat(output)
	if errors.Is(err, os.ErrNotExist) {
		return size, lines, nil // between a rotation and the next write
	}
	if err != nil {
		return 0, false, err
	}
	if n := st.Size() - off; n > 0 {
		size += n
		if !lines {
			lines, err = newlineAfter(output, off)
		}
	}
	return size, lines, err
}

// newlineAfter reports whether the file holds a '\n' at or after off.
func newlineAfter(path string, off int64) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(buf, off)
		if bytes.IndexByte(buf[:n], '\n') >= 0 {
			return true, nil
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || n == 0 {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}
