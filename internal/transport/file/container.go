package file

import (
	"bytes"
	"encoding/json"
	"errors"
)

// containerLine is one line of a container runtime's log file, decoded.
type containerLine struct {
	content []byte // the program's bytes, without the runtime's framing and without the newline
	stream  string // "stdout" or "stderr"
	time    []byte // the runtime's timestamp, as written
	partial bool   // the runtime split a long line: the next line continues this one
}

var errNotContainer = errors.New("not a container runtime's log line")

// decodeCRI decodes one line of the CRI log format (containerd, CRI-O:
// /var/log/pods/…/0.log): "TIMESTAMP STREAM TAGS CONTENT", where TAGS is
// P (a partial line: the runtime cut a long line, the next one continues
// it) or F (full), possibly followed by more tags after ':'. The content
// may be empty ("… stdout F" or "… stdout F "). It does not copy.
func decodeCRI(line []byte) (containerLine, error) {
	var c containerLine
	sp := bytes.IndexByte(line, ' ')
	if sp < 10 || line[4] != '-' || line[0] < '0' || line[0] > '9' { // 2016-10-06T…
		return c, errNotContainer
	}
	c.time, line = line[:sp], line[sp+1:]
	switch {
	case bytes.HasPrefix(line, []byte("stdout ")):
		c.stream, line = "stdout", line[7:]
	case bytes.HasPrefix(line, []byte("stderr ")):
		c.stream, line = "stderr", line[7:]
	default:
		return c, errNotContainer
	}
	tags := line
	if sp := bytes.IndexByte(line, ' '); sp >= 0 {
		tags, c.content = line[:sp], line[sp+1:]
	}
	if len(tags) == 0 || (len(tags) > 1 && tags[1] != ':') {
		return c, errNotContainer
	}
	switch tags[0] {
	case 'P':
		c.partial = true
	case 'F':
	default:
		return c, errNotContainer
	}
	return c, nil
}

// dockerLine is the JSON object of Docker's json-file driver.
type dockerLine struct {
	Log    *string `json:"log"`
	Stream string  `json:"stream"`
	Time   string  `json:"time"`
}

// decodeDocker decodes one line of Docker's json-file driver
// (/var/lib/docker/containers/ID/ID-json.log):
// {"log":"text\n","stream":"stdout","time":"2019-…Z"}. Docker cuts lines
// longer than 16 KiB into several objects: every one but the last has a
// log without the trailing newline, so such a line is partial. The content
// is a copy (unescaped) appended to buf.
func decodeDocker(line, buf []byte) (containerLine, []byte, error) {
	var c containerLine
	if len(line) < 8 || line[0] != '{' {
		return c, buf, errNotContainer
	}
	var d dockerLine
	if err := json.Unmarshal(line, &d); err != nil || d.Log == nil {
		return c, buf, errNotContainer
	}
	switch d.Stream {
	case "stdout", "stderr", "":
	default:
		return c, buf, errNotContainer
	}
	c.stream = d.Stream
	s := *d.Log
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	} else {
		c.partial = true
	}
	start := len(buf)
	buf = append(buf, s...)
	buf = append(buf, d.Time...)
	c.content = buf[start : start+len(s)]
	c.time = buf[start+len(s):]
	return c, buf, nil
}

// detect decides a file's format from its first line.
func detect(line []byte) format {
	if _, err := decodeCRI(line); err == nil {
		return formatCRI
	}
	if bytes.HasPrefix(line, []byte(`{"log":`)) {
		if _, _, err := decodeDocker(line, nil); err == nil {
			return formatDocker
		}
	}
	return formatPlain
}
