package file

import (
	"bytes"

	"github.com/ipclab/logagg/internal/record"
)

// lineSplitter cuts a file's bytes into lines. Only a newline ends a line
// (unlike the stream framing of sockets, a NUL does not: a file is not a
// syslog connection, and a binary file's NULs must not regroup its text).
// A line longer than max bytes is passed in pieces of at most max bytes,
// every piece but the last flagged truncated, every piece but the first
// continuation, so no byte is lost and memory stays bounded; an
// unterminated last line is left unconsumed until its newline comes or the
// caller forces it out (force). A line's trailing CR (CRLF files) is
// left to the caller (trimCR), which removes it once the line is whole: in
// a container runtime's file a CR before the newline can end a piece of
// the program's line (a progress bar's "\r" that CRI-O/conmon wrote as a
// P line), where it is the program's byte, not a line end. Empty lines
// (and lines of only a CR) are skipped, as the stream framing skips empty
// frames.
type lineSplitter struct {
	max       int  // longest piece (> 0)
	splitting bool // the next bytes continue a line already passed in part
}

// split passes every complete line (and every full piece of an over-long
// line) of p to fn, with the offsets in p where it starts and where the
// next one starts, and returns how many bytes of p it consumed. What is
// left is the start of a line shorter than max that has no newline yet.
func (s *lineSplitter) split(p []byte, fn func(line []byte, fl record.Flags, start, end int)) int {
	i := 0
	for i < len(p) {
		look := p[i:]
		if len(look) > s.max+1 {
			look = look[:s.max+1]
		}
		j := bytes.IndexByte(look, '\n')
		if j < 0 {
			if len(p)-i <= s.max {
				return i // wait for the newline
			}
			fl := record.FlagTruncated
			if s.splitting {
				fl |= record.FlagContinuation
			}
			s.splitting = true
			fn(p[i:i+s.max], fl, i, i+s.max)
			i += s.max
			continue
		}
		line := p[i : i+j]
		var fl record.Flags
		if s.splitting {
			fl = record.FlagContinuation
			s.splitting = false
		}
		if len(line) > 0 && (len(line) > 1 || line[0] != '\r') {
			fn(line, fl, i, i+j+1)
		}
		i += j + 1
	}
	return i
}

// force passes p, the unterminated rest of a file that waited too long,
// as one record flagged partial (and continuation when it continues a
// line passed in part). What follows it, if the line goes on later, is
// flagged continuation.
func (s *lineSplitter) force(p []byte, fn func(line []byte, fl record.Flags, start, end int)) {
	if len(p) == 0 {
		return
	}
	fl := record.FlagPartial
	if s.splitting {
		fl |= record.FlagContinuation
	}
	s.splitting = true
	fn(p, fl, 0, len(p))
}

// trimCR removes the CR of a CRLF line from a whole line.
func trimCR(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		return line[:n-1]
	}
	return line
}
